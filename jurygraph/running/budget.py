"""What a run has spent, and the budget that stops it (``--max-cost USD``, ``--max-total-tokens N``).

:class:`SpendMeter` hears every paid call as it is paid (``JuryContext.on_usage``, set per item by the runner) and
records it in the run's ledger (:mod:`jurygraph.running.ledger`) before the call's answer is used; its figures are
the ledger's sums, every invocation's and every process's (a Ray run's workers write the same ledger), and each
item in flight's. ``RUN_DIR/spend.json`` is their summary, handed to a writer thread by the process that writes the
run directory after each call it pays and whenever it reads what other processes paid (the thread writes at most
every ``SPEND_INTERVAL``, 0.1 s), and written before the run ends; every start recomputes it from the ledger.
Cache hits cost nothing and are not counted.

:class:`Budget` decides whether an item may start: only if what was spent, plus what the items in flight may still
spend, plus what this item may spend stays within every limit. What an item may spend (its *reserve*) is its own:
the item's calls rendered with replies at their output budget (loops at their longest; the dry run's rendering),
times ``RESERVE_MARGIN`` for the tokenizer's approximation (the run's cache is not consulted: a reserve is never 0);
an item that cannot be rendered takes the largest reserve of the run so far. Far from the limit an item no longer
than one already rendered, and with no more assistant turns (``--per-turn`` judges each), takes that one's reserve
(rendering costs ~2-4 ms a call); near it, every item is rendered. An item in flight may still spend its reserve
less what it has spent. An item whose reserve alone passes a limit is held back (it could never fit) and the run
goes on with the next; the first item that does not fit what is left stops the run from starting items (both are
named in the manifest's ``budget.held_back`` and in the line the run ends with, exit 3). The run can pass a limit
only when an item spends more than its reserve (a format re-ask); the end then says by how much (``budget.overrun``,
exit 3).

The budget is the run's, over every invocation: ``--resume RUN_DIR --max-cost HIGHER`` continues a run that stopped
at its budget, counting what the earlier invocations spent.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from jurygraph.judging.conversations import assistant_turns
from jurygraph.llm.pricing import entry_cost, price_of
from jurygraph.running.estimate import Estimate
from jurygraph.running.ledger import UNATTRIBUTED, Breakdown, Ledger, Payment, PostgresLedger, Totals
from jurygraph.running.rundir import SpendFigures, SpendFile, write_spend

RESERVE_MARGIN = 1.25
RENDER_WITHIN = 20  # render every item once what is left of a limit is within this many of the largest reserves


@dataclass
class Spend:
    """Requests, tokens and USD (None: no price known) paid or reserved, the part through a provider batch
    included in each."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    batch_requests: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def usd(self) -> float:
        return self.cost_usd or 0.0

    def add(self, other: Spend | Totals) -> None:
        for name in ("requests", "input_tokens", "output_tokens", "batch_requests"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        if other.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + other.cost_usd

    def scaled(self, factor: float) -> Spend:
        return Spend(round(self.requests * factor), round(self.input_tokens * factor),
                     round(self.output_tokens * factor), None if self.cost_usd is None else self.cost_usd * factor,
                     round(self.batch_requests * factor))

    def figures(self) -> SpendFigures:
        return SpendFigures(requests=self.requests, input_tokens=self.input_tokens, output_tokens=self.output_tokens,
                            cost_usd=None if self.cost_usd is None else round(self.cost_usd, 6),
                            batch_requests=self.batch_requests)

    def as_json(self) -> dict[str, Any]:
        return self.figures().model_dump(mode="json")

    def shown(self) -> str:
        """As a person reads it: USD when known, and tokens."""
        usd = f"${self.cost_usd:.4f} / " if self.cost_usd is not None else ""
        return f"{usd}{self.tokens:,} tokens"

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Spend:
        data = data or {}
        return cls(**{f.name: data.get(f.name, None if f.name == "cost_usd" else 0) for f in fields(cls)})


class SpendMeter:
    """The run's spend, read from its ledger: in all (every invocation, every process) and per item in flight in
    this invocation. ``ledger``: where this process records what it pays; ``out``: the run directory whose
    ``spend.json`` this process keeps (None: a Ray worker's meter, which records and keeps nothing else)."""

    def __init__(self, ledger: Ledger | PostgresLedger, prices: Mapping[str, Any] | None = None,
                 out: Path | None = None, *, reads: bool = True) -> None:
        # reads=False: a Ray worker's meter, which records what it pays and counts nothing (the driver does)
        self.ledger, self.prices, self.out = ledger, prices, out
        self.reads = reads and isinstance(ledger, Ledger)
        self.total = Spend()
        self.here = Totals()  # what this invocation paid (every process of it): the ledger's rows of this invocation
        self.in_flight: dict[str, Spend] = {}
        self._seen = 0
        self._saved: SpendFigures | None = None
        self.file = SpendFile(out) if out is not None and self.reads else None
        # the ledger's sums by invocation, agent and model, kept up to date as rows are counted, so that the run's
        # end reads no row again (None: a batch answer was attributed to its call since, which moves a row's sums)
        self.breakdown: Breakdown | None = None
        if self.reads:
            assert isinstance(ledger, Ledger)
            self._seen = ledger.last_seq()  # read at once: no process of this invocation pays before the meter is made
            self.total.add(ledger.totals())
            self.here.add(ledger.totals("invocation = ?", (ledger.invocation,)))
            self.breakdown = ledger.breakdown()
        if self.file is not None:  # recomputed from the ledger at every start: an old or missing file is replaced
            write_spend(self.file.out, self.total.figures())
            self._saved = self.total.figures()
        self.before = Spend(**asdict(self.total))

    # --- what is paid ---

    def started(self, item_id: str) -> None:
        self.in_flight.setdefault(item_id, Spend())

    def paid(self, item_id: str, usage: Mapping[str, Mapping[str, Any]]) -> None:
        """One call, as ``JuryContext.on_usage`` hears it (``{agent: {role, model, requests, tokens, batch_*,
        attempts, key}}``), for ``item_id``: recorded in the ledger before this returns, then counted. A batch answer
        (its ``batch_requests``) was recorded when its batch was collected: it is only attributed to its item."""
        payments = []
        for agent, entry in usage.items():
            if entry.get("batch_requests") and entry.get("key"):
                self.ledger.attribute(str(entry["key"]), item_id, agent, str(entry.get("role") or ""))
                self.breakdown = None
                spent = self.payment(entry, item=item_id, agent=agent)
                self.in_flight.setdefault(item_id, Spend()).add(Totals.of(spent))
                continue
            failed = not entry.get("requests") and entry.get("attempts")  # a call that raised: its attempts only
            payments.append(self.payment(entry, item=item_id, agent=agent, source="failed" if failed else "online"))
        if payments:
            self.ledger.record_many(payments)
            self.refresh()

    def payment(self, entry: Mapping[str, Any], *, item: str | None = None, agent: str | None = None,
                source: str = "online", uid: str = "") -> Payment:
        """A usage entry as a ledger row, priced now (batch tokens at batch prices)."""
        model = str(entry.get("model", ""))
        price = price_of(model, self.prices)
        counts = {name: int(entry.get(name, 0)) for name in ("requests", "input_tokens", "output_tokens",
                                                              "batch_requests", "batch_input_tokens",
                                                              "batch_output_tokens", "attempts")}
        return Payment(model, **counts, cost_usd=entry_cost(counts, price) if price else None, item=item,
                       agent=agent, role=entry.get("role"), key=entry.get("key"), source=source, uid=uid)

    def collected(self, payments: list[Payment]) -> None:
        """A batch's answered lines, recorded as paid when collected (before any is handed to its call); a line
        recorded already (its batch collected again after a kill) is not counted twice."""
        self.ledger.record_many(payments)
        self.refresh()

    def refresh(self) -> None:
        """Count the rows recorded since the last look, by this process or others (a Ray run's workers), and keep
        spend.json up to date."""
        if not self.reads:
            return  # a worker: the driver counts its rows
        assert isinstance(self.ledger, Ledger)
        rows = self.ledger.rows_after(self._seen)
        for row in rows:
            spent = Totals(**{name: int(row[name] or 0) for name in ("requests", "input_tokens", "output_tokens",
                                                                      "batch_requests", "batch_input_tokens",
                                                                      "batch_output_tokens", "attempts")},
                           cost_usd=row["cost_usd"])
            self.total.add(spent)
            if self.breakdown is not None:
                self.breakdown.add_row(row, spent)
            if row["invocation"] == self.ledger.invocation:
                self.here.add(spent)
                item = row["item"]
                if item in self.in_flight and row["agent"] != UNATTRIBUTED:
                    self.in_flight[item].add(spent)
            self._seen = row["seq"]
        if rows:
            self.save()

    def finished(self, item_id: str) -> Spend:
        """An item is done (or failed): what it spent in this invocation."""
        return self.in_flight.pop(item_id, Spend())

    def spent_here(self) -> Spend:
        """What this invocation paid, every process of it."""
        spent = Spend()
        spent.add(self.here)
        return spent

    def save(self) -> None:
        """Hand the figures to spend.json's writer (a thread: a rename may take milliseconds)."""
        if self.file is None:
            return
        figures = self.total.figures()
        if figures != self._saved:
            self.file.update(figures)
            self._saved = figures

    def close(self) -> None:
        """spend.json as the ledger has it now, written before this returns (raises a failed write's error)."""
        if self.file is not None:
            self.file.close()


def _assistant_turns(item: Any) -> int:
    """The most assistant turns a side of a conversation item has (0: not a conversation)."""
    prefix = list(getattr(item, "messages", None) or [])
    sides = [[*prefix, *(getattr(item, name, None) or [])] for name in ("messages_1", "messages_2")]
    return max(len(assistant_turns(side)) for side in [prefix, *sides])


@dataclass
class Budget:
    """``--max-cost`` and/or ``--max-total-tokens`` over the whole run, and what each item may spend.

    ``reserve``: what an item may spend when its own cannot be rendered (the estimate's most expensive item);
    ``price_item(item) -> Spend``: an item's own most expensive plan (its calls rendered), before the margin."""

    max_cost_usd: float | None = None
    max_total_tokens: int | None = None
    reserve: Spend | None = None
    price_item: Callable[[Any], Spend] | None = None
    reserves: dict[str, Spend] = field(default_factory=dict)  # each item's, once rendered
    held_back: dict[str, str] = field(default_factory=dict)  # item id -> why it was not started
    largest: Spend | None = None  # the largest reserve an item started with
    # (item size, its assistant turns, reserve) of the items rendered, by size: an item no larger in either takes
    # the reserve of the next one
    _rendered: list[tuple[int, int, Spend]] = field(default_factory=list)

    def reserve_for(self, item: Any, meter: SpendMeter) -> Spend | None:
        """What ``item`` may spend: its own rendering times ``RESERVE_MARGIN`` (nothing, when its rendering sends no
        request), else the largest reserve an item started with (or the estimate's); None when there is none at all
        (the item is held back).

        Rendering costs ~2-4 ms a call, so far from the limit it is spared: an item whose text is no longer than an
        item already rendered, and with no more assistant turns, takes the reserve of the shortest such item (an
        item's calls grow with its text, and with its turns under ``--per-turn``, which judges each: a short
        conversation of many turns may cost more than a long one of few). Any other item, and every item once what
        is left is within ``RENDER_WITHIN`` of the largest reserves of a limit, is rendered."""
        found = self.reserves.get(item.id)
        if found is not None:
            return found
        size, turns = len(item.model_dump_json(exclude_none=True)), _assistant_turns(item)
        at = bisect.bisect_left(self._rendered, size, key=lambda entry: entry[0])
        larger = (entry[2] for entry in itertools.islice(self._rendered, at, None) if entry[1] >= turns)
        reserve: Spend | None = None if self._near(meter) else next(larger, None)
        if reserve is None:
            own: Spend | None = None
            if self.price_item is not None:
                try:
                    own = self.price_item(item)
                except Exception:  # an item the protocol cannot render: the largest reserve stands in for it
                    own = None
            if own is not None and own.requests:
                reserve = own.scaled(RESERVE_MARGIN)
                bisect.insort(self._rendered, (size, turns, reserve), key=lambda entry: entry[0])
            elif own is not None:  # rendered, and it sends nothing (a trajectory match decides it): it costs nothing
                self.reserves[item.id] = own  # (never another item's reserve: theirs may not be decided so)
                return own
            else:
                reserve = self.largest or self.reserve
        if reserve is None or not reserve.requests:
            return None
        self.reserves[item.id] = reserve
        return reserve

    def started(self, item_id: str) -> None:
        """An item was admitted: the largest reserve given (what the manifest and the last line say an item may
        spend) grows to its reserve."""
        reserve = self.reserves.get(item_id)
        if reserve is not None and (self.largest is None or
                                    (reserve.tokens, reserve.usd) > (self.largest.tokens, self.largest.usd)):
            self.largest = reserve

    def _near(self, meter: SpendMeter) -> bool:
        """Whether what is left of a limit (less what the items in flight may still spend) is within
        ``RENDER_WITHIN`` of the largest reserves."""
        largest = self.largest or self.reserve or self.most() or Spend()
        cost, tokens = self._committed(meter)
        return (self.max_cost_usd is not None and self.max_cost_usd - cost < RENDER_WITHIN * largest.usd) or \
            (self.max_total_tokens is not None and self.max_total_tokens - tokens < RENDER_WITHIN * largest.tokens)

    def _committed(self, meter: SpendMeter) -> tuple[float, int]:
        """What was spent plus what the items in flight may still spend (USD, tokens)."""
        cost, tokens = meter.total.usd, meter.total.tokens
        for item_id, spent in meter.in_flight.items():
            held = self.reserves.get(item_id) or self.reserve or Spend()
            cost += max(0.0, held.usd - spent.usd)
            tokens += max(0, held.tokens - spent.tokens)
        return cost, tokens

    def fits_alone(self, reserve: Spend) -> bool:
        """Whether the item could fit the budget at all (nothing spent, nothing in flight)."""
        return self._within(reserve.usd, reserve.tokens)

    def admits(self, meter: SpendMeter, reserve: Spend) -> bool:
        """Whether an item of this reserve may start: spent + the in-flight items' remaining reserves + its reserve
        stay within every limit."""
        cost, tokens = self._committed(meter)
        return self._within(cost + reserve.usd, tokens + reserve.tokens)

    def _within(self, cost: float, tokens: int) -> bool:
        return (self.max_cost_usd is None or cost <= self.max_cost_usd) and \
            (self.max_total_tokens is None or tokens <= self.max_total_tokens)

    def hold(self, item_id: str, reserve: Spend | None, meter: SpendMeter, *, alone: bool) -> None:
        """Note why an item was not started."""
        if reserve is None:
            why = "its cost could not be estimated (the protocol cannot render it) and no other item's is known"
        elif alone:
            why = f"its reserve ({reserve.shown()}) alone is more than {self._limits()}"
        else:
            left = []
            if self.max_cost_usd is not None:
                left.append(f"${max(0.0, self.max_cost_usd - meter.total.usd):.4f}")
            if self.max_total_tokens is not None:
                left.append(f"{max(0, self.max_total_tokens - meter.total.tokens):,} tokens")
            why = f"its reserve ({reserve.shown()}) does not fit the {' / '.join(left)} left"
        self.held_back[item_id] = why

    def _limits(self) -> str:
        parts = []
        if self.max_cost_usd is not None:
            parts.append(f"--max-cost {self.max_cost_usd:g}")
        if self.max_total_tokens is not None:
            parts.append(f"--max-total-tokens {self.max_total_tokens:,}")
        return " and ".join(parts)

    def overrun(self, meter: SpendMeter) -> dict[str, Any] | None:
        """By how much the spend passed each limit (None: within every one)."""
        over: dict[str, Any] = {}
        if self.max_cost_usd is not None and meter.total.usd > self.max_cost_usd:
            over["cost_usd"] = round(meter.total.usd - self.max_cost_usd, 6)
        if self.max_total_tokens is not None and meter.total.tokens > self.max_total_tokens:
            over["tokens"] = meter.total.tokens - self.max_total_tokens
        return over or None

    def describe(self, meter: SpendMeter, *, stopped: bool) -> str:
        """The one line a run that met its budget ends with: what was spent against which limit, what an item may
        spend, the items held back, and by how much a limit was passed."""
        parts = []
        if self.max_cost_usd is not None:
            parts.append(f"${meter.total.usd:.4f} spent of --max-cost {self.max_cost_usd:g}")
        if self.max_total_tokens is not None:
            parts.append(f"{meter.total.tokens:,} tokens of --max-total-tokens {self.max_total_tokens:,}")
        line = ("budget reached: " if stopped or self.held_back else "budget passed: ") + ", ".join(parts)
        most = self.most()
        if most is not None:
            line += f"; an item may spend up to {most.shown()}"
        over = self.overrun(meter)
        if over:
            amounts = ([f"${over['cost_usd']:.4f}"] if "cost_usd" in over else []) + \
                ([f"{over['tokens']:,} tokens"] if "tokens" in over else [])
            line += f"; spent {' and '.join(amounts)} over the budget (an item spent more than its reserve: a " \
                    "format re-ask)"
        if self.held_back:
            shown = [f"{item_id} ({why})" for item_id, why in list(self.held_back.items())[:3]]
            more = f" and {len(self.held_back) - 3} more" if len(self.held_back) > 3 else ""
            line += f"; held back: {'; '.join(shown)}{more}"
        return line

    def most(self) -> Spend | None:
        """What an item may spend at most: the largest reserve an item started with (else, when none started, the
        largest any item was given)."""
        if self.largest is not None or not self.reserves:
            return self.largest
        return max(self.reserves.values(), key=lambda reserve: (reserve.tokens, reserve.usd))

    def as_json(self, meter: SpendMeter) -> dict[str, Any]:
        most = self.most()
        return {"max_cost_usd": self.max_cost_usd, "max_total_tokens": self.max_total_tokens,
                "reserve_per_item": most.as_json() if most else None,
                "held_back": dict(self.held_back), "overrun": self.overrun(meter)}

    @classmethod
    def from_estimate(cls, estimate: Estimate | None, *, max_cost_usd: float | None = None,
                      max_total_tokens: int | None = None, batch: bool = False,
                      price_item: Callable[[Any], Spend] | None = None) -> Budget:
        """A budget whose fallback reserve is an estimate's most expensive item (at batch prices with ``batch``)
        times ``RESERVE_MARGIN``; ``price_item``: each item's own plan (see :class:`Budget`)."""
        reserve = None
        if estimate is not None and estimate.item_most and estimate.item_most.get("requests"):
            most = estimate.item_most
            cost = most["cost_usd_batch"] if batch else most["cost_usd"]
            priced = estimate.cost() is not None
            reserve = Spend(round(most["requests"]), round(most["input_tokens"]), round(most["output_tokens"]),
                            cost if priced else None).scaled(RESERVE_MARGIN)
        return cls(max_cost_usd, max_total_tokens, reserve, price_item)
