"""The ``jurygraph`` command: one module per subcommand (``COMMANDS``), each with ``add_arguments(parser)`` that
declares its options and ``set_defaults(handler=fn)``; ``fn(args) -> int`` is the exit code. ``main`` turns the
errors a user can cause into one line and an exit code."""

from __future__ import annotations

import argparse
import importlib
import os
import select
import signal
import sqlite3
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn, TextIO

if TYPE_CHECKING:
    from jurygraph.running.runner import RunAborted

# command -> (its module, with ``add_arguments(parser)`` and a ``handler`` default; its one-line help). Only the
# command being run is imported: `jurygraph --help` loads none, `jurygraph metaeval` no LangGraph.
COMMANDS: dict[str, tuple[str, str]] = {
    "eval": ("jurygraph.cli.eval", "judge a dataset with a protocol; writes OUT/results.jsonl"),
    "draw": ("jurygraph.cli.draw", "print or render a protocol's graph"),
    "demo": ("jurygraph.cli.demo", "watch ChatEval judge 3 FairEval items with the embedded offline model"),
    "bench": ("jurygraph.cli.bench", "run methods over a benchmark (or read runs) and print the paper-style table "
                                     "of agreement with humans"),
    "metaeval": ("jurygraph.cli.metaeval", "agreement with humans of a finished run (RUN_DIR/results.jsonl)"),
    "autoprompt": ("jurygraph.cli.autoprompt", "generate ReFeR evaluation guidelines from a prompt structure and "
                                               "labelled examples (Appendix E); writes a prompt file"),
    "reasoning-report": ("jurygraph.cli.reasoning_report", "accuracy of a reasoning run against gold answers: the "
                                                           "verdict's, each peer's, the peer majority's (JSON)"),
    "show": ("jurygraph.cli.show", "one item of a run as a transcript: turns, judgments, verdict"),
    "review": ("jurygraph.cli.review", "decide the items a run paused for review (--review-when): each shown as "
                                       "`show` prints it, your verdict resumes its graph"),
    "rank": ("jurygraph.cli.rank", "rank the systems of pairwise runs (Bradley–Terry with bootstrap CIs, wins that "
                                   "survive the answer swap; the human ranking beside it)"),
    "report": ("jurygraph.cli.report", "runs as one self-contained HTML page: summary, agreement with humans, "
                                       "position bias, comparison, every item's debate"),
}


# commands whose handler has closed every file it wrote when it returns (eval: Run.finish closes the results,
# ledger, cache and checkpoints and writes the manifest before the summary is printed): the console script ends
# their process at once (``console_main``) instead of tearing the interpreter down (~0.3 s of freeing modules)
CLOSED_ON_RETURN = frozenset({"eval"})


def _command(argv: Sequence[str]) -> str | None:
    return next((arg for arg in argv if not arg.startswith("-")), None)


def _parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser, with the arguments of the command named in ``argv`` only (none for ``jurygraph --help``)."""
    parser = argparse.ArgumentParser(prog="jurygraph", description="Panels of LLM judges as LangGraph graphs.")
    commands = parser.add_subparsers(dest="command", required=True)
    chosen = _command(argv)
    for name, (module, help_text) in COMMANDS.items():
        sub = commands.add_parser(name, help=help_text)
        if name == chosen:
            importlib.import_module(module).add_arguments(sub)
    return parser


def _one_line_errors() -> tuple[type[BaseException], ...]:
    """What a user can cause (bad options or files, a busy run directory, a missing key): one line, exit 2.
    Imported only when an error is being handled, so a command loads no more than it uses."""
    from jurygraph.cli.preflight import UsageError
    from jurygraph.llm.models import MissingAPIKey
    from jurygraph.running.datasets import DatasetError
    from jurygraph.running.rundir import RunLocked

    return UsageError, RunLocked, DatasetError, MissingAPIKey


def _run_aborted() -> tuple[type[RunAborted], ...]:
    from jurygraph.running.runner import RunAborted

    return (RunAborted,)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser(argv).parse_args(argv)
    args.argv = argv  # a resume tells the options given now from the defaults
    try:
        code = int(args.handler(args))
        sys.stdout.flush()  # a reader that went away (| head) is found here, not in the interpreter's last flush
        return code
    except BrokenPipeError as err:
        return _stdout_closed() if _reader_gone(sys.stdout) else _os_error(err)
    except _one_line_errors() as err:
        print(f"jurygraph: {_redacted(err)}", file=sys.stderr)
        return 2
    except _run_aborted() as stop:  # a run started by another command (bench) that stopped on a provider or disk
        print(f"jurygraph: stopped: {stop}", file=sys.stderr)
        return stop.exit_code
    except OSError as err:  # unreadable dataset, read-only or full --out, a directory where a file belongs
        return _os_error(err)
    except sqlite3.Error as err:
        print(f"jurygraph: checkpoint or cache database: {err}", file=sys.stderr)
        return 2
    except (ValueError, KeyError, LookupError, ImportError) as err:
        print(f"jurygraph: {_redacted(err)}", file=sys.stderr)
        return 2


def console_main() -> NoReturn:
    """The ``jurygraph`` console script: :func:`main` on the command line, then the process ends with its exit code.
    After a command of ``CLOSED_ON_RETURN`` it ends without the interpreter's teardown, once stdout and stderr are
    flushed: what the command wrote is closed and on disk by then (``main`` itself returns, for callers in Python)."""
    argv = sys.argv[1:]
    closes = _command(argv) in CLOSED_ON_RETURN
    if closes:
        from jurygraph.cli.startup import pause_collection

        pause_collection()  # while the modules load; the command collects again before it judges
    code = main(argv)
    if not closes or not _nothing_pending():
        sys.exit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a reader gone, a closed stream: the interpreter's own exit reports it as before
        sys.exit(code)
    os._exit(code)


def _nothing_pending() -> bool:
    """Whether ending the process now loses nothing: no thread the interpreter would wait for (a non-daemon thread
    still running: its work is not done) and no Ray session, whose exit hook stops the processes it started."""
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    return not others and "ray" not in sys.modules


def _os_error(err: OSError) -> int:
    from jurygraph.cli.preflight import os_error_line

    print(f"jurygraph: {os_error_line(err)}", file=sys.stderr)
    return 2


def _reader_gone(stream: TextIO) -> bool:
    """Whether ``stream`` is a pipe whose reading end was closed (``jurygraph show RUN | head -3`` once head has its
    lines): poll() reports an error on such a pipe's writing end."""
    try:
        descriptor = stream.fileno()
    except (OSError, ValueError):  # not a file (a test's captured output)
        return False
    poller = select.poll()
    poller.register(descriptor, select.POLLOUT)
    return any(events & select.POLLERR for _, events in poller.poll(0))


def _stdout_closed() -> int:
    """Stop quietly, as Unix tools do when the reader of their output goes away: no message, and the exit status a
    shell gives a process that SIGPIPE ended (128 + 13). Everything a command writes to its files is written before
    it prints (an eval's results and manifest are on disk when its summary is printed). What is left in stdout's
    buffer goes to /dev/null, or the interpreter's last flush would complain on stderr."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


def _redacted(err: BaseException) -> str:
    from jurygraph.llm.redact import redact_text

    return redact_text(str(err))


if __name__ == "__main__":
    console_main()
