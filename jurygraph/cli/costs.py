"""The cost options of ``jurygraph eval`` (issue 20): the dry run (``--dry-run [--json]``), the one-line estimate
before a run, the budget (``--max-cost``, ``--max-total-tokens``) and the providers' batch APIs (``--batch``,
``--batch-poll``, ``--batch-fallback``). The estimate itself is :mod:`jurygraph.running.estimate`, the budget
:mod:`jurygraph.running.budget`, the rounds of batches :mod:`jurygraph.running.batch`."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from langgraph.graph import StateGraph

from jurygraph.cli.protocols import ProtocolSetup
from jurygraph.judging.items import EvalItem, plural
from jurygraph.judging.state import COUNTS
from jurygraph.llm.limits import ProviderGates
from jurygraph.llm.models import JuryContext, ModelSpec, to_spec
from jurygraph.llm.pricing import price_of, prices_line
from jurygraph.running.batch import BatchOptions
from jurygraph.running.budget import Budget, Spend
from jurygraph.running.estimate import (
    DEFAULT_SAMPLE,
    Estimate,
    ReplyLengths,
    by_model_json,
    costs_shape,
    estimate,
    per_item_shape,
    reply_lengths,
    requests_shape,
    wall_time,
)

# the options below that only shape execution: a resume may change them (cli.eval.EXECUTION_ONLY)
COST_EXECUTION_ONLY = ("dry_run", "json", "max_cost", "max_total_tokens", "batch", "batch_poll", "batch_fallback",
                       "pilot")
# items the one-line estimate before a run renders (the first ones: a stream reads no further); measured in
# benchmarks/README.md ("What will it cost?")
PRE_RUN_SAMPLE = 3


def add_cost_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("cost")
    group.add_argument("--dry-run", action="store_true",
                       help="send nothing: print, per model, the items, requests (min-max where the protocol may "
                            "stop early), input and output tokens, cost and wall time the run would take, from the "
                            "real prompts of the real items")
    group.add_argument("--json", action="store_true", help="with --dry-run: the estimate as one JSON object")
    group.add_argument("--pilot", type=int, metavar="N",
                       help="judge the first N items for real first (paid, kept in the run directory), then estimate "
                            "the rest with the replies as long as theirs were: the expected figure beside the bound; "
                            "with --dry-run, stop there (--resume RUN_DIR goes on)")
    group.add_argument("--max-cost", type=float, metavar="USD",
                       help="stop starting items once what was spent plus what the items in flight may still "
                            "spend would pass USD (the whole run, over every --resume); in-flight items finish")
    group.add_argument("--max-total-tokens", type=int, metavar="N",
                       help="the same budget in tokens (input plus output), for servers without prices")
    group.add_argument("--batch", action="store_true",
                       help="send the calls through the provider's Batch API (OpenAI: half price, results within "
                            "24 h): each protocol round becomes one batch; the process may stop while a batch runs "
                            "and --resume RUN_DIR collects it")
    group.add_argument("--batch-poll", type=float, default=60.0, metavar="SECONDS",
                       help="with --batch: seconds between status checks (default 60)")
    group.add_argument("--batch-fallback", choices=("batch", "online"), default="batch",
                       help="with --batch: where a request the batch failed or let expire goes: into the next "
                            "round's batch (default) or to the ordinary API (online)")


def check_cost_options(args: argparse.Namespace, given: set[str]) -> None:
    """Options that only mean something together: said at once rather than ignored."""
    from jurygraph.cli.preflight import UsageError

    if args.json and not args.dry_run:
        raise UsageError("--json goes with --dry-run (a run writes its figures to RUN_DIR/manifest.json)")
    for dest in ("batch_poll", "batch_fallback"):
        if dest in given and not args.batch:
            raise UsageError(f"--{dest.replace('_', '-')} goes with --batch")
    if args.max_cost is not None and args.max_cost <= 0:
        raise UsageError(f"--max-cost must be greater than 0 (got {args.max_cost:g})")
    if args.max_total_tokens is not None and args.max_total_tokens <= 0:
        raise UsageError(f"--max-total-tokens must be at least 1 (got {args.max_total_tokens})")
    if args.batch_poll <= 0:
        raise UsageError(f"--batch-poll must be greater than 0 (got {args.batch_poll:g})")
    if args.pilot is not None and args.pilot < 1:
        raise UsageError(f"--pilot must be at least 1 item (got {args.pilot})")
    if args.batch and args.no_cache:
        raise UsageError("--batch needs the LLM cache (it is where a batch's replies wait for their items): "
                         "drop --no-cache")


def batch_options(args: argparse.Namespace) -> BatchOptions | None:
    """``--batch``, ``--batch-poll``, ``--batch-fallback`` as the runner's options (None: online)."""
    return BatchOptions(poll_seconds=args.batch_poll, fallback=args.batch_fallback) if args.batch else None


