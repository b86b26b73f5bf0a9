"""DEBATE through the real langchain-openai client against the local OpenAI-compatible server, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jurygraph import JuryContext, create_debate, verdict_of
from jurygraph.cli import main
from jurygraph.nodes.debate import debate_prompt
from jurygraph.running.datasets import load_dataset
from jurygraph.running.rundir import read_results
from jurygraph.testing.fake_server import prompt_of

SCORER_SYSTEM = "Logically think to score the following sentence."


def agent_of(request: dict[str, Any]) -> str:
    """Who is calling, from the system message each agent's chat starts with."""
    system = request["messages"][0]["content"]
    if system == SCORER_SYSTEM:
        return "Scorer"
    return "Tie-breaker" if system.startswith("You are a Tiebreaker.") else "Critic"


def responder(request: dict[str, Any], index: int) -> str:
    """Scorer: 2, then 4 after the Critic's feedback; Critic: one objection, then NO ISSUES."""
    turns = sum(m["role"] == "assistant" for m in request["messages"])
    agent = agent_of(request)
    if agent == "Scorer":
        score = 2 if turns == 0 else 4
        if request.get("response_format"):
            return json.dumps({"evidence": f"rationale {turns}", "score": score})
        return f"Rationale {turns}.\n- Coherence: {score}"
    if agent == "Tie-breaker":
        return "The Critic is right.\n- Coherence: 3"
    return "The score of 2 ignores the clear order of events." if turns == 0 else "**NO_ISSUES**"


def test_one_debate_over_http(openai_server) -> None:
    server = openai_server(responder)
    item = load_dataset("summeval", aspect="coherence").items[0]
    context = JuryContext(models={"Scorer": f"openai:scorer-model@{server.base_url}",
                                  "critic": f"openai:critic-model@{server.base_url}"})
    out = create_debate(critic="moderate").compile().invoke({"item": item}, context=context)

    assert [agent_of(r) for r in server.requests] == ["Scorer", "Critic", "Scorer", "Critic"]
    assert [r["model"] for r in server.requests] == ["scorer-model", "critic-model"] * 2
    assert all(r["temperature"] == 0.0 for r in server.requests)  # the paper's setting (E.1)
    # the Scorer's revision request carries its whole chat and, last, the Critic's feedback
    revision = server.requests[2]
    assert [m["role"] for m in revision["messages"]] == ["system", "user", "assistant", "user"]
    assert "The score of 2 ignores the clear order of events." in prompt_of(revision)
    second_review = server.requests[3]
    assert second_review["messages"][0]["content"] == debate_prompt("critic_moderate")
    assert [m["role"] for m in second_review["messages"]] == ["system", "user", "assistant", "user"]

    verdict = verdict_of(out)
    assert verdict is not None and verdict.score == 4
    assert verdict.detail["ended"] == "no_issue" and verdict.detail["no_issue_at"] == 2
    assert verdict.detail["scores"] == [2.0, 4.0]
    assert out["usage"]["Scorer"]["requests"] == 2 and out["usage"]["Scorer"]["input_tokens"] > 0
    assert out["usage"]["Critic"]["model"].startswith("openai:critic-model@")


def test_cli_eval_with_the_tie_breaker(openai_server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def never_satisfied(request: dict[str, Any], index: int) -> str:
        if agent_of(request) == "Critic":
            return "There is no issue with the grammar, however the score is too low."
        return responder(request, index)

    server = openai_server(never_satisfied)
    out = tmp_path / "run"
    code = main(["eval", "--protocol", "debate", "--critic", "plain", "--max-iterations", "2", "--tie-breaker",
                 "--dataset", "summeval", "--aspect", "coherence", "--limit", "2", "--model",
                 f"openai:judge@{server.base_url}", "--out", str(out), "--quiet"])
    assert code == 0
    rows = read_results(out)
    assert len(rows) == 2 and all(r["status"] == "ok" for r in rows)
    for row in rows:
        assert row["verdict"]["score"] == 3 and row["verdict"]["detail"]["ended"] == "tie_breaker"
        assert row["verdict"]["detail"]["critic"] == "plain" and row["verdict"]["detail"]["scores"] == [2, 4, 4]
    # per item: 3 Scorer calls (score + 2 revisions), 2 Critic reviews, 1 Tie-breaker
    agents = [agent_of(r) for r in server.requests]
    assert (agents.count("Scorer"), agents.count("Critic"), agents.count("Tie-breaker")) == (6, 4, 2)
    assert all(r["messages"][0]["content"] == debate_prompt("critic_plain") for r in server.requests
               if agent_of(r) == "Critic")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parameters"] == {"critic": "plain", "max_iterations": 2, "tie_breaker": True,
                                      "commander_llm": False, "no_issue_rule": "paper", "protocol": "debate"}


def test_cli_draws_the_debate_loop(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["draw", "--protocol", "debate", "--tie-breaker"]) == 0
    mermaid = capsys.readouterr().out
    assert "commander -. &nbsp;n reached&nbsp; .-> tie_breaker;" in mermaid and "scorer --> commander;" in mermaid
