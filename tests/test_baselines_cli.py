"""The baselines and calibrations from the command line, against the local server."""

from __future__ import annotations

import json
from pathlib import Path

from jurygraph.cli import main
from jurygraph.running.rundir import read_results
from jurygraph.testing import pairwise_reply
from jurygraph.testing.fake_server import prompt_of


def pairwise_responder(request: dict, index: int) -> str:
    return pairwise_reply(8, 4)  # a judge that always prefers the answer shown first


def test_single_agent_with_bpc_on_faireval_is_faireval_s_own_evaluator(openai_server, tmp_path: Path) -> None:
    server = openai_server(lambda request, i: "Evaluation evidence: ok\nScore of the Assistant 1: 8\n"
                                              "Score of the Assistant 2: 4")
    out = tmp_path / "run"
    code = main(["eval", "--protocol", "single", "--calibrate", "bpc", "--dataset", "faireval", "--limit", "2",
                 "--model", "judge", "--base-url", server.base_url, "--out", str(out), "--quiet"])
    assert code == 0
    assert len(server.requests) == 4  # two orders per item, one review each (FairEval.py -k 1)
    assert {r["messages"][0]["content"] for r in server.requests} == {
        "You are a helpful and precise assistant for checking the quality of the answer."}
    assert {(r["temperature"], r["max_completion_tokens"], r.get("n", 1)) for r in server.requests} == {(1.0, 512, 1)}
    for record in read_results(out):
        assert set(record["judgments"]) == {"original_order #1", "swapped_order #1"}
        verdict = record["verdict"]
        assert (verdict["score_1"], verdict["score_2"], verdict["label"]) == (6.0, 6.0, "tie")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parameters"]["calibration_baseline"] == "faireval" and manifest["parameters"]["mec_k"] == 1


def test_single_agent_with_bpc_on_faireval_wrapping_chateval(openai_server, tmp_path: Path) -> None:
    server = openai_server(pairwise_responder)
    out = tmp_path / "run"
    code = main(["eval", "--protocol", "single", "--calibrate", "bpc", "--calibration-baseline", "chateval",
                 "--dataset", "faireval", "--limit", "2",
                 "--model", "judge", "--base-url", server.base_url, "--out", str(out), "--quiet"])
    assert code == 0
    assert len(server.requests) == 4  # two orders per item
    for record in read_results(out):
        assert set(record["judgments"]) == {"original_order/Single Agent", "swapped_order/Single Agent"}
        verdict = record["verdict"]
        assert (verdict["score_1"], verdict["score_2"], verdict["label"]) == (6.0, 6.0, "tie")
        assert record["usage"]["Single Agent"]["requests"] == 2
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parameters"]["calibrate"] == "bpc" and manifest["parameters"]["protocol"] == "single"
    assert manifest["parameters"]["calibration_baseline"] == "chateval"
    assert manifest["cli"]["protocol_args"]["calibrate"] == "bpc"  # what --resume restores
    assert manifest["cli"]["protocol_args"]["calibration_baseline"] == "chateval"


def test_ensemble_with_mec(openai_server, tmp_path: Path) -> None:
    server = openai_server(pairwise_responder)
    code = main(["eval", "--protocol", "ensemble", "--agents", "3", "--calibrate", "mec", "--mec-k", "2",
                 "--dataset", "faireval", "--limit", "1", "--model", "judge", "--base-url", server.base_url,
                 "--out", str(tmp_path / "r"), "--quiet"])
    assert code == 0
    assert len(server.requests) == 6 and {r["temperature"] for r in server.requests} == {1.0}
    (record,) = read_results(tmp_path / "r")
    assert len(record["judgments"]) == 6 and record["verdict"]["label"] == "1"


def test_geval_on_summeval_sends_one_request_with_n_per_item(openai_server, tmp_path: Path) -> None:
    server = openai_server(lambda request, i: f"- Coherence: {1 + i % 5}")
    code = main(["eval", "--protocol", "geval", "--dataset", "summeval", "--aspect", "coherence", "--limit", "2",
                 "--samples", "10", "--model", "judge", "--base-url", server.base_url, "--out", str(tmp_path / "g"),
                 "--quiet"])
    assert code == 0
    assert [r["n"] for r in server.requests] == [10, 10]
    assert all(prompt_of(r).endswith("- Coherence:") for r in server.requests)
    for record in read_results(tmp_path / "g"):
        assert record["verdict"]["score"] == 3.0 and record["verdict"]["method"] == "mean of 10 samples"


def test_analyze_rate_with_logprobs_option(openai_server, tmp_path: Path) -> None:
    server = openai_server(lambda request, i: "Analysis: fine.\nRating: 2")
    code = main(["eval", "--protocol", "analyze-rate", "--estimator", "logprobs", "--dataset", "topical-chat",
                 "--aspect", "naturalness", "--limit", "1", "--model", "judge", "--base-url", server.base_url,
                 "--out", str(tmp_path / "a"), "--quiet"])
    assert code == 0
    assert server.requests[0]["logprobs"] is True and server.requests[1]["n"] == 20  # no logprobs came back
    (record,) = read_results(tmp_path / "a")
    assert record["verdict"]["detail"]["fallback_reason"] == "the reply carried no log-probabilities"


def test_calibration_on_a_score_dataset_or_protocol_is_a_clear_error(capsys, tmp_path: Path) -> None:
    args = ["--model", "judge", "--base-url", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "x"), "--quiet"]
    assert main(["eval", "--protocol", "single", "--calibrate", "bpc", "--dataset", "summeval",
                 "--aspect", "coherence", *args]) == 2
    assert "--calibrate bpc needs a pairwise dataset (e.g. faireval); summeval holds score items" in \
        capsys.readouterr().err
    assert main(["eval", "--protocol", "geval", "--calibrate", "mec", "--dataset", "faireval", *args]) == 2
    assert "--calibrate mec wraps pairwise protocols; geval rates single texts" in capsys.readouterr().err


def test_draw_a_calibrated_protocol(capsys) -> None:
    assert main(["draw", "--protocol", "ensemble", "--agents", "3", "--calibrate", "bpc"]) == 0
    out = capsys.readouterr().out
    assert "__start__ --> swapped_order;" in out and "original_order --> calibrate;" in out
    assert main(["draw", "--protocol", "ensemble", "--agents", "3"]) == 0
    out = capsys.readouterr().out
    assert "__start__ --> news_author;" in out and "calibrate" not in out
