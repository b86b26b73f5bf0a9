"""Fidelity of D3's defaults to its released code: an item goes through the real graph and the real OpenAI client to
the local test server, and every request (system message, prompt, generation parameters) is compared with the
released prompts filled as the code fills them (``str.format`` and its f-strings), from the fixture
``data/fidelity/d3/released.json`` (extracted from github.com/abirharrasse/D3-Judge, see its ``_source``). The
anonymized transcript the jury reads is written out below as ``anonymizer.compile_anonymized_transcript`` lays it
out. The jury's identities are the one default that follows the README and the paper rather than the code: five
personas of the released pool as ``personas.get_random_personas(5, seed=42)`` draws them; ``personas="curated"``
gives the code's curated five, and then every request is the code's."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from jurygraph import EvalItem, JuryContext, verdict_of
from jurygraph.graphs.d3 import create_d3
from jurygraph.nodes.d3 import persona_pool
from jurygraph.prompts import load_json
from jurygraph.testing.fake_server import prompt_of

RELEASED = json.loads((Path(__file__).parent / "data" / "fidelity" / "d3" / "released.json").read_text("utf-8"))
SAMRE, MORE, DEFAULTS = RELEASED["samre"], RELEASED["more"], RELEASED["defaults"]
ITEM = EvalItem(id="q1", task="pairwise", question="How do I boil an egg?", response_1="Boil it for 9 minutes.",
                response_2="Put it in boiling water for 7-9 minutes, then cool it.", human={"label": "2"})
Q, A1, A2 = ITEM.question, ITEM.response_1, ITEM.response_2
SCORES = [(90, 80), (91, 81), (95, 85)]  # a steady gap of 10: SAMRE converges at the code's first chance, round 3
SUMMARIZE = "Summarize the following content"


def released_draw(n: int, seed: int) -> list[str]:
    """The identities ``personas.get_random_personas(n, seed=seed)`` returns: ``random.seed(seed)``, then
    ``random.sample(PERSONA_POOL, n)``, on the released pool."""
    random.seed(seed)
    return [p["identity"] for p in random.sample(RELEASED["personas"]["pool"], n)]


# the jury by its persona option: the default (the pool, seed 42) and the released code's curated five
JURIES = {"pool": released_draw(5, 42), "curated": SAMRE["jury_identities"]}


def system(agent: str) -> str:
    """The role prefix MetaGPT sends as the system message: D3's roles set a name, no profile and no goal."""
    return str(RELEASED["metagpt_prefix"].format(profile="", name=agent, goal=""))


def agent_of(request: dict[str, Any]) -> str:
    found = re.search(r"named (\S+), your goal", request["messages"][0]["content"])
    assert found, request["messages"][0]
    return found.group(1)


def evaluation(k: int) -> str:
    a, b = SCORES[k - 1]
    return f"EVALUATION {k}: Feedback for Advocate 1: thin. Advocate2 is better. [18, 19]\nFinal: ({a}, {b})"


class Script:
    """Replies by agent and call: defenses and summaries, the judge's evaluations, MORE's texts, the votes."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def __call__(self, request: dict[str, Any], index: int) -> str:
        agent, prompt = agent_of(request), prompt_of(request)
        summary = prompt.startswith(SUMMARIZE)
        self.counts[(agent, summary)] += 1  # type: ignore[index]
        n = self.counts[(agent, summary)]  # type: ignore[index]
        if agent.startswith("Jury"):
            return f"{agent} SUMMARY" if summary else f"Reasoning: {agent} read it.\nVote: (0, 1)"
        if agent == "Judge":
            if summary:
                return "JUDGE SUMMARY"
            return f"FEEDBACK {n}: AdvocateGroup2 is precise." if "fair, impartial judge" in prompt else evaluation(n)
        if agent == "Scorer":
            return "[15, 18] ... (88, 97) and later (1, 2)"
        return f"{'SUMMARY' if summary else 'DEFENSE'} {agent} {n}"


def check_parameters(requests: list[dict[str, Any]]) -> None:
    """MetaGPT's LLMConfig defaults reach every request: temperature 0.0, max_token 4096 (langchain-openai sends it
    as max_completion_tokens); no top_p, one reply, free text."""
    for request in requests:
        assert request["temperature"] == RELEASED["metagpt_llm"]["temperature"]
        assert request["max_completion_tokens"] == RELEASED["metagpt_llm"]["max_token"]
        assert "top_p" not in request and request.get("n", 1) == 1 and "response_format" not in request
        assert [m["role"] for m in request["messages"]] == ["system", "user"]


def sent(request: dict[str, Any]) -> tuple[str, str]:
    return request["messages"][0]["content"], request["messages"][1]["content"]


HEAD = ("=" * 60 + "\nDEBATE TRANSCRIPT (ANONYMIZED)\n" + "=" * 60 + f"\n\nQUESTION:\n{Q}\n\nCANDIDATE ANSWERS:\n"
        + "-" * 40 + f"\nDefense A's Position:\n{A1}\n\nDefense B's Position:\n{A2}\n\nDEBATE ARGUMENTS:\n" + "-" * 40)
TAIL = "\n\n" + "=" * 60 + "\nEND OF TRANSCRIPT\n" + "=" * 60


def samre_transcript() -> str:
    """The jury's transcript of the scripted three rounds, as the released anonymizer writes it."""
    rounds = []
    for r, (a, b) in enumerate(SCORES, 1):
        feedback = evaluation(r).replace("Advocate2", "Defense B")
        # the arguments' own words are anonymized too: "SUMMARY Advocate1 1" reads "SUMMARY Defense A 1"
        rounds.append(f"\n--- Round {r} ---\n\nDefense A:\nSUMMARY Defense A {r}\n\nDefense B:\nSUMMARY Defense B {r}\n"
                      f"\nJudge's Round {r} Feedback:\n{feedback}\n\nScores: ({a}, {b})\n"
                      f"Scores: Defense A: {a}, Defense B: {b}")
    return HEAD + "\n" + "\n".join(rounds) + TAIL


