"""Doubt signals, conditions, and the escalation / review routes of a protocol graph (issue 23), in process: real
graphs, scripted FakeJudges, LangGraph's interrupt() and Command(resume=...) on a real checkpointer."""

from __future__ import annotations

import math
from statistics import pstdev
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from jurygraph import EvalItem, JuryContext, Scale, calibrate, create_ensemble, create_single_agent
from jurygraph.graphs.debate import create_debate
from jurygraph.graphs.escalation import route_doubtful, verdict_node
from jurygraph.graphs.geval import create_geval
from jurygraph.graphs.refer import AREA_CHAIR, create_refer
from jurygraph.judging import doubt
from jurygraph.judging.doubt import Condition, doubt_signals, panel_verdict, parse_conditions
from jurygraph.testing import FakeJudge, pairwise_reply

PAIR = EvalItem(id="q1", task="pairwise", question="Which answer is better?", response_1="Alpha says yes.",
                response_2="Beta says no.")
SCORED = EvalItem(id="s1", task="score", dataset="summeval", aspect="coherence", source="A long article.",
                  response="A short summary.", scale=Scale(low=1, high=5), human={"coherence": 3.0})


def judge(score_1: float, score_2: float, name: str = "fake-judge") -> FakeJudge:
    """A referee that always gives these two scores for the answers in the order it is shown them."""
    return FakeJudge(respond=lambda prompt, messages: pairwise_reply(score_1, score_2), model_name=name)


def by_answer(first: str, name: str = "fake-judge") -> FakeJudge:
    """A referee that always prefers the answer whose text starts with ``first`` (Alpha or Beta), whatever its place."""
    def respond(prompt: str, messages: Any) -> str:
        alpha_first = prompt.find("Alpha says") < prompt.find("Beta says")
        prefers_shown_first = (first == "Alpha") == alpha_first
        return pairwise_reply(8, 4) if prefers_shown_first else pairwise_reply(4, 8)
    return FakeJudge(respond=respond, model_name=name)


def run(builder: Any, item: EvalItem, context: JuryContext, thread: str = "t") -> tuple[Any, dict[str, Any]]:
    app = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": thread}}
    return app, app.invoke({"item": item}, config, context=context)


# --- the signals ------------------------------------------------------------------------------------------------


def test_a_split_ensemble_has_agreement_one_half_and_the_margin_of_its_mean_scores() -> None:
    _, state = run(create_ensemble(personas=["General Public", "Critic", "Scientist"]), PAIR,
                   JuryContext(models={"General Public": judge(8, 4), "Critic": judge(8, 6), "Scientist": judge(3, 9)}))
    signals = doubt_signals(state)
    # two of three say Assistant 1; the means are 19/3 and 19/3: a tie on scores
    assert signals == {"agreement": pytest.approx(2 / 3, abs=1e-6), "margin": 0.0, "missing": 0}
    assert "flip" not in signals and "spread" not in signals  # one order judged; not a score item


def test_both_orders_give_flip_and_members_are_combined_over_the_orders() -> None:
    # the Critic picks whichever answer is shown first: Alpha in one order, Beta in the other
    graph = calibrate(create_ensemble(), "bpc")
    first = FakeJudge(respond=lambda prompt, messages: pairwise_reply(9, 3))
    _, state = run(graph, PAIR, JuryContext(models={"General Public": by_answer("Alpha"), "Critic": first}))
    # General Public: Alpha in both orders (8-4). The Critic: 9-3 as shown, i.e. 9-3 and, mapped back, 3-9: a 6-6
    # tie over the orders. Original run: 8.5-3.5 (Alpha); swapped run mapped back: 5.5-6.5 (Beta): a flip.
    # The verdict: 7-5 (Alpha), a margin of 2; the members: Alpha and a tie, an agreement of 1/2.
    assert doubt_signals(state) == {"agreement": 0.5, "margin": 2.0, "flip": True, "missing": 0}
    assert state["verdict"]["label"] == "1"


def test_a_position_biased_panel_flips() -> None:
    first = FakeJudge(respond=lambda prompt, messages: pairwise_reply(9, 3))
    _, state = run(calibrate(create_ensemble(), "bpc"), PAIR, JuryContext(default=first))
    assert doubt_signals(state)["flip"] is True
    _, steady = run(calibrate(create_ensemble(), "bpc"), PAIR, JuryContext(default=by_answer("Beta")))
    assert doubt_signals(steady) == {"agreement": 1.0, "margin": 4.0, "flip": False, "missing": 0}


