"""Dataset loaders: the three benchmarks as shipped, their layouts from any path, JSONL/CSV with a
mapping, and malformed rows reported by file, row and field while valid rows still load."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from importlib import resources
from pathlib import Path

import pytest

from jurygraph.judging.items import Scale, TaskKind
from jurygraph.running.datasets import DatasetError, load_dataset, load_faireval, load_summeval, load_topical_chat


def test_faireval_has_80_questions_with_the_human_labels() -> None:
    dataset = load_dataset("faireval")
    assert len(dataset) == 80 and not dataset.errors
    assert Counter(item.human["label"] for item in dataset) == {"1": 41, "2": 25, "tie": 14}  # gpt35/vicuna/tie
    first = dataset.items[0]
    assert first.task is TaskKind.PAIRWISE and first.id == "0"
    assert first.response_1.startswith("Here are some tips to improve your time management skills")  # gpt35
    reverse = load_dataset("faireval", reverse=True)
    assert reverse.items[0].response_2 == first.response_1
    assert Counter(item.human["label"] for item in reverse) == {"2": 41, "1": 25, "tie": 14}
    assert len(dataset.sha256) == 64


def test_summeval_is_100_documents_of_16_summaries_with_4_aspects() -> None:
    dataset = load_dataset("summeval", aspect="relevance")
    assert len(dataset) == 1600 and not dataset.errors
    assert Counter(item.group for item in dataset).most_common()[-1][1] == 16
    assert len({item.group for item in dataset}) == 100
    item = dataset.items[0]
    assert set(item.human) == {"coherence", "consistency", "fluency", "relevance"}
    assert (item.scale.low, item.scale.high, item.aspect) == (1, 5, "relevance")
    assert all(1 <= v <= 5 for it in dataset for v in it.human.values())


def test_topical_chat_is_60_contexts_of_6_responses() -> None:
    dataset = load_dataset("topical-chat", aspect="groundedness")
    assert len(dataset) == 360 and not dataset.errors
    assert set(Counter(item.group for item in dataset).values()) == {6}
    item = dataset.items[0]
    assert item.id == "tc-00-0" and item.group == "tc-00"
    assert {"naturalness", "coherence", "engagingness", "groundedness", "understandability"} <= set(item.human)
    assert (item.scale.low, item.scale.high) == (0, 1)
    assert load_dataset("topical_chat", aspect="coherence").items[0].scale.high == 3


def test_benchmark_layouts_load_from_any_path(tmp_path: Path) -> None:
    rows = json.loads((resources.files("jurygraph.data") / "faireval.json").read_text(encoding="utf-8"))
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(rows[:3]))
    dataset = load_dataset(path)
    assert dataset.name == "faireval" and len(dataset) == 3
    with pytest.raises(DatasetError, match="not a FairEval, SummEval, Topical-Chat, MT-Bench or LangSmith-export"):
        (tmp_path / "odd.json").write_text(json.dumps([{"x": 1}]))
        load_dataset(tmp_path / "odd.json")
    with pytest.raises(DatasetError, match="no such file"):
        load_dataset(tmp_path / "absent.json")


def test_faireval_bad_rows_name_the_field_and_the_rest_load(tmp_path: Path) -> None:
    good = {"question_id": 0, "question": "Q?", "response": {"gpt35": "a", "vicuna": "b"}, "human_results": "tie"}
    rows = [good, {**good, "question_id": 1, "human_results": "alpaca"},
            {**good, "question_id": 2, "response": {"gpt35": "a"}}, {**good, "question_id": 3}, "just text"]
    path = tmp_path / "fair.json"
    path.write_text(json.dumps(rows))
    dataset = load_faireval(path)
    assert [item.id for item in dataset] == ["0", "3"]
    # rows count from 1, as editors and spreadsheets do, and a row with an id is named by it too
    assert [(e.file, e.row, e.field) for e in dataset.errors] == [(str(path), "2 (question_id 1)", "human_results"),
                                                                  (str(path), "3 (question_id 2)", "response.vicuna"),
                                                                  (str(path), "5", None)]
    assert dataset.errors[2].message == "a FairEval row must be an object"
    assert str(dataset.errors[0]) == (f"{path}, row 2 (question_id 1), field 'human_results': 'alpaca' is not "
                                      "gpt35 / vicuna / tie")


def test_summeval_bad_documents_and_scores(tmp_path: Path) -> None:
    doc = {"id": "d0", "text": "source", "machine_summaries": ["s0", "s1"], "coherence": [1, 2],
           "consistency": [5, 5], "fluency": [4, 4], "relevance": [3, 2]}
    rows = [{"row": doc}, {"row": {**doc, "id": "d1", "coherence": [1]}},
            {"row": {**doc, "id": "d2", "fluency": [4, "high"]}},
            {"row": {k: v for k, v in doc.items() if k != "text"}}]
    path = tmp_path / "summ.json"
    path.write_text(json.dumps({"rows": rows}))
    dataset = load_summeval(path, aspect="coherence")
    assert [item.id for item in dataset] == ["d0#0", "d0#1", "d2#0"]
    problems = [(e.row, e.field) for e in dataset.errors]
    assert problems == [("2 (id d1)", "coherence"), ("3 (id d2#1)", "fluency[1]"), ("4 (id d0)", "text")]
    assert "has 1 scores for 2 summaries" in dataset.errors[0].message


def test_topical_chat_bad_rows_do_not_shift_ids(tmp_path: Path) -> None:
    row = {"source": "hi\nhello", "context": "fact", "system_output": "yes", "scores": {"naturalness": 2}}
    rows = [row, {**row, "scores": {"naturalness": "great"}}, {k: v for k, v in row.items() if k != "system_output"},
            {**row, "system_output": "no"}]
    path = tmp_path / "tc.json"
    path.write_text(json.dumps(rows))
    dataset = load_topical_chat(path)
    assert [item.id for item in dataset] == ["tc-00-0", "tc-00-1"]
    assert [(e.row, e.field) for e in dataset.errors] == [(2, "scores.naturalness"), (3, "system_output")]


def test_jsonl_with_a_mapping_reports_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    lines = [
        {"qid": "a", "prompt": "Q1", "answer_a": "x", "answer_b": "y", "winner": "1"},
        "not json",
        {"qid": "b", "prompt": "Q2", "answer_a": "x", "winner": "2"},  # answer_b missing
        {"qid": "c", "prompt": "Q3", "answer_a": "x", "answer_b": "y", "winner": "both"},
        {"qid": "d", "prompt": "Q4", "answer_a": "x", "answer_b": "y", "winner": "tie"},
    ]
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines))
    mapping = {"id": "qid", "question": "prompt", "response_1": "answer_a", "response_2": "answer_b",
               "human.label": "winner"}
    dataset = load_dataset(path, task="pairwise", mapping=mapping)
    assert [(item.id, item.human) for item in dataset] == [("a", {"label": "1"}), ("d", {"label": "tie"})]
    assert [(e.row, e.field) for e in dataset.errors] == [(2, None), ("3 (qid b)", "answer_b"),
                                                          ("4 (qid c)", "human.label")]
    assert "not valid JSON" in dataset.errors[0].message and "human label 'both'" in dataset.errors[2].message
    assert "--map response_2=answer_b" in dataset.errors[1].message  # what the column was for, and what the row has
    assert "this row's columns: qid, prompt, answer_a, winner" in dataset.errors[1].message
    assert "recode the cell with --map 'human.label[both]=1' (or =2, =tie)" in dataset.errors[2].message
    with pytest.raises(DatasetError, match="needs --task"):
        load_dataset(path)


def test_jsonl_human_object_and_csv_scores(tmp_path: Path) -> None:
    jsonl = tmp_path / "scores.jsonl"
    jsonl.write_text(json.dumps({"id": "r1", "response": "text", "human": {"fluency": 4},
                                 "scale": {"low": 1, "high": 5}}) + "\n")
    item = load_dataset(jsonl, task="score", aspect="fluency").items[0]
    assert item.human == {"fluency": 4} and item.aspect == "fluency"
    csv_path = tmp_path / "scores.csv"
    csv_path.write_text('id,summary,doc,rating,scale_low,scale_high\n'
                        's1,"two\nlines",d1,3.5,1,5\n'
                        's2,short,d1,,1,5\n'
                        's3,fine,d2,2,1,5,EXTRA\n'
                        's4,ok,d2,4,1,5\n')
    dataset = load_dataset(csv_path, task="score", aspect="coherence",
                           mapping={"response": "summary", "group": "doc", "human.coherence": "rating"})
    assert [(i.id, i.response, i.group, i.human) for i in dataset] == [
        ("s1", "two\nlines", "d1", {"coherence": 3.5}), ("s2", "short", "d1", None),
        ("s4", "ok", "d2", {"coherence": 4.0})]
    assert [(e.row, e.field) for e in dataset.errors] == [(5, None)]  # the row ends on file line 5


def test_a_table_is_streamed_read_again_on_each_pass_and_never_held(tmp_path: Path) -> None:
    """A JSONL/CSV table is validated once at load (errors, count, hash, repeated ids) and read again, row by row,
    whenever it is iterated: loading keeps no item, and a row's problem is reported once, not on every pass."""
    path = tmp_path / "rows.jsonl"
    rows = [{"id": f"r{i}", "response": f"text {i}", "human": {"fluency": 3}, "scale": {"low": 1, "high": 5}}
            for i in range(5)]
    path.write_text("\n".join([*map(json.dumps, rows[:3]), "{broken", *map(json.dumps, rows[3:])]) + "\n")
    dataset = load_dataset(path, task="score", aspect="fluency")
    assert dataset.streamed and len(dataset) == 5 and dataset.tasks == {"score"} and dataset.duplicates == []
    assert [(e.row, e.message[:14]) for e in dataset.errors] == [(4, "not valid JSON")]
    assert dataset.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    first, second = [item.id for item in dataset], [item.id for item in dataset]
    assert first == second == ["r0", "r1", "r2", "r3", "r4"] and len(dataset.errors) == 1
    head = dataset.head(2)
    assert head.streamed and len(head) == 2 and [item.id for item in head] == ["r0", "r1"]
    # each pass reads the file: a row appended after loading shows in the next pass (the runner's pass)
    with path.open("a") as handle:
        handle.write(json.dumps({**rows[0], "id": "late"}) + "\n")
    assert [item.id for item in dataset][-1] == "late"
    # `items` builds the whole list when a caller wants it (a notebook, a small file); then it is held
    assert [item.id for item in dataset.items] == ["r0", "r1", "r2", "r3", "r4", "late"] and not dataset.streamed


