"""The spend ledger: every paid call of a run, recorded once, durably, before its answer is used.

One row per payment: an answered call (online, a Ray worker's, an escalation's, a format re-ask), a batch line
collected from the provider, or a failed call's HTTP attempts (no tokens, only ``attempts``). A row says which run,
invocation and process paid, for which item, agent and model, the requests, tokens (the part through a batch), the
USD at the prices of the time (None for a model without a price), and the HTTP attempts the call took.

Where it lives. ``RUN_DIR/ledger.sqlite`` (:data:`jurygraph.running.rundir.LEDGER`): a SQLite table in WAL mode,
written by every process judging the run on this machine (the runner, its batch rounds, the Ray workers of a
cluster on one node). Workers on other machines cannot reach the run directory: they write the same rows into a
PostgreSQL table (``jurygraph_ledger``, in the run's shared cache database, keyed by the run's id), which the
driver copies into the run directory's file as it goes and whenever a run starts (:meth:`Ledger.copy_from`).

Durable before used. :meth:`Ledger.record` commits the row before it returns, and the caller (``JuryContext.on_usage``,
called by :mod:`jurygraph.llm.calls` as a call is paid, before its answer is cached or read) returns only then: a
``kill -9`` can lose only a call in flight (answered by the server, not yet recorded), never one whose answer the
run used or cached. The commit survives the process's death (SQLite's WAL, ``synchronous=NORMAL``, as the call
cache); a power loss may lose the last commits (an fsync per call costs ~1-3 ms on this project's VM).

Why not the call cache itself. The cache has one row per distinct call, not per payment: a call paid twice (two
workers at the same moment, a re-ask after a kill between the payment and the cache write) is one row, a cache
shared by several runs holds answers this run never paid for, and a ``--no-cache`` run pays without caching. The
ledger is written beside the cache write, in the same step of the call, so the two agree by construction; the
cache is read only to reconcile a run made before the ledger existed (:meth:`Ledger.seed_from_cache`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TABLE = "payments"
POSTGRES_TABLE = "jurygraph_ledger"
UNATTRIBUTED = "(batch answer not yet handed to its call)"  # the agent of a collected batch line until replayed
BEFORE_LEDGER = "(paid before the ledger)"  # the agent (and model) of what a run paid before its ledger existed
BEFORE_LEDGER_INVOCATION = -1  # and its invocation: none of those the manifest lists

_COLUMNS = ("uid", "run", "invocation", "origin", "at", "item", "agent", "role", "model", "requests",
            "input_tokens", "output_tokens", "batch_requests", "batch_input_tokens", "batch_output_tokens",
            "cost_usd", "attempts", "key", "source")
_SUMS = ("requests", "input_tokens", "output_tokens", "batch_requests", "batch_input_tokens", "batch_output_tokens",
         "attempts")


@dataclass(frozen=True)
class Payment:
    """One row of the ledger. ``source``: ``online`` (a call answered), ``batch`` (a batch line collected),
    ``failed`` (a call that raised: its attempts only), ``cache`` or ``carried`` (a run made before the ledger:
    see :meth:`Ledger.seed_from_cache`)."""

    model: str
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    batch_requests: int = 0
    batch_input_tokens: int = 0
    batch_output_tokens: int = 0
    cost_usd: float | None = None
    attempts: int = 0
    item: str | None = None
    agent: str | None = None
    role: str | None = None
    key: str | None = None  # the call's cache key (a batch line's custom_id)
    source: str = "online"
    uid: str = ""  # unique over every ledger: a batch line's is its batch and custom_id, so collecting it twice is
    # one row


def payment_row(payment: Payment, **given: Any) -> tuple[Any, ...]:
    """A payment as a row of ``_COLUMNS``, the columns ``given`` set. A payment's fields are plain values: read one
    by one, not copied deep by ``asdict`` (~0.1 ms of CPU per paid call at zero latency)."""
    return tuple(given[name] if name in given else getattr(payment, name) for name in _COLUMNS)


@dataclass
class Totals:
    """Sums over ledger rows. ``cost_usd`` is None when no row had a price."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    batch_requests: int = 0
    batch_input_tokens: int = 0
    batch_output_tokens: int = 0
    attempts: int = 0
    cost_usd: float | None = None

    def add(self, other: Totals) -> None:
        for name in _SUMS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        if other.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + other.cost_usd

    @classmethod
    def of(cls, payment: Payment) -> Totals:
        return cls(**{name: getattr(payment, name) for name in (*_SUMS, "cost_usd")})

    def usage(self) -> dict[str, Any]:
        """As a usage entry: requests and tokens, the batch part only where there is one."""
        out: dict[str, Any] = {"requests": self.requests, "input_tokens": self.input_tokens,
                               "output_tokens": self.output_tokens}
        if self.batch_requests:
            out.update(batch_requests=self.batch_requests, batch_input_tokens=self.batch_input_tokens,
                       batch_output_tokens=self.batch_output_tokens)
        return out


