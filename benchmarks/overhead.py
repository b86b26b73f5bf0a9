"""Issue 32's scenarios: what jurygraph itself costs per call, at start-up and at exit, against a bare loop and peers.

Every contender is a command in a process of its own, measured by :func:`benchmarks.commands.measured` (requests/s
from the server's clock, first request after the command's start, exit after its last reply, wall time, CPU, peak
RSS) against the fast benchmark server (``benchmarks/fast_server.py``).

``framework``: ``jurygraph eval`` (ChatEval one-by-one 2 x 2, durable by default: checkpoints, LLM cache, a results
line per item) against the bare loop of ``benchmarks/bare.py`` (the same calls through the same client, nothing
else) and against the LangGraph floor (the same calls from the smallest LangGraph graph that makes them, no
checkpointer: what any framework built on LangGraph graphs pays at least), interleaved, with the server's capacity
beside them (``benchmarks/loadgen.py``): a ratio means something only when the server answers several times faster
than the fastest client.
``peers``: jurygraph, openevals and a bare floor, one judge call per FairEval item, at two latencies.
``startup``: the first request's delay, the exit's, and the imports before the first request.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.commands import jurygraph_command, load, measured, median_of
from benchmarks.loadgen import capacity, write_bodies
from benchmarks.scenarios import (
    ASPECT,
    Result,
    Settings,
    _profile_graph,
    bench_items,
    serve,
    spec_for,
    write_items,
)
from jurygraph import JuryContext, load_dataset

HERE = Path(__file__).resolve().parent
BARE, PEERS = HERE / "bare.py", HERE / "peers.py"


def _rotated(names: Sequence[str], rep: int) -> list[str]:
    """Each repetition starts with the next contender: none always runs first (a cold cache) or last."""
    shift = rep % len(names)
    return [*names[shift:], *names[:shift]]


# --- framework: jurygraph eval against a bare loop, with the server's capacity ----------------------------------


def _eval_command(url: str, dataset: Path, out: Path, concurrency: int) -> list[str]:
    return [*jurygraph_command(), "eval", "--protocol", "chateval", "--dataset", str(dataset), "--task", "score",
            "--aspect", ASPECT, "--model", f"openai:bench@{url}", "--concurrency", str(concurrency),
            "--out", str(out), "--quiet"]


def _bare_command(url: str, dataset: Path, concurrency: int, *, graph: bool = False) -> list[str]:
    return [sys.executable, str(BARE), "--url", url, "--dataset", str(dataset), "--concurrency", str(concurrency),
            *(["--graph"] if graph else [])]


def server_capacity(server: Any, settings: Settings) -> dict[str, Any]:
    """The server's rate under the load generator, from one process and from two (the best is the capacity),
    and its CPU per request: what one core of it answers."""
    bodies = settings.work / "capacity-bodies.json"
    if not bodies.exists():
        write_bodies(bodies)
    runs = []
    for processes in (1, 2):
        before = server.stats()
        run = capacity(server.port, bodies, connections=settings.concurrency, processes=processes,
                       requests=settings.capacity_requests)
        after = server.stats()
        run["server_cpu_ms_per_request"] = round(
            1000 * (after["cpu_seconds"] - before["cpu_seconds"]) / max(1, run["requests"]), 3)
        run["connections"] = after["connections"] - before["connections"] - 1
        run["load"] = load()
        runs.append(run)
    best = max(runs, key=lambda r: r["requests_per_second"])
    cpu = statistics.median(r["server_cpu_ms_per_request"] for r in runs)
    return {"requests_per_second": best["requests_per_second"], "one_core_requests_per_second": round(1000 / cpu),
            "runs": runs}


# how the server treats connections: keep-alive as real providers do; close (HTTP/1.0's way, the server issue 32
# measured with) costs a TCP connect per request but leaves the client's connection pool empty (see the README)
CONNECTION_MODES = ("keep-alive", "close")
PATHS = ("jurygraph eval", "bare loop", "langgraph floor")


def framework(settings: Settings) -> Result:
    """``jurygraph eval`` (ChatEval one-by-one 2 x 2, durable by default) against the bare loop on the same items at
    zero latency, interleaved ``repeats`` times each, every run its own process, against a server that keeps
    connections alive and one that closes them; the keep-alive server's capacity measured before and after them.
    Requests/s from the server's clock (first request received to last answer)."""
    items = bench_items(settings.framework_items)
    calls = 4 * len(items)
    dataset = write_items(items, settings.work / "framework-items.jsonl")
    warm = write_items(items[:10], settings.work / "framework-warm.jsonl")
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {m: {p: [] for p in PATHS} for m in CONNECTION_MODES}
    digests: dict[str, list[str]] = {}
    servers = {mode: serve(settings, replies="chateval", latency=0.0, connection=mode) for mode in CONNECTION_MODES}
    for server in servers.values():
        server.__enter__()
    try:
        main = servers["keep-alive"]
        capacity_before = server_capacity(main, settings)
        for mode, server in servers.items():  # warm-up: the page cache, the .pyc files
            measured(server, _eval_command(server.base_url, warm, settings.work / f"framework-warm-{mode}",
                                           settings.concurrency))
            measured(server, _bare_command(server.base_url, warm, settings.concurrency))
            measured(server, _bare_command(server.base_url, warm, settings.concurrency, graph=True))
        for rep in range(settings.repeats):
            for mode, server in servers.items():
                for path in _rotated(PATHS, rep):
                    since = server.stats()["answered"]
                    out = settings.work / f"framework-eval-{mode}-{rep}"
                    command = (_eval_command(server.base_url, dataset, out, settings.concurrency)
                               if path == "jurygraph eval" else
                               _bare_command(server.base_url, dataset, settings.concurrency,
                                             graph=path == "langgraph floor"))
                    before = server.stats()["cpu_seconds"]
                    run = measured(server, command)
                    run["server_cpu_ms_per_request"] = round(
                        1000 * (server.stats()["cpu_seconds"] - before) / max(1, run["requests"]), 3)
                    runs[mode][path].append(run)
                    digests.setdefault(path, sorted(e["digest"] for e in server.log(since)))
                    print(f"   framework {mode} {path} #{rep + 1}: {json.dumps(run)}", flush=True)
        capacity_after = server_capacity(main, settings)
        engine = main.stats()["engine"]
        profile = None
        if settings.profile:
            profile = _profile_graph(items, JuryContext(default=spec_for(main)), settings)
    finally:
        for server in servers.values():
            server.__exit__(None, None, None)
    rate = {m: {p: median_of(r, "requests_per_second") or 0.0 for p, r in by.items()} for m, by in runs.items()}

    def over(path: str, reference: str) -> dict[str, float]:
        return {m: round(r[path] / r[reference], 3) if r[reference] else 0.0 for m, r in rate.items()}

    ratio = over("jurygraph eval", "bare loop")
    server_rate = min(capacity_before["requests_per_second"], capacity_after["requests_per_second"])
    fastest_bare = max((r["requests_per_second"] or 0.0) for by in runs.values() for r in by["bare loop"])
    headroom = server_rate / fastest_bare if fastest_bare else 0.0
    main_rate = rate["keep-alive"]["jurygraph eval"]
    result = Result("framework", len(items), settings.concurrency, 0.0, calls / main_rate if main_rate else 0.0,
                    int(statistics.median(r["requests"] for r in runs["keep-alive"]["jurygraph eval"])),
                    expected_requests=calls)
    result.checks["same calls (digests) from jurygraph eval, the bare loop and the LangGraph floor"] = \
        digests["jurygraph eval"] == digests["bare loop"] == digests["langgraph floor"]
    result.checks["every run sent 4 calls per item and exited 0"] = all(
        r["requests"] == calls and r["exit_code"] == 0 for by in runs.values() for v in by.values() for r in v)

    def per_path(key: str) -> dict[str, dict[str, float | None]]:
        return {m: {p: median_of(r, key) for p, r in by.items()} for m, by in runs.items()}

    result.figures.update(
        server=engine, requests_per_second=rate, jurygraph_over_bare=ratio,
        # the most a framework of LangGraph graphs can reach, and how much of it jurygraph keeps
        langgraph_floor_over_bare=over("langgraph floor", "bare loop"),
        jurygraph_over_langgraph_floor=over("jurygraph eval", "langgraph floor"),
        per_run_ratio={m: [round((g["requests_per_second"] or 0) / (b["requests_per_second"] or 1), 3)
                           for g, b in zip(by["jurygraph eval"], by["bare loop"], strict=True)]
                       for m, by in runs.items()},
        server_capacity_requests_per_second=server_rate,
        server_capacity_over_fastest_bare_run=round(headroom, 2),
        capacity_before=capacity_before, capacity_after=capacity_after,
        client_cpu_ms_per_request=per_path("cpu_ms_per_request"),
        server_cpu_ms_per_request=per_path("server_cpu_ms_per_request"),
        connections_per_run={m: {p: [x["connections"] for x in r] for p, r in by.items()} for m, by in runs.items()},
        first_request_s=per_path("first_request_s"), exit_after_last_reply_s=per_path("exit_after_last_reply_s"),
        wall_s=per_path("wall_s"), runs=runs, load_at_end=load(),
    )
    if profile:
        result.figures["main_thread_ms_per_call (cProfile tottime; epoll includes idle waits)"] = profile["by_group"]
        result.notes.append(f"profiles of one in-process graph run: {', '.join(profile['paths'])}")
    if headroom < 3:
        result.notes.append(f"the server answered only {headroom:.1f} x the fastest bare run: the ratio is not "
                            "the client's alone (a busy machine?)")
    result.target = ("jurygraph eval >= 0.8 x the bare loop's requests/s, connections kept alive and closed, "
                     "with the server >= 3 x the fastest bare run")
    result.target_met = all(r >= 0.8 for r in ratio.values()) and headroom >= 3
    return result