def test_a_missing_member_is_counted_and_left_out_of_the_agreement() -> None:
    unreadable = FakeJudge(respond=lambda prompt, messages: "I would rather not say.")
    _, state = run(create_ensemble(personas=["General Public", "Critic", "Scientist"]), PAIR,
                   JuryContext(models={"General Public": judge(8, 4), "Critic": judge(7, 5), "Scientist": unreadable},
                               reasks=0))
    assert doubt_signals(state) == {"agreement": 1.0, "margin": 3.0, "missing": 1}
    assert Condition("missing").holds(doubt_signals(state))


def test_a_single_judge_has_no_agreement_and_missing_is_its_verdict() -> None:
    _, state = run(create_single_agent(), PAIR, JuryContext(default=judge(5, 5)))
    assert doubt_signals(state) == {"margin": 0.0, "missing": 0}


def test_refer_peers_spread_and_the_area_chairs_sample_spread() -> None:
    ratings = iter([1, 2, 2, 5, 4, 3])

    def respond(prompt: str, messages: Any) -> str:
        return f"Analysis: fine.\nRating: {next(ratings)}"

    peers = {f"peer_{i}": FakeJudge(respond=lambda p, m, s=s: f"Analysis.\nRating: {s}") for i, s in
             ((1, 2), (2, 4), (3, 5))}
    area_chair = FakeJudge(respond=respond)
    _, state = run(create_refer(samples=4), SCORED, JuryContext(models={**peers, AREA_CHAIR: area_chair}))
    signals = doubt_signals(state)
    assert signals["spread"] == 3.0  # peers 2, 4, 5
    samples = state["verdict"]["detail"]["ratings"]
    assert signals["sample_spread"] == pytest.approx(pstdev(samples))
    assert signals["missing"] == 0 and "agreement" not in signals and "margin" not in signals


def test_geval_samples_spread_and_debate_has_missing_only() -> None:
    scores = iter(["4", "2", "4", "5"])
    _, state = run(create_geval(n=4), SCORED, JuryContext(default=FakeJudge(respond=lambda p, m: next(scores))))
    assert doubt_signals(state) == {"sample_spread": pytest.approx(pstdev([4, 2, 4, 5])), "missing": 0}

    def debater(prompt: str, messages: Any) -> str:
        return "NO ISSUE" if "Devil" in messages[0].text else "Rationale.\n- Coherence: 4"
    _, debated = run(create_debate(), SCORED, JuryContext(default=FakeJudge(respond=debater)))
    assert doubt_signals(debated) == {"missing": 0}


def test_area_chair_name_is_the_refer_graphs() -> None:
    assert doubt.AREA_CHAIR == AREA_CHAIR


# --- conditions ---------------------------------------------------------------------------------------------------


def test_conditions_parse_hold_and_refuse_in_one_line() -> None:
    found = parse_conditions(["agreement<1", "margin<=0.5", "flip", "missing", "spread>2,sample_spread>=1.5"])
    assert [c.text for c in found] == ["agreement<1", "margin<=0.5", "flip", "missing", "spread>2",
                                       "sample_spread>=1.5"]
    signals = {"agreement": 0.5, "margin": 0.5, "flip": False, "missing": 0}
    assert [c.holds(signals) for c in found] == [True, True, False, False, False, False]  # absent: never holds
    for bad, says in [("agreemnt<1", "signals: agreement"), ("agreement", "needs a comparison"),
                      ("flip<1", "yes or no"), ("margin<x", "not a number"), ("", "no doubt condition")]:
        with pytest.raises(ValueError, match=says):
            parse_conditions(bad)


# --- the routes ---------------------------------------------------------------------------------------------------


def test_only_a_doubtful_item_is_escalated_and_the_verdict_keeps_both_and_their_costs() -> None:
    stronger = judge(2, 9, "stronger")
    graph = route_doubtful(create_ensemble(), escalate_when="agreement<1", escalation=create_single_agent())
    agreeing = JuryContext(models={"General Public": judge(8, 4), "Critic": judge(7, 4), "escalation": stronger})
    _, state = run(graph, PAIR, agreeing)
    assert stronger.calls == [] and "escalation" not in state["verdict"]["detail"]
    split = JuryContext(models={"General Public": judge(8, 4), "Critic": judge(4, 8), "escalation": stronger})
    _, state = run(graph, PAIR, split, thread="t2")
    assert len(stronger.calls) == 1
    verdict = state["verdict"]
    escalation = verdict["detail"]["escalation"]
    assert verdict["label"] == "2" and escalation["decided_by"] == "escalation"
    assert escalation["panel"]["label"] == "tie" and escalation["escalated"]["label"] == "2"
    assert escalation["triggered_by"] == ["agreement<1"] and escalation["signals"]["agreement"] == 0.5
    assert escalation["cost"]["panel"]["requests"] == 2 and escalation["cost"]["escalation"]["requests"] == 1
    assert set(state["usage"]) == {"General Public", "Critic", "escalation/Single Agent"}
    assert state["usage"]["escalation/Single Agent"]["model"] == "FakeJudge:stronger"
    assert panel_verdict(state) == escalation["panel"]
    assert doubt_signals(state)["agreement"] == 0.5  # the panel's signals, after the escalation too


