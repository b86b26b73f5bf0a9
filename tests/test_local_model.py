"""The embedded model: its LangChain wrapper driven by a stand-in for llama.cpp (grammar-bounded judgments,
streaming from one thread, usage); the real model for one short call in a child process; and the one-line
failure when llama.cpp crashes."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from jurygraph import EvalItem, JuryContext, create_chateval, local_model, verdict_of
from jurygraph.cli import main
from jurygraph.extraction import AnswerForm
from jurygraph.items import Scale, TaskKind
from jurygraph.local_model import LocalChatModel, load_local_model, local_model_available

SEGFAULT = "import ctypes; ctypes.string_at(0)"  # a real SIGSEGV in the child, as a bad llama.cpp build gives


class StandIn:
    """Answers like llama-cpp-python's create_chat_completion and records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.stream_threads: list[set[threading.Thread]] = []  # per stream: the threads that advanced it

    def tokenize(self, data: bytes, add_bos: bool = False) -> list[int]:
        return list(range(len(data.split())))

    def create_chat_completion(self, messages: list[dict[str, str]], **kwargs: Any) -> Any:
        self.calls.append({"messages": messages, **kwargs})
        if kwargs.get("response_format"):
            # a grammar-constrained reply may hold a raw newline inside a string: valid for the grammar
            text = '{ "evidence": "line one\nline two", "score_assistant_1": 3, "score_assistant_2": 9 }'
        else:
            text = "I lean to the second answer."
        if kwargs.get("stream"):
            return self._stream(text)
        return {"choices": [{"message": {"content": text}}],
                "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}}

    def _stream(self, text: str) -> Any:
        threads: set[threading.Thread] = set()  # the Thread objects: idents are reused once a thread ends
        self.stream_threads.append(threads)
        for word in text.split(" "):
            threads.add(threading.current_thread())
            yield {"choices": [{"delta": {"content": word + " "}}]}


class ThreadPerTask(concurrent.futures.ThreadPoolExecutor):
    """An executor that runs every task in a new thread: a stream advanced task by task would hop threads."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as err:
                future.set_exception(err)

        threading.Thread(target=run).start()
        return future


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


def test_a_chateval_run_on_the_wrapper_streams_from_one_thread() -> None:
    stand_in = StandIn()
    model = model_with(stand_in)
    item = EvalItem(id="q", task="pairwise", question="Q", response_1="a", response_2="b")
    graph = create_chateval().compile()

    async def stream() -> tuple[list[str], dict[str, Any]]:
        asyncio.get_running_loop().set_default_executor(ThreadPerTask())
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
    # each stream runs start to end in one worker thread, so its call lock is released by the thread that took it
    assert len(stand_in.stream_threads) == 4 and all(len(t) == 1 for t in stand_in.stream_threads)
    assert final["usage"]["Critic"]["input_tokens"] > 0


def test_without_the_extra_the_message_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("jurygraph.local_model.local_model_available", lambda: False)
    with pytest.raises(ModuleNotFoundError, match=r"GGML_NATIVE=OFF\" pip install --no-cache-dir 'jurygraph\[local\]'"):
        load_local_model()
    with pytest.raises(ValueError, match="not 'llama-70b'"):
        load_local_model("llama-70b")


@pytest.mark.skipif(not local_model_available(), reason="the local extra is not installed: pip install -e '.[local]'")
def test_the_embedded_model_answers_one_short_call_in_a_child_process() -> None:
    # a child process, so that a llama.cpp crash fails this test with the signal named instead of killing pytest
    code = """
import json
from langchain_core.messages import HumanMessage
from jurygraph.local_model import load_local_model
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


def test_a_crash_in_the_probe_is_one_line_naming_the_signal_and_the_portable_rebuild() -> None:
    message = local_model._probe(SEGFAULT, "/nonexistent.gguf")
    assert message is not None and "\n" not in message
    assert "(SIGSEGV)" in message and local_model.PORTABLE_REINSTALL in message
    failed = local_model._probe("raise SystemExit('no such weights')", "/nonexistent.gguf")
    assert failed is not None and "(no such weights)" in failed
    assert local_model._probe("import sys; assert sys.argv[1] == '/w.gguf'", "/w.gguf") is None


@pytest.fixture
def crashing_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The embedded model 'installed', with a probe that dies of SIGSEGV as a native build does on an AMX VM."""
    weights = tmp_path / "model.gguf"
    weights.write_bytes(b"GGUF")
    monkeypatch.setattr(local_model, "local_model_available", lambda: True)
    monkeypatch.setattr("jurygraph.demo.local_model_available", lambda: True)
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
