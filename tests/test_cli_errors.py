"""Every way a new user's command line can go wrong ends with one clear line, a non-zero exit and no traceback,
within seconds (never minutes of retries on a 401/404); and the rough edges of issue 15 stay fixed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jurygraph.cli import main
from jurygraph.running.rundir import read_results
from jurygraph.testing.fake_server import FakeOpenAIServer, Faults


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, float]:
    started = time.monotonic()
    code = main(argv)
    return code, capsys.readouterr().err, time.monotonic() - started


def assert_one_line(err: str, *expected: str) -> None:
    assert "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("jurygraph: "), err
    for text in expected:
        assert text in err, err


EVAL = ["eval", "--dataset", "faireval", "--limit", "2", "--quiet"]


@pytest.mark.parametrize(("argv", "expected"), [
    # an option of another protocol: ignoring it would run something else than the user asked for
    (["--protocol", "debate", "--turns", "3", "--model", "openai:x"],
     ["--turns is not an option of --protocol debate (it is read by chateval)"]),
    (["--protocol", "chateval", "--samples", "5", "--model", "openai:x"],
     ["--samples is not an option of --protocol chateval (it is read by refer, geval, analyze-rate)"]),
    (["--model", "openai:x", "--map", "question"], ["--map must be KEY=VALUE, got 'question'"]),
    # a protocol that rates single texts, on pairwise data: every item would fail
    (["--protocol", "geval", "--model", "openai:x"],
     ["--protocol geval rates single texts and cannot judge the pairwise items of faireval"]),
    (["--protocol", "analyze-rate", "--model", "openai:x"], ["--protocol analyze-rate", "pairwise"]),
    (["--model", "judge", "--base-url", "http://127.0.0.1:9/v1"],
     ["openai at http://127.0.0.1:9/v1: cannot connect", "is the server running?"]),
    (["--model", "openai:gpt-4o-mini"], ["OPENAI_API_KEY is not set"]),
])
def test_usage_errors_are_one_line_and_exit_2(argv: list[str], expected: list[str], tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, err, seconds = run_cli([*EVAL, "--out", str(tmp_path / "run"), *argv], capsys)
    assert code == 2
    assert seconds < 10
    assert_one_line(err, *expected)
    assert not (tmp_path / "run" / "results.jsonl").exists()  # nothing ran


def test_unreadable_and_missing_files_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "data.jsonl"
    folder.mkdir()  # a directory where a file belongs: not readable as one
    for dataset, expected in ((str(folder), str(folder)), (str(tmp_path / "nope.jsonl"), "no such file")):
        code, err, _ = run_cli(["eval", "--dataset", dataset, "--task", "pairwise", "--model", "openai:x",
                                "--out", str(tmp_path / "run"), "--quiet"], capsys)
        assert code == 2
        assert_one_line(err, expected)


@pytest.mark.parametrize(("fault", "says"), [("401", "401 Unauthorized (check the API key)"),
                                             ("404", "404 Not Found (unknown model or wrong URL)")])
def test_a_refusing_server_stops_the_run_at_once(openai_server: Callable[..., FakeOpenAIServer], fault: str,
                                                 says: str, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    server = openai_server(faults=Faults(always=fault))
    code, err, seconds = run_cli([*EVAL, "--limit", "5", "--concurrency", "1", "--model", "judge", "--base-url",
                                  server.base_url, "--no-calibrate", "--out", str(tmp_path / "run")], capsys)
    assert code == 1
    assert seconds < 10
    assert len(server.requests) == 1  # not retried, and no other item sent
    assert_one_line(err, f"openai at {server.base_url}: {says}", "resume with --resume")


def test_refer_needs_no_model_when_peers_and_area_chair_name_every_agent(
        openai_server: Callable[..., FakeOpenAIServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def responder(request: dict[str, Any], i: int) -> str:
        return f"Analysis: {request['model']}.\nRating: 2"

    server = openai_server(responder)
    out = tmp_path / "run"
    code, err, _ = run_cli(["eval", "--protocol", "refer", "--variant", "lite", "--peers", "openai:a,openai:b,openai:c",
                            "--area-chair", "openai:d", "--base-url", server.base_url, "--dataset", "topical-chat",
                            "--aspect", "coherence", "--limit", "1", "--out", str(out), "--quiet"], capsys)
    assert code == 0, err
    assert sorted(r["model"] for r in server.requests) == ["a", "b", "c", "d"]
    assert read_results(out)[0]["verdict"]["score"] == 2
    models = json.loads((out / "manifest.json").read_text())["models"]
    assert models["area_chair"] == f"openai:d@{server.base_url}"


def test_base_url_without_model_still_needs_one_when_an_agent_has_none(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    code, err, _ = run_cli(["eval", "--protocol", "refer", "--peers", "openai:a,openai:b", "--base-url",
                            "http://127.0.0.1:9/v1", "--dataset", "topical-chat", "--aspect", "coherence",
                            "--out", str(tmp_path / "run"), "--quiet"], capsys)
    assert code == 2
    assert_one_line(err, "--base-url needs --model NAME")


def test_repeated_item_ids_are_named_before_anything_runs(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "pairs.jsonl"
    rows = [{"id": i, "question": "Q", "response_1": "a", "response_2": "b"} for i in ("x", "y", "x", "z", "y")]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    code, err, _ = run_cli(["eval", "--dataset", str(data), "--task", "pairwise", "--model", "judge", "--base-url",
                            "http://127.0.0.1:9/v1", "--out", str(tmp_path / "run"), "--quiet"], capsys)
    assert code == 2
    assert_one_line(err, "item ids must be unique within a run; repeated: x, y")
    assert not (tmp_path / "run").exists()


def test_a_score_table_without_a_scale_says_what_to_add_and_scale_gives_it(
        openai_server: Callable[..., FakeOpenAIServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 28: 'a score item needs 'scale'' named no column; now every skipped row says how to give its scale, and
    --scale gives all of them one (saved with the run, so a resume keeps it)."""
    data = tmp_path / "ratings.csv"
    data.write_text("id,summary,rating\ns1,A fine summary.,4\ns2,A poor one.,2\n")
    server = openai_server(lambda request, i: "Coherence: 4")
    out = tmp_path / "run"
    argv = ["eval", "--protocol", "single", "--dataset", str(data), "--task", "score", "--aspect", "coherence",
            "--map", "response=summary", "--map", "human.coherence=rating", "--model", "judge", "--base-url",
            server.base_url, "--out", str(out), "--quiet"]
    code, err, _ = run_cli(argv, capsys)
    assert code == 2 and "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 3 and lines[-1] == f"jurygraph: {data}: no judgeable rows (2 skipped, reasons above)"
    for line, item in zip(lines, ("s1", "s2"), strict=False):
        assert line.startswith(f"jurygraph: skipped {data}, row ") and f"item {item!r}: a score item needs 'scale': " \
            "add columns scale_low and scale_high, map yours with --map scale_low=COLUMN --map scale_high=COLUMN, " \
            "or give every row one with --scale LOW-HIGH (e.g. --scale 1-5)" in line, line
    assert server.requests == []
    assert main([*argv, "--scale", "1-5"]) == 0
    assert sorted(r["id"] for r in read_results(out)) == ["s1", "s2"]  # written as they finish
    assert json.loads((out / "manifest.json").read_text())["cli"]["scale"] == "1-5"
    assert main(["eval", "--resume", str(out), "--quiet"]) == 0  # --scale restored from the manifest
    code, err, _ = run_cli(["eval", "--dataset", "faireval", "--scale", "1-5", "--model", "judge", "--base-url",
                            server.base_url, "--out", str(tmp_path / "other"), "--quiet"], capsys)
    assert code == 2
    assert_one_line(err, "--scale 1-5 gives the rows of a JSONL/CSV score table (--task score) their scale")


