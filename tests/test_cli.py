"""`jurygraph eval` and `jurygraph draw` end to end, against the local server."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from jurygraph.cli import main
from jurygraph.running.rundir import read_results
from jurygraph.testing import pairwise_reply
from jurygraph.testing.fake_server import prompt_of


def responder(request: dict, index: int) -> str:
    prompt = prompt_of(request)
    if "Output with the following format strictly" in prompt:
        return pairwise_reply(7, 5) if "Critic" in prompt.split("short and clear,")[-1] else pairwise_reply(8, 4)
    return "Assistant 1 is clearer."


def test_eval_faireval_writes_one_line_per_item(openai_server, tmp_path: Path, capsys) -> None:
    server = openai_server(responder)
    out = tmp_path / "run"
    code = main(["eval", "--protocol", "chateval", "--strategy", "simultaneous", "--agents", "2", "--turns", "2",
                 "--model", "judge", "--base-url", server.base_url, "--dataset", "faireval", "--limit", "3",
                 "--out", str(out), "--quiet", "--no-calibrate"])  # one order: the default judges both (BPC)
    assert code == 0
    records = read_results(out)
    assert [r["id"] for r in sorted(records, key=lambda r: int(r["id"]))] == ["0", "1", "2"]
    for record in records:
        assert record["status"] == "ok" and record["verdict"]["label"] == "1" and record["n_missing"] == 0
        assert set(record["judgments"]) == {"General Public", "Critic"}
        assert record["usage"]["Critic"]["requests"] == 2
        assert record["human"]["label"] in {"1", "2", "tie"}
    assert len(server.requests) == 12
    printed = capsys.readouterr().out
    assert "3 done, 0 failed" in printed and "Assistant 1 3" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["protocol"] == "chateval" and manifest["parameters"]["strategy"] == "simultaneous"
    assert manifest["dataset"]["sha256"] and manifest["counts"]["done"] == 3


def test_eval_jsonl_with_mapping_reports_bad_rows_and_runs_the_rest(openai_server, tmp_path: Path, capsys) -> None:
    server = openai_server(responder)
    data = tmp_path / "pairs.jsonl"
    rows = [
        {"qid": "a", "prompt": "Q1", "left": "x", "right": "y", "winner": "1"},
        {"qid": "b", "prompt": "Q2", "left": "x"},
        "not json",
        {"qid": "c", "prompt": "Q3", "left": "x", "right": "y", "winner": "2"},
    ]
    data.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    code = main(["eval", "--dataset", str(data), "--task", "pairwise", "--map", "id=qid", "--map", "question=prompt",
                 "--map", "response_1=left", "--map", "response_2=right", "--map", "human.label=winner",
                 "--model", "judge", "--base-url", server.base_url, "--out", str(tmp_path / "r"), "--quiet"])
    assert code == 0
    err = capsys.readouterr().err
    assert "pairs.jsonl, row 2 (qid b), field 'right'" in err  # the row's line and the id it was mapped from
    assert "pairs.jsonl, row 3: not valid JSON" in err
    assert sorted(r["id"] for r in read_results(tmp_path / "r")) == ["a", "c"]


def test_resume_keeps_finished_items_and_refuses_a_different_limit(openai_server, tmp_path: Path, capsys) -> None:
    server = openai_server(responder)
    out = tmp_path / "run"
    args = ["eval", "--dataset", "faireval", "--model", "judge", "--base-url", server.base_url, "--quiet"]
    assert main([*args, "--limit", "2", "--out", str(out)]) == 0
    sent = len(server.requests)
    # the limit defines which items the run judges: a resume cannot change it
    assert main(["eval", "--resume", str(out), "--limit", "3", "--quiet"]) == 2
    assert "--limit 3 (the run has 2)" in capsys.readouterr().err
    assert main(["eval", "--resume", str(out), "--quiet"]) == 0
    assert len(server.requests) == sent  # the two finished items cost nothing
    assert sorted(r["id"] for r in read_results(out)) == ["0", "1"]
    assert main([*args, "--limit", "2", "--out", str(out)]) == 2  # refuses to overwrite a run


def test_draw_prints_mermaid(capsys) -> None:
    assert main(["draw", "--protocol", "chateval", "--strategy", "summarizer", "--agents", "3"]) == 0
    out = capsys.readouterr().out
    assert "summarizer_t1" in out and "news_author_t2 --> round_2" in out


def test_unknown_dataset_is_a_clear_error(capsys, tmp_path: Path) -> None:
    assert main(["eval", "--dataset", str(tmp_path / "none.json"), "--model", "openai:gpt-4o-mini"]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_draw_png(tmp_path: Path) -> None:
    png = tmp_path / "debate.png"
    assert main(["draw", "--protocol", "debate", "--tie-breaker", "--format", "png", "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 2000


def test_draw_ascii(capsys) -> None:
    assert main(["draw", "--protocol", "refer", "--format", "ascii"]) == 0
    art = capsys.readouterr().out
    assert "area_chair" in art and "peer_3" in art
