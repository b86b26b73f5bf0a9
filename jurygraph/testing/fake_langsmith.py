"""A LangSmith endpoint on 127.0.0.1 that records what the ``langsmith`` client posts, for tracing tests.

Point ``LANGSMITH_ENDPOINT`` at :attr:`FakeLangSmith.url` with ``LANGSMITH_TRACING=true``: the client asks
``GET /info`` (answered ``{}``: no compression, no batching limits, so it sends plain multipart) and then posts
runs to ``/runs/multipart`` (each run's fields as ``post.<id>``/``patch.<id>`` parts, its inputs, outputs and
extra as ``post.<id>.<field>`` parts) or, older clients, to ``/runs/batch`` as JSON. :attr:`runs` merges
everything received by run id.
"""

from __future__ import annotations

import json
import threading
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler
from typing import Any

from jurygraph.testing.fake_server import LocalServer


class FakeLangSmith(LocalServer):
    name = "fake-langsmith"

    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}
        self._patched: dict[str, set[str]] = {}  # run id -> the fields a patch set
        self.paths: list[str] = []
        self.api_keys: set[str] = set()
        self._lock = threading.Lock()
        super().__init__(self._handler())

    @property
    def url(self) -> str:
        """What to set ``LANGSMITH_ENDPOINT`` to."""
        return self.root_url

    def _merge(self, run_id: str, field: str | None, value: Any, kind: str = "post") -> None:
        """Add what a post or patch says of a run. The client may send a run's end (its patch: outputs, end time)
        before its start (its post) when they go in different requests: as LangSmith does, what a patch set is never
        undone by a post."""
        with self._lock:
            run = self.runs.setdefault(run_id, {"id": run_id})
            patched = self._patched.setdefault(run_id, set())
            fields = dict(value or {}) if field is None else {field: value}
            for key, item in fields.items():
                if kind == "patch":
                    patched.add(key)
                elif key in patched:
                    continue
                run[key] = item

    def _record(self, path: str, content_type: str, body: bytes) -> None:
        if path.startswith("/runs/multipart"):
            message = BytesParser(policy=HTTP).parsebytes(
                b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body)
            for part in message.iter_parts():
                name = part.get_param("name", header="content-disposition") or ""
                kind, _, rest = str(name).partition(".")  # post.<id>[.<field>] or patch.<id>[.<field>]
                run_id, _, field = rest.partition(".")
                payload = part.get_payload(decode=True)
                self._merge(run_id, field or None, json.loads(payload) if isinstance(payload, bytes) and payload
                            else None, kind)
        elif path.startswith("/runs/batch"):
            batch = json.loads(body or b"{}")
            for kind in ("post", "patch"):
                for run in batch.get(kind, []):
                    self._merge(str(run["id"]), None, run, kind)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _reply(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def do_GET(self) -> None:
                self._reply()

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with fake._lock:
                    fake.paths.append(self.path)
                    if self.headers.get("x-api-key"):
                        fake.api_keys.add(self.headers["x-api-key"])
                fake._record(self.path, self.headers.get("Content-Type", ""), body)
                self._reply()

            do_PATCH = do_POST

        return Handler

    def tagged(self, tag: str) -> list[dict[str, Any]]:
        """The runs that carry a tag."""
        with self._lock:
            return [run for run in self.runs.values() if tag in (run.get("tags") or [])]
