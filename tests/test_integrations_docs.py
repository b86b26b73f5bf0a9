"""docs/INTEGRATIONS.md's examples run as they are written: each Python block as a script (the pytest one by
pytest, with LangSmith's test tracking pointed at the local fake), in a fresh process in a scratch directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jurygraph.testing.fake_langsmith import FakeLangSmith

DOC = Path(__file__).resolve().parents[1] / "docs" / "INTEGRATIONS.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
# the scripts' processes: no LangSmith or telemetry reaches beyond this machine
QUIET = {"MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true", "INSPECT_DISABLE_TELEMETRY": "1",
         "LANGSMITH_TRACING": "false"}


def test_the_doc_has_an_example_per_harness() -> None:
    heads = [block.splitlines()[0] for block in BLOCKS]
    assert len(BLOCKS) == 5 and heads[2] == "# test_panel.py"
    for harness in ("from langsmith import Client, aevaluate, evaluate", "import mlflow", "from inspect_ai import"):
        assert any(harness in block for block in BLOCKS), harness


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    return subprocess.run(argv, cwd=cwd, env={**clean, **QUIET, **env}, capture_output=True, text=True, timeout=600,
                          check=False)


@pytest.mark.parametrize("index", [i for i, b in enumerate(BLOCKS) if not b.startswith("# test_")])
def test_a_script_example_runs(index: int, tmp_path: Path) -> None:
    (tmp_path / "example.py").write_text(BLOCKS[index], encoding="utf-8")
    done = _run([sys.executable, "example.py"], tmp_path, {})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert done.stdout.strip()


def test_the_pytest_example_runs_and_logs_feedback(tmp_path: Path) -> None:
    (block,) = [b for b in BLOCKS if b.startswith("# test_panel.py")]
    (tmp_path / "test_panel.py").write_text(block, encoding="utf-8")
    with FakeLangSmith() as langsmith:
        done = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_panel.py"], tmp_path,
                    {"LANGSMITH_ENDPOINT": langsmith.url, "LANGSMITH_API_KEY": "lsv2-local",
                     "LANGSMITH_TRACING": "true", "LANGSMITH_TEST_SUITE": "faireval-panel"})
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
        assert {"chateval", "chateval/General Public", "chateval/Critic"} <= {f["key"] for f in langsmith.feedback}
