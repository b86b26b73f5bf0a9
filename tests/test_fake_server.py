"""The local OpenAI-compatible test server itself: it must not add latency of its own."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from jurygraph.testing.fake_server import FakeOpenAIServer


def test_back_to_back_requests_are_not_delayed_by_nagle(openai_server: Callable[..., FakeOpenAIServer]) -> None:
    """Headers and body are two writes; without TCP_NODELAY each reply waits ~40 ms for the client's
    delayed ACK, which made every test and benchmark against this server ~40 ms per call slower."""
    server = openai_server(latency=0.0)
    body = {"model": "fake", "messages": [{"role": "user", "content": "hello"}]}
    with httpx.Client(base_url=server.base_url) as client:
        client.post("/chat/completions", json=body).raise_for_status()  # connect outside the timing
        started = time.perf_counter()
        for _ in range(40):
            reply = client.post("/chat/completions", json=body)
            assert reply.status_code == 200
        elapsed = time.perf_counter() - started
    assert len(server.requests) == 41
    # 40 stalls of ~40 ms would take >= 1.6 s; undelayed it is a few ms per request
    assert elapsed < 0.8, f"40 requests took {elapsed:.2f}s"