def estimate_run(setup: ProtocolSetup, items: Iterable[EvalItem], total: int, context: JuryContext,
                 prices: Mapping[str, Any] | None, *, sample: int | None, tokenizer: str,
                 cache: Any = None, lengths: ReplyLengths | None = None) -> Estimate:
    return estimate(setup.graph, items, context=context, total=total, prices=prices, sample=sample,
                    bounded=setup.may_stop_early(), tokenizer=tokenizer, cache=cache,
                    lengths=lengths.by_agent if lengths is not None else None, most_graph=setup.most_graph)


def measured_lengths(args: argparse.Namespace) -> ReplyLengths | None:
    """How long the run's replies were, when there is a run to measure: after a pilot, or on --resume."""
    if not args.resume:
        return None
    return reply_lengths(Path(args.resume), "pilot" if args.pilot else "run")


@contextlib.contextmanager
def still_to_do(args: argparse.Namespace, items: Any) -> Iterator[tuple[Iterable[EvalItem], int, int, Any]]:
    """The items an estimate is for (``items``: the run's Dataset or a list): all of them, or on ``--resume`` those
    not finished, with the run's LLM cache (the calls it holds are free). Yields (items, how many, how many
    already done, the cache or None)."""
    if not args.resume:
        yield items, len(items), 0, None
        return
    from jurygraph.llm.cache_postgres import is_postgres_url, open_cache
    from jurygraph.running.rundir import CACHE, iter_results

    done = {record["id"] for record in iter_results(args.resume) if record.get("status") == "ok"}
    todo = (item for item in items if item.id not in done)
    target = args.cache or Path(args.resume) / CACHE  # the run's: a SQLite file or a PostgreSQL table (--cache URL)
    cache = open_cache(target) if not args.no_cache and (is_postgres_url(target) or Path(target).exists()) else None
    # every finished id is one of the run's items (a resume keeps the run's dataset options): no pass over the items
    # to count them. A dataset file edited between invocations (--resume does not refuse it) makes this count
    # the finished items it no longer has too; the items left are never fewer than none
    try:
        yield todo, max(0, len(items) - len(done)), len(done), cache
    finally:
        if cache is not None:
            cache.close()


def dry_run(args: argparse.Namespace, setup: ProtocolSetup, context: JuryContext, items: Any,
            prices: Mapping[str, Any] | None, *, dataset: str) -> int:
    """``eval --dry-run``: the estimate, as text or (``--json``) one JSON object; sends nothing, writes nothing.
    On ``--resume``: of the items still to do, the run's cached calls free."""
    lengths = measured_lengths(args)
    with still_to_do(args, items) as (todo, total, skipped, cache):
        todo = list(todo) if lengths is not None else todo  # rendered twice: the bound, then the expected figure
        result = estimate_run(setup, todo, total, context, prices, sample=DEFAULT_SAMPLE, tokenizer="download",
                              cache=cache)
        expected = None if lengths is None else estimate_run(setup, todo, total, context, prices,
                                                              sample=DEFAULT_SAMPLE, tokenizer="download",
                                                              cache=cache, lengths=lengths)
    report = _report(result, setup, args, context, dataset=dataset, skipped=skipped, sample=next(iter(items), None))
    if expected is not None and lengths is not None:
        report["expected"] = _expected(expected, lengths)
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        print(_text(report))
    return 0


