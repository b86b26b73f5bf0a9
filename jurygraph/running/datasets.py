"""Loaders that turn benchmarks and plain tables into datasets of :class:`EvalItem`.

Built-in names (``faireval``, ``summeval``, ``topical-chat``) read the copies shipped in
``jurygraph/data`` (provenance in ``jurygraph/data/PROVENANCE.md``); any path in the same layouts
works too, as do JSONL/CSV files with a column mapping. A malformed row never stops the others: it is
reported as a :class:`RowError` naming the file, the row and the field. Every file is read as a stream, a JSON
document incrementally (:mod:`jurygraph.running.json_stream`), its layout from its first events: no dataset holds
its file (:class:`Dataset`).
"""

from __future__ import annotations

import collections
import csv
import hashlib
import itertools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from jurygraph.judging.aspects import aspects_of, get_aspect
from jurygraph.judging.benchmarks import canonical
from jurygraph.judging.items import SWAP_LABEL, EvalItem, MissingFields, Scale, TaskKind, UnknownLabel
from jurygraph.running.json_stream import DocumentError, Shape, peek, rows
from jurygraph.running.langsmith_runs import RunFieldError, is_langsmith_run, run_item, traces

# the shipped copy of each built-in benchmark (by its canonical name, judging.benchmarks)
BUILTIN = {"faireval": "faireval.json", "summeval": "summeval.json", "topical-chat": "topical_chat.json"}
FAIREVAL_LABELS = {"gpt35": "1", "vicuna": "2", "tie": "tie"}
FAIREVAL_SYSTEMS = ("gpt35", "vicuna")  # Assistant 1 and Assistant 2 in the data's order


@dataclass(frozen=True)
class RowError:
    """A row that could not become an item."""

    file: str
    row: int | str
    field: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}, row {self.row}" + (f", field {self.field!r}" if self.field else "")
        return f"{where}: {self.message}"


class Dataset:
    """Items that loaded, the rows that did not, and a hash of the source bytes (for run manifests).

    A file is *streamed*, whatever its format (a JSON document in one of the benchmark layouts, incrementally parsed;
    a JSONL/CSV table line by line): loading reads it once to validate every row (``errors``, ``len()``,
    ``duplicates``, the hash), and iterating reads it again, building one item at a time, so a run over a million
    rows never holds them all (``items`` still builds the whole list when asked, for notebooks and small files). A
    dataset made of a list of items (``Dataset(name, items)``) holds them.
    """

    def __init__(self, name: str, items: list[EvalItem] | None = None, errors: list[RowError] | None = None,
                 sha256: str = "", *, reread: Callable[[], Iterator[EvalItem]] | None = None, count: int = 0,
                 duplicates: Sequence[str] = (), task: TaskKind | None = None, texts: int | None = None) -> None:
        self.name = name
        self.errors: list[RowError] = errors if errors is not None else []
        self.sha256 = sha256
        self._items: list[EvalItem] | None = items if items is not None else None if reread is not None else []
        self._reread = reread
        self._count = count
        self._duplicates = list(duplicates)
        self._task = task  # a streamed table's rows share its task kind
        self._texts = texts  # a streamed table's items that are not conversations (counted by its validating pass)

    @property
    def items(self) -> list[EvalItem]:
        if self._items is None:
            self._items = list(self)
        return self._items

    @items.setter
    def items(self, value: list[EvalItem]) -> None:
        self._items, self._reread = list(value), None

    @property
    def streamed(self) -> bool:
        """Whether iterating re-reads the file instead of walking a list held in memory."""
        return self._items is None

    @property
    def duplicates(self) -> list[str]:
        """Item ids that occur more than once (a run needs unique ids), sorted."""
        if self._items is None:
            return self._duplicates
        return repeated(item.id for item in self._items)

    @property
    def tasks(self) -> set[str]:
        """The task kinds of the items ("pairwise", "score", "choice")."""
        if self._items is None and self._task is not None:
            return {self._task.value} if self._count else set()
        return {item.task.value for item in self}

    @property
    def conversational(self) -> bool:
        """Whether the dataset has items and every one is a conversation (``messages``), whose rubric an aspect
        chooses."""
        if self._items is None and self._texts is not None:
            return bool(self._count) and not self._texts
        return bool(len(self)) and all(item.conversational for item in self)

    def head(self, n: int | None) -> Dataset:
        """The first ``n`` items (all for None) as a dataset of the same kind: a streamed one stays streamed."""
        if n is None or n >= len(self):
            return self
        if self._items is not None:
            return Dataset(self.name, self._items[:n], self.errors, self.sha256)
        return Dataset(self.name, errors=self.errors, sha256=self.sha256, count=n, duplicates=self._duplicates,
                       task=self._task, texts=self._texts, reread=lambda: itertools.islice(iter(self), n))

    def __len__(self) -> int:
        return len(self._items) if self._items is not None else self._count

    def __iter__(self) -> Iterator[EvalItem]:
        if self._items is not None:
            return iter(self._items)
        assert self._reread is not None
        return self._reread()

    def __repr__(self) -> str:
        return f"Dataset({self.name!r}, {len(self)} items, {len(self.errors)} errors)"


def repeated(ids: Iterable[str]) -> list[str]:
    """The ids seen more than once, sorted."""
    seen: set[str] = set()
    twice: set[str] = set()
    for item_id in ids:
        (twice if item_id in seen else seen).add(item_id)
    return sorted(twice)


