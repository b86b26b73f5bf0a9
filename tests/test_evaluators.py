"""jurygraph.evaluators: any protocol as an openevals-shaped evaluator, its run directory, and the same verdicts as
`jurygraph eval` on the same items and models. The harness-specific tests (LangSmith, MLflow, inspect_ai) are in
tests/test_evaluators_langsmith.py and tests/test_integrations_*.py and share the helpers here."""

from __future__ import annotations

import asyncio
import json
import re
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage

from jurygraph.cli import main
from jurygraph.evaluators import EvaluationInputError, PanelFailed, ProviderLimit, create_panel_evaluator
from jurygraph.judging.items import EvalItem
from jurygraph.llm.calls import ProviderUnavailable
from jurygraph.running.datasets import load_dataset
from jurygraph.running.ledger import Ledger
from jurygraph.running.rundir import RunLocked, read_manifest, read_results, read_spend
from jurygraph.testing import FakeJudge, pairwise_reply
from jurygraph.testing.fake_server import FakeOpenAIServer

ASPECT = "naturalness"  # Topical-Chat's, on 1-3
PRICES = '{"judge": {"input": 0.15, "output": 0.6}}'  # USD per million tokens


def score_reply(request: dict[str, Any], index: int = 0) -> str:
    """A referee's score from a hash of the model and the whole prompt: deterministic, different per referee and
    turn, the same for the same request whoever sends it (the CLI or a harness)."""
    prompt = "\n".join(str(m.get("content")) for m in request["messages"])
    score = 1 + zlib.crc32(f"{request.get('model')}:{prompt}".encode()) % 3
    return f"Evaluation evidence: judged by its hash.\nThe score of the response: {score}"


def topical_items(n: int = 4) -> list[EvalItem]:
    return load_dataset("topical-chat", aspect=ASPECT).items[:n]


def as_evaluation(item: EvalItem) -> dict[str, Any]:
    """A built-in item as a harness hands it to an evaluator: inputs, outputs, reference_outputs."""
    if item.response_1 is not None:
        return {"inputs": {"question": item.question}, "outputs": {"response_1": item.response_1,
                                                                  "response_2": item.response_2},
                "reference_outputs": {"label": (item.human or {}).get("label")}}
    return {"inputs": {"source": item.source, "context": item.context}, "outputs": {"response": item.response},
            "reference_outputs": {ASPECT: (item.human or {}).get(ASPECT)}}


def eval_verdicts(argv: list[str], out: Path) -> dict[str, dict[str, Any]]:
    """`jurygraph eval` on the command line (in this process), its verdicts by the item's texts."""
    assert main(["eval", *argv, "--out", str(out), "--quiet"]) == 0
    return {_texts(record, out): record["verdict"] for record in read_results(out)}


def _texts(record: dict[str, Any], out: Path) -> str:
    from jurygraph.cli.show import item_state

    item = item_state(out, record["id"])["item"]
    return json.dumps([item.get(k) for k in ("question", "source", "context", "response", "response_1",
                                             "response_2")])


def item_texts(item: EvalItem) -> str:
    return json.dumps([getattr(item, k) for k in ("question", "source", "context", "response", "response_1",
                                                  "response_2")])


def fake_panel(public: Callable[[str], str], critic: Callable[[str], str] | None = None) -> dict[str, FakeJudge]:
    """ChatEval's two referees as scripted chat models (the Critic answers as the public unless told)."""
    critic = critic or public
    return {"General Public": FakeJudge(respond=lambda p, m: public(p), model_name="gp"),
            "Critic": FakeJudge(respond=lambda p, m: critic(p), model_name="critic")}


def score(value: float) -> Callable[[str], str]:
    return lambda prompt: f"Evaluation evidence: fine.\nThe score of the response: {value:g}"


# --- results -------------------------------------------------------------------------------------------------


