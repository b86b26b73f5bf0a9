"""``jurygraph show RUN_DIR ITEM_ID [--json]``: one item's debate as a transcript, read from the checkpoints;
``jurygraph show RUN_DIR``: the run's totals over every invocation and each invocation's, from its manifest.

It reads the latest checkpoint of the item's thread (thread_id = item id), which holds the final state
whether the run kept every step's checkpoint or only the final one: each agent's persona, what every agent
said in order (the Scorer's revisions, the Critic's objections, the peers' reviews, the area chair's
samples, the summaries), each parsed judgment, the verdict beside the human label. A conversation item is shown as
its judges read it (roles, tool calls and results, the turn judged marked), a per-turn verdict with its turns.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage, SystemMessage
from langgraph.checkpoint.base import BaseCheckpointSaver

from jurygraph.cli.preflight import UsageError
from jurygraph.judging.items import as_item
from jurygraph.judging.state import escalation_transcript, message_data, transcript_data
from jurygraph.nodes.conversation import conversation_text
from jurygraph.running.checkpoints import NoCheckpoints, open_saver
from jurygraph.running.rundir import CHECKPOINTS, load_manifest, read_manifest, read_results

# state keys shown in their own sections; any other key a protocol keeps (DEBATE's scores and reviews...) is
# listed under "state"
_SHOWN = {"item", "histories", "transcript", "judgments", "verdict", "usage", "round_buffer"}


def add_arguments(show: argparse.ArgumentParser) -> None:
    show.add_argument("run_dir", metavar="RUN_DIR")
    show.add_argument("item_id", metavar="ITEM_ID", nargs="?",
                      help="the item to show; without it, the run's totals (items, requests, tokens, cost, wall time "
                           "over every invocation, then each invocation's)")
    show.add_argument("--json", action="store_true", help="print the item (or the run's totals) as JSON")
    show.add_argument("--checkpoint", help="the run's checkpoint store when not RUN_DIR/checkpoints.sqlite "
                                           "(e.g. its postgres:// URL)")
    show.set_defaults(handler=cmd_show)


def cmd_show(args: argparse.Namespace) -> int:
    if args.item_id is None:
        print(run_totals(args.run_dir, as_json=args.json))
        return 0
    values = item_state(args.run_dir, args.item_id, args.checkpoint)
    view = item_view(args.item_id, values)
    print(json.dumps(view, indent=2, ensure_ascii=False) if args.json else render(view))
    return 0


def run_totals(run_dir: str | Path, *, as_json: bool = False) -> str:
    """The run's totals (its manifest's, over every invocation) and each invocation's, as text or JSON."""
    manifest = load_manifest(run_dir)
    if manifest is None:
        raise UsageError(f"{run_dir}: no manifest.json (is it a jurygraph run directory?)")
    totals = manifest.totals()
    invocations: list[dict[str, Any]] = [{"at": i.at, "resume": i.resume, "ended": i.ended, "stopped": i.stopped,
                    "counts": i.counts.model_dump(mode="json") if i.counts else None,
                    "spend": i.spend.model_dump(mode="json") if i.spend else None} for i in manifest.invocations]
    if as_json:
        return json.dumps({"run": str(run_dir), "protocol": manifest.protocol, "totals": totals,
                           "spend": manifest.spend.model_dump(mode="json") if manifest.spend else None,
                           "usage_by_model": manifest.usage_by_model, "invocations": invocations},
                          indent=2, ensure_ascii=False)
    cost = "no price known" if totals["cost_usd"] is None else f"${totals['cost_usd']:.4f}"
    lines = [f"{run_dir}: {manifest.protocol or '?'}, {totals['done']} of {totals['items'] or '?'} items done"
             + (f", {totals['failed']} failed" if totals["failed"] else "")
             + (f", {totals['awaiting_review']} await review" if totals["awaiting_review"] else ""),
             f"over {totals['invocations']} invocation(s): {totals['requests']:,} requests "
             f"({totals['attempts']:,} HTTP attempts), {totals['input_tokens']:,} + {totals['output_tokens']:,} "
             f"tokens, {cost}, {totals['seconds']:.1f} s"]
    for number, invocation in enumerate(manifest.invocations, start=1):
        spend, counts = invocation.spend, invocation.counts
        how = "killed before its end" if not invocation.ended and number < len(invocations) else \
            invocation.stopped or ("running or killed" if not invocation.ended else "finished")
        paid = "" if spend is None else (f": {spend.requests:,} requests, {spend.tokens:,} tokens"
                                         + ("" if spend.cost_usd is None else f", ${spend.cost_usd:.4f}"))
        done = f", {counts.done} items done" if counts else ""
        lines.append(f"  {number}. {(invocation.at or '')[:19]}{' resume' if invocation.resume else ''}{paid}{done} "
                     f"({how})")
    return "\n".join(lines)