def test_a_missing_escalated_verdict_leaves_the_panels_and_says_why() -> None:
    graph = route_doubtful(create_ensemble(), escalate_when="agreement<1", escalation=create_single_agent())
    mute = FakeJudge(respond=lambda prompt, messages: "No comment.")
    _, state = run(graph, PAIR, JuryContext(models={"General Public": judge(8, 4), "Critic": judge(4, 8),
                                                    "escalation": mute}, reasks=0))
    escalation = state["verdict"]["detail"]["escalation"]
    assert state["verdict"]["label"] == "tie" and escalation["decided_by"] == "panel"
    assert escalation["escalated"]["missing"] and "missing" in escalation["reason"]


def test_review_pauses_with_the_panels_verdict_and_a_resume_decides() -> None:
    graph = route_doubtful(create_ensemble(), review_when=["agreement<1"])
    context = JuryContext(models={"General Public": judge(8, 4), "Critic": judge(4, 8)})
    app, out = run(graph, PAIR.model_copy(update={"human": {"label": "1"}}), context)
    [paused] = out["__interrupt__"]
    request = paused.value
    assert request["panel_verdict"]["label"] == "tie" and request["doubt"]["agreement"] == 0.5
    assert request["triggered_by"] == ["agreement<1"] and "human" not in request  # the reviewer is measured by it
    assert [t["speaker"] for t in request["transcript"]] == ["Critic", "General Public"]
    config = {"configurable": {"thread_id": "t"}}
    again = app.invoke(Command(resume={"verdict": "3"}), config, context=context)  # not a pairwise verdict: asked again
    assert "1, 2 or tie" in again["__interrupt__"][0].value["error"]
    done = app.invoke(Command(resume={"verdict": "Assistant 2", "reviewer": "ada", "note": "B is right"}), config,
                      context=context)
    verdict = done["verdict"]
    assert "__interrupt__" not in done and verdict["label"] == "2" and verdict["method"] == "review"
    review = verdict["detail"]["review"]
    assert review["reviewer"] == "ada" and review["note"] == "B is right" and review["at"]
    assert review["panel_verdict"]["label"] == "tie"
    assert app.get_state(config).next == ()


def test_a_score_review_stays_on_the_scale() -> None:
    graph = route_doubtful(create_ensemble(), review_when="missing")
    unreadable = FakeJudge(respond=lambda prompt, messages: "Hmm.")
    app, out = run(graph, SCORED, JuryContext(models={"General Public": unreadable, "Critic": unreadable}, reasks=0))
    assert out["__interrupt__"][0].value["expects"] == "a score from 1-5"
    config = {"configurable": {"thread_id": "t"}}
    again = app.invoke(Command(resume=7), config)
    assert "off the scale" in again["__interrupt__"][0].value["error"]
    done = app.invoke(Command(resume=4.5), config)
    assert done["verdict"]["score"] == 4.5 and not done["verdict"]["missing"]


def test_routes_end_where_the_verdict_is_written() -> None:
    assert verdict_node(create_ensemble()) == "aggregate"
    assert verdict_node(create_debate()) == "finalize"
    assert verdict_node(create_refer()) == AREA_CHAIR
    assert verdict_node(calibrate(create_single_agent(), "bpc")) == "calibrate"
    with pytest.raises(ValueError, match="both its conditions"):
        route_doubtful(create_ensemble(), escalate_when="flip")


@pytest.mark.parametrize("routes", [
    {"escalate_when": "agreement<1", "escalation": "single"},
    {"review_when": "flip"},
    {"escalate_when": ["agreement<1", "margin<1"], "escalation": "single", "review_when": "missing"},
], ids=["escalate", "review", "both"])
def test_mermaid_of_the_routes(routes: dict[str, Any], snapshot) -> None:
    if routes.get("escalation"):
        routes = {**routes, "escalation": create_single_agent()}
    graph = route_doubtful(calibrate(create_ensemble(), "bpc"), **routes)
    assert graph.compile().get_graph().draw_mermaid() == snapshot


def test_no_signal_is_nan() -> None:
    _, state = run(create_ensemble(), PAIR, JuryContext(default=judge(5, 5)))
    assert all(not (isinstance(v, float) and math.isnan(v)) for v in doubt_signals(state).values())
