"""``jurygraph bench`` and ``jurygraph metaeval``: agreement with humans, in the papers' tables.

``bench`` runs a chosen set of methods (protocol + options + models, each given as the ``eval``
options it would take) over a benchmark, and/or reads finished runs, then prints and writes the
table in the paper's layout with missing counts and bootstrap CIs::

    jurygraph bench --dataset topical-chat \\
        --method "ChatGPT(MA)=--protocol chateval --agents 2 --model openai:gpt-3.5-turbo" \\
        --runs "UniEval=runs/unieval" --out bench/topical-chat

Each method's runs go to ``OUT/runs/<method>/<aspect>/`` (a normal run directory: rerunning the
bench resumes them, nothing is paid twice). ``OUT`` also gets ``table.txt``, ``table.md``,
``table.csv``, ``results.csv`` (every number in long form), ``details.csv`` and PNG plots.

``metaeval RUN_DIR`` computes the same for one finished run (or the run directories below it).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jurygraph.datasets import Dataset, DatasetError, load_dataset
from jurygraph.items import TaskKind
from jurygraph.metaeval import Level, MethodResult, evaluate_records, run_name, run_records, single_unit_warnings
from jurygraph.metrics import STATISTICS
from jurygraph.models import JuryContext
from jurygraph.protocols import ProtocolSetup
from jurygraph.rundir import read_results
from jurygraph.runner import arun
from jurygraph.tables import (
    comparison_table,
    correlation_table,
    detail_table,
    distribution_table,
    label_table,
    results_csv,
)

DEFAULT_ASPECTS = {"summeval": ["coherence", "consistency", "fluency", "relevance"],
                   "topical-chat": ["naturalness", "coherence", "engagingness", "groundedness"]}


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "method"


def datasets_for(name: str, aspects: Sequence[str] | None, *, task: str | None = None,
                 mapping: dict[str, str] | None = None, limit: int | None = None) -> dict[str, Dataset]:
    """The benchmark's items per aspect (one dataset for pairwise/choice benchmarks, key "")."""
    key = "topical-chat" if name == "topical_chat" else name
    chosen: list[str | None] = list(aspects) if aspects else list(DEFAULT_ASPECTS.get(key, [None]))
    out: dict[str, Dataset] = {}
    for aspect in chosen:
        dataset = load_dataset(name, aspect=aspect, task=task, mapping=mapping)
        if dataset.items and dataset.items[0].task is not TaskKind.SCORE:
            dataset.items = dataset.items[:limit] if limit else dataset.items
            return {"": dataset}
        dataset.items = dataset.items[:limit] if limit else dataset.items
        out[aspect or ""] = dataset
    return out


