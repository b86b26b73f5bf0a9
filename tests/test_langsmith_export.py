"""A LangSmith run export as ``--dataset FILE``: the scripted agent (``tests/scripted_agent.py``) traced by the real
``langsmith`` client to the local fake endpoint, its runs saved as an export (what ``client.list_runs`` gives) and
recognised from their fields: one item per trace with the agent's messages (tool calls included) and the steps of
its LangGraph nodes (the same as ``from_thread`` reads from checkpoints); a chat model's runs and an OpenAI
client's; JSON, JSONL and ``{"runs": [...]}``; bad runs named; judged end to end through the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from jurygraph.cli import main
from jurygraph.running.datasets import load_dataset
from jurygraph.running.rundir import read_results
from jurygraph.testing.fake_langsmith import FakeLangSmith
from tests.scripted_agent import STEPS, TASKS, expected_messages

ROOT = Path(__file__).resolve().parents[1]
TRACE = """
import sys
from langchain_core.messages import HumanMessage
from langchain_core.tracers.langchain import get_client, wait_for_all_tracers
from tests.scripted_agent import TASKS, build_agent

app = build_agent(None)
for i, task in enumerate(TASKS[:3]):
    app.invoke({"messages": [HumanMessage(task)]}, {"run_name": "weather agent", "metadata": {"task": i}})
wait_for_all_tracers()
get_client().flush()  # every run's end (its outputs) sent before the process exits
"""


@pytest.fixture(scope="module")
def runs() -> list[dict[str, Any]]:
    """Three traces of the agent, as the langsmith client posted them."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    with FakeLangSmith() as langsmith:
        done = subprocess.run([sys.executable, "-c", TRACE], cwd=ROOT, capture_output=True, text=True, timeout=120,
                              check=False, env={**clean, "LANGSMITH_TRACING": "true", "PYTHONPATH": str(ROOT),
                                                "LANGSMITH_ENDPOINT": langsmith.url, "LANGSMITH_PROJECT": "agents",
                                                "LANGSMITH_API_KEY": "lsv2-fake-key-for-tests"})
        assert done.returncode == 0, done.stderr
        return json.loads(json.dumps(list(langsmith.runs.values()), default=str))


def write(path: Path, data: Any, jsonl: bool = False) -> Path:
    text = "".join(json.dumps(row) + "\n" for row in data) if jsonl else json.dumps(data)
    path.write_text(text, encoding="utf-8")
    return path


def test_one_item_per_trace_with_messages_and_steps(runs: list[dict[str, Any]], tmp_path: Path) -> None:
    dataset = load_dataset(write(tmp_path / "export.json", runs))
    assert dataset.name == "langsmith" and not dataset.errors
    items = dataset.items
    assert len(items) == 3
    roots = {run["id"]: run for run in runs if not run.get("parent_run_id")}
    for item, task in zip(items, TASKS, strict=False):
        assert item.id in roots and item.meta["name"] == "weather agent"
        assert [m.model_dump(mode="json", exclude_none=True) for m in item.messages or []] == expected_messages(task)
        assert item.steps == STEPS
        assert item.task.value == "score" and item.scale is not None and (item.scale.low, item.scale.high) == (1, 10)
    # the same items from JSONL and from {"runs": [...]}, in any order of the runs
    shuffled = list(reversed(runs))
    for other in (load_dataset(write(tmp_path / "export.jsonl", shuffled, jsonl=True)),
                  load_dataset(write(tmp_path / "wrapped.json", {"runs": shuffled}))):
        assert sorted(i.model_dump_json() for i in other) == sorted(i.model_dump_json() for i in items)


def test_chat_model_and_openai_runs(runs: list[dict[str, Any]], tmp_path: Path) -> None:
    # only the chat model's runs exported: each is its own item, its prompt and its reply (a tool call)
    llm = [run for run in runs if run["run_type"] == "llm"]
    llm_runs = load_dataset(write(tmp_path / "llm.json", llm))
    assert not llm_runs.errors, [str(e) for e in llm_runs.errors]
    items = llm_runs.items
    assert len(items) == len(llm)
    first = items[0]
    assert [m.role for m in first.messages or []] == ["user", "assistant"]
    assert first.messages and first.messages[-1].tool_calls and first.messages[-1].tool_calls[0].name == "search"
    assert first.steps is None  # a lone model run has no graph steps
    # an OpenAI client's run (langsmith's wrap_openai): OpenAI messages in, choices out
    openai_run = {"id": "r1", "name": "ChatOpenAI", "run_type": "llm", "parent_run_id": None,
                  "inputs": {"messages": [{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "2+2?"}]},
                  "outputs": {"choices": [{"message": {"role": "assistant", "content": "4"}}]}}
    (item,) = load_dataset(write(tmp_path / "openai.json", [openai_run]), scale=None).items
    assert [(m.role, m.text) for m in item.messages or []] == [("system", "Be brief."), ("user", "2+2?"),
                                                                ("assistant", "4")]


def test_bad_runs_are_named(tmp_path: Path) -> None:
    runs = [{"id": "ok", "run_type": "chain", "inputs": {"messages": [{"role": "user", "content": "hi"}]},
             "outputs": {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}},
            {"id": "failed", "run_type": "chain", "inputs": {"messages": [{"role": "user", "content": "hi"}]},
             "outputs": None, "error": "TimeoutError"},
            {"id": "odd", "run_type": "chain", "inputs": {"messages": [{"role": "robot", "content": "?"}]},
             "outputs": {"messages": []}},
            {"name": "not a run"}]
    dataset = load_dataset(write(tmp_path / "bad.json", runs), aspect="helpfulness")
    assert [item.id for item in dataset] == ["ok"] and dataset.items[0].aspect == "helpfulness"
    assert [(e.row, e.field) for e in dataset.errors] == [(4, None), ("2 (id failed)", "outputs"),
                                                          ("3 (id odd)", "inputs.messages[0]")]
    assert "still running, or it failed: TimeoutError" in dataset.errors[1].message
    assert load_dataset(write(tmp_path / "scaled.json", runs[:1]), scale=None).items[0].scale is not None


def test_judged_through_the_cli(runs: list[dict[str, Any]], openai_server, tmp_path: Path) -> None:
    server = openai_server(lambda request, choice=0: "Evaluation evidence: fine.\nThe score of the response: 4")
    out = tmp_path / "run"
    export = write(tmp_path / "export.json", runs)
    assert main(["eval", "--dataset", str(export), "--protocol", "single", "--model", "judge", "--base-url",
                 server.base_url, "--scale", "1-5", "--quiet", "--out", str(out)]) == 0
    records = read_results(out)
    assert len(records) == 3 and {r["verdict"]["score"] for r in records} == {4.0}
    assert all("1 to 5" in r["messages"][-1]["content"] for r in server.requests)
