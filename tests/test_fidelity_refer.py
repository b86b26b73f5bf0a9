"""Fidelity of ReFeR: the generation parameters each role sends through the local server (Appendix C,
fixture ``data/fidelity/refer/appendix_c.json``) for NLG, multimodal and reasoning items, Turbo and Lite
(and Lite from Turbo's samples, jurygraph's option), and the area chair's aggregation on scripted replies."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from statistics import fmean
from typing import Any

import pytest

from jurygraph import EvalItem, JuryContext, ModelSpec, create_refer, verdict_of
from jurygraph.cli import main
from jurygraph.running.datasets import load_dataset
from jurygraph.testing.fake_server import Faults, prompt_of

APPENDIX_C = json.loads((Path(__file__).parent / "data" / "fidelity" / "refer" / "appendix_c.json")
                        .read_text(encoding="utf-8"))
EXPECTED = APPENDIX_C["expected"]
RATINGS = [3, 2, 3, 1, 2, 3, 3, 2, 1, 3, 2, 2, 3, 3, 1, 2, 3, 2, 3, 3]
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC")


def responder(request: dict[str, Any], i: int) -> str:
    """Peers rate 2; the area chair's i-th sample rates RATINGS[i] (scores)."""
    if request["model"].startswith("peer"):
        return "Analysis: the peer's view.\nRating: 2"
    return f"Analysis: sample {i}.\nRating: {RATINGS[i]}"


def reasoner(request: dict[str, Any], i: int) -> str:
    """Peers answer B; the area chair's i-th sample answers C when i is a multiple of 3, else B."""
    if request["model"].startswith("peer"):
        return "Analysis: the peer's view.\nAnswer: B"
    return f"Analysis: sample {i}.\nAnswer: {'B' if i % 3 else 'C'}"


def context(url: str) -> JuryContext:
    models: dict[str, Any] = {f"peer_{k}": ModelSpec.parse(f"openai:peer{k}@{url}") for k in (1, 2, 3)}
    return JuryContext(models={**models, "area_chair": ModelSpec.parse(f"openai:chair@{url}")})


