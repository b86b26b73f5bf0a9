"""JSON documents read as streams (issue 32): the built-in benchmarks and any file in their layouts give the same
items, ids, order and hash as the whole document says, through either ijson backend; the layout is recognised from
the document's first events; a row is yielded before the rest of the file is read; a document that is not JSON is
one clear error naming the file, line, column and the rows before it, at loading or, if the file changes under a
run, while it is read."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import ijson
import pytest

from jurygraph.cli import main
from jurygraph.running import json_stream
from jurygraph.running.datasets import (
    BUILTIN,
    DatasetError,
    load_dataset,
    load_faireval,
    load_mt_bench,
    load_summeval,
    load_topical_chat,
)
from jurygraph.running.json_stream import CHUNK, DocumentError, peek, rows

DATA = Path(__file__).parent / "data"
MT_BENCH = DATA / "mt_bench_human" / "human_judgments.jsonl"
FAIR = {"question_id": 0, "question": "Q?", "category": "generic", "response": {"gpt35": "a", "vicuna": "b"},
        "human_results": "tie"}


def builtin(name: str) -> Path:
    return Path(str(resources.files("jurygraph.data").joinpath(BUILTIN[name])))


def whole(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(params=["yajl2_c", "python"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test through ijson's C backend and its pure-Python fallback."""
    monkeypatch.setattr(json_stream, "_backend", ijson.get_backend(request.param))
    return str(request.param)