class DatasetError(ValueError):
    """The file as a whole cannot be read (missing, not JSON, unknown layout)."""


class FieldError(ValueError):
    """One field of a row is wrong; becomes a RowError naming that field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _field(row: Any, path: str) -> Any:
    """``row["a"]["b"]`` for ``path`` "a.b", or a FieldError naming the missing field."""
    value = row
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            raise FieldError(path, "missing field")
        value = value[part]
    return value


def _number(value: Any, field: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise FieldError(field, f"{value!r} is not a number") from None
    if number != number:  # NaN
        raise FieldError(field, "is NaN")
    return number


def _builtin_path(name: str) -> Path:
    return Path(str(resources.files("jurygraph.data").joinpath(BUILTIN[name])))


@dataclass(frozen=True)
class _Source:
    """A benchmark file whose rows are read as a stream, again each time they are asked for: a JSON document
    (``shape``: what its first events say) or a JSONL file (``shape`` None: each line a row)."""

    file: Path
    shape: Shape | None = None

    def at(self, key: str | None = None) -> str | None:
        """Where the rows are (an ijson prefix): the document's own array, or the array under its top-level ``key``;
        None when the document has neither."""
        if self.shape is None or self.shape.kind == "array":
            return "item"
        if key is not None and self.shape.key == key and self.shape.key_array:
            return f"{key}.item"
        return None

    def rows(self, prefix: str, digest: Any = None) -> Iterator[Any]:
        """The rows at ``prefix``, one at a time; ``digest`` is fed every byte of the file. A document that turns out
        not to be JSON, or a JSONL line that is not a row, raises a DatasetError naming the file and where."""
        if self.shape is None:
            errors: list[RowError] = []
            yield from (row for _, row in _rows(self.file, errors, digest))
            if errors:  # a layout whose rows are grouped into items needs all of them
                raise DatasetError(f"{errors[0]}" + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""))
            return
        try:
            yield from rows(self.file, prefix, digest)
        except DocumentError as err:
            raise DatasetError(f"{self.file}: {err}") from None


def _source(path: Path, lines: bool = False) -> _Source:
    """A benchmark file, its layout peeked at (a JSON document's first events; no row beyond the first is read).
    ``lines``: a ``.jsonl`` file is a JSONL file of rows (the layouts that have one: MT-Bench, LangSmith)."""
    try:
        if lines and path.suffix.lower() == ".jsonl":
            if not path.is_file():
                path.open("rb").close()  # the reason it cannot be read (absent, a folder)
            return _Source(path)
        return _Source(path, peek(path, ("rows", "runs")))
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file") from None
    except DocumentError as err:
        raise DatasetError(f"{path}: {err}") from None


def _streamed(name: str, task: TaskKind, items: Callable[[list[RowError], Any], Iterator[EvalItem]],
              errors: list[RowError] | None = None) -> Dataset:
    """A streamed dataset: ``items(errors, digest)`` runs once here, the validating pass (the rows' problems into
    ``errors``, every byte into the hash; only the ids are kept, and the count of items that are not conversations),
    and again each time the dataset is iterated (its rows' problems already reported, so not collected)."""
    errors = errors if errors is not None else []
    digest = hashlib.sha256()
    ids, texts = [], 0
    for item in items(errors, digest):
        ids.append(item.id)
        texts += not item.conversational
    return Dataset(name, errors=errors, sha256=digest.hexdigest(), reread=lambda: items([], None), count=len(ids),
                   duplicates=repeated(ids), task=task, texts=texts)


def _row_label(number: int, row: Any, id_field: str) -> str:
    """How an error names a row: its 1-based number, as editors and spreadsheets count, and its id when it has
    one ("3 (question_id 77)"), so the row can be found either way."""
    value = row.get(id_field) if isinstance(row, Mapping) else None
    return f"{number} ({id_field} {value})" if value not in (None, "") else str(number)


def _build(errors: list[RowError], file: str, row: int | str, build: Callable[[], dict[str, Any]],
           supply: Callable[[str], str] | None = None) -> EvalItem | None:
    """One item, or None with the row's problems added to ``errors`` (each naming its field). ``supply(field)``:
    how the file would give a field an item lacks (a table's columns, ``--map``, ``--scale``)."""
    try:
        return EvalItem.model_validate(build())
    except FieldError as err:
        errors.append(RowError(file, row, err.field, str(err)))
    except ValidationError as err:
        for problem in err.errors():
            loc = ".".join(str(p) for p in problem["loc"]) or None
            cause = (problem.get("ctx") or {}).get("error")
            if isinstance(cause, MissingFields):
                errors.append(RowError(file, row, None, _missing_line(cause, supply)))
            elif isinstance(cause, UnknownLabel) and supply is not None:
                errors.append(RowError(file, row, "human.label", f"{cause}; {supply('human.label')}"))
            elif isinstance(cause, ValueError):  # the item's own check, already one sentence naming the item
                errors.append(RowError(file, row, loc, str(cause)))
            else:
                errors.append(RowError(file, row, loc, problem["msg"]))
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        name = err.args[0] if isinstance(err, KeyError) and err.args else None
        message = f"missing field {name!r}" if isinstance(err, KeyError) else str(err)
        errors.append(RowError(file, row, str(name) if name else None, message))
    return None


def _missing_line(missing: MissingFields, supply: Callable[[str], str] | None) -> str:
    """'item 'a': a score item needs 'scale': add columns ...', each missing field with how to give it."""
    if supply is None:
        return str(missing)
    if len(missing.fields) == 1:
        return f"{missing}: {supply(missing.fields[0])}"
    return f"{missing}. " + "; ".join(f"{name}: {supply(name)}" for name in missing.fields)


def load_faireval(path: str | Path | None = None, *, reverse: bool = False) -> Dataset:
    """FairEval / Vicuna-80 pairwise set: Assistant 1 = gpt35, Assistant 2 = vicuna (``reverse`` swaps)."""
    return _faireval(_source(Path(path) if path else _builtin_path("faireval")), reverse)


def _faireval(source: _Source, reverse: bool) -> Dataset:
    file, prefix = str(source.file), source.at()
    if prefix is None:
        raise DatasetError(f"{file}: expected a JSON array of FairEval questions")

    def items(errors: list[RowError], digest: Any) -> Iterator[EvalItem]:
        for i, row in enumerate(source.rows(prefix, digest)):
            def build(row: Any = row, i: int = i) -> dict[str, Any]:
                if not isinstance(row, Mapping):
                    raise TypeError("a FairEval row must be an object")
                label = row.get("human_results")
                if label is not None and label not in FAIREVAL_LABELS:
                    raise FieldError("human_results", f"{label!r} is not gpt35 / vicuna / tie")
                one, two = _field(row, "response.gpt35"), _field(row, "response.vicuna")
                systems = FAIREVAL_SYSTEMS
                human = {"label": FAIREVAL_LABELS[label]} if label else None
                if reverse:
                    one, two, systems = two, one, systems[::-1]
                    human = {"label": SWAP_LABEL[human["label"]]} if human else None
                # the systems by name, as any pairwise item may give them (meta.model_1 / meta.model_2): what
                # `jurygraph rank` ranks and the same-family warning of `jurygraph metaeval` compares judges with
                return {"id": str(row.get("question_id", i)), "task": "pairwise", "dataset": "faireval",
                        "question": _field(row, "question"), "response_1": one, "response_2": two, "human": human,
                        "meta": {"category": row.get("category"), "reversed": reverse,
                                 "model_1": systems[0], "model_2": systems[1]}}
            item = _build(errors, file, _row_label(i + 1, row, "question_id"), build)
            if item is not None:
                yield item
    return _streamed("faireval", TaskKind.PAIRWISE, items)


def load_summeval(path: str | Path | None = None, *, aspect: str = "coherence") -> Dataset:
    """SummEval (100 documents x 16 summaries, mteb/HF layout); one item per summary, judged on ``aspect``.

    ``human`` holds all four expert means; ``group`` is the document id (summary-level correlation).
    """
    return _summeval(_source(Path(path) if path else _builtin_path("summeval")), aspect)


def _summeval(source: _Source, aspect: str) -> Dataset:
    info = get_aspect("summeval", aspect)
    file, prefix = str(source.file), source.at("rows")
    if prefix is None:
        raise DatasetError(f"{file}: expected the HF rows layout ({{'rows': [...]}}) or a list of documents")
    dims = aspects_of("summeval")

    def items(errors: list[RowError], digest: Any) -> Iterator[EvalItem]:
        for d, entry in enumerate(source.rows(prefix, digest)):
            doc = entry.get("row", entry) if isinstance(entry, dict) else entry
            try:
                summaries = _field(doc, "machine_summaries")
                doc_id, text = _field(doc, "id"), _field(doc, "text")
                if not isinstance(summaries, list):
                    raise FieldError("machine_summaries", "must be a list of summaries")
                for dim in dims:
                    # every score list must align with the summaries, or no score of the document can be trusted
                    if dim in doc and (not isinstance(doc[dim], list) or len(doc[dim]) != len(summaries)):
                        got = len(doc[dim]) if isinstance(doc[dim], list) else type(doc[dim]).__name__
                        raise FieldError(dim, f"has {got} scores for {len(summaries)} summaries")
            except FieldError as err:
                errors.append(RowError(file, _row_label(d + 1, doc, "id"), err.field, f"document: {err}"))
                continue
            for s, summary in enumerate(summaries):
                def build(s: int = s, summary: str = summary, doc: dict[str, Any] = doc, doc_id: str = doc_id,
                          text: str = text) -> dict[str, Any]:
                    human = {dim: _number(doc[dim][s], f"{dim}[{s}]") for dim in dims if dim in doc}
                    return {"id": f"{doc_id}#{s}", "task": "score", "dataset": "summeval", "aspect": aspect,
                            "scale": info.scale.model_dump() if info else None, "source": text,
                            "response": summary, "group": doc_id, "human": human, "meta": {"summary_index": s}}
                item = _build(errors, file, f"{d + 1} (id {doc_id}#{s})", build)
                if item is not None:
                    yield item
    return _streamed("summeval", TaskKind.SCORE, items)


def load_topical_chat(path: str | Path | None = None, *, aspect: str = "naturalness") -> Dataset:
    """Topical-Chat USR turn-level set (60 contexts x 6 responses), judged on ``aspect``.

    ``source`` is the dialogue history, ``context`` the grounding fact; ``group`` numbers the context in
    order of first appearance (per-context averaging, DEBATE).
    """
    return _topical_chat(_source(Path(path) if path else _builtin_path("topical-chat")), aspect)


def _topical_chat(source: _Source, aspect: str) -> Dataset:
    info = get_aspect("topical-chat", aspect)
    file, prefix = str(source.file), source.at()
    if prefix is None:
        raise DatasetError(f"{file}: expected a JSON array of Topical-Chat items")

    def items(errors: list[RowError], digest: Any) -> Iterator[EvalItem]:
        contexts: dict[str, int] = {}  # each pass numbers the contexts afresh, in order of first appearance
        counts: dict[int, int] = {}
        for i, row in enumerate(source.rows(prefix, digest)):
            def build(row: Any = row, i: int = i) -> dict[str, Any]:
                source, response = _field(row, "source"), _field(row, "system_output")
                scores = row.get("scores", {})
                if not isinstance(scores, Mapping):
                    raise FieldError("scores", "must be an object of aspect -> score")
                human = {k: _number(v, f"scores.{k}") for k, v in scores.items()}
                # ids are numbered only once the row is known to be valid, so a bad row shifts no id
                ctx = contexts.setdefault(source, len(contexts))
                j = counts[ctx] = counts.get(ctx, -1) + 1
                return {"id": f"tc-{ctx:02d}-{j}", "task": "score", "dataset": "topical-chat", "aspect": aspect,
                        "scale": info.scale.model_dump() if info else None, "source": source,
                        "context": row.get("context", ""), "response": response,
                        "group": f"tc-{ctx:02d}", "human": human,
                        "meta": {"system_id": row.get("system_id"), "row": i}}
            item = _build(errors, file, i + 1, build)
            if item is not None:
                yield item
    return _streamed("topical-chat", TaskKind.SCORE, items)


# MT-Bench's human judgments (Zheng et al. 2023; ``lmsys/mt_bench_human_judgments`` on the Hugging Face hub, its
# "human" split): one row per vote, recognised from these fields
MT_BENCH_FIELDS = frozenset({"question_id", "model_a", "model_b", "winner", "judge", "conversation_a",
                             "conversation_b", "turn"})
# a vote as jurygraph's label; both of MT-Bench's ties are ties (the vote keeps its own spelling as "winner")
MT_BENCH_WINNERS = {"model_a": "1", "model_b": "2", "tie": "tie", "tie (bothbad)": "tie"}


def is_mt_bench(row: Any) -> bool:
    """Whether a row has MT-Bench's human-judgment fields."""
    return isinstance(row, Mapping) and set(row) >= MT_BENCH_FIELDS


def load_mt_bench(path: str | Path, *, reverse: bool = False, aspect: str | None = None) -> Dataset:
    """MT-Bench's human judgments, as a JSON array or JSONL file of its rows (one row per vote).

    One pairwise item per (question, pair of models, turn), holding every vote on it: ``human.votes`` (each
    ``{"judge", "label", "winner"}``, the label in the item's answer order), ``human.label`` the majority of the votes
    (absent when two labels share the most votes: split humans give no label, their votes still count for the
    agreement between humans). A tie is a tie (``tie`` and ``tie (bothbad)`` alike; the vote keeps which).
    Assistant 1 is the ``model_a`` of the pair's first row. ``messages`` is what both conversations begin with (the
    first question), ``messages_1``/``messages_2`` each model's continuation: at turn 1 its first answer; at turn 2
    its own first answer, the second question and its second answer (``turn`` = 2 is the answer judged), as
    MT-Bench's multi-turn judge prompt shows each assistant's whole conversation. ``reverse`` swaps the two
    conversations; ``aspect`` (``--aspect``) chooses the conversations' rubric (default helpfulness)."""
    return _mt_bench(_source(Path(path), lines=True), reverse, aspect)


def _turns(conversation: Any, turn: int, field: str) -> list[dict[str, Any]]:
    """A conversation's messages through its ``turn``-th assistant message, checked."""
    if not isinstance(conversation, list) or not conversation:
        raise FieldError(field, "must be a list of messages ({role, content})")
    kept, answers = [], 0
    for k, message in enumerate(conversation):
        if not isinstance(message, Mapping) or not isinstance(message.get("content"), str) \
                or message.get("role") not in ("system", "user", "assistant"):
            raise FieldError(f"{field}[{k}]", "must be a message {role: system/user/assistant, content: text}")
        kept.append({"role": message["role"], "content": message["content"]})
        answers += message["role"] == "assistant"
        if answers == turn:
            return kept
    raise FieldError(field, f"has {answers} assistant answers; turn {turn} needs {turn}")


def _mt_bench_vote(row: Any) -> tuple[tuple[Any, ...], str, dict[str, Any]]:
    """A row's (item key, model_a, vote in model_a-first order); a FieldError for a bad field."""
    if not isinstance(row, Mapping):
        raise FieldError("row", "an MT-Bench row must be an object")
    winner = _field(row, "winner")
    if winner not in MT_BENCH_WINNERS:
        raise FieldError("winner", f"{winner!r} is not one of {', '.join(MT_BENCH_WINNERS)}")
    turn = _field(row, "turn")
    if turn not in (1, 2) or isinstance(turn, bool):
        raise FieldError("turn", f"{turn!r} is not 1 or 2")
    model_a, model_b = _field(row, "model_a"), _field(row, "model_b")
    if not isinstance(model_a, str) or not isinstance(model_b, str) or not model_a or model_a == model_b:
        raise FieldError("model_b", "model_a and model_b must name two different models")
    for side in ("conversation_a", "conversation_b"):
        _turns(row.get(side), turn, side)
    judge = row.get("judge")
    judge = "/".join(map(str, judge)) if isinstance(judge, list) else str(judge)  # gpt4_pair: ["gpt-4", "pair-v2"]
    key = (str(_field(row, "question_id")), *sorted((model_a, model_b)), turn)
    return key, model_a, {"judge": judge, "label": MT_BENCH_WINNERS[winner], "winner": winner}


def majority(labels: Sequence[str]) -> str | None:
    """The most common label, None when two labels share the most votes (or there is none)."""
    counts = collections.Counter(labels).most_common()
    if not counts or (len(counts) > 1 and counts[0][1] == counts[1][1]):
        return None
    return counts[0][0]


def _mt_bench(source: _Source, reverse: bool, aspect: str | None = None) -> Dataset:
    """Read twice before it is a dataset: once for the votes (an item holds every vote on it, wherever they are in
    the file; only the votes are kept), then as any stream, each item built at its first row."""
    file, prefix = str(source.file), source.at()
    if prefix is None:
        raise DatasetError(f"{file}: expected a JSON array (or JSONL) of MT-Bench judgment rows")
    errors: list[RowError] = []
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    first: dict[int, dict[str, Any]] = {}  # each group by the number of its first row (the items' order)
    for i, row in enumerate(source.rows(prefix)):
        where = _row_label(i + 1, row, "question_id")
        try:
            key, model_a, vote = _mt_bench_vote(row)
        except FieldError as err:
            errors.append(RowError(file, where, err.field, str(err)))
            continue
        if key not in groups:
            groups[key] = first[i] = {"model_a": model_a, "where": where, "votes": []}
        group = groups[key]
        if model_a != group["model_a"]:  # the same pair the other way round
            vote = {**vote, "label": SWAP_LABEL[vote["label"]]}
        group["votes"].append(vote)
    del groups

    def items(errors: list[RowError], digest: Any) -> Iterator[EvalItem]:
        for i, row in enumerate(source.rows(prefix, digest)):
            if i not in first:
                continue

            def build(row: Mapping[str, Any] = row, votes: list[dict[str, Any]] = first[i]["votes"]) -> dict[str, Any]:
                turn = int(row["turn"])
                one, two = _turns(row["conversation_a"], turn, "conversation_a"), \
                    _turns(row["conversation_b"], turn, "conversation_b")
                human: dict[str, Any] = {"votes": votes}
                label = majority([vote["label"] for vote in votes])
                if label is not None:
                    human["label"] = label
                question = [m["content"] for m in one if m["role"] == "user"][-1]
                shared = 0  # the messages both conversations begin with (the first question): said once
                while shared < min(len(one), len(two)) - 1 and one[shared] == two[shared]:
                    shared += 1
                return {"id": f"{row['question_id']}-{row['model_a']}-vs-{row['model_b']}-t{turn}",
                        "task": "pairwise", "dataset": "mt-bench", "aspect": aspect, "question": question,
                        "messages": one[:shared] or None, "messages_1": one[shared:], "messages_2": two[shared:],
                        "turn": turn, "human": human, "meta": {"question_id": row["question_id"], "turn": turn,
                                                              "model_1": row["model_a"], "model_2": row["model_b"]}}
            item = _build(errors, file, first[i]["where"], build)
            if item is not None:
                yield _reversed(item) if reverse else item
    return _streamed("mt-bench", TaskKind.PAIRWISE, items, errors)


# a conversation rated on no scale of its own (a LangSmith run, an agent's thread) is rated 1-10, as MT-Bench's
# single-answer grading rates a conversation
CONVERSATION_SCALE = Scale(low=1, high=10)


def load_langsmith(path: str | Path, *, aspect: str | None = None, scale: Scale | None = None) -> Dataset:
    """A LangSmith run export (JSON array, JSONL or ``{"runs": [...]}``): one score item per trace, its conversation
    and steps (:mod:`jurygraph.running.langsmith_runs`), rated on ``scale`` (default 1-10)."""
    return _langsmith(_source(Path(path), lines=True), aspect, scale)


def _langsmith(source: _Source, aspect: str | None, scale: Scale | None) -> Dataset:
    """Read twice before it is a dataset: once for the runs' ids and parent links (which runs make a trace: only
    those are kept), then as any stream, each trace's runs held only until its last run is read, and its item
    yielded in the order of the traces' first runs, as :func:`traces` orders them."""
    file, prefix = str(source.file), source.at("runs")
    if prefix is None:
        raise DatasetError(f"{file}: expected a JSON array (or JSONL) of LangSmith runs, or {{'runs': [...]}}")
    errors: list[RowError] = []
    links = []  # each readable run's id and parent, and its row
    for i, run in enumerate(source.rows(prefix)):
        if is_langsmith_run(run):
            links.append({"id": run["id"], "parent_run_id": run.get("parent_run_id"), "row": i})
        else:
            errors.append(RowError(file, i + 1, None, "not a LangSmith run (it needs id, run_type, inputs)"))
    named = {str(link["id"]): link["row"] for link in links}  # a root is named by the row of its id
    plan: list[tuple[int, int, int]] = []  # each trace: the row naming it, its root's place in it, its last row
    trace_of: dict[int, int] = {}  # each readable row's trace
    for root, trace in traces(links).items():
        for link in trace:
            trace_of[link["row"]] = len(plan)
        plan.append((named[root], [str(link["id"]) for link in trace].index(root), trace[-1]["row"]))
    del links, named

    def items(errors: list[RowError], digest: Any) -> Iterator[EvalItem]:
        held: dict[int, list[Mapping[str, Any]]] = {}  # the traces being read
        done: set[int] = set()
        ready = 0  # the next trace to yield
        for i, run in enumerate(source.rows(prefix, digest)):
            if i not in trace_of:
                continue
            held.setdefault(trace_of[i], []).append(run)
            if i == plan[trace_of[i]][2]:
                done.add(trace_of[i])
            while ready in done:
                row, at, _ = plan[ready]
                trace = held.pop(ready)
                done.remove(ready)
                ready += 1

                def build(run: Mapping[str, Any] = trace[at], trace: list[Mapping[str, Any]] = trace) -> dict[str, Any]:
                    try:
                        fields = run_item(run, trace)
                    except RunFieldError as err:
                        raise FieldError(err.field, str(err)) from None
                    return {"task": TaskKind.SCORE.value, "dataset": "langsmith", "aspect": aspect,
                            "scale": (scale or CONVERSATION_SCALE).model_dump(), **fields}
                item = _build(errors, file, _row_label(row + 1, trace[at], "id"), build)
                if item is not None:
                    yield item
    return _streamed("langsmith", TaskKind.SCORE, items, errors)


def load_table(path: str | Path, *, task: TaskKind | str, mapping: Mapping[str, str] | None = None,
               defaults: Mapping[str, Any] | None = None, reverse: bool = False) -> Dataset:
    """A JSONL or CSV file, one item per row. ``mapping`` maps item fields to column names
    (e.g. ``{"question": "prompt", "response_1": "answer_a"}``); columns named like item fields map
    themselves (``scale_low``/``scale_high`` give the scale; a JSONL ``human`` object is taken as is).
    ``human.<key>`` targets fill human labels (numbers for score items; an empty cell is no label);
    ``defaults`` fills fields for every row (a row's own columns win; ``{"scale": {"low": 1, "high": 5}}`` is
    ``--scale 1-5``). ``reverse`` swaps the two answers of pairwise rows (their human labels and systems too;
    ``meta.reversed`` says so), as ``--reverse`` does for FairEval. A row an item cannot be made of is a
    :class:`RowError` saying which column, ``--map`` or ``--scale`` would give what it lacks.

    The file is streamed (:class:`Dataset`): read once here to validate, hash and count its rows, and again,
    row by row, each time the dataset is iterated."""
    file = Path(path)
    if not file.exists():
        raise DatasetError(f"{file}: no such file")
    kind = TaskKind(task).value
    if reverse and kind != TaskKind.PAIRWISE.value:
        raise DatasetError(f"{file}: --reverse swaps the two answers of pairwise items; this is a {kind} dataset")
    columns, recoded = _split_mapping(mapping or {})
    unknown = sorted(target for target in [*columns, *recoded] if not _mappable(target))
    if unknown:
        raise DatasetError(f"{file}: --map {unknown[0]}=...: {unknown[0]!r} is not an item field; --map targets: "
                           f"{', '.join(sorted(_ITEM_FIELDS))}, scale_low, scale_high, human.KEY, meta.KEY")

    def items(errors: list[RowError], digest: Any = None) -> Iterator[EvalItem]:
        for number, row in _rows(file, errors, digest):
            def build(row: Mapping[str, Any] = row, number: int = number) -> dict[str, Any]:
                return _table_row(row, number, kind, columns, recoded, defaults)

            def supply(name: str, row: Mapping[str, Any] = row) -> str:
                return _supply(name, row, columns)
            item = _build(errors, str(file), _row_label(number, row, columns.get("id", "id")), build, supply)
            if item is not None:
                yield _reversed(item) if reverse else item

    return _streamed(file.stem, TaskKind(task), items)


# the item fields a same-named column fills (human and meta only as objects); once, not per row: reading a
# pydantic model's fields costs ~10 µs
_ITEM_FIELDS = frozenset(EvalItem.model_fields) - {"human", "meta"}


def _mappable(target: str) -> bool:
    """A ``--map`` target an item has: a field, a scale bound, a human label or a meta key."""
    head, dot, rest = target.partition(".")
    return (head in ("human", "meta") and bool(dot and rest)) or (not dot and (
        target in _ITEM_FIELDS or target in ("scale_low", "scale_high")))


def _supply(name: str, row: Mapping[str, Any], columns: Mapping[str, str]) -> str:
    """How a table row would give an item the field ``name`` it lacks: the column that is empty, or the column,
    ``--map`` (or, for the scale, ``--scale``) to add."""
    if name == "scale":
        return ("add columns scale_low and scale_high, map yours with --map scale_low=COLUMN --map "
                "scale_high=COLUMN, or give every row one with --scale LOW-HIGH (e.g. --scale 1-5)")
    if name == "human.label" and name in columns:
        return f"recode the cell with --map 'human.label[{row.get(columns[name])}]=1' (or =2, =tie)"
    if name == "human.label":
        return "write it as 1, 2 or tie in the row"
    column = columns.get(name, name if name in row else None)
    if column is not None:
        how = f" (--map {name}={column})" if name in columns else ""
        return f"its column {column!r}{how} is empty in this row"
    return (f"add a column {name!r} or map one with --map {name}=COLUMN "
            f"(this row's columns: {', '.join(map(str, row)) or 'none'})")


def _reversed(item: EvalItem) -> EvalItem:
    swapped = item.swapped()
    return swapped.model_copy(update={"meta": {**swapped.meta, "reversed": True}})


def _table_row(row: Mapping[str, Any], number: int, task: str, columns: Mapping[str, str],
               recoded: Mapping[str, Mapping[str, str]], defaults: Mapping[str, Any] | None) -> dict[str, Any]:
    """An item's fields from one table row: mapped columns, same-named columns, the defaults."""
    data: dict[str, Any] = {"task": task, **(defaults or {})}
    for column, value in row.items():
        if column in columns.values():
            continue
        if column in _ITEM_FIELDS or column in ("scale_low", "scale_high") or (
                column in ("human", "meta") and isinstance(value, Mapping)):
            data[column] = value
    for target, column in columns.items():
        if column not in row:
            raise FieldError(column, f"missing field (--map {target}={column}); this row's columns: "
                                     f"{', '.join(map(str, row)) or 'none'}")
        _put(data, target, recoded.get(target, {}).get(str(row[column]), row[column]))
    data.setdefault("id", str(number))
    for name in _JSON_FIELDS:
        _parse_json_cell(data, name)
    if data["task"] == TaskKind.SCORE.value and isinstance(data.get("human"), dict):
        # an empty cell is no label (the item still loads; metaeval counts it as unlabelled)
        # a label that is not a number ("abc") is an error in the file, not a missing label
        # per-turn labels of a conversation (human.turns: {"2": 4}) are numbers too, checked per turn
        data["human"] = {k: _turn_numbers(v) if k == "turns" and isinstance(v, Mapping) else _number(v, f"human.{k}")
                         for k, v in data["human"].items() if v not in ("", None)} or None
    for name in ("low", "high"):
        value = data.pop(f"scale_{name}", None)
        if value not in ("", None):  # an empty cell gives no bound; a row's own wins over --scale's (a new dict:
            # the default is every row's)
            data["scale"] = {**(data.get("scale") or {}), name: _number(value, f"scale_{name}")}
    return data


# item fields that hold a conversation, steps or a reference trajectory: a CSV cell (or a JSONL string) holds them
# as JSON text
_JSON_FIELDS = ("messages", "messages_1", "messages_2", "steps", "steps_1", "steps_2", "reference")


def _parse_json_cell(data: dict[str, Any], name: str) -> None:
    value = data.get(name)
    if not isinstance(value, str):
        return
    if not value.strip():  # an empty cell: no conversation
        data.pop(name)
        return
    if name == "reference" and not value.lstrip().startswith("["):
        return  # a reference answer, as text
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as err:
        if name == "reference":
            return
        raise FieldError(name, f"is not JSON ({err.msg} at character {err.pos}); a conversation is a JSON list of "
                               "messages") from None
    if name != "reference" or (isinstance(parsed, list) and all(isinstance(m, dict) for m in parsed)):
        data[name] = parsed


def _turn_numbers(labels: Mapping[str, Any]) -> dict[str, Any]:
    return {turn: value if isinstance(value, Mapping) else _number(value, f"human.turns.{turn}")
            for turn, value in labels.items() if value not in ("", None)}


_VALUE_MAP = re.compile(r"^(?P<target>[^\[\]]+)\[(?P<value>[^\]]*)\]$")


def _split_mapping(mapping: Mapping[str, str]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """Column mappings (``question=prompt``) and value mappings (``human.label[gpt-4]=1``: a cell "gpt-4" of
    the column mapped to human.label becomes "1")."""
    columns: dict[str, str] = {}
    recoded: dict[str, dict[str, str]] = {}
    for target, source in mapping.items():
        match = _VALUE_MAP.match(target)
        if match:
            recoded.setdefault(match["target"], {})[match["value"]] = source
        else:
            columns[target] = source
    return columns, recoded


def _put(data: dict[str, Any], target: str, value: Any) -> None:
    head, _, rest = target.partition(".")
    if rest:
        data.setdefault(head, {})[rest] = value
    else:
        data[head] = value


def _decode(file: Path, raw: bytes, offset: int = 0, encoding: str = "utf-8-sig") -> str:
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as err:
        raise DatasetError(f"{file}: not UTF-8 text (byte {offset + err.start}: {raw[err.start:err.start + 1]!r}); "
                           "save it as UTF-8") from None


def _lines(file: Path, digest: Any = None) -> Iterator[str]:
    """The file's text line by line (its bytes, text and list of lines were each the size of the file at once:
    a 20,000-item JSONL is ~60 MB); ``digest`` (a hashlib object) is fed every byte on the way. A line is
    decoded alone: a newline byte never falls inside a UTF-8 character, so an error's byte offset is exact."""
    offset = 0
    with file.open("rb") as handle:
        for raw in handle:
            if digest is not None:
                digest.update(raw)
            yield _decode(file, raw, offset, "utf-8-sig" if offset == 0 else "utf-8")
            offset += len(raw)


def _rows(file: Path, errors: list[RowError], digest: Any = None) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """(line number, row) of a CSV or JSONL file, read as a stream; a row that is not one goes to ``errors``."""
    if file.suffix.lower() == ".csv":
        reader = csv.DictReader(_lines(file, digest))
        for row in reader:
            # line_num: the file line where the row ends (quoted cells may span lines; line 1 is the header)
            extra = row.pop(None, None)  # type: ignore[call-overload]
            if extra:
                errors.append(RowError(str(file), reader.line_num, None,
                                       f"{len(extra)} more cells than the header has columns"))
                continue
            yield reader.line_num, row
        return
    for number, line in enumerate(_lines(file, digest), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            errors.append(RowError(str(file), number, None, f"not valid JSON ({err.msg})"))
            continue
        if not isinstance(row, dict):
            errors.append(RowError(str(file), number, None, "a JSONL row must be an object"))
            continue
        yield number, row


def load_dataset(name_or_path: str | Path, *, aspect: str | None = None, task: str | None = None,
                 mapping: Mapping[str, str] | None = None, reverse: bool = False,
                 scale: Scale | None = None) -> Dataset:
    """A built-in benchmark by name, a file in one of their layouts (or MT-Bench's human judgments), a LangSmith run
    export, or a JSONL/CSV table (with ``task``). ``scale`` (``--scale``): the score items' scale where the data
    gives none: a score table's rows without ``scale_low``/``scale_high``, a LangSmith export's runs (default
    1-10); refused for data whose items have their own."""
    key = str(name_or_path)
    dataset = _load(key, aspect, task, mapping, reverse, scale)
    # a dataset's items share one task kind; a streamed table knows its kind without reading a row again
    if aspect and TaskKind.PAIRWISE.value in dataset.tasks and not dataset.conversational:
        # FairEval-style preferences between texts have no aspects: an --aspect would be silently ignored (pairwise
        # conversations have: it chooses their rubric)
        raise DatasetError(f"{name_or_path}: --aspect {aspect} applies to score datasets and to conversations (it "
                           "chooses their rubric); this one holds pairwise preferences between texts")
    return dataset


def _load(key: str, aspect: str | None, task: str | None, mapping: Mapping[str, str] | None,
          reverse: bool, scale: Scale | None = None) -> Dataset:
    kind = canonical(key)
    path = Path(key)
    table = kind is None and path.suffix.lower() in (".jsonl", ".csv")
    if kind is not None:
        if scale is not None:  # said before the packaged file is read
            raise DatasetError(_scale_refused(key, scale))
        return _load_kind(kind, _source(_builtin_path(kind)), aspect, reverse)
    layout = _jsonl_layout(path) if path.suffix.lower() == ".jsonl" else None
    if layout is not None:  # a layout whose rows are grouped into items (MT-Bench's votes, LangSmith's traces)
        return _load_kind(layout, _source(path, lines=True), aspect, reverse, scale)
    if table:
        if task is None:
            raise DatasetError(f"{path}: a JSONL/CSV dataset needs --task (pairwise, score or choice)")
        if scale is not None and task != TaskKind.SCORE.value:
            raise DatasetError(_scale_refused(key, scale))
        defaults: dict[str, Any] = {"aspect": aspect} if aspect else {}
        if scale is not None:
            defaults["scale"] = {"low": scale.low, "high": scale.high}
        return load_table(path, task=task, mapping=mapping, defaults=defaults or None, reverse=reverse)
    source = _source(path)  # the layout from the document's first events; its rows are read as the dataset loads
    return _load_kind(_sniff(source), source, aspect, reverse, scale)


def _scale_refused(key: str, scale: Scale) -> str:
    return (f"{key}: --scale {scale} gives the rows of a JSONL/CSV score table (--task score) their scale, as it does "
            "a LangSmith export's runs and --from-threads' threads; this dataset's items have theirs")


def _jsonl_layout(path: Path) -> str | None:
    """The layout a JSONL file's first row names (``mt-bench``), or None for a plain table."""
    try:
        with path.open("rb") as handle:
            first = next((line for line in handle if line.strip()), b"")
        row = json.loads(first.decode("utf-8-sig")) if first else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None  # the table reader reports it, naming the line
    return "mt-bench" if is_mt_bench(row) else "langsmith" if is_langsmith_run(row) else None


def _load_kind(kind: str, source: _Source, aspect: str | None, reverse: bool, scale: Scale | None = None) -> Dataset:
    if kind == "langsmith" and not reverse:
        return _langsmith(source, aspect, scale)
    if scale is not None:
        raise DatasetError(_scale_refused(str(source.file), scale))
    if kind == "faireval":
        return _faireval(source, reverse)
    if kind == "mt-bench":
        return _mt_bench(source, reverse, aspect)
    if reverse:  # a score dataset has one answer per item: nothing to swap, and ignoring it would mislead
        raise DatasetError(f"{source.file}: --reverse swaps the two answers of pairwise items; {kind} rates single "
                           "texts")
    if kind == "summeval":
        return _summeval(source, aspect or "coherence")
    return _topical_chat(source, aspect or "naturalness")


def _sniff(source: _Source) -> str:
    """The layout, from the document's first events: its top-level key "rows" or "runs", or its first row."""
    shape, path = source.shape, source.file
    assert shape is not None  # a JSON document
    if shape.kind == "object" and shape.key == "rows":
        return "summeval"
    if shape.kind == "object" and shape.key == "runs" and shape.key_array:
        return "langsmith"
    if shape.kind == "array" and isinstance(shape.first, dict):
        first = shape.first
        if is_mt_bench(first):  # before FairEval: its rows have a question_id too
            return "mt-bench"
        if is_langsmith_run(first):
            return "langsmith"
        if "human_results" in first or "question_id" in first:
            return "faireval"
        if "system_output" in first:
            return "topical-chat"
        if "machine_summaries" in first:
            return "summeval"
    raise DatasetError(f"{path}: not a FairEval, SummEval, Topical-Chat, MT-Bench or LangSmith-export layout; use "
                       ".jsonl/.csv with a mapping")
