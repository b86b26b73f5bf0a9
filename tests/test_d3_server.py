"""D3 end to end: FairEval items through ``run`` and the real OpenAI client against the local test server, into a
run directory (SQLite checkpoints, the LLM cache, results, manifest), resumed, and read back by the
meta-evaluation with the jurors and the judge as the panel's members."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest

from jurygraph import JuryContext, run
from jurygraph.graphs.d3 import create_d3
from jurygraph.measuring.members import member_names
from jurygraph.measuring.metaeval import metaeval
from jurygraph.running.datasets import load_faireval
from jurygraph.running.rundir import read_results
from jurygraph.testing.fake_server import prompt_of

ITEMS = load_faireval().items[:3]
SAID = itertools.count(1)  # every advocate's words differ, so that no two calls are the same (the LLM cache)


def replies(request: dict[str, Any], index: int) -> str:
    """Advocates and summaries argue in prose; the judge scores Assistant 2 higher each round by the same gap (so
    SAMRE converges at round 3); MORE's scorer likewise; every juror votes for answer 2."""
    system, prompt = request["messages"][0]["content"], prompt_of(request)
    agent = re.search(r"named (\S+),", system).group(1)  # type: ignore[union-attr]
    if prompt.startswith("Summarize the following content"):
        return f"{agent} in short: the second answer is more complete."
    if agent.startswith("Jury"):
        return "Reasoning: Defense B answered the whole question.\nVote: (0, 1)"
    if agent in ("Judge", "Scorer") and "Sum up the scores" in prompt:
        return "Relevance [15, 18], Accuracy [14, 17] ... Final tally: (80, 92)"
    return f"{agent}: my answer addresses the question directly and accurately ({next(SAID)})."


@pytest.mark.parametrize(("mode", "per_item"), [("samre", 3 * 6 + 5 * 2), ("more", 2 * 3 + 2 + 2 + 5)])
def test_a_faireval_run_at_the_local_server_resumes_and_is_measured(openai_server, tmp_path: Path, mode: str,
                                                                    per_item: int) -> None:
    server = openai_server(replies)
    context = JuryContext(default=f"openai:judge@{server.base_url}")
    out = tmp_path / mode
    summary = run(create_d3(mode=mode), ITEMS, out_dir=out, context=context, progress=False,
                  manifest={"protocol": "d3", "parameters": {"mode": mode}})
    assert (summary.done, summary.failed, summary.missing_verdicts) == (3, 0, 0)
    # the server got every call the LLM cache did not answer (identical summaries and votes are one call)
    assert len(server.requests) == summary.requests and summary.requests + summary.cache_hits == 3 * per_item
    records = read_results(out)
    for record in records:
        assert record["verdict"]["label"] == "2" and record["verdict"]["votes"] == {"1": 0, "2": 5}
        if mode == "samre":
            assert (record["verdict"]["detail"]["rounds"], record["verdict"]["detail"]["stopped"]) == (3, "converged")
    judge = "Judge" if mode == "samre" else "Scorer"
    assert member_names(records) == sorted(member_names(records), key=lambda m: m != judge)
    assert set(member_names(records)) == {judge, "Jury1", "Jury2", "Jury3", "Jury4", "Jury5"}
    result = metaeval(out, resamples=0)
    assert result.labels is not None and result.labels.n == 3

    # a resumed run sends nothing: every item is done (and every call is in the LLM cache)
    again = run(create_d3(mode=mode), ITEMS, out_dir=out, context=context, progress=False, resume=True,
                manifest={"protocol": "d3", "parameters": {"mode": mode}})
    assert again.skipped == 3 and len(server.requests) == summary.requests