class Breakdown:
    """Ledger sums by (invocation, agent, role, model, paid) and the first row of each, from which the manifest's
    ``usage_by_agent``, ``usage_by_model`` and ``attempts_by_model`` are read (of one invocation, or every one), in
    the order each was first paid. Filled by :meth:`Ledger.breakdown` (one scan), or row by row as a
    :class:`~jurygraph.running.budget.SpendMeter` counts them (then the end of a run reads no row again)."""

    def __init__(self) -> None:
        self.groups: dict[tuple[Any, ...], tuple[int, Totals]] = {}

    def add(self, key: tuple[Any, ...], seq: int, totals: Totals) -> None:
        """``key``: (invocation, agent, role, model, paid: whether requests > 0)."""
        key = (*key[:4], bool(key[4]))
        first, summed = self.groups.get(key) or (seq, Totals())
        summed.add(totals)
        self.groups[key] = (min(first, seq), summed)

    def add_row(self, row: Mapping[str, Any], totals: Totals) -> None:
        """One ledger row (as :meth:`Ledger.rows_after` gives it) and its counts."""
        self.add((row["invocation"], row["agent"], row["role"], row["model"], (row["requests"] or 0) > 0),
                 row["seq"], totals)

    def _by(self, fields: tuple[int, ...], invocation: int | None, paid_only: bool) -> list[tuple[tuple[Any, ...],
                                                                                                   Totals]]:
        merged: dict[tuple[Any, ...], tuple[int, Totals]] = {}
        for key, (first, totals) in self.groups.items():
            if (paid_only and not key[4]) or (invocation is not None and key[0] != invocation):
                continue
            by = tuple(key[i] for i in fields)
            seen, summed = merged.get(by) or (first, Totals())
            summed.add(totals)
            merged[by] = (min(seen, first), summed)
        return [(by, totals) for by, (_, totals) in sorted(merged.items(), key=lambda kv: kv[1][0])]

    def totals(self) -> Totals:
        """Every row's sums (:meth:`Ledger.totals` without a condition)."""
        summed = Totals()
        for _, totals in sorted(self.groups.values(), key=lambda group: group[0]):
            summed.add(totals)
        return summed

    def usage_by_agent(self, invocation: int | None = None) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for (agent, role, model), totals in self._by((1, 2, 3), invocation, paid_only=True):
            entry = out.setdefault(str(agent), {"role": role, "model": model})
            entry.update(role=role or entry["role"], model=model)
            for key, value in totals.usage().items():
                entry[key] = entry.get(key, 0) + value
        return out

    def usage_by_model(self, invocation: int | None = None) -> dict[str, dict[str, Any]]:
        return {str(model): totals.usage() for (model,), totals in self._by((3,), invocation, paid_only=True)}

    def attempts_by_model(self, invocation: int | None = None) -> dict[str, int]:
        return {str(model): totals.attempts for (model,), totals in self._by((3,), invocation, paid_only=False)
                if totals.attempts}


def origin() -> str:
    """Who pays: this machine and process."""
    return f"{socket.gethostname()}:{os.getpid()}"


