"""The benchmark scenarios of issue 7. Each starts its own model server process and returns a Result.

ideal time = critical-path calls x latency x ceil(items / concurrency): what a runner that adds no
time of its own would take when each item's calls on the critical path are sequential and
``concurrency`` items are in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from benchmarks.bare import bare_chateval
from benchmarks.commands import jurygraph_command, load, measured
from benchmarks.server import ServerOptions, ServerProcess
from jurygraph import (
    EvalItem,
    JuryContext,
    ModelSpec,
    RunSummary,
    arun,
    create_chateval,
    create_debate,
    create_refer,
    load_dataset,
    read_results,
)
from jurygraph.running.batch import open_batches
from jurygraph.running.rundir import MANIFEST, RESULTS, read_batch_events

DATASET, ASPECT = "summeval", "coherence"  # 1600 items; every protocol has a template for it


@dataclass
class Settings:
    items: int = 200
    concurrency: int = 50
    latency: float = 1.0  # scenarios 1-3 (issue 7: 1 s)
    short_latency: float = 0.2  # rerun, faults, crash
    framework_items: int = 200
    repeats: int = 3  # framework scenario: each path measured this many times, the median is reported
    hang_seconds: float = 5.0
    call_timeout: float = 1.0  # the client's per-call timeout in the fault scenario (hangs hit it)
    profile: bool = True
    work: Path = Path("bench-runs")
    scale_sizes: tuple[int, ...] = (200, 2_000, 20_000)
    scale_args: tuple[str, ...] = ()  # extra `jurygraph eval` options of the scale scenario's runs
    scale_formats: tuple[str, ...] = ("jsonl",)  # the dataset files of the scale scenario (SCALE_FORMATS)
    server: str = "asyncio"  # the benchmark server's engine (benchmarks/server.py: asyncio or threaded)
    capacity_requests: int = 20_000  # framework scenario: requests of each load-generator run
    peer_items: int = 80  # peers scenario: FairEval questions
    peer_runs: int = 5  # peers scenario: interleaved runs of each contender at each latency
    peer_pythons: tuple[tuple[str, str], ...] = ()  # peers scenario: (peer, the Python that runs it)
    startup_items: int = 20
    startup_runs: int = 5

    @classmethod
    def quick(cls, work: Path) -> Settings:
        return cls(items=20, concurrency=5, latency=0.05, short_latency=0.05, framework_items=40, repeats=1,
                   hang_seconds=2.0, call_timeout=0.5, profile=False, work=work, capacity_requests=2_000,
                   scale_sizes=(50, 200), peer_items=20, peer_runs=1, startup_items=5, startup_runs=1)


@dataclass
class Result:
    scenario: str
    items: int
    concurrency: int
    latency: float
    seconds: float
    requests: int
    critical_path: int | None = None  # sequential calls per item
    expected_requests: int | None = None
    target: str = ""
    target_met: bool | None = None
    checks: dict[str, bool] = field(default_factory=dict)
    figures: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def ideal(self) -> float | None:
        if self.critical_path is None:
            return None
        return self.critical_path * self.latency * math.ceil(self.items / self.concurrency)

    @property
    def ratio(self) -> float | None:
        ideal = self.ideal
        return self.seconds / ideal if ideal else None

    @property
    def ok(self) -> bool:
        return all(self.checks.values())

    def to_json(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "items": self.items, "concurrency": self.concurrency,
                "latency": self.latency, "seconds": round(self.seconds, 3), "ideal": self.ideal,
                "ratio": None if self.ratio is None else round(self.ratio, 3), "requests": self.requests,
                "expected_requests": self.expected_requests, "critical_path": self.critical_path,
                "target": self.target, "target_met": self.target_met, "checks": self.checks,
                "figures": self.figures, "notes": self.notes}


# --- shared pieces ---------------------------------------------------------------------------------


def distinct_items() -> list[EvalItem]:
    """SummEval's items with distinct texts: a summary that two systems produced word for word would make
    identical calls, which the LLM cache rightly answers once, and the counts would be off."""
    items, seen = [], set()
    for item in load_dataset(DATASET, aspect=ASPECT).items:
        if (item.source, item.response) not in seen:
            seen.add((item.source, item.response))
            items.append(item)
    return items


def bench_items(n: int) -> list[EvalItem]:
    """The first n distinct SummEval items."""
    items = distinct_items()
    if n > len(items):
        raise ValueError(f"{DATASET} has {len(items)} distinct {ASPECT} items; asked for {n}")
    return items[:n]


def spec_for(server: ServerProcess, **params: Any) -> ModelSpec:
    return ModelSpec.parse(f"openai:bench@{server.base_url}", **params)


def serve(settings: Settings, **options: Any) -> ServerProcess:
    """The benchmark server with these options, on the engine the settings name (``--server``)."""
    return ServerProcess(ServerOptions(engine=settings.server, **options))


def timed_run(graph: Any, items: Sequence[EvalItem], out: Path, context: JuryContext, concurrency: int,
              **kwargs: Any) -> tuple[RunSummary, float]:
    """One runner call (its own event loop, as ``jurygraph eval`` does); returns the summary and wall time."""
    started = time.perf_counter()
    summary = asyncio.run(arun(graph, items, out_dir=out, context=context, concurrency=concurrency,
                               progress=False, **kwargs))
    return summary, time.perf_counter() - started


def result_lines(out: Path) -> list[dict[str, Any]]:
    """Every line of results.jsonl as written (duplicates included: that is what is checked)."""
    return [json.loads(line) for line in (out / RESULTS).read_text(encoding="utf-8").splitlines() if line.strip()]


def integrity(out: Path, items: Sequence[EvalItem]) -> tuple[dict[str, bool], dict[str, Any]]:
    """200 items in -> 200 lines out, each id once, none missing; plus the status counts."""
    lines = result_lines(out)
    ids = [r["id"] for r in lines]
    wanted = {item.id for item in items}
    counts = Counter(ids)
    figures = {"results": len(lines), "lost": len(wanted - set(ids)),
               "duplicated": sum(c - 1 for c in counts.values() if c > 1),
               "statuses": dict(Counter(r["status"] for r in lines)),
               "missing_verdicts": sum(1 for r in lines if r["status"] == "ok"
                                       and (not r.get("verdict") or r["verdict"].get("missing")))}
    checks = {"one result per item": len(lines) == len(items) and set(ids) == wanted,
              "no duplicates": figures["duplicated"] == 0, "none lost": figures["lost"] == 0}
    return checks, figures


def _ratio_target(result: Result, bound: float) -> None:
    result.target = f"measured <= {bound} x ideal"
    result.target_met = result.ratio is not None and result.ratio <= bound


# --- 1-3: latency-bound protocol runs ----------------------------------------------------------------


def _protocol_run(name: str, replies: str, graph: Any, critical_path: int, calls_per_item: int,
                  settings: Settings, verify: Callable[[list[dict[str, Any]], dict[str, Any]], dict[str, bool]],
                  ) -> Result:
    items = bench_items(settings.items)
    out = settings.work / name
    with serve(settings, replies=replies, latency=settings.latency) as server:
        context = JuryContext(default=spec_for(server))
        cpu = time.process_time()
        summary, seconds = timed_run(graph, items, out, context, settings.concurrency)
        cpu = time.process_time() - cpu
        stats = server.stats()
    result = Result(name, len(items), settings.concurrency, settings.latency, seconds, stats["requests"],
                    critical_path=critical_path, expected_requests=calls_per_item * len(items))
    checks, figures = integrity(out, items)
    result.checks.update(checks)
    result.checks["requests = expected"] = stats["requests"] == result.expected_requests
    result.checks.update(verify(read_results(out), stats))
    result.figures.update(figures, requests_per_item=stats["requests"] / len(items), by_n=stats["by_n"],
                          client_cpu_seconds=round(cpu, 2),
                          runner_requests=summary.requests)
    return result


def chateval(settings: Settings) -> Result:
    """ChatEval one-by-one, 2 referees x 2 turns: 4 sequential calls per item."""

    def verify(records: list[dict[str, Any]], stats: dict[str, Any]) -> dict[str, bool]:
        return {"every item scored by both referees": all(
            r["status"] == "ok" and r["verdict"]["n_judgments"] == 2 for r in records)}

    result = _protocol_run("chateval", "chateval", create_chateval(referees=2, turns=2), 4, 4, settings, verify)
    _ratio_target(result, 1.25)
    return result


DEBATE_N = 4


def debate(settings: Settings) -> Result:
    """DEBATE n=4 with a Critic that never says NO ISSUE: Scorer, then n x (Critic, Scorer) = 2n + 1
    sequential calls per item (the Commander relays without a model call)."""

    def verify(records: list[dict[str, Any]], stats: dict[str, Any]) -> dict[str, bool]:
        return {"every debate ran n iterations": all(
            r["status"] == "ok" and r["verdict"]["detail"]["ended"] == "iteration_limit"
            and r["verdict"]["detail"]["iterations"] == DEBATE_N for r in records)}

    calls = 2 * DEBATE_N + 1
    result = _protocol_run("debate", "debate", create_debate(critic="strict", max_iterations=DEBATE_N),
                           calls, calls, settings, verify)
    _ratio_target(result, 1.25)
    return result


REFER_K, REFER_N = 3, 20


def refer(settings: Settings) -> Result:
    """ReFeR-Turbo K=3, n=20: K peers in one superstep, then the area chair's one request with n=20.
    Critical path 2 calls; K + 1 requests per item."""

    def verify(records: list[dict[str, Any]], stats: dict[str, Any]) -> dict[str, bool]:
        items = len(records)
        return {"area chair: one request with n=20 per item": stats["by_n"].get(str(REFER_N)) == items,
                "peers: n=1": stats["by_n"].get("1") == REFER_K * items,
                "20 area-chair ratings per verdict": all(
                    r["status"] == "ok" and r["verdict"]["n_judgments"] == REFER_N for r in records)}

    result = _protocol_run("refer", "refer", create_refer(peers=REFER_K, variant="turbo", samples=REFER_N),
                           2, REFER_K + 1, settings, verify)
    result.target = f"requests per item = K + 1 = {REFER_K + 1}"
    result.target_met = result.requests == (REFER_K + 1) * result.items
    return result


# --- 4: rerun of a finished run ----------------------------------------------------------------------


def rerun(settings: Settings) -> Result:
    """A finished ChatEval run rerun with resume (same run dir), then judged again into a new run dir
    that shares the first run's LLM cache. Both must send 0 requests."""
    items = bench_items(settings.items)
    out, fresh = settings.work / "rerun", settings.work / "rerun-shared-cache"
    with serve(settings, replies="chateval", latency=settings.short_latency) as server:
        context = JuryContext(default=spec_for(server))
        _, first_seconds = timed_run(create_chateval(), items, out, context, settings.concurrency)
        first = server.stats()["requests"]
        before = result_lines(out)
        summary, seconds = timed_run(create_chateval(), items, out, context, settings.concurrency, resume=True)
        after_resume = server.stats()["requests"]
        _, cached_seconds = timed_run(create_chateval(), items, fresh, context, settings.concurrency,
                                      cache=out / "llm_cache.sqlite")
        after_cache = server.stats()["requests"]
    result = Result("rerun", len(items), settings.concurrency, settings.short_latency, seconds,
                    after_resume - first, critical_path=0, expected_requests=0)
    checks, figures = integrity(out, items)
    result.checks.update(checks)
    result.checks["resume sent 0 requests"] = after_resume == first
    result.checks["results unchanged"] = result_lines(out) == before
    result.checks["new run dir + shared cache sent 0 requests"] = after_cache == after_resume
    same = {r["id"]: r["verdict"] for r in read_results(fresh)} == {r["id"]: r["verdict"] for r in before}
    result.checks["shared-cache run has the same verdicts"] = same
    result.figures.update(figures, first_run_seconds=round(first_seconds, 3), first_run_requests=first,
                          skipped=summary.skipped, shared_cache_seconds=round(cached_seconds, 3),
                          shared_cache_requests=after_cache - after_resume)
    result.target, result.target_met = "0 requests", after_resume == first and after_cache == after_resume
    return result


