"""Escalation and review from the command line (issue 23), against the local OpenAI-compatible server with scripted
referees that disagree on known FairEval items: exactly those items reach the stronger model (its requests are
counted at the server) or wait for a person; `jurygraph review` resumes them (scripted stdin, and --item/--verdict);
a kill -9 with items waiting, then --resume, keeps them waiting and sends nothing; a reviewed line survives --resume;
metaeval's curves and split match values computed here from the scripts."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from jurygraph.cli import main
from jurygraph.judging.items import SWAP_LABEL
from jurygraph.measuring.coverage import doubt_reports, panel_records
from jurygraph.running.rundir import LOCK, read_results, run_lock
from jurygraph.testing import pairwise_reply
from jurygraph.testing.fake_server import prompt_of
from jurygraph.testing.panel_judges import faireval

LIMIT = 6
# FairEval's first six human labels, and the items where the Critic ("contrary") disagrees with General Public
HUMAN = {"0": "1", "1": "tie", "2": "2", "3": "2", "4": "2", "5": "1"}
DISAGREE = {"1", "3", "4"}
OTHER = {"1": "2", "2": "1", "tie": "1"}
SCORES = {"1": (8, 4), "2": (4, 8), "tie": (6, 6)}


def respond(request: dict[str, Any], choice: int = 0) -> str:
    """steady and strong: the human label; contrary: another label on DISAGREE, the human label elsewhere. Each
    states its pick for the order it was shown, as any judge does."""
    prompt = prompt_of(request)
    question = next(q for q in faireval() if q and q in prompt)
    item = faireval()[question]
    label = item["label"]
    if request["model"] == "contrary" and item["id"] in DISAGREE:
        label = OTHER[label]
    gpt35, vicuna = (prompt.find(answer) for answer in item["answers"])
    if 0 <= vicuna < gpt35:  # shown swapped
        label = SWAP_LABEL[label]
    return pairwise_reply(*SCORES[label], f"{request['model']} by its script.")


def run_args(server: Any, out: Path, *extra: str) -> list[str]:
    return ["eval", "--protocol", "ensemble", "--personas", "General Public,Critic", "--model", "steady",
            "--models", "Critic=contrary", "--base-url", server.base_url, "--dataset", "faireval",
            "--limit", str(LIMIT), "--quiet", "--out", str(out), *extra]


def questions_of(requests: list[dict[str, Any]], model: str) -> set[str]:
    """The items (ids) whose question a model was asked about."""
    by_question = {q: data["id"] for q, data in faireval().items() if q}
    return {by_question[q] for r in requests if r["model"] == model for q in by_question if q in prompt_of(r)}


def by_id(out: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in read_results(out)}


def test_exactly_the_disagreements_reach_the_stronger_model(openai_server, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    server = openai_server(respond)
    out = tmp_path / "run"
    assert main(run_args(server, out, "--escalate-when", "agreement<1", "--escalate-to", "strong")) == 0
    strong = [r for r in server.requests if r["model"] == "strong"]
    assert questions_of(server.requests, "strong") == DISAGREE
    assert len(strong) == 2 * len(DISAGREE)  # ChatEval's single agent, in both answer orders as the panel was
    assert len(server.requests) == 4 * LIMIT + 2 * len(DISAGREE)  # the others cost nothing more
    records = by_id(out)
    for item_id, record in records.items():
        escalation = record["verdict"]["detail"].get("escalation")
        if item_id not in DISAGREE:
            assert escalation is None and "decided_by" not in record and record["doubt"]["agreement"] == 1.0
            continue
        assert record["decided_by"] == "escalation" and record["verdict"]["label"] == HUMAN[item_id]
        assert escalation["triggered_by"] == ["agreement<1"] and record["doubt"]["agreement"] == 0.5
        assert escalation["panel"]["label"] != HUMAN[item_id] and escalation["escalated"]["label"] == HUMAN[item_id]
        assert escalation["cost"]["panel"]["requests"] == 4 and escalation["cost"]["escalation"]["requests"] == 2
        models = {agent: usage["model"] for agent, usage in record["usage"].items()}
        assert models["escalation/Single Agent"].startswith("openai:strong@http://127.0.0.1:")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["parameters"]["escalate_when"] == ["agreement<1"]
    assert manifest["parameters"]["escalate_to"].startswith("openai:strong@http://127.0.0.1:")
    assert manifest["parameters"]["escalation"] == {"protocol": "ensemble single agent", "calibrate": "bpc"}
    assert manifest["requests_per_item"] == 2 * 2 * 2 + 2 * 2  # the panel (re-asks included) and the escalation

    capsys.readouterr()
    assert main(["metaeval", str(out), "--json", "--resamples", "0"]) == 0
    [report] = json.loads(capsys.readouterr().out)["doubt"]
    # who decided: the three agreeing items by the panel (right), the three others by the oracle (right), where the
    # panel was wrong on every one (a tie for 1-2 splits; 7-5 for tie against 1)
    assert report["split"] == {"panel": {"n": 3, "agreement": 1.0, "panel_agreement": None},
                               "escalation": {"n": 3, "agreement": 1.0, "panel_agreement": 0.0}}


def test_another_protocol_judges_the_escalated_items(openai_server, tmp_path: Path) -> None:
    server = openai_server(respond)
    out = tmp_path / "run"
    assert main(run_args(server, out, "--no-calibrate", "--escalate-when", "agreement<1", "--escalate-protocol",
                         "chateval", "--escalate-to", "strong")) == 0
    # ChatEval's two referees, two turns, one order: 4 requests per escalated item, all to the stronger model
    assert questions_of(server.requests, "strong") == DISAGREE
    assert sum(r["model"] == "strong" for r in server.requests) == 4 * len(DISAGREE)
    record = by_id(out)["3"]
    assert record["decided_by"] == "escalation" and record["verdict"]["label"] == "2"
    assert {"escalation/General Public", "escalation/Critic"} <= set(record["usage"])


def test_review_pauses_exactly_the_disagreements_and_review_resumes_them(
        openai_server, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    server = openai_server(respond)
    out = tmp_path / "run"
    capsys.readouterr()
    assert main(run_args(server, out, "--review-when", "agreement<1")) == 0
    printed = capsys.readouterr().out
    assert f"3 items await review: jurygraph review {out}" in printed
    assert "0 failed, 3 await review" in printed
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["awaiting_review"] == sorted(DISAGREE) and manifest["counts"]["awaiting_review"] == 3
    assert {i for i, r in by_id(out).items() if r["status"] == "awaiting_review"} == DISAGREE
    sent = len(server.requests)

    # interactive: item 1 gets a wrong answer first (asked again), then tie with a note; item 3 is skipped;
    # item 4 gets 2 and no note
    monkeypatch.setattr(sys, "stdin", io.StringIO("3\ntie\nclose call\ns\n2\n\n"))
    assert main(["review", str(out), "--reviewer", "ada"]) == 0
    captured = capsys.readouterr()
    assert "'3' is not a pairwise verdict: item '1' takes 1, 2 or tie" in captured.err
    assert "transcript:" in captured.out and "human: label tie" in captured.out
    assert "panel verdict: label 1" in captured.out and "doubt: agreement 0.5" in captured.out
    assert "reviewed 2, skipped 1" in captured.out and "1 item awaits review" in captured.out
    records = by_id(out)
    for item_id, label, note in (("1", "tie", "close call"), ("4", "2", None)):
        record = records[item_id]
        review = record["verdict"]["detail"]["review"]
        assert record["status"] == "ok" and record["decided_by"] == "review" and record["verdict"]["label"] == label
        assert review["reviewer"] == "ada" and review["note"] == note and review["at"]
        assert review["panel_verdict"]["label"] != HUMAN[item_id]
        assert record["doubt"]["agreement"] == 0.5  # the panel's doubt, kept after the review
    assert records["3"]["status"] == "awaiting_review"

    assert main(["review", str(out), "--item", "3", "--verdict", "1", "--note", "A is right"]) == 0
    assert "no item of" in capsys.readouterr().out
    review = by_id(out)["3"]["verdict"]["detail"]["review"]
    assert review["verdict"] == "1" and review["note"] == "A is right" and review["reviewer"]  # the login name
    assert len(server.requests) == sent  # a review sends nothing
    assert json.loads((out / "manifest.json").read_text())["awaiting_review"] == []
    assert len(read_results(out)) == LIMIT  # one line per item

    capsys.readouterr()
    assert main(["metaeval", str(out), "--json", "--resamples", "0"]) == 0
    [report] = json.loads(capsys.readouterr().out)["doubt"]
    # the reviewer: tie (right), 2 (right), 1 (wrong); the panel was wrong on all three
    assert report["split"]["review"] == {"n": 3, "agreement": pytest.approx(2 / 3, abs=1e-6), "panel_agreement": 0.0}
    assert report["split"]["panel"]["n"] == 3 and report["awaiting_review"] == 0

    # a resume keeps the reviewed lines as they are, and sends nothing
    before = by_id(out)
    assert main(["eval", "--resume", str(out), "--quiet"]) == 0
    assert by_id(out) == before and len(server.requests) == sent


class Answers(io.StringIO):
    """A reviewer at the keyboard: each answer is typed after what the screen showed so far, which is kept."""

    def __init__(self, text: str, capsys: pytest.CaptureFixture[str]) -> None:
        super().__init__(text)
        self.capsys, self.screens = capsys, []

    def readline(self, *args: Any) -> str:
        self.screens.append(self.capsys.readouterr().out)
        return super().readline(*args)


def test_the_reviewer_sees_the_human_label_only_after_deciding(
        openai_server, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """metaeval scores a reviewer against the human label: shown before the verdict, it would be copied. Item 1's
    label is tie, item 3's 2; the reviewer answers 1 to both."""
    server = openai_server(respond)
    out = tmp_path / "run"
    assert main(run_args(server, out, "--review-when", "agreement<1")) == 0
    capsys.readouterr()
    typed = Answers("1\n\n1\nnote\nq\n", capsys)
    monkeypatch.setattr(sys, "stdin", typed)
    assert main(["review", str(out), "--reviewer", "ada"]) == 0
    typed.screens.append(capsys.readouterr().out)
    first, _note, second, _note, third, last = typed.screens
    for screen in (first, second, third):  # each item as shown up to its verdict question
        shown = screen[screen.index("\n=== "):]
        assert "transcript:" in shown and "panel verdict:" in shown and "human" not in shown.lower(), shown
        assert shown.rstrip().endswith("s = skip, q = quit):")
    # once decided, the label is shown
    assert "recorded 1: 1 by ada" in second and "human: label tie" in second.split("\n=== ")[0]
    assert "recorded 3: 1 by ada" in third and "human: label 2" in third.split("\n=== ")[0]
    assert "reviewed 2, skipped 0" in last
    records = by_id(out)
    assert records["1"]["verdict"]["label"] == "1" and records["3"]["verdict"]["label"] == "1"
    capsys.readouterr()
    assert main(["metaeval", str(out), "--json", "--resamples", "0"]) == 0
    [report] = json.loads(capsys.readouterr().out)["doubt"]
    assert report["split"]["review"]["n"] == 2 and report["split"]["review"]["agreement"] == 0.0


