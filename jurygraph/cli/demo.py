"""``jurygraph demo``: ChatEval one-by-one on 3 FairEval items with the embedded offline model.

The point is to watch a protocol graph work for real with no key and no GPU: each referee's message
streams as it is produced, then the verdicts, the run directory and the diagram are printed. The
embedded model is an OFFLINE SMOKE-TEST MODEL: its ratings carry no signal.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from jurygraph.graphs.registry import DEFAULT, find
from jurygraph.llm.local_model import (
    INSTALL,
    SMOKE_TEST_NOTICE,
    LocalModelUnusable,
    check_local_model,
    local_model_available,
)
from jurygraph.llm.models import JuryContext, ModelSpec
from jurygraph.running.datasets import load_faireval
from jurygraph.running.rundir import read_results
from jurygraph.running.runner import run


class _Printer:
    """Prints streamed tokens under a header naming the item and the node (referee and turn)."""

    def __init__(self) -> None:
        self.current: tuple[str, str] | None = None

    def __call__(self, item_id: str, node: str, text: str) -> None:
        if (item_id, node) != self.current:
            self.current = (item_id, node)
            print(f"\n--- item {item_id} · {node} ---", flush=True)
        print(text, end="", flush=True)


def cmd_demo(args: argparse.Namespace) -> int:
    if not local_model_available():
        print(f"jurygraph demo needs the embedded model: {INSTALL}", file=sys.stderr)
        return 2
    try:
        check_local_model()
    except LocalModelUnusable as err:
        print(f"jurygraph demo: {err}", file=sys.stderr)
        return 3
    out = Path(args.out)
    print(f"jurygraph demo: ChatEval one-by-one, 2 referees x 2 turns, {args.items} FairEval items.")
    print(f"Model: {SMOKE_TEST_NOTICE}.")
    items = load_faireval().items[: args.items]
    protocol = find(DEFAULT)  # ChatEval, at the paper's defaults: one-by-one, 2 referees, 2 turns
    built = protocol.create()
    graph = built.graph
    spec = ModelSpec(provider="local", model="smollm2-135m-instruct", max_tokens=args.max_tokens)
    # the demo's own token cap over ChatEval's 512 (as --gen '*.max_tokens=N' would): a smoke test, kept short
    context = JuryContext(default=spec, gen={"*": {"max_tokens": args.max_tokens}})
    summary = run(graph, items, out_dir=out, context=context, concurrency=1,
                  resume=True, progress=False, on_token=_Printer(),
                  manifest={"protocol": protocol.name, "parameters": {**built.params, "protocol": protocol.name},
                            "models": {"default": spec.label}, "note": SMOKE_TEST_NOTICE})
    print("\n\nVerdicts (smoke test: no signal in these ratings):")
    for record in sorted(read_results(out), key=lambda r: int(r["id"]) if r["id"].isdigit() else 0):
        print(_verdict_line(record))
    print(f"\n{summary.line()}")
    print(f"Run directory: {out.resolve()} (results.jsonl, manifest.json, checkpoints.sqlite, llm_cache.sqlite)")
    print("\nThe graph (mermaid):")
    print(graph.compile().get_graph().draw_mermaid())
    return 0 if summary.failed == 0 else 1


def _verdict_line(record: dict[str, Any]) -> str:
    verdict = record.get("verdict") or {}
    human = (record.get("human") or {}).get("label", "?")
    if record.get("status") != "ok":
        return f"  item {record['id']}: failed ({record.get('error')})"
    if verdict.get("missing"):
        return f"  item {record['id']}: no readable judgment ({record.get('n_missing')} missing); human: {human}"
    scores = ", ".join(f"{name}: {j.get('score_1', '?'):g} vs {j.get('score_2', '?'):g}"
                       if not j.get("missing") else f"{name}: missing" for name, j in record["judgments"].items())
    how = f"votes {verdict['votes']}" if verdict.get("votes") else f"{verdict.get('method')} scores"
    return f"  item {record['id']}: verdict {verdict.get('label')} ({how}; {scores}); human: {human}"


def add_arguments(demo: argparse.ArgumentParser) -> None:
    demo.add_argument("--items", type=int, default=3, help="how many FairEval items (default 3)")
    demo.add_argument("--out", default="runs/demo", help="run directory (default runs/demo)")
    demo.add_argument("--max-tokens", type=int, default=160, help="tokens per referee message (default 160)")
    demo.set_defaults(handler=cmd_demo)
