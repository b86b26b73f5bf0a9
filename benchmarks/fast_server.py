"""The benchmark's fast model server: the same answers as :class:`benchmarks.server.BenchServer`, on an asyncio loop.

Why a second server: the threaded one (``http.server``, a thread per connection, the GIL shared by all of them)
answered 1,000-odd requests a second at best, a bare client loop alone could drive it near its limit, and the
framework scenario then measured the server, not the client. This one is an ``asyncio.Protocol`` (on uvloop when
it is installed) with a minimal HTTP/1.1 parser: persistent connections (keep-alive, as real providers have; a
connection closes only when the client asks), ``Content-Length`` bodies, one request at a time per connection
(pipelined requests wait their turn, so answers keep their order), latency as a timer, not a sleeping thread.

What it answers is the threaded server's: the scripted replies of ``--replies`` (the same responders), the same
usage counts (:func:`~jurygraph.testing.fake_server.prompt_tokens`), the same fault draws (429 with Retry-After,
500, hangs, unparseable bodies, unreadable replies), the Files and Batches endpoints (the same
:class:`~jurygraph.testing.fake_batches.FakeBatchAPI`), ``GET /stats``, ``GET /log?since=K`` and
``GET /span?since=K``. It keeps no request bodies (a 100,000-item run sends 400,000), only counts and one small
log entry per answer. ``/stats`` adds ``connections``: TCP connections accepted, to check that clients keep theirs.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

from benchmarks.server import RESPONDERS, ServerOptions, digest, span_of
from jurygraph.testing.fake_batches import FakeBatchAPI
from jurygraph.testing.fake_server import Faults, count_tokens, prompt_tokens, reply_parts

REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 411: "Length Required", 429: "Too Many Requests",
           500: "Internal Server Error", 504: "Gateway Timeout"}
UNREADABLE = "I would rather not give a number for this one."


def _error(message: str, status: int) -> bytes:
    return json.dumps({"error": {"message": message, **({"type": "rate_limit"} if status == 429 else {})}}).encode()


class Connection(asyncio.Protocol):
    """One client connection: parse requests from the byte stream, answer them one at a time, in order."""

    def __init__(self, server: AsyncBenchServer) -> None:
        self.server = server
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.busy = False  # a request is being answered (a pipelined one waits in the buffer)
        self.closed = False
        self._parsing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio's classes
        self.server.connections += 1
        self.server.open_connections += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.open_connections -= 1

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self._parse()

    def _parse(self) -> None:
        if self._parsing:  # an answer written while parsing: the loop below goes on by itself
            return
        self._parsing = True
        try:
            while not self.busy and not self.closed:
                end = self.buffer.find(b"\r\n\r\n")
                if end < 0:
                    return
                head = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
                method, _, rest = head[0].partition(" ")
                target, _, version = rest.partition(" ")
                headers = {}
                for line in head[1:]:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
                if "chunked" in headers.get("transfer-encoding", "").lower():
                    # no client of the harness sends a chunked body (httpx sends Content-Length for known bodies)
                    self.busy = True
                    self.reply(411, _error("a chunked body is not supported here", 411), keep_alive=False)
                    return
                length = int(headers.get("content-length") or 0)
                if len(self.buffer) < end + 4 + length:
                    return
                body = bytes(self.buffer[end + 4:end + 4 + length])
                del self.buffer[:end + 4 + length]
                connection = headers.get("connection", "").lower()
                keep_alive = (self.server.options.connection == "keep-alive"
                              and (connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"))
                self.busy = True
                self.server.dispatch(self, method, target, headers, body, keep_alive)
        finally:
            self._parsing = False

    def reply(self, status: int, body: bytes, content_type: str = "application/json",
              headers: dict[str, str] | None = None, *, keep_alive: bool = True) -> None:
        if self.closed or self.transport is None:  # the client went away first (a timeout, a kill): nothing to do
            return
        extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
        self.transport.write(
            f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n{extra}{'' if keep_alive else 'Connection: close' + chr(13) + chr(10)}"
            "\r\n".encode("latin-1") + body)
        self.busy = False
        if not keep_alive:
            self.closed = True
            self.transport.close()
            return
        if self.buffer:
            self._parse()


class AsyncBenchServer:
    """The benchmark server's state and answers; :meth:`serve` runs it on the current event loop."""

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self.respond = RESPONDERS[options.replies]
        self.faults = Faults(rate_429=options.rate_429, rate_500=options.rate_500, rate_hang=options.rate_hang,
                             rate_garbage=options.rate_garbage, retry_after=options.retry_after,
                             hang_seconds=options.hang_seconds, seed=options.seed)
        # the threaded server's random streams, seeded alike: the same options draw the same faults
        self._random = random.Random(options.seed)
        self._jitter = random.Random(options.seed + 1)
        self._unreadable = random.Random(options.seed + 2)
        self.batches = FakeBatchAPI(lambda body: self._bill(self._completion(body)))
        self.requests = 0
        self.connections = 0
        self.open_connections = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.outcomes: Counter[str] = Counter()
        self.by_model: Counter[str] = Counter()
        self.by_n: Counter[str] = Counter()
        self.other: Counter[str] = Counter()  # requests that are not chat completions, by method and path
        self.billed = {"requests": 0, "input_tokens": 0, "output_tokens": 0, "most_tokens": 0}
        # one entry per answered request (a 200 with a completion, online or a batch line):
        # (digest, model, n, answered at, unreadable, received at)
        self.log: list[tuple[str, Any, int, float, bool, float]] = []
        self.loop_name = ""

    # --- HTTP routes ---

    def dispatch(self, connection: Connection, method: str, target: str, headers: dict[str, str], body: bytes,
                 keep_alive: bool) -> None:
        url = urlsplit(target)
        path = url.path.rstrip("/")
        if method == "POST" and path.endswith("/chat/completions"):
            self._chat(connection, body, keep_alive)
            return
        answer: tuple[int, bytes, str] | None
        self.other[f"{method} {path}"] += 1
        if method == "GET" and path in ("/stats", "/log", "/span"):
            since = int(parse_qs(url.query).get("since", ["0"])[0])
            figures = self.stats() if path == "/stats" else self.entries(since) if path == "/log" else self.span(since)
            answer = (200, json.dumps(figures).encode(), "application/json")
        elif method == "POST":
            answer = self.batches.post(target, headers.get("content-type", ""), body)
        elif method == "GET":
            answer = self.batches.get(target)
        else:
            answer = None
        if answer is None:
            answer = (404, _error(f"no endpoint {method} {target}", 404), "application/json")
        status, data, content_type = answer
        connection.reply(status, data, content_type, keep_alive=keep_alive)

    def _chat(self, connection: Connection, body: bytes, keep_alive: bool) -> None:
        received = time.time()
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            connection.reply(400, _error("the body is not JSON", 400), keep_alive=keep_alive)
            return
        self.requests += 1
        self.by_model[str(request.get("model"))] += 1
        self.by_n[str(int(request.get("n") or 1))] += 1
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        outcome = self._outcome()
        self.outcomes[outcome] += 1
        delay = self._latency()
        if delay > 0:
            asyncio.get_running_loop().call_later(delay, self._answer, connection, request, outcome, received,
                                                  keep_alive)
        else:
            self._answer(connection, request, outcome, received, keep_alive)

    def _answer(self, connection: Connection, request: dict[str, Any], outcome: str, received: float,
                keep_alive: bool) -> None:
        if outcome == "hang":  # past the client's timeout: it gives up first, then this 504 finds a closed socket
            asyncio.get_running_loop().call_later(self.faults.hang_seconds, self._done, connection, 504,
                                                  _error("too late", 504), keep_alive, None)
            return
        if outcome == "429":
            self._done(connection, 429, _error("rate limited", 429), keep_alive,
                       {"Retry-After": str(self.faults.retry_after)})
        elif outcome == "500":
            self._done(connection, 500, _error("internal error", 500), keep_alive, None)
        elif outcome == "garbage":
            self._done(connection, 200, b"this is not json {", keep_alive, None)
        else:
            completion = self._bill(self._completion(request, received))
            self._done(connection, 200, json.dumps(completion).encode(), keep_alive, None)

    def _done(self, connection: Connection, status: int, body: bytes, keep_alive: bool,
              headers: dict[str, str] | None) -> None:
        self.in_flight -= 1
        connection.reply(status, body, headers=headers, keep_alive=keep_alive)

    # --- answers (as jurygraph.testing.fake_server.FakeOpenAIServer and benchmarks.server.BenchServer) ---

    def _outcome(self) -> str:
        roll = self._random.random()
        f = self.faults
        for name, rate in (("429", f.rate_429), ("500", f.rate_500), ("hang", f.rate_hang),
                           ("garbage", f.rate_garbage)):
            if roll < rate:
                return name
            roll -= rate
        return "ok"

    def _latency(self) -> float:
        base, jitter = self.options.latency, self.options.jitter
        return max(0.0, base + self._jitter.uniform(-jitter, jitter)) if jitter else base

    def _completion(self, request: dict[str, Any], received: float | None = None) -> dict[str, Any]:
        n = int(request.get("n") or 1)
        unreadable = self._unreadable.random() < self.options.unreadable
        now = time.time()
        self.log.append((digest(request), request.get("model"), n, now, unreadable,
                         now if received is None else received))
        choices, completion = [], 0
        for i in range(n):
            content, _ = reply_parts(UNREADABLE if unreadable and i == 0 else self.respond(request, i))
            completion += count_tokens(content)
            choices.append({"index": i, "finish_reason": "stop", "message": {"role": "assistant", "content": content}})
        prompt = prompt_tokens(request.get("messages", []))
        return {"id": f"chatcmpl-{len(self.log)}", "object": "chat.completion", "created": int(now),
                "model": request.get("model", "fake"), "choices": choices,
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                          "total_tokens": prompt + completion}}

    def _bill(self, completion: dict[str, Any]) -> dict[str, Any]:
        usage = completion["usage"]
        billed = self.billed
        billed["requests"] += 1
        billed["input_tokens"] += usage["prompt_tokens"]
        billed["output_tokens"] += usage["completion_tokens"]
        billed["most_tokens"] = max(billed["most_tokens"], usage["total_tokens"])
        return completion

    # --- what the harness reads ---

    def stats(self) -> dict[str, Any]:
        return {"engine": f"asyncio ({self.loop_name})", "requests": self.requests, "answered": len(self.log),
                "outcomes": dict(self.outcomes), "billed": dict(self.billed), "batches": len(self.batches.created),
                "by_model": dict(self.by_model), "by_n": dict(self.by_n), "connections": self.connections,
                "open_connections": self.open_connections, "max_in_flight": self.max_in_flight,
                "other_requests": dict(self.other),
                "cpu_seconds": time.process_time()}

    def entries(self, since: int) -> dict[str, Any]:
        return {"entries": [{"digest": d, "model": m, "n": n, "t": t, "unreadable": u, "received": r}
                            for d, m, n, t, u, r in self.log[since:]]}

    def span(self, since: int) -> dict[str, Any]:
        return span_of([(received, answered) for _, _, _, answered, _, received in self.log[since:]])

    async def serve(self, port: int = 0) -> asyncio.Server:
        loop = asyncio.get_running_loop()
        self.loop_name = type(loop).__module__.split(".")[0]
        return await loop.create_server(lambda: Connection(self), "127.0.0.1", port, backlog=4096)
