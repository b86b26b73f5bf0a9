"""Shared fixtures: fake chat models, the local OpenAI-compatible server, checkpointers, a PostgreSQL server. No
network: pytest-socket blocks every host but 127.0.0.1 (see pyproject.toml)."""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import tempfile
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


PG_BIN = next((Path(p) for p in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)), None) \
    if Path("/usr/lib/postgresql").exists() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(command: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root; CI runs as root, so the server runs as the 'postgres' user
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *command]
    return command


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A real PostgreSQL server on 127.0.0.1 for the whole session (trust auth, fsync off): its URL without a
    database. Skipped, saying why, where the server binaries are not installed."""
    if PG_BIN is None or not (PG_BIN / "initdb").exists():
        pytest.skip("PostgreSQL server binaries are not installed (apt-get install postgresql); .ci/run installs them")
    base = Path(tempfile.mkdtemp(prefix="jurygraph-pg-", dir="/tmp"))
    data, sockets = base / "data", base / "sock"
    sockets.mkdir()
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
        shutil.chown(sockets, "postgres")
    port = free_port()
    subprocess.run(_as_postgres([str(PG_BIN / "initdb"), "-D", str(data), "-U", "jurygraph", "--auth=trust"]),
                   check=True, capture_output=True)
    # enough connections for a Ray run's workers (a checkpointer and a cache pool each) beside the test's own
    options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
    subprocess.run(_as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(data), "-o", options, "-w", "-l",
                                 str(base / "log"), "start"]), check=True, capture_output=True)
    try:
        yield f"postgresql://jurygraph@127.0.0.1:{port}"
    finally:
        subprocess.run(_as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
                       capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


_databases = itertools.count()


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """A fresh, empty database of the session's PostgreSQL server, for one test."""
    import psycopg

    name = f"test_{os.getpid()}_{next(_databases)}"
    with psycopg.connect(f"{postgres_server}/postgres", autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return f"{postgres_server}/{name}"
