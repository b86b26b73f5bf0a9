"""A run directory written by the code before the package was regrouped (#19) resumes after it: state,
checkpoints and the LLM-call cache are plain data that no module path leaks into."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from jurygraph.cli import main
from jurygraph.running.rundir import read_results
from jurygraph.testing import pairwise_reply
from jurygraph.testing.fake_server import prompt_of

LEGACY = Path(__file__).parent / "data" / "legacy_run"


def responder(request: dict, index: int) -> str:
    prompt = prompt_of(request)
    if "Output with the following format strictly" in prompt:
        return pairwise_reply(7, 5) if "Critic" in prompt.split("short and clear,")[-1] else pairwise_reply(8, 4)
    return "Assistant 1 is clearer."


def test_a_run_made_before_the_regrouping_resumes(openai_server, tmp_path: Path) -> None:
    # made by `jurygraph eval --dataset faireval --limit 3 --no-calibrate --concurrency 1 --max-retries 0` with
    # the server failing from the 7th request: item 0 done, item 1 failed after 2 of its 4 calls, item 2 failed
    out = tmp_path / "run"
    shutil.copytree(LEGACY, out)
    before = {r["id"]: r for r in read_results(out)}
    assert {i: r["status"] for i, r in before.items()} == {"0": "ok", "1": "failed", "2": "failed"}
    server = openai_server(responder)
    assert main(["eval", "--resume", str(out), "--base-url", server.base_url, "--quiet"]) == 0
    # item 1 continues from its checkpoint (its 2 finished calls are not repeated), item 2 runs whole
    assert len(server.requests) == 2 + 4
    after = {r["id"]: r for r in read_results(out)}
    assert all(r["status"] == "ok" and r["verdict"]["label"] == "1" for r in after.values())
    assert after["0"] == before["0"]
    assert after["1"]["usage"]["General Public"]["requests"] == 2
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["protocol"] == "chateval" and manifest["cli"]["protocol_args"]["calibrate"] is None
    # the run had no spend ledger: its cache's 6 answers (the calls the first invocation paid) seed it, so the
    # spend and the totals count both invocations' calls
    spend = json.loads((out / "spend.json").read_text())
    assert spend["requests"] == 6 + 6 and spend["cost_usd"] is None
    assert manifest["counts"]["requests"] == 12 and manifest["counts"]["done"] == 3
    assert manifest["usage_by_agent"]["(paid before the ledger)"]["requests"] == 6
    assert [i["counts"]["requests"] for i in manifest["invocations"] if i.get("counts")] == [6]
    assert manifest["dataset"]["sha256"] == "c53e32890ddf8760fb4c1a07a59b404e4dcf925ca4a713e2bbcca8783e1789d7"
