"""The ``jurygraph`` command: ``eval`` a protocol over a dataset, ``draw`` a protocol's graph, and the
commands other modules add (each module in ``COMMAND_MODULES`` has ``add_command(subparsers)`` that
registers a subparser with ``set_defaults(handler=fn)``; ``fn(args) -> int`` is the exit code)."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sqlite3
import sys
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jurygraph.datasets import DatasetError, load_dataset
from jurygraph.limits import ProviderGates, parse_limits
from jurygraph.local_model import LocalModelUnusable, check_local_model
from jurygraph.models import JuryContext, MissingAPIKey, ModelSpec, parse_gen, uses_local_model
from jurygraph.preflight import UsageError, check_models, os_error_line, validate_numbers
from jurygraph.protocols import ProtocolSetup, add_protocol_arguments, build_protocol
from jurygraph.redact import MASK, redact_text, redact_url
from jurygraph.rundir import RESULTS, RunLocked, iter_results, read_manifest
from jurygraph.runner import RunAborted, RunSummary, run

COMMAND_MODULES: list[str] = ["jurygraph.demo", "jurygraph.bench", "jurygraph.autoprompt", "jurygraph.reasoning",
                              "jurygraph.show"]

# Options that only shape how a run executes: a resume may change them (each invocation is recorded in the
# manifest). Every other option of `eval` defines the run -- protocol options added later included -- so a
# resume restores it from the manifest and refuses a different value.
EXECUTION_ONLY = ("concurrency", "rps", "in_flight", "timeout", "max_retries", "base_url", "checkpoint", "cache",
                  "no_cache", "keep_checkpoints", "prices", "quiet", "yes")
# parser bookkeeping and the run directory itself, never saved as settings
NOT_SETTINGS = ("command", "handler", "protocol_dests", "resume", "out", "argv")
# a plan above this many requests per item asks for --yes
REQUESTS_PER_ITEM_LIMIT = 100


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
    group.add_argument("--structured-output", action="store_true",
                       help="ask OpenAI/Gemini models for judgments as JSON-schema output (the papers read free "
                            "text, the default); the other agents then hear the model's own text field")
    group.add_argument("--gen", action="append", metavar="AGENT.PARAM=VALUE",
                       help="override a generation parameter (temperature, top_p, max_tokens, n; VALUE 'none' = "
                            "the provider's default) for an agent name or role, or '*'/all for every agent, e.g. "
                            "--gen Critic.temperature=0.7 --gen area_chair.max_tokens=256; default: each "
                            "protocol's paper settings")


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
                      help="JSONL/CSV column mapping, e.g. --map question=prompt --map human.label=winner; "
                           "FIELD[VALUE]=NEW recodes a cell, e.g. --map 'human.label[gpt-4]=1'")
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
    runopts.add_argument("--keep-checkpoints", choices=("final", "all"), default="final",
                         help="final (default): each item's final checkpoint (its whole history, for show and "
                              "resume); all: every step's, for time travel")
    runopts.add_argument("--prices", help="JSON price table (USD per 1M tokens) merged over the built-in one")
    runopts.add_argument("--quiet", action="store_true", help="no progress bar")
    runopts.add_argument("--yes", action="store_true",
                         help=f"run a plan of more than {REQUESTS_PER_ITEM_LIMIT} requests per item without asking")

    draw = commands.add_parser("draw", help="print or render a protocol's graph")
    add_protocol_arguments(draw)
    draw.add_argument("--format", choices=("mermaid", "png", "ascii"), default="mermaid")
    draw.add_argument("--out", help="file to write (default: stdout for mermaid/ascii, <protocol>.png for png)")
    ev.set_defaults(handler=lambda args: cmd_eval(args, ev))
    draw.set_defaults(handler=cmd_draw)
    for module in COMMAND_MODULES:
        importlib.import_module(module).add_command(commands)
    return parser


def explicit_dests(argv: Sequence[str]) -> set[str]:
    """The options given on a command line (argparse fills defaults in, so parse again without any)."""
    parser = _parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                for option in sub._actions:
                    option.default = argparse.SUPPRESS
    return set(vars(parser.parse_args(argv)))


def _resume_args(args: argparse.Namespace,
                 parser: argparse.ArgumentParser) -> tuple[argparse.Namespace, dict[str, Any]]:
    """The run's arguments from its manifest; an execution-only option given now wins, a run-defining one given
    now must equal the saved value (UsageError naming every conflict, nothing changed)."""
    manifest = read_manifest(args.resume)
    if manifest is None:
        raise UsageError(f"--resume {args.resume}: no manifest.json there (was it a jurygraph run directory?)")
    saved = dict(manifest.get("cli", {}))
    saved.update(saved.pop("protocol_args", None) or {})  # the protocol's options are saved nested
    given = explicit_dests(args.argv)
    conflicts = []
    for key in sorted(set(saved) | set(vars(args))):
        if key in NOT_SETTINGS:
            continue
        now, default = getattr(args, key, None), parser.get_default(key)
        then = saved.get(key, default)  # an option newer than the run: the run had its default
        if key not in given:
            setattr(args, key, then)
        elif key not in EXECUTION_ONLY and _plain(now) != _plain(then):
            conflicts.append(f"--{key.replace('_', '-')} {_shown(now)} (the run has {_shown(then)})")
    if conflicts:
        raise UsageError(f"--resume {args.resume}: {'; '.join(conflicts)}. A resumed run keeps its settings: "
                         "drop these options, or start a new run with another --out")
    if args.base_url and MASK in args.base_url and "base_url" not in given:
        raise UsageError(f"--resume {args.resume}: the run's --base-url had credentials, which are never stored; "
                         "pass --base-url again")
    args.out = args.resume
    return args, manifest


def _plain(value: Any) -> Any:
    """A value as the manifest stores it (tuples become lists), so saved and given values compare equal."""
    return json.loads(json.dumps(value))


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return "not set" if value is None else str(value)


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """Every option of the invocation (run-defining and execution-only), credentials removed, for the manifest;
    the protocol's own options under ``protocol_args`` as before."""
    saved = {key: value for key, value in vars(args).items() if key not in NOT_SETTINGS}
    if saved.get("base_url"):
        saved["base_url"] = redact_url(saved["base_url"])
    saved["protocol_args"] = {dest: saved.pop(dest) for dest in args.protocol_dests if dest in saved}
    return _plain(saved)


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
    return JuryContext(models=per_agent, default=default, gates=ProviderGates(limits) if limits else None,
                       structured_output=bool(getattr(args, "structured_output", False)),
                       gen=parse_gen(getattr(args, "gen", None)))


