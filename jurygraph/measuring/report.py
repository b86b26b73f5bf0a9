"""One run (or several) as one self-contained HTML page: summary, agreement with humans, position bias, a
comparison of the runs, and an item browser that opens each item as a conversation.

The page needs no server and loads nothing: CSS and script come from ``report_page.html`` (package data), the
figures are inline (PNG as ``data:`` URLs, bars as SVG), and a Content-Security-Policy forbids any other
load. Items are embedded once as JSON with every long text interned in one string table (the same persona,
question or message is stored once however often it is heard), and the script renders one page of the item
list at a time, so a 20,000-item run opens as fast as a small one.

This module only lays out what it is given: the caller (``jurygraph.cli.report``) reads the run directories
and the checkpoints (``cli.show``'s item views) and draws the protocol's diagram.
"""

from __future__ import annotations

import base64
import html
import json
import math
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any

from jurygraph.judging.doubt import decided_by, panel_verdict, parse_conditions, triggered
from jurygraph.judging.items import SWAP_LABEL, TaskKind, as_item
from jurygraph.judging.panel import PanelMembers
from jurygraph.measuring.coverage import DoubtReport, coverage_tables, doubt_reports, panel_records
from jurygraph.measuring.metaeval import MethodResult, evaluate_records, latest_records
from jurygraph.measuring.panel import (
    Panel,
    family_tables,
    member_position,
    panel_diagnostics,
    panel_tables,
    same_family,
)
from jurygraph.measuring.position import PositionBias, is_reversed, position_table, run_biases
from jurygraph.measuring.tables import Table, correlation_table, detail_table, label_table
from jurygraph.nodes.conversation import judged_span
from jurygraph.running.rundir import AWAITING_REVIEW, RunManifest

# the texts of an item shown above its conversation, in this order
ITEM_FIELDS = ("question", "source", "context", "fact", "response", "response_1", "response_2", "options")
# a score verdict "agrees" with a human mean within this many points (the issue names no rule for scores)
SCORE_TOLERANCE = 1.0
OUTCOMES = ("agrees", "disagrees", "tie", "missing", "failed", "awaiting", "flipped", "unlabelled", "split")


@dataclass
class RunInput:
    """What the page shows of one run directory."""

    name: str
    path: str
    manifest: Mapping[str, Any]
    records: list[dict[str, Any]]
    # item id -> ``cli.show.item_view`` of its checkpoint, with ``histories`` (agent -> messages)
    views: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    diagram_png: bytes | None = None
    diagram_text: str | None = None  # mermaid, when Graphviz is absent
    panel: PanelMembers | None = None  # who its panel's members are, as its protocol's spec says (None: its agents)


# --- outcomes ---------------------------------------------------------------------------------------------


def verdict_value(record: Mapping[str, Any]) -> str | None:
    """The verdict as one short value (label, answer or score); None when failed or missing."""
    verdict = record.get("verdict") or {}
    if record.get("status", "ok") != "ok" or verdict.get("missing"):
        return None
    for key in ("label", "answer"):
        if verdict.get(key) is not None:
            return str(verdict[key])
    return f"{float(verdict['score']):g}" if verdict.get("score") is not None else None


def human_value(record: Mapping[str, Any]) -> str | None:
    human = record.get("human") or {}
    key = {"pairwise": "label", "choice": "answer"}.get(str(record.get("task")), record.get("aspect") or "score")
    value = human.get(key)
    if value is None:
        return None
    # a mean of several raters (SummEval's 1.3333...) is shown to two decimals
    return f"{round(float(value), 2):g}" if record.get("task", "score") == "score" else str(value)


def outcomes(record: Mapping[str, Any]) -> list[str]:
    """The item-browser filters this record falls under (flipped and split are added from other records)."""
    if record.get("status") == AWAITING_REVIEW:
        return ["awaiting"]
    if record.get("status", "ok") != "ok":
        return ["failed"]
    value, human = verdict_value(record), human_value(record)
    tags = ["tie"] if value == "tie" else []
    if value is None:
        return [*tags, "missing"]
    if human is None:
        return [*tags, "unlabelled"]
    if record.get("task", "score") == "score":
        agrees = abs(float(value) - float(human)) <= SCORE_TOLERANCE
    else:
        agrees = value == human
    return [*tags, "agrees" if agrees else "disagrees"]


def comparable(record: Mapping[str, Any], reversed_run: bool) -> str | None:
    """The verdict in the original answer order, so that a ``--reverse`` run compares with the others."""
    value = verdict_value(record)
    if value is not None and reversed_run and record.get("task") == "pairwise":
        return SWAP_LABEL.get(value, value)
    return value


# --- compact data -------------------------------------------------------------------------------------------


