"""What a run has spent, and the budget that stops it (``--max-cost USD``, ``--max-total-tokens N``).

:class:`SpendMeter` hears every paid call as it is paid (``JuryContext.on_usage``, set per item by the runner): the
whole run's spend, previous invocations included, kept in ``RUN_DIR/spend.json`` (rewritten at most once a
second and at the end, so a ``kill -9`` loses at most the last second's calls; their answers are in the LLM cache,
so a resume does not pay them again), and each item in flight's. Cache hits cost nothing and are not counted.

:class:`Budget` decides whether one more item may start: only if what was spent, plus what the items in flight
may still spend, plus what the new item may spend stays within the budget. What an item may spend (its reserve)
is the dry-run estimate's most expensive item among those rendered before the run (every reply at its output
budget, loops at their longest), times 1.25 for the approximation of the tokenizer and for items longer than the
sample; it grows to the most any finished item actually spent. An item in flight may still spend its reserve
less what it has spent. So the run stops *before* the budget is passed, unless an item spends more than its
reserve (a format re-ask, a much longer item than the sample), by at most that excess.

The budget is the run's, over every invocation: ``--resume RUN_DIR --max-cost HIGHER`` continues a run that
stopped at its budget, counting what the earlier invocations spent.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from jurygraph.llm.pricing import entry_cost, price_of
from jurygraph.running.estimate import Estimate
from jurygraph.running.rundir import read_spend, write_spend

RESERVE_MARGIN = 1.25
SAVE_EVERY = 1.0  # seconds between rewrites of spend.json


@dataclass
class Spend:
    """Requests, tokens and USD paid (the part through a provider batch included in each)."""

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    batch_requests: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def add(self, other: Spend) -> None:
        for name in (f.name for f in fields(self)):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def less(self, other: Spend) -> Spend:
        return Spend(*(getattr(self, f.name) - getattr(other, f.name) for f in fields(self)))

    def most(self, other: Spend) -> Spend:
        """The larger of the two in tokens (with its requests and split) and the larger in USD."""
        larger = other if other.tokens > self.tokens else self
        return Spend(larger.requests, larger.input_tokens, larger.output_tokens,
                     max(self.cost_usd, other.cost_usd), larger.batch_requests)

    def scaled(self, factor: float) -> Spend:
        return Spend(round(self.requests * factor), round(self.input_tokens * factor),
                     round(self.output_tokens * factor), self.cost_usd * factor, round(self.batch_requests * factor))

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["cost_usd"] = round(self.cost_usd, 6)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> Spend:
        data = data or {}
        return cls(**{f.name: data.get(f.name, 0) for f in fields(cls)})


class SpendMeter:
    """The run's spend as calls are paid: in all (previous invocations included) and per item in flight."""

    def __init__(self, out: Path, prices: Mapping[str, Any] | None = None, persist: bool = True) -> None:
        # persist=False: a Ray worker's meter, which counts its shard's spend for the driver and writes nothing
        self.out, self.prices, self.persist = out, prices, persist
        self.before = Spend.from_json(read_spend(out) if persist else None)
        self.total = Spend.from_json(asdict(self.before))
        self.in_flight: dict[str, Spend] = {}
        self._saved = 0.0
        self._elsewhere = Spend()  # what other processes (a Ray run's workers) paid in this invocation

    def started(self, item_id: str) -> None:
        self.in_flight.setdefault(item_id, Spend())

    def paid(self, item_id: str, usage: Mapping[str, Mapping[str, Any]]) -> None:
        """One paid call's usage ({agent: {model, requests, input_tokens, ...}}), for ``item_id``."""
        spend = Spend()
        for entry in usage.values():
            price = price_of(str(entry.get("model", "")), self.prices)
            spend.add(Spend(int(entry.get("requests", 0)), int(entry.get("input_tokens", 0)),
                            int(entry.get("output_tokens", 0)), entry_cost(entry, price) if price else 0.0,
                            int(entry.get("batch_requests", 0))))
        self.total.add(spend)
        self.in_flight.setdefault(item_id, Spend()).add(spend)
        if time.monotonic() - self._saved >= SAVE_EVERY:
            self.save()

    def finished(self, item_id: str) -> Spend:
        """An item is done (or failed): what it spent in this invocation."""
        return self.in_flight.pop(item_id, Spend())

    def spent_here(self) -> Spend:
        """What this meter's invocation paid (the run's total less what earlier invocations had paid)."""
        return self.total.less(self.before)

    def paid_elsewhere(self, spent: Spend) -> None:
        """What other processes (a Ray run's workers) have paid in this invocation so far: it replaces the last
        figure they reported in the total."""
        self.total.add(spent.less(self._elsewhere))
        self._elsewhere = spent

    def save(self) -> None:
        self._saved = time.monotonic()
        if self.persist:
            write_spend(self.out, self.total.as_json())


@dataclass
class Budget:
    """``--max-cost`` and/or ``--max-total-tokens`` over the whole run, and what one item may spend."""

    max_cost_usd: float | None = None
    max_total_tokens: int | None = None
    reserve: Spend | None = None  # what one item may spend; None: unknown (only what was spent counts)

    def admits(self, meter: SpendMeter) -> bool:
        """Whether one more item may start: spent + the in-flight items' remaining reserves + its reserve stay
        within every limit."""
        reserve = self.reserve or Spend()
        cost = meter.total.cost_usd + reserve.cost_usd + sum(
            max(0.0, reserve.cost_usd - spent.cost_usd) for spent in meter.in_flight.values())
        tokens = meter.total.tokens + reserve.tokens + sum(
            max(0, reserve.tokens - spent.tokens) for spent in meter.in_flight.values())
        return (self.max_cost_usd is None or cost <= self.max_cost_usd) and \
            (self.max_total_tokens is None or tokens <= self.max_total_tokens)

    def note(self, spent: Spend) -> None:
        """A finished item's spend: the reserve grows to the most any item spent."""
        self.reserve = spent if self.reserve is None else self.reserve.most(spent)

    def describe(self, meter: SpendMeter) -> str:
        """What was spent against which limit, for the one line a stopped run prints."""
        parts = []
        if self.max_cost_usd is not None:
            parts.append(f"${meter.total.cost_usd:.4f} spent of --max-cost {self.max_cost_usd:g}")
        if self.max_total_tokens is not None:
            parts.append(f"{meter.total.tokens:,} tokens of --max-total-tokens {self.max_total_tokens:,}")
        per_item = ""
        if self.reserve is not None:
            per_item = f"; an item may spend up to ${self.reserve.cost_usd:.4f} / {self.reserve.tokens:,} tokens"
        return "budget reached: " + ", ".join(parts) + per_item

    def as_json(self) -> dict[str, Any]:
        return {"max_cost_usd": self.max_cost_usd, "max_total_tokens": self.max_total_tokens,
                "reserve_per_item": self.reserve.as_json() if self.reserve else None}

    @classmethod
    def from_estimate(cls, estimate: Estimate | None, *, max_cost_usd: float | None = None,
                      max_total_tokens: int | None = None, batch: bool = False) -> Budget:
        """A budget whose reserve is an estimate's most expensive item (at batch prices with ``batch``) times
        ``RESERVE_MARGIN``; no estimate: no reserve (only what was spent counts)."""
        reserve = None
        if estimate is not None and estimate.item_most:
            most = estimate.item_most
            cost = most["cost_usd_batch"] if batch else most["cost_usd"]
            reserve = Spend(round(most["requests"]), round(most["input_tokens"]), round(most["output_tokens"]),
                            cost).scaled(RESERVE_MARGIN)
        return cls(max_cost_usd, max_total_tokens, reserve)
