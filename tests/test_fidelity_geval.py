"""Fidelity of G-Eval and Analyze-Rate: the exact request each default sends through the local server,
compared with G-Eval's released prompts and the papers' settings (fixtures in ``data/fidelity/``), and the
aggregation on scripted replies compared with G-Eval's own reading of them (meta_eval_summeval.py)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from statistics import fmean
from typing import Any

import pytest

from jurygraph import JuryContext, create_analyze_rate, create_geval, verdict_of
from jurygraph.cli import main
from jurygraph.running.datasets import load_dataset

FIXTURES = Path(__file__).parent / "data" / "fidelity"
SETTINGS = json.loads((FIXTURES / "geval" / "settings.json").read_text(encoding="utf-8"))
RELEASED = {"coherence": "coh", "consistency": "con", "fluency": "flu", "relevance": "rel"}


def released_prompt(aspect: str, document: str, summary: str) -> str:
    """What gpt4_eval.py sends: the prompt file read in text mode, then {{Document}}/{{Summary}} replaced."""
    with open(FIXTURES / "geval" / f"{RELEASED[aspect]}_detailed.txt") as file:  # text mode: CRLF -> LF
        prompt = file.read()
    return prompt.replace("{{Document}}", document).replace("{{Summary}}", summary)


def parse_output(output: str) -> float:
    """meta_eval_summeval.py's reading of one sample (0 when it reads nothing)."""
    matched = re.search(SETTINGS["parse_output_regex"], output)
    try:
        return float(matched.group(1)) if matched else 0.0
    except ValueError:
        return 0.0


def context(url: str) -> JuryContext:
    return JuryContext(default=f"openai:gpt-4-0613@{url}")


def only_request(server: Any) -> dict[str, Any]:
    (request,) = server.requests
    return request


@pytest.mark.parametrize("aspect", ["coherence", "consistency", "fluency", "relevance"])
def test_geval_default_sends_the_released_prompt_with_the_paper_s_sampling(openai_server, aspect: str) -> None:
    item = load_dataset("summeval", aspect=aspect).items[0]
    server = openai_server(lambda request, i: "3")
    create_geval().compile().invoke({"item": item}, context=context(server.base_url))
    request = only_request(server)
    # the released text, verbatim; sent as the user message (gpt4_eval.py sends it as a system message)
    assert request["messages"] == [{"role": "user", "content": released_prompt(aspect, item.source or "",
                                                                                 item.response or "")}]
    params = SETTINGS["params"]
    assert (request["n"], request["temperature"], request["top_p"]) == (params["n"], params["temperature"],
                                                                        params["top_p"])
    # the paper gives no max_tokens; the released gpt4_eval.py sends 5 (issue 29, fidelity item 3)
    assert request["max_completion_tokens"] == params["max_tokens"] == SETTINGS["released_code"]["max_tokens"]
    assert "max_tokens" not in request and not request.get("logprobs")


def test_geval_max_tokens_is_lifted_by_the_factory_or_by_gen(openai_server, tmp_path: Path) -> None:
    item = load_dataset("summeval", aspect="coherence").items[0]
    server = openai_server(lambda request, i: "3")
    create_geval(max_tokens=None).compile().invoke({"item": item}, context=context(server.base_url))
    assert "max_completion_tokens" not in only_request(server)
    # on the command line: --gen, recorded in the manifest's gen and generation
    cli = openai_server(lambda request, i: "3")
    out = tmp_path / "run"
    assert main(["eval", "--protocol", "geval", "--dataset", "summeval", "--aspect", "coherence", "--limit", "1",
                 "--model", "gpt-4-0613", "--base-url", cli.base_url, "--out", str(out), "--quiet",
                 "--gen", "G-Eval.max_tokens=none"]) == 0
    assert "max_completion_tokens" not in only_request(cli)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["gen"] == {"G-Eval": {"max_tokens": None}}
    assert manifest["generation"]["G-Eval"]["max_tokens"] is None


# samples G-Eval's own script reads; ours must give the same mean
SAMPLES = ["4\n\nThe summary is well organised.", "3 - The summary repeats itself.", "4/5", " 2", "5",
           "4 out of 5", "3.", "4"] * 2 + ["5", "3", "2", "4"]


def test_geval_aggregation_reads_samples_as_g_eval_s_script(openai_server) -> None:
    item = load_dataset("summeval", aspect="coherence").items[0]
    server = openai_server(lambda request, i: SAMPLES[i])
    verdict = verdict_of(create_geval().compile().invoke({"item": item}, context=context(server.base_url)))
    assert verdict is not None and verdict.detail["scores"] == [parse_output(s) for s in SAMPLES]
    assert verdict.score == pytest.approx(fmean(parse_output(s) for s in SAMPLES))
    assert (verdict.n_judgments, verdict.n_missing) == (20, 0)


def test_geval_reads_an_aspect_line_and_drops_what_g_eval_would_score_0(openai_server) -> None:
    item = load_dataset("summeval", aspect="coherence").items[0]
    replies = ["- Coherence: 2", "The summary is fine.", "4", "9"]  # G-Eval: 0, 0, 4, 9
    server = openai_server(lambda request, i: replies[i])
    verdict = verdict_of(create_geval(n=4).compile().invoke({"item": item}, context=context(server.base_url)))
    # the off-scale 9 is kept as G-Eval's script keeps it (issue 29, fidelity item 4); what it scores 0 is missing
    assert verdict is not None and verdict.detail["scores"] == [2.0, None, 4.0, 9.0]
    assert verdict.score == 5.0 and verdict.n_missing == 1 and verdict.detail["off_scale"] == 1
    option = openai_server(lambda request, i: replies[i])
    verdict = verdict_of(create_geval(n=4, off_scale="drop").compile().invoke({"item": item},
                                                                              context=context(option.base_url)))
    assert verdict is not None and verdict.detail["scores"] == [2.0, None, 4.0, None]
    assert verdict.score == 3.0 and verdict.n_missing == 2 and "off_scale" not in verdict.detail


