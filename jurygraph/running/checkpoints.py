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

Checkpoint blobs are zlib-compressed (a finished ChatEval item: 9.7 KB -> 2.6 KB), marked in their type
as ``msgpack+zlib`` so that uncompressed checkpoints of older runs still read; open a run's checkpoints
with :func:`serializer` (``SqliteSaver(conn, serde=serializer())``) or through :mod:`jurygraph.cli.show`.
"""

from __future__ import annotations

import contextlib
import zlib
from typing import Any, Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.types import Durability

KeepCheckpoints = Literal["final", "all"]
KEEP_CHOICES: tuple[KeepCheckpoints, ...] = ("final", "all")


class _Zlib:
    """A CipherProtocol that compresses: LangGraph's EncryptedSerializer already does the typed wrapping
    (``msgpack`` -> ``msgpack+zlib``) and reads unwrapped blobs unchanged, which is all this needs."""

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        return "zlib", zlib.compress(plaintext, 6)

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        if ciphername != "zlib":
            raise ValueError(f"checkpoint blob encoded as {ciphername!r}, not zlib")
        return zlib.decompress(ciphertext)


def serializer() -> SerializerProtocol:
    """LangGraph's JsonPlusSerializer with zlib-compressed blobs (reads uncompressed ones too)."""
    return EncryptedSerializer(_Zlib())


def durability(keep: KeepCheckpoints, cache: bool) -> Durability:
    """``exit`` (one checkpoint per item) when the LLM cache makes restarting an unfinished item free."""
    if keep not in KEEP_CHOICES:
        raise ValueError(f"keep_checkpoints must be one of {', '.join(KEEP_CHOICES)}, not {keep!r}")
    return "exit" if keep == "final" and cache else "async"


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
                    await saver.conn.execute(
                        f"DELETE FROM {table} WHERE thread_id = ? AND checkpoint_ns = '' AND checkpoint_id <> ?",
                        (thread_id, keep_id))
            except BaseException:
                await saver.conn.execute("ROLLBACK")
                raise
            await saver.conn.execute("COMMIT")
        return
    with contextlib.suppress(NotImplementedError):  # BaseCheckpointSaver's default
        await saver.aprune([thread_id], strategy="keep_latest")
