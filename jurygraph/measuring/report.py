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

from jurygraph.judging.items import SWAP_LABEL, TaskKind, as_item
from jurygraph.measuring.metaeval import MethodResult, evaluate_records
from jurygraph.measuring.position import PositionBias, is_reversed, position_table, run_biases
from jurygraph.measuring.tables import Table, correlation_table, detail_table, label_table
from jurygraph.nodes.conversation import judged_span
from jurygraph.running.rundir import AWAITING_REVIEW

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
    return f"{value}{scores}{method}{_turns_line(verdict)}"


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


def build_report(runs: Sequence[RunInput], *, title: str | None = None, resamples: int = 1000,
                 seed: int = 0) -> str:
    """The page, as one HTML string."""
    methods = [evaluate_records(run.records, run.name, resamples=resamples, seed=seed) for run in runs]
    title = title or "jurygraph report: " + ", ".join(run.name for run in runs)
    body = (f"<section id='summary'><h2>Summary</h2>{''.join(summary_html(run) for run in runs)}</section>"
            f"<section id='agreement'><h2>Agreement with humans</h2>{agreement_html(methods)}</section>"
            f"{position_html(runs)}{comparison_html(runs)}")
    data = json.dumps(page_data(runs), ensure_ascii=False, separators=(",", ":"))
    # inside <script>, "</" would end the element early; "<\/" reads the same in JSON
    data = data.replace("</", "<\\/").replace("<!--", "<\\!--")
    template = resources.files("jurygraph.measuring").joinpath("report_page.html").read_text(encoding="utf-8")
    values = {"TITLE": _e(title), "BODY": body, "DATA": data}
    # one pass: a run's texts can never be read as a placeholder
    return re.sub(r"\{\{(TITLE|BODY|DATA)\}\}", lambda m: values[m.group(1)], template)
