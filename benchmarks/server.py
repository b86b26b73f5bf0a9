"""The benchmark's model server in a process of its own, counting requests.

Two engines answer alike (``--engine``): ``asyncio`` (the default; :mod:`benchmarks.fast_server`, an asyncio
server with persistent connections, several times faster than any client here) and ``threaded``, jurygraph's
FakeOpenAIServer (``http.server``, a thread per connection: the test suite's server, kept for comparison and
wherever its HTTP behaviour is the point).

Run as a script it starts the server on 127.0.0.1, prints one JSON line ``{"port": ...}`` and serves
until it is terminated (or its stdin closes). The client side is :class:`ServerProcess`, a context
manager that starts it and reads ``GET /stats`` (counts), ``GET /log`` (one entry per answered
request: the digest of its messages, the model, the time it was answered) and ``GET /span`` (the first and
last of those times: what a rate needs, without the log of a 100,000-item run).

A separate process keeps the server's CPU off the client's core: the client's measurements are the
framework's, not the server's. Replies are scripted per protocol (``--replies``) in the answer form
that protocol reads, with a score derived from a digest of the request, so a run is deterministic
and two runs that send the same calls get the same verdicts. Faults come from the core server's
:class:`~jurygraph.testing.fake_server.Faults` (429 with Retry-After, 500, hangs, unparseable bodies), plus
``--unreadable``: a share of well-formed replies whose text holds no judgment (the re-ask path).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from jurygraph.testing.fake_server import FakeOpenAIServer, Faults

REPLIES = ("chateval", "debate", "refer", "faireval")
ENGINES = ("asyncio", "threaded")
CHOICES = {"replies": REPLIES, "engine": ENGINES, "connection": ("keep-alive", "close")}
_DIGEST = "\0digest"  # where a request's digest is kept once computed (a responder asks for it several times)


def digest(request: dict[str, Any]) -> str:
    """What identifies a call: its messages (roles, names, text). Two runs sending the same call match."""
    known = request.get(_DIGEST)
    if known is None:
        messages = [[m.get("role"), m.get("name"), m.get("content")] for m in request.get("messages", [])]
        known = request[_DIGEST] = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:24]
    return str(known)


def _score(request: dict[str, Any], choice: int, low: int = 1, high: int = 5) -> int:
    """A deterministic score in [low, high] for this call (and sample), varied across items."""
    value = int(hashlib.sha256(f"{digest(request)}/{choice}".encode()).hexdigest()[:8], 16)
    return low + value % (high - low + 1)


def chateval_reply(request: dict[str, Any], choice: int) -> str:
    """A ChatEval referee: its final-turn form ('The score of the summary: N') on every turn."""
    return (f"Evaluation evidence: the summary keeps the order of the article (call {digest(request)[:6]}).\n"
            f"The score of the summary: {_score(request, choice)}")


def debate_reply(request: dict[str, Any], choice: int) -> str:
    """DEBATE: the Scorer answers the Evaluation Form; the Critic always objects (never NO ISSUE),
    so every debate runs the n iterations: the critical path is 2n + 1 calls."""
    from jurygraph.nodes.debate import debate_prompt

    system = request["messages"][0].get("content", "")
    if system == debate_prompt("scorer"):
        return f"Rationale: the sentences follow one another.\n- Coherence: {_score(request, choice)}"
    return "The score is too generous: the second sentence does not follow from the first."


def refer_reply(request: dict[str, Any], choice: int) -> str:
    """ReFeR peers and area chair: 'Analysis: ...' then 'Rating: N' (each of the n samples differs)."""
    return f"Analysis: sample {choice} weighed the summary.\nRating: {_score(request, choice)}"


def faireval_reply(request: dict[str, Any], choice: int) -> str:
    """A pairwise judge on FairEval (the peers scenario): both assistants' scores (1-10) in FairEval's and
    ChatEval's answer form; a request asking for a JSON schema (openevals' structured output) gets a JSON object
    of that schema instead."""
    form = request.get("response_format") or {}
    if form.get("type") == "json_schema":
        return json.dumps(_instance(form.get("json_schema", {}).get("schema", {}), request, choice))
    return (f"Evaluation evidence: both answers address the question (call {digest(request)[:6]}).\n"
            f"The score of Assistant 1: {_score(request, choice, 1, 10)}\n"
            f"The score of Assistant 2: {_score(request, choice + 1000, 1, 10)}")


def _instance(schema: dict[str, Any], request: dict[str, Any], choice: int) -> Any:
    """A value of a JSON schema, derived from the call's digest (objects, strings, booleans, numbers, enums)."""
    if "enum" in schema:
        return schema["enum"][_score(request, choice, 0, len(schema["enum"]) - 1)]
    kind = schema.get("type")
    if kind == "object":
        return {name: _instance(sub, request, choice) for name, sub in schema.get("properties", {}).items()}
    if kind == "boolean":
        return _score(request, choice, 0, 1) == 1
    if kind == "integer":
        return _score(request, choice, 1, 10)
    if kind == "number":
        return _score(request, choice, 0, 10) / 10
    return f"The first answer is more detailed (call {digest(request)[:6]}). Thus, the score should be: see below."


