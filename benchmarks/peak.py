"""Run a command and print (one JSON line) its start time, exit code, CPU time and peak RSS, measured from here.

Why a process of its own: Linux keeps a process's peak RSS (``ru_maxrss``) across ``execve``, and a child
forked from a large parent starts out mapping the parent's pages. The benchmark's own process holds the
items it writes (hundreds of MB at 20,000), so ``wait4`` on a ``jurygraph`` it started directly reported the
*benchmark's* size, growing with the run, not jurygraph's. This small process forks the command instead.

    python benchmarks/peak.py -- jurygraph eval ...   ->  {"started": ..., "ended": ..., "exit_code": 0, ...}

``started`` is taken right before the command is started and ``ended`` right after it exits (``time.time()``, the
clock the benchmark server stamps its log with): the delay to the first request and from the last answer to the
exit are measured against them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def main(argv: list[str]) -> int:
    command = argv[argv.index("--") + 1:] if "--" in argv else argv
    started = time.time()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    ended = time.time()
    print(json.dumps({"started": started, "ended": ended, "exit_code": os.waitstatus_to_exitcode(status),
                      "peak_rss_kb": usage.ru_maxrss, "cpu_seconds": usage.ru_utime + usage.ru_stime}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
