"""A persistent cache of model calls, so a rerun or a resume pays for no call twice.

The key is a hash of everything that changes the answer: the model (provider, name, base URL), the
kind of call (text, structured, n samples), the messages, the call parameters, the sample count and a
sample index. Values are LangChain's own serialised messages (JSON), stored deflated against a preset
dictionary of that JSON's boilerplate: a ChatEval reply's 830 bytes become ~170, so a run's cache stays
small next to its results (values stored as text by older versions still read). SQLite in WAL mode,
shared by threads and by asyncio, safe for several processes on one machine.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage

# The boilerplate of a serialised AIMessage (``langchain_core.load.dumpd``), most frequent parts last
# (deflate codes near matches shortest). Changing it would make stored values unreadable: a new
# dictionary needs a new format byte.
_ZDICT = (
    b'{"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages", "AIMessage"], "kwargs": '
    b'{"content": "", "additional_kwargs": {"refusal": null}, "response_metadata": {"token_usage": '
    b'{"completion_tokens": , "prompt_tokens": , "total_tokens": , "completion_tokens_details": null, '
    b'"prompt_tokens_details": null}, "model_provider": "openai", "model_name": "", "system_fingerprint": null, '
    b'"id": "chatcmpl-", "finish_reason": "stop", "logprobs": null}, "type": "ai", "id": "lc_run--", '
    b'"usage_metadata": {"input_tokens": , "output_tokens": , "total_tokens": , "input_token_details": {}, '
    b'"output_token_details": {}}, "tool_calls": [], "invalid_tool_calls": []}}'
)
_DEFLATE_V1 = b"\x01"  # format byte: raw deflate (no zlib header) with _ZDICT


def encode_value(value: Any) -> bytes:
    packer = zlib.compressobj(6, zlib.DEFLATED, -15, zdict=_ZDICT)
    return _DEFLATE_V1 + packer.compress(json.dumps(value).encode()) + packer.flush()


def decode_value(stored: bytes | str) -> Any:
    if isinstance(stored, str):  # written by a version before compression
        return json.loads(stored)
    if stored[:1] != _DEFLATE_V1:
        raise ValueError(f"LLM cache value in an unknown format ({stored[:1]!r})")
    return json.loads(zlib.decompressobj(-15, zdict=_ZDICT).decompress(stored[1:]))


def answer_usage(value: Any) -> tuple[str, dict[str, int]]:
    """A cached answer's model name and usage (requests, input and output tokens). n samples whose messages all carry
    the same usage came as one request (a provider's native ``n`` puts the whole response's usage on each)."""
    if isinstance(value, dict) and "raw" in value and "parsed" in value:  # a structured call's (raw, parsed)
        value = value["raw"]
    messages = value if isinstance(value, list) else [value]
    metas = [((m.get("kwargs") or {}).get("usage_metadata") or {}) if isinstance(m, dict) else {} for m in messages]
    native = len(metas) > 1 and all(meta == metas[0] for meta in metas)
    counted = metas[:1] if native else metas
    first = messages[0].get("kwargs", {}) if messages and isinstance(messages[0], dict) else {}
    model = str((first.get("response_metadata") or {}).get("model_name") or "")
    return model, {"requests": 1 if native else len(messages),
                   "input_tokens": sum(int(meta.get("input_tokens", 0)) for meta in counted),
                   "output_tokens": sum(int(meta.get("output_tokens", 0)) for meta in counted)}


class LLMCache:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        # WITHOUT ROWID: the table is its key's index, so each 64-character key is stored once, not twice
        self._db.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, value NOT NULL) WITHOUT ROWID")
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(model: str, kind: str, messages: Sequence[BaseMessage], params: dict[str, Any]) -> str:
        payload = {
            "model": model,
            "kind": kind,
            "messages": [[m.type, m.content, m.name] for m in messages],
            "params": params,
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()

    def get(self, key: str) -> Any | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM calls WHERE key = ?", (key,)).fetchone()
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return decode_value(row[0])

    def put(self, key: str, value: Any) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO calls (key, value) VALUES (?, ?)", (key, encode_value(value)))

    # On the event loop, not in a worker thread: a primary-key lookup or a WAL append (synchronous=NORMAL,
    # no fsync) takes tens of microseconds, less than the thread hop itself, which cost ~0.5 ms of CPU per
    # call at zero latency (benchmarks/README.md, "framework"). Another process writing the same cache can
    # make a write wait for its lock (at most the connection's 5 s timeout).
    async def aget(self, key: str) -> Any | None:
        return self.get(key)

    async def aput(self, key: str, value: Any) -> None:
        self.put(key, value)

    def __bool__(self) -> bool:
        # a cache is there or not (``if ctx.cache``); without this, truth would come from __len__,
        # a COUNT(*) over the whole table on every model call (~2 ms at 100k entries, on the event loop)
        return True

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM calls").fetchone()[0])

    def answers(self) -> Iterator[tuple[str, str, dict[str, int]]]:
        """Every cached answer: its key, its model as the provider named it, and what it cost (requests, input and
        output tokens, from the usage stored with it). What a run paid for before its spend ledger existed."""
        with self._lock:
            rows = self._db.execute("SELECT key, value FROM calls").fetchall()
        for key, stored in rows:
            yield (key, *answer_usage(decode_value(stored)))

    def close(self) -> None:
        with self._lock:
            self._db.close()