def pre_run_estimate(setup: ProtocolSetup, context: JuryContext, items: Iterable[EvalItem], total: int,
                     prices: Mapping[str, Any] | None, cache: Any = None,
                     lengths: ReplyLengths | None = None) -> tuple[Estimate, str]:
    """The estimate ``eval`` makes before it starts, from the first few items, and its line (with the expected
    figure when the run's replies were measured: ``lengths``). It loads no tokenizer (reading a cached tiktoken
    encoding takes ~0.3 s, which the first request would wait for): approximate."""
    head = [item for _, item in zip(range(PRE_RUN_SAMPLE), items, strict=False)]
    result = estimate_run(setup, head, min(total, PRE_RUN_SAMPLE), context, prices, sample=None,
                          tokenizer="approximate", cache=cache)
    line = _line(result, total)
    if lengths is not None and total:
        expected = estimate_run(setup, head, min(total, PRE_RUN_SAMPLE), context, prices, sample=None,
                                tokenizer="approximate", cache=cache, lengths=lengths)
        scale = total / expected.rendered if expected.rendered else 0.0
        low, high = expected.cost("fewest"), expected.cost("most")
        cost = "" if low is None or high is None else f", {_usd(low * scale, high * scale)}"
        tokens = _shown(_tokens(expected, "fewest") * scale, _tokens(expected, "most") * scale)
        line += f"; expected: {tokens} tokens{cost} ({lengths.label()})"
    return result, line


def _expected(result: Estimate, lengths: ReplyLengths) -> dict[str, Any]:
    """The expected figure of ``--dry-run --json``: the totals with the replies as long as the run measured them, in
    the bound's shape, and what it is from."""
    out: dict[str, Any] = {key: requests_shape(result.total(key, "fewest"), result.total(key, "most"))
                           for key in COUNTS}
    out["cost_usd"] = costs_shape(result)
    out["cost_usd_batch"] = costs_shape(result, batch=True)
    out["from"] = {"source": lengths.source, "items": lengths.items, "replies": lengths.replies,
                   "reply_tokens": {agent: round(value, 1) for agent, value in lengths.by_agent.items()}}
    out["label"] = lengths.label()
    return out


def _line(result: Estimate, total: int) -> str:
    if not total:
        return "estimate: nothing left to do"
    scale = total / result.rendered if result.rendered else 0.0
    requests = _shown(result.total("requests", "fewest") * scale, result.total("requests") * scale)
    tokens = _shown(_tokens(result, "fewest") * scale, _tokens(result, "most") * scale)
    low, high = result.cost("fewest"), result.cost("most")
    cost = "" if low is None or high is None else f", {_usd(low * scale, high * scale)}"
    approximate = "" if result.exact_tokens else ", tokens approximate"
    return (f"estimate: {requests} requests, {tokens} tokens{cost} (from {result.rendered} of {plural(total, 'item')}"
            f"{approximate}; --dry-run for the details)")


def _tokens(result: Estimate, scenario: str) -> float:
    return float(result.total("input_tokens", scenario) + result.total("output_tokens", scenario))


def _shown(low: float, high: float) -> str:
    return f"{_n(low)}" if round(low) == round(high) else f"{_n(low)}-{_n(high)}"


def _n(value: float) -> str:
    value = round(value)
    if value >= 10_000_000:
        return f"{value / 1e6:.0f}M"
    if value >= 100_000:
        return f"{value / 1e6:.2g}M" if value >= 1_000_000 else f"{value / 1e3:.0f}k"
    return f"{value:,}"


def _usd(low: float, high: float) -> str:
    return f"~${low:.4g}" if f"{low:.4g}" == f"{high:.4g}" else f"~${low:.4g}-${high:.4g}"


def _report(result: Estimate, setup: ProtocolSetup, args: argparse.Namespace, context: JuryContext, *,
            dataset: str, skipped: int, sample: EvalItem | None = None) -> dict[str, Any]:
    """The estimate as the JSON object ``--dry-run --json`` prints (the text form is written from it)."""
    bounds = setup.stop_bounds()
    out: dict[str, Any] = {
        "protocol": setup.params.get("protocol"), "dataset": dataset, "items": result.items,
        "items_rendered": result.rendered, "scaled": result.scaled, "items_already_done": skipped,
    }
    for key in COUNTS:
        out[key] = requests_shape(result.total(key, "fewest"), result.total(key, "most"))
    out["cost_usd"] = costs_shape(result)
    out["cost_usd_batch"] = costs_shape(result, batch=True)
    out["requests_per_item"] = per_item_shape(result.per_item("requests", "fewest"), result.per_item("requests"))
    out["requests_per_item_with_reasks"] = setup.requests_per_item(sample, context)
    if bounds and result.bounded:
        out["bounds"] = {"min": bounds[0], "max": bounds[1]}
    out["by_model"] = by_model_json(result)
    out["approximate"] = not result.exact_tokens
    out["output_budget"] = {"assumed_reply_tokens": result.assumed_reply_tokens} if result.assumed_reply_tokens \
        else {}
    out["prices"] = prices_line(args.prices)
    seconds, why = _wall_time(result, args.concurrency, context.gates)
    out["wall_time_s"], out["wall_time_bound"] = round(seconds, 1), why
    if result.failed:
        out["items_not_estimated"] = dict(list(result.failed.items())[:10])
    out["seconds"] = round(result.seconds, 2)
    return out


