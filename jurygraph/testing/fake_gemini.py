"""A small Gemini API (``generativelanguage``) server on 127.0.0.1, for tests: what ``langchain-google-genai``
(through ``google-genai``) sends when given ``base_url``.

It answers ``POST /{version}/models/{model}:generateContent`` in Gemini's JSON: ``candidateCount``
candidates, ``usageMetadata`` (tokens as :func:`~jurygraph.testing.fake_server.count_tokens` counts
them, the prompt once per request), ``modelVersion``; a
request with ``generationConfig.responseMimeType: application/json`` gets the responder's text as is (the
responder decides the JSON, as the OpenAI fake leaves ``response_format`` to it). Faults, latency and the
request log are :class:`~jurygraph.testing.fake_server.FakeServer`'s; errors use Gemini's error body
(``{"error": {"code", "message", "status"}}``). ``:streamGenerateContent?alt=sse`` (what the client sends
when a caller streams, e.g. the runner's live view ``on_token``) gets the same answer as server-sent events:
the text in two chunks, the finish reason and the usage on the last.

The responder is called as for the OpenAI fake, ``responder(request, candidate_index)``, with the request body
plus the model name from the URL under ``"model"``; ``prompt_of`` reads both providers' requests.

    with FakeGeminiServer(responder) as server:
        ChatGoogleGenerativeAI(model="gemini-2.0-flash", base_url=server.base_url, google_api_key="test")
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from jurygraph.testing.fake_server import FakeServer, count_tokens, reply_parts

_ENDPOINT = re.compile(r"^/v1(?:beta|alpha)?/models/(?P<model>[^/:?]+):(?P<method>generateContent|"
                       r"streamGenerateContent)(?:\?.*)?$")

# Gemini's status names for the HTTP statuses the fake answers with
_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
           429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 504: "DEADLINE_EXCEEDED"}


def _gemini_error(status: int, message: str) -> dict[str, Any]:
    return {"error": {"code": status, "message": message, "status": _STATUS.get(status, "UNKNOWN")}}


class FakeGeminiServer(FakeServer):
    name = "fake-gemini"
    refusals: ClassVar[dict[str, dict[str, Any]]] = {
        # what the real API answers for a wrong key is a 400 naming API_KEY_INVALID; 401 is for OAuth tokens
        "400-key": _gemini_error(400, "API key not valid. Please pass a valid API key."),
        "401": _gemini_error(401, "Request had invalid authentication credentials."),
        "403": _gemini_error(403, "The caller does not have permission"),
        "404": _gemini_error(404, "models/unknown is not found for API version v1beta, or is not supported "
                                  "for generateContent."),
    }

    @property
    def base_url(self) -> str:
        """What to give as ``base_url`` (the client adds ``/v1/models/...``, ``/v1beta/`` before google-genai 3)."""
        return self.root_url

    def _model_of(self, path: str) -> str | None:
        match = _ENDPOINT.match(path)
        return match["model"] if match else None

    def _error(self, status: int, message: str) -> dict[str, Any]:
        return _gemini_error(status, message)

    def _completion(self, request: dict[str, Any], model: str) -> dict[str, Any]:
        config = request.get("generationConfig") or {}
        asked = {**request, "model": model}
        prompt = sum(count_tokens(str(part.get("text", "")))
                           for content in [*request.get("contents", []), request.get("systemInstruction") or {}]
                           for part in content.get("parts", []))
        candidates, completion = [], 0
        for i in range(int(config.get("candidateCount") or 1)):
            text, _ = reply_parts(self.responder(asked, i))
            completion += count_tokens(text)
            candidates.append({"content": {"role": "model", "parts": [{"text": text}]},
                               "finishReason": "STOP", "index": i})
        return {"candidates": candidates, "modelVersion": model,
                "usageMetadata": {"promptTokenCount": prompt, "candidatesTokenCount": completion,
                                  "totalTokenCount": prompt + completion}}

    def _usage_of(self, completion: dict[str, Any]) -> dict[str, int]:
        usage = completion.get("usageMetadata") or {}
        return {"input_tokens": int(usage.get("promptTokenCount", 0)),
                "output_tokens": int(usage.get("candidatesTokenCount", 0))}

    def _stream(self, path: str, request: dict[str, Any], model: str) -> list[dict[str, Any]] | None:
        if ":streamGenerateContent" not in path:
            return None
        whole = self.bill(self._completion(request, model))
        text = whole["candidates"][0]["content"]["parts"][0]["text"]
        half = len(text) // 2
        first = {"candidates": [{"content": {"role": "model", "parts": [{"text": text[:half]}]}, "index": 0}],
                 "modelVersion": model}
        last = {**whole, "candidates": [{**whole["candidates"][0],
                                         "content": {"role": "model", "parts": [{"text": text[half:]}]}}]}
        return [first, last]

    def _no_answer(self, request: dict[str, Any], model: str) -> dict[str, Any]:
        # a prompt blocked by safety filters: no candidates, only feedback
        return {"promptFeedback": {"blockReason": "SAFETY"}, "modelVersion": model,
                "usageMetadata": {"promptTokenCount": 1, "totalTokenCount": 1}}


def wants_json(request: dict[str, Any]) -> bool:
    """Whether a Gemini request asks for JSON-schema output (structured judgments)."""
    return (request.get("generationConfig") or {}).get("responseMimeType") == "application/json"
