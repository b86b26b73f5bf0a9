"""Conversations as items: OpenAI-style message lists (tool calls and tool results included).

A :class:`Message` is what OpenAI's chat API takes (``role``, ``content``, ``tool_calls``, ``tool_call_id``,
``name``); a :class:`ToolCall` accepts OpenAI's nested form (``{"id", "type": "function", "function": {"name",
"arguments": "<json>"}}``) and LangChain's flat one (``{"name", "args", "id"}``), and LangChain message objects
are read as the message they stand for. :func:`check_messages` says what is wrong with a list, naming the item,
the field and the message's index.

An *assistant turn* is the run of assistant and tool messages between two user messages (the assistant's reply to
one user message, with the tools it called): MT-Bench's turns and an agent's answer to one request alike.
``EvalItem.turn`` counts them from 1.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Role = Literal["system", "user", "assistant", "tool"]

# other names of a role: LangChain's message types, OpenAI's newer name for a system message
ROLE_ALIASES: dict[str, str] = {"human": "user", "ai": "assistant", "developer": "system"}

# keys OpenAI and LangChain put on a message that say nothing about the conversation: dropped on input
_METADATA_KEYS = frozenset({"id", "response_metadata", "usage_metadata", "additional_kwargs", "annotations",
                            "example", "status", "artifact", "lc_attributes"})
# keys that are dropped when empty and refused otherwise (jurygraph cannot render them)
_EMPTY_ONLY_KEYS = frozenset({"audio", "function_call", "invalid_tool_calls"})


class ToolCall(BaseModel):
    """One tool call an assistant message makes: its id (answered by a tool message), the tool and its
    arguments."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str | None = None
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _either_shape(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        data = dict(value)
        function = data.pop("function", None)
        kind = data.pop("type", None)
        if kind not in (None, "function", "tool_call"):
            raise ValueError(f"tool call of type {kind!r}: only function tool calls are supported")
        if isinstance(function, dict):  # OpenAI: {"id", "type": "function", "function": {"name", "arguments"}}
            data.setdefault("name", function.get("name"))
            data.setdefault("arguments", function.get("arguments"))
        if "args" in data:  # LangChain: {"name", "args", "id"}
            data.setdefault("arguments", data.pop("args"))
        arguments = data.get("arguments")
        if isinstance(arguments, str):
            try:
                data["arguments"] = json.loads(arguments) if arguments.strip() else {}
            except json.JSONDecodeError as error:
                raise ValueError(f"tool call {data.get('name')!r}: its arguments are not JSON ({error.msg}): "
                                 f"{arguments[:80]!r}") from None
            if not isinstance(data["arguments"], dict):
                raise ValueError(f"tool call {data.get('name')!r}: its arguments must be a JSON object, not "
                                 f"{arguments[:80]!r}")
        elif arguments is None:
            data.pop("arguments", None)
        return data

    def openai(self) -> dict[str, Any]:
        """The call in OpenAI's nested form (arguments as JSON text)."""
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)}}


class Message(BaseModel):
    """One message of a conversation, in OpenAI's chat format.

    ``content`` is text, a list of content parts (``{"type": "text", "text": ...}``, ``{"type": "image_url",
    ...}``), or None when an assistant message only calls tools.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Role
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    name: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, value: Any) -> Any:
        if _is_langchain_message(value):
            value = _from_langchain(value)
        if not isinstance(value, dict):
            return value
        data = dict(value)
        if "role" not in data and isinstance(data.get("type"), str):
            data["role"] = data["type"]  # LangChain's dict form names the role "type"
        data.pop("type", None)
        if isinstance(data.get("role"), str):
            data["role"] = ROLE_ALIASES.get(data["role"], data["role"])
        for key in _METADATA_KEYS & data.keys():
            del data[key]
        for key in _EMPTY_ONLY_KEYS & data.keys():
            if data[key]:
                raise ValueError(f"message key {key!r} is not supported (it holds {str(data[key])[:80]!r})")
            del data[key]
        refusal = data.pop("refusal", None)
        if refusal:
            if data.get("content"):
                raise ValueError("a message with both content and a refusal is not supported")
            data["content"] = refusal  # OpenAI puts a refusal beside a null content: it is what the model said
        if data.get("tool_calls") == []:
            data["tool_calls"] = None
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Message:
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError(f"a {self.role} message needs content (only an assistant message that calls tools "
                             "may have none)")
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"a {self.role} message cannot call tools (only an assistant message can)")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs 'tool_call_id' (the id of the tool call it answers)")
        if isinstance(self.content, list):
            for part in self.content:
                if not isinstance(part.get("type"), str):
                    raise ValueError(f"content part without a 'type': {str(part)[:80]!r}")
        return self

    @property
    def text(self) -> str:
        """The message's text: its content, with the text parts of a list joined and other parts named."""
        return content_text(self.content)


