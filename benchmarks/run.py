"""Run the benchmark scenarios and print measured time, ideal time, their ratio and request counts.

    python benchmarks/run.py                      # every scenario at issue 7's sizes (about 3 minutes)
    python benchmarks/run.py --quick              # few items, short latency: well under a minute
    python benchmarks/run.py --scenario chateval --scenario crash --items 100
    python benchmarks/run.py --json bench.json    # also write every figure as JSON

Exit code 1 when a correctness check fails (lost/duplicated results, wrong request counts...);
a missed speed target is reported, not an error.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from dataclasses import fields, replace
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `benchmarks` importable from a checkout

from benchmarks import overhead, scenarios
from benchmarks.commands import load
from benchmarks.scenarios import SCALE_FORMATS, Result, Settings
from benchmarks.server import ENGINES

SCENARIOS = {**scenarios.SCENARIOS, **overhead.SCENARIOS}
ORDER = ("chateval", "debate", "refer", "rerun", "framework", "faults", "crash", "scale", "ray", "crash-money",
         "peers", "startup")
PACKAGES = ("jurygraph", "langgraph", "langgraph-checkpoint-sqlite", "langchain-core", "langchain-openai", "openai",
            "httpx", "httpcore", "aiosqlite", "openevals", "uvloop")


def environment() -> dict[str, str]:
    import os

    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "-"
    return {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "nproc": str(os.cpu_count()), "load": load(),
            "python": platform.python_version(), "platform": platform.platform(), **versions}


def show(result: Result) -> str:
    ideal = "-" if result.ideal is None else f"{result.ideal:.2f}s"
    ratio = "-" if result.ratio is None else f"{result.ratio:.3f}"
    expected = "" if result.expected_requests is None else f" (expected {result.expected_requests})"
    met = {True: "met", False: "MISSED", None: "-"}[result.target_met]
    path = "-" if result.critical_path is None else result.critical_path
    lines = [f"== {result.scenario}: {result.items} items, concurrency {result.concurrency}, "
             f"latency {result.latency}s, critical path {path}",
             f"   measured {result.seconds:.2f}s   ideal {ideal}   ratio {ratio}   "
             f"requests {result.requests}{expected}",
             f"   target: {result.target} -> {met}"]
    for name, value in result.figures.items():
        lines.append(f"   {name}: {value}")
    for check, passed in result.checks.items():
        lines.append(f"   [{'ok' if passed else 'FAIL'}] {check}")
    lines += [f"   note: {note}" for note in result.notes]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="jurygraph benchmark harness (issue 7)")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS),
                        help="run only this scenario (repeatable; default: all)")
    parser.add_argument("--quick", action="store_true", help="few items, short latency (a smoke run)")
    parser.add_argument("--items", type=int, help="items per scenario (default 200; quick 20)")
    parser.add_argument("--concurrency", type=int, help="items in flight (default 50; quick 5)")
    parser.add_argument("--latency", type=float, help="model latency of the chateval/debate/refer scenarios (s)")
    parser.add_argument("--repeats", type=int, help="framework scenario: runs per path (median reported)")
    parser.add_argument("--no-profile", action="store_true", help="framework scenario: skip the profiled run")
    parser.add_argument("--sizes", help="scale scenario: comma-separated run sizes (default 200,2000,20000)")
    parser.add_argument("--scale-format", action="append", choices=sorted(SCALE_FORMATS),
                        help="scale scenario: the dataset file (repeatable; default jsonl): jsonl = SummEval items as "
                             "JSONL; faireval-json = FairEval's own layout, one JSON document; faireval-jsonl = the "
                             "same FairEval items as JSONL")
    parser.add_argument("--server", choices=ENGINES, help="the benchmark server's engine (default asyncio: "
                        "benchmarks/fast_server.py; threaded: jurygraph's FakeOpenAIServer, http.server)")
    parser.add_argument("--peer-runs", type=int, help="peers and startup scenarios: runs of each contender (default 5)")
    parser.add_argument("--peer-python", action="append", default=[], metavar="PEER=PYTHON",
                        help="peers scenario: run this peer (openevals, inspect_ai) with another Python, e.g. a venv "
                             "where it is installed apart from jurygraph (repeatable)")
    parser.add_argument("--quiet-below", type=float, metavar="LOAD",
                        help="before each scenario, wait (up to 10 min) for the 1-minute load average to fall below "
                             "LOAD: a shared machine's figures are taken when it is quiet")
    parser.add_argument("--eval-arg", action="append", default=[],
                        help="scale scenario: an extra `jurygraph eval` option (repeatable), e.g. "
                             "--eval-arg=--keep-checkpoints=all")
    parser.add_argument("--work", help="directory for the run directories (default: a temporary one, removed)")
    parser.add_argument("--json", help="write every figure to this JSON file")
    args = parser.parse_args(argv)
    # every contender runs as an installed package does, from cached bytecode (pip compiles it at install; here the
    # scenarios' warm-up runs write it): with PYTHONDONTWRITEBYTECODE set (this project's sandbox sets it), each run of
    # the editable checkout compiled jurygraph's own modules again, ~0.1 s before its first request, and no other
    # contender's (their site-packages were compiled at install)
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None):
        print("PYTHONDONTWRITEBYTECODE unset for the measured commands: they run from cached bytecode")

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="jurygraph-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    settings = Settings.quick(work) if args.quick else Settings(work=work)
    overrides = {"items": args.items, "framework_items": args.items, "concurrency": args.concurrency,
                 "latency": args.latency, "repeats": args.repeats}
    settings = replace(settings, **{k: v for k, v in overrides.items() if v is not None})
    if args.sizes:
        settings = replace(settings, scale_sizes=tuple(int(n) for n in args.sizes.split(",")))
    if args.eval_arg:
        settings = replace(settings, scale_args=tuple(args.eval_arg))
    if args.scale_format:
        settings = replace(settings, scale_formats=tuple(args.scale_format))
    if args.server:
        settings = replace(settings, server=args.server)
    if args.peer_python:
        settings = replace(settings, peer_pythons=tuple(tuple(p.split("=", 1)) for p in args.peer_python))
    if args.peer_runs:
        settings = replace(settings, peer_runs=args.peer_runs, startup_runs=args.peer_runs)
    if args.no_profile:
        settings = replace(settings, profile=False)
    env = environment()
    print("environment: " + ", ".join(f"{k} {v}" for k, v in env.items()))
    print("settings: " + ", ".join(f"{f.name}={getattr(settings, f.name)}" for f in fields(settings)))
    results: list[Result] = []
    started = time.perf_counter()
    try:
        for name in args.scenario or ORDER:
            if args.quiet_below:
                overhead.wait_for_quiet(args.quiet_below, 600)
            print(f"-- running {name} ... (load {load()})", flush=True)
            result = SCENARIOS[name](settings)
            result.figures.setdefault("load_at_end", load())
            results.append(result)
            print(show(result), flush=True)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(f"\n{len(results)} scenarios in {time.perf_counter() - started:.1f}s")
    print(f"{'scenario':<10} {'measured':>9} {'ideal':>8} {'ratio':>6} {'requests':>9}  target")
    for r in results:
        ideal = "-" if r.ideal is None else f"{r.ideal:.2f}"
        ratio = "-" if r.ratio is None else f"{r.ratio:.3f}"
        met = {True: "met", False: "MISSED", None: "-"}[r.target_met]
        print(f"{r.scenario:<10} {r.seconds:>9.2f} {ideal:>8} {ratio:>6} {r.requests:>9}  {r.target} ({met})"
              + ("" if r.ok else "  CHECKS FAILED"))
    if args.json:
        Path(args.json).write_text(json.dumps({"environment": env, "results": [r.to_json() for r in results]},
                                              indent=2), encoding="utf-8")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
