"""LangGraph threads as items: an agent's conversation and its steps, read from the thread's checkpoint history.

:func:`from_thread` reads one thread of a compiled graph (its checkpointer) or of a checkpointer, as agentevals'
``extract_langgraph_trajectory_from_thread`` does, and returns what an :class:`~jurygraph.judging.items.EvalItem`
takes: ``EvalItem(task="score", scale=..., **from_thread(saver, config))``.

- ``messages``: the thread's ``messages`` channel at its latest checkpoint (or at the config's ``checkpoint_id``),
  as OpenAI-style messages (tool calls and tool results included).
- ``steps``: the node names of each superstep, in order, from the checkpoint history: a checkpoint records, per node,
  the channel versions it has seen (``versions_seen``), and the nodes whose entry changed since the checkpoint
  before are the nodes that ran in that superstep. A subgraph's supersteps (its checkpoints are kept under the
  namespace ``node:task``, their ``metadata.parents`` naming the parent's checkpoint they started from) follow the
  parent's superstep that ran it, each node named with its path (``research:lookup``). LangGraph's own steps
  (``__start__``, ``__input__``) are left out. A thread checkpointed only at its end (``durability="exit"``) has no
  history to read steps from: ``steps`` is then what its last checkpoint shows (often nothing).
- ``meta``: the thread id, the checkpoint read and how many checkpoints of its history there were.

:func:`load_threads` makes a dataset of many threads of a checkpoint store (a SQLite file or a ``postgresql://``
URL): ``jurygraph eval --from-threads``.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

from jurygraph.judging.conversations import Message
from jurygraph.judging.items import EvalItem, Scale, TaskKind
from jurygraph.llm.cache_postgres import is_postgres_url
from jurygraph.llm.redact import redact_url
from jurygraph.running.checkpoints import open_saver
from jurygraph.running.datasets import CONVERSATION_SCALE, Dataset, DatasetError, RowError, repeated

__all__ = ["ThreadError", "afrom_thread", "from_thread", "list_threads", "load_threads", "read_thread_ids"]

_SEPARATOR = "|"  # between the levels of a nested subgraph's namespace (LangGraph's NS_SEP)
_TASK = ":"  # between a namespace level's node name and its task id (LangGraph's NS_END)


class ThreadError(ValueError):
    """A thread that cannot become an item: unknown, or without messages."""


def _saver_of(graph_or_checkpointer: Any) -> BaseCheckpointSaver[Any]:
    if isinstance(graph_or_checkpointer, BaseCheckpointSaver):
        return graph_or_checkpointer
    saver = getattr(graph_or_checkpointer, "checkpointer", None)
    if isinstance(saver, BaseCheckpointSaver):
        return saver
    raise TypeError("from_thread reads a compiled graph with a checkpointer, or a checkpointer (a BaseCheckpointSaver "
                    f"such as SqliteSaver or PostgresSaver), not {type(graph_or_checkpointer).__name__}")


def _thread_of(config: Mapping[str, Any]) -> tuple[str, str | None]:
    configurable = (config or {}).get("configurable") or {}
    if configurable.get("thread_id") in (None, ""):
        raise ThreadError("the config names no thread: pass {'configurable': {'thread_id': ...}}")
    return str(configurable["thread_id"]), configurable.get("checkpoint_id")


def from_thread(graph_or_checkpointer: Any, config: Mapping[str, Any], *,
                messages_key: str = "messages") -> dict[str, Any]:
    """One LangGraph thread as an item's fields: ``{"id", "messages", "steps", "meta"}`` (see the module's doc).

    ``graph_or_checkpointer``: a compiled graph with a checkpointer, or the checkpointer itself; ``config``:
    ``{"configurable": {"thread_id": ..., "checkpoint_id": ...}}`` (``checkpoint_id`` optional: the thread as it
    was then). ``messages_key``: the state channel holding the conversation. A :class:`ThreadError` when the thread
    has no checkpoint or no messages."""
    thread_id, checkpoint_id = _thread_of(config)
    saver = _saver_of(graph_or_checkpointer)
    return thread_fields(thread_id, saver.list({"configurable": {"thread_id": thread_id}}), checkpoint_id,
                         messages_key)


async def afrom_thread(graph_or_checkpointer: Any, config: Mapping[str, Any], *,
                       messages_key: str = "messages") -> dict[str, Any]:
    """:func:`from_thread` for an asynchronous checkpointer (``AsyncSqliteSaver``, ``AsyncPostgresSaver``)."""
    thread_id, checkpoint_id = _thread_of(config)
    saver = _saver_of(graph_or_checkpointer)
    found = [t async for t in saver.alist({"configurable": {"thread_id": thread_id}})]
    return thread_fields(thread_id, found, checkpoint_id, messages_key)


def _ns(checkpoint: CheckpointTuple) -> str:
    return str(checkpoint.config["configurable"].get("checkpoint_ns") or "")


def _id(checkpoint: CheckpointTuple) -> str:
    return str(checkpoint.config["configurable"]["checkpoint_id"])


def thread_fields(thread_id: str, checkpoints: Iterable[CheckpointTuple], checkpoint_id: str | None = None,
                  messages_key: str = "messages") -> dict[str, Any]:
    """An item's fields from a thread's checkpoints (every namespace's), as :func:`from_thread` returns them."""
    by_ns: dict[str, list[CheckpointTuple]] = {}
    for checkpoint in checkpoints:
        by_ns.setdefault(_ns(checkpoint), []).append(checkpoint)
    for history in by_ns.values():
        history.sort(key=_id)  # checkpoint ids are time-ordered (UUID v6)
    root = by_ns.get("", [])
    if checkpoint_id is not None:
        root = [c for c in root if _id(c) <= checkpoint_id]
        if not root or _id(root[-1]) != checkpoint_id:
            raise ThreadError(f"thread {thread_id!r} has no checkpoint {checkpoint_id!r}")
        by_ns[""] = root
    if not root:
        raise ThreadError(f"thread {thread_id!r}: no checkpoint of it in this store")
    latest = root[-1]
    raw = (latest.checkpoint.get("channel_values") or {}).get(messages_key)
    if not raw:
        raise ThreadError(f"thread {thread_id!r}: its state has no {messages_key!r} (the agent's conversation)")
    try:
        messages = [Message.model_validate(m).model_dump(mode="json", exclude_none=True) for m in raw]
    except ValueError as err:
        raise ThreadError(f"thread {thread_id!r}: a message of {messages_key!r} cannot be read: {err}") from None
    return {"id": thread_id, "messages": messages, "steps": _steps("", by_ns, "", _id(latest)),
            "meta": {"thread_id": thread_id, "checkpoint_id": _id(latest), "checkpoints": len(root)}}


def _parent(ns: str) -> str:
    return ns.rpartition(_SEPARATOR)[0]


def _node(ns: str) -> str:
    """The node a subgraph namespace ran as: ``research`` of ``parent:task|research:task``."""
    return ns.rpartition(_SEPARATOR)[2].partition(_TASK)[0]


def _steps(ns: str, by_ns: Mapping[str, list[CheckpointTuple]], prefix: str, until: str | None = None) \
        -> list[list[str]]:
    """The node names of each superstep of ``ns`` (its subgraphs' after the superstep that ran them)."""
    started: dict[str, list[str]] = {}  # parent checkpoint id -> the subgraph namespaces that started from it
    for child, history in by_ns.items():
        if child and _parent(child) == ns and history:
            parents = history[0].metadata.get("parents") or {}
            started.setdefault(str(parents.get(ns, "")), []).append(child)
    steps: list[list[str]] = []
    seen: Mapping[str, Any] = {}
    before: str | None = None
    placed: set[str] = set()
    for checkpoint in by_ns.get(ns, []):
        if until is not None and _id(checkpoint) > until:
            break
        versions = checkpoint.checkpoint.get("versions_seen") or {}
        ran = sorted(node for node in versions if not node.startswith("__") and versions[node] != seen.get(node))
        if ran:
            steps.append([prefix + node for node in ran])
        for child in sorted(started.get(str(before), []), key=lambda c: _id(by_ns[c][0])):
            steps += _steps(child, by_ns, f"{prefix}{_node(child)}{_TASK}")
            placed.add(child)
        seen, before = versions, _id(checkpoint)
    # a subgraph whose parent checkpoint is gone (a pruned history) still counts, after the rest
    for children in started.values():
        for child in sorted(set(children) - placed, key=lambda c: _id(by_ns[c][0])):
            if until is None or _id(by_ns[child][0]) <= until:
                steps += _steps(child, by_ns, f"{prefix}{_node(child)}{_TASK}")
    return steps


# --- many threads of a store -----------------------------------------------------------------------------------


def list_threads(target: str) -> list[str]:
    """The thread ids of a checkpoint store (a SQLite file or a postgresql:// URL), in the order they began."""
    query = "SELECT thread_id FROM checkpoints GROUP BY thread_id ORDER BY MIN(checkpoint_id)"
    if is_postgres_url(target):
        import psycopg

        with psycopg.connect(target) as server:
            return [str(row[0]) for row in server.execute(query)]
    path = Path(target)
    if not path.is_file():
        raise DatasetError(f"{target}: no such checkpoint database (a SQLite file or a postgresql:// URL)")
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return [str(row[0]) for row in conn.execute(query)]
    except sqlite3.DatabaseError as err:
        raise DatasetError(f"{target}: not a LangGraph checkpoint database ({err})") from None
    finally:
        conn.close()


def read_thread_ids(path: str | Path) -> list[str]:
    """Thread ids from a file: one per line; blank lines and lines starting with ``#`` are skipped."""
    file = Path(path)
    try:
        lines = file.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise DatasetError(f"{file}: no such file (--thread-ids: one thread id per line)") from None
    return [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]


def load_threads(target: str, thread_ids: Sequence[str] | None = None, *, task: TaskKind | str = TaskKind.SCORE,
                 scale: Scale | None = None, aspect: str | None = None, messages_key: str = "messages") -> Dataset:
    """Every thread of a checkpoint store (or those of ``thread_ids``) as score items, one per thread (its id the
    thread's). Read once to check every thread (a thread that cannot be read is a :class:`RowError` naming it) and
    again, one thread at a time, each time the dataset is iterated. ``scale``: the items' (default 1-10)."""
    if TaskKind(task) is not TaskKind.SCORE:
        raise DatasetError(f"{redact_url(target)}: a thread is one conversation, judged as a score item "
                           f"(--task score), not {TaskKind(task).value}")
    shown = redact_url(target) if is_postgres_url(target) else target
    ids = list(thread_ids) if thread_ids is not None else list_threads(target)
    fields: dict[str, Any] = {"task": TaskKind.SCORE.value, "scale": (scale or CONVERSATION_SCALE).model_dump(),
                              "dataset": "threads"}
    if aspect:
        fields["aspect"] = aspect

    def items(errors: list[RowError], digest: Any = None) -> Iterator[EvalItem]:
        with open_saver(target, read_only=True) as saver:
            for thread_id in ids:
                try:
                    found = thread_fields(thread_id, saver.list({"configurable": {"thread_id": thread_id}}),
                                          messages_key=messages_key)
                    item = EvalItem.model_validate({**fields, **found})
                except ValueError as err:
                    errors.append(RowError(shown, f"thread {thread_id}", None, str(err)))
                    continue
                if digest is not None:  # what was read: each thread at its latest checkpoint
                    digest.update(f"{thread_id}\0{item.meta['checkpoint_id']}\n".encode())
                yield item

    errors: list[RowError] = []
    digest = hashlib.sha256()
    read = [item.id for item in items(errors, digest)]
    return Dataset("threads", errors=errors, sha256=digest.hexdigest(), reread=lambda: items([]), count=len(read),
                   duplicates=repeated(ids), task=TaskKind.SCORE)