# --- peers: jurygraph, openevals and a bare floor on FairEval -----------------------------------------------------


PEER_LATENCIES = (1.0, 0.0)
# the contenders beyond jurygraph and the floor, by the module each needs: the scenario runs those installed here,
# or in the Python that --peer-python NAME=PYTHON names (a tool whose dependencies clash with jurygraph's)
OPTIONAL_PEERS = {"openevals": "openevals", "inspect_ai": "inspect_ai"}


def _peer_python(peer: str, settings: Settings) -> str | None:
    """The interpreter that runs this peer, or None when it is not installed where the scenario looks."""
    given = dict(settings.peer_pythons).get(peer)
    if given:
        found = subprocess.run([given, "-c", f"import {OPTIONAL_PEERS.get(peer, 'json')}"], capture_output=True)
        return given if found.returncode == 0 else None
    if peer in OPTIONAL_PEERS and importlib.util.find_spec(OPTIONAL_PEERS[peer]) is None:
        return None
    return sys.executable


def faireval_items(path: Path, limit: int) -> Path:
    """FairEval's first ``limit`` questions as the peers read them (jurygraph reads its own copy of the same)."""
    items = [{"id": item.id, "question": item.question, "response_1": item.response_1,
              "response_2": item.response_2} for item in load_dataset("faireval").items[:limit]]
    path.write_text(json.dumps(items), encoding="utf-8")
    return path