RESPONDERS: dict[str, Callable[[dict[str, Any], int], str]] = {
    "chateval": chateval_reply, "debate": debate_reply, "refer": refer_reply, "faireval": faireval_reply,
}


def span_of(times: list[tuple[float, float]]) -> dict[str, Any]:
    """The first and last of (received, answered) times: a rate from the server's clock, and when a command's
    first request arrived."""
    if not times:
        return {"count": 0, "first_received": None, "first_answered": None, "last_received": None,
                "last_answered": None}
    return {"count": len(times), "first_received": min(r for r, _ in times),
            "first_answered": min(a for _, a in times), "last_received": max(r for r, _ in times),
            "last_answered": max(a for _, a in times)}


@dataclass
class ServerOptions:
    replies: str = "chateval"
    engine: str = "asyncio"
    # "close": every answer closes its connection (HTTP/1.0's way), to measure what keep-alive changes on the client's
    # side
    connection: str = "keep-alive"
    latency: float = 0.0
    jitter: float = 0.0  # latency is uniform in [latency - jitter, latency + jitter]
    rate_429: float = 0.0
    rate_500: float = 0.0
    rate_hang: float = 0.0
    rate_garbage: float = 0.0
    unreadable: float = 0.0  # share of 200 replies whose text holds no judgment
    retry_after: float = 0.2
    hang_seconds: float = 5.0
    seed: int = 0

    def args(self) -> list[str]:
        return [f"--{key.replace('_', '-')}={value}" for key, value in asdict(self).items()]


