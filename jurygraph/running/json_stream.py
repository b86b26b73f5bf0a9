"""A JSON document read as a stream (ijson): its shape from its first events, its rows one at a time.

A benchmark file in one of the JSON layouts (FairEval's array, SummEval's ``{"rows": [...]}``, a LangSmith export's
``{"runs": [...]}``) is read incrementally, so that loading a million rows never holds them all: :func:`peek` reads
only as far as the layout needs (the top-level keys up to the one asked for, an array's first element), and
:func:`rows` parses the whole file chunk by chunk, yielding each row as it closes and feeding a hash every byte.
ijson uses its C backend (yajl2_c) when it is installed and its pure-Python one when it is not.

A document that is not valid JSON raises :class:`DocumentError` naming the line and column (and the byte, for text
that is not UTF-8) where the parser found it invalid, and how many rows came before: the parser does not say where,
so the file is parsed again, events only, up to the failing chunk and then through it one byte at a time.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ijson

__all__ = ["DocumentError", "Shape", "peek", "rows"]

CHUNK = 64 * 1024  # bytes handed to the parser at a time
_BOM = b"\xef\xbb\xbf"  # skipped, as the JSONL reader's utf-8-sig does
_CONTINUATION = bytes(range(0x80, 0xC0))  # the bytes of a UTF-8 character after its first
_backend: Any = ijson  # the best backend ijson found (tests swap in the Python one)


class DocumentError(ValueError):
    """The document cannot be parsed: ``problem`` names where (not the file: the caller does), ``advice`` what to do."""

    def __init__(self, problem: str, advice: str = "") -> None:
        super().__init__(f"{problem}; {advice}" if advice else problem)
        self.problem, self.advice = problem, advice


@dataclass(frozen=True)
class Shape:
    """What a document's first events say: ``kind`` "array", "object" or "value"; an array's ``first`` element (None
    when it is empty, ``empty`` says so); an object's first top-level key among those asked for (``key``) and
    whether its value is an array (``key_array``)."""

    kind: str
    first: Any = None
    empty: bool = True
    key: str | None = None
    key_array: bool = False


def peek(file: Path, keys: tuple[str, ...] = ()) -> Shape:
    """The document's shape, reading no further than it needs: an array's first element, an object's top-level keys
    up to the first of ``keys`` (the whole document only when it has none of them)."""
    sink = ijson.sendable_list()
    events = iter(_events(file, _backend.parse_coro(sink, use_float=True), sink))
    _, event, _ = next(events, ("", "end", None))
    if event == "start_array":
        prefix, event, value = next(events)
        if event == "end_array" and prefix == "":
            return Shape("array")
        builder = ijson.ObjectBuilder()
        while True:  # the first element's events, until it closes
            builder.event(event, value)
            if prefix == "item" and event not in ("start_map", "start_array", "map_key"):
                return Shape("array", builder.value, empty=False)
            prefix, event, value = next(events)
    if event != "start_map":
        return Shape("value")
    for prefix, event, value in events:
        if prefix == "" and event == "map_key" and value in keys:
            _, opened, _ = next(events)
            return Shape("object", key=value, key_array=opened == "start_array")
    return Shape("object")


def rows(file: Path, prefix: str, digest: Any = None) -> Iterator[Any]:
    """The values at ``prefix`` (``"item"``: a top-level array's elements; ``"rows.item"``: those of the array under
    the key "rows"), each as soon as the parser closes it; ``digest`` (a hashlib object) is fed every byte of the
    file. A syntax error anywhere raises :class:`DocumentError` when the parser reaches it, after the rows before it."""
    sink = ijson.sendable_list()
    count = 0
    try:
        for row in _events(file, _backend.items_coro(sink, prefix, use_float=True), sink, digest):
            count += 1
            yield row
    except DocumentError as err:
        raise DocumentError(f"{err.problem}{f', after row {count}' if count else ''}", err.advice) from None


def _events(file: Path, parser: Any, sink: list[Any], digest: Any = None) -> Iterator[Any]:
    """What ``parser`` (an ijson coroutine writing to ``sink``) makes of the file, fed one chunk at a time."""
    offset = 0
    try:
        with file.open("rb") as handle:
            while chunk := handle.read(CHUNK):
                if digest is not None:
                    digest.update(chunk)
                parser.send(chunk[len(_BOM):] if offset == 0 and chunk.startswith(_BOM) else chunk)
                offset += len(chunk)
                yield from sink
                del sink[:]
        parser.close()
    except (ijson.JSONError, UnicodeDecodeError) as err:
        failure = err
    else:
        yield from sink
        return
    finally:  # also when the reader stops early (a peek, a dataset's head)
        _discard(parser)
    yield from sink  # what closed before the error, in the chunk that failed
    raise DocumentError(*_where(file, offset, failure))


def _discard(parser: Any) -> None:
    """Closes a parser left unfinished, so that its complaint (the document is incomplete) is not reported when the
    garbage collector closes it."""
    with contextlib.suppress(Exception):
        parser.close()


def _where(file: Path, failed: int, err: Exception) -> tuple[str, str]:
    """('not valid JSON at line L, column C (reason)', advice) for a parser that failed on the chunk starting at
    ``failed``."""
    if file.stat().st_size == 0:
        return "not valid JSON (the file is empty)", ""
    at, line, column = _locate(file, failed)
    if isinstance(err, UnicodeDecodeError) or "UTF8" in str(err) or "utf-8" in str(err):
        return f"not UTF-8 text (byte {at}, line {line})", "save it as UTF-8"
    if at >= file.stat().st_size:  # the parser wanted more
        return f"not valid JSON at line {line}, column {column} (the document ends before it is complete)", \
            "a truncated file?"
    return f"not valid JSON at line {line}, column {column} ({_reason(err)})", ""


def _reason(err: Exception) -> str:
    """The parser's own words, without the excerpt yajl draws under them nor the Python backend's offset (the line
    and column say where)."""
    first = re.split(r"\\n|\n", str(err).strip(), maxsplit=1)[0]
    first = re.sub(r"^b['\"]", "", first).strip().rstrip(".")
    first = re.sub(r" at \d+$", "", first)
    return "a value that is not JSON" if first == "Incomplete JSON content" else first


def _locate(file: Path, failed: int) -> tuple[int, int, int]:
    """(byte offset, line, column) where the parser finds the document invalid: parsed again up to the chunk that
    failed, then through it one byte at a time (the end of the file when it fails only there, truncated). Nothing is
    kept but the lines counted on the way, so a file of any size is located in constant memory."""
    sink = ijson.sendable_list()
    parser = _backend.basic_parse_coro(sink)
    line, column = 1, 0  # the characters of the current line fed so far

    def feed(data: bytes) -> None:
        nonlocal line, column
        parser.send(data)
        del sink[:]
        if newlines := data.count(b"\n"):
            line += newlines
            data, column = data[data.rindex(b"\n") + 1:], 0
        column += len(data.translate(None, _CONTINUATION))

    with file.open("rb") as handle:
        offset = len(_BOM) if handle.read(len(_BOM)) == _BOM else handle.seek(0)
        try:
            while offset < failed and (chunk := handle.read(min(CHUNK, failed - offset))):
                feed(chunk)
                offset += len(chunk)
            for byte in iter(lambda: handle.read(1), b""):
                if offset >= failed + CHUNK:
                    break
                feed(byte)
                offset += 1
        except (ijson.JSONError, UnicodeDecodeError):
            return offset, line, column + 1  # the byte that failed, not yet counted
        finally:
            _discard(parser)
    return offset, line, column + 1  # the end: the parser wanted more