def _wall_time(result: Estimate, concurrency: int, gates: ProviderGates | None) -> tuple[float, str]:
    """The wall time the run's limits imply. A model's requests count against the gate the run would send them
    through (its --base-url's or its provider's limits, else a bare --rps/--in-flight's): providers that share a
    gate share its limits, as in the run."""
    by_provider: dict[str, float] = {}
    for label, model in result.models.items():
        provider = label.partition("@")[2] or label.partition(":")[0]
        by_provider[provider] = by_provider.get(provider, 0.0) + model.most["requests"]
    given = []
    if gates is not None:
        by_gate: dict[str, list[str]] = {}
        for provider in by_provider:
            key = gates.key(provider)
            if key is not None:
                by_gate.setdefault(key, []).append(provider)
        limits = gates.limits
        for key, providers in by_gate.items():
            given.append((" and ".join(providers), sum(by_provider[p] for p in providers),
                          limits[key].requests_per_second, limits[key].max_in_flight))
    return wall_time(sum(by_provider.values()), result.reply_tokens, concurrency=concurrency, limits=given)


def _text(report: dict[str, Any]) -> str:
    """The dry run as a table per model and the lines that say how it was counted."""
    scaled = (f"{report['items_rendered']} of {report['items']} items rendered, evenly spaced, scaled"
              if report["scaled"] else "the item rendered" if report["items_rendered"] == 1
              else f"all {report['items_rendered']} items rendered")
    done = f"; {report['items_already_done']} already done" if report["items_already_done"] else ""
    items = plural(report["items"], "item")
    lines = [f"Dry run (no request sent): {report['protocol']} on {report['dataset']}, {items} "
             f"({scaled}{done}; {report['seconds']:.1f} s)"]
    rows = [("model", "items", "requests/item", "requests", "input tokens", "output tokens", "cost USD",
             "batch USD")]
    for label, entry in report["by_model"].items():
        rows.append((label, str(entry["items"]), _cell(entry["requests_per_item"]), _cell(entry["requests"]),
                     _cell(entry["input_tokens"]), _cell(entry["output_tokens"]), _money(entry["cost_usd"]),
                     _money(entry["cost_usd_batch"])))
    if len(report["by_model"]) > 1:
        rows.append(("total", str(report["items"]), _cell(report["requests_per_item"]), _cell(report["requests"]),
                     _cell(report["input_tokens"]), _cell(report["output_tokens"]), _money(report["cost_usd"]),
                     _money(report["cost_usd_batch"])))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        lines.append("  " + "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                                      for i, (cell, w) in enumerate(zip(row, widths, strict=True))))
    per_item = _cell(report["requests_per_item"])
    if "bounds" in report:
        lines.append(f"requests per item: {per_item} (fewest: {report['bounds']['min']}; most: "
                     f"{report['bounds']['max']}); at most {report['requests_per_item_with_reasks']} with every "
                     "format re-ask")
    else:
        lines.append(f"requests per item: {per_item}, exact when every reply can be read (at most "
                     f"{report['requests_per_item_with_reasks']} with every format re-ask)")
    for label, entry in report["by_model"].items():
        how = entry["tokenizer"] if entry["approximate"] else f"exact ({entry['tokenizer']})"
        lines.append(f"tokens of {label}: {how}")
    assumed = report["output_budget"].get("assumed_reply_tokens") or {}
    budget = "each reply at its max_tokens (the protocol's, or --gen's)"
    if assumed:
        agents = ", ".join(sorted(assumed))
        budget += (f"; {agents} set no max_tokens: {next(iter(assumed.values()))} tokens a reply assumed "
                   "(--gen AGENT.max_tokens=N sets one)")
    lines.append(f"output tokens: {budget}")
    lines.append(f"prices: {report['prices']}" + ("" if report["cost_usd"] is not None else
                                                     "; no model of this run has a price (--prices FILE)"))
    expected = report.get("expected")
    if expected:
        cost = "" if expected["cost_usd"] is None else f", ${_money(expected['cost_usd'])} " \
            f"(batch ${_money(expected['cost_usd_batch'])})"
        lines.append(f"expected: {_cell(expected['input_tokens'])} input + {_cell(expected['output_tokens'])} output "
                     f"tokens{cost}, with {expected['label']}; the table is the bound (every reply at its "
                     "max_tokens)")
    lines.append(f"wall time: at least {_duration(report['wall_time_s'])} ({report['wall_time_bound']})")
    for item_id, reason in (report.get("items_not_estimated") or {}).items():
        lines.append(f"  not estimated: item {item_id}: {reason}")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, dict):
        return f"{value['min']:,}-{value['max']:,}"
    return f"{value:,}"