# --- 5: framework cost at zero latency: benchmarks/overhead.py (through the CLI); its in-process profile here ----


def _profile_graph(items: Sequence[EvalItem], context: JuryContext, settings: Settings) -> dict[str, Any]:
    """The graph run and the bare loop once more under cProfile: main-thread CPU time (tottime) per call,
    grouped by what spends it, side by side. With pyinstrument installed (the ``bench`` extra) one more
    graph run writes its call tree."""
    import cProfile
    import pstats

    def one_run(name: str) -> None:
        asyncio.run(arun(create_chateval(), items, out_dir=settings.work / f"framework-profiled-{name}",
                         context=context, concurrency=settings.concurrency, progress=False))

    def bare_run() -> None:
        assert isinstance(context.default, ModelSpec)
        asyncio.run(bare_chateval(items, context.default, concurrency=settings.concurrency))

    calls = 4 * len(items)
    groups: dict[str, Counter[str]] = {}
    paths = []
    for name, target, args in (("graph", one_run, ("cprofile",)), ("bare", bare_run, ())):
        # the thread's CPU clock, not the wall's: on a loaded machine the wall clock charges the time spent waiting
        # for a core to whatever function was running then
        profile = cProfile.Profile(time.thread_time)
        profile.runcall(target, *args)
        stats = pstats.Stats(profile)
        groups[name] = Counter()
        for (path, _, _), (_, _, tottime, _, _) in stats.stats.items():  # type: ignore[attr-defined]
            groups[name][_group(path)] += tottime
        flat = settings.work / f"framework-cprofile-{name}.txt"
        with flat.open("w", encoding="utf-8") as handle:
            pstats.Stats(profile, stream=handle).sort_stats("cumulative").print_stats(80)
        paths.append(str(flat))
    by_group = {group: f"graph {1000 * groups['graph'][group] / calls:.2f} / bare "
                       f"{1000 * groups['bare'][group] / calls:.2f} ms per call"
                for group, _ in groups["graph"].most_common()}
    by_group["total"] = (f"graph {1000 * sum(groups['graph'].values()) / calls:.2f} / bare "
                         f"{1000 * sum(groups['bare'].values()) / calls:.2f} ms per call")
    out: dict[str, Any] = {"by_group": by_group, "paths": paths}
    try:
        from pyinstrument import Profiler
    except ImportError:
        return out
    tree = Profiler(interval=0.0005, async_mode="disabled")
    with tree:
        one_run("pyinstrument")
    path = settings.work / "framework-pyinstrument.txt"
    path.write_text(tree.output_text(unicode=False, color=False, show_all=False), encoding="utf-8")
    paths.append(str(path))
    return out


