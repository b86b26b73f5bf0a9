"""The OpenAI Files and Batches endpoints, as :class:`~jurygraph.testing.fake_server.FakeOpenAIServer` serves them:
enough for the real ``openai`` client's ``files.create``/``files.content`` and ``batches.create``/``retrieve``/
``list``/``cancel``.

A batch moves one status per poll (``GET /v1/batches/{id}``): ``validating -> in_progress -> finalizing ->
completed`` (``polls_per_status`` polls each; ``hold(index)`` keeps a batch ``validating``). On completing,
each line's body is answered by the server's own
chat-completions answer (the same responder, usage and model as an online request), written to an output file
(``{"id", "custom_id", "response": {"status_code": 200, "request_id", "body"}, "error": null}``); a line
``failing(custom_id, body)`` names gets a 500 in the error file instead. ``outcome(index)`` decides a batch's end
by its order of creation: ``"completed"``, ``"expired"`` (the first ``expire_after`` lines answered, the rest in
the error file with ``batch_expired``) or ``"failed"`` (nothing answered: ``errors`` says why). Every batch
created is kept in ``created`` (its input lines), every line answered in ``answered``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

STATUSES = ("validating", "in_progress", "finalizing", "completed")


class FakeBatchAPI:
    """The files and batches of one fake server. ``answer(body) -> chat completion`` is the server's own."""

    def __init__(self, answer: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self.answer = answer
        self.polls_per_status = 1
        self.outcome: Callable[[int], str] = lambda index: "completed"
        self.expire_after = 0  # lines answered before an "expired" batch stops
        self.failing: Callable[[str, dict[str, Any]], bool] = lambda custom_id, body: False
        # a batch (by its index of creation) held ``validating`` for as long as this says so
        self.hold: Callable[[int], bool] = lambda index: False
        self.files: dict[str, dict[str, Any]] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.created: list[list[dict[str, Any]]] = []  # each batch's input lines, in order of creation
        self.answered: list[dict[str, Any]] = []  # every line answered, over all batches
        self.polls = 0
        self._polls: dict[str, int] = {}
        self._lock = threading.Lock()

    # --- routes: (status, body, content type), or None when the path is not ours ---

    def post(self, path: str, content_type: str, raw: bytes) -> tuple[int, bytes, str] | None:
        route = path.split("?", 1)[0].rstrip("/")
        if route.endswith("/files"):
            return self._upload(content_type, raw)
        if route.endswith("/batches"):
            return self._create(json.loads(raw or b"{}"))
        if route.endswith("/cancel") and "/batches/" in route:
            batch = self.batches.get(route.split("/")[-2])
            if batch is None:
                return _error(404, "No such batch")
            batch["status"] = "cancelled"
            batch["cancelled_at"] = int(time.time())
            return _json(200, _public(batch))
        return None

    def get(self, path: str) -> tuple[int, bytes, str] | None:
        route = path.partition("?")[0]
        parts = route.rstrip("/").split("/")
        if parts[-1] == "content" and len(parts) >= 3 and parts[-3] == "files":
            stored = self.files.get(parts[-2])
            return (200, stored["data"], "application/octet-stream") if stored else _error(404, "No such file")
        if parts[-2:-1] == ["files"]:
            stored = self.files.get(parts[-1])
            return _json(200, _file_object(parts[-1], stored)) if stored else _error(404, "No such file")
        if parts[-1] == "batches":
            with self._lock:
                listed = sorted(self.batches.values(), key=lambda b: b["created_at"], reverse=True)
            return _json(200, {"object": "list", "data": [_public(batch) for batch in listed], "has_more": False,
                               "first_id": listed[0]["id"] if listed else None,
                               "last_id": listed[-1]["id"] if listed else None})
        if parts[-2:-1] == ["batches"]:
            return self._retrieve(parts[-1])
        return None

    # --- the endpoints ---

    def _upload(self, content_type: str, raw: bytes) -> tuple[int, bytes, str]:
        message = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + raw)
        fields: dict[str, Any] = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            fields[str(name)] = (part.get_filename(), part.get_payload(decode=True))
        if "file" not in fields:
            return _error(400, "no file in the upload")
        filename, data = fields["file"]
        purpose = (fields.get("purpose") or (None, b""))[1].decode()
        with self._lock:
            file_id = f"file-{len(self.files) + 1}"
            self.files[file_id] = {"data": data, "filename": filename or "upload.jsonl", "purpose": purpose,
                                   "created_at": int(time.time())}
        return _json(200, _file_object(file_id, self.files[file_id]))

    def _create(self, request: dict[str, Any]) -> tuple[int, bytes, str]:
        stored = self.files.get(str(request.get("input_file_id")))
        if stored is None:
            return _error(400, f"no file {request.get('input_file_id')}")
        lines = [json.loads(line) for line in stored["data"].decode().splitlines() if line.strip()]
        now = int(time.time())
        with self._lock:
            index = len(self.created)
            self.created.append(lines)
            batch_id = f"batch_{index + 1}"
            self.batches[batch_id] = {
                "id": batch_id, "object": "batch", "endpoint": request.get("endpoint"), "errors": None,
                "input_file_id": request["input_file_id"], "completion_window": request.get("completion_window"),
                "status": "validating", "output_file_id": None, "error_file_id": None, "created_at": now,
                "expires_at": now + 86400, "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
                "metadata": request.get("metadata"), "_index": index, "_lines": lines,
            }
            self._polls[batch_id] = 0
        return _json(200, _public(self.batches[batch_id]))

    def _retrieve(self, batch_id: str) -> tuple[int, bytes, str]:
        with self._lock:
            batch = self.batches.get(batch_id)
            if batch is None:
                return _error(404, "No such batch")
            self.polls += 1
            if batch["status"] in STATUSES[:-1] and not self.hold(batch["_index"]):
                self._polls[batch_id] += 1
                if self._polls[batch_id] >= self.polls_per_status:
                    self._polls[batch_id] = 0
                    following = STATUSES[STATUSES.index(batch["status"]) + 1]
                    if following == "in_progress":
                        batch["in_progress_at"] = int(time.time())
                    if following == "completed":
                        self._finish(batch)
                    else:
                        batch["status"] = following
            return _json(200, _public(batch))

    def _finish(self, batch: dict[str, Any]) -> None:
        """Answer the lines and write the output and error files, as the batch's outcome says."""
        outcome = self.outcome(batch["_index"])
        lines: list[dict[str, Any]] = batch["_lines"]
        answered = len(lines) if outcome == "completed" else self.expire_after if outcome == "expired" else 0
        output, errors = [], []
        for number, line in enumerate(lines):
            record_id = f"batch_req_{batch['_index'] + 1}_{number + 1}"
            if number >= answered:
                code = "batch_expired" if outcome == "expired" else "batch_failed"
                errors.append({"id": record_id, "custom_id": line["custom_id"], "response": None,
                               "error": {"code": code, "message": f"This request could not be executed ({code})."}})
            elif self.failing(line["custom_id"], line["body"]):
                errors.append({"id": record_id, "custom_id": line["custom_id"], "error": None, "response": {
                    "status_code": 500, "request_id": f"req_{record_id}",
                    "body": {"error": {"message": "The server had an error", "type": "server_error"}}}})
            else:
                body = self.answer(line["body"])
                self.answered.append(line)
                output.append({"id": record_id, "custom_id": line["custom_id"], "error": None,
                               "response": {"status_code": 200, "request_id": f"req_{record_id}", "body": body}})
        if outcome == "failed":
            batch["status"], batch["failed_at"] = "failed", int(time.time())
            batch["errors"] = {"object": "list", "data": [{"code": "invalid_request", "message": "validation failed",
                                                            "line": None, "param": None}]}
            batch["request_counts"] = {"total": len(lines), "completed": 0, "failed": 0}
            return
        batch["status"] = "expired" if outcome == "expired" else "completed"
        batch["expired_at" if outcome == "expired" else "completed_at"] = int(time.time())
        batch["request_counts"] = {"total": len(lines), "completed": len(output), "failed": len(errors)}
        for key, rows in (("output_file_id", output), ("error_file_id", errors)):
            if rows:
                file_id = f"file-{len(self.files) + 1}"
                data = "".join(json.dumps(row) + "\n" for row in rows).encode()
                self.files[file_id] = {"data": data, "filename": f"{batch['id']}_{key}.jsonl",
                                       "purpose": "batch_output", "created_at": int(time.time())}
                batch[key] = file_id


def _public(batch: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in batch.items() if not key.startswith("_")}


def _file_object(file_id: str, stored: dict[str, Any]) -> dict[str, Any]:
    return {"id": file_id, "object": "file", "bytes": len(stored["data"]), "created_at": stored["created_at"],
            "filename": stored["filename"], "purpose": stored["purpose"], "status": "processed"}


def _json(status: int, body: dict[str, Any]) -> tuple[int, bytes, str]:
    return status, json.dumps(body).encode(), "application/json"


def _error(status: int, message: str) -> tuple[int, bytes, str]:
    return _json(status, {"error": {"message": message, "type": "invalid_request_error"}})
