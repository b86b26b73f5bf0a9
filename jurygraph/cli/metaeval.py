"""``jurygraph metaeval RUN_DIR...``: agreement with humans of finished runs, in the papers' tables (each run
directory, or the run directories below it, is one method). The options, the evaluation and the report are
shared with ``jurygraph bench``. ``metaeval`` adds the position bias of runs with both answer orders and, for
runs whose verdict combines several judges, the panel diagnostics (:mod:`jurygraph.measuring.panel`), and for runs
whose results carry doubt signals, each signal's coverage–agreement curve and the agreement of the items the panel,
an escalation and a person decided (:mod:`jurygraph.measuring.coverage`); ``--json`` prints all of it as one JSON
object."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jurygraph.judging.panel import PanelMembers
from jurygraph.measuring.coverage import DoubtReport, coverage_tables, doubt_json, doubt_reports, panel_records
from jurygraph.measuring.families import FAMILIES, Rule, parse_rules
from jurygraph.measuring.metaeval import (
    Level,
    MethodResult,
    evaluate_records,
    run_name,
    run_records,
    single_unit_warnings,
    turn_records,
)
from jurygraph.measuring.metrics import STATISTICS
from jurygraph.measuring.panel import (
    FamilyWarning,
    Panel,
    agreement_json,
    family_json,
    family_tables,
    member_position,
    panel_diagnostics,
    panel_json,
    panel_tables,
    position_json,
    same_family,
    targets,
)
from jurygraph.measuring.position import PositionBias, position_table, run_biases
from jurygraph.measuring.tables import (
    Table,
    comparison_table,
    correlation_table,
    detail_table,
    distribution_table,
    label_table,
    results_csv,
    votes_table,
)
from jurygraph.measuring.votes import votes_json
from jurygraph.running.rundir import CHECKPOINTS, RunManifest, read_manifest


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "method"


def report(methods: Sequence[MethodResult], out: Path | None = None, *, statistics: Sequence[str] | None = None,
           plots: bool = True, plot_statistic: str = "spearman") -> str:
    """The tables as text (returned); with ``out``, also written as text/Markdown/CSV, plus PNG plots."""
    texts: list[str] = []
    markdown: list[str] = []
    scored = [m for m in methods if m.aspects]
    labelled = [m for m in methods if m.labels is not None]
    tables = []
    if scored:
        tables.append(("table", correlation_table(scored, statistics)))
    if labelled:
        tables.append(("table" if not scored else "pairwise", label_table(labelled)))
    if any(m.votes is not None for m in labelled):
        tables.append(("votes", votes_table(labelled)))
    details = detail_table(methods)
    for _, table in [*tables, ("details", details)]:
        texts.append(table.text())
        markdown.append(table.markdown())
    if out is None:
        return "\n\n".join(texts)
    out.mkdir(parents=True, exist_ok=True)
    for name, table in [*tables, ("details", details)]:
        (out / f"{name}.csv").write_text(table.csv(), encoding="utf-8")
    (out / "table.txt").write_text("\n\n".join(texts) + "\n", encoding="utf-8")
    (out / "table.md").write_text("\n\n".join(markdown) + "\n", encoding="utf-8")
    (out / "results.csv").write_text(results_csv(methods), encoding="utf-8")
    for method in scored:
        dist = distribution_table(method)
        (out / f"distribution_{slug(method.name)}.csv").write_text(dist.csv(), encoding="utf-8")
        texts.append(dist.text())
    if plots:
        from jurygraph.measuring import plots as figures

        written = []
        if scored:
            written.append(figures.plot_aspect_bars(scored, out / f"aspects_{plot_statistic}.png", plot_statistic))
            for method in scored:
                written.append(figures.plot_score_distribution(method, out / f"distribution_{slug(method.name)}.png"))
        for method in labelled:
            written.append(figures.plot_confusion(method, out / f"confusion_{slug(method.name)}.png"))
        texts.append("plots: " + ", ".join(str(p) for p in written))
    return "\n\n".join(texts)


def common_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--level", choices=("pooled", "grouped"),
                        help="correlation level (default: SummEval grouped = summary-level, else pooled); "
                             "grouped on Topical-Chat = DEBATE's per-context average")
    parser.add_argument("--stats", help="statistics in the table, e.g. spearman,kendall (default: the paper's)")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples (default 1000; 0 = no CI)")
    parser.add_argument("--confidence", type=float, default=0.95, help="CI level (default 0.95)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    parser.add_argument("--out", help="write tables (txt, md, csv) and PNG plots to this directory")
    parser.add_argument("--no-plots", action="store_true", help="no PNG plots")
    parser.add_argument("--compare", action="append", metavar="A,B",
                        help="paired tests of method A against method B on the items both judged (repeatable)")
    parser.add_argument("--compare-stat", default="spearman", choices=("pearson", "spearman", "kendall"),
                        help="statistic the paired tests compare (default spearman)")


def add_arguments(meta: argparse.ArgumentParser) -> None:
    meta.add_argument("run_dir", nargs="+", help="run directories; each is one method (NAME=DIR to name it)")
    common_options(meta)
    meta.add_argument("--json", action="store_true",
                      help="print everything (agreement, position bias, panel diagnostics) as one JSON object "
                           "(with --out, also OUT/metaeval.json)")
    meta.add_argument("--vote-judges", metavar="PREFIX",
                      help="items with several people's votes (MT-Bench): count only the votes of judges whose name "
                           "starts with PREFIX, e.g. expert (FastChat's compute_agreement.py; default: every vote)")
    meta.add_argument("--no-panel", action="store_true",
                      help="skip the panel diagnostics (members, error correlation, conformity, same family)")
    meta.add_argument("--per-turn", action="store_true",
                      help="a --per-turn run: measure each turn's verdict against the turn's human label "
                           "(human.turns: {\"2\": 4, ...}) instead of the conversation's verdict")
    meta.add_argument("--family", action="append", metavar="NAME=REGEX",
                      help="a model family rule checked before the built-in ones, e.g. 'Acme=acme-|ourbot' "
                           "(repeatable; the same-family warning)")
    meta.set_defaults(handler=cmd_metaeval)


def evaluate(named_records: Sequence[tuple[str, list[dict[str, Any]]]],
              args: argparse.Namespace) -> list[MethodResult]:
    level: Level | None = args.level
    return [evaluate_records(records, name, level=level, resamples=args.resamples, confidence=args.confidence,
                             seed=args.seed, vote_judges=getattr(args, "vote_judges", None))
            for name, records in named_records]


def check(methods: Sequence[MethodResult], args: argparse.Namespace) -> list[str] | None:
    """The options' statistics (None: the paper's); a ValueError for an unknown one, a run without records."""
    for method in methods:
        if not method.aspects and method.labels is None:
            raise ValueError(f"{method.name}: no scored or labelled records")
    statistics = [s.strip() for s in args.stats.split(",")] if args.stats else None
    unknown = [s for s in statistics or [] if s not in STATISTICS]
    if unknown:
        raise ValueError(f"--stats: unknown {', '.join(unknown)}; choose from {', '.join(STATISTICS)}")
    return statistics


def comparisons(methods: Sequence[MethodResult], args: argparse.Namespace) -> list[tuple[str, str]]:
    """The ``--compare A,B`` pairs, each checked against the methods' names."""
    known = list(dict.fromkeys(m.name for m in methods))  # in the order given, for the error message
    pairs = []
    for pair in args.compare or []:
        names = [n.strip() for n in pair.split(",")]
        if len(names) != 2 or any(n not in known for n in names):
            raise ValueError(f"--compare {pair!r}: give two method names out of {', '.join(known)}")
        pairs.append((names[0], names[1]))
    return pairs


