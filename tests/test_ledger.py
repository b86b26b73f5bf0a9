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
from jurygraph.running.ledger import Ledger
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


def assert_books_balance(out: Path, server: FakeOpenAIServer, *, in_flight: int = 0, batch: bool = False,
                         priced: bool = True) -> None:
    """spend.json equals the calls the server answered, but for at most ``in_flight`` calls answered at a kill that
    never reached the run (sent again by the resume, and counted then); its cost is theirs at PRICES (``priced``),
    else unknown (None, not 0)."""
    spend, billed = spend_of(out), server.billed
    lost = len(billed) - spend["requests"]
    assert 0 <= lost <= in_flight, (spend, len(billed))
    billed_in = sum(call["input_tokens"] for call in billed)
    billed_out = sum(call["output_tokens"] for call in billed)
    most_in = max(call["input_tokens"] for call in billed)
    most_out = max(call["output_tokens"] for call in billed)
    assert 0 <= billed_in - spend["input_tokens"] <= lost * most_in
    assert 0 <= billed_out - spend["output_tokens"] <= lost * most_out
    if not priced:
        assert spend["cost_usd"] is None
    if lost == 0:
        assert (spend["input_tokens"], spend["output_tokens"]) == (billed_in, billed_out)
        if priced:
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


def test_an_online_run_killed_mid_call_balances_after_its_resume(openai_server, tmp_path: Path) -> None:
    server = openai_server(lambda request, i: REPLY, latency=0.02)
    out = tmp_path / "run"
    prices = prices_file(tmp_path)
    child = cli(*chateval(server, out, "--dataset", "faireval", "--limit", "40", "--concurrency", "4",
                          "--prices", str(prices)))
    kill_when(child, lambda: len(server.billed) >= 70)
    # at the kill the ledger lags what the server answered by the calls in flight at most (one per item)
    ledger = Ledger(out / "ledger.sqlite")
    assert len(server.billed) - ledger.totals().requests <= 4
    ledger.close()
    assert main(["eval", "--resume", str(out)]) == 0
    assert len(read_results(out)) == 40
    assert_books_balance(out, server, in_flight=4)


# --- finding 3: a large item is held back rather than started ---------------------------------------------


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
    assert_books_balance(out, server, priced=False)


# --- finding 4: totals over every invocation ------------------------------------------------------------------


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


