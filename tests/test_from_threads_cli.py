"""``jurygraph eval --from-threads``: the threads of a scripted agent's checkpoint store (SQLite, PostgreSQL) judged
through the local OpenAI-compatible server, one score item per thread; a ``kill -9`` mid-run and ``--resume`` finish
the run without judging an item twice; ``--thread-ids`` chooses threads; the agent's store is only read; and
``--trajectory-match`` on a conversation file decides the items it can without a model call."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver

from jurygraph.cli import main
from jurygraph.running.rundir import read_results
from jurygraph.testing.fake_server import prompt_of
from tests.scripted_agent import TASKS, build_agent, run_tasks

IDS = [f"task-{i}" for i in range(len(TASKS))]


def respond(request: dict[str, Any], choice: int = 0) -> str:
    """A 3 for the thread with the misspelt city, 4 for the others (the conversation is in the prompt)."""
    prompt = prompt_of(request)
    score = 3 if "Olso" in prompt or "Oslo" in prompt else 4
    return f"Evaluation evidence: scripted.\nThe score of the response: {score}"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "agent.sqlite"
    conn = sqlite3.connect(path, check_same_thread=False)
    run_tasks(build_agent(SqliteSaver(conn)))
    conn.close()
    return path


def args_for(server: Any, source: str, out: Path, *extra: str) -> list[str]:
    return ["eval", "--from-threads", source, "--protocol", "single", "--model", "judge", "--base-url",
            server.base_url, "--aspect", "task_completion", "--quiet", "--out", str(out), *extra]


def snapshot(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints ORDER BY 1, 2, 3").fetchall()


def test_a_kill_mid_run_then_resume_judges_every_thread_once(openai_server, store: Path, tmp_path: Path) -> None:
    server = openai_server(respond, latency=0.3)
    out = tmp_path / "run"
    before = snapshot(store)
    child = subprocess.Popen([sys.executable, "-m", "jurygraph.cli", *args_for(server, str(store), out,
                                                                                "--concurrency", "1")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(server.requests) < 3:  # the third thread's call is out
            time.sleep(0.01)
    finally:
        child.kill()
        child.wait(timeout=30)
    killed = len(server.requests)
    done = [r["id"] for r in read_results(out)]
    # results are written as items finish (several are in flight at once), so their order is not the threads'
    assert 3 <= killed < len(IDS) and set(done) < set(IDS) and len(done) == len(set(done)), (killed, done)
    assert main(["eval", "--resume", str(out), "--quiet"]) == 0
    records = read_results(out)
    assert sorted(r["id"] for r in records) == IDS and all(r["status"] == "ok" for r in records)
    # each thread judged once: at most the call in flight at the kill is sent again (the cache has the others)
    assert len(server.requests) <= len(IDS) + 1
    assert {r["id"]: r["verdict"]["score"] for r in records} == {i: (3.0 if i == "task-1" else 4.0) for i in IDS}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["dataset"]["name"] == "threads" and manifest["dataset"]["source"] == str(store)
    assert manifest["cli"]["from_threads"] == str(store) and len(manifest["invocations"]) == 2
    assert snapshot(store) == before  # the agent's store is only read


def test_thread_ids_choose_threads_and_mistakes_are_refused(openai_server, store: Path, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    server = openai_server(respond)
    chosen = tmp_path / "ids.txt"
    chosen.write_text("# the two to look at\ntask-3\n\ntask-1\n", encoding="utf-8")
    out = tmp_path / "some"
    assert main(args_for(server, str(store), out, "--thread-ids", str(chosen), "--scale", "1-5")) == 0
    records = read_results(out)
    assert sorted(r["id"] for r in records) == ["task-1", "task-3"]
    prompts = [prompt_of(r) for r in server.requests]
    assert len(prompts) == 2 and any("1 to 5" in p for p in prompts)
    capsys.readouterr()
    for extra, message in [(["--checkpoint", str(store)], "must not be the agent's store"),
                           (["--dataset", "faireval"], "not both"),
                           (["--task", "pairwise"], "rated as a score item"),
                           (["--scale", "5-1"], "--scale '5-1': write LOW-HIGH")]:
        assert main(args_for(server, str(store), tmp_path / "x", *extra)) == 2
        assert message in capsys.readouterr().err
    assert main(["eval", "--dataset", "faireval", "--thread-ids", str(chosen), "--model", "judge"]) == 2
    assert "give it too" in capsys.readouterr().err


def test_a_postgres_store(openai_server, postgres_url: str, tmp_path: Path) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(postgres_url) as saver:
        saver.setup()
        run_tasks(build_agent(saver))
    server = openai_server(respond)
    out = tmp_path / "pg"
    assert main(args_for(server, postgres_url, out)) == 0
    assert sorted(r["id"] for r in read_results(out)) == IDS  # in the order they finished
    assert json.loads((out / "manifest.json").read_text())["dataset"]["source"] == postgres_url  # no password


# --- the trajectory match before the panel, from a conversation file --------------------------------------------


def conversation(city: str, asked: str) -> list[dict[str, Any]]:
    call = {"id": "w", "type": "function", "function": {"name": "weather", "arguments": json.dumps({"city": asked})}}
    return [{"role": "user", "content": f"Weather in {city}?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "w", "content": "sunny"},
            {"role": "assistant", "content": f"Sunny in {city}."}]


def test_trajectory_match_decides_before_the_panel(openai_server, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"id": city, "messages": conversation(city, asked), "reference": conversation(city, city),
             "scale_low": 1, "scale_high": 10} for city, asked in [("Paris", "Paris"), ("Oslo", "Olso"),
                                                                    ("Lima", "Lima")]]
    rows.append({"id": "free", "messages": conversation("Rome", "Rome"), "scale_low": 1, "scale_high": 10})
    data = tmp_path / "agents.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    server = openai_server(respond)
    out = tmp_path / "matched"
    argv = ["eval", "--dataset", str(data), "--task", "score", "--protocol", "single", "--model", "judge",
            "--base-url", server.base_url, "--quiet", "--out", str(out), "--trajectory-match", "strict",
            "--tool-args-override", "weather=city"]
    # the dry run renders the same graph: exactly the two requests the run will send
    assert main([*argv, "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["requests"] == 2 and plan["requests_per_item"] == 0.5 and server.requests == []
    assert main(argv) == 0
    records = {r["id"]: r for r in read_results(out)}
    # Paris and Lima match: decided, no request; Oslo (misspelt) and the item without a reference: the panel
    assert len(server.requests) == 2
    assert {i: r.get("decided_by", "panel") for i, r in records.items()} == {
        "Paris": "trajectory_match", "Oslo": "panel", "Lima": "trajectory_match", "free": "panel"}
    assert records["Paris"]["verdict"]["score"] == 10.0 and records["Oslo"]["verdict"]["score"] == 3.0
    assert records["Oslo"]["verdict"]["detail"]["trajectory_match"]["matched"] is False
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parameters"]["trajectory_match"] == {"mode": "strict", "tool_args": "exact",
                                                          "overrides": {"weather": ["city"]}, "on_mismatch": "panel"}
    capsys.readouterr()
    assert main(["show", str(out), "Paris"]) == 0
    assert "trajectory match (strict, tool arguments exact): the trajectory matches the reference; decided" in \
        capsys.readouterr().out
    # a resume rebuilds the same graph from the manifest: nothing is judged again
    assert main(["eval", "--resume", str(out), "--quiet"]) == 0
    assert len(server.requests) == 2
    # under a budget, the items the match decides cost nothing and are not held back
    budgeted = tmp_path / "budgeted"
    argv[argv.index("--out") + 1] = str(budgeted)
    assert main([*argv, "--max-total-tokens", "100000", "--no-cache"]) == 0
    manifest = json.loads((budgeted / "manifest.json").read_text())
    assert manifest["budget"]["held_back"] == {} and len(read_results(budgeted)) == 4 and len(server.requests) == 4



def test_the_match_is_restored_from_the_manifest_by_resume_review_and_report(
        openai_server, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``--trajectory-match`` and its options are the run's (its manifest's ``parameters`` and command line):
    ``--resume`` judges what is left through the match, ``review`` resumes a paused item in the same graph, and
    ``report`` draws it (the match before the panel)."""
    from jurygraph.cli import diagrams
    from jurygraph.cli.protocols import build_protocol, manifest_args
    from jurygraph.cli.report import diagram

    def row(city: str, asked: str) -> str:
        return json.dumps({"id": city, "messages": conversation(city, asked), "reference": conversation(city, city),
                           "scale_low": 1, "scale_high": 10}) + "\n"

    data = tmp_path / "agents.jsonl"
    data.write_text(row("Paris", "Paris") + row("Oslo", "Olso") + row("Lima", "Lima"), encoding="utf-8")

    def split(request: dict[str, Any], choice: int = 0) -> str:  # the Critic disagrees on Rome only
        if request["model"] == "contrary" and "Roma" in prompt_of(request):
            return "Evaluation evidence: scripted.\nThe score of the response: 9"
        return respond(request, choice)

    server = openai_server(split)
    out = tmp_path / "run"
    assert main(["eval", "--dataset", str(data), "--task", "score", "--protocol", "ensemble", "--personas",
                 "General Public,Critic", "--model", "judge", "--models", "Critic=contrary", "--base-url",
                 server.base_url, "--quiet", "--out", str(out), "--trajectory-match", "unordered",
                 "--tool-args-override", "weather=city", "--trajectory-mismatch", "panel",
                 "--review-when", "spread>1"]) == 0
    assert len(server.requests) == 2  # Oslo's two referees; Paris and Lima decided by the match
    match = {"mode": "unordered", "tool_args": "exact", "overrides": {"weather": ["city"]}, "on_mismatch": "panel"}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parameters"]["trajectory_match"] == match
    rebuilt = build_protocol(manifest_args(manifest))
    assert rebuilt.params["trajectory_match"] == match and "trajectory_match" in rebuilt.graph.nodes
    # the panel alone, what a plan is counted on and --models/--gen are checked against (the match decides the
    # first item for no call: the panel's agents would not be heard), is not edited by the match or the routes
    assert rebuilt.panel_graph is not None and set(rebuilt.panel_graph.nodes) == {"general_public", "critic",
                                                                                  "aggregate"}

    # a row added, and --resume goes on with the run's options: Rome ("Roma") is a mismatch, its panel splits
    with data.open("a", encoding="utf-8") as file:
        file.write(row("Rome", "Roma"))
    assert main(["eval", "--resume", str(out), "--dataset-changed", "continue", "--quiet"]) == 0
    assert len(server.requests) == 4  # Rome's two referees; nothing judged twice
    records = {r["id"]: r for r in read_results(out)}
    assert {i: (r["status"], r["decided_by"]) for i, r in records.items()} == {
        "Paris": ("ok", "trajectory_match"), "Oslo": ("ok", "panel"), "Lima": ("ok", "trajectory_match"),
        "Rome": ("awaiting_review", "panel")}
    assert records["Rome"]["verdict"]["detail"]["trajectory_match"]["matched"] is False

    capsys.readouterr()
    assert main(["review", str(out), "--item", "Rome", "--verdict", "6"]) == 0
    reviewed = {r["id"]: r for r in read_results(out)}["Rome"]
    assert reviewed["decided_by"] == "review" and reviewed["verdict"]["score"] == 6
    assert reviewed["verdict"]["detail"]["review"]["panel_verdict"]["detail"]["trajectory_match"]["decided"] is False

    # the report's diagram is the graph rebuilt from the manifest: the match before the panel, recorded after it
    def no_graphviz(graph: Any) -> bytes:
        raise diagrams.GraphvizMissing("not here")

    monkeypatch.setattr(diagrams, "png_bytes", no_graphviz)
    png, mermaid = diagram(json.loads((out / "manifest.json").read_text()))
    assert png is None and mermaid is not None and "trajectory_match" in mermaid and "record_match" in mermaid