def item_state(run_dir: str | Path, item_id: str, checkpoint: str | None = None) -> dict[str, Any]:
    """The latest checkpointed state of an item's thread."""
    [(_, values)] = list(item_states(run_dir, [item_id], checkpoint))
    if not values:
        known = [r["id"] for r in read_results(run_dir)]
        hint = f" (it has {len(known)} items, e.g. {', '.join(known[:5])})" if known else ""
        raise UsageError(f"{run_dir}: no item {item_id!r} in the checkpoints{hint}")
    return values


def item_states(run_dir: str | Path, item_ids: Iterable[str],
                checkpoint: str | None = None) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """Each item's latest checkpointed state (None when its thread has none), read through one connection:
    a report of thousands of items would otherwise spend most of its time opening the database."""
    run = Path(run_dir)
    if read_manifest(run) is None:
        raise UsageError(f"{run}: no manifest.json (is it a jurygraph run directory?)")
    target = checkpoint or str(run / CHECKPOINTS)
    with _saver(target) as saver:
        for item_id in item_ids:
            found = saver.get_tuple({"configurable": {"thread_id": item_id, "checkpoint_ns": ""}})
            yield item_id, dict(found.checkpoint["channel_values"]) if found else None


def item_systems(run_dir: str | Path, item_ids: Iterable[str],
                 checkpoint: str | None = None) -> dict[str, tuple[str, str]]:
    """Item id -> the systems of its two answers (``meta.model_1``, ``meta.model_2``), for the items whose
    checkpointed item names both (for runs whose results lines predate their ``systems``): what ``rank`` ranks and the
    same-family warning compares the judges with."""
    found = {}
    for item_id, values in item_states(run_dir, item_ids, checkpoint):
        meta = ((values or {}).get("item") or {}).get("meta") or {}
        if meta.get("model_1") and meta.get("model_2"):
            found[item_id] = (str(meta["model_1"]), str(meta["model_2"]))
    return found


@contextmanager
def _saver(target: str) -> Iterator[BaseCheckpointSaver[Any]]:
    try:
        with open_saver(target, read_only=True) as saver:  # looking at a run never changes it
            yield saver
    except NoCheckpoints as err:
        raise UsageError(str(err)) from None


def item_view(item_id: str, values: dict[str, Any]) -> dict[str, Any]:
    """The item's state as plain data: item, personas, transcript, judgments, verdict, human label."""
    item = values.get("item") or {}
    personas = {}
    for agent, history in (values.get("histories") or {}).items():
        system = next((m for m in history if isinstance(m, SystemMessage)), None)
        if system is not None:
            personas[agent] = system.text
    # the panel's words (each calibration run's, or each agent's own), then the stronger judge's after an escalation
    transcript = [*transcript_data(values), *escalation_transcript(values)]
    runs = values.get("runs") or {}
    # LangGraph's own channels (join:..., branch:..., __pregel_...) are wiring, not what the agents did
    extra = {key: value for key, value in values.items()
             if key not in _SHOWN and not key.startswith("__") and ":" not in key}
    if runs:  # their transcripts are in the transcript above
        extra["runs"] = {name: {k: v for k, v in run.items() if k != "transcript"} for name, run in runs.items()}
    return {"id": item_id, "item": item, "personas": personas, "transcript": transcript,
            "judgments": values.get("judgments") or {}, "verdict": values.get("verdict"),
            "human": item.get("human"), "usage": values.get("usage") or {}, "state": _jsonable(extra)}


def _jsonable(value: Any) -> Any:
    """Plain JSON; messages kept inside other state (e.g. a calibration's per-order runs) as speaker/text."""
    return json.loads(json.dumps(value, default=lambda o: message_data(o) if isinstance(o, BaseMessage) else str(o)))