class Ledger:
    """The run's ledger in a SQLite file, as one process writes and reads it (several processes may share the file:
    each commit is one row, and SQLite's WAL serialises the writers)."""

    def __init__(self, path: str | Path, *, run: str = "", invocation: int = 0) -> None:
        self.path, self.run, self.invocation = Path(path), run, invocation
        self.origin = origin()
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=60)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        columns = ", ".join(f"{name} {_sql_type(name)}" for name in _COLUMNS)
        self._db.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (seq INTEGER PRIMARY KEY AUTOINCREMENT, {columns})")
        self._db.execute(f"CREATE INDEX IF NOT EXISTS {TABLE}_key ON {TABLE} (key)")

    # --- writing ---

    def record(self, payment: Payment) -> None:
        """Commit one row (returns once it is on disk, as far as a process's death goes)."""
        self.record_many([payment])

    def record_many(self, payments: Iterable[Payment], invocation: int | None = None) -> int:
        """Commit rows in one transaction (of this ledger's invocation, or ``invocation``); a row whose ``uid`` is
        already there is skipped. Returns rows added."""
        rows = [self._row(p, self.invocation if invocation is None else invocation) for p in payments]
        if not rows:
            return 0
        marks = ", ".join("?" for _ in _COLUMNS)
        with self._lock:
            before = self._db.total_changes
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(f"INSERT OR IGNORE INTO {TABLE} ({', '.join(_COLUMNS)}) VALUES ({marks})", rows)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return self._db.total_changes - before

    def _row(self, payment: Payment, invocation: int) -> tuple[Any, ...]:
        return payment_row(payment, uid=payment.uid or uuid.uuid4().hex, run=self.run, invocation=invocation,
                           origin=self.origin, at=time.time())

    def attribute(self, key: str, item: str, agent: str, role: str) -> None:
        """A collected batch answer was handed to its call: its row gets the call's item and agent (the first call
        that read it; identical calls batched as one line share one payment)."""
        with self._lock:
            self._db.execute(f"UPDATE {TABLE} SET item = ?, agent = ?, role = ? WHERE seq = (SELECT seq FROM {TABLE} "
                             "WHERE key = ? AND source = 'batch' AND agent IS NULL ORDER BY seq LIMIT 1)",
                             (item, agent, role, key))

    # --- reading ---

    def last_seq(self) -> int:
        with self._lock:
            return int(self._db.execute(f"SELECT COALESCE(MAX(seq), 0) FROM {TABLE}").fetchone()[0])

    def totals(self, where: str = "", params: tuple[Any, ...] = ()) -> Totals:
        [(_, totals)] = list(self.grouped("", where, params)) or [((), Totals())]
        return totals

    def grouped(self, by: str, where: str = "", params: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...],
                                                                                                  Totals]]:
        """Sums grouped by the comma-separated columns ``by`` (none: one group), of the rows ``where`` says."""
        sums = ", ".join(f"COALESCE(SUM({name}), 0)" for name in _SUMS)
        keys = f"{by}, " if by else ""
        sql = f"SELECT {keys}{sums}, SUM(cost_usd) FROM {TABLE}" + (f" WHERE {where}" if where else "")
        if by:
            sql += f" GROUP BY {by} ORDER BY MIN(seq)"
        width = len(by.split(",")) if by else 0
        with self._lock:
            rows = self._db.execute(sql, params).fetchall()
        for row in rows:
            values = dict(zip(_SUMS, row[width:width + len(_SUMS)], strict=True))
            yield tuple(row[:width]), Totals(**{k: int(v) for k, v in values.items()}, cost_usd=row[-1])

    def rows_after(self, seq: int) -> list[dict[str, Any]]:
        """Rows added after ``seq`` (their item, invocation and counts), oldest first."""
        with self._lock:
            cursor = self._db.execute(f"SELECT seq, {', '.join(_COLUMNS)} FROM {TABLE} WHERE seq > ? ORDER BY seq",
                                      (seq,))
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def usage_by_agent(self, invocation: int | None = None) -> dict[str, dict[str, Any]]:
        """Paid calls per agent (of one invocation, or every one): its role, model (the latest, should a resume have
        moved it) and counts, as the manifest's ``usage_by_agent``. A row without an agent (a run's spend from before
        the ledger) is under its own name."""
        return self.breakdown().usage_by_agent(invocation)

    def usage_by_model(self, invocation: int | None = None) -> dict[str, dict[str, Any]]:
        """Paid calls per model label, as the manifest's ``usage_by_model``."""
        return self.breakdown().usage_by_model(invocation)

    def attempts_by_model(self, invocation: int | None = None) -> dict[str, int]:
        """HTTP attempts per model label (retries and failed calls included)."""
        return self.breakdown().attempts_by_model(invocation)

    def breakdown(self) -> Breakdown:
        """The sums by invocation, agent, role and model (one scan of the ledger), which the ``usage_by_*`` views
        are read from."""
        found = Breakdown()
        sums = ", ".join(f"COALESCE(SUM({name}), 0)" for name in _SUMS)
        with self._lock:
            rows = self._db.execute(f"SELECT invocation, agent, role, model, requests > 0, MIN(seq), {sums}, "
                                    f"SUM(cost_usd) FROM {TABLE} GROUP BY invocation, agent, role, model, "
                                    "requests > 0").fetchall()
        for row in rows:
            values = dict(zip(_SUMS, row[6:6 + len(_SUMS)], strict=True))
            found.add(tuple(row[:5]), row[5], Totals(**{k: int(v) for k, v in values.items()}, cost_usd=row[-1]))
        return found

    def empty(self) -> bool:
        return self.last_seq() == 0

    # --- reconciling ---

    def copy_from(self, remote: PostgresLedger) -> int:
        """Copy the rows workers on other machines wrote into ``remote`` for this run and not copied yet (all of
        them at this process's first copy; rows already here are skipped by their uid). Returns rows added."""
        return self.record_many_raw(remote.rows_to_copy(self.run))

    def record_many_raw(self, rows: Iterable[Mapping[str, Any]]) -> int:
        """Rows as another ledger stored them (their own run, invocation, origin, time and uid), added as they are."""
        values = [tuple(row[name] for name in _COLUMNS) for row in rows]
        if not values:
            return 0
        marks = ", ".join("?" for _ in _COLUMNS)
        with self._lock:
            before = self._db.total_changes
            self._db.executemany(f"INSERT OR IGNORE INTO {TABLE} ({', '.join(_COLUMNS)}) VALUES ({marks})", values)
            return self._db.total_changes - before

    def seed_from_cache(self, answers: Iterable[tuple[str, str, Mapping[str, Any]]], carried: Totals,
                        price: Any) -> Totals:
        """Seed the ledger of a run made before it existed (done once, when the ledger is empty): each answer in the
        run's own cache, ``(key, model, {"input_tokens", "output_tokens", "requests"})``, is a call the run paid
        (``source="cache"``, priced now by ``price(model) -> (dict or None)``); what the run's old ``spend.json``
        counted beyond them (``carried``: calls whose answers were not cached) is one row ``source="carried"``.
        Returns what was seeded."""
        from jurygraph.llm.pricing import entry_cost

        payments = []
        for key, model, usage in answers:
            entry = {"input_tokens": usage.get("input_tokens", 0), "output_tokens": usage.get("output_tokens", 0)}
            prices = price(model)
            payments.append(Payment(model, int(usage.get("requests", 1)), entry["input_tokens"],
                                    entry["output_tokens"], cost_usd=entry_cost(entry, prices) if prices else None,
                                    agent=BEFORE_LEDGER, key=key, source="cache", uid=f"cache/{key}"))
        seeded = Totals()
        for payment in payments:
            seeded.add(Totals.of(payment))
        rest = {name: max(0, getattr(carried, name) - getattr(seeded, name)) for name in _SUMS}
        cost = None if carried.cost_usd is None else max(0.0, carried.cost_usd - (seeded.cost_usd or 0.0))
        if any(rest.values()) or cost:
            payments.append(Payment(BEFORE_LEDGER, **rest, cost_usd=cost or None, agent=BEFORE_LEDGER,
                                    source="carried", uid="carried"))
            seeded.add(Totals(**rest, cost_usd=cost or None))
        self.record_many(payments, invocation=BEFORE_LEDGER_INVOCATION)
        return seeded

    def close(self) -> None:
        with self._lock:
            self._db.close()


