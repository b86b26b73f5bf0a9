"""``jurygraph review RUN_DIR``: a person decides the items the run paused for review (``--review-when``).

Interactively, each waiting item is shown as ``jurygraph show`` prints it (the transcript, the judgments, the verdict)
but without the human label, then the panel's verdict and its doubt signals, and the reviewer answers ``1``, ``2``,
``tie``, a score or a choice's answer (``s`` skips the item, ``q`` or end of input stops), then an optional note; the
human label, if the item has one, is shown once the verdict is recorded (metaeval scores the reviewer against it, so
it must not be seen before).
``--item ID --verdict V [--note TEXT]`` does one item without prompting. Either way the item's graph is resumed with
``Command(resume=...)`` and its results line records the reviewer's verdict, the reviewer (``--reviewer``, default
the login name), the time, the note and the panel's original verdict (:mod:`jurygraph.running.review`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from jurygraph.cli.eval import awaiting_line
from jurygraph.cli.preflight import UsageError
from jurygraph.cli.protocols import build_protocol, manifest_args
from jurygraph.cli.show import human_text, item_view, judgment_line, render
from jurygraph.judging.items import as_item
from jurygraph.nodes.review import login_name, read_review
from jurygraph.running.review import Review, reviewing
from jurygraph.running.rundir import read_manifest

SKIP, QUIT = ("s", "skip"), ("q", "quit")


def add_arguments(review: argparse.ArgumentParser) -> None:
    review.add_argument("run_dir", metavar="RUN_DIR")
    review.add_argument("--item", metavar="ID", help="review this item only")
    review.add_argument("--verdict", metavar="V",
                        help="with --item: the verdict, without prompting (1, 2 or tie; a score; a choice's answer)")
    review.add_argument("--note", metavar="TEXT", help="with --verdict: a note kept with the verdict")
    review.add_argument("--reviewer", metavar="NAME", help="who reviews (default: your login name)")
    review.add_argument("--list", action="store_true", help="list the items awaiting review, and their doubt")
    review.add_argument("--checkpoint", help="the run's checkpoint store when not RUN_DIR/checkpoints.sqlite "
                                             "(e.g. its postgres:// URL)")
    review.set_defaults(handler=cmd_review)


def cmd_review(args: argparse.Namespace) -> int:
    if args.verdict is not None and not args.item:
        raise UsageError("--verdict needs --item ID (which item it decides)")
    if args.list and args.verdict is not None:
        raise UsageError("--list only reads the run; give --item ID --verdict V without it")
    if args.note is not None and args.verdict is None:
        raise UsageError("--note goes with --item ID --verdict V (interactively, the note is asked for)")
    manifest = read_manifest(args.run_dir)
    if manifest is None:
        raise UsageError(f"{args.run_dir}: no manifest.json (is it a jurygraph run directory?)")
    if not (manifest.get("parameters") or {}).get("review_when") and not manifest.get("awaiting_review"):
        print(f"{args.run_dir}: the run pauses no item for review (no --review-when); nothing to do")
        return 0
    graph = build_protocol(manifest_args(manifest)).graph
    reviewer = args.reviewer or login_name()
    with reviewing(graph, args.run_dir, checkpoint=args.checkpoint, read_only=args.list) as review:
        if args.verdict is not None:
            record = review.answer(args.item, {"verdict": args.verdict, "reviewer": reviewer, "note": args.note})
            print(_recorded(record))
            _left(review, len(review.pending()))
            return 0
        waiting = review.pending()
        pending = list(waiting)
        if args.item:
            if args.item not in waiting:
                review.request(args.item)  # says why: unknown, already reviewed, never paused
            pending = [args.item]
        if args.list:
            for item_id in pending:
                print(_summary(item_id, waiting[item_id]))
            _left(review, len(waiting))
            return 0
        if not pending:
            print(f"no item of {args.run_dir} awaits review")
            return 0
        done = _interactive(review, pending, reviewer, input)
        _left(review, len(waiting) - done)
    return 0


def _interactive(review: Review, pending: list[str], reviewer: str, ask: Callable[[str], str]) -> int:
    """Each waiting item: shown, then a verdict (or skip / quit) and a note, each answer resumed at once; returns
    how many were answered."""
    done = skipped = 0
    for number, item_id in enumerate(pending, 1):
        values, request = review.waiting(item_id)
        # the human label stays hidden until the reviewer has decided: metaeval scores the reviewer against it
        print(f"\n=== {number}/{len(pending)} ===\n{render(_blind(item_view(item_id, values)), human=False)}")
        print(_doubt_lines(request))
        answer = _ask_verdict(request, values, ask)
        if answer is None:
            break
        if not answer:
            skipped += 1
            continue
        note = _ask(ask, "note (Enter for none): ")
        record = review.answer(item_id, {"verdict": answer, "reviewer": reviewer, "note": note or None})
        print(_recorded(record))
        if record.get("human"):
            print(f"human: {human_text(record['human'])}")
        done += 1
    print(f"\nreviewed {done}, skipped {skipped}")
    return done


def _blind(value: Any) -> Any:
    """The item's view without any human label in it (the item's, or a copy of the item a protocol keeps in its
    state), for a reviewer who has not decided yet."""
    if isinstance(value, dict):
        return {key: _blind(item) for key, item in value.items() if key != "human"}
    if isinstance(value, list):
        return [_blind(item) for item in value]
    return value


def _ask(ask: Callable[[str], str], prompt: str) -> str | None:
    try:
        return ask(prompt).strip()
    except EOFError:
        return None


def _ask_verdict(request: dict[str, Any], values: dict[str, Any], ask: Callable[[str], str]) -> str | None:
    """The reviewer's verdict: None to stop, "" to skip; asked again until it fits the item."""
    item = as_item(values["item"])
    while True:
        text = _ask(ask, f"verdict for {request['item_id']} ({request['expects']}; s = skip, q = quit): ")
        if text is None or text.lower() in QUIT:
            return None
        if text.lower() in SKIP:
            return ""
        try:
            read_review(text, item)
        except ValueError as err:
            print(f"  {err}", file=sys.stderr)
            continue
        return text


