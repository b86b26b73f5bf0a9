"""A LangSmith endpoint on 127.0.0.1 that records what the ``langsmith`` client sends, for tracing and evaluation
tests.

Point ``LANGSMITH_ENDPOINT`` at :attr:`FakeLangSmith.url` (with ``LANGSMITH_TRACING=true`` for traces). The client
asks ``GET /info`` (answered ``{}``: no compression, no batching limits, so it sends plain multipart runs and plain
``POST /feedback``) and then:

- posts runs to ``/runs/multipart`` (each run's fields as ``post.<id>``/``patch.<id>`` parts, its inputs, outputs and
  extra as ``post.<id>.<field>`` parts) or, older clients, to ``/runs/batch`` as JSON; :attr:`runs` merges everything
  received by run id, and ``POST /runs/query`` gives a project's runs back (what a comparative experiment reads);
- keeps, in memory, what ``langsmith.evaluate()``, ``aevaluate()``, comparative experiments and the pytest plugin
  (``@pytest.mark.langsmith``) create and read: projects (``/sessions``: experiments), datasets and their examples
  (``/datasets``, ``/examples``, ``/examples/bulk``), comparative experiments (``/datasets/comparative``) and
  feedback (``POST /feedback``, in :attr:`feedback`).

It answers the way the real service does where the client depends on it (a project or dataset name taken twice is
a 409, an unknown id a 404, pages by ``offset``/``limit``); everything else it is sent is recorded and answered
``{}``. Tests read :attr:`feedback`, :attr:`runs`, :attr:`sessions`, :attr:`datasets` and :attr:`examples`.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from jurygraph.testing.fake_server import LocalServer

TENANT = "00000000-0000-4000-8000-000000000000"
_ID = r"(?P<id>[0-9a-fA-F-]{36})"


class _Answer(Exception):
    """An HTTP error the fake answers with (404, 409...)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status


def _now() -> str:
    return datetime.now(UTC).isoformat()


