"""Deterministic fake chat models for tests, notebooks and examples (no network, no keys).

:class:`FakeJudge` answers from the prompt with a function you give it (or a fixed script) and records
every call, thread- and asyncio-safe, so a test can assert exactly what each agent saw. :class:`FakeAgentModel`
plays an agent's model instead: its script answers with tool calls (``jurygraph.testing.fake_agent``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import ConfigDict, Field, PrivateAttr

from jurygraph.testing.fake_agent import FakeAgentModel

__all__ = ["Call", "FakeAgentModel", "FakeJudge", "Responder", "pairwise_reply"]

Responder = Callable[[str, Sequence[BaseMessage]], str]


@dataclass(frozen=True)
class Call:
    """One recorded call: the messages sent, the prompt text (last message), the keyword parameters."""

    messages: tuple[BaseMessage, ...]
    params: dict[str, Any]

    @property
    def prompt(self) -> str:
        return self.messages[-1].text if self.messages else ""

    @property
    def text(self) -> str:
        """All messages of the call, joined."""
        return "\n".join(m.text for m in self.messages)


class FakeJudge(BaseChatModel):
    """A scripted chat model.

    ``respond(prompt, messages) -> str`` computes each reply; ``script`` instead gives replies in
    order (cycling is an error: a test should know how many calls it makes). ``fail_when(prompt)``
    raising lets a test make a call fail, e.g. to test resuming. Every call is in ``calls``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    respond: Responder | None = None
    script: list[str] = Field(default_factory=list)
    fail_when: Callable[[str], bool] | None = None
    model_name: str = "fake-judge"
    # call parameters protocols set per request (None = the provider's default): accepted, not used for replies
    temperature: float | None = 0.0
    top_p: float | None = None
    max_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tokens_per_word: float = 1.0
    jurygraph_structured: bool = False
    jurygraph_native_n: bool = False
    _calls: list[Call] = PrivateAttr(default_factory=list)
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @property
    def _llm_type(self) -> str:
        return "jurygraph-fake-judge"

    @property
    def calls(self) -> list[Call]:
        with self._lock:
            return list(self._calls)

    def prompts(self, containing: str | None = None) -> list[str]:
        """The prompt text of every call, optionally only those containing a string."""
        return [c.prompt for c in self.calls if containing is None or containing in c.prompt]

    def reset(self) -> None:
        with self._lock:
            self._calls.clear()

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        prompt = messages[-1].text if messages else ""
        with self._lock:
            index = len(self._calls)
            self._calls.append(Call(tuple(messages), dict(kwargs)))
        if self.fail_when is not None and self.fail_when(prompt):
            raise RuntimeError(f"{self.model_name}: scripted failure")
        n = int(kwargs.get("n", 1))
        texts = [self._reply(prompt, messages, index) for _ in range(n)]
        words = sum(len(m.text.split()) for m in messages)
        # like langchain-openai, n choices of one request each carry the whole response's usage
        out_words = sum(len(t.split()) for t in texts)
        generations = [
            ChatGeneration(message=AIMessage(
                content=text,
                usage_metadata={"input_tokens": int(words * self.tokens_per_word),
                                "output_tokens": int(out_words * self.tokens_per_word),
                                "total_tokens": int((words + out_words) * self.tokens_per_word)},
                response_metadata={"model_name": self.model_name},
            ))
            for text in texts
        ]
        return ChatResult(generations=generations)

    def _reply(self, prompt: str, messages: Sequence[BaseMessage], index: int) -> str:
        if self.respond is not None:
            return self.respond(prompt, messages)
        if index >= len(self.script):
            raise IndexError(f"{self.model_name}: script has {len(self.script)} replies, call {index + 1} made")
        return self.script[index]


def pairwise_reply(score_1: float, score_2: float, evidence: str = "Both answers were compared.") -> str:
    """A reply in ChatEval's final answer form."""
    return (f"Evaluation evidence: {evidence}\nThe score of Assistant 1: {score_1:g}\n"
            f"The score of Assistant 2: {score_2:g}")