def content_text(content: str | list[dict[str, Any]] | None) -> str:
    """Text of a message content: a string as is; a list's text parts joined by a blank line, any other part
    as ``[<type>]`` (an image is said, not dropped); None as ''."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = [str(part.get("text", "")) if part.get("type") == "text" else f"[{part.get('type')}]"
             for part in content]
    return "\n\n".join(parts)


def _is_langchain_message(value: Any) -> bool:
    try:
        from langchain_core.messages import BaseMessage
    except ImportError:  # pragma: no cover - langchain-core is a dependency
        return False
    return isinstance(value, BaseMessage)


def _from_langchain(message: Any) -> dict[str, Any]:
    """A LangChain message object as an OpenAI-style message dict."""
    data: dict[str, Any] = {"role": message.type, "content": message.content}
    if message.type == "ai":
        if getattr(message, "invalid_tool_calls", None):
            raise ValueError(f"an AI message with unreadable tool calls: {message.invalid_tool_calls!r}"[:200])
        data["tool_calls"] = [dict(call) for call in message.tool_calls] or None
        if data["tool_calls"] and not data["content"]:
            data["content"] = None
    elif message.type == "tool":
        data["tool_call_id"] = message.tool_call_id
    elif message.type not in ("human", "system"):
        raise ValueError(f"a LangChain message of type {message.type!r} is not supported "
                         "(human, ai, system and tool are)")
    if message.name:
        data["name"] = message.name
    return data


def parse_messages(value: Iterable[Any], *, item: str, field: str = "messages") -> list[Message]:
    """Read a list of messages (dicts, :class:`Message`\\ s or LangChain messages), raising a ValueError that
    names the item, the field and the index of the first message that is not one."""
    if isinstance(value, str | bytes | dict):
        raise ValueError(f"item {item!r}: {field} must be a list of messages, not {type(value).__name__}")
    messages = []
    for index, raw in enumerate(value):
        try:
            messages.append(raw if isinstance(raw, Message) else Message.model_validate(raw))
        except ValueError as error:
            raise ValueError(f"item {item!r}: {field}[{index}]: {_reason(error)}") from None
    return messages


def _reason(error: ValueError) -> str:
    errors = getattr(error, "errors", None)
    if callable(errors):
        first = errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        message = str(first.get("msg", error)).removeprefix("Value error, ")
        return f"{where}: {message}" if where else message
    return str(error)


def check_messages(messages: Sequence[Message], *, item: str, field: str = "messages",
                   prefix: Sequence[Message] = ()) -> None:
    """Raise a ValueError naming the item, the field and the message index when the list is not a conversation:
    empty, or a tool message that answers no tool call made before it (in ``prefix`` or earlier in the list)."""
    if not messages:
        raise ValueError(f"item {item!r}: {field} is empty")
    called: set[str] = {call.id for message in prefix for call in message.tool_calls or () if call.id}
    for index, message in enumerate(messages):
        if message.role == "tool" and message.tool_call_id not in called:
            raise ValueError(f"item {item!r}: {field}[{index}]: a tool message answers tool call "
                             f"{message.tool_call_id!r}, which no earlier assistant message made")
        called.update(call.id for call in message.tool_calls or () if call.id)


def assistant_turns(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """The assistant turns of a conversation, as ``(start, end)`` index ranges (end exclusive): each run of
    assistant and tool messages between two user (or system) messages that holds an assistant message."""
    turns: list[tuple[int, int]] = []
    start: int | None = None
    for index, message in enumerate([*messages, None]):
        if message is not None and message.role in ("assistant", "tool"):
            start = index if start is None else start
            continue
        if start is not None and any(m.role == "assistant" for m in messages[start:index]):
            turns.append((start, index))
        start = None
    return turns


def first_user_text(messages: Sequence[Message]) -> str | None:
    """The text of the first user message (what the conversation is about), or None when there is none."""
    return next((m.text for m in messages if m.role == "user"), None)
