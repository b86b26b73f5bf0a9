"""Position bias of a pairwise judge: does the verdict change when the two answers are swapped, and which
position wins more often?

Both orders come from one of two places:

- a calibrated run (``--calibrate bpc``, ChatEval's default on pairwise data): each record's
  ``verdict.detail.runs`` holds ``original_order`` and ``swapped_order`` (MEC: ``..._e1``, ``..._e2``, paired by
  sample), each already stated for the original order; FairEval's own evaluator (``--protocol single
  --calibrate bpc``) keeps its reviews' scores the same way in ``verdict.detail.reviews`` (``original_order #1``,
  ``swapped_order #1``, ...);
- a run and its ``--reverse`` run: the reversed run judged the swapped item, so its label is mapped back
  (Assistant 1 <-> 2) before the two are compared.

Every label here is in the original order. Position wins count the verdicts in the order the judge saw them:
in the swapped order, a verdict for the original Assistant 2 is a win of the first position.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jurygraph.judging.items import SWAP_LABEL
from jurygraph.judging.judgments import pairwise_label
from jurygraph.measuring.tables import Table, percent

ORIGINAL, SWAPPED = "original_order", "swapped_order"
OrderPairs = dict[str, list[tuple[str, str]]]  # item id -> its (original, swapped) labels, per sample


@dataclass
class PositionBias:
    """The paired verdicts of one method in both orders."""

    name: str
    pairs: int = 0  # (item, sample) pairs with a verdict in both orders
    flips: int = 0  # pairs whose verdicts differ (in the original order)
    first: int = 0  # verdicts, over both orders, for the answer shown first
    second: int = 0
    ties: int = 0
    flipped_ids: list[str] = field(default_factory=list)

    def share(self, count: int, of_verdicts: bool = True) -> float:
        total = 2 * self.pairs if of_verdicts else self.pairs
        return count / total if total else float("nan")

    @property
    def favoured(self) -> str:
        if self.first == self.second:
            return "neither"
        return "first" if self.first > self.second else "second"


def _label(verdict: Mapping[str, Any] | None) -> str | None:
    """A verdict's label; from its two scores when it keeps only those (FairEval's reviews)."""
    if not verdict or verdict.get("missing"):
        return None
    if verdict.get("label") is None:
        one, two = verdict.get("score_1"), verdict.get("score_2")
        return None if one is None or two is None else pairwise_label(float(one), float(two))
    return str(verdict["label"])


def calibrated_pairs(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(original-order label, swapped-order label mapped back) per sample of a calibrated record."""
    detail = (record.get("verdict") or {}).get("detail") or {}
    runs = detail.get("runs") or detail.get("reviews") or {}
    pairs = []
    for name, verdict in runs.items():
        if not name.startswith(ORIGINAL):
            continue
        first, second = _label(verdict), _label(runs.get(SWAPPED + name[len(ORIGINAL):]))
        if first is not None and second is not None:
            pairs.append((first, second))
    return pairs


def reversed_label(record: Mapping[str, Any]) -> str | None:
    """A ``--reverse`` run's verdict, stated for the original order."""
    if record.get("status", "ok") != "ok":
        return None
    label = _label(record.get("verdict"))
    return None if label is None else SWAP_LABEL.get(label, label)


def _ok_label(record: Mapping[str, Any]) -> str | None:
    return _label(record.get("verdict")) if record.get("status", "ok") == "ok" else None


def order_pairs(records: Iterable[Mapping[str, Any]],
                reversed_records: Iterable[Mapping[str, Any]] | None = None) -> OrderPairs:
    """Item id -> its (original, swapped) label pairs: from the calibration, or matched with a reversed run."""
    pairs: OrderPairs = {}
    if reversed_records is None:
        for record in records:
            if record.get("task") == "pairwise" and record.get("status", "ok") == "ok":
                found = calibrated_pairs(record)
                if found:
                    pairs[str(record.get("id"))] = found
        return pairs
    swapped = {str(r.get("id")): reversed_label(r) for r in reversed_records if r.get("task") == "pairwise"}
    for record in records:
        key = str(record.get("id"))
        first, second = _ok_label(record), swapped.get(key)
        if record.get("task") == "pairwise" and first is not None and second is not None:
            pairs[key] = [(first, second)]
    return pairs


