"""The package's layers, checked on its import graph (grimp, the engine of import-linter): imports go one way,
judging -> model access -> nodes/graphs -> running -> measuring -> evaluators -> interfaces; no module imports itself
back through others; graph modules hold no command-line code, and the evaluators none of the interfaces'.

``graphs/``, ``nodes/`` and ``prompts/`` install as ``jurygraph.graphs`` etc. through a package-dir mapping that
grimp does not follow (it walks the ``jurygraph`` folder), so the test assembles the installed layout in a
temporary folder and builds the graph there, in a fresh interpreter.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAPPED = {"graphs": "graphs", "nodes": "nodes", "prompts": "prompts"}  # folder -> jurygraph.<name>

# highest first; names on one line are siblings that must not import each other
LAYERS: list[tuple[str, ...]] = [
    ("jurygraph.cli", "jurygraph.studio", "jurygraph.testing", "jurygraph.integrations"),
    ("jurygraph.evaluators",),
    ("jurygraph.measuring",),
    ("jurygraph.running",),
    ("jurygraph.graphs",),
    ("jurygraph.nodes",),
    ("jurygraph.llm",),
    ("jurygraph.judging",),
    ("jurygraph.prompts", "jurygraph.data"),
]

PROBE = """
import json, sys
import grimp

layers = [grimp.Layer(*names, independent=True) for names in json.loads(sys.argv[1])]
graph = grimp.build_graph("jurygraph", include_external_packages=True, cache_dir=None)
illegal = sorted(
    f"{' | '.join(sorted(route.heads))} -> {' -> '.join(route.middle)} -> {' | '.join(sorted(route.tails))}"
    .replace(" ->  ->", " ->")
    for dependency in graph.find_illegal_dependencies_for_layers(layers=layers)
    for route in dependency.routes
)
own = sorted(m for m in graph.modules if m == "jurygraph" or m.startswith("jurygraph."))
cycles = sorted(
    f"{importer} -> {imported}"
    for importer in own
    for imported in graph.find_modules_directly_imported_by(importer)
    if imported.startswith("jurygraph.") and imported != importer
    and graph.chain_exists(importer=imported, imported=importer)
)
argparse_in_graphs = sorted(m for m in own if m.startswith("jurygraph.graphs")
                            and "argparse" in graph.find_modules_directly_imported_by(m))
print(json.dumps({"modules": own, "illegal": illegal, "cycles": cycles, "argparse": argparse_in_graphs}))
"""


def assemble(into: Path) -> Path:
    """The installed package's Python files in one folder, as an installed wheel lays them out."""
    package = into / "jurygraph"
    shutil.copytree(ROOT / "jurygraph", package, ignore=shutil.ignore_patterns("__pycache__", "*.json", "*.md"))
    for folder, name in MAPPED.items():
        shutil.copytree(ROOT / folder, package / name, ignore=shutil.ignore_patterns("__pycache__", "*.txt",
                                                                                       "*.json", "*.md"))
    return into


def import_graph(tmp_path: Path) -> dict[str, list[str]]:
    site = assemble(tmp_path)
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(LAYERS)], cwd=site, capture_output=True,
                          text=True, env={"PYTHONPATH": str(site), "PATH": ""}, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_imports_go_one_way_without_cycles_and_graphs_are_pure(tmp_path: Path) -> None:
    found = import_graph(tmp_path)
    # the graph is the whole package: the mapped folders are in it
    assert {"jurygraph.graphs.chateval", "jurygraph.nodes.referee", "jurygraph.prompts"} <= set(found["modules"])
    assert found["illegal"] == []
    assert found["cycles"] == []
    assert found["argparse"] == []


def test_every_subpackage_is_installed() -> None:
    """setuptools needs the package list (the mapped folders rule out automatic discovery): it must be whole."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    on_disk = {".".join(("jurygraph", *init.parent.relative_to(ROOT / "jurygraph").parts)).rstrip(".")
               for init in (ROOT / "jurygraph").rglob("__init__.py")}
    on_disk |= {f"jurygraph.{name}" for folder, name in MAPPED.items() if (ROOT / folder / "__init__.py").exists()}
    assert set(config["packages"]) == on_disk
    assert {config["package-dir"][f"jurygraph.{name}"] for name in MAPPED.values()} == set(MAPPED)
