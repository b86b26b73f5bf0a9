"""``jurygraph metaeval RUN_DIR...``: agreement with humans of finished runs, in the papers' tables (each run
directory, or the run directories below it, is one method). The options, the evaluation and the report are
shared with ``jurygraph bench``."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jurygraph.measuring.metaeval import (
    Level,
    MethodResult,
    evaluate_records,
    run_name,
    run_records,
    single_unit_warnings,
)
from jurygraph.measuring.metrics import STATISTICS
from jurygraph.measuring.position import position_table, run_biases
from jurygraph.measuring.tables import (
    comparison_table,
    correlation_table,
    detail_table,
    distribution_table,
    label_table,
    results_csv,
)
from jurygraph.running.rundir import read_manifest


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
    meta.set_defaults(handler=cmd_metaeval)



def evaluate(named_records: Sequence[tuple[str, list[dict[str, Any]]]],
              args: argparse.Namespace) -> list[MethodResult]:
    level: Level | None = args.level
    return [evaluate_records(records, name, level=level, resamples=args.resamples, confidence=args.confidence,
                             seed=args.seed) for name, records in named_records]


def finish(methods: list[MethodResult], args: argparse.Namespace) -> int:
    for method in methods:
        if not method.aspects and method.labels is None:
            print(f"jurygraph: {method.name}: no scored or labelled records", file=sys.stderr)
            return 2
    statistics = [s.strip() for s in args.stats.split(",")] if args.stats else None
    unknown = [s for s in statistics or [] if s not in STATISTICS]
    if unknown:
        raise ValueError(f"--stats: unknown {', '.join(unknown)}; choose from {', '.join(STATISTICS)}")
    out = Path(args.out) if args.out else None
    for method in methods:
        for line in single_unit_warnings(method) if args.resamples else []:
            print(f"jurygraph: warning: {line}", file=sys.stderr)
    print(report(methods, out, statistics=statistics, plots=bool(args.out) and not args.no_plots))
    by_name = {m.name: m for m in methods}
    for k, pair in enumerate(args.compare or []):
        names = [n.strip() for n in pair.split(",")]
        if len(names) != 2 or any(n not in by_name for n in names):
            raise ValueError(f"--compare {pair!r}: give two method names out of {', '.join(by_name)}")
        table = comparison_table(by_name[names[0]], by_name[names[1]], args.compare_stat,
                                 resamples=args.resamples or 1000, seed=args.seed)
        print("\n" + table.text())
        if out is not None:
            (out / f"compare_{k + 1}_{slug(names[0])}_vs_{slug(names[1])}.csv").write_text(table.csv(),
                                                                                              encoding="utf-8")
    return 0


def cmd_metaeval(args: argparse.Namespace) -> int:
    named, manifests = [], []
    for entry in args.run_dir:
        name, sep, path = entry.partition("=")
        if not sep:
            name, path = run_name(entry), entry
        named.append((name, run_records(path)))
        manifests.append(read_manifest(path))
    code = finish(evaluate(named, args), args)
    biases = [bias for _, bias in run_biases([n for n, _ in named], [r for _, r in named], manifests)]
    if code == 0 and biases:
        table = position_table(biases)
        print("\n" + table.text())
        if args.out:
            (Path(args.out) / "position.csv").write_text(table.csv(), encoding="utf-8")
    return code
