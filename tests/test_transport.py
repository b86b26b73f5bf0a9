"""The OpenAI client's connections (jurygraph.llm.transport.ShardedPools): kept alive however many requests are in
flight, spread over small pools, each pool's slot given back when its response is read."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from langchain_core.messages import HumanMessage

from jurygraph.llm.models import ModelSpec, build_model
from jurygraph.llm.transport import ShardedPools


@pytest.mark.parametrize("provider", ["openai", "google_genai"])
def test_a_run_with_more_requests_in_flight_than_httpx_keeps_alive_reuses_its_connections(
        provider: str, openai_server: Any, gemini_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """160 requests in flight at a time, 480 in all: httpx's single pool (128 kept alive) closed every connection
    that went idle above 128 and opened one a request (~480); the sharded pools keep one a request in flight."""
    monkeypatch.setenv("GOOGLE_API_KEY", "test-key")
    serve = openai_server if provider == "openai" else gemini_server
    server = serve(latency=0.5)  # long enough for the client to have 160 sent before the first answer
    model_name = "judge" if provider == "openai" else "gemini-2.5-flash"
    spec = ModelSpec.parse(f"{provider}:{model_name}@{server.base_url}")

    async def run() -> None:
        model: Any = build_model(spec)
        gate = asyncio.Semaphore(160)

        async def one(k: int) -> None:
            async with gate:
                await model.ainvoke([HumanMessage(f"Question {k}?")])

        await asyncio.gather(*(one(k) for k in range(480)))

    asyncio.run(run())
    assert len(server.requests) == 480
    assert server.max_in_flight > 100  # the pools together served the 160 at once (one pool alone holds 32)
    assert server.connections <= 160 + 16  # reused: one a request in flight, give or take a pool's spare


def test_sharded_pools_spread_requests_and_give_each_slot_back(openai_server: Any) -> None:
    server = openai_server(latency=0.05)
    seen: list[tuple[int, ...]] = []

    async def run() -> tuple[int, ...]:
        transport = ShardedPools(server.base_url, verify=False, shards=4, per_shard=8)
        async with httpx.AsyncClient(transport=transport, base_url=server.base_url) as client:
            async def one(k: int) -> None:
                response = await client.post("/chat/completions", json={
                    "model": "judge", "messages": [{"role": "user", "content": f"Question {k}?"}]})
                seen.append(transport.in_flight)
                assert response.status_code == 200

            await asyncio.gather(*(one(k) for k in range(24)))
            return transport.in_flight

    assert asyncio.run(run()) == (0, 0, 0, 0)  # every response read and closed: every slot given back
    assert max(max(counts) for counts in seen) <= 8 and max(sum(counts) for counts in seen) > 8  # spread over pools
    assert server.connections <= 24


def test_the_pools_take_the_proxy_the_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """Given a transport, httpx reads no proxy from the environment: the pools read it as httpx would have."""
    from jurygraph.llm.transport import env_proxy

    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY",
                 "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert env_proxy("https://api.openai.com/v1") is None
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:3128")
    assert env_proxy("https://api.openai.com/v1") == "http://127.0.0.1:3128"
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:8080")
    assert env_proxy("https://api.openai.com/v1") == "http://127.0.0.1:8080"
    monkeypatch.setenv("NO_PROXY", "api.openai.com")
    assert env_proxy("https://api.openai.com/v1") is None
    assert env_proxy("http://127.0.0.1:9/v1") == "http://127.0.0.1:3128"  # http: no http_proxy, so all_proxy