def test_geval_fluency_is_rated_1_to_3_as_released_and_1_to_5_as_an_option(openai_server) -> None:
    item = load_dataset("summeval", aspect="fluency").items[0]
    replies = ["3", "2", "5"]
    server = openai_server(lambda request, i: replies[i])
    verdict = verdict_of(create_geval(n=3).compile().invoke({"item": item}, context=context(server.base_url)))
    assert server.requests[0]["messages"][0]["content"].endswith("- Fluency (1-3):")
    # 5 is off the prompt's 1-3 scale: kept, as G-Eval's meta_eval_summeval.py keeps the number, and counted
    assert verdict is not None and verdict.detail["scores"] == [3.0, 2.0, 5.0] and verdict.detail["off_scale"] == 1
    assert verdict.score == pytest.approx(parse_output("3") / 3 + parse_output("2") / 3 + parse_output("5") / 3)
    option = openai_server(lambda request, i: replies[i])
    verdict = verdict_of(create_geval(n=3, fluency_scale=5).compile().invoke({"item": item},
                                                                              context=context(option.base_url)))
    prompt = option.requests[0]["messages"][0]["content"]
    assert "Fluency (1-5) - " in prompt and prompt.endswith("- Fluency:") and "(1-3)" not in prompt
    assert verdict is not None and verdict.detail["scores"] == [3.0, 2.0, 5.0]


def token(text: str, p: float, alternatives: dict[str, float]) -> dict[str, Any]:
    return {"token": text, "logprob": math.log(p),
            "top_logprobs": [{"token": t, "logprob": math.log(q)} for t, q in alternatives.items()]}


@pytest.mark.parametrize("reply", [["4", "/", "5"], ["4", " out", " of", " 5"]])
def test_geval_logprobs_weight_the_score_token_the_form_asks_for(openai_server, reply: list[str]) -> None:
    item = load_dataset("summeval", aspect="coherence").items[0]
    # the leading "4" is the score: p(4) = 0.6, p(3) = 0.3, p(5) = 0.1; the trailing "5" is the scale's top
    content = [token(reply[0], 0.6, {"4": 0.6, "3": 0.3, "5": 0.1})]
    content += [token(t, 0.99, {t: 0.99, "1": 0.01}) for t in reply[1:]]
    server = openai_server(lambda request, i: {"content": "".join(reply), "logprobs": content})
    verdict = verdict_of(create_geval(estimator="logprobs").compile().invoke({"item": item},
                                                                             context=context(server.base_url)))
    request = only_request(server)
    assert request["logprobs"] is True and request["top_logprobs"] == 20 and request["temperature"] == 0
    assert request["messages"][0]["content"] == released_prompt("coherence", item.source or "", item.response or "")
    assert verdict is not None and verdict.method == "probability-weighted"
    assert verdict.score == pytest.approx(0.6 * 4 + 0.3 * 3 + 0.1 * 5)
    assert verdict.detail["sampled_score"] == 4.0


def test_analyze_rate_sends_g_eval_s_prompt_with_its_form_and_settings(openai_server) -> None:
    paper = json.loads((FIXTURES / "analyze_rate" / "paper.json").read_text(encoding="utf-8"))
    item = load_dataset("summeval", aspect="coherence").items[0]
    replies = [f"Analysis: sample {i} weighs 2 issues.\nRating: {1 + i % 5}" for i in range(20)]
    server = openai_server(lambda request, i: replies[i])
    verdict = verdict_of(create_analyze_rate().compile().invoke({"item": item}, context=context(server.base_url)))
    request = only_request(server)
    # the paper's form line, with its typographic quotes written straight (prompts/analyze_rate/SOURCE.md)
    form = paper["form_line"].replace("“", '"').replace("”", '"')
    expected = released_prompt("coherence", item.source or "", item.response or "").replace(
        "Evaluation Form (scores ONLY):", form)
    assert request["messages"] == [{"role": "user", "content": expected}]
    params = paper["params"]
    assert (request["n"], request["temperature"], request["top_p"], request["max_completion_tokens"]) == (
        params["n"], params["temperature"], params["top_p"], params["max_tokens"])
    assert verdict is not None and verdict.score == pytest.approx(fmean(1 + i % 5 for i in range(20)))


def test_off_scale_drop_on_the_command_line_is_recorded_and_takes_effect(openai_server, tmp_path: Path) -> None:
    server = openai_server(lambda request, i: "5")  # off the released fluency prompt's 1-3 scale
    runs = {}
    for name, option in (("keep", []), ("drop", ["--off-scale", "drop"])):
        out = tmp_path / name
        assert main(["eval", "--protocol", "geval", "--dataset", "summeval", "--aspect", "fluency", "--limit", "1",
                     "--samples", "2", "--model", "gpt-4-0613", "--base-url", server.base_url, "--out", str(out),
                     "--quiet", "--no-cache", *option]) == 0
        manifest = json.loads((out / "manifest.json").read_text())
        (record,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
        runs[name] = (manifest["parameters"].get("off_scale"), record["verdict"])
    assert runs["keep"][0] is None and runs["keep"][1]["score"] == 5.0 and runs["keep"][1]["detail"]["off_scale"] == 2
    assert runs["drop"][0] == "drop" and runs["drop"][1]["missing"] and runs["drop"][1]["n_missing"] == 2