class Strings:
    """An interned string table: each distinct long text is stored once and referred to by its index."""

    def __init__(self) -> None:
        self.table: list[str] = []
        self._index: dict[str, int] = {}

    def __call__(self, text: Any) -> int:
        text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
        found = self._index.get(text)
        if found is None:
            found = self._index[text] = len(self.table)
            self.table.append(text)
        return found


def _judgment_text(judgment: Mapping[str, Any] | None) -> str:
    if not judgment:
        return ""
    if judgment.get("missing"):
        return f"missing: {judgment.get('reason') or 'unreadable'}"
    keys = ("label", "score_1", "score_2", "score", "answer")
    return ", ".join(f"{key} {judgment[key]:g}" if isinstance(judgment[key], float) else f"{key} {judgment[key]}"
                     for key in keys if judgment.get(key) is not None)


def _raw_judgments(value: Any) -> list[Mapping[str, Any]]:
    """Every judgment (a mapping with the reply's ``raw`` text and a ``kind``) nested in ``value``."""
    if isinstance(value, Mapping):
        own = [value] if value.get("raw") and value.get("kind") else []
        return own + [j for v in value.values() for j in _raw_judgments(v)]
    if isinstance(value, list):
        return [j for v in value for j in _raw_judgments(v)]
    return []


def _history_key(histories: Mapping[str, Any], run: str | None, speaker: str) -> str | None:
    for key in (f"{run}/{speaker}" if run else None, speaker):
        if key and key in histories:
            return key
    return None


def conversation(view: Mapping[str, Any] | None, record: Mapping[str, Any], intern: Strings) -> dict[str, Any]:
    """One run's conversation of one item: turns (speaker, persona, text, parsed judgment, what it heard),
    judgments, other state (DEBATE's scores, ReFeR's samples...), verdict and human label.

    Without a checkpoint (a run without one, or a Postgres run) the turns are the judgments' raw replies."""
    judgments: Mapping[str, Any] = (view or {}).get("judgments") or record.get("judgments") or {}
    # a message's parsed judgment, by its raw text: the final ones, and those a protocol keeps per step in
    # other state (DEBATE's per-iteration scores, a calibration's per-order runs)
    by_raw = {str(j["raw"]): j for j in _raw_judgments((view or {}).get("state"))}
    by_raw.update({str(j["raw"]): j for j in judgments.values() if j.get("raw")})
    personas = (view or {}).get("personas") or {}
    histories = (view or {}).get("histories") or {}
    turns = []
    source = (view or {}).get("transcript")
    if source is None:
        source = [{"speaker": j.get("agent") or agent.split("/")[-1], "text": j.get("raw"),
                   "run": agent.rpartition("/")[0] or None} for agent, j in judgments.items() if j.get("raw")]
    spoken: dict[tuple[str | None, str], int] = {}
    for turn in source:
        run, speaker, text = turn.get("run"), str(turn.get("speaker")), str(turn.get("text") or "")
        key = _history_key(histories, run, speaker)
        heard: list[list[Any]] = []
        if key is not None:
            # what the agent had heard before its n-th message: the others' messages up to it
            nth = spoken.get((run, speaker), 0)
            spoken[(run, speaker)] = nth + 1
            own = 0
            for message in histories[key]:
                if message.get("speaker") == speaker and message.get("type") == "ai":
                    if own == nth:
                        break
                    own += 1
                elif message.get("type") != "system":
                    heard.append([str(message.get("speaker")), intern(str(message.get("text") or ""))])
        parsed = by_raw.get(text)
        persona = personas.get(f"{run}/{speaker}") or personas.get(speaker)
        turns.append([run or "", speaker, intern(persona) if persona else -1, intern(text),
                      _judgment_text(parsed), heard])
    state = {k: v for k, v in ((view or {}).get("state") or {}).items() if k != "runs"}
    return {"turns": turns,
            "judgments": [[agent, _judgment_text(j)] for agent, j in judgments.items()],
            "state": intern(json.dumps(state, indent=1, ensure_ascii=False)) if state else -1,
            "verdict": _verdict_line(record), "error": record.get("error") or ""}


def dialogue(item: Mapping[str, Any], intern: Strings) -> list[Any] | None:
    """A conversation item's messages for the page, None for other items: blocks ``[title, messages, steps]``,
    each message ``[role, name, text, tool calls [[tool, arguments JSON, id]], judged]`` (judged: 1 in the turn
    judged), texts interned."""
    if not any(item.get(name) for name in ("messages", "messages_1", "messages_2")):
        return None
    parsed = as_item(dict(item))
    prefix = list(parsed.messages or [])
    if parsed.task is TaskKind.SCORE:
        sides = [("conversation", prefix, 0, parsed.steps)]
    else:
        sides = [("conversation so far", prefix, 0, None)] if prefix else []
        sides += [(f"Assistant {k}", [*prefix, *(own or [])], len(prefix), steps) for k, own, steps in
                  ((1, parsed.messages_1, parsed.steps_1), (2, parsed.messages_2, parsed.steps_2))]
    blocks = []
    for title, messages, start, steps in sides:
        span = judged_span(messages, parsed.turn) if start or parsed.task is TaskKind.SCORE else None
        names = {c.id: c.name for m in messages for c in m.tool_calls or () if c.id}
        rows = [[m.role, m.name or names.get(m.tool_call_id or "", ""), intern(m.text) if m.text else -1,
                 [[c.name, json.dumps(c.arguments, ensure_ascii=False), c.id or ""] for c in m.tool_calls or ()],
                 int(span is not None and span[0] <= index < span[1])]
                for index, m in enumerate(messages) if index >= start]
        blocks.append([title, rows, " → ".join(" + ".join(step) for step in steps or [])])
    return blocks


