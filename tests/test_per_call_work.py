"""Issue 32: work that need not be done at every call is done once, with the same results."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import HumanMessage

from jurygraph import EvalItem, JuryContext, ModelSpec, create_chateval
from jurygraph.judging.items import as_item
from jurygraph.judging.state import coerce_item
from jurygraph.llm.calls import GraphNode, ModelRequest, _bound
from jurygraph.llm.models import ResolvedModel, build_model
from jurygraph.running import rundir
from jurygraph.testing import FakeJudge


def _item(**changes: Any) -> EvalItem:
    return EvalItem.model_validate({"id": "a", "task": "score", "response": "text", "scale": {"low": 1, "high": 5},
                                    **changes})


def test_a_model_is_copied_once_per_parameter_set() -> None:
    model = build_model(ModelSpec.parse("openai:m@http://127.0.0.1:9/v1"))
    resolved = ResolvedModel(model, "openai:m", None, True)

    def request(**params: Any) -> ModelRequest:
        return ModelRequest(agent="A", role="referee", messages=[HumanMessage("hi")], params=params)

    hot, again, cold = _bound(resolved, request(temperature=0.9)), _bound(resolved, request(temperature=0.9)), \
        _bound(resolved, request(temperature=0.1))
    assert hot is again and hot is not model
    assert [getattr(m, "temperature") for m in (hot, cold)] == [0.9, 0.1]  # noqa: B009
    assert _bound(resolved, request()) is model


def test_the_state_item_is_validated_once_and_a_changed_dict_is_validated_again() -> None:
    state_item = coerce_item(None, _item())
    first = as_item(dict(state_item))  # a copy, as each step reads it
    assert as_item(dict(state_item)) is first
    changed = as_item({**state_item, "response": "other text"})
    assert changed is not first and changed.response == "other text"
    with pytest.raises(Exception, match="response"):
        as_item({**state_item, "response": ""})  # still validated: a score item needs its response


class _Heard(BaseCallbackHandler):
    def __init__(self) -> None:
        self.chains: list[str] = []

    def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
        self.chains.append(str(kwargs.get("name")))


def test_graph_nodes_open_their_own_run_only_when_something_hears_it() -> None:
    judge = FakeJudge(respond=lambda prompt, messages: "Evaluation evidence: fine.\nScore: 4")
    app = create_chateval().compile()
    item = _item(question="q")
    heard = _Heard()
    traced = app.invoke({"item": item}, {"callbacks": [heard]}, context=JuryContext(default=judge))
    untraced = app.invoke({"item": item}, context=JuryContext(default=judge))
    assert traced["verdict"] == untraced["verdict"]
    said = [[(m.name, m.content) for m in run["transcript"]] for run in (traced, untraced)]
    assert said[0] == said[1] and len(said[0]) == 4  # the same words (each message's id is its own run's)
    # traced: LangGraph's run for the node, and the RunnableLambda's inside it, as before
    assert heard.chains.count("aggregate") == 2 and isinstance(app.nodes["aggregate"].bound, GraphNode)


def test_a_results_line_is_in_the_file_at_once_and_synced_by_the_close(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    real = os.fsync
    def counted(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(rundir.os, "fsync", counted)
    results = rundir.ResultsFile(tmp_path / "results.jsonl", ())
    before = len(synced)
    results.write({"id": "a"})
    assert (tmp_path / "results.jsonl").read_text() == '{"id": "a"}\n'  # before any sync: a kill loses nothing
    results.close()
    assert len(synced) > before


def test_a_failed_sync_is_raised_by_the_next_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results = rundir.ResultsFile(tmp_path / "results.jsonl", ())

    def failing(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(rundir.os, "fsync", failing)
    results.write({"id": "a"})
    with pytest.raises(OSError, match="No space"):
        results.close()
