"""Batch mode (issue 20) with escalation and review (issue 23): an item that waits for its batch and an item that
waits for a person are both LangGraph interrupts, told apart by their value. A --batch run pauses exactly the
doubtful items for review (the rounds end; nothing spins), escalates through a further batch round, a resume sends
nothing for the paused items, and a --batch run resumed online starts its waiting items afresh from the cache."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from jurygraph.cli import main
from jurygraph.running.rundir import read_results
from tests.test_escalation_cli import DISAGREE, HUMAN, LIMIT, by_id, respond, run_args

BATCH = ("--batch", "--batch-poll", "0.01")


def test_a_batch_run_pauses_the_doubtful_items_for_review(openai_server, tmp_path: Path) -> None:
    server = openai_server(respond)
    out = tmp_path / "run"
    assert main(run_args(server, out, "--review-when", "agreement<1", *BATCH)) == 0
    assert server.requests == []  # every call went through the Batch API
    # the ensemble's two personas judge both orders in one superstep: one round, one batch, 2 x 2 calls an item
    assert [len(lines) for lines in server.batches.created] == [4 * LIMIT]
    records = by_id(out)
    assert {i for i, r in records.items() if r["status"] == "awaiting_review"} == DISAGREE
    assert all(records[i]["status"] == "ok" for i in set(records) - DISAGREE)
    assert json.loads((out / "manifest.json").read_text())["awaiting_review"] == sorted(DISAGREE)

    # a resume (in batch mode or not) finds them still waiting and submits nothing
    for extra in (BATCH, ()):
        assert main(["eval", "--resume", str(out), "--quiet", *extra]) == 0
        assert len(server.batches.created) == 1 and server.requests == []
        assert {r["id"] for r in read_results(out) if r["status"] == "awaiting_review"} == DISAGREE

    assert main(["review", str(out), "--item", "1", "--verdict", "tie", "--reviewer", "ada"]) == 0
    reviewed = by_id(out)["1"]
    assert reviewed["status"] == "ok" and reviewed["verdict"]["label"] == "tie"
    assert reviewed["verdict"]["detail"]["review"]["reviewer"] == "ada"


def test_a_batch_run_escalates_in_a_further_round_to_the_online_verdicts(openai_server, tmp_path: Path) -> None:
    online, batched = openai_server(respond), openai_server(respond)
    escalate = ("--escalate-when", "agreement<1", "--escalate-to", "strong")
    assert main(run_args(online, tmp_path / "online", *escalate)) == 0
    assert main(run_args(batched, tmp_path / "batch", *escalate, *BATCH)) == 0
    assert batched.requests == []
    rounds = [sorted({line["body"]["model"] for line in lines}) for lines in batched.batches.created]
    assert rounds == [["contrary", "steady"], ["strong"]]  # the stronger judge's calls: the second round only
    assert len(batched.batches.created[1]) == 2 * len(DISAGREE)
    assert {i: r["verdict"]["label"] for i, r in by_id(tmp_path / "batch").items()} == \
        {i: r["verdict"]["label"] for i, r in by_id(tmp_path / "online").items()}
    assert all(by_id(tmp_path / "batch")[i]["verdict"]["label"] == HUMAN[i] for i in DISAGREE)


def test_a_batch_run_resumed_online_starts_its_waiting_items_afresh(openai_server, tmp_path: Path) -> None:
    """Items stopped while waiting for a batch (the process cancelled while polling) and resumed without batch
    mode (``run(..., resume=True)``): they start again, replayed from the cache, and go to the ordinary API. They
    are not mistaken for items waiting for a person."""
    from jurygraph import JuryContext, create_chateval, load_dataset
    from jurygraph.running.batch import BatchOptions, waits_for_batch
    from jurygraph.running.review import NotAwaitingReview, reviewing
    from jurygraph.running.runner import arun, open_checkpointer, run

    server = openai_server(respond)
    server.batches.polls_per_status = 10_000  # the batch stays `validating`
    items = load_dataset("faireval").items[:3]
    context = JuryContext(default=f"openai:steady@{server.base_url}")
    out = tmp_path / "run"

    started: list[asyncio.Future[Any]] = []

    async def cancelled_while_polling() -> None:
        work = asyncio.ensure_future(arun(create_chateval(), items, out_dir=out, context=context, progress=False,
                                          batch=BatchOptions(poll_seconds=0.01)))
        started.append(work)
        while server.batches.polls < 3:
            await asyncio.sleep(0.01)
        work.cancel()
        await asyncio.wait([work])

    # the runner answers a cancel as it answers Ctrl-C: KeyboardInterrupt ("resume with --resume"), which asyncio
    # raises out of its loop
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(cancelled_while_polling())
    assert isinstance(started[0].exception(), KeyboardInterrupt)
    assert len(server.batches.created) == 1 and server.requests == []

    async def waiting() -> list[bool]:
        async with open_checkpointer(out / "checkpoints.sqlite") as saver:
            app = create_chateval().compile(checkpointer=saver)
            return [waits_for_batch((await app.aget_state({"configurable": {"thread_id": item.id}})).interrupts)
                    for item in items]

    assert asyncio.run(waiting()) == [True] * 3
    # `jurygraph review` does not take a batch wait for a person's: nothing is resumed with a reviewer's answer
    with reviewing(create_chateval(), out) as review:
        assert review.pending() == {}
        with pytest.raises(NotAwaitingReview, match=f"item '{items[0].id}' does not wait for a review"):
            review.answer(items[0].id, "1")
    assert asyncio.run(waiting()) == [True] * 3
    summary = run(create_chateval(), items, out_dir=out, context=context, resume=True, progress=False)
    assert (summary.done, summary.awaiting_review) == (3, 0)
    assert len(server.requests) == 3 * 4  # ChatEval 2 x 2, one order: every call once, online
    assert all(r["status"] == "ok" for r in read_results(out))