def test_a_score_panel_gives_the_panel_and_each_member_with_doubt_signals() -> None:
    panel = create_panel_evaluator("chateval", task="score", aspect="helpfulness", scale=(1, 5),
                                   models=fake_panel(score(2), score(4)))
    results = panel(inputs={"question": "What is 2+2?"}, outputs={"response": "Four."},
                    reference_outputs={"score": 4})
    assert [r["key"] for r in results] == ["chateval", "chateval/General Public", "chateval/Critic"]
    verdict, public, critic = results
    assert verdict["score"] == pytest.approx((3 - 1) / 4)  # the mean 3 on 1-5, normalised
    assert verdict["metadata"]["verdict"] == 3 and verdict["metadata"]["scale"] == [1, 5]
    assert verdict["metadata"]["doubt"] == {"spread": 2.0, "missing": 0}
    assert verdict["comment"] == "General Public: 2; Critic: 4; verdict: 3 on 1-5 (spread 2)"
    assert (public["score"], critic["score"]) == (0.25, 0.75)
    assert critic["comment"] == "Critic: 4. fine."
    assert critic["metadata"]["score"] == 4
    raw = create_panel_evaluator("chateval", task="score", aspect="helpfulness", scale=(1, 5), normalize=False,
                                 models=fake_panel(score(2), score(4)), feedback_key="helpful")
    assert [(r["key"], r["score"]) for r in raw(outputs="Four.")] == \
        [("helpful", 3.0), ("helpful/General Public", 2.0), ("helpful/Critic", 4.0)]


def test_a_pairwise_panel_scores_1_0_or_half_with_the_label_as_value() -> None:
    referees = fake_panel(lambda prompt: pairwise_reply(9, 4), lambda prompt: pairwise_reply(5, 8))
    panel = create_panel_evaluator("chateval", task="pairwise", models=referees, no_calibrate=True)
    results = panel(inputs="Which is better?", outputs=["first answer", "second answer"])
    verdict, public, critic = results
    assert (verdict["score"], verdict["value"]) == (1.0, "1")  # means 7 vs 6
    assert (public["score"], public["value"], critic["score"], critic["value"]) == (1.0, "1", 0.0, "2")
    assert verdict["metadata"]["doubt"]["agreement"] == 0.5
    assert verdict["comment"].startswith("General Public: response 1 (9 vs 4); Critic: response 2 (5 vs 8); "
                                         "verdict: response 1 wins (7 vs 6)")
    # both orders by default, as ChatEval's position calibration: these referees stick to a position, so the
    # other order reverses their verdict (a flip), and the two orders' means tie
    both = create_panel_evaluator("chateval", task="pairwise", models=referees)
    verdict, *_ = both(inputs="Which is better?", outputs={"response_1": "first answer", "response_2": "second"})
    assert (verdict["score"], verdict["value"]) == (0.5, "tie")
    assert verdict["metadata"]["doubt"]["flip"] is True
    assert verdict["comment"] == ("General Public: tie (6.5 vs 6.5); Critic: tie (6.5 vs 6.5); verdict: tie "
                                  "(6.5 vs 6.5) (agreement 1, margin 0, the order changed the verdict)")
    assert len(both.protocol.graph.nodes) == 3  # the two orders and the calibration


def test_a_missing_verdict_is_reported_missing_never_a_zero(tmp_path: Path) -> None:
    panel = create_panel_evaluator("chateval", task="score", aspect="helpfulness", scale=(1, 5),
                                   models=fake_panel(lambda prompt: "I would rather not say."),
                                   run_dir=tmp_path / "run")
    results = panel(inputs="q", outputs="a", reference_outputs=3)
    assert [r["score"] for r in results] == [None, None, None]
    assert results[0]["metadata"]["missing"] is True
    assert results[0]["comment"].startswith("General Public: no readable judgment (")
    assert "chateval gave no verdict" in results[0]["comment"]
    panel.close()
    (record,) = read_results(tmp_path / "run")
    assert record["verdict"]["missing"] is True and record["status"] == "ok"
    assert read_manifest(tmp_path / "run")["counts"]["missing_verdicts"] == 1


