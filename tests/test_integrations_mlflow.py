"""The panel as an MLflow scorer, for real: ``mlflow.genai.evaluate`` with a local tracking store in a temporary
directory; the assessments MLflow logged are read back from its traces."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import mlflow
import pytest
from mlflow.entities import Feedback

from jurygraph.integrations.mlflow import MISSING, panel_scorer
from jurygraph.testing import FakeJudge
from jurygraph.testing.fake_server import FakeOpenAIServer
from tests.test_evaluators import ASPECT, as_evaluation, eval_verdicts, item_texts, score_reply, topical_items


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One SQLite tracking store for the module (creating its tables takes seconds), MLflow's telemetry off; the
    process's tracking URI restored after."""
    folder = tmp_path_factory.mktemp("mlflow")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        env.setenv("DO_NOT_TRACK", "true")
        before = mlflow.get_tracking_uri()
        mlflow.set_tracking_uri(f"sqlite:///{folder / 'mlflow.db'}")
        yield folder
        mlflow.set_tracking_uri(before)


@pytest.fixture
def tracking(store: Path, request: pytest.FixtureRequest) -> Path:
    """Each test its own experiment in the module's store, its traces' artifacts beside it (MLflow's default is
    ./mlruns, in the directory pytest runs from)."""
    name = request.node.name
    mlflow.create_experiment(name, artifact_location=(store / name).as_uri())
    mlflow.set_experiment(name)
    return store


def assessments(run_id: str) -> list[dict[str, Any]]:
    """Every feedback assessment of the run's traces (not the expectations MLflow logs beside them), with the
    trace's response (the outputs judged)."""
    found = []
    for trace in mlflow.search_traces(run_id=run_id, return_type="list"):
        for assessment in trace.info.assessments:
            if not isinstance(assessment, Feedback):
                continue
            found.append({"name": assessment.name, "value": getattr(assessment, "value", None),
                          "rationale": getattr(assessment, "rationale", None), "metadata": assessment.metadata or {},
                          "error": getattr(assessment, "error", None), "response": trace.data.response})
    return found


def test_mlflow_logs_the_panel_and_its_members_with_the_verdicts_of_jurygraph_eval(
        tracking: Path, openai_server: Callable[..., FakeOpenAIServer], tmp_path: Path) -> None:
    server = openai_server(score_reply)
    items = topical_items()
    cli = eval_verdicts(["--protocol", "chateval", "--dataset", "topical-chat", "--aspect", ASPECT, "--limit",
                         str(len(items)), "--model", "judge", "--base-url", server.base_url], tmp_path / "cli")
    judge = panel_scorer("chateval", task="score", aspect=ASPECT, dataset="topical-chat", normalize=False,
                         default=f"openai:judge@{server.base_url}", name="naturalness")
    data = [{"inputs": e["inputs"], "outputs": e["outputs"], "expectations": e["reference_outputs"]}
            for e in map(as_evaluation, items)]
    result = mlflow.genai.evaluate(data=data, scorers=[judge])
    found = assessments(result.run_id)
    panel = [a for a in found if a["name"] == "naturalness"]
    members = [a for a in found if a["name"].startswith("naturalness/")]
    assert len(panel) == len(items) and {a["name"] for a in members} == \
        {"naturalness/General Public", "naturalness/Critic"}
    for item in items:
        (assessment,) = [a for a in panel if str(item.response) in str(a["response"])]
        assert assessment["value"] == cli[item_texts(item)]["score"]
        assert assessment["rationale"].startswith("General Public: ")
        metadata = assessment["metadata"]
        assert metadata["protocol"] == "chateval" and metadata["doubt.missing"] == "0" and "doubt.spread" in metadata
        assert {"member.General Public", "member.Critic"} <= set(metadata)
    assert result.metrics["naturalness/mean"] == pytest.approx(sum(a["value"] for a in panel) / len(panel))


def test_a_missing_verdict_is_an_mlflow_error_not_a_score(tracking: Path) -> None:
    judge = panel_scorer("single", task="score", scale=(1, 5),
                         default=FakeJudge(respond=lambda p, m: "Fine." if "good" in m[0].text else
                                           "Evaluation evidence: ok.\nThe score of the response: 5"))
    result = mlflow.genai.evaluate(data=[{"inputs": {"question": "q"}, "outputs": "a good answer"},
                                         {"inputs": {"question": "q"}, "outputs": "another answer"}],
                                   scorers=[judge])
    panel = [a for a in assessments(result.run_id) if a["name"] == "single"]
    missing = [a for a in panel if a["error"] is not None]
    assert len(panel) == 2 and len(missing) == 1
    (none,) = missing
    assert none["value"] is None and none["error"].error_code == MISSING
    assert "gave no verdict" in none["error"].error_message
    assert result.metrics["single/mean"] == 1.0  # the missing verdict is left out, not counted as 0
