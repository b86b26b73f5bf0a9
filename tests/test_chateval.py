"""ChatEval: who saw what, when, under each communication strategy (Algorithms 1-3), aggregation,
re-asks, resume from a checkpoint, custom wirings, and the diagrams."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pytest
from langchain_core.messages import BaseMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from jurygraph import EvalItem, JuryContext, Referee, create_chateval, judgments_of, verdict_of
from jurygraph.graphs import (
    ChatEvalState,
    branch_when,
    copied,
    edges_of,
    insert_after,
    remove_edge,
    replace_edges,
    wire_turns,
)
from jurygraph.llm.models import JuryContext as Ctx
from jurygraph.nodes.aggregator import make_aggregator_node
from jurygraph.nodes.referee import chateval_personas
from jurygraph.testing import FakeJudge, pairwise_reply

ITEM = EvalItem(id="q1", task="pairwise", question="Which is better?", response_1="Answer one.",
                response_2="Answer two.", human={"label": "2"})
FINAL = "Output with the following format strictly"


def speaker(prompt: str) -> str:
    match = re.search(r"make your talk short and clear, (.+) !", prompt)
    return match.group(1) if match else "?"


def scripted(scores: dict[str, tuple[float, float]] | None = None):
    """Each referee says 'NAME says turn-N' while discussing and gives its scores on the final turn."""
    counts: dict[str, int] = {}

    def respond(prompt: str, messages: Sequence[BaseMessage]) -> str:
        if "New summary:" in prompt:
            lines = prompt.split("New lines:")[1].split("New summary:")[0].strip()
            return f"SUMMARY({lines.count('says')} messages)"
        name = speaker(prompt)
        counts[name] = counts.get(name, 0) + 1
        if FINAL in prompt:
            s1, s2 = (scores or {}).get(name, (6, 8))
            return pairwise_reply(s1, s2, f"{name} final")
        return f"{name} says turn-{counts[name]}"

    return respond


def run(graph: StateGraph, model: FakeJudge, item: EvalItem = ITEM) -> dict:
    return graph.compile().invoke({"item": item}, context=JuryContext(default=model))


def prompts_of(model: FakeJudge, name: str) -> list[str]:
    return [p for p in model.prompts() if speaker(p) == name]


def history_slot(prompt: str) -> str:
    return prompt.split("Here is your discussion history:\n")[1].split("\nYou are")[0]


def test_one_by_one_later_speakers_hear_earlier_ones_in_the_same_turn() -> None:
    model = FakeJudge(respond=scripted())
    out = run(create_chateval(strategy="one-by-one"), model)
    gp, critic = prompts_of(model, "General Public"), prompts_of(model, "Critic")
    assert len(gp) == len(critic) == 2 and len(model.calls) == 4
    # turn 1: General Public speaks first and has heard nothing; Critic hears General Public's turn-1 message
    assert history_slot(gp[0]) == ""
    assert history_slot(critic[0]) == "[General Public]: General Public says turn-1"
    # turn 2: each hears everything said before it, in order, its own messages included (the original code)
    assert history_slot(gp[1]) == "[General Public]: General Public says turn-1\n[Critic]: Critic says turn-1"
    assert history_slot(critic[1]).endswith("[General Public]: " + pairwise_reply(6, 8, "General Public final"))
    # the answer form is asked for on the final turn only
    assert [FINAL in p for p in gp] == [False, True]
    assert [m.name for m in out["transcript"]] == ["General Public", "Critic", "General Public", "Critic"]
    assert [m.response_metadata["turn"] for m in out["transcript"]] == [1, 1, 2, 2]
    assert [m.name for m in out["histories"]["Critic"]] == ["General Public", "Critic", "General Public", "Critic"]


def test_simultaneous_talk_nobody_hears_a_same_round_message() -> None:
    model = FakeJudge(respond=scripted())
    out = run(create_chateval(strategy="simultaneous", referees=3), model)
    for name in ("General Public", "Critic", "News Author"):
        first, second = prompts_of(model, name)
        assert history_slot(first) == ""
        # after round 1 the buffer reaches everyone, in panel order
        assert history_slot(second) == ("[General Public]: General Public says turn-1\n[Critic]: Critic says turn-1\n"
                                        "[News Author]: News Author says turn-1")
    assert len(out["histories"]["Critic"]) == 6  # both rounds delivered
    assert out["round_buffer"] == {}


@pytest.mark.parametrize("mode", ["append", "replace"])
def test_summarizer_output_reaches_every_history(mode: str) -> None:
    model = FakeJudge(respond=scripted())
    out = run(create_chateval(strategy="summarizer", turns=3, summary_mode=mode), model)
    summarizer_prompts = model.prompts(containing="New summary:")
    assert len(summarizer_prompts) == 2  # after rounds 1 and 2; nobody speaks after round 3
    # replace (ICLR): the summary is cumulative, built on the previous one; append (arXiv): one per round
    assert ("Current summary:\n[Summarizer]" in summarizer_prompts[1] or
            "Current summary:\nSUMMARY(2 messages)" in summarizer_prompts[1]) == (mode == "replace")
    third_turn = prompts_of(model, "Critic")[2]
    if mode == "append":
        assert history_slot(third_turn) == "[Summarizer]: SUMMARY(2 messages)\n[Summarizer]: SUMMARY(2 messages)"
    else:
        assert history_slot(third_turn) == "[Summarizer]: SUMMARY(2 messages)"
    assert "says turn" not in history_slot(third_turn)  # raw round messages reach nobody with a summarizer
    assert [m.name for m in out["transcript"]].count("Summarizer") == 2
    assert out["usage"]["Summarizer"]["requests"] == 2


def test_majority_vote_and_missing_judgments_are_counted_not_guessed() -> None:
    def respond(prompt: str, messages: Sequence[BaseMessage]) -> str:
        if FINAL not in prompt and "could not be read" not in messages[-1].text:
            return "discussion"
        name = speaker(messages[0].text)
        return {"General Public": pairwise_reply(8, 3), "Critic": pairwise_reply(2, 9),
                "News Author": pairwise_reply(7, 7)}.get(name, "I refuse to give numbers.")

    model = FakeJudge(respond=respond)
    panel = ["General Public", "Critic", "News Author", "Scientist"]
    out = run(create_chateval(personas=panel, turns=1, aggregate="majority"), model)
    verdict = verdict_of(out)
    assert verdict is not None
    assert verdict.votes == {"1": 1, "2": 1, "tie": 1} and verdict.label == "tie"  # no majority: a tie by rule
    # the default (the paper's average) compares the mean scores instead: 17/3 < 19/3
    default = verdict_of(run(create_chateval(personas=panel, turns=1), FakeJudge(respond=respond)))
    assert default is not None and (default.method, default.label, default.votes) == ("mean", "2", None)
    assert (default.score_1, default.score_2) == pytest.approx((17 / 3, 19 / 3))
    assert (verdict.n_judgments, verdict.n_missing) == (3, 1)
    scientist = judgments_of(out)["Scientist"]
    assert scientist.missing and scientist.attempts == 2 and scientist.raw == "I refuse to give numbers."
    assert "no score for Assistant 1" in (scientist.reason or "")
    # the one re-ask carried the format reminder after the unreadable reply
    reask = model.calls[-1].messages
    assert reask[-2].text == "I refuse to give numbers." and "The score of Assistant 1: [score only]" in reask[-1].text


def test_a_readable_reask_recovers_the_judgment() -> None:
    replies = iter(["discussion", "discussion", "I like the second.", pairwise_reply(4, 9), pairwise_reply(5, 6)])
    model = FakeJudge(respond=lambda prompt, messages: next(replies))
    out = run(create_chateval(), model)
    gp = judgments_of(out)["General Public"]
    assert (gp.score_1, gp.score_2, gp.attempts, gp.missing) == (4.0, 9.0, 2, False)
    assert verdict_of(out).label == "2"  # type: ignore[union-attr]


def test_scores_are_averaged_for_scoring_tasks() -> None:
    item = EvalItem(id="tc-1", task="score", dataset="topical-chat", aspect="engagingness", scale={"low": 1, "high": 3},
                    source="a: hi\nb: hello", context="cats purr", response="did you know cats purr?")

    def respond(prompt: str, messages: Sequence[BaseMessage]) -> str:
        if FINAL not in prompt:
            return "hmm"
        return {"General Public": "Evaluation evidence: fun\nThe score of the response: 3"}.get(
            speaker(prompt), "Engagingness: 2")

    model = FakeJudge(respond=respond)
    out = run(create_chateval(), model, item)
    assert verdict_of(out).score == 2.5  # type: ignore[union-attr]
    prompt = model.prompts()[0]
    assert "[Corresponding Fact]\ncats purr" in prompt and "on a scale of 1 to 3" in prompt
    assert "Engagingness - Is the response dull or interesting?" in prompt


def test_the_released_code_s_unreadable_rule_ties_only_pairwise_items() -> None:
    """``unreadable="code"``: the same final prompt up to 3 times; a pairwise item with an unreadable judgment is a
    tie, a score item keeps the judgment missing (the code's scoring has no tie for scores)."""
    item = EvalItem(id="tc-1", task="score", dataset="topical-chat", aspect="engagingness", scale={"low": 1, "high": 3},
                    source="a: hi\nb: hello", context="cats purr", response="did you know cats purr?")

    def respond(prompt: str, messages: Sequence[BaseMessage]) -> str:
        if FINAL not in prompt:
            return "hmm"
        return "no idea" if speaker(prompt) == "General Public" else "Engagingness: 2"

    model = FakeJudge(respond=respond)
    verdict = verdict_of(run(create_chateval(unreadable="code"), model, item))
    assert verdict is not None and (verdict.score, verdict.n_missing, verdict.method) == (2.0, 1, "mean")
    assert len([p for p in prompts_of(model, "General Public") if FINAL in p]) == 3

    def respond_pairwise(prompt: str, messages: Sequence[BaseMessage]) -> str:
        return pairwise_reply(6, 9) if FINAL in prompt and speaker(prompt) == "Critic" else respond(prompt, messages)

    pairwise = verdict_of(run(create_chateval(unreadable="code"), FakeJudge(respond=respond_pairwise)))
    assert pairwise is not None and (pairwise.label, pairwise.detail["unreadable_tie"]) == ("tie", ["General Public"])
    with pytest.raises(ValueError, match="unreadable"):
        create_chateval(unreadable="tie")


def test_each_referee_uses_its_own_model() -> None:
    gp_model, critic_model = FakeJudge(respond=scripted()), FakeJudge(respond=scripted())
    graph = create_chateval().compile()
    graph.invoke({"item": ITEM}, context=Ctx(models={"General Public": gp_model, "referee": critic_model}))
    assert {speaker(p) for p in gp_model.prompts()} == {"General Public"}
    assert {speaker(p) for p in critic_model.prompts()} == {"Critic"}


def test_same_role_ablation_and_custom_personas() -> None:
    annotators = chateval_personas("same-role", 3)
    assert [r.name for r in annotators] == ["Annotator 1", "Annotator 2", "Annotator 3"]
    assert {r.role_description for r in annotators} == {
        "You are now an Annotator, one of the referees in the text evaluation task."}
    model = FakeJudge(respond=scripted())
    run(create_chateval(personas=[Referee("Lawyer", "You are Lawyer, a referee."), "Scientist"]), model)
    assert "You are Lawyer, a referee." in prompts_of(model, "Lawyer")[0]
    with pytest.raises(KeyError, match="unknown persona 'Pirate'"):
        create_chateval(personas=["Pirate"])


async def test_async_invocation_gives_the_same_result() -> None:
    model = FakeJudge(respond=scripted())
    out = await create_chateval(strategy="simultaneous").compile().ainvoke({"item": ITEM}, context=Ctx(default=model))
    assert verdict_of(out).label == "2" and len(model.calls) == 4  # type: ignore[union-attr]


@pytest.mark.parametrize("strategy", ["one-by-one", "simultaneous", "summarizer"])
def test_resume_after_a_failing_referee_does_not_repeat_finished_calls(strategy: str, sqlite_saver) -> None:
    broken = FakeJudge(respond=scripted(), fail_when=lambda prompt: speaker(prompt) == "Critic" and FINAL in prompt)
    graph = create_chateval(strategy=strategy).compile(checkpointer=sqlite_saver)
    config = {"configurable": {"thread_id": f"item-{strategy}"}}
    with pytest.raises(RuntimeError, match="scripted failure"):
        graph.invoke({"item": ITEM}, config, context=Ctx(default=broken))
    done_before = [c.prompt for c in broken.calls if not (speaker(c.prompt) == "Critic" and FINAL in c.prompt)]
    fixed = FakeJudge(respond=scripted())
    out = graph.invoke(None, config, context=Ctx(default=fixed))
    # only the failed referee is called again; what finished before the failure is not paid twice
    assert [speaker(p) for p in fixed.prompts()] == ["Critic"]
    assert FINAL in fixed.prompts()[0]
    assert len(done_before) == (3 if strategy != "summarizer" else 4)
    assert verdict_of(out).n_judgments == 2  # type: ignore[union-attr]
    state = graph.get_state(config).values
    assert set(state["histories"]) == {"General Public", "Critic"}


def test_custom_wiring_critic_speaks_last_every_turn() -> None:
    """Edit the edges of the graph a factory returns: move the Critic to the end of each turn."""
    panel = ["Critic", "General Public", "Scientist"]
    builder = create_chateval(personas=panel, turns=2)
    replace_edges(
        builder,
        remove=[(START, "critic_t1"), ("critic_t1", "general_public_t1"), ("scientist_t1", "critic_t2"),
                ("critic_t2", "general_public_t2"), ("scientist_t2", "aggregate")],
        add=[(START, "general_public_t1"), ("scientist_t1", "critic_t1"), ("critic_t1", "general_public_t2"),
             ("scientist_t2", "critic_t2"), ("critic_t2", "aggregate")],
    )
    model = FakeJudge(respond=scripted())
    out = run(builder, model)
    assert [speaker(p) for p in model.prompts()] == ["General Public", "Scientist", "Critic"] * 2
    assert "[Scientist]: Scientist says turn-1" in history_slot(prompts_of(model, "Critic")[0])
    assert verdict_of(out).n_judgments == 3  # type: ignore[union-attr]
    with pytest.raises(KeyError, match="no edge"):
        remove_edge(builder, START, "critic_t1")


def test_a_copied_builder_is_edited_alone() -> None:
    """The wiring helpers edit a builder in place; ``copied`` gives one to edit while the original stays as it was
    (the command line counts a protocol's plan on its panel before the trajectory match and the routes edit it)."""
    original = create_chateval()
    nodes, edges = set(original.nodes), edges_of(original)
    edited = copied(original)
    insert_after(edited, "aggregate", "note", lambda state: {})
    branch_when(edited, "note", [("done", lambda state: True, END)])
    assert "note" in edited.nodes and "note" in edited.branches
    assert set(original.nodes) == nodes and edges_of(original) == edges and "note" not in original.branches
    model = FakeJudge(respond=scripted())
    assert verdict_of(run(original, model)) == verdict_of(run(edited, FakeJudge(respond=scripted())))


def test_custom_wiring_sub_panels_talk_simultaneously_then_one_by_one() -> None:
    """A new strategy from the same nodes: turn 1 two sub-panels in parallel, turn 2 one by one."""
    referees = chateval_personas(["General Public", "Critic", "Psychologist", "Scientist"], None)
    plan = [[("General Public", "Critic"), ("Psychologist", "Scientist")],
            [("General Public",), ("Critic",), ("Psychologist",), ("Scientist",)]]
    builder = StateGraph(ChatEvalState, context_schema=JuryContext)
    last = wire_turns(builder, referees, plan)
    builder.add_node("aggregate", make_aggregator_node([r.name for r in referees]))
    builder.add_edge(last, "aggregate")
    builder.add_edge("aggregate", END)
    model = FakeJudge(respond=scripted())
    out = run(builder, model)
    first = {speaker(p): history_slot(p) for p in model.prompts()[:4]}
    assert first["General Public"] == first["Critic"] == ""
    assert first["Psychologist"] == first["Scientist"] == (
        "[General Public]: General Public says turn-1\n[Critic]: Critic says turn-1")
    assert [speaker(p) for p in model.prompts()[4:]] == ["General Public", "Critic", "Psychologist", "Scientist"]
    assert verdict_of(out).n_judgments == 4  # type: ignore[union-attr]


def test_checkpointed_state_has_every_history_and_is_plain_data() -> None:
    saver = InMemorySaver()
    graph = create_chateval(strategy="one-by-one").compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "t"}}
    graph.invoke({"item": ITEM}, config, context=Ctx(default=FakeJudge(respond=scripted())))
    values = graph.get_state(config).values
    assert values["item"]["id"] == "q1" and isinstance(values["item"], dict)
    assert {name: len(h) for name, h in values["histories"].items()} == {"General Public": 4, "Critic": 4}
    history = list(graph.get_state_history(config))
    assert len(history) >= 6  # one checkpoint per step: time travel to any turn is possible


@pytest.mark.parametrize(("strategy", "referees"), [("one-by-one", 2), ("simultaneous", 2), ("summarizer", 3)])
def test_mermaid_diagram_of_each_strategy(strategy: str, referees: int, snapshot) -> None:
    mermaid = create_chateval(strategy=strategy, referees=referees).compile().get_graph().draw_mermaid()
    assert mermaid == snapshot


def test_bad_configuration_is_refused_clearly() -> None:
    with pytest.raises(ValueError, match="unknown strategy 'round-robin'"):
        create_chateval(strategy="round-robin")
    with pytest.raises(ValueError, match="turns must be at least 1"):
        create_chateval(turns=0)
    with pytest.raises(ValueError, match="the paper has 5 personas"):
        create_chateval(referees=6)
    choice = EvalItem(id="c", task="choice", question="2+2?", options={"A": "4", "B": "5"})
    with pytest.raises(ValueError, match="item 'c': ChatEval judges pairwise and score items"):
        run(create_chateval(), FakeJudge(respond=scripted()), choice)
