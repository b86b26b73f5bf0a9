"""Fidelity of ChatEval's defaults, and of its single-agent and ensemble baselines: an item goes through the
real graph and the real OpenAI client to the local test server, and every request's text and generation
parameters are compared with the paper's prompts and the released code's settings, stored as fixtures
with their source (tests/data/fidelity/SOURCES.md). The verdict is checked on scripted replies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jurygraph import EvalItem, JuryContext, create_chateval, create_ensemble, create_single_agent, verdict_of
from jurygraph.cli import main
from jurygraph.llm.models import parse_gen
from jurygraph.running.datasets import load_faireval
from jurygraph.testing.fake_server import prompt_of

FIXTURES = Path(__file__).parent / "data" / "fidelity"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


PAPER_TEMPLATE = fixture("chateval_faireval_template.txt").rstrip("\n")
FINAL_PROMPT = fixture("chateval_final_prompt.txt").rstrip("\n")
# the YAML block keeps one newline after "New summary:"; jurygraph's prompt files end at the text
SUMMARIZER = fixture("chateval_summarizer.txt").rstrip("\n")
SINGLE_AGENT = fixture("chateval_single_agent.txt").rstrip("\n")
SETTINGS = json.loads(fixture("chateval_settings.json"))
PERSONAS: dict[str, str] = SETTINGS["personas"]

ITEM = EvalItem(id="q1", task="pairwise", question="How do I boil an egg?", response_1="Boil it for 9 minutes.",
                response_2="Put it in boiling water for 7-9 minutes, then cool it.", human={"label": "2"})
# the case: referees scoring 8-7 and 6-9 have means 7.0 and 8.0, but vote "1" and "2"
FINAL_SCORES = {"General Public": (8, 7), "Critic": (6, 9)}


def referee_prompt(name: str, history: str, final: bool) -> str:
    """The paper's FairEval template with the slots filled; the code's answer form on the final turn."""
    text = (PAPER_TEMPLATE.replace("{source_text}", ITEM.question or "")
            .replace("{compared_text_one}", ITEM.response_1 or "").replace("{compared_text_two}", ITEM.response_2 or "")
            .replace("{chat_history}", history).replace("{role_description}", PERSONAS[name])
            .replace("{agent_name}", name))
    return f"{text}\n\n{FINAL_PROMPT}" if final else text


def speaker_of(prompt: str) -> str:
    for name in PERSONAS:
        if prompt.endswith(f"clear, {name} !") or f"clear, {name} !\n\n" in prompt:
            return name
    return "Summarizer" if "New summary:" in prompt else "Single Agent"


class Script:
    """Replies by speaker: 'NAME turn N' while discussing, FINAL_SCORES on the final turn, 'SUMMARY k'."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def __call__(self, request: dict[str, Any], index: int) -> str:
        prompt = prompt_of(request)
        name = speaker_of(prompt)
        self.counts[name] = self.counts.get(name, 0) + 1
        if name == "Summarizer":
            return f"SUMMARY {self.counts[name]}"
        if "The score of Assistant 2: [score only]" in prompt:
            s1, s2 = FINAL_SCORES.get(name, (6, 9))
            return (f"Evaluation evidence: {name} weighed both.\n"
                    f"The score of Assistant 1: {s1}\nThe score of Assistant 2: {s2}")
        return f"{name} turn {self.counts[name]}"


def assert_chateval_settings(requests: list[dict[str, Any]], role: str = "referee") -> None:
    """Temperature 0 and 512 max tokens (langchain-openai sends max_tokens as max_completion_tokens), free
    text (no JSON schema), one reply per request."""
    expected = SETTINGS[role]
    for request in requests:
        assert request["temperature"] == expected["temperature"]
        assert request["max_completion_tokens"] == expected["max_tokens"]
        assert "response_format" not in request and request.get("n", 1) == 1
        assert "top_p" not in request  # the configs set none: the provider's default


def judge(graph: Any, server: Any, **context: Any) -> dict[str, Any]:
    ctx = JuryContext(default=f"openai:judge@{server.base_url}", **context)
    return graph.compile().invoke({"item": ITEM}, context=ctx)


