"""`jurygraph report`: a page built from real runs (``jurygraph eval`` against the local test server), checked
for self-containedness, opened in headless Chromium, and the position-bias figures of ``jurygraph metaeval``."""

from __future__ import annotations

import html
import json
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
