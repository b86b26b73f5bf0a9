"""One run spread over a Ray cluster (``jurygraph eval --ray ADDRESS --workers N``, ``run(..., ray=...)``).

The Ray engine (:class:`RayEngine`). The driver (the process that called :func:`jurygraph.running.runner.arun`)
holds the run directory's lock and writes every file in it, as a one-process run does: the run
(:class:`jurygraph.running.run.Run`) is started, fed and finished by its own steps. It pulls items from the dataset a
shard at a time and hands each shard to a Ray task; ``workers`` tasks run at once, each the local engine in a worker
(:class:`jurygraph.running.shards.ShardJob`, ``concurrency`` items at a time) against state every worker shares:

* the checkpoints: a PostgreSQL database (``--checkpoint postgresql://...``), or the run directory's SQLite file
  when the cluster is one node;
* the LLM-call cache: a PostgreSQL table (:mod:`jurygraph.llm.cache_postgres`; by default in the checkpoints'
  database when the cluster has several nodes), or the run directory's SQLite file on one node;
* the provider limits: one actor holds the run's budget (:class:`jurygraph.llm.shared_limits.SharedBudget`), so
  ``--rps``/``--in-flight`` count every worker's requests together.

Each record reaches the driver as its item finishes (through an inbox actor), not when its shard returns, and the
driver writes it at once: a killed worker loses nothing already finished. Ray notices a dead worker and runs its
shard again on a live one (``max_retries``): the new attempt finds the items the dead one finished in the
checkpoints and every call it was answered in the cache, so only the calls that were in flight are sent again;
the driver keeps the first record of an item and drops the repeat, so ``results.jsonl`` has one line per item.
A shard whose workers keep dying, or an error every item would hit (a rejected key), stops the run as in one
process: finished items are kept and ``--resume`` continues.

Why this shape. Shards are plain Ray tasks with Ray's own retries: Ray detects the dead worker and reruns the
task, and the shared checkpoints and cache make a rerun cost only what was in flight, so nothing tracks which
items a worker held. Records travel through an actor rather than as a Ray generator's yields: Ray's generators
count on a rerun yielding what the first run yielded (``StreamingGeneratorReplayInconsistentError``), while records
come in the order items happen to finish. The budget needs no heartbeat nor lease timeout: a shard attempt
draws a token, and Ray starting the shard again is the notice that the earlier attempt is dead.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.util
import logging
import math
import os
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from jurygraph.llm.limits import ProviderGates, ProviderLimit
from jurygraph.llm.redact import redact_url
from jurygraph.llm.shared_limits import SharedBudget
from jurygraph.running.rundir import CACHE, CHECKPOINTS

# what the inbox and budget actors' processes import of this module: nothing of LangChain's models or LangGraph
if TYPE_CHECKING:
    from langgraph.graph import StateGraph
    from langgraph.graph.state import CompiledStateGraph

    from jurygraph.judging.items import EvalItem
    from jurygraph.running.run import Run

LOCAL = "local"  # a cluster started in this process, on this machine's loopback address
USAGE_COUNTED = ("requests", "input_tokens", "output_tokens")
INSTALL_HINT = "--ray needs Ray: pip install 'jurygraph[ray]'"


@dataclass(frozen=True)
class RayOptions:
    """Where and how a run is spread. ``address``: ``"local"`` (start a cluster in this process: this machine,
    127.0.0.1 only), ``"auto"`` (join the cluster ``ray start`` runs on this machine), or a cluster's address
    (``HOST:PORT``). ``workers``: shards judged at once (default: the CPUs workers may use).
    ``shard_size``: items per shard (default: about 4 shards per worker, each of 1 to 16 x ``concurrency``
    items; 4 x ``concurrency`` for a stream of unknown length). ``dashboard``: with ``"local"``, start Ray's
    dashboard (on 127.0.0.1:8265). ``max_retries``: how often a shard runs again after its worker died."""

    address: str = LOCAL
    workers: int | None = None
    shard_size: int | None = None
    dashboard: bool = False
    max_retries: int = 3

    def __post_init__(self) -> None:
        if not self.address:
            raise ValueError("ray= needs an address: 'local', 'auto' or HOST:PORT")
        for name in ("workers", "shard_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1 (got {value})")
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be at least 0 (got {self.max_retries})")

    @classmethod
    def of(cls, ray: str | RayOptions | None, workers: int | None = None) -> RayOptions | None:
        """The options ``run(..., ray=..., workers=...)`` asks for; None for a run in this process."""
        if ray is None:
            if workers is not None:
                raise ValueError("workers= spreads a run over a Ray cluster: give ray= too ('local', 'auto', ...)")
            return None
        options = cls(address=ray) if isinstance(ray, str) else ray
        return dataclasses.replace(options, workers=workers) if workers is not None else options


class RayEngine:
    """The Ray engine (:class:`~jurygraph.running.run.Engine`): a run's items judged in shards by workers of a Ray
    cluster, this process writing the run directory (see the module's doc)."""

    def __init__(self, options: RayOptions) -> None:
        self.options = options

    async def judge(self, run: Run, graph: StateGraph | CompiledStateGraph) -> None:
        """Judge ``run``'s items on the cluster: connect (or start one), check that the workers can share the
        run's state, start the run (its manifest and results file), drive the shards, and leave the totals for
        ``run.finish()``."""
        if getattr(graph, "checkpointer", None) is not None:
            raise ValueError("with ray=, the workers share the run's checkpoint store: pass the uncompiled graph "
                             "(or one compiled without a checkpointer)")
        with connected(self.options) as cluster:
            await _Driver(self.options, run, graph, cluster).judge()


# --- the cluster ---------------------------------------------------------------------------------------------


@dataclass
class Cluster:
    """The cluster this process is connected to: its nodes, and where the run's workers may go."""

    address: str
    nodes: int
    cpus: int
    driver_node: str  # Ray's id of this process's node
    remote_driver: bool  # a Ray Client (ray://) driver: not on any node of the cluster


def _is_loopback(address: str) -> bool:
    host = urlsplit(address if "://" in address else f"//{address}").hostname or ""
    return host in ("127.0.0.1", "localhost", "::1")


@contextlib.contextmanager
def _loopback_node() -> Iterator[None]:
    """While Ray starts or joins a cluster on this machine's loopback address. Ray turns 127.0.0.1 into the
    machine's network address (and binds there) unless told it runs as a single desktop machine, its mode for
    macOS and Windows: the switch is read from the environment when Ray is imported, so it is set both in the
    environment (for the Ray processes started from here) and on Ray's constant (this process may have imported
    Ray already). Without it a driver would not find its node, and a local cluster would listen on the network."""
    constants: Any = None
    with contextlib.suppress(ImportError):  # a Ray without that module: the environment is all there is to set
        constants = importlib.import_module("ray._private.ray_constants")
    name = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
    before_env, before = os.environ.get(name), getattr(constants, "ENABLE_RAY_CLUSTER", None)
    os.environ[name] = "0"
    if before is not None:
        constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if before_env is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before_env
        if before is not None:
            constants.ENABLE_RAY_CLUSTER = before


@contextlib.contextmanager
def connected(options: RayOptions) -> Iterator[Cluster]:
    """Connect to the cluster (``ray.init``), or start one in this process for ``"local"``; a connection this
    process already has (a notebook's, a test's) is used as it is. What this call started it also shuts down."""
    try:
        import ray
    except ImportError:
        raise ImportError(INSTALL_HINT) from None
    started = False
    if options.dashboard and options.address == LOCAL and importlib.util.find_spec("aiohttp") is None:
        raise ImportError("Ray's dashboard (--ray-dashboard) needs: pip install 'ray[default]'")  # before Ray says it
    if not ray.is_initialized():
        # Ray reports usage statistics unless told not to; a judge's runs may be offline or confidential
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        common: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False}
        try:
            if options.address == LOCAL:
                with _loopback_node():
                    # address="local": a new cluster even when one runs on this machine (without an address, Ray
                    # joins the latest cluster started here, /tmp/ray/ray_current_cluster: anyone's)
                    ray.init(address="local", num_cpus=max(os.cpu_count() or 1, options.workers or 0),
                             _node_ip_address="127.0.0.1",
                             include_dashboard=options.dashboard, dashboard_host="127.0.0.1",
                             # records and shards are small: a small object store keeps a laptop's memory free
                             object_store_memory=256 * 1024**2, **common)
            elif _is_loopback(options.address):
                with _loopback_node():
                    ray.init(address=options.address, **common)
            else:
                ray.init(address=options.address, **common)
        except Exception as err:  # no cluster there, a version mismatch, the dashboard's packages missing
            hint = " (Ray's dashboard needs: pip install 'ray[default]')" \
                if options.dashboard and "dashboard" in str(err).lower() else ""
            raise ConnectionError(f"Ray cluster {redact_url(options.address)}: {_first_line(err)}{hint}") from None
        started = True
    try:
        nodes = [node for node in ray.nodes() if node.get("Alive")]
        remote = options.address.startswith("ray://")  # a Ray Client driver is on no node of the cluster
        driver_node = "" if remote else ray.get_runtime_context().get_node_id()
        yield Cluster(address=options.address, nodes=len(nodes),
                      cpus=int(sum(node.get("Resources", {}).get("CPU", 0) for node in nodes)),
                      driver_node=driver_node, remote_driver=remote)
    finally:
        if started:
            ray.shutdown()