def _turns_line(verdict: Mapping[str, Any]) -> str:
    """A per-turn verdict's turns, as 'turn 1: 3, turn 2: missing'."""
    turns = (verdict.get("detail") or {}).get("turns") or []
    shown = [f"turn {t.get('turn')}: {_judgment_text(t) if not t.get('missing') else 'missing'}" for t in turns]
    return f"; per turn ({(verdict.get('detail') or {}).get('turn_aggregate')}) " + ", ".join(shown) if shown else ""


def _verdict_line(record: Mapping[str, Any]) -> str:
    if record.get("status") == AWAITING_REVIEW:
        return "awaiting review (jurygraph review RUN_DIR)"
    if record.get("status", "ok") != "ok":
        return "failed"
    verdict = record.get("verdict") or {}
    value = verdict_value(record)
    if value is None:
        return f"missing ({verdict.get('reason') or 'no readable judgment'})" if verdict else "none"
    method = f" [{verdict['method']}]" if verdict.get("method") else ""
    scores = "" if verdict.get("score_1") is None else f" ({verdict['score_1']:g} vs {verdict['score_2']:g})"
    return f"{value}{scores}{method}{_turns_line(verdict)}{_decision(verdict)}"


def _decision(verdict: Mapping[str, Any]) -> str:
    """Who decided, when not the panel: ' · reviewed by ada: note', ' · escalated (agreement<1)'."""
    detail = verdict.get("detail") or {}
    review, escalation = detail.get("review") or {}, detail.get("escalation") or {}
    if review:
        note = f": {review['note']}" if review.get("note") else ""
        return (f" · reviewed by {review.get('reviewer')}{note} (the panel said "
                f"{_judgment_text(review.get('panel_verdict'))})")
    if escalation:
        return (f" · escalated ({', '.join(escalation.get('triggered_by') or [])}; the panel said "
                f"{_judgment_text(escalation.get('panel'))})")
    return ""


def page_data(runs: Sequence[RunInput]) -> dict[str, Any]:
    """Everything the item browser shows, as compact JSON: items are rows of run cells, texts are indices."""
    intern = Strings()
    flipped: list[set[str]] = [set() for _ in runs]
    for indices, bias in _biases(runs):
        for k in indices:
            flipped[k] |= set(bias.flipped_ids)
    order: dict[str, dict[int, dict[str, Any]]] = {}
    for k, run in enumerate(runs):
        for record in run.records:  # the last record of an id wins, as in metaeval (a resumed run)
            order.setdefault(str(record.get("id")), {})[k] = record
    items = []
    for item_id, by_run in order.items():
        values = {comparable(r, is_reversed(runs[k].manifest)) for k, r in by_run.items()} - {None}
        cells: list[Any] = []
        fields: list[list[Any]] = []
        messages: list[Any] | None = None
        for k, run in enumerate(runs):
            found = by_run.get(k)
            if found is None:
                cells.append(None)
                continue
            view = run.views.get(item_id)
            item = (view or {}).get("item") or {}
            if not fields:
                fields = [[name, intern(item[name])] for name in ITEM_FIELDS if item.get(name) not in (None, "", [])]
            if messages is None:
                messages = dialogue(item, intern)
            tags = outcomes(found) + (["flipped"] if item_id in flipped[k] else []) + \
                (["split"] if len(values) > 1 else [])
            shown = "failed" if "failed" in tags else "awaiting review" if "awaiting" in tags else "missing"
            cells.append([verdict_value(found) or shown,
                          human_value(found) or "", " ".join(tags), conversation(view, found, intern)])
        items.append([item_id, fields, cells, messages or 0])
    return {"strings": intern.table, "runs": [run.name for run in runs], "outcomes": list(OUTCOMES),
            "items": items}


# --- static sections ------------------------------------------------------------------------------------------


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def table_html(table: Table) -> str:
    head = "".join(f"<th>{_e(c)}</th>" for c in table.flat_columns())
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in table.rows)
    notes = "".join(f"<p class='note'>{_e(n)}</p>" for n in table.notes)
    return f"<table><caption>{_e(table.title)}</caption><tr>{head}</tr>{body}</table>{notes}"