def _peer_command(peer: str, url: str, items: Path, limit: int, out: Path, concurrency: int,
                  python: str = sys.executable) -> list[str]:
    if peer == "jurygraph":
        return [*jurygraph_command(), "eval", "--protocol", "single", "--dataset", "faireval", "--no-calibrate",
                "--limit", str(limit), "--model", f"openai:bench@{url}", "--concurrency", str(concurrency),
                "--out", str(out), "--quiet"]
    return [python, str(PEERS), peer, "--url", url, "--items", str(items), "--concurrency",
            str(concurrency), "--out", str(out)]


def peers(settings: Settings) -> Result:
    """jurygraph (``eval --protocol single --no-calibrate``: one call per item, durable), openevals
    (``create_async_llm_as_judge``) and a bare ``ChatOpenAI`` loop on FairEval's 80 questions, concurrency 50, at
    L = 1 s and L = 0, ``peer_runs`` interleaved runs each; the median of each figure."""
    limit = min(settings.peer_items, 80)
    items = faireval_items(settings.work / "peers-faireval.json", limit)
    pythons = {peer: _peer_python(peer, settings) for peer in OPTIONAL_PEERS}
    contenders = ["jurygraph", *[peer for peer, python in pythons.items() if python], "bare"]
    runs: dict[float, dict[str, list[dict[str, Any]]]] = {L: {p: [] for p in contenders} for L in PEER_LATENCIES}
    servers = {L: serve(settings, replies="faireval", latency=L) for L in PEER_LATENCIES}
    for server in servers.values():
        server.__enter__()
    try:
        for rep in range(settings.peer_runs):
            for latency, server in servers.items():
                for peer in _rotated(contenders, rep):
                    out = settings.work / f"peers-{peer}-{latency:g}-{rep}"
                    if out.exists():
                        shutil.rmtree(out)
                    if peer != "jurygraph":
                        out.mkdir(parents=True)
                        out = out / "results.jsonl"
                    run = measured(server, _peer_command(peer, server.base_url, items, limit, out,
                                                         settings.concurrency, pythons.get(peer) or sys.executable))
                    runs[latency][peer].append(run)
                    print(f"   peers L={latency:g} {peer} #{rep + 1}: {json.dumps(run)}", flush=True)
    finally:
        for server in servers.values():
            server.__exit__(None, None, None)
    result = Result("peers", limit, settings.concurrency, PEER_LATENCIES[0], 0.0,
                    sum(r["requests"] for by in runs.values() for v in by.values() for r in v))
    table: dict[str, dict[str, Any]] = {}
    for latency, by_peer in runs.items():
        for peer, peer_runs in by_peer.items():
            table[f"L={latency:g} {peer}"] = {key: median_of(peer_runs, key) for key in (
                "wall_s", "first_request_s", "exit_after_last_reply_s", "requests_per_second", "cpu_ms_per_request",
                "peak_rss_mb")} | {"walls": [r["wall_s"] for r in peer_runs],
                                  "connections": [r["connections"] for r in peer_runs]}
            result.checks[f"L={latency:g} {peer}: every run exited 0 after {limit} requests"] = all(
                r["exit_code"] == 0 and r["requests"] == limit for r in peer_runs)
    result.seconds = table[f"L={PEER_LATENCIES[0]:g} jurygraph"]["wall_s"] or 0.0
    ratios = {}
    if "openevals" in contenders:
        for latency in PEER_LATENCIES:
            ours, theirs = (table[f"L={latency:g} {p}"]["wall_s"] for p in ("jurygraph", "openevals"))
            ratios[f"L={latency:g}"] = round(ours / theirs, 3) if ours and theirs else None
    firsts = [table[f"L={L:g} jurygraph"]["first_request_s"] for L in PEER_LATENCIES]
    exits = [table[f"L={L:g} jurygraph"]["exit_after_last_reply_s"] for L in PEER_LATENCIES]
    result.figures.update(medians=table, jurygraph_wall_over_openevals=ratios, load_at_end=load(),
                          not_installed=[peer for peer, python in pythons.items() if not python],
                          runs={f"L={L:g}": by for L, by in runs.items()})
    result.target = ("jurygraph's wall <= 1.0 x openevals' (L = 1 s and 0); first request <= 1.0 s; "
                     "exit <= 0.1 s after the last reply")
    result.target_met = (bool(ratios) and all(r is not None and r <= 1.0 for r in ratios.values())
                         and all(f is not None and f <= 1.0 for f in firsts)
                         and all(e is not None and e <= 0.1 for e in exits))
    return result


