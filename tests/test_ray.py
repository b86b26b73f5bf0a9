"""One run spread over a real local Ray cluster (jurygraph.running.distributed): 2 workers, the local
OpenAI-compatible server and the suite's PostgreSQL server. 200 items give 200 results with the verdicts of a
one-process run; ``--rps``/``--in-flight`` hold for the cluster, counted at the server; a worker killed with
``kill -9`` loses nothing and costs at most its calls in flight; ``--resume`` continues a Ray run whose driver
was killed. The cluster is started once for the module (``ray.init``, 127.0.0.1 only)."""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

from jurygraph import JuryContext, ModelSpec, create_chateval, load_dataset, run  # noqa: E402
from jurygraph.cli import main  # noqa: E402
from jurygraph.cli.show import item_state  # noqa: E402
from jurygraph.llm.limits import ProviderGates, parse_limits  # noqa: E402
from jurygraph.running.distributed import Cluster, RayOptions, connected, shared_state  # noqa: E402
from jurygraph.running.rundir import SPEND_INTERVAL  # noqa: E402
from jurygraph.testing import pairwise_reply  # noqa: E402
from jurygraph.testing.fake_server import FakeOpenAIServer, prompt_of  # noqa: E402

ITEMS = 200


def respond(request: dict[str, Any], index: int) -> str:
    """A referee's reply, the same for the same call wherever it is sent from: the scores come from a digest of
    everything the referee heard, so verdicts differ across items and a run's verdicts are reproducible."""
    if "format" in prompt_of(request):
        digest = int(hashlib.sha256(json.dumps(request["messages"], sort_keys=True).encode()).hexdigest()[:8], 16)
        return pairwise_reply(1 + digest % 10, 1 + digest // 10 % 10)
    return "Assistant 1 is clearer."


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "questions.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for i in range(ITEMS):
            handle.write(json.dumps({"id": f"q{i}", "question": f"Question {i}: how does thing {i} work?",
                                     "response_1": f"It works by mechanism {i}.",
                                     "response_2": f"Nobody knows ({i}).", "human": {"label": "1"}}) + "\n")
    return path


@pytest.fixture(scope="module")
def items(dataset: Path) -> list[Any]:
    return load_dataset(dataset, task="pairwise").items


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(respond, latency=0.02) as fake:
        yield fake


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with connected(RayOptions("local", workers=2)) as started:
        yield started


def context(server: FakeOpenAIServer, rps: str | None = None, in_flight: str | None = None) -> JuryContext:
    limits = parse_limits([rps] if rps else None, [in_flight] if in_flight else None)
    return JuryContext(default=ModelSpec.parse(f"openai:judge@{server.base_url}"),
                       gates=ProviderGates(limits) if limits else None)


def lines_of(out: Path) -> list[dict[str, Any]]:
    """Every line of results.jsonl as written: a repeated item would show."""
    return [json.loads(line) for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]


def verdicts(out: Path) -> dict[str, Any]:
    return {record["id"]: record["verdict"] for record in lines_of(out)}


def manifest(out: Path) -> dict[str, Any]:
    return json.loads((out / "manifest.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def one_process(server: FakeOpenAIServer, items: list[Any], tmp_path_factory: pytest.TempPathFactory
                ) -> dict[str, Any]:
    """The same items judged without Ray: the verdicts, requests and usage every Ray run must match."""
    out = tmp_path_factory.mktemp("one-process")
    sent = len(server.requests)
    run(create_chateval(), items, out_dir=out, context=context(server), concurrency=16, progress=False)
    return {"verdicts": verdicts(out), "requests": len(server.requests) - sent,
            "usage": manifest(out)["usage_by_agent"]}


def test_200_items_on_2_workers_are_200_results_with_one_process_verdicts(
        cluster: Cluster, server: FakeOpenAIServer, items: list[Any], one_process: dict[str, Any],
        postgres_url: str, tmp_path: Path) -> None:
    out = tmp_path / "ray"
    sent = len(server.requests)
    summary = run(create_chateval(), items, out_dir=out, context=context(server), concurrency=4,
                  checkpoint=postgres_url, ray="local", workers=2, progress=False)
    lines = lines_of(out)
    assert len(lines) == ITEMS and len({r["id"] for r in lines}) == ITEMS
    assert {r["id"]: r["verdict"] for r in lines} == one_process["verdicts"]
    # the one cache of the run directory answered nothing twice: the workers sent what one process sends
    assert len(server.requests) - sent == one_process["requests"] == summary.requests == summary.attempts
    run_manifest = manifest(out)
    assert run_manifest["ray"] == {
        "address": "local", "nodes": 1, "workers": 2, "shard_size": 25, "checkpoint": postgres_url,
        "cache": str((out / "llm_cache.sqlite").resolve()), "limits": None, "shards": 8, "retried_shards": 0}
    workers = run_manifest["workers"]
    assert len(workers) >= 2 and all(w["items"] > 0 and w["node"] == "127.0.0.1" for w in workers)
    assert sum(w["items"] for w in workers) == ITEMS
    assert sum(w["requests"] for w in workers) == sum(w["attempts"] for w in workers) == one_process["requests"]
    assert run_manifest["usage_by_agent"] == one_process["usage"]  # usage summed over the workers' records
    # what the workers paid is the run's spend (spend.json, which --max-cost of a later resume counts on)
    spend = run_manifest["spend"]
    assert json.loads((out / "spend.json").read_text(encoding="utf-8")) == spend
    assert spend["requests"] == one_process["requests"]
    assert spend["input_tokens"] == sum(entry["input_tokens"] for entry in one_process["usage"].values()) > 0
    # the checkpoints went to PostgreSQL, where `jurygraph show` reads an item back
    assert not (out / "checkpoints.sqlite").exists()
    assert item_state(out, "q7", postgres_url)["verdict"] == one_process["verdicts"]["q7"]


def test_rps_and_in_flight_hold_for_the_whole_cluster(cluster: Cluster, openai_server: Any, items: list[Any],
                                                       tmp_path: Path) -> None:
    server = openai_server(respond, latency=0.05)
    # 2 workers x 8 items in flight could send ~40 requests a second with 3 in flight; 20/s is for them all
    run(create_chateval(), items[:40], out_dir=tmp_path / "limited", context=context(server, "20", "3"),
        concurrency=8, ray="local", workers=2, progress=False)
    times = sorted(server.times)
    assert len(times) == 160
    assert 160 / (times[-1] - times[0]) <= 20 * 1.1
    busiest_second = max(bisect.bisect_right(times, t + 1.0) - i for i, t in enumerate(times))
    assert busiest_second <= 20 * 1.5  # the bucket holds at most a second's tokens
    assert server.max_in_flight <= 3
    assert manifest(tmp_path / "limited")["ray"]["limits"] == "cluster-wide"


def _shard_workers() -> list[Any]:
    """The worker processes of this test's cluster judging a shard (Ray names them after the task)."""
    import psutil

    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if process.cmdline() and process.cmdline()[0].startswith("ray::judge_shard"):
                found.append(process)
        except psutil.Error:
            continue
    return found


def test_a_worker_killed_mid_run_loses_nothing(cluster: Cluster, server: FakeOpenAIServer, items: list[Any],
                                              one_process: dict[str, Any], postgres_url: str,
                                              tmp_path: Path) -> None:
    out = tmp_path / "killed"
    killed: list[int] = []

    def kill_a_worker(record: dict[str, Any]) -> None:
        if killed or len(lines_of(out)) < 40:
            return
        busy = _shard_workers()
        if not busy:  # for a moment, between two shards: the next record tries again
            return
        os.kill(busy[0].pid, signal.SIGKILL)
        killed.append(busy[0].pid)

    sent = len(server.requests)
    # 4 in flight for the cluster, one worker's worth: were the dead worker's slots never given back, the run
    # would stall instead of finishing
    run(create_chateval(), items, out_dir=out, context=context(server, in_flight="4"), concurrency=4,
        checkpoint=postgres_url, cache=postgres_url, ray="local", workers=2, on_result=kill_a_worker, progress=False)
    assert killed
    lines = lines_of(out)
    assert len(lines) == ITEMS and len({r["id"] for r in lines}) == ITEMS
    assert {r["id"]: r["verdict"] for r in lines} == one_process["verdicts"]
    # the retried shard found its finished items' checkpoints and its paid calls in the shared cache: only the
    # calls in flight when the worker died were sent again (ChatEval one-by-one: one per item, 4 items at once)
    resent = len(server.requests) - sent - one_process["requests"]
    assert 0 <= resent <= 4
    run_manifest = manifest(out)
    assert run_manifest["ray"]["retried_shards"] >= 1 and run_manifest["ray"]["cache"] == postgres_url
    by_pid = {w["pid"]: w for w in run_manifest["workers"]}
    assert killed[0] in by_pid and by_pid[killed[0]]["items"] > 0 and len(by_pid) >= 3
    # the spend counts the dead worker's calls up to its last record: at most its items in flight's earlier calls
    # (3 of 4 each) are missing, and nothing is counted twice
    spend = run_manifest["spend"]["requests"]
    assert one_process["requests"] - 4 * 3 <= spend <= len(server.requests) - sent
    assert sum(w["items"] for w in run_manifest["workers"]) == ITEMS


def test_resume_continues_a_ray_run_whose_driver_was_killed(cluster: Cluster, server: FakeOpenAIServer,
                                                            dataset: Path, one_process: dict[str, Any],
                                                            postgres_url: str, tmp_path: Path) -> None:
    out = tmp_path / "cli"
    address = ray.get_runtime_context().gcs_address  # this module's cluster, joined by HOST:PORT
    command = [sys.executable, "-m", "jurygraph.cli", "eval", "--protocol", "chateval", "--no-calibrate",
               "--dataset", str(dataset), "--task", "pairwise", "--model", "judge", "--base-url", server.base_url,
               "--out", str(out), "--quiet", "--concurrency", "4", "--checkpoint", postgres_url,
               "--ray", address, "--workers", "2"]
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        # whole lines only: the driver may be half-way through writing one
        while not ((out / "results.jsonl").exists() and (out / "results.jsonl").read_bytes().count(b"\n") >= 60):
            assert driver.poll() is None, driver.communicate()[1]
            assert time.monotonic() < deadline, "the Ray run wrote no results"
            time.sleep(0.05)
    finally:
        driver.kill()  # kill -9 of the driver: its workers go with it, its results and checkpoints stay
        driver.wait()
    assert len(lines_of(out)) < ITEMS

    resumed = subprocess.run([sys.executable, "-m", "jurygraph.cli", "eval", "--resume", str(out), "--quiet"],
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    lines = lines_of(out)
    assert len(lines) == ITEMS and len({r["id"] for r in lines}) == ITEMS
    assert {r["id"]: r["verdict"] for r in lines} == one_process["verdicts"]
    invocations = manifest(out)["invocations"]
    assert [i["execution"]["ray"] for i in invocations] == [address, address]  # the resume joined it again
    assert "ray: 2 workers on 1 node(s)" in resumed.stdout


# Two nodes on this machine (Ray's own cluster_utils, as Ray's tests simulate a cluster), in a process of its own
# beside this module's cluster: one CPU each, so the 2 workers are on both nodes.
TWO_NODES = """
import json, os, sys
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # nodes on 127.0.0.1, as connected() does for 'local'
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
from ray.cluster_utils import Cluster
from jurygraph import JuryContext, ModelSpec, create_chateval, load_dataset, run
dataset, base_url, postgres, out = sys.argv[1:]
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
cluster.add_node(num_cpus=1)
items = load_dataset(dataset, task="pairwise").items
context = JuryContext(default=ModelSpec.parse("openai:judge@" + base_url))
try:
    run(create_chateval(), items, out_dir=out + "-sqlite", context=context, ray=cluster.address, workers=2)
except ValueError as refused:
    print(json.dumps({"refused": str(refused)}), flush=True)
run(create_chateval(), items, out_dir=out, context=context, ray=cluster.address, workers=2, concurrency=8,
    checkpoint=postgres, progress=False)
cluster.shutdown()
"""


def test_several_nodes_share_postgres_checkpoints_and_cache(server: FakeOpenAIServer, dataset: Path,
                                                            one_process: dict[str, Any], postgres_url: str,
                                                            tmp_path: Path) -> None:
    out = tmp_path / "two-nodes"
    sent = len(server.requests)
    done = subprocess.run([sys.executable, "-c", TWO_NODES, str(dataset), server.base_url, postgres_url, str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[0])["refused"].startswith(
        "--ray with a cluster of 2 nodes needs shared checkpoints: pass --checkpoint postgresql://")
    assert not (tmp_path / "two-nodes-sqlite" / "results.jsonl").exists()  # refused before anything was written
    lines = lines_of(out)
    assert len(lines) == ITEMS and {r["id"]: r["verdict"] for r in lines} == one_process["verdicts"]
    assert len(server.requests) - sent == one_process["requests"]
    cluster_manifest = manifest(out)["ray"]
    # on several nodes the cache follows the checkpoints into PostgreSQL: no file of the driver's is shared
    assert (cluster_manifest["nodes"], cluster_manifest["checkpoint"], cluster_manifest["cache"]) == (
        2, postgres_url, postgres_url)
    assert not (out / "llm_cache.sqlite").exists() and not (out / "checkpoints.sqlite").exists()
    import psycopg

    with psycopg.connect(postgres_url) as conn:
        cached = conn.execute("SELECT COUNT(*) FROM jurygraph_llm_cache").fetchone()
    assert cached is not None and cached[0] == one_process["requests"]
    # the workers on both nodes recorded what they paid in the shared database; the driver copied it into the run's
    # ledger, whose sums are the spend
    run_manifest = manifest(out)
    with psycopg.connect(postgres_url) as conn:
        recorded = conn.execute("SELECT SUM(requests) FROM jurygraph_ledger WHERE run = %s",
                                (run_manifest["run_id"],)).fetchone()
    assert recorded is not None and recorded[0] == one_process["requests"]
    assert run_manifest["spend"]["requests"] == run_manifest["counts"]["requests"] == one_process["requests"]


def test_cluster_options_need_ray_and_several_nodes_need_postgres(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--protocol", "chateval", "--dataset", "faireval", "--model", "local", "--workers", "2",
                 "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("jurygraph: --workers spread(s) a run over a Ray cluster: give --ray ADDRESS too "
                   "(local, auto or HOST:PORT)")

    class Run:  # what shared_state reads of a run
        out, checkpoint, cache = tmp_path, None, True

    three = Cluster(address="auto", nodes=3, cpus=12, driver_node="n", remote_driver=False)
    with pytest.raises(ValueError, match=r"^--ray with a cluster of 3 nodes needs shared checkpoints: pass "
                                         r"--checkpoint postgresql://"):
        shared_state(Run(), three)  # type: ignore[arg-type]
    Run.checkpoint = "postgresql://db.internal/runs"  # type: ignore[assignment]
    state = shared_state(Run(), three)  # type: ignore[arg-type]
    assert (state.checkpoint, state.cache, state.on_this_machine) == (Run.checkpoint, Run.checkpoint, False)
    Run.cache = "cache.sqlite"  # type: ignore[assignment]
    with pytest.raises(ValueError, match="a SQLite file is on one machine"):
        shared_state(Run(), three)  # type: ignore[arg-type]
    one = Cluster(address="local", nodes=1, cpus=2, driver_node="n", remote_driver=False)
    assert shared_state(Run(), one).on_this_machine  # type: ignore[arg-type]


def test_items_paused_for_review_keep_waiting_when_a_ray_run_resumes(cluster: Cluster, openai_server: Any,
                                                                     tmp_path: Path) -> None:
    """Issue 23's review pause inside Ray workers: the disagreements wait for a person; a resume on the cluster
    sends nothing, keeps them waiting, and does not count their usage again (an earlier invocation paid it)."""
    from tests.test_escalation_cli import DISAGREE, run_args
    from tests.test_escalation_cli import respond as scripted

    server = openai_server(scripted)
    out = tmp_path / "review"
    assert main(run_args(server, out, "--review-when", "agreement<1", "--ray", "local", "--workers", "2")) == 0
    assert {r["id"] for r in lines_of(out) if r["status"] == "awaiting_review"} == DISAGREE
    first = manifest(out)
    assert first["awaiting_review"] == sorted(DISAGREE) and first["ray"]["workers"] == 2
    assert first["spend"]["requests"] == len(server.requests) > 0
    sent = len(server.requests)
    assert main(["eval", "--resume", str(out), "--quiet"]) == 0
    assert len(server.requests) == sent
    resumed = manifest(out)
    assert resumed["awaiting_review"] == sorted(DISAGREE) and resumed["invocations"][-1]["execution"]["ray"] == "local"
    # the resume paid nothing; the run's totals are the first invocation's
    assert sum(entry["requests"] for entry in resumed["invocations"][-1]["usage_by_agent"].values()) == 0
    assert resumed["usage_by_agent"] == first["usage_by_agent"] and resumed["spend"] == first["spend"]


def test_a_batch_run_is_refused_with_ray(openai_server: Any, items: list[Any], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Batch mode sends its rounds from the driver as provider batches: with a cluster it is refused in one line
    before anything is written, rather than run some other way."""
    from jurygraph.running.batch import BatchOptions

    server = openai_server(respond)
    with pytest.raises(ValueError, match=r"batch= .* does not combine with ray="):
        run(create_chateval(), items[:4], out_dir=tmp_path / "api", context=context(server), ray="local",
            batch=BatchOptions(), progress=False)
    assert not (tmp_path / "api").exists()
    assert main(["eval", "--protocol", "chateval", "--dataset", "faireval", "--limit", "2", "--model", "judge",
                 "--base-url", server.base_url, "--ray", "local", "--out", str(tmp_path / "cli"), "--batch"]) == 2
    assert capsys.readouterr().err.strip() == (
        "jurygraph: --batch sends each round from this process as one provider batch: it does not combine with "
        "--ray (a batch run needs no workers)")
    assert not (tmp_path / "cli").exists() and server.requests == []


def test_the_budget_holds_for_the_whole_cluster(cluster: Cluster, openai_server: Any, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """--max-cost on a Ray run: the driver admits each item against what the workers have paid and the reserves
    of the items in flight; at the budget the run stops (exit 3) within it, and a resume with a higher budget
    finishes the items, no call paid twice."""
    from tests.test_budget import PER_ITEM, REPLY, args_for

    server = openai_server(lambda request, i: REPLY)
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"judge": {"input": 10.0, "output": 30.0}}))
    out = tmp_path / "run"
    capsys.readouterr()
    assert main(args_for(server, out, "--prices", str(prices), "--max-cost", "0.2", "--concurrency", "2",
                         "--ray", "local", "--workers", "2", "--shard-size", "2")) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("jurygraph: stopped: budget reached: $0.")
    stopped = manifest(out)
    assert stopped["stopped"] == "budget" and stopped["ray"]["workers"] == 2
    spend = stopped["spend"]
    assert 0 < spend["cost_usd"] <= 0.2
    done = lines_of(out)
    assert 0 < len(done) < 12 and all(r["status"] == "ok" for r in done)  # items in flight finished whole
    assert spend["requests"] == len(server.requests) == PER_ITEM * len(done)
    assert spend["cost_usd"] + stopped["budget"]["reserve_per_item"]["cost_usd"] > 0.2  # the next did not fit

    assert main(["eval", "--resume", str(out), "--max-cost", "1"]) == 0
    lines = lines_of(out)
    assert len(lines) == 12 and len({r["id"] for r in lines}) == 12
    assert len(server.requests) == PER_ITEM * 12  # no call paid twice
    finished = manifest(out)
    assert finished["stopped"] is None and finished["spend"]["requests"] == PER_ITEM * 12
    assert finished["spend"]["cost_usd"] == pytest.approx(
        sum(entry["input_tokens"] * 10 + entry["output_tokens"] * 30 for r in lines
            for entry in r["usage"].values()) / 1e6)


def test_an_error_every_item_would_hit_stops_a_ray_run_at_once(cluster: Cluster, openai_server: Any,
                                                               items: list[Any], tmp_path: Path) -> None:
    from jurygraph.running.runner import RunAborted
    from jurygraph.testing.fake_server import Faults

    server = openai_server(respond, faults=Faults(always="401"))
    started = time.monotonic()
    with pytest.raises(RunAborted, match="401 Unauthorized") as stopped:
        run(create_chateval(), items, out_dir=tmp_path / "refused", context=context(server), concurrency=4,
            ray="local", workers=2, progress=False)
    assert time.monotonic() - started < 30
    # no shard is run again for it (it is no worker's death), and no item is written as failed
    assert stopped.value.summary is not None and stopped.value.summary.done == 0
    assert len(server.requests) <= 2 * 4  # at most each worker's first requests
    assert lines_of(tmp_path / "refused") == []
    assert manifest(tmp_path / "refused")["aborted"].startswith("openai at http://127.0.0.1")


def test_a_protocol_from_a_file_runs_on_the_cluster(cluster: Cluster, server: FakeOpenAIServer, tmp_path: Path) -> None:
    """Issue 29: a strategy of one's own, given as ``path/to/file.py:factory``, is judged by the Ray workers like a
    built-in protocol; the workers cannot import the file by name, so its functions (here the condition of its
    early stop) travel by value."""
    from tests.test_composed_strategy import strategies_file

    path = strategies_file(tmp_path / "mine")
    out = tmp_path / "until_agreed"
    assert main(["eval", "--protocol", f"{path}:create_until_agreed", "--dataset", "faireval", "--limit", "8",
                 "--model", "judge", "--base-url", server.base_url, "--ray", "local", "--workers", "2",
                 "--shard-size", "2", "--out", str(out), "--quiet"]) == 0
    records = lines_of(out)
    assert sorted(r["id"] for r in records) == sorted(str(i) for i in range(8))
    assert all(r["status"] == "ok" and set(r["judgments"]) == {"Critic", "General Public", "Scientist"}
               for r in records)
    assert manifest(out)["ray"]["workers"] == 2


def test_a_protocol_from_a_file_pickles_by_value(tmp_path: Path) -> None:
    """What a worker receives of such a graph loads in a fresh interpreter, which cannot import the file by name."""
    from jurygraph.graphs.registry import find
    from jurygraph.running import portable
    from tests.test_composed_strategy import strategies_file

    path = strategies_file(tmp_path / "mine")
    graph = find(f"{path}:create_until_agreed").create().graph.compile()
    fresh = subprocess.run([sys.executable, "-c", "import sys\nfrom jurygraph.running import portable\n"
                            "graph = portable.loads(sys.stdin.buffer.read())\nprint(sorted(graph.nodes))"],
                           input=portable.dumps(graph), capture_output=True, timeout=120, check=False)
    assert fresh.returncode == 0, fresh.stderr.decode()[-500:]
    assert "general_public_t1" in fresh.stdout.decode()


# --- issue 28: the books balance on a cluster ------------------------------------------------------------------


def _usage_requests(lines: list[dict[str, Any]]) -> int:
    return sum(int(entry.get("requests", 0)) for line in lines for entry in (line.get("usage") or {}).values())


def test_a_ray_run_keeps_its_spend_on_record_and_a_killed_driver_resumes_within_its_budget(
        cluster: Cluster, openai_server: Any, dataset: Path, tmp_path: Path) -> None:
    """Finding 2: the workers' spend is on record as their records arrive (spend.json is there and counts at least
    what the written results paid), so a driver killed mid-run and resumed with the same budget stops within it,
    its spend equal to what the server answered (but for the calls in flight at the kill)."""
    server = openai_server(respond, latency=0.01)
    out = tmp_path / "budget"
    address = ray.get_runtime_context().gcs_address
    budget = 200_000
    command = [sys.executable, "-m", "jurygraph.cli", "eval", "--protocol", "chateval", "--no-calibrate",
               "--dataset", str(dataset), "--task", "pairwise", "--model", "judge", "--base-url", server.base_url,
               "--out", str(out), "--quiet", "--concurrency", "4", "--ray", address, "--workers", "2",
               "--max-total-tokens", str(budget)]
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ((out / "results.jsonl").exists() and (out / "results.jsonl").read_bytes().count(b"\n") >= 40):
            assert driver.poll() is None, driver.communicate()[1]
            assert time.monotonic() < deadline, "the Ray run wrote no results"
            time.sleep(0.05)
        written = lines_of(out)  # first the results, then the spend: the spend only grows
        time.sleep(2 * SPEND_INTERVAL)  # spend.json follows the ledger within SPEND_INTERVAL
        spend = json.loads((out / "spend.json").read_text(encoding="utf-8"))
        assert spend["requests"] >= _usage_requests(written) > 0
    finally:
        driver.kill()  # kill -9 of the driver: its workers go with it
        driver.wait()
    resumed = subprocess.run([sys.executable, "-m", "jurygraph.cli", "eval", "--resume", str(out), "--quiet"],
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 3, resumed.stderr
    assert "up to 0 tokens" not in resumed.stderr and "budget reached" in resumed.stderr
    spend = json.loads((out / "spend.json").read_text(encoding="utf-8"))
    assert spend["input_tokens"] + spend["output_tokens"] <= budget
    lines = lines_of(out)
    assert 40 < len(lines) < ITEMS and len({r["id"] for r in lines}) == len(lines)
    assert sum(int(e.get("input_tokens", 0)) + int(e.get("output_tokens", 0))
               for line in lines for e in line["usage"].values()) <= budget
    # the ledger equals what the server answered, but for the calls in flight at the kill (2 workers x 4 items)
    lost = len(server.billed) - spend["requests"]
    assert 0 <= lost <= 8
    assert 0 <= sum(c["input_tokens"] + c["output_tokens"] for c in server.billed) - \
        (spend["input_tokens"] + spend["output_tokens"]) <= lost * max(
            c["input_tokens"] + c["output_tokens"] for c in server.billed)
    assert manifest(out)["spend"] == spend


def test_workers_killed_before_their_first_record_are_counted_and_so_are_their_calls(
        cluster: Cluster, openai_server: Any, items: list[Any], tmp_path: Path) -> None:
    """Finding 7: a shard whose worker dies before it sent any record is run again, and the manifest counts it
    (retried_shards); the dead attempts' paid calls are on record (spend equals what the server answered, but for
    the calls in flight when they died)."""
    killed: list[int] = []

    def respond_then_kill(request: dict[str, Any], index: int) -> str:
        if len(server.requests) >= 6 and not killed:  # every worker is in its first item's calls: no record yet
            for process in _shard_workers():
                os.kill(process.pid, signal.SIGKILL)
                killed.append(process.pid)
        return respond(request, index)

    server = openai_server(respond_then_kill, latency=0.02)
    out = tmp_path / "early"
    run(create_chateval(), items[:16], out_dir=out, context=context(server), concurrency=4, ray="local", workers=2,
        progress=False)
    assert killed
    lines = lines_of(out)
    assert len(lines) == 16 and len({r["id"] for r in lines}) == 16
    run_manifest = manifest(out)
    assert run_manifest["ray"]["retried_shards"] >= 1
    spend = run_manifest["spend"]
    assert 0 <= len(server.billed) - spend["requests"] <= 2 * 4
    # every attempt on record but those of the calls in flight when the workers died: the answered ones not on
    # record, and any the server was still answering (seen, never billed)
    unrecorded = len(server.requests) - run_manifest["counts"]["attempts"]
    assert len(server.billed) - spend["requests"] <= unrecorded <= 2 * 4
