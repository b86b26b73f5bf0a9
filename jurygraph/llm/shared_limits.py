"""Provider limits shared by every worker of a distributed run: one budget hands out rate tokens and in-flight
slots, so 4 workers with ``--rps 10`` send 10 requests a second in all, not 40.

:class:`SharedBudget` is the bookkeeping, on one asyncio loop (the Ray engine runs it in one actor,
:mod:`jurygraph.running.distributed`, and workers reach it through their gates). Rate tokens are paced
(:class:`Pace`): the same bucket as a one-process run's limiter (at most a second's worth saved while idle), but
first come first served and without polling, since a cluster's budget has hundreds of requests waiting at once
(LangChain's limiter, which each of them would poll every few milliseconds, kept a core busy at 800 waiters and
200/s). Nothing gives a rate token back.

An in-flight slot is held by a *shard attempt* (a shard, with a token the attempt drew when it began) until the
request ends. A worker killed mid-request never gives its slots back; Ray then runs the shard again, and the new
attempt's :meth:`SharedBudget.begin` frees every slot the shard's earlier attempts held. A slot granted to an
attempt that is no longer the shard's current one (its request was waiting when the worker died) is returned at
once. :meth:`SharedBudget.end` frees what an attempt still holds when it ends (finished, failed, cancelled).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Mapping

from jurygraph.llm.limits import ProviderLimit


class Pace:
    """``per_second`` requests a second, in the order they ask: each is told when it may go, one interval after
    the one before; a quiet moment's unused turns are kept, up to a second's worth (at least one)."""

    def __init__(self, per_second: float) -> None:
        self.interval = 1.0 / per_second
        self.saved = max(1.0, per_second)
        self._next: float | None = None

    def turn(self, now: float) -> float:
        """When the request asking at ``now`` may go (``now`` or later)."""
        at = now if self._next is None else max(self._next, now - (self.saved - 1) * self.interval)
        self._next = at + self.interval
        return at


class SharedBudget:
    """Rate tokens and in-flight slots by provider key (the keys of ``--rps``/``--in-flight``: a provider, a base
    URL, or '*' for all), for many shard attempts at once."""

    def __init__(self, limits: Mapping[str, ProviderLimit]) -> None:
        self._paces = {key: Pace(limit.requests_per_second)
                       for key, limit in limits.items() if limit.requests_per_second}
        self._free = {key: limit.max_in_flight for key, limit in limits.items() if limit.max_in_flight}
        self._current: dict[str, str] = {}  # shard -> the token of its current attempt
        self._held: Counter[tuple[str, str, str]] = Counter()  # (shard, token, key) -> slots held
        self._changed: asyncio.Condition | None = None  # made on the loop that first needs it

    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    async def begin(self, shard: str, token: str) -> None:
        """A new attempt of ``shard``: any earlier attempt is dead (Ray runs a shard again only then), so the
        slots it held come back."""
        self._current[shard] = token
        await self._give_back(lambda s, t: s == shard and t != token)

    async def end(self, shard: str, token: str | None = None) -> None:
        """An attempt ended (``token``), or the shard was given up (``None``): its slots come back."""
        if token is None or self._current.get(shard) == token:
            self._current.pop(shard, None)
        await self._give_back(lambda s, t: s == shard and (token is None or t == token))

    async def acquire(self, key: str, shard: str, token: str) -> None:
        """Wait for an in-flight slot (when ``key`` has a limit), then for a rate token (likewise). A slot is
        taken first, so a request waiting for one holds no rate token meanwhile."""
        if key in self._free:
            changed = self._condition()
            async with changed:
                await changed.wait_for(lambda: self._free[key] > 0 or self._current.get(shard) != token)
                if self._current.get(shard) != token:
                    return  # an attempt that is gone (its worker died while this waited): nothing to hold
                self._free[key] -= 1
                self._held[(shard, token, key)] += 1
        if key in self._paces:
            now = time.monotonic()
            wait = self._paces[key].turn(now) - now
            if wait > 0:
                await asyncio.sleep(wait)

    async def release(self, key: str, shard: str, token: str) -> None:
        """A request of the attempt ended: its slot comes back (nothing, if the attempt's slots already did)."""
        if self._held[(shard, token, key)] > 0:
            self._held[(shard, token, key)] -= 1
            await self._free_slots({key: 1})

    def in_flight(self) -> dict[str, int]:
        """Slots held now, by key."""
        held: Counter[str] = Counter()
        for (_, _, key), count in self._held.items():
            held[key] += count
        return {key: held[key] for key in self._free}

    async def _give_back(self, whose: Callable[[str, str], bool]) -> None:
        freed: Counter[str] = Counter()
        for (shard, token, key), count in list(self._held.items()):
            if count and whose(shard, token):
                freed[key] += count
                del self._held[(shard, token, key)]
        await self._free_slots(freed)  # also wakes the requests of attempts that are gone, to give up

    async def _free_slots(self, freed: Mapping[str, int]) -> None:
        changed = self._condition()
        async with changed:
            for key, count in freed.items():
                self._free[key] += count
            changed.notify_all()