def _doubt_lines(request: dict[str, Any]) -> str:
    panel = request.get("panel_verdict") or {}
    lines = [f"panel verdict: {judgment_line(panel) if panel else 'none'}"
             + (f" [{panel['method']}]" if panel.get("method") else "")]
    current = request.get("verdict") or {}
    if current and current != panel:
        lines.append(f"escalated verdict: {judgment_line(current)} [{current.get('method')}]")
    signals = ", ".join(f"{name} {_number(value)}" for name, value in (request.get("doubt") or {}).items())
    lines.append(f"doubt: {signals or 'none'}; review when {' or '.join(request.get('review_when') or [])} "
                 f"(holds: {', '.join(request.get('triggered_by') or []) or 'none'})")
    return "\n".join(lines)


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _summary(item_id: str, request: dict[str, Any]) -> str:
    panel = request.get("panel_verdict") or {}
    signals = ", ".join(f"{name} {_number(value)}" for name, value in (request.get("doubt") or {}).items())
    return f"{item_id}\tpanel: {judgment_line(panel) if panel else 'none'}\t{signals}"


def _recorded(record: dict[str, Any]) -> str:
    review = (record.get("verdict") or {}).get("detail", {}).get("review") or {}
    note = f" ({review['note']})" if review.get("note") else ""
    return f"recorded {record['id']}: {review.get('verdict')} by {review.get('reviewer')} at {review.get('at')}{note}"


def _left(review: Review, left: int) -> None:
    print(f"{awaiting_line(left)}: jurygraph review {review.out}" if left else f"no item of {review.out} awaits review")


__all__ = ["add_arguments", "cmd_review"]
