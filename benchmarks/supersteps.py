"""LangGraph's own CPU per superstep, in isolation (issue 32): a chain of N no-op async nodes, each item a thread of its
own, ``concurrency`` threads in flight, without a checkpointer and with SQLite checkpoints written at the end
(``durability="exit"``, what ``jurygraph eval`` does with its LLM cache on) or at every step (``"async"``,
``--keep-checkpoints all``). Prints the median CPU per item of ``--repeats`` runs and the slope per node.

    python benchmarks/supersteps.py --items 200 --concurrency 50 --nodes 1,3,5,9
"""

from __future__ import annotations

import argparse
import asyncio
import operator
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph


class Chain(TypedDict, total=False):
    step: int
    log: Annotated[list[int], operator.add]


def chain(nodes: int) -> StateGraph:
    builder = StateGraph(Chain)
    previous = START
    for index in range(nodes):
        async def node(state: Chain, index: int = index) -> dict[str, Any]:
            return {"step": index, "log": [index]}

        builder.add_node(f"n{index}", node)
        builder.add_edge(previous, f"n{index}")
        previous = f"n{index}"
    builder.add_edge(previous, END)
    return builder


async def cpu_per_item(nodes: int, durability: str | None, items: int, concurrency: int) -> float:
    """Milliseconds of process CPU per item (thread) of a chain of ``nodes`` no-op nodes."""
    async def timed(saver: Any) -> float:
        app = chain(nodes).compile(checkpointer=saver)
        gate = asyncio.Semaphore(concurrency)

        async def one(k: int) -> None:
            async with gate:
                await app.ainvoke({"step": 0}, {"configurable": {"thread_id": f"t{k}"}},  # type: ignore[call-overload]
                                  durability=durability)

        started = time.process_time()
        await asyncio.gather(*(one(k) for k in range(items)))
        return 1000 * (time.process_time() - started) / items

    if durability is None:
        return await timed(None)
    with tempfile.TemporaryDirectory() as folder:
        async with AsyncSqliteSaver.from_conn_string(str(Path(folder) / "checkpoints.sqlite")) as saver:
            return await timed(saver)


async def measure(nodes: list[int], items: int, concurrency: int, repeats: int) -> None:
    modes = {"no checkpointer": None, "sqlite, exit": "exit", "sqlite, async": "async"}
    await cpu_per_item(max(nodes), "exit", items, concurrency)  # warm-up
    table: dict[str, list[float]] = {mode: [] for mode in modes}
    for n in nodes:
        for mode, durability in modes.items():
            runs = [await cpu_per_item(n, durability, items, concurrency) for _ in range(repeats)]
            table[mode].append(statistics.median(runs))
    print(f"{'nodes':>18} " + " ".join(f"{n:>7}" for n in nodes) + "   per node (slope)")
    for mode, values in table.items():
        slope = (values[-1] - values[0]) / (nodes[-1] - nodes[0]) if len(nodes) > 1 else float("nan")
        print(f"{mode:>18} " + " ".join(f"{v:7.3f}" for v in values) + f"   {slope:.3f} ms CPU per item")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--nodes", default="1,3,5,9", help="chain lengths, comma-separated")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    asyncio.run(measure([int(n) for n in args.nodes.split(",")], args.items, args.concurrency, args.repeats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