def test_defaults_are_the_papers() -> None:
    defaults = SETTINGS["defaults"]
    graph = create_chateval()
    nodes = set(graph.nodes)
    assert nodes == {"general_public_t1", "critic_t1", "general_public_t2", "critic_t2", "aggregate"}
    assert len(defaults["referees"]) == 2 and defaults["turns"] == 2 and defaults["strategy"] == "one-by-one"
    assert defaults["aggregate"] == "average"


def test_one_by_one_default_sends_the_papers_prompts_and_settings(openai_server) -> None:
    server = openai_server(Script())
    out = judge(create_chateval(), server)
    prompts = [prompt_of(r) for r in server.requests]
    gp1, c1 = "[General Public]: General Public turn 1", "[Critic]: Critic turn 1"
    assert prompts == [
        referee_prompt("General Public", "", final=False),
        referee_prompt("Critic", gp1, final=False),
        referee_prompt("General Public", f"{gp1}\n{c1}", final=True),
        referee_prompt("Critic", f"{gp1}\n{c1}\n[General Public]: Evaluation evidence: General Public weighed both."
                                 "\nThe score of Assistant 1: 8\nThe score of Assistant 2: 7", final=True),
    ]
    assert all(len(r["messages"]) == 1 and r["messages"][0]["role"] == "user" for r in server.requests)
    assert_chateval_settings(server.requests)
    verdict = verdict_of(out)
    assert verdict is not None
    assert (verdict.method, verdict.score_1, verdict.score_2, verdict.label) == ("mean", 7.0, 8.0, "2")


def test_majority_option_votes_the_labels_and_ties_on_the_same_replies(openai_server) -> None:
    server = openai_server(Script())
    verdict = verdict_of(judge(create_chateval(aggregate="majority"), server))
    assert verdict is not None
    assert (verdict.method, verdict.label, verdict.votes) == ("majority", "tie", {"1": 1, "2": 1})


def test_simultaneous_talk_hears_the_whole_previous_round_and_nothing_of_its_own(openai_server) -> None:
    server = openai_server(Script())
    judge(create_chateval(strategy="simultaneous"), server)
    by_speaker: dict[str, list[str]] = {}
    for request in server.requests:
        by_speaker.setdefault(speaker_of(prompt_of(request)), []).append(prompt_of(request))
    round_one = "[General Public]: General Public turn 1\n[Critic]: Critic turn 1"
    for name in ("General Public", "Critic"):
        assert by_speaker[name] == [referee_prompt(name, "", final=False), referee_prompt(name, round_one, final=True)]
    assert_chateval_settings(server.requests)


def test_summarizer_append_default_sends_the_codes_summary_prompt(openai_server) -> None:
    server = openai_server(Script())
    out = judge(create_chateval(strategy="summarizer"), server)
    summaries = [prompt_of(r) for r in server.requests if "New summary:" in prompt_of(r)]
    new_lines = "[General Public]: General Public turn 1\n[Critic]: Critic turn 1"
    assert summaries == [SUMMARIZER.replace("${summary}", "").replace("${new_lines}", new_lines)]
    finals = sorted(prompt_of(r) for r in server.requests if "[score only]" in prompt_of(r))  # one superstep
    assert finals == sorted(referee_prompt(n, "[Summarizer]: SUMMARY 1", final=True)
                            for n in ("General Public", "Critic"))
    assert_chateval_settings(server.requests)  # the summarizer too: the code's summarizer llm block
    assert out["usage"]["Summarizer"]["params"] == {"temperature": 0, "top_p": None, "max_tokens": 512, "n": 1}


def test_summarizer_code_mode_delivers_raw_messages_and_each_referees_running_summary(openai_server) -> None:
    server = openai_server(Script())
    judge(create_chateval(strategy="summarizer", summary_mode="code", turns=3), server)
    prompts = [prompt_of(r) for r in server.requests]
    summaries = [p for p in prompts if "New summary:" in p]
    assert len(summaries) == 4  # one per referee after rounds 1 and 2
    # round 1: every referee's memory is the round's raw messages, in the code's "[sender] : text" lines
    memory = "[General Public] : General Public turn 1\n[Critic] : Critic turn 1\n"
    first = SUMMARIZER.replace("${summary}", "").replace("${new_lines}", memory)
    assert summaries[:2] == [first, first]
    # round 2: the whole memory (raw messages and its own summary), its previous summary as Current summary
    second_round = [p for p in prompts if "turn 2" in p and "New summary:" not in p]
    assert len(second_round) == 2
    for name in ("General Public", "Critic"):
        own = next(p for p in second_round if speaker_of(p) == name)
        heard = own.split("Here is your discussion history:\n")[1].split(f"\n{PERSONAS[name]}")[0]
        raw = "[General Public]: General Public turn 1\n[Critic]: Critic turn 1\n"
        assert heard.startswith(raw + "[Summarizer]: SUMMARY")
    later = summaries[2:]
    for summary_prompt in later:
        current = summary_prompt.split("Current summary:\n")[1].split("\n\nNew lines:")[0]
        lines = summary_prompt.split("New lines:\n")[1]
        assert current in ("SUMMARY 1", "SUMMARY 2")
        assert lines.startswith(memory + f"[Summarizer] : {current}\n"
                                "[General Public] : General Public turn 2\n[Critic] : Critic turn 2\n")
    assert_chateval_settings(server.requests)


