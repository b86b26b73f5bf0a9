"""The ``jurygraph`` command: ``eval`` a protocol over a dataset, ``draw`` a protocol's graph, and the
commands other modules add (each module in ``COMMAND_MODULES`` has ``add_command(subparsers)`` that
registers a subparser with ``set_defaults(handler=fn)``; ``fn(args) -> int`` is the exit code)."""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jurygraph.datasets import DatasetError, load_dataset
from jurygraph.limits import ProviderGates, parse_limits
from jurygraph.local_model import LocalModelUnusable, check_local_model
from jurygraph.models import JuryContext, ModelSpec, uses_local_model
from jurygraph.protocols import ProtocolSetup, add_protocol_arguments, build_protocol
from jurygraph.runner import MANIFEST, RunSummary, read_results, run

COMMAND_MODULES: list[str] = ["jurygraph.demo", "jurygraph.bench", "jurygraph.autoprompt", "jurygraph.reasoning"]

# what a resumed run takes from its manifest instead of the command line
RESUMABLE = ("protocol", "dataset", "task", "aspect", "mapping", "limit", "model", "base_url", "models",
             "reverse", "timeout", "max_retries", "rps", "in_flight", "protocol_args")


def key_values(pairs: Sequence[str] | None, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key or not value:
            raise SystemExit(f"jurygraph: {what} must be KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def add_model_arguments(group: Any) -> None:
    """The model options of ``eval`` (also accepted by ``bench --method``)."""
    group.add_argument("--model", help="model spec for every agent: openai:<model>, google_genai:<model>, "
                                       "<model> with --base-url, or 'local' (the embedded offline model)")
    group.add_argument("--base-url", help="OpenAI-compatible server (vLLM, llama.cpp, Ollama), e.g. "
                                          "http://127.0.0.1:8000/v1")
    group.add_argument("--models", action="append", metavar="AGENT=SPEC",
                       help="a model for one agent or role, e.g. --models Critic=openai:gpt-4o")
    group.add_argument("--timeout", type=float, default=120.0, help="seconds per model call (default 120)")
    group.add_argument("--max-retries", type=int, default=6,
                       help="retries of a model call on 429/5xx/timeouts/connection errors, with exponential "
                             "backoff and jitter, honouring Retry-After (default 6)")
    group.add_argument("--rps", action="append", metavar="[PROVIDER=]N",
                       help="requests per second to a provider (openai, google_genai, or a --base-url), shared "
                             "by all agents and items; a bare N limits every provider")
    group.add_argument("--in-flight", action="append", metavar="[PROVIDER=]N",
                       help="requests in flight to a provider at once (same keys as --rps)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jurygraph", description="Panels of LLM judges as LangGraph graphs.")
    commands = parser.add_subparsers(dest="command", required=True)

    ev = commands.add_parser("eval", help="judge a dataset with a protocol; writes OUT/results.jsonl")
    add_protocol_arguments(ev)
    data = ev.add_argument_group("data")
    data.add_argument("--dataset", help="faireval, summeval, topical-chat, or a file (.json in their layouts, "
                                        ".jsonl/.csv with --task and --map)")
    data.add_argument("--task", choices=("pairwise", "score", "choice"), help="task kind of a JSONL/CSV dataset")
    data.add_argument("--aspect", help="aspect to score (SummEval: coherence...; Topical-Chat: naturalness...)")
    data.add_argument("--map", dest="mapping", action="append", metavar="FIELD=COLUMN",
                      help="JSONL/CSV column mapping, e.g. --map question=prompt --map human.label=winner")
    data.add_argument("--reverse", action="store_true", help="pairwise: swap the two answers (position check)")
    data.add_argument("--limit", type=int, help="judge only the first N items")
    add_model_arguments(ev.add_argument_group("models"))
    runopts = ev.add_argument_group("run")
    runopts.add_argument("--out", help="run directory (default: runs/<protocol>-<dataset>)")
    runopts.add_argument("--resume", metavar="RUN_DIR", help="continue a run: finished items are kept, "
                                                             "unfinished continue, failed are retried")
    runopts.add_argument("--concurrency", type=int, default=8, help="items in flight (default 8)")
    runopts.add_argument("--checkpoint", help="checkpoint store: a SQLite path or a postgres:// URL "
                                              "(default: RUN_DIR/checkpoints.sqlite)")
    runopts.add_argument("--cache", help="LLM-call cache file shared between runs (default: in RUN_DIR)")
    runopts.add_argument("--no-cache", action="store_true", help="do not cache model calls")
    runopts.add_argument("--prices", help="JSON price table (USD per 1M tokens) merged over the built-in one")
    runopts.add_argument("--quiet", action="store_true", help="no progress bar")

    draw = commands.add_parser("draw", help="print or render a protocol's graph")
    add_protocol_arguments(draw)
    draw.add_argument("--format", choices=("mermaid", "png", "ascii"), default="mermaid")
    draw.add_argument("--out", help="file to write (default: stdout for mermaid/ascii, <protocol>.png for png)")
    ev.set_defaults(handler=lambda args: cmd_eval(args, ev))
    draw.set_defaults(handler=cmd_draw)
    for module in COMMAND_MODULES:
        importlib.import_module(module).add_command(commands)
    return parser


def _resume_args(args: argparse.Namespace, parser: argparse.ArgumentParser) -> argparse.Namespace:
    """Rebuild a run's arguments from its manifest; options given now (out, concurrency...) still apply."""
    manifest_path = Path(args.resume) / MANIFEST
    if not manifest_path.exists():
        parser.error(f"--resume {args.resume}: no {MANIFEST} there (was it a jurygraph run directory?)")
    saved = json.loads(manifest_path.read_text(encoding="utf-8")).get("cli", {})
    for key, value in saved.items():
        # an option given now wins over the saved one (e.g. a larger --limit extends the run)
        if key in RESUMABLE and key != "protocol_args" and getattr(args, key, None) in (None, False):
            setattr(args, key, value)
    # the protocol itself cannot change within a run
    for key, value in saved.get("protocol_args", {}).items():
        setattr(args, key, value)
    args.out = args.resume
    return args


def context_from_args(args: argparse.Namespace, setup: ProtocolSetup | None = None) -> JuryContext:
    """The runtime context a command line asks for: models per agent, timeouts, retries, request limits."""
    params = {"timeout": args.timeout, "max_retries": args.max_retries}
    default = ModelSpec.parse(args.model, base_url=args.base_url, **params) if args.model else None
    if default is None and args.base_url:
        raise SystemExit("jurygraph: --base-url needs --model NAME (the model name the server serves)")
    per_agent = {name: ModelSpec.parse(spec, base_url=args.base_url, **params)
                 for name, spec in key_values(args.models, "--models").items()}
    if setup is not None:
        per_agent = {**_specs(setup.models, args), **per_agent}
    limits = parse_limits(args.rps, args.in_flight)
    return JuryContext(models=per_agent, default=default, gates=ProviderGates(limits) if limits else None)


def cmd_eval(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Judge a dataset; exit code 1 when some items failed (they can be retried with --resume)."""
    if args.resume:
        args = _resume_args(args, parser)
    if not args.dataset:
        parser.error("eval needs --dataset (or --resume RUN_DIR)")
    try:
        dataset = load_dataset(args.dataset, aspect=args.aspect, task=args.task,
                               mapping=key_values(args.mapping, "--map"), reverse=args.reverse)
    except DatasetError as err:
        print(f"jurygraph: {err}", file=sys.stderr)
        return 2
    for error in dataset.errors:
        print(f"jurygraph: skipped {error}", file=sys.stderr)
    items = dataset.items[: args.limit] if args.limit else dataset.items
    setup = build_protocol(args)
    context = context_from_args(args, setup)
    if uses_local_model(context):
        try:
            check_local_model()
        except (LocalModelUnusable, ModuleNotFoundError) as err:
            print(f"jurygraph: {err}", file=sys.stderr)  # before any item starts: none would run
            return 2
    out = Path(args.out or f"runs/{args.protocol}-{Path(str(args.dataset)).stem}")
    protocol_args = {dest: getattr(args, dest) for dest in args.protocol_dests}
    manifest = {
        "protocol": args.protocol, "parameters": setup.params, "dataset": {"name": dataset.name,
        "source": str(args.dataset), "sha256": dataset.sha256, "rows_skipped": len(dataset.errors)},
        "models": _model_labels(context),
        "cli": {"protocol": args.protocol, "dataset": args.dataset, "task": args.task, "aspect": args.aspect,
                "mapping": args.mapping, "limit": args.limit, "model": args.model, "base_url": args.base_url,
                "models": args.models, "reverse": args.reverse, "timeout": args.timeout,
                "max_retries": args.max_retries, "rps": args.rps, "in_flight": args.in_flight,
                "protocol_args": protocol_args},
    }
    prices = json.loads(Path(args.prices).read_text(encoding="utf-8")) if args.prices else None
    try:
        summary = run(setup.graph, items, out_dir=out, context=context, concurrency=args.concurrency,
                      checkpoint=args.checkpoint, cache=False if args.no_cache else (args.cache or True),
                      resume=bool(args.resume), progress=not args.quiet, manifest=manifest, prices=prices)
    except KeyboardInterrupt as stop:
        print(f"jurygraph: {stop}", file=sys.stderr)
        return 130
    except FileExistsError as err:
        print(f"jurygraph: {err}", file=sys.stderr)
        return 2
    _print_summary(summary, out)
    return 1 if summary.failed else 0


def _specs(models: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Protocol-given model specs (e.g. ReFeR's --peers) with the run's timeout and retry settings."""
    params = {"timeout": args.timeout, "max_retries": args.max_retries}
    out: dict[str, Any] = {}
    for name, model in models.items():
        if isinstance(model, str):
            model = ModelSpec.parse(model, base_url=args.base_url, **params)
        elif isinstance(model, ModelSpec):
            model = model.model_copy(update=params)
        out[name] = model
    return out


def _model_labels(context: JuryContext) -> dict[str, str]:
    labels = {name: (m.label if isinstance(m, ModelSpec) else str(m)) for name, m in context.models.items()}
    if context.default is not None:
        labels["default"] = context.default.label if isinstance(context.default, ModelSpec) else str(context.default)
    return labels


def _print_summary(summary: RunSummary, out: Path) -> None:
    records = read_results(out)
    verdicts: Counter[str] = Counter()
    for record in records:
        verdict = record.get("verdict") or {}
        if record.get("status") != "ok":
            verdicts["failed"] += 1
        elif verdict.get("missing"):
            verdicts["missing"] += 1
        elif verdict.get("label") is not None:
            verdicts[f"Assistant {verdict['label']}" if verdict["label"] != "tie" else "tie"] += 1
        elif verdict.get("score") is not None:
            verdicts["scored"] += 1
        elif verdict.get("answer") is not None:
            verdicts["answered"] += 1
    print(summary.line())
    print("verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(verdicts.items())))
    for item_id, reason in list(summary.failures.items())[:5]:
        print(f"  failed {item_id}: {reason}")
    print(f"results: {out / 'results.jsonl'}")


def cmd_draw(args: argparse.Namespace) -> int:
    from jurygraph.diagrams import render_graph

    setup = build_protocol(args)
    text_or_path = render_graph(setup.graph, args.format, args.out or (f"{args.protocol}.png"
                                                                          if args.format == "png" else None))
    print(text_or_path)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args))
    except (ValueError, KeyError, LookupError, FileNotFoundError) as err:
        print(f"jurygraph: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())