# --- where the shared state lives ----------------------------------------------------------------------------


@dataclass
class SharedState:
    """The checkpoint store and the call cache as every worker reaches them, and whether they pin the workers to
    this machine (a SQLite file is on one machine)."""

    checkpoint: str
    cache: bool | str
    on_this_machine: bool


def shared_state(run: Run, cluster: Cluster) -> SharedState:
    """Where the workers find the run's checkpoints and call cache; ValueError when a cluster of several nodes
    would have to share a file. Default cache: the run directory's SQLite file on one node; on several, a table
    in the checkpoints' PostgreSQL database."""
    from jurygraph.llm.cache_postgres import is_postgres_url

    spread = cluster.nodes > 1 or cluster.remote_driver
    where = "a Ray Client driver (ray://)" if cluster.remote_driver else f"a cluster of {cluster.nodes} nodes"
    checkpoint = str(run.checkpoint) if run.checkpoint else str((run.out / CHECKPOINTS).resolve())
    if spread and not is_postgres_url(checkpoint):
        raise ValueError(f"--ray with {where} needs shared checkpoints: pass --checkpoint postgresql://... "
                         "(a SQLite file is on one machine; see the README, 'A run on a Ray cluster')")
    cache: bool | str
    if not run.cache:
        cache = False
    elif run.cache is True:
        cache = checkpoint if spread else str((run.out / CACHE).resolve())
    elif is_postgres_url(run.cache):
        cache = str(run.cache)
    elif spread:
        raise ValueError(f"--cache {run.cache}: a SQLite file is on one machine and {where} needs a cache every "
                         "node reaches: give --cache postgresql://..., or leave --cache out to use the "
                         "checkpoints' database")
    else:
        cache = str(Path(run.cache).resolve())
    files = not is_postgres_url(checkpoint) or (isinstance(cache, str) and not is_postgres_url(cache))
    return SharedState(checkpoint=checkpoint, cache=cache, on_this_machine=files)