def comparison_tables(methods: Sequence[MethodResult], pairs: Sequence[tuple[str, str]],
                      args: argparse.Namespace) -> list[tuple[str, str, Table]]:
    """The paired tests of each ``--compare`` pair (A, B, its table)."""
    by_name = {m.name: m for m in methods}
    return [(a, b, comparison_table(by_name[a], by_name[b], args.compare_stat, resamples=args.resamples or 1000,
                                    seed=args.seed)) for a, b in pairs]


def finish(methods: list[MethodResult], args: argparse.Namespace,
           pairs: Sequence[tuple[str, str]] | None = None) -> int:
    """Print (and with ``--out``, write) the tables; ``pairs``: the :func:`comparisons`, when already read."""
    statistics = check(methods, args)
    pairs = comparisons(methods, args) if pairs is None else pairs
    out = Path(args.out) if args.out else None
    for method in methods:
        for line in single_unit_warnings(method) if args.resamples else []:
            print(f"jurygraph: warning: {line}", file=sys.stderr)
    print(report(methods, out, statistics=statistics, plots=bool(args.out) and not args.no_plots))
    for k, (a, b, table) in enumerate(comparison_tables(methods, pairs, args)):
        print("\n" + table.text())
        if out is not None:
            (out / f"compare_{k + 1}_{slug(a)}_vs_{slug(b)}.csv").write_text(table.csv(), encoding="utf-8")
    return 0


