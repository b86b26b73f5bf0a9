"""Conversation items through every protocol, over HTTP to the local OpenAI fake: who heard what, the exact
prompts (snapshots), per-turn verdicts, the context budget's elision, the dry run's exact counts, the CLI's
options, show, and resuming a per-turn run.

The fixture conversations are tests/data/conversations/ (written for these tests, see tests/data/README.md).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from jurygraph import (
    JuryContext,
    calibrate,
    create_analyze_rate,
    create_chateval,
    create_debate,
    create_ensemble,
    create_faireval,
    create_geval,
    create_refer,
    create_single_agent,
)
from jurygraph.cli.app import main
from jurygraph.graphs.registry import find
from jurygraph.graphs.turns import per_turn, turns_to_judge
from jurygraph.judging.items import EvalItem
from jurygraph.llm.tokens import APPROXIMATE
from jurygraph.running.datasets import load_dataset
from jurygraph.running.rundir import read_results
from jurygraph.running.runner import run
from jurygraph.testing import FakeJudge
from jurygraph.testing.fake_server import FakeOpenAIServer, prompt_of

DATA = Path(__file__).parent / "data" / "conversations"
SCORE, PAIRWISE = DATA / "score.jsonl", DATA / "pairwise.jsonl"
SCORER_SYSTEM = "Logically think to score the following sentence."


def items(kind: str) -> dict[str, EvalItem]:
    path = SCORE if kind == "score" else PAIRWISE
    return {item.id: item for item in load_dataset(path, task=kind)}


def turn_of(prompt: str) -> int | None:
    found = re.search(r"\(turn (\d+);", prompt)
    return int(found.group(1)) if found else None


def responder(request: dict[str, Any], index: int, *, critic_objects: bool = False) -> str:
    """A reply in the form each protocol's request asks for; scores follow the turn judged (turn k: 2 + k, at most
    5; the whole conversation: 4), pairwise answers prefer Assistant 1 (7 vs 4)."""
    prompt, system = prompt_of(request), request["messages"][0]["content"]
    score = min(2 + (turn_of(prompt) or 2), 5)
    if system == SCORER_SYSTEM:
        return f"The assistant did what was asked.\n- Helpfulness: {score}"
    if system.startswith("Your role is to play a Devil"):  # DEBATE's Critic: objects once, unless told to always
        reviews = sum(m["role"] == "assistant" for m in request["messages"])
        return "The score ignores the first turn." if critic_objects or reviews == 0 else "NO ISSUE"
    if "The score of Assistant 1: [score only]" in prompt:
        return "Evaluation evidence: Assistant 1 used the tools.\nThe score of Assistant 1: 7\n" \
            "The score of Assistant 2: 4"
    if "Score of the Assistant 1: <score>" in prompt:
        return "Evaluation evidence: Assistant 1 used the tools.\nScore of the Assistant 1: 7\n" \
            "Score of the Assistant 2: 4"
    if "The score of the assistant: [score only]" in prompt:
        return f"Evaluation evidence: fine.\nThe score of the assistant: {score}"
    if "Analysis:" in prompt:  # ReFeR's peers and area chair, Analyze-Rate
        return f"Analysis: the assistant helped.\nRating: {score}"
    if "Evaluation Form (scores ONLY)" in prompt:  # G-Eval
        return str(score)
    return "I think the assistant handled the tools well."  # a ChatEval referee before its final turn


def context(server: FakeOpenAIServer, **extra: Any) -> JuryContext:
    return JuryContext(default=f"openai:judge@{server.base_url}", **extra)


def judge(graph: Any, item: EvalItem, server: FakeOpenAIServer, **extra: Any) -> dict[str, Any]:
    return graph.compile().invoke({"item": item}, context=context(server, **extra))


def sent(server: FakeOpenAIServer) -> list[list[dict[str, Any]]]:
    """The messages of every request the server received (role and content), sorted: parallel agents' requests
    arrive in any order."""
    return sorted(([{"role": m["role"], "content": m["content"]} for m in r["messages"]] for r in server.requests),
                  key=json.dumps)


# --- what every protocol's judges read -------------------------------------------------------------------------

RENDERED_FLIGHT = [
    "### System (instructions to the assistant):\nYou are a travel agent. Book only what the user confirms.",
    '### Assistant:\n[calls search_flights with {"date": "2025-03-03", "from": "BGO", "to": "OSL"} (call call_1)]',
    "### Tool result of search_flights (call call_1):\n[{\"flight\": \"SK262\"",
    "### Tool result of book_flight (call call_2):",
    "### Agent graph steps (nodes per superstep):\nagent → tools → agent → agent → tools → agent",
]

SCORE_PROTOCOLS = {
    "chateval": lambda: create_chateval(), "single": lambda: create_single_agent(),
    "ensemble": lambda: create_ensemble(), "debate": lambda: create_debate(), "refer": lambda: create_refer(samples=3),
    "geval": lambda: create_geval(n=2), "analyze-rate": lambda: create_analyze_rate(n=2),
}
PAIRWISE_PROTOCOLS = {
    "chateval": lambda: create_chateval(), "single": lambda: create_single_agent(),
    "ensemble": lambda: create_ensemble(), "faireval": lambda: create_faireval(k=1, bpc=False),
}


@pytest.mark.parametrize("protocol", list(SCORE_PROTOCOLS))
def test_every_protocol_scores_a_conversation_with_its_tool_calls(protocol: str, openai_server, snapshot) -> None:
    server = openai_server(responder)
    out = judge(SCORE_PROTOCOLS[protocol](), items("score")["flight"], server)
    assert not out["verdict"]["missing"] and out["verdict"]["score"] == 4
    judging = [m for m in sent(server) if "Book only what the user confirms" in m[-1]["content"] or
               any("Book only what the user confirms" in x["content"] for x in m)]
    assert judging, "no request showed the conversation"
    for messages in judging:
        text = "\n".join(x["content"] for x in messages)
        for piece in RENDERED_FLIGHT:
            assert piece in text, (protocol, piece)
    assert sent(server) == snapshot


@pytest.mark.parametrize("protocol", list(PAIRWISE_PROTOCOLS))
def test_every_pairwise_protocol_compares_two_continuations(protocol: str, openai_server, snapshot) -> None:
    server = openai_server(responder)
    out = judge(PAIRWISE_PROTOCOLS[protocol](), items("pairwise")["refund"], server)
    assert out["verdict"]["label"] == "1"
    prompt = prompt_of(server.requests[-1])
    for piece in ("[The Start of the Conversation So Far]", "[The Start of Assistant 1’s Continuation]",
                  "[calls lookup_order with {\"order\": 5521} (call r1)]", "Refunds are handled by our managers.",
                  "[The End of Assistant 2’s Continuation]", "agent → tools → agent"):
        assert piece in prompt, piece
    # the shared prefix is shown once, before the continuations
    assert prompt.count("I want a refund for order 5521") == 1
    assert sent(server) == snapshot


def test_chateval_referees_hear_each_other_about_the_conversation(openai_server) -> None:
    server = openai_server(responder)
    out = judge(create_chateval(), items("score")["tutor"], server)
    prompts = [prompt_of(r) for r in server.requests]
    assert len(prompts) == 4  # 2 referees x 2 turns, one by one
    assert "You are now General Public" in prompts[0] and "You are now Critic" in prompts[1]
    # one-by-one: the Critic heard General Public's turn-1 words; in turn 2 General Public heard the Critic's
    assert "[General Public]: I think the assistant handled the tools well." in prompts[1]
    assert "[Critic]: I think the assistant handled the tools well." in prompts[2]
    assert all("### User:\nWhat is 15% of 80?" in p for p in prompts)
    assert out["verdict"]["method"] == "mean" and out["verdict"]["score"] == 4


def test_debate_critic_reviews_the_scorer_on_a_conversation(openai_server) -> None:
    server = openai_server(responder)
    out = judge(create_debate(), items("score")["weather"], server)
    systems = [r["messages"][0]["content"] for r in server.requests]
    assert [s == SCORER_SYSTEM for s in systems] == [True, False, True, False]  # Scorer, Critic, Scorer, Critic
    first_review = prompt_of(server.requests[1])
    assert "[calls get_forecast with {\"city\": \"Rom\"} (call w2)]" in first_review
    assert "### Tool result of get_forecast (call w2):\nerror: unknown city 'Rom'" in first_review
    assert "The assistant did what was asked.\n- Helpfulness: 4" in first_review  # the Scorer's reply
    revision = server.requests[2]["messages"]
    assert "The Critic's feedback on your score:\nThe score ignores the first turn." in revision[-1]["content"]
    assert out["verdict"]["detail"]["ended"] == "no_issue" and out["verdict"]["score"] == 4


def test_refer_area_chair_reads_the_conversation_and_the_peers(openai_server) -> None:
    server = openai_server(responder)
    out = judge(create_refer(samples=3), items("score")["flight"], server, rubric=None)
    chair = [r for r in server.requests if r.get("n") == 3]
    assert len(server.requests) == 4 and len(chair) == 1
    prompt = prompt_of(chair[0])
    assert "First Assistant’s Evaluation: 4" in prompt and "Third Assistant’s Evaluation: 4" in prompt
    assert "Evaluation Criteria:\n\nHelpfulness (1-5) - how well the assistant serves the user" in prompt
    assert out["verdict"]["score"] == 4


def test_calibration_swaps_the_two_continuations(openai_server) -> None:
    server = openai_server(responder)
    item = items("pairwise")["refund"]
    out = judge(calibrate(create_single_agent()), item, server)
    prompts = sorted((prompt_of(r) for r in server.requests), key=lambda p: p.index("Refunds are handled"))
    swapped, original = prompts
    # in the swapped order the refusal is Assistant 1's continuation
    assert swapped.index("Refunds are handled") < swapped.index("[The End of Assistant 1’s Continuation]")
    assert original.index("Refunds are handled") > original.index("[The Start of Assistant 2’s Continuation]")
    # each order prefers its Assistant 1: mapped back, the orders cancel out
    assert out["verdict"]["label"] == "tie" and out["verdict"]["score_1"] == out["verdict"]["score_2"]


# --- rubrics ---------------------------------------------------------------------------------------------------


def test_the_aspect_chooses_the_rubric_and_a_file_replaces_it(openai_server) -> None:
    server = openai_server(responder)
    flight = items("score")["flight"]
    judge(create_single_agent(), flight.model_copy(update={"aspect": "tool_use"}), server)
    assert "correctness of tool use of the AI assistant in the conversation" in prompt_of(server.requests[-1])
    judge(create_single_agent(), flight.model_copy(update={"aspect": "safety"}), server)
    assert "no risky or irreversible action through tools" in prompt_of(server.requests[-1])
    judge(create_single_agent(), flight, server, rubric="Politeness: thanks the user and never interrupts.")
    prompt = prompt_of(server.requests[-1])
    assert "Overall quality: Politeness: thanks the user and never interrupts." in prompt
    assert "how well the assistant serves the user" not in prompt
    with pytest.raises(ValueError, match="item 'flight': no built-in conversation rubric for aspect 'politeness'"):
        judge(create_single_agent(), flight.model_copy(update={"aspect": "politeness"}), server)


# --- per turn ----------------------------------------------------------------------------------------------------


def test_per_turn_judges_each_turn_in_its_context(openai_server) -> None:
    server = openai_server(responder)
    tutor = items("score")["tutor"]
    assert turns_to_judge(tutor) == [1, 2, 3]
    out = judge(per_turn(create_single_agent()), tutor, server)
    prompts = {turn_of(p): p for p in map(prompt_of, server.requests)}
    assert sorted(prompts) == [1, 2, 3]
    # turn 1 is judged with what came before it only, and marked; nothing after it is shown
    assert "[The Start of the Turn to Judge]\n\n### Assistant:\n15% of 80 is 12" in prompts[1]
    assert "13.2" not in prompts[1]
    assert "### Assistant:\n15% of 80 is 12" in prompts[3]
    assert prompts[3].count("[The Start of the Turn to Judge]\n\n###") == 1
    assert "[The Start of the Turn to Judge]\n\n### Assistant:\n0.15 x 80 x 1.1 = 13.2." in prompts[3]
    verdict = out["verdict"]
    assert [t["score"] for t in verdict["detail"]["turns"]] == [3, 4, 5]
    assert verdict["score"] == 4 and verdict["method"] == "per turn: mean of 3 turns"
    worst = judge(per_turn(create_single_agent(), aggregate="min"), tutor, server)["verdict"]
    assert worst["score"] == 3 and worst["method"] == "per turn: lowest of 3 turns"


def test_per_turn_on_pairwise_judges_the_turns_both_assistants_have(openai_server) -> None:
    server = openai_server(responder)
    haiku, refund = items("pairwise")["haiku"], items("pairwise")["refund"]
    assert turns_to_judge(haiku) == [1, 2] and turns_to_judge(refund) == [1]
    out = judge(per_turn(create_single_agent()), haiku, server)
    turn_two = next(p for p in map(prompt_of, server.requests) if turn_of(p) == 2)
    for n in (1, 2):  # each side's turn 2 marked, with its own turn 1 before it
        block = turn_two.split(f"[The Start of Assistant {n}’s Conversation]")[1].split(f"[The End of Assistant {n}")[0]
        assert block.count("[The Start of the Turn to Judge]") == 1
        assert block.index("Write a haiku") < block.index("[The Start of the Turn to Judge]")
    assert [t["label"] for t in out["verdict"]["detail"]["turns"]] == ["1", "1"]
    assert out["verdict"]["label"] == "1" and out["verdict"]["score_1"] == 7


def test_a_turn_that_cannot_be_read_is_missing_and_counted(openai_server) -> None:
    def unreadable_turn_two(request: dict[str, Any], index: int) -> str:
        # the turn's request and its one re-ask (whose last message is the format reminder)
        judged = any(turn_of(str(m["content"])) == 2 for m in request["messages"])
        return "I cannot say." if judged else responder(request, index)

    server = openai_server(unreadable_turn_two)
    out = judge(per_turn(create_single_agent()), items("score")["tutor"], server)
    verdict = out["verdict"]
    assert verdict["score"] == 4 and verdict["detail"]["turns_missing"] == 1  # the mean of turns 1 and 3
    assert "2" in verdict["detail"]["missing_turns"] and verdict["detail"]["turns"][1]["missing"]


# --- the context budget --------------------------------------------------------------------------------------------


def long_conversation(turns: int = 12) -> EvalItem:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Help me plan a week of dinners."}]
    for day in range(1, turns + 1):
        messages += [{"role": "assistant", "content": f"Day {day}: a dish with {'vegetables ' * 30}and rice."},
                     {"role": "user", "content": f"Fine, now day {day + 1}."}]
    messages.append({"role": "assistant", "content": "That completes the plan."})
    return EvalItem(id="dinners", task="score", scale={"low": 1, "high": 5}, messages=messages, turn=turns + 1)


def conversation_part(prompt: str) -> str:
    return prompt[:prompt.index("[The End of the Conversation]") + len("[The End of the Conversation]")]


def test_a_long_conversation_is_elided_in_the_middle_and_says_so(openai_server) -> None:
    server = openai_server(responder)
    item = long_conversation()
    judge(create_single_agent(), item, server)
    whole = prompt_of(server.requests[-1])
    assert "elided" not in whole and APPROXIMATE.text(conversation_part(whole)) > 600
    judge(create_single_agent(), item, server, max_context_tokens=300)
    shown = conversation_part(prompt_of(server.requests[-1]))
    assert APPROXIMATE.text(shown) <= 300
    found = re.findall(r"\[… (\d+) messages elided …\]", shown)
    assert len(found) == 1 and int(found[0]) > 10  # one run, in the middle
    assert shown.index("Help me plan a week of dinners.") < shown.index("elided")  # the task stays
    assert "Day 1:" in shown  # the messages next to the task are kept first
    # the turn judged and the user message it answers are whole
    assert "### User:\nFine, now day 13.\n\n[The Start of the Turn to Judge]\n\n### Assistant:\nThat completes the " \
           "plan.\n\n[The End of the Turn to Judge]" in shown
    with pytest.raises(ValueError, match=r"item 'dinners': the conversation needs .* over the budget of 20"):
        judge(create_single_agent(), item, server, max_context_tokens=20)


# --- the command line ------------------------------------------------------------------------------------------


def eval_args(server: FakeOpenAIServer, out: Path, protocol: str, kind: str = "score", *extra: str) -> list[str]:
    data = ["--dataset", str(SCORE), "--task", "score", "--aspect", "helpfulness"] if kind == "score" else \
        ["--dataset", str(PAIRWISE), "--task", "pairwise"]
    return ["eval", "--protocol", protocol, *data, "--model", "judge", "--base-url", server.base_url, "--quiet",
            "--out", str(out), *extra]


def dry_run(capsys: pytest.CaptureFixture[str], args: list[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main([*args, "--dry-run", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


CLI_CASES = [("chateval", "score", ()), ("chateval", "score", ("--per-turn",)), ("single", "score", ("--per-turn",)),
             ("ensemble", "score", ()), ("refer", "score", ("--samples", "3")), ("geval", "score", ("--per-turn",)),
             ("analyze-rate", "score", ()), ("chateval", "pairwise", ()), ("single", "pairwise", ("--per-turn",)),
             ("ensemble", "pairwise", ("--no-calibrate",)), ("single", "pairwise", ("--calibrate", "bpc")),
             ("chateval", "score", ("--max-context-tokens", "300")), ("chateval", "score", ("--devil",)),
             ("refer", "score", ("--peer-discussion", "1", "--samples", "2"))]


@pytest.mark.parametrize(("protocol", "kind", "extra"), CLI_CASES)
def test_the_dry_run_counts_exactly_what_a_run_sends(protocol: str, kind: str, extra: tuple[str, ...],
                                                   openai_server, tmp_path: Path, capsys) -> None:
    server = openai_server(responder)
    args = eval_args(server, tmp_path / "run", protocol, kind, *extra, "--no-cache")
    planned = dry_run(capsys, args)
    assert server.requests == []  # a dry run sends nothing
    assert main(args) == 0
    # the devil's advocate (DEBATE's Critic persona) always objects here: the most a plan with a loop sends
    expected = planned["requests"]["max"] if isinstance(planned["requests"], dict) else planned["requests"]
    assert expected == len(server.requests)
    records = read_results(tmp_path / "run")
    assert all(r["status"] == "ok" and not r["verdict"]["missing"] for r in records)


@pytest.mark.parametrize("critic_objects", [False, True])
def test_the_dry_run_bounds_debate_on_conversations(critic_objects: bool, openai_server, tmp_path: Path,
                                                    capsys) -> None:
    server = openai_server(lambda request, index: responder(request, index, critic_objects=critic_objects))
    args = eval_args(server, tmp_path / "run", "debate", "score", "--per-turn", "--no-cache")
    planned = dry_run(capsys, args)["requests"]
    assert main(args) == 0
    # the Critic never objecting is a run near the fewest (one objection each: +2); always objecting is the most
    assert len(server.requests) == (planned["max"] if critic_objects else planned["min"] + 2 * 7)


def test_per_turn_results_show_and_metaeval(openai_server, tmp_path: Path, capsys) -> None:
    server = openai_server(responder)
    out = tmp_path / "run"
    assert main(eval_args(server, out, "single", "score", "--per-turn")) == 0
    records = {r["id"]: r for r in read_results(out)}
    # the results line carries the per-turn verdicts; an item with its own turn is judged at that turn only
    assert [t["score"] for t in records["tutor"]["verdict"]["detail"]["turns"]] == [3, 4, 5]
    assert [t["turn"] for t in records["flight-turn-2"]["verdict"]["detail"]["turns"]] == [2]
    assert records["flight-turn-2"]["turn"] == 2
    capsys.readouterr()
    assert main(["show", str(out), "tutor"]) == 0
    shown = capsys.readouterr().out
    assert "conversation:\n    [The Start of the Conversation]\n    \n    ### User:\n    What is 15% of 80?" in shown
    assert "per turn (mean):\n  turn 1: score 3.0\n  turn 2: score 4.0\n  turn 3: score 5.0" in shown
    assert "-- turn_1 --" in shown
    assert main(["show", str(out), "flight"]) == 0
    shown = capsys.readouterr().out
    assert '    ### Assistant:\n    [calls book_flight with {"flight": "SK262"} (call call_2)]' in shown
    assert "    ### Tool result of book_flight (call call_2):\n    {\"status\": \"confirmed\"" in shown
    assert main(["metaeval", str(out), "--per-turn", "--json", "--resamples", "0"]) == 0
    result = json.loads(capsys.readouterr().out)
    agreement = result["methods"][0]["agreement"]["helpfulness"]
    # 3 + 2 + 1 labelled turns of the three per-turn conversations (flight-turn-2 has no per-turn labels)
    assert agreement["n"] == 6
    assert main(["metaeval", str(out), "--json", "--resamples", "0"]) == 0  # the conversations' verdicts
    assert json.loads(capsys.readouterr().out)["methods"][0]["agreement"]["helpfulness"]["n"] == 4


def test_pairwise_per_turn_labels_in_metaeval(openai_server, tmp_path: Path, capsys) -> None:
    server = openai_server(responder)
    out = tmp_path / "run"
    assert main(eval_args(server, out, "single", "pairwise", "--per-turn", "--no-calibrate")) == 0
    capsys.readouterr()
    assert main(["metaeval", str(out), "--per-turn", "--json", "--resamples", "0"]) == 0
    labels = json.loads(capsys.readouterr().out)["methods"][0]["agreement"]["pairwise"]
    assert labels["n"] == 2 and labels["accuracy"] == 0.5  # haiku turn 1 "1" agrees, turn 2 "tie" does not


def test_conversation_options_are_checked_before_any_request(openai_server, tmp_path: Path, capsys) -> None:
    server = openai_server(responder)
    rubric = tmp_path / "rubric.txt"
    rubric.write_text("#: my rubric\nPoliteness: thanks the user.\n", encoding="utf-8")
    plain = ["eval", "--protocol", "single", "--dataset", "faireval", "--limit", "2", "--model", "judge",
             "--base-url", server.base_url, "--quiet", "--out", str(tmp_path / "plain")]
    for flags in (["--rubric", str(rubric)], ["--per-turn"], ["--max-context-tokens", "100"]):
        assert main([*plain, *flags]) == 2
        assert "for conversation items (with messages)" in capsys.readouterr().err
    args = eval_args(server, tmp_path / "run", "single")
    assert main([*args, "--turn-aggregate", "min"]) == 2
    assert "--turn-aggregate combines the verdicts of --per-turn" in capsys.readouterr().err
    assert main([*args, "--rubric", str(tmp_path / "missing.txt")]) == 2
    assert "--rubric" in capsys.readouterr().err
    assert main([*args, "--max-context-tokens", "0"]) == 2
    assert server.requests == []
    assert main([*args, "--rubric", str(rubric), "--limit", "1"]) == 0
    assert "Politeness: thanks the user." in prompt_of(server.requests[-1])
    assert "my rubric" not in prompt_of(server.requests[-1])
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["parameters"]["rubric"] == str(rubric)


def test_an_item_over_the_budget_fails_alone_with_the_reason(openai_server, tmp_path: Path) -> None:
    server = openai_server(responder)
    out = tmp_path / "run"
    assert main(eval_args(server, out, "single", "score", "--max-context-tokens", "100")) == 1
    records = {r["id"]: r for r in read_results(out)}
    # flight-turn-2's task and turn 2 alone need more than 100 tokens; flight's middle is elided to fit
    assert {key for key, r in records.items() if r["status"] != "ok"} == {"flight-turn-2"}
    assert "item 'flight-turn-2': the conversation needs" in records["flight-turn-2"]["error"]
    assert "over the budget of 100 (--max-context-tokens)" in records["flight-turn-2"]["error"]
    flight = next(prompt_of(r) for r in server.requests if "Book only what the user confirms" in prompt_of(r))
    assert "messages elided …]" in flight


def test_a_per_turn_run_resumes_with_the_turns_left(tmp_path: Path) -> None:
    def reply(prompt: str, messages: Any) -> str:
        return responder({"messages": [{"role": "user", "content": prompt}]}, 0)

    broken = FakeJudge(respond=reply, fail_when=lambda prompt: turn_of(prompt) == 3)
    tutor = [items("score")["tutor"]]
    graph = per_turn(create_single_agent())
    summary = run(graph, tutor, out_dir=tmp_path, context=JuryContext(default=broken), cache=False, progress=False)
    assert summary.failed == 1 and sorted(turn_of(c.prompt) for c in broken.calls) == [1, 2, 3]
    fixed = FakeJudge(respond=reply)
    summary = run(graph, tutor, out_dir=tmp_path, context=JuryContext(default=fixed), cache=False, resume=True,
                  progress=False)
    assert summary.done == 1
    # turns 1 and 2 came from the item's checkpoint: only turn 3 was asked again
    assert [turn_of(c.prompt) for c in fixed.calls] == [3]
    [record] = read_results(tmp_path)
    assert [t["score"] for t in record["verdict"]["detail"]["turns"]] == [3, 4, 5]


def test_the_docs_show_the_rendering_as_it_is() -> None:
    from jurygraph.nodes.conversation import conversation_text

    docs = (Path(__file__).parents[1] / "docs" / "CONVERSATIONS.md").read_text(encoding="utf-8")
    shown = docs.split("```text\n", 1)[1].split("\n```", 1)[0]
    assert shown == conversation_text(items("score")["flight-turn-2"], 150)


def test_doubt_signals_of_a_calibrated_per_turn_panel_read_each_order_back(openai_server) -> None:
    from jurygraph.judging.doubt import doubt_signals
    from jurygraph.measuring.members import in_original_order

    server = openai_server(responder)
    out = judge(per_turn(calibrate(create_ensemble())), items("pairwise")["haiku"], server)
    assert "turn_2/swapped_order/Critic" in out["judgments"] and out["verdict"]["label"] == "tie"

    def said(one: float, two: float) -> dict[str, Any]:
        return {"agent": "x", "kind": "pairwise", "score_1": one, "score_2": two, "label": "1" if one > two else "2"}

    # A prefers whichever answer it is shown first; B prefers answer 1, C answer 2, in both orders
    judgments = {f"turn_1/{order}/{member}": said(*scores) for member, pairs in {
        "A": ((7, 4), (7, 4)), "B": ((7, 4), (4, 7)), "C": ((4, 7), (7, 4))}.items()
        for order, scores in zip(("original_order", "swapped_order"), pairs, strict=True)}
    state = {"item": {"task": "pairwise"}, "judgments": judgments, "verdict": {"kind": "pairwise", "label": "tie"}}
    # read back in the original order: A ties, B says 1, C says 2 (read as shown, A would say 1, B and C tie)
    assert doubt_signals(state)["agreement"] == round(1 / 3, 6)
    assert in_original_order("turn_1/swapped_order", said(4, 7))["score_1"] == 7


def test_a_rerun_with_the_cache_pays_for_no_turn_twice(openai_server, tmp_path: Path) -> None:
    server = openai_server(responder)
    cache = tmp_path / "cache.sqlite"
    assert main(eval_args(server, tmp_path / "a", "chateval", "score", "--per-turn", "--cache", str(cache))) == 0
    paid = len(server.requests)
    # 7 turns x 2 referees x 2 discussion turns, less the calls flight-turn-2 shares with flight's turn 2 (those
    # the cache already held when they were asked)
    assert 20 <= paid <= 28
    assert main(eval_args(server, tmp_path / "b", "chateval", "score", "--per-turn", "--cache", str(cache))) == 0
    assert len(server.requests) == paid
    verdicts = [{r["id"]: r["verdict"] for r in read_results(tmp_path / run)} for run in ("a", "b")]
    assert verdicts[0] == verdicts[1]


def test_a_per_turn_run_keeps_the_ledger_s_books_and_each_item_s_reserve_is_its_own(
        openai_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ledger's invariants on conversation items judged per turn: the spend is what the server answered, item by
    item; near the limit (here from the start) each item's reserve is rendered from the item itself, every turn it
    has (ChatEval: 4 requests a turn), and holds what the item spent."""
    from jurygraph.running.budget import RESERVE_MARGIN, Budget
    from jurygraph.running.ledger import Ledger
    from tests.test_ledger import assert_books_balance

    given: dict[str, Any] = {}
    reserve_for = Budget.reserve_for

    def spied(self: Budget, item: EvalItem, meter: Any) -> Any:
        given[item.id] = found = reserve_for(self, item, meter)
        return found

    monkeypatch.setattr(Budget, "reserve_for", spied)
    server = openai_server(responder)
    out = tmp_path / "run"
    # 400k tokens: within 20 of the largest reserves (~25k), so every item is rendered, and all of them fit
    assert main(eval_args(server, out, "chateval", "score", "--per-turn", "--no-cache", "--max-total-tokens",
                          "400000", "--concurrency", "1")) == 0
    assert_books_balance(out, server, priced=False)
    spent = {key[0]: totals for key, totals in Ledger(out / "ledger.sqlite").grouped("item")}
    for item in items("score").values():
        turns = len(turns_to_judge(item))
        assert spent[item.id].requests == 4 * turns, item.id
        reserve = given[item.id]
        assert reserve.requests == round(4 * turns * RESERVE_MARGIN), item.id
        assert reserve.input_tokens >= spent[item.id].input_tokens and \
            reserve.output_tokens >= spent[item.id].output_tokens, item.id
    assert {item_id: len(turns_to_judge(item)) for item_id, item in items("score").items()} == {
        "flight": 2, "tutor": 3, "weather": 1, "flight-turn-2": 1}
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    largest = max(given.values(), key=lambda reserve: reserve.tokens)
    assert manifest["budget"]["reserve_per_item"]["requests"] == largest.requests
    # the plan: one judgment's (every re-ask included) times the most turns an item has (tutor's 3)
    chateval = find("chateval")
    assert manifest["requests_per_item"] == chateval.plan(chateval.create().params) * 3


