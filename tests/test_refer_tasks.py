"""ReFeR beyond NLG scores: reasoning items (Appendix N.3) and image items (Appendix N.2), end to end."""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jurygraph import EvalItem, JuryContext, ModelSpec, create_refer, judgments_of, verdict_of
from jurygraph.judging.reasoning import agreement, normalize_answer, options_from_question
from jurygraph.measuring.reasoning import reasoning_report
from jurygraph.nodes.refer import Peer, make_peer_node, template_for
from jurygraph.testing import FakeJudge
from jurygraph.testing.fake_server import prompt_of


def fixed(reply: str, name: str, native_n: bool = False) -> FakeJudge:
    return FakeJudge(respond=lambda p, m: reply, model_name=name, jurygraph_native_n=native_n)


def scripted(replies: list[str], name: str) -> FakeJudge:
    it: Iterator[str] = iter(replies)
    return FakeJudge(respond=lambda p, m: next(it), model_name=name, jurygraph_native_n=True)


# --- reasoning --------------------------------------------------------------------------------------

AQUA = EvalItem(id="aqua-7", task="choice", dataset="aqua",
                question="A train covers 63 km in 3 hours. How far does it go in 1 hour at the same speed?",
                options={"A": "20 km", "B": "21.5 km", "C": "21 km", "D": "22 km", "E": "23 km"},
                human={"answer": "C"})


def test_aqua_item_end_to_end_majority_agreement_and_accuracy() -> None:
    peers = {"peer_1": fixed("Analysis: 63 / 3 = 21.\nAnswer: C", "p1"),
             "peer_2": fixed("Analysis: speed is 21 km/h.\nAnswer: (C)", "p2"),
             "peer_3": fixed("Analysis: about 21.5.\nAnswer: B", "p3")}
    chair = scripted(["Analysis: 21.\nAnswer: C", "Analysis: 21.\nAnswer: C", "Analysis: hmm\nAnswer: B",
                      "Analysis: 63/3\nAnswer: C", "I am not sure."], "chair")
    out = create_refer(samples=5).compile().invoke({"item": AQUA}, context=JuryContext(models={**peers,
                                                                                             "area_chair": chair}))
    peer_prompt = peers["peer_1"].calls[0].prompt
    assert peer_prompt.startswith("You will be provided with a problem that requires logical reasoning, "
                                  "mathematical calculation, or both.")
    assert "Provided Options: A) 20 km\nB) 21.5 km\nC) 21 km\nD) 22 km\nE) 23 km" in peer_prompt
    chair_prompt = chair.calls[0].prompt
    assert "you will also receive solutions from three other Language Models (LLMs)." in chair_prompt
    assert "Solutions by Other LLMs:\n\n- LLM 1 Answer: C\n\n- LLM 2 Answer: C\n\n- LLM 3 Answer: B\n\n" \
        "Evaluation Form:" in chair_prompt
    verdict = verdict_of(out)
    assert verdict is not None
    assert verdict.answer == "C" and verdict.votes == {"C": 3, "B": 1}
    assert (verdict.n_judgments, verdict.n_missing) == (4, 1)
    assert verdict.detail["answers"] == ["C", "C", "B", "C", None]
    assert verdict.detail["peer_majority"] == "C"
    assert verdict.detail["peer_agreement"] == pytest.approx(2 / 3)
    assert verdict.detail["agrees_with_peers"] is True and verdict.detail["correct"] is True
    assert verdict.detail["comment"] == "Analysis: 21.\nAnswer: C"

    record = {"verdict": out["verdict"], "judgments": out["judgments"], "human": AQUA.human}
    wrong = {"verdict": {"answer": "B"}, "judgments": {"peer_1": {"answer": "B"}, "peer_2": {"answer": "C"},
                                                       "peer_3": {"answer": "B"}}, "human": {"answer": "C"}}
    report = reasoning_report([record, wrong])
    assert report["items"] == 2 and report["accuracy"] == 0.5
    assert report["peer_accuracy"] == {"peer_1": 0.5, "peer_2": 1.0, "peer_3": 0.0}
    assert report["peer_majority_accuracy"] == 0.5 and report["agrees_with_peer_majority"] == 1.0


def test_gsm8k_numbers_are_read_and_normalised() -> None:
    item = EvalItem(id="gsm-1", task="choice", dataset="gsm8k", question="How much is 12 * 100?",
                    human={"answer": "#### 1,200"})
    peers = {"peer_1": fixed("Analysis: 12*100.\nAnswer: 1,200", "p1"),
             "peer_2": fixed("Analysis: easy.\nAnswer: $1200", "p2"),
             "peer_3": fixed("Analysis: x\nAnswer: 1200.0", "p3")}
    chair = fixed("Analysis: all agree.\nAnswer: 1200", "chair")
    out = create_refer(variant="lite").compile().invoke({"item": item}, context=JuryContext(
        models={**peers, "area_chair": chair}))
    assert chair.calls[0].prompt.startswith("You will be provided with a problem that requires logical reasoning")
    assert "Answers from Other LLMs:\n\n- LLM 1 Answer: 1200\n\n- LLM 2 Answer: 1200\n\n- LLM 3 Answer: 1200" \
        in chair.calls[0].prompt
    verdict = verdict_of(out)
    assert verdict is not None and verdict.answer == "1200"
    assert verdict.detail["correct"] is True and verdict.detail["peer_agreement"] == 1.0


