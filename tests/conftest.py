"""Shared fixtures: fake chat models, the local OpenAI-compatible server, checkpointers. No network:
pytest-socket blocks every host but 127.0.0.1 (see pyproject.toml)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver

from jurygraph.testing.fake_gemini import FakeGeminiServer
from jurygraph.testing.fake_server import FakeOpenAIServer, FakeServer

DATA = Path(__file__).parent / "data"


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never see real API keys, so nothing can reach a real provider by accident."""
    for name in ("OPENAI_API_KEY", "GOOGLE_API_KEY", "GEMINI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def _servers(kind: type[FakeServer]) -> Iterator[Callable[..., Any]]:
    started: list[FakeServer] = []

    def start(responder: Any = None, **kwargs: Any) -> FakeServer:
        server = kind(responder, **kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def openai_server() -> Iterator[Callable[..., FakeOpenAIServer]]:
    """Start FakeOpenAIServer(responder, latency=..., faults=...) on 127.0.0.1; stopped after the test."""
    yield from _servers(FakeOpenAIServer)


@pytest.fixture
def gemini_server() -> Iterator[Callable[..., FakeGeminiServer]]:
    """Start FakeGeminiServer(responder, latency=..., faults=...) on 127.0.0.1; stopped after the test."""
    yield from _servers(FakeGeminiServer)


@pytest.fixture
def sqlite_saver(tmp_path: Path) -> Iterator[SqliteSaver]:
    """A real SQLite checkpointer in a temporary file."""
    with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.sqlite")) as saver:
        yield saver
