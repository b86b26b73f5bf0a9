"""A run directory is a contract (issue 21), checked through the CLI against the local OpenAI-compatible server:
resume restores the run and refuses contradictions, one writer at a time, nothing finished is lost on a full
disk, no secret is stored, runs that cannot work stop at once, values that make no sense are refused."""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from jurygraph.cli import main
from jurygraph.running.rundir import LOCK, read_results
from jurygraph.testing import pairwise_reply
from jurygraph.testing.fake_server import Faults, prompt_of

SCORER_SYSTEM = "Logically think to score the following sentence."


def respond(request: dict[str, Any], index: int) -> str:
    """ChatEval/single referees on pairwise items, DEBATE's Scorer and Critic on SummEval."""
    system = str(request["messages"][0].get("content", ""))
    prompt = prompt_of(request)
    if system == SCORER_SYSTEM:
        return "Rationale.\n- Coherence: 4"
    if "Devil" in system:
        return "NO ISSUE"
    if "format" in prompt:
        return pairwise_reply(8, 4)
    return "Assistant 1 is clearer."


def serve(openai_server: Any, **kwargs: Any) -> Any:
    return openai_server(respond, **kwargs)


# one answer order (the paper's default judges both): these tests count the requests of one pass
FAIREVAL = ("--dataset", "faireval", "--no-calibrate")


def eval_args(server: Any, out: Path, *extra: str) -> list[str]:
    return ["eval", "--model", "judge", "--base-url", server.base_url, "--out", str(out), "--quiet", *extra]


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


def manifest_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "manifest.json").read_text())


# --- 1. resume restores the protocol and every run-defining option ---


@pytest.mark.parametrize(("protocol", "dataset", "extra"), [
    ("debate", "summeval", ["--max-iterations", "2"]),
    ("single", "faireval", []),
])
def test_resume_restores_the_protocol(openai_server, tmp_path: Path, protocol: str, dataset: str,
                                      extra: list[str]) -> None:
    server = serve(openai_server)
    out = tmp_path / "run"
    assert main(eval_args(server, out, "--protocol", protocol, "--dataset", dataset, "--limit", "3", *extra)) == 0
    first = manifest_of(out)
    # as if killed after the first item: the other two have neither a result line nor a checkpoint
    lines = (out / "results.jsonl").read_text().splitlines()
    (out / "results.jsonl").write_text(lines[0] + "\n")
    for name in ("checkpoints.sqlite", "llm_cache.sqlite"):
        (out / name).unlink()
    sent = len(server.requests)

    assert main(["eval", "--resume", str(out), "--quiet"]) == 0
    resumed = server.requests[sent:]
    systems = {str(r["messages"][0].get("content", ""))[:40] for r in resumed}
    if protocol == "debate":
        assert any(s.startswith(SCORER_SYSTEM[:40]) for s in systems)  # DEBATE's Scorer judged them
        assert not any("format strictly" in prompt_of(r) for r in resumed)  # no ChatEval referee
    else:
        # both orders (the paper's position calibration), one Single Agent call each: 4, not ChatEval's 16
        assert len(resumed) == 4
    after = manifest_of(out)
    assert after["protocol"] == protocol and after["parameters"] == first["parameters"]
    assert after["cli"]["protocol_args"] == first["cli"]["protocol_args"]
    assert len(read_results(out)) == 3


# --- 2. contradicting flags on resume: exit 2, every conflict named, nothing changed ---


