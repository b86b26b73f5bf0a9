"""A panel inside LangSmith, for real: ``langsmith.evaluate()`` and ``aevaluate()`` over a dataset, a comparative
experiment and a ``@pytest.mark.langsmith`` test, against the local fake LangSmith; the panel's models are the
scripted FairEval judges at the local OpenAI fake (an oracle and a coin). What LangSmith received is asserted."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langsmith import Client, aevaluate, evaluate

from jurygraph.evaluators import PanelEvaluator, create_panel_evaluator
from jurygraph.judging.items import EvalItem
from jurygraph.running.datasets import load_dataset
from jurygraph.testing import panel_judges
from jurygraph.testing.fake_langsmith import FakeLangSmith
from jurygraph.testing.fake_server import FakeOpenAIServer
from tests.test_evaluators import eval_verdicts, item_texts

ITEMS = 4
MEMBERS = ("General Public", "Critic")


@pytest.fixture
def langsmith() -> Iterator[tuple[FakeLangSmith, Client]]:
    with FakeLangSmith() as fake:
        client = Client(api_url=fake.url, api_key="lsv2-fake-key-for-tests")
        yield fake, client
        client.flush()


@pytest.fixture
def judges(openai_server: Callable[..., FakeOpenAIServer]) -> FakeOpenAIServer:
    return openai_server(panel_judges.respond)


def faireval_items() -> list[EvalItem]:
    return load_dataset("faireval").items[:ITEMS]


def referees(server: FakeOpenAIServer) -> dict[str, str]:
    """ChatEval's referees: the public is the oracle (the human label), the Critic a coin."""
    return {"General Public": f"openai:gpt-4o-mini@{server.base_url}", "Critic": f"openai:coin@{server.base_url}"}


def pairwise_panel(server: FakeOpenAIServer, run_dir: Path | None = None) -> PanelEvaluator:
    return create_panel_evaluator("chateval", task="pairwise", dataset="faireval", models=referees(server),
                                  run_dir=run_dir, resamples=200)


def faireval_dataset(client: Client, name: str = "faireval-4") -> dict[str, tuple[str, str]]:
    """FairEval's first items as a LangSmith dataset (the question in, the human label out); the answers by question,
    for the targets to give."""
    dataset = client.create_dataset(name)
    client.create_examples(dataset_id=dataset.id, examples=[
        {"inputs": {"question": item.question}, "reference_outputs": {"label": (item.human or {})["label"]}}
        for item in faireval_items()])
    return {str(item.question): (str(item.response_1), str(item.response_2)) for item in faireval_items()}