class PostgresLedger:
    """The ledger rows of workers on other machines: a PostgreSQL table (``jurygraph_ledger``) in the run's shared
    cache database, keyed by run. Workers :meth:`record`; the driver copies them into the run directory's ledger."""

    def __init__(self, url: str, *, run: str = "", invocation: int = 0) -> None:
        import psycopg
        from psycopg import errors

        from jurygraph.llm.redact import redact_text, redact_url

        self.url, self.run, self.invocation, self.origin = url, run, invocation, origin()
        try:
            self._conn = psycopg.connect(url, autocommit=True, connect_timeout=10)
            columns = ", ".join(f"{name} {_sql_type(name, postgres=True)}" for name in _COLUMNS)
            # workers that start together may all create it: the losers' duplicate is no error
            with contextlib.suppress(errors.UniqueViolation, errors.DuplicateTable):
                self._conn.execute(f"CREATE TABLE IF NOT EXISTS {POSTGRES_TABLE} (seq BIGSERIAL PRIMARY KEY, "
                                   f"{columns}, copied BOOLEAN NOT NULL DEFAULT FALSE)")
            with contextlib.suppress(errors.UniqueViolation, errors.DuplicateTable, errors.DuplicateObject):
                # a table made before the driver marked what it copied
                self._conn.execute(f"ALTER TABLE {POSTGRES_TABLE} ADD COLUMN IF NOT EXISTS copied BOOLEAN NOT NULL "
                                   "DEFAULT FALSE")
                self._conn.execute(f"CREATE INDEX IF NOT EXISTS {POSTGRES_TABLE}_to_copy ON {POSTGRES_TABLE} (run) "
                                   "WHERE NOT copied")
        except psycopg.Error as err:
            text = redact_text(str(err)).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ConnectionError(f"spend ledger {redact_url(url)}: {text}") from None
        self._lock = threading.Lock()
        self._copied_all = False  # rows_to_copy has read every row of the run once

    def record(self, payment: Payment) -> None:
        self.record_many([payment])

    def record_many(self, payments: Iterable[Payment]) -> int:
        rows = []
        for payment in payments:
            rows.append(payment_row(payment, uid=payment.uid or uuid.uuid4().hex, run=self.run,
                                    invocation=self.invocation, origin=self.origin, at=time.time()))
        if not rows:
            return 0
        marks = ", ".join("%s" for _ in _COLUMNS)
        with self._lock, self._conn.cursor() as cursor:
            cursor.executemany(f"INSERT INTO {POSTGRES_TABLE} ({', '.join(_COLUMNS)}) VALUES ({marks}) "
                               "ON CONFLICT (uid) DO NOTHING", rows)
        return len(rows)

    def attribute(self, key: str, item: str, agent: str, role: str) -> None:  # batch mode runs in one process
        return None

    def rows_to_copy(self, run: str) -> list[dict[str, Any]]:
        """The run's rows for the driver's ledger: at the first call every row (a driver killed between marking rows
        and storing them left some marked), then those not marked yet, each marked as it is read.

        Not "rows whose seq is above the last one read": workers' inserts commit out of their seq's order, so a row
        committed a moment late behind a higher seq would never be read (a two-node run lost 2 of 800 calls so)."""
        columns = ", ".join(_COLUMNS)
        with self._lock, self._conn.cursor() as cursor:
            if not self._copied_all:
                cursor.execute(f"UPDATE {POSTGRES_TABLE} SET copied = TRUE WHERE run = %s RETURNING {columns}", (run,))
                self._copied_all = True
            else:
                cursor.execute(f"UPDATE {POSTGRES_TABLE} SET copied = TRUE WHERE run = %s AND NOT copied "
                               f"RETURNING {columns}", (run,))
            return [dict(zip(_COLUMNS, row, strict=True)) for row in cursor.fetchall()]

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _sql_type(name: str, *, postgres: bool = False) -> str:
    if name == "uid":
        return "TEXT UNIQUE NOT NULL"
    if name in ("cost_usd", "at"):
        return "DOUBLE PRECISION" if postgres else "REAL"
    if name in (*_SUMS, "invocation"):
        return ("BIGINT" if postgres else "INTEGER") + " NOT NULL DEFAULT 0"
    return "TEXT"


