"""The LLM-call cache as an object: what its truth value costs."""

from __future__ import annotations

from pathlib import Path

from jurygraph.llm.cache import LLMCache


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
