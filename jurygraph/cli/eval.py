"""``jurygraph eval``: judge a dataset with a protocol into a run directory; ``--resume`` continues a run with
the settings its manifest saved (a contradicting option is refused, execution-only ones may change)."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jurygraph.cli import costs
from jurygraph.cli.options import add_model_arguments, check_gen_options, context_from_args, key_values
from jurygraph.cli.preflight import UsageError, check_models, validate_numbers
from jurygraph.cli.protocols import (
    add_protocol_arguments,
    build_protocol,
    check_conversations,
    check_doubt_signals,
    check_options,
    check_ranges,
    check_task,
    option_values,
    protocol_spec,
)
from jurygraph.cli.startup import resume_collection
from jurygraph.graphs.calibration import accepted_options
from jurygraph.graphs.registry import resolve_name, short_name
from jurygraph.judging.items import Scale, plural
from jurygraph.llm.cache_postgres import is_postgres_url
from jurygraph.llm.local_model import LocalModelUnusable, check_local_model
from jurygraph.llm.models import JuryContext, ModelSpec, parse_gen, uses_local_model
from jurygraph.llm.redact import MASK, redact_text, redact_url, redact_values
from jurygraph.running.datasets import Dataset, load_dataset
from jurygraph.running.distributed import INSTALL_HINT, RayOptions
from jurygraph.running.rundir import RESULTS, read_manifest
from jurygraph.running.runner import RunAborted, RunSummary, run
from jurygraph.running.threads import load_threads, read_thread_ids

# Options that only shape how a run executes: a resume may change them (each invocation is recorded in the
# manifest). Every other option of `eval` defines the run -- protocol options added later included -- so a
# resume restores it from the manifest and refuses a different value.
EXECUTION_ONLY = ("concurrency", "rps", "in_flight", "timeout", "max_retries", "base_url", "checkpoint", "cache",
                  "no_cache", "keep_checkpoints", "prices", "quiet", "yes", "ray", "workers", "shard_size",
                  "ray_dashboard", "dataset_changed", *costs.COST_EXECUTION_ONLY)
# parser bookkeeping, the run directory itself, and what one command does (a dry run, a pilot), never saved as
# settings: a resume does not repeat them
NOT_SETTINGS = ("command", "handler", "protocol_dests", "resume", "out", "argv", "dry_run", "json", "pilot")
# a plan above this many requests per item asks for --yes
REQUESTS_PER_ITEM_LIMIT = 100



def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """Every option of ``eval``: the protocol's, the data's, the models' and the run's."""
    add_protocol_arguments(parser)
    data = parser.add_argument_group("data")
    data.add_argument("--dataset", help="faireval, summeval, topical-chat, or a file: .json in their layouts, "
                                        "MT-Bench's human judgments or a LangSmith run export (.json or .jsonl, "
                                        "recognised from their fields), .jsonl/.csv tables with --task and --map")
    data.add_argument("--task", choices=("pairwise", "score", "choice"), help="task kind of a JSONL/CSV dataset")
    data.add_argument("--aspect", help="aspect to score (SummEval: coherence...; Topical-Chat: naturalness...); for "
                                       "conversations, score or pairwise, the rubric: helpfulness (default), "
                                       "tool_use, task_completion, safety")
    data.add_argument("--map", dest="mapping", action="append", metavar="FIELD=COLUMN",
                      help="JSONL/CSV column mapping, e.g. --map question=prompt --map human.label=winner; "
                           "FIELD[VALUE]=NEW recodes a cell, e.g. --map 'human.label[gpt-4]=1'")
    data.add_argument("--scale", metavar="LOW-HIGH",
                      help="score data that gives no scale: the rating scale of JSONL/CSV rows without "
                           "scale_low/scale_high columns, of --from-threads' threads and of LangSmith exports (their "
                           "default 1-10), e.g. --scale 1-5")
    data.add_argument("--reverse", action="store_true", help="pairwise: swap the two answers (position check)")
    data.add_argument("--limit", type=int, help="judge only the first N items")
    data.add_argument("--dataset-changed", choices=("refuse", "continue"), default="refuse",
                      help="with --resume, when the dataset file's hash is not the one the run read last: refuse "
                           "(default: exit 2 naming the file) or continue (the manifest keeps the hash the run began "
                           "on, adds the new one, and says which items were judged on which)")
    data.add_argument("--from-threads", metavar="SQLITE_OR_PG_URL",
                      help="judge the threads of your LangGraph agent's checkpoint store (a SQLite file or a "
                           "postgresql:// URL), each thread's conversation and steps as one score item (instead of "
                           "--dataset); the store is only read")
    data.add_argument("--thread-ids", metavar="FILE",
                      help="--from-threads: only these threads (one id per line; default: every thread of the store)")
    add_model_arguments(parser.add_argument_group("models"))
    runopts = parser.add_argument_group("run")
    runopts.add_argument("--out", help="run directory (default: runs/<protocol>-<dataset>)")
    runopts.add_argument("--resume", metavar="RUN_DIR", help="continue a run: finished items are kept, "
                                                             "unfinished continue, failed are retried")
    runopts.add_argument("--concurrency", type=int, default=8, help="items in flight (default 8)")
    runopts.add_argument("--checkpoint", help="checkpoint store: a SQLite path or a postgres:// URL "
                                              "(default: RUN_DIR/checkpoints.sqlite)")
    runopts.add_argument("--cache", help="LLM-call cache shared between runs: a SQLite file or a postgresql:// URL "
                                         "(default: RUN_DIR/llm_cache.sqlite)")
    runopts.add_argument("--no-cache", action="store_true", help="do not cache model calls")
    runopts.add_argument("--keep-checkpoints", choices=("final", "all"), default="final",
                         help="final (default): each item's final checkpoint (its whole history, for show and "
                              "resume); all: every step's, for time travel")
    cluster = parser.add_argument_group("Ray cluster (pip install 'jurygraph[ray]')")
    cluster.add_argument("--ray", metavar="ADDRESS",
                         help="spread the run over a Ray cluster: 'local' (started in this process, 127.0.0.1 "
                              "only), 'auto' (the cluster `ray start` runs on this machine) or HOST:PORT; "
                              "several nodes need --checkpoint postgresql://...")
    cluster.add_argument("--workers", type=int, metavar="N",
                         help="with --ray: shards judged at once, each by a worker judging --concurrency items at a "
                              "time (default: the cluster's CPUs)")
    cluster.add_argument("--shard-size", type=int, metavar="N",
                         help="with --ray: items per shard (default: about 4 shards per worker, 1 to 16 x "
                              "--concurrency items each)")
    cluster.add_argument("--ray-dashboard", action="store_true",
                         help="with --ray local: start Ray's dashboard on 127.0.0.1:8265 (needs ray[default])")
    runopts.add_argument("--prices", help="JSON price table (USD per 1M tokens) merged over the built-in one")
    runopts.add_argument("--quiet", action="store_true", help="no progress bar, no estimate line before the run")
    runopts.add_argument("--yes", action="store_true",
                         help=f"run a plan of more than {REQUESTS_PER_ITEM_LIMIT} requests per item without asking")
    costs.add_cost_arguments(parser)



def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_eval_arguments(parser)
    parser.set_defaults(handler=lambda args: cmd_eval(args, parser))


def explicit_dests(argv: Sequence[str]) -> set[str]:
    """The options given on an ``eval`` command line (argparse fills defaults in, so parse again without any)."""
    parser = argparse.ArgumentParser(prog="jurygraph eval", argument_default=argparse.SUPPRESS)
    add_eval_arguments(parser)
    for option in parser._actions:
        option.default = argparse.SUPPRESS
    return set(vars(parser.parse_args(list(argv)[1:])))


def _resume_args(args: argparse.Namespace, parser: argparse.ArgumentParser,
                 given: set[str]) -> tuple[argparse.Namespace, dict[str, Any]]:
    """The run's arguments from its manifest; an execution-only option given now wins, a run-defining one given
    now must equal the saved value (UsageError naming every conflict, nothing changed)."""
    manifest = read_manifest(args.resume)
    if manifest is None:
        raise UsageError(f"--resume {args.resume}: no manifest.json there (was it a jurygraph run directory?)")
    if not manifest.get("cli"):  # a typed manifest always has the field; a run made from Python leaves it empty
        raise UsageError(f"--resume {args.resume}: the run was not made by `jurygraph eval` (its manifest keeps no "
                         "command line, e.g. run(graph, items, ...) from Python): resume it the way it was made, "
                         "with resume=True; or run the graph's factory with `jurygraph eval --protocol "
                         "MODULE:FACTORY` from the start")
    saved = dict(manifest.get("cli", {}))
    saved.update(saved.pop("protocol_args", None) or {})  # the protocol's options are saved nested
    conflicts, masked = [], []
    for key in sorted(set(saved) | set(vars(args))):
        if key in NOT_SETTINGS:
            continue
        now, default = getattr(args, key, None), parser.get_default(key)
        then = saved.get(key, default)  # an option newer than the run: the run had its default
        if key not in given:
            setattr(args, key, then)
            if MASK in json.dumps(then):
                masked.append(f"--{key.replace('_', '-')}")
        elif key not in EXECUTION_ONLY and _plain(redact_values(now)) != _plain(then):  # saved without credentials
            conflicts.append(f"--{key.replace('_', '-')} {_shown(now)} (the run has {_shown(then)})")
    if conflicts:
        raise UsageError(redact_text(f"--resume {args.resume}: {'; '.join(conflicts)}. A resumed run keeps its "
                                     "settings: drop these options, or start a new run with another --out"))
    if masked:
        named = " and ".join(masked)
        raise UsageError(f"--resume {args.resume}: the run's {named} had credentials, which are never stored; "
                         f"pass {named} again")
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
    the protocol's own options under ``protocol_args`` as before: those it reads, not every protocol's flag (each
    installed protocol adds its own)."""
    saved = {key: redact_values(value) for key, value in vars(args).items() if key not in NOT_SETTINGS}
    reads = accepted_options(protocol_spec(args.protocol))
    own = {dest: saved.pop(dest) for dest in args.protocol_dests if dest in saved}
    saved["protocol_args"] = {dest: value for dest, value in own.items() if dest in reads}
    return _plain(saved)


