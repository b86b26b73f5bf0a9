"""The hybrid protocols (jurygraph's own, each an edit of edges): ChatEval with DEBATE's Critic as a devil's
advocate, and ReFeR whose peers discuss before the area chair. Who heard what, when, and the diagrams."""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from langchain_core.messages import BaseMessage, SystemMessage

from jurygraph import EvalItem, JuryContext, verdict_of
from jurygraph.cli import main
from jurygraph.cli.protocols import ProtocolSetup, add_protocol_arguments, build_protocol
from jurygraph.graphs.chateval import create_chateval_devil
from jurygraph.graphs.refer import create_refer_discussion
from jurygraph.nodes.debate import debate_prompt
from jurygraph.nodes.devil import DEVIL
from jurygraph.running.datasets import load_dataset
from jurygraph.testing import FakeJudge, pairwise_reply
from jurygraph.testing.fake_server import prompt_of

ITEM = EvalItem(id="q1", task="pairwise", question="Which is better?", response_1="Answer one.",
                response_2="Answer two.")
OBJECTION = "Object to the current majority"


def speaker(prompt: str) -> str:
    match = re.search(r"make your talk short and clear, (.+) !", prompt)
    return match.group(1) if match else "?"


def history_slot(prompt: str) -> str:
    return prompt.split("Here is your discussion history:\n")[1].split("\nYou are")[0]


def devil_panel(devil_replies: Sequence[str], critic_winner: str = "2") -> tuple[FakeJudge, FakeJudge]:
    """General Public prefers Assistant 1, the Critic ``critic_winner``; the devil says ``devil_replies`` in turn."""
    replies = iter(devil_replies)

    def referee(prompt: str, messages: Sequence[BaseMessage]) -> str:
        name = speaker(prompt)
        winner = "1" if name == "General Public" else critic_winner
        return pairwise_reply(8, 6, name) if winner == "1" else pairwise_reply(6, 8, name)

    return FakeJudge(respond=referee), FakeJudge(respond=lambda p, m: next(replies))


def run_devil(referees: FakeJudge, devil: FakeJudge, **options) -> dict:
    return create_chateval_devil(**options).compile().invoke(
        {"item": ITEM}, context=JuryContext(default=referees, models={DEVIL: devil}))


def test_devil_hears_the_round_and_the_majority_and_every_referee_hears_the_devil() -> None:
    referees, devil = devil_panel(["Both of you missed that Answer one is wrong.", "Still wrong."])
    out = run_devil(referees, devil, turns=3)
    assert len(devil.calls) == 2  # after turns 1 and 2; nobody speaks after the last turn
    first = devil.calls[0]
    # DEBATE's Devil's Advocate persona as its system message, jurygraph's objection request as the user turn
    assert isinstance(first.messages[0], SystemMessage) and first.messages[0].text == debate_prompt("critic_strict")
    assert "Assistant 1: Answer one.\n\nAssistant 2: Answer two." in first.prompt
    assert (f"[General Public]: {pairwise_reply(8, 6, 'General Public')}\n[Critic]: {pairwise_reply(6, 8, 'Critic')}"
            in first.prompt)
    assert "[General Public]: Assistant 1: 8, Assistant 2: 6\n[Critic]: Assistant 1: 6, Assistant 2: 8" in first.prompt
    assert "Current majority: a tie" in first.prompt and "just say NO ISSUE" in first.prompt
    # the second objection hears the first one and round 2
    assert f"[{DEVIL}]: Both of you missed that Answer one is wrong." in devil.calls[1].prompt
    # turn 2: each referee's history holds round 1 and then the objection
    gp = [p for p in referees.prompts() if speaker(p) == "General Public"]
    assert history_slot(gp[1]).endswith(f"[{DEVIL}]: Both of you missed that Answer one is wrong.")
    assert [m.name for m in out["transcript"]] == ["General Public", "Critic", DEVIL] * 2 + ["General Public", "Critic"]
    assert [m.name for m in out["histories"][DEVIL]] == [None, None, DEVIL, None, None, DEVIL]
    # every referee answered in the final form every turn: a majority to object to
    assert all("Output with the following format strictly" in p for p in referees.prompts())
    assert out["verdict"]["detail"]["rounds"] == 3 and out["verdict"]["detail"]["stopped"] is None