def run_systems(path: str, records: Sequence[dict[str, Any]],
                manifest: dict[str, Any] | None) -> dict[str, tuple[str, str]]:
    """The systems each pairwise item names: from its results line (``systems``), or for runs written before
    results kept them, from the run's checkpoints (none when it has none). ``manifest``: the run's, as
    :func:`read_runs` read it."""
    found = {str(r["id"]): (str(r["systems"][0]), str(r["systems"][1])) for r in records
             if r.get("task") == "pairwise" and isinstance(r.get("systems"), list) and len(r["systems"]) == 2}
    ids = [str(r.get("id")) for r in records if r.get("task") == "pairwise" and str(r.get("id")) not in found]
    if not ids or manifest is None or not (Path(path) / CHECKPOINTS).is_file():
        return found
    from jurygraph.cli.show import item_systems  # LangGraph's checkpoint reader: only when there is one to read

    return {**found, **item_systems(path, ids)}


def diagnose(named: Sequence[tuple[str, list[dict[str, Any]]]], paths: Sequence[str], methods: Sequence[MethodResult],
             manifests: Sequence[dict[str, Any] | None], rules: Rule,
             args: argparse.Namespace) -> tuple[list[Panel], list[FamilyWarning]]:
    """Every run's panel diagnostics (each member's position bias on its run's pairwise panel) and the
    same-family warnings under the family ``rules``."""
    if args.no_panel:
        return [], []
    panels: list[Panel] = []
    warnings: list[FamilyWarning] = []
    names, records = [n for n, _ in named], [r for _, r in named]
    readings = panels_of(manifests, records)
    by_run = member_position(names, records, manifests, readings)
    for k, ((name, run), method) in enumerate(zip(named, methods, strict=True)):
        found = panel_diagnostics(name, run, method, statistic=args.compare_stat, level=args.level,
                                  resamples=args.resamples, confidence=args.confidence, seed=args.seed,
                                  panel=readings[k])
        for panel in found:
            if panel.target == "pairwise":
                panel.position = by_run.get(k, [])
        panels += found
        systems = run_systems(paths[k], run, manifests[k])
        if systems:
            warnings += same_family(name, run, systems, rules, readings[k])
    return panels, warnings


def panels_of(manifests: Sequence[dict[str, Any] | None],
              records: Sequence[Sequence[dict[str, Any]]] | None = None) -> list[PanelMembers | None]:
    """Each run's protocol's reading of its panel members (its spec's, :mod:`jurygraph.graphs.spec`); None for a
    run that names no protocol, or whose protocol cannot be found here: then every agent with a judgment is a
    member, and a warning says so when the run's ``records`` have judgments to read."""
    if not any((manifest or {}).get("protocol") for manifest in manifests):
        return [None] * len(manifests)
    from jurygraph.graphs.registry import UnknownProtocol, find  # the protocols' graphs: only when a run names one

    found: list[PanelMembers | None] = []
    for k, manifest in enumerate(manifests):
        name = (manifest or {}).get("protocol")
        try:
            found.append(find(str(name)).panel if name else None)
        except (UnknownProtocol, ValueError) as err:
            if records is None or any(record.get("judgments") for record in records[k]):
                print(f"jurygraph: warning: {err}: its panel's members are read as every agent with a judgment",
                      file=sys.stderr)
            found.append(None)
    return found


def as_json(methods: Sequence[MethodResult], pairs: Sequence[tuple[str, str]], biases: Sequence[PositionBias],
            panels: Sequence[Panel], warnings: Sequence[FamilyWarning], rules: Rule, args: argparse.Namespace,
            doubts: Sequence[DoubtReport] = ()) -> dict[str, Any]:
    return {
        "methods": [{"name": m.name, "dataset": m.dataset,
                     "agreement": {t: agreement_json(m, t) for t in targets(m)},
                     **({"human_votes": votes_json(m.votes)} if m.votes is not None else {})} for m in methods],
        "position": [position_json(b) for b in biases],
        "comparisons": [{"a": a, "b": b, "columns": table.columns, "rows": table.rows}
                        for a, b, table in comparison_tables(methods, pairs, args)],
        "panels": [panel_json(p) for p in panels],
        "doubt": [doubt_json(d) for d in doubts],
        "same_family": [family_json(w) for w in warnings],
        "family_rule": [{"family": f, "pattern": p} for f, p in rules],
    }


