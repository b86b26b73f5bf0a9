"""Fidelity of DEBATE: the system messages and parameters each agent sends through the local server
(Section 2, Appendix G.1 and E.1, fixture ``data/fidelity/debate/paper.json``), and when the debate ends on
scripted Critic replies under Algorithm 1's test (the default) and the strict option."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from jurygraph import JuryContext, create_debate, verdict_of
from jurygraph.nodes.debate import debate_prompt
from jurygraph.running.datasets import load_dataset
from jurygraph.testing.fake_server import prompt_of

PAPER = json.loads((Path(__file__).parent / "data" / "fidelity" / "debate" / "paper.json")
                   .read_text(encoding="utf-8"))


def debate(critic_reply: str) -> Callable[[dict[str, Any], int], str]:
    def reply(request: dict[str, Any], i: int) -> str:
        if request["messages"][0]["content"] == PAPER["scorer"]:
            return "The summary follows the events in order.\n- Coherence: 3"
        return critic_reply

    return reply


def run(openai_server: Any, critic_reply: str, **options: Any) -> tuple[Any, list[dict[str, Any]]]:
    server = openai_server(debate(critic_reply))
    item = load_dataset("summeval", aspect="coherence").items[0]
    out = create_debate(**options).compile().invoke(
        {"item": item}, context=JuryContext(default=f"openai:gpt-4@{server.base_url}"))
    return verdict_of(out), server.requests


def test_the_fixture_is_the_paper() -> None:
    assert "‘NO ISSUE’ in" in PAPER["algorithm_1_line_8"]
    assert "a temperature of 0" in PAPER["settings_quote"] and "Top-p value of 1" in PAPER["settings_quote"]


def test_default_debate_sends_the_paper_s_system_messages_and_settings(openai_server) -> None:
    verdict, requests = run(openai_server, "The score is accurate. NO ISSUES")
    scorer, critic = requests  # the capitals anywhere end the debate after the first review (Algorithm 1)
    assert scorer["messages"][0] == {"role": "system", "content": PAPER["scorer"]}
    assert critic["messages"][0] == {"role": "system", "content": PAPER["critic_strict"]}
    # disclosed project addition (not in the paper): the strict prompt never says how to stop, so the
    # Commander's message to the Critic ends with the stop rule
    assert prompt_of(critic).endswith(debate_prompt("stop_rule"))
    for request in requests:
        assert (request["temperature"], request["top_p"]) == (PAPER["params"]["temperature"], PAPER["params"]["top_p"])
        assert "max_completion_tokens" not in request and request.get("n", 1) == 1
    assert verdict is not None and verdict.score == 3.0 and verdict.detail["ended"] == "no_issue"


@pytest.mark.parametrize(("reply", "paper_ends", "strict_ends"), [
    ("The score is accurate. NO ISSUES", True, False),
    ("No issues.", False, True),
    ("NO_ISSUES", True, True),
    ("The score of 3 is too high: the second sentence contradicts the first.", False, False),
])
def test_when_the_debate_ends_under_each_rule(openai_server, reply: str, paper_ends: bool, strict_ends: bool) -> None:
    for rule, ends in (("paper", paper_ends), ("strict", strict_ends)):
        verdict, requests = run(openai_server, reply, no_issue_rule=rule, max_iterations=2)
        # ends: Scorer, Critic. Never: Scorer, then (Critic, Scorer) x n
        assert len(requests) == (2 if ends else 1 + 2 * 2), rule
        assert verdict is not None and verdict.score == 3.0
        assert verdict.detail["ended"] == ("no_issue" if ends else "iteration_limit")