def cmd_eval(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Judge a dataset; exit 1 when items failed or the run was stopped by a provider error (--resume continues
    it), 2 when the command cannot run (bad options, unreadable files, a busy run directory)."""
    previous: dict[str, Any] = {}
    given = explicit_dests(args.argv)  # once: each parse builds eval's whole parser again
    if args.resume:
        args, previous = _resume_args(args, parser, given)
    if not (args.dataset or args.from_threads):
        raise UsageError("eval needs --dataset or --from-threads (or --resume RUN_DIR)")
    if not args.from_threads and args.thread_ids:
        raise UsageError("--thread-ids chooses among the threads of --from-threads: give it too")
    validate_numbers(args)
    check_ranges(args)
    cluster = _ray_options(args)
    args.protocol = resolve_name(args.protocol)  # a protocol file's path, absolute: a resume may run elsewhere
    check_options(args.protocol, given)
    option_values(protocol_spec(args.protocol), args)  # its options' values in range, before any data is read
    costs.check_cost_options(args, given)
    parse_gen(args.gen)  # a bad --gen fails before any data is read (ValueError: exit 2)
    if args.cache and Path(args.cache).is_dir():
        raise UsageError(f"--cache {args.cache} is a directory; give a file path (e.g. {args.cache}/llm_cache.sqlite)")
    scale = Scale.parse(args.scale) if args.scale else None
    dataset = threads_dataset(args, scale) if args.from_threads else load_dataset(
        args.dataset, aspect=args.aspect, task=args.task, mapping=key_values(args.mapping, "--map"),
        reverse=args.reverse, scale=scale)
    source = redact_url(args.from_threads) if args.from_threads else str(args.dataset)
    for error in dataset.errors:
        print(f"jurygraph: skipped {error}", file=sys.stderr)
    if not len(dataset):
        raise UsageError(f"{source}: no judgeable rows ({len(dataset.errors)} skipped, reasons above)")
    if dataset.duplicates:
        shown = ", ".join(dataset.duplicates[:10]) + (" ..." if len(dataset.duplicates) > 10 else "")
        raise UsageError(f"{source}: item ids must be unique within a run; repeated: {shown} "
                         "(give each row its own id, or --map id=COLUMN)")
    # a JSONL/CSV table stays on disk: the runner reads it again item by item
    items = dataset.head(args.limit)
    # the data is known: the protocol's defaults that depend on it (both answer orders on pairwise data) are decided
    # on its task kinds, whatever its source; first, so its own errors (a calibration that cannot wrap it) say more
    setup = build_protocol(args, items.tasks)
    check_task(args.protocol, items.tasks, source)
    check_conversations(setup, args, items, items.tasks)  # --per-turn's turns: the plan's
    check_doubt_signals(setup, args, items.tasks)
    context = context_from_args(args, setup)
    check_gen_options(args, setup, context, items,
                      restored=bool(args.resume) and "gen" not in given)
    if context.default is None and not context.models:
        raise UsageError("eval needs a model: --model openai:gpt-4o-mini, --model google_genai:gemini-2.0-flash, "
                         "--model NAME --base-url URL, or --model local for the embedded offline model "
                         "(a smoke-test model: its ratings carry no signal)")
    resume_collection(context)  # start-up is over (the console script paused collection while modules loaded)
    prices = json.loads(Path(args.prices).read_text(encoding="utf-8")) if args.prices else None
    if args.dry_run and not args.pilot:
        return costs.dry_run(args, setup, context, items, prices, dataset=source)
    per_item = setup.requests_per_item(next(iter(items), None), context)
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
    out = Path(args.out or f"runs/{short_name(args.protocol)}-"
                           f"{'threads' if args.from_threads else Path(str(args.dataset)).stem}")
    if args.resume:
        _check_dataset(previous, dataset.sha256, source, args.dataset_changed)
    invocation = {"execution": {key: value for key, value in _settings(args).items() if key in EXECUTION_ONLY}}
    if args.pilot:
        invocation["execution"]["pilot"] = args.pilot
    manifest = {
        "protocol": args.protocol, "parameters": setup.params, "dataset": {"name": dataset.name,
        "source": source, "sha256": dataset.sha256, "rows_skipped": len(dataset.errors)},
        "models": _model_labels(context), "requests_per_item": per_item, "cli": _settings(args),
        # the run's generation settings; the parameters each agent was called with are in "generation"
        "structured_output": context.structured_output, "gen": {a: dict(p) for a, p in context.gen.items()},
        "invocation": invocation,
    }
    budget = costs.before_run(args, setup, context, items, prices)

    def judged(these: Any) -> RunSummary | int:
        """The run over ``these`` items, or the exit code it stopped with (said in one line)."""
        try:
            return run(setup.graph, these, out_dir=out, context=context, concurrency=args.concurrency,
                       checkpoint=args.checkpoint, cache=False if args.no_cache else (args.cache or True),
                       resume=bool(args.resume), keep_checkpoints=args.keep_checkpoints, progress=not args.quiet,
                       manifest=manifest, prices=prices, budget=budget, batch=costs.batch_options(args), ray=cluster)
        except KeyboardInterrupt as stop:
            print(f"jurygraph: {stop}", file=sys.stderr)
            return 130
        except RunAborted as stop:
            done = stop.summary
            sent = f" ({plural(done.done, 'item')} done, {plural(done.attempts, 'HTTP request')} sent)" \
                if done else ""
            print(f"jurygraph: stopped: {stop}{sent}; finished items are kept, resume with --resume {out}",
                  file=sys.stderr)
            return stop.exit_code

    if args.pilot:  # the first items for real: their replies' lengths give the expected figure of the rest
        piloted = judged(items.head(args.pilot))
        if isinstance(piloted, int):
            return piloted
        args.resume = str(out)  # what follows continues the run the pilot began
        if args.dry_run:
            if not args.json:  # --json prints one JSON object; the pilot's figures are in its manifest
                _print_summary(piloted, out)
            return costs.dry_run(args, setup, context, items, prices, dataset=str(args.dataset))
        budget = costs.before_run(args, setup, context, items, prices)
    summary = judged(items)
    if isinstance(summary, int):
        return summary
    _print_summary(summary, out)
    return 1 if summary.failed else 0


def _check_dataset(previous: dict[str, Any], sha256: str, source: str, policy: str) -> None:
    """A resume reads the dataset the run read last, or says so: exit 2 naming the file (the run is left as it
    was), unless ``--dataset-changed continue``, which the manifest records (:class:`RunManifest` keeps both)."""
    from jurygraph.running.rundir import DatasetInfo

    if not previous.get("dataset"):
        return
    read = DatasetInfo.model_validate(previous["dataset"]).current()
    if not read or read == sha256 or policy == "continue":
        return
    raise UsageError(f"--resume: the dataset {source} changed since the run read it (sha256 {read[:12]}..., now "
                     f"{sha256[:12]}...): its finished items were judged on the old text. Restore the file, or pass "
                     "--dataset-changed continue to go on (the manifest records both hashes and which items were "
                     "judged on which)")


def threads_dataset(args: argparse.Namespace, scale: Scale | None) -> Dataset:
    """``--from-threads``: the agent's threads (or ``--thread-ids``') as score items, the store only read."""
    if args.dataset:
        raise UsageError("give --dataset or --from-threads, not both")
    if args.task not in (None, "score"):
        raise UsageError(f"--from-threads: a thread is one conversation, rated as a score item; not --task {args.task}")
    if args.mapping or args.reverse:
        raise UsageError("--map and --reverse shape a dataset file's rows; --from-threads reads threads")
    if args.checkpoint and _same_store(args.checkpoint, args.from_threads):
        raise UsageError("--checkpoint is where the jury keeps its own checkpoints; it must not be the agent's store "
                         "(--from-threads), whose threads would be written into")
    ids = read_thread_ids(args.thread_ids) if args.thread_ids else None
    return load_threads(args.from_threads, ids, scale=scale, aspect=args.aspect)


def _same_store(one: str, two: str) -> bool:
    if is_postgres_url(one) or is_postgres_url(two):
        return one.rstrip("/") == two.rstrip("/")
    return Path(one).resolve() == Path(two).resolve()

def awaiting_line(count: int) -> str:
    return "1 item awaits review" if count == 1 else f"{count} items await review"


def _ray_options(args: argparse.Namespace) -> RayOptions | None:
    """The cluster ``--ray`` names, or None (one process); the cluster options need ``--ray``."""
    if not args.ray:
        given = [flag for flag, value in (("--workers", args.workers), ("--shard-size", args.shard_size),
                                          ("--ray-dashboard", args.ray_dashboard)) if value]
        if given:
            raise UsageError(f"{', '.join(given)} spread(s) a run over a Ray cluster: give --ray ADDRESS too "
                             "(local, auto or HOST:PORT)")
        return None
    if args.batch:
        raise UsageError("--batch sends each round from this process as one provider batch: it does not combine "
                         "with --ray (a batch run needs no workers)")
    if importlib.util.find_spec("ray") is None:
        raise UsageError(INSTALL_HINT)
    return RayOptions(args.ray, workers=args.workers, shard_size=args.shard_size, dashboard=args.ray_dashboard)


def _params_line(params: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in params.items() if key != "protocol" and value is not None)


def _model_labels(context: JuryContext) -> dict[str, str]:
    labels = {name: (m.label if isinstance(m, ModelSpec) else str(m)) for name, m in context.models.items()}
    if context.default is not None:
        labels["default"] = context.default.label if isinstance(context.default, ModelSpec) else str(context.default)
    return labels


def _print_summary(summary: RunSummary, out: Path) -> None:
    """The run's line, its verdicts (every line of the results file, counted as the run wrote them: the file is
    not read again), the first failures and where the results are."""
    print(summary.line())
    cluster = (read_manifest(out) or {}).get("ray")
    if cluster:
        again = cluster.get("retried_shards") or 0
        print(f"ray: {cluster['workers']} workers on {cluster['nodes']} node(s), {cluster.get('shards')} shards"
              + (f", {again} judged again after their worker died" if again else ""))
    print("verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(summary.verdicts.items())))
    for item_id, reason in list(summary.failures.items())[:5]:
        print(f"  failed {item_id}: {reason}")
    print(f"results: {out / RESULTS}")
    if summary.awaiting_review:
        print(f"{awaiting_line(summary.awaiting_review)}: jurygraph review {out}")
