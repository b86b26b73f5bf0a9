"""The built-in benchmarks by their canonical names, the aliases people type, and the task kind of each."""

from __future__ import annotations

from jurygraph.judging.items import TaskKind

TASKS: dict[str, TaskKind] = {"faireval": TaskKind.PAIRWISE, "summeval": TaskKind.SCORE,
                              "topical-chat": TaskKind.SCORE}
ALIASES: dict[str, str] = {"topical_chat": "topical-chat"}  # the data file's name and the papers' spelling


def canonical(name: str | None) -> str | None:
    """The canonical name of a built-in benchmark (either spelling), or None for anything else."""
    key = ALIASES.get(name or "", name or "")
    return key if key in TASKS else None


def task_of(name: str | None) -> TaskKind | None:
    """The task kind of a built-in benchmark named in any case, or None when ``name`` is not one (a file)."""
    key = canonical(str(name or "").lower())
    return TASKS[key] if key else None
