"""Trajectory matches that need no model (agentevals' strict / unordered / subset / superset, tool arguments and
per-tool overrides), and the match as a first stage before a real panel graph: decided items end with the match's
verdict and no model call; the panel judges the rest, its verdict recording what the match found."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from jurygraph.graphs.single import create_single_agent
from jurygraph.graphs.trajectory import RECORD_MATCH, TRAJECTORY_MATCH, match_first, match_record
from jurygraph.judging.doubt import decided_by
from jurygraph.judging.items import EvalItem
from jurygraph.judging.trajectory import TrajectoryMatch, match_trajectory
from jurygraph.llm.models import JuryContext
from jurygraph.testing import FakeJudge


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    """An OpenAI-style tool call (arguments as JSON text)."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def agent(*calls: dict[str, Any], answer: str = "It is sunny.") -> list[dict[str, Any]]:
    """A user request, one assistant message calling ``calls``, their results, the answer."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Weather in Paris and Oslo?"}]
    if calls:
        messages.append({"role": "assistant", "content": None, "tool_calls": list(calls)})
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": "sunny"} for c in calls]
    return [*messages, {"role": "assistant", "content": answer}]


PARIS, OSLO = call("weather", "a", city="Paris"), call("weather", "b", city="Oslo")
REFERENCE = agent(PARIS, OSLO)


def test_strict_needs_the_same_messages_roles_and_calls_per_message() -> None:
    assert match_trajectory(agent(PARIS, OSLO), REFERENCE, "strict")
    assert match_trajectory(agent(OSLO, PARIS), REFERENCE, "strict")  # in any order within one message
    assert not match_trajectory(agent(PARIS), REFERENCE, "strict")
    # the same calls, split over two assistant messages: another shape, so no strict match
    split = [REFERENCE[0], {"role": "assistant", "content": None, "tool_calls": [PARIS]},
             {"role": "tool", "tool_call_id": "a", "content": "sunny"},
             {"role": "assistant", "content": None, "tool_calls": [OSLO]},
             {"role": "tool", "tool_call_id": "b", "content": "sunny"}, REFERENCE[-1]]
    assert not match_trajectory(split, REFERENCE, "strict")
    assert match_trajectory(split, REFERENCE, "unordered")
    # contents are not compared, roles are
    assert match_trajectory(agent(PARIS, OSLO, answer="Rain."), REFERENCE, "strict")


def test_unordered_subset_superset() -> None:
    extra = call("news", "c", city="Oslo")
    assert match_trajectory(agent(OSLO, PARIS), REFERENCE, "unordered")
    assert not match_trajectory(agent(PARIS, OSLO, extra), REFERENCE, "unordered")
    assert match_trajectory(agent(PARIS), REFERENCE, "subset")  # fewer calls, none unexpected
    assert not match_trajectory(agent(PARIS, extra), REFERENCE, "subset")
    assert match_trajectory(agent(PARIS, OSLO, extra), REFERENCE, "superset")  # every expected call, and more
    assert not match_trajectory(agent(PARIS), REFERENCE, "superset")
    # each call is matched once: two identical calls do not cover two expected ones
    assert not match_trajectory(agent(PARIS, call("weather", "z", city="Paris")), REFERENCE, "superset")
    # a trajectory without tool calls against one with: only subset (no unexpected call) holds
    assert match_trajectory(agent(), REFERENCE, "subset")
    assert not match_trajectory(agent(), REFERENCE, "unordered")


def test_tool_arguments_modes_and_overrides() -> None:
    moscow = agent(call("weather", "a", city="Paris"), call("weather", "b", city="Moscow"))
    assert not match_trajectory(moscow, REFERENCE, "strict")
    assert match_trajectory(moscow, REFERENCE, "strict", tool_args="ignore")
    detailed = agent(call("weather", "a", city="Paris", units="C"), call("weather", "b", city="Oslo", units="C"))
    assert not match_trajectory(detailed, REFERENCE, "strict")
    assert match_trajectory(detailed, REFERENCE, "strict", tool_args="superset")  # the agent's include the reference's
    assert not match_trajectory(detailed, REFERENCE, "strict", tool_args="subset")
    assert match_trajectory(REFERENCE, detailed, "strict", tool_args="subset")
    # per tool: a mode, the keys that must agree, or a function
    assert match_trajectory(moscow, REFERENCE, "strict", overrides={"weather": "ignore"})
    assert match_trajectory(detailed, REFERENCE, "strict", overrides={"weather": ["city"]})
    assert not match_trajectory(moscow, REFERENCE, "strict", overrides={"weather": ["city"]})
    nested = agent(call("weather", "a", where={"city": "Paris", "zip": 1}),
                   call("weather", "b", where={"city": "Oslo"}))
    ref = agent(call("weather", "a", where={"city": "Paris"}), call("weather", "b", where={"city": "Oslo", "zip": 2}))
    assert match_trajectory(nested, ref, "strict", overrides={"weather": ["where.city"]})
    assert match_trajectory(moscow, REFERENCE, "strict",
                            overrides={"weather": lambda mine, theirs: mine["city"][0] in "PMO"})
    with pytest.raises(ValueError, match="choose one of"):
        TrajectoryMatch("strict", "fuzzy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="trajectory match mode"):
        TrajectoryMatch("sorted")  # type: ignore[arg-type]


def test_calls_are_paired_by_a_maximum_matching_not_first_come() -> None:
    """With loose arguments one agent call can fit two expected ones: first come, first served pairs the first
    expected call with it and leaves the second without a partner, though a pairing exists."""
    reference = agent(call("weather", "a", city="Paris"), call("weather", "b", city="Paris", units="C"))
    mine = agent(call("weather", "x", city="Paris", units="C"), call("weather", "y", city="Paris"))
    assert match_trajectory(mine, reference, "superset", tool_args="superset")
    assert match_trajectory(mine, reference, "unordered", tool_args="superset")


def test_langchain_messages_and_flat_tool_calls() -> None:
    messages = [HumanMessage("Weather in Paris and Oslo?"),
                AIMessage("", tool_calls=[{"name": "weather", "args": {"city": "Paris"}, "id": "a"},
                                          {"name": "weather", "args": {"city": "Oslo"}, "id": "b"}]),
                ToolMessage("sunny", tool_call_id="a"), ToolMessage("sunny", tool_call_id="b"),
                AIMessage("It is sunny.")]
    assert match_trajectory(messages, REFERENCE, "strict")
    with pytest.raises(ValueError, match=r"reference\[1\]"):
        match_trajectory(messages, [REFERENCE[0], {"role": "robot", "content": "?"}], "strict")


# --- the first stage -------------------------------------------------------------------------------------------


def score_item(item_id: str, messages: list[dict[str, Any]], reference: list[dict[str, Any]] | None) -> EvalItem:
    return EvalItem(id=item_id, task="score", aspect="tool_use", scale={"low": 1, "high": 5}, messages=messages,
                    reference=reference)


def judge() -> FakeJudge:
    return FakeJudge(respond=lambda prompt, messages: "Evaluation evidence: it answered.\nThe score of the response: 3")


def test_match_first_decides_matches_and_hands_the_rest_to_the_panel() -> None:
    model = judge()
    graph = match_first(create_single_agent(), TrajectoryMatch("superset")).compile()
    context = JuryContext(default=model)
    decided = graph.invoke({"item": score_item("m", agent(PARIS, OSLO, call("news", "c")), REFERENCE)},
                           context=context)
    assert model.calls == []  # no model call
    verdict = decided["verdict"]
    assert verdict["score"] == 5.0 and verdict["method"] == "trajectory match"
    assert verdict["detail"][TRAJECTORY_MATCH] == {"mode": "superset", "tool_args": "exact", "overrides": [],
                                                   "decided": True, "matched": True,
                                                   "reason": "the trajectory matches the reference"}
    assert decided_by(verdict) == "trajectory_match"
    # a mismatch: the panel judges, and its verdict says what the match found
    mismatch = graph.invoke({"item": score_item("x", agent(PARIS), REFERENCE)}, context=context)
    assert len(model.calls) == 1
    assert mismatch["verdict"]["score"] == 3.0
    record = mismatch["verdict"]["detail"][TRAJECTORY_MATCH]
    assert record["matched"] is False and record["decided"] is False
    assert decided_by(mismatch["verdict"]) == "panel"
    # no reference: the panel
    free = graph.invoke({"item": score_item("n", agent(PARIS), None)}, context=context)
    assert len(model.calls) == 2
    assert free["verdict"]["detail"][TRAJECTORY_MATCH]["reason"] == "the item has no reference trajectory"


def test_on_mismatch_fail_decides_both_ways() -> None:
    model = judge()
    graph = match_first(create_single_agent(), "strict", on_mismatch="fail").compile()
    out = graph.invoke({"item": score_item("x", agent(PARIS), REFERENCE)}, context=JuryContext(default=model))
    assert out["verdict"]["score"] == 1.0 and out["verdict"]["detail"][TRAJECTORY_MATCH]["decided"] is True
    assert model.calls == []


def test_pairwise_one_match_wins_two_matches_go_to_the_panel() -> None:
    def pair(one: list[dict[str, Any]], two: list[dict[str, Any]]) -> EvalItem:
        # the shared prefix is the user's request; each side the agent's continuation
        return EvalItem(id="p", task="pairwise", messages=one[:1], messages_1=one[1:], messages_2=two[1:],
                        reference=REFERENCE)

    check = TrajectoryMatch("unordered")
    won = match_record(pair(agent(PARIS), agent(OSLO, PARIS)).model_dump(mode="json", exclude_none=True), check)
    assert won["matched"] == [False, True] and won["decided"] is True
    both = match_record(pair(agent(PARIS, OSLO), agent(OSLO, PARIS)).model_dump(mode="json", exclude_none=True),
                        check)
    assert both["decided"] is False and "cannot tell them apart" in both["reason"]
    graph = match_first(create_single_agent(), check).compile()
    model = FakeJudge(respond=lambda prompt, messages: "unused")
    out = graph.invoke({"item": pair(agent(PARIS), agent(OSLO, PARIS))}, context=JuryContext(default=model))
    assert out["verdict"]["label"] == "2" and (out["verdict"]["score_1"], out["verdict"]["score_2"]) == (0.0, 1.0)
    assert model.calls == []
    neither = match_record(pair(agent(PARIS), agent(OSLO)).model_dump(mode="json", exclude_none=True),
                           TrajectoryMatch("unordered"), "fail")
    assert neither["decided"] is True


def test_the_graph_shows_the_stage() -> None:
    builder = match_first(create_single_agent(), "strict")
    edges = {(e.source, e.target, e.conditional) for e in builder.compile().get_graph().edges}
    assert ("__start__", TRAJECTORY_MATCH, False) in edges
    assert (TRAJECTORY_MATCH, "__end__", True) in edges
    assert any(source == RECORD_MATCH and target == "__end__" for source, target, _ in edges)
    with pytest.raises(ValueError, match="on_mismatch"):
        match_first(create_single_agent(), "strict", on_mismatch="maybe")  # type: ignore[arg-type]


def test_before_a_per_turn_panel() -> None:
    """per_turn starts with a fan-out (a conditional edge of Sends): the match routes before it, and a mismatch
    still has each turn judged."""
    from jurygraph.graphs.turns import per_turn

    model = judge()
    graph = match_first(per_turn(create_single_agent()), "strict").compile()
    context = JuryContext(default=model)
    matched = graph.invoke({"item": score_item("m", agent(PARIS, OSLO), REFERENCE)}, context=context)
    assert model.calls == [] and decided_by(matched["verdict"]) == "trajectory_match"
    mismatch = graph.invoke({"item": score_item("x", agent(PARIS), REFERENCE)}, context=context)
    assert len(model.calls) == 1  # the one assistant turn
    assert mismatch["verdict"]["score"] == 3.0 and mismatch["verdict"]["detail"][TRAJECTORY_MATCH]["decided"] is False
