"""`jurygraph rank`: Bradley–Terry strengths recovered from a synthetic tournament of known strengths, wins that do
not survive the answer swap counted as ties, and the command on real runs (``jurygraph eval`` against the local
fake server) of FairEval and of a JSONL dataset naming four systems through ``--map``."""

from __future__ import annotations

import json
import shutil
import zlib
from pathlib import Path

import numpy as np
import pytest
from scipy.special import expit

from jurygraph.cli.app import main
from jurygraph.measuring.ranking import Battle, bradley_terry, collect, elo
from jurygraph.running.datasets import load_dataset
from jurygraph.testing import pairwise_reply
from jurygraph.testing.fake_server import FakeOpenAIServer, prompt_of
from jurygraph.testing.panel_judges import faireval, respond

TRUE = {"alpha": 1.2, "bravo": 0.6, "charlie": 0.0, "delta": -0.5, "echo": -1.3}


def tournament(per_pair: int = 150, seed: int = 5) -> list[Battle]:
    rng = np.random.default_rng(seed)
    names = list(TRUE)
    battles = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            for k in range(per_pair):
                one, two = (a, b) if k % 2 else (b, a)
                won = rng.random() < expit(TRUE[one] - TRUE[two])
                battles.append(Battle(f"{a}-{b}-{k}", one, two, "1" if won else "2"))
    return battles


def test_a_synthetic_tournament_s_order_and_strengths_are_recovered_with_their_cis() -> None:
    battles = tournament()
    ranking = bradley_terry(battles, resamples=300, seed=1)
    assert [s.name for s in ranking.standings] == list(TRUE)  # strongest first
    truth = np.array(list(TRUE.values()))
    truth -= truth.mean()  # strengths are centred
    for standing, expected in zip(ranking.standings, truth, strict=True):
        assert standing.strength == pytest.approx(expected, abs=0.2)
        assert standing.interval is not None and standing.interval.low < expected < standing.interval.high
        assert standing.interval.high - standing.interval.low < 0.6
        assert standing.wins + standing.losses == 4 * 150 and standing.ties == 0
    # the fit is the maximum of the likelihood: each system's expected wins equal its observed wins
    fitted = ranking.strengths()
    for name in TRUE:
        expected_wins = sum(expit(fitted[b.system_1] - fitted[b.system_2]) if b.system_1 == name
                            else expit(fitted[b.system_2] - fitted[b.system_1])
                            for b in battles if name in (b.system_1, b.system_2))
        observed = next(s.wins for s in ranking.standings if s.name == name)
        assert expected_wins == pytest.approx(observed, abs=0.05)  # the weak prior moves it by a hair


def test_a_tie_counts_half_a_win_each_way() -> None:
    # A: 20 wins and 20 ties against B, i.e. 30 to 10: P(A beats B) = 3/4, so s_A - s_B = log 3
    battles = [Battle(str(k), "A", "B", "1") for k in range(20)] + [Battle(f"t{k}", "B", "A", "tie") for k in range(20)]
    ranking = bradley_terry(battles, resamples=0)
    strengths = ranking.strengths()
    assert strengths["A"] - strengths["B"] == pytest.approx(np.log(3), abs=0.005)
    assert [(s.name, s.wins, s.losses, s.ties) for s in ranking.standings] == [("A", 20, 0, 20), ("B", 0, 20, 20)]


def test_elo_follows_chatbot_arena_s_update() -> None:
    ratings = elo([Battle("1", "A", "B", "1")])
    assert ratings == {"A": pytest.approx(1002.0), "B": pytest.approx(998.0)}  # K = 4, even odds
    assert elo([Battle("1", "A", "B", "tie")]) == {"A": 1000.0, "B": 1000.0}


def calibrated(item: str, original: str, swapped: str) -> dict:
    """A calibrated record whose two orders' verdicts (both stated for the original order) are given."""
    return {"id": item, "task": "pairwise", "human": {"label": "1"},
            "verdict": {"kind": "pairwise", "label": original, "missing": False,
                        "detail": {"calibration": "bpc", "runs": {"original_order": {"label": original},
                                                                  "swapped_order": {"label": swapped}}}}}


def test_wins_that_do_not_survive_the_swap_become_ties() -> None:
    records = [calibrated("a", "1", "1"), calibrated("b", "1", "2"), calibrated("c", "2", "tie"),
               calibrated("d", "tie", "tie")]
    systems = {k: ("x", "y") for k in "abcd"}
    found = collect(["run"], [records], [None], [systems])
    assert [(b.outcome, b.both_orders, b.swap_inconsistent) for b in found.battles] == [
        ("1", True, False), ("tie", True, True), ("tie", True, True), ("tie", True, False)]
    assert found.swap_inconsistent == 2
    # a run and its --reverse run: the reversed run's verdicts are mapped back and paired the same way
    forward = [{"id": k, "task": "pairwise", "verdict": {"label": label}} for k, label in zip("ab", "11", strict=True)]
    backward = [{"id": k, "task": "pairwise", "verdict": {"label": label}} for k, label in zip("ab", "21", strict=True)]
    paired = collect(["fwd", "rev"], [forward, backward], [None, {"cli": {"reverse": True}}], [systems, systems])
    assert [(b.outcome, b.swap_inconsistent) for b in paired.battles] == [("1", False), ("tie", True)]


