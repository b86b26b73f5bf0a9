"""Tables of agreement with humans in the papers' layouts, as plain text, Markdown and CSV.

- Correlations (:func:`correlation_table`): rows = methods, columns = aspect x statistic, then the
  average over aspects. Topical-Chat turn-level: Spearman rho and Kendall tau (ChatEval Table 2, ReFeR
  Table 2); DEBATE's Topical-Chat: Pearson r and Spearman rho per context; SummEval summary-level rho
  and tau (G-Eval, DEBATE Table 1).
- Pairwise (:func:`label_table`): Acc. (%) and Kap. (ChatEval Table 1).
- :func:`detail_table`: what each number rests on: items, groups used/skipped, missing verdicts,
  bootstrap intervals.
- :func:`distribution_table`: % of each score point, human vs method (DEBATE Table 2).
- :func:`comparison_table`: paired tests of two methods on the same items.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from jurygraph.judging.aspects import aspects_of
from jurygraph.measuring.metaeval import MethodResult, compare_labels, compare_scores
from jurygraph.measuring.metrics import PairedTest, score_distribution
from jurygraph.measuring.votes import SETUPS

SYMBOL = {"pearson": "r", "spearman": "ρ", "kendall": "τ"}
LAYOUTS: dict[tuple[str | None, str], tuple[str, ...]] = {
    ("summeval", "grouped"): ("spearman", "kendall"),  # G-Eval / DEBATE, summary-level
    ("topical-chat", "pooled"): ("spearman", "kendall"),  # ChatEval Table 2, ReFeR Table 2
    ("topical-chat", "grouped"): ("pearson", "spearman"),  # DEBATE Table 1, per context
}


@dataclass
class Table:
    """A table: optional spanning header (``groups``: (label, width) pairs), column header, rows, notes."""

    title: str
    columns: list[str]
    rows: list[list[str]]
    groups: list[tuple[str, int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        """Aligned plain text, with the spanning header line above the column header."""
        widths = [max(len(c), *(len(r[i]) for r in self.rows)) if self.rows else len(c)
                  for i, c in enumerate(self.columns)]
        lines = [self.title]
        if self.groups:
            cells, col = [], 0
            for label, span in self.groups:
                width = sum(widths[col:col + span]) + 2 * (span - 1)
                cells.append(label.center(width) if span > 1 else label.ljust(width))
                col += span
            lines.append("  ".join(cells).rstrip())
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w)
                               for i, (c, w) in enumerate(zip(self.columns, widths, strict=True))).rstrip())
        lines.append("  ".join("-" * w for w in widths))
        for row in self.rows:
            lines.append("  ".join(c.rjust(w) if i else c.ljust(w)
                                   for i, (c, w) in enumerate(zip(row, widths, strict=True))).rstrip())
        lines.extend(self.notes)
        return "\n".join(lines)

    def flat_columns(self) -> list[str]:
        """Column names with the spanning header folded in (e.g. "Naturalness ρ")."""
        names = list(self.columns)
        col = 0
        for label, span in self.groups:
            for k in range(col, col + span):
                if label.strip():
                    names[k] = f"{label} {self.columns[k]}" if span > 1 else label
            col += span
        return names

    def markdown(self) -> str:
        """A GitHub Markdown table (spanning headers folded into the column names)."""
        names = self.flat_columns()
        out = [f"**{self.title}**", "", "| " + " | ".join(names) + " |",
               "|" + "|".join(["---"] + ["---:"] * (len(names) - 1)) + "|"]
        out += ["| " + " | ".join(row) + " |" for row in self.rows]
        if self.notes:
            out += [""] + [f"{note}  " for note in self.notes]
        return "\n".join(out)

    def csv(self) -> str:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(self.flat_columns())
        writer.writerows(self.rows)
        return buffer.getvalue()


def number(value: float | None, digits: int = 3) -> str:
    """A figure with ``digits`` decimals; – when there is none (None or NaN)."""
    return "–" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def percent(value: float) -> str:
    """A share as a percentage with one decimal; – when it is NaN."""
    return "–" if value != value else f"{100 * value:.1f}"


def aspect_order(methods: Sequence[MethodResult]) -> list[str]:
    """Aspects present in any method, in the benchmark's own order (then any others, sorted)."""
    present = {a for m in methods for a in m.aspects}
    dataset = next((m.dataset for m in methods if m.dataset), None)
    try:
        known = aspects_of(dataset) if dataset else []
    except KeyError:
        known = []
    return [a for a in known if a in present] + sorted(present - set(known))