class FakeLangSmith(LocalServer):
    name = "fake-langsmith"

    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}
        self._patched: dict[str, set[str]] = {}  # run id -> the fields a patch set
        self.paths: list[str] = []  # the path of every POST/PATCH/PUT, in order
        self.api_keys: set[str] = set()
        self.sessions: dict[str, dict[str, Any]] = {}  # projects, experiments included, by id
        self.datasets: dict[str, dict[str, Any]] = {}
        self.examples: dict[str, dict[str, Any]] = {}
        self.comparative: dict[str, dict[str, Any]] = {}
        self.feedback: list[dict[str, Any]] = []
        self._lock = threading.RLock()
        super().__init__(self._handler())

    @property
    def url(self) -> str:
        """What to set ``LANGSMITH_ENDPOINT`` to."""
        return self.root_url

    # --- what tests read --------------------------------------------------------------------------------------

    def tagged(self, tag: str) -> list[dict[str, Any]]:
        """The runs that carry a tag."""
        with self._lock:
            return [run for run in self.runs.values() if tag in (run.get("tags") or [])]

    def feedback_of(self, key: str | None = None, *, session: str | None = None) -> list[dict[str, Any]]:
        """The feedback received (with ``key``; on the project named ``session``: its runs' or, a summary
        evaluator's, its own), oldest first."""
        with self._lock:
            found = [f for f in self.feedback if key is None or f.get("key") == key]
            if session is None:
                return found
            ids = {sid for sid, project in self.sessions.items() if project["name"] == session}
            return [f for f in found if f.get("session_id") in ids]

    def session_named(self, name: str) -> dict[str, Any]:
        with self._lock:
            return next(project for project in self.sessions.values() if project["name"] == name)

    # --- traced runs ------------------------------------------------------------------------------------------

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

    def _record_runs(self, path: str, content_type: str, body: bytes) -> None:
        if path.startswith("/runs/multipart"):
            message = BytesParser(policy=HTTP).parsebytes(
                b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body)
            for part in message.iter_parts():
                name = part.get_param("name", header="content-disposition") or ""
                kind, _, rest = str(name).partition(".")  # post.<id>[.<field>] or patch.<id>[.<field>]
                if kind not in ("post", "patch"):
                    continue  # feedback.<id> parts: not sent while /info names no version
                run_id, _, field = rest.partition(".")
                payload = part.get_payload(decode=True)
                self._merge(run_id, field or None, json.loads(payload) if isinstance(payload, bytes) and payload
                            else None, kind)
        elif path.startswith("/runs/batch"):
            batch = json.loads(body or b"{}")
            for kind in ("post", "patch"):
                for run in batch.get(kind, []):
                    self._merge(str(run["id"]), None, run, kind)

    def _session_of(self, run: dict[str, Any]) -> str | None:
        """The id of the project a run was traced to (its own session_id, else the project of its session_name,
        created as the service does for a project first named by a run)."""
        if run.get("session_id"):
            return str(run["session_id"])
        name = run.get("session_name")
        if not name:
            return None
        found = next((sid for sid, project in self.sessions.items() if project["name"] == name), None)
        return found or self._create_session({"name": name})["id"]

    def _query_runs(self, body: dict[str, Any]) -> dict[str, Any]:
        wanted = {str(s) for s in body.get("session") or []}
        found = []
        for run in list(self.runs.values()):
            if wanted and self._session_of(run) not in wanted:
                continue
            if body.get("is_root") and run.get("parent_run_id"):
                continue
            if body.get("trace") and str(run.get("trace_id")) != str(body["trace"]):
                continue
            found.append({"run_type": "chain", "name": "run", "start_time": _now(), "trace_id": run["id"],
                          "inputs": {}, **run, "session_id": self._session_of(run)})
        return {"runs": found, "cursors": {"next": None}}

    # --- projects, datasets, examples, feedback ---------------------------------------------------------------

    def _create_session(self, body: dict[str, Any]) -> dict[str, Any]:
        if any(p["name"] == body.get("name") for p in self.sessions.values()):
            raise _Answer(409, f"project {body.get('name')!r} already exists")
        project = {"tenant_id": TENANT, "start_time": _now(), "reference_dataset_id": None, "extra": None,
                   "description": None, **body, "id": str(body.get("id") or uuid.uuid4())}
        self.sessions[project["id"]] = project
        return project

    def _update_session(self, session_id: str, body: dict[str, Any]) -> dict[str, Any]:
        project = self._one(self.sessions, session_id, "project")
        project.update({k: v for k, v in body.items() if v is not None})
        return project

    def _create_dataset(self, body: dict[str, Any]) -> dict[str, Any]:
        if any(d["name"] == body.get("name") for d in self.datasets.values()):
            raise _Answer(409, f"dataset {body.get('name')!r} already exists")
        dataset = {"created_at": _now(), "modified_at": _now(), "tenant_id": TENANT, "example_count": 0,
                   "data_type": "kv", **body, "id": str(body.get("id") or uuid.uuid4())}
        self.datasets[dataset["id"]] = dataset
        return dataset

    def _create_example(self, body: dict[str, Any]) -> dict[str, Any]:
        dataset_id = str(body.get("dataset_id"))
        dataset = self._one(self.datasets, dataset_id, "dataset")
        example = {"created_at": _now(), "modified_at": _now(), "inputs": {}, "outputs": None, "metadata": None,
                   **body, "dataset_id": dataset_id, "id": str(body.get("id") or uuid.uuid4())}
        self.examples[example["id"]] = example
        dataset["example_count"] = sum(1 for e in self.examples.values() if e["dataset_id"] == dataset_id)
        return example

    def _list_examples(self, query: dict[str, list[str]]) -> list[dict[str, Any]]:
        found = list(self.examples.values())
        if query.get("dataset"):
            found = [e for e in found if e["dataset_id"] == query["dataset"][0]]
        if query.get("id"):
            found = [e for e in found if e["id"] in set(query["id"])]
        return _page(found, query)

    def _create_comparative(self, body: dict[str, Any]) -> dict[str, Any]:
        experiment = {"tenant_id": TENANT, "created_at": _now(), "modified_at": _now(), **body,
                      "id": str(body.get("id") or uuid.uuid4())}
        self.comparative[experiment["id"]] = experiment
        return experiment

    def _one(self, table: dict[str, dict[str, Any]], key: str, what: str) -> dict[str, Any]:
        if key not in table:
            raise _Answer(404, f"{what} {key} not found")
        return table[key]

    def _routes(self) -> list[tuple[str, re.Pattern[str], Callable[..., Any]]]:
        """(method, path pattern, handler(match, query, body)) for every endpoint the client depends on."""
        def by_name(table: dict[str, dict[str, Any]]) -> Callable[..., Any]:
            def listing(m: re.Match[str], q: dict[str, list[str]], body: Any) -> Any:
                rows = list(table.values())
                if q.get("name"):
                    rows = [row for row in rows if row.get("name") == q["name"][0]]
                if q.get("id"):
                    rows = [row for row in rows if row["id"] in set(q["id"])]
                return _page(rows, q)
            return listing

        def feedback(m: re.Match[str], q: dict[str, list[str]], body: Any) -> Any:
            self.feedback.append(body)
            return body

        def bulk(m: re.Match[str], q: dict[str, list[str]], body: Any) -> Any:
            return [self._create_example(row) for row in body]

        return [
            ("GET", re.compile(r"/info"), lambda m, q, b: {}),
            ("POST", re.compile(r"/runs/query"), lambda m, q, b: self._query_runs(b or {})),
            ("POST", re.compile(r"/sessions"), lambda m, q, b: self._create_session(b)),
            ("GET", re.compile(r"/sessions"), by_name(self.sessions)),
            ("GET", re.compile(rf"/sessions/{_ID}"), lambda m, q, b: self._one(self.sessions, m["id"], "project")),
            ("PATCH", re.compile(rf"/sessions/{_ID}"), lambda m, q, b: self._update_session(m["id"], b)),
            ("POST", re.compile(r"/datasets"), lambda m, q, b: self._create_dataset(b)),
            ("GET", re.compile(r"/datasets"), by_name(self.datasets)),
            ("GET", re.compile(rf"/datasets/{_ID}"), lambda m, q, b: self._one(self.datasets, m["id"], "dataset")),
            ("PUT", re.compile(rf"/datasets/{_ID}/tags"), lambda m, q, b: {}),
            ("POST", re.compile(r"/datasets/comparative"), lambda m, q, b: self._create_comparative(b)),
            ("POST", re.compile(r"/examples"), lambda m, q, b: self._create_example(b)),
            ("POST", re.compile(r"/examples/bulk"), bulk),
            ("GET", re.compile(r"/examples"), lambda m, q, b: self._list_examples(q)),
            ("GET", re.compile(rf"/examples/{_ID}"), lambda m, q, b: self._one(self.examples, m["id"], "example")),
            ("PATCH", re.compile(rf"/examples/{_ID}"),
             lambda m, q, b: self._one(self.examples, m["id"], "example").update(b) or {}),
            ("POST", re.compile(r"/feedback"), feedback),
        ]

    def answer(self, method: str, target: str, content_type: str, body: bytes) -> tuple[int, Any]:
        """The status and JSON answer to one request."""
        parts = urlsplit(target)
        path, query = parts.path.rstrip("/") or "/", parse_qs(parts.query)
        if method == "POST" and path.startswith(("/runs/multipart", "/runs/batch")):
            self._record_runs(path, content_type, body)
            return 200, {}
        data = json.loads(body) if body.strip()[:1] in (b"{", b"[") else None
        with self._lock:
            for verb, pattern, handler in self._routes():
                match = pattern.fullmatch(path)
                if verb == method and match:
                    try:
                        return 200, handler(match, query, data)
                    except _Answer as err:
                        return err.status, {"detail": str(err)}
        return 200, {}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _serve(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                if self.command != "GET":
                    with fake._lock:
                        fake.paths.append(self.path)
                if self.headers.get("x-api-key"):
                    with fake._lock:
                        fake.api_keys.add(self.headers["x-api-key"])
                status, answer = fake.answer(self.command, self.path, self.headers.get("Content-Type", ""), body)
                data = json.dumps(answer, default=str).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

        return Handler


def _page(rows: list[dict[str, Any]], query: dict[str, list[str]]) -> list[dict[str, Any]]:
    offset = int((query.get("offset") or ["0"])[0])
    limit = int((query.get("limit") or ["100"])[0])
    return rows[offset:offset + limit]
