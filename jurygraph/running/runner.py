"""Run a protocol graph over many items: concurrent, durable, resumable, nothing lost, nothing paid twice.

One run directory holds everything about a run::

    RUN_DIR/results.jsonl      one JSON line per item (verdict, judgments, missing count, usage, labels)
    RUN_DIR/manifest.json      protocol, parameters, models, versions, dataset hash, times, counts, usage,
                               generation parameters per agent
    RUN_DIR/checkpoints.sqlite one LangGraph thread per item (thread_id = item id)
    RUN_DIR/llm_cache.sqlite   every answered model call, so a rerun or resume sends none of them again

Items run on asyncio, ``concurrency`` at a time. An item that fails (after the model clients' own
retries) is written as ``status: "failed"`` with the reason and the run goes on; ``resume=True``
leaves finished items alone, continues unfinished ones from their last checkpoint and retries failed
ones, keeping one line per item.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import json
import os
import platform
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessageChunk
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph

from jurygraph.judging.items import EvalItem
from jurygraph.llm.cache import LLMCache
from jurygraph.llm.models import JuryContext
from jurygraph.llm.pricing import estimate_cost

RESULTS = "results.jsonl"
MANIFEST = "manifest.json"
CHECKPOINTS = "checkpoints.sqlite"
CACHE = "llm_cache.sqlite"


@dataclass
class RunSummary:
    out_dir: str
    items: int = 0
    done: int = 0
    failed: int = 0
    skipped: int = 0
    missing_verdicts: int = 0
    missing_judgments: int = 0
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_hits: int = 0
    cost_usd: float | None = None
    seconds: float = 0.0
    interrupted: bool = False
    failures: dict[str, str] = field(default_factory=dict)

    def line(self) -> str:
        cost = f", ~${self.cost_usd:.4f}" if self.cost_usd else ""
        return (f"{self.done} done, {self.failed} failed, {self.skipped} already done, "
                f"{self.missing_verdicts} missing verdicts, {self.missing_judgments} missing judgments; "
                f"{self.requests} requests, {self.input_tokens}+{self.output_tokens} tokens{cost}; "
                f"{self.seconds:.1f}s -> {self.out_dir}")


def read_results(out_dir: str | Path) -> list[dict[str, Any]]:
    """The records of a run's results.jsonl (a torn last line from a crash is ignored)."""
    path = Path(out_dir) / RESULTS
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            records.append(json.loads(line))
    return records


class _ResultsFile:
    """results.jsonl with one line per item: each line is written whole, flushed and synced."""

    def __init__(self, path: Path, keep: Iterable[dict[str, Any]]) -> None:
        self.path = path
        tmp = path.with_suffix(".jsonl.tmp")
        with tmp.open("w", encoding="utf-8") as handle:
            for record in keep:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
        self._handle = path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        self._handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        self._handle.close()


@contextlib.asynccontextmanager
async def open_checkpointer(target: str | Path) -> AsyncIterator[BaseCheckpointSaver]:
    """A durable checkpointer: a SQLite file (WAL, synchronous=NORMAL) or a postgres:// URL."""
    text = str(target)
    if text.startswith(("postgres://", "postgresql://")):
        try:
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        except ImportError as err:
            raise ImportError("PostgreSQL checkpoints need: pip install 'jurygraph[postgres]'") from err
        async with AsyncPostgresSaver.from_conn_string(text) as saver:
            await saver.setup()
            yield saver
        return
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    conn = await aiosqlite.connect(str(target), isolation_level=None)
    try:
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute("PRAGMA synchronous=NORMAL")
        sqlite_saver = AsyncSqliteSaver(conn)
        await sqlite_saver.setup()
        yield sqlite_saver
    finally:
        await conn.close()


def _record(item: EvalItem, values: Mapping[str, Any], status: str, error: str | None = None) -> dict[str, Any]:
    judgments = values.get("judgments") or {}
    verdict = values.get("verdict")
    record: dict[str, Any] = {
        "id": item.id, "status": status, "task": item.task.value, "dataset": item.dataset,
        "aspect": item.aspect, "group": item.group, "human": item.human,
        "verdict": verdict, "judgments": judgments,
        "n_missing": sum(1 for j in judgments.values() if j.get("missing")),
        "usage": values.get("usage") or {},
    }
    if error:
        record["error"] = error
    return {k: v for k, v in record.items() if v is not None}


def _versions() -> dict[str, str]:
    names = ["jurygraph", "langgraph", "langchain-core", "langchain-openai", "langchain-google-genai", "pydantic"]
    found = {}
    for name in names:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    found["python"] = platform.python_version()
    return found


