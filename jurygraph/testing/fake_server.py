"""A small OpenAI-compatible chat-completions server on 127.0.0.1, for tests and benchmarks.

It speaks enough of ``POST /v1/chat/completions`` for the real ``langchain-openai`` client: ``n``
choices, ``logprobs``/``top_logprobs``, ``response_format`` (the responder decides the content), usage
(:func:`count_tokens`, :func:`prompt_tokens`), plus latency and fault injection (429 with Retry-After, 500,
hangs for timeouts, unparseable bodies) and a log of every request. It binds to 127.0.0.1 only.
:class:`FakeServer` holds what every fake provider shares (faults, request log, HTTP plumbing);
``jurygraph.testing.fake_gemini`` is the Gemini API beside it.

    with FakeOpenAIServer(responder) as server:
        ChatOpenAI(base_url=server.base_url, api_key="test", model="fake")
"""

from __future__ import annotations

import json
import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self

# responder(request_json, choice_index) -> reply text, or a dict {"content": ..., "logprobs": ...}
Responder = Callable[[dict[str, Any], int], "str | dict[str, Any]"]

# The usage the fake servers report. A fair token count that owes nothing to the estimator's approximation
# (jurygraph.llm.tokens: UTF-8 bytes / 4.8): the pieces GPT-4's pre-tokenizer cuts text into (cl100k_base's
# pattern, written for Python's re: \p{L} is [^\W\d_]), one token each. BPE then splits rare words further, so it
# is a slight undercount: 0.93-0.98 of o200k_base's count (mean 0.955) on the built-in datasets' prompts, and
# equal to cl100k_base's pre-tokenizer on them. A chat request adds OpenAI's framing (3 per message, 1 per name,
# 3 priming the reply).
_PIECES = re.compile(r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\w]?[^\W\d_]+|\d{1,3}| ?(?:[^\s\w]|_)+[\r\n]*|\s*[\r\n]+"""
                     r"""|\s+(?!\S)|\s+""")


def count_tokens(text: str) -> int:
    """Tokens of a text as the fake servers count them (see ``_PIECES``)."""
    return len(_PIECES.findall(text))


def prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """Prompt tokens of an OpenAI chat request's messages, framing included."""
    total = 3
    for message in messages:
        content = message.get("content") or ""
        if isinstance(content, list):
            content = "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
        total += 3 + count_tokens(str(message.get("role", ""))) + count_tokens(str(content))
        if message.get("name"):
            total += 1 + count_tokens(str(message["name"]))
    return total


@dataclass
class Faults:
    """Share of requests that fail, and how. ``script`` forces outcomes in order ("429", "500",
    "hang", "garbage", "ok", and the answers no retry fixes: "401", "403", "404" (the Gemini fake adds "400-key",
    its answer to a wrong API key), "empty" for a 200 with
    an empty body, "no-choices" for a 200 with ``choices: []``) before the random shares apply;
    ``always`` gives every request one outcome (a server with a revoked key answers 401 to everything)."""

    rate_429: float = 0.0
    rate_500: float = 0.0
    rate_hang: float = 0.0
    rate_garbage: float = 0.0
    retry_after: float = 0.05
    hang_seconds: float = 5.0
    script: list[str] = field(default_factory=list)
    always: str | None = None
    seed: int = 0


# the bodies OpenAI sends with the statuses no retry fixes
_REFUSALS = {
    "401": {"message": "Incorrect API key provided.", "type": "invalid_request_error", "code": "invalid_api_key"},
    "403": {"message": "You are not allowed to use this model.", "type": "invalid_request_error"},
    "404": {"message": "The model does not exist or you do not have access to it.", "type": "invalid_request_error",
            "code": "model_not_found"},
}


class _ThreadingServer(ThreadingHTTPServer):
    # read by listen() in the constructor: an instance attribute set after it changed nothing, the default backlog of
    # 5 stayed, and a client opening tens of connections at once had some of them reset
    request_queue_size = 1024
    daemon_threads = True


