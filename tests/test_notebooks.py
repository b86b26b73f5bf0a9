"""The tutorial notebooks run top to bottom (nbclient, a kernel on this interpreter, fake models, cwd in a
temporary directory so nothing is written into the repository); they are stored without outputs and are
exactly what ``notebooks/build_notebooks.py`` writes."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).parent.parent / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))


def generate(into: Path) -> list[str]:
    """The notebooks ``build_notebooks.py`` writes, written into ``into``: their names."""
    spec = importlib.util.spec_from_file_location("build_notebooks", NOTEBOOKS / "build_notebooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.HERE = into
    module.main()
    return sorted(p.name for p in into.glob("*.ipynb"))


def test_every_tutorial_the_generator_writes_is_there(tmp_path: Path) -> None:
    # however many there are: each one that is there runs (below), and none is missing or left over
    assert generate(tmp_path) == [p.name for p in PATHS]
    assert [p.stem for p in PATHS][:4] == ["01_quickstart", "02_compose_a_strategy", "03_checkpoints", "04_metaeval"]
    assert {"05_a_panel_inside_langsmith", "06_agent_threads"} <= {p.stem for p in PATHS}


def this_interpreter_kernel(tmp_path: Path) -> KernelManager:
    """A kernel spec pinned to sys.executable, so the notebooks test the jurygraph installed here."""
    spec_dir = tmp_path / "kernels" / "jurygraph-test"
    spec_dir.mkdir(parents=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "jurygraph test", "language": "python"}
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")
    specs = KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")])
    return KernelManager(kernel_name="jurygraph-test", kernel_spec_manager=specs)


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_runs_without_error(path: Path, tmp_path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    workdir, scratch = tmp_path / "cwd", tmp_path / "tmp"
    workdir.mkdir()
    scratch.mkdir()
    kernel = this_interpreter_kernel(tmp_path)
    client = NotebookClient(nb, km=kernel, timeout=120, resources={"metadata": {"path": str(workdir)}})
    try:
        # raises CellExecutionError naming the failing cell (the notebooks assert their own results);
        # TMPDIR keeps the notebooks' temporary run directories and SQLite files inside this test's tmp_path
        client.execute(env={**os.environ, "TMPDIR": str(scratch)})
    finally:
        if kernel.has_kernel:  # nbclient shuts down only kernels it created itself
            kernel.shutdown_kernel(now=True)
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert outputs, "a notebook that shows nothing teaches nothing"
    if path.stem in ("01_quickstart", "02_compose_a_strategy", "04_metaeval"):
        assert any("image/png" in o.get("data", {}) for o in outputs)  # diagrams / plots are shown inline
    assert not list(workdir.iterdir())  # nothing written where the notebook ran


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_is_stored_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None


def test_notebooks_are_what_the_generator_writes(tmp_path: Path) -> None:
    generate(tmp_path)
    for path in PATHS:
        assert (tmp_path / path.name).read_text(encoding="utf-8") == path.read_text(encoding="utf-8"), (
            f"{path.name} differs from build_notebooks.py: rerun python notebooks/build_notebooks.py")
