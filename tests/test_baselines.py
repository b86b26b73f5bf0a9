"""Single-Agent and Ensemble baselines (ChatEval): what each referee saw, independence, aggregation,
missing judgments, resume, and the diagrams."""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence

import pytest
from langchain_core.messages import BaseMessage

from jurygraph import EvalItem, JuryContext, create_ensemble, create_single_agent, judgments_of, verdict_of
from jurygraph.nodes.referee import Referee
from jurygraph.testing import FakeJudge, pairwise_reply

ITEM = EvalItem(id="q1", task="pairwise", question="Which is better?", response_1="Answer one.",
                response_2="Answer two.", human={"label": "2"})
TC_ITEM = EvalItem(id="tc-1-0", task="score", dataset="topical-chat", aspect="engagingness",
                   scale={"low": 1, "high": 3}, source="a: hi\nb: hello", context="cats purr",
                   response="did you know cats purr?")
FINAL = "Output with the following format strictly"


def history_slot(prompt: str) -> str:
    return prompt.split("Here is your discussion history:\n")[1].split("\nNow it’s your time")[0]


def talker(prompt: str) -> str:
    match = re.search(r"make your talk short and clear, (.*) !", prompt)
    assert match is not None
    return match.group(1)


def test_single_agent_sees_the_codes_single_agent_prompt_without_history_role_or_referees() -> None:
    model = FakeJudge(respond=lambda prompt, messages: pairwise_reply(4, 9, "two is better"))
    out = create_single_agent().compile().invoke({"item": ITEM}, context=JuryContext(default=model))
    (prompt,) = model.prompts()
    assert "[The Start of Assistant 1’s Answer]\nAnswer one.\n[The End of Assistant 1’s Answer]" in prompt
    assert "discussion history" not in prompt and "referee" not in prompt  # no history slot, no other referees
    assert "Now it’s your time" not in prompt and "You are now" not in prompt  # no agent name, no persona
    assert "Please rate the helpfulness" in prompt  # the code's single-agent wording
    assert FINAL in prompt and prompt.endswith("The score of Assistant 2: [score only]")
    verdict = verdict_of(out)
    assert verdict is not None and (verdict.label, verdict.score_1, verdict.score_2) == ("2", 4.0, 9.0)
    assert judgments_of(out)["Single Agent"].evidence == "two is better"
    assert [m.name for m in out["histories"]["Single Agent"]] == ["Single Agent"]


def test_single_agent_scores_with_the_aspect_template() -> None:
    model = FakeJudge(respond=lambda prompt, messages: "Evaluation evidence: lively\nThe score of the response: 3")
    out = create_single_agent().compile().invoke({"item": TC_ITEM}, context=JuryContext(default=model))
    (prompt,) = model.prompts()
    assert "[Corresponding Fact]\ncats purr" in prompt and "on a scale of 1 to 3" in prompt
    assert "Engagingness - Is the response dull or interesting?" in prompt
    assert verdict_of(out).score == 3.0  # type: ignore[union-attr]


def test_single_agent_unreadable_reply_is_a_missing_verdict_not_a_default() -> None:
    model = FakeJudge(respond=lambda prompt, messages: "Both are fine, I cannot decide.")
    out = create_single_agent().compile().invoke({"item": ITEM}, context=JuryContext(default=model))
    verdict = verdict_of(out)
    assert verdict is not None and verdict.missing and verdict.label is None and verdict.score_1 is None
    judgment = judgments_of(out)["Single Agent"]
    assert judgment.missing and judgment.attempts == 2 and judgment.raw == "Both are fine, I cannot decide."
    assert len(model.calls) == 2  # the one re-ask, then no guess


