"""`jurygraph report`: a page built from real runs (``jurygraph eval`` against the local test server), checked
for self-containedness, opened in headless Chromium, and the position-bias figures of ``jurygraph metaeval``."""

from __future__ import annotations

import html
import json
import math
import re
import shutil
import subprocess
import tempfile
import time
import zlib
from pathlib import Path

import pytest

from jurygraph.cli.app import main
from jurygraph.measuring.position import order_pairs, position_bias
from jurygraph.running.datasets import load_dataset
from jurygraph.running.rundir import MANIFEST, RESULTS, read_results
from jurygraph.testing import pairwise_reply
from jurygraph.testing.fake_server import FakeOpenAIServer, prompt_of

DISCUSSION = "Assistant 1 answers the question more directly."


def responder(request: dict, index: int) -> str:
    """Verdicts that differ between items and answer orders (a hash of the prompt), so that the runs have
    agreements, disagreements, ties and flips."""
    prompt = prompt_of(request)
    if "Output with the following format strictly" in prompt:
        scores = [(8, 4), (4, 8), (6, 6)][zlib.crc32(prompt.encode()) % 3]
        return pairwise_reply(*scores, evidence="Assistant 1 cites its sources.")
    return DISCUSSION


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A ChatEval run judged in both orders (the default BPC), and a one-order run with its --reverse run."""
    root = tmp_path_factory.mktemp("runs")
    base = ["eval", "--protocol", "chateval", "--agents", "2", "--turns", "2", "--model", "judge",
            "--dataset", "faireval", "--limit", "8", "--quiet"]
    with FakeOpenAIServer(responder) as server:
        for name, extra in (("bpc", []), ("forward", ["--no-calibrate"]), ("reverse", ["--no-calibrate", "--reverse"])):
            assert main([*base, "--base-url", server.base_url, "--out", str(root / name), *extra]) == 0
    return {name: root / name for name in ("bpc", "forward", "reverse")}


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("the report's browser test needs Chromium: apt-get install chromium (Debian's package; "
                    ".ci/run installs it where missing)")
    return found


def browse(page: Path, fragment: str = "", *, screenshot: Path | None = None) -> str:
    """The page's DOM after its scripts ran (``--dump-dom``), opened at ``#fragment``; or a screenshot."""
    with tempfile.TemporaryDirectory() as profile:
        # no sandbox (root in CI containers); no background networking: nothing may leave this machine
        command = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                   "--disable-background-networking", "--disable-component-update", "--disable-sync",
                   f"--user-data-dir={profile}", "--virtual-time-budget=5000"]
        if screenshot is not None:
            command += [f"--screenshot={screenshot}", "--window-size=1280,2200", "--hide-scrollbars"]
        else:
            command.append("--dump-dom")
        done = subprocess.run([*command, page.resolve().as_uri() + (f"#{fragment}" if fragment else "")],
                              capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


def shown_count(dom: str) -> str:
    found = re.search(r'<span id="count">([^<]*)</span>', dom)
    assert found, "the item list did not render"
    return found.group(1)


def test_report_is_one_self_contained_file(runs: dict[str, Path], tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    assert main(["report", str(runs["bpc"]), "--out", str(page), "--resamples", "50"]) == 0
    text = page.read_text(encoding="utf-8")
    # nothing to load: every src is inline data, no stylesheet/script/font link, no CSS import or remote url()
    sources = re.findall(r"""\bsrc\s*=\s*["']?([^"'\s>]*)""", text)
    assert sources and all(source.startswith("data:") for source in sources)
    assert not re.search(r"""(?:href|src|action)\s*=\s*["']?\s*(?:https?:)?//""", text, re.I)
    assert not re.search(r"""url\(\s*["']?\s*(?:https?:)?//|@import""", text, re.I)
    assert "<link" not in text and "default-src 'none'" in text
    assert "data:image/png;base64," in text  # the diagram and the confusion matrix, inline
    for needle in ("Summary", "Agreement with humans", "Position bias", "General Public", "Critic"):
        assert needle in text


def test_report_opens_in_headless_chromium(runs: dict[str, Path], tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    assert main(["report", str(runs["bpc"]), "--out", str(page), "--resamples", "50"]) == 0
    records = read_results(runs["bpc"])
    dom = browse(page)
    assert shown_count(dom) == f"{len(records)} of {len(records)} items"
    assert dom.count('<tr class="item') == len(records)

    # an item opens as its debate: each agent's message with its name, both answer orders, the verdict
    first = records[0]["id"]
    dom = browse(page, f"item={first}")
    conversation = html.unescape(dom.split('id="conversation"', 1)[1])
    assert DISCUSSION in conversation and "General Public" in conversation and "Critic" in conversation
    assert "original order" in conversation and "swapped order" in conversation
    assert "parsed: label" in conversation and "verdict:" in conversation and "heard " in conversation

    # a filter changes the list
    disagreeing = sum(1 for r in records if r["verdict"].get("label") not in (None, r["human"]["label"]))
    assert 0 < disagreeing < len(records)
    assert shown_count(browse(page, "outcome=disagrees")) == f"{disagreeing} of {len(records)} items"
    items = load_dataset("faireval").items[:8]
    texts = [" ".join(str(v) for v in item.model_dump().values()).lower() for item in items]
    found = sum(1 for text in texts if "time management" in text)
    assert 0 < found < len(records)
    assert shown_count(browse(page, "q=time+management")) == f"{found} of {len(records)} items"

    shot = tmp_path / "report.png"
    browse(page, f"item={first}", screenshot=shot)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_position_bias_from_a_reverse_run_and_in_metaeval(runs: dict[str, Path], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    forward, reverse = read_results(runs["forward"]), read_results(runs["reverse"])
    pairs = order_pairs(forward, reverse)
    assert len(pairs) == len(forward)
    bias = position_bias("x", pairs)
    assert bias.first + bias.second + bias.ties == 2 * bias.pairs

    assert main(["metaeval", str(runs["forward"]), str(runs["reverse"]), "--resamples", "0"]) == 0
    printed = capsys.readouterr().out
    assert "Position bias" in printed and "chateval + chateval" in printed
    assert main(["metaeval", str(runs["bpc"]), "--resamples", "0"]) == 0
    assert "Position bias" in capsys.readouterr().out

    page = tmp_path / "both.html"
    assert main(["report", f"forward={runs['forward']}", f"reverse={runs['reverse']}", "--out", str(page),
                 "--resamples", "0"]) == 0
    text = page.read_text(encoding="utf-8")
    assert "forward + reverse" in text and "Comparison" in text and "methods disagree" in text


def test_position_bias_counts_by_the_position_the_judge_saw() -> None:
    def record(item_id: str, original: str, swapped: str) -> dict:
        runs = {"original_order": {"label": original}, "swapped_order": {"label": swapped}}
        return {"id": item_id, "task": "pairwise", "status": "ok", "verdict": {"label": original,
                                                                                "detail": {"runs": runs}}}
    # labels in the original order: "1" then "2" means the first-shown answer won both times (a: 2 first;
    # b: 1 first, 1 second; c: a tie, then the first)
    bias = position_bias("m", order_pairs([record("a", "1", "2"), record("b", "1", "1"), record("c", "tie", "2")]))
    assert (bias.pairs, bias.flips, bias.flipped_ids) == (3, 2, ["a", "c"])
    assert (bias.first, bias.second, bias.ties) == (4, 1, 1) and bias.favoured == "first"


def test_a_20000_item_report_opens_quickly(runs: dict[str, Path], tmp_path: Path) -> None:
    """The item list is paged and the data interned: a 20,000-item run (the real run's records repeated)
    builds and renders in seconds."""
    big = tmp_path / "big"
    big.mkdir()
    records = read_results(runs["bpc"])
    (big / MANIFEST).write_text((runs["bpc"] / MANIFEST).read_text(encoding="utf-8"), encoding="utf-8")
    with (big / RESULTS).open("w", encoding="utf-8") as out:
        for k in range(20_000):
            out.write(json.dumps({**records[k % len(records)], "id": f"q{k}"}) + "\n")
    page = tmp_path / "big.html"
    started = time.monotonic()
    assert main(["report", str(big), "--out", str(page), "--resamples", "0"]) == 0
    built = time.monotonic() - started
    started = time.monotonic()
    dom = browse(page)
    opened = time.monotonic() - started
    assert shown_count(dom) == "20000 of 20000 items"
    assert dom.count('<tr class="item') == 50  # one page
    rendered = int(re.search(r'data-ready="(\d+)"', dom).group(1))  # ms from navigation to the first page
    assert built < 60 and opened < 30 and rendered < 10_000, (built, opened, rendered)
    assert shown_count(browse(page, "q=q19999")) == "1 of 20000 items"


def debate_responder(request: dict, index: int) -> str:
    """The Scorer scores 2, the Critic objects once, the revised 4 passes (who speaks: the persona that opens
    each agent's chat; turns: the assistant messages it has had)."""
    scorer = "Logically think to score" in str(request["messages"][0]["content"])
    turns = sum(m["role"] == "assistant" for m in request["messages"])
    if scorer:
        return "Score: 2\nIt reads choppily." if turns == 0 else "Score: 4\nRevised after the critique."
    return "OBJECTION: the summary omits the court's ruling." if turns == 0 else "NO ISSUE"


def test_a_debate_and_a_chateval_run_on_other_data_share_a_page(runs: dict[str, Path], tmp_path: Path) -> None:
    debate = tmp_path / "debate"
    with FakeOpenAIServer(debate_responder) as server:
        assert main(["eval", "--protocol", "debate", "--model", "judge", "--base-url", server.base_url,
                     "--dataset", "summeval", "--aspect", "coherence", "--limit", "3", "--out", str(debate),
                     "--quiet"]) == 0
    page = tmp_path / "two.html"
    assert main(["report", str(debate), str(runs["bpc"]), "--out", str(page), "--resamples", "0"]) == 0
    text = page.read_text(encoding="utf-8")
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', text, re.S)
                      .group(1).replace("<\\/", "</"))
    assert data["runs"] == ["debate", "chateval"] and len(data["items"]) == 3 + 8
    turns = data["items"][0][2][0][3]["turns"]
    spoken = [(speaker, data["strings"][ref]) for _, speaker, _, ref, _, _ in turns]
    # the Scorer's score, the Critic's objection, the Scorer's revision, the Critic's "NO ISSUE"
    assert [s for s, _ in spoken] == ["Scorer", "Critic", "Scorer", "Critic"]
    assert "OBJECTION" in spoken[1][1] and spoken[2][1].startswith("Score: 4") and spoken[3][1] == "NO ISSUE"
    # each reply's parsed judgment (the first from DEBATE's per-iteration scores); the Scorer's persona
    assert (turns[0][4], turns[2][4]) == ("score 2", "score 4") and turns[0][2] >= 0
    # each run's agreement in its own benchmark's table
    assert "summeval: summary-level" in text and "faireval: agreement with the human verdict" in text


# --- panel diagnostics, doubt curves, decided by (issue 28): each section only when the runs have its data ---


PANEL = ["eval", "--protocol", "ensemble", "--personas", "General Public,Critic", "--model", "coin", "--models",
         "Critic=llama3-8b", "--dataset", "faireval", "--limit", "12", "--quiet"]


@pytest.fixture(scope="module")
def routed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The panel of docs/PANEL.md's judges (a coin and a self-preferring LLaMA, of vicuna's family): its
    disagreements escalated to the oracle in one run, sent to people in another (two decided, with and without a
    note; the rest waiting); and a single judge whose results predate doubt signals."""
    from jurygraph.testing.panel_judges import serve

    root = tmp_path_factory.mktemp("routed")
    with serve() as server:
        assert main([*PANEL, "--base-url", server.base_url, "--out", str(root / "escalated"),
                     "--escalate-when", "agreement<1", "--escalate-to", "gpt-4o-mini"]) == 0
        assert main([*PANEL, "--base-url", server.base_url, "--out", str(root / "reviewed"),
                     "--review-when", "agreement<1"]) == 0
        assert main(["eval", "--protocol", "single", "--no-calibrate", "--model", "coin", "--base-url",
                     server.base_url, "--dataset", "faireval", "--limit", "6", "--quiet", "--out",
                     str(root / "single")]) == 0
    waiting = [r["id"] for r in read_results(root / "reviewed") if r["status"] == "awaiting_review"]
    assert len(waiting) >= 3
    assert main(["review", str(root / "reviewed"), "--item", waiting[0], "--verdict", "1", "--note", "A is right",
                 "--reviewer", "ada"]) == 0
    assert main(["review", str(root / "reviewed"), "--item", waiting[1], "--verdict", "tie", "--reviewer", "bob"]) == 0
    old = root / "single" / RESULTS  # as a run written before doubt signals
    old.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "doubt"}) + "\n" for r in read_results(
        root / "single")), encoding="utf-8")
    return {name: root / name for name in ("escalated", "reviewed", "single")}


def section(dom: str, name: str) -> str:
    found = re.search(rf'<section id="{name}">(.*?)</section>', dom, re.S)
    assert found, f"no {name} section"
    return found.group(1)


def attributes(tag: str) -> dict[str, str]:
    return {k: html.unescape(v) for k, v in re.findall(r'([\w-]+)="([^"]*)"', tag)}


def test_the_panel_doubt_and_decided_by_sections_show_what_metaeval_computes(routed: dict[str, Path],
                                                                               tmp_path: Path) -> None:
    from jurygraph.judging.doubt import panel_verdict
    from jurygraph.measuring.coverage import doubt_reports, panel_records
    from jurygraph.measuring.metaeval import evaluate_records
    from jurygraph.measuring.panel import panel_diagnostics
    from jurygraph.measuring.tables import number

    page = tmp_path / "routed.html"
    assert main(["report", f"escalated={routed['escalated']}", f"reviewed={routed['reviewed']}", "--out", str(page),
                 "--resamples", "50"]) == 0
    dom = browse(page)
    for name in ("panel", "doubt", "decided"):
        assert f'data-go="{name}"' in dom  # each section is linked from the header

    # the panel's diagnostics, on its own verdicts (as metaeval: before escalation or review)
    shown = [attributes(tag) for tag in re.findall(r'<div class="panel-diagnostics"[^>]*>', section(dom, "panel"))]
    for name in ("escalated", "reviewed"):
        records = panel_records(read_results(routed[name]))
        [panel] = panel_diagnostics(name, records, evaluate_records(records, name, resamples=50, seed=0),
                                    resamples=50, seed=0)
        [figures] = [f for f in shown if f["data-run"] == name]
        assert figures["data-target"] == "pairwise"
        assert figures["data-members"] == " | ".join(m.name for m in panel.members) == "Critic | General Public"
        assert figures["data-effective"] == repr(panel.errors.effective)
        assert (figures["data-best"], figures["data-vs-best"]) == (panel.vs_best.best,
                                                                   repr(panel.vs_best.test.difference))
        block = html.unescape(section(dom, "panel"))
        assert f"effective number of independent judges: {number(panel.errors.effective, 2)}" in block
        for member in panel.members:
            assert f"{number(100 * member.result.labels.accuracy, 1)} [" in block
    # llama3-8b judges vicuna, a LLaMA fine-tune: the same-family warning and the rule it rests on
    block = html.unescape(section(dom, "panel"))
    assert "Same-family warning" in block and "llama3-8b" in block and "vicuna" in block

    # every point of every doubt curve, drawn where doubt_reports puts it
    points = {(attributes(g)["data-run"], signal, a["data-rule"], int(a["data-kept"]), a["data-coverage"],
               a["data-agreement"])
              for g, body in re.findall(r'(<div class="doubt-curves"[^>]*>)(.*?)</table>', section(dom, "doubt"), re.S)
              for signal, circles in re.findall(r'<g class="curve" data-signal="(\w+)">(.*?)</g>', body, re.S)
              for a in map(attributes, re.findall(r"<circle[^>]*>", circles))}
    expected = {(r.name, c.signal, p.rule or "", p.kept, repr(p.coverage), repr(p.agreement))
                for name in ("escalated", "reviewed") for r in doubt_reports(name, read_results(routed[name]))
                for c in r.curves for p in c.points if not math.isnan(p.agreement)}
    assert points == expected and len(expected) > 6

    # who decided: every escalated item, every reviewed one with its reviewer and note, the ones still waiting
    decided = section(dom, "decided")
    rows = [attributes(tag) | {"cells": [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in
                                         re.findall(r"<td>(.*?)</td>", body)]}
            for tag, body in re.findall(r'(<tr data-id=[^>]*>)(.*?)</tr>', decided, re.S)]
    escalated = [r for r in read_results(routed["escalated"]) if r["verdict"]["detail"].get("escalation")]
    reviewed = {r["id"]: r for r in read_results(routed["reviewed"])}
    routed_ids = [i for i, r in reviewed.items() if r["status"] == "awaiting_review" or r.get("decided_by")]
    assert len(rows) == len(escalated) + len(routed_ids)
    by_item = {(row["cells"][0], row["data-decided-by"]): row["cells"] for row in rows}
    for record in escalated:
        cells = by_item[(record["id"], "escalation")]
        assert cells[2] == "escalate: agreement<1" and cells[6] == record["human"]["label"]
    notes = {(cells[7], cells[8]) for (_, who), cells in by_item.items() if who == "review"}
    assert notes == {("ada", "A is right"), ("bob", "")}
    waiting = [cells for (_, who), cells in by_item.items() if who == "awaiting review"]
    assert len(waiting) == len(routed_ids) - 2 and all(c[2] == "review: agreement<1" and not c[5] for c in waiting)
    ada = next(i for i, r in reviewed.items() if (r["verdict"]["detail"].get("review") or {}).get("reviewer") == "ada")
    panel_said = panel_verdict(reviewed[ada])["label"]
    assert by_item[(ada, "review")][3].startswith(f"label {panel_said}") and by_item[(ada, "review")][5].startswith(
        "label 1")
    # the split by who decided, from coverage's figures
    split = html.unescape(decided)
    assert "decided by: escalated · pairwise (accuracy)" in split and "decided by: reviewed · pairwise" in split
    [report] = doubt_reports("reviewed", list(reviewed.values()))
    [review_group] = [g for g in report.split if g.group == "review"]
    assert review_group.n == 2 and f"<td>review</td><td>2</td><td>{review_group.agreement:.3f}</td>" in decided

    # the item itself says who decided, with the reviewer's note
    conversation = html.unescape(browse(page, f"item={ada}").split('id="conversation"', 1)[1])
    assert f"reviewed by ada: A is right (the panel said label {panel_said}" in conversation


def test_the_new_sections_appear_only_with_their_data(routed: dict[str, Path], runs: dict[str, Path],
                                                      tmp_path: Path) -> None:
    page = tmp_path / "plain.html"
    assert main(["report", str(routed["single"]), "--out", str(page), "--resamples", "0"]) == 0
    dom = browse(page)  # one judge, no doubt signals, nothing routed
    for name in ("panel", "doubt", "decided"):
        assert f'<section id="{name}"' not in dom and f'data-go="{name}"' not in dom
    assert shown_count(dom) == "6 of 6 items"
    page = tmp_path / "chateval.html"
    assert main(["report", str(runs["forward"]), "--out", str(page), "--resamples", "0"]) == 0
    dom = browse(page)  # two referees with doubt signals, nothing escalated or reviewed
    assert '<section id="panel">' in dom and '<section id="doubt">' in dom and '<section id="decided"' not in dom