# --- the actors: the inbox records come through, and the budget -----------------------------------------------


class Inbox:
    """Where workers put each finished item's record; the driver takes them in batches (an async Ray actor)."""

    def __init__(self) -> None:
        self._messages: list[tuple[Any, ...]] = []
        self._arrived: asyncio.Event | None = None

    def _event(self) -> asyncio.Event:
        if self._arrived is None:
            self._arrived = asyncio.Event()
        return self._arrived

    async def put(self, *message: Any) -> None:
        self._messages.append(message)
        self._event().set()

    async def take(self, wait: float) -> list[tuple[Any, ...]]:
        """Every message so far, waiting up to ``wait`` seconds for the first."""
        if not self._messages and wait > 0:
            arrived = self._event()
            arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(arrived.wait(), wait)
        messages, self._messages = self._messages, []
        return messages


class ClusterGates(ProviderGates):
    """The provider gates of a worker: every in-flight slot and rate token comes from the run's one budget actor
    (:class:`SharedBudget`), for this shard attempt."""

    def __init__(self, budget: Any, limits: Mapping[str, ProviderLimit], shard: str = "", token: str = "") -> None:
        # not ProviderGates.__init__: these gates hold no local state (and must pickle to reach the workers)
        self._limits = dict(limits)
        self._budget, self._shard, self._token = budget, shard, token

    def for_attempt(self, shard: str, token: str) -> ClusterGates:
        return ClusterGates(self._budget, self._limits, shard, token)

    def gate(self, provider: str) -> _BudgetGate | None:  # type: ignore[override]
        key = self.key(provider)
        return None if key is None else _BudgetGate(self._budget, key, self._shard, self._token)


