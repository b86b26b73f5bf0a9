"""The framework-cost baseline: ChatEval one-by-one's calls sent by a bare asyncio loop, with no graph.

Each item's referees speak in the same order and see the same prompts as in the graph (the prompt is
built by the same template code, and every message goes into every referee's history as the graph's
one-by-one wiring does), through the same ``ChatOpenAI`` client the runner would use. Nothing else:
no LangGraph, no checkpoints, no LLM cache, no reply parsing, no results file. The server's log of
message digests proves the two paths sent the same calls.

``langgraph_chateval`` makes the same calls from the smallest LangGraph graph that can: one node per referee turn
and a no-op aggregator (ChatEval's six supersteps an item), no checkpointer, no cache, no parsing, no results. It is
the floor of any framework built on LangGraph graphs: what LangGraph alone costs beside the bare loop.

Run as a script it judges a JSONL file of items (``write_items``) in a process of its own, as ``jurygraph eval``
runs in its own: the two are measured alike (``benchmarks/peak.py``), and neither shares a core with the harness.

    python benchmarks/bare.py --url http://127.0.0.1:PORT/v1 --dataset items.jsonl --concurrency 50 [--graph]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import operator
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from jurygraph import EvalItem, ModelSpec
from jurygraph.llm.models import build_model
from jurygraph.nodes.referee import ChatEvalTemplate, Referee, chateval_personas


async def bare_chateval(items: Sequence[EvalItem], spec: ModelSpec, *, concurrency: int, turns: int = 2,
                        referees: int = 2) -> int:
    """Send every item's ChatEval one-by-one calls, ``concurrency`` items at a time; returns the call count."""
    model: Any = build_model(spec)  # the runner's own client for this spec (one per event loop)
    panel: list[Referee] = chateval_personas(None, referees)
    frame = ChatEvalTemplate()
    queue: asyncio.Queue[EvalItem] = asyncio.Queue()
    for item in items:
        queue.put_nowait(item)
    calls = 0

    async def judge(item: EvalItem) -> None:
        nonlocal calls
        history: list[BaseMessage] = []  # one-by-one: every referee hears every message, in order
        for turn in range(1, turns + 1):
            for referee in panel:
                prompt, _ = frame.build(item, referee, history, final=turn == turns)
                reply = await model.ainvoke([HumanMessage(prompt)])
                calls += 1
                history.append(AIMessage(reply.text, name=referee.name))

    async def worker() -> None:
        while not queue.empty():
            await judge(queue.get_nowait())

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(items)))))
    return calls


class _Debate(TypedDict, total=False):
    item: EvalItem
    history: Annotated[list[BaseMessage], operator.add]


async def langgraph_chateval(items: Sequence[EvalItem], spec: ModelSpec, *, concurrency: int, turns: int = 2,
                             referees: int = 2) -> int:
    """``bare_chateval``'s calls from a minimal LangGraph graph (a node per turn, then a no-op aggregator, each item
    a thread of its own, no checkpointer); returns the call count."""
    from langgraph.graph import END, START, StateGraph

    model: Any = build_model(spec)
    panel: list[Referee] = chateval_personas(None, referees)
    frame = ChatEvalTemplate()
    calls = 0
    builder = StateGraph(_Debate)
    previous = START
    for turn in range(1, turns + 1):
        for referee in panel:
            async def speak(state: _Debate, referee: Referee = referee, final: bool = turn == turns) -> dict[str, Any]:
                nonlocal calls
                prompt, _ = frame.build(state["item"], referee, state.get("history", []), final=final)
                reply = await model.ainvoke([HumanMessage(prompt)])
                calls += 1
                return {"history": [AIMessage(reply.text, name=referee.name)]}

            name = f"{referee.name} turn {turn}"
            builder.add_node(name, speak)
            builder.add_edge(previous, name)
            previous = name
    builder.add_node("aggregate", lambda state: {})
    builder.add_edge(previous, "aggregate")
    builder.add_edge("aggregate", END)
    app = builder.compile()
    queue: asyncio.Queue[EvalItem] = asyncio.Queue()
    for item in items:
        queue.put_nowait(item)

    async def worker() -> None:
        while not queue.empty():
            item = queue.get_nowait()
            await app.ainvoke({"item": item, "history": []}, {"configurable": {"thread_id": item.id}})

    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(items)))))
    return calls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True, help="the server's base URL (.../v1)")
    parser.add_argument("--dataset", required=True, help="a JSONL file of items, every EvalItem field by name")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--graph", action="store_true", help="make the calls from a minimal LangGraph graph "
                        "(langgraph_chateval) instead of the bare loop")
    args = parser.parse_args(argv)
    with Path(args.dataset).open(encoding="utf-8") as lines:
        items = [EvalItem.model_validate(json.loads(line)) for line in lines if line.strip()]
    judge = langgraph_chateval if args.graph else bare_chateval
    calls = asyncio.run(judge(items, ModelSpec.parse(f"openai:bench@{args.url}"),
                                      concurrency=args.concurrency))
    print(json.dumps({"calls": calls}), flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    raise SystemExit(main())
