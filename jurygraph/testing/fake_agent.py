"""A scripted chat model for LangGraph agents (tests, notebooks): it answers with tool calls as its script says.

``FakeAgentModel(act=...)``: ``act(messages)`` returns the next reply, an ``AIMessage`` (with ``tool_calls`` to call
tools) or a text; ``bind_tools`` returns the model itself, since the script decides which tools it calls. Every call
is in ``calls`` (the messages it was given), so a test can say what the agent saw.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, PrivateAttr

Policy = Callable[[Sequence[BaseMessage]], AIMessage | str]


class FakeAgentModel(BaseChatModel):
    """A chat model whose replies (tool calls included) come from a function of the conversation so far."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    act: Policy
    model_name: str = "fake-agent"
    _calls: list[tuple[BaseMessage, ...]] = PrivateAttr(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "jurygraph-fake-agent"

    @property
    def calls(self) -> list[tuple[BaseMessage, ...]]:
        with self._lock:
            return list(self._calls)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> FakeAgentModel:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        with self._lock:
            self._calls.append(tuple(messages))
        reply = self.act(messages)
        message = AIMessage(content=reply) if isinstance(reply, str) else reply
        return ChatResult(generations=[ChatGeneration(message=message)])