def test_repeated_ids_in_a_table_are_found_at_load(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    path.write_text("id,response,scale_low,scale_high\na,x,1,5\nb,y,1,5\na,z,1,5\nc,w,1,5\nb,v,1,5\n")
    dataset = load_dataset(path, task="score")
    assert dataset.duplicates == ["a", "b"] and len(dataset) == 5


def test_reverse_swaps_a_pairwise_tables_answers_and_is_refused_for_scores(tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"id": "p1", "question": "Q", "response_1": "first", "response_2": "second",
                                "human": {"label": "1"}, "meta": {"model_1": "gpt-4", "model_2": "llama"}}) + "\n")
    (item,) = load_dataset(path, task="pairwise", reverse=True)
    assert (item.response_1, item.response_2, item.human) == ("second", "first", {"label": "2"})
    assert item.systems == ["llama", "gpt-4"] and item.meta["reversed"] is True
    (forward,) = load_dataset(path, task="pairwise")
    assert forward.systems == ["gpt-4", "llama"] and "reversed" not in forward.meta
    with pytest.raises(DatasetError, match="--reverse swaps the two answers of pairwise items; this is a score"):
        load_dataset(path, task="score", reverse=True)
    with pytest.raises(DatasetError, match="summeval rates single texts"):
        load_dataset("summeval", reverse=True)