def test_a_per_turn_batch_run_takes_the_protocol_s_rounds_whatever_the_turns(openai_server, tmp_path: Path) -> None:
    """--per-turn --batch: the turns are judged in one superstep (Send), so each round's batch holds every turn's
    next call and the run takes the protocol's rounds (ChatEval one-by-one: 4), not rounds times turns. Each round
    waits for its batch, polled every --batch-poll seconds (default 60: a smoke run against the fake, whose batches
    move one status per poll, then takes about two polls a round); the verdicts are the online run's and the spend is
    what the server answered."""
    from tests.test_ledger import assert_books_balance

    online, batched = openai_server(responder), openai_server(responder)
    assert main(eval_args(online, tmp_path / "online", "chateval", "score", "--per-turn")) == 0
    assert main(eval_args(batched, tmp_path / "batch", "chateval", "score", "--per-turn", "--batch", "--batch-poll",
                          "0.01")) == 0
    assert batched.requests == [] and len(batched.batches.created) == 4
    assert max(len(turns_to_judge(item)) for item in items("score").values()) == 3
    verdicts = {r["id"]: r["verdict"] for r in read_results(tmp_path / "online")}
    assert {r["id"]: r["verdict"] for r in read_results(tmp_path / "batch")} == verdicts
    assert_books_balance(tmp_path / "batch", batched, batch=True, priced=False)


