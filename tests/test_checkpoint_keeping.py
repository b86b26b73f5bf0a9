"""What a run keeps of its checkpoints (issue 11): by default each finished item's final checkpoint only
(compressed), still enough for ``show`` and for a resume after ``kill -9`` that pays nothing twice;
``--keep-checkpoints all`` keeps every step for time travel."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from jurygraph.cli import main
from jurygraph.llm.cache import LLMCache, decode_value, encode_value
from jurygraph.running.rundir import read_results
from tests.test_run_contract import FAIREVAL, eval_args, serve


def checkpoints_per_thread(out: Path) -> Counter[str]:
    with sqlite3.connect(out / "checkpoints.sqlite") as db:
        return Counter(row[0] for row in db.execute("SELECT thread_id FROM checkpoints"))


def writes(out: Path) -> int:
    with sqlite3.connect(out / "checkpoints.sqlite") as db:
        return int(db.execute("SELECT COUNT(*) FROM writes").fetchone()[0])


@pytest.mark.parametrize("extra", [[], ["--no-cache"]])
def test_by_default_a_finished_item_keeps_one_checkpoint_and_show_reads_it(
        openai_server, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str]) -> None:
    """With the cache: one checkpoint written at the item's end; without: every step's, pruned at the end."""
    server = serve(openai_server)
    out = tmp_path / "run"
    assert main(eval_args(server, out, *FAIREVAL, "--limit", "2", *extra)) == 0
    assert checkpoints_per_thread(out) == {"0": 1, "1": 1}
    assert writes(out) == 0
    with sqlite3.connect(out / "checkpoints.sqlite") as db:
        assert {row[0] for row in db.execute("SELECT type FROM checkpoints")} == {"msgpack+zdict1"}
        # untraced, an item's checkpoint carries no trace metadata (LangGraph copies a run's metadata into it)
        metadata = [json.loads(row[0]) for row in db.execute("SELECT metadata FROM checkpoints")]
        assert all("item_id" not in m and "run" not in m for m in metadata), metadata
    capsys.readouterr()
    assert main(["show", str(out), "1", "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert [t["speaker"] for t in view["transcript"]] == ["General Public", "Critic"] * 2
    assert view["verdict"]["label"] == "1"


def test_keep_checkpoints_all_keeps_every_step(openai_server, tmp_path: Path) -> None:
    server = serve(openai_server)
    out = tmp_path / "run"
    assert main(eval_args(server, out, *FAIREVAL, "--limit", "2", "--keep-checkpoints", "all")) == 0
    per_thread = checkpoints_per_thread(out)
    assert set(per_thread) == {"0", "1"} and min(per_thread.values()) > 4  # input, then one per superstep
    assert json.loads((out / "manifest.json").read_text())["keep_checkpoints"] == "all"


def test_a_kill_mid_item_resumes_without_paying_twice(openai_server, tmp_path: Path) -> None:
    """kill -9 with an item half-way: no checkpoint of it exists (it is written at the item's end), the
    resume starts it again and the LLM cache answers what the killed run had received: at most the one call
    in flight (concurrency 1) is sent twice; one line per item, same verdicts as an uninterrupted run."""
    server = serve(openai_server, latency=0.1)
    out = tmp_path / "run"
    args = eval_args(server, out, *FAIREVAL, "--limit", "3", "--concurrency", "1")
    child = subprocess.Popen([sys.executable, "-m", "jurygraph.cli", *args], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(server.requests) < 6:  # item 2's second call is out
            time.sleep(0.01)
    finally:
        child.kill()
        child.wait(timeout=30)
    killed = len(server.requests)
    assert 6 <= killed < 12, killed
    assert [r["id"] for r in read_results(out)] == ["0"]
    assert main(["eval", "--resume", str(out), "--quiet"]) == 0
    assert len(server.requests) <= 12 + 1
    records = read_results(out)
    assert [r["id"] for r in records] == ["0", "1", "2"] and all(r["status"] == "ok" for r in records)

    whole = tmp_path / "whole"
    assert main(eval_args(server, whole, *FAIREVAL, "--limit", "3", "--no-cache")) == 0
    assert {r["id"]: r["verdict"] for r in read_results(whole)} == {r["id"]: r["verdict"] for r in records}


def test_cache_values_are_compressed_and_old_text_values_still_read(tmp_path: Path) -> None:
    value = {"lc": 1, "type": "constructor", "kwargs": {"content": "The score of the summary: 4"}}
    assert decode_value(encode_value(value)) == value
    assert len(encode_value(value)) < len(json.dumps(value))
    cache = LLMCache(tmp_path / "c.sqlite")
    cache.put("k", value)
    assert cache.get("k") == value
    cache.close()
    old = tmp_path / "old.sqlite"  # the table and text values of a cache written before compression
    with sqlite3.connect(old) as db:
        db.execute("CREATE TABLE calls (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute("INSERT INTO calls VALUES ('k', ?)", (json.dumps(value),))
    cache = LLMCache(old)
    assert cache.get("k") == value
    cache.put("k2", value)
    assert cache.get("k2") == value and len(cache) == 2
    cache.close()


def test_checkpoints_of_earlier_versions_still_read() -> None:
    """Blobs written before the preset dictionary (plain zlib, ``msgpack+zlib``) or uncompressed (``msgpack``)
    read back through the same serializer as today's (``msgpack+zdict1``)."""
    import zlib

    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from jurygraph.running.checkpoints import serializer

    value = {"histories": {"Critic": ["a reply"]}, "turn": 2, "verdict": {"score": 3.5}}
    plain = JsonPlusSerializer().dumps_typed(value)
    assert plain[0] == "msgpack"
    current = serializer().dumps_typed(value)
    assert current[0] == "msgpack+zdict1" and len(current[1]) < len(plain[1])
    for stored in (plain, ("msgpack+zlib", zlib.compress(plain[1])), current):
        assert serializer().loads_typed(stored) == value
