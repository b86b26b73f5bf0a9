"""The panel as an inspect_ai scorer, for real: ``inspect_ai.eval()`` of a task whose solver gives fixed outputs and
whose scorer is the panel; the log's scores, explanations and metadata are read back."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from inspect_ai import Task
from inspect_ai import eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.log import EvalLog, read_eval_log
from inspect_ai.model import ModelOutput
from inspect_ai.scorer import Scorer
from inspect_ai.solver import Generate, Solver, TaskState, solver

from jurygraph.integrations.inspect import panel_scorer
from jurygraph.judging.items import format_score
from jurygraph.testing import FakeJudge
from jurygraph.testing.fake_server import FakeOpenAIServer
from tests.test_evaluators import ASPECT, eval_verdicts, item_texts, score_reply, topical_items


@solver
def fixed_outputs(outputs: dict[str, str]) -> Solver:
    """The system under test: answers each sample with its fixed output."""
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        state.output = ModelOutput.from_content(model="fixed", content=outputs[str(state.sample_id)])
        return state

    return solve


def run(samples: list[Sample], outputs: dict[str, str], scorer: Scorer, log_dir: Path) -> EvalLog:
    (log,) = inspect_eval(Task(dataset=samples, solver=fixed_outputs(outputs), scorer=scorer), model="mockllm/model",
                          log_dir=str(log_dir), display="none")
    assert log.status == "success", log.error
    return read_eval_log(log.location)


def test_inspect_scores_samples_with_the_panel_and_the_verdicts_of_jurygraph_eval(
        openai_server: Callable[..., FakeOpenAIServer], tmp_path: Path) -> None:
    server = openai_server(score_reply)
    items = topical_items()
    cli = eval_verdicts(["--protocol", "chateval", "--dataset", "topical-chat", "--aspect", ASPECT, "--limit",
                         str(len(items)), "--model", "judge", "--base-url", server.base_url], tmp_path / "cli")
    samples = [Sample(id=item.id, input=str(item.source), target=str((item.human or {})[ASPECT]),
                      metadata={"context": item.context}) for item in items]
    scorer = panel_scorer("chateval", task="score", aspect=ASPECT, dataset="topical-chat",
                          default=f"openai:judge@{server.base_url}", run_dir=tmp_path / "run")
    log = run(samples, {item.id: str(item.response) for item in items}, scorer, tmp_path / "logs")
    assert log.samples is not None and len(log.samples) == len(items)
    for sample, item in zip(sorted(log.samples, key=lambda s: str(s.id)), sorted(items, key=lambda i: i.id),
                            strict=True):
        assert sample.scores is not None
        score = sample.scores["chateval"]
        raw = cli[item_texts(item)]["score"]
        assert score.answer == format_score(raw) and score.value == (raw - 1) / 2  # on 1-3, normalised
        assert score.explanation is not None and score.explanation.startswith("General Public: ")
        assert score.metadata is not None and set(score.metadata["members"]) == {"General Public", "Critic"}
        assert "spread" in score.metadata["doubt"] and score.metadata["run_dir"] == str(tmp_path / "run")
    assert log.results is not None
    mean = log.results.scores[0].metrics["mean"].value
    assert math.isclose(mean, sum(float(s.scores["chateval"].value) for s in log.samples) / len(items))


def test_a_missing_verdict_is_unscored_and_a_pairwise_panel_compares_with_the_target(tmp_path: Path) -> None:
    judge = FakeJudge(respond=lambda p, m: "No idea." if "silence" in m[0].text else
                      "Evaluation evidence: ok.\nThe score of Assistant 1: 8\nThe score of Assistant 2: 3")
    scorer = panel_scorer("single", task="pairwise", default=judge, no_calibrate=True)
    samples = [Sample(id="a", input="Say hi.", target="hello"), Sample(id="b", input="Say hi.", target="silence")]
    log = run(samples, {"a": "hi!", "b": "hi there"}, scorer, tmp_path / "logs")
    assert log.samples is not None
    scores = {str(s.id): s.scores["single"] for s in log.samples if s.scores}
    assert (scores["a"].value, scores["a"].answer) == (1.0, "1")  # the model's output (response 1) wins
    assert math.isnan(float(scores["b"].value)) and scores["b"].reason == "grader_failed"  # inspect's "no score"
    assert "gave no verdict" in str(scores["b"].explanation)
    assert log.results is not None and log.results.scores[0].metrics["mean"].value == 1.0
    assert len(judge.calls) == 3  # one call for "a"; for "b" the unreadable reply and its one re-ask