async def run_method(name: str, setup: ProtocolSetup, context: JuryContext, datasets: dict[str, Dataset],
                     out: Path, *, concurrency: int = 8, progress: bool = True,
                     manifest: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Run one method over every aspect's items with the core runner; returns all its records.

    A run directory that already holds results is resumed (finished items are kept)."""
    records: list[dict[str, Any]] = []
    for aspect, dataset in datasets.items():
        run_dir = out / "runs" / _slug(name) / (aspect or dataset.name)
        await arun(setup.graph, dataset.items, out_dir=run_dir, context=context, concurrency=concurrency,
                   resume=True, progress=progress,
                   manifest={**(manifest or {}), "method": name, "protocol": setup.params.get("protocol"),
                             "parameters": setup.params, "dataset": {"name": dataset.name, "sha256": dataset.sha256,
                                                                     "aspect": aspect or None}})
        records.extend(read_results(run_dir))
    return records


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
        (out / f"distribution_{_slug(method.name)}.csv").write_text(dist.csv(), encoding="utf-8")
        texts.append(dist.text())
    if plots:
        from jurygraph import plots as figures

        written = []
        if scored:
            written.append(figures.plot_aspect_bars(scored, out / f"aspects_{plot_statistic}.png", plot_statistic))
            for method in scored:
                written.append(figures.plot_score_distribution(method, out / f"distribution_{_slug(method.name)}.png"))
        for method in labelled:
            written.append(figures.plot_confusion(method, out / f"confusion_{_slug(method.name)}.png"))
        texts.append("plots: " + ", ".join(str(p) for p in written))
    return "\n\n".join(texts)


# --- command line --------------------------------------------------------------------------------


def _method_parser() -> argparse.ArgumentParser:
    """What a ``--method NAME=ARGS`` may say: the protocol options and model options of ``eval``."""
    from jurygraph.cli import add_model_arguments
    from jurygraph.protocols import add_protocol_arguments

    parser = argparse.ArgumentParser(prog="--method", add_help=False, exit_on_error=False)
    add_protocol_arguments(parser)
    add_model_arguments(parser)
    return parser


def _pairs(values: Sequence[str] | None, what: str) -> list[tuple[str, str]]:
    pairs = []
    for value in values or []:
        name, sep, rest = value.partition("=")
        if not sep or not name.strip() or not rest.strip():
            raise ValueError(f"{what} must be NAME=..., got {value!r}")
        pairs.append((name.strip(), rest.strip()))
    return pairs


def _common_options(parser: argparse.ArgumentParser) -> None:
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


def add_command(commands: Any) -> None:
    bench = commands.add_parser("bench", help="run methods over a benchmark (or read runs) and print the "
                                              "paper-style table of agreement with humans")
    bench.add_argument("--dataset", required=True, help="faireval, summeval, topical-chat, or a file")
    bench.add_argument("--aspects", help="comma-separated aspects (default: the four the papers report)")
    bench.add_argument("--task", choices=("pairwise", "score", "choice"), help="task kind of a JSONL/CSV dataset")
    bench.add_argument("--map", dest="mapping", action="append", metavar="FIELD=COLUMN",
                       help="JSONL/CSV column mapping")
    bench.add_argument("--method", action="append", metavar="NAME=ARGS",
                       help="a method to run: NAME=\"--protocol P [protocol options] --model SPEC ...\"")
    bench.add_argument("--runs", action="append", metavar="NAME=DIR",
                       help="a finished run directory (or a directory of runs, one per aspect) as a method")
    bench.add_argument("--limit", type=int, help="judge only the first N items of each aspect")
    bench.add_argument("--concurrency", type=int, default=8)
    bench.add_argument("--quiet", action="store_true", help="no progress bars")
    _common_options(bench)
    bench.set_defaults(handler=cmd_bench)

    meta = commands.add_parser("metaeval", help="agreement with humans of a finished run (RUN_DIR/results.jsonl)")
    meta.add_argument("run_dir", nargs="+", help="run directories; each is one method (NAME=DIR to name it)")
    _common_options(meta)
    meta.set_defaults(handler=cmd_metaeval)


def _evaluate(named_records: Sequence[tuple[str, list[dict[str, Any]]]],
              args: argparse.Namespace) -> list[MethodResult]:
    level: Level | None = args.level
    return [evaluate_records(records, name, level=level, resamples=args.resamples, confidence=args.confidence,
                             seed=args.seed) for name, records in named_records]


def _finish(methods: list[MethodResult], args: argparse.Namespace) -> int:
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
            (out / f"compare_{k + 1}_{_slug(names[0])}_vs_{_slug(names[1])}.csv").write_text(table.csv(),
                                                                                              encoding="utf-8")
    return 0


def cmd_metaeval(args: argparse.Namespace) -> int:
    named = []
    for entry in args.run_dir:
        name, sep, path = entry.partition("=")
        if not sep:
            name, path = run_name(entry), entry
        named.append((name, run_records(path)))
    return _finish(_evaluate(named, args), args)


def cmd_bench(args: argparse.Namespace) -> int:
    from jurygraph.cli import context_from_args, key_values
    from jurygraph.protocols import build_protocol

    methods = _pairs(args.method, "--method")
    finished = _pairs(args.runs, "--runs")
    if not methods and not finished:
        raise ValueError("bench needs at least one --method NAME=ARGS or --runs NAME=DIR")
    out = Path(args.out or f"bench/{Path(str(args.dataset)).stem}")
    args.out = str(out)
    named: list[tuple[str, list[dict[str, Any]]]] = []
    if methods:
        aspects = [a.strip() for a in args.aspects.split(",")] if args.aspects else None
        try:
            datasets = datasets_for(args.dataset, aspects, task=args.task,
                                    mapping=key_values(args.mapping, "--map"), limit=args.limit)
        except DatasetError as err:
            print(f"jurygraph: {err}", file=sys.stderr)
            return 2
        for dataset in datasets.values():
            for error in dataset.errors:
                print(f"jurygraph: skipped {error}", file=sys.stderr)
        parser = _method_parser()
        planned = []
        for name, text in methods:
            try:
                options = parser.parse_args(shlex.split(text))
            except (argparse.ArgumentError, SystemExit) as err:
                raise ValueError(f"--method {name}: cannot read {text!r} ({err})") from None
            setup = build_protocol(options)
            planned.append((name, text, setup, context_from_args(options, setup)))

        async def run_all() -> list[tuple[str, list[dict[str, Any]]]]:
            return [(name, await run_method(name, setup, context, datasets, out, concurrency=args.concurrency,
                                            progress=not args.quiet, manifest={"bench_args": text}))
                    for name, text, setup, context in planned]
        try:
            named = asyncio.run(run_all())
        except KeyboardInterrupt:
            print(f"jurygraph: interrupted; rerun the same bench command to resume ({out / 'runs'})",
                  file=sys.stderr)
            return 130
    named += [(name, run_records(path)) for name, path in finished]
    return _finish(_evaluate(named, args), args)
