"""Notebook 02's composed strategies, run through ``jurygraph eval`` as docs/ADDING_A_PROTOCOL.md shows: its
``my_strategies.py`` (read from the page itself, so the page stays true) in a folder of its own, given as
``--protocol path/to/my_strategies.py:create_mixed`` and as ``my_strategies:create_critic_last`` from that folder,
against the local server with the notebook's persuadable panel. What each referee heard is read from the prompts
the server received, as the notebook reads them."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from jurygraph.cli import main
from jurygraph.running.rundir import read_manifest, read_results
from jurygraph.testing import pairwise_reply
from jurygraph.testing.fake_server import prompt_of

DOC = Path(__file__).resolve().parents[1] / "docs" / "ADDING_A_PROTOCOL.md"


def strategies_file(folder: Path) -> Path:
    """The page's ``my_strategies.py``, written into ``folder``."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    [code] = [block for block in blocks if block.startswith("# my_strategies.py\n")]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "my_strategies.py"
    path.write_text(code, encoding="utf-8")
    return path


def speaker(prompt: str) -> str:
    return re.search(r"make your talk short and clear, (.*) !", prompt).group(1)  # type: ignore[union-attr]


def heard(prompt: str) -> list[str]:
    """Who spoke in the prompt's discussion history, in order."""
    history = prompt.split("Here is your discussion history:\n")[1].split("Now it’s your time to talk")[0]
    return [who for who, _ in re.findall(r"^\[(.+?)\]: (.*)$", history, flags=re.M)]


def persuadable(request: dict[str, Any], _: int) -> str:
    """The notebook's panel: the Critic prefers Assistant 1; everyone else follows the majority of what they heard
    (Assistant 2 when they heard nothing, or on a tie)."""
    prompt = prompt_of(request)
    history = prompt.split("Here is your discussion history:\n")[1].split("Now it’s your time to talk")[0]
    opinions = re.findall(r"Assistant (\d)", history)
    choice = "1" if speaker(prompt) == "Critic" or opinions.count("1") > opinions.count("2") else "2"
    if "Output with the following format strictly" in prompt:
        return pairwise_reply(8, 5) if choice == "1" else pairwise_reply(5, 8)
    return f"I prefer Assistant {choice}."


def run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    code = main(list(args))
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


def test_notebook_02s_strategy_runs_through_jurygraph_eval(openai_server, tmp_path: Path, capsys,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # the module form puts the current folder on it
    monkeypatch.delitem(sys.modules, "my_strategies", raising=False)
    server = openai_server(persuadable)
    path = strategies_file(tmp_path / "mine")
    out = tmp_path / "runs" / "mixed"
    common = ["--dataset", "faireval", "--limit", "2", "--model", "judge", "--base-url", server.base_url]
    protocol = f"{path}:create_mixed"
    # the dry run: 3 turns of 3 referees, the last turn's 3 judgments each re-askable once
    estimate = json.loads(run(capsys, "eval", "--protocol", protocol, "--param", "turns=3", *common, "--dry-run",
                              "--json"))
    assert (estimate["requests_per_item"], estimate["requests_per_item_with_reasks"]) == (9, 12)
    run(capsys, "eval", "--protocol", protocol, "--param", "turns=3", *common, "--out", str(out), "--quiet",
        "--concurrency", "1")
    calls = [(speaker(prompt_of(r)), heard(prompt_of(r))) for r in server.requests]
    assert len(calls) == 2 * 9
    first_turn = dict(calls[:3])
    assert first_turn == {"Critic": [], "General Public": [], "Scientist": []}  # nobody heard a same-round word
    assert calls[3] == ("General Public", ["Critic", "General Public", "Scientist"])  # turn 1 delivered to all
    assert calls[5] == ("Critic", ["Critic", "General Public", "Scientist", "General Public", "Scientist"])
    records = read_results(out)
    assert [r["status"] for r in records] == ["ok", "ok"]
    manifest = read_manifest(out) or {}
    assert manifest["protocol"] == protocol and manifest["parameters"] == {"turns": 3, "protocol": protocol}
    assert manifest["requests_per_item"] == 12
    # from anywhere: the run names its strategy's file by its absolute path
    monkeypatch.chdir(tmp_path)
    run(capsys, "eval", "--resume", str(out), "--quiet")
    assert "Scientist" in run(capsys, "show", str(out), "0")
    assert "pairwise" in json.loads(run(capsys, "metaeval", str(out), "--json", "--resamples", "0"))["methods"][0][
        "agreement"]
    run(capsys, "report", str(out), "--out", str(tmp_path / "mixed.html"), "--resamples", "0")
    # the module form, from the folder it is in: the Critic speaking last turns the panel's verdict (notebook 02)
    monkeypatch.chdir(path.parent)
    before, after = tmp_path / "runs" / "chateval", tmp_path / "runs" / "critic_last"
    run(capsys, "eval", "--protocol", "chateval", "--personas", "Critic,General Public,Scientist", "--no-calibrate",
        *common, "--out", str(before), "--quiet")
    run(capsys, "eval", "--protocol", "my_strategies:create_critic_last", *common, "--out", str(after), "--quiet")
    assert [r["verdict"]["label"] for r in read_results(before)] == ["1", "1"]
    assert [r["verdict"]["label"] for r in read_results(after)] == ["2", "2"]
    sys.modules.pop("my_strategies", None)


def test_a_run_made_from_python_says_how_to_resume_it(openai_server, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """``run(graph, items, out_dir=...)`` keeps no command line to rebuild its graph from: ``eval --resume`` says so
    (and how to make a run it can resume) instead of asking for --dataset."""
    from jurygraph import JuryContext, ModelSpec, load_dataset, run

    server = openai_server(persuadable)
    path = strategies_file(tmp_path / "mine")
    from jurygraph.graphs.registry import find

    graph = find(f"{path}:create_mixed").create().graph
    out = tmp_path / "python-run"
    run(graph, load_dataset("faireval").items[:1], out_dir=out, progress=False,
        context=JuryContext(default=ModelSpec.parse(f"openai:judge@{server.base_url}")))
    capsys.readouterr()
    assert main(["eval", "--resume", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "the run was not made by `jurygraph eval`" in err and "--protocol MODULE:FACTORY" in err