def _png(data: bytes, alt: str) -> str:
    return f"<img alt='{_e(alt)}' src='data:image/png;base64,{base64.b64encode(data).decode()}'>"


def _number(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}"


def _wall_time(manifest: Mapping[str, Any]) -> str:
    try:
        seconds = (datetime.fromisoformat(manifest["ended"]) - datetime.fromisoformat(manifest["started"]))
        return f"{seconds.total_seconds():.1f} s"
    except (KeyError, TypeError, ValueError):
        counts = manifest.get("counts") or {}
        return f"{counts['seconds']:.1f} s" if counts.get("seconds") is not None else "–"


def summary_html(run: RunInput) -> str:
    """Protocol and its diagram, models per agent, counts, requests, tokens, cost and wall time."""
    manifest = run.manifest
    counts = manifest.get("counts") or {}
    params = {k: v for k, v in (manifest.get("parameters") or {}).items() if v is not None and k != "protocol"}
    records = run.records
    failed = sum(1 for r in records if r.get("status", "ok") not in ("ok", AWAITING_REVIEW))
    waiting = sum(1 for r in records if r.get("status") == AWAITING_REVIEW)
    missing = sum(1 for r in records if "missing" in outcomes(r))
    cost = counts.get("cost_usd")
    facts = [
        ("protocol", manifest.get("protocol") or "–"),
        ("parameters", ", ".join(f"{k}={v}" for k, v in params.items()) or "–"),
        ("dataset", f"{(manifest.get('dataset') or {}).get('name') or '–'}"
                    + (" (answers reversed)" if is_reversed(manifest) else "")),
        ("items", f"{len(records) - failed - waiting} done, {failed} failed, {missing} missing verdicts"
                  + (f", {waiting} awaiting review" if waiting else "")),
        ("missing judgments", _number(sum(int(r.get("n_missing") or 0) for r in records))),
        ("requests", _number(counts.get("requests"))),
        ("tokens", f"{_number(counts.get('input_tokens'))} in + {_number(counts.get('output_tokens'))} out"),
        ("estimated cost", f"${cost:.4f}" if cost else "– (no price known for these models)"),
        ("wall time", _wall_time(manifest)),
    ]
    rows = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in facts)
    agents = manifest.get("usage_by_agent") or {}
    models = "".join(f"<tr><td>{_e(agent)}</td><td>{_e(u.get('role') or '')}</td><td>{_e(u.get('model') or '')}</td>"
                     f"<td>{_number(u.get('requests'))}</td><td>{_number(u.get('input_tokens'))}</td>"
                     f"<td>{_number(u.get('output_tokens'))}</td></tr>" for agent, u in agents.items())
    if not models:
        models = "".join(f"<tr><td>{_e(a)}</td><td></td><td>{_e(m)}</td><td></td><td></td><td></td></tr>"
                         for a, m in (manifest.get("models") or {}).items())
    if run.diagram_png:
        diagram = _png(run.diagram_png, f"{manifest.get('protocol')} graph")
    elif run.diagram_text:
        diagram = f"<pre class='diagram'>{_e(run.diagram_text)}</pre>"
    else:
        diagram = "<p class='note'>no diagram (the protocol could not be rebuilt from the manifest)</p>"
    return (f"<section class='run'><h3>{_e(run.name)} <small>{_e(run.path)}</small></h3><div class='cols'>"
            f"<div><table class='facts'>{rows}</table><table><caption>models per agent</caption><tr><th>agent</th>"
            f"<th>role</th><th>model</th><th>requests</th><th>input tokens</th><th>output tokens</th></tr>{models}"
            f"</table></div><figure class='diagram'>{diagram}<figcaption>the protocol's graph "
            f"(as <code>jurygraph draw</code> draws it)</figcaption></figure></div></section>")


