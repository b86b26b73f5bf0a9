"""--batch: a run as rounds of OpenAI batches, through the real `openai` client against the local fake of the Files
and Batches endpoints (jurygraph.testing.fake_batches): the online run's verdicts, one batch per protocol round,
a kill -9 while polling resumed without submitting a batch twice, failed and expired requests retried, usage and
cost at batch prices."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from jurygraph.cli import main
from jurygraph.running.rundir import read_batch_events, read_results
from jurygraph.testing.fake_server import prompt_of


def responder(request: dict[str, Any], index: int) -> str:
    """Scores that depend on the whole request, so that a call with other messages gets other scores."""
    digest = hashlib.sha256(json.dumps(request["messages"], sort_keys=True).encode()).digest()
    if "Assistant 1" in prompt_of(request):
        return (f"Evaluation evidence: compared.\nThe score of Assistant 1: {1 + digest[0] % 10}\n"
                f"The score of Assistant 2: {1 + digest[1] % 10}")
    return f"Evaluation evidence: read.\nScore: {1 + digest[0] % 5}"


def eval_args(server: Any, out: Path, *extra: str) -> list[str]:
    return ["eval", "--protocol", "chateval", "--dataset", "faireval", "--model", "gpt-4o-mini", "--base-url",
            server.base_url, "--out", str(out), "--quiet", *extra]


def verdicts(out: Path) -> dict[str, Any]:
    return {r["id"]: (r["verdict"], r["judgments"]) for r in read_results(out)}


def bodies(lines: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(line, sort_keys=True) for line in lines)


def manifest_of(out: Path) -> dict[str, Any]:
    return json.loads((out / "manifest.json").read_text())


def test_a_batch_run_gives_the_online_verdicts(openai_server, tmp_path: Path) -> None:
    online, batched = openai_server(responder), openai_server(responder)
    assert main(eval_args(online, tmp_path / "online", "--limit", "3")) == 0
    assert main(eval_args(batched, tmp_path / "batch", "--limit", "3", "--batch", "--batch-poll", "0.01")) == 0

    assert verdicts(tmp_path / "batch") == verdicts(tmp_path / "online")
    assert batched.requests == []  # nothing went to the ordinary API
    # ChatEval one-by-one, 2 referees x 2 turns: 4 rounds; both answer orders (BPC) of every item in each
    created = batched.batches.created
    assert len(created) == 4 and [len(lines) for lines in created] == [3 * 2] * 4
    # each line's body is what the online run sent for the same call
    assert bodies([line["body"] for lines in created for line in lines]) == bodies(online.requests)
    assert all(line["url"] == "/v1/chat/completions" and len(line["custom_id"]) == 64
               for lines in created for line in lines)
    manifest = manifest_of(tmp_path / "batch")
    assert [b["status"] for b in manifest["batches"]] == ["completed"] * 4
    usage = manifest["usage_by_model"][f"openai:gpt-4o-mini@{batched.base_url}"]
    assert usage["requests"] == usage["batch_requests"] == 24
    assert usage["input_tokens"] == usage["batch_input_tokens"] > 0
    online_usage = manifest_of(tmp_path / "online")["usage_by_model"][f"openai:gpt-4o-mini@{online.base_url}"]
    assert (usage["input_tokens"], usage["output_tokens"]) == (online_usage["input_tokens"],
                                                               online_usage["output_tokens"])
    # a settled batch's file is removed; the ledger keeps every event
    assert not any((tmp_path / "batch" / "batches").iterdir())
    events = [e["event"] for e in read_batch_events(tmp_path / "batch")]
    assert events == ["uploaded", "submitted", "collected", "settled"] * 4


def test_the_batches_are_the_protocol_rounds_for_any_number_of_items(openai_server, tmp_path: Path) -> None:
    for items in (1, 7):
        server = openai_server(responder)
        assert main(eval_args(server, tmp_path / f"run{items}", "--limit", str(items), "--no-calibrate",
                              "--batch", "--batch-poll", "0.01")) == 0
        assert [len(lines) for lines in server.batches.created] == [items] * 4
        assert len(read_results(tmp_path / f"run{items}")) == items


def test_a_superstep_s_parallel_calls_share_one_batch(openai_server, tmp_path: Path) -> None:
    server = openai_server(responder)
    assert main(eval_args(server, tmp_path / "run", "--limit", "2", "--no-calibrate", "--strategy", "simultaneous",
                          "--agents", "3", "--batch", "--batch-poll", "0.01")) == 0
    # simultaneous talk: the 3 referees of a turn speak in one superstep, 2 turns: 2 batches of 3 calls an item
    assert [len(lines) for lines in server.batches.created] == [2 * 3] * 2


def test_usage_and_cost_at_batch_prices(openai_server, tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"gpt-4o-mini": {"input": 1.0, "output": 2.0}}))
    online, batched = openai_server(responder), openai_server(responder)
    common = ("--limit", "2", "--no-calibrate", "--prices", str(prices))
    assert main(eval_args(online, tmp_path / "online", *common)) == 0
    assert main(eval_args(batched, tmp_path / "batch", *common, "--batch", "--batch-poll", "0.01")) == 0
    full, half = manifest_of(tmp_path / "online"), manifest_of(tmp_path / "batch")
    assert half["counts"]["cost_usd"] == pytest.approx(full["counts"]["cost_usd"] / 2)
    assert half["spend"]["cost_usd"] == pytest.approx(full["spend"]["cost_usd"] / 2)
    assert half["spend"]["batch_requests"] == half["spend"]["requests"] == 8


@pytest.mark.parametrize("fallback", ["batch", "online"])
def test_expired_and_failed_requests_are_retried(fallback: str, openai_server, tmp_path: Path) -> None:
    reference = openai_server(responder)
    assert main(eval_args(reference, tmp_path / "online", "--limit", "3", "--no-calibrate")) == 0
    server = openai_server(responder)
    server.batches.outcome = lambda index: "expired" if index == 0 else "completed"  # the first batch expires
    server.batches.expire_after = 1  # after answering one of its 3 requests
    failing: set[str] = set()

    def fail_once(custom_id: str, body: dict[str, Any]) -> bool:  # one request of round 2 fails, once
        if len(server.batches.created) == 3 and not failing:
            failing.add(custom_id)
            return True
        return False

    server.batches.failing = fail_once
    out = tmp_path / "run"
    assert main(eval_args(server, out, "--limit", "3", "--no-calibrate", "--batch", "--batch-poll", "0.01",
                          "--batch-fallback", fallback)) == 0
    assert verdicts(out) == verdicts(tmp_path / "online")
    statuses = [b["status"] for b in manifest_of(out)["batches"]]
    sizes = [len(lines) for lines in server.batches.created]
    assert statuses[0] == "expired"
    if fallback == "batch":
        # the 2 expired requests go into the next round's batch beside the third item's next call, so their items
        # are a round behind from then on; the failed one puts its item a round further back (which item the
        # batches answered first depends on the order the items reached them: 5 or 6 batches)
        assert sum(sizes) == 12 + 2 + 1 and len(sizes) in (5, 6) and max(sizes) == 3
        assert server.requests == []
    else:  # they go to the ordinary API as their items replay, and every item stays in step
        assert sizes == [3, 3, 3, 3] and len(server.requests) == 2 + 1
    usage = manifest_of(out)["usage_by_model"][f"openai:gpt-4o-mini@{server.base_url}"]
    assert usage["requests"] == 12 and usage["batch_requests"] == 12 - len(server.requests)


def test_a_kill_while_polling_resumes_without_submitting_twice(openai_server, tmp_path: Path) -> None:
    reference = openai_server(responder)
    assert main(eval_args(reference, tmp_path / "online", "--limit", "4")) == 0
    server = openai_server(responder)
    server.batches.polls_per_status = 10_000  # the first batch stays `validating`
    out = tmp_path / "run"
    child = subprocess.Popen([sys.executable, "-m", "jurygraph.cli",
                              *eval_args(server, out, "--limit", "4", "--batch", "--batch-poll", "0.05")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and server.batches.polls < 3:  # submitted, and polled a few times
            time.sleep(0.01)
    finally:
        child.kill()
        child.wait(timeout=30)
    assert len(server.batches.created) == 1
    assert [e["event"] for e in read_batch_events(out)] == ["uploaded", "submitted"]  # the id was on disk at once
    server.batches.polls_per_status = 1
    assert main(["eval", "--resume", str(out), "--quiet"]) == 0
    assert len(server.batches.created) == 4  # the first batch collected, not submitted again
    calls = [line["custom_id"] for lines in server.batches.created for line in lines]
    assert len(calls) == len(set(calls)) == 4 * 4 * 2  # no call in two batches
    assert verdicts(out) == verdicts(tmp_path / "online")


def test_a_kill_between_upload_and_batch_finds_the_batch(openai_server, tmp_path: Path) -> None:
    """The ledger has the upload but not the batch id: the resume looks the batch up by its input file."""
    server = openai_server(responder)
    server.batches.polls_per_status = 10_000
    out = tmp_path / "run"
    child = subprocess.Popen([sys.executable, "-m", "jurygraph.cli",
                              *eval_args(server, out, "--limit", "2", "--batch", "--batch-poll", "0.05")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and server.batches.polls < 1:
            time.sleep(0.01)
    finally:
        child.kill()
        child.wait(timeout=30)
    ledger = out / "batches.jsonl"
    lines = ledger.read_text().splitlines()
    ledger.write_text(lines[0] + "\n")  # as if killed right after the upload
    server.batches.polls_per_status = 1
    assert main(["eval", "--resume", str(out), "--quiet"]) == 0
    assert len(server.batches.created) == 4 and len(read_results(out)) == 2


def any_protocol(request: dict[str, Any], index: int) -> str:
    """Answers for every protocol below: DEBATE's Critic objects once then says NO ISSUE; n samples differ; a
    score of 4 or 5 is off Topical-Chat's 1-3 scale, so some replies are re-asked (a second call of a node)."""
    system = str(request["messages"][0].get("content", ""))
    if "Devil’s Advocate" in system:
        reviews = sum(m["role"] == "assistant" for m in request["messages"])
        return "The score ignores the order of events." if reviews == 0 else "NO ISSUE"
    if request.get("response_format"):
        return json.dumps({"evidence": "read", "score": 1 + index % 3})
    return responder(request, index) if index == 0 else f"Evidence: sample {index}.\nScore: {1 + index % 3}"