def position_bias(name: str, pairs: Mapping[str, Sequence[tuple[str, str]]]) -> PositionBias:
    result = PositionBias(name)
    for item_id, samples in pairs.items():
        for original, swapped in samples:
            result.pairs += 1
            if original != swapped:
                result.flips += 1
                if not result.flipped_ids or result.flipped_ids[-1] != item_id:
                    result.flipped_ids.append(item_id)
            # as seen: original order "1" is the first position; in the swapped order the original "2" was first
            for seen_first, label in ((original == "1", original), (swapped == "2", swapped)):
                if label == "tie":
                    result.ties += 1
                elif seen_first:
                    result.first += 1
                else:
                    result.second += 1
    return result


def is_reversed(manifest: Mapping[str, Any] | None) -> bool:
    return bool(((manifest or {}).get("cli") or {}).get("reverse"))


def reverse_partners(manifests: Sequence[Mapping[str, Any] | None]) -> dict[int, int]:
    """For each ``--reverse`` run, the index of the run it reverses: the nearest earlier run that is not
    reversed, of the same dataset when one is (the issue's "a --reverse run given as the second RUN_DIR")."""
    partners: dict[int, int] = {}
    for k, manifest in enumerate(manifests):
        if not is_reversed(manifest):
            continue
        dataset = ((manifest or {}).get("dataset") or {}).get("name")
        earlier = [i for i in range(k - 1, -1, -1) if not is_reversed(manifests[i])]
        same = [i for i in earlier if ((manifests[i] or {}).get("dataset") or {}).get("name") == dataset]
        if same or earlier:
            partners[k] = (same or earlier)[0]
    return partners


def paired_runs(names: Sequence[str], records: Sequence[Sequence[Mapping[str, Any]]],
                manifests: Sequence[Mapping[str, Any] | None]) -> list[tuple[list[int], str, OrderPairs]]:
    """The runs that judged both answer orders: each calibrated pairwise run, and each run paired with its
    ``--reverse`` run; each with the indices of the runs it rests on, a name and its :func:`order_pairs`.
    The one place runs are paired: position bias and ``jurygraph rank`` read both orders from here."""
    partners = reverse_partners(manifests)
    found = []
    for k, name in enumerate(names):
        if k in partners:
            forward = partners[k]
            found.append(([forward, k], f"{names[forward]} + {name}", order_pairs(records[forward], records[k])))
        else:
            pairs = order_pairs(records[k])
            if pairs:
                found.append(([k], name, pairs))
    return found


def run_biases(names: Sequence[str], records: Sequence[Sequence[Mapping[str, Any]]],
               manifests: Sequence[Mapping[str, Any] | None]) -> list[tuple[list[int], PositionBias]]:
    """The position bias of each calibrated pairwise run, and of each run paired with its ``--reverse`` run;
    each with the indices of the runs it rests on."""
    return [(indices, position_bias(name, pairs)) for indices, name, pairs in paired_runs(names, records, manifests)]


def position_table(results: Sequence[PositionBias]) -> Table:
    """Flip rate and position wins per method (pairwise runs with both answer orders)."""
    rows = [[r.name, str(r.pairs), str(r.flips), percent(r.share(r.flips, of_verdicts=False)),
             percent(r.share(r.first)), percent(r.share(r.second)), percent(r.share(r.ties)), r.favoured]
            for r in results]
    return Table("Position bias (both answer orders)",
                 ["Method", "pairs", "flipped", "flipped %", "first wins %", "second wins %", "ties %", "favours"],
                 rows, notes=["flipped: the verdict changes when the two answers are swapped; wins count the "
                              "verdicts of both orders by the position the judge saw"])