def spend_html(runs: Sequence[RunInput]) -> str:
    """Spend per invocation: each ``jurygraph eval`` on the run directory (a resume, a pilot, one killed before its
    end) with the items it finished, the calls it paid, their HTTP attempts, tokens, USD and wall time, then the
    run's totals; the budget's limits, the items it held back and any overrun. From the manifest (its figures are
    the spend ledger's), so an invocation killed half-way shows what it paid too."""
    blocks = []
    for run in runs:
        manifest = RunManifest.model_validate(dict(run.manifest))
        if not manifest.invocations:
            continue
        rows = []
        for number, invocation in enumerate(manifest.invocations, start=1):
            counts, spend = invocation.counts, invocation.spend
            if invocation.ended is None and number < len(manifest.invocations):
                how = "killed (no end recorded)"
            else:
                how = invocation.stopped or invocation.aborted or ("interrupted" if counts and counts.interrupted
                                                                   else "finished")
            rows.append([f"{number}{' (resume)' if invocation.resume else ''}", (invocation.at or "")[:19],
                         _number(counts.done) if counts else "–", _number(spend.requests) if spend else "–",
                         _number(counts.attempts) if counts else "–",
                         f"{_number(spend.input_tokens)} + {_number(spend.output_tokens)}" if spend else "–",
                         _usd(spend.cost_usd) if spend else "–",
                         f"{counts.seconds:.1f} s" if counts else "–", how])
        total = manifest.counts
        rows.append(["run", "", _number(total.done), _number(total.requests), _number(total.attempts),
                     f"{_number(total.input_tokens)} + {_number(total.output_tokens)}", _usd(total.cost_usd),
                     f"{total.seconds:.1f} s", manifest.stopped or "–"])
        notes = ["Requests, tokens and USD are the spend ledger's: every paid call, recorded before its answer was "
                 "used (an invocation killed before its end included); USD at the prices of the time, – where no "
                 "model had a price; attempts are the HTTP requests sent, retries included."]
        budget = manifest.budget
        if budget is not None:
            limits = [f"--max-cost {budget.max_cost_usd:g}"] if budget.max_cost_usd is not None else []
            limits += [f"--max-total-tokens {budget.max_total_tokens:,}"] if budget.max_total_tokens else []
            notes.append(f"budget: {' and '.join(limits) or 'none'}"
                         + (f"; over it by {budget.overrun}" if budget.overrun else "; within it"))
            notes += [f"held back: {item} ({why})" for item, why in list(budget.held_back.items())[:10]]
        table = Table(f"{run.name}: spend per invocation", ["invocation", "started (UTC)", "items done", "requests",
                                                             "attempts", "tokens (in + out)", "USD", "wall time",
                                                             "ended"], rows, notes=notes)
        blocks.append(table_html(table))
    if not blocks:
        return ""
    return "<section id='spend'><h2>Spend per invocation</h2>" + "".join(blocks) + "</section>"


def _usd(value: float | None) -> str:
    return "–" if value is None else f"${value:,.4f}"


def _figures(methods: Sequence[MethodResult]) -> list[str]:
    """The metaeval plots, as inline PNGs (none when matplotlib is not installed)."""
    try:
        from jurygraph.measuring import plots
    except ImportError:
        return []
    scored = [m for m in methods if m.aspects]
    jobs: list[tuple[str, Callable[[Path], Path]]] = []
    if scored:
        jobs.append(("correlation per aspect", partial(plots.plot_aspect_bars, scored)))
        jobs += [(f"score distribution, {m.name}", partial(plots.plot_score_distribution, m)) for m in scored]
    jobs += [(f"confusion matrix, {m.name}", partial(plots.plot_confusion, m))
             for m in methods if m.labels is not None and m.labels.n]
    out = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for k, (alt, draw) in enumerate(jobs):
                out.append(_png(draw(Path(tmp) / f"{k}.png").read_bytes(), alt))
    except ImportError:  # matplotlib missing: plots._pyplot says so; the tables still stand
        return []
    return out


def agreement_html(methods: Sequence[MethodResult]) -> str:
    scored = [m for m in methods if m.aspects]
    labelled = [m for m in methods if m.labels is not None]
    if not scored and not labelled:
        return "<p class='note'>No human labels in these runs: nothing to compare the verdicts with.</p>"
    parts = []
    # one correlation table per benchmark and level: runs on different data are not one table's rows
    benches: dict[tuple[str | None, str], list[MethodResult]] = {}
    for method in scored:
        level = next(iter(method.aspects.values())).level
        benches.setdefault((method.dataset, level), []).append(method)
    parts += [table_html(correlation_table(group)) for group in benches.values()]
    if labelled:
        parts.append(table_html(label_table(labelled)))
    parts.append(table_html(detail_table(methods)))
    figures = [figure for group in benches.values() for figure in _figures(group)]
    figures += _figures([m for m in labelled if not m.aspects])
    parts.append(f"<div class='figures'>{''.join(figures)}</div>" if figures else
                 "<p class='note'>figures need matplotlib: pip install 'jurygraph[plots]'</p>")
    return "".join(parts)


def _bars_svg(bias: PositionBias) -> str:
    """First / second / tie shares of the verdicts as one stacked bar."""
    total = bias.first + bias.second + bias.ties
    if not total:
        return ""
    parts, x = [], 0.0
    for label, count, colour in (("first", bias.first, "#6c5ce7"), ("second", bias.second, "#00b894"),
                                 ("tie", bias.ties, "#b2bec3")):
        width = 400 * count / total
        if width:
            parts.append(f"<rect x='{x:.1f}' y='0' width='{width:.1f}' height='22' fill='{colour}'>"
                         f"<title>{label}: {count}</title></rect>")
            if width > 60:
                parts.append(f"<text x='{x + 4:.1f}' y='15' fill='white' font-size='12'>{label} "
                             f"{100 * count / total:.0f}%</text>")
        x += width
    return (f"<p>{_e(bias.name)}: verdicts by the position the judge saw</p>"
            f"<svg width='400' height='22' role='img'>{''.join(parts)}</svg>")