def test_conflicting_flags_on_resume_are_refused_and_change_nothing(openai_server, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    server = serve(openai_server)
    out = tmp_path / "run"
    assert main(eval_args(server, out, *FAIREVAL, "--limit", "2")) == 0
    capsys.readouterr()
    before = {name: (out / name).read_bytes() for name in ("results.jsonl", "manifest.json")}
    sent = len(server.requests)
    for flags, named in [
        (["--model", "openai:gpt-4.1"], ["--model openai:gpt-4.1 (the run has judge)"]),
        (["--protocol", "debate", "--dataset", "summeval"],
         ["--protocol debate (the run has chateval)", "--dataset summeval (the run has faireval)"]),
        (["--turns", "5"], ["--turns 5 (the run has 2)"]),
    ]:
        assert main(["eval", "--resume", str(out), "--quiet", *flags]) == 2
        err = one_line_error(capsys)
        assert all(text in err for text in named), err
    assert len(server.requests) == sent
    assert {name: (out / name).read_bytes() for name in before} == before


def test_execution_options_may_change_on_resume_and_are_recorded(openai_server, tmp_path: Path) -> None:
    server, moved = serve(openai_server), serve(openai_server)
    out = tmp_path / "run"
    assert main(eval_args(server, out, *FAIREVAL, "--limit", "2")) == 0
    (out / "results.jsonl").write_text("")
    (out / "checkpoints.sqlite").unlink()
    (out / "llm_cache.sqlite").unlink()
    assert main(["eval", "--resume", str(out), "--quiet", "--concurrency", "1", "--timeout", "30",
                 "--max-retries", "1", "--base-url", moved.base_url]) == 0
    assert len(moved.requests) == 8  # the same model name at the server's new address
    invocations = manifest_of(out)["invocations"]
    assert [i["resume"] for i in invocations] == [False, True]
    assert invocations[1]["execution"]["concurrency"] == 1 and invocations[1]["execution"]["timeout"] == 30
    assert invocations[1]["execution"]["base_url"] == moved.base_url


# --- 3. one writer per run directory; a killed writer's lock never blocks a resume ---

SCRIPT = "import sys\nfrom jurygraph.cli import main\nsys.exit(main(sys.argv[1:]))\n"


def test_one_writer_per_run_directory(openai_server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = serve(openai_server, latency=0.1)
    out = tmp_path / "run"
    args = eval_args(server, out, *FAIREVAL, "--limit", "10", "--concurrency", "1")
    writer = subprocess.Popen([sys.executable, "-c", SCRIPT, *args], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(read_results(out)) < 1:
            time.sleep(0.05)
        assert read_results(out), "the first writer never finished an item"
        sent = len(server.requests)
        assert main(args) == 2
        assert f"in use by PID {writer.pid}" in one_line_error(capsys)
        assert main(["eval", "--resume", str(out), "--quiet"]) == 2
        assert f"in use by PID {writer.pid}" in one_line_error(capsys)
        assert len(server.requests) - sent <= 4  # only the first writer's own calls went out meanwhile
    finally:
        writer.kill()  # kill -9: the lock must not outlive it
        writer.wait(timeout=30)
    assert (out / LOCK).exists()
    assert main(["eval", "--resume", str(out), "--quiet"]) == 0
    records = read_results(out)
    assert sorted(int(r["id"]) for r in records) == list(range(10))


# --- 4. a full disk ends the run with one line; a resume on a bigger disk pays only for unfinished items ---

FULL_DISK = """
import resource, sys
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # every file this process writes is capped: a full disk
from jurygraph.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_a_full_disk_keeps_every_finished_item(openai_server, tmp_path: Path) -> None:
    server = serve(openai_server)
    out = tmp_path / "run"
    args = eval_args(server, out, *FAIREVAL, "--limit", "40", "--concurrency", "2")
    full = subprocess.run([sys.executable, "-c", FULL_DISK, str(1_000_000), *args], capture_output=True, text=True,
                          timeout=120)
    assert full.returncode == 2, full.stderr
    assert "Traceback" not in full.stderr and "--resume" in full.stderr
    finished = [r for r in read_results(out) if r["status"] == "ok"]
    assert 0 < len(finished) < 40
    sent = len(server.requests)

    assert main(["eval", "--resume", str(out), "--quiet"]) == 0
    assert sorted(int(r["id"]) for r in read_results(out)) == list(range(40))
    # every item is four calls; finished ones (result line or final checkpoint) cost nothing again
    with sqlite3.connect(out / "checkpoints.sqlite") as db:
        assert db.execute("SELECT COUNT(DISTINCT thread_id) FROM checkpoints").fetchone()[0] == 40
    assert len(server.requests) - sent <= 4 * (40 - len(finished))


# --- 5. no secret in the run directory, the checkpoints, the cache or any message ---


def test_credentials_in_the_base_url_are_never_stored_or_printed(openai_server, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    server = serve(openai_server)
    secret_url = server.base_url.replace("http://", "http://user:SECRET@")
    out = tmp_path / "run"
    args = ["eval", "--model", "judge", "--base-url", secret_url, *FAIREVAL, "--limit", "2",
            "--out", str(out), "--quiet"]
    assert main(args) == 0
    files = [p for p in out.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"results.jsonl", "manifest.json", "checkpoints.sqlite", "llm_cache.sqlite"}
    for path in files:
        assert b"SECRET" not in path.read_bytes(), path.name
    assert "SECRET" not in "".join(capsys.readouterr())
    assert manifest_of(out)["cli"]["base_url"] == server.base_url.replace("http://", "http://user:***@")
    # a resume needs the credentials again, since they were never stored
    assert main(["eval", "--resume", str(out), "--quiet"]) == 2
    assert "pass --base-url again" in one_line_error(capsys)
    assert main(["eval", "--resume", str(out), "--quiet", "--base-url", secret_url]) == 0


@pytest.mark.parametrize("batch", [False, True], ids=["online", "batch"])
def test_a_base_url_with_a_query_keeps_it_and_never_stores_its_key(openai_server, tmp_path: Path, batch: bool,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A proxy that takes its key as ``?api_key=``: every request goes to the endpoint with the query kept (the
    client once built ``/v1/?api_key=SECRETchat/completions``), and the key is in no file and no message."""
    server = serve(openai_server)
    secret_url = f"{server.base_url}?api_key=SECRET&tier=a"
    out = tmp_path / "run"
    extra = ["--batch", "--batch-poll", "0.01"] if batch else []
    assert main(["eval", "--model", "judge", "--base-url", secret_url, *FAIREVAL, "--limit", "2",
                 "--out", str(out), "--quiet", *extra]) == 0
    assert server.urls and all(url.endswith("?api_key=SECRET&tier=a") for url in server.urls), server.urls
    endpoints = {url.partition("?")[0] for url in server.urls}
    assert endpoints >= ({"/v1/files", "/v1/batches"} if batch else {"/v1/chat/completions"}), endpoints
    assert len(read_results(out)) == 2
    for path in (p for p in out.rglob("*") if p.is_file()):
        assert b"SECRET" not in path.read_bytes(), path.name
    assert "SECRET" not in "".join(capsys.readouterr())
    assert manifest_of(out)["cli"]["base_url"] == f"{server.base_url}?api_key=***&tier=a"


def test_redaction_of_userinfo_and_token_parameters() -> None:
    from jurygraph.llm.redact import redact_text, redact_url

    assert redact_url("https://u:pw@h:1/v1?api_key=K&x=1&access_token=T") == \
        "https://u:***@h:1/v1?api_key=***&x=1&access_token=***"
    assert redact_url("https://TOKEN@h/v1") == "https://***@h/v1"
    assert redact_text("POST https://a:b@h/v1/chat failed") == "POST https://a:***@h/v1/chat failed"


# --- 6. spending on nothing: stop at the first rejection, check keys and servers first ---


@pytest.mark.parametrize(("status", "text"), [("401", "401 Unauthorized"), ("403", "403 Forbidden"),
                                              ("404", "404 Not Found")])
def test_a_rejecting_server_stops_the_run_at_once(openai_server, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  status: str, text: str) -> None:
    server = openai_server(respond, faults=Faults(always=status))
    out = tmp_path / "run"
    assert main(eval_args(server, out, *FAIREVAL, "--limit", "40", "--concurrency", "4")) == 1
    err = one_line_error(capsys)
    assert text in err and server.base_url in err and "--resume" in err
    assert len(server.requests) <= 4  # the items in flight, not 40 items x 4 calls
    assert read_results(out) == []  # nothing finished, nothing marked failed: all pending for --resume
    counts = manifest_of(out)["counts"]
    # an in-flight request cancelled by the stop is counted when sent but may never reach the server whole
    assert len(server.requests) <= counts["attempts"] <= 4 and counts["requests"] == 0


def test_a_missing_key_a_dead_port_and_no_model_fail_before_anything_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["eval", "--model", "google_genai:gemini-2.0-flash", *FAIREVAL, "--out", str(out)]) == 2
    assert "GOOGLE_API_KEY" in one_line_error(capsys)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    assert main(["eval", "--model", "judge", "--base-url", f"http://k:SECRET@127.0.0.1:{port}/v1",
                 *FAIREVAL, "--limit", "2", "--out", str(out)]) == 2
    err = one_line_error(capsys)
    assert time.monotonic() - started < 5
    assert f"http://k:***@127.0.0.1:{port}/v1" in err and "cannot connect" in err and "SECRET" not in err
    assert main(["eval", *FAIREVAL, "--out", str(out)]) == 2
    assert "--model local" in one_line_error(capsys)
    assert not out.exists()


# --- 7. values that make no sense are refused before anything starts ---


@pytest.mark.parametrize("flags", [["--limit", "0"], ["--limit", "-1"], ["--concurrency", "0"],
                                   ["--concurrency", "-3"], ["--timeout", "0"], ["--timeout", "-1"],
                                   ["--max-retries", "-1"], ["--turns", "0"], ["--agents", "0"],
                                   ["--protocol", "debate", "--max-iterations", "0"]])
def test_out_of_range_values_are_refused(openai_server, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         flags: list[str]) -> None:
    server = serve(openai_server)
    out = tmp_path / "run"
    assert main(eval_args(server, out, *FAIREVAL, *flags)) == 2
    assert f"{flags[-2]} must be" in one_line_error(capsys)
    assert server.requests == [] and not out.exists()


def test_a_plan_of_many_requests_per_item_asks_for_yes(openai_server, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    server = serve(openai_server)
    out = tmp_path / "run"
    assert main(eval_args(server, out, *FAIREVAL, "--turns", "1000")) == 2
    err = one_line_error(capsys)
    assert "2002 model requests per item" in err and "--yes" in err and "turns=1000" in err
    assert server.requests == [] and not out.exists()
    assert main(eval_args(server, out, *FAIREVAL, "--turns", "60", "--limit", "1", "--yes")) == 0
    assert len(server.requests) == 120


def test_a_dataset_without_judgeable_rows_is_refused(openai_server, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    server = serve(openai_server)
    data = tmp_path / "bad.jsonl"
    data.write_text('{"question": "Q"}\nnot json\n')
    out = tmp_path / "run"
    assert main(eval_args(server, out, "--dataset", str(data), "--task", "pairwise")) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl, row 1" in err and "bad.jsonl, row 2: not valid JSON" in err
    assert "no judgeable rows" in err.splitlines()[-1] and "Traceback" not in err
    assert not out.exists() and server.requests == []


# --- 8. one line instead of a traceback ---


def test_os_and_store_errors_are_one_line(openai_server, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    server = serve(openai_server)
    base = ["eval", "--model", "judge", "--base-url", server.base_url, "--quiet", "--limit", "1"]
    assert main([*base, "--dataset", str(tmp_path), "--out", str(tmp_path / "a")]) == 2
    assert str(tmp_path) in one_line_error(capsys)
    assert main([*base, *FAIREVAL, "--out", "/proc/self/jurygraph-run"]) == 2
    assert "/proc/self/jurygraph-run" in one_line_error(capsys)
    assert main([*base, *FAIREVAL, "--out", str(tmp_path / "b"), "--cache", str(tmp_path)]) == 2
    assert "is a directory" in one_line_error(capsys)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert main([*base, *FAIREVAL, "--out", str(tmp_path / "c"),
                 "--checkpoint", f"postgresql://u:SECRET@127.0.0.1:{port}/db"]) == 2
    err = one_line_error(capsys)
    assert "SECRET" not in err and ("postgres" in err.lower())
    monkeypatch.setenv("PATH", str(tmp_path))  # no Graphviz
    assert main(["draw", "--protocol", "debate", "--format", "png", "--out", str(tmp_path / "d.png")]) == 2
    assert "Graphviz" in one_line_error(capsys)


@pytest.mark.parametrize("outcome", ["empty", "no-choices"])
def test_an_unreadable_response_fails_the_item_with_one_line(openai_server, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str], outcome: str) -> None:
    server = openai_server(respond, faults=Faults(always=outcome))
    out = tmp_path / "run"
    assert main(eval_args(server, out, *FAIREVAL, "--limit", "1", "--max-retries", "0")) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    (record,) = read_results(out)
    assert record["status"] == "failed" and "is not a chat completion" in record["error"]
    assert server.base_url in record["error"] and "is not a chat completion" in captured.out


# --- 9. accounting: attempts beside requests; no list price for a model at your own server ---


def test_attempts_are_counted_and_own_servers_are_not_priced(openai_server, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    server = openai_server(respond, faults=Faults(script=["500", "500"]))
    out = tmp_path / "run"
    args = ["eval", "--model", "gpt-4o-mini", "--base-url", server.base_url, *FAIREVAL,
            "--limit", "2", "--quiet"]
    assert main([*args, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    counts = manifest_of(out)["counts"]
    assert counts["requests"] == 8 and counts["attempts"] == len(server.requests) == 10
    assert "8 requests (10 attempts)" in printed
    assert counts["cost_usd"] is None and "$" not in printed
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"gpt-4o-mini": {"input": 1.0, "output": 1.0}}))
    assert main([*args, "--out", str(tmp_path / "priced"), "--prices", str(prices)]) == 0
    assert manifest_of(tmp_path / "priced")["counts"]["cost_usd"] > 0


# --- 10. one item's debate as a transcript ---


def test_show_prints_one_items_debate(openai_server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = serve(openai_server)
    out = tmp_path / "run"
    assert main(eval_args(server, out, "--protocol", "debate", "--dataset", "summeval", "--limit", "1")) == 0
    (record,) = read_results(out)
    capsys.readouterr()
    assert main(["show", str(out), record["id"], "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert [turn["speaker"] for turn in view["transcript"]] == ["Scorer", "Critic"]
    assert view["transcript"][1]["text"] == "NO ISSUE"
    assert "Devil" in view["personas"]["Critic"] and view["personas"]["Scorer"] == SCORER_SYSTEM
    assert view["judgments"]["Scorer"]["score"] == 4.0 and view["verdict"]["score"] == 4.0
    assert view["human"] == record["human"] and view["state"]["reviews"][0]["no_issue"] is True
    assert main(["show", str(out), record["id"]]) == 0
    text = capsys.readouterr().out
    assert "[1] Scorer:" in text and "[2] Critic:" in text and "NO ISSUE" in text
    assert "verdict: score 4.0" in text and "human: " in text
    assert main(["show", str(out), "no-such-item"]) == 2
    assert f"e.g. {record['id']}" in one_line_error(capsys)


def test_show_reads_final_only_checkpoints(openai_server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run that keeps only each item's final checkpoint (older ones pruned) still shows the whole item."""
    server = serve(openai_server)
    out = tmp_path / "run"
    assert main(eval_args(server, out, *FAIREVAL, "--limit", "1")) == 0
    with sqlite3.connect(out / "checkpoints.sqlite") as db:
        db.execute("DELETE FROM checkpoints WHERE rowid NOT IN (SELECT MAX(rowid) FROM checkpoints)")
    capsys.readouterr()
    assert main(["show", str(out), "0", "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert [t["speaker"] for t in view["transcript"]] == ["General Public", "Critic"] * 2
    assert view["verdict"]["label"] == "1" and view["human"]["label"] in {"1", "2", "tie"}


# --- smaller findings: aspects, label spellings, bad labels, single-group intervals, encodings ---


def test_an_aspect_on_a_pairwise_dataset_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["eval", *FAIREVAL, "--aspect", "coherence", "--model", "local",
                 "--out", str(tmp_path / "run")]) == 2
    assert "--aspect coherence applies to score datasets" in one_line_error(capsys)


def test_pairwise_label_spellings_and_value_mapping(openai_server, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    server = serve(openai_server)
    data = tmp_path / "arena.jsonl"
    rows = [("a", "Tie"), ("b", "A"), ("c", "model_b"), ("d", "gpt-4"), ("e", "nobody")]
    data.write_text("".join(json.dumps({"qid": q, "question": "Q", "response_1": "x", "response_2": "y",
                                        "winner": w}) + "\n" for q, w in rows))
    out = tmp_path / "run"
    assert main(eval_args(server, out, "--protocol", "single", "--dataset", str(data), "--task", "pairwise",
                          "--map", "id=qid", "--map", "human.label=winner", "--map", "human.label[gpt-4]=2")) == 0
    assert {r["id"]: r["human"]["label"] for r in read_results(out)} == {"a": "tie", "b": "1", "c": "2", "d": "2"}
    assert "arena.jsonl, row 5" in capsys.readouterr().err  # 'nobody' is no spelling of a preference


def test_a_score_label_that_is_not_a_number_is_refused_at_load(openai_server, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    server = serve(openai_server)
    data = tmp_path / "scores.csv"
    data.write_text("id,response,scale_low,scale_high,rating\n1,text,1,5,3\n2,text,1,5,abc\n")
    out = tmp_path / "run"
    assert main(eval_args(server, out, "--protocol", "single", "--dataset", str(data), "--task", "score",
                          "--map", "human.coherence=rating")) == 0
    err = capsys.readouterr().err
    assert "scores.csv, row 3 (id 2), field 'human.coherence': 'abc' is not a number" in err
    assert [r["id"] for r in read_results(out)] == ["1"]


def test_metaeval_gives_no_interval_for_a_single_group(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    records = [{"id": str(i), "status": "ok", "task": "score", "aspect": "coherence", "group": "doc-1",
                "human": {"coherence": h}, "verdict": {"score": p}} for i, (p, h) in enumerate([(1, 1), (2, 3),
                                                                                           (3, 2), (4, 5)])]
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["metaeval", str(run), "--level", "pooled"]) == 0
    captured = capsys.readouterr()
    assert "1 group only, so no confidence interval" in captured.err
    (row,) = [line for line in captured.out.splitlines() if line.startswith("run") and "coherence" in line]
    assert row.split()[-3:] == ["0.832", "0.800", "0.667"]  # the values, without a [x, x] interval


def test_a_dataset_that_is_not_utf8_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "latin1.jsonl"
    data.write_bytes('{"question": "caf\u00e9"}\n'.encode("latin-1"))
    assert main(["eval", "--dataset", str(data), "--task", "pairwise", "--model", "local",
                 "--out", str(tmp_path / "run")]) == 2
    assert f"{data}: not UTF-8 text" in one_line_error(capsys)


def test_show_groups_a_calibrated_items_turns_by_answer_order(openai_server, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """ChatEval's default on pairwise data judges both orders: each order's debate once, under its run's name."""
    server = serve(openai_server)
    out = tmp_path / "run"
    assert main(eval_args(server, out, "--dataset", "faireval", "--limit", "1")) == 0
    capsys.readouterr()
    assert main(["show", str(out), "0", "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert [(t["run"], t["speaker"]) for t in view["transcript"]] == (
        [("original_order", "General Public"), ("original_order", "Critic")] * 2
        + [("swapped_order", "General Public"), ("swapped_order", "Critic")] * 2)
    assert "transcript" not in view["state"]["runs"]["swapped_order"]
    assert main(["show", str(out), "0"]) == 0
    text = capsys.readouterr().out
    assert text.index("-- original_order --") < text.index("[1] General Public") < text.index("-- swapped_order --")
