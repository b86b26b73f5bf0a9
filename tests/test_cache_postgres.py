"""The LLM-call cache in PostgreSQL (what the workers of a Ray run on several machines share), in the real server
the suite starts: the SQLite cache's key and value encoding, shared by separate cache objects (workers), and a
server that is not there said in one line."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from langchain_core.load import dumpd
from langchain_core.messages import AIMessage, HumanMessage

from jurygraph.llm.cache import LLMCache, decode_value
from jurygraph.llm.cache_postgres import TABLE, PostgresLLMCache, open_cache
from tests.conftest import free_port


async def test_workers_share_the_postgres_cache_with_the_sqlite_encoding(postgres_url: str, tmp_path: Path) -> None:
    key = LLMCache.key("openai:gpt-4o-mini", "text", [HumanMessage("Rate it.")], {"temperature": 0})
    value = dumpd(AIMessage("Rating: 4"))
    first, second = open_cache(postgres_url), open_cache(postgres_url)  # two workers
    assert isinstance(first, PostgresLLMCache)
    assert await second.aget(key) is None
    await first.aput(key, value)
    assert await second.aget(key) == value and second.get(key) == value
    await second.aput(key, dumpd(AIMessage("Rating: 1")))  # a second worker that paid for it too: the first stays
    assert first.get(key) == value
    assert (second.hits, second.misses) == (2, 1) and len(first) == 1

    sqlite = open_cache(tmp_path / "llm_cache.sqlite")  # the same value, stored by the SQLite backend
    assert type(sqlite) is LLMCache
    sqlite.put(key, value)
    stored = sqlite3.connect(tmp_path / "llm_cache.sqlite").execute("SELECT value FROM calls").fetchone()[0]
    import psycopg

    with psycopg.connect(postgres_url) as conn:
        row = conn.execute(f"SELECT key, value FROM {TABLE}").fetchone()
    assert row is not None and row[0] == key and bytes(row[1]) == stored and decode_value(bytes(row[1])) == value
    for cache in (first, second, sqlite):
        cache.close()


def test_a_cache_server_that_is_not_there_is_one_line() -> None:
    url = f"postgresql://jurygraph:secret@127.0.0.1:{free_port()}/postgres"
    with pytest.raises(ConnectionError) as failed:
        open_cache(url)
    message = str(failed.value)
    assert message.startswith(f"LLM cache postgresql://jurygraph:***@127.0.0.1:{url.split(':')[3].split('/')[0]}")
    assert "\n" not in message and "secret" not in message