def test_show_metaeval_and_report_read_the_run_s_totals(openai_server, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    server = openai_server(lambda request, i: REPLY, latency=0.02)
    out = tmp_path / "run"
    prices = prices_file(tmp_path)
    child = cli(*chateval(server, out, "--dataset", "faireval", "--limit", "10", "--concurrency", "2",
                          "--prices", str(prices)))
    kill_when(child, lambda: len(server.billed) >= 14)  # killed: its invocation writes no end
    assert main(["eval", "--resume", str(out)]) == 0
    manifest = manifest_of(out)
    killed = manifest["invocations"][0]
    assert killed["ended"] is None and killed["counts"] is None
    assert killed["spend"]["requests"] >= 14 - 2  # what it paid, from the ledger (but its calls in flight)
    total = manifest["counts"]["requests"]
    assert total == killed["spend"]["requests"] + manifest["invocations"][1]["spend"]["requests"] == \
        spend_of(out)["requests"]
    capsys.readouterr()
    assert main(["show", str(out)]) == 0
    text = capsys.readouterr().out
    assert "10 of 10 items done" in text and f"over 2 invocation(s): {total:,} requests" in text
    assert "killed before its end" in text
    assert main(["show", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"]["requests"] == total
    assert main(["metaeval", str(out), "--json", "--resamples", "0"]) == 0
    [entry] = json.loads(capsys.readouterr().out)["runs"]
    assert entry["totals"]["requests"] == total and entry["totals"]["invocations"] == 2
    assert main(["metaeval", str(out), "--resamples", "0"]) == 0
    assert "What each run judged and paid" in capsys.readouterr().out
    page = tmp_path / "report.html"
    assert main(["report", str(out), "--out", str(page), "--resamples", "0", "--no-conversations"]) == 0
    html = page.read_text()
    assert "Spend per invocation" in html and "killed (no end recorded)" in html
    assert f"<td>run</td><td></td><td>10</td><td>{total:,}</td>" in html


# --- finding 5: the dataset changed under a run ---------------------------------------------------------------


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


def test_a_finished_run_with_a_cost_budget_resumes(openai_server, tmp_path: Path) -> None:
    server = openai_server(lambda request, i: REPLY)
    out = tmp_path / "run"
    prices = prices_file(tmp_path)
    assert main(chateval(server, out, "--dataset", "faireval", "--limit", "2", "--prices", str(prices),
                         "--max-cost", "5")) == 0
    assert main(["eval", "--resume", str(out)]) == 0
    assert main(["eval", "--resume", str(out), "--prices", str(prices)]) == 0
    assert len(server.requests) == PER_ITEM * 2


# --- the expected figure beside the bound: a pilot, or the run's own replies -------------------------------------


def test_a_pilot_gives_the_expected_figure_beside_the_bound(openai_server, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    server = openai_server(lambda request, i: REPLY)  # ~26 tokens a reply, where the bound assumes 512
    out = tmp_path / "run"
    args = ["eval", "--protocol", "chateval", "--no-calibrate", "--model", "judge", "--base-url", server.base_url,
            "--dataset", "faireval", "--limit", "6", "--out", str(out), "--quiet"]
    capsys.readouterr()
    assert main([*args, "--dry-run", "--pilot", "2", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(server.requests) == PER_ITEM * 2 and len(read_results(out)) == 2  # the pilot, paid and kept
    expected = report["expected"]
    assert report["items"] == 4 and report["items_already_done"] == 2  # what is left
    assert expected["requests"] == report["requests"] == PER_ITEM * 4  # the same calls, shorter replies
    assert expected["from"]["source"] == "pilot" and expected["from"]["items"] == 2
    assert expected["from"]["replies"] == PER_ITEM * 2
    assert set(expected["from"]["reply_tokens"]) == {"General Public", "Critic"}
    assert expected["output_tokens"] < report["output_tokens"] / 10  # 26 tokens a reply against 512
    assert expected["input_tokens"] < report["input_tokens"]  # the next turn hears a shorter reply
    assert "pilot" in expected["label"]

    # the rest, run: its server-side figures are near the expected ones, far from the bound
    assert main(["eval", "--resume", str(out)]) == 0
    rest = [call for call in server.billed[PER_ITEM * 2:]]
    used_out = sum(call["output_tokens"] for call in rest)
    assert used_out == pytest.approx(expected["output_tokens"], rel=0.2)
    used_in = sum(call["input_tokens"] for call in rest)
    assert abs(used_in - expected["input_tokens"]) < abs(used_in - report["input_tokens"])

    # on --resume the run's own replies say it, labelled so; the text form says which figure is which
    capsys.readouterr()
    assert main(["eval", "--resume", str(out), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "expected:" in text and "the run's own 6 finished items" in text and "the table is the bound" in text


def test_a_pilot_before_a_run_says_the_expected_figure_and_runs_the_rest(openai_server, tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    server = openai_server(lambda request, i: REPLY)
    out = tmp_path / "run"
    capsys.readouterr()
    assert main(["eval", "--protocol", "chateval", "--no-calibrate", "--model", "judge", "--base-url",
                 server.base_url, "--dataset", "faireval", "--limit", "5", "--out", str(out), "--pilot", "2"]) == 0
    err = capsys.readouterr().err
    assert "expected:" in err and "reply lengths from the pilot's 2 items (8 replies)" in err
    assert len(read_results(out)) == 5 and len(server.requests) == PER_ITEM * 5
    invocations = manifest_of(out)["invocations"]
    assert [i["counts"]["done"] for i in invocations] == [2, 3]
    assert_books_balance(out, server, priced=False)


# --- the smaller points of finding 7 that are about money ------------------------------------------------------


def test_an_unpriced_budget_says_tokens_and_counts_every_item(openai_server, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    server = openai_server(lambda request, i: REPLY)
    out = tmp_path / "run"
    capsys.readouterr()
    # no item fits a budget of 1 token: each is held back, and the line says why
    assert main(chateval(server, out, "--dataset", "faireval", "--limit", "20", "--max-total-tokens", "1",
                         "--concurrency", "1")) == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "$" not in err  # an unpriced model's cost is not $0.0000: it is unknown
    assert "(0 items done, 0 HTTP requests sent)" in err and "and 17 more" in err
    manifest = manifest_of(out)
    assert len(manifest["budget"]["held_back"]) == 20 and server.requests == []
    reserve = manifest["budget"]["reserve_per_item"]
    assert reserve["cost_usd"] is None and reserve["input_tokens"] + reserve["output_tokens"] > 0
    # room for one item's reserve and a half: the run stops early, its counts still say 20 items
    room = (reserve["input_tokens"] + reserve["output_tokens"]) * 3 // 2
    assert main(["eval", "--resume", str(out), "--max-total-tokens", str(room)]) == 3
    err = capsys.readouterr().err
    done = len(read_results(out))
    assert 0 < done < 5 and f"({done} items done, {PER_ITEM * done} HTTP requests sent)" in err and "$" not in err
    manifest = manifest_of(out)
    assert manifest["counts"]["items"] == 20 and manifest["counts"]["done"] == done  # the run's items
    assert manifest["invocations"][-1]["counts"]["items"] == done + 1  # what this invocation looked at
    assert list(manifest["budget"]["held_back"]) == [str(done)]  # the next item, which did not fit what was left
    assert manifest["spend"]["cost_usd"] is None and spend_of(out)["cost_usd"] is None  # unknown, not 0.0
    assert manifest["counts"]["cost_usd"] is None

    # one item done is "1 item"
    data = tmp_path / "items.jsonl"
    rows = [{"id": f"q{i}", "question": f"Question {i}?", "response_1": "One.", "response_2": "Two.",
             "human": {"label": "1"}} for i in range(2)]
    rows[1]["response_1"] = "A very long answer. " * 3000
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert main(chateval(server, tmp_path / "two", "--dataset", str(data), "--task", "pairwise",
                         "--max-total-tokens", "20000")) == 3
    assert "(1 item done, 4 HTTP requests sent)" in capsys.readouterr().err


FULL_DISK = """
import resource, sys
from pathlib import Path
from jurygraph.running.rundir import RunManifest, SpendFigures, replace_result, write_manifest, write_spend
out = Path(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (40, 40))  # every file written is cut at 40 bytes: a full disk
for write in (lambda: write_spend(out, SpendFigures(requests=123456789, input_tokens=987654321)),
              lambda: write_manifest(out, RunManifest(protocol="chateval")),
              lambda: replace_result(out, {"id": "q1", "status": "ok", "verdict": {"label": "1"}})):
    try:
        write()
    except OSError as err:
        print(err.errno)
"""


def test_a_full_disk_leaves_no_half_written_json_file(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", FULL_DISK, str(tmp_path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.split()) == 3  # every write failed
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # neither the file nor an empty temporary


def test_attempts_are_the_http_requests_the_server_saw_over_every_invocation(openai_server, tmp_path: Path) -> None:
    """Timeouts, 429s, 500s and unreadable bodies are retried: each retry is an attempt, on record with the call
    it was for (a call that failed after its retries too); over a budget stop and a resume, the manifest's attempts
    are the requests the server received, and its requests the answers it billed."""
    from jurygraph.testing.fake_server import Faults

    faults = Faults(rate_429=0.08, rate_500=0.08, rate_hang=0.04, rate_garbage=0.04, retry_after=0.01,
                    hang_seconds=0.6, seed=7)
    server = openai_server(lambda request, i: REPLY, faults=faults)
    out = tmp_path / "run"
    common = ("--timeout", "0.3", "--max-retries", "1")
    first = main(chateval(server, out, "--dataset", "faireval", "--limit", "16", "--concurrency", "4",
                          "--max-total-tokens", "30000", *common))
    assert first in (1, 3)  # stopped at the budget (and some items may have failed after their retries)
    resumed = main(["eval", "--resume", str(out), "--max-total-tokens", "10000000", *common])
    assert resumed in (0, 1)
    counts = manifest_of(out)["counts"]
    assert len(server.requests) > len(server.billed)  # there were retries
    assert counts["attempts"] == len(server.requests)
    assert counts["requests"] == len(server.billed) == spend_of(out)["requests"]
    assert sum(i["counts"]["attempts"] for i in manifest_of(out)["invocations"]) == counts["attempts"]


def test_a_batch_collected_twice_is_paid_once(openai_server, tmp_path: Path) -> None:
    """Reconciled with batches.jsonl: a process killed after recording a batch's answers but before marking it
    collected collects it again at the resume; its lines are not recorded twice."""
    server = openai_server(batch_responder)
    out = tmp_path / "run"
    assert main(chateval(server, out, "--dataset", "faireval", "--limit", "3", "--batch", "--batch-poll", "0.01",
                         "--prices", str(prices_file(tmp_path)), model="gpt-4o-mini")) == 0
    assert_books_balance(out, server, batch=True)
    before = spend_of(out)
    ledger = out / "batches.jsonl"
    events = ledger.read_text().splitlines()
    assert [json.loads(e)["event"] for e in events[-2:]] == ["collected", "settled"]
    ledger.write_text("".join(line + "\n" for line in events[:-2]))  # as if killed before "collected"
    assert main(["eval", "--resume", str(out)]) == 0
    assert [e["event"] for e in read_batch_events(out)][-2:] == ["collected", "settled"]  # collected again
    assert spend_of(out) == before and len(server.billed) == 3 * PER_ITEM


def _grouped(db: Any, by: str, where: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """The ledger's sums as SQL groups them (the manifest's views were these queries before the meter kept them)."""
    sql = (f"SELECT {by}, SUM(requests), SUM(input_tokens), SUM(output_tokens), SUM(attempts) FROM payments"
           + (f" WHERE {where}" if where else "") + f" GROUP BY {by} ORDER BY MIN(seq)")
    return db.execute(sql, params).fetchall()


def test_the_manifest_s_usage_is_the_ledger_s_sums_over_every_invocation(openai_server, tmp_path: Path) -> None:
    """The end of a run reads no ledger row again (issue 32): the usage the manifest reports, per agent and model, of
    each invocation and of all, is what the ledger's rows sum to, in the order each was first paid."""
    import sqlite3

    server = openai_server(lambda request, i: REPLY)
    out = tmp_path / "run"
    prices = prices_file(tmp_path)
    assert main(chateval(server, out, "--dataset", "faireval", "--limit", "12", "--prices", str(prices),
                         "--max-cost", "0.2", "--concurrency", "4")) == 3
    assert main(["eval", "--resume", str(out), "--max-cost", "1"]) == 0
    manifest = manifest_of(out)
    db = sqlite3.connect(out / "ledger.sqlite")
    for invocation, part in [(None, manifest), *enumerate(manifest["invocations"])]:
        where, params = ("invocation = ?", (invocation,)) if invocation is not None else ("", ())
        paid = " AND ".join(filter(None, ["requests > 0", where]))
        by_agent = _grouped(db, "agent, role, model", paid, params)
        assert list(part["usage_by_agent"]) == list(dict.fromkeys(str(agent) for agent, *_ in by_agent))
        assert {agent: (e["requests"], e["input_tokens"], e["output_tokens"], e["model"])
                for agent, e in part["usage_by_agent"].items()} == {
            str(agent): (n, i, o, model) for agent, _, model, n, i, o, _ in by_agent}
        assert [(model, e["requests"], e["input_tokens"], e["output_tokens"]) for model, e in
                part["usage_by_model"].items()] == [row[:4] for row in _grouped(db, "model", paid, params)]
        assert part["attempts_by_model"] == {model: a for model, *_, a in _grouped(db, "model", where, params) if a}
    assert manifest["counts"]["requests"] == db.execute("SELECT SUM(requests) FROM payments").fetchone()[0]
    db.close()


def test_spend_json_follows_a_burst_of_calls_within_its_interval_in_few_writes(tmp_path: Path, monkeypatch) -> None:
    """A run paying hundreds of calls a second rewrites spend.json at most every SPEND_INTERVAL, with the latest
    figures: a reader sees them without a flush, and flush writes what is pending at once."""
    from jurygraph.running import rundir
    from jurygraph.running.rundir import SpendFigures

    writes: list[int] = []
    real = rundir.write_spend

    def counted(out: Path, spend: SpendFigures) -> None:
        writes.append(spend.requests)
        real(out, spend)

    monkeypatch.setattr(rundir, "write_spend", counted)
    spend = rundir.SpendFile(tmp_path)
    started = time.monotonic()
    for n in range(1, 41):  # 40 paid calls, ten an interval: each would be written without the interval
        spend.update(SpendFigures(requests=n))
        time.sleep(rundir.SPEND_INTERVAL / 10)
    burst = time.monotonic() - started
    deadline = time.monotonic() + 10
    path = tmp_path / "spend.json"
    while not path.exists() or json.loads(path.read_text())["requests"] != 40:  # followed without a flush
        assert time.monotonic() < deadline, writes
        time.sleep(rundir.SPEND_INTERVAL / 4)
    # one write per interval at most (the first at once), not one per call
    assert len(writes) <= 2 + burst / rundir.SPEND_INTERVAL < 40
    spend.update(SpendFigures(requests=41))
    spend.flush()  # due or not, written before flush returns
    assert json.loads(path.read_text())["requests"] == 41
    spend.close()