def layout_statistics(methods: Sequence[MethodResult]) -> tuple[str, ...]:
    """The statistics the benchmark's papers print for this level (default: all three)."""
    dataset = next((m.dataset for m in methods if m.dataset), None)
    level = next((r.level for m in methods for r in m.aspects.values()), "pooled")
    return LAYOUTS.get((dataset, level), ("pearson", "spearman", "kendall"))


def level_name(dataset: str | None, level: str) -> str:
    if level == "pooled":
        return "turn-level (pooled over all items)" if dataset == "topical-chat" else "pooled over all items"
    return {"summeval": "summary-level (per document, averaged)",
            "topical-chat": "per-context (averaged over contexts)"}.get(dataset or "", "per group, averaged")


def correlation_table(methods: Sequence[MethodResult], statistics: Sequence[str] | None = None,
                      aspects: Sequence[str] | None = None) -> Table:
    """Rows = methods; columns = each aspect x statistic, then AVG (the mean over the table's aspects;
    '–' when a method lacks one of them, so an average never silently covers fewer aspects)."""
    aspects = list(aspects or aspect_order(methods))
    stats = tuple(statistics or layout_statistics(methods))
    dataset = next((m.dataset for m in methods if m.dataset), None)
    levels = {r.level for m in methods for r in m.aspects.values()}
    if len(levels) > 1:
        raise ValueError("one table holds one correlation level; got " + " and ".join(sorted(levels)))
    level = levels.pop() if levels else "pooled"
    columns = ["Method"] + [SYMBOL[s] for _ in [*aspects, "avg"] for s in stats]
    groups = [("", 1)] + [(a.capitalize(), len(stats)) for a in aspects] + [("Average", len(stats))]
    rows = []
    for method in methods:
        cells = [method.name]
        for aspect in aspects:
            result = method.aspects.get(aspect)
            cells += [number(result.value(s)) if result else "–" for s in stats]
        for s in stats:
            values = [method.aspects[a].value(s) for a in aspects if a in method.aspects]
            cells.append(number(sum(values) / len(values)) if len(values) == len(aspects) and values else "–")
        rows.append(cells)
    title = f"{dataset or 'dataset'}: {level_name(dataset, level)} correlation with human ratings"
    notes = ["r = Pearson, ρ = Spearman (average ranks), τ = Kendall tau-b."]
    missing = [f"{m.name}/{a}: {r.missing}" for m in methods for a, r in m.aspects.items() if r.missing]
    notes.append("Missing verdicts (excluded): " + (", ".join(missing) if missing else "none") + ".")
    skipped = [f"{m.name}/{a}: {r.correlation.skipped}" for m in methods for a, r in m.aspects.items()
               if r.correlation.skipped]
    if level == "grouped":
        notes.append("Groups skipped (constant human or predicted scores): "
                     + (", ".join(skipped) if skipped else "none") + ".")
    return Table(title, columns, rows, groups, notes)


def label_table(methods: Sequence[MethodResult]) -> Table:
    """ChatEval Table 1: Acc. (%) and Kap. per method, plus n and missing verdicts."""
    rows = []
    for method in methods:
        result = method.labels
        if result is None:
            continue
        rows.append([method.name, number(100 * result.accuracy, 1), number(result.kappa), str(result.n),
                     str(result.missing)])
    dataset = next((m.dataset for m in methods if m.dataset), None) or "pairwise"
    return Table(f"{dataset}: agreement with the human verdict", ["Method", "Acc.", "Kap.", "n", "missing"],
                 rows, notes=["Acc. in %; Kap. = Cohen's kappa of the 3-way verdict (1 / 2 / tie); missing "
                              "verdicts are excluded, not counted as ties."])