# --- output to a reader that went away (`jurygraph show RUN ID | head -3`): quiet, as Unix tools are ---


def closed_pipe_run(args: list[str]) -> subprocess.CompletedProcess[str]:
    """``jurygraph ARGS`` with stdout a pipe whose reader is gone before anything is written (what `| head` leaves
    once it has its lines), so the first write fails for sure."""
    reader, writer = os.pipe()
    os.close(reader)
    try:
        return subprocess.run([sys.executable, "-m", "jurygraph.cli", *args], stdout=writer, stderr=subprocess.PIPE,
                              text=True, timeout=300)
    finally:
        os.close(writer)


def test_a_closed_pipe_ends_a_command_quietly_with_sigpipes_status(
        openai_server: Callable[..., FakeOpenAIServer], tmp_path: Path) -> None:
    server = openai_server()
    out = tmp_path / "run"
    argv = ["eval", "--protocol", "single", "--dataset", "faireval", "--limit", "3", "--model", "judge",
            "--base-url", server.base_url, "--out", str(out), "--quiet"]
    # an eval whose reader went away still finishes and records the run: results, manifest; the summary goes nowhere
    done = closed_pipe_run(argv)
    assert (done.returncode, done.stderr) == (128 + signal.SIGPIPE, "")
    assert [r["status"] for r in read_results(out)] == ["ok"] * 3
    assert json.loads((out / "manifest.json").read_text())["counts"]["done"] == 3
    sent = len(server.requests)
    assert sent == 6 and main(["eval", "--resume", str(out), "--quiet"]) == 0 and len(server.requests) == sent
    for command in (["show", str(out), "0"], ["show", str(out), "0", "--json"], ["metaeval", str(out)],
                    [*argv[:-3], "--dry-run"]):
        ended = closed_pipe_run(command)
        assert (ended.returncode, ended.stderr) == (128 + signal.SIGPIPE, ""), command


