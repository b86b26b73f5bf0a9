"""G-Eval and Analyze-Rate: the prompts, estimator (a) as ONE request with n = 20 to the local server,
estimator (b) from OpenAI-style log-probabilities (exact value on a hand-made payload, and end to end),
the fallback with its recorded reason, and the diagrams."""

from __future__ import annotations

import math
from typing import Any

import pytest

from jurygraph import EvalItem, JuryContext, create_analyze_rate, create_geval, judgments_of, verdict_of
from jurygraph.judging.extraction import AnswerForm, UnreadableReply
from jurygraph.judging.items import Scale, TaskKind
from jurygraph.nodes.geval import expected_score_from_logprobs, read_reply, score_in_reply, valid_scores
from jurygraph.testing import FakeJudge
from jurygraph.testing.fake_server import prompt_of

SUMMEVAL = EvalItem(id="d1#0", task="score", dataset="summeval", aspect="coherence", scale={"low": 1, "high": 5},
                    source="The cat sat on the mat. It was warm.", response="A cat sat on a warm mat.", group="d1")
GROUNDED = EvalItem(id="tc-1-2", task="score", dataset="topical-chat", aspect="groundedness",
                    scale={"low": 0, "high": 1}, source="a: do you like jazz?\nb: a bit",
                    context="Miles Davis recorded Kind of Blue in 1959.", response="Kind of Blue is from 1959!")


def lp(p: float) -> float:
    return math.log(p)


def position(token: str, p: float, alternatives: dict[str, float]) -> dict[str, Any]:
    return {"token": token, "logprob": lp(p), "top_logprobs": [{"token": t, "logprob": lp(q)}
                                                               for t, q in alternatives.items()]}


# a recorded-style OpenAI payload (choices[0].logprobs.content) for "Analysis: 2 issues.\nRating: 4"
ANALYZE_RATE_LOGPROBS = [
    position("Analysis", 0.9, {"Analysis": 0.9}),
    position(":", 0.99, {":": 0.99}),
    position(" 2", 0.6, {" 2": 0.6, " two": 0.3}),  # a number inside the analysis: NOT the rating
    position(" issues", 0.8, {" issues": 0.8}),
    position(".\n", 0.9, {".\n": 0.9}),
    position("Rating", 0.95, {"Rating": 0.95}),
    position(":", 0.99, {":": 0.99}),
    # the rating: "4" 0.40, " 4" 0.10 (same score), "3" 0.20, "5" 0.15, "7" 0.05 (off the scale), "x" 0.05
    position(" 4", 0.10, {"4": 0.40, "3": 0.20, "5": 0.15, " 4": 0.10, "7": 0.05, "x": 0.05}),
]


ANALYZE_RATE_TEXT = "".join(p["token"] for p in ANALYZE_RATE_LOGPROBS)
RATING_FORM = AnswerForm(TaskKind.SCORE, "Rating:", scale=Scale(low=1, high=5), labels=("Coherence", "coherence"))


def test_logprob_estimator_gives_the_exact_expected_value_at_the_rating_the_form_asks_for() -> None:
    score, offset = score_in_reply(ANALYZE_RATE_TEXT, "analyze-rate", RATING_FORM)
    assert (score, ANALYZE_RATE_TEXT[offset]) == (4.0, "4")
    expected, probabilities = expected_score_from_logprobs(ANALYZE_RATE_LOGPROBS, Scale(low=1, high=5), offset)
    # valid mass 0.40 + 0.10 + 0.20 + 0.15 = 0.85 -> p(4) = 0.5/0.85, p(3) = 0.2/0.85, p(5) = 0.15/0.85
    assert probabilities == pytest.approx({3: 0.20 / 0.85, 4: 0.50 / 0.85, 5: 0.15 / 0.85}, abs=1e-12)
    assert expected == pytest.approx((3 * 0.20 + 4 * 0.50 + 5 * 0.15) / 0.85, abs=1e-12)  # = 3.35 / 0.85
    assert sum(probabilities.values()) == pytest.approx(1.0, abs=1e-12)


def test_logprob_estimator_counts_a_sampled_token_missing_from_the_top_list_once() -> None:
    content = [position("3", 0.25, {"2": 0.5, "1": 0.25})]
    expected, probabilities = expected_score_from_logprobs(content, Scale(low=1, high=3), 0)
    assert probabilities == pytest.approx({1: 0.25, 2: 0.5, 3: 0.25}, abs=1e-12)
    assert expected == pytest.approx(2.0, abs=1e-12)


