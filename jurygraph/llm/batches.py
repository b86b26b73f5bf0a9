"""The OpenAI Batch API for jurygraph's calls: a call as a line of a batch file, a batch's result line as what the
call would have returned online, and the Files/Batches endpoints through the ``openai`` client of the call's model.

A line's body is what ``langchain-openai`` would have sent online for the same call (``_get_request_payload`` of
the model bound with the call's parameters: messages, temperature, max_tokens, n, logprobs; a structured call's
``response_format`` as the ``openai`` client writes it), and a result's body is read by the same
``_create_chat_result``, so a reply reaches the graph as an online one would: text, usage, logprobs. Its
``custom_id`` is the call's LLM cache key: the reply is stored where a rerun or a resume reads it.

Gemini has a batch mode too (``google-genai``'s ``client.batches``, which a ``base_url`` can point at a local
server), but not here yet: a Gemini call in a ``--batch`` run is sent online, and the docs say so.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage

from jurygraph.llm.calls import PendingCall
from jurygraph.llm.redact import redact_text

ENDPOINT = "/v1/chat/completions"
# what OpenAI accepts in one batch (https://platform.openai.com/docs/guides/batch): 50,000 requests, a 200 MB file
MAX_REQUESTS = 50_000
MAX_BYTES = 190 * 2**20
TERMINAL = ("completed", "expired", "failed", "cancelled")


def batchable(call: PendingCall) -> bool:
    """Whether a call can go through the OpenAI Batch API: an OpenAI-compatible chat model (not Azure's)."""
    return type(call.resolved.model).__name__ == "ChatOpenAI" and hasattr(call.model, "_get_request_payload")


def request_line(call: PendingCall) -> dict[str, Any]:
    """The call as a line of a batch file (``custom_id`` = its cache key)."""
    model = call.model
    kwargs: dict[str, Any] = {}
    if call.kind == "samples":
        kwargs["n"] = call.request.n
    if call.kind == "structured" and call.request.form is not None:
        kwargs["response_format"] = _response_format(call.request.form.schema())
    body = model._get_request_payload(list(call.messages), **kwargs)
    if body.get("stream"):
        body["stream"] = False  # a batch answers whole; a streamed model's other parameters stay
        body.pop("stream_options", None)
    return {"custom_id": call.key, "method": "POST", "url": ENDPOINT, "body": body}


def _response_format(schema: type) -> dict[str, Any]:
    """A pydantic schema as the ``openai`` client sends it online (``chat.completions.parse``)."""
    from openai.lib._parsing._completions import type_to_response_format_param

    return dict(type_to_response_format_param(schema))  # type: ignore[arg-type]


def decode(call: PendingCall, body: dict[str, Any]) -> Any:
    """A batch result's chat completion as what the online call returns: an AIMessage, ``(raw, parsed)`` for a
    structured call, the samples for an n-sample call."""
    result = call.model._create_chat_result(body)
    messages = []
    for generation in result.generations:
        message = generation.message
        # as langchain-core does online: generation info (finish reason, logprobs) joins the message's metadata
        message.response_metadata = {**(generation.generation_info or {}), **message.response_metadata}
        messages.append(message)
    if call.kind == "samples":
        return messages
    first: AIMessage = messages[0]
    if call.kind == "structured":
        parsed = None
        if call.request.form is not None:
            try:
                parsed = call.request.form.schema().model_validate_json(first.text)
            except ValueError:
                parsed = None  # read as the online path does a parsing error: the re-ask decides
        return first, parsed
    return first


@dataclass
class BatchResult:
    """What a finished batch answered: result bodies by custom_id, and the reason each other request failed."""

    status: str
    bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


class OpenAIBatches:
    """The Files and Batches endpoints through an ``openai.OpenAI`` client (a model's ``root_client``)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def upload(self, path: Path) -> str:
        with path.open("rb") as handle:
            return str(self.client.files.create(file=(path.name, handle), purpose="batch").id)

    def create(self, input_file_id: str, metadata: dict[str, str]) -> Any:
        return self.client.batches.create(input_file_id=input_file_id, endpoint=ENDPOINT, completion_window="24h",
                                          metadata=metadata)

    def find(self, input_file_id: str) -> Any | None:
        """The batch created from an uploaded file, if one was (a process killed between the two calls)."""
        for batch in self.client.batches.list(limit=100):
            if batch.input_file_id == input_file_id:
                return batch
        return None

    def retrieve(self, batch_id: str) -> Any:
        return self.client.batches.retrieve(batch_id)

    def result(self, batch: Any, custom_ids: Sequence[str] = ()) -> BatchResult:
        """A terminal batch's answers; a request with neither an answer nor an error line (a failed or cancelled
        batch) is failed with the batch's status."""
        out = BatchResult(batch.status)
        if batch.output_file_id:
            for row in self._lines(batch.output_file_id):
                response = row.get("response") or {}
                if response.get("status_code") == 200:
                    out.bodies[row["custom_id"]] = response["body"]
                else:
                    out.failed[row["custom_id"]] = _reason(row)
        if batch.error_file_id:
            for row in self._lines(batch.error_file_id):
                out.failed[row["custom_id"]] = _reason(row)
        errors = getattr(getattr(batch, "errors", None), "data", None) or []
        why = "; ".join(str(getattr(e, "message", e)) for e in errors) or f"the batch {batch.status}"
        for custom_id in custom_ids:
            if custom_id not in out.bodies and custom_id not in out.failed:
                out.failed[custom_id] = why
        return out

    def _lines(self, file_id: str) -> list[dict[str, Any]]:
        text = self.client.files.content(file_id).text
        return [json.loads(line) for line in text.splitlines() if line.strip()]


def _reason(row: dict[str, Any]) -> str:
    error = row.get("error") or ((row.get("response") or {}).get("body") or {}).get("error") or {}
    status = (row.get("response") or {}).get("status_code")
    text = error.get("code") or error.get("message") or "no answer"
    return redact_text(f"{status} {text}" if status else str(text))