def reconcile(ledger: Ledger, out: Path, *, own_cache: Any, models: Mapping[str, str],
              prices: Mapping[str, Any] | None) -> Totals | None:
    """Make a run's ledger whole when a run starts. A run made before the ledger existed has none: it is seeded from
    the run's own call cache (``own_cache``; None when the run used a cache shared with other runs, whose answers
    are not all this run's) and what its old ``spend.json`` counted beyond it (see :meth:`Ledger.seed_from_cache`);
    ``models``: the run's model labels, by which a cached answer's model is named and priced. A ledger that has rows
    needs nothing: every call was recorded before its answer was cached (a batch's lines before its "collected"
    event, which a resume collects again if it is missing). Returns what was seeded, or None."""
    from jurygraph.llm.pricing import model_name, price_of
    from jurygraph.running.rundir import read_spend

    if not ledger.empty():
        return None
    old = read_spend(out) or {}
    answers = list(own_cache.answers()) if own_cache is not None else []
    if not answers and not old:
        return None
    labels = {model_name(label): label for label in models.values()}
    carried = Totals(requests=int(old.get("requests", 0)), input_tokens=int(old.get("input_tokens", 0)),
                     output_tokens=int(old.get("output_tokens", 0)), batch_requests=int(old.get("batch_requests", 0)),
                     cost_usd=old.get("cost_usd") or None)
    named = [(key, labels.get(name, name), usage) for key, name, usage in answers]
    # an answer of a model the run does not name (its base URL moved since) is not priced: its price is not known
    return ledger.seed_from_cache(named, carried,
                                  lambda label: price_of(label, prices) if label in labels.values() else None)
