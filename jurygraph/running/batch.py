"""``--batch``: a run as rounds of provider batches (OpenAI's Batch API, half price, results within 24 h).

Each round advances every unfinished item to its next model calls: the item's graph starts afresh (its thread is
deleted) and the LLM cache answers every call it already paid for, up to the first call it has not; that call does
not go to the provider but is recorded (:class:`BatchReplies`, the context's reply source) and stops the item's
graph with LangGraph's ``interrupt()``. The other branches of the superstep run on (an interrupt is not a failure),
so the parallel calls of one superstep (ChatEval's simultaneous talk, ReFeR's peers, both answer orders of a
calibration) all reach the round's batch. The round's calls are then written as one batch file per provider (one
``custom_id`` per call: its cache key; split at 50,000 requests or 190 MB), uploaded, and the batch created; its id
goes into ``RUN_DIR/batches.jsonl`` at once. The runner polls it (``--batch-poll`` seconds, a progress bar), reads
the answers, and the next round's replay hands each to its call, which is paid at batch prices, cached, and goes
on to its next miss. Rounds repeat until every item is done: ChatEval one-by-one, 2 referees x 2 turns, is 4
rounds for any number of items.

The process may stop while a batch runs (a provider takes up to 24 h): ``jurygraph eval --resume RUN_DIR`` reads
the ledger, collects every batch it did not settle (polling until it ends) and goes on; a call is never
submitted twice. A process killed between uploading a file and creating its batch finds the batch by its input
file, or, if none was created, submits the calls with the next round. A request the batch failed or let expire
goes into the next round's batch, or with ``--batch-fallback online`` to the ordinary API; one that failed in
``MAX_BATCH_ATTEMPTS`` batches goes to the ordinary API, where its error is the item's.

Calls that cannot be batched (Gemini, a custom chat model) are sent online as their graphs reach them. The
budget (``--max-cost``) admits items before the first round (their reserves at batch prices) and never stops a
round half-way.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import interrupt

from jurygraph.judging.items import EvalItem
from jurygraph.judging.state import BATCH_COUNTS, COUNTS, add_usage, usage_counts
from jurygraph.llm.batches import MAX_BYTES, MAX_REQUESTS, TERMINAL, OpenAIBatches, batchable, decode, request_line
from jurygraph.llm.calls import Answer, PendingCall
from jurygraph.llm.models import JuryContext, ModelSpec, build_model, to_spec
from jurygraph.llm.redact import redact_text, redact_url
from jurygraph.running.interrupts import BATCH_CALL, paused_for_review, review_interrupt, waits_for_batch
from jurygraph.running.ledger import UNATTRIBUTED, Payment
from jurygraph.running.run import Run, RunAborted
from jurygraph.running.rundir import append_batch_event, batch_file, read_batch_events

__all__ = ["BATCH_CALL", "BatchEngine", "BatchOptions", "BatchReplies", "BatchRounds", "paused_for_review",
           "review_interrupt", "waits_for_batch"]

MAX_BATCH_ATTEMPTS = 3
DEFAULT_API = "https://api.openai.com/v1"


@dataclass(frozen=True)
class BatchOptions:
    """``--batch-poll`` and ``--batch-fallback``."""

    poll_seconds: float = 60.0
    fallback: str = "batch"  # "batch": failed requests go into the next round's batch; "online": to the API
    max_requests: int = MAX_REQUESTS
    max_bytes: int = MAX_BYTES


def api_of(model: Any) -> str:
    """The API a batchable model's batches go to (its base URL, credentials masked): one batch per API."""
    return redact_url(str(getattr(model, "openai_api_base", None) or DEFAULT_API))


