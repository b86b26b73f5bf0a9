"""httpx transports for the model clients: one for a client that hands its sync and its async httpx client the same
arguments (langchain-google-genai gives google-genai one ``client_args`` for both), and small connection pools side
by side for the OpenAI client's async calls (:class:`ShardedPools`)."""

from __future__ import annotations

import urllib.request
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import httpx

GEMINI_API = "https://generativelanguage.googleapis.com"
OPENAI_API = "https://api.openai.com/v1"


def env_proxy(url: str) -> str | None:
    """The environment's proxy for ``url`` (``<scheme>_proxy``, then ``all_proxy``; none for a ``no_proxy`` host), as
    httpx reads it for a client given no transport: given one, httpx reads nothing."""
    target = urlsplit(url)
    if urllib.request.proxy_bypass(target.hostname or ""):
        return None
    proxies = urllib.request.getproxies()
    return proxies.get(target.scheme) or proxies.get("all")


class HttpxTransport(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """Each path to its own httpx transport, with the environment's proxy for ``url`` (httpx reads the environment
    only for a client given no transport). Given one, google-genai keeps its async calls on httpx instead of aiohttp,
    so jurygraph's request hook sees (and counts) every attempt. The async calls go through :class:`ShardedPools`, as
    the OpenAI client's do."""

    def __init__(self, url: str | None = None, *, verify: Any = True) -> None:
        target = url or GEMINI_API
        self._sync = httpx.HTTPTransport(proxy=env_proxy(target), verify=verify)
        self._async = ShardedPools(target, verify=verify)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._sync.handle_request(request)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._async.handle_async_request(request)

    def close(self) -> None:
        self._sync.close()

    async def aclose(self) -> None:
        await self._async.aclose()


class ShardedPools(httpx.AsyncBaseTransport):
    """Connections to one server spread over ``shards`` small httpx pools, each request to the pool with the fewest
    requests in flight (a request is in flight until its response is closed).

    Why: on every request it queues or releases, httpcore's pool walks all its connections, polling each idle
    one's socket for readability, so against a server that keeps connections alive (every provider) its cost per
    request grows with the connections held: 50 in flight cost ~4 ms of CPU a request at zero latency, 3 x the
    request itself (benchmarks/README.md, "keep-alive"). And above ``max_keepalive_connections`` it closes every
    connection that goes idle (it compares that limit with all its connections), so a run with more requests in
    flight than that opened a new connection per request. Small pools of equal limits keep both bounded."""

    def __init__(self, url: str, *, verify: Any, shards: int = 16, per_shard: int = 32) -> None:
        proxy = env_proxy(url)
        limits = httpx.Limits(max_connections=per_shard, max_keepalive_connections=per_shard)
        self._pools = [httpx.AsyncHTTPTransport(verify=verify, proxy=proxy, limits=limits) for _ in range(shards)]
        self._in_flight = [0] * shards

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        shard = min(range(len(self._pools)), key=self._in_flight.__getitem__)
        self._in_flight[shard] += 1
        try:
            response = await self._pools[shard].handle_async_request(request)
        except BaseException:
            self._in_flight[shard] -= 1
            raise
        response.stream = _Released(response.stream, self._in_flight, shard)
        return response

    @property
    def in_flight(self) -> tuple[int, ...]:
        """Requests in flight per pool (each until its response is closed)."""
        return tuple(self._in_flight)

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()


class _Released(httpx.AsyncByteStream):
    """A response body that gives its pool's slot back once, when it is closed."""

    def __init__(self, stream: Any, counts: list[int], shard: int) -> None:
        self._stream, self._counts, self._shard, self._open = stream, counts, shard, True

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            if self._open:
                self._open = False
                self._counts[self._shard] -= 1