def _biases(runs: Sequence[RunInput]) -> list[tuple[list[int], PositionBias]]:
    return run_biases([r.name for r in runs], [r.records for r in runs], [r.manifest for r in runs])


def position_html(runs: Sequence[RunInput]) -> str:
    biases = [bias for _, bias in _biases(runs)]
    if not biases:
        return ""
    return ("<section id='position'><h2>Position bias</h2>" + table_html(position_table(biases))
            + "".join(_bars_svg(b) for b in biases) + "</section>")


def comparison_html(runs: Sequence[RunInput]) -> str:
    """How often each two runs give the same verdict on the items both judged (original answer order)."""
    if len(runs) < 2:
        return ""
    values = [{str(r.get("id")): comparable(r, is_reversed(run.manifest)) for r in run.records} for run in runs]
    names = [run.name for run in runs]
    rows = []
    for i, name in enumerate(names):
        cells = [name]
        for j in range(len(names)):
            both = [k for k in values[i] if values[i][k] is not None and values[j].get(k) is not None]
            same = sum(1 for k in both if values[i][k] == values[j][k])
            cells.append(f"{100 * same / len(both):.1f}% of {len(both)}" if both else "–")
        rows.append(cells)
    split = len({k for k in set().union(*values) if len({v.get(k) for v in values} - {None}) > 1})
    table = Table("Same verdict (items both judged)", ["Method", *names], rows,
                  notes=[f"{split} items where the methods disagree: filter the item browser by 'methods disagree'"])
    return "<section id='comparison'><h2>Comparison</h2>" + table_html(table) + "</section>"


# --- panel diagnostics (docs/PANEL.md): does the panel earn its cost? ----------------------------------------------


def panel_html(runs: Sequence[RunInput], *, resamples: int = 1000, seed: int = 0) -> str:
    """Each run's panel diagnostics as ``jurygraph metaeval`` computes them (:mod:`jurygraph.measuring.panel`, on the
    panel's own verdicts, before any escalation or review): each member's agreement beside the panel's, the panel
    minus the best member, the members' error correlation and the effective number of judges, conformity between
    rounds, each member's position consistency, and the same-family warning. Empty when no run's verdict combines
    several judges."""
    names = [run.name for run in runs]
    records = [panel_records(list(run.records)) for run in runs]
    by_run = member_position(names, records, [run.manifest for run in runs], [run.panel for run in runs])
    parts, warnings = [], []
    for k, run in enumerate(runs):
        verdict = evaluate_records(records[k], run.name, resamples=resamples, seed=seed)
        for panel in panel_diagnostics(run.name, records[k], verdict, resamples=resamples, seed=seed,
                                       panel=run.panel):
            if panel.target == "pairwise":
                panel.position = by_run.get(k, [])
            parts.append(_panel_block(panel))
        systems = {str(r.get("id")): (str(r["systems"][0]), str(r["systems"][1])) for r in records[k]
                   if r.get("task") == "pairwise" and isinstance(r.get("systems"), list) and len(r["systems"]) == 2}
        if systems:
            warnings += same_family(run.name, records[k], systems, panel=run.panel)
    if not parts:
        return ""
    tables = "".join(f"<div class='family'>{table_html(table)}</div>" for _, table in family_tables(warnings))
    return (f"<section id='panel'><h2>Panel diagnostics</h2><p class='note'>Does the panel beat its best member, and "
            f"are its members independent? The panel's own verdicts, before any escalation or review "
            f"(docs/PANEL.md).</p>{''.join(parts)}{tables}</section>")


def _panel_block(panel: Panel) -> str:
    best, errors = panel.vs_best, panel.errors
    figures = {"run": panel.name, "target": panel.target, "statistic": panel.statistic,
               "members": " | ".join(m.name for m in panel.members)}
    if best is not None:
        figures.update({"best": best.best, "vs-best": _figure(best.test.difference)})
    if errors is not None:
        figures["effective"] = _figure(errors.effective)
    data = "".join(f" data-{key}='{_e(value)}'" for key, value in figures.items())
    return (f"<div class='panel-diagnostics'{data}><h3>{_e(panel.name)} <small>{_e(panel.target)}</small></h3>"
            + "".join(table_html(table) for _, table in panel_tables(panel)) + "</div>")


def _figure(value: float | None) -> str:
    """A computed figure as the page keeps it for a reader or a test (full precision; '' when not a number)."""
    return "" if value is None or math.isnan(value) else repr(float(value))


# --- the doubt signals' coverage–agreement curves (docs/DOUBT.md) -------------------------------------------------