def totals_table(names: Sequence[str], manifests: Sequence[dict[str, Any] | None]) -> Table | None:
    """What each run judged and paid over every invocation (its manifest's totals), beside its agreement."""
    rows = []
    for name, data in zip(names, manifests, strict=True):
        if data is None:
            continue
        totals = RunManifest.model_validate(data).totals()
        cost = "–" if totals["cost_usd"] is None else f"{totals['cost_usd']:.4f}"
        rows.append([name, f"{totals['done']} of {totals['items'] if totals['items'] is not None else '?'}",
                     f"{totals['requests']:,}", f"{totals['attempts']:,}",
                     f"{totals['input_tokens']:,} + {totals['output_tokens']:,}", cost, f"{totals['seconds']:.1f}",
                     str(totals["invocations"])])
    if not rows:
        return None
    return Table("What each run judged and paid (over every invocation)", ["Method", "Items done", "Requests",
                 "HTTP attempts", "Tokens (in + out)", "USD", "Seconds", "Invocations"], rows,
                 notes=["USD: – where no model of the run has a price"])


def read_runs(entries: Sequence[str]) -> tuple[list[tuple[str, list[dict[str, Any]]]], list[str],
                                                list[dict[str, Any] | None]]:
    """``RUN_DIR`` or ``NAME=RUN_DIR`` arguments: each run's (name, records), its path and its manifest."""
    named, paths, manifests = [], [], []
    for entry in entries:
        name, sep, path = entry.partition("=")
        if not sep:
            name, path = run_name(entry), entry
        named.append((name, run_records(path)))
        paths.append(path)
        manifests.append(read_manifest(path))
    return named, paths, manifests


def cmd_metaeval(args: argparse.Namespace) -> int:
    named, paths, manifests = read_runs(args.run_dir)
    if args.per_turn:
        named = [(name, turn_records(records)) for name, records in named]
        for name, records in named:
            if not records:
                raise ValueError(f"{name}: --per-turn needs a run judged with --per-turn (its verdicts' turns)")
    rules = [*parse_rules(args.family), *FAMILIES]  # a bad rule fails before any work
    methods = evaluate(named, args)
    check(methods, args)
    pairs = comparisons(methods, args)  # a bad --compare fails before the panel's bootstraps
    # the panel's position bias and diagnostics are its own verdicts', before any escalation or review
    panel_named = [(name, panel_records(records)) for name, records in named]
    panel_methods = [m if panel is records else evaluate([(name, panel)], args)[0]
                     for m, (name, records), (_, panel) in zip(methods, named, panel_named, strict=True)]
    biases = [bias for _, bias in run_biases([n for n, _ in named], [r for _, r in panel_named], manifests)]
    panels, warnings = diagnose(panel_named, paths, panel_methods, manifests, rules, args)
    doubts = [report for name, records in named for report in doubt_reports(name, records, args.compare_stat)]
    for warning in warnings:
        print(f"jurygraph: warning: {warning.run}: {warning.member} ({warning.model}) is of the family of "
              f"{warning.system} ({warning.family}), a system it judges", file=sys.stderr)
    totals = totals_table([name for name, _ in named], manifests)
    if args.json:
        data = as_json(methods, pairs, biases, panels, warnings, rules, args, doubts)
        data["runs"] = [{"name": name, "path": path, "totals": RunManifest.model_validate(m).totals()}
                        for (name, _), path, m in zip(named, paths, manifests, strict=True) if m is not None]
        text = json.dumps(data, indent=2, ensure_ascii=False)
        print(text)
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / "metaeval.json").write_text(text + "\n", encoding="utf-8")
        return 0
    code = finish(methods, args, pairs)
    out = Path(args.out) if args.out else None
    sections = []
    if biases:
        sections.append(("position", position_table(biases)))
    for panel in panels:
        sections += [(f"panel_{slug(panel.name)}_{slug(panel.target)}_{kind}", table)
                     for kind, table in panel_tables(panel)]
    sections += family_tables(warnings, rules)
    for report in doubts:
        sections += [(f"{kind}_{slug(report.name)}_{slug(report.target)}", table)
                     for kind, table in coverage_tables(report)]
    if totals is not None:
        sections.append(("totals", totals))
    for name, table in sections:
        print("\n" + table.text())
        if out is not None:
            (out / f"{name}.csv").write_text(table.csv(), encoding="utf-8")
    return code