def test_logprob_estimator_refuses_a_position_without_a_score_token() -> None:
    assert valid_scores(Scale(low=0, high=1)) == [0, 1]
    content = [position("fine", 0.9, {"fine": 0.9}), position("7", 0.5, {"7": 0.5})]
    with pytest.raises(UnreadableReply, match="not one score on the scale 1-5"):
        expected_score_from_logprobs(content, Scale(low=1, high=5), 4)
    with pytest.raises(UnreadableReply, match="end before character 9"):
        expected_score_from_logprobs(content, Scale(low=1, high=5), 9)


# "4/5" and "4 out of 5": the score is the FIRST token (the last number is the scale's top, not the score)
FOUR_OF_FIVE = {"4/5": ["4", "/", "5"], "4 out of 5": ["4", " out", " of", " 5"]}


@pytest.mark.parametrize("reply", FOUR_OF_FIVE)
def test_geval_logprobs_read_the_leading_score_not_the_last_number(reply: str) -> None:
    content = [position(FOUR_OF_FIVE[reply][0], 0.5, {"4": 0.5, "3": 0.5})]
    content += [position(t, 0.99, {t: 0.99, "4": 0.01}) for t in FOUR_OF_FIVE[reply][1:]]
    score, offset = score_in_reply(reply, "geval", RATING_FORM)
    assert (score, offset) == (4.0, 0)
    expected, _ = expected_score_from_logprobs(content, Scale(low=1, high=5), offset)
    assert expected == pytest.approx(3.5, abs=1e-12)


@pytest.mark.parametrize(("reply", "score"), [
    ("4\n\nThe summary is well organised.", 4.0), ("3 - The summary repeats itself.", 3.0), (" 2", 2.0),
    ("4/5", 4.0), ("4 out of 5", 4.0), ("- Coherence: 4", 4.0), ("**Coherence**: 2", 2.0), ("5.", 5.0)])
def test_geval_reads_samples_as_its_own_script_does(reply: str, score: float) -> None:
    judgment = read_reply(RATING_FORM, "geval", "G-Eval #1", reply)
    assert not judgment.missing and judgment.score == score


@pytest.mark.parametrize(("reply", "reason"), [
    ("The summary is fine.", "no score where the form asks"), ("...", "not a number")])
def test_geval_unreadable_samples_are_missing_with_the_reason(reply: str, reason: str) -> None:
    judgment = read_reply(RATING_FORM, "geval", "G-Eval #1", reply)
    assert judgment.missing and reason in (judgment.reason or "") and judgment.score is None


def test_geval_an_off_scale_score_is_kept_by_default_and_dropped_on_request() -> None:
    kept = read_reply(RATING_FORM, "geval", "G-Eval #1", "7")
    assert not kept.missing and kept.score == 7.0  # as meta_eval_summeval.py keeps the number
    dropped = read_reply(RATING_FORM, "geval", "G-Eval #1", "7", off_scale="drop")
    assert dropped.missing and "outside the prompt's scale 1-5" in (dropped.reason or "")
    with pytest.raises(ValueError, match="off-scale"):
        create_geval(off_scale="clip")


def test_geval_prompt_follows_the_published_structure() -> None:
    model = FakeJudge(respond=lambda prompt, messages: "- Coherence: 4", jurygraph_native_n=True)
    create_geval(n=3).compile().invoke({"item": SUMMEVAL}, context=JuryContext(default=model))
    (prompt,) = model.prompts()
    parts = ["You will be given one summary written for a news article.", "Evaluation Criteria:\n\nCoherence (1-5) - "
             "the collective quality of all sentences.", "Evaluation Steps:\n\n1. Read the news article carefully",
             "Source Text:\n\nThe cat sat on the mat. It was warm.", "Summary:\n\nA cat sat on a warm mat.",
             "Evaluation Form (scores ONLY):\n\n- Coherence:"]
    positions = [prompt.index(p) for p in parts]
    assert positions == sorted(positions) and prompt.endswith("- Coherence:")
    assert "Analysis" not in prompt


