"""An httpx transport for a client that hands its sync and its async httpx client the same arguments
(langchain-google-genai gives google-genai one ``client_args`` for both)."""

from __future__ import annotations

import urllib.request
from urllib.parse import urlsplit

import httpx

GEMINI_API = "https://generativelanguage.googleapis.com"


class HttpxTransport(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """Each path to its own httpx transport, with the environment's proxy for ``url`` (httpx reads the environment
    only for a client given no transport). Given one, google-genai keeps its async calls on httpx instead of aiohttp,
    so jurygraph's request hook sees (and counts) every attempt."""

    def __init__(self, url: str | None = None) -> None:
        target = urlsplit(url or GEMINI_API)
        proxy = None if urllib.request.proxy_bypass(target.hostname or "") else \
            urllib.request.getproxies().get(target.scheme)
        self._sync = httpx.HTTPTransport(proxy=proxy)
        self._async = httpx.AsyncHTTPTransport(proxy=proxy, limits=httpx.Limits(max_connections=512,
                                                                                max_keepalive_connections=128))

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._sync.handle_request(request)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._async.handle_async_request(request)

    def close(self) -> None:
        self._sync.close()

    async def aclose(self) -> None:
        await self._async.aclose()