PROTOCOLS = {
    "debate": ["--protocol", "debate", "--dataset", "summeval", "--aspect", "coherence"],
    "refer turbo (n = 20)": ["--protocol", "refer", "--dataset", "topical-chat", "--aspect", "coherence"],
    "geval (n = 20)": ["--protocol", "geval", "--dataset", "summeval", "--aspect", "fluency"],
    "faireval bpc+mec": ["--protocol", "single", "--calibrate", "bpc+mec", "--dataset", "faireval"],
    "structured output": ["--protocol", "single", "--dataset", "summeval", "--aspect", "coherence",
                          "--structured-output"],
}


@pytest.mark.parametrize("args", PROTOCOLS.values(), ids=PROTOCOLS.keys())
def test_every_protocol_batches_to_the_online_verdicts(args: list[str], openai_server, tmp_path: Path) -> None:
    online, batched = openai_server(any_protocol), openai_server(any_protocol)
    common = [*args, "--limit", "2", "--model", "gpt-4o-mini", "--quiet"]
    assert main(["eval", *common, "--base-url", online.base_url, "--out", str(tmp_path / "online")]) == 0
    assert main(["eval", *common, "--base-url", batched.base_url, "--out", str(tmp_path / "batch"),
                 "--batch", "--batch-poll", "0.01"]) == 0
    assert verdicts(tmp_path / "batch") == verdicts(tmp_path / "online")
    assert batched.requests == []
    # the same calls; identical ones (ReFeR's peers on one model) go online at once, in a batch as one line
    assert set(bodies([line["body"] for lines in batched.batches.created for line in lines])) == \
        set(bodies(online.requests))
    answered = len(batched.batches.answered)
    usage = manifest_of(tmp_path / "batch")["usage_by_model"][f"openai:gpt-4o-mini@{batched.base_url}"]
    assert usage["requests"] == usage["batch_requests"] == answered  # a line read by several calls is paid once