def test_bbh_options_written_in_the_question_are_the_options() -> None:
    question = ("Today is 3/5, and it is Jane's second time in the year 1973 to see a meteor shower. "
                "What is the date a month ago in MM/DD/YYYY?\nOptions:\n(A) 02/05/1973\n(B) 03/08/1983\n(C) 01/02/1973")
    item = EvalItem(id="bbh-1", task="choice", dataset="bbh_du", question=question, human={"answer": "(A)"})
    assert options_from_question(question) == {"A": "02/05/1973", "B": "03/08/1983", "C": "01/02/1973"}
    peers = {f"peer_{k}": fixed(f"Analysis: a month before March 5.\nAnswer: {a}", f"p{k}")
             for k, a in ((1, "(A)"), (2, "A"), (3, "D"))}  # D is not an option: peer 3 is unreadable
    chair = fixed("Analysis: February 5.\nAnswer: A", "chair")
    out = create_refer(variant="lite").compile().invoke({"item": item}, context=JuryContext(
        models={**peers, "area_chair": chair}))
    assert f"Problem Statement: {question}\n\nEvaluation Form:" in peers["peer_1"].calls[0].prompt
    assert "You will also receive the final answers from three other Language Models (LLMs)." in chair.calls[0].prompt
    assert "- LLM 1 answer: A\n\n- LLM 2 answer: A\n\n- LLM 3 answer:  \n\nEvaluation Form:" in chair.calls[0].prompt
    assert judgments_of(out)["peer_3"].missing
    assert verdict_of(out).detail["correct"] is True  # type: ignore[union-attr]


def test_answer_helpers() -> None:
    assert normalize_answer(" (b) ") == "B" and normalize_answer("#### 3,000") == "3000"
    assert normalize_answer("2.50") == "2.5"
    assert agreement(["A", "a", "B"]) == ("A", pytest.approx(2 / 3))
    assert agreement(["A", "B"]) == (None, 0.5)
    assert agreement([]) == (None, None)


# --- images --------------------------------------------------------------------------------------


