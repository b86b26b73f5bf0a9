"""``jurygraph.conversations.from_thread`` on real checkpoints of a scripted agent (tools and a subgraph,
``tests/scripted_agent.py``): a SqliteSaver file and PostgreSQL (the suite's server), synchronous and asynchronous;
the messages with their tool calls, the node names of every superstep with the subgraph's, a thread as it was at
an earlier checkpoint, and what goes wrong said plainly."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver

from jurygraph.conversations import ThreadError, afrom_thread, from_thread, load_threads
from jurygraph.judging.items import EvalItem
from jurygraph.running.threads import list_threads
from tests.scripted_agent import STEPS, TASKS, build_agent, expected_messages, run_tasks


@pytest.fixture
def agent_store(tmp_path: Path) -> Iterator[tuple[Any, SqliteSaver, Path]]:
    """The agent run on the five tasks, checkpointed in a SQLite file."""
    path = tmp_path / "agent.sqlite"
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    app = build_agent(saver)
    run_tasks(app)
    yield app, saver, path
    conn.close()


def check_thread(fields: dict[str, Any], index: int) -> None:
    assert fields["id"] == f"task-{index}"
    assert fields["messages"] == expected_messages(TASKS[index])
    assert fields["steps"] == STEPS
    # the input, __start__ and four supersteps of the parent graph
    assert fields["meta"]["thread_id"] == f"task-{index}" and fields["meta"]["checkpoints"] == 6
    item = EvalItem(task="score", scale={"low": 1, "high": 10}, aspect="tool_use", **fields)
    assert item.messages is not None and item.messages[4].tool_calls is not None
    assert item.question == TASKS[index] and item.steps == STEPS


def test_a_sqlite_thread_from_the_graph_or_its_checkpointer(agent_store: tuple[Any, SqliteSaver, Path]) -> None:
    app, saver, _ = agent_store
    config = {"configurable": {"thread_id": "task-1"}}
    fields = from_thread(app, config)
    check_thread(fields, 1)
    assert from_thread(saver, config) == fields  # the checkpointer alone reads the same
    # the misspelt tool call is there, as the agent made it
    assert fields["messages"][4]["tool_calls"][0]["arguments"] == {"city": "Olso"}


def test_a_thread_as_it_was_at_an_earlier_checkpoint(agent_store: tuple[Any, SqliteSaver, Path]) -> None:
    app, _, _ = agent_store
    history = list(app.get_state_history({"configurable": {"thread_id": "task-0"}}))
    after_research = next(s for s in history if s.next == ("agent",) and s.metadata["step"] == 1)
    fields = from_thread(app, after_research.config)
    assert fields["messages"] == expected_messages(TASKS[0])[:4]
    assert fields["steps"] == STEPS[:4]  # research and its subgraph's supersteps only


def test_a_second_invocation_of_a_thread_adds_its_turn(agent_store: tuple[Any, SqliteSaver, Path]) -> None:
    app, _, _ = agent_store
    config = {"configurable": {"thread_id": "task-2"}}
    app.invoke({"messages": [HumanMessage("Weather in Rome?")]}, config)
    fields = from_thread(app, config)
    assert [m["role"] for m in fields["messages"]].count("user") == 2
    assert fields["steps"] == STEPS + STEPS  # the second turn's supersteps after the first's
    item = EvalItem(task="score", scale={"low": 1, "high": 10}, turn=2, **fields)
    assert item.turn == 2


async def test_an_async_checkpointer(agent_store: tuple[Any, SqliteSaver, Path]) -> None:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    _, _, path = agent_store
    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        check_thread(await afrom_thread(saver, {"configurable": {"thread_id": "task-3"}}), 3)


def test_postgres_checkpoints(postgres_url: str) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(postgres_url) as saver:
        saver.setup()
        app = build_agent(saver)
        run_tasks(app)
        for index in range(len(TASKS)):
            check_thread(from_thread(app, {"configurable": {"thread_id": f"task-{index}"}}), index)
    assert list_threads(postgres_url) == [f"task-{i}" for i in range(len(TASKS))]
    dataset = load_threads(postgres_url)
    assert len(dataset) == len(TASKS) and not dataset.errors
    assert [item.id for item in dataset] == [f"task-{i}" for i in range(len(TASKS))]


def test_what_goes_wrong_is_said(agent_store: tuple[Any, SqliteSaver, Path], tmp_path: Path) -> None:
    _, saver, path = agent_store
    with pytest.raises(ThreadError, match="'nope': no checkpoint of it"):
        from_thread(saver, {"configurable": {"thread_id": "nope"}})
    with pytest.raises(ThreadError, match="names no thread"):
        from_thread(saver, {"configurable": {}})
    with pytest.raises(ThreadError, match="has no checkpoint 'x'"):
        from_thread(saver, {"configurable": {"thread_id": "task-0", "checkpoint_id": "x"}})
    with pytest.raises(TypeError, match="with a checkpointer"):
        from_thread(build_agent(None), {"configurable": {"thread_id": "task-0"}})
    with pytest.raises(ThreadError, match="no 'chat'"):
        from_thread(saver, {"configurable": {"thread_id": "task-0"}}, messages_key="chat")
    # a store's threads as a dataset: an unknown id is reported by name, the others load
    dataset = load_threads(str(path), ["task-0", "ghost", "task-4"], aspect="task_completion")
    assert [item.id for item in dataset] == ["task-0", "task-4"]
    assert [str(e) for e in dataset.errors] == [f"{path}, row thread ghost: thread 'ghost': no checkpoint of it in "
                                                "this store"]
    assert dataset.items[0].aspect == "task_completion" and dataset.items[0].scale is not None
    not_a_store = tmp_path / "plain.sqlite"
    sqlite3.connect(not_a_store).close()
    with pytest.raises(ValueError, match="not a LangGraph checkpoint database"):
        load_threads(str(not_a_store))
