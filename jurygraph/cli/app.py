"""The ``jurygraph`` command: one module per subcommand, each with ``add_command(subparsers)`` that registers
its subparser with ``set_defaults(handler=fn)``; ``fn(args) -> int`` is the exit code. ``main`` turns the
errors a user can cause into one line and an exit code."""

from __future__ import annotations

import argparse
import importlib
import sqlite3
import sys
from collections.abc import Sequence

from jurygraph.cli.preflight import UsageError, os_error_line
from jurygraph.llm.models import MissingAPIKey
from jurygraph.llm.redact import redact_text
from jurygraph.running.datasets import DatasetError
from jurygraph.running.rundir import RunLocked
from jurygraph.running.runner import RunAborted

COMMAND_MODULES: list[str] = [
    "jurygraph.cli.eval", "jurygraph.cli.draw", "jurygraph.cli.demo", "jurygraph.cli.bench",
    "jurygraph.cli.metaeval", "jurygraph.cli.autoprompt", "jurygraph.cli.reasoning_report", "jurygraph.cli.show",
]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jurygraph", description="Panels of LLM judges as LangGraph graphs.")
    commands = parser.add_subparsers(dest="command", required=True)
    for module in COMMAND_MODULES:
        importlib.import_module(module).add_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    args.argv = argv  # a resume tells the options given now from the defaults
    try:
        return int(args.handler(args))
    except (UsageError, RunLocked, DatasetError, MissingAPIKey) as err:
        print(f"jurygraph: {redact_text(str(err))}", file=sys.stderr)
        return 2
    except RunAborted as stop:  # a run started by another command (bench) that stopped on a provider or disk
        print(f"jurygraph: stopped: {stop}", file=sys.stderr)
        return stop.exit_code
    except OSError as err:  # unreadable dataset, read-only or full --out, a directory where a file belongs
        print(f"jurygraph: {os_error_line(err)}", file=sys.stderr)
        return 2
    except sqlite3.Error as err:
        print(f"jurygraph: checkpoint or cache database: {err}", file=sys.stderr)
        return 2
    except (ValueError, KeyError, LookupError, ImportError) as err:
        print(f"jurygraph: {redact_text(str(err))}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