def test_aspect_chooses_the_rubric_of_pairwise_conversations(openai_server, tmp_path: Path, capsys) -> None:
    """--aspect on pairwise data: conversations have a rubric to choose (a table's rows and MT-Bench's votes alike);
    preferences between two texts have none, and stay refused."""
    server = openai_server(responder)
    out = tmp_path / "run"
    assert main([*eval_args(server, out, "single", "pairwise", "--no-calibrate"), "--aspect", "tool_use"]) == 0
    prompts = [prompt_of(request) for request in server.requests]
    assert len(prompts) == 2 and all("correctness of tool use" in p and "helpfulness" not in p for p in prompts)
    assert {r["aspect"] for r in read_results(out)} == {"tool_use"}
    capsys.readouterr()
    assert main(["metaeval", str(out), "--json", "--resamples", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["methods"][0]["agreement"]["pairwise"]["n"] == 2
    mt_bench = load_dataset(Path(__file__).parent / "data" / "mt_bench_human" / "human_judgments.jsonl",
                            aspect="safety")
    assert {item.aspect for item in mt_bench} == {"safety"}
    with pytest.raises(ValueError, match="--aspect tool_use applies to score datasets and to conversations"):
        load_dataset("faireval", aspect="tool_use")


def test_a_protocol_judges_the_conversations_its_spec_says(openai_server, tmp_path: Path, capsys) -> None:
    """Which conversation items a protocol has templates for is its spec's (``conversations``): every built-in says
    so; a protocol whose spec gives none for score items has their conversations refused before any request, naming
    the protocols that take them (as --escalate-protocol too); one whose spec does not say is not checked."""
    from jurygraph.graphs.registry import builtin
    from jurygraph.graphs.spec import ProtocolSpec

    # D3 judges two plain answers: conversation items are refused before any request
    assert {name: spec.conversations for name, spec in builtin().items()} == {
        "chateval": ("pairwise", "score"), "debate": ("score",), "refer": ("score",), "single": ("pairwise", "score"),
        "ensemble": ("pairwise", "score"), "geval": ("score",), "analyze-rate": ("score",), "d3": ()}
    with pytest.raises(ValueError, match=r"conversation templates for \['pairwise'\] items, which it does not judge"):
        ProtocolSpec("x", create_single_agent, tasks=("score",), conversations=("pairwise",))
    module = tmp_path / "texts_only.py"
    module.write_text("from jurygraph.graphs.single import create_single_agent\n"
                      "from jurygraph.graphs.spec import Built, ProtocolSpec\n"
                      "SPEC = ProtocolSpec('texts-only', create_single_agent, tasks=('score',), conversations=(),\n"
                      "                    build=lambda values: Built(create_single_agent(), {}))\n"
                      "UNSAID = ProtocolSpec('unsaid', create_single_agent, tasks=('score',),\n"
                      "                      build=lambda values: Built(create_single_agent(), {}))\n",
                      encoding="utf-8")
    server = openai_server(responder)
    capsys.readouterr()
    assert main(eval_args(server, tmp_path / "refused", f"{module}:SPEC")) == 2
    err = capsys.readouterr().err
    assert f"--protocol {module}:SPEC has no conversation templates for score items (item 'flight' is a " \
           "conversation); for them use chateval, debate, refer, single, ensemble, geval, analyze-rate" in err
    assert main(eval_args(server, tmp_path / "escalated", "chateval", "score", "--escalate-when", "spread>1",
                          "--escalate-protocol", f"{module}:SPEC")) == 2
    assert f"--escalate-protocol {module}:SPEC has no conversation templates" in capsys.readouterr().err
    assert server.requests == []
    assert main(eval_args(server, tmp_path / "unsaid", f"{module}:UNSAID", "score", "--limit", "1")) == 0
    assert len(server.requests) == 1  # the single agent's conversation template, as its nodes render it
