"""Per-provider request limits shared by every agent of every item in a run.

A run against a provider is bound by that provider's limits, not by our CPU: ``requests_per_second``
(a token bucket, LangChain's ``InMemoryRateLimiter``) and ``max_in_flight`` (a semaphore) are applied to
each request sent to the provider, whichever agent and item sends it. Cache hits pass no gate.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType

from langchain_core.rate_limiters import InMemoryRateLimiter

ANY_PROVIDER = "*"


@dataclass(frozen=True)
class ProviderLimit:
    requests_per_second: float | None = None
    max_in_flight: int | None = None

    def __post_init__(self) -> None:
        if self.requests_per_second is not None and self.requests_per_second <= 0:
            raise ValueError("requests per second must be positive")
        if self.max_in_flight is not None and self.max_in_flight < 1:
            raise ValueError("max in flight must be at least 1")


class Gate:
    """What one request to a provider waits for: a rate token and an in-flight slot."""

    def __init__(self, limit: ProviderLimit) -> None:
        rps = limit.requests_per_second
        self._rate = InMemoryRateLimiter(requests_per_second=rps, check_every_n_seconds=min(0.05, 0.5 / rps),
                                         max_bucket_size=max(1.0, rps)) if rps else None
        self._slots = limit.max_in_flight
        self._async: asyncio.Semaphore | None = None
        self._sync = threading.BoundedSemaphore(limit.max_in_flight) if limit.max_in_flight else None

    async def __aenter__(self) -> Gate:
        if self._slots:
            if self._async is None:
                self._async = asyncio.Semaphore(self._slots)
            await self._async.acquire()
        if self._rate:
            await self._rate.aacquire()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, err: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self._async is not None:
            self._async.release()

    def __enter__(self) -> Gate:
        if self._sync is not None:
            self._sync.acquire()
        if self._rate:
            self._rate.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        if self._sync is not None:
            self._sync.release()


class ProviderGates:
    """Gates by provider key ('openai', 'google_genai', an OpenAI-compatible base URL, or '*' for all)."""

    def __init__(self, limits: Mapping[str, ProviderLimit]) -> None:
        self._limits = dict(limits)
        self._gates: dict[str, Gate] = {}
        self._lock = threading.Lock()

    @property
    def limits(self) -> dict[str, ProviderLimit]:
        """The limits by provider key, as given."""
        return dict(self._limits)

    def key(self, provider: str) -> str | None:
        """The limits a provider's requests count against: its own, else every provider's ('*'), else none."""
        return provider if provider in self._limits else ANY_PROVIDER if ANY_PROVIDER in self._limits else None

    def gate(self, provider: str) -> Gate | None:
        key = self.key(provider)
        if key is None:
            return None
        with self._lock:
            if key not in self._gates:
                self._gates[key] = Gate(self._limits[key])
            return self._gates[key]


def parse_limits(rps: list[str] | None, in_flight: list[str] | None) -> dict[str, ProviderLimit]:
    """``--rps openai=5 --in-flight 16`` -> {'openai': rps 5, '*': 16 in flight}; a bare number means all."""
    table: dict[str, dict[str, float]] = {}
    for values, key in ((rps, "requests_per_second"), (in_flight, "max_in_flight")):
        for value in values or []:
            provider, _, number = value.rpartition("=")
            try:
                amount = float(number)
            except ValueError:
                raise ValueError(f"limit {value!r}: expected [PROVIDER=]NUMBER") from None
            table.setdefault(provider or ANY_PROVIDER, {})[key] = amount
    return {
        provider: ProviderLimit(requests_per_second=v.get("requests_per_second"),
                                max_in_flight=int(v["max_in_flight"]) if "max_in_flight" in v else None)
        for provider, v in table.items()
    }