def test_a_broken_pipe_that_is_not_stdout_is_still_an_error(monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Only a closed stdout is quiet: a pipe the command itself wrote to (a socket, a child) is one line, exit 2."""
    import jurygraph.cli.show

    def broken(args: Any) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(jurygraph.cli.show, "cmd_show", broken)
    code, err, _ = run_cli(["show", "runs/x", "0"], capsys)
    assert code == 2
    assert_one_line(err, "jurygraph: Broken pipe")


# --- the console script ends eval's process once its files are closed (issue 32: no interpreter teardown) ---


def test_eval_as_a_process_ends_with_its_code_summary_and_files_whole(
        openai_server: Callable[..., FakeOpenAIServer], tmp_path: Path) -> None:
    server = openai_server()
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "jurygraph.cli", "eval", "--protocol", "single", "--dataset", "faireval", "--limit",
            "3", "--model", "judge", "--base-url", server.base_url, "--out", str(out), "--quiet"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stderr) == (0, "")
    lines = done.stdout.splitlines()
    assert lines[0].startswith("3 done, 0 failed") and lines[-1] == f"results: {out / 'results.jsonl'}"
    verdicts = dict(part.rsplit(" ", 1) for part in lines[1].removeprefix("verdicts: ").split(", "))
    assert sum(int(n) for n in verdicts.values()) == 3  # counted as the lines were written, not read back
    assert [r["status"] for r in read_results(out)] == ["ok"] * 3
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["ended"] and manifest["counts"]["done"] == 3
    # a resume with nothing left counts the lines it keeps
    again = subprocess.run([*argv[:3], "eval", "--resume", str(out), "--quiet"], capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0 and again.stdout.splitlines()[1] == lines[1]
    # a usage error keeps its code through the console script
    wrong = subprocess.run([*argv[:3], "eval", "--dataset", "faireval", "--concurrency", "0"], capture_output=True,
                           text=True, timeout=300)
    assert wrong.returncode == 2 and wrong.stderr.startswith("jurygraph: --concurrency must be at least 1")
