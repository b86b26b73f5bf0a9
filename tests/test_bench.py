"""``jurygraph bench`` and ``jurygraph metaeval`` end to end: ChatEval runs against the local
OpenAI-compatible server (real client, real HTTP, real SQLite), finished run directories, the tables
and the PNG plots."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib.image
import pytest

from jurygraph.cli import main
from jurygraph.measuring import metrics
from jurygraph.measuring.metaeval import metaeval
from jurygraph.running.datasets import load_faireval, load_topical_chat
from jurygraph.testing.fake_server import FakeOpenAIServer, prompt_of

PNG = b"\x89PNG\r\n\x1a\n"


def topical_chat_judge(aspects: list[str], limit: int) -> tuple[Callable[[dict[str, Any], int], str], dict]:
    """A referee that gives each response its human score rounded to the scale (so the expected
    correlations can be computed from the data alone); unknown responses get an unreadable reply."""
    truth: dict[tuple[str, str], float] = {}
    for aspect in aspects:
        for item in load_topical_chat(aspect=aspect).items[:limit]:
            truth[(aspect, str(item.response))] = float(round(item.human[aspect]))

    def respond(request: dict[str, Any], index: int) -> str:
        prompt = prompt_of(request)
        response = re.search(r"\[The Start of the Response\]\n(.*?)\n\[The End of the Response\]", prompt, re.S)
        aspect = re.search(r"feedback on the (\w+) of the response", prompt)
        key = (aspect.group(1) if aspect else "", response.group(1) if response else "")
        if key not in truth:
            return "I would rather not say."
        return f"Evaluation evidence: it reads well.\nThe score of the response: {truth[key]:g}"
    return respond, truth


def test_bench_runs_chateval_over_topical_chat_and_prints_the_table(
        tmp_path: Path, openai_server: Callable[..., FakeOpenAIServer], capsys: pytest.CaptureFixture[str]) -> None:
    aspects = ["naturalness", "coherence"]
    respond, _ = topical_chat_judge(aspects, 12)
    server = openai_server(respond)
    out = tmp_path / "bench"
    code = main(["bench", "--dataset", "topical-chat", "--aspects", ",".join(aspects), "--limit", "12",
                 "--method", f"MA=--protocol chateval --turns 1 --model fake --base-url {server.base_url}",
                 "--resamples", "100", "--out", str(out), "--quiet"])
    printed = capsys.readouterr().out
    assert code == 0
    # 2 aspects x 12 items x 2 referees, one request each
    assert len(server.requests) == 48
    for aspect in aspects:
        run_dir = out / "runs" / "MA" / aspect
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["method"] == "MA" and manifest["protocol"] == "chateval"
        records = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
        assert len(records) == 12 and all(r["status"] == "ok" for r in records)
        # expected: each verdict is the mean of two referees who both said round(human)
        items = load_topical_chat(aspect=aspect).items[:12]
        expected = metrics.pooled([round(i.human[aspect]) for i in items], [i.human[aspect] for i in items])
        result = metaeval(run_dir, resamples=0).aspects[aspect]
        assert result.value("spearman") == pytest.approx(expected.spearman)
        assert f"{expected.spearman:.3f}" in printed and f"{expected.kendall:.3f}" in printed
    table = (out / "table.txt").read_text()
    assert table.startswith("topical-chat: turn-level (pooled over all items) correlation with human ratings")
    header = table.splitlines()[1].split()
    assert header == ["Naturalness", "Coherence", "Average"]
    assert (out / "table.md").read_text().count("| MA |") == 3  # the table and two detail rows
    for name in ("table.csv", "results.csv", "details.csv", "distribution_MA.csv"):
        assert (out / name).stat().st_size > 0
    for name in ("aspects_spearman.png", "distribution_MA.png"):
        assert (out / name).read_bytes()[:8] == PNG
        height, width = matplotlib.image.imread(out / name).shape[:2]
        assert width > 300 and height > 200

    # running the same bench again resumes: nothing is sent twice
    before = len(server.requests)
    assert main(["bench", "--dataset", "topical-chat", "--aspects", ",".join(aspects), "--limit", "12",
                 "--method", f"MA=--protocol chateval --turns 1 --model fake --base-url {server.base_url}",
                 "--resamples", "0", "--out", str(out), "--quiet", "--no-plots"]) == 0
    assert len(server.requests) == before


def test_bench_counts_unreadable_verdicts_as_missing(
        tmp_path: Path, openai_server: Callable[..., FakeOpenAIServer], capsys: pytest.CaptureFixture[str]) -> None:
    """Items the fake referee will not score (beyond the first 8) become missing verdicts, not zeros."""
    respond, _ = topical_chat_judge(["engagingness"], 8)
    server = openai_server(respond)
    out = tmp_path / "bench"
    code = main(["bench", "--dataset", "topical-chat", "--aspects", "engagingness", "--limit", "10",
                 "--method", f"SA=--protocol chateval --agents 1 --turns 1 --model fake --base-url {server.base_url}",
                 "--resamples", "0", "--out", str(out), "--quiet", "--no-plots"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "Missing verdicts (excluded): SA/engagingness: 2." in printed
    result = metaeval(out / "runs" / "SA" / "engagingness", resamples=0).aspects["engagingness"]
    assert (result.correlation.n, result.missing) == (8, 2)
    assert not list(out.glob("*.png"))


def test_bench_faireval_accuracy_kappa_and_confusion(
        tmp_path: Path, openai_server: Callable[..., FakeOpenAIServer], capsys: pytest.CaptureFixture[str]) -> None:
    """A referee that always prefers Assistant 1: accuracy = share of human '1' labels, kappa = 0."""
    server = openai_server(lambda request, i: "Evaluation evidence: the first is better.\n"
                                              "The score of Assistant 1: 8\nThe score of Assistant 2: 6")
    out = tmp_path / "bench"
    code = main(["bench", "--dataset", "faireval", "--limit", "20",
                 "--method", f"ChatGPT(MA)=--protocol chateval --turns 1 --no-calibrate --model fake --base-url "
                             f"{server.base_url}",
                 "--resamples", "50", "--out", str(out), "--quiet"])
    assert code == 0
    humans = [item.human["label"] for item in load_faireval().items[:20]]
    accuracy = humans.count("1") / 20
    table = (out / "table.txt").read_text().splitlines()
    assert table[0] == "faireval: agreement with the human verdict"
    assert table[3].split() == ["ChatGPT(MA)", f"{100 * accuracy:.1f}", "0.000", "20", "0"]
    assert (out / "confusion_ChatGPT_MA.png").read_bytes()[:8] == PNG
    assert "ChatGPT(MA)" in capsys.readouterr().out


def write_run(run_dir: Path, aspect: str, scores: list[float], protocol: str = "unieval") -> None:
    items = load_topical_chat(aspect=aspect).items
    run_dir.mkdir(parents=True)
    (run_dir / "manifest.json").write_text(json.dumps({"protocol": protocol}))
    with (run_dir / "results.jsonl").open("w") as handle:
        for item, score in zip(items, scores, strict=False):
            handle.write(json.dumps({"id": item.id, "status": "ok", "task": "score", "dataset": "topical-chat",
                                     "aspect": aspect, "group": item.group, "human": item.human,
                                     "verdict": {"kind": "score", "method": "mean", "score": score}}) + "\n")


def unieval_scores(aspect: str) -> list[float]:
    rows = json.loads((Path(__file__).parent / "data" / "unieval_predictions" / "topical_chat_result.json")
                      .read_text())
    return [row["predict_scores"][aspect] for row in rows]


def test_bench_from_finished_runs_per_context_and_metaeval_command(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for aspect in ("naturalness", "groundedness"):
        write_run(tmp_path / "unieval" / aspect, aspect, unieval_scores(aspect))
        flat = [float(round(i.human[aspect])) for i in load_topical_chat(aspect=aspect).items]
        write_run(tmp_path / "rounded" / aspect, aspect, flat, protocol="rounded-human")
    out = tmp_path / "bench"
    code = main(["bench", "--dataset", "topical-chat", "--runs", f"UniEval={tmp_path / 'unieval'}",
                 "--runs", f"Rounded={tmp_path / 'rounded'}", "--level", "grouped", "--resamples", "100",
                 "--compare", "UniEval,Rounded", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    # paired tests: rounded human scores beat UniEval on every aspect, and the tests say so
    compare = printed[printed.index("Paired tests: UniEval vs Rounded"):].splitlines()
    naturalness = next(line.split() for line in compare if line.startswith("naturalness"))
    assert naturalness[1] == "ρ" and float(naturalness[2]) < 0
    assert float(naturalness[5]) < 0.05 and float(naturalness[6]) < 0.05  # bootstrap, permutation p
    assert (out / "compare_1_UniEval_vs_Rounded.csv").read_text().startswith("Aspect,Stat,A - B")
    text = (out / "table.txt").read_text()
    assert "per-context (averaged over contexts)" in text.splitlines()[0]
    assert text.splitlines()[2].split() == ["Method", "r", "ρ", "r", "ρ", "r", "ρ"]
    uni = metaeval(tmp_path / "unieval", level="grouped", resamples=0)
    row = next(line for line in text.splitlines() if line.startswith("UniEval"))
    assert row.split()[1] == f"{uni.aspects['naturalness'].value('pearson'):.3f}"
    # groundedness: contexts whose human scores are all equal are skipped, and the table says how many
    skipped = uni.aspects["groundedness"].correlation.skipped
    assert skipped > 0 and f"UniEval/groundedness: {skipped}" in text
    assert (out / "aspects_spearman.png").read_bytes()[:8] == PNG

    # the metaeval command on one finished run: pooled UniEval numbers (README table, 3 decimals)
    code = main(["metaeval", str(tmp_path / "unieval"), "--resamples", "0"])
    printed = capsys.readouterr().out
    assert code == 0
    assert printed.splitlines()[4].split()[:5] == ["unieval", "0.514", "0.374", "0.575", "0.452"]


def test_bench_rejects_what_it_cannot_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--dataset", "topical-chat", "--out", str(tmp_path)]) == 2
    assert "at least one --method" in capsys.readouterr().err
    assert main(["bench", "--dataset", "topical-chat", "--method", "x=--protocol nosuch",
                 "--out", str(tmp_path)]) == 2
    assert "--method x" in capsys.readouterr().err
    assert main(["metaeval", str(tmp_path / "empty")]) == 2
    assert "no results.jsonl" in capsys.readouterr().err
    write_run(tmp_path / "one", "coherence", unieval_scores("coherence"))
    assert main(["metaeval", str(tmp_path / "one"), "--resamples", "0", "--compare", "unieval,other"]) == 2
    assert "give two method names out of unieval" in capsys.readouterr().err
    assert main(["metaeval", str(tmp_path / "one"), "--resamples", "0", "--stats", "spearman,rho"]) == 2
    assert "--stats: unknown rho" in capsys.readouterr().err
    assert main(["metaeval", str(tmp_path / "one"), "--resamples", "0", "--stats", "pearson"]) == 0
    assert capsys.readouterr().out.splitlines()[2].split() == ["Method", "r", "r"]


def test_plots_need_what_they_draw(tmp_path: Path) -> None:
    from jurygraph.measuring.metaeval import evaluate_records
    from jurygraph.measuring.plots import plot_confusion, plot_score_distribution

    write_run(tmp_path / "run", "coherence", unieval_scores("coherence"))
    scored = metaeval(tmp_path / "run", resamples=0)
    with pytest.raises(ValueError, match="no pairwise or choice verdicts"):
        plot_confusion(scored, tmp_path / "c.png")
    path = plot_score_distribution(scored, tmp_path / "deep" / "d.png", scale=(1, 3))
    assert path.read_bytes()[:8] == PNG
    pairwise = evaluate_records([{"id": "q", "task": "pairwise", "human": {"label": "tie"},
                                  "verdict": {"label": "tie"}}], "one", resamples=0)
    assert plot_confusion(pairwise, tmp_path / "c.png").read_bytes()[:8] == PNG