class BatchReplies:
    """The reply source of a batch run: a collected batch's answer for a call, else the call joins the round's
    batch and its item's graph stops (``interrupt``). Calls that cannot be batched, and failed ones with
    ``fallback="online"``, go to the provider (None)."""

    def __init__(self, fallback: str) -> None:
        self.fallback = fallback
        self.bodies: dict[str, dict[str, Any]] = {}  # collected answers by cache key
        self.failed: dict[str, str] = {}  # the reason each failed request failed, by cache key
        self.failures: Counter[str] = Counter()  # batches each request failed in
        self.pending: dict[str, tuple[str, dict[str, Any]]] = {}  # the round's calls: key -> (API, line)
        self.read: set[str] = set()  # answers handed to a call: identical calls batched as one line pay once
        self.clients: dict[str, OpenAIBatches] = {}

    def answer(self, call: PendingCall) -> Answer | None:
        if call.key is None or not batchable(call):
            return None
        body = self.bodies.get(call.key)
        if body is not None:
            first = call.key not in self.read
            self.read.add(call.key)
            return Answer(decode(call, body), batch=True, paid=first)
        if call.key in self.failed and (self.fallback == "online" or self.failures[call.key] >= MAX_BATCH_ATTEMPTS):
            return None
        api = api_of(call.model)
        self.clients.setdefault(api, OpenAIBatches(call.model.root_client))
        self.pending.setdefault(call.key, (api, request_line(call)))
        interrupt({BATCH_CALL: call.key, "agent": call.request.agent})
        return None  # not reached: interrupt() raises


class BatchEngine:
    """The batch engine (:class:`~jurygraph.running.run.Engine`): a run's items judged in rounds of provider
    batches (see the module's doc)."""

    def __init__(self, options: BatchOptions) -> None:
        self.options = options

    async def judge(self, run: Run, graph: StateGraph | CompiledStateGraph) -> None:
        """Start the run, judge its items round by round with its checkpointer, and leave the totals for
        ``run.finish()``."""
        run.start()
        async with run.compiled(graph) as app:
            await BatchRounds(run, self.options).judge_all(app)