# --- a row that lacks a field says which column, --map or --scale would give it (issue 28) ---


def test_a_score_row_without_a_scale_names_the_columns_and_the_option(tmp_path: Path) -> None:
    path = tmp_path / "ratings.csv"
    path.write_text("id,text,rating,scale_low,scale_high\na,fine,3,,\nb,,4,,\nc,good,8,0,10\n")
    dataset = load_dataset(path, task="score", mapping={"response": "text", "human.coherence": "rating"})
    assert [item.id for item in dataset] == ["c"]
    first, second = (str(error) for error in dataset.errors)
    assert first == (f"{path}, row 2 (id a): item 'a': a score item needs 'scale': add columns scale_low and "
                     "scale_high, map yours with --map scale_low=COLUMN --map scale_high=COLUMN, or give every row "
                     "one with --scale LOW-HIGH (e.g. --scale 1-5)")
    assert second.startswith(f"{path}, row 3 (id b): item 'b': a score item needs 'response', 'scale'. response: its "
                             "column 'text' (--map response=text) is empty in this row; scale: add columns")
    # --scale gives every row a scale; a row's own bounds win
    scaled = load_dataset(path, task="score", mapping={"response": "text", "human.coherence": "rating"},
                          scale=Scale.parse("1-5"))
    assert {item.id: str(item.scale) for item in scaled} == {"a": "1-5", "c": "0-10"}
    assert [e.row for e in scaled.errors] == ["3 (id b)"] and "needs 'response':" in str(scaled.errors[0])


def test_a_field_no_column_gives_names_the_column_and_the_map(tmp_path: Path) -> None:
    path = tmp_path / "questions.jsonl"
    path.write_text(json.dumps({"id": "x", "prompt": "2+2?"}) + "\n")
    [error] = load_dataset(path, task="choice").errors
    assert str(error) == (f"{path}, row 1 (id x): item 'x': a choice item needs 'question': add a column "
                          "'question' or map one with --map question=COLUMN (this row's columns: id, prompt)")
    assert [item.question for item in load_dataset(path, task="choice", mapping={"question": "prompt"})] == ["2+2?"]
    with pytest.raises(DatasetError, match=r"--map answer=\.\.\.: 'answer' is not an item field; --map targets: "):
        load_dataset(path, task="choice", mapping={"answer": "prompt"})


@pytest.mark.parametrize(("text", "low", "high"), [("1-5", 1, 5), ("0..1", 0, 1), ("-2-2", -2, 2),
                                                   ("1.5,4.5", 1.5, 4.5)])
def test_scale_spellings(text: str, low: float, high: float) -> None:
    assert (Scale.parse(text).low, Scale.parse(text).high) == (low, high)


@pytest.mark.parametrize("text", ["5", "5-1", "a-b", "1-5-7"])
def test_a_scale_that_is_not_one_says_how_to_write_it(text: str) -> None:
    with pytest.raises(ValueError, match=r"write LOW-HIGH with LOW below HIGH, e\.g\. --scale 1-5"):
        Scale.parse(text)
