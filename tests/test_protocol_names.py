"""The generic layers never name a protocol: what a protocol is lives in its spec beside its factory
(``graphs/X.py``), and ``jurygraph/cli``, ``jurygraph/running`` and ``jurygraph/measuring`` read the specs. So
adding a protocol touches none of them, and nothing there treats a built-in protocol differently from yours.

Read from the code (not the docs): a string that is a protocol's name, an identifier with a protocol's name as
one of its words (``create_chateval``, ``is_debate``, ``_refer_plan``), an import of a protocol's graph or node
module. FairEval is also a built-in dataset, whose loader names it: for that name only its modules and factory
count; "single" is also an English word, so as a word of an identifier it does not."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

from jurygraph.graphs.registry import builtin
from jurygraph.running.datasets import BUILTIN as DATASETS

ROOT = Path(__file__).resolve().parents[1]
GENERIC = ("jurygraph/cli", "jurygraph/running", "jurygraph/measuring")
# the built-in protocols, the hybrids (their modules), FairEval's own evaluator
NAMES = {*builtin(), "devil", "peer_discussion", "faireval"}
# plain English too: as a word of an identifier ("single_agent", "single_unit_warnings") it names no protocol
WORDS = {"single"}


def _words(identifier: str) -> set[str]:
    parts = [p for p in re.split(r"[._]", identifier.lower()) if p]
    return {*parts, *("_".join(pair) for pair in itertools.pairwise(parts))}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    names = {n.replace("-", "_") for n in NAMES}
    plain = names - set(DATASETS)  # names that are not also a dataset's
    found = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.ImportFrom | ast.Import):
            modules = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
            imported = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else []
            for module in modules:
                tail = module.rsplit(".", 1)[-1]
                if module.startswith(("jurygraph.graphs.", "jurygraph.nodes.")) and tail in names:
                    found.append(f"{where}: imports {module}")
            for name in imported:
                if module in ("jurygraph.graphs", "jurygraph.nodes") and name in names:
                    found.append(f"{where}: imports {module}.{name}")
        identifiers: list[str] = []
        if isinstance(node, ast.Name):
            identifiers = [node.id]
        elif isinstance(node, ast.Attribute):
            identifiers = [node.attr]
        elif isinstance(node, ast.alias):
            identifiers = [node.asname or node.name]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            identifiers = [node.name]
        elif isinstance(node, ast.arg):
            identifiers = [node.arg]
        for identifier in identifiers:
            words = _words(identifier)
            hits = (words & (plain - WORDS)) | {n for n in names if f"create_{n}" in identifier.lower()}
            if hits:
                found.append(f"{where}: identifier {identifier} names {', '.join(sorted(hits))}")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                and node.value.strip().lower().replace("-", "_") in plain:
            found.append(f"{where}: the string {node.value!r}")
    return found


def test_the_generic_layers_name_no_protocol() -> None:
    files = [path for folder in GENERIC for path in sorted((ROOT / folder).rglob("*.py"))]
    assert len(files) > 30
    assert [line for path in files for line in offences(path)] == []


def test_the_check_finds_a_protocol_named_in_code(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('"""chateval in a docstring is prose."""\nfrom jurygraph.graphs.debate import create_debate\n'
                      'def _refer_plan(x):\n    return x == "analyze-rate" or is_debate(x)\n', encoding="utf-8")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        found = offences(sample)
    finally:
        ROOT = saved
    assert len(found) == 5, found  # the import, create_debate, _refer_plan, "analyze-rate", is_debate