class _BudgetGate:
    """One request's pass through the budget: a slot and a rate token before it is sent, the slot back after.
    A request cancelled while it waits may still be granted its slot: the attempt's end gives it back."""

    def __init__(self, budget: Any, key: str, shard: str, token: str) -> None:
        self._budget, self._args = budget, (key, shard, token)

    async def __aenter__(self) -> _BudgetGate:
        await self._budget.acquire.remote(*self._args)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._budget.release.remote(*self._args)  # not awaited: the reply need not wait for the budget's receipt

    def __enter__(self) -> _BudgetGate:
        import ray

        ray.get(self._budget.acquire.remote(*self._args))
        return self

    def __exit__(self, *exc: object) -> None:
        self._budget.release.remote(*self._args)


# --- a shard, in a worker --------------------------------------------------------------------------------------


def judge_shard(job: Any, items: Sequence[EvalItem], shard: str, inbox: Any, budget: Any) -> dict[str, Any]:
    """The Ray task: judge a shard with the ordinary runner, each record sent to the inbox as its item finishes.
    An attempt draws a token: the budget then knows the shard's earlier attempts are dead, and the driver counts
    each attempt's counters once."""
    import ray

    token = uuid.uuid4().hex
    worker = {"node": ray.util.get_node_ip_address(), "pid": os.getpid()}
    cpu = time.process_time()  # the judging's CPU (a worker busy on its own CPU is a figure worth seeing)
    if budget is not None:
        ray.get(budget.begin.remote(shard, token))
        gates = job.context.gates.for_attempt(shard, token)
        job = dataclasses.replace(job, context=dataclasses.replace(job.context, gates=gates))
    # the attempt says it began before it judges anything: a worker that dies before its first record is still a
    # shard judged again (the driver counts each attempt)
    ray.get(inbox.put.remote(shard, token, worker, None, {}))
    sent: list[Any] = []

    def deliver(record: dict[str, Any], counters: dict[str, Any]) -> None:
        counters = {**counters, "cpu_seconds": time.process_time() - cpu}
        sent.append(inbox.put.remote(shard, token, worker, record, counters))

    try:
        counters = asyncio.run(job.judge(items, deliver))
    finally:
        if budget is not None:
            budget.end.remote(shard, token)
        with contextlib.suppress(Exception):  # a failing shard's error is what matters, not a lost message
            ray.get(sent)
    return {"shard": shard, "token": token, "worker": worker,
            "counters": {**counters, "cpu_seconds": time.process_time() - cpu}}