class BenchServer(FakeOpenAIServer):
    """FakeOpenAIServer with latency jitter, unreadable replies, and GET /stats and GET /log."""

    def __init__(self, options: ServerOptions, port: int = 0) -> None:
        self.options = options
        self.log: list[dict[str, Any]] = []
        self._jitter = random.Random(options.seed + 1)
        self._unreadable = random.Random(options.seed + 2)
        reply = RESPONDERS[options.replies]
        faults = Faults(rate_429=options.rate_429, rate_500=options.rate_500, rate_hang=options.rate_hang,
                        rate_garbage=options.rate_garbage, retry_after=options.retry_after,
                        hang_seconds=options.hang_seconds, seed=options.seed)
        super().__init__(self._responder(reply), latency=options.latency, faults=faults, port=port)
        # a client that gave up (timeout) closes its socket before a hung reply is written: not an error here
        self._server.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
        if options.connection == "close":  # http.server's default: one request per connection
            self._server.RequestHandlerClass.protocol_version = "HTTP/1.0"  # type: ignore[attr-defined]
        self.connections = 0  # TCP connections accepted: does the client keep its connections alive?
        accept = self._server.process_request

        def counted(request: Any, client_address: Any) -> None:
            with self._lock:
                self.connections += 1
            accept(request, client_address)

        self._server.process_request = counted  # type: ignore[method-assign]

    # the core server sleeps `self.latency` per request: reading it draws the jittered value
    @property  # type: ignore[override]
    def latency(self) -> float:
        base, jitter = self._base_latency, self.options.jitter
        if not jitter:
            return base
        with self._lock:
            return max(0.0, base + self._jitter.uniform(-jitter, jitter))

    @latency.setter
    def latency(self, value: float) -> None:
        self._base_latency = value

    def _responder(self, reply: Callable[[dict[str, Any], int], str]) -> Callable[[dict[str, Any], int], str]:
        def respond(request: dict[str, Any], choice: int) -> str:
            # called once per choice, right before the 200 is written: log the request once, when answered
            if choice > 0:
                return reply(request, choice)
            with self._lock:
                unreadable = self._unreadable.random() < self.options.unreadable
                answered = time.time()
                # when it arrived: the latency the server slept before answering (the mean, under jitter)
                self.log.append({"digest": digest(request), "model": request.get("model"),
                                 "n": int(request.get("n") or 1), "t": answered, "unreadable": unreadable,
                                 "received": answered - self._base_latency})
            return "I would rather not give a number for this one." if unreadable else reply(request, choice)

        return respond

    def stats(self) -> dict[str, Any]:
        with self._lock:
            requests = list(self.requests)
            outcomes = Counter(self.outcomes)
            answered = len(self.log)
            billed = list(self.billed)
        return {
            "engine": "threaded", "connections": self.connections, "max_in_flight": self.max_in_flight,
            "requests": len(requests), "answered": answered, "outcomes": dict(outcomes),
            # what the server billed (online answers and batch lines): what a run's spend ledger must add up to
            "billed": {"requests": len(billed), "input_tokens": sum(b["input_tokens"] for b in billed),
                       "output_tokens": sum(b["output_tokens"] for b in billed),
                       "most_tokens": max((b["input_tokens"] + b["output_tokens"] for b in billed), default=0)},
            "batches": len(self.batches.created),
            "by_model": dict(Counter(str(r.get("model")) for r in requests)),
            "by_n": {str(k): v for k, v in Counter(int(r.get("n") or 1) for r in requests).items()},
            "cpu_seconds": time.process_time(),
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        base: Any = super()._handler()
        server = self

        class Handler(base):  # type: ignore[misc, valid-type]
            def do_GET(self) -> None:
                url = urlparse(self.path)
                if url.path == "/stats":
                    body = server.stats()
                elif url.path in ("/log", "/span"):
                    since = int(parse_qs(url.query).get("since", ["0"])[0])
                    with server._lock:
                        entries = server.log[since:]
                    body = {"entries": entries} if url.path == "/log" else span_of(
                        [(e["received"], e["t"]) for e in entries])
                else:  # the Files and Batches endpoints of a --batch run
                    base.do_GET(self)
                    return
                self._send(200, json.dumps(body).encode())

        return Handler


class ServerProcess:
    """Start :class:`BenchServer` in a child process; read its counters over HTTP."""

    def __init__(self, options: ServerOptions) -> None:
        self.options = options
        self._process: subprocess.Popen[str] | None = None
        self.port = 0

    def __enter__(self) -> ServerProcess:
        self._process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), *self.options.args()],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the benchmark server did not start (exit code {self._process.wait()})")
        self.port = int(json.loads(line)["port"])
        return self

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=5)
            if self._process.poll() is None:
                self._process.kill()
                self._process.wait()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _get(self, path: str) -> dict[str, Any]:
        # no proxy: the server is local even where HTTP(S)_PROXY is set
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"http://127.0.0.1:{self.port}{path}", timeout=30) as response:
            data: dict[str, Any] = json.loads(response.read())
            return data

    def stats(self) -> dict[str, Any]:
        return self._get("/stats")

    def log(self, since: int = 0) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = self._get(f"/log?since={since}")["entries"]
        return entries

    def span(self, since: int = 0) -> dict[str, Any]:
        """The first and last receive/answer times of the answers from ``since`` on (see :func:`span_of`)."""
        return self._get(f"/span?since={since}")


def _options(argv: list[str] | None = None) -> ServerOptions:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    defaults = ServerOptions()
    for key, value in asdict(defaults).items():
        flag = f"--{key.replace('_', '-')}"
        if key in CHOICES:
            parser.add_argument(flag, choices=CHOICES[key], default=value)
        else:
            parser.add_argument(flag, type=type(value), default=value)
    return ServerOptions(**vars(parser.parse_args(argv)))


def main(argv: list[str] | None = None) -> None:
    options = _options(argv)
    if options.engine == "asyncio":
        _serve_asyncio(options)
        return
    server = BenchServer(options).start()
    print(json.dumps({"port": server._server.server_address[1]}), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # the parent closing our stdin (it exited, even by kill -9) also stops the server
    def watch_parent() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=watch_parent, daemon=True).start()
    stop.wait()
    server.stop()


def _serve_asyncio(options: ServerOptions) -> None:
    """The asyncio engine (uvloop's loop when it is installed) until SIGTERM or the end of stdin."""
    from benchmarks.fast_server import AsyncBenchServer

    try:
        import uvloop
        runner: Callable[[Any], Any] = uvloop.run
    except ImportError:
        runner = asyncio.run

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        server = await AsyncBenchServer(options).serve()
        print(json.dumps({"port": server.sockets[0].getsockname()[1]}), flush=True)
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        threading.Thread(target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(stop.set)), daemon=True).start()
        await stop.wait()
        server.close()

    runner(serve())


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `benchmarks` importable from a checkout
    main()
