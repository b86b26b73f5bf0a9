"""PNG figures of a meta-evaluation (matplotlib, Agg backend; ``pip install 'jurygraph[plots]'``).

- :func:`plot_aspect_bars`: one bar per method and aspect, whiskers = bootstrap CI.
- :func:`plot_score_distribution`: % of each score point, human vs method (DEBATE Table 2 as bars).
- :func:`plot_confusion`: human vs predicted pairwise verdicts (1 / 2 / tie).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jurygraph.measuring.metaeval import MethodResult
from jurygraph.measuring.metrics import score_distribution
from jurygraph.measuring.tables import SYMBOL, aspect_order, level_name

PAIRWISE_NAMES = {"1": "Assistant 1", "2": "Assistant 2", "tie": "tie"}


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as err:
        raise ImportError("plots need matplotlib: pip install 'jurygraph[plots]'") from err
    matplotlib.use("Agg")  # files only, never a window (servers, CI)
    import matplotlib.pyplot as plt

    return plt


def plot_aspect_bars(methods: Sequence[MethodResult], path: str | Path, statistic: str = "spearman") -> Path:
    """Grouped bars: x = aspects (+ nothing else), one bar per method, whiskers = bootstrap CI."""
    plt = _pyplot()
    aspects = aspect_order(methods)
    width = 0.8 / max(1, len(methods))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(aspects) + 1), 3.6))
    for k, method in enumerate(methods):
        xs, heights, below, above = [], [], [], []
        for i, aspect in enumerate(aspects):
            result = method.aspects.get(aspect)
            if result is None or math.isnan(result.value(statistic)):
                continue
            value = result.value(statistic)
            ci = result.intervals.get(statistic)
            xs.append(i - 0.4 + width * (k + 0.5))
            heights.append(value)
            below.append(value - ci.low if ci and not math.isnan(ci.low) else 0.0)
            above.append(ci.high - value if ci and not math.isnan(ci.high) else 0.0)
        ax.bar(xs, heights, width, yerr=[below, above], capsize=3, label=method.name)
    ax.set_xticks(range(len(aspects)), [a.capitalize() for a in aspects])
    ax.set_ylabel(f"{statistic.capitalize()} {SYMBOL[statistic]}")
    ax.axhline(0, color="black", linewidth=0.6)
    level = next((r.level for m in methods for r in m.aspects.values()), "pooled")
    dataset = next((m.dataset for m in methods if m.dataset), None)
    ax.set_title(f"{dataset or ''} {level_name(dataset, level)}\nwhiskers = bootstrap CI", fontsize="medium")
    ax.legend(fontsize="small")
    return _save(fig, plt, path)


def plot_score_distribution(method: MethodResult, path: str | Path, scale: tuple[int, int] | None = None) -> Path:
    """Per aspect, the % of items at each score point for humans and the method (DEBATE, Table 2)."""
    plt = _pyplot()
    aspects = [a for a in aspect_order([method]) if a in method.aspects]
    fig, axes = plt.subplots(1, max(1, len(aspects)), figsize=(3.2 * max(1, len(aspects)), 3.2), squeeze=False)
    for ax, aspect in zip(axes[0], aspects, strict=False):
        data = method.aspects[aspect].data
        low, high = scale or (math.floor(min(data.human, default=1)), math.ceil(max(data.human, default=5)))
        points = list(range(low, high + 1))
        human = score_distribution(data.human, low, high)
        predicted = score_distribution(data.predicted, low, high)
        ax.bar([p - 0.2 for p in points], [human[p] for p in points], 0.4, label="Human")
        ax.bar([p + 0.2 for p in points], [predicted[p] for p in points], 0.4, label=method.name)
        ax.set_xticks(points)
        ax.set_title(aspect.capitalize())
        ax.set_xlabel("score")
    axes[0][0].set_ylabel("% of items")
    axes[0][0].legend(fontsize="small")
    return _save(fig, plt, path)


def plot_confusion(method: MethodResult, path: str | Path) -> Path:
    """Human verdict (rows) vs predicted verdict (columns), with counts in the cells."""
    if method.labels is None:
        raise ValueError(f"{method.name}: no pairwise or choice verdicts to plot")
    plt = _pyplot()
    labels = [PAIRWISE_NAMES.get(label, label) for label in method.labels.labels]
    matrix = method.labels.confusion
    fig, ax = plt.subplots(figsize=(4.2, 3.8))
    ax.imshow(matrix, cmap="Blues")
    for i in range(matrix.shape[0]):
        for j in range(matrix.shape[1]):
            ax.text(j, i, str(int(matrix[i, j])), ha="center", va="center",
                    color="white" if matrix[i, j] > matrix.max() / 2 else "black")
    ax.set_xticks(range(len(labels)), labels)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel(f"{method.name} verdict")
    ax.set_ylabel("human verdict")
    ax.set_title(f"acc {method.labels.accuracy:.3f}, kappa {method.labels.kappa:.3f}, n={method.labels.n}")
    return _save(fig, plt, path)


def _save(fig: Any, plt: Any, path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
