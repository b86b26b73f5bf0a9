"""The benchmark's model server: jurygraph's FakeOpenAIServer in a process of its own, counting requests.

Run as a script it starts the server on 127.0.0.1, prints one JSON line ``{"port": ...}`` and serves
until it is terminated (or its stdin closes). The client side is :class:`ServerProcess`, a context
manager that starts it and reads ``GET /stats`` (counts) and ``GET /log`` (one entry per answered
request: the digest of its messages, the model, the time it was answered).

A separate process keeps the server's CPU off the client's core: the client's measurements are the
framework's, not the server's. Replies are scripted per protocol (``--replies``) in the answer form
that protocol reads, with a score derived from a digest of the request, so a run is deterministic
and two runs that send the same calls get the same verdicts. Faults come from the core server's
:class:`~jurygraph.testing.fake_server.Faults` (429 with Retry-After, 500, hangs, unparseable bodies), plus
``--unreadable``: a share of well-formed replies whose text holds no judgment (the re-ask path).
"""

from __future__ import annotations

import argparse
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

REPLIES = ("chateval", "debate", "refer")


def digest(request: dict[str, Any]) -> str:
    """What identifies a call: its messages (roles, names, text). Two runs sending the same call match."""
    messages = [[m.get("role"), m.get("name"), m.get("content")] for m in request.get("messages", [])]
    return hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()[:24]


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


RESPONDERS: dict[str, Callable[[dict[str, Any], int], str]] = {
    "chateval": chateval_reply, "debate": debate_reply, "refer": refer_reply,
}


@dataclass
class ServerOptions:
    replies: str = "chateval"
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
                self.log.append({"digest": digest(request), "model": request.get("model"),
                                 "n": int(request.get("n") or 1), "t": time.time(), "unreadable": unreadable})
            return "I would rather not give a number for this one." if unreadable else reply(request, choice)

        return respond

    def stats(self) -> dict[str, Any]:
        with self._lock:
            requests = list(self.requests)
            outcomes = Counter(self.outcomes)
            answered = len(self.log)
            billed = list(self.billed)
        return {
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
                elif url.path == "/log":
                    since = int(parse_qs(url.query).get("since", ["0"])[0])
                    with server._lock:
                        body = {"entries": server.log[since:]}
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


def _options(argv: list[str] | None = None) -> ServerOptions:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    defaults = ServerOptions()
    for key, value in asdict(defaults).items():
        flag = f"--{key.replace('_', '-')}"
        if key == "replies":
            parser.add_argument(flag, choices=REPLIES, default=value)
        else:
            parser.add_argument(flag, type=type(value), default=value)
    return ServerOptions(**vars(parser.parse_args(argv)))


def main(argv: list[str] | None = None) -> None:
    server = BenchServer(_options(argv)).start()
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


if __name__ == "__main__":
    main()
