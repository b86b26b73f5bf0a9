"""The ``jurygraph`` command. ``main`` is imported on first use, so importing a subcommand module stays cheap."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "main":
        from jurygraph.cli.app import main

        return main
    raise AttributeError(f"module 'jurygraph.cli' has no attribute {name!r}")