def test_ensemble_referees_judge_independently_in_one_superstep() -> None:
    panel = ["General Public", "Critic", "Scientist"]
    # a barrier that only opens when all three referees are being called at once: they share a superstep
    barrier = threading.Barrier(3, timeout=10)
    scores = {"General Public": (8, 3), "Critic": (2, 9), "Scientist": (4, 7)}

    def respond(prompt: str, messages: Sequence[BaseMessage]) -> str:
        barrier.wait()
        return pairwise_reply(*scores[talker(prompt)])

    model = FakeJudge(respond=respond)
    graph = create_ensemble(personas=panel, method="majority")
    out = graph.compile().invoke({"item": ITEM}, context=JuryContext(default=model))
    prompts = {talker(p): p for p in model.prompts()}
    assert set(prompts) == set(panel) and len(model.calls) == 3
    for name, prompt in prompts.items():
        assert history_slot(prompt).strip() == Referee.persona(name).role_description  # persona, no history
        assert FINAL in prompt
        assert not any(other in history_slot(prompt) for other in panel if other != name)
    verdict = verdict_of(out)
    assert verdict is not None and verdict.votes == {"1": 1, "2": 2} and verdict.label == "2"
    assert (verdict.score_1, verdict.score_2) == (pytest.approx(14 / 3), pytest.approx(19 / 3))
    assert set(out["histories"]) == set(panel) and all(len(h) == 1 for h in out["histories"].values())


def test_ensemble_averages_by_default_and_counts_missing_referees() -> None:
    replies = {"General Public": pairwise_reply(9, 1), "Critic": pairwise_reply(3, 5), "Scientist": "no numbers"}
    model = FakeJudge(respond=lambda prompt, messages: replies[talker(messages[0].text)])
    graph = create_ensemble(personas=["General Public", "Critic", "Scientist"])  # the paper: averaging
    verdict = verdict_of(graph.compile().invoke({"item": ITEM}, context=JuryContext(default=model)))
    assert verdict is not None and verdict.method == "mean"
    # majority would be a tie (1 vs 1); the mean of the readable scores says Assistant 1 (6 vs 3)
    assert (verdict.score_1, verdict.score_2, verdict.label) == (6.0, 3.0, "1")
    assert (verdict.n_judgments, verdict.n_missing) == (2, 1)


def test_ensemble_averages_scores_for_score_items() -> None:
    replies = {"General Public": "The score of the response: 3", "Critic": "The score of the response: 1"}
    model = FakeJudge(respond=lambda prompt, messages: replies[talker(prompt)])
    verdict = verdict_of(create_ensemble().compile().invoke({"item": TC_ITEM}, context=JuryContext(default=model)))
    assert verdict is not None and verdict.score == 2.0 and verdict.n_judgments == 2


def test_ensemble_resume_repeats_only_the_failed_referee(sqlite_saver) -> None:
    def respond(prompt: str, messages: Sequence[BaseMessage]) -> str:
        return pairwise_reply(7, 5)

    broken = FakeJudge(respond=respond, fail_when=lambda prompt: talker(prompt) == "Critic")
    graph = create_ensemble(personas=["General Public", "Critic", "Scientist"]).compile(checkpointer=sqlite_saver)
    config = {"configurable": {"thread_id": "ens-1"}}
    with pytest.raises(RuntimeError, match="scripted failure"):
        graph.invoke({"item": ITEM}, config, context=JuryContext(default=broken))
    fixed = FakeJudge(respond=respond)
    out = graph.invoke(None, config, context=JuryContext(default=fixed))
    assert [talker(p) for p in fixed.prompts()] == ["Critic"]
    assert verdict_of(out).n_judgments == 3  # type: ignore[union-attr]


def test_bad_configuration_is_refused_clearly() -> None:
    with pytest.raises(ValueError, match="unknown ensemble method 'median'"):
        create_ensemble(method="median")
    choice = EvalItem(id="c7", task="choice", question="2+2?", options={"A": "4", "B": "5"})
    with pytest.raises(ValueError, match="item 'c7': ChatEval judges pairwise and score items"):
        create_single_agent().compile().invoke({"item": choice}, context=JuryContext(default=FakeJudge()))


@pytest.mark.parametrize("graph", ["single", "ensemble-2", "ensemble-3"])
def test_mermaid_diagram_of_each_baseline(graph: str, snapshot) -> None:
    builder = create_single_agent() if graph == "single" else create_ensemble(referees=int(graph[-1]))
    assert builder.compile().get_graph().draw_mermaid() == snapshot
