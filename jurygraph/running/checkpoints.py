"""What a run keeps of its checkpoints, and how compactly.

A finished item's *final* checkpoint holds everything ``jurygraph show`` and a notebook need: the item,
every agent's history, the judgments, the verdict, the usage. The steps before it only matter for
time travel and for resuming an item half-way, and were ~86 % of a run's disk (7 checkpoints and ~25
pending writes per ChatEval item, ~67 KB per item against a 1.5 KB results line). So by default
(``keep="final"``):

* with the LLM cache on, the graph runs with LangGraph's ``durability="exit"``: one checkpoint per item,
  written when the item ends (finished, failed or cancelled). A ``kill -9`` mid-item leaves no checkpoint
  for it, the resume starts it again and the cache answers every call the killed run had received, so
  the model sees only the calls that were in flight: the same guarantee as step-by-step checkpoints,
  for one checkpoint write per item instead of ~6 (and less CPU per call).
* without the cache (nothing would make a restart free), every step is checkpointed as usual and the
  finished thread's older checkpoints and writes are deleted once its final checkpoint is written.

``keep="all"`` keeps LangGraph's full history of every step (``durability="async"``) for time travel.

Checkpoint blobs are deflated against a preset dictionary of the words every checkpoint repeats (a finished
ChatEval item: 9.7 KB -> 2.1 KB; plain zlib gave 2.3 KB), marked in their type as ``msgpack+zdict1`` so that
older runs' checkpoints (``msgpack+zlib``, or uncompressed ``msgpack``) still read; open a run's checkpoints
with :func:`serializer` (``SqliteSaver(conn, serde=serializer())``) or through :mod:`jurygraph.cli.show`.
"""

from __future__ import annotations

import contextlib
import sqlite3
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.types import Durability

from jurygraph.llm.cache_postgres import is_postgres_url
from jurygraph.llm.redact import redact_text, redact_url

KeepCheckpoints = Literal["final", "all"]
KEEP_CHOICES: tuple[KeepCheckpoints, ...] = ("final", "all")


# Words every checkpoint of a jury repeats (msgpack keys of the state, LangChain's message fields, LangGraph's
# bookkeeping, the papers' agents and aspects), as a deflate preset dictionary: a finished item's checkpoint is
# mostly its own texts, which no dictionary shortens, so this saves ~200 bytes an item (~9 %). Most frequent
# last (deflate codes near matches shortest). Stored blobs need these exact bytes to be read: never edit them;
# a new dictionary needs a new cipher name beside "zdict1".
_ZDICT = b" ".join([
    b"Tie-breaker", b"Commander", b"Scorer", b"Area Chair", b"area_chair", b"peer", b"Psychologist", b"Scientist",
    b"News Author", b"news_author_t", b"psychologist_t", b"scientist_t", b"summarizer_t", b"Summarizer",
    b"naturalness", b"engagingness", b"groundedness", b"understandable", b"coherence", b"consistency", b"fluency",
    b"relevance", b"topical-chat", b"summeval", b"faireval", b"question", b"response_1", b"response_2", b"context",
    b"summary_index", b"reversed", b"category", b"system_id", b"pairwise", b"choice", b"answer", b"label",
    b"round_judgments", b"n_judgments", b"n_missing", b"method", b"detail", b"rounds", b"stopped",
    b"finish_reason", b"stop", b"model_name", b"system_fingerprint", b"token_usage", b"completion_tokens",
    b"prompt_tokens", b"total_tokens", b"input_token_details", b"output_token_details", b"model_provider",
    b"openai", b"logprobs", b"refusal", b"example", b"langchain_core.messages.human", b"HumanMessage",
    b"langchain_core.messages.ai", b"AIMessage", b".lc_run--", b"additional_kwargs", b"response_metadata",
    b"tool_calls", b"invalid_tool_calls", b"usage_metadata", b"input_tokens", b"output_tokens", b"content",
    b"name", b"type", b"__input__", b"__start__", b"branch:to:aggregate", b"aggregate", b"branch:to:critic_t",
    b"critic_t", b"branch:to:general_public_t", b"general_public_t", b"General Public", b"Critic", b"referee",
    b"channel_values", b"channel_versions", b"updated_channels", b"versions_seen", b"item", b"task", b"dataset",
    b"aspect", b"scale", b"low", b"high", b"source", b"response", b"group", b"human", b"meta", b"histories",
    b"transcript", b"turn", b"judgments", b"verdict", b"usage", b"agent", b"kind", b"score", b"evidence",
    b"missing", b"raw", b"attempts", b"role", b"model", b"requests", b"params", b"temperature", b"top_p",
    b"max_tokens", b"mean", b"00000000000000000000000000000000.0.",
])
_ZDICT_CIPHER = "zdict1"


class _Zlib:
    """A CipherProtocol that compresses: LangGraph's EncryptedSerializer already does the typed wrapping
    (``msgpack`` -> ``msgpack+zdict1``) and reads unwrapped blobs unchanged, which is all this needs. Blobs
    of earlier versions (``msgpack+zlib``: plain zlib) still read."""

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        packer = zlib.compressobj(9, zlib.DEFLATED, -15, zdict=_ZDICT)
        return _ZDICT_CIPHER, packer.compress(plaintext) + packer.flush()

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        if ciphername == _ZDICT_CIPHER:
            return zlib.decompressobj(-15, zdict=_ZDICT).decompress(ciphertext)
        if ciphername == "zlib":
            return zlib.decompress(ciphertext)
        raise ValueError(f"checkpoint blob encoded as {ciphername!r}, not {_ZDICT_CIPHER} or zlib")


