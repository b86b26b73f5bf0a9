"""``jurygraph bench``: agreement with humans of several methods on a benchmark, in the papers' tables.

``bench`` runs a chosen set of methods (protocol + options + models, each given as the ``eval``
options it would take) over a benchmark, and/or reads finished runs, then prints and writes the
table in the paper's layout with missing counts and bootstrap CIs::

    jurygraph bench --dataset topical-chat \\
        --method "ChatGPT(MA)=--protocol chateval --agents 2 --model openai:gpt-3.5-turbo" \\
        --runs "UniEval=runs/unieval" --out bench/topical-chat

Each method's runs go to ``OUT/runs/<method>/<aspect>/`` (a normal run directory: rerunning the
bench resumes them, nothing is paid twice). ``OUT`` also gets ``table.txt``, ``table.md``,
``table.csv``, ``results.csv`` (every number in long form), ``details.csv`` and PNG plots.

``jurygraph metaeval RUN_DIR`` (:mod:`jurygraph.cli.metaeval`) computes the same for finished runs.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jurygraph.cli.metaeval import common_options, evaluate, finish, slug
from jurygraph.cli.options import add_model_arguments, check_gen_options, context_from_args, key_values
from jurygraph.cli.protocols import ProtocolSetup, add_protocol_arguments, build_protocol
from jurygraph.judging.benchmarks import canonical
from jurygraph.judging.items import Scale, TaskKind
from jurygraph.llm.models import JuryContext
from jurygraph.measuring.metaeval import run_records
from jurygraph.running.datasets import Dataset, DatasetError, load_dataset
from jurygraph.running.rundir import read_results
from jurygraph.running.runner import arun

DEFAULT_ASPECTS = {"summeval": ["coherence", "consistency", "fluency", "relevance"],
                   "topical-chat": ["naturalness", "coherence", "engagingness", "groundedness"]}


def datasets_for(name: str, aspects: Sequence[str] | None, *, task: str | None = None,
                 mapping: dict[str, str] | None = None, limit: int | None = None,
                 scale: Scale | None = None) -> dict[str, Dataset]:
    """The benchmark's items per aspect (one dataset for pairwise/choice benchmarks, key "")."""
    key = canonical(name) or name
    chosen: list[str | None] = list(aspects) if aspects else list(DEFAULT_ASPECTS.get(key, [None]))
    out: dict[str, Dataset] = {}
    for aspect in chosen:
        dataset = load_dataset(name, aspect=aspect, task=task, mapping=mapping, scale=scale).head(limit)
        if dataset.tasks - {TaskKind.SCORE.value}:
            return {"": dataset}
        out[aspect or ""] = dataset
    return out


async def run_method(name: str, setup: ProtocolSetup, context: JuryContext, datasets: dict[str, Dataset],
                     out: Path, *, concurrency: int = 8, progress: bool = True,
                     manifest: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Run one method over every aspect's items with the core runner; returns all its records.

    A run directory that already holds results is resumed (finished items are kept)."""
    records: list[dict[str, Any]] = []
    for aspect, dataset in datasets.items():
        run_dir = out / "runs" / slug(name) / (aspect or dataset.name)
        await arun(setup.graph, dataset, out_dir=run_dir, context=context, concurrency=concurrency,
                   resume=True, progress=progress,
                   manifest={**(manifest or {}), "method": name, "protocol": setup.params.get("protocol"),
                             "parameters": setup.params, "dataset": {"name": dataset.name, "sha256": dataset.sha256,
                                                                     "aspect": aspect or None}})
        records.extend(read_results(run_dir))
    return records


# --- command line --------------------------------------------------------------------------------


def _method_parser() -> argparse.ArgumentParser:
    """What a ``--method NAME=ARGS`` may say: the protocol options and model options of ``eval``."""
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


def add_arguments(bench: argparse.ArgumentParser) -> None:
    bench.add_argument("--dataset", required=True, help="faireval, summeval, topical-chat, or a file")
    bench.add_argument("--aspects", help="comma-separated aspects (default: the four the papers report)")
    bench.add_argument("--task", choices=("pairwise", "score", "choice"), help="task kind of a JSONL/CSV dataset")
    bench.add_argument("--map", dest="mapping", action="append", metavar="FIELD=COLUMN",
                       help="JSONL/CSV column mapping")
    bench.add_argument("--scale", metavar="LOW-HIGH",
                       help="JSONL/CSV score data: the rating scale of every row without scale_low/scale_high "
                            "columns, e.g. --scale 1-5")
    bench.add_argument("--method", action="append", metavar="NAME=ARGS",
                       help="a method to run: NAME=\"--protocol P [protocol options] --model SPEC ...\"")
    bench.add_argument("--runs", action="append", metavar="NAME=DIR",
                       help="a finished run directory (or a directory of runs, one per aspect) as a method")
    bench.add_argument("--limit", type=int, help="judge only the first N items of each aspect")
    bench.add_argument("--concurrency", type=int, default=8)
    bench.add_argument("--quiet", action="store_true", help="no progress bars")
    common_options(bench)
    bench.set_defaults(handler=cmd_bench)


def cmd_bench(args: argparse.Namespace) -> int:
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
                                    mapping=key_values(args.mapping, "--map"), limit=args.limit,
                                    scale=Scale.parse(args.scale) if args.scale else None)
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
            # the data is loaded: its task kinds decide the protocol's defaults (both orders on pairwise data)
            try:
                setup = build_protocol(options, {task for dataset in datasets.values() for task in dataset.tasks})
            except ValueError as err:  # an unknown protocol, an option out of range: which method says it
                raise type(err)(f"--method {name}: {err}") from None
            context = context_from_args(options, setup)
            check_gen_options(options, setup, context, next(iter(datasets.values()), []))
            planned.append((name, text, setup, context))

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
    return finish(evaluate(named, args), args)
