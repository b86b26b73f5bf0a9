"""Evaluation aspects of the built-in benchmarks: definition, scale, what is being judged."""

from __future__ import annotations

from dataclasses import dataclass

from jurygraph.judging.benchmarks import TASKS, canonical
from jurygraph.judging.items import EvalItem, Scale, TaskKind
from jurygraph.prompts import load_json


def _aspect_table(dataset: str | None) -> str | None:
    """The name of the benchmark's aspect table (prompts/aspects/<name>.json): its score benchmarks only."""
    key = canonical(dataset)
    return key if key is not None and TASKS[key] is TaskKind.SCORE else None


@dataclass(frozen=True)
class Aspect:
    dataset: str
    name: str
    definition: str
    scale: Scale
    target: str  # "summary" or "response": the word the templates use for the judged text


def aspects_of(dataset: str) -> list[str]:
    """Names of the aspects a built-in benchmark is annotated with."""
    key = _aspect_table(dataset)
    if key is None:
        raise KeyError(f"no built-in aspects for dataset {dataset!r}; known: summeval, topical-chat")
    return [name for name in load_json(f"aspects/{key}") if not name.startswith("_")]


def get_aspect(dataset: str | None, name: str) -> Aspect | None:
    """The built-in definition of ``name`` for ``dataset``; None for datasets without built-in aspects."""
    key = _aspect_table(dataset)
    if key is None:
        return None
    table = load_json(f"aspects/{key}")
    if name not in table or name.startswith("_"):
        known = ", ".join(n for n in table if not n.startswith("_"))
        raise KeyError(f"unknown aspect {name!r} for {dataset}; known: {known}")
    entry = table[name]
    return Aspect(key, name, entry["definition"], Scale(low=entry["scale"][0], high=entry["scale"][1]),
                  entry["target"])


def aspect_title(name: str) -> str:
    """An aspect's name as a form's label: 'coherence' -> 'Coherence'."""
    return name[:1].upper() + name[1:]


def scale_of(item: EvalItem, aspect: Aspect | None, default: Scale | None = None) -> Scale:
    """The scale a score item is judged on: the item's own, else ``default`` (a template's), else the aspect's."""
    scale = item.scale or default or (aspect.scale if aspect else None)
    assert scale is not None  # EvalItem guarantees a scale for score items
    return scale