@pytest.mark.parametrize("strategy", ["one-by-one", "simultaneous", "summarizer"])
def test_no_issue_ends_the_discussion(strategy: str) -> None:
    referees, devil = devil_panel(["The majority overrates Answer two.", "NO ISSUE"], critic_winner="2")
    out = run_devil(referees, devil, turns=4, strategy=strategy, stop_when="consensus")
    assert len(devil.calls) == 2  # after rounds 1 and 2, then NO ISSUE
    summaries = 2 if strategy == "summarizer" else 0  # the devil speaks after the round's summary
    assert len(referees.calls) == 4 + summaries
    assert f"[{DEVIL}]: The majority overrates Answer two." in devil.calls[1].prompt
    verdict = verdict_of(out)
    assert verdict is not None and verdict.detail["stopped"] == "no_issue" and verdict.detail["rounds"] == 2
    assert out["reviews"] == [{"turn": 1, "no_issue": False}, {"turn": 2, "no_issue": True}]


def test_no_issue_rule_strict_and_persona_are_debates() -> None:
    # the paper rule ends on the capitals anywhere; the strict one does not on "NO ISSUE with ..., but"
    referees, devil = devil_panel(["NO ISSUE with the facts, but the tone is off."] * 3)
    out = run_devil(referees, devil, turns=3, no_issue_rule="strict", critic="plain")
    assert len(devil.calls) == 2 and out["verdict"]["detail"]["stopped"] is None
    assert devil.calls[0].messages[0].text == debate_prompt("critic_plain")


@pytest.mark.parametrize("strategy", ["one-by-one", "simultaneous", "summarizer"])
def test_an_agreeing_panel_stops_before_the_devil_speaks(strategy: str) -> None:
    referees, devil = devil_panel([], critic_winner="1")
    out = run_devil(referees, devil, turns=3, stop_when="consensus", strategy=strategy)
    assert devil.calls == [] and len(referees.calls) == 2  # no devil, and no summary either
    assert out["verdict"]["detail"]["stopped"] == "consensus" and out["verdict"]["label"] == "1"


@pytest.mark.parametrize("strategy", ["one-by-one", "simultaneous"])
def test_mermaid_devil(strategy: str, snapshot) -> None:
    graph = create_chateval_devil(strategy=strategy, turns=3, stop_when="consensus").compile().get_graph()
    assert graph.draw_mermaid() == snapshot


# --- ReFeR with a peer discussion --------------------------------------------------------------------

TC = load_dataset("topical-chat", aspect="coherence").items[0]


def peer(name: str, first: int, later: int) -> FakeJudge:
    """A peer that rates ``first`` in its review and ``later`` in every discussion turn."""
    def respond(prompt: str, messages: Sequence[BaseMessage]) -> str:
        turn = "discussion" if "discussion among the peer reviewers" in prompt else "review"
        return f"Analysis: {name} {turn}.\nRating: {first if turn == 'review' else later}"

    return FakeJudge(respond=respond, model_name=name)


def discussion_so_far(prompt: str) -> str:
    return prompt.split("Here is the discussion among the peer reviewers so far:\n")[1].split("\n\nYou are")[0]


def test_peers_review_alone_then_discuss_one_by_one_and_the_area_chair_reads_the_final_reviews() -> None:
    models = {"peer_1": peer("peer_1", 1, 2), "peer_2": peer("peer_2", 3, 3)}
    chair = FakeJudge(respond=lambda p, m: "Analysis: settled.\nRating: 2", model_name="ac")
    out = create_refer_discussion(rounds=2, peers=2, variant="lite").compile().invoke(
        {"item": TC}, context=JuryContext(models={**models, "area_chair": chair}))
    review_1, r1_1, _ = models["peer_1"].prompts()
    review_2, r1_2, r2_2 = models["peer_2"].prompts()
    # phase 1 (ReFeR, unchanged): nobody hears anybody
    assert "discussion among" not in review_1 + review_2 and "peer_2 review" not in review_1
    # round 1, one-by-one: peer_1 hears both reviews; peer_2 hears them and peer_1's turn
    reviews = "[peer_1]: Analysis: peer_1 review.\nRating: 1\n[peer_2]: Analysis: peer_2 review.\nRating: 3"
    assert discussion_so_far(r1_1) == reviews
    assert discussion_so_far(r1_2) == reviews + "\n[peer_1]: Analysis: peer_1 discussion.\nRating: 2"
    # round 2: everything so far, in speaking order
    assert discussion_so_far(r2_2) == (reviews + "\n[peer_1]: Analysis: peer_1 discussion.\nRating: 2\n"
                                       "[peer_2]: Analysis: peer_2 discussion.\nRating: 3\n"
                                       "[peer_1]: Analysis: peer_1 discussion.\nRating: 2")
    assert r1_1.startswith(review_1.rstrip()) and "You are peer_1, one of the peer reviewers" in r1_1
    # the area chair reads the final reviews (peer_1 moved from 1 to 2), as ReFeR's phase 2
    (chair_call,) = chair.calls
    assert "First Assistant’s Evaluation: 2\n\nSecond Assistant’s Evaluation: 3" in chair_call.prompt
    assert out["verdict"]["detail"]["peers"] == {"peer_1": 2.0, "peer_2": 3.0}
    assert [m.name for m in out["transcript"]] == ["peer_1", "peer_2"] * 3 + ["area_chair"]
    # each peer's own turns keep their prompt; the others' turns are what it heard
    assert [m.name for m in out["histories"]["peer_2"]][-3:] == ["peer_1", None, "peer_2"]


