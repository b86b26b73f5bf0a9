"""Durable checkpoints in a real PostgreSQL server (several workers sharing a run), started on 127.0.0.1 by the
suite (``postgres_url`` in conftest.py). `.ci/run` installs Debian's postgresql; without its binaries these tests
are skipped and say why."""

from __future__ import annotations

import time
from pathlib import Path

from jurygraph import EvalItem, JuryContext, create_chateval
from jurygraph.running.rundir import read_results
from jurygraph.running.runner import run
from jurygraph.testing import FakeJudge, pairwise_reply


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