def test_listing_what_waits_only_reads(openai_server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`review --list` reads, as `show` and `metaeval` do: it needs no lock while a run or a review writes the
    directory, and changes nothing."""
    server = openai_server(respond)
    out = tmp_path / "run"
    assert main(run_args(server, out, "--review-when", "agreement<1")) == 0

    def files() -> dict[str, bytes]:  # SQLite's shared-memory index of its write-ahead log is a reader's too
        return {path.name: path.read_bytes() for path in out.iterdir()
                if path.is_file() and path.name != LOCK and not path.name.endswith(("-shm", "-wal"))}

    before = files()
    capsys.readouterr()
    with run_lock(out):  # another process writes the run
        assert main(["review", str(out), "--list"]) == 0
        listed = capsys.readouterr().out
        assert [line.split("\t")[0] for line in listed.splitlines()[:3]] == sorted(DISAGREE)
        assert "agreement 0.5" in listed and "3 items await review" in listed
        assert main(["review", str(out), "--list", "--item", "3"]) == 0
        assert capsys.readouterr().out.startswith("3\tpanel: label tie")
        assert main(["review", str(out), "--item", "1", "--verdict", "tie"]) == 2  # deciding still needs the lock
        assert "is in use by PID" in capsys.readouterr().err
    assert files() == before
    assert main(["review", str(out), "--list", "--item", "1", "--verdict", "tie"]) == 2
    assert "--list only reads the run" in capsys.readouterr().err


def test_review_refuses_in_one_line(openai_server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = openai_server(respond)
    out = tmp_path / "run"
    assert main(run_args(server, out, "--review-when", "agreement<1")) == 0
    for args, says in [
        (["--item", "1", "--verdict", "3"], "'3' is not a pairwise verdict: item '1' takes 1, 2 or tie"),
        (["--item", "2", "--verdict", "1"], "item '2' does not wait for a review"),
        (["--item", "99", "--verdict", "1"], "no item '99' in the checkpoints; waiting: 1, 3, 4"),
        (["--verdict", "1"], "--verdict needs --item ID"),
        (["--note", "x"], "--note goes with --item ID --verdict V"),
    ]:
        capsys.readouterr()
        assert main(["review", str(out), *args]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("jurygraph: ") and says in err and len(err.splitlines()) == 1, err
    with run_lock(out):  # a run (or another review) writing the directory: one writer at a time
        capsys.readouterr()
        assert main(["review", str(out), "--item", "1", "--verdict", "tie"]) == 2
        assert "is in use by PID" in capsys.readouterr().err
    assert main(["review", str(out), "--item", "1", "--verdict", "tie"]) == 0
    capsys.readouterr()
    assert main(["review", str(out), "--item", "1", "--verdict", "tie"]) == 2
    assert "item '1' was already reviewed" in capsys.readouterr().err


def test_doubt_options_are_checked_before_anything_is_sent(openai_server, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    server = openai_server(respond)
    for extra, says in [
        (["--escalate-when", "agreement<1"], "--escalate-when needs where the items go"),
        (["--escalate-to", "strong"], "--escalate-to / --escalate-protocol need --escalate-when"),
        (["--no-calibrate", "--review-when", "flip"], "--review-when flip: ensemble on pairwise items gives no flip "
                                                      "signal (it needs pairwise items judged in both answer orders"),
        (["--review-when", "spread>1"], "gives no spread signal"),
        (["--review-when", "agreemnt<1"], "doubt condition 'agreemnt<1'"),
        (["--escalate-when", "flip", "--escalate-protocol", "geval"], "--escalate-protocol geval rates single texts"),
    ]:
        capsys.readouterr()
        assert main(run_args(server, tmp_path / "run", *extra)) == 2
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1, err
    assert server.requests == []


def test_a_kill_with_items_awaiting_review_keeps_them_waiting_and_pays_nothing_again(openai_server,
                                                                                    tmp_path: Path) -> None:
    """kill -9 once two items wait for a review: the resume keeps them waiting without a request for them (their
    checkpoint holds the pause), finishes the rest, and the review then decides them."""
    server = openai_server(respond, latency=0.05)
    out = tmp_path / "run"
    args = run_args(server, out, "--review-when", "agreement<1", "--concurrency", "1")
    child = subprocess.Popen([sys.executable, "-m", "jurygraph.cli", *args], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(r["status"] == "awaiting_review" for r in read_results(out)) < 2:
            time.sleep(0.01)
    finally:
        child.kill()
        child.wait(timeout=30)
    waiting = {r["id"] for r in read_results(out) if r["status"] == "awaiting_review"}
    assert waiting == {"1", "3"}, read_results(out)
    killed = len(server.requests)
    assert killed < 4 * LIMIT  # killed before the last item was judged
    asked_before = questions_of(server.requests, "steady")

    assert main(["eval", "--resume", str(out), "--quiet"]) == 0
    resumed = server.requests[killed:]
    assert not questions_of(resumed, "steady") & waiting  # nothing is asked again about the waiting items
    assert questions_of(resumed, "steady") <= {"4", "5"} and asked_before >= {"0", "1", "2", "3"}
    records = by_id(out)
    assert len(read_results(out)) == LIMIT
    assert {i for i, r in records.items() if r["status"] == "awaiting_review"} == DISAGREE
    assert json.loads((out / "manifest.json").read_text())["awaiting_review"] == sorted(DISAGREE)
    # the same panel verdicts as a run that was never killed
    whole = tmp_path / "whole"
    assert main(run_args(server, whole, "--review-when", "agreement<1", "--no-cache")) == 0
    assert {i: r["verdict"] for i, r in records.items()} == {i: r["verdict"] for i, r in by_id(whole).items()}
    again = len(server.requests)
    assert main(["eval", "--resume", str(out), "--quiet"]) == 0  # a second resume: still waiting, still nothing sent
    assert len(server.requests) == again
    assert {i for i, r in by_id(out).items() if r["status"] == "awaiting_review"} == DISAGREE


def test_draw_shows_the_routes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["draw", "--protocol", "ensemble", "--escalate-when", "agreement<1", "--escalate-to", "openai:gpt-4o",
                 "--review-when", "flip"]) == 0
    text = capsys.readouterr().out
    assert "aggregate -. &nbsp;escalate if agreement<1&nbsp; .-> escalate;" in text
    assert "escalate -. &nbsp;review if flip&nbsp; .-> review;" in text and "review --> __end__;" in text


def test_metaeval_curves_match_the_scripts(openai_server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server = openai_server(respond)
    out = tmp_path / "run"
    assert main(run_args(server, out)) == 0  # no routes: the doubt is recorded all the same
    capsys.readouterr()
    assert main(["metaeval", str(out), "--json", "--resamples", "0"]) == 0
    [report] = json.loads(capsys.readouterr().out)["doubt"]
    # from the scripts: the panel is right where its members agree (margin 4), wrong on the splits: a tie (margin 0)
    # for 1 against 2, 7-5 (margin 2) for tie against 1; both orders agree everywhere (no flip)
    agree = {i: i not in DISAGREE for i in HUMAN}
    margin = {i: 4.0 if agree[i] else 2.0 if HUMAN[i] == "tie" else 0.0 for i in HUMAN}
    right = agree

    def accuracy(ids: list[str]) -> float:
        return sum(right[i] for i in ids) / len(ids)

    curves = report["curves"]
    assert curves["agreement"]["points"] == [
        {"escalate_when": None, "kept": 6, "coverage": 1.0, "agreement": accuracy(list(HUMAN))},
        {"escalate_when": "agreement<1", "kept": 3, "coverage": 0.5, "agreement": 1.0}]
    expected = [{"escalate_when": None, "kept": 6, "coverage": 1.0, "agreement": accuracy(list(HUMAN))}]
    for threshold in sorted(set(margin.values()))[1:]:
        kept = [i for i in HUMAN if margin[i] >= threshold]
        expected.append({"escalate_when": f"margin<{threshold:g}", "kept": len(kept),
                         "coverage": round(len(kept) / 6, 6), "agreement": round(accuracy(kept), 6)})
    assert curves["margin"]["points"] == expected
    assert curves["flip"]["points"][1] == {"escalate_when": "flip", "kept": 6, "coverage": 1.0, "agreement": 0.5}
    assert report["split"] == {"panel": {"n": 6, "agreement": 0.5, "panel_agreement": None}}
    capsys.readouterr()
    assert main(["metaeval", str(out), "--resamples", "0"]) == 0
    text = capsys.readouterr().out
    assert "coverage–agreement: ensemble · pairwise (accuracy)" in text and "margin<2" in text


def test_the_score_target_s_curves_hold_the_records_without_an_aspect() -> None:
    """An aspect's records are measured under their aspect only, even when their human labels carry a "score"
    too (metaeval and the panel diagnostics group score records the same way)."""
    def record(item: str, aspect: str | None, spread: float) -> dict[str, Any]:
        found = {"id": item, "task": "score", "status": "ok", "human": {"score": 3, "coherence": 3},
                 "verdict": {"kind": "score", "score": 3, "missing": False}, "doubt": {"spread": spread}}
        return {**found, "aspect": aspect} if aspect else found
    records = [record(str(i), None, 0.5) for i in range(4)] + [record(f"c{i}", "coherence", 1.5) for i in range(3)]
    curves = {r.target: r.curves[0] for r in doubt_reports("run", records)}
    assert {target: curve.n for target, curve in curves.items()} == {"score": 4, "coherence": 3}


def test_panel_records_of_a_run_nothing_was_routed_in_are_its_own_list() -> None:
    """metaeval measures such a run's panel on the method it already has (it checks with ``is``)."""
    plain = [{"id": "1", "task": "pairwise", "status": "ok", "verdict": {"label": "1", "detail": {}}}]
    assert panel_records(plain) is plain
    escalated = [*plain, {"id": "2", "task": "pairwise", "status": "ok",
                          "verdict": {"label": "2", "detail": {"escalation": {"panel": {"label": "tie"}}}}}]
    found = panel_records(escalated)
    assert found is not escalated and found == [plain[0], {**escalated[1], "verdict": {"label": "tie"}}]


def test_review_of_a_run_checkpointed_in_postgres(openai_server, postgres_url: str,
                                                  tmp_path: Path) -> None:
    server = openai_server(respond)
    out = tmp_path / "run"
    assert main(run_args(server, out, "--review-when", "agreement<1", "--checkpoint", postgres_url)) == 0
    assert {i for i, r in by_id(out).items() if r["status"] == "awaiting_review"} == DISAGREE
    assert main(["review", str(out), "--checkpoint", postgres_url, "--item", "3", "--verdict", "2"]) == 0
    assert by_id(out)["3"]["verdict"]["label"] == "2" and by_id(out)["3"]["decided_by"] == "review"
    sent = len(server.requests)
    assert main(["eval", "--resume", str(out), "--checkpoint", postgres_url, "--quiet"]) == 0
    assert len(server.requests) == sent
    assert {i for i, r in by_id(out).items() if r["status"] == "awaiting_review"} == DISAGREE - {"3"}