async def arun(
    graph: StateGraph | CompiledStateGraph,
    items: Iterable[EvalItem],
    *,
    out_dir: str | Path,
    context: JuryContext | None = None,
    concurrency: int = 8,
    checkpoint: str | None = None,
    cache: bool | str | Path = True,
    resume: bool = False,
    progress: bool = True,
    manifest: Mapping[str, Any] | None = None,
    prices: Mapping[str, Any] | None = None,
    on_result: Callable[[dict[str, Any]], None] | None = None,
    on_token: Callable[[str, str, str], None] | None = None,
) -> RunSummary:
    """Judge every item with ``graph`` and write the run directory; returns the summary.

    ``graph`` may be the uncompiled builder (compiled here with the run's checkpointer) or a compiled
    graph that already has one. ``checkpoint``: a SQLite path or postgres:// URL (default: in the run
    directory). ``cache``: True for the run directory, a path for a shared cache, False for none.
    ``on_token(item_id, node, text)`` receives model output as it is generated (live view).
    """
    started = time.monotonic()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    items = list(items)
    ids = [item.id for item in items]
    duplicates = sorted({i for i in ids if ids.count(i) > 1}) if len(set(ids)) != len(ids) else []
    if duplicates:
        raise ValueError(f"item ids must be unique within a run; repeated: {', '.join(duplicates[:10])}")
    previous = read_results(out) if resume else []
    if not resume and previous == [] and (out / RESULTS).exists() and (out / RESULTS).stat().st_size:
        raise FileExistsError(f"{out / RESULTS} exists: pass resume=True (--resume) or choose another --out")
    finished = {r["id"]: r for r in previous if r.get("status") == "ok"}
    base_context = context or JuryContext()
    llm_cache = None
    if cache:
        llm_cache = LLMCache(out / CACHE if cache is True else Path(cache))
        base_context = dataclasses.replace(base_context, cache=llm_cache)  # keeps every other field
    summary = RunSummary(out_dir=str(out), items=len(items), skipped=sum(1 for i in ids if i in finished))
    manifest_data: dict[str, Any] = {
        **(manifest or {}), "started": datetime.now(UTC).isoformat(), "versions": _versions(),
        "concurrency": concurrency, "items": len(items), "checkpoint": _redact(checkpoint) or CHECKPOINTS,
    }
    # written now (ended: null) and again at the end, so a run killed half-way can be resumed by its manifest
    manifest_data["ended"] = None
    _write_manifest(out, manifest_data)
    results = _ResultsFile(out / RESULTS, finished.values())
    todo = [item for item in items if item.id not in finished]
    usage_totals: dict[str, dict[str, Any]] = {}
    generation: dict[str, dict[str, Any]] = {}  # agent -> the generation parameters it was called with
    for record in finished.values():
        _note_generation(generation, record)
    bar = _progress_bar(len(items), summary.skipped, progress)

    async with open_checkpointer(checkpoint or out / CHECKPOINTS) as saver:
        app: Any = graph.compile(checkpointer=saver) if isinstance(graph, StateGraph) else graph
        queue: asyncio.Queue[EvalItem] = asyncio.Queue()
        for item in todo:
            queue.put_nowait(item)

        async def judge(item: EvalItem) -> dict[str, Any]:
            config: RunnableConfig = {"configurable": {"thread_id": item.id}}
            snapshot = await app.aget_state(config)
            try:
                # pending tasks, not `next`: a kill between a node's saved writes and the step's checkpoint
                # leaves next == () with the finished task still pending; it must be resumed, not restarted
                if snapshot.values and not snapshot.tasks and snapshot.values.get("verdict") is not None:
                    return _record(item, snapshot.values, "ok")
                # a thread with pending steps continues from its last checkpoint; otherwise a fresh start
                # the item goes in as plain data, so checkpoints never hold our classes
                graph_input = None if snapshot.values and snapshot.tasks else {
                    "item": item.model_dump(mode="json", exclude_none=True)}
                if on_token is None:
                    values = await app.ainvoke(graph_input, config, context=base_context)
                else:
                    values = await _streamed(app, graph_input, config, base_context, item.id, on_token)
                return _record(item, values, "ok")
            except Exception as err:
                state = await app.aget_state(config)
                return _record(item, state.values or {}, "failed", f"{type(err).__name__}: {err}")

        async def worker() -> None:
            while True:
                try:
                    item = queue.get_nowait()
                except asyncio.QueueEmpty:
                    return
                record = await judge(item)
                results.write(record)
                _tally(summary, usage_totals, record)
                _note_generation(generation, record)
                if on_result:
                    on_result(record)
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(failed=summary.failed, requests=summary.requests,
                                    tokens=summary.input_tokens + summary.output_tokens, refresh=False)

        workers = [asyncio.create_task(worker()) for _ in range(max(1, min(concurrency, len(todo) or 1)))]
        try:
            await asyncio.gather(*workers)
        except asyncio.CancelledError:
            summary.interrupted = True
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
        finally:
            results.close()
            if bar is not None:
                bar.close()

    summary.seconds = time.monotonic() - started
    summary.cost_usd = estimate_cost(usage_totals, prices)
    if llm_cache is not None:
        summary.cache_hits = llm_cache.hits
        llm_cache.close()
    manifest_data.update(
        ended=datetime.now(UTC).isoformat(), interrupted=summary.interrupted,
        counts={k: v for k, v in asdict(summary).items() if k not in ("failures", "out_dir")},
        usage_by_agent=usage_totals, usage_by_model=_by_model(usage_totals), generation=generation,
    )
    _write_manifest(out, manifest_data)
    if summary.interrupted:
        raise KeyboardInterrupt(f"run interrupted; resume with --resume {out}")
    return summary