def test_a_gemini_agent_of_a_batch_run_is_asked_online(openai_server, gemini_server, tmp_path: Path) -> None:
    """Gemini calls are not batched (docs/COSTS.md): its agent goes online while the other waits for its batch."""
    public = openai_server(responder)
    critic = gemini_server(lambda request, i: "Evidence: critical view.\nThe score of Assistant 1: 6\n"
                                              "The score of Assistant 2: 8")
    out = tmp_path / "run"
    assert main(["eval", "--protocol", "chateval", "--no-calibrate", "--dataset", "faireval", "--limit", "2",
                 "--model", "gpt-4o-mini", "--base-url", public.base_url, "--models",
                 f"Critic=google_genai:gemini-2.0-flash@{critic.base_url}", "--out", str(out), "--quiet",
                 "--batch", "--batch-poll", "0.01"]) == 0
    assert len(critic.requests) == 2 * 2 and public.requests == []
    assert [len(lines) for lines in public.batches.created] == [2, 2]  # the General Public's two turns
    assert all(r["status"] == "ok" for r in read_results(out))


def test_a_batch_run_within_a_budget_admits_items_before_its_first_round(openai_server, tmp_path: Path) -> None:
    server = openai_server(responder)
    out = tmp_path / "run"
    assert main(eval_args(server, out, "--limit", "10", "--no-calibrate", "--batch", "--batch-poll", "0.01",
                          "--max-total-tokens", "15000", "--gen", "*.max_tokens=40")) == 3
    done = len(read_results(out))
    assert 0 < done < 10 and [len(lines) for lines in server.batches.created] == [done] * 4
    assert manifest_of(out)["spend"]["input_tokens"] + manifest_of(out)["spend"]["output_tokens"] <= 15000
    assert main(["eval", "--resume", str(out), "--max-total-tokens", "10000000", "--quiet"]) == 0
    assert len(read_results(out)) == 10 and len(server.batches.created) == 8


