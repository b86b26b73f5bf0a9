"""The ``jurygraph`` command. ``main`` (returns the exit code) and ``console_main`` (the console script: ends the
process) are imported on first use, so importing a subcommand module stays cheap."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name in ("main", "console_main"):
        from jurygraph.cli import app

        return getattr(app, name)
    raise AttributeError(f"module 'jurygraph.cli' has no attribute {name!r}")