def _money(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return f"{value['min']:.4f}-{value['max']:.4f}"
    return f"{value:.4f}"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def before_run(args: argparse.Namespace, setup: ProtocolSetup, context: JuryContext, items: Any,
               prices: Mapping[str, Any] | None) -> Budget | None:
    """What ``eval`` does before it starts: print the one-line estimate (unless ``--quiet``; on ``--resume``, of
    the items still to do) and, with ``--max-cost``/``--max-total-tokens``, the budget, whose per-item reserve
    comes from that estimate."""
    from jurygraph.cli.preflight import UsageError

    wants_budget = args.max_cost is not None or args.max_total_tokens is not None
    if args.quiet and not wants_budget:
        return None
    try:
        with still_to_do(args, items) as (todo, total, _, cache):
            result, line = pre_run_estimate(setup, context, todo, total, prices, cache, measured_lengths(args))
    except Exception as err:  # an estimate that cannot be made never stops a run; a budget then reserves nothing
        result, line = None, f"no estimate ({type(err).__name__}: {err})"
    if not args.quiet:
        print(f"jurygraph: {line}", file=sys.stderr)
    if not wants_budget:
        return None
    if args.max_cost is not None and not any(price_of(label, prices) for label in model_labels(context)):
        raise UsageError("--max-cost: no model of this run has a price (a model at your own --base-url is priced "
                         "only by --prices FILE); give --prices, or a budget in tokens: --max-total-tokens N")
    return Budget.from_estimate(result, max_cost_usd=args.max_cost, max_total_tokens=args.max_total_tokens,
                                batch=args.batch, price_item=item_pricer(setup, context, prices, batch=args.batch))


def model_labels(context: JuryContext) -> list[str]:
    """The labels of the models a context names (a chat model object has none the price table knows)."""
    labels = []
    for choice in [*context.models.values(), context.default]:
        if isinstance(choice, str | ModelSpec | dict):
            labels.append(to_spec(choice).label)
    return labels


def item_pricer(setup: ProtocolSetup, context: JuryContext, prices: Mapping[str, Any] | None, *,
                batch: bool) -> Callable[[EvalItem], Spend]:
    """What one item may cost at most, from the item itself: its calls rendered as the dry run renders them (every
    reply at its output budget, loops at their longest; tokens approximated, no tokenizer loaded; at batch prices
    with ``batch``), the run's cache not consulted (a reserve is never 0). Raises ValueError for an item the
    protocol cannot render. ``Budget`` adds its margin."""
    graph = setup.most_graph if setup.most_graph is not None else setup.graph
    app = graph.compile() if isinstance(graph, StateGraph) else graph

    def price(item: EvalItem) -> Spend:
        result = estimate(app, [item], context=context, total=1, prices=prices, sample=None, bounded=False,
                          tokenizer="approximate")
        most = result.item_most
        if result.failed or not most:
            raise ValueError(next(iter(result.failed.values()), "nothing rendered"))
        cost = (most["cost_usd_batch"] if batch else most["cost_usd"]) if result.cost() is not None else None
        return Spend(round(most["requests"]), round(most["input_tokens"]), round(most["output_tokens"]), cost)

    return price