class LocalServer:
    """An HTTP server on 127.0.0.1 in a daemon thread: ``with`` it, or ``start()``/``stop()``."""

    name = "fake"

    def __init__(self, handler: type[BaseHTTPRequestHandler], port: int = 0) -> None:
        self._server = _ThreadingServer(("127.0.0.1", port), handler)
        self._thread: threading.Thread | None = None

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._server.serve_forever, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class FakeServer(LocalServer):
    """What every fake provider shares: the faults, the request log, latency, 127.0.0.1 and the HTTP plumbing.
    A provider subclass says which paths it answers (``_model_of``), what a reply and an error look like."""

    # status -> the provider's error body for the answers no retry fixes
    refusals: ClassVar[dict[str, dict[str, Any]]] = {}

    def __init__(self, responder: Responder | None = None, *, latency: float = 0.0,
                 faults: Faults | None = None, port: int = 0) -> None:
        self.responder = responder or (lambda request, i: "The score of Assistant 1: 5\nThe score of Assistant 2: 5")
        self.latency = latency
        self.faults = faults or Faults()
        self.requests: list[dict[str, Any]] = []  # every request body, as sent
        self.paths: list[str] = []  # and its URL path
        self.urls: list[str] = []  # the path of every HTTP request, model requests, uploads and polls alike
        self.headers: list[dict[str, str]] = []  # and its headers (lower-case names)
        self.times: list[float] = []  # and when it arrived (time.monotonic()), to count requests per second
        self.outcomes: list[str] = []
        # what a provider bills: the usage of every completion answered with a 200 (online, or a batch line), as
        # {"input_tokens", "output_tokens"}; the run's spend ledger must add up to this
        self.billed: list[dict[str, int]] = []
        self.in_flight = 0
        self.max_in_flight = 0  # the most requests the server was handling at once
        self.connections = 0  # TCP connections accepted: a client that keeps its connections alive opens few
        self._lock = threading.Lock()
        self._random = random.Random(self.faults.seed)
        super().__init__(self._handler(), port)

    @property
    def completed(self) -> int:
        """Requests answered with a 200."""
        with self._lock:
            return self.outcomes.count("ok")

    def _outcome(self) -> str:
        with self._lock:
            if self.faults.script:
                return self.faults.script.pop(0)
            if self.faults.always:
                return self.faults.always
            roll = self._random.random()
        f = self.faults
        shares = (("429", f.rate_429), ("500", f.rate_500), ("hang", f.rate_hang), ("garbage", f.rate_garbage))
        for name, rate in shares:
            if roll < rate:
                return name
            roll -= rate
        return "ok"

    # --- what a provider defines ---

    def _model_of(self, path: str) -> str | None:
        """The model a request to ``path`` is for ("" when the body names it), or None: not an endpoint here."""
        raise NotImplementedError

    def _completion(self, request: dict[str, Any], model: str) -> dict[str, Any]:
        raise NotImplementedError

    def _error(self, status: int, message: str) -> dict[str, Any]:
        return {"error": {"message": message}}

    def _usage_of(self, completion: dict[str, Any]) -> dict[str, int]:
        """A completion's billed tokens, as {"input_tokens", "output_tokens"}."""
        raise NotImplementedError

    def bill(self, completion: dict[str, Any]) -> dict[str, Any]:
        """Note a completion as billed (see ``billed``) and return it."""
        with self._lock:
            self.billed.append(self._usage_of(completion))
        return completion

    def _no_answer(self, request: dict[str, Any], model: str) -> dict[str, Any]:
        """A 200 with nothing to read (``no-choices``)."""
        raise NotImplementedError

    def _stream(self, path: str, request: dict[str, Any], model: str) -> list[dict[str, Any]] | None:
        """The chunks of a streamed answer when the request asks to stream, else None (a plain JSON answer)."""
        return None

    def _post_other(self, path: str, content_type: str, raw: bytes) -> tuple[int, bytes, str] | None:
        """A POST that is not a model request (an upload, a batch): (status, body, content type), else None."""
        return None

    def _get(self, path: str) -> tuple[int, bytes, str] | None:
        """A GET (a file's content, a batch's status): (status, body, content type), else None (404)."""
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # headers and body go out in two writes: with Nagle's algorithm on, the body waits for the
            # client's delayed ACK (~40 ms on Linux) and every request looks 40 ms slower than it is
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                return

            def setup(self) -> None:
                with server._lock:
                    server.connections += 1
                super().setup()

            def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None, *,
                      content_type: str = "application/json") -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(body)))
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    # the client went away first (a run stopped, its calls in flight cancelled; a timeout): as a
                    # real server, write nothing more and print nothing
                    self.close_connection = True

            def _json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                self._send(status, json.dumps(body).encode(), headers)

            def do_GET(self) -> None:
                with server._lock:
                    server.urls.append(self.path)
                answer = server._get(self.path)
                if answer is None:
                    self._json(404, server._error(404, f"no endpoint {self.path}"))
                else:
                    status, body, content_type = answer
                    self._send(status, body, content_type=content_type)

            def do_POST(self) -> None:
                with server._lock:
                    server.urls.append(self.path)
                length = int(self.headers.get("Content-Length", 0))
                raw = self.rfile.read(length)
                if len(raw) < length:  # the client went away mid-send (a kill): no request reached the server
                    self.close_connection = True
                    return
                other = server._post_other(self.path, self.headers.get("Content-Type", ""), raw)
                if other is not None:
                    status, body, content_type = other
                    self._send(status, body, content_type=content_type)
                    return
                try:
                    request = json.loads(raw or b"{}")
                except ValueError:  # an upload to a provider that takes none: what a real server answers
                    self._json(400, server._error(400, f"{self.path}: the body is not JSON"))
                    return
                model = server._model_of(self.path)
                if model is None:
                    self._json(404, server._error(404, f"no endpoint {self.path}"))
                    return
                with server._lock:
                    server.requests.append(request)
                    server.paths.append(self.path)
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                    server.times.append(time.monotonic())
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    self._answer(request, model)
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _answer(self, request: dict[str, Any], model: str) -> None:
                outcome = server._outcome()
                with server._lock:
                    server.outcomes.append(outcome)
                if server.latency:
                    time.sleep(server.latency)
                if outcome == "429":
                    self._json(429, server._error(429, "rate limited"), {"Retry-After": str(server.faults.retry_after)})
                elif outcome == "500":
                    self._json(500, server._error(500, "internal error"))
                elif outcome == "hang":
                    time.sleep(server.faults.hang_seconds)
                    self._json(504, server._error(504, "too late"))
                elif outcome == "garbage":
                    self._send(200, b"this is not json {")
                elif outcome in server.refusals:
                    self._json(int(outcome.partition("-")[0]), server.refusals[outcome])  # "400-key": a 400
                elif outcome == "empty":
                    self._send(200, b"")
                elif outcome == "no-choices":
                    self._json(200, server._no_answer(request, model))
                elif (chunks := server._stream(self.path, request, model)) is not None:
                    self._events(chunks)
                else:
                    self._json(200, server.bill(server._completion(request, model)))

            def _events(self, chunks: list[dict[str, Any]]) -> None:
                """A streamed answer as server-sent events, one ``data:`` line per chunk."""
                body = b"".join(b"data: " + json.dumps(chunk).encode() + b"\r\n\r\n" for chunk in chunks)
                self._send(200, body, content_type="text/event-stream")

        return Handler