@pytest.mark.parametrize("extra, message", [
    (["--batch-poll", "5"], "--batch-poll goes with --batch"),
    (["--batch-fallback", "online"], "--batch-fallback goes with --batch"),
    (["--batch", "--no-cache"], "--batch needs the LLM cache"),
    (["--json"], "--json goes with --dry-run"),
    (["--max-cost", "0"], "--max-cost must be greater than 0"),
])
def test_cost_options_that_make_no_sense_are_refused(extra: list[str], message: str, capsys, tmp_path: Path) -> None:
    capsys.readouterr()
    assert main(["eval", "--dataset", "faireval", "--model", "openai:gpt-4o-mini", "--out", str(tmp_path / "r"),
                 *extra]) == 2
    assert message in capsys.readouterr().err


def test_a_rounds_lines_are_split_at_the_providers_limits_in_utf8_bytes() -> None:
    """A batch file holds at most max_requests lines and max_bytes bytes of UTF-8 (what the provider counts); a line
    longer than max_bytes goes alone rather than nowhere."""
    from jurygraph.running.batch import _json_line, _split

    lines = [_json_line({"custom_id": str(i), "body": "é" * 10}) for i in range(5)]  # 51 bytes, 41 characters each
    assert len(lines[0].encode()) == 51
    assert [len(chunk) for chunk in _split(lines, 2, 10_000)] == [2, 2, 1]
    assert [len(chunk) for chunk in _split(lines, 100, 110)] == [2, 2, 1]  # 102 bytes fit in 110, 153 do not
    assert [len(chunk) for chunk in _split(lines, 100, 84)] == [1, 1, 1, 1, 1]  # 82 characters would fit
    assert [len(chunk) for chunk in _split(lines, 100, 10)] == [1, 1, 1, 1, 1]
    assert [line for chunk in _split(lines, 2, 110) for line in chunk] == lines
