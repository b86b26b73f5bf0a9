"""D3 through the command line, from its spec alone (``graphs/d3.py``: ``SPEC``): ``jurygraph eval --protocol d3`` on
FairEval against the local OpenAI-compatible server, killed in the middle of an item (``kill -9``) and resumed; then
``show``, ``metaeval`` (the jurors and the judge are the panel's members, the advocates are not) and ``report``. Also
the dry run's bounds (fewest: SAMRE converges at its minimum round; most: R rounds), the options typed and checked,
SAMRE past LangGraph's old default recursion limit (R = 10), and its Studio graphs judging an item."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from jurygraph import verdict_of
from jurygraph.cli import main
from jurygraph.running.datasets import load_faireval
from jurygraph.running.rundir import read_manifest, read_results
from jurygraph.testing.fake_server import prompt_of
from tests.test_plugin_protocol import killed_mid_run

SAID = itertools.count(1)  # every reply differs, so that no two calls are the same (the LLM cache)
JURY = ["Jury1", "Jury2", "Jury3", "Jury4", "Jury5"]
# the default jury: five of the released pool, drawn with seed 42 (personas.get_random_personas(5, seed=42))
POOL_42 = ["Early Childhood Educator", "Economist", "Bioethicist", "Science Communicator", "Tech Policy Analyst"]


def replies(request: dict[str, Any], _: int) -> str:
    """Advocates and summaries argue in prose; the judge scores answer 2 higher each round by the same gap (so SAMRE
    converges at the code's minimum round, 3), as does MORE's scorer; every juror votes for answer 2."""
    system, prompt = request["messages"][0]["content"], prompt_of(request)
    agent = re.search(r"named (\S+),", system).group(1)  # type: ignore[union-attr]
    n = next(SAID)
    if prompt.startswith("Summarize the following content"):
        return f"{agent} in short: the second answer is more complete (note {n})."
    if agent.startswith("Jury"):
        return f"Reasoning: Defense B answered the whole question (note {n}).\nVote: (0, 1)"
    if agent in ("Judge", "Scorer") and "Sum up the scores" in prompt:
        return f"Relevance [15, 18], Accuracy [14, 17] (note {n}) ... Final tally: (80, 92)"
    return f"{agent}: my answer addresses the question directly and accurately (note {n})."


def run(*args: str) -> tuple[int, str, str]:
    """A command in this process, with its output."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exit_:  # argparse's own refusals
            code = int(exit_.code or 0)
    return code, out.getvalue(), err.getvalue()


def model(server: Any) -> list[str]:
    return ["--model", "judge", "--base-url", server.base_url]


FAIREVAL = ["--dataset", "faireval"]


def dry_run(*options: str) -> dict[str, Any]:
    code, text, err = run("eval", "--protocol", "d3", *options, *FAIREVAL, "--limit", "2", "--model",
                          "openai:gpt-4o-mini", "--dry-run", "--json")
    assert code == 0, err
    return dict(json.loads(text))


# SAMRE's round: each advocate's defense and its summary, the judge's evaluation and its unread summary (6); its
# jury: a vote and an unread summary per juror (10). The re-askable replies: the judge's, each vote. The fewest: the
# scripted judge repeats its scores, so the debate converges at the first round the rule allows; the most: the spec's
# most_values (epsilon 0, never converging) render R rounds, for the dry run's bound and the budget's reserves.
@pytest.mark.parametrize(("options", "fewest", "most", "with_reasks"), [
    pytest.param([], 3 * 6 + 10, 5 * 6 + 10, 5 * 7 + 15, id="converges at the code's minimum round 3, or R = 5"),
    pytest.param(["--min-rounds", "4"], 4 * 6 + 10, 5 * 6 + 10, 5 * 7 + 15, id="converges at round 4, or R = 5"),
    pytest.param(["--convergence-window", "2", "--min-rounds", "2", "--no-unread-summaries"], 2 * 5 + 5, 5 * 5 + 5,
                 5 * 6 + 10, id="the README's round 2"),
    pytest.param(["--param", "epsilon=0"], 5 * 6 + 10, 5 * 6 + 10, 5 * 7 + 15, id="epsilon 0: R = 5 rounds"),
    pytest.param(["--param", "epsilon=0", "--rounds", "6"], 6 * 6 + 10, 6 * 6 + 10, 6 * 7 + 15, id="R = 6 rounds"),
    pytest.param(["--d3-mode", "more"], 2 * 3 + 2 + 2 + 5, 2 * 3 + 2 + 2 + 5, 2 * 3 + 2 + 1 + 2 + 10, id="more"),
    pytest.param(["--d3-mode", "more", "--advocates", "2", "--jurors", "3", "--d3-unreadable", "code"],
                 2 * 2 + 2 + 2 + 3, 2 * 2 + 2 + 2 + 3, 2 * 2 + 2 + 2 + 3, id="more k=2 n=3, code's rule"),
])
def test_the_dry_run_bounds(options: list[str], fewest: int, most: int, with_reasks: int) -> None:
    found = dry_run(*options)
    assert found["protocol"] == "d3" and found["items"] == 2
    per_item = found["requests_per_item"]
    if fewest == most:
        assert per_item == most and found["requests"] == 2 * most
    else:
        assert per_item == {"min": fewest, "max": most} and found["requests"] == {"min": 2 * fewest, "max": 2 * most}
    # the plan its spec declares: every round to R, every tuple re-asked once
    assert found["requests_per_item_with_reasks"] == with_reasks
    # every reply at its 4096-token cap (MetaGPT's default, which the released runs sent)
    tokens = found["output_tokens"]
    assert (tokens["max"] if isinstance(tokens, dict) else tokens) == 2 * most * 4096


def test_samre_on_faireval_is_killed_resumed_shown_measured_and_reported(openai_server, tmp_path: Path) -> None:
    release = threading.Event()
    per_item = 3 * 6 + 10  # converged at round 3
    hold_at = per_item + 8  # the second item's round 2, advocate 1's summary (its node's second call)

    def held(request: dict[str, Any], i: int) -> str:
        if len(server.requests) == hold_at and not release.is_set():
            release.wait(30)
        return replies(request, i)

    server = openai_server(held)
    out = tmp_path / "samre"
    args = ["eval", "--protocol", "d3", *FAIREVAL, "--limit", "3", *model(server), "--out", str(out), "--quiet",
            "--concurrency", "1"]
    killed_mid_run(server, release, args, at_request=hold_at)
    assert [r["id"] for r in read_results(out)] == ["0"]
    code, _, err = run("eval", "--resume", str(out), "--base-url", server.base_url, "--quiet")
    assert code == 0, err
    records = read_results(out)
    assert sorted(r["id"] for r in records) == ["0", "1", "2"] and all(r["status"] == "ok" for r in records)
    # the second item went on from its checkpoint: round 1 was not asked again, advocate 1's defense of round 2
    # came from the LLM cache, and only the request in flight when the writer was killed went out twice
    assert len(server.requests) == per_item + 8 + (per_item - 7) + per_item
    for record in records:
        verdict = record["verdict"]
        assert (verdict["label"], verdict["votes"], verdict["method"]) == ("2", {"1": 0, "2": 5}, "jury vote")
        assert (verdict["detail"]["rounds"], verdict["detail"]["stopped"]) == (3, "converged")
        assert [j["persona"] for j in verdict["detail"]["jury"]] == POOL_42
        assert verdict["detail"]["persona_seed"] == 42
        assert set(record["judgments"]) == {"Judge", *JURY}
        assert record["doubt"] == {"agreement": 1.0, "margin": 5.0, "missing": 0}  # the judge: (80, 92)
    manifest = read_manifest(out) or {}
    assert manifest["protocol"] == "d3" and len(manifest["invocations"]) == 2
    assert manifest["parameters"] == {
        "d3_mode": "samre", "jurors": 5, "jury_personas": "pool", "persona_seed": 42, "rounds": 5, "epsilon": 5.0,
        "convergence_window": 3, "min_rounds": 3, "token_budget": None, "unread_summaries": True,
        "verdict_by": "jury", "d3_ties": "keep", "vote_reading": "binary", "d3_unreadable": "missing",
        "jury": POOL_42, "protocol": "d3"}
    assert manifest["requests_per_item"] == 5 * 7 + 15
    # show: the item's debate from its checkpoint
    code, text, err = run("show", str(out), "1")
    assert code == 0, err
    assert "Jury5" in text and "Defense B" in text and "verdict: label 2" in text
    # metaeval: the panel's members are the jurors and the judge (whose judgment is its mean round scores)
    code, text, err = run("metaeval", str(out), "--json", "--resamples", "0")
    assert code == 0, err
    found = json.loads(text)
    assert found["methods"][0]["agreement"]["pairwise"]
    assert {m["name"] for m in found["panels"][0]["members"]} == {"Judge", *JURY}
    # report: the page, with D3's diagram rebuilt from the manifest
    code, text, err = run("report", str(out), "--out", str(tmp_path / "report.html"), "--resamples", "0")
    assert code == 0 and "no diagram" not in err, err
    assert "data:image/png" in (tmp_path / "report.html").read_text(encoding="utf-8")


def test_more_with_the_curated_jury(openai_server, tmp_path: Path) -> None:
    server = openai_server(replies)
    out = tmp_path / "more"
    code, _, err = run("eval", "--protocol", "d3", "--d3-mode", "more", "--advocates", "2", "--jurors", "3",
                       "--jury-personas", "curated", *FAIREVAL, "--limit", "2", *model(server), "--out", str(out),
                       "--quiet")
    assert code == 0, err
    assert len(server.requests) == 2 * (2 * 2 + 2 + 2 + 3)
    records = read_results(out)
    assert all(r["verdict"]["votes"] == {"1": 0, "2": 3} and set(r["judgments"]) == {"Scorer", *JURY[:3]}
               for r in records)
    assert [j["persona"] for j in records[0]["verdict"]["detail"]["jury"]] == [
        "Ethics Professor", "Environmental Activist", "Business Owner"]
    manifest = read_manifest(out) or {}
    assert manifest["parameters"] == {
        "d3_mode": "more", "jurors": 3, "jury_personas": "curated", "advocates": 2, "verdict_by": "jury",
        "d3_ties": "keep", "vote_reading": "binary", "d3_unreadable": "missing",
        "jury": ["Ethics Professor", "Environmental Activist", "Business Owner"], "protocol": "d3"}
    assert manifest["requests_per_item"] == 2 * 2 + 2 + 1 + 2 + 3 * 2
    code, text, err = run("metaeval", str(out), "--json", "--resamples", "0")
    assert code == 0, err
    assert {m["name"] for m in json.loads(text)["panels"][0]["members"]} == {"Scorer", *JURY[:3]}


def test_samre_runs_ten_rounds_through_eval(openai_server, tmp_path: Path) -> None:
    """A SAMRE round is three LangGraph steps, so R = 10 is 33 steps: past the default recursion limit of the
    LangGraph releases of 2025 (25), within the installed one's (10007 in langgraph 1.2); the runner passes none."""
    server = openai_server(replies)
    out = tmp_path / "r10"
    code, _, err = run("eval", "--protocol", "d3", "--param", "rounds=10", "--param", "epsilon=0", *FAIREVAL,
                       "--limit", "1", *model(server), "--out", str(out), "--quiet")
    assert code == 0, err
    (record,) = read_results(out)
    assert record["status"] == "ok"
    assert (record["verdict"]["detail"]["rounds"], record["verdict"]["detail"]["stopped"]) == (10, "max_rounds_reached")
    assert len(server.requests) == 10 * 6 + 10


@pytest.mark.parametrize(("options", "message"), [
    (["--d3-mode", "more", "--rounds", "3"], "--rounds: D3 samre option(s); --d3-mode more does not read them"),
    (["--advocates", "2"], "--advocates: D3 more option(s); --d3-mode samre does not read them"),
    (["--jury-personas", "curated", "--persona-seed", "3"], "--persona-seed draws the jury from the persona pool: "
                                                            "it needs --jury-personas pool"),
    (["--jury-personas", "Economist,Nobody"], "unknown persona(s) ['Nobody']"),
    (["--jurors", "51"], "51 is too many"),
    (["--param", "jurors=0"], "--param jurors must be at least 1 (got 0)"),
    (["--param", "epsilon=small"], "--param epsilon=small: not a number"),
    (["--d3-mode", "both"], "invalid choice: 'both'"),
    (["--personas", "Critic"], "--personas is not an option of --protocol d3 (it is read by chateval, ensemble)"),
    (["--unreadable", "code"], "--unreadable is not an option of --protocol d3 (it is read by chateval)"),
    (["--dataset", "summeval", "--aspect", "coherence"],
     "--protocol d3 judges pairwise items, not the score items of summeval"),
])
def test_options_are_checked_before_a_request(options: list[str], message: str, openai_server,
                                             tmp_path: Path) -> None:
    server = openai_server(replies)
    dataset = [] if "--dataset" in options else FAIREVAL
    code, _, err = run("eval", "--protocol", "d3", *options, *dataset, "--limit", "1", *model(server),
                       "--out", str(tmp_path / "run"), "--quiet")
    assert code == 2 and message in err, err
    assert server.requests == []


@pytest.mark.parametrize("graph_id", ["d3_samre", "d3_more"])
def test_its_studio_graphs_judge_an_item_with_a_json_context(graph_id: str, openai_server) -> None:
    from jurygraph import studio

    server = openai_server(replies)
    graph = studio.GRAPHS[graph_id]
    item = load_faireval().items[0]
    out = graph.invoke({"item": item.model_dump(mode="json")},
                       context={"default": f"openai:fake-model@{server.base_url}", "reasks": 1})
    verdict = verdict_of(out)
    assert verdict is not None and (verdict.label, verdict.votes) == ("2", {"1": 0, "2": 5})
    assert all(r["model"] == "fake-model" for r in server.requests)


def test_a_budget_reserves_an_item_its_longest_debate() -> None:
    """The budget's per-item reserve renders SAMRE as the dry run's most does (R rounds, the spec's most_values),
    not the converging debate the scripted replies give: a reserve of 3 rounds would let an item of 5 pass the
    limit."""
    import argparse

    from jurygraph.cli.costs import item_pricer
    from jurygraph.cli.eval import add_eval_arguments
    from jurygraph.cli.options import context_from_args
    from jurygraph.cli.protocols import build_protocol

    parser = argparse.ArgumentParser()
    add_eval_arguments(parser)
    args = parser.parse_args(["--protocol", "d3", *FAIREVAL, "--model", "openai:gpt-4o-mini"])
    item = load_faireval().items[0]
    setup = build_protocol(args, {"pairwise"})
    assert setup.most_graph is not None
    reserve = item_pricer(setup, context_from_args(args, setup), None, batch=False)(item)
    assert reserve.requests == 5 * 6 + 10 and reserve.output_tokens == (5 * 6 + 10) * 4096
