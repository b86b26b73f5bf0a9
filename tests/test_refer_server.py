"""ReFeR through the real langchain-openai client against the local OpenAI-compatible server: request
counts, native n for the area chair, and a peer whose model fails for good."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import fmean
from typing import Any

import pytest

from jurygraph import JuryContext, ModelSpec, create_refer, judgments_of, verdict_of
from jurygraph.cli import main
from jurygraph.running.datasets import load_dataset
from jurygraph.running.rundir import read_results
from jurygraph.running.runner import run
from jurygraph.testing.fake_server import Faults, count_tokens, prompt_of, prompt_tokens

PEER_RATINGS = {"peer1": 1, "peer2": 2, "peer3": 3}
AC_RATINGS = [1, 2, 3, 3, 2, 3, 3, 1, 2, 3, 3, 3, 2, 2, 3, 1, 3, 2, 3, 3]  # the 20 samples, by choice index


def responder(request: dict[str, Any], i: int) -> str:
    model = request["model"]
    if model in PEER_RATINGS:
        return f"Analysis: {model} read the dialogue.\nRating: {PEER_RATINGS[model]}"
    return f"Analysis: sample {i} weighed the peers.\nRating: {AC_RATINGS[i % len(AC_RATINGS)]}"


def context_for(url: str, bad_url: str | None = None) -> JuryContext:
    models: dict[str, Any] = {f"peer_{k}": ModelSpec.parse(f"openai:peer{k}@{url}") for k in (1, 2, 3)}
    if bad_url:
        models["peer_1"] = ModelSpec.parse(f"openai:peer1@{bad_url}", max_retries=1)
    models["area_chair"] = ModelSpec.parse(f"openai:chair@{url}")
    return JuryContext(models=models)


def item():
    return load_dataset("topical-chat", aspect="engagingness").items[3]


def test_turbo_sends_k_plus_1_requests_and_averages_the_20_ratings(openai_server) -> None:
    server = openai_server(responder)
    out = create_refer(variant="turbo").compile().invoke({"item": item()}, context=context_for(server.base_url))
    assert len(server.requests) == 3 + 1
    chair = [r for r in server.requests if r["model"] == "chair"]
    assert len(chair) == 1
    assert chair[0]["n"] == 20 and chair[0]["temperature"] == 1.0
    assert all(r.get("n", 1) == 1 for r in server.requests if r["model"] != "chair")
    verdict = verdict_of(out)
    assert verdict is not None
    assert verdict.score == pytest.approx(fmean(AC_RATINGS))
    assert verdict.detail["ratings"] == [float(r) for r in AC_RATINGS]
    assert (verdict.n_judgments, verdict.n_missing) == (20, 0)
    # the area chair saw the three peers' scores, in peer order, in the Appendix N.1 engagingness prompt
    prompt = prompt_of(chair[0])
    assert prompt.startswith("Navigate through a simulated conversation")
    assert ("First Assistant’s Evaluation: 1\n\nSecond Assistant’s Evaluation: 2\n\n"
            "Third Assistant’s Evaluation: 3\n\nEvaluation Form") in prompt
    assert out["usage"]["area_chair"]["requests"] == 1
    # the prompt is paid once for the 20 samples (the server's usage: fake_server.prompt_tokens, count_tokens)
    assert out["usage"]["area_chair"]["input_tokens"] == prompt_tokens(chair[0]["messages"])
    assert out["usage"]["area_chair"]["output_tokens"] == sum(count_tokens(responder(chair[0], i)) for i in range(20))


def test_lite_sends_k_plus_1_requests_with_n_1(openai_server) -> None:
    server = openai_server(responder)
    out = create_refer(variant="lite").compile().invoke({"item": item()}, context=context_for(server.base_url))
    assert len(server.requests) == 3 + 1
    assert all(r.get("n", 1) == 1 for r in server.requests)
    (chair,) = [r for r in server.requests if r["model"] == "chair"]
    assert chair["temperature"] == 1.0
    verdict = verdict_of(out)
    assert verdict is not None and verdict.score == AC_RATINGS[0] and verdict.method == "area chair"


def test_a_peer_that_fails_for_good_is_reported_and_the_area_chair_runs_with_the_others(
        openai_server, tmp_path: Path) -> None:
    server = openai_server(responder)
    broken = openai_server(responder, faults=Faults(rate_500=1.0))
    context = context_for(server.base_url, bad_url=broken.base_url)
    out = create_refer(variant="turbo").compile().invoke({"item": item()}, context=context)
    assert len(broken.requests) == 2  # the first try and the client's one retry, both 500
    assert len(server.requests) == 2 + 1
    peer_1 = judgments_of(out)["peer_1"]
    assert peer_1.missing and "Error code: 500" in (peer_1.reason or "")
    (chair,) = [r for r in server.requests if r["model"] == "chair"]
    prompt = prompt_of(chair)
    assert "initial evaluations from three large language models" in prompt
    assert ("First Assistant’s Evaluation:  \n\nSecond Assistant’s Evaluation: 2\n\n"
            "Third Assistant’s Evaluation: 3\n\nEvaluation Form") in prompt
    verdict = verdict_of(out)
    assert verdict is not None and verdict.score == pytest.approx(fmean(AC_RATINGS))
    assert verdict.detail["missing_peers"].keys() == {"peer_1"} and verdict.detail["n_missing_peers"] == 1

    # the runner reports it: the item is judged, with one missing judgment
    summary = run(create_refer(variant="lite"), [item()], out_dir=tmp_path / "run", context=context,
                  progress=False, cache=False)
    (record,) = read_results(tmp_path / "run")
    assert record["status"] == "ok" and record["n_missing"] == 1
    assert "peer model failed" in record["judgments"]["peer_1"]["reason"]
    assert summary.missing_judgments == 1


def test_cli_eval_and_draw(openai_server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = openai_server(responder)
    url = server.base_url
    code = main(["eval", "--protocol", "refer", "--peers", f"openai:peer1@{url},openai:peer2@{url},openai:peer3@{url}",
                 "--area-chair", f"openai:chair@{url}", "--variant", "turbo", "--samples", "5",
                 "--feedback", "comment", "--dataset", "topical-chat", "--aspect", "engagingness", "--limit", "2",
                 "--out", str(tmp_path / "run"), "--quiet", "--no-cache"])
    assert code == 0
    assert len(server.requests) == 2 * (3 + 1)
    assert sorted(r.get("n", 1) for r in server.requests) == [1] * 6 + [5, 5]
    chair = next(r for r in server.requests if r["model"] == "chair")
    assert "First Assistant’s Evaluation: peer1 read the dialogue." in prompt_of(chair)
    records = read_results(tmp_path / "run")
    assert [r["verdict"]["score"] for r in records] == [pytest.approx(fmean(AC_RATINGS[:5]))] * 2
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["parameters"]["samples"] == 5 and manifest["parameters"]["feedback"] == "comment"
    capsys.readouterr()
    assert main(["draw", "--protocol", "refer", "--peers", "openai:a,openai:b"]) == 0
    drawn = capsys.readouterr().out
    assert "peer_1 --> area_chair" in drawn and "peer_2 --> area_chair" in drawn and "peer_3" not in drawn
    assert main(["eval", "--protocol", "refer", "--variant", "lite", "--samples", "5", "--dataset", "topical-chat",
                 "--model", f"openai:chair@{url}", "--out", str(tmp_path / "bad")]) == 2