# --- the driver ------------------------------------------------------------------------------------------------


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _worker_name(worker: Mapping[str, Any]) -> str:
    return f"{worker['node']}:{worker['pid']}"


@dataclass
class _Attempts:
    """What the driver knows of each shard attempt and each worker process."""

    counters: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (shard, token) -> latest
    worker_of: dict[tuple[str, str], str] = field(default_factory=dict)
    workers: dict[str, dict[str, Any]] = field(default_factory=dict)  # worker -> node, pid, items, usage, CPU

    def seen(self, shard: str, token: str, worker: Mapping[str, Any], counters: Mapping[str, Any]) -> str:
        name = _worker_name(worker)
        self.counters[(shard, token)] = dict(counters)  # cumulative: the latest replaces the earlier
        self.worker_of[(shard, token)] = name
        self.workers.setdefault(name, {"node": worker["node"], "pid": worker["pid"], "items": 0,
                                       **dict.fromkeys(USAGE_COUNTED, 0)})
        return name

    def began(self, shard: str, token: str, worker: Mapping[str, Any]) -> None:
        """An attempt of a shard began (its counters come with its records)."""
        if (shard, token) not in self.counters:
            self.seen(shard, token, worker, {})

    def wrote(self, name: str, record: Mapping[str, Any]) -> None:
        entry = self.workers[name]
        entry["items"] += 1
        for usage in (record.get("usage") or {}).values():
            for key in USAGE_COUNTED:
                entry[key] += int(usage.get(key, 0))

    def totals(self) -> tuple[Counter[str], int, list[dict[str, Any]]]:
        """HTTP attempts by model, cache hits, and one entry per worker process."""
        attempts: Counter[str] = Counter()
        hits = 0
        per_worker: dict[str, dict[str, Any]] = {
            name: {**entry, "shards": 0, "attempts": 0, "cache_hits": 0, "cpu_seconds": 0.0}
            for name, entry in self.workers.items()}
        for key, counters in self.counters.items():
            entry = per_worker[self.worker_of[key]]
            entry["shards"] += 1
            entry["attempts"] += sum(counters.get("attempts", {}).values())
            entry["cache_hits"] += int(counters.get("cache_hits", 0))
            entry["cpu_seconds"] = round(entry["cpu_seconds"] + float(counters.get("cpu_seconds", 0.0)), 3)
            attempts.update(counters.get("attempts", {}))
            hits += int(counters.get("cache_hits", 0))
        return attempts, hits, [{"worker": name, **entry} for name, entry in per_worker.items()]

    def retried_shards(self) -> int:
        return sum(count - 1 for count in Counter(shard for shard, _ in self.counters).values() if count > 1)


