"""``jurygraph report RUN_DIR [RUN_DIR ...] [--out report.html]``: runs as one self-contained HTML page.

This command reads: each run's manifest and results (``running.rundir``), each item's conversation from its
checkpoint (``cli.show``), and the protocol's graph rebuilt from the manifest's saved options (the graph
``jurygraph draw`` draws). ``measuring.report`` lays the page out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from jurygraph.cli.metaeval import panels_of
from jurygraph.cli.preflight import UsageError
from jurygraph.measuring.report import RunInput, build_report
from jurygraph.running.rundir import CHECKPOINTS, read_manifest, read_results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", nargs="+", metavar="RUN_DIR",
                        help="run directories (NAME=DIR to name one); a --reverse run after its forward run gives "
                             "the position bias")
    parser.add_argument("--out", default="report.html", help="the HTML file to write (default report.html)")
    parser.add_argument("--title", help="the page's title")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples of the agreement "
                                                                   "intervals (default 1000; 0 = none)")
    parser.add_argument("--no-conversations", action="store_true",
                        help="do not read the checkpoints (smaller page: each item shows its judges' replies only)")
    parser.set_defaults(handler=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    runs = [read_run(entry, conversations=not args.no_conversations) for entry in args.run_dir]
    out = Path(args.out)
    out.write_text(build_report(runs, title=args.title, resamples=args.resamples), encoding="utf-8")
    print(f"{out} ({out.stat().st_size / 1e6:.1f} MB, {sum(len(r.records) for r in runs)} records)")
    return 0


def read_run(entry: str, *, conversations: bool = True) -> RunInput:
    name, sep, path = entry.partition("=")
    if not sep:
        name, path = "", entry
    manifest = read_manifest(path)
    if manifest is None:
        raise UsageError(f"{path}: no manifest.json (is it a jurygraph run directory?)")
    records = read_results(path)
    name = name or str(manifest.get("protocol") or Path(path).name)
    png, text = diagram(manifest)
    views = item_views(path, [str(r.get("id")) for r in records]) if conversations else {}
    return RunInput(name, path, manifest, records, views, png, text, panels_of([manifest], [records])[0])


def item_views(run_dir: str, ids: list[str]) -> dict[str, dict[str, Any]]:
    """Each item's ``cli.show`` view, with every agent's history (what it heard), from the run's checkpoints."""
    from jurygraph.cli.show import item_states, item_view, message_data

    if not (Path(run_dir) / CHECKPOINTS).is_file():
        return {}  # e.g. a Postgres run: the page shows each judge's reply without the debate
    views = {}
    for item_id, values in item_states(run_dir, dict.fromkeys(ids)):
        if not values:  # an item that never reached a checkpoint (failed at once)
            continue
        view = item_view(item_id, values)
        view["histories"] = {agent: [message_data(m) for m in history]
                             for agent, history in (values.get("histories") or {}).items()}
        views[item_id] = view
    return views


def diagram(manifest: dict[str, Any]) -> tuple[bytes | None, str | None]:
    """The protocol's graph rebuilt from the manifest's options: PNG through Graphviz, else mermaid text."""
    from jurygraph.cli.diagrams import GraphvizMissing, png_bytes, render_graph
    from jurygraph.cli.protocols import build_protocol, manifest_args

    args = manifest_args(manifest)
    # the protocol itself, as `jurygraph draw` draws it: a calibration only runs it in both orders, which the
    # summary's parameters say (drawn, the wrapper would hide the debate inside one node per order)
    args.calibrate, args.no_calibrate = None, True
    try:
        graph = build_protocol(args).graph
    except (ValueError, LookupError, TypeError) as err:  # a run of an older or unknown protocol: no diagram
        print(f"jurygraph: no diagram for {manifest.get('protocol')}: {err}", file=sys.stderr)
        return None, None
    try:
        return png_bytes(graph), None
    except GraphvizMissing:
        return None, render_graph(graph, "mermaid")