# --- startup: the first request, the exit, the imports --------------------------------------------------------


def importtime(command: Sequence[str], top: int = 12) -> dict[str, Any]:
    """``python -X importtime`` of a command: the slowest top-level imports and the slowest modules at any depth
    (cumulative ms)."""
    traced = subprocess.run([sys.executable, "-X", "importtime", *command], capture_output=True, text=True)
    top_level, anywhere = [], []
    for line in traced.stderr.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        name = parts[2].rstrip()
        depth = (len(name) - len(name.lstrip()) - 1) // 2
        entry = (int(parts[1]), name.strip())
        anywhere.append((entry[0], f"{name.strip()} (depth {depth})"))
        if depth == 0:
            top_level.append(entry)
    return {"top_level_ms": {n: round(us / 1000, 1) for us, n in sorted(top_level, reverse=True)[:top]},
            "slowest_ms": {n: round(us / 1000, 1) for us, n in sorted(anywhere, reverse=True)[:top]},
            "total_top_level_ms": round(sum(us for us, _ in top_level) / 1000, 1)}


def startup(settings: Settings) -> Result:
    """``jurygraph eval`` on a few FairEval items (one call each, zero latency), ``startup_runs`` times alternated with
    the bare floor (``benchmarks/peers.py bare``: ``langchain_openai`` alone): when its first request arrives after the
    command starts, how long it takes to exit after its last reply; then the imports of that command
    (``-X importtime``) and ``jurygraph --help``."""
    from benchmarks.scenarios import startup_figures

    limit = settings.startup_items
    items = faireval_items(settings.work / "startup-faireval.json", limit)
    runs: dict[str, list[dict[str, Any]]] = {"jurygraph": [], "bare": []}
    with serve(settings, replies="faireval", latency=0.0) as server:
        url = server.base_url
        for rep in range(settings.startup_runs):
            for peer in _rotated(list(runs), rep):
                out = settings.work / f"startup-{peer}-{rep}"
                shutil.rmtree(out, ignore_errors=True)
                if peer == "bare":
                    out.mkdir(parents=True)
                    out = out / "results.jsonl"
                run = measured(server, _peer_command(peer, url, items, limit, out, settings.concurrency))
                runs[peer].append(run)
                print(f"   startup {peer} #{rep + 1}: {json.dumps(run)}", flush=True)
        traced_out = settings.work / "startup-importtime"
        shutil.rmtree(traced_out, ignore_errors=True)
        eval_args = _peer_command("jurygraph", url, items, limit, traced_out, settings.concurrency)
        imports = importtime(["-m", "jurygraph.cli", *eval_args[eval_args.index("eval"):]])
    result = Result("startup", limit, settings.concurrency, 0.0, median_of(runs["jurygraph"], "wall_s") or 0.0,
                    sum(r["requests"] for v in runs.values() for r in v))
    first = median_of(runs["jurygraph"], "first_request_s")
    exit_gap = median_of(runs["jurygraph"], "exit_after_last_reply_s")
    for peer, peer_runs in runs.items():
        result.checks[f"{peer}: every run exited 0 after {limit} requests"] = all(
            r["exit_code"] == 0 and r["requests"] == limit for r in peer_runs)
    result.figures.update(
        first_request_s={p: median_of(r, "first_request_s") for p, r in runs.items()},
        exit_after_last_reply_s={p: median_of(r, "exit_after_last_reply_s") for p, r in runs.items()},
        wall_s={p: median_of(r, "wall_s") for p, r in runs.items()},
        all_first_request_s={p: [x["first_request_s"] for x in r] for p, r in runs.items()},
        all_exit_after_last_reply_s={p: [x["exit_after_last_reply_s"] for x in r] for p, r in runs.items()},
        eval_importtime=imports, help=startup_figures(), load_at_end=load())
    result.target = "first request <= 1.0 s after the command starts; exit <= 0.1 s after the last reply"
    result.target_met = first is not None and exit_gap is not None and first <= 1.0 and exit_gap <= 0.1
    return result


SCENARIOS = {"framework": framework, "peers": peers, "startup": startup}


def wait_for_quiet(threshold: float, timeout: float) -> str:
    """Wait (up to ``timeout`` s) until the 1-minute load average is under ``threshold``; returns the load then."""
    deadline = time.monotonic() + timeout
    while os.getloadavg()[0] >= threshold and time.monotonic() < deadline:
        time.sleep(10)
    return load()
