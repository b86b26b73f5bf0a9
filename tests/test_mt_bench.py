"""MT-Bench's human judgments as items (``tests/data/mt_bench_human``, written in the layout of
``lmsys/mt_bench_human_judgments``): recognised from its fields as JSONL or JSON, one item per (question, pair of
models, turn) with every vote, ties kept as ties, the majority as the label (none for a split vote), turn 1 vs turn 2
conversations; then metaeval's agreement with the votes beside the humans' own, computed by hand here, from a run
through the CLI and the local OpenAI-compatible server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jurygraph.cli import main
from jurygraph.measuring.metaeval import evaluate_records
from jurygraph.running.datasets import load_dataset, load_mt_bench
from jurygraph.testing import pairwise_reply
from jurygraph.testing.fake_server import prompt_of

DATA = Path(__file__).parent / "data" / "mt_bench_human" / "human_judgments.jsonl"
ROWS = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]
Q81 = "81-gpt-4-vs-claude-v1"


def items_by_id(path: Path = DATA, **kwargs: Any) -> dict[str, Any]:
    dataset = load_dataset(path, **kwargs)
    return {item.id: item for item in dataset}


def test_recognised_from_its_fields_as_jsonl_and_json(tmp_path: Path) -> None:
    jsonl = load_dataset(DATA)  # no --task, no --map: the fields say what it is
    as_json = tmp_path / "human.json"
    as_json.write_text(json.dumps(ROWS), encoding="utf-8")
    from_json = load_dataset(as_json)
    assert jsonl.name == from_json.name == "mt-bench"
    assert [i.model_dump() for i in jsonl] == [i.model_dump() for i in from_json]
    assert [item.id for item in jsonl] == [f"{Q81}-t1", f"{Q81}-t2", "82-vicuna-13b-v1.2-vs-alpaca-13b-t1",
                                           "82-alpaca-13b-vs-vicuna-13b-v1.2-t2"]
    # the row with an unknown winner is reported, naming its row and field, and the others load
    assert [str(e) for e in jsonl.errors] == [
        f"{DATA}, row 11 (question_id 82), field 'winner': 'model_c' is not one of model_a, model_b, tie, "
        "tie (bothbad)"]
    assert len(jsonl) == 4


def test_every_vote_is_kept_ties_as_ties_and_the_majority_is_the_label() -> None:
    items = items_by_id()
    first = items[f"{Q81}-t1"]
    assert first.meta["model_1"] == "gpt-4" and first.systems == ["gpt-4", "claude-v1"]
    # the author's vote was given with the models the other way round: model_b (gpt-4) is Assistant 1 here
    assert first.human == {"label": "1", "votes": [
        {"judge": "expert_0", "label": "1", "winner": "model_a"},
        {"judge": "expert_13", "label": "1", "winner": "model_a"},
        {"judge": "author_2", "label": "1", "winner": "model_b"},
        {"judge": "expert_7", "label": "tie", "winner": "tie"}]}
    second = items[f"{Q81}-t2"]
    assert [v["label"] for v in second.human["votes"]] == ["tie", "tie", "2"]
    assert [v["winner"] for v in second.human["votes"]] == ["tie", "tie (bothbad)", "model_a"]
    assert second.human["label"] == "tie"  # both kinds of tie are ties, and they are the majority
    split = items["82-vicuna-13b-v1.2-vs-alpaca-13b-t1"]
    assert "label" not in split.human and len(split.human["votes"]) == 2  # a 1-1 split gives no label


def test_turn_one_and_turn_two_conversations() -> None:
    items = items_by_id()
    row = ROWS[0]
    a, b = row["conversation_a"], row["conversation_b"]
    first, second = items[f"{Q81}-t1"], items[f"{Q81}-t2"]
    dump = lambda messages: [m.model_dump(exclude_none=True) for m in messages]  # noqa: E731
    # turn 1: the question once, then each model's first answer
    assert first.turn == 1 and dump(first.messages) == a[:1] == b[:1]
    assert dump(first.messages_1) == a[1:2] and dump(first.messages_2) == b[1:2]
    assert first.question == a[0]["content"]
    # turn 2: each model's own first answer, the second question and its second answer (what MT-Bench's multi-turn
    # judge prompt shows); the first question is all the two conversations share
    assert second.turn == 2 and dump(second.messages) == a[:1]
    assert dump(second.messages_1) == a[1:] and dump(second.messages_2) == b[1:]
    assert second.question == a[2]["content"]


def test_reverse_swaps_the_conversations_and_every_vote() -> None:
    straight, swapped = items_by_id(), items_by_id(reverse=True)
    for item_id, item in straight.items():
        other = swapped[item_id]
        assert other.messages_1 == item.messages_2 and other.meta["model_1"] == item.meta["model_2"]
        flip = {"1": "2", "2": "1", "tie": "tie"}
        assert [v["label"] for v in other.human["votes"]] == [flip[v["label"]] for v in item.human["votes"]]
    assert load_mt_bench(DATA, reverse=True).items[0].meta["reversed"] is True


def test_bad_files_name_what_is_wrong(tmp_path: Path) -> None:
    short = dict(ROWS[4], conversation_a=ROWS[4]["conversation_a"][:2])  # a turn-2 vote on a one-turn conversation
    bad_role = dict(ROWS[0], conversation_b=[{"role": "robot", "content": "?"}, *ROWS[0]["conversation_b"][1:]])
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [short, bad_role, dict(ROWS[0], turn=3)]),
                    encoding="utf-8")
    dataset = load_dataset(path)
    assert len(dataset) == 0
    assert [(e.row, e.field) for e in dataset.errors] == [
        ("1 (question_id 81)", "conversation_a"), ("2 (question_id 81)", "conversation_b[0]"),
        ("3 (question_id 81)", "turn")]
    assert "has 1 assistant answers; turn 2 needs 2" in dataset.errors[0].message


# --- metaeval -----------------------------------------------------------------------------------------------------

# the panel's verdict on each item, as the scripted server below gives it
PANEL = {f"{Q81}-t1": "1", f"{Q81}-t2": "tie", "82-vicuna-13b-v1.2-vs-alpaca-13b-t1": "2",
         "82-alpaca-13b-vs-vicuna-13b-v1.2-t2": "2"}


def test_vote_agreement_by_hand() -> None:
    records = [{"id": item.id, "task": "pairwise", "status": "ok", "human": item.human,
                "verdict": {"label": PANEL[item.id]}} for item in load_dataset(DATA)]
    votes = evaluate_records(records).votes
    assert votes is not None and (votes.items, votes.votes, votes.panel_missing) == (4, 10, 0)
    # humans, every pair of votes on an item: 81/t1 [1,1,1,tie] 3 of 6 agree (3 of 3 without ties);
    # 81/t2 [tie,tie,2] 1 of 3 (no pair without a tie); 82/t1 [1,2] 0 of 1 (0 of 1); 82/t2 one vote, no pair
    assert (votes.humans["with ties"].agree, votes.humans["with ties"].total) == (4, 10)
    assert (votes.humans["without ties"].agree, votes.humans["without ties"].total) == (3, 4)
    # the panel against each vote: 3/4, 2/3, 1/2, 1/1 with ties; 3/3, none, 1/2, 1/1 without
    assert (votes.panel["with ties"].agree, votes.panel["with ties"].total) == (7, 10)
    assert (votes.panel["without ties"].agree, votes.panel["without ties"].total) == (5, 6)
    # FastChat's count: the experts' votes only (the two authors' votes left out)
    experts = evaluate_records(records, vote_judges="expert").votes
    assert experts is not None and experts.votes == 8
    assert (experts.humans["with ties"].agree, experts.humans["with ties"].total) == (2, 5)
    assert (experts.humans["without ties"].agree, experts.humans["without ties"].total) == (1, 2)
    assert (experts.panel["with ties"].agree, experts.panel["with ties"].total) == (6, 8)
    assert (experts.panel["without ties"].agree, experts.panel["without ties"].total) == (4, 5)
    # accuracy is against the majority label: the split item has none
    result = evaluate_records(records).labels
    assert result is not None and (result.n, result.no_human) == (3, 1)


def respond(request: dict[str, Any], choice: int = 0) -> str:
    """Each item's PANEL label, recognised by its question (turn 2's is the second question, and its prompt holds
    the first too: turn 2 rows are looked at first)."""
    prompt = prompt_of(request)
    for row in sorted(ROWS, key=lambda row: -row["turn"]):
        question = row["conversation_a"][2 * row["turn"] - 2]["content"]
        key = f"{row['question_id']}-"
        label = next((v for k, v in PANEL.items() if k.startswith(key) and k.endswith(f"t{row['turn']}")), None)
        if question in prompt and label is not None:
            return pairwise_reply(*{"1": (8, 4), "2": (4, 8), "tie": (6, 6)}[label], "scripted")
    raise AssertionError(f"no item in {prompt[:200]!r}")


def test_metaeval_reports_the_humans_agreement_beside_the_panels(openai_server, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    server = openai_server(respond)
    out = tmp_path / "run"
    assert main(["eval", "--protocol", "single", "--no-calibrate", "--dataset", str(DATA), "--model", "judge",
                 "--base-url", server.base_url, "--quiet", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["metaeval", str(out), "--resamples", "0"]) == 0
    text = capsys.readouterr().out
    table = text[text.index("agreement with the human votes"):]
    # single: 4 items; panel 70.0 % of 10 pairs, 83.3 % of 6; humans 40.0 % of 10, 75.0 % of 4
    assert "single      4    70.0     10     83.3      6    40.0     10     75.0      4" in table, table
    assert main(["metaeval", str(out), "--resamples", "0", "--json"]) == 0
    votes = json.loads(capsys.readouterr().out)["methods"][0]["human_votes"]
    assert votes["humans"]["with_ties"] == {"agree": 4, "pairs": 10, "rate": 0.4}
    assert votes["panel"]["without_ties"] == {"agree": 5, "pairs": 6, "rate": 0.833333}
    assert main(["metaeval", str(out), "--resamples", "0", "--vote-judges", "expert"]) == 0
    assert "agreement with the human votes (judges expert*)" in capsys.readouterr().out


def test_chateval_judges_both_orders_as_on_faireval(capsys: pytest.CaptureFixture[str]) -> None:
    """The file's layout says its items are pairwise, as a built-in name does: ChatEval's single agent judges each
    item in both answer orders by default (its position calibration), without --task."""
    assert main(["eval", "--protocol", "single", "--dataset", str(DATA), "--model", "openai:gpt-4o-mini",
                 "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["items"] == 4 and plan["requests"] == 8
