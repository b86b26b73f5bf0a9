"""The local OpenAI-compatible test server itself: it must not add latency of its own, and its Batch API answers the
API's objects."""

from __future__ import annotations

import json
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


def test_a_request_cut_mid_send_is_not_counted(openai_server: Callable[..., FakeOpenAIServer]) -> None:
    """A client killed while it sends (kill -9 in the crash and review tests) leaves a body shorter than its
    Content-Length: no request reached the server, so none is logged (it was logged as an empty ``{}``)."""
    import socket
    from urllib.parse import urlparse

    server = openai_server(latency=0.0)
    url = urlparse(server.base_url)
    with socket.create_connection((url.hostname, url.port)) as sock:
        sock.sendall(f"POST {url.path}/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     "Content-Length: 100\r\n\r\n".encode())  # the headers went out, the body never did
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and server.in_flight:
        time.sleep(0.01)
    time.sleep(0.1)
    assert server.requests == []
    with httpx.Client(base_url=server.base_url) as client:  # the server goes on serving
        body = {"model": "fake", "messages": [{"role": "user", "content": "hello"}]}
        assert client.post("/chat/completions", json=body).status_code == 200
    assert len(server.requests) == 1


def test_the_batch_endpoints_answer_batch_objects_without_the_fakes_bookkeeping(
        openai_server: Callable[..., FakeOpenAIServer]) -> None:
    """create, retrieve, list and cancel all answer the batch object the API defines, not the fake's own fields
    (``_index``, ``_lines``: the batch's input lines)."""
    import openai

    server = openai_server(latency=0.0)
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    line = {"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "fake", "messages": [{"role": "user", "content": "hello"}]}}
    uploaded = client.files.create(file=("in.jsonl", json.dumps(line).encode()), purpose="batch")
    created = client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                    completion_window="24h")
    answers = {"create": created, "retrieve": client.batches.retrieve(created.id),
               "list": next(iter(client.batches.list())), "cancel": client.batches.cancel(created.id)}
    for route, batch in answers.items():
        assert batch.id == created.id, route
        assert not any(key.startswith("_") for key in batch.model_dump()), route
    assert answers["cancel"].status == "cancelled"
