"""The review from LangGraph Studio: ``langgraph dev`` (started here on 127.0.0.1, from the repository root, as the
README says) serves ``ensemble_review``; the LangGraph SDK client runs an item whose referees disagree, finds it
stopped at the review node with the panel's verdict, its doubt and the transcript, and resumes it with
``Command(resume=...)`` -- first with an answer that does not fit (asked again, with the reason), then with a verdict.
The referees' models are the local fake OpenAI server's, named in the run's JSON context as Studio sends it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from jurygraph.running.datasets import load_dataset
from jurygraph.testing import pairwise_reply
from tests.conftest import free_port

pytest.importorskip("langgraph_api", reason="the studio extra (langgraph-cli[inmem]) serves `langgraph dev`")
from langgraph_sdk import get_sync_client  # installed with the studio extra, as langgraph_api

ROOT = Path(__file__).parent.parent


@pytest.fixture(scope="module")
def studio_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    log_path = tmp_path_factory.mktemp("studio") / "langgraph-dev.log"  # a file: a full pipe would stall the server
    log = log_path.open("wb")
    env = {**os.environ, "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGSMITH_TRACING": "false"}
    for key in ("OPENAI_API_KEY", "LANGSMITH_API_KEY", "LANGCHAIN_API_KEY"):
        env.pop(key, None)
    server = subprocess.Popen([sys.executable, "-m", "langgraph_cli", "dev", "--no-browser", "--no-reload",
                               "--host", "127.0.0.1", "--port", str(port)], cwd=ROOT, env=env,
                              stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/ok", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"langgraph dev did not start:\n{log_path.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def test_studio_stops_a_doubtful_item_for_review_and_a_resume_decides_it(studio_url: str, openai_server) -> None:
    # General Public prefers Assistant 1, the Critic Assistant 2: agreement 1/2, so the item waits for a person
    server = openai_server(lambda request, i: pairwise_reply(8, 4) if request["model"] == "left"
                           else pairwise_reply(4, 8))
    item = load_dataset("faireval").items[0].model_dump(mode="json", exclude_none=True)
    context = {"default": f"openai:left@{server.base_url}", "models": {"Critic": f"openai:right@{server.base_url}"}}
    client = get_sync_client(url=studio_url)
    thread = client.threads.create()["thread_id"]

    out: dict[str, Any] = client.runs.wait(thread, "ensemble_review", input={"item": item}, context=context)
    assert "__interrupt__" in out
    state = client.threads.get_state(thread)
    assert state["next"] == ["review"]
    [paused] = state["interrupts"]
    request = paused["value"]
    assert request["item_id"] == item["id"] and request["expects"] == "1, 2 or tie"
    assert request["panel_verdict"]["label"] == "tie" and request["doubt"]["agreement"] == 0.5
    assert request["triggered_by"] == ["agreement<1"] and "human" not in request  # the reviewer is measured by it
    assert {t["speaker"] for t in request["transcript"]} == {"General Public", "Critic"}
    sent = len(server.requests)
    assert sent == 2

    out = client.runs.wait(thread, "ensemble_review", command={"resume": {"verdict": "maybe"}}, context=context)
    assert "is not a pairwise verdict" in client.threads.get_state(thread)["interrupts"][0]["value"]["error"]

    out = client.runs.wait(thread, "ensemble_review", context=context,
                           command={"resume": {"verdict": "1", "reviewer": "studio user", "note": "A answers it"}})
    verdict = out["verdict"]
    assert verdict["label"] == "1" and verdict["method"] == "review"
    review = verdict["detail"]["review"]
    assert review["reviewer"] == "studio user" and review["note"] == "A answers it"
    assert review["panel_verdict"]["label"] == "tie"
    assert client.threads.get_state(thread)["next"] == []
    assert len(server.requests) == sent  # the resume asked no model again