def test_topical_chat_groundedness_prompt_uses_the_fact_and_the_0_1_scale() -> None:
    model = FakeJudge(respond=lambda prompt, messages: "Groundedness: 1", jurygraph_native_n=True)
    out = create_geval(n=2).compile().invoke({"item": GROUNDED}, context=JuryContext(default=model))
    (prompt,) = model.prompts()
    assert "Groundedness (0-1) - Given the fact that this response is conditioned on" in prompt
    assert "Corresponding Fact:\n\nMiles Davis recorded Kind of Blue in 1959." in prompt
    assert "Conversation History:\n\na: do you like jazz?\nb: a bit" in prompt
    assert verdict_of(out).score == 1.0  # type: ignore[union-attr]


def test_item_text_with_slot_syntax_reaches_the_model_verbatim() -> None:
    item = SUMMEVAL.model_copy(update={"response": "Use ${criteria} and {{Summary}} and $evaluation_form."})
    model = FakeJudge(respond=lambda prompt, messages: "3", jurygraph_native_n=True)
    create_geval(n=1).compile().invoke({"item": item}, context=JuryContext(default=model))
    assert "Summary:\n\nUse ${criteria} and {{Summary}} and $evaluation_form.\n" in model.prompts()[0]


def test_sampled_estimator_sends_one_request_with_n_20_to_the_local_server(openai_server) -> None:
    replies = ["- Coherence: 4", "Coherence: 5", "3", "I am not sure."]  # every 4th sample is unreadable

    server = openai_server(lambda request, i: replies[i % 4])
    graph = create_geval().compile()
    out = graph.invoke({"item": SUMMEVAL}, context=JuryContext(default=f"openai:judge@{server.base_url}"))
    assert len(server.requests) == 1
    (request,) = server.requests
    assert request["n"] == 20 and request["temperature"] == 1.0 and not request.get("logprobs")
    assert prompt_of(request).endswith("Evaluation Form (scores ONLY):\n\n- Coherence:")
    verdict = verdict_of(out)
    assert verdict is not None and verdict.method == "mean of 20 samples"
    assert verdict.score == pytest.approx(4.0)  # mean of 5 x (4, 5, 3); the 5 unreadable ones are left out
    assert (verdict.n_judgments, verdict.n_missing) == (15, 5)
    assert verdict.detail["scores"] == [4.0, 5.0, 3.0, None] * 5 and verdict.detail["unreadable"] == 5
    judgments = judgments_of(out)
    assert len(judgments) == 20 and judgments["G-Eval #4"].missing and judgments["G-Eval #4"].raw == "I am not sure."
    assert out["usage"]["G-Eval"]["requests"] == 1


def test_logprob_estimator_end_to_end_through_the_local_server(openai_server) -> None:
    server = openai_server(lambda request, i: {"content": "Analysis: 2 issues.\nRating: 4",
                                               "logprobs": ANALYZE_RATE_LOGPROBS})
    graph = create_analyze_rate(estimator="logprobs").compile()
    out = graph.invoke({"item": SUMMEVAL}, context=JuryContext(default=f"openai:judge@{server.base_url}"))
    (request,) = server.requests
    assert request["logprobs"] is True and request["top_logprobs"] == 20 and request.get("n", 1) == 1
    assert 'Evaluation Form (Answer by starting with "Analysis:"' in prompt_of(request)
    verdict = verdict_of(out)
    assert verdict is not None and verdict.method == "probability-weighted"
    assert verdict.score == pytest.approx(3.35 / 0.85, abs=1e-12)
    assert verdict.detail["sampled_score"] == 4.0 and "fallback_reason" not in verdict.detail
    assert judgments_of(out)["Analyze-Rate"].score == 4.0


def test_logprob_estimator_falls_back_to_samples_when_the_reply_has_none(openai_server) -> None:
    server = openai_server(lambda request, i: "Rating: 2")  # the server ignores the logprobs flag
    out = create_geval(estimator="logprobs", n=20).compile().invoke(
        {"item": SUMMEVAL}, context=JuryContext(default=f"openai:judge@{server.base_url}"))
    first, second = server.requests
    assert first["logprobs"] is True and second["n"] == 20 and not second.get("logprobs")
    verdict = verdict_of(out)
    assert verdict is not None and verdict.method == "mean of 20 samples" and verdict.score == 2.0
    assert verdict.detail["fallback_reason"] == "the reply carried no log-probabilities"


