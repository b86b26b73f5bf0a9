"""A command measured against the benchmark server: its own clock (``benchmarks/peak.py``) and the server's.

From ``peak.py`` (start, end, exit code, CPU, peak RSS of the command, measured from a small parent) and the
server's log of the command's requests (when each arrived and was answered; one machine, one ``time.time()``):

- requests/s = answers / (last answer - first request received): the judging, without start-up and exit;
- first request = first request received - the command's start;
- exit = the command's end - its last answer;
- wall = the command's end - its start.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PEAK = Path(__file__).resolve().with_name("peak.py")


def load() -> str:
    """The machine's load averages (1, 5, 15 min), as ``uptime`` prints them: a shared machine's figures vary."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def jurygraph_command() -> list[str]:
    """``jurygraph`` as a user runs it: the console script beside this Python (else ``python -m jurygraph.cli``)."""
    script = Path(sys.executable).with_name("jurygraph")
    return [str(script)] if script.exists() else [sys.executable, "-m", "jurygraph.cli"]


def measured(server: Any, command: Sequence[str]) -> dict[str, Any]:
    """Run ``command`` from ``peak.py`` against ``server`` (a ``ServerProcess``) and read both clocks."""
    before = server.stats()
    finished = subprocess.run([sys.executable, str(PEAK), "--", *command], capture_output=True, text=True)
    after = server.stats()
    span = server.span(before["answered"])
    child = json.loads(finished.stdout.strip().splitlines()[-1])
    answered = span["count"]
    judging = (span["last_answered"] - span["first_received"]) if answered else None
    figures: dict[str, Any] = {
        "exit_code": child["exit_code"], "requests": after["requests"] - before["requests"], "answered": answered,
        # TCP connections the command opened (the harness's own /stats request is one more)
        "connections": after["connections"] - before["connections"] - 1,
        "wall_s": round(child["ended"] - child["started"], 3),
        "requests_per_second": round(answered / judging, 1) if judging else None,
        "first_request_s": round(span["first_received"] - child["started"], 3) if answered else None,
        "exit_after_last_reply_s": round(child["ended"] - span["last_answered"], 3) if answered else None,
        "cpu_ms_per_request": round(1000 * child["cpu_seconds"] / answered, 2) if answered else None,
        "peak_rss_mb": round(child["peak_rss_kb"] / 1024, 1), "load": load(),
    }
    if child["exit_code"] != 0:
        figures["stderr"] = finished.stderr[-800:]
    return figures


def median_of(runs: Sequence[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return round(statistics.median(values), 3) if values else None