def wait_for(condition: Callable[[], bool], seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def by_key(feedback: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for entry in feedback:
        found.setdefault(entry["key"], []).append(entry)
    return found


def test_evaluate_posts_the_panel_each_member_and_the_panel_diagnostics(
        langsmith: tuple[FakeLangSmith, Client], judges: FakeOpenAIServer, tmp_path: Path) -> None:
    fake, client = langsmith
    answers = faireval_dataset(client)
    panel = pairwise_panel(judges, tmp_path / "run")

    def target(inputs: dict[str, Any]) -> dict[str, Any]:
        first, second = answers[inputs["question"]]
        return {"response_1": first, "response_2": second}

    results = evaluate(target, data="faireval-4", evaluators=[panel], summary_evaluators=[panel.summary],
                       client=client, max_concurrency=4)
    client.flush()
    experiment = fake.session_named(results.experiment_name)
    feedback = by_key(fake.feedback_of(session=results.experiment_name))
    assert {key: len(entries) for key, entries in feedback.items() if "/agreement" not in key
            and key.count("/") < 2} == {"chateval": ITEMS, "chateval/General Public": ITEMS,
                                        "chateval/Critic": ITEMS, "chateval/panel_minus_best": 1,
                                        "chateval/effective_judges": 1}
    runs = {entry["run_id"] for entry in feedback["chateval"]}
    assert len(runs) == ITEMS and all(entry["session_id"] == experiment["id"] for entry in feedback["chateval"])
    for entry in feedback["chateval"]:
        assert entry["score"] in (0.0, 0.5, 1.0) and entry["value"] in ("1", "2", "tie")
        assert entry["comment"].startswith("General Public: ") and "verdict: " in entry["comment"]
    # the oracle's own feedback is the human label, run by run
    labels = {example["inputs"]["question"]: example["outputs"]["label"] for example in fake.examples.values()}
    questions = {run_id: run["inputs"]["question"] for run_id, run in fake.runs.items() if run_id in runs}
    assert all(labels[questions[entry["run_id"]]] == entry["value"] for entry in feedback["chateval/General Public"])
    # the summary: the panel and each member against the reference labels, the panel minus its best member
    (agreement,) = feedback["chateval/agreement"]
    assert agreement.get("run_id") is None and agreement["session_id"] == experiment["id"]  # on the experiment
    assert feedback["chateval/General Public/agreement"][0]["score"] == 1.0
    assert "with the reference labels on 4 items" in agreement["comment"]
    (vs_best,) = feedback["chateval/panel_minus_best"]
    assert vs_best["score"] == pytest.approx(agreement["score"] - 1.0)
    assert "best member's (General Public, 1.000)" in vs_best["comment"]
    # the evaluator's traces carry the verdict's doubt signals; the panel's model calls are nested in them
    traced = [run for run in fake.runs.values() if (run.get("extra") or {}).get("metadata", {}).get("jurygraph")]
    assert len(traced) == ITEMS
    assert all("agreement" in run["extra"]["metadata"]["jurygraph"]["doubt"] for run in traced)
    assert {run["trace_id"] for run in fake.runs.values() if run.get("run_type") == "llm"} <= \
        {run["trace_id"] for run in traced}
    panel.close()


def test_aevaluate_takes_the_async_twin_and_a_rerun_costs_nothing(
        langsmith: tuple[FakeLangSmith, Client], judges: FakeOpenAIServer, tmp_path: Path) -> None:
    fake, client = langsmith
    answers = faireval_dataset(client)
    panel = pairwise_panel(judges, tmp_path / "run")

    def target(inputs: dict[str, Any]) -> dict[str, Any]:
        first, second = answers[inputs["question"]]
        return {"response_1": first, "response_2": second}

    async def atarget(inputs: dict[str, Any]) -> dict[str, Any]:
        return target(inputs)

    first = evaluate(target, data="faireval-4", evaluators=[panel], client=client, max_concurrency=2)
    paid = len(judges.requests)
    assert paid == ITEMS * 2 * 2 * 2  # both orders, two referees, two turns
    second = asyncio.run(aevaluate(atarget, data="faireval-4", evaluators=[panel.acall], client=client,
                                   max_concurrency=4))
    assert len(judges.requests) == paid

    def seen(name: str) -> list[tuple[Any, ...]]:
        return sorted((f["key"], f["score"], f["comment"]) for f in fake.feedback_of(session=name))

    # aevaluate() returns before its feedback threads have posted everything
    expected = ITEMS * (1 + len(MEMBERS))
    assert wait_for(lambda: len(seen(second.experiment_name)) >= expected)
    assert seen(second.experiment_name) == seen(first.experiment_name)
    assert len(seen(first.experiment_name)) == expected
    panel.close()


def test_a_comparative_experiment_scores_the_winning_run(
        langsmith: tuple[FakeLangSmith, Client], judges: FakeOpenAIServer) -> None:
    fake, client = langsmith
    answers = faireval_dataset(client)
    panel = pairwise_panel(judges)
    gpt35 = evaluate(lambda inputs: {"response": answers[inputs["question"]][0]}, data="faireval-4", client=client)
    vicuna = evaluate(lambda inputs: {"response": answers[inputs["question"]][1]}, data="faireval-4", client=client)
    client.flush()
    evaluate((gpt35.experiment_name, vicuna.experiment_name), evaluators=[panel.comparative], client=client)
    client.flush()
    (comparison,) = fake.comparative.values()
    feedback = [f for f in fake.feedback if f.get("comparative_experiment_id") == comparison["id"]]
    assert len(feedback) == 2 * ITEMS and {f["key"] for f in feedback} == {"chateval"}
    of_gpt35 = {run_id for run_id, run in fake.runs.items()
                if run.get("session_name") == gpt35.experiment_name and not run.get("parent_run_id")}
    for group in {f["feedback_group_id"] for f in feedback}:
        pair = [f for f in feedback if f["feedback_group_id"] == group]
        (mine,) = [f for f in pair if f["run_id"] in of_gpt35]
        (other,) = [f for f in pair if f is not mine]
        assert mine["score"] + other["score"] == 1.0
        question = fake.runs[mine["run_id"]]["inputs"]["question"]
        verdict, *_ = panel(inputs={"question": question}, outputs=list(answers[question]))
        assert mine["score"] == verdict["score"]  # gpt35's answer is the first response: its win is a 1


def test_the_verdicts_in_langsmith_are_jurygraph_evals(langsmith: tuple[FakeLangSmith, Client],
                                                         judges: FakeOpenAIServer, tmp_path: Path) -> None:
    fake, client = langsmith
    answers = faireval_dataset(client)
    cli = eval_verdicts(["--protocol", "chateval", "--dataset", "faireval", "--limit", str(ITEMS), "--model", "coin",
                         "--models", "General Public=openai:gpt-4o-mini", "--models", "Critic=openai:coin",
                         "--base-url", judges.base_url], tmp_path / "cli")
    panel = pairwise_panel(judges)
    results = evaluate(lambda inputs: dict(zip(("response_1", "response_2"), answers[inputs["question"]],
                                               strict=True)),
                       data="faireval-4", evaluators=[panel], client=client)
    client.flush()
    posted = {fake.runs[f["run_id"]]["inputs"]["question"]: f
              for f in fake.feedback_of("chateval", session=results.experiment_name)}
    for item in faireval_items():
        assert posted[str(item.question)]["value"] == cli[item_texts(item)]["label"]
    assert {v["label"] for v in cli.values()} != {"tie"}


def test_a_pytest_langsmith_test_logs_the_panel_as_its_feedback(langsmith: tuple[FakeLangSmith, Client],
                                                                 judges: FakeOpenAIServer, tmp_path: Path) -> None:
    fake, _ = langsmith
    (tmp_path / "test_with_a_panel.py").write_text(textwrap.dedent(f"""
        import pytest
        from langsmith import testing as t

        from jurygraph.evaluators import create_panel_evaluator
        from jurygraph.running.datasets import load_dataset

        PANEL = create_panel_evaluator("chateval", task="pairwise", dataset="faireval", models={referees(judges)!r})
        ITEMS = load_dataset("faireval").items[:2]


        @pytest.mark.langsmith
        @pytest.mark.parametrize("item", ITEMS, ids=lambda item: item.id)
        def test_the_panel_agrees_with_the_oracle(item):
            outputs = {{"response_1": item.response_1, "response_2": item.response_2}}
            t.log_inputs({{"question": item.question}})
            t.log_outputs(outputs)
            t.log_reference_outputs(item.human)
            verdict, public, critic = PANEL(inputs={{"question": item.question}}, outputs=outputs,
                                            reference_outputs=item.human)
            assert public["value"] == item.human["label"]
    """), encoding="utf-8")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
    env = {**clean, "LANGSMITH_ENDPOINT": fake.url, "LANGSMITH_API_KEY": "lsv2-fake-key-for-tests",
           "LANGSMITH_TRACING": "true", "LANGSMITH_TEST_SUITE": "jurygraph-panel"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_with_a_panel.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [d["name"] for d in fake.datasets.values()] == ["jurygraph-panel"]
    assert len(fake.examples) == 2
    feedback = by_key(fake.feedback)
    assert {key: len(entries) for key, entries in feedback.items()} == \
        {"pass": 2, "chateval": 2, "chateval/General Public": 2, "chateval/Critic": 2}  # "pass": the plugin's own
    panel = [entry for entry in fake.feedback if entry["key"] != "pass"]
    assert all(entry["comment"] and entry["score"] in (0.0, 0.5, 1.0) for entry in panel)
    assert {entry["value"] for entry in feedback["chateval/General Public"]} <= {"1", "2", "tie"}
    # the feedback is on each test's run, from a feedback run that holds the panel's calls
    tests = {run_id for run_id, run in fake.runs.items() if run.get("name") == "test_the_panel_agrees_with_the_oracle"}
    assert len(tests) == 2 and {entry["run_id"] for entry in panel} == tests
    assert any(run.get("run_type") == "llm" for run in fake.runs.values())
