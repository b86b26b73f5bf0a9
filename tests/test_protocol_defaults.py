"""A protocol's defaults that depend on the data are decided once the data is loaded, the same for every source
(issue 29): ChatEval judges pairwise items in both answer orders (its position calibration) whether they come
from ``--dataset faireval``, from a file in FairEval's layout with no ``--task``, or from a table with ``--task
pairwise``; before, only a source whose task was known before loading got both orders, the others one, silently."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jurygraph.cli import main
from jurygraph.running.datasets import load_dataset
from jurygraph.testing import pairwise_reply
from jurygraph.testing.fake_server import prompt_of

ROWS = 2


def respond(request: dict[str, Any], _: int) -> str:
    return pairwise_reply(8, 6) if "Output with the following format strictly" in prompt_of(request) else \
        "Assistant 1 is more complete."


def sources(folder: Path) -> dict[str, list[str]]:
    """The same FairEval rows three ways: the built-in dataset, a copy of its file, a JSONL table."""
    packaged = json.loads((Path(__file__).parents[1] / "jurygraph" / "data" / "faireval.json").read_text("utf-8"))
    copy = folder / "my_faireval.json"
    copy.write_text(json.dumps(packaged[:ROWS]), encoding="utf-8")
    table = folder / "rows.jsonl"
    items = load_dataset("faireval").items[:ROWS]
    table.write_text("".join(json.dumps({"id": item.id, "question": item.question, "response_1": item.response_1,
                                         "response_2": item.response_2}) + "\n" for item in items), encoding="utf-8")
    return {"built-in": ["--dataset", "faireval", "--limit", str(ROWS)],
            "a FairEval-format file": ["--dataset", str(copy)],
            "a table with --task pairwise": ["--dataset", str(table), "--task", "pairwise"]}


@pytest.mark.parametrize("protocol", ["chateval", "single", "ensemble"])
def test_pairwise_rows_get_both_orders_whatever_their_source(protocol: str, openai_server, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    server = openai_server(respond)
    found = {}
    for name, data in sources(tmp_path).items():
        out = tmp_path / name.replace(" ", "_")
        assert main(["eval", "--protocol", protocol, *data, "--model", "judge", "--base-url", server.base_url,
                     "--out", str(out), "--quiet"]) == 0, capsys.readouterr().err
        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
        found[name] = (manifest["parameters"]["calibrate"], manifest["requests_per_item"],
                       manifest["cli"]["protocol_args"]["calibrate"], manifest["counts"]["requests"])
        records = [json.loads(line) for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]
        assert all(r["verdict"]["detail"]["calibration"] == "bpc" for r in records)
    assert len(set(found.values())) == 1, found
    assert found["built-in"][0] == "bpc"


def test_no_calibrate_keeps_one_order_and_a_score_file_gets_none(openai_server, tmp_path: Path) -> None:
    server = openai_server(respond)
    copy = sources(tmp_path)["a FairEval-format file"]
    out = tmp_path / "one"
    assert main(["eval", "--protocol", "chateval", *copy, "--no-calibrate", "--model", "judge", "--base-url",
                 server.base_url, "--out", str(out), "--quiet"]) == 0
    assert "calibrate" not in json.loads((out / "manifest.json").read_text(encoding="utf-8"))["parameters"]


def test_a_bench_method_decides_them_on_its_data_too(openai_server, tmp_path: Path) -> None:
    server = openai_server(respond)
    out = tmp_path / "bench"
    method = f"--protocol chateval --turns 1 --model judge --base-url {server.base_url}"
    assert main(["bench", "--dataset", "faireval", "--limit", "2", "--method", f"paper={method}",
                 "--method", f"one={method} --no-calibrate", "--resamples", "0", "--no-plots", "--out", str(out),
                 "--quiet"]) == 0
    paper = json.loads((out / "runs" / "paper" / "faireval" / "manifest.json").read_text(encoding="utf-8"))
    one = json.loads((out / "runs" / "one" / "faireval" / "manifest.json").read_text(encoding="utf-8"))
    assert paper["parameters"]["calibrate"] == "bpc" and "calibrate" not in one["parameters"]
