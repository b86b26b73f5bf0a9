"""Fidelity of FairEval's baseline (``--protocol single --calibrate bpc+mec``): the exact messages and
parameters of FairEval.py's gen_prompt()/query_gpt() (fixture ``data/fidelity/faireval/gen_prompt.json``),
one request per order with n = k, and get_eval()'s pooled mean on scripted reviews."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import fmean
from typing import Any

from jurygraph import JuryContext
from jurygraph.cli import main
from jurygraph.graphs.faireval import create_faireval
from jurygraph.running.datasets import load_dataset
from jurygraph.running.rundir import read_results

FAIREVAL = json.loads((Path(__file__).parent / "data" / "fidelity" / "faireval" / "gen_prompt.json")
                      .read_text(encoding="utf-8"))
# reviews by choice index, in the order shown: (Assistant 1, Assistant 2); the third one is unreadable
ORIGINAL = [(8, 6), (7, 7), None]
SWAPPED = [(5, 9), (6, 8), (4, 7)]


def gen_prompt(question: str, answer_1: str, answer_2: str) -> list[dict[str, str]]:
    """FairEval.py's gen_prompt, as query_gpt sends it."""
    user = FAIREVAL["prompt_template"].format(question=question, answer_1=answer_1, answer_2=answer_2,
                                              prompt=FAIREVAL["default_prompt"])
    return [{"role": "system", "content": FAIREVAL["sys_prompt"]}, {"role": "user", "content": user}]


def review(scores: tuple[int, int] | None) -> str:
    if scores is None:
        return "Evaluation evidence: both are fine."
    return (f"Evaluation evidence: compared.\nScore of the Assistant 1: {scores[0]}\n"
            f"Score of the Assistant 2: {scores[1]}")


def responder(item: Any) -> Any:
    def reply(request: dict[str, Any], i: int) -> str:
        swapped = request["messages"][1]["content"] != gen_prompt(item.question, item.response_1,
                                                                  item.response_2)[1]["content"]
        return review((SWAPPED if swapped else ORIGINAL)[i])

    return reply


def test_bpc_mec_sends_faireval_s_prompt_in_both_orders_with_n_k(openai_server) -> None:
    item = load_dataset("faireval").items[0]
    server = openai_server(responder(item))
    out = create_faireval().compile().invoke({"item": item}, context=JuryContext(
        default=f"openai:gpt-3.5-turbo-0301@{server.base_url}"))
    original, swapped = sorted(server.requests, key=lambda r: r["messages"][1]["content"] != gen_prompt(
        item.question, item.response_1, item.response_2)[1]["content"])
    assert original["messages"] == gen_prompt(item.question, item.response_1, item.response_2)
    assert swapped["messages"] == gen_prompt(item.question, item.response_2, item.response_1)
    for request in (original, swapped):
        assert (request["temperature"], request["max_completion_tokens"], request["n"]) == (
            FAIREVAL["params"]["temperature"], FAIREVAL["params"]["max_tokens"], FAIREVAL["k"])
    # get_eval: every parsed review pooled, swapped ones read back as (score2, score1); unreadable skipped
    pooled = [s for s in ORIGINAL if s is not None] + [(b, a) for a, b in SWAPPED]
    verdict = out["verdict"]
    assert verdict["score_1"] == fmean(s[0] for s in pooled) and verdict["score_2"] == fmean(s[1] for s in pooled)
    assert verdict["label"] == "1" and verdict["n_judgments"] == 5 and verdict["n_missing"] == 1
    assert out["usage"]["FairEval"]["requests"] == 2


def test_the_cli_single_baseline_with_bpc_mec_is_faireval_s(openai_server, tmp_path: Path) -> None:
    item = load_dataset("faireval").items[0]
    server = openai_server(responder(item))
    code = main(["eval", "--protocol", "single", "--calibrate", "bpc+mec", "--dataset", "faireval", "--limit", "1",
                 "--model", "judge", "--base-url", server.base_url, "--out", str(tmp_path / "run"), "--quiet"])
    assert code == 0 and len(server.requests) == 2 and {r["n"] for r in server.requests} == {3}
    (record,) = read_results(tmp_path / "run")
    assert record["verdict"]["label"] == "1"
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["parameters"]["calibration_baseline"] == "faireval" and manifest["parameters"]["mec_k"] == 3
