"""A protocol's flow as a diagram: mermaid text, ASCII art, or a PNG rendered offline with Graphviz."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph


class GraphvizMissing(LookupError):
    """PNG rendering needs Graphviz's ``dot`` program, and it is not on PATH."""


def _drawable(graph: StateGraph | CompiledStateGraph):  # type: ignore[no-untyped-def]
    compiled = graph.compile() if isinstance(graph, StateGraph) else graph
    return compiled.get_graph()


def to_dot(graph: StateGraph | CompiledStateGraph) -> str:
    """Graphviz DOT text of the graph: solid edges, dashed conditional ones, start/end as ovals."""
    drawable = _drawable(graph)
    lines = ["digraph jurygraph {", '  rankdir=TB; node [shape=box, style="rounded,filled", fillcolor="#f2f0ff", '
             'fontname="Helvetica"]; edge [fontname="Helvetica", fontsize=10];']
    for node_id, node in drawable.nodes.items():
        shape = ', shape=oval, fillcolor="#bfb6fc"' if node_id in ("__start__", "__end__") else ""
        lines.append(f'  "{node_id}" [label="{node.name}"{shape}];')
    for edge in drawable.edges:
        attrs = ["style=dashed"] if edge.conditional else []
        if edge.data:
            attrs.append(f'label="{edge.data}"')
        lines.append(f'  "{edge.source}" -> "{edge.target}"' + (f" [{', '.join(attrs)}]" if attrs else "") + ";")
    lines.append("}")
    return "\n".join(lines)


def render_graph(graph: StateGraph | CompiledStateGraph, fmt: str = "mermaid", out: str | Path | None = None) -> str:
    """Mermaid or ASCII text (written to ``out`` if given), or a PNG file path for ``fmt='png'``."""
    if fmt == "mermaid":
        text = _drawable(graph).draw_mermaid()
    elif fmt == "ascii":
        text = _drawable(graph).draw_ascii()
    elif fmt == "png":
        return str(render_png(graph, out or "graph.png"))
    else:
        raise ValueError(f"unknown diagram format {fmt!r}: mermaid, png or ascii")
    if out:
        Path(out).write_text(text, encoding="utf-8")
        return str(out)
    return text


def render_png(graph: StateGraph | CompiledStateGraph, out: str | Path) -> Path:
    """Render with Graphviz's ``dot`` (offline; mermaid.ink would need the network)."""
    dot = shutil.which("dot")
    if dot is None:
        raise GraphvizMissing("PNG diagrams need Graphviz's 'dot': apt-get install graphviz (or brew install graphviz)")
    path = Path(out)
    subprocess.run([dot, "-Tpng", "-o", str(path)], input=to_dot(graph).encode(), check=True)
    return path


def png_bytes(graph: StateGraph | CompiledStateGraph) -> bytes:
    """PNG bytes for inline display in notebooks (IPython.display.Image(png_bytes(g)))."""
    dot = shutil.which("dot")
    if dot is None:
        raise GraphvizMissing("PNG diagrams need Graphviz's 'dot': apt-get install graphviz")
    return subprocess.run([dot, "-Tpng"], input=to_dot(graph).encode(), check=True, capture_output=True).stdout