class _Driver:
    """The driver's side of one run: shards out, records in, written once each."""

    def __init__(self, options: RayOptions, run: Run, graph: Any, cluster: Cluster) -> None:
        self.options, self.run, self.graph, self.cluster = options, run, graph, cluster
        self.attempts = _Attempts()
        self.written: set[str] = set()
        self.writable = True
        self.shards = 0
        self.held: EvalItem | None = None  # an item the budget keeps out until items in flight finish

    async def judge(self) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from jurygraph.running.shards import ShardJob

        run, cluster = self.run, self.cluster
        state = shared_state(run, cluster)
        limits = run.context.gates.limits if run.context.gates is not None else {}
        context = dataclasses.replace(run.context, cache=None, gates=None)
        try:  # before anything is written; Ray's own error for this is a page long
            ray.cloudpickle.dumps(ShardJob.of(run, self.graph, context=context, checkpoint="", cache=False))
        except Exception as err:  # a chat model object or a callback that cannot leave this process
            raise ValueError(f"with ray=, the graph and the context go to other processes and must pickle (model "
                             f"specs such as 'openai:gpt-4o-mini' do): {_first_line(err)}") from None
        await ShardJob.of(run, self.graph, context=context, checkpoint=state.checkpoint, cache=False).prepare_stores()
        run.cache = state.cache  # the driver opens the workers' cache too: its table exists before they start
        run.start()
        if not state.on_this_machine:  # workers on other machines record what they pay in the shared database
            run.use_remote_ledger(state.cache if isinstance(state.cache, str) else state.checkpoint)
        workers = self.options.workers or max(1, cluster.cpus)
        size = self._shard_size(workers)
        run.manifest.ray = {
            "address": redact_url(cluster.address), "nodes": cluster.nodes, "workers": workers, "shard_size": size,
            "checkpoint": redact_url(state.checkpoint),
            "cache": redact_url(state.cache) if isinstance(state.cache, str) else state.cache,
            "limits": "cluster-wide" if limits else None,
        }
        inbox: Any = ray.remote(Inbox).options(num_cpus=0, max_concurrency=1000).remote()
        budget: Any = ray.remote(SharedBudget).options(num_cpus=0, max_concurrency=100_000).remote(limits) \
            if limits else None
        if budget is not None:
            context = dataclasses.replace(context, gates=ClusterGates(budget, limits))
        job = ray.put(ShardJob.of(run, self.graph, context=context, checkpoint=state.checkpoint, cache=state.cache))
        strategy: Any = NodeAffinitySchedulingStrategy(cluster.driver_node, soft=False) if state.on_this_machine \
            else "SPREAD"
        task = ray.remote(judge_shard).options(num_cpus=1, max_retries=self.options.max_retries,
                                               retry_exceptions=False, scheduling_strategy=strategy)
        pending: dict[Any, str] = {}
        try:
            await self._drive(task, job, inbox, budget, workers, size, pending)
        except asyncio.CancelledError:
            run.summary.interrupted = True
        finally:
            await self._stop(pending, inbox, budget)
            self._paid()
            run.close_outputs()
            _, hits, per_worker = self.attempts.totals()
            run.workers_cache_hits += hits
            run.manifest.ray.update(shards=self.shards, retried_shards=self.attempts.retried_shards())
            run.manifest.workers = per_worker
            for actor in (inbox, budget):
                if actor is not None:
                    with contextlib.suppress(Exception):
                        ray.kill(actor)

    def _shard_size(self, workers: int) -> int:
        if self.options.shard_size:
            return self.options.shard_size
        # A worker's slots idle at the end of each shard while its last items finish (about half an item's time
        # per slot): a shard of k waves loses ~1/(2k) of its worker's time, so shards are long. But the run ends
        # with the last shards, and a worker that starts late (its imports, a retry) must find shards left:
        # about 4 per worker, between 1 and 16 waves of ``concurrency`` items.
        concurrency = self.run.concurrency
        if self.run.total is None:  # a stream of unknown length
            return 4 * concurrency
        todo = max(1, self.run.total - len(self.run.finished))
        return max(concurrency, min(16 * concurrency, math.ceil(todo / (4 * workers))))

    def _next_shard(self, size: int, running: int) -> list[EvalItem]:
        """Up to ``size`` items still to judge (an error reading them stops the run, as in one process), each
        admitted by the run's budget (``--max-cost``): an item it keeps out while others are in flight is held
        for the next shard; one it refuses with none in flight (no shard ``running``, none in this one) stops
        the run's new work; one that alone would pass the budget is skipped (held back)."""
        items: list[EvalItem] = []
        while len(items) < size and not self.run.stopped:
            item, self.held = self.held or self.run.next_or_stop(), None
            if item is None:
                break
            answer = self.run.admit(item, wait=bool(running or items))
            if answer == "wait":
                self.held = item
                break
            if answer == "start":
                items.append(item)
        return items

    def _paid(self) -> None:
        """What the workers have recorded in the ledger (each call as it was paid, a dead worker's included) is
        the run's spend: the budget admits the next items against it, and spend.json follows."""
        self.run.refresh_spend()

    async def _drive(self, task: Any, job: Any, inbox: Any, budget: Any, workers: int, size: int,
                     pending: dict[Any, str]) -> None:
        import ray

        more = True
        while True:
            while more and not self.run.aborted and len(pending) < workers:
                items = self._next_shard(size, len(pending))
                more = self.held is not None or (len(items) == size and not self.run.stopped)
                if not items:
                    break
                shard = f"s{self.shards}"
                self.shards += 1
                pending[task.remote(job, items, shard, inbox, budget)] = shard
            if not pending or self.run.aborted:
                return
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
            # a finished shard's records are all in the inbox (its task waits for its puts before it returns)
            try:
                messages = await inbox.take.remote(0 if ready else 0.2)
            except ray.exceptions.RayError as err:  # the inbox's node died: the cluster is failing
                self.run.stop(f"the Ray cluster failed: {_first_line(err)}")
                return
            # the spend first: a record's calls were recorded before it was sent, so spend.json never counts less
            # than the results written
            self._paid()
            self._receive(messages)
            for ref in ready:
                shard = pending.pop(ref)
                try:
                    result = await ref
                except Exception as err:
                    self._failed(shard, err)
                    return
                self.attempts.seen(shard, result["token"], result["worker"], result["counters"])
            self._paid()

    def _receive(self, messages: list[tuple[Any, ...]]) -> None:
        from jurygraph.running.run import RunAborted

        for shard, token, worker, record, counters in messages:
            if record is None:  # an attempt began
                self.attempts.began(shard, token, worker)
                continue
            name = self.attempts.seen(shard, token, worker, counters)
            # a repeat comes from a retried shard (the first record is kept); a finished item is written even
            # when the run is stopping, unless the results file itself failed
            if record["id"] in self.written or not self.writable:
                continue
            try:
                self.run.deliver(record, paid_before=bool(counters.get("paid_before")))
            except RunAborted as stop:
                self.run.aborted.append(stop)
                self.writable = False
                continue
            self.written.add(record["id"])
            self.attempts.wrote(name, record)

    def _failed(self, shard: str, err: Exception) -> None:
        """A shard that raised: the run's own stop (RunAborted: a rejected key, a full disk), the shared stores
        out of a worker's reach (the run stops), an error of ours (raised again), or a worker that kept dying
        (the run stops; a resume continues it)."""
        from ray.exceptions import RayTaskError

        cause = err.cause if isinstance(err, RayTaskError) else None
        if cause is not None and self.run.stopped_by(cause):
            return
        if isinstance(cause, OSError):  # the checkpoint or cache database went away under a worker
            self.run.stop(f"a worker of shard {shard}: {type(cause).__name__}: {_first_line(cause)}", exit_code=2)
            return
        if cause is not None:
            raise cause
        self.run.stop(f"shard {shard} was given up after {self.options.max_retries + 1} attempts "
                      f"({type(err).__name__}: {_first_line(err)})")

    async def _stop(self, pending: dict[Any, str], inbox: Any, budget: Any) -> None:
        """Cancel the shards still running (a stop or an interruption), keep the records they had already sent,
        and give their in-flight slots back. Never waits long nor fails: on Ctrl-C in a terminal a local
        cluster's own processes get the signal too and may be gone. A record sent after this is not lost: its
        item's checkpoint answers the resume."""
        import ray

        if not pending:
            return
        for ref in pending:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        with contextlib.suppress(Exception, asyncio.CancelledError):
            self._receive(await asyncio.wait_for(_awaited(inbox.take.remote(0.5)), 5))
        if budget is not None:
            for shard in pending.values():
                with contextlib.suppress(Exception):
                    budget.end.remote(shard)
        pending.clear()


async def _awaited(ref: Any) -> Any:
    return await ref