GROUPS = {
    "http client (openai, httpx, httpcore, h11, anyio)": ("openai", "httpx", "httpcore", "h11", "anyio", "sniffio",
                                                          "httpx2", "ssl", "socket", "ipaddress"),
    "langgraph + checkpointer": ("langgraph",),
    "langchain_core (runnables, callbacks, messages)": ("langchain_core", "langchain_openai", "langsmith"),
    "jurygraph (nodes, calls, runner, cache)": ("jurygraph", "graphs", "nodes"),
    "event loop (asyncio, selectors)": ("asyncio", "selectors", "contextvars", "_asyncio", "select"),
    "sqlite (aiosqlite, sqlite3)": ("aiosqlite", "sqlite3", "_sqlite3"),
    "serialisation (json, pydantic, ormsgpack)": ("json", "pydantic", "pydantic_core", "ormsgpack", "_json"),
    "typing/inspect (signatures, type checks)": ("typing", "inspect", "typing_extensions", "abc"),
}


def _group(path: str) -> str:
    """What a profiled function belongs to, from its source path (or built-in name)."""
    parts = Path(path).parts
    if "site-packages" in parts:
        rest = parts[parts.index("site-packages") + 1:]
        top = rest[0].removesuffix(".py") if rest else "?"
    elif any(root in parts for root in ("jurygraph", "graphs", "nodes")):
        top = "jurygraph"
    elif "python3.11" in parts:
        rest = parts[parts.index("python3.11") + 1:]
        top = rest[0].removesuffix(".py") if rest else "stdlib"
    else:
        top = path  # "~": built-in functions (socket send/recv, epoll, isinstance...)
    for group, members in GROUPS.items():
        if top in members:
            return group
    return "built-ins (socket I/O, epoll, isinstance...)" if top == "~" else "other"


# --- 6: faults ----------------------------------------------------------------------------------------


FAULT_SHARE = 0.10


def faults(settings: Settings) -> Result:
    """10 % of requests fail: 429 (with Retry-After), 500, hangs past the client's timeout, unparseable
    bodies, 2.5 % each. Every item must come out exactly once; failed items are retried by a resume."""
    items = bench_items(settings.items)
    out = settings.work / "faults"
    share = FAULT_SHARE / 4
    options = ServerOptions(replies="chateval", engine=settings.server, latency=settings.short_latency,
                            rate_429=share, rate_500=share,
                            rate_hang=share, rate_garbage=share, hang_seconds=settings.hang_seconds, seed=7)
    with ServerProcess(options) as server:
        context = JuryContext(default=spec_for(server, timeout=settings.call_timeout))
        _, seconds = timed_run(create_chateval(), items, out, context, settings.concurrency)
        stats = server.stats()
        checks, figures = integrity(out, items)
        failures = Counter(_reason(r.get("error", "")) for r in result_lines(out) if r["status"] != "ok")
        resumed, resume_seconds = timed_run(create_chateval(), items, out, context, settings.concurrency,
                                            resume=True)
        after = server.stats()
    result = Result("faults", len(items), settings.concurrency, settings.short_latency, seconds, stats["requests"],
                    critical_path=4, expected_requests=4 * len(items))
    result.checks.update(checks)
    resumed_checks, resumed_figures = integrity(out, items)
    result.checks.update({f"after resume: {k}": v for k, v in resumed_checks.items()})
    result.figures.update(figures, outcomes=stats["outcomes"], failed_reasons=dict(failures),
                          resume={"seconds": round(resume_seconds, 3), "statuses": resumed_figures["statuses"],
                                  "requests": after["requests"] - stats["requests"], "skipped": resumed.skipped})
    result.target = f"{len(items)} results, 0 lost, 0 duplicated"
    result.target_met = resumed_checks["one result per item"] and checks["one result per item"]
    return result


def _reason(error: str) -> str:
    return error.split(":", 1)[0] if error else "?"


# --- 7: kill -9 half-way, resume ------------------------------------------------------------------------


def _cache_entries(path: Path) -> int:
    """Answers a (killed) run had received and stored in its LLM cache."""
    import sqlite3

    if not path.exists():
        return 0
    with contextlib.closing(sqlite3.connect(path)) as db:
        return int(db.execute("SELECT COUNT(*) FROM calls").fetchone()[0])