def test_peer_discussion_checks_rounds() -> None:
    with pytest.raises(ValueError, match="at least one round"):
        create_refer_discussion(rounds=0)


def test_mermaid_peer_discussion(snapshot) -> None:
    builder = create_refer_discussion(rounds=2, peers=3)
    assert builder.compile().get_graph().draw_mermaid() == snapshot
    # the barrier now waits for every review before the discussion, and the area chair for its last turn
    assert builder.waiting_edges == {(("peer_1", "peer_2", "peer_3"), "peer_1_r1")}
    assert ("peer_3_r2", "area_chair") in builder.edges


# --- the command line: one declaration per option, the parameters in the manifest, the request plan ----------

def setup_of(*argv: str) -> ProtocolSetup:
    parser = argparse.ArgumentParser()
    add_protocol_arguments(parser)
    return build_protocol(parser.parse_args(list(argv)))


def test_cli_builds_the_hybrids_records_them_and_plans_their_requests() -> None:
    paper = setup_of("--protocol", "chateval", "--turns", "3")
    assert not {"stop_when", "devil"} & set(paper.params)  # a paper run's manifest is unchanged
    assert paper.requests_per_item() == 2 * 3 + 2
    stop = setup_of("--protocol", "chateval", "--turns", "3", "--stop-when", "consensus")
    assert stop.params["stop_when"] == "consensus" and stop.params["consensus_tolerance"] == 0
    assert stop.requests_per_item() == 2 * 3 * 2  # every round's judgment may be re-asked
    devil = setup_of("--protocol", "chateval", "--turns", "3", "--devil", "--critic", "plain")
    assert devil.params | {"devil": True, "critic": "plain", "no_issue_rule": "paper"} == devil.params
    assert {"devil_t1", "devil_t2"} <= set(devil.graph.nodes)
    assert devil.requests_per_item() == 2 * 3 * 2 + 2
    refer = setup_of("--protocol", "refer", "--variant", "lite", "--peer-discussion", "2")
    assert refer.params["peer_discussion"] == 2 and "peer_3_r2" in refer.graph.nodes
    assert refer.requests_per_item() == 2 * 3 * 3 + 2  # the area chair's one sample may be re-asked
    assert "peer_discussion" not in setup_of("--protocol", "refer").params


def test_cli_devil_end_to_end_at_the_local_server(openai_server, tmp_path: Path) -> None:
    def respond(request: dict, index: int) -> str:
        prompt = prompt_of(request)
        if OBJECTION in prompt:
            return "NO ISSUE"
        return pairwise_reply(8, 6) if "short and clear, Critic" in prompt else pairwise_reply(6, 8)

    server = openai_server(respond)
    out = tmp_path / "run"
    assert main(["eval", "--protocol", "chateval", "--devil", "--turns", "3", "--model", "judge", "--base-url",
                 server.base_url, "--dataset", "faireval", "--limit", "1", "--out", str(out), "--quiet",
                 "--no-calibrate"]) == 0
    assert len(server.requests) == 3  # round 1, then the devil's NO ISSUE
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parameters"]["devil"] is True and manifest["parameters"]["critic"] == "strict"


@pytest.mark.parametrize("name", ["debate/devil_chateval", "refer/discussion"])
def test_the_new_prompts_say_they_are_jurygraphs_own(name: str) -> None:
    header = (Path(__file__).parent.parent / "prompts" / f"{name}.txt").read_text(encoding="utf-8").splitlines()[0]
    assert header.startswith("#: jurygraph's own text"), header
