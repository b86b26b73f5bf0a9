"""``jurygraph reasoning-report RUN_DIR``: the accuracy report of a reasoning run, as JSON."""

from __future__ import annotations

import argparse
import json
from typing import Any

from jurygraph.measuring.reasoning import reasoning_report
from jurygraph.running.rundir import read_results


def add_arguments(cmd: argparse.ArgumentParser) -> None:
    cmd.add_argument("run_dir", help="a run directory written by `jurygraph eval`")
    cmd.set_defaults(handler=cmd_reasoning_report)


def cmd_reasoning_report(args: Any) -> int:
    report = reasoning_report([r for r in read_results(args.run_dir) if r.get("status") == "ok"])
    print(json.dumps(report, indent=2))
    return 0 if report["items"] else 1
