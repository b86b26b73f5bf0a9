"""LangSmith tracing through its standard environment variables, against a local endpoint that records what the
client posts: one item's traces carry its id, the protocol and the agents' names, so a user finds one debate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jurygraph.testing.fake_langsmith import FakeLangSmith
from jurygraph.testing.fake_server import FakeOpenAIServer


def pairwise(request: dict[str, Any], i: int) -> str:
    return "Evidence: compared.\nThe score of Assistant 1: 6\nThe score of Assistant 2: 4"


def eval_in_a_process(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A fresh process: langsmith reads its environment once per process, as a user's shell would set it."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    return subprocess.run([sys.executable, "-m", "jurygraph.cli", *argv], env={**clean, **env}, capture_output=True,
                          text=True, timeout=120, check=False)


def test_traces_carry_item_protocol_and_agents(openai_server: Callable[..., FakeOpenAIServer], tmp_path: Path) -> None:
    server = openai_server(pairwise)
    out = tmp_path / "run"
    with FakeLangSmith() as langsmith:
        done = eval_in_a_process(
            ["eval", "--protocol", "chateval", "--no-calibrate", "--model", "judge", "--base-url", server.base_url,
             "--dataset", "faireval", "--limit", "2", "--out", str(out), "--quiet"],
            {"LANGSMITH_TRACING": "true", "LANGSMITH_ENDPOINT": langsmith.url,
             "LANGSMITH_API_KEY": "lsv2-fake-key-for-tests", "LANGSMITH_PROJECT": "jurygraph-tests"})
        assert done.returncode == 0, done.stderr
        # the root run of each item: named after it, with its id and the protocol as metadata and tags
        roots = [run for run in langsmith.runs.values() if not run.get("parent_run_id") and "item:1" in
                 (run.get("tags") or [])]
        assert [root["name"] for root in roots] == ["chateval item 1"]
        (root,) = roots
        assert root["session_name"] == "jurygraph-tests"
        assert "protocol:chateval" in root["tags"]
        metadata = root["extra"]["metadata"]
        assert (metadata["item_id"], metadata["protocol"], metadata["run"]) == ("1", "chateval", "run")
        # every model call of item 1 (2 referees x 2 turns) is in its trace, named by agent
        calls = [run for run in langsmith.tagged("item:1") if run.get("run_type") == "llm"]
        assert len(calls) == 4
        assert {run["trace_id"] for run in calls} == {root["trace_id"]}
        agents = sorted(run["extra"]["metadata"]["agent"] for run in calls)
        assert agents == ["Critic", "Critic", "General Public", "General Public"]
        assert all(f"agent:{run['extra']['metadata']['agent']}" in run["tags"] for run in calls)
        assert len(langsmith.tagged("item:0")) > len(calls)  # item 0 has its own trace
        assert langsmith.api_keys == {"lsv2-fake-key-for-tests"}
    assert b"lsv2-fake-key-for-tests" not in b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())


def test_tracing_is_off_by_default(openai_server: Callable[..., FakeOpenAIServer], tmp_path: Path) -> None:
    server = openai_server(pairwise)
    with FakeLangSmith() as langsmith:
        done = eval_in_a_process(
            ["eval", "--protocol", "single", "--no-calibrate", "--model", "judge", "--base-url", server.base_url,
             "--dataset", "faireval", "--limit", "1", "--out", str(tmp_path / "run"), "--quiet"],
            {"LANGSMITH_ENDPOINT": langsmith.url, "LANGSMITH_API_KEY": "lsv2-fake-key-for-tests"})
        assert done.returncode == 0, done.stderr
        assert langsmith.paths == [] and langsmith.runs == {}
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["counts"]["done"] == 1
