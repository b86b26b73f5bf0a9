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
from jurygraph.cli import main
from jurygraph.nodes.debate import debate_prompt
from jurygraph.running.datasets import load_dataset
from jurygraph.testing.fake_server import prompt_of

FIXTURES = Path(__file__).parent / "data" / "fidelity"
PAPER = json.loads((FIXTURES / "debate" / "paper.json").read_text(encoding="utf-8"))
GEVAL = {"consistency": "con", "fluency": "flu", "relevance": "rel"}


def released_geval_prompt(aspect: str, document: str, summary: str) -> str:
    """G-Eval's released prompt as gpt4_eval.py fills it (text-mode read, then {{Document}}/{{Summary}} replaced)."""
    with open(FIXTURES / "geval" / f"{GEVAL[aspect]}_detailed.txt") as file:
        prompt = file.read()
    return prompt.replace("{{Document}}", document).replace("{{Summary}}", summary)


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


@pytest.mark.parametrize("aspect", ["consistency", "fluency", "relevance"])
def test_summeval_templates_are_g_eval_s_released_prompts(openai_server, aspect: str) -> None:
    """Issue 29, fidelity item 2: the paper's templates follow Liu et al. (G-Eval), and it prints only coherence
    (G.2, G-Eval's coh_detailed.txt); the other SummEval aspects were the project's own text."""
    scale_high = 3 if aspect == "fluency" else 5  # G-Eval's released fluency prompt rates 1-3
    title = aspect.capitalize()

    def reply(request: dict[str, Any], i: int) -> str:
        if request["messages"][0]["content"] == PAPER["scorer"]:
            return f"The summary reads well.\n- {title}: {scale_high}"
        return "NO ISSUE"

    server = openai_server(reply)
    item = load_dataset("summeval", aspect=aspect).items[0]
    context = JuryContext(default=f"openai:gpt-4@{server.base_url}")
    out = create_debate().compile().invoke({"item": item}, context=context)
    scorer = server.requests[0]
    task = released_geval_prompt(aspect, item.source or "", item.response or "").rstrip()
    # the released text, verbatim, then the Commander's zero-shot CoT request and the answer form (the project's)
    assert scorer["messages"][1] == {"role": "user", "name": "Commander",
                                     "content": render_commander(task, title, scale_high)}
    verdict = verdict_of(out)
    assert verdict is not None and verdict.score == scale_high and not verdict.missing


def render_commander(task: str, title: str, high: int) -> str:
    return (f"{task}\n\nHelp me calculate the score. Give your rationale and the score. Let's think step by step.\n"
            f"End your reply with the line of the Evaluation Form filled in:\n- {title}: [a score from 1 to {high}]")


def test_the_project_s_own_summeval_templates_stay_an_option(openai_server, tmp_path: Path) -> None:
    server = openai_server(debate("NO ISSUE"))
    url = server.base_url
    args = ["eval", "--protocol", "debate", "--dataset", "summeval", "--aspect", "fluency", "--limit", "1",
            "--model", "gpt-4", "--base-url", url, "--quiet", "--no-cache"]
    assert main([*args, "--summeval-templates", "jurygraph", "--out", str(tmp_path / "own")]) == 0
    scorer_task = server.requests[0]["messages"][1]["content"]
    own = debate_prompt("summeval_fluency")
    assert scorer_task.startswith(own.split("${summary}")[0]) and "Fluency (1-5) - " in scorer_task
    assert scorer_task.endswith("- Fluency: [a score from 1 to 5]")
    manifest = json.loads((tmp_path / "own" / "manifest.json").read_text())
    assert manifest["parameters"]["summeval_templates"] == "jurygraph"
    server.requests.clear()
    assert main([*args, "--out", str(tmp_path / "geval")]) == 0
    assert "- Fluency (1-3):" in server.requests[0]["messages"][1]["content"]
    assert "summeval_templates" not in json.loads((tmp_path / "geval" / "manifest.json").read_text())["parameters"]