_CURVE_COLOURS = ("#6c5ce7", "#00b894", "#e17055", "#0984e3", "#fdcb6e", "#636e72")


def doubt_html(runs: Sequence[RunInput]) -> str:
    """Each run's coverage–agreement curves (:func:`~jurygraph.measuring.coverage.doubt_reports`, as ``jurygraph
    metaeval`` prints them): for each doubt signal, what share of the items a threshold leaves to the panel and the
    panel's agreement with humans on them, drawn and tabled. Empty when no run's results carry doubt signals."""
    parts = [f"<div class='doubt-curves' data-run='{_e(report.name)}' data-target='{_e(report.target)}'>"
             f"<h3>{_e(report.name)} <small>{_e(report.target)} ({_e(report.statistic)})</small></h3>"
             f"{_curves_svg(report)}{table_html(coverage_tables(report)[0][1])}</div>"
             for run in runs for report in doubt_reports(run.name, run.records)]
    if not parts:
        return ""
    return ("<section id='doubt'><h2>Doubt signals</h2><p class='note'>Where to set an escalation's or a review's "
            "threshold: each point is a rule (<code>--escalate-when</code> / <code>--review-when</code>), the share "
            "of the items it leaves to the panel, and the panel's agreement with humans on them (docs/DOUBT.md)."
            f"</p>{''.join(parts)}</section>")


def _curves_svg(report: DoubtReport, width: int = 440, height: int = 250) -> str:
    """The curves on one chart: coverage (x, 0 to 1) against agreement (y), a line and dots per signal."""
    left, right, top, bottom = 46, 130, 10, 36
    values = [p.agreement for c in report.curves for p in c.points if not math.isnan(p.agreement)]
    low = min(0.0, math.floor(min(values, default=0.0) * 10) / 10)
    plot_w, plot_h = width - left - right, height - top - bottom

    def x(coverage: float) -> float:
        return left + coverage * plot_w

    def y(agreement: float) -> float:
        return top + (1 - (agreement - low) / (1 - low)) * plot_h

    parts = [f"<line x1='{left}' y1='{top + plot_h}' x2='{left + plot_w}' y2='{top + plot_h}' stroke='#888'/>",
             f"<line x1='{left}' y1='{top}' x2='{left}' y2='{top + plot_h}' stroke='#888'/>"]
    for tick in (0, 0.25, 0.5, 0.75, 1):
        parts.append(f"<text x='{x(tick):.1f}' y='{top + plot_h + 14}' font-size='10' text-anchor='middle'>"
                     f"{tick:g}</text>")
    for k in range(5):
        tick = low + (1 - low) * k / 4
        parts.append(f"<text x='{left - 4}' y='{y(tick) + 3:.1f}' font-size='10' text-anchor='end'>{tick:.2f}</text>")
    parts.append(f"<text x='{left + plot_w / 2:.1f}' y='{height - 4}' font-size='11' text-anchor='middle'>coverage "
                 "(share of items left to the panel)</text>")
    parts.append(f"<text x='12' y='{top + plot_h / 2:.1f}' font-size='11' text-anchor='middle' "
                 f"transform='rotate(-90 12 {top + plot_h / 2:.1f})'>{_e(report.statistic)}</text>")
    for k, curve in enumerate(report.curves):
        colour = _CURVE_COLOURS[k % len(_CURVE_COLOURS)]
        shown = sorted((p for p in curve.points if not math.isnan(p.agreement)), key=lambda p: p.coverage)
        line = " ".join(f"{x(p.coverage):.1f},{y(p.agreement):.1f}" for p in shown)
        parts.append(f"<g class='curve' data-signal='{_e(curve.signal)}'><polyline points='{line}' fill='none' "
                     f"stroke='{colour}' stroke-width='2'/>")
        for p in shown:
            rule = p.rule or "no rule: every item"
            parts.append(f"<circle cx='{x(p.coverage):.1f}' cy='{y(p.agreement):.1f}' r='3.5' fill='{colour}' "
                         f"data-rule='{_e(p.rule or '')}' data-kept='{p.kept}' data-coverage='{_figure(p.coverage)}' "
                         f"data-agreement='{_figure(p.agreement)}'><title>{_e(curve.signal)}: {_e(rule)}; kept "
                         f"{p.kept}, coverage {p.coverage:.3f}, {_e(report.statistic)} {p.agreement:.3f}</title>"
                         "</circle>")
        parts.append("</g>")
        ly = top + 12 + 16 * k
        parts.append(f"<rect x='{width - right + 12}' y='{ly - 8}' width='10' height='10' fill='{colour}'/>"
                     f"<text x='{width - right + 26}' y='{ly + 1}' font-size='11'>{_e(curve.signal)} "
                     f"(n {curve.n})</text>")
    return (f"<svg class='curves' width='{width}' height='{height}' role='img' aria-label='coverage–agreement "
            f"curves of {_e(report.name)}'>{''.join(parts)}</svg>")