@pytest.mark.parametrize("personas", JURIES)
def test_samre_default_sends_the_released_requests(openai_server, personas: str) -> None:
    server = openai_server(Script())
    options = {} if personas == "pool" else {"personas": personas}
    out = create_d3(**options).compile().invoke({"item": ITEM},
                                                context=JuryContext(default=f"openai:d3@{server.base_url}"))
    requests = server.requests
    check_parameters(requests)
    expected = []
    previous: list[tuple[int, int]] = []
    for r in range(1, 4):
        heard = f"{evaluation(r - 1)}\n\nScores: ({SCORES[r - 2][0]}, {SCORES[r - 2][1]})" if r > 1 else ""
        expected += [
            (system("Advocate1"), SAMRE["advocate"].format(
                answer=A1, question=Q, opponent_answer=A2, feedback=heard,
                opponent_argument=f"SUMMARY Advocate2 {r - 1}" if r > 1 else "")),
            (system("Advocate1"), SAMRE["summarizer"].format(content=f"DEFENSE Advocate1 {r}")),
            (system("Advocate2"), SAMRE["advocate"].format(answer=A2, question=Q, opponent_answer=A1, feedback=heard,
                                                           opponent_argument=f"SUMMARY Advocate1 {r}")),
            (system("Advocate2"), SAMRE["summarizer"].format(content=f"DEFENSE Advocate2 {r}")),
            (system("Judge"), SAMRE["judge"].format(question=Q, answer1=A1, answer2=A2, current_round=r, max_rounds=5,
                                                    previous_scores=previous, defense1=f"SUMMARY Advocate1 {r}",
                                                    defense2=f"SUMMARY Advocate2 {r}")),
            (system("Judge"), SAMRE["summarizer"].format(content=f"{evaluation(r)}\n\nScores: {SCORES[r - 1]}")),
        ]
        previous = [*previous, SCORES[r - 1]]
    assert [sent(r) for r in requests[:18]] == expected  # the debate is sequential: its order is the code's
    jury = []
    context = f"Transcript: ANONYMIZED DEBATE TRANSCRIPT:\n{samre_transcript()}"
    for i, identity in enumerate(JURIES[personas], 1):
        jury += [(system(f"Jury{i}"), SAMRE["juror"].format(identity=identity, question=Q, context=context)),
                 (system(f"Jury{i}"), SAMRE["summarizer"].format(content=f"Reasoning: Jury{i} read it.\nVote: (0, 1)"))]
    assert sorted(sent(r) for r in requests[18:]) == sorted(jury)  # the jurors are independent: any order
    verdict = verdict_of(out)
    assert verdict is not None and (verdict.label, verdict.votes) == ("2", {"1": 0, "2": 5})
    assert (verdict.detail["rounds"], verdict.detail["stopped"]) == (3, "converged")


def more_transcript() -> str:
    return (HEAD + "\n\n--- Round 1 ---\n\nDefense A:\nDEFENSE Defense A_Aggregator 1\n\nDefense B:\n"
              "DEFENSE Defense B_Aggregator 1\n\nJudge's Round 1 Feedback:\nFEEDBACK 1: Defense B is precise.\n"
              "Scores: Defense A: 88, Defense B: 97" + TAIL)