def test_models_without_logprobs_go_straight_to_samples_with_the_reason(openai_server) -> None:
    server = openai_server(lambda request, i: "Rating: 5")
    out = create_geval(estimator="logprobs", n=20).compile().invoke(
        {"item": SUMMEVAL}, context=JuryContext(default=f"openai:o3-mini@{server.base_url}"))
    (request,) = server.requests  # no wasted logprobs request for an o-series model
    assert request["n"] == 20 and "logprobs" not in request
    reason = verdict_of(out).detail["fallback_reason"]  # type: ignore[union-attr]
    assert "o-series" in reason and "o3-mini" in reason


def test_analyze_rate_reads_the_rating_after_the_analysis() -> None:
    model = FakeJudge(respond=lambda prompt, messages: "Analysis: the summary drops 3 of 5 points.\nRating: 2",
                      jurygraph_native_n=True)
    out = create_analyze_rate(n=4).compile().invoke({"item": SUMMEVAL}, context=JuryContext(default=model))
    assert len(model.calls) == 1 and model.calls[0].params["n"] == 4
    assert verdict_of(out).score == 2.0  # type: ignore[union-attr]
    assert 'then give the numeric rating on the next line by "Rating".)\n\n- Coherence:' in model.prompts()[0]


def test_all_unreadable_samples_give_a_missing_verdict() -> None:
    model = FakeJudge(respond=lambda prompt, messages: "great summary", jurygraph_native_n=True)
    verdict = verdict_of(create_geval(n=5).compile().invoke({"item": SUMMEVAL}, context=JuryContext(default=model)))
    assert verdict is not None and verdict.missing and verdict.score is None and verdict.n_missing == 5


def test_bad_input_is_refused_clearly() -> None:
    model = FakeJudge(respond=lambda prompt, messages: "3", jurygraph_native_n=True)
    understandability = GROUNDED.model_copy(update={"aspect": "understandability"})
    with pytest.raises(ValueError, match="item 'tc-1-2': no G-Eval prompt for aspect 'understandability'"):
        create_geval().compile().invoke({"item": understandability}, context=JuryContext(default=model))
    pair = EvalItem(id="p9", task="pairwise", question="q", response_1="a", response_2="b")
    with pytest.raises(ValueError, match="item 'p9': G-Eval and Analyze-Rate rate one text"):
        create_geval().compile().invoke({"item": pair}, context=JuryContext(default=model))
    with pytest.raises(ValueError, match="unknown estimator 'median'"):
        create_geval(estimator="median")


def test_a_custom_template_scores_any_dataset() -> None:
    item = EvalItem(id="x1", task="score", aspect="helpfulness", scale={"low": 1, "high": 10}, response="Sure!")
    model = FakeJudge(respond=lambda prompt, messages: "Helpfulness: 7", jurygraph_native_n=True)
    template = "Rate the ${aspect} of:\n${generated_text}\n(${scale_low}-${scale_high})\n\n${evaluation_form}"
    out = create_geval(n=2, template=template).compile().invoke({"item": item}, context=JuryContext(default=model))
    assert model.prompts()[0] == ("Rate the helpfulness of:\nSure!\n(1-10)\n\n"
                                  "Evaluation Form (scores ONLY):\n\n- Helpfulness:")
    assert verdict_of(out).score == 7.0  # type: ignore[union-attr]


@pytest.mark.parametrize("graph", ["geval", "analyze-rate"])
def test_mermaid_diagram(graph: str, snapshot) -> None:
    builder = create_geval() if graph == "geval" else create_analyze_rate()
    assert builder.compile().get_graph().draw_mermaid() == snapshot


def test_geval_reads_text_even_from_a_model_with_structured_output() -> None:
    # G-Eval's form is "scores ONLY": a JSON schema with an evidence field would change the protocol
    model = FakeJudge(respond=lambda prompt, messages: "- Coherence: 2", jurygraph_structured=True)
    out = create_geval(n=1).compile().invoke({"item": SUMMEVAL}, context=JuryContext(default=model))
    assert verdict_of(out).score == 2.0 and len(model.calls) == 1  # type: ignore[union-attr]
    assert "tools" not in model.calls[0].params and "response_format" not in model.calls[0].params
