"""The LLM-call cache as an object: what its truth value costs, and where a call's answer is written from."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage

from jurygraph import EvalItem, JuryContext, create_single_agent, verdict_of
from jurygraph.llm.cache import LLMCache
from jurygraph.llm.calls import Answer, PendingCall
from jurygraph.testing import FakeJudge


def test_an_empty_cache_is_truthy_and_truth_does_not_count_rows(tmp_path: Path) -> None:
    """``if ctx.cache`` asks whether a cache is configured. Truth must not come from ``__len__``:
    an empty cache would be false, and a full one would be counted (COUNT(*)) on every model call."""
    cache = LLMCache(tmp_path / "cache.sqlite")
    assert len(cache) == 0
    assert cache
    statements: list[str] = []
    cache._db.set_trace_callback(statements.append)
    cache.put("k", {"v": 1})
    statements.clear()
    assert bool(cache) is True
    assert statements == []  # no query at all
    assert len(cache) == 1
    assert any("COUNT" in s for s in statements)
    cache.close()


class _WhereWritten(LLMCache):
    """An SQLite cache whose ``aput`` runs in a worker thread, as :class:`PostgresLLMCache`'s does; it records
    whether each write ran on the event loop's thread."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.writes: list[str] = []

    def put(self, key: str, value: Any) -> None:
        try:
            asyncio.get_running_loop()
            self.writes.append("on the event loop")
        except RuntimeError:
            self.writes.append("off the event loop")
        super().put(key, value)

    async def aput(self, key: str, value: Any) -> None:
        await asyncio.to_thread(self.put, key, value)


class _Answers:
    """A reply source (batch mode's role) answering every call the cache misses."""

    def answer(self, call: PendingCall) -> Answer:
        return Answer(AIMessage("Rating: 4", usage_metadata={"input_tokens": 9, "output_tokens": 3,
                                                             "total_tokens": 12}))


async def test_a_reply_sources_answer_is_stored_off_the_event_loop(tmp_path: Path) -> None:
    """On the async path (the runner's), an answer from the context's reply source is stored with ``aput``, as a
    provider's reply is: a PostgreSQL cache's blocking ``put`` would hold the event loop for a database round
    trip."""
    cache = _WhereWritten(tmp_path / "cache.sqlite")
    item = EvalItem(id="s1", task="score", response="text", scale={"low": 1, "high": 5})
    context = JuryContext(default=FakeJudge(respond=lambda p, m: "never asked"), cache=cache, replies=_Answers())
    out = await create_single_agent().compile().ainvoke({"item": item}, context=context)
    assert verdict_of(out).score == 4  # type: ignore[union-attr]
    assert cache.writes == ["off the event loop"]
    assert len(cache) == 1
    cache.close()