def _cli(url: str, out: Path, dataset: Path, settings: Settings, *, resume: bool = False) -> list[str]:
    if resume:
        return [sys.executable, "-m", "jurygraph.cli", "eval", "--resume", str(out), "--quiet"]
    return [sys.executable, "-m", "jurygraph.cli", "eval", "--protocol", "chateval", "--dataset", str(dataset),
            "--task", "score", "--aspect", ASPECT, "--model", f"openai:bench@{url}",
            "--concurrency", str(settings.concurrency), "--out", str(out), "--quiet"]


def write_items(items: Sequence[EvalItem], path: Path) -> Path:
    """The items as a JSONL dataset (every EvalItem field under its own name) for ``jurygraph eval``."""
    path.write_text("".join(json.dumps(item.model_dump(mode="json")) + "\n" for item in items), encoding="utf-8")
    return path


def _lines(out: Path) -> int:
    path = out / RESULTS
    return path.read_bytes().count(b"\n") if path.exists() else 0


def crash(settings: Settings) -> Result:
    """``jurygraph eval`` in a subprocess, ``kill -9`` once half the items are written, then
    ``jurygraph eval --resume``; compared with an uninterrupted run against the same server (replies
    depend only on the call, so both must reach the same verdicts). Latency has jitter so items are
    at different steps when the kill lands."""
    latency = settings.short_latency
    whole, crashed = settings.work / "crash-uninterrupted", settings.work / "crash-killed"
    options = ServerOptions(replies="chateval", engine=settings.server, latency=latency, jitter=latency / 2, seed=3)
    items = bench_items(settings.items)
    dataset = write_items(items, settings.work / "crash-items.jsonl")
    with ServerProcess(options) as server:
        started = time.perf_counter()
        subprocess.run(_cli(server.base_url, whole, dataset, settings), check=True, capture_output=True)
        whole_seconds = time.perf_counter() - started
        whole_requests = server.stats()["requests"]
        whole_digests = Counter(e["digest"] for e in server.log())
        log_start = len(server.log())

        started = time.perf_counter()
        child = subprocess.Popen(_cli(server.base_url, crashed, dataset, settings), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        # half the calls, plus one for each item in flight: the kill lands inside items, not between them
        kill_at = whole_requests + whole_requests // 2 + settings.concurrency
        while server.stats()["answered"] < kill_at and child.poll() is None:
            time.sleep(0.005)
        killed_at = time.time()
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        lines_at_kill = _lines(crashed)
        time.sleep(latency * 1.5 + 0.3)  # requests in flight at the kill are answered (to nobody) by now
        crash_stats = server.stats()
        # a request the kill cut off mid-send reaches the server without a body (no model, no messages)
        raw_crash_log = server.log(log_start)
        crash_log = [e for e in raw_crash_log if e["model"] is not None]
        truncated = len(raw_crash_log) - len(crash_log)
        cached_at_kill = _cache_entries(crashed / "llm_cache.sqlite")
        manifest_after_kill = (crashed / MANIFEST).exists()
        if manifest_after_kill:
            resumed_with = "jurygraph eval --resume"
            resumed = subprocess.run(_cli(server.base_url, crashed, dataset, settings, resume=True),
                                     capture_output=True, text=True)
            resume_ok, resume_error = resumed.returncode == 0, resumed.stderr[-500:]
        else:
            # `eval --resume` needs the manifest the killed run never wrote: resume through the Python API
            resumed_with = "run(..., resume=True) (no manifest.json after the kill)"
            context = JuryContext(default=spec_for(server))
            summary, _ = timed_run(create_chateval(), items, crashed, context,
                                   settings.concurrency, resume=True)
            resume_ok, resume_error = summary.failed == 0, ""
        seconds = time.perf_counter() - started
        final = server.stats()
        resume_log = server.log(log_start + len(raw_crash_log))
    answered_at = {e["digest"]: e["t"] for e in crash_log if e["t"] <= killed_at}
    answered_before_kill = set(answered_at)
    in_flight = (crash_stats["requests"] - whole_requests) - len(answered_before_kill)
    resent = [e["digest"] for e in resume_log if e["digest"] in answered_before_kill]
    # an answer the server wrote just before the kill may still have been in the socket or in the busy
    # client's event-loop queue, never read, so never cached: how long before the kill were they answered?
    ages = sorted(round(killed_at - answered_at[d], 3) for d in resent)
    extra_calls = sorted(({e["digest"] for e in crash_log + resume_log}) - set(whole_digests))
    (settings.work / "crash-server-log.json").write_text(json.dumps(
        {"killed_at": killed_at, "uninterrupted": list(whole_digests), "killed": crash_log, "resumed": resume_log}))
    crashed_requests = final["requests"] - whole_requests
    verdicts_whole = {r["id"]: r.get("verdict") for r in read_results(whole)}
    verdicts_crashed = {r["id"]: r.get("verdict") for r in read_results(crashed)}
    checks, figures = integrity(crashed, items)
    result = Result("crash", len(items), settings.concurrency, latency, seconds, crashed_requests,
                    critical_path=4, expected_requests=whole_requests)
    result.checks.update(checks)
    result.checks["the kill landed half-way"] = 0 < lines_at_kill < len(items)
    # calls answered beyond the finished items' 4 each: some items were killed between their calls
    result.checks["some items were killed mid-way"] = len(answered_before_kill) > 4 * lines_at_kill
    result.checks["manifest.json written before the kill (eval --resume needs it)"] = manifest_after_kill
    result.checks["resume finished every item"] = resume_ok
    result.checks["same verdicts as the uninterrupted run"] = verdicts_whole == verdicts_crashed
    # what the killed run had received is what its LLM cache holds: the resume must send none of it again
    result.checks["resume sent only calls the killed run had not cached"] = (
        final["requests"] - crash_stats["requests"] <= whole_requests - cached_at_kill)

    result.checks["same calls as the uninterrupted run"] = set(whole_digests) == {
        e["digest"] for e in crash_log + resume_log}
    result.figures.update(figures, uninterrupted={"seconds": round(whole_seconds, 3), "requests": whole_requests},
                          lines_at_kill=lines_at_kill, requests_before_kill=crash_stats["requests"] - whole_requests,
                          answered_before_kill=len(answered_before_kill), in_flight_at_kill=in_flight,
                          resume_requests=final["requests"] - crash_stats["requests"],
                          cached_at_kill=cached_at_kill, truncated_by_the_kill=truncated,
                          answered_calls_resent=len(resent),
                          resent_seconds_before_kill=ages, calls_not_in_uninterrupted=len(extra_calls),
                          resumed_with=resumed_with)
    result.target = "same verdicts; no answered call sent again"
    result.target_met = (result.checks["same verdicts as the uninterrupted run"]
                         and result.checks["resume sent only calls the killed run had not cached"])
    if resume_error and not resume_ok:
        result.notes.append(resume_error)
    return result


# --- crash-money: the books balance after any kill (issue 28) -----------------------------------------------------


CRASH_MONEY_KILLS = 10
CRASH_MONEY_MODES = ("online", "batch", "ray")


def _money_run(mode: str, url: str, out: Path, dataset: Path, prices: Path, budget: float,
               concurrency: int) -> list[str]:
    command = [sys.executable, "-m", "jurygraph.cli", "eval", "--protocol", "chateval", "--no-calibrate",
               "--dataset", str(dataset), "--task", "score", "--aspect", ASPECT, "--model", f"openai:bench@{url}",
               "--concurrency", str(concurrency), "--out", str(out), "--quiet", "--prices", str(prices),
               "--max-cost", f"{budget:.6f}", "--gen", "*.max_tokens=60"]
    if mode == "batch":
        command += ["--batch", "--batch-poll", "0.05"]
    elif mode == "ray":
        command += ["--ray", "local", "--workers", "2"]
    return command


def _descendants(pid: int) -> list[Any]:
    """A process's descendants (psutil processes: killing one checks it is still the process it was)."""
    import psutil

    with contextlib.suppress(psutil.Error):
        return list(psutil.Process(pid).children(recursive=True))
    return []


def _end(processes: Sequence[Any]) -> None:
    """Kill these processes (a killed driver's Ray helpers) once they have had a moment to go by themselves."""
    import psutil

    time.sleep(1.0)
    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()


def _ledger_requests(out: Path) -> int:
    """The requests a run's ledger holds (read directly: what survived the kill)."""
    import sqlite3

    path = out / "ledger.sqlite"
    if not path.exists():
        return 0
    with contextlib.closing(sqlite3.connect(path)) as db:
        return int(db.execute("SELECT COALESCE(SUM(requests), 0) FROM payments").fetchone()[0])


def crash_money(settings: Settings) -> Result:
    """Issue 28: ``kill -9`` of ``jurygraph eval`` at 10 random points, across online, ``--batch`` and ``--ray``
    runs with a ``--max-cost`` budget that stops each before its last item; then ``--resume`` (the same budget).
    After each resume the run's ledger (``spend.json``) must equal what the server billed: every answered call and
    batch line, their tokens and USD, but for the calls in flight at the kill (answered to a dead process, sent
    again by the resume and counted then: at most one per item in flight online, none in batch mode, whose batch
    is collected, not sent again). And the spend must stay within the budget."""
    import random

    rng = random.Random(28)
    latency = settings.short_latency
    items = bench_items(min(settings.items, 40))
    dataset = write_items(items, settings.work / "crash-money-items.jsonl")
    prices = settings.work / "crash-money-prices.json"
    prices.write_text(json.dumps({"bench": {"input": 1.0, "output": 4.0}}), encoding="utf-8")
    concurrency = max(2, min(settings.concurrency, 8))
    try:
        import ray as _  # noqa: F401
        modes: tuple[str, ...] = CRASH_MONEY_MODES
    except ImportError:
        modes = ("online", "batch")
    trials: list[dict[str, Any]] = []
    bound: dict[str, Any] | None = None
    started = time.perf_counter()
    for number in range(CRASH_MONEY_KILLS):
        mode = modes[number % len(modes)]
        share = rng.uniform(0.1, 0.8)
        for attempt in range(3):  # a run that could not start (a local Ray cluster beside other sessions') again
            out = settings.work / (f"crash-money-{number}" + (f"-{attempt}" if attempt else ""))
            options = ServerOptions(replies="chateval", engine=settings.server, latency=latency, jitter=latency / 2,
                                    seed=number)
            with ServerProcess(options) as server:
                if bound is None:  # the dry run's bound for the whole run (replies at their 60-token budget)
                    command = _money_run("online", server.base_url, out, dataset, prices, 1.0, concurrency)
                    dry = subprocess.run([*command[:-4], "--gen", "*.max_tokens=60", "--dry-run", "--json"],
                                         capture_output=True, text=True, check=True)
                    bound = json.loads(dry.stdout)
                # a budget of ~70 % of the bound stops each run before its last items; the kill lands at a random
                # share of the calls that budget allows
                budget = round(0.7 * float(bound["cost_usd_batch" if mode == "batch" else "cost_usd"]), 6)
                errors = settings.work / f"crash-money-{number}.stderr"
                with errors.open("w") as stderr:
                    child = subprocess.Popen(_money_run(mode, server.base_url, out, dataset, prices, budget,
                                                        concurrency), stdout=subprocess.DEVNULL, stderr=stderr)
                    kill_at = max(1, int(bound["requests"] * 0.7 * share))
                    deadline = time.monotonic() + 300
                    while server.stats()["billed"]["requests"] < kill_at and child.poll() is None \
                            and time.monotonic() < deadline:
                        time.sleep(0.005)
                    finished_first = child.poll() is not None
                    helpers = [] if finished_first else _descendants(child.pid)
                    if not finished_first:
                        os.kill(child.pid, signal.SIGKILL)
                    # at the kill (a Ray driver's workers notice its death a moment later: what they pay meanwhile
                    # is on record too, and counted by the resume)
                    at_kill = server.stats()
                    spend_at_kill = json.loads((out / "spend.json").read_text()) \
                        if (out / "spend.json").exists() else {}
                    ledger_at_kill = _ledger_requests(out)
                    # a --ray local driver's cluster goes with it, but for two helper processes Ray leaves running:
                    # they are this scenario's to end, by their ids
                    _end(helpers)
                    child.wait()
                if finished_first and not (out / MANIFEST).exists():
                    continue  # it never started: no run to resume
                # a batch the provider finished but the killed run had not collected is in flight (the resume
                # collects it; nothing is sent again)
                waiting = sum(e["requests"] for e in open_batches(read_batch_events(out)))
                time.sleep(latency * 2 + 0.3)  # calls in flight at the kill are answered (to nobody) by now
                resumed = subprocess.run([sys.executable, "-m", "jurygraph.cli", "eval", "--resume", str(out),
                                          "--quiet"], capture_output=True, text=True, timeout=600)
                final = server.stats()
            break
        else:
            trials.append({"kill": number + 1, "mode": mode, "ok": False,
                           "start_error": errors.read_text()[-400:]})
            continue
        spend = json.loads((out / "spend.json").read_text()) if (out / "spend.json").exists() else {}
        manifest = json.loads((out / MANIFEST).read_text()) if (out / MANIFEST).exists() else {}
        billed = final["billed"]
        lost = billed["requests"] - spend.get("requests", 0)
        in_flight = 0 if mode == "batch" else concurrency * (2 if mode == "ray" else 1)
        at_kill_bound = waiting if mode == "batch" else in_flight
        cost = (billed["input_tokens"] * 1.0 + billed["output_tokens"] * 4.0) / 1e6 * (0.5 if mode == "batch"
                                                                                       else 1.0)
        lines = result_lines(out) if (out / RESULTS).exists() else []
        trial = {
            "kill": number + 1, "mode": mode, "killed_at_billed": at_kill["billed"]["requests"],
            "ledger_at_kill": ledger_at_kill, "spend_json_at_kill": spend_at_kill.get("requests"),
            "finished_before_kill": finished_first,
            "resume_exit": resumed.returncode, "items_done": len(lines), "items": len(items),
            "billed_requests": billed["requests"], "ledger_requests": spend.get("requests"),
            "answered_at_kill_not_recorded": lost, "in_flight_bound": in_flight,
            "batch_lines_uncollected_at_kill": waiting if mode == "batch" else None, "attempts": attempt + 1,
            "billed_usd": round(cost, 6), "ledger_usd": spend.get("cost_usd"), "budget_usd": budget,
            "batches": final["batches"],
            "ok": (resumed.returncode in (0, 3) and 0 <= lost <= in_flight
                   and at_kill["billed"]["requests"] - ledger_at_kill <= at_kill_bound
                   and 0 <= billed["input_tokens"] + billed["output_tokens"] - spend.get("input_tokens", 0)
                   - spend.get("output_tokens", 0) <= lost * billed["most_tokens"]
                   and (lost > 0 or abs((spend.get("cost_usd") or 0.0) - cost) < 1e-6)
                   and (spend.get("cost_usd") or 0.0) <= budget + 1e-9
                   and manifest.get("spend") == spend
                   and len({r["id"] for r in lines}) == len(lines)),
        }
        if not trial["ok"] and resumed.returncode not in (0, 3):
            trial["resume_error"] = resumed.stderr[-400:]
        trials.append(trial)
    seconds = time.perf_counter() - started
    result = Result("crash-money", len(items), concurrency, latency, seconds,
                    sum(t.get("billed_requests", 0) for t in trials))
    for trial in trials:
        result.checks[f"kill {trial['kill']} ({trial['mode']}): ledger = billed (+- in flight), within budget"] = \
            trial["ok"]
    result.checks["every mode was killed"] = {t["mode"] for t in trials} == set(modes)
    result.figures["trials"] = trials
    # at the kill: what the server had billed less what the ledger held (the calls in flight), and less what
    # spend.json said (it follows the ledger: a thread writes it; a Ray driver reads the workers' rows each loop)
    ran = [t for t in trials if "killed_at_billed" in t]
    result.figures["ledger_lag_at_kill"] = {mode: max((t["killed_at_billed"] - t["ledger_at_kill"] for t in ran
                                                       if t["mode"] == mode), default=None) for mode in modes}
    result.figures["spend_json_lag_at_kill"] = {
        mode: max((t["killed_at_billed"] - (t["spend_json_at_kill"] or 0) for t in ran if t["mode"] == mode),
                  default=None) for mode in modes}
    result.target = "after each resume: the ledger = the server's billed calls, but for those in flight at the kill"
    result.target_met = result.ok
    return result


# --- 8: scale: does an item cost the same at 200, 2,000 and 20,000 items? ------------------------------


def scale_items(n: int) -> Iterator[EvalItem]:
    """n distinct items for any n: SummEval's distinct items cycled, each copy's response tagged with its
    index so that every item makes its own calls (a run of 20,000 must not be answered from its cache)."""
    base = distinct_items()
    for i in range(n):
        item = base[i % len(base)]
        lap = i // len(base)
        response = item.response if lap == 0 else f"{item.response} ({lap})"
        yield item.model_copy(update={"id": f"{item.id}#{lap}" if lap else item.id, "response": response})


def faireval_rows(n: int) -> Iterator[dict[str, Any]]:
    """n FairEval questions in the FairEval file's own layout: its 80 cycled, each copy with its own question_id
    and its answers tagged with the lap, so that every item makes its own calls."""
    base = json.loads((resources.files("jurygraph.data") / "faireval.json").read_text(encoding="utf-8"))
    for i in range(n):
        row, lap = base[i % len(base)], i // len(base)
        if lap:
            row = {**row, "question_id": i, "response": {k: f"{v} ({lap})" for k, v in row["response"].items()}}
        yield row


# the dataset files of the scale scenario: (the server's replies for their items, `jurygraph eval` options for them)
SCALE_FORMATS = {
    # SummEval coherence items as JSONL, every EvalItem field by name (issue 11's runs)
    "jsonl": ("chateval", "--task score --aspect coherence"),
    # FairEval questions in the FairEval file's layout: one JSON document, an array (issue 32's streaming)
    "faireval-json": ("faireval", "--no-calibrate"),
    # the same FairEval items as JSONL: the figure the JSON document is compared with
    "faireval-jsonl": ("faireval", "--task pairwise --no-calibrate"),
}


def write_scale_dataset(fmt: str, n: int, path: Path) -> Path:
    """The scale scenario's dataset of n items in format ``fmt`` (SCALE_FORMATS), written as it is generated: the
    harness never holds a large run's items."""
    with path.open("w", encoding="utf-8") as out:
        if fmt == "faireval-json":
            out.write("[\n")
            for number, row in enumerate(faireval_rows(n)):
                out.write((",\n" if number else "") + json.dumps(row))
            out.write("\n]\n")
            return path
        if fmt == "faireval-jsonl":
            base = load_dataset("faireval").items  # the rows faireval_rows cycles, as jurygraph reads them
            for i in range(n):
                item, lap = base[i % len(base)], i // len(base)
                if lap:
                    item = item.model_copy(update={"id": str(i), "response_1": f"{item.response_1} ({lap})",
                                                   "response_2": f"{item.response_2} ({lap})"})
                out.write(json.dumps(item.model_dump(mode="json")) + "\n")
            return path
        for item in scale_items(n):
            out.write(json.dumps(item.model_dump(mode="json")) + "\n")
    return path


def _disk(out: Path, name: str) -> int:
    """A SQLite file's bytes with its WAL (what the run leaves on disk)."""
    return sum(p.stat().st_size for p in out.glob(name + "*") if p.is_file())


def startup_figures() -> dict[str, Any]:
    """``jurygraph --help`` wall time (best of 3) and the slowest imports of it (``python -X importtime``)."""
    command = [sys.executable, "-m", "jurygraph.cli", "--help"]
    times = []
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    traced = subprocess.run([sys.executable, "-X", "importtime", *command[1:]], capture_output=True, text=True)
    cumulative: list[tuple[int, str]] = []
    for line in traced.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            name = parts[2].rstrip()
            if len(name) - len(name.lstrip()) <= 2:  # top-level imports (and their direct children)
                cumulative.append((int(parts[1]), name.strip()))
    top = sorted(cumulative, reverse=True)[:8]
    return {"help_seconds_best_of_3": round(min(times), 3),
            "help_seconds_all": [round(t, 3) for t in times],
            "importtime_top_cumulative_ms": {name: round(us / 1000, 1) for us, name in top}}


def _scale_run(server: ServerProcess, fmt: str, n: int, out: Path, settings: Settings) -> dict[str, Any]:
    """One ``jurygraph eval`` process over n items at zero latency: request rate (server clock, first request to
    last answer), first request after the command's start, exit after the last answer, peak RSS and CPU
    (``benchmarks/peak.py``: measured from a small parent, since a child of this process would count this
    process's memory), bytes on disk per item."""
    suffix = ".json" if fmt == "faireval-json" else ".jsonl"
    dataset = write_scale_dataset(fmt, n, settings.work / f"{out.name}{suffix}")
    command = [*jurygraph_command(), "eval", "--protocol", "chateval", "--dataset", str(dataset),
               *SCALE_FORMATS[fmt][1].split(), "--model", f"openai:bench@{server.base_url}",
               "--concurrency", str(settings.concurrency), "--out", str(out), "--quiet", *settings.scale_args]
    run = measured(server, command)
    results = _disk(out, RESULTS)
    checkpoints, cache = _disk(out, "checkpoints.sqlite"), _disk(out, "llm_cache.sqlite")
    return {"items": n, "format": fmt, "dataset_mb": round(dataset.stat().st_size / 2**20, 1),
            "results": _lines(out), **run,
            "bytes_per_item": {"results": round(results / n), "checkpoints": round(checkpoints / n),
                               "cache": round(cache / n)},
            "disk_over_results_line": round((checkpoints + cache) / results, 2) if results else None}


def scale(settings: Settings) -> Result:
    """ChatEval one-by-one (2 referees x 2 turns) through ``jurygraph eval`` at zero latency on 200, 2,000
    and 20,000 items (``Settings.scale_sizes``), in each dataset format (``Settings.scale_formats``), each run its
    own process: does the cost of an item (time, memory, disk) grow with the run? Plus the bare loop on the
    smallest size's items (the framework ratio through the CLI) and the command's start-up time. A size's
    time to come is estimated from the largest run's rate (``estimated_seconds``)."""
    sizes = settings.scale_sizes
    runs: dict[str, dict[str, Any]] = {}
    bare_rates: dict[str, float] = {}
    for fmt in settings.scale_formats:
        with serve(settings, replies=SCALE_FORMATS[fmt][0], latency=0.0) as server:
            for n in sizes:
                runs[f"{fmt} {n}"] = _scale_run(server, fmt, n, settings.work / f"scale-{fmt}-{n}", settings)
                print(f"   scale {fmt} {n}: {json.dumps(runs[f'{fmt} {n}'])}", flush=True)
            # the bare loop on the smallest size's items, as jurygraph read them (EvalItems as JSONL)
            first = settings.work / f"scale-{fmt}-{sizes[0]}{'.json' if fmt == 'faireval-json' else '.jsonl'}"
            items = (load_dataset(first, task="score", aspect=ASPECT) if fmt == "jsonl"
                     else load_dataset(first, task="pairwise") if fmt == "faireval-jsonl" else load_dataset(first))
            bare_items = write_items(list(items), settings.work / f"scale-{fmt}-bare.jsonl")
            bare = measured(server, [sys.executable, str(Path(__file__).with_name("bare.py")), "--url",
                                     server.base_url, "--dataset", str(bare_items),
                                     "--concurrency", str(settings.concurrency)])
            bare_rates[fmt] = bare["requests_per_second"] or 0.0
            runs[f"{fmt} {sizes[0]}"]["bare_requests_per_second"] = bare_rates[fmt]
            runs[f"{fmt} {sizes[0]}"]["bare_requests"] = bare["requests"]
    result = Result("scale", sum(sizes) * len(settings.scale_formats), settings.concurrency, 0.0,
                    sum(r["wall_s"] for r in runs.values()), sum(r["requests"] for r in runs.values()),
                    expected_requests=4 * sum(sizes) * len(settings.scale_formats))
    for name, figures in runs.items():
        result.checks[f"{name} items: every result, 4 requests each, exit 0"] = (
            figures["results"] == figures["items"] and figures["requests"] == 4 * figures["items"]
            and figures["exit_code"] == 0)
    met = True
    ratios: dict[str, dict[str, Any]] = {}
    for fmt in settings.scale_formats:
        small, large = runs[f"{fmt} {sizes[0]}"], runs[f"{fmt} {sizes[-1]}"]
        rate = (large["requests_per_second"] or 0.0) / (small["requests_per_second"] or 1.0)
        rss = large["peak_rss_mb"] / small["peak_rss_mb"]
        disk = max(runs[f"{fmt} {n}"]["disk_over_results_line"] or 0.0 for n in sizes)
        cli = (small["requests_per_second"] or 0.0) / bare_rates[fmt] if bare_rates[fmt] else 0.0
        rss_bound = 1.2 if fmt == "faireval-json" else 1.5
        ratios[fmt] = {"rate_largest_over_smallest": round(rate, 3), "rss_largest_over_smallest": round(rss, 3),
                       "rss_bound": rss_bound,
                       "cpu_per_request_largest_over_smallest": round(
                           (large["cpu_ms_per_request"] or 0.0) / (small["cpu_ms_per_request"] or 1.0), 3),
                       "disk_over_results_line_max": disk, "cli_over_bare": round(cli, 3)}
        met = met and rate >= 0.9 and rss <= rss_bound and disk <= 3 and cli >= 0.7
    largest = max(sizes)
    estimate = {f"{fmt} {n}": round(4 * n / (runs[f"{fmt} {largest}"]["requests_per_second"] or 1.0)
                                    + (runs[f"{fmt} {largest}"]["first_request_s"] or 0.0))
                for fmt in settings.scale_formats for n in (100_000,)}
    result.figures.update(runs=runs, ratios=ratios, startup=startup_figures(), cli_args=settings.scale_args,
                          estimated_seconds=estimate, load_at_end=load())
    result.target = ("per format: rate >= 0.9x, RSS <= 1.5x (a JSON document <= 1.2x) largest vs smallest; "
                     "disk <= 3x results line; CLI >= 0.7x bare")
    result.target_met = met
    return result


# --- 9: ray: one run spread over the workers of a local Ray cluster (issue 12) ----------------------------------


RAY_WORKERS = (2, 4)


def _ray_leg(name: str, items: Sequence[EvalItem], server: ServerProcess, settings: Settings, concurrency: int,
             workers: int | None) -> dict[str, Any]:
    """One run of the ray scenario: its wall time, the ideal at its total concurrency, requests, verdicts."""
    out = settings.work / name
    sent, logged = server.stats()["requests"], len(server.log())
    cpu = time.process_time()
    _, seconds = timed_run(create_chateval(referees=2, turns=2), items, out, JuryContext(default=spec_for(server)),
                           concurrency, **({"ray": "local", "workers": workers} if workers else {}))
    total = concurrency * (workers or 1)
    ideal = 4 * settings.latency * math.ceil(len(items) / total)
    checks, figures = integrity(out, items)
    manifest = json.loads((out / MANIFEST).read_text(encoding="utf-8"))
    answered = [entry["t"] for entry in server.log(logged)]
    # the first request went out one latency before its answer: from there to the last answer is the judging
    # itself, without the start-up (the command's imports; a Ray worker's own imports before its first shard)
    judging = answered[-1] - answered[0] + settings.latency
    return {"workers": workers or 0, "concurrency_per_process": concurrency, "in_flight_in_all": total,
            "seconds": round(seconds, 2), "ideal": round(ideal, 2), "ratio": round(seconds / ideal, 3),
            "judging_seconds": round(judging, 2), "judging_ratio": round(judging / ideal, 3),
            "start_up_seconds": round(seconds - judging, 2),
            "requests": server.stats()["requests"] - sent, "driver_cpu_seconds": round(time.process_time() - cpu, 2),
            "workers_cpu_seconds": round(sum(w["cpu_seconds"] for w in manifest.get("workers", [])), 2),
            "shards": (manifest.get("ray") or {}).get("shards"), "ok": all(checks.values()), "lost": figures["lost"],
            "duplicated": figures["duplicated"], "verdicts": {r["id"]: r.get("verdict") for r in read_results(out)}}


def ray(settings: Settings) -> Result:
    """ChatEval one-by-one (4 sequential calls per item at ``Settings.latency``) over the same items, judged by
    one process at ``concurrency`` items in flight and by 2 and 4 workers of a local Ray cluster
    (``--ray local --workers N``), each worker at the same ``concurrency``: the throughput N workers add. Then
    one process at the 4 workers' total concurrency: what the engine costs against one process doing the same
    work. The cluster is started once (its start-up is a figure of its own, paid by every ``--ray local``
    command)."""
    from jurygraph.running.distributed import RayOptions, connected

    items = bench_items(settings.items)
    per_worker = max(1, settings.concurrency // 2)
    legs: dict[str, dict[str, Any]] = {}
    with serve(settings, replies="chateval", latency=settings.latency) as server:
        legs["one process"] = _ray_leg("ray-1", items, server, settings, per_worker, None)
        started = time.perf_counter()
        with connected(RayOptions("local", workers=max(RAY_WORKERS))) as cluster:
            start_seconds = time.perf_counter() - started
            for n in RAY_WORKERS:
                legs[f"{n} workers"] = _ray_leg(f"ray-{n}", items, server, settings, per_worker, n)
        widest = max(RAY_WORKERS)
        legs[f"one process at {widest} x"] = _ray_leg(f"ray-1x{widest}", items, server, settings,
                                                      per_worker * widest, None)
    reference = legs["one process"]["verdicts"]
    result = Result("ray", len(items), per_worker * widest, settings.latency, legs[f"{widest} workers"]["seconds"],
                    legs[f"{widest} workers"]["requests"], critical_path=4, expected_requests=4 * len(items))
    for name, leg in legs.items():
        result.checks[f"{name}: one result per item, none lost"] = leg["ok"]
        result.checks[f"{name}: {4 * len(items)} requests"] = leg["requests"] == 4 * len(items)
        result.checks[f"{name}: the one-process verdicts"] = leg.pop("verdicts") == reference
    one = legs["one process"]["seconds"]
    result.figures.update(
        legs=legs, cluster_cpus=cluster.cpus, cluster_start_seconds=round(start_seconds, 2),
        speedup={f"{n} workers": round(one / legs[f"{n} workers"]["seconds"], 2) for n in RAY_WORKERS},
        engine_over_one_process_at_equal_concurrency=round(
            legs[f"{widest} workers"]["seconds"] / legs[f"one process at {widest} x"]["seconds"], 3))
    # the target is for the most workers this machine has cores for: beyond that, the workers' own CPU (~2 s of
    # imports each, a few ms per call) is shared, and the figures say what that costs
    fits = max([n for n in RAY_WORKERS if n <= (os.cpu_count() or 1)], default=min(RAY_WORKERS))
    judging = legs[f"{fits} workers"]["judging_ratio"]
    result.target = (f"{fits} workers (<= cores): judging (first request to last answer) <= 1.25 x ideal, "
                     f"wall time >= {fits * 0.8:g} x faster than one process")
    result.target_met = judging <= 1.25 and result.figures["speedup"][f"{fits} workers"] >= fits * 0.8
    return result


# with benchmarks/overhead.py's framework, peers and startup: run.py's table
SCENARIOS: dict[str, Callable[[Settings], Result]] = {
    "chateval": chateval, "debate": debate, "refer": refer, "rerun": rerun,
    "faults": faults, "crash": crash, "scale": scale, "ray": ray, "crash-money": crash_money,
}