class BatchRounds:
    """The rounds of one batch run: its items replayed until done, their calls collected into batches
    (:class:`~jurygraph.running.run.Rounds`: each item judged by the run's ``judge_item`` with these replies)."""

    def __init__(self, run: Run, options: BatchOptions) -> None:
        self.run, self.options = run, options
        self.replies = BatchReplies(options.fallback)
        self.item_usage: dict[str, dict[str, dict[str, Any]]] = {}  # paid calls per item, over the rounds
        self.collected: list[str] = []  # batches read this round, settled when its replay is done
        self.round = max((int(e.get("round", 0)) for e in read_batch_events(run.out)), default=0)

    async def judge_all(self, app: Any) -> None:
        run = self.run
        try:
            if app.checkpointer is None:  # an item waiting for its batch is an interrupted graph: it needs one
                run.stop("batch mode needs a checkpointer: pass the uncompiled graph, or compile it with one",
                         exit_code=2)
                return
            items = [item async for item in self._admitted()]
            # every batch the ledger has not settled is collected, even when no item is left to need it: its lines
            # were paid, and are recorded as they are collected
            await self._collect_open()
            while items and not run.aborted:
                items = [item for item in await self._advance_all(app, items) if item is not None]
                self._settle()
                if items and not run.aborted:
                    await self._submit()
                    await self._collect_open()
            self._settle()
        except asyncio.CancelledError:
            run.summary.interrupted = True
        finally:
            run.manifest.batches = batches_of(read_batch_events(run.out))
            run.close_outputs()

    async def _admitted(self) -> Any:
        """The items this invocation takes on (the budget's admission happens before the first round)."""
        run = self.run
        while not run.stopped and not run.aborted:
            item = run.next_or_stop()  # None too when the items cannot be read: the run stops
            if item is None:
                return
            answer = await run.admitted(item, wait=False)
            if answer == "skip":  # held back: it alone would pass the budget
                continue
            if answer != "start":
                return
            yield item

    # --- one round: every unfinished item to its next calls ---

    async def _advance_all(self, app: Any, items: list[EvalItem]) -> list[EvalItem | None]:
        slots = asyncio.Semaphore(self.run.concurrency)

        async def one(item: EvalItem) -> EvalItem | None:
            async with slots:
                if self.run.aborted:
                    return item
                return await self._advance(app, item)

        return list(await asyncio.gather(*(one(item) for item in items)))

    async def _advance(self, app: Any, item: EvalItem) -> EvalItem | None:
        """Replay one item up to its next uncollected calls: the item again when it waits for a batch, None
        when it is done (its record written) or the run must stop."""
        try:
            record = await self.run.judge_item(app, item, rounds=self)
        except RunAborted as stop:
            self.run.aborted.append(stop)
            return None
        return item if record is None else None

    def paid(self, item_id: str, usage: dict[str, dict[str, Any]]) -> None:
        """A call paid online (recorded now) or a collected batch answer handed to its call (recorded when its batch
        was collected): the run's meter, and the item's usage over its rounds."""
        self.run.meter.paid(item_id, usage)
        self.item_usage[item_id] = add_usage(self.item_usage.get(item_id, {}), {
            agent: {"role": entry.get("role"), "model": entry.get("model"), **usage_counts(entry)}
            for agent, entry in usage.items()})

    def usage(self, item_id: str, usage: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """The item's usage over its rounds (its record's): see :func:`_with_counts`."""
        return _with_counts(usage, self.item_usage.pop(item_id, {}))

    # --- the provider's side: submit, collect, settle ---

    async def _submit(self) -> None:
        """The round's calls as batches (one per API, split at the provider's limits), each id in the ledger at
        once."""
        pending, self.replies.pending = self.replies.pending, {}
        if not pending:
            return
        self.round += 1
        by_api: dict[str, list[str]] = {}
        for api, line in pending.values():
            by_api.setdefault(api, []).append(_json_line(line))
        part = 0
        for api, lines in by_api.items():
            for chunk in _split(lines, self.options.max_requests, self.options.max_bytes):
                part += 1
                path = batch_file(self.run.out, self.round, part)
                path.write_text("".join(chunk), encoding="utf-8")
                client = self.replies.clients[api]
                where = {"round": self.round, "part": part, "api": api, "file": str(path.relative_to(self.run.out)),
                         "requests": len(chunk)}
                file_id = await self._call(client.upload, path)
                append_batch_event(self.run.out, {"event": "uploaded", **where, "input_file_id": file_id,
                                                  "at": _now()})
                batch = await self._call(client.create, file_id, {"jurygraph_run": self.run.out.name,
                                                                   "round": str(self.round)})
                append_batch_event(self.run.out, {"event": "submitted", **where, "input_file_id": file_id,
                                                  "batch_id": batch.id, "at": _now()})
                self._say(f"batch {batch.id}: round {self.round}, {len(chunk)} requests submitted")

    async def _collect_open(self) -> None:
        """Wait for every batch of the ledger not yet settled, and hand its answers to the reply source."""
        for event in open_batches(read_batch_events(self.run.out)):
            client = self._client(event["api"])
            if event["event"] == "uploaded":  # killed between the upload and the batch: was one created?
                found = await self._call(client.find, event["input_file_id"])
                if found is None:
                    append_batch_event(self.run.out, {"event": "abandoned", "input_file_id": event["input_file_id"],
                                                      "round": event["round"], "at": _now()})
                    continue
                event = {**event, "event": "submitted", "batch_id": found.id}
                append_batch_event(self.run.out, {**event, "at": _now()})
            batch = await self._wait(client, event)
            lines = _lines(self.run.out / event["file"])
            result = await self._call(client.result, batch, list(lines))
            # paid as collected: on record before any answer is handed to its call (collected again after a kill,
            # a line is not recorded twice)
            self.run.meter.collected([self._payment(batch.id, custom_id, body, event["api"], lines.get(custom_id))
                                      for custom_id, body in result.bodies.items()])
            self.replies.bodies.update(result.bodies)
            for custom_id, reason in result.failed.items():
                self.replies.failed[custom_id] = reason
                self.replies.failures[custom_id] += 1
            append_batch_event(self.run.out, {"event": "collected", "batch_id": batch.id, "round": event["round"],
                                              "status": batch.status, "completed": len(result.bodies),
                                              "failed": len(result.failed), "at": _now()})
            self.collected.append(batch.id)
            if result.failed:
                where = "the ordinary API" if self.options.fallback == "online" else "the next round's batch"
                first = next(iter(result.failed.values()))
                self._say(f"batch {batch.id} {batch.status}: {len(result.failed)} requests failed ({first}); "
                          f"they go to {where}")

    def _payment(self, batch_id: str, custom_id: str, body: dict[str, Any], api: str,
                 line: dict[str, Any] | None) -> Payment:
        """A batch line's answer as a ledger row: its model (as the run names it: the request's model at the batch's
        API), its usage, at batch prices; its item and agent are filled in when the answer is handed to its call."""
        model = str(((line or {}).get("body") or {}).get("model") or body.get("model") or "")
        label = f"openai:{model}" + ("" if api == DEFAULT_API else f"@{api}")
        usage = body.get("usage") or {}
        tokens = {"input_tokens": int(usage.get("prompt_tokens") or 0),
                  "output_tokens": int(usage.get("completion_tokens") or 0)}
        entry = {"model": label, "requests": 1, **tokens, "batch_requests": 1,
                 **{f"batch_{key}": value for key, value in tokens.items()}, "key": custom_id}
        return self.run.meter.payment(entry, agent=UNATTRIBUTED, source="batch", uid=f"{batch_id}/{custom_id}")

    async def _wait(self, client: OpenAIBatches, event: dict[str, Any]) -> Any:
        bar = _bar(event["requests"], f"batch round {event['round']}", self.run.progress)
        try:
            while True:
                batch = await self._call(client.retrieve, event["batch_id"])
                counts = batch.request_counts
                if bar is not None:
                    done = (counts.completed + counts.failed) if counts else 0
                    bar.set_description_str(f"batch round {event['round']} {batch.status}")
                    bar.update(max(0, done - bar.n))
                if batch.status in TERMINAL:
                    return batch
                await asyncio.sleep(self.options.poll_seconds)
        finally:
            if bar is not None:
                bar.close()

    def _settle(self) -> None:
        """The batches collected this round were handed to their calls (cached now): settled, files removed."""
        events = read_batch_events(self.run.out)
        for batch_id in self.collected:
            append_batch_event(self.run.out, {"event": "settled", "batch_id": batch_id, "at": _now()})
            for event in events:
                if event.get("batch_id") == batch_id and event.get("file"):
                    (self.run.out / event["file"]).unlink(missing_ok=True)
        self.collected = []
        self.replies.bodies.clear()  # in the cache now
        self.replies.read.clear()

    def _client(self, api: str) -> OpenAIBatches:
        if api not in self.replies.clients:  # a resumed run: the models of the context, before any call
            self.replies.clients.update(clients_of(self.run.context))
        if api not in self.replies.clients:
            raise self._aborted(RuntimeError(f"the run's batches went to {api}, which no model of this run uses "
                                             "now (--base-url moved?)"))
        return self.replies.clients[api]

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """A Batch/Files API call off the event loop; an error stops the run in one line (its batches are in the
        ledger, a resume goes on)."""
        try:
            return await asyncio.to_thread(fn, *args)
        except Exception as err:
            raise self._aborted(err) from err

    def _aborted(self, err: BaseException) -> RunAborted:
        """An error of the Batch API or the run directory as the run's stop."""
        reason = redact_text(f"{type(err).__name__}: {err}".splitlines()[0])
        return RunAborted(f"batch API: {reason}", exit_code=2 if isinstance(err, OSError) else 1)

    def _say(self, text: str) -> None:
        if self.run.progress:
            print(f"jurygraph: {text}", file=sys.stderr)


def clients_of(context: JuryContext) -> dict[str, OpenAIBatches]:
    """The Batch API of every OpenAI-compatible model a context names (built, not called)."""
    clients: dict[str, OpenAIBatches] = {}
    for choice in [*context.models.values(), context.default]:
        if choice is None:
            continue
        model: Any = choice
        if isinstance(choice, str | ModelSpec | dict):
            spec = to_spec(choice)
            if spec.provider != "openai":
                continue
            model = build_model(spec)
        if type(model).__name__ == "ChatOpenAI":
            clients.setdefault(api_of(model), OpenAIBatches(model.root_client))
    return clients


def open_batches(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ledger's batches not settled: submitted ones (by batch id) and uploads no batch was recorded for."""
    submitted = {e["input_file_id"]: e for e in events if e["event"] == "submitted"}
    uploaded = {e["input_file_id"]: e for e in events if e["event"] == "uploaded"}
    closed = {e["batch_id"] for e in events if e["event"] == "settled"}
    gone = {e["input_file_id"] for e in events if e["event"] == "abandoned"}
    out = [e for e in submitted.values() if e["batch_id"] not in closed]
    out += [e for file_id, e in uploaded.items() if file_id not in submitted and file_id not in gone]
    return sorted(out, key=lambda e: (e["round"], e["part"]))


def batches_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's batches for the manifest: id, round, requests, how it ended."""
    rows: dict[str, dict[str, Any]] = {}
    for event in events:
        if event["event"] == "submitted":
            rows[event["batch_id"]] = {"id": event["batch_id"], "round": event["round"], "api": event["api"],
                                       "requests": event["requests"], "status": "submitted"}
        elif event["event"] == "collected" and event["batch_id"] in rows:
            rows[event["batch_id"]].update(status=event["status"], completed=event["completed"],
                                           failed=event["failed"])
    return list(rows.values())


def _with_counts(usage: dict[str, dict[str, Any]], paid: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """An item's usage over its rounds: each agent's role, model and parameters from its final run, its counts
    from every call it paid for in this invocation (a round's replay finds the earlier rounds' calls cached)."""
    counted = (*COUNTS, *BATCH_COUNTS)
    out = {agent: dict(entry) for agent, entry in usage.items()}
    for agent, entry in paid.items():
        into = out.setdefault(agent, {key: value for key, value in entry.items() if key not in counted})
        for key in counted:
            if key in entry or key in into:
                into[key] = int(entry.get(key, 0))
    for agent, into in out.items():
        if agent not in paid:
            into.update({key: 0 for key in counted if key in into})
    return out


def _split(lines: list[str], max_requests: int, max_bytes: int) -> list[list[str]]:
    """JSONL lines in chunks of at most ``max_requests`` lines and ``max_bytes`` bytes (a longer line alone)."""
    chunks: list[list[str]] = [[]]
    size = 0
    for line in lines:
        length = len(line.encode())
        if chunks[-1] and (len(chunks[-1]) >= max_requests or size + length > max_bytes):
            chunks.append([])
            size = 0
        chunks[-1].append(line)
        size += length
    return chunks


def _json_line(line: dict[str, Any]) -> str:
    return json.dumps(line, ensure_ascii=False) + "\n"


def _lines(path: Path) -> dict[str, dict[str, Any]]:
    """A batch file's lines by custom_id (none when the file is gone: a batch settled already)."""
    if not path.exists():
        return {}
    with path.open(encoding="utf-8") as handle:
        return {row["custom_id"]: row for row in (json.loads(line) for line in handle if line.strip())}


def _bar(total: int, description: str, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=description, unit="req", dynamic_ncols=True, file=sys.stderr, leave=False)


def _now() -> str:
    return datetime.now(UTC).isoformat()
