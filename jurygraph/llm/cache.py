"""A persistent cache of model calls, so a rerun or a resume pays for no call twice.

The key is a hash of everything that changes the answer: the model (provider, name, base URL), the
kind of call (text, structured, n samples), the messages, the call parameters, the sample count and a
sample index. Values are LangChain's own serialised messages. SQLite in WAL mode, shared by threads and
by asyncio (through a worker thread), safe for several processes on one machine.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage


class LLMCache:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
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
        return json.loads(row[0])

    def put(self, key: str, value: Any) -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO calls (key, value) VALUES (?, ?)", (key, json.dumps(value)))

    async def aget(self, key: str) -> Any | None:
        return await asyncio.to_thread(self.get, key)

    async def aput(self, key: str, value: Any) -> None:
        await asyncio.to_thread(self.put, key, value)

    def __bool__(self) -> bool:
        # a cache is there or not (``if ctx.cache``); without this, truth would come from __len__,
        # a COUNT(*) over the whole table on every model call (~2 ms at 100k entries, on the event loop)
        return True

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM calls").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