def cmd_eval(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Judge a dataset; exit 1 when items failed or the run was stopped by a provider error (--resume continues
    it), 2 when the command cannot run (bad options, unreadable files, a busy run directory)."""
    previous: dict[str, Any] = {}
    if args.resume:
        args, previous = _resume_args(args, parser)
    if not args.dataset:
        raise UsageError("eval needs --dataset (or --resume RUN_DIR)")
    validate_numbers(args, args.protocol_dests)
    parse_gen(args.gen)  # a bad --gen fails before any data is read (ValueError: exit 2)
    if args.cache and Path(args.cache).is_dir():
        raise UsageError(f"--cache {args.cache} is a directory; give a file path (e.g. {args.cache}/llm_cache.sqlite)")
    dataset = load_dataset(args.dataset, aspect=args.aspect, task=args.task,
                           mapping=key_values(args.mapping, "--map"), reverse=args.reverse)
    for error in dataset.errors:
        print(f"jurygraph: skipped {error}", file=sys.stderr)
    if not dataset.items:
        raise UsageError(f"{args.dataset}: no judgeable rows ({len(dataset.errors)} skipped, reasons above)")
    items = dataset.items[: args.limit] if args.limit else dataset.items
    setup = build_protocol(args)
    context = context_from_args(args, setup)
    if context.default is None and not context.models:
        raise UsageError("eval needs a model: --model openai:gpt-4o-mini, --model google_genai:gemini-2.0-flash, "
                         "--model NAME --base-url URL, or --model local for the embedded offline model "
                         "(a smoke-test model: its ratings carry no signal)")
    per_item = setup.requests_per_item()
    if per_item > REQUESTS_PER_ITEM_LIMIT and not args.yes:
        raise UsageError(f"this plan sends up to {per_item} model requests per item, {per_item * len(items)} for "
                         f"{len(items)} items ({args.protocol}: {_params_line(setup.params)}); "
                         "pass --yes to run it")
    if uses_local_model(context):
        try:
            check_local_model()
        except (LocalModelUnusable, ModuleNotFoundError) as err:
            raise UsageError(str(err)) from None  # before any item starts: none would run
    check_models(context)
    out = Path(args.out or f"runs/{args.protocol}-{Path(str(args.dataset)).stem}")
    invocation = {"at": datetime.now(UTC).isoformat(), "pid": os.getpid(), "resume": bool(args.resume),
                  "execution": {key: value for key, value in _settings(args).items() if key in EXECUTION_ONLY}}
    manifest = {
        "protocol": args.protocol, "parameters": setup.params, "dataset": {"name": dataset.name,
        "source": str(args.dataset), "sha256": dataset.sha256, "rows_skipped": len(dataset.errors)},
        "models": _model_labels(context), "requests_per_item": per_item, "cli": _settings(args),
        # the run's generation settings; the parameters each agent was called with are in "generation"
        "structured_output": context.structured_output, "gen": {a: dict(p) for a, p in context.gen.items()},
        "invocations": [*previous.get("invocations", []), invocation],
    }
    prices = json.loads(Path(args.prices).read_text(encoding="utf-8")) if args.prices else None
    try:
        summary = run(setup.graph, items, out_dir=out, context=context, concurrency=args.concurrency,
                      checkpoint=args.checkpoint, cache=False if args.no_cache else (args.cache or True),
                      resume=bool(args.resume), keep_checkpoints=args.keep_checkpoints, progress=not args.quiet,
                      manifest=manifest, prices=prices)
    except KeyboardInterrupt as stop:
        print(f"jurygraph: {stop}", file=sys.stderr)
        return 130
    except RunAborted as stop:
        done = stop.summary
        sent = f" ({done.done} items done, {done.attempts} HTTP requests sent)" if done else ""
        print(f"jurygraph: stopped: {stop}{sent}; finished items are kept, resume with --resume {out}",
              file=sys.stderr)
        return stop.exit_code
    _print_summary(summary, out)
    return 1 if summary.failed else 0


def _params_line(params: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in params.items() if key != "protocol" and value is not None)


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
    verdicts: Counter[str] = Counter()
    for record in iter_results(out):  # one at a time: a large run's records do not fit in memory together
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
    print(f"results: {out / RESULTS}")


def cmd_draw(args: argparse.Namespace) -> int:
    from jurygraph.diagrams import render_graph

    validate_numbers(args, args.protocol_dests)
    setup = build_protocol(args)
    text_or_path = render_graph(setup.graph, args.format, args.out or (f"{args.protocol}.png"
                                                                          if args.format == "png" else None))
    print(text_or_path)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv  # a resume tells the options given now from the defaults
    try:
        return int(args.handler(args))
    except (UsageError, RunLocked, DatasetError, MissingAPIKey) as err:
        print(f"jurygraph: {redact_text(str(err))}", file=sys.stderr)
        return 2
    except RunAborted as stop:  # a run started by another command (bench) that stopped on a provider or disk
        print(f"jurygraph: stopped: {stop}", file=sys.stderr)
        return stop.exit_code
    except OSError as err:  # unreadable dataset, read-only or full --out, a directory where a file belongs
        print(f"jurygraph: {os_error_line(err)}", file=sys.stderr)
        return 2
    except sqlite3.Error as err:
        print(f"jurygraph: checkpoint or cache database: {err}", file=sys.stderr)
        return 2
    except (ValueError, KeyError, LookupError, ImportError) as err:
        print(f"jurygraph: {redact_text(str(err))}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
