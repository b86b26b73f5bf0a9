"""The books balance through every kill, resume and batch (issue 28): every paid call is recorded once, durably,
before its answer is used, so that after any ``kill -9`` and ``--resume`` the run's ``spend.json`` equals what the
server answered (give or take the calls in flight at the kill); the budget reserves each item's own cost; the
manifest's totals cover every invocation; a dataset changed under a run is refused or recorded.

Everything goes through the CLI against the local OpenAI-compatible server (its Batch API for ``--batch``); a crash
is a real ``kill -9`` of a ``jurygraph eval`` subprocess. The fake server bills what it answers
(``FakeServer.billed``): that is the figure the ledger must add up to."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from jurygraph.cli import main
from jurygraph.running.rundir import read_batch_events, read_results
from jurygraph.testing.fake_server import FakeOpenAIServer

REPLY = "Evaluation evidence: both are fine.\nThe score of Assistant 1: 8\nThe score of Assistant 2: 6"
PER_ITEM = 4  # chateval one-by-one, 2 referees x 2 turns, one answer order
PRICES = {"judge": {"input": 10.0, "output": 30.0}, "gpt-4o-mini": {"input": 10.0, "output": 30.0}}


def prices_file(tmp_path: Path) -> Path:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(PRICES))
    return path


def chateval(server: Any, out: Path, *extra: str, model: str = "judge") -> list[str]:
    return ["eval", "--protocol", "chateval", "--no-calibrate", "--model", model, "--base-url", server.base_url,
            "--gen", "*.max_tokens=40", "--out", str(out), "--quiet", *extra]


def manifest_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "manifest.json").read_text())


def spend_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "spend.json").read_text())


def cost_of(billed: list[dict[str, int]], *, batch: bool = False) -> float:
    """What the billed calls cost at PRICES (half with ``batch``)."""
    usd = sum(call["input_tokens"] * 10.0 + call["output_tokens"] * 30.0 for call in billed) / 1e6
    return usd / 2 if batch else usd


def assert_books_balance(out: Path, server: FakeOpenAIServer, *, in_flight: int = 0, batch: bool = False) -> None:
    """spend.json equals the calls the server answered, but for at most ``in_flight`` calls answered at a kill that
    never reached the run (sent again by the resume, and counted then)."""
    spend, billed = spend_of(out), server.billed
    lost = len(billed) - spend["requests"]
    assert 0 <= lost <= in_flight, (spend, len(billed))
    billed_in = sum(call["input_tokens"] for call in billed)
    billed_out = sum(call["output_tokens"] for call in billed)
    most_in = max(call["input_tokens"] for call in billed)
    most_out = max(call["output_tokens"] for call in billed)
    assert 0 <= billed_in - spend["input_tokens"] <= lost * most_in
    assert 0 <= billed_out - spend["output_tokens"] <= lost * most_out
    if lost == 0:
        assert (spend["input_tokens"], spend["output_tokens"]) == (billed_in, billed_out)
        assert spend["cost_usd"] == pytest.approx(cost_of(billed, batch=batch))


def kill_when(child: subprocess.Popen[bytes], ready: Any, timeout: float = 90) -> None:
    """``kill -9`` the child once ``ready()`` holds."""
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert child.poll() is None, "the run ended before the kill"
            assert time.monotonic() < deadline, "the kill point was never reached"
            time.sleep(0.005)
    finally:
        child.kill()
        child.wait(timeout=30)


def cli(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "jurygraph.cli", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


# --- finding 1: a --batch run killed while a round waits ---------------------------------------------------


def batch_responder(request: dict[str, Any], index: int) -> str:
    return REPLY


@pytest.mark.xfail(strict=True, reason="issue 28, fixed on this branch")
def test_a_batch_run_killed_while_a_round_waits_keeps_every_collected_answer(openai_server, tmp_path: Path) -> None:
    server = openai_server(batch_responder)
    server.batches.hold = lambda index: index == 2  # rounds 1 and 2 come back; round 3 waits
    out = tmp_path / "run"
    child = cli(*chateval(server, out, "--dataset", "faireval", "--limit", "20", "--batch", "--batch-poll", "0.05",
                          "--prices", str(prices_file(tmp_path)), model="gpt-4o-mini"))
    kill_when(child, lambda: len(server.batches.created) == 3 and server.batches.polls >= 12)
    assert len(server.batches.answered) == 40
    # what the two collected rounds answered was paid, and is on record as paid
    assert spend_of(out)["requests"] == 40 and spend_of(out)["batch_requests"] == 40
    server.batches.hold = lambda index: False
    assert main(["eval", "--resume", str(out)]) == 0
    assert len(server.batches.created) == 4 and len(read_results(out)) == 20
    assert [e["event"] for e in read_batch_events(out)].count("collected") == 4
    assert len(server.billed) == 80
    assert_books_balance(out, server, batch=True)
    assert manifest_of(out)["spend"] == spend_of(out)


# --- the same invariant online: kill -9 mid-run, resume ------------------------------------------------------


@pytest.mark.xfail(strict=True, reason="issue 28, fixed on this branch")
def test_an_online_run_killed_mid_call_balances_after_its_resume(openai_server, tmp_path: Path) -> None:
    server = openai_server(lambda request, i: REPLY, latency=0.02)
    out = tmp_path / "run"
    prices = prices_file(tmp_path)
    child = cli(*chateval(server, out, "--dataset", "faireval", "--limit", "40", "--concurrency", "4",
                          "--prices", str(prices)))
    kill_when(child, lambda: len(server.billed) >= 70)
    # at the kill the ledger lags what the server answered by the calls in flight at most (one per item)
    assert len(server.billed) - spend_of(out)["requests"] <= 4
    assert main(["eval", "--resume", str(out)]) == 0
    assert len(read_results(out)) == 40
    assert_books_balance(out, server, in_flight=4)


# --- finding 3: a large item is held back rather than started ---------------------------------------------


@pytest.mark.xfail(strict=True, reason="issue 28, fixed on this branch")
def test_an_item_too_large_for_the_budget_is_held_back_not_started(openai_server, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    server = openai_server(lambda request, i: REPLY)
    data = tmp_path / "items.jsonl"
    rows = [{"id": f"q{i}", "question": f"Question {i}?", "response_1": f"Answer one to {i}.",
             "response_2": f"Answer two to {i}.", "human": {"label": "1"}} for i in range(8)]
    rows[4]["response_1"] = "A very long answer. " * 3000  # ~15,000 tokens a prompt, in each of 4 calls
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "run"
    capsys.readouterr()
    assert main(chateval(server, out, "--dataset", str(data), "--task", "pairwise",
                         "--max-total-tokens", "30000", "--concurrency", "1")) == 3
    err = capsys.readouterr().err
    done = {r["id"] for r in read_results(out)}
    assert "q4" not in done and len(done) >= 4  # the items after it that fit were judged
    held = manifest_of(out)["budget"]["held_back"]
    assert "q4" in held and "tokens" in held["q4"]
    assert "q4" in err and "held back" in err
    spend = spend_of(out)
    assert spend["input_tokens"] + spend["output_tokens"] <= 30000
    assert_books_balance(out, server)


# --- finding 4: totals over every invocation ------------------------------------------------------------------


@pytest.mark.xfail(strict=True, reason="issue 28, fixed on this branch")
def test_the_manifest_totals_cover_every_invocation(openai_server, tmp_path: Path) -> None:
    server = openai_server(lambda request, i: REPLY)
    out = tmp_path / "run"
    prices = prices_file(tmp_path)
    assert main(chateval(server, out, "--dataset", "faireval", "--limit", "12", "--prices", str(prices),
                         "--max-cost", "0.2", "--concurrency", "4")) == 3
    first = len(server.requests)
    assert main(["eval", "--resume", str(out), "--max-cost", "1"]) == 0
    assert len(server.requests) == PER_ITEM * 12 > first
    manifest = manifest_of(out)
    counts = manifest["counts"]
    assert counts["requests"] == counts["attempts"] == PER_ITEM * 12
    assert counts["done"] == counts["items"] == 12
    assert counts["cost_usd"] == pytest.approx(cost_of(server.billed)) == manifest["spend"]["cost_usd"]
    assert counts["input_tokens"] == sum(call["input_tokens"] for call in server.billed)
    assert sum(entry["requests"] for entry in manifest["usage_by_agent"].values()) == PER_ITEM * 12
    assert sum(entry["requests"] for entry in manifest["usage_by_model"].values()) == PER_ITEM * 12
    invocations = manifest["invocations"]
    assert [i["counts"]["requests"] for i in invocations] == [first, PER_ITEM * 12 - first]
    assert counts["seconds"] == pytest.approx(sum(i["counts"]["seconds"] for i in invocations))


# --- finding 5: the dataset changed under a run ---------------------------------------------------------------


@pytest.mark.xfail(strict=True, reason="issue 28, fixed on this branch")
def test_a_dataset_changed_under_a_run_is_refused_or_recorded(openai_server, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    server = openai_server(lambda request, i: REPLY)
    data = tmp_path / "items.jsonl"
    rows = [{"id": f"q{i}", "question": f"Question {i}?", "response_1": f"Answer one to {i}.",
             "response_2": f"Answer two to {i}.", "human": {"label": "1"}} for i in range(6)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "run"
    assert main(chateval(server, out, "--dataset", str(data), "--task", "pairwise", "--max-total-tokens", "6000",
                         "--concurrency", "1")) == 3
    original = manifest_of(out)["dataset"]["sha256"]
    first = {r["id"] for r in read_results(out)}
    assert "q0" in first and len(first) < 6
    rows[0]["response_1"] = "An edited answer."  # a finished row
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    capsys.readouterr()
    assert main(["eval", "--resume", str(out), "--max-total-tokens", "1000000"]) == 2
    err = capsys.readouterr().err
    assert str(data) in err and "changed" in err and "--dataset-changed continue" in err
    assert manifest_of(out)["dataset"]["sha256"] == original and len(read_results(out)) == len(first)

    assert main(["eval", "--resume", str(out), "--max-total-tokens", "1000000", "--dataset-changed",
                 "continue"]) == 0
    dataset = manifest_of(out)["dataset"]
    assert dataset["sha256"] == original  # the hash the run began on is never overwritten
    [change] = dataset["changes"]
    assert change["sha256"] != original and change["invocation"] == 1
    assert set(dataset["judged_on"][original]) == first
    assert set(dataset["judged_on"][change["sha256"]]) == {f"q{i}" for i in range(6)} - first


# --- finding 6: a finished --max-cost run resumes -------------------------------------------------------------


@pytest.mark.xfail(strict=True, reason="issue 28, fixed on this branch")
def test_a_finished_run_with_a_cost_budget_resumes(openai_server, tmp_path: Path) -> None:
    server = openai_server(lambda request, i: REPLY)
    out = tmp_path / "run"
    prices = prices_file(tmp_path)
    assert main(chateval(server, out, "--dataset", "faireval", "--limit", "2", "--prices", str(prices),
                         "--max-cost", "5")) == 0
    assert main(["eval", "--resume", str(out)]) == 0
    assert main(["eval", "--resume", str(out), "--prices", str(prices)]) == 0
    assert len(server.requests) == PER_ITEM * 2