def serializer() -> SerializerProtocol:
    """LangGraph's JsonPlusSerializer with compressed blobs (reads older and uncompressed ones too)."""
    return EncryptedSerializer(_Zlib())


def durability(keep: KeepCheckpoints, cache: bool) -> Durability:
    """``exit`` (one checkpoint per item) when the LLM cache makes restarting an unfinished item free."""
    if keep not in KEEP_CHOICES:
        raise ValueError(f"keep_checkpoints must be one of {', '.join(KEEP_CHOICES)}, not {keep!r}")
    return "exit" if keep == "final" and cache else "async"


# a thread's checkpoints and writes older than the one it keeps
_OLDER = "DELETE FROM {table} WHERE thread_id = ? AND checkpoint_ns = '' AND checkpoint_id <> ?"


async def keep_final_only(saver: BaseCheckpointSaver, thread_id: str) -> None:
    """Delete a finished thread's checkpoints and writes older than its latest checkpoint.

    SQLite: one transaction on the saver's own connection, under its lock (one writer). Savers with
    LangGraph's ``aprune`` (Postgres) use it; others (the in-memory saver) keep everything."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    if isinstance(saver, AsyncSqliteSaver):
        latest = await saver.aget_tuple(config)
        if latest is None:
            return
        keep_id = latest.config["configurable"]["checkpoint_id"]
        async with saver.lock:
            await saver.conn.execute("BEGIN")
            try:
                for table in ("checkpoints", "writes"):
                    await saver.conn.execute(_OLDER.format(table=table), (thread_id, keep_id))
            except BaseException:
                await saver.conn.execute("ROLLBACK")
                raise
            await saver.conn.execute("COMMIT")
        return
    with contextlib.suppress(NotImplementedError):  # BaseCheckpointSaver's default
        await saver.aprune([thread_id], strategy="keep_latest")


def keep_final_only_sync(saver: BaseCheckpointSaver, thread_id: str) -> None:
    """:func:`keep_final_only` for a synchronous saver (``SqliteSaver``; others through LangGraph's ``prune``)."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    if isinstance(saver, SqliteSaver):
        latest = saver.get_tuple(config)
        if latest is None:
            return
        keep_id = latest.config["configurable"]["checkpoint_id"]
        with saver.lock, saver.conn:  # one transaction, under the saver's own lock
            for table in ("checkpoints", "writes"):
                saver.conn.execute(_OLDER.format(table=table), (thread_id, keep_id))
        return
    with contextlib.suppress(NotImplementedError):
        saver.prune([thread_id], strategy="keep_latest")


class NoCheckpoints(FileNotFoundError):
    """A run's SQLite checkpoint file is not where it should be."""


@contextlib.contextmanager
def open_saver(target: str, *, read_only: bool) -> Iterator[BaseCheckpointSaver[Any]]:
    """A run's checkpoint store, synchronous: a postgres:// URL, or its SQLite file (compressed checkpoints read
    through :func:`serializer`). ``read_only``: looking at a run never changes it, nor creates a database where there
    was none (``show``); otherwise writable (a review finishes items in it). NoCheckpoints when the file is missing."""
    if is_postgres_url(target):
        from langgraph.checkpoint.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(target) as saver:
            yield saver
        return
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = Path(target)
    if not path.is_file():
        raise NoCheckpoints(f"{target}: no checkpoint database (pass --checkpoint for a run stored elsewhere)")
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False) if read_only \
        else sqlite3.connect(path, check_same_thread=False)
    try:
        yield SqliteSaver(conn, serde=serializer())
    finally:
        conn.close()


@contextlib.asynccontextmanager
async def open_checkpointer(target: str | Path) -> AsyncIterator[BaseCheckpointSaver]:
    """A run's durable checkpointer, asynchronous (what a run judges with): a SQLite file (WAL,
    synchronous=NORMAL, compressed checkpoints through :func:`serializer`) or a postgres:// URL."""
    text = str(target)
    if is_postgres_url(text):
        try:
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        except ImportError as err:
            raise ImportError("PostgreSQL checkpoints need: pip install 'jurygraph[postgres]'") from err
        try:
            opened = AsyncPostgresSaver.from_conn_string(text)
            saver = await opened.__aenter__()
            await saver.setup()
        except Exception as err:  # psycopg's OperationalError: no server, bad password, no database
            first_line = redact_text(str(err)).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ConnectionError(f"checkpoint store {redact_url(text)}: {first_line}") from None
        try:
            yield saver
        finally:
            await opened.__aexit__(None, None, None)
        return
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    conn = await aiosqlite.connect(str(target), isolation_level=None)
    try:
        # a new database only (SQLite ignores it afterwards): a compressed final checkpoint is ~2.5 KB, so a
        # 4 KB page holds one and wastes ~40 %; a 16 KB page holds six (rows are appended in rowid order)
        await conn.execute("PRAGMA page_size=16384")
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA synchronous=NORMAL")
        sqlite_saver = AsyncSqliteSaver(conn, serde=serializer())
        await sqlite_saver.setup()
        yield sqlite_saver
    finally:
        await conn.close()


async def has_threads(saver: BaseCheckpointSaver) -> bool:
    """Whether the store holds any thread (a store that held none when a run began has none of its items)."""
    # closed here, on the saver's open connection: an abandoned generator would be closed by the garbage
    # collector after the connection is ("Task exception was never retrieved ... closed database")
    checkpoints = saver.alist(None, limit=1)
    try:
        async for _ in checkpoints:
            return True
        return False
    finally:
        close = getattr(checkpoints, "aclose", None)  # typed as an iterator; savers return async generators
        if close is not None:
            await close()