class Counted:
    """Bytes read from files opened through ``Path.open`` while it is patched."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.read: dict[str, int] = {}
        opener = Path.open
        counter = self

        class Handle:
            def __init__(self, inner: Any, name: str) -> None:
                self.inner, self.name = inner, name

            def read(self, size: int = -1) -> bytes:
                data = self.inner.read(size)
                counter.read[self.name] = counter.read.get(self.name, 0) + len(data)
                return bytes(data)

            def __getattr__(self, attr: str) -> Any:
                return getattr(self.inner, attr)

            def __iter__(self) -> Iterator[bytes]:
                for line in self.inner:
                    counter.read[self.name] = counter.read.get(self.name, 0) + len(line)
                    yield line

            def __enter__(self) -> Handle:
                return self

            def __exit__(self, *exc: object) -> None:
                self.inner.close()

        def counting(path: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            handle = opener(path, mode, *args, **kwargs)
            return Handle(handle, str(path)) if "b" in mode else handle

        monkeypatch.setattr(Path, "open", counting)


# --- the same items as the whole document says ---

def test_builtin_faireval_streams_the_documents_rows_in_order(backend: str) -> None:
    path = builtin("faireval")
    expected = whole(path)
    for reverse in (False, True):
        dataset = load_dataset("faireval", reverse=reverse)
        assert dataset.streamed and dataset.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
        items = list(dataset)
        assert [item.id for item in items] == [str(row["question_id"]) for row in expected]
        assert len(dataset) == 80 and not dataset.errors and not dataset.duplicates
        for item, row in zip(items, expected, strict=True):
            one, two = row["response"]["gpt35"], row["response"]["vicuna"]
            assert (item.question, item.response_1, item.response_2) == (row["question"], *((two, one) if reverse
                                                                                              else (one, two)))
            assert item.meta["category"] == row["category"] and item.meta["reversed"] is reverse
        assert [i.model_dump() for i in dataset] == [i.model_dump() for i in items]  # each pass the same


def test_builtin_summeval_and_topical_chat_stream_every_row(backend: str) -> None:
    path = builtin("summeval")
    docs = [entry["row"] for entry in whole(path)["rows"]]
    dataset = load_summeval(aspect="fluency")
    assert dataset.sha256 == hashlib.sha256(path.read_bytes()).hexdigest() and len(dataset) == 1600
    items = list(dataset)
    assert [item.id for item in items] == [f"{doc['id']}#{s}" for doc in docs for s in range(16)]
    assert [item.response for item in items] == [summary for doc in docs for summary in doc["machine_summaries"]]
    assert [(item.human or {})["fluency"] for item in items] == [score for doc in docs for score in doc["fluency"]]

    path = builtin("topical-chat")
    rows_ = whole(path)
    dataset = load_topical_chat(aspect="coherence")
    assert dataset.sha256 == hashlib.sha256(path.read_bytes()).hexdigest() and len(dataset) == 360
    items = list(dataset)
    assert [(item.source, item.response, item.meta["row"]) for item in items] == [
        (row["source"], row["system_output"], i) for i, row in enumerate(rows_)]
    contexts = list(dict.fromkeys(row["source"] for row in rows_))
    assert [item.group for item in items] == [f"tc-{contexts.index(row['source']):02d}" for row in rows_]
    # a copy of the layout elsewhere (UniEval's predictions hold the same rows) gives the same items
    copy = load_dataset(DATA / "unieval_predictions" / "topical_chat_result.json", aspect="coherence")
    assert [i.model_dump() for i in copy] == [i.model_dump() for i in items]


def test_both_backends_give_the_same_items(monkeypatch: pytest.MonkeyPatch) -> None:
    made = {}
    for name in ("yajl2_c", "python"):
        monkeypatch.setattr(json_stream, "_backend", ijson.get_backend(name))
        made[name] = [(d.sha256, [i.model_dump() for i in d]) for d in (load_dataset("faireval"),
                                                                          load_dataset("topical-chat"))]
    assert made["yajl2_c"] == made["python"]


def test_mt_bench_as_a_json_document_streams_as_its_jsonl(tmp_path: Path, backend: str) -> None:
    lines = [json.loads(line) for line in MT_BENCH.read_text(encoding="utf-8").splitlines()]
    document = tmp_path / "human.json"
    document.write_text(json.dumps(lines, indent=1), encoding="utf-8")
    for reverse in (False, True):
        jsonl, doc = load_mt_bench(MT_BENCH, reverse=reverse), load_mt_bench(document, reverse=reverse)
        assert jsonl.streamed and doc.streamed
        assert [i.model_dump() for i in doc] == [i.model_dump() for i in jsonl] and len(doc) == 4
        assert [str(e) for e in doc.errors] == [str(e).replace(str(MT_BENCH), str(document)) for e in jsonl.errors]
        assert doc.sha256 == hashlib.sha256(document.read_bytes()).hexdigest()


def test_numbers_and_text_come_out_as_json_gives_them(tmp_path: Path, backend: str) -> None:
    """Floats as floats (not ijson's default Decimals), non-ASCII text, a byte-order mark skipped."""
    row = {"source": "caf\u00e9 \u2014 \U0001f600", "context": "", "system_output": "ok",
           "scores": {"naturalness": 2.5, "coherence": 3}}
    path = tmp_path / "tc.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps([row], ensure_ascii=False).encode())
    (item,) = load_dataset(path)
    assert item.source == row["source"] and item.human == {"naturalness": 2.5, "coherence": 3.0}
    assert type(item.human["naturalness"]) is float


# --- the layout from the first events ---

def test_the_layout_is_recognised_from_the_first_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = tmp_path / "fair.json"
    big.write_text(json.dumps([{**FAIR, "question_id": i, "question": "Q" * 500} for i in range(4000)]))
    assert big.stat().st_size > 30 * CHUNK
    counted = Counted(monkeypatch)
    shape = peek(big)
    assert (shape.kind, shape.first, shape.empty) == ("array", {**FAIR, "question_id": 0, "question": "Q" * 500}, False)
    assert counted.read[str(big)] <= CHUNK  # one chunk of a 2 MB document
    # SummEval's HF layout: the features before "rows" are skipped as events, nothing of the rows is read
    hf = tmp_path / "hf.json"
    hf.write_text(json.dumps({"features": [{"name": "x" * 100}] * 50, "rows": [{"row": {"id": i}} for i in
                                                                                range(20000)]}))
    counted.read.clear()
    assert peek(hf, ("rows", "runs")) == json_stream.Shape("object", key="rows", key_array=True)
    assert counted.read[str(hf)] <= CHUNK < hf.stat().st_size / 5
    for data, shape in (([], json_stream.Shape("array")), ({"runs": {}}, json_stream.Shape("object", key="runs")),
                        (3, json_stream.Shape("value")), ({"a": [1]}, json_stream.Shape("object"))):
        tmp_path.joinpath("d.json").write_text(json.dumps(data))
        assert peek(tmp_path / "d.json", ("rows", "runs")) == shape


def test_loading_a_document_sniffs_it_without_holding_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The dataset reads the document twice (the layout's first events, then every row to validate and hash) and
    iterating it reads it again, its first item before the rest of the file."""
    path = tmp_path / "fair.json"
    path.write_text(json.dumps([{**FAIR, "question_id": i, "question": "Q" * 500} for i in range(4000)]))
    size = path.stat().st_size
    counted = Counted(monkeypatch)
    dataset = load_dataset(path)
    assert dataset.name == "faireval" and len(dataset) == 4000 and dataset.streamed
    assert size < counted.read[str(path)] <= size + CHUNK  # one peek at the first chunk, one pass for the rest
    counted.read.clear()
    stream = iter(dataset)
    assert next(stream).id == "0"
    assert counted.read[str(path)] <= CHUNK < size / 20
    assert next(stream).id == "1"
    stream.close()  # type: ignore[attr-defined]
    assert [item.id for item in dataset.head(3)] == ["0", "1", "2"]


def test_rows_come_before_the_rest_of_the_document_is_written(tmp_path: Path) -> None:
    """A document that does not end (here: not written yet) still gives its first rows: the parser holds no more
    than the row it builds."""
    path = tmp_path / "growing.json"
    with path.open("w", encoding="utf-8") as out:
        out.write("[" + json.dumps(FAIR) + ", " + json.dumps({**FAIR, "question_id": 1}) + ", ")
        out.write(json.dumps({**FAIR, "question_id": 2, "question": "x" * (3 * CHUNK)}) + ", {")
    stream = rows(path, "item")
    assert [next(stream)["question_id"] for _ in range(3)] == [0, 1, 2]
    with pytest.raises(DocumentError, match=r"ends before it is complete\), after row 3; a truncated file\?"):
        next(stream)


# --- documents that are not JSON, or rows that are not items ---

def faireval_text(n: int) -> str:
    return json.dumps([{**FAIR, "question_id": i} for i in range(n)], indent=2)


@pytest.mark.parametrize(("damage", "says"), [
    (lambda t: t.replace('"question_id": 30,', '"question_id": 30', 1), r"line \d+, column \d+ \(.*\), after row 30$"),
    (lambda t: t.replace('"question_id": 40', '"question_id": tru', 1), r"line \d+, column \d+ \(.*\), after row 40$"),
    (lambda t: t[:-200], r"line \d+, column \d+ \(the document ends before it is complete\), after row 48; "
                         r"a truncated file\?$"),
    (lambda t: "", r"not valid JSON \(the file is empty\)$"),
    (lambda t: t.replace("[", "{", 1), r"line 2, column 3 \(.*\)$"),
])
def test_a_document_that_is_not_json_is_one_error_naming_where(tmp_path: Path, backend: str, damage: Any,
                                                               says: str) -> None:
    path = tmp_path / "fair.json"
    text = damage(faireval_text(50))
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DatasetError) as caught:
        load_faireval(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: not valid JSON"), message
    assert "\n" not in message and re.search(says, message), message
    if text:  # the line is the one Python's own parser names
        with pytest.raises(json.JSONDecodeError) as stdlib:
            json.loads(text)
        assert f"line {stdlib.value.lineno}," in message


def test_text_that_is_not_utf8_names_the_byte(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "fair.json"
    path.write_bytes(faireval_text(3).replace('"Q?"', '"caf\u00e9?"').encode("latin-1"))
    with pytest.raises(DatasetError, match=rf"^{path}: not UTF-8 text \(byte \d+, line 4\).*; save it as UTF-8$"):
        load_dataset(path)


def test_rows_of_the_wrong_shape_are_named_and_the_rest_load(tmp_path: Path, backend: str) -> None:
    rows_ = [{**FAIR, "question_id": i} for i in range(6)]
    rows_[2] = ["not", "a", "row"]  # type: ignore[call-overload]
    rows_[4] = {**FAIR, "question_id": 4, "response": {"gpt35": "a"}}
    path = tmp_path / "fair.json"
    path.write_text(json.dumps(rows_))
    dataset = load_dataset(path)
    assert [item.id for item in dataset] == ["0", "1", "3", "5"] and len(dataset) == 4
    assert [str(error) for error in dataset.errors] == [
        f"{path}, row 3: a FairEval row must be an object",
        f"{path}, row 5 (question_id 4), field 'response.vicuna': missing field"]
    # the whole document of the wrong shape: said before any row is read
    path.write_text(json.dumps({"rows": 3}))
    with pytest.raises(DatasetError, match="expected a JSON array of FairEval questions"):
        load_faireval(path)
    with pytest.raises(DatasetError, match=r"expected the HF rows layout"):
        load_summeval(path)
    with pytest.raises(DatasetError, match="not a FairEval, SummEval, Topical-Chat, MT-Bench or LangSmith-export"):
        path.write_text(json.dumps([[1], {"question_id": 1}]))
        load_dataset(path)


def test_a_document_broken_after_loading_stops_the_reading_with_the_same_error(tmp_path: Path,
                                                                              backend: str) -> None:
    """The loading pass read a valid document; a run reading it again finds it cut short (changed under the run):
    the same one-line error, after the rows that are still there, not a silently shorter run."""
    path = tmp_path / "fair.json"
    text = faireval_text(20)
    path.write_text(text)
    dataset = load_dataset(path)
    assert len(dataset) == 20
    path.write_text(text[: len(text) // 2])
    seen: list[str] = []
    with pytest.raises(DatasetError, match=rf"^{path}: not valid JSON at line \d+, column \d+ \(the document ends "
                                           r"before it is complete\), after row 10; a truncated file\?$"):
        seen.extend(item.id for item in dataset)
    assert seen == [str(i) for i in range(10)]


def test_the_cli_says_it_in_one_line_and_runs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fair.json"
    path.write_text(faireval_text(50)[:-200])
    out = tmp_path / "run"
    assert main(["eval", "--dataset", str(path), "--model", "openai:x", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{path}: not valid JSON at line" in err and "after row 48; a truncated file?" in err
    assert not (out / "results.jsonl").exists()
