"""The runner: failures recorded and retried on resume, nothing paid twice, provider faults survived,
request limits kept, keys never written, Ctrl-C stops cleanly; a run open for items that come one at a time."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from langchain_core.messages import BaseMessage

from jurygraph import EvalItem, JuryContext, create_chateval
from jurygraph.llm.limits import ProviderGates, ProviderLimit, parse_limits
from jurygraph.running.rundir import read_manifest, read_results
from jurygraph.running.runner import RunAborted, open_run, run
from jurygraph.testing import FakeJudge, pairwise_reply
from jurygraph.testing.fake_server import Faults, prompt_of

FINAL = "Output with the following format strictly"


def items(n: int) -> list[EvalItem]:
    return [EvalItem(id=f"q{i}", task="pairwise", question=f"Question {i}?", response_1=f"a{i}",
                     response_2=f"b{i}", human={"label": "2"}) for i in range(n)]


def respond(prompt: str, messages: Sequence[BaseMessage]) -> str:
    return pairwise_reply(4, 8) if FINAL in prompt else "Assistant 2 explains more."


def http_responder(request: dict, index: int) -> str:
    return respond(prompt_of(request), [])


def test_a_failing_item_is_recorded_and_resume_retries_only_what_is_unfinished(tmp_path: Path) -> None:
    broken = FakeJudge(respond=respond,
                       fail_when=lambda p: "Question 3?" in p and FINAL in p and "Critic !" in p)
    summary = run(create_chateval(), items(5), out_dir=tmp_path, context=JuryContext(default=broken),
                  concurrency=2, progress=False)
    assert (summary.done, summary.failed) == (4, 1)
    records = {r["id"]: r for r in read_results(tmp_path)}
    assert records["q3"]["status"] == "failed" and "scripted failure" in records["q3"]["error"]
    # the failed item keeps what it had reached: the three referee turns before the failure
    assert records["q3"]["usage"]["General Public"]["requests"] == 2

    fixed = FakeJudge(respond=respond)
    summary = run(create_chateval(), items(5), out_dir=tmp_path, context=JuryContext(default=fixed),
                  resume=True, progress=False)
    assert (summary.done, summary.failed, summary.skipped) == (1, 0, 4)
    # q3 continued from its checkpoint: only the Critic's final turn was sent again
    assert len(fixed.calls) == 1 and "Critic !" in fixed.calls[0].prompt
    lines = read_results(tmp_path)
    assert sorted(r["id"] for r in lines) == ["q0", "q1", "q2", "q3", "q4"]  # one line per item
    assert all(r["status"] == "ok" for r in lines)


def test_a_rerun_with_a_shared_cache_sends_no_request(tmp_path: Path) -> None:
    cache = tmp_path / "shared_cache.sqlite"
    first = FakeJudge(respond=respond)
    run(create_chateval(), items(3), out_dir=tmp_path / "a", context=JuryContext(default=first), cache=cache,
        progress=False)
    assert len(first.calls) == 12
    second = FakeJudge(respond=respond)
    summary = run(create_chateval(), items(3), out_dir=tmp_path / "b", context=JuryContext(default=second),
                  cache=cache, progress=False)
    assert second.calls == [] and summary.cache_hits == 12
    assert [r["verdict"] for r in read_results(tmp_path / "a")] == [r["verdict"] for r in read_results(tmp_path / "b")]


def test_n_samples_are_not_collapsed_by_the_cache(tmp_path: Path) -> None:
    """Two protocol runs that differ only by sample index must not share one cached answer."""
    from langchain_core.messages import HumanMessage

    from jurygraph.llm.cache import LLMCache

    messages = [HumanMessage("same prompt")]
    base = {"n": 1, "temperature": 1.0}
    keys = {LLMCache.key("openai:m", "text", messages, {**base, "sample": i}) for i in range(3)}
    assert len(keys) == 3
    assert LLMCache.key("openai:m", "samples", messages, {"n": 20}) != LLMCache.key("openai:m", "samples",
                                                                                     messages, {"n": 1})


def test_retry_on_429_honours_retry_after(openai_server, tmp_path: Path) -> None:
    server = openai_server(http_responder, faults=Faults(script=["429"], retry_after=0.6))
    started = time.monotonic()
    summary = run(create_chateval(), items(1), out_dir=tmp_path, progress=False,
                  context=JuryContext(default={"spec": f"openai:judge@{server.base_url}", "max_retries": 2}))
    assert summary.done == 1 and summary.failed == 0
    assert server.outcomes[:2] == ["429", "ok"] and len(server.requests) == 5
    assert time.monotonic() - started >= 0.6  # waited as the server asked


def test_after_the_retries_the_item_fails_and_the_run_goes_on(openai_server, tmp_path: Path) -> None:
    server = openai_server(http_responder, faults=Faults(script=["500", "500", "500"]))
    spec = {"spec": f"openai:judge@{server.base_url}", "max_retries": 2}
    summary = run(create_chateval(), items(3), out_dir=tmp_path, progress=False, concurrency=1,
                  context=JuryContext(default=spec))
    assert (summary.done, summary.failed) == (2, 1)
    failed = [r for r in read_results(tmp_path) if r["status"] == "failed"]
    assert len(failed) == 1 and "Error code: 500" in failed[0]["error"]


def test_timeouts_are_retried_then_reported(openai_server, tmp_path: Path) -> None:
    server = openai_server(http_responder, faults=Faults(script=["hang", "hang"], hang_seconds=2.0))
    spec = {"spec": f"openai:judge@{server.base_url}", "max_retries": 1, "timeout": 0.3}
    summary = run(create_chateval(), items(1), out_dir=tmp_path, progress=False, context=JuryContext(default=spec))
    assert summary.failed == 1 and "Timeout" in summary.failures["q0"]


def test_unparseable_http_bodies_are_retried(openai_server, tmp_path: Path) -> None:
    server = openai_server(http_responder, faults=Faults(script=["garbage", "garbage"]))
    summary = run(create_chateval(), items(2), out_dir=tmp_path, progress=False, concurrency=1,
                  context=JuryContext(default={"spec": f"openai:judge@{server.base_url}", "max_retries": 0}))
    assert (summary.done, summary.failed) == (2, 0) and len(read_results(tmp_path)) == 2
    assert server.outcomes[:3] == ["garbage", "garbage", "ok"] and len(server.requests) == 10


def test_a_body_that_stays_unparseable_fails_the_item(openai_server, tmp_path: Path) -> None:
    server = openai_server(http_responder, faults=Faults(rate_garbage=1.0))
    summary = run(create_chateval(), items(1), out_dir=tmp_path, progress=False,
                  context=JuryContext(default={"spec": f"openai:judge@{server.base_url}", "max_retries": 0}))
    assert summary.failed == 1 and "JSONDecodeError" in summary.failures["q0"] and len(server.requests) == 4


def test_the_manifest_exists_while_the_run_is_going(tmp_path: Path) -> None:
    seen: list[dict] = []
    run(create_chateval(), items(1), out_dir=tmp_path, progress=False,
        context=JuryContext(default=FakeJudge(respond=respond)),
        on_result=lambda record: seen.append(json.loads((tmp_path / "manifest.json").read_text())))
    assert seen[0]["ended"] is None and seen[0]["started"]  # a run killed now could be resumed from it
    assert json.loads((tmp_path / "manifest.json").read_text())["ended"]


def test_in_flight_limit_is_shared_by_all_agents_and_items(openai_server, tmp_path: Path) -> None:
    server = openai_server(http_responder, latency=0.05)
    gates = ProviderGates(parse_limits(None, [f"{server.base_url}=2"]))
    run(create_chateval(strategy="simultaneous"), items(6), out_dir=tmp_path, progress=False, concurrency=6,
        context=JuryContext(default=f"openai:judge@{server.base_url}", gates=gates))
    assert len(server.requests) == 24 and server.max_in_flight == 2


def test_requests_per_second_limit(openai_server, tmp_path: Path) -> None:
    server = openai_server(http_responder)
    gates = ProviderGates({"*": ProviderLimit(requests_per_second=20)})
    started = time.monotonic()
    run(create_chateval(), items(5), out_dir=tmp_path, progress=False, concurrency=5,
        context=JuryContext(default=f"openai:judge@{server.base_url}", gates=gates))
    elapsed = time.monotonic() - started
    assert len(server.requests) == 20 and elapsed >= 0.8  # 20 requests at 20/s, a one-token bucket to start


def test_limits_are_parsed_with_clear_errors() -> None:
    assert parse_limits(["openai=5", "3"], ["8"]) == {
        "openai": ProviderLimit(requests_per_second=5.0), "*": ProviderLimit(requests_per_second=3.0, max_in_flight=8)}
    with pytest.raises(ValueError, match="expected \\[PROVIDER=\\]NUMBER"):
        parse_limits(["openai=fast"], None)
    with pytest.raises(ValueError, match="positive"):
        ProviderLimit(requests_per_second=0)


def test_api_keys_are_never_written_to_the_run_directory(openai_server, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-jurygraph-test-0123456789abcdefSECRET"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    server = openai_server(http_responder)
    from jurygraph.cli import main

    code = main(["eval", "--dataset", "faireval", "--limit", "2", "--model", "judge", "--base-url", server.base_url,
                 "--out", str(tmp_path / "run"), "--quiet"])
    assert code == 0
    files = [p for p in (tmp_path / "run").rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"results.jsonl", "manifest.json", "checkpoints.sqlite", "llm_cache.sqlite"}
    for path in files:
        assert secret.encode() not in path.read_bytes(), path.name
        assert b"SECRET" not in path.read_bytes(), path.name


def test_manifest_records_the_run(tmp_path: Path) -> None:
    run(create_chateval(), items(2), out_dir=tmp_path, context=JuryContext(default=FakeJudge(respond=respond)),
        progress=False, manifest={"protocol": "chateval"}, prices={"fake-judge": {"input": 1, "output": 2}})
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["counts"]["done"] == 2 and manifest["versions"]["langgraph"]
    assert manifest["usage_by_agent"]["Critic"]["requests"] == 4
    assert manifest["usage_by_model"]["FakeJudge:fake-judge"]["requests"] == 8
    assert manifest["counts"]["cost_usd"] > 0
    assert manifest["started"] <= manifest["ended"]


def test_duplicate_ids_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="repeated: q0"):
        run(create_chateval(), items(2) + items(1), out_dir=tmp_path, progress=False,
            context=JuryContext(default=FakeJudge(respond=respond)))


def test_a_stream_of_items_is_pulled_as_workers_free_up_and_a_repeated_id_stops_it(tmp_path: Path) -> None:
    """``arun`` takes any iterable: items are drawn one at a time (a million-row dataset is never held), and an id
    seen twice stops the run in one line, keeping the items judged before it."""
    pulled: list[str] = []
    pulled_at_result: list[int] = []

    def stream(n: int, repeat: str | None = None):  # type: ignore[no-untyped-def]
        for item in [*items(n), *(items(int(repeat[1:]) + 1)[-1:] if repeat else [])]:
            pulled.append(item.id)
            yield item

    summary = run(create_chateval(), stream(12), out_dir=tmp_path / "a", concurrency=3, progress=False,
                  context=JuryContext(default=FakeJudge(respond=respond)),
                  on_result=lambda record: pulled_at_result.append(len(pulled)))
    assert (summary.items, summary.done) == (12, 12) and len(read_results(tmp_path / "a")) == 12
    # when the k-th item finished, at most the 3 in flight and the next had been drawn
    assert all(drawn <= k + 3 for k, drawn in enumerate(pulled_at_result, start=1)), pulled_at_result

    pulled.clear()
    with pytest.raises(RunAborted, match="'q2' is repeated") as stop:
        run(create_chateval(), stream(4, repeat="q2"), out_dir=tmp_path / "b", concurrency=1, progress=False,
            context=JuryContext(default=FakeJudge(respond=respond)))
    assert stop.value.exit_code == 2
    assert sorted(r["id"] for r in read_results(tmp_path / "b")) == ["q0", "q1", "q2", "q3"]


SCRIPT = """
import sys
from jurygraph.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_stops_cleanly_and_the_run_resumes(openai_server, tmp_path: Path) -> None:
    server = openai_server(http_responder, latency=0.15)
    out = tmp_path / "run"
    args = ["eval", "--dataset", "faireval", "--limit", "12", "--concurrency", "2", "--model", "judge",
            "--base-url", server.base_url, "--quiet", "--out", str(out), "--no-calibrate"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(read_results(out)) < 2:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "resume with --resume" in err
    interrupted = read_results(out)
    assert 2 <= len(interrupted) < 12 and all(r["status"] == "ok" for r in interrupted)
    with sqlite3.connect(out / "llm_cache.sqlite") as db:
        received = db.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
    sent_before = len(server.requests)

    resumed = subprocess.run([sys.executable, "-c", SCRIPT, "eval", "--resume", str(out), "--quiet"], env=env,
                             capture_output=True, text=True, timeout=60)
    assert resumed.returncode == 0, resumed.stderr
    final = read_results(out)
    assert sorted(int(r["id"]) for r in final) == list(range(12))
    # 12 items x 4 calls: every call whose answer had arrived before Ctrl-C is not sent again
    assert len(server.requests) - sent_before == 48 - received


def test_a_refused_connection_is_retried_then_stops_the_run(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    spec = {"spec": f"openai:judge@http://user:SECRET@127.0.0.1:{port}/v1", "max_retries": 1, "timeout": 2}
    with pytest.raises(RunAborted, match="cannot connect") as stopped:
        run(create_chateval(), items(2), out_dir=tmp_path, progress=False, context=JuryContext(default=spec),
            concurrency=1)
    assert f"http://user:***@127.0.0.1:{port}/v1" in str(stopped.value) and "SECRET" not in str(stopped.value)
    assert read_results(tmp_path) == []  # the second item never started: pending for a resume


class _Killed(BaseException):
    """Stands for kill -9: nothing after it runs."""


def test_a_kill_between_a_nodes_writes_and_its_checkpoint_resumes_instead_of_restarting(tmp_path: Path) -> None:
    """A finished node's writes are saved before the step's checkpoint: killed in between, the thread has no
    `next` node but a pending task. The run must continue it (no repeated call, no doubled history)."""
    from langgraph.checkpoint.memory import InMemorySaver

    class DyingSaver(InMemorySaver):
        def __init__(self) -> None:
            super().__init__()
            self.puts, self.die_at = 0, 4  # dies saving the checkpoint after critic_t1 finished

        def put(self, config, checkpoint, metadata, new_versions):  # type: ignore[no-untyped-def]
            self.puts += 1
            if self.puts == self.die_at:
                raise _Killed()
            return super().put(config, checkpoint, metadata, new_versions)

    saver = DyingSaver()
    graph = create_chateval().compile(checkpointer=saver)
    item = items(1)[0]
    config = {"configurable": {"thread_id": item.id}}
    first = FakeJudge(respond=respond)
    with pytest.raises(_Killed):
        graph.invoke({"item": item.model_dump(mode="json")}, config, context=JuryContext(default=first),
                     durability="sync")
    assert len(first.calls) == 2 and graph.get_state(config).next == ()  # the race: no next node...
    assert [t.name for t in graph.get_state(config).tasks] == ["critic_t1"]  # ...but a pending task

    second = FakeJudge(respond=respond)
    summary = run(graph, [item], out_dir=tmp_path, progress=False, cache=False, context=JuryContext(default=second))
    assert summary.done == 1
    assert [c.prompt.split("clear, ")[-1].split(" !")[0] for c in second.calls] == ["General Public", "Critic"]
    assert len(graph.get_state(config).values["histories"]["Critic"]) == 4  # not doubled by a restart


def test_an_open_run_takes_its_items_one_at_a_time_and_continues_a_run(tmp_path: Path) -> None:
    """running.runner.open_run, the seam an evaluator inside another harness judges through: the runner's own
    steps for items that come one at a time, on a run directory `run()` began (and `run()` may continue)."""
    judge = FakeJudge(respond=respond)
    context = JuryContext(default=judge)
    run(create_chateval(), items(3), out_dir=tmp_path, context=context, progress=False,
        manifest={"protocol": "chateval"})
    sent = len(judge.calls)

    async def asked_for(*wanted: EvalItem) -> list[dict]:
        async with open_run(create_chateval(), tmp_path, context=context, manifest={"protocol": "chateval"},
                            same_run=("protocol",)) as opened:
            return [await opened.judge(item) for item in wanted]

    more = items(5)
    again, new = asyncio.run(asked_for(more[1], more[4]))
    assert again == next(r for r in read_results(tmp_path) if r["id"] == "q1")  # from its record, nothing sent
    assert new["status"] == "ok" and len(judge.calls) == sent + 4  # q4: 2 referees x 2 turns
    manifest = read_manifest(tmp_path)
    assert len(manifest["invocations"]) == 2 and manifest["invocations"][1]["counts"]["skipped"] == 1
    assert (manifest["counts"]["items"], manifest["counts"]["done"]) == (4, 4)
    assert manifest["counts"]["requests"] == len(judge.calls) == 16

    async def another_protocol() -> None:
        async with open_run(create_chateval(), tmp_path, context=context, manifest={"protocol": "debate"},
                            same_run=("protocol",)):
            pass

    with pytest.raises(ValueError, match=r"holds another run: protocol chateval \(given: debate\)"):
        asyncio.run(another_protocol())
    summary = run(create_chateval(), more, out_dir=tmp_path, context=context, resume=True, progress=False,
                  manifest={"protocol": "chateval"})
    assert (summary.done, summary.skipped) == (1, 4)  # q3 only
    assert sorted(r["id"] for r in read_results(tmp_path)) == ["q0", "q1", "q2", "q3", "q4"]