def votes_table(methods: Sequence[MethodResult]) -> Table:
    """MT-Bench's Table 2 layout: each method's agreement with the human votes beside the humans' with one another,
    with and without ties (the number of compared pairs under each)."""
    rows = []
    for method in methods:
        found = method.votes
        if found is None:
            continue
        cells = [method.name, str(found.items)]
        for side in (found.panel, found.humans):
            for setup in SETUPS:
                cells += [number(100 * side[setup].rate, 1), str(side[setup].total)]
        rows.append(cells)
    columns = ["Method", "Items", "w/ tie", "pairs", "w/o tie", "pairs", "w/ tie", "pairs", "w/o tie", "pairs"]
    judges = next((m.votes.judges for m in methods if m.votes is not None and m.votes.judges), None)
    title = "agreement with the human votes" + (f" (judges {judges}*)" if judges else "")
    return Table(title, columns, rows,
                 groups=[("", 2), ("panel vs human", 4), ("human vs human", 4)],
                 notes=["% of compared pairs that agree: the panel's verdict against each vote on its item, and every "
                        "two votes on an item (MT-Bench's agreement, pairs pooled over items); w/o tie leaves out the "
                        "pairs with a tie on either side."])


def detail_table(methods: Sequence[MethodResult]) -> Table:
    """One row per method and aspect: every statistic with its bootstrap interval and the counts."""
    rows = []
    confidence = 0.95
    for method in methods:
        for aspect, result in method.aspects.items():
            corr = result.correlation
            cells = [method.name, aspect, result.level, str(corr.n),
                     "–" if corr.groups is None else str(corr.groups), str(corr.skipped), str(result.missing),
                     str(result.data.unreadable), str(result.no_human)]
            for s in ("pearson", "spearman", "kendall"):
                interval = result.intervals.get(s)
                if interval:
                    confidence = interval.confidence
                cells.append(f"{number(corr.get(s))} [{number(interval.low)}, {number(interval.high)}]" if interval
                             else number(corr.get(s)))
            rows.append(cells)
        if method.labels is not None:
            lab = method.labels
            acc, kap = lab.intervals.get("accuracy"), lab.intervals.get("kappa")
            rows.append([method.name, lab.kind, "items", str(lab.n), "–", "0", str(lab.missing),
                         str(lab.data.unreadable), str(lab.no_human),
                         f"acc {number(lab.accuracy)}" + (f" [{number(acc.low)}, {number(acc.high)}]" if acc else ""),
                         f"kappa {number(lab.kappa)}" + (f" [{number(kap.low)}, {number(kap.high)}]" if kap else ""),
                         ""])
    columns = ["Method", "Aspect", "Level", "Items", "Groups", "Skipped", "Missing", "Unreadable", "No human",
               f"r [{confidence:.0%} CI]", f"ρ [{confidence:.0%} CI]", f"τ [{confidence:.0%} CI]"]
    return Table("Details: counts and bootstrap confidence intervals (resampling documents/contexts/questions)",
                 columns, rows, notes=["Missing: items without a verdict (left out). Unreadable: items with at least "
                                       "one unreadable judgment (a ReFeR peer that failed included), verdict or not."])