def judgment_line(judgment: dict[str, Any]) -> str:
    if judgment.get("missing"):
        return f"missing ({judgment.get('reason') or 'unreadable'})"
    keys = ("label", "score_1", "score_2", "score", "answer")
    shown = ", ".join(f"{key} {judgment[key]}" for key in keys if judgment.get(key) is not None)
    return shown + (f" (after {judgment['attempts']} attempts)" if int(judgment.get("attempts") or 1) > 1 else "")


def _texts(item: dict[str, Any]) -> list[str]:
    fields = ("question", "source", "context", "fact", "response", "response_1", "response_2", "options")
    texts = [f"{name}: {_indent(str(item[name]))}" for name in fields if item.get(name) not in (None, "", [])]
    if any(item.get(name) for name in ("messages", "messages_1", "messages_2")):
        texts.append("conversation:\n    " + _indent(conversation_text(as_item(item))))
    return texts


def turn_lines(verdict: dict[str, Any]) -> list[str]:
    """A per-turn verdict's turns (``--per-turn``), one line each."""
    detail = verdict.get("detail") or {}
    turns = detail.get("turns") or []
    if not turns:
        return []
    return [f"per turn ({detail.get('turn_aggregate')}):",
            *(f"  turn {t.get('turn')}: {judgment_line(t)}" for t in turns)]


def _indent(text: str, pad: str = "    ") -> str:
    return text.replace("\n", "\n" + pad)


def decision_lines(verdict: dict[str, Any]) -> list[str]:
    """Who decided, when not the panel: the escalation (what sent it, both verdicts) and the review."""
    detail = verdict.get("detail") or {}
    lines = []
    match = detail.get("trajectory_match")
    if isinstance(match, dict):  # the tool-call match before the panel (graphs.trajectory)
        lines.append(f"trajectory match ({match.get('mode')}, tool arguments {match.get('tool_args')}): "
                     f"{match.get('reason')}; {'decided' if match.get('decided') else 'the panel judged'}")
    escalation = detail.get("escalation")
    if escalation:
        escalated = escalation.get("escalated") or {}
        lines.append(f"escalated ({', '.join(escalation.get('triggered_by') or [])}): panel "
                     f"{judgment_line(escalation.get('panel') or {})}; escalated "
                     f"{judgment_line(escalated) if escalated else 'none'}; decided by {escalation.get('decided_by')}")
    review = detail.get("review")
    if review:
        note = f": {review['note']}" if review.get("note") else ""
        lines.append(f"reviewed by {review.get('reviewer')} at {review.get('at')}{note}; the panel said "
                     f"{judgment_line(review.get('panel_verdict') or {})}")
    return lines


def human_text(human: dict[str, Any] | None) -> str:
    """An item's human labels as text: 'label tie', 'coherence 4, fluency 2', or 'none'."""
    return ", ".join(f"{k} {v}" for k, v in human.items()) if human else "none"


def render(view: dict[str, Any], *, human: bool = True) -> str:
    """The item as text; ``human=False`` leaves the human label out (a reviewer deciding the item must not see it)."""
    item = view["item"]
    head = " · ".join(str(x) for x in (view["id"], item.get("task"), item.get("dataset"), item.get("aspect")) if x)
    lines = [f"item {head}", *_texts(item)]
    if view["personas"]:
        lines.append("\npersonas:")
        lines += [f"  {agent}: {_indent(text)}" for agent, text in view["personas"].items()]
    lines.append("\ntranscript:")
    run = None
    for number, turn in enumerate(view["transcript"], 1):
        if turn.get("run") != run:
            run = turn.get("run")
            lines.append(f"  -- {run} --")
        lines.append(f"  [{number}] {turn['speaker']}:\n      {_indent(turn['text'], '      ')}")
    lines.append("\njudgments:")
    lines += [f"  {agent}: {judgment_line(j)}" for agent, j in view["judgments"].items()]
    for key, value in view["state"].items():
        lines.append(f"{key}: {json.dumps(value, ensure_ascii=False)}")
    verdict = view["verdict"] or {}
    shown = judgment_line(verdict) if verdict else "none (the item did not finish)"
    method = f" [{verdict['method']}]" if verdict.get("method") else ""
    lines.append(f"\nverdict: {shown}{method}" + (f"    human: {human_text(view['human'])}" if human else ""))
    lines += turn_lines(verdict)
    lines += decision_lines(verdict)
    return "\n".join(lines)
