"""langgraph.json: every declared graph loads the way ``langgraph dev`` loads it (file path : attribute), is
a compiled graph with JuryContext as its context schema, and judges one item when the context arrives as
JSON (model specs as strings, as LangGraph Studio sends it) -- through the real OpenAI client to the local
test server."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from langgraph.graph.state import CompiledStateGraph

from jurygraph import JuryContext, verdict_of
from jurygraph.running.datasets import load_dataset
from jurygraph.testing import pairwise_reply
from jurygraph.testing.fake_server import prompt_of

ROOT = Path(__file__).parent.parent
CONFIG = json.loads((ROOT / "langgraph.json").read_text(encoding="utf-8"))
FAIREVAL = load_dataset("faireval").items[0]
SUMMEVAL = load_dataset("summeval", aspect="coherence").items[0]
TOPICAL = load_dataset("topical-chat", aspect="coherence").items[0]

# per built-in protocol's graph: the item it judges here and the verdict the scripted server leads to (a protocol
# added later tests its own Studio graph with its own replies)
EXPECTED: dict[str, tuple[Any, str, Any]] = {
    "chateval_one_by_one": (FAIREVAL, "label", "2"),
    "chateval_simultaneous": (FAIREVAL, "label", "2"),
    "chateval_summarizer": (FAIREVAL, "label", "2"),
    "debate": (SUMMEVAL, "score", 3.0),
    "refer_turbo": (TOPICAL, "score", 2.0),
    "refer_lite": (TOPICAL, "score", 2.0),
    "chateval_early_stop": (FAIREVAL, "label", "2"),
    "chateval_devil": (FAIREVAL, "label", "2"),
    "refer_peer_discussion": (TOPICAL, "score", 2.0),
    "single_agent": (FAIREVAL, "label", "2"),
    "ensemble": (FAIREVAL, "label", "2"),
    "geval": (SUMMEVAL, "score", 4.0),
    "analyze_rate": (SUMMEVAL, "score", 4.0),
    # the referees agree (6 and 8 each): neither escalated nor reviewed
    "ensemble_escalation": (FAIREVAL, "label", "2"),
    "ensemble_review": (FAIREVAL, "label", "2"),
}


def load_declared(target: str) -> Any:
    """Import ``./path/to/file.py:attr`` as langgraph-api does: the file as a module, then the attribute."""
    path, _, attr = target.partition(":")
    spec = importlib.util.spec_from_file_location(f"studio_{attr}", ROOT / path)
    assert spec is not None and spec.loader is not None, target
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, attr)


def respond(request: dict[str, Any], choice: int) -> str:
    """The local server's replies, in the answer form each protocol's prompt asks for."""
    prompt = prompt_of(request)
    said_before = sum(m.get("role") == "assistant" for m in request["messages"])
    if "just say NO ISSUE" in prompt:  # DEBATE Critic: one objection, then satisfied
        return "NO ISSUE." if said_before else "The summary repeats itself; a 4 is too generous."
    if "End your reply with the line of the Evaluation Form filled in" in prompt:  # DEBATE Scorer: 4, then 3
        return f"Rationale: the sentences mostly follow on.\n- Coherence: {4 - said_before}"
    if "“Rating”" in prompt:  # ReFeR peers and area chair (Topical-Chat, 1-3)
        return "Analysis: it follows the conversation.\nRating: 2"
    if '"Rating"' in prompt:  # Analyze-Rate (SummEval, 1-5)
        return "Analysis: the summary is well organised.\nRating: 4"
    if "Output with the following format strictly" in prompt:  # ChatEval-style referees
        return pairwise_reply(6, 8, "Assistant 2 is more complete.")
    if "Evaluation Form (scores ONLY)" in prompt:  # G-Eval
        return "4"
    return "I think Assistant 2 covers more of the question."  # ChatEval discussion / summary


def test_langgraph_json_declares_every_studio_graph_of_the_specs_and_nothing_else() -> None:
    from jurygraph import studio
    from jurygraph.graphs.registry import builtin

    assert studio.langgraph_json() == CONFIG  # regenerate with: python -m jurygraph.studio > langgraph.json
    assert list(studio.GRAPHS) == [name for spec in builtin().values() for name in spec.studio]
    assert set(EXPECTED) <= set(CONFIG["graphs"])
    for graph_id, target in CONFIG["graphs"].items():
        assert target == f"./jurygraph/studio.py:{graph_id}"


@pytest.mark.parametrize("graph_id", sorted(CONFIG["graphs"]))
def test_declared_graph_is_compiled_with_jury_context(graph_id: str) -> None:
    graph = load_declared(CONFIG["graphs"][graph_id])
    assert isinstance(graph, CompiledStateGraph)
    assert graph.name == graph_id
    assert graph.context_schema is JuryContext
    assert graph.checkpointer is None  # the LangGraph server attaches its own
    # Studio builds its input form from the input JSON schema (pydantic needs typing_extensions.TypedDict
    # for the state on Python < 3.12, else the server logs an error and shows no form)
    schema = graph.get_input_jsonschema()
    assert {"item", "histories", "verdict"} <= set(schema["properties"])
    assert "verdict" in graph.get_output_jsonschema()["properties"]
    # and its context form from the context schema: model specs as text, Python-only fields hidden
    context = graph.get_context_jsonschema()["properties"]
    assert {"models", "default", "reasks"} <= set(context) and not {"cache", "gates"} & set(context)


@pytest.mark.parametrize("graph_id", sorted(EXPECTED))
def test_declared_graph_judges_an_item_with_a_json_context(graph_id: str, openai_server) -> None:
    server = openai_server(respond)
    graph = load_declared(CONFIG["graphs"][graph_id])
    item, field, expected = EXPECTED[graph_id]
    # exactly what Studio sends: JSON input and a JSON context, coerced by LangGraph into JuryContext
    context = {"default": f"openai:fake-model@{server.base_url}", "reasks": 1}
    out = graph.invoke({"item": item.model_dump(mode="json")}, context=context)
    verdict = verdict_of(out)
    assert verdict is not None and not verdict.missing, out.get("verdict")
    found = getattr(verdict, field)
    assert found == (pytest.approx(expected) if field == "score" else expected)
    assert server.requests and all(r["model"] == "fake-model" for r in server.requests)
    text = item.question if item.task.value == "pairwise" else item.response
    assert text and any(text[:60] in prompt_of(r) for r in server.requests)


def test_a_json_context_names_models_per_agent_and_role() -> None:
    context = JuryContext(**{"default": "openai:m@http://127.0.0.1:1/v1",
                             "models": {"Critic": "openai:critic-model@http://127.0.0.1:1/v1"}})
    assert context.model_for("Critic", "referee").label == "openai:critic-model@http://127.0.0.1:1/v1"
    assert context.model_for("General Public", "referee").label == "openai:m@http://127.0.0.1:1/v1"