def test_single_agent_default_is_the_codes_single_agent_prompt(openai_server) -> None:
    server = openai_server(Script())
    out = judge(create_single_agent(), server)
    (request,) = server.requests
    expected = (SINGLE_AGENT.replace("${source_text}", ITEM.question or "")
                .replace("${compared_text_one}", ITEM.response_1 or "")
                .replace("${compared_text_two}", ITEM.response_2 or ""))
    assert prompt_of(request) == expected
    assert_chateval_settings(server.requests, "single_agent")
    verdict = verdict_of(out)
    assert verdict is not None and (verdict.score_1, verdict.score_2, verdict.label) == (6.0, 9.0, "2")


def test_ensemble_default_runs_each_persona_alone_and_averages(openai_server) -> None:
    server = openai_server(Script())
    out = judge(create_ensemble(), server)
    prompts = sorted(prompt_of(r) for r in server.requests)
    assert prompts == sorted(referee_prompt(name, "", final=True) for name in ("General Public", "Critic"))
    assert_chateval_settings(server.requests)
    verdict = verdict_of(out)
    assert verdict is not None and (verdict.method, verdict.score_1, verdict.score_2, verdict.label) == (
        "mean", 7.0, 8.0, "2")


def test_gen_overrides_one_agent_and_the_manifest_records_every_agents_parameters(
        openai_server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = openai_server(Script())
    out = tmp_path / "run"
    code = main(["eval", "--protocol", "chateval", "--dataset", "faireval", "--limit", "1", "--model", "judge",
                 "--base-url", server.base_url, "--out", str(out), "--quiet", "--no-cache",
                 "--gen", "Critic.temperature=0.7", "--gen", "all.top_p=0.9"])
    assert code == 0
    # ChatEval's position calibration by default: the item in both orders (FairEval's BPC around the graph)
    prompts = [prompt_of(r) for r in server.requests]
    assert len(prompts) == 8
    first = load_faireval().items[0]
    orders = {p.index(first.response_1 or "") < p.index(first.response_2 or "") for p in prompts}
    assert orders == {True, False}
    by_speaker = {speaker_of(prompt_of(r)): r for r in server.requests}
    assert (by_speaker["Critic"]["temperature"], by_speaker["General Public"]["temperature"]) == (0.7, 0)
    assert all(r["top_p"] == 0.9 and r["max_completion_tokens"] == 512 for r in server.requests)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parameters"]["aggregate"] == "average" and manifest["structured_output"] is False
    assert manifest["parameters"]["calibrate"] == "bpc"
    assert manifest["gen"] == {"Critic": {"temperature": 0.7}, "*": {"top_p": 0.9}}
    assert manifest["generation"] == {
        "General Public": {"temperature": 0, "top_p": 0.9, "max_tokens": 512, "n": 1},
        "Critic": {"temperature": 0.7, "top_p": 0.9, "max_tokens": 512, "n": 1},
    }
    capsys.readouterr()
    assert main(["eval", "--protocol", "chateval", "--dataset", "faireval", "--gen", "Critic.topk=3"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "unknown parameter 'topk'" in error


def test_gen_values_are_parsed_and_checked() -> None:
    assert parse_gen(["General Public.max_tokens=256", "*.temperature=none", "area_chair.n=20"]) == {
        "General Public": {"max_tokens": 256}, "*": {"temperature": None}, "area_chair": {"n": 20}}
    for bad in ("Critic.temperature", "temperature=1", "Critic.max_tokens=1.5", "Critic.n=0", "Critic.seed=1"):
        with pytest.raises(ValueError):
            parse_gen([bad])


def test_n_for_a_single_reply_agent_is_an_error_not_ignored(openai_server) -> None:
    server = openai_server(Script())
    with pytest.raises(ValueError, match="single-reply"):
        judge(create_single_agent(), server, gen={"referee": {"n": 3}})
    assert server.requests == []


class ByAnswer(Script):
    """FINAL_SCORES given to the ANSWERS, not to the positions: each referee scores the first FairEval item's
    response_1 and response_2 the same in both orders (General Public 8-7, Critic 6-9)."""

    def __init__(self, item: EvalItem) -> None:
        super().__init__()
        self.item = item

    def __call__(self, request: dict[str, Any], index: int) -> str:
        prompt = prompt_of(request)
        if "The score of Assistant 2: [score only]" not in prompt:
            return super().__call__(request, index)
        name = speaker_of(prompt)
        s1, s2 = FINAL_SCORES[name]
        if prompt.index(self.item.response_2 or "") < prompt.index(self.item.response_1 or ""):
            s1, s2 = s2, s1  # the swapped order: response_2 is Assistant 1
        return (f"Evaluation evidence: {name} weighed both.\n"
                f"The score of Assistant 1: {s1}\nThe score of Assistant 2: {s2}")


@pytest.mark.parametrize("protocol, option", [("chateval", ["--aggregate", "majority"]),
                                              ("ensemble", ["--ensemble-method", "majority"])])
def test_a_majority_vote_from_the_command_line_takes_effect_under_position_calibration(
        openai_server, tmp_path: Path, protocol: str, option: list[str]) -> None:
    """Issue 29, fidelity item 1: the default BPC averaged each order's scores and ignored the vote, so 8-7 / 6-9
    gave "2" with ``aggregate: majority`` in the manifest. Now the four votes (two referees, two orders) are pooled:
    two for each answer, a tie."""
    first = load_faireval().items[0]
    server = openai_server(ByAnswer(first))
    out = tmp_path / protocol
    assert main(["eval", "--protocol", protocol, "--dataset", "faireval", "--limit", "1", "--model", "judge",
                 "--base-url", server.base_url, "--out", str(out), "--quiet", *option]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parameters"]["calibrate"] == "bpc"
    assert manifest["parameters"]["aggregate" if protocol == "chateval" else "method"] == "majority"
    (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    verdict = record["verdict"]
    assert verdict["method"] == "balanced position calibration: pooled votes"
    assert (verdict["label"], verdict["votes"]) == ("tie", {"1": 2, "2": 2})
    assert {run: entry["votes"] for run, entry in verdict["detail"]["runs"].items()} == {
        "original_order": {"1": 1, "2": 1}, "swapped_order": {"1": 1, "2": 1}}
    # the means still say "2": the default (average) gives it, and the vote no longer does
    assert (verdict["score_1"], verdict["score_2"]) == (7.0, 8.0)


class Unreadable(Script):
    """General Public's final reply never has the answer form; the Critic's is readable (6-9)."""

    def __call__(self, request: dict[str, Any], index: int) -> str:
        first = request["messages"][0]["content"]
        if len(request["messages"]) > 1:  # jurygraph's re-ask: still unreadable
            return "Both answers have merits, really."
        if FINAL_PROMPT in first and speaker_of(first) == "General Public":
            return "Both answers have merits."
        return super().__call__(request, index)


def test_an_unreadable_final_reply_is_re_asked_once_and_missing_by_default(openai_server) -> None:
    """Issue 29, fidelity item 6: jurygraph's rule (a departure from the code, stated in FIDELITY): one re-ask
    with the format reminder, then the judgment is missing and the verdict is the readable referees'."""
    server = openai_server(Unreadable())
    out = judge(create_chateval(), server)
    firsts = [(r, r["messages"][0]["content"]) for r in server.requests]
    gp_final = [r for r, first in firsts if FINAL_PROMPT in first and speaker_of(first) == "General Public"]
    assert len(gp_final) == 2 and len(gp_final[1]["messages"]) == 3  # the prompt, the reply, the reminder
    assert gp_final[1]["messages"][2]["content"].startswith("Your reply could not be read")
    verdict = verdict_of(out)
    assert verdict is not None and (verdict.method, verdict.label, verdict.n_missing) == ("mean", "2", 1)
    assert (verdict.score_1, verdict.score_2) == (6.0, 9.0)


def test_the_released_code_s_rule_sends_the_same_prompt_three_times_and_ties(openai_server) -> None:
    server = openai_server(Unreadable())
    out = judge(create_chateval(unreadable="code"), server)
    gp1 = "[General Public]: General Public turn 1"
    c1 = "[Critic]: Critic turn 1"
    same = referee_prompt("General Public", f"{gp1}\n{c1}", final=True)
    prompts = [prompt_of(r) for r in server.requests]
    # agentverse's max_retry = 3: the same prompt, no reminder, and the Critic hears the empty message the code
    # puts in memory when no attempt could be read
    assert prompts == [
        referee_prompt("General Public", "", final=False), referee_prompt("Critic", gp1, final=False),
        same, same, same,
        referee_prompt("Critic", f"{gp1}\n{c1}\n[General Public]: ", final=True),
    ]
    assert all(len(r["messages"]) == 1 for r in server.requests)
    assert_chateval_settings(server.requests)
    verdict = verdict_of(out)
    assert verdict is not None and verdict.label == "tie"
    assert verdict.method == "unreadable judgment: tie (released code)"
    assert verdict.detail["unreadable_tie"] == ["General Public"] and verdict.n_missing == 1
    assert out["judgments"]["General Public"]["missing"] and out["judgments"]["General Public"]["attempts"] == 3


class UnreadableByAnswer(ByAnswer):
    """As ByAnswer, but General Public's final reply (and its re-ask) can never be read."""

    def __call__(self, request: dict[str, Any], index: int) -> str:
        first = request["messages"][0]["content"]
        if FINAL_PROMPT in first and speaker_of(first) == "General Public":
            return "Both answers have merits."
        return super().__call__(request, index)


def test_unreadable_rule_on_the_command_line_and_the_items_counted_by_metaeval(
        openai_server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = load_faireval().items[0]
    verdicts, finals = {}, {}
    for rule in ("missing", "code"):
        server = openai_server(UnreadableByAnswer(first))
        out = tmp_path / rule
        assert main(["eval", "--protocol", "chateval", "--dataset", "faireval", "--limit", "1", "--model", "judge",
                     "--base-url", server.base_url, "--out", str(out), "--quiet", "--unreadable", rule]) == 0
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["parameters"].get("unreadable") == (None if rule == "missing" else "code")
        (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        verdicts[rule] = record["verdict"]
        finals[rule] = [r for r in server.requests if FINAL_PROMPT in r["messages"][0]["content"]
                        and speaker_of(r["messages"][0]["content"]) == "General Public"]
    # jurygraph's rule: one re-ask per order, then the Critic's judgments decide (6 vs 9 in both orders)
    assert sorted(len(r["messages"]) for r in finals["missing"]) == [1, 1, 3, 3]
    assert (verdicts["missing"]["label"], verdicts["missing"]["n_missing"]) == ("2", 2)
    # the released code's: three times the same prompt per order, then the item is a tie
    assert [len(r["messages"]) for r in finals["code"]] == [1] * 6
    assert len({json.dumps(r, sort_keys=True) for r in finals["code"]}) == 2  # one prompt per order, sent 3 times
    assert verdicts["code"]["label"] == "tie"
    assert verdicts["code"]["method"] == "balanced position calibration: unreadable judgment: tie (released code)"
    assert verdicts["code"]["detail"]["unreadable_tie"] == ["original_order", "swapped_order"]
    # metaeval counts the item with an unreadable judgment under either rule
    capsys.readouterr()
    assert main(["metaeval", f"missing={tmp_path / 'missing'}", f"code={tmp_path / 'code'}", "--json",
                 "--resamples", "0", "--no-panel"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {m["name"]: m["agreement"]["pairwise"]["unreadable"] for m in report["methods"]} == {"missing": 1, "code": 1}
    assert main(["metaeval", str(tmp_path / "code"), "--resamples", "0", "--no-panel"]) == 0
    details = capsys.readouterr().out.split("Details:")[1]
    header, row = details.splitlines()[1], details.splitlines()[3]
    assert row.split()[header.split().index("Unreadable")] == "1"
