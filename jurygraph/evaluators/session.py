"""Where an evaluator's panel judges: one event loop in a thread of its own, shared by every call.

A harness calls an evaluator from many threads (LangSmith's ``evaluate()``, MLflow) or from its own event loop
(``aevaluate()``, inspect_ai). Every call hands its item to the evaluator's loop and waits for the record, so all
calls share one compiled graph, one checkpointer, one call cache, one results file and the provider gates of one
:class:`~jurygraph.llm.models.JuryContext` (rate and in-flight limits bind to the loop that uses them). The loop
starts at the first call and stops at :meth:`PanelSession.close` (a later call starts it again).

An item is judged once: a call for an item already judged (in this session, or recorded in the run directory by an
earlier one) is answered from its record; a call for an item being judged waits for that judgment. The caller's
context (a LangSmith trace, a pytest test case) goes with its item, so the panel's calls nest in the harness's
trace.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import dataclasses
import functools
import threading
from collections.abc import Coroutine
from typing import Any

from langchain_core.runnables import RunnableConfig

from jurygraph.evaluators.protocol import PanelProtocol
from jurygraph.evaluators.records import CACHE, CHECKPOINTS, EvaluatorRun
from jurygraph.judging.items import EvalItem
from jurygraph.llm.cache_postgres import open_cache
from jurygraph.llm.calls import ProviderUnavailable
from jurygraph.llm.models import JuryContext, MissingAPIKey
from jurygraph.llm.redact import redact_text
from jurygraph.running.checkpoints import KeepCheckpoints, durability, keep_final_only
from jurygraph.running.runner import item_record, open_checkpointer, trace_config


class PanelFailed(RuntimeError):
    """The panel could not judge an item (an error no retry fixed); the run directory records it as failed."""


class PanelSession:
    """The loop, graph and run directory of one evaluator (see the module's doc)."""

    def __init__(self, protocol: PanelProtocol, context: JuryContext, run: EvaluatorRun | None = None,
                 keep_checkpoints: KeepCheckpoints = "final") -> None:
        self.protocol, self.context, self.run, self.keep_checkpoints = protocol, context, run, keep_checkpoints
        self.done: dict[str, dict[str, Any]] = {}
        self._inflight: dict[str, asyncio.Task[dict[str, Any]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        self._stack: contextlib.AsyncExitStack | None = None

    # --- what a harness's call does -----------------------------------------------------------------------

    def judge(self, item: EvalItem) -> dict[str, Any]:
        """The item's record, judged on the panel's loop; blocks the calling thread."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("a panel evaluator was called synchronously from its own loop; await it instead")
        return self._submit(self._judge(item)).result()

    def judge_all(self, items: list[EvalItem]) -> list[dict[str, Any]]:
        """Each item's record, judged concurrently (a summary evaluator's rows); blocks the calling thread."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("a panel evaluator was called synchronously from its own loop; await it instead")
        futures = [self._submit(self._judge(item)) for item in items]
        return [future.result() for future in futures]

    async def ajudge(self, item: EvalItem) -> dict[str, Any]:
        """The item's record, judged on the panel's loop, awaited from the caller's."""
        return await asyncio.wrap_future(self._submit(self._judge(item)))

    def _submit(self, work: Coroutine[Any, Any, dict[str, Any]]) -> concurrent.futures.Future[dict[str, Any]]:
        """Run ``work`` on the panel's loop in a copy of the caller's context; its future."""
        try:
            loop = self._started()
        except BaseException:
            work.close()
            raise
        context = contextvars.copy_context()
        future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()

        def start() -> None:
            task = loop.create_task(work, context=context)
            task.add_done_callback(functools.partial(_settle, future))

        loop.call_soon_threadsafe(start)
        return future

    # --- the loop -----------------------------------------------------------------------------------------

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._start:
            if self._loop is not None:
                return self._loop
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="jurygraph-panel", daemon=True)
            thread.start()
            try:
                asyncio.run_coroutine_threadsafe(self._open(), loop).result()
            except BaseException:
                loop.call_soon_threadsafe(loop.stop)
                thread.join()
                loop.close()
                raise
            self._loop, self._thread = loop, thread
            return loop

    async def _open(self) -> None:
        stack = contextlib.AsyncExitStack()
        try:
            context, saver = self.context, None
            if self.run is not None:
                self.done.update(self.run.open())
                stack.callback(self.run.close)
                saver = await stack.enter_async_context(open_checkpointer(self.run.out / CHECKPOINTS))
                cache = open_cache(self.run.out / CACHE)
                stack.callback(cache.close)
                context = dataclasses.replace(context, cache=cache)
            self._context = context
            self._mode = durability(self.keep_checkpoints, cache=context.cache is not None)
            self._app = self.protocol.graph.compile(checkpointer=saver)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack

    def close(self) -> None:
        """Wait for the items being judged, write the run directory's end, release it and stop the loop."""
        with self._start:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        if threading.current_thread() is thread:  # a finalizer run on the loop itself: end it there
            loop.create_task(self._aclose(loop))
            return
        asyncio.run_coroutine_threadsafe(self._aclose(loop), loop).result()
        thread.join()
        loop.close()

    async def _aclose(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            await asyncio.gather(*self._inflight.values(), return_exceptions=True)
            if self._stack is not None:
                await self._stack.aclose()
            self.done.clear()
        finally:
            self._stack = None
            loop.call_soon(loop.stop)

    # --- one item -----------------------------------------------------------------------------------------

    async def _judge(self, item: EvalItem) -> dict[str, Any]:
        if item.id in self.done:
            if self.run is not None:
                self.run.count(self.done[item.id], fresh=False)
            return self.done[item.id]
        task = self._inflight.get(item.id)
        if task is None:
            task = asyncio.ensure_future(self._judge_new(item))
            self._inflight[item.id] = task
            task.add_done_callback(lambda _: self._inflight.pop(item.id, None))
        # one caller giving up (a harness's timeout) leaves the judgment to the others waiting for it
        return await asyncio.shield(task)

    async def _judge_new(self, item: EvalItem) -> dict[str, Any]:
        app, meter = self._app, self.run.meter if self.run is not None else None
        config: RunnableConfig = {"configurable": {"thread_id": item.id}}
        if _tracing():
            config.update(trace_config(item.id, self.protocol.name, self.run.out.name if self.run else "evaluator"))
        context = self._context
        if meter is not None:
            meter.started(item.id)
            context = dataclasses.replace(context, on_usage=functools.partial(meter.paid, item.id))
        failure: Exception | None = None
        try:
            values = await self._values(app, item, config, context)
            record = item_record(item, values, "ok")
        except (ProviderUnavailable, MissingAPIKey):
            raise  # every item would fail the same way: the harness hears it, nothing is recorded
        except Exception as err:
            failure = err
            state = await app.aget_state(config) if app.checkpointer is not None else None
            record = item_record(item, state.values if state else {}, "failed",
                                 redact_text(f"{type(err).__name__}: {err}"))
        finally:
            if meter is not None:
                meter.finished(item.id)
        if self.run is not None:
            self.run.write(record)
        if failure is not None:
            raise PanelFailed(f"item {item.id}: {record.get('error')}") from failure
        self.done[item.id] = record
        return record

    async def _values(self, app: Any, item: EvalItem, config: RunnableConfig,
                      context: JuryContext) -> dict[str, Any]:
        """The item's final state: from its finished checkpoint, by continuing its pending steps, or from the start
        (an evaluator killed half-way left its checkpoint; the call cache answers what was already paid)."""
        graph_input: Any = {"item": item.model_dump(mode="json", exclude_none=True)}
        if app.checkpointer is None:  # no run directory: nothing to resume or keep
            return dict(await app.ainvoke(graph_input, config, context=context))
        snapshot = await app.aget_state(config)
        if snapshot.values and not snapshot.tasks and snapshot.values.get("verdict") is not None:
            return dict(snapshot.values)
        if snapshot.values and snapshot.tasks:
            graph_input = None
        values = await app.ainvoke(graph_input, config, context=context, durability=self._mode)
        if self.keep_checkpoints == "final" and self._mode != "exit":
            await keep_final_only(app.checkpointer, item.id)
        return dict(values)


def _settle(future: concurrent.futures.Future[dict[str, Any]], task: asyncio.Task[dict[str, Any]]) -> None:
    if task.cancelled():
        future.cancel()
    elif task.exception() is not None:
        future.set_exception(task.exception())  # type: ignore[arg-type]
    else:
        future.set_result(task.result())


def _tracing() -> bool:
    """Whether LangSmith tracing is on in the caller's context (``LANGSMITH_TRACING``, or a harness's own)."""
    from langsmith.utils import tracing_is_enabled

    return bool(tracing_is_enabled())