def mixed_judge(request: dict, index: int) -> str:
    """On a quarter of the FairEval questions the answer shown first, on the rest vicuna's answer."""
    question = next(q for q in faireval() if q and q in prompt_of(request))
    model = "first" if zlib.crc32(question.encode()) % 4 == 0 else "llama3-8b"
    return respond({**request, "model": model}, index)


@pytest.fixture(scope="module")
def faireval_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("rank")
    base = ["eval", "--protocol", "single", "--model", "judge", "--dataset", "faireval", "--limit", "24", "--quiet"]
    with FakeOpenAIServer(mixed_judge) as server:
        for name, extra in (("bpc", ["--calibrate", "bpc"]), ("fwd", ["--no-calibrate"]),
                            ("rev", ["--no-calibrate", "--reverse"])):
            assert main([*base, "--base-url", server.base_url, "--out", str(root / name), *extra]) == 0
    return {name: root / name for name in ("bpc", "fwd", "rev")}


def test_rank_of_a_calibrated_faireval_run(faireval_runs: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    assert main(["rank", str(faireval_runs["bpc"]), "--json", "--resamples", "200"]) == 0
    data = json.loads(capsys.readouterr().out)
    items = load_dataset("faireval").items[:24]
    biased = sum(zlib.crc32((i.question or "").encode()) % 4 == 0 for i in items)
    assert 0 < biased < 24
    assert [s["name"] for s in data["systems"]] == ["vicuna", "gpt35"]
    vicuna, gpt35 = data["systems"]
    assert (vicuna["wins"], vicuna["losses"], vicuna["ties"]) == (24 - biased, 0, biased)
    assert (gpt35["wins"], gpt35["losses"], gpt35["ties"]) == (0, 24 - biased, biased)
    assert data["battles"] == data["both_orders"] == 24 and data["swap_inconsistent"] == biased
    assert vicuna["ci"][0] <= vicuna["strength"] <= vicuna["ci"][1]
    # earned: a win 1, a tie 1/2 each way; with two systems the strengths differ by the log of the ratio
    assert vicuna["strength"] - gpt35["strength"] == pytest.approx(np.log((24 - biased / 2) / (biased / 2)), abs=0.02)
    # the human ranking from the FairEval labels of the same questions, and Kendall tau between the two
    human = {"1": 0.0, "2": 0.0}
    for item in items:
        label = (item.human or {})["label"]
        for side in ("1", "2"):
            human[side] += 1.0 if label == side else 0.5 if label == "tie" else 0.0
    strengths = {s["name"]: s["strength"] for s in data["human"]["systems"]}
    assert strengths["gpt35"] - strengths["vicuna"] == pytest.approx(np.log(human["1"] / human["2"]), abs=0.02)
    expected_tau = 1.0 if (human["2"] > human["1"]) else -1.0
    assert data["human"]["kendall_tau"] == pytest.approx(expected_tau)


def test_a_run_and_its_reverse_run_rank_as_the_calibrated_run(faireval_runs: dict[str, Path],
                                                                capsys: pytest.CaptureFixture) -> None:
    assert main(["rank", str(faireval_runs["bpc"]), "--json", "--resamples", "0"]) == 0
    calibrated_data = json.loads(capsys.readouterr().out)
    assert main(["rank", str(faireval_runs["fwd"]), str(faireval_runs["rev"]), "--json", "--resamples", "0",
                 "--elo"]) == 0
    paired = json.loads(capsys.readouterr().out)
    keys = ("name", "wins", "losses", "ties")
    assert [{k: s[k] for k in keys} for s in paired["systems"]] == \
        [{k: s[k] for k in keys} for s in calibrated_data["systems"]]
    assert paired["swap_inconsistent"] == calibrated_data["swap_inconsistent"]
    assert [e["name"] for e in paired["elo"]] == ["vicuna", "gpt35"]
    # one order only: the position-biased wins are not caught, and the table says so
    assert main(["rank", str(faireval_runs["fwd"]), "--resamples", "0"]) == 0
    out = capsys.readouterr().out
    assert "judged in both answer orders: 0" in out and "in one order only: 24" in out


STRONGER = ["ares", "boreas", "castor", "doris"]  # the true order


def write_tournament(path: Path) -> list[tuple[str, str, str]]:
    """Each pair of systems 8 times, each way round 4 times; the human label names the stronger system, the
    judge too except in round 3 (an upset, so that every system is linked both ways by wins). Returns
    (system 1, system 2, the judge's winner) per item."""
    rows, expected = [], []
    for i, strong in enumerate(STRONGER):
        for weak in STRONGER[i + 1:]:
            for k in range(8):
                one, two = (strong, weak) if k % 2 else (weak, strong)
                rows.append({"id": f"{strong}-{weak}-{k}", "prompt": f"Round {k}: who is better, {one} or {two}?",
                             "answer_a": f"I am {one}.", "answer_b": f"I am {two}.", "model_a": one, "model_b": two,
                             "winner": "1" if one == strong else "2"})
                expected.append((one, two, weak if k == 3 else strong))
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return expected


def tournament_judge(request: dict, index: int) -> str:
    """The stronger system's answer (the weaker's in round 3), whichever order the answers are shown in."""
    prompt = prompt_of(request)
    shown = [part.split(".")[0] for part in prompt.split("I am ")[1:3]]
    strong, weak = sorted(shown, key=STRONGER.index)
    winner = weak if "Round 3:" in prompt else strong
    return pairwise_reply(8, 4) if shown[0] == winner else pairwise_reply(4, 8)


def test_rank_of_four_systems_named_through_map(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    data_file = tmp_path / "battles.jsonl"
    expected = write_tournament(data_file)
    out = tmp_path / "run"
    with FakeOpenAIServer(tournament_judge) as server:
        assert main(["eval", "--protocol", "single", "--model", "judge", "--base-url", server.base_url,
                     "--dataset", str(data_file), "--task", "pairwise", "--map", "question=prompt",
                     "--map", "response_1=answer_a", "--map", "response_2=answer_b", "--map", "meta.model_1=model_a",
                     "--map", "meta.model_2=model_b", "--map", "human.label=winner", "--out", str(out),
                     "--quiet"]) == 0
    capsys.readouterr()
    assert main(["rank", str(out), "--json", "--resamples", "200"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in data["systems"]] == STRONGER
    for standing in data["systems"]:
        wins = sum(w == standing["name"] for _, _, w in expected)
        battles = sum(standing["name"] in (one, two) for one, two, _ in expected)
        assert (standing["wins"], standing["losses"], standing["ties"]) == (wins, battles - wins, 0)
        assert standing["ci"][0] <= standing["strength"] <= standing["ci"][1]
    # the single agent judges both orders by default (BPC), and this judge is consistent
    assert data["battles"] == data["both_orders"] == 48 and data["swap_inconsistent"] == 0
    assert [s["name"] for s in data["human"]["systems"]] == STRONGER and data["human"]["kendall_tau"] == 1.0
    assert data["separated"] == []  # the upsets link every system both ways: finite strengths
    assert data["human"]["systems"][0]["wins"] == 24  # humans never saw an upset


def test_rank_says_what_it_needs(faireval_runs: dict[str, Path], tmp_path: Path,
                                 capsys: pytest.CaptureFixture) -> None:
    assert main(["rank", str(tmp_path / "nowhere")]) == 2
    assert "no results.jsonl" in capsys.readouterr().err
    bare = tmp_path / "bare"
    shutil.copytree(faireval_runs["fwd"], bare)
    # items that name no systems: results lines without them (as before they were kept), no checkpoints to read
    (bare / "checkpoints.sqlite").unlink()
    lines = [json.loads(line) for line in (bare / "results.jsonl").read_text().splitlines()]
    (bare / "results.jsonl").write_text("".join(json.dumps({k: v for k, v in r.items() if k != "systems"}) + "\n"
                                                for r in lines))
    assert main(["rank", str(bare)]) == 2
    err = capsys.readouterr().err
    assert "names its two systems" in err and "--map meta.model_1=COLUMN" in err and err.count("\n") == 1


def test_a_run_ranks_from_its_results_alone(openai_server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Each results line keeps the two systems (``systems``), so a run whose checkpoints are gone (or live in
    PostgreSQL) still ranks, with the same battles as when they are read from the checkpoints."""
    from jurygraph.running.rundir import read_results

    server = openai_server(lambda request, i: "Evidence: x.\nThe score of Assistant 1: 7\nThe score of Assistant 2: 5")
    out = tmp_path / "run"
    assert main(["eval", "--protocol", "single", "--dataset", "faireval", "--limit", "4", "--no-calibrate",
                 "--model", "judge", "--base-url", server.base_url, "--out", str(out), "--quiet"]) == 0
    assert [r["systems"] for r in read_results(out)] == [["gpt35", "vicuna"]] * 4
    capsys.readouterr()
    assert main(["rank", str(out), "--json", "--resamples", "0"]) == 0
    with_checkpoints = json.loads(capsys.readouterr().out)
    (out / "checkpoints.sqlite").unlink()
    assert main(["rank", str(out), "--json", "--resamples", "0"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert alone == with_checkpoints
    assert [(s["name"], s["wins"], s["losses"]) for s in alone["systems"]] == [("gpt35", 4, 0), ("vicuna", 0, 4)]