@pytest.mark.parametrize("personas", JURIES)
def test_more_default_sends_the_released_requests(openai_server, personas: str) -> None:
    server = openai_server(Script())
    options = {} if personas == "pool" else {"personas": personas}
    out = create_d3(mode="more", **options).compile().invoke(
        {"item": ITEM}, context=JuryContext(default=f"openai:d3@{server.base_url}"))
    requests = server.requests
    check_parameters(requests)
    assert len(requests) == 2 * 3 + 2 + 2 + 5

    def group(side: int) -> list[tuple[str, str]]:
        answer, opponent = (A1, A2) if side == 1 else (A2, A1)
        heard = "" if side == 1 else "DEFENSE AdvocateGroup1_Aggregator 1"
        return [(system(f"AdvocateGroup{side}_Advocate{i}"), MORE["advocate"].format(
            advocate_id=i, answer=answer, question=Q, opponent_answer=opponent, opponent_argument=heard, feedback="",
            team_arguments=["", "", ""])) for i in (1, 2, 3)]

    def aggregator(side: int) -> tuple[str, str]:
        answer, opponent = (A1, A2) if side == 1 else (A2, A1)
        defenses = [f"DEFENSE AdvocateGroup{side}_Advocate{i} 1" for i in (1, 2, 3)]
        return (system(f"AdvocateGroup{side}_Aggregator"), MORE["aggregator"].format(
            answer=answer, question=Q, opponent_answer=opponent, defenses="\n".join(defenses), feedback=""))

    defenses = {"defense1": "DEFENSE AdvocateGroup1_Aggregator 1", "defense2": "DEFENSE AdvocateGroup2_Aggregator 1"}
    assert sorted(sent(r) for r in requests[0:3]) == sorted(group(1))  # a group's advocates speak at once
    assert sent(requests[3]) == aggregator(1)
    assert sorted(sent(r) for r in requests[4:7]) == sorted(group(2))
    assert sent(requests[7]) == aggregator(2)
    assert sent(requests[8]) == (system("Judge"), MORE["judge"].format(
        question=Q, answer1=A1, answer2=A2, current_round=1, total_rounds=1, previous_scores=[], **defenses))
    assert sent(requests[9]) == (system("Scorer"), MORE["scorer"].format(
        question=Q, answer1=A1, answer2=A2, current_round=1, total_rounds=1, previous_scores=[], **defenses))
    jury = [(system(f"Jury{i}"), MORE["juror"].format(identity=identity, question=Q, context=more_transcript()))
            for i, identity in enumerate(JURIES[personas], 1)]
    assert sorted(sent(r) for r in requests[10:]) == sorted(jury)
    verdict = verdict_of(out)
    assert verdict is not None and verdict.label == "2" and verdict.detail["judge"]["label"] == "2"  # (88, 97) first


def test_the_defaults_are_the_released_codes() -> None:
    samre, more = (verdict_detail(create_d3(mode=m)) for m in ("samre", "more"))
    quick = DEFAULTS["readme_quickstart"]
    assert samre["max_rounds"] == quick["samre_arch"]["n_rounds"] == DEFAULTS["BudgetConfig"]["max_rounds"]
    assert samre["epsilon"] == DEFAULTS["samre_arch"]["convergence_epsilon"]
    assert samre["convergence_window"] == DEFAULTS["check_convergence"]["window"]
    assert samre["min_rounds"] == DEFAULTS["check_convergence"]["min_rounds"]
    assert samre["token_budget"] is None  # the code's budget is compared with the 0 tokens it records per round
    assert more["advocates"] == quick["more_arch"]["n_advocates"]
    assert more["max_rounds"] == quick["more_arch"]["n_rounds"]
    for detail in (samre, more):
        assert len(detail["jury"]) == quick["samre_arch"]["n_juries"] == DEFAULTS["more_arch"]["n_juries"]
        # the README's "50 Personas: Diverse jury pool" and the paper's "random 5-persona subsets" (quoted by
        # personas.get_random_personas), with the seed of personas.py's own example, recorded
        assert [j["identity"] for j in detail["jury"]] == JURIES["pool"]
        assert (detail["personas"], detail["persona_seed"]) == ("pool", 42)
    # the released SAMRE and MORE code cycle the curated five: the option
    for mode in ("samre", "more"):
        curated = verdict_detail(create_d3(mode=mode, personas="curated"))
        assert [j["identity"] for j in curated["jury"]] == SAMRE["jury_identities"] == MORE["jury_identities"]
        assert "persona_seed" not in curated
    assert SAMRE["juror"] != MORE["juror"]  # "which advocate ... Advocate1" vs "which defense ... Defense A"


def verdict_detail(builder: Any) -> dict[str, Any]:
    """The static part of a graph's verdict detail (the options it was built with), without running a debate."""
    verdict = builder.nodes["verdict"].runnable
    out = verdict.invoke({"item": ITEM.model_dump(), "judgments": {}})
    return dict(out["verdict"]["detail"])


def test_the_persona_pool_is_the_released_one() -> None:
    assert persona_pool() == RELEASED["personas"]["pool"]
    assert load_json("d3/personas")["curated"] == RELEASED["personas"]["curated"]
    pool = {p["name"]: p["identity"] for p in RELEASED["personas"]["pool"]}
    assert [pool[name] for name in RELEASED["personas"]["curated"]] == SAMRE["jury_identities"]
