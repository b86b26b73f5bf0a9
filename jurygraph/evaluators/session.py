"""Where an evaluator's panel judges: one event loop in a thread of its own, shared by every call.

A harness calls an evaluator from many threads (LangSmith's ``evaluate()``, MLflow) or from its own event loop
(``aevaluate()``, inspect_ai). Every call hands its item to the evaluator's loop and waits for the record, so all
calls share one compiled graph and the provider gates of one :class:`~jurygraph.llm.models.JuryContext` (rate and
in-flight limits bind to the loop that uses them), and with a run directory the runner's open run
(:func:`jurygraph.running.openrun.open_run`: one checkpointer, call cache, ledger and results file). The loop starts
at the first call and stops at :meth:`PanelSession.close` (a later call starts it again).

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
import functools
import threading
from collections.abc import Coroutine
from typing import Any

from langchain_core.runnables import RunnableConfig

from jurygraph.evaluators.protocol import PanelProtocol
from jurygraph.evaluators.records import EvaluatorRun
from jurygraph.judging.items import EvalItem
from jurygraph.llm.calls import ProviderUnavailable
from jurygraph.llm.models import JuryContext, MissingAPIKey
from jurygraph.llm.redact import redact_text
from jurygraph.running.openrun import OpenRun
from jurygraph.running.records import item_record
from jurygraph.running.run import RunAborted
from jurygraph.running.tracing import trace_config, tracing


class PanelFailed(RuntimeError):
    """The panel could not judge an item (an error no retry fixed); the run directory records it as failed."""


class PanelSession:
    """The loop, graph and run directory of one evaluator (see the module's doc)."""

    def __init__(self, protocol: PanelProtocol, context: JuryContext, run: EvaluatorRun | None = None) -> None:
        self.protocol, self.context, self.run = protocol, context, run
        self.done: dict[str, dict[str, Any]] = {}
        self._inflight: dict[str, asyncio.Task[dict[str, Any]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._start = threading.Lock()
        self._stack: contextlib.AsyncExitStack | None = None
        self._open: OpenRun | None = None
        self._app: Any = None  # the compiled graph, without a run directory

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
                asyncio.run_coroutine_threadsafe(self._opened(), loop).result()
            except BaseException:
                loop.call_soon_threadsafe(loop.stop)
                thread.join()
                loop.close()
                raise
            self._loop, self._thread = loop, thread
            return loop

    async def _opened(self) -> None:
        """The graph compiled: with the run directory's open run (its lock, checkpointer, call cache, ledger), or
        alone (nothing kept)."""
        stack = contextlib.AsyncExitStack()
        try:
            if self.run is not None:
                self._open = await stack.enter_async_context(self.run.open(self.protocol.graph, self.context))
            else:
                self._app = self.protocol.graph.compile()
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack

    def close(self) -> None:
        """Wait for the items being judged, finish the run directory (its manifest's totals), release it and stop
        the loop; raises what finishing the run raised (a full disk)."""
        with self._start:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        if threading.current_thread() is thread:  # a finalizer run on the loop itself: end it there
            loop.create_task(self._aclose(loop))
            return
        try:
            asyncio.run_coroutine_threadsafe(self._aclose(loop), loop).result()
        finally:
            thread.join()
            loop.close()

    async def _aclose(self, loop: asyncio.AbstractEventLoop) -> None:
        try:
            await asyncio.gather(*self._inflight.values(), return_exceptions=True)
            if self._stack is not None:
                await self._stack.aclose()
            self.done.clear()
        finally:
            self._stack, self._open = None, None
            loop.call_soon(loop.stop)

    # --- one item -----------------------------------------------------------------------------------------

    async def _judge(self, item: EvalItem) -> dict[str, Any]:
        if item.id in self.done:
            return self.done[item.id]
        task = self._inflight.get(item.id)
        if task is None:
            task = asyncio.ensure_future(self._judge_new(item))
            self._inflight[item.id] = task
            task.add_done_callback(lambda _: self._inflight.pop(item.id, None))
        # one caller giving up (a harness's timeout) leaves the judgment to the others waiting for it
        return await asyncio.shield(task)

    async def _judge_new(self, item: EvalItem) -> dict[str, Any]:
        if self._open is not None:
            try:
                record = await self._open.judge(item, traced=tracing())
            except RunAborted as stop:  # every item would fail so (no key, no server, a full disk): said as it is
                raise stop.__cause__ or stop  # noqa: B904 (the error itself, as without a run directory)
        else:
            record = await self._alone(item)
        if record.get("status") == "failed":
            raise PanelFailed(f"item {item.id}: {record.get('error')}")
        self.done[item.id] = record
        return record

    async def _alone(self, item: EvalItem) -> dict[str, Any]:
        """The item judged without a run directory: nothing resumed, kept or counted."""
        config: RunnableConfig = {"configurable": {"thread_id": item.id}}
        if tracing():
            config.update(trace_config(item.id, self.protocol.name, "evaluator"))
        try:
            values = await self._app.ainvoke({"item": item.model_dump(mode="json", exclude_none=True)}, config,
                                             context=self.context)
        except (ProviderUnavailable, MissingAPIKey):
            raise  # every item would fail the same way: the harness hears it
        except Exception as err:
            return item_record(item, {}, "failed", redact_text(f"{type(err).__name__}: {err}"))
        return item_record(item, values, "ok")


def _settle(future: concurrent.futures.Future[dict[str, Any]], task: asyncio.Task[dict[str, Any]]) -> None:
    if task.cancelled():
        future.cancel()
    elif task.exception() is not None:
        future.set_exception(task.exception())  # type: ignore[arg-type]
    else:
        future.set_result(task.result())
