"""The LLM-call cache in a PostgreSQL table, for workers on several machines (a Ray run) sharing one cache.

Same key and same value encoding as the SQLite cache (:class:`jurygraph.llm.cache.LLMCache`): a value written by
one backend reads in the other. One table, ``jurygraph_llm_cache`` (key text primary key, value bytea), created on
first use in the database the URL names; the first answer stored for a key is kept (a second worker that paid for
the same call at the same moment stores nothing new). :func:`open_cache` picks the backend from the target:
a ``postgresql://`` URL or a file path.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path
from typing import Any

from jurygraph.llm.cache import LLMCache, decode_value, encode_value
from jurygraph.llm.redact import redact_text, redact_url

TABLE = "jurygraph_llm_cache"
POSTGRES_SCHEMES = ("postgres://", "postgresql://")


def is_postgres_url(target: str | Path) -> bool:
    return str(target).startswith(POSTGRES_SCHEMES)


def open_cache(target: str | Path) -> LLMCache:
    """The cache at ``target``: a PostgreSQL table for a ``postgresql://`` URL, else a SQLite file."""
    return PostgresLLMCache(str(target)) if is_postgres_url(target) else LLMCache(target)


class PostgresLLMCache(LLMCache):
    """:class:`LLMCache` in PostgreSQL: a small connection pool shared by the threads of one process. The async
    methods run the query in a worker thread (one database round trip: the event loop is never blocked on the
    network)."""

    def __init__(self, url: str) -> None:  # not LLMCache.__init__: that opens a SQLite file
        try:
            import psycopg
            from psycopg import errors
            from psycopg_pool import ConnectionPool
        except ImportError as err:
            raise ImportError("a PostgreSQL LLM cache needs: pip install 'jurygraph[postgres]'") from err
        self.url = redact_url(url)
        self._lock = threading.Lock()  # the hit and miss counters only: the pool serialises nothing else
        self.hits = 0
        self.misses = 0
        try:  # one plain connection first: a server that is not there is said at once, in one line
            with psycopg.connect(url, autocommit=True, connect_timeout=10) as conn, \
                    contextlib.suppress(errors.UniqueViolation, errors.DuplicateTable):
                # workers that start together may all create it: the losers' duplicate is no error
                conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (key TEXT PRIMARY KEY, value BYTEA NOT NULL)")
        except psycopg.Error as err:  # no server, no database, a refused password
            first_line = redact_text(str(err)).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ConnectionError(f"LLM cache {self.url}: {first_line}") from None
        self._pool = ConnectionPool(url, min_size=1, max_size=8, open=True, kwargs={"autocommit": True})

    def get(self, key: str) -> Any | None:
        with self._pool.connection() as conn:
            row = conn.execute(f"SELECT value FROM {TABLE} WHERE key = %s", (key,)).fetchone()
        with self._lock:
            if row is None:
                self.misses += 1
            else:
                self.hits += 1
        return None if row is None else decode_value(bytes(row[0]))

    def put(self, key: str, value: Any) -> None:
        with self._pool.connection() as conn:
            conn.execute(f"INSERT INTO {TABLE} (key, value) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING",
                         (key, encode_value(value)))

    async def aget(self, key: str) -> Any | None:
        return await asyncio.to_thread(self.get, key)

    async def aput(self, key: str, value: Any) -> None:
        await asyncio.to_thread(self.put, key, value)

    def __len__(self) -> int:
        with self._pool.connection() as conn:
            row = conn.execute(f"SELECT COUNT(*) FROM {TABLE}").fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        self._pool.close()

    def __repr__(self) -> str:
        return f"PostgresLLMCache({self.url}, table {TABLE})"