async def _streamed(app: Any, graph_input: Any, config: RunnableConfig, context: JuryContext, item_id: str,
                    on_token: Callable[[str, str, str], None]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    async for mode, chunk in app.astream(graph_input, config, context=context, stream_mode=["messages", "values"]):
        if mode == "values":
            values = chunk
        else:
            message, meta = chunk
            # tokens as the model produces them (chunks), not the finished messages nodes write to state
            if isinstance(message, AIMessageChunk) and message.text:
                on_token(item_id, str(meta.get("langgraph_node", "")), message.text)
    return values


def _write_manifest(out: Path, data: Mapping[str, Any]) -> None:
    tmp = out / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, out / MANIFEST)


def _redact(target: str | None) -> str | None:
    """A checkpoint URL without its password, for the manifest."""
    if not target or "://" not in target or "@" not in target:
        return target
    scheme, rest = target.split("://", 1)
    credentials, host = rest.rsplit("@", 1)
    return f"{scheme}://{credentials.split(':', 1)[0]}:***@{host}"


def _tally(summary: RunSummary, totals: dict[str, dict[str, Any]], record: dict[str, Any]) -> None:
    if record["status"] == "ok":
        summary.done += 1
        verdict = record.get("verdict") or {}
        summary.missing_verdicts += 1 if not verdict or verdict.get("missing") else 0
    else:
        summary.failed += 1
        summary.failures[record["id"]] = record.get("error", "")
    summary.missing_judgments += int(record.get("n_missing", 0))
    for agent, entry in (record.get("usage") or {}).items():
        summary.requests += int(entry.get("requests", 0))
        summary.input_tokens += int(entry.get("input_tokens", 0))
        summary.output_tokens += int(entry.get("output_tokens", 0))
        into = totals.setdefault(agent, {"role": entry.get("role"), "model": entry.get("model"),
                                         "requests": 0, "input_tokens": 0, "output_tokens": 0})
        for key in ("requests", "input_tokens", "output_tokens"):
            into[key] += int(entry.get(key, 0))


def _note_generation(generation: dict[str, dict[str, Any]], record: dict[str, Any]) -> None:
    generation.update({agent: entry["params"] for agent, entry in (record.get("usage") or {}).items()
                       if "params" in entry})


def _by_model(usage: dict[str, dict[str, Any]]) -> dict[str, dict[str, int]]:
    totals: dict[str, dict[str, int]] = {}
    for entry in usage.values():
        into = totals.setdefault(str(entry.get("model")), {"requests": 0, "input_tokens": 0, "output_tokens": 0})
        for key in into:
            into[key] += int(entry.get(key, 0))
    return totals


def _progress_bar(total: int, initial: int, enabled: bool) -> Any:
    if not enabled or total == 0:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, unit="item", dynamic_ncols=True, file=sys.stderr)


def run(graph: StateGraph | CompiledStateGraph, items: Iterable[EvalItem], **kwargs: Any) -> RunSummary:
    """Synchronous :func:`arun`. Inside a running event loop (a notebook) it runs in a worker thread with
    its own loop; ``await arun(...)`` is the native way there."""
    work = _run_with_sigint(graph, list(items), **kwargs)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(work)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, work).result()


async def _run_with_sigint(graph: StateGraph | CompiledStateGraph, items: list[EvalItem], **kwargs: Any) -> RunSummary:
    """Turn Ctrl-C into a clean cancel: in-flight items stop, their checkpoints stay, files are closed."""
    task = asyncio.ensure_future(arun(graph, items, **kwargs))
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, task.cancel)
    try:
        return await task
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