def tiny_png(width: int = 2, height: int = 2, rgb: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A valid PNG built by hand (no imaging library needed)."""
    rows = b"".join(b"\x00" + bytes(rgb) * width for _ in range(height))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def image_parts(content: Any) -> list[str]:
    return [p["image_url"]["url"] for p in content if isinstance(p, dict) and p.get("type") == "image_url"]


def test_caption_item_peers_and_area_chair_receive_the_image(tmp_path: Path) -> None:
    png = tiny_png()
    path = tmp_path / "red.png"
    path.write_bytes(png)
    item = EvalItem(id="icqd-1", task="score", dataset="icqd", aspect="caption_quality", response="A red square.",
                    scale={"low": 0, "high": 100}, image=str(path), human={"caption_quality": 90})
    peers = {"peer_1": fixed("Analysis: accurate.\nRating: 80", "vision-a"),
             "peer_2": fixed("Analysis: terse.\nCaption_Quality: 70", "vision-b")}
    chair = fixed("Analysis: the caption matches.\nRating: 85", "vision-chair", native_n=True)
    out = create_refer(peers=2, samples=3).compile().invoke({"item": item}, context=JuryContext(
        models={**peers, "area_chair": chair}))
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    for judge in (*peers.values(), chair):
        (call,) = judge.calls
        content = call.messages[-1].content
        assert content[0]["type"] == "text"
        assert image_parts(content) == [url]
    assert peers["peer_1"].calls[0].prompt.startswith("Your task is to carefully evaluate the alignment between an "
                                                      "image and its corresponding caption")
    chair_prompt = chair.calls[0].prompt
    assert "initial evaluations from two large language models" in chair_prompt
    assert "Caption: A red square.\n\nFirst Assistant’s Evaluation: 80\nSecond Assistant’s Evaluation: 70\n\n" \
        in chair_prompt
    assert verdict_of(out).score == 85  # type: ignore[union-attr]
    # the image stays in the histories, so a checkpoint keeps what each agent saw
    assert image_parts(out["histories"]["peer_1"][0].content) == [url]


def test_image_quality_item_through_the_openai_client(openai_server) -> None:
    png = tiny_png(3, 1, (10, 200, 10))
    server = openai_server(lambda request, i: "Analysis: a green strip, as asked.\nRating: 4.5")
    item = EvalItem(id="agiqa-1", task="score", dataset="agiqa", source="a thin green strip",
                    scale={"low": 0, "high": 5}, image=png)  # bytes; no response: the image is what is rated
    url = server.base_url
    context = JuryContext(models={"peer_1": ModelSpec.parse(f"openai:vl-a@{url}"),
                                  "peer_2": ModelSpec.parse(f"openai:vl-b@{url}"),
                                  "area_chair": ModelSpec.parse(f"openai:gpt-4o-mini@{url}")})
    out = create_refer(peers=2, variant="lite").compile().invoke({"item": item}, context=context)
    assert len(server.requests) == 3
    expected = "data:image/png;base64," + base64.b64encode(png).decode()
    for request in server.requests:
        (message,) = request["messages"]
        assert image_parts(message["content"]) == [expected]
    chair = next(r for r in server.requests if r["model"] == "gpt-4o-mini")
    assert "from two assistants" in prompt_of(chair)
    assert "Input Prompt: a thin green strip" in prompt_of(chair)
    assert "First Assistant’s Evaluation: 4.5\n\nSecond Assistant’s Evaluation: 4.5" in prompt_of(chair)
    assert verdict_of(out).score == 4.5  # type: ignore[union-attr]


def test_missing_image_file_is_a_clear_error() -> None:
    item = EvalItem(id="x", task="score", dataset="icqd", response="cap", scale={"low": 0, "high": 100},
                    image="nowhere/missing.png")
    judge = fixed("Rating: 1", "m")
    with pytest.raises(FileNotFoundError, match="item 'x': image file"):
        create_refer(peers=1, variant="lite").compile().invoke({"item": item}, context=JuryContext(default=judge))
    # a bad item is an error of the peer node too, not a peer whose model failed
    with pytest.raises(FileNotFoundError, match="item 'x': image file"):
        make_peer_node(Peer("peer_1"), template_for).invoke({"item": item.model_dump()})
    assert judge.calls == []


def test_cli_reasoning_run_and_report(openai_server, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from jurygraph.cli import main

    def responder(request: dict[str, Any], i: int) -> str:
        hard = "Problem Statement: hard" in prompt_of(request)
        answer = {"p1": "C", "p2": "C", "p3": "B", "chair": "A" if hard else "C"}[request["model"]]
        return f"Analysis: worked it out.\nAnswer: {answer}"

    server = openai_server(responder)
    rows = [{"id": "q1", "dataset": "aqua", "question": "easy", "options": {"A": "1", "B": "2", "C": "3"},
             "correct": "C"},
            {"id": "q2", "dataset": "aqua", "question": "hard", "options": {"A": "1", "B": "2", "C": "3"},
             "correct": "C"}]
    data = tmp_path / "aqua.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    url = server.base_url
    code = main(["eval", "--protocol", "refer", "--peers", f"openai:p1@{url},openai:p2@{url},openai:p3@{url}",
                 "--area-chair", f"openai:chair@{url}", "--samples", "3", "--dataset", str(data), "--task", "choice",
                 "--map", "human.answer=correct", "--out", str(tmp_path / "run"), "--quiet", "--no-cache"])
    assert code == 0
    assert len(server.requests) == 2 * 4
    capsys.readouterr()
    assert main(["reasoning-report", str(tmp_path / "run")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["items"] == 2 and report["accuracy"] == 0.5
    assert report["peer_accuracy"] == {"peer_1": 1.0, "peer_2": 1.0, "peer_3": 0.0}
    assert report["peer_majority_accuracy"] == 1.0 and report["agrees_with_peer_majority"] == 0.5


def test_tied_samples_give_no_answer_rather_than_an_arbitrary_one() -> None:
    peers = {f"peer_{k}": fixed("Analysis: x\nAnswer: C", f"p{k}") for k in (1, 2, 3)}
    chair = scripted(["Answer: A", "Answer: C", "Answer: A", "Answer: C"], "chair")
    out = create_refer(samples=4).compile().invoke({"item": AQUA}, context=JuryContext(
        models={**peers, "area_chair": chair}))
    verdict = verdict_of(out)
    assert verdict is not None and verdict.answer is None and verdict.votes == {"A": 2, "C": 2}
    assert verdict.detail["no_majority"] is True and "correct" not in verdict.detail
    assert judgments_of(out)["area_chair"].missing
    assert "no majority" in (judgments_of(out)["area_chair"].reason or "")


def test_a_score_item_needs_a_response_unless_an_image_is_rated() -> None:
    with pytest.raises(ValueError, match="item 'agiqa-2': a score item needs 'response'"):
        EvalItem(id="agiqa-2", task="score", source="a cat", scale={"low": 0, "high": 5})
    assert EvalItem(id="agiqa-3", task="score", source="a cat", scale={"low": 0, "high": 5}, image=tiny_png()).image