def test_what_cannot_be_judged_is_an_error_naming_the_argument() -> None:
    panel = create_panel_evaluator("single", task="pairwise", default=FakeJudge(script=[]))
    with pytest.raises(EvaluationInputError, match=r"outputs: a pairwise evaluation compares two responses"):
        panel(inputs="q", outputs={"response_1": "only one"})
    with pytest.raises(EvaluationInputError, match=r"reference_outputs\['label'\]: 'maybe' is not a pairwise label"):
        panel(inputs="q", outputs=["a", "b"], reference_outputs={"label": "maybe"})
    with pytest.raises(EvaluationInputError, match="needs the question"):
        panel(outputs=["a", "b"])
    scorer = create_panel_evaluator("single", task="score", scale=(1, 5), default=FakeJudge(script=[]))
    with pytest.raises(EvaluationInputError, match=r"outputs: give the response as a string or a mapping with "
                                                   r"'response'; got keys a, b"):
        scorer(outputs={"a": "x", "b": "y"})
    with pytest.raises(EvaluationInputError, match=r"reference_outputs: 'high' is not a score"):
        scorer(outputs="x", reference_outputs="high")
    with pytest.raises(ValueError, match=r"needs its scale: scale=\(1, 5\)"):
        create_panel_evaluator("chateval", task="score")
    with pytest.raises(ValueError, match=r"chatevl: no such protocol; choose from .*chateval.*MODULE:FACTORY"):
        create_panel_evaluator("chatevl", task="score", scale=(1, 5))
    with pytest.raises(ValueError, match=r"protocol debate: turns is not one of its options \(.*max_iterations"):
        create_panel_evaluator("debate", task="score", scale=(1, 5), turns=3)
    with pytest.raises(ValueError, match="calibrate='bpc' wraps pairwise protocols"):
        create_panel_evaluator("chateval", task="score", scale=(1, 5), calibrate="bpc")


def test_inputs_and_references_as_harnesses_give_them() -> None:
    seen: list[str] = []

    def reply(prompt: str, messages: list[BaseMessage]) -> str:
        seen.append(prompt)
        return "Evaluation evidence: ok.\nThe score of the response: 4"

    panel = create_panel_evaluator("single", task="score", aspect="helpfulness", scale=(1, 5),
                                   default=FakeJudge(respond=reply))
    item = panel.item({"question": "Capital of France?", "chat_history": [{"role": "user", "content": "hi"}]},
                      {"messages": "ignored", "output": "Paris"}, {"helpfulness": "5", "notes": "x"})
    # a score item's other inputs fill its source (the question is kept as given), chat messages as lines
    assert (item.source, item.context, item.response, item.human) == \
        ("user: hi", None, "Paris", {"helpfulness": 5.0})
    assert item.question == "Capital of France?"
    assert panel.item("q", "a", {"notes": "no label here"}).human is None  # no label key: no label
    assert panel.item("q", "a", None).id == panel.item("q", "a", {}).id  # the id is the content's
    assert panel.item("q", "a", 4).id != panel.item("q", "a", 5).id
    panel(inputs={"question": "Capital of France?"}, outputs="Paris")
    assert "Capital of France?" in seen[0] and "Paris" in seen[0]


def test_the_async_twin_shares_the_session_and_nothing_is_asked_twice() -> None:
    judge = FakeJudge(respond=lambda p, m: "Evaluation evidence: ok.\nThe score of the response: 2")
    panel = create_panel_evaluator("single", task="score", scale=(1, 3), default=judge)

    async def both() -> list[list[dict[str, Any]]]:
        return list(await asyncio.gather(*(panel.acall(inputs="q", outputs=f"a{i % 2}") for i in range(6))))

    results = asyncio.run(both())
    assert [r[0]["score"] for r in results] == [0.5] * 6
    assert len(judge.calls) == 2  # two distinct items, each judged once
    assert panel(inputs="q", outputs="a1") == results[1]
    assert len(judge.calls) == 2
    panel.close()


# --- the run directory ---------------------------------------------------------------------------------------