# --- decided by: the panel, an escalation or a person ---------------------------------------------------------------

DECISIONS_SHOWN = 500  # rows of a run's decisions table: a large run's page stays quick to open


def decided_html(runs: Sequence[RunInput]) -> str:
    """Who decided each item of the runs that escalate or ask a person: the split of the finished items by who
    decided them with each group's agreement with humans and the panel's on the same items
    (:mod:`jurygraph.measuring.coverage`), then every item an escalation or a person decided, or that waits for a
    person: the panel's verdict, the final one, the human label, what sent it there, and the reviewer's name and note.
    Empty when no run escalated or paused an item."""
    parts = [_decided_block(run) for run in runs]
    if not any(parts):
        return ""
    return ("<section id='decided'><h2>Decided by</h2><p class='note'>The panel decides an item unless a doubt "
            "condition sent it to a stronger judge (escalation) or to a person (review).</p>"
            f"{''.join(parts)}</section>")


def _decided_block(run: RunInput) -> str:
    conditions = (run.manifest.get("parameters") or {}).get("review_when")
    review_when = parse_conditions(conditions) if conditions else []
    rows = []
    for record in latest_records(run.records):
        verdict = record.get("verdict") or {}
        detail = verdict.get("detail") or {}
        escalation, review = detail.get("escalation") or {}, detail.get("review") or {}
        waiting = record.get("status") == AWAITING_REVIEW
        if not (escalation or review or waiting):
            continue
        signals = record.get("doubt") if isinstance(record.get("doubt"), Mapping) else {}
        why = [f"escalate: {text}" for text in escalation.get("triggered_by") or []]
        if review or waiting:
            why += [f"review: {text}" for text in triggered(review_when, signals or {})]
        who = "awaiting review" if waiting else decided_by(verdict)
        final = "" if waiting else _judgment_text(verdict)
        item_id = str(record.get("id"))
        cells = [f"<a href='#item={_e(item_id)}' data-item='{_e(item_id)}'>{_e(item_id)}</a>", _e(who),
                 _e(", ".join(why)), _e(_judgment_text(panel_verdict(record))),
                 _e(_judgment_text(escalation.get("escalated")) if escalation else ""), _e(final),
                 _e(human_value(record) or ""), _e(review.get("reviewer") or ""), _e(review.get("note") or ""),
                 _e(review.get("at") or "")]
        rows.append(f"<tr data-id='{_e(item_id)}' data-decided-by='{_e(who)}'>"
                    + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>")
    if not rows:
        return ""
    more = len(rows) - DECISIONS_SHOWN
    rows = rows[:DECISIONS_SHOWN]
    note = f"<p class='note'>and {more} more: each item's conversation says who decided it</p>" if more > 0 else ""
    splits = "".join(table_html(coverage_tables(report)[1][1]) for report in doubt_reports(run.name, run.records)
                     if report.split)
    head = "".join(f"<th>{_e(c)}</th>" for c in ("item", "decided by", "sent there by", "panel verdict",
                                                   "escalated verdict", "final verdict", "human", "reviewer", "note",
                                                   "reviewed at"))
    return (f"<div class='decided' data-run='{_e(run.name)}'><h3>{_e(run.name)}</h3>{splits}<table class='decisions'>"
            f"<caption>items an escalation or a person decided, or that wait for a person</caption><tr>{head}</tr>"
            f"{''.join(rows)}</table>{note}</div>")


def build_report(runs: Sequence[RunInput], *, title: str | None = None, resamples: int = 1000,
                 seed: int = 0) -> str:
    """The page, as one HTML string."""
    methods = [evaluate_records(run.records, run.name, resamples=resamples, seed=seed) for run in runs]
    title = title or "jurygraph report: " + ", ".join(run.name for run in runs)
    body = (f"<section id='summary'><h2>Summary</h2>{''.join(summary_html(run) for run in runs)}</section>"
            f"{spend_html(runs)}"
            f"<section id='agreement'><h2>Agreement with humans</h2>{agreement_html(methods)}</section>"
            f"{position_html(runs)}{comparison_html(runs)}"
            f"{panel_html(runs, resamples=resamples, seed=seed)}{doubt_html(runs)}{decided_html(runs)}")
    data = json.dumps(page_data(runs), ensure_ascii=False, separators=(",", ":"))
    # inside <script>, "</" would end the element early; "<\/" reads the same in JSON
    data = data.replace("</", "<\\/").replace("<!--", "<\\!--")
    template = resources.files("jurygraph.measuring").joinpath("report_page.html").read_text(encoding="utf-8")
    values = {"TITLE": _e(title), "BODY": body, "DATA": data}
    # one pass: a run's texts can never be read as a placeholder
    return re.sub(r"\{\{(TITLE|BODY|DATA)\}\}", lambda m: values[m.group(1)], template)
