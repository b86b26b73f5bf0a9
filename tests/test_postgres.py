"""Durable checkpoints in a real PostgreSQL server (several workers sharing a run), started on 127.0.0.1
by the test. `.ci/run` installs Debian's postgresql; without its binaries this one test is skipped and
says why."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jurygraph import EvalItem, JuryContext, create_chateval
from jurygraph.running.rundir import read_results
from jurygraph.running.runner import run
from jurygraph.testing import FakeJudge, pairwise_reply

PG_BIN = next((Path(p) for p in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)), None) \
    if Path("/usr/lib/postgresql").exists() else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(command: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root; CI runs as root, so the server runs as the 'postgres' user
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *command]
    return command


@pytest.fixture
def postgres_url() -> Iterator[str]:
    if PG_BIN is None or not (PG_BIN / "initdb").exists():
        pytest.skip("PostgreSQL server binaries are not installed (apt-get install postgresql); .ci/run installs them")
    base = Path(tempfile.mkdtemp(prefix="jurygraph-pg-", dir="/tmp"))
    data, sockets = base / "data", base / "sock"
    sockets.mkdir()
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
        shutil.chown(sockets, "postgres")
    port = _free_port()
    subprocess.run(_as_postgres([str(PG_BIN / "initdb"), "-D", str(data), "-U", "jurygraph", "--auth=trust"]),
                   check=True, capture_output=True)
    options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(_as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(data), "-o", options, "-w", "-l",
                                 str(base / "log"), "start"]), check=True, capture_output=True)
    try:
        yield f"postgresql://jurygraph@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(_as_postgres([str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]),
                       capture_output=True)
        shutil.rmtree(base, ignore_errors=True)


def respond(prompt: str, messages: object) -> str:
    return pairwise_reply(3, 7) if "Output with the following format strictly" in prompt else "discussing"


def test_postgres_checkpoints_survive_a_failure_and_resume(postgres_url: str, tmp_path: Path) -> None:
    items = [EvalItem(id=f"p{i}", task="pairwise", question=f"Q{i}", response_1="a", response_2="b")
             for i in range(4)]
    broken = FakeJudge(respond=respond, fail_when=lambda p: "Q2" in p and "Critic !" in p)
    summary = run(create_chateval(), items, out_dir=tmp_path, checkpoint=postgres_url, cache=False, progress=False,
                  context=JuryContext(default=broken))
    assert (summary.done, summary.failed) == (3, 1)
    assert not (tmp_path / "checkpoints.sqlite").exists()  # the checkpoints went to PostgreSQL

    fixed = FakeJudge(respond=respond)
    started = time.monotonic()
    summary = run(create_chateval(), items, out_dir=tmp_path, checkpoint=postgres_url, cache=False, progress=False,
                  resume=True, context=JuryContext(default=fixed))
    assert (summary.done, summary.skipped) == (1, 3) and time.monotonic() - started < 30
    # p2 resumed from its PostgreSQL checkpoint at the Critic's first turn: 2 Critic turns + GP's second
    assert [c.prompt.split("clear, ")[-1].split(" !")[0] for c in fixed.calls] == ["Critic", "General Public",
                                                                                   "Critic"]
    assert sorted(r["id"] for r in read_results(tmp_path)) == ["p0", "p1", "p2", "p3"]
    manifest = (tmp_path / "manifest.json").read_text()
    assert "postgresql://jurygraph:***@127.0.0.1" in manifest or "postgresql://jurygraph@127.0.0.1" in manifest