def test_every_evaluation_is_an_item_of_a_run_that_show_report_and_metaeval_read(
        openai_server: Callable[..., FakeOpenAIServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = openai_server(score_reply)
    run = tmp_path / "run"
    with create_panel_evaluator("chateval", task="score", aspect=ASPECT, dataset="topical-chat",
                                default=f"openai:judge@{server.base_url}", run_dir=run) as panel:
        results = [panel(**as_evaluation(item)) for item in topical_items()]
        assert panel.run_dir == run
    manifest = read_manifest(run)
    assert manifest["protocol"] == "chateval" and manifest["evaluator"]["task"] == "score"
    assert manifest["evaluator"]["scale"] == [1, 3]
    assert manifest["counts"]["done"] == 4 and manifest["ended"]
    assert manifest["counts"]["requests"] == len(server.requests) == 16  # 2 referees x 2 turns x 4 items
    assert read_spend(run)["requests"] == 16
    records = read_results(run)
    assert [r["id"] for r in records] == [r[0]["metadata"]["item_id"] for r in results]
    assert all(r["human"][ASPECT] is not None for r in records)
    capsys.readouterr()
    assert main(["show", str(run), records[0]["id"]]) == 0
    shown = capsys.readouterr().out
    assert "General Public" in shown and "Critic" in shown and "verdict" in shown.lower()
    assert main(["metaeval", str(run), "--json", "--resamples", "0"]) == 0
    measured = json.loads(capsys.readouterr().out)
    assert "chateval" in json.dumps(measured) and "General Public" in json.dumps(measured)
    assert main(["report", str(run), "--out", str(tmp_path / "report.html"), "--resamples", "0"]) == 0
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert records[0]["id"] in page and "Critic" in page


def test_a_rerun_is_answered_from_the_run_and_another_run_is_refused(
        openai_server: Callable[..., FakeOpenAIServer], tmp_path: Path) -> None:
    server = openai_server(score_reply)
    options: dict[str, Any] = {"task": "score", "aspect": ASPECT, "dataset": "topical-chat",
                               "default": f"openai:judge@{server.base_url}", "run_dir": tmp_path / "run"}
    evaluations = [as_evaluation(item) for item in topical_items(3)]
    with create_panel_evaluator("chateval", **options) as first:
        before = [first(**e) for e in evaluations]
    sent = len(server.requests)
    with create_panel_evaluator("chateval", **options) as again:
        assert [again(**e) for e in evaluations] == before
    assert len(server.requests) == sent  # nothing paid twice
    manifest = read_manifest(tmp_path / "run")
    assert len(manifest["invocations"]) == 2 and manifest["invocations"][1]["counts"]["skipped"] == 3
    assert len(read_results(tmp_path / "run")) == 3
    with pytest.raises(ValueError, match=r"holds another run: parameters .*turns.*give another run directory"):
        create_panel_evaluator("chateval", turns=3, **options)(**evaluations[0])


def test_what_a_killed_evaluator_paid_is_answered_from_the_call_cache(
        openai_server: Callable[..., FakeOpenAIServer], tmp_path: Path) -> None:
    server = openai_server(score_reply)
    options: dict[str, Any] = {"task": "score", "aspect": ASPECT, "dataset": "topical-chat",
                               "default": f"openai:judge@{server.base_url}", "run_dir": tmp_path / "run"}
    evaluations = [as_evaluation(item) for item in topical_items(2)]
    with create_panel_evaluator("chateval", **options) as first:
        before = [first(**e)[0]["score"] for e in evaluations]
    sent = len(server.requests)
    # as if the process had died before writing its records and checkpoints: only the call cache is left
    (tmp_path / "run" / "results.jsonl").unlink()
    (tmp_path / "run" / "checkpoints.sqlite").unlink()
    with create_panel_evaluator("chateval", **options) as again:
        assert [again(**e)[0]["score"] for e in evaluations] == before
    assert len(server.requests) == sent


def test_the_ledger_holds_every_paid_call_and_a_rerun_pays_nothing(
        openai_server: Callable[..., FakeOpenAIServer], tmp_path: Path) -> None:
    """Issue 28's invariant on an evaluator's run: spend.json, the ledger and the manifest's totals equal what the
    server answered; a re-run answered from the records, or (records and checkpoints gone) from the call cache,
    pays nothing and records nothing."""
    server = openai_server(score_reply)
    run = tmp_path / "run"
    options: dict[str, Any] = {"task": "score", "aspect": ASPECT, "dataset": "topical-chat",
                               "default": f"openai:judge@{server.base_url}", "run_dir": run}
    evaluations = [as_evaluation(item) for item in topical_items(5)]
    with create_panel_evaluator("chateval", **options) as panel, ThreadPoolExecutor(max_workers=5) as pool:
        first = list(pool.map(lambda e: panel(**e), evaluations))
    billed = {"requests": len(server.billed), "input_tokens": sum(b["input_tokens"] for b in server.billed),
              "output_tokens": sum(b["output_tokens"] for b in server.billed)}
    assert billed["requests"] == len(server.requests) == 20  # 2 referees x 2 turns x 5 items, none failed
    spend = read_spend(run)
    assert {key: spend[key] for key in billed} == billed
    manifest = read_manifest(run)
    assert {key: manifest["counts"][key] for key in billed} == billed
    assert manifest["counts"]["attempts"] == 20 and manifest["attempts_by_model"] == {
        f"openai:judge@{server.base_url}": 20}
    ledger = Ledger(run / "ledger.sqlite")
    assert ledger.last_seq() == 20 and ledger.totals().requests == 20
    assert {row["item"] for row in ledger.rows_after(0)} == {r[0]["metadata"]["item_id"] for r in first}

    for forget in ((), ("results.jsonl", "checkpoints.sqlite")):  # from the records; then from the call cache
        for name in forget:
            (run / name).unlink()
        with create_panel_evaluator("chateval", **options) as again:
            assert [again(**e) for e in evaluations] == first
        assert len(server.requests) == 20 and ledger.last_seq() == 20  # nothing paid, nothing recorded
        assert read_spend(run) == spend
        manifest = read_manifest(run)
        assert {key: manifest["counts"][key] for key in billed} == billed
        assert manifest["invocations"][-1]["spend"]["requests"] == 0
    assert manifest["invocations"][-1]["counts"]["cache_hits"] == 20  # the last re-run: every call from the cache
    ledger.close()


def test_show_report_and_metaeval_give_an_evaluators_run_the_totals_of_an_eval_run(
        openai_server: Callable[..., FakeOpenAIServer], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same items and models, judged by `jurygraph eval` and by an evaluator (each against a server of its own):
    the same totals and spend wherever a run's are read."""
    cli_server, evaluator_server = openai_server(score_reply), openai_server(score_reply)
    (tmp_path / "prices.json").write_text(PRICES, encoding="utf-8")
    eval_verdicts(["--protocol", "chateval", "--dataset", "topical-chat", "--aspect", ASPECT, "--limit", "4",
                   "--model", "judge", "--base-url", cli_server.base_url, "--prices", str(tmp_path / "prices.json")],
                  tmp_path / "cli")
    with create_panel_evaluator("chateval", task="score", aspect=ASPECT, dataset="topical-chat",
                                default=f"openai:judge@{evaluator_server.base_url}", run_dir=tmp_path / "evaluator",
                                prices=json.loads(PRICES)) as panel:
        for item in topical_items():
            panel(**as_evaluation(item))
    assert len(cli_server.requests) == len(evaluator_server.requests) == 16

    def shown(run: Path) -> dict[str, Any]:
        capsys.readouterr()
        assert main(["show", str(run), "--json"]) == 0
        found = json.loads(capsys.readouterr().out)
        invocation = found["invocations"][0]["counts"]
        for figures in (found["totals"], found["spend"], invocation):  # the sums' order: the last digits
            figures["cost_usd"] = round(figures["cost_usd"], 9)
        found["totals"].pop("seconds")
        invocation.pop("seconds")  # wall time: the evaluator's is how long it held the run
        return {"totals": found["totals"], "spend": found["spend"], "invocation": invocation}

    cli, evaluator = shown(tmp_path / "cli"), shown(tmp_path / "evaluator")
    assert evaluator == cli
    assert cli["totals"]["requests"] == 16 and cli["totals"]["cost_usd"] > 0 and cli["totals"]["done"] == 4
    capsys.readouterr()
    assert main(["metaeval", str(tmp_path / "cli"), str(tmp_path / "evaluator"), "--json", "--resamples", "0"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    for found in runs:
        found["totals"].pop("seconds")
        found["totals"]["cost_usd"] = round(found["totals"]["cost_usd"], 9)
    assert runs[0]["totals"] == runs[1]["totals"] == cli["totals"]
    for run in ("cli", "evaluator"):
        assert main(["report", str(tmp_path / run), "--out", str(tmp_path / f"{run}.html"), "--resamples", "0"]) == 0
    spent = []  # the report's "Spend per invocation": the run's row (items done, requests, attempts, tokens, USD)
    for run in ("cli", "evaluator"):
        text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", (tmp_path / f"{run}.html").read_text(encoding="utf-8")))
        found = re.search(r"Spend per invocation .*? run (\d+) (\d+) (\d+) ([\d,]+ \+ [\d,]+) (\$[\d.]+)", text)
        assert found is not None
        spent.append(found.groups())
    assert spent[0] == spent[1] == ("4", "16", "16", f"{cli['totals']['input_tokens']:,} + "
                                    f"{cli['totals']['output_tokens']:,}", f"${cli['totals']['cost_usd']:.4f}")


def test_a_failed_evaluation_is_raised_recorded_and_judged_again(tmp_path: Path) -> None:
    attempts = []

    def flaky(prompt: str, messages: list[BaseMessage]) -> str:
        attempts.append(prompt)
        if len(attempts) == 1:
            raise RuntimeError("the judge fell over")
        return "Evaluation evidence: ok.\nThe score of the response: 2"

    run = tmp_path / "run"
    panel = create_panel_evaluator("single", task="score", scale=(1, 3), default=FakeJudge(respond=flaky),
                                   run_dir=run)
    with pytest.raises(PanelFailed, match=r"item e-\w+: RuntimeError: the judge fell over"):
        panel(outputs="a")
    (failed,) = read_results(run)
    assert failed["status"] == "failed" and "the judge fell over" in failed["error"]
    assert panel(outputs="a")[0]["score"] == 0.5  # asked again: judged again
    panel.close()
    (record,) = read_results(run)  # one line per item, its last
    assert record["status"] == "ok" and record["id"] == failed["id"]
    counts = read_manifest(run)["counts"]
    assert (counts["items"], counts["done"], counts["failed"]) == (1, 1, 0)


def test_an_error_every_evaluation_would_hit_is_raised_as_it_is_and_nothing_is_recorded(tmp_path: Path) -> None:
    panel = create_panel_evaluator("single", task="score", scale=(1, 3), run_dir=tmp_path / "run",
                                   default="openai:judge@http://127.0.0.1:9/v1")  # nothing listens there
    with pytest.raises(ProviderUnavailable, match="cannot connect"):
        panel(outputs="a")
    panel.close()
    assert read_results(tmp_path / "run") == [] and read_spend(tmp_path / "run")["requests"] == 0


def test_one_writer_per_run_directory(tmp_path: Path) -> None:
    judge = FakeJudge(respond=lambda p, m: "Evaluation evidence: ok.\nThe score of the response: 2")
    first = create_panel_evaluator("single", task="score", scale=(1, 3), default=judge, run_dir=tmp_path)
    first(outputs="a")
    second = create_panel_evaluator("single", task="score", scale=(1, 3), default=judge, run_dir=tmp_path)
    with pytest.raises(RunLocked, match="in use by PID"):
        second(outputs="a")
    first.close()  # the run is released: the second evaluator continues it, answered from the first's record
    assert second(outputs="a")[0]["score"] == 0.5
    assert len(judge.calls) == 1
    second.close()


def test_two_hundred_concurrent_calls_pay_each_item_once_within_the_gates(
        openai_server: Callable[..., FakeOpenAIServer], tmp_path: Path) -> None:
    server = openai_server(lambda request, i: "Evaluation evidence: ok.\nThe score of the response: 3", latency=0.02)
    run = tmp_path / "run"
    panel = create_panel_evaluator("single", task="score", aspect="helpfulness", scale=(1, 5),
                                   default=f"openai:judge@{server.base_url}", run_dir=run,
                                   limits={"*": ProviderLimit(max_in_flight=4)})
    calls = [(f"question {i % 100}", f"answer {i % 100}") for i in range(200)]  # every item asked twice
    with ThreadPoolExecutor(max_workers=200) as pool:
        results = list(pool.map(lambda call: panel(inputs=call[0], outputs=call[1]), calls))
    assert all(r[0]["score"] == 0.5 for r in results)
    assert len(server.requests) == 100  # one call per item: the second ask waited for the first
    assert server.max_in_flight <= 4  # the provider gate held across the harness's threads
    panel.close()
    lines = (run / "results.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]  # whole lines only: one writer
    assert len(records) == len({r["id"] for r in records}) == 100
    assert all(r["status"] == "ok" for r in records)
    assert read_spend(run)["requests"] == 100 and read_manifest(run)["counts"]["done"] == 100


# --- the same verdicts as `jurygraph eval` -------------------------------------------------------------------


def test_the_evaluator_gives_the_verdicts_of_jurygraph_eval(openai_server: Callable[..., FakeOpenAIServer],
                                                            tmp_path: Path) -> None:
    server = openai_server(score_reply)
    cli = eval_verdicts(["--protocol", "chateval", "--dataset", "topical-chat", "--aspect", ASPECT, "--limit", "4",
                         "--model", "judge", "--base-url", server.base_url], tmp_path / "cli")
    panel = create_panel_evaluator("chateval", task="score", aspect=ASPECT, dataset="topical-chat", normalize=False,
                                   default=f"openai:judge@{server.base_url}")
    for item in topical_items():
        verdict, *_ = panel(**as_evaluation(item))
        assert verdict["score"] == cli[item_texts(item)]["score"]
    assert len({json.dumps(v) for v in cli.values()}) > 1  # the items differ: a real comparison


def test_the_summary_evaluator_measures_the_panel_against_the_reference_labels() -> None:
    def reads_the_number(prompt: str) -> str:  # the public gives the worth the response claims
        return f"Evaluation evidence: fine.\nThe score of the response: {prompt.split('answer worth ')[1][0]}"

    panel = create_panel_evaluator("chateval", task="score", aspect="helpfulness", scale=(1, 5),
                                   models=fake_panel(reads_the_number, score(3)), resamples=100)
    outputs = [f"answer worth {k}" for k in (1, 2, 3, 4, 5, 2)]
    labels = [{"helpfulness": k} for k in (1, 2, 3, 4, 5, 1)]
    found = {r["key"]: r for r in panel.summary([{"question": "q"}] * 6, outputs, labels)["results"]}
    assert set(found) == {"chateval/agreement", "chateval/General Public/agreement", "chateval/Critic/agreement",
                          "chateval/panel_minus_best", "chateval/effective_judges"}
    assert found["chateval/agreement"]["comment"].startswith("the panel: spearman ")
    assert found["chateval/General Public/agreement"]["score"] > 0.8
    critic = found["chateval/Critic/agreement"]
    assert critic["score"] is None and "do not vary" in critic["comment"]  # a constant judge has no correlation
    unlabelled = panel.summary([{"question": "q"}] * 6, outputs, [None] * 6)["results"]
    assert all(r["score"] is None for r in unlabelled)
    assert "no reference labels" in unlabelled[0]["comment"]
