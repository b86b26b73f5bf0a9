"""The cluster-wide budget of a distributed run (jurygraph.llm.shared_limits.SharedBudget), on its own event loop
as the budget actor runs it: rate tokens shared by every worker, in-flight slots held by shard attempts and given
back when a dead worker's shard begins again. The budget inside a real Ray cluster: tests/test_ray.py."""

from __future__ import annotations

import asyncio
import time

import pytest

from jurygraph.llm.limits import ANY_PROVIDER, ProviderLimit
from jurygraph.llm.shared_limits import Pace, SharedBudget


async def test_the_rate_is_shared_by_every_attempt() -> None:
    budget = SharedBudget({ANY_PROVIDER: ProviderLimit(requests_per_second=20)})
    for shard in ("s0", "s1", "s2", "s3"):
        await budget.begin(shard, "t")
    granted: list[float] = []

    async def requests(shard: str) -> None:
        for _ in range(10):
            await budget.acquire(ANY_PROVIDER, shard, "t")
            granted.append(time.monotonic())

    started = time.monotonic()
    await asyncio.gather(*(requests(shard) for shard in ("s0", "s1", "s2", "s3")))
    # 40 requests from 4 attempts at 20/s in all: ~2 s (at 20/s each they would take 0.5 s)
    assert len(granted) == 40
    assert time.monotonic() - started >= 1.8


async def test_a_dead_attempts_slots_come_back_when_its_shard_begins_again() -> None:
    budget = SharedBudget({"openai": ProviderLimit(max_in_flight=2)})
    await budget.begin("s0", "first")
    await budget.begin("s1", "other")
    await budget.acquire("openai", "s0", "first")
    await budget.acquire("openai", "s0", "first")  # the worker holding both slots is killed: it never releases
    assert budget.in_flight() == {"openai": 2}

    waiting = asyncio.ensure_future(budget.acquire("openai", "s1", "other"))
    stale = asyncio.ensure_future(budget.acquire("openai", "s0", "first"))  # sent by the dead worker before it died
    await asyncio.sleep(0.05)
    assert not waiting.done()

    await budget.begin("s0", "second")  # Ray runs shard s0 again: the first attempt is dead
    await asyncio.wait_for(waiting, 1)
    await asyncio.wait_for(stale, 1)
    # s1 holds one slot; the dead attempt's late request was granted nothing
    assert budget.in_flight() == {"openai": 1}
    await budget.acquire("openai", "s0", "second")
    assert budget.in_flight() == {"openai": 2}

    await budget.release("openai", "s1", "other")
    await budget.release("openai", "s1", "other")  # a second release of one slot gives nothing back twice
    assert budget.in_flight() == {"openai": 1}
    await budget.end("s0", "second")  # an attempt that ends gives back what it still holds
    assert budget.in_flight() == {"openai": 0}


async def test_a_shard_given_up_gives_its_slots_back() -> None:
    budget = SharedBudget({ANY_PROVIDER: ProviderLimit(max_in_flight=1, requests_per_second=100)})
    await budget.begin("s0", "t")
    await budget.acquire(ANY_PROVIDER, "s0", "t")
    await budget.end("s0")  # the driver cancels or gives up a shard: whichever attempt held slots
    assert budget.in_flight() == {ANY_PROVIDER: 0}
    await budget.begin("s1", "u")
    await asyncio.wait_for(budget.acquire(ANY_PROVIDER, "s1", "u"), 1)


def test_a_pace_serves_in_order_and_keeps_a_quiet_seconds_turns_only() -> None:
    pace = Pace(10)
    assert [pace.turn(100.0) for _ in range(3)] == pytest.approx([100.0, 100.1, 100.2])  # one interval apart
    # five quiet seconds later: a second's worth of turns (10) go at once, the 11th waits its interval
    turns = [pace.turn(105.5) for _ in range(11)]
    assert sum(turn <= 105.5 + 1e-9 for turn in turns) == 10 and turns[-1] == pytest.approx(105.6)
