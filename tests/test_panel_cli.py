"""`jurygraph metaeval --json` on real run directories: panels of scripted judges (jurygraph.testing.panel_judges)
judged FairEval through ``jurygraph eval`` against the local fake server, in both answer orders. What each judge
does is known, so every figure of the panel diagnostics is computed here from the scripts and the human labels."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from jurygraph.cli.app import main
from jurygraph.running.datasets import load_dataset
from jurygraph.testing.fake_server import FakeOpenAIServer
from jurygraph.testing.panel_judges import coin, respond

LIMIT = 24
ORD = {"1": 1.0, "tie": 0.0, "2": -1.0}
SCORES = {"1": (8.0, 4.0), "2": (4.0, 8.0), "tie": (6.0, 6.0)}
# persona -> (model, its label for a question in the original order, given the human label)
ENSEMBLE = {
    "General Public": ("gpt-4o-mini", lambda q, h: h),  # the oracle
    "Critic": ("coin", lambda q, h: coin(q)),
    "News Author": ("coin-twin", lambda q, h: coin(q)),  # copies the coin
    "Psychologist": ("llama3-8b", lambda q, h: "2"),  # always vicuna
    "Scientist": ("first", lambda q, h: "tie"),  # the first answer shown: 8-4 one way, 4-8 the other, a tie
}


def models(panel: dict) -> list[str]:
    return ["--model", "coin", *(arg for persona, (model, _) in panel.items()
                                 for arg in ("--models", f"{persona}=openai:{model}"))]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("panel")
    with FakeOpenAIServer(respond) as server:
        common = ["--base-url", server.base_url, "--dataset", "faireval", "--limit", str(LIMIT), "--quiet"]
        assert main(["eval", "--protocol", "ensemble", "--personas", ",".join(ENSEMBLE), *models(ENSEMBLE),
                     *common, "--out", str(root / "ensemble")]) == 0
        conformist = {"General Public": ("gpt-4o-mini", None), "Critic": ("coin", None),
                      "Scientist": ("follower", None)}
        assert main(["eval", "--protocol", "chateval", "--personas", ",".join(conformist), "--turns", "3",
                     "--stop-when", "consensus", *models(conformist), *common, "--out", str(root / "consensus")]) == 0
    return {"ensemble": root / "ensemble", "consensus": root / "consensus"}


def items() -> list[tuple[str, str]]:
    return [(item.question or "", (item.human or {})["label"]) for item in load_dataset("faireval").items[:LIMIT]]


def kappa(pred: list[str], gold: list[str]) -> float:
    n = len(gold)
    p_o = sum(p == g for p, g in zip(pred, gold, strict=True)) / n
    p_e = sum(pred.count(c) / n * gold.count(c) / n for c in ORD)
    return (p_o - p_e) / (1 - p_e)


def test_metaeval_json_of_an_ensemble_of_scripted_judges(runs: dict[str, Path],
                                                          capsys: pytest.CaptureFixture) -> None:
    capsys.readouterr()
    assert main(["metaeval", str(runs["ensemble"]), "--json", "--resamples", "200"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    [panel] = data["panels"]
    assert panel["target"] == "pairwise" and panel["statistic"] == "accuracy"
    questions = items()
    gold = [h for _, h in questions]
    labels = {persona: [script(q, h) for q, h in questions] for persona, (_, script) in ENSEMBLE.items()}

    members = {m["name"]: m for m in panel["members"]}
    assert set(members) == set(ENSEMBLE)
    for persona, (model, _) in ENSEMBLE.items():
        found = members[persona]
        assert found["model"].startswith(f"openai:{model}@http://127.0.0.1:") and found["n"] == LIMIT
        assert found["accuracy"] == pytest.approx(np.mean([p == g for p, g in zip(labels[persona], gold,
                                                                                  strict=True)]))
        if len(set(labels[persona])) > 1:
            assert found["kappa"] == pytest.approx(kappa(labels[persona], gold))
    assert members["General Public"]["accuracy"] == 1.0

    # the verdict: each assistant's mean score over the five judges
    verdict = []
    for k in range(LIMIT):
        one = np.mean([SCORES[labels[p][k]][0] for p in ENSEMBLE])
        two = np.mean([SCORES[labels[p][k]][1] for p in ENSEMBLE])
        verdict.append("1" if one > two else "2" if two > one else "tie")
    accuracy = float(np.mean([v == g for v, g in zip(verdict, gold, strict=True)]))
    assert panel["panel"]["accuracy"] == pytest.approx(accuracy)
    best = panel["panel_vs_best"]
    assert best["best"] == "General Public" and best["difference"] == pytest.approx(accuracy - 1.0)
    assert best["ci"][0] <= best["difference"] <= best["ci"][1]

    # errors: the oracle never errs (left out); the twin's errors are the coin's
    errors = panel["error_correlation"]
    counted = [p for p in ENSEMBLE if p != "General Public"]
    assert sorted(errors["counted"]) == sorted(counted) and errors["items"] == LIMIT
    signed = np.array([[ORD[p] - ORD[g] for p, g in zip(labels[name], gold, strict=True)] for name in counted])
    expected = np.corrcoef(signed)
    index = {name: errors["members"].index(name) for name in ENSEMBLE}
    for a, row in zip(counted, expected, strict=True):
        for b, value in zip(counted, row, strict=True):
            assert errors["matrix"][index[a]][index[b]] == pytest.approx(value)
    assert errors["matrix"][index["Critic"]][index["News Author"]] == pytest.approx(1.0)
    # two judges that ignore the answers (always vicuna, always a tie) make the same errors: all -human
    assert errors["matrix"][index["Psychologist"]][index["Scientist"]] == pytest.approx(1.0)
    assert panel["effective_judges"] == pytest.approx(len(counted) ** 2 / float(np.sum(expected ** 2)))
    low, high = panel["effective_judges_ci"]
    assert low <= panel["effective_judges"] <= high

    # each member's position consistency: only the position-biased judge flips, every time
    position = {b["name"]: b for b in panel["position"]}
    assert position["Scientist"]["flip_rate"] == 1.0 and position["Scientist"]["favours"] == "first"
    assert all(position[p]["flips"] == 0 for p in ENSEMBLE if p != "Scientist")
    assert data["position"][0]["pairs"] == LIMIT  # the verdict's, as before

    # same family: the oracle (GPT) judges gpt35, the LLaMA judge judges vicuna and always picks it
    family = {(w["member"], w["system"]): w for w in data["same_family"]}
    assert set(family) == {("General Public", "gpt35"), ("Psychologist", "vicuna")}
    assert family[("Psychologist", "vicuna")]["picks_share"] == 1.0
    assert family[("General Public", "gpt35")]["picks_share"] == pytest.approx(gold.count("1") / LIMIT)
    assert family[("General Public", "gpt35")]["human_share"] == pytest.approx(gold.count("1") / LIMIT)
    assert {row["family"] for row in data["family_rule"]} >= {"GPT (OpenAI)", "LLaMA (Meta) and fine-tunes"}
    assert captured.err.count("jurygraph: warning:") == 2

    # the same as text tables
    assert main(["metaeval", str(runs["ensemble"]), "--resamples", "0"]) == 0
    text = capsys.readouterr().out
    for heading in ("each member's agreement with humans", "error correlation between members",
                    "effective number of independent judges", "each member's position consistency",
                    "Same-family warning", "Family rule used"):
        assert heading in text
    assert main(["metaeval", str(runs["ensemble"]), "--resamples", "0", "--no-panel", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["panels"] == []


def test_conformity_of_a_judge_that_follows_the_others(runs: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    capsys.readouterr()
    assert main(["metaeval", str(runs["consensus"]), "--json", "--resamples", "0"]) == 0
    [panel] = json.loads(capsys.readouterr().out)["panels"]
    moves = {m["member"]: m for m in panel["conformity"]}
    # the follower comes round to the oracle and the coin when they agree (the coin right), if it was not
    # already there; in each of the two answer orders
    expected = 2 * sum(coin(q) == h and coin(q, "follower") != h for q, h in items())
    assert expected > 0
    follower = moves["Scientist"]
    assert (follower["moves"], follower["toward_others"], follower["toward_human"]) == (expected, expected, expected)
    assert follower["away_from_human"] == 0
    assert moves["General Public"]["moves"] == moves["Critic"]["moves"] == 0
    assert moves["all"]["moves"] == expected and 0 < moves["all"]["conformity"] < 1