class FakeOpenAIServer(FakeServer):
    """``POST /v1/chat/completions``: ``n`` choices, logprobs, usage (:func:`prompt_tokens`, :func:`count_tokens`);
    and the Files and Batches endpoints (``batches``: :class:`~jurygraph.testing.fake_batches.FakeBatchAPI`),
    whose lines the same responder answers."""

    name = "fake-openai"
    refusals: ClassVar[dict[str, dict[str, Any]]] = _REFUSALS

    def __init__(self, responder: Responder | None = None, **kwargs: Any) -> None:
        from jurygraph.testing.fake_batches import FakeBatchAPI

        super().__init__(responder, **kwargs)
        self.batches = FakeBatchAPI(lambda body: self.bill(self._completion(body, "")))

    def _post_other(self, path: str, content_type: str, raw: bytes) -> tuple[int, bytes, str] | None:
        return self.batches.post(path, content_type, raw)  # None for a path that is not a file's or a batch's

    def _get(self, path: str) -> tuple[int, bytes, str] | None:
        return self.batches.get(path)

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def _model_of(self, path: str) -> str | None:
        return "" if path.partition("?")[0].rstrip("/").endswith("/chat/completions") else None

    def _completion(self, request: dict[str, Any], model: str) -> dict[str, Any]:
        n = int(request.get("n") or 1)
        choices = []
        prompt = prompt_tokens(request.get("messages", []))
        completion = 0
        for i in range(n):
            content, logprobs = reply_parts(self.responder(request, i))
            completion += count_tokens(content)
            choice: dict[str, Any] = {"index": i, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": content}}
            if request.get("logprobs") and logprobs is not None:
                choice["logprobs"] = {"content": logprobs}
            choices.append(choice)
        return {
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": int(time.time()),
            "model": request.get("model", "fake"), "choices": choices,
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        }

    def _error(self, status: int, message: str) -> dict[str, Any]:
        return {"error": {"message": message, **({"type": "rate_limit"} if status == 429 else {})}}

    def _usage_of(self, completion: dict[str, Any]) -> dict[str, int]:
        usage = completion["usage"]
        return {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"]}

    def _no_answer(self, request: dict[str, Any], model: str) -> dict[str, Any]:
        return {**self._completion(request, model), "choices": []}


def reply_parts(reply: str | dict[str, Any]) -> tuple[str, Any]:
    """A responder's reply as (text, logprobs or None)."""
    return (reply, None) if isinstance(reply, str) else (reply["content"], reply.get("logprobs"))


def prompt_of(request: dict[str, Any]) -> str:
    """The text of the last message of a request: OpenAI chat completions (string or content parts) or Gemini
    ``generateContent`` (the last content's text parts), so one responder serves a mixed panel."""
    if "contents" in request:
        parts = (request["contents"] or [{}])[-1].get("parts", [])
        return "\n".join(str(part.get("text", "")) for part in parts if isinstance(part, dict))
    content = request.get("messages", [{}])[-1].get("content", "")
    if isinstance(content, list):
        return "\n".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)