def distribution_table(method: MethodResult, aspects: Sequence[str] | None = None,
                       scale: tuple[int, int] | None = None) -> Table:
    """DEBATE Table 2: % of items at each score point, human vs the method, per aspect (same scale)."""
    chosen = [a for a in (aspects or aspect_order([method])) if a in method.aspects]
    if scale is None:
        values = [v for a in chosen for v in method.aspects[a].data.human]
        scale = (math.floor(min(values, default=1)), math.ceil(max(values, default=5)))
    low, high = scale
    columns = ["Score"] + [who for _ in chosen for who in ("Human", method.name)]
    groups = [("", 1)] + [(a.capitalize(), 2) for a in chosen]
    dists = {a: (score_distribution(method.aspects[a].data.human, low, high),
                 score_distribution(method.aspects[a].data.predicted, low, high)) for a in chosen}
    rows = [[str(point)] + [number(d[k][point], 2) for a in chosen for d in [dists[a]] for k in (0, 1)]
            for point in range(low, high + 1)]
    return Table(f"Score distribution (%) of human and {method.name}", columns, rows, groups,
                 ["Scores rounded half up to the nearest point of the scale."])


def results_csv(methods: Sequence[MethodResult]) -> str:
    """Every number in long form, one row per method x aspect x statistic, with its CI and counts."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["method", "dataset", "aspect", "level", "statistic", "value", "ci_low", "ci_high",
                     "confidence", "items", "groups", "skipped_groups", "missing_verdicts", "no_human_label",
                     "items_with_unreadable_judgments"])
    for m in methods:
        for aspect, r in m.aspects.items():
            for s in ("pearson", "spearman", "kendall"):
                ci = r.intervals.get(s)
                writer.writerow([m.name, m.dataset, aspect, r.level, s, r.value(s), ci.low if ci else "",
                                 ci.high if ci else "", ci.confidence if ci else "", r.correlation.n,
                                 "" if r.correlation.groups is None else r.correlation.groups,
                                 r.correlation.skipped, r.missing, r.no_human, r.data.unreadable])
        if m.labels is not None:
            for s, value in (("accuracy", m.labels.accuracy), ("kappa", m.labels.kappa)):
                ci = m.labels.intervals.get(s)
                writer.writerow([m.name, m.dataset, m.labels.kind, "items", s, value, ci.low if ci else "",
                                 ci.high if ci else "", ci.confidence if ci else "", m.labels.n, "", "",
                                 m.labels.missing, m.labels.no_human, m.labels.data.unreadable])
    return buffer.getvalue()


def comparison_table(a: MethodResult, b: MethodResult, statistic: str = "spearman", *, resamples: int = 1000,
                     seed: int | None = 0) -> Table:
    """Paired tests of two methods on the items both judged: per aspect, the difference A - B in
    ``statistic`` (accuracy for pairwise) with its paired-bootstrap CI and three p-values."""
    rows = []
    for aspect in [x for x in aspect_order([a, b]) if x in a.aspects and x in b.aspects]:
        ra, rb = a.aspects[aspect], b.aspects[aspect]
        tests = compare_scores(ra.data, rb.data, ra.level, statistic, resamples=resamples, seed=seed)
        rows.append(_comparison_row(aspect, SYMBOL[statistic], tests))
    if a.labels is not None and b.labels is not None:
        rows.append(_comparison_row(a.labels.kind, "acc", compare_labels(a.labels.data, b.labels.data,
                                                                         resamples=resamples, seed=seed)))
    return Table(f"Paired tests: {a.name} vs {b.name} (items both judged)",
                 ["Aspect", "Stat", "A - B", "95% CI", "p bootstrap", "p permutation", "p t-test"], rows,
                 notes=["t-test (ReFeR, Appendix M): on per-item absolute error to the human score (pairwise: "
                        "on per-question correctness); its A - B is the mean difference of those, not of the stat."])


def _comparison_row(aspect: str, stat: str, tests: dict[str, PairedTest]) -> list[str]:
    boot = tests["bootstrap"]
    return [aspect, stat, f"{boot.difference:+.3f}", f"[{number(boot.low)}, {number(boot.high)}]", _p(boot.p_value),
            _p(tests["permutation"].p_value), _p(tests["t-test"].p_value)]


def _p(value: float) -> str:
    return "–" if math.isnan(value) else f"{value:.3g}"