def split(server: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    peers = [r for r in server.requests if r["model"].startswith("peer")]
    (chair,) = [r for r in server.requests if r["model"] == "chair"]
    return peers, chair


def sent(request: dict[str, Any]) -> dict[str, Any]:
    """The generation parameters a request carried (max_tokens travels as max_completion_tokens)."""
    keys = ("temperature", "top_p", "max_completion_tokens", "n")
    return {key: request[key] for key in keys if key in request}


def peer_params(setting: str) -> dict[str, Any]:
    peer = EXPECTED[setting]["peer"]
    out = {"max_completion_tokens": peer["max_tokens"]}
    if isinstance(peer["temperature"], int | float):  # else "provider default (not sent)"
        out.update(temperature=peer["temperature"], top_p=peer["top_p"])
    return out


def chair_params(setting: str, n: int | None) -> dict[str, Any]:
    chair = EXPECTED[setting]["area_chair"]
    out: dict[str, Any] = {"temperature": chair["temperature"], "top_p": chair["top_p"]}
    if isinstance(chair["max_tokens"], int):  # else "no limit (not sent)"
        out["max_completion_tokens"] = chair["max_tokens"]
    if n is not None:
        out["n"] = n
    return out


def test_the_fixture_is_appendix_c() -> None:
    quote = APPENDIX_C["quote"]
    for phrase in ("temperature=1, max_tokens=256, top_p=1", "default hyperparameters except for the max_tokens=128",
                   "from 128 to 192 tokens", "we don’t set any limit on the max_tokens",
                   "increase max_tokens to 256 and set the hyper-parameters temperature=1, top_p=1"):
        assert phrase in quote


def test_turbo_on_nlg_sends_appendix_c_s_parameters_and_averages_the_20_ratings(openai_server) -> None:
    item = load_dataset("topical-chat", aspect="engagingness").items[0]
    server = openai_server(responder)
    verdict = verdict_of(create_refer().compile().invoke({"item": item}, context=context(server.base_url)))
    peers, chair = split(server)
    assert [sent(p) for p in peers] == [peer_params("nlg")] * 3  # no temperature: the provider's default
    assert sent(chair) == chair_params("nlg", EXPECTED["nlg"]["area_chair"]["n_turbo"])
    # the area chair's prompt is Appendix N.1's, with the three peers' scores
    assert prompt_of(chair).startswith("Navigate through a simulated conversation between two individuals")
    assert "First Assistant’s Evaluation: 2\n\nSecond Assistant’s Evaluation: 2\n\nThird Assistant’s Evaluation: 2" \
        in prompt_of(chair)
    assert verdict is not None and verdict.score == pytest.approx(fmean(RATINGS))


def test_lite_on_nlg_is_its_own_n_1_request_and_from_turbo_the_first_sample(openai_server) -> None:
    item = load_dataset("topical-chat", aspect="engagingness").items[0]
    server = openai_server(responder)
    verdict = verdict_of(create_refer(variant="lite").compile().invoke({"item": item},
                                                                        context=context(server.base_url)))
    _, chair = split(server)
    assert sent(chair) == chair_params("nlg", None)  # n = 1: not sent
    assert verdict is not None and verdict.score == RATINGS[0] and verdict.method == "area chair"
    released = openai_server(responder)
    verdict = verdict_of(create_refer(variant="lite", lite_from_turbo=True).compile().invoke(
        {"item": item}, context=context(released.base_url)))
    _, chair = split(released)
    assert sent(chair) == chair_params("nlg", 20)  # Turbo's request...
    assert verdict is not None and verdict.score == RATINGS[0] and verdict.detail["first_of"] == 20  # ...its first
    with pytest.raises(ValueError, match="lite_from_turbo"):
        create_refer(variant="turbo", lite_from_turbo=True)


def test_multimodal_peers_get_192_tokens(openai_server) -> None:
    item = EvalItem(id="icqd-1", task="score", dataset="icqd", aspect="caption_quality", response="A red square.",
                    scale={"low": 0, "high": 100}, image=PNG)
    server = openai_server(responder)
    create_refer(variant="lite").compile().invoke({"item": item}, context=context(server.base_url))
    peers, chair = split(server)
    assert [sent(p) for p in peers] == [peer_params("multimodal")] * 3
    assert sent(chair) == chair_params("multimodal", None)


def test_reasoning_peers_sample_at_1_and_the_area_chair_has_no_token_limit(openai_server) -> None:
    item = EvalItem(id="aqua-1", task="choice", dataset="aqua", question="What is 2 + 2?",
                    options={"A": "3", "B": "4", "C": "5"})
    server = openai_server(reasoner)
    verdict = verdict_of(create_refer(samples=6).compile().invoke({"item": item}, context=context(server.base_url)))
    peers, chair = split(server)
    assert [sent(p) for p in peers] == [peer_params("reasoning")] * 3
    assert sent(chair) == chair_params("reasoning", 6)
    # the majority of the samples' answers: B, B, C... -> i % 3 != 0 gives B four times of six
    assert verdict is not None and verdict.answer == "B" and verdict.votes == {"B": 4, "C": 2}


def test_cli_records_the_lite_choice_in_the_manifest(openai_server, tmp_path: Path) -> None:
    server = openai_server(responder)
    url = server.base_url
    args = ["eval", "--protocol", "refer", "--peers", f"openai:peer1@{url},openai:peer2@{url},openai:peer3@{url}",
            "--area-chair", f"openai:chair@{url}", "--dataset", "topical-chat", "--aspect", "engagingness",
            "--limit", "1", "--quiet", "--no-cache"]
    assert main([*args, "--variant", "lite", "--lite-from-turbo", "--out", str(tmp_path / "run")]) == 0
    assert [r.get("n", 1) for r in server.requests if r["model"] == "chair"] == [20]
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["parameters"]["lite_from_turbo"] is True and manifest["parameters"]["variant"] == "lite"
    assert main([*args, "--variant", "turbo", "--lite-from-turbo", "--out", str(tmp_path / "bad")]) == 2


def test_a_failed_peer_is_a_blank_evaluation_and_the_count_of_models_is_kept(openai_server, tmp_path: Path) -> None:
    """Issue 29, fidelity item 5: the released script passes " " for a failed peer and keeps the count; jurygraph
    left the peer out, so the area chair's prompt said "two" models. The option keeps that behaviour."""
    item = load_dataset("topical-chat", aspect="engagingness").items[0]
    healthy = openai_server(responder)
    create_refer(variant="lite").compile().invoke({"item": item}, context=context(healthy.base_url))
    _, reference = split(healthy)
    full = prompt_of(reference)
    assert "initial evaluations from three large language models" in full
    assert "First Assistant’s Evaluation: 2\n\nSecond Assistant’s Evaluation: 2\n\nThird Assistant’s Evaluation: 2" \
        in full

    server = openai_server(responder)
    broken = openai_server(responder, faults=Faults(rate_500=1.0))
    url = server.base_url
    args = ["eval", "--protocol", "refer", "--variant", "lite", "--area-chair", f"openai:chair@{url}",
            "--peers", f"openai:peer1@{url},openai:peer2@{broken.base_url},openai:peer3@{url}",
            "--dataset", "topical-chat", "--aspect", "engagingness", "--limit", "1", "--quiet", "--no-cache",
            "--max-retries", "0"]
    assert main([*args, "--out", str(tmp_path / "blank")]) == 0
    _, chair = split(server)
    # the same request as with three healthy peers, the second evaluation a blank
    assert prompt_of(chair) == full.replace("Second Assistant’s Evaluation: 2", "Second Assistant’s Evaluation:  ")
    assert sent(chair) == sent(reference)
    (record,) = [json.loads(line) for line in (tmp_path / "blank" / "results.jsonl").read_text().splitlines()]
    assert record["verdict"]["detail"]["missing_peers"].keys() == {"peer_2"}
    manifest = json.loads((tmp_path / "blank" / "manifest.json").read_text())
    assert "missing_peers" not in manifest["parameters"]

    server.requests.clear()
    assert main([*args, "--missing-peers", "omit", "--out", str(tmp_path / "omit")]) == 0
    _, chair = split(server)
    omitted = full.replace("three large language models", "two large language models").replace(
        "Second Assistant’s Evaluation: 2\n\nThird Assistant’s Evaluation: 2", "Second Assistant’s Evaluation: 2")
    assert prompt_of(chair) == omitted
    manifest = json.loads((tmp_path / "omit" / "manifest.json").read_text())
    assert manifest["parameters"]["missing_peers"] == "omit"
