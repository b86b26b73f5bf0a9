"""What every built-in protocol looks like from the command line, pinned: ``eval --help`` and ``draw --help``,
the manifest a run writes (its protocol, parameters, request plan and saved protocol options), and the dry run's
figures (requests fewest/most, tokens, the per-item plan with re-asks, the bounds), for each protocol and its
notable options. Taken on the code before the protocols became specs (issue 29), so the move to specs is seen
to change none of them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jurygraph.cli import main
from jurygraph.testing import pairwise_reply
from jurygraph.testing.fake_server import prompt_of

SUMMEVAL = ["--dataset", "summeval", "--aspect", "coherence"]
FLUENCY = ["--dataset", "summeval", "--aspect", "fluency"]
TOPICAL = ["--dataset", "topical-chat", "--aspect", "coherence"]
FAIREVAL = ["--dataset", "faireval"]

PLANS: dict[str, list[str]] = {
    "chateval": ["--protocol", "chateval", *FAIREVAL],
    "chateval one order": ["--protocol", "chateval", "--no-calibrate", *FAIREVAL],
    "chateval on scores": ["--protocol", "chateval", *SUMMEVAL],
    "chateval summarizer": ["--protocol", "chateval", "--strategy", "summarizer", "--turns", "3", "--agents", "3",
                            "--summary-mode", "code", *SUMMEVAL],
    "chateval simultaneous majority": ["--protocol", "chateval", "--strategy", "simultaneous", "--aggregate",
                                       "majority", "--personas", "Critic,Scientist,General Public", *FAIREVAL],
    "chateval consensus": ["--protocol", "chateval", "--stop-when", "consensus", "--turns", "3",
                           "--consensus-tolerance", "0.5", *SUMMEVAL],
    "chateval devil": ["--protocol", "chateval", "--devil", "--critic", "moderate", "--no-issue-rule", "strict",
                       *FAIREVAL],
    "chateval mec": ["--protocol", "chateval", "--calibrate", "bpc+mec", "--mec-k", "2", "--mec-temperature",
                     "0.7", *FAIREVAL],
    "debate": ["--protocol", "debate", *SUMMEVAL],
    "debate tie-breaker": ["--protocol", "debate", "--tie-breaker", "--commander-llm", "--max-iterations", "2",
                           "--critic", "plain", *SUMMEVAL],
    "refer": ["--protocol", "refer", *TOPICAL],
    "refer lite": ["--protocol", "refer", "--variant", "lite", "--feedback", "both", *TOPICAL],
    "refer lite from turbo": ["--protocol", "refer", "--variant", "lite", "--lite-from-turbo", *TOPICAL],
    "refer discussion": ["--protocol", "refer", "--peer-discussion", "2", "--samples", "5", *SUMMEVAL],
    "refer peers": ["--protocol", "refer", "--peers", "openai:gpt-4o-mini,openai:gpt-4o", "--area-chair",
                    "openai:gpt-4o", *TOPICAL],
    "single": ["--protocol", "single", *FAIREVAL],
    "single one order": ["--protocol", "single", "--no-calibrate", *FAIREVAL],
    "single faireval mec": ["--protocol", "single", "--calibrate", "bpc+mec", *FAIREVAL],
    "single on scores": ["--protocol", "single", *SUMMEVAL],
    "ensemble": ["--protocol", "ensemble", *FAIREVAL],
    "ensemble majority": ["--protocol", "ensemble", "--ensemble-method", "majority", "--agents", "3", *FAIREVAL],
    "geval": ["--protocol", "geval", *FLUENCY],
    "geval logprobs": ["--protocol", "geval", "--estimator", "logprobs", "--samples", "5", *SUMMEVAL],
    "geval 1-5 fluency": ["--protocol", "geval", "--fluency-scale", "5", "--sample-temperature", "0.5", *FLUENCY],
    "analyze-rate": ["--protocol", "analyze-rate", *SUMMEVAL],
    "escalate to a model": ["--protocol", "ensemble", "--escalate-when", "agreement<1", "--escalate-to",
                            "openai:gpt-4o", *FAIREVAL],
    "escalate refer": ["--protocol", "refer", "--escalate-when", "sample_spread>0.5", "--escalate-to",
                       "openai:gpt-4o", *TOPICAL],
    "escalate to a protocol": ["--protocol", "chateval", "--escalate-when", "spread>1", "--escalate-protocol",
                               "debate", *SUMMEVAL],
    "escalate geval": ["--protocol", "geval", "--escalate-when", "sample_spread>1", "--escalate-to",
                       "openai:gpt-4o", "--samples", "3", *SUMMEVAL],
    "review": ["--protocol", "ensemble", "--review-when", "agreement<1", "margin<2", *FAIREVAL],
}

# the dry run's figures: what it counts, not how long it took
DRY_RUN_KEYS = ("protocol", "items", "requests", "input_tokens", "output_tokens", "requests_per_item",
                "requests_per_item_with_reasks", "bounds", "cost_usd", "output_budget")


def reply(request: dict[str, Any], _: int) -> str:
    """A readable reply in the answer form each protocol asks for."""
    prompt = prompt_of(request)
    system = str(request["messages"][0].get("content", ""))
    if "Devil’s Advocate" in system or "just say NO ISSUE" in prompt or "Object to the current majority" in prompt:
        return "NO ISSUE"
    if "Assistant 1" in prompt or "Assistant 1" in system:
        return pairwise_reply(8, 6, "Assistant 1 is more complete.")
    if "End your reply with the line of the Evaluation Form filled in" in prompt:
        return "Rationale: fine.\n- Coherence: 3"
    if "Rating" in prompt:
        return "Analysis: fine.\nRating: 2"
    if "Evaluation Form (scores ONLY)" in prompt:
        return "2"
    return "Score: 2"


def _dry_run(capsys: pytest.CaptureFixture[str], args: list[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["eval", *args, "--limit", "2", "--model", "openai:gpt-4o-mini", "--dry-run", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    return {key: found.get(key) for key in DRY_RUN_KEYS}


def _manifest(server: Any, args: list[str], out: Path) -> dict[str, Any]:
    assert main(["eval", *args, "--limit", "1", "--model", "judge", "--base-url", server.base_url,
                 "--out", str(out), "--quiet", "--yes"]) == 0
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    shown = {key: manifest.get(key) for key in ("protocol", "parameters", "requests_per_item")}
    shown["protocol_args"] = manifest["cli"]["protocol_args"]
    return json.loads(json.dumps(shown).replace(server.base_url, "http://SERVER/v1"))


@pytest.mark.parametrize("args", PLANS.values(), ids=PLANS.keys())
def test_a_protocols_manifest_and_dry_run_are_pinned(args: list[str], openai_server, capsys, tmp_path: Path,
                                                     snapshot) -> None:
    server = openai_server(reply)
    assert {"dry_run": _dry_run(capsys, args), "manifest": _manifest(server, args, tmp_path / "run")} == snapshot


@pytest.mark.parametrize("command", ["eval", "draw"])
def test_help_is_pinned(command: str, capsys, monkeypatch, snapshot) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert capsys.readouterr().out == snapshot
