"""Conversation items from JSONL and CSV tables, as any table is read: validated in one pass (a bad message names
its row and field), then streamed; ``messages`` (``messages_1``/``messages_2`` for pairwise, ``steps``, a
``reference`` trajectory) from same-named columns or ``--map``; a CSV cell holds them as JSON text."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from jurygraph.judging.items import Scale
from jurygraph.running.datasets import load_dataset

CHAT = [{"role": "user", "content": "Book a table for two."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "book", "arguments": "{\"people\": 2}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "booked"},
        {"role": "assistant", "content": "Done: a table for two."}]


def jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def test_jsonl_messages_steps_and_reference(tmp_path: Path) -> None:
    rows = [{"id": "a", "conversation": CHAT, "steps": ["agent", ["tools"], "agent"], "reference": CHAT,
             "scale_low": 1, "scale_high": 5, "score": ""},
            {"id": "b", "conversation": CHAT[:1] + CHAT[3:], "score": 4}]
    path = jsonl(tmp_path / "chats.jsonl", rows)
    dataset = load_dataset(path, task="score", mapping={"messages": "conversation", "human.helpfulness": "score"},
                           aspect="helpfulness", scale=Scale(low=1, high=10))
    assert dataset.streamed and not dataset.errors
    first, second = list(dataset)
    assert first.messages and first.messages[1].tool_calls
    assert first.messages[1].tool_calls[0].arguments == {"people": 2}
    assert first.steps == [["agent"], ["tools"], ["agent"]] and first.reference_trajectory is not None
    assert first.scale == Scale(low=1, high=5)  # the row's own scale wins over --scale
    assert second.messages and len(second.messages) == 2 and second.human == {"helpfulness": 4.0}
    assert second.scale == Scale(low=1, high=10) and second.reference is None


def test_pairwise_continuations(tmp_path: Path) -> None:
    row = {"id": "p", "messages": CHAT[:1], "messages_1": CHAT[1:], "messages_2": [CHAT[3]], "winner": "model_a"}
    (item,) = load_dataset(jsonl(tmp_path / "pairs.jsonl", [row]), task="pairwise", mapping={"human.label": "winner"})
    assert item.human == {"label": "1"} and item.messages_2 and item.messages_2[0].text == "Done: a table for two."


def test_csv_cells_hold_json(tmp_path: Path) -> None:
    path = tmp_path / "chats.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "messages", "reference", "scale_low", "scale_high"])
        writer.writerow(["ok", json.dumps(CHAT), json.dumps(CHAT), 1, 5])
        writer.writerow(["text reference", json.dumps(CHAT), "[a reference answer, as text]", 1, 5])
        writer.writerow(["broken", "[{\"role\": \"user\"", "", 1, 5])
        writer.writerow(["robot", json.dumps([{"role": "robot", "content": "?"}]), "", 1, 5])
    dataset = load_dataset(path, task="score")
    assert [item.id for item in dataset] == ["ok", "text reference"]
    items = dataset.items
    assert items[0].reference_trajectory is not None and items[1].reference_text == "[a reference answer, as text]"
    assert [(e.row, e.field) for e in dataset.errors] == [("4 (id broken)", "messages"), ("5 (id robot)", "messages")]
    assert "is not JSON" in dataset.errors[0].message
    assert "messages[0]" in dataset.errors[1].message and "role" in dataset.errors[1].message


def test_a_tool_message_without_its_call_is_named(tmp_path: Path) -> None:
    rows = [{"id": "x", "messages": [CHAT[0], CHAT[2], CHAT[3]], "scale_low": 1, "scale_high": 5}]
    dataset = load_dataset(jsonl(tmp_path / "bad.jsonl", rows), task="score")
    assert len(dataset) == 0
    (error,) = dataset.errors
    assert error.row == "1 (id x)" and "messages[1]" in error.message and "'c1'" in error.message
