"""`jurygraph eval --dry-run`: the estimate from the real graph on the real items, checked against what the local
server then receives when the same command runs: the same requests, input tokens within 15 %.

The server's usage is its own token count (fake_server.count_tokens: GPT-4's pre-tokenizer pieces), the
estimate's the approximation (UTF-8 bytes / 4.8: tiktoken's encodings cannot be downloaded here), so the two
agree only as far as the estimate renders the prompts the run sends. The replies are scripted at about the
output budget (--gen '*.max_tokens=60'), as the estimate assumes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from jurygraph.cli import main
from jurygraph.testing.fake_server import Faults, count_tokens, prompt_of

BUDGET = 60
PROSE = ("The answer is clear and accurate, but it leaves out a step that a careful reader would want "
         "explained before trusting the conclusion it reaches in the end.")


def filler(tokens: int) -> str:
    """Prose of about ``tokens`` tokens as the server counts them."""
    words, out = PROSE.split(), []
    while count_tokens(" ".join(out)) < tokens:
        out.append(words[len(out) % len(words)])
    return " ".join(out)


def answer(request: dict[str, Any], *, no_issue: bool = False) -> str | dict[str, Any]:
    """A reply of about the budget in the answer form the request asks for (or the Critic's review; G-Eval's
    leading score with its log-probabilities)."""
    system = str(request["messages"][0].get("content", ""))
    prompt = prompt_of(request)
    if request.get("logprobs"):
        text = "2 - " + filler(BUDGET - 2)
        return {"content": text, "logprobs": [{"token": "2", "logprob": -0.1, "top_logprobs": [
            {"token": "2", "logprob": -0.1}, {"token": "3", "logprob": -2.4}]}, {"token": text[1:], "logprob": 0.0}]}
    if "Devil’s Advocate" in system:  # DEBATE's Critic: its persona is its system message
        return "NO ISSUE" if no_issue else "I disagree: " + filler(BUDGET - 4)
    if "Assistant 1" in prompt or "Assistant 1" in system:
        line = "\nThe score of Assistant 1: 8\nThe score of Assistant 2: 6"
    else:
        line = "\nScore: 2"
    # each request its own words, as a model's: two items' discussions never make one summarizer prompt, which
    # the LLM cache would answer once
    line = f" (on {hashlib.sha256(prompt.encode()).hexdigest()[:8]})" + line
    return filler(BUDGET - count_tokens(line)) + line


def dry_run(capsys: pytest.CaptureFixture[str], args: list[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["eval", *args, "--dry-run", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def run(args: list[str], out: Path) -> dict[str, Any]:
    assert main(["eval", *args, "--out", str(out), "--quiet"]) == 0
    return json.loads((out / "manifest.json").read_text())


def common(server: Any, *args: str) -> list[str]:
    return [*args, "--model", "judge", "--base-url", server.base_url, "--gen", f"*.max_tokens={BUDGET}"]


FIXED = {
    "chateval one-by-one, both orders": ["--protocol", "chateval", "--dataset", "faireval", "--limit", "3"],
    "chateval summarizer, 3 referees": ["--protocol", "chateval", "--strategy", "summarizer", "--agents", "3",
                                        "--dataset", "summeval", "--aspect", "coherence", "--limit", "2"],
    "refer turbo, n = 20 in one request": ["--protocol", "refer", "--dataset", "topical-chat", "--aspect",
                                           "coherence", "--limit", "2"],
    "geval, 20 samples": ["--protocol", "geval", "--dataset", "summeval", "--aspect", "fluency", "--limit", "2"],
    "geval, log-probabilities": ["--protocol", "geval", "--estimator", "logprobs", "--dataset", "summeval",
                                 "--aspect", "coherence", "--limit", "2"],
    "faireval bpc+mec": ["--protocol", "single", "--calibrate", "bpc+mec", "--dataset", "faireval", "--limit", "2"],
}


@pytest.mark.parametrize("args", FIXED.values(), ids=FIXED.keys())
def test_a_fixed_plan_is_what_the_server_receives(args: list[str], openai_server, capsys, tmp_path: Path) -> None:
    server = openai_server(lambda request, i: answer(request))
    estimate = dry_run(capsys, common(server, *args))
    assert server.requests == []  # the dry run sent nothing
    assert not (tmp_path / "run").exists()
    manifest = run(common(server, *args), tmp_path / "run")
    counts = manifest["counts"]
    assert estimate["requests"] == len(server.requests) == counts["requests"]
    assert isinstance(estimate["requests"], int) and "bounds" not in estimate
    assert estimate["input_tokens"] == pytest.approx(counts["input_tokens"], rel=0.15)
    assert estimate["output_tokens"] == pytest.approx(counts["output_tokens"], rel=0.15)
    assert estimate["approximate"] is True and estimate["by_model"][f"openai:judge@{server.base_url}"]["approximate"]
    assert estimate["cost_usd"] is None  # a model at your own server has no list price


@pytest.mark.parametrize("no_issue", [True, False], ids=["NO ISSUE at once", "never NO ISSUE"])
def test_a_debate_is_bounded_by_the_critic(no_issue: bool, openai_server, capsys, tmp_path: Path) -> None:
    server = openai_server(lambda request, i: answer(request, no_issue=no_issue))
    args = common(server, "--protocol", "debate", "--dataset", "summeval", "--aspect", "coherence", "--limit", "2")
    estimate = dry_run(capsys, args)
    assert estimate["requests"] == {"min": 2 * 2, "max": 2 * 9}  # Scorer + Critic; Scorer + 4 x (Critic, Scorer)
    assert estimate["requests_per_item"] == {"min": 2, "max": 9}
    assert estimate["bounds"]["min"] == "the Critic says NO ISSUE at its first review"
    manifest = run(args, tmp_path / "run")
    bound = "min" if no_issue else "max"
    assert len(server.requests) == estimate["requests"][bound]
    assert estimate["input_tokens"][bound] == pytest.approx(manifest["counts"]["input_tokens"], rel=0.15)


def test_early_stop_is_bounded_by_agreement(openai_server, capsys, tmp_path: Path) -> None:
    server = openai_server(lambda request, i: answer(request))  # every referee gives the same scores: agreement
    args = common(server, "--protocol", "chateval", "--turns", "3", "--stop-when", "consensus", "--no-calibrate",
                  "--dataset", "faireval", "--limit", "2")
    estimate = dry_run(capsys, args)
    assert estimate["requests"] == {"min": 2 * 2, "max": 2 * 6}
    assert estimate["bounds"] == {"min": "the referees agree in round 1", "max": "the referees never agree (3 rounds)"}
    run(args, tmp_path / "run")
    assert len(server.requests) == estimate["requests"]["min"]


def test_the_text_form_says_what_it_assumed(openai_server, capsys) -> None:
    capsys.readouterr()
    assert main(["eval", "--protocol", "debate", "--dataset", "summeval", "--aspect", "coherence", "--limit", "4",
                 "--model", "openai:gpt-4o-mini", "--dry-run", "--rps", "0.01"]) == 0  # no key needed, no request
    text = capsys.readouterr().out
    assert "Dry run (no request sent): debate on summeval, 4 items" in text
    assert "requests per item: 2-9 (fewest: the Critic says NO ISSUE at its first review; most: the Critic never " \
           "says NO ISSUE (4 reviews))" in text
    assert "tokens of openai:gpt-4o-mini: approximate" in text  # tiktoken's encoding cannot be downloaded here
    assert "Critic, Scorer set no max_tokens: 512 tokens a reply assumed" in text
    assert "prices: built-in list prices of 2026-11-22" in text
    assert "wall time: at least" in text and "(--rps 0.01 for openai)" in text


def test_a_bare_rps_is_one_limit_for_every_provider_as_in_the_run(capsys) -> None:
    """A bare --rps N gates every provider's requests through one gate (ProviderGates' '*'): the wall time counts
    them all against it, not each provider against its own N."""
    args = ["--protocol", "debate", "--dataset", "summeval", "--aspect", "coherence", "--limit", "4",
            "--model", "openai:gpt-4o-mini", "--models", "Critic=google_genai:gemini-2.0-flash"]
    shared = dry_run(capsys, [*args, "--rps", "0.01"])
    assert shared["requests"]["max"] == 36
    assert (shared["wall_time_s"], shared["wall_time_bound"]) == (3600.0, "--rps 0.01 for openai and google_genai")
    each = dry_run(capsys, [*args, "--rps", "openai=0.01", "--rps", "google_genai=0.01"])
    openai = each["by_model"]["openai:gpt-4o-mini"]["requests"]["max"]
    assert (each["wall_time_s"], each["wall_time_bound"]) == (openai / 0.01, "--rps 0.01 for openai")


def test_a_large_dataset_is_estimated_from_a_stated_sample(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    from jurygraph.cli import costs

    monkeypatch.setattr(costs, "DEFAULT_SAMPLE", 5)
    report = dry_run(capsys, ["--protocol", "single", "--dataset", "faireval", "--model", "openai:gpt-4o-mini"])
    assert (report["items"], report["items_rendered"], report["scaled"]) == (80, 5, True)
    assert report["requests"] == 80 * 2  # both orders, one request each: scaled from the sample
    assert report["cost_usd_batch"] == pytest.approx(report["cost_usd"] / 2, rel=1e-3)


def test_a_resumed_run_is_estimated_for_what_is_left(openai_server, capsys, tmp_path: Path) -> None:
    # 2 items done (4 requests each), the third's first call answered, then the key is revoked: the run stops
    server = openai_server(lambda request, i: answer(request), faults=Faults(script=["ok"] * 9, always="401"))
    out = tmp_path / "run"
    args = common(server, "--protocol", "chateval", "--no-calibrate", "--dataset", "faireval", "--limit", "3",
                  "--concurrency", "1")
    assert main(["eval", *args, "--out", str(out), "--quiet"]) == 1
    report = dry_run(capsys, ["--resume", str(out)])
    assert (report["items_already_done"], report["items"]) == (2, 1)
    assert report["requests"] == 3  # the third item's first call is in the run's cache: free
    assert (out / "llm_cache.sqlite").exists() and len(server.requests) == 10  # the dry run sent nothing


def test_a_resumed_run_with_a_postgres_cache_is_estimated_with_it(openai_server, capsys, postgres_url: str,
                                                                   tmp_path: Path) -> None:
    """The same resume with the run's LLM cache in PostgreSQL (--cache URL, restored from the manifest): the calls
    that table holds are free too."""
    server = openai_server(lambda request, i: answer(request), faults=Faults(script=["ok"] * 9, always="401"))
    out = tmp_path / "run"
    args = common(server, "--protocol", "chateval", "--no-calibrate", "--dataset", "faireval", "--limit", "3",
                  "--concurrency", "1", "--cache", postgres_url)
    assert main(["eval", *args, "--out", str(out), "--quiet"]) == 1
    report = dry_run(capsys, ["--resume", str(out)])
    assert (report["items_already_done"], report["items"]) == (2, 1)
    assert report["requests"] == 3  # the third item's first call is in the PostgreSQL cache: free
    assert not (out / "llm_cache.sqlite").exists() and len(server.requests) == 10


def test_a_run_prints_its_estimate_in_one_line_before_it_starts(openai_server, capsys, tmp_path: Path) -> None:
    server = openai_server(lambda request, i: answer(request))
    capsys.readouterr()
    assert main(["eval", *common(server, "--protocol", "chateval", "--dataset", "faireval", "--limit", "5"),
                 "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("jurygraph: estimate:")]
    assert len(lines) == 1 and err.index(lines[0]) == 0  # before anything else
    assert lines[0].startswith("jurygraph: estimate: 40 requests, ")  # 8 an item, exact
    assert "(from 3 of 5 items, tokens approximate; --dry-run for the details)" in lines[0]
    capsys.readouterr()
    assert main(["eval", *common(server, "--protocol", "chateval", "--dataset", "faireval", "--limit", "5"),
                 "--out", str(tmp_path / "quiet"), "--quiet"]) == 0
    assert "estimate" not in capsys.readouterr().err
