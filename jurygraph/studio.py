"""Compiled protocol graphs for LangGraph Studio / ``langgraph dev`` (declared in ``langgraph.json``).

    pip install -e '.[studio]'      # langgraph-cli[inmem], in the environment where jurygraph is installed
    langgraph dev --no-browser      # from the repository root; serves every graph on 127.0.0.1:2024

The graphs are those the protocols' specs name (``ProtocolSpec.studio``, :mod:`jurygraph.graphs.spec`), each
compiled with its paper's default settings and no checkpointer (the LangGraph server brings its own);
``langgraph.json`` lists them (``python -m jurygraph.studio`` prints it, a test checks it). Its ``context_schema``
is :class:`~jurygraph.llm.models.JuryContext`, which the server builds from the run's JSON context, so model specs
are plain strings::

    {"default": "openai:gpt-4o-mini", "models": {"Critic": "google_genai:gemini-2.0-flash"}}
    {"default": "openai:llama3@http://127.0.0.1:8000/v1"}

With no context, every agent uses the embedded offline model when ``jurygraph[local]`` is installed
(a smoke-test model: its ratings carry no signal). The input is ``{"item": {...}}``: an
:class:`~jurygraph.judging.items.EvalItem` as JSON, e.g. a FairEval question (``task: "pairwise"``) for ChatEval
and the ChatEval baselines, a SummEval or Topical-Chat item (``task: "score"``) for DEBATE, ReFeR
and G-Eval.

Two graphs route the items their panel (the Ensemble: General Public and Critic) is unsure of
(:mod:`jurygraph.graphs.escalation`): ``ensemble_escalation`` sends an item whose referees disagree
(``agreement<1``) to ChatEval's single agent on the context's ``"escalation"`` model
(``{"models": {"escalation": "openai:gpt-4o"}}``); ``ensemble_review`` stops such an item at the ``review`` node,
which calls ``interrupt()``: Studio shows the panel's verdict, its doubt signals and the transcript, and the run
goes on with a resume value such as ``{"verdict": "1", "reviewer": "ada", "note": "..."}`` (``"1"``, ``"2"``,
``"tie"``, a score, a choice's answer).
"""

from __future__ import annotations

import json
from typing import Any

from langgraph.graph.state import CompiledStateGraph

from jurygraph.graphs.registry import builtin

# graph id -> the compiled graph, for every Studio graph of every built-in protocol, in the protocols' order
GRAPHS: dict[str, CompiledStateGraph] = {
    name: build().compile(name=name) for spec in builtin().values() for name, build in spec.studio.items()
}
globals().update(GRAPHS)  # `langgraph dev` loads each as ./jurygraph/studio.py:<graph id>


def langgraph_json() -> dict[str, Any]:
    """``langgraph.json``: the Python version, the package, and every graph above."""
    return {"python_version": "3.11", "dependencies": ["."],
            "graphs": {name: f"./jurygraph/studio.py:{name}" for name in GRAPHS}}


if __name__ == "__main__":
    print(json.dumps(langgraph_json(), indent=2))
