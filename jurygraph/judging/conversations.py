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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
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
    ...}``), or None when an assistant message only calls tools (whichever form said so: None, ``""`` or ``[]``).
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
        if data.get("tool_calls") and data.get("content") in ("", []):
            # a message that only calls tools says nothing: LangChain's dict form (and some servers) write "" or
            # [] where OpenAI and LangChain's objects say None; one form, so equal messages compare equal
            data["content"] = None
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
    elif message.type == "tool":
        data["tool_call_id"] = message.tool_call_id
    elif message.type not in ("human", "system"):
        raise ValueError(f"a LangChain message of type {message.type!r} is not supported "
                         "(human, ai, system and tool are)")
    if message.name:
        data["name"] = message.name
    return data


def parse_messages(value: Iterable[Any], *, item: str | None, field: str = "messages") -> list[Message]:
    """Read a list of messages (dicts, :class:`Message`\\ s or LangChain messages), raising a ValueError that
    names the item (when there is one: the trajectory match reads two lists of no item), the field and the index of
    the first message that is not one."""
    where = f"item {item!r}: {field}" if item is not None else field
    if isinstance(value, str | bytes | dict):
        raise ValueError(f"{where} must be a list of messages, not {type(value).__name__}")
    messages = []
    for index, raw in enumerate(value):
        try:
            messages.append(raw if isinstance(raw, Message) else Message.model_validate(raw))
        except ValueError as error:
            raise ValueError(f"{where}[{index}]: {_reason(error)}") from None
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


# --- a conversation as text for a prompt (and for `show`) ------------------------------------------------

TURN_START, TURN_END = "[The Start of the Turn to Judge]", "[The End of the Turn to Judge]"


def elided_line(count: int) -> str:
    """What stands where messages were left out to fit the context budget: said, never silent."""
    return f"[… {count} message{'s' if count != 1 else ''} elided …]"


def _role_line(message: Message, tool_names: dict[str, str]) -> str:
    if message.role == "tool":
        tool = message.name or tool_names.get(message.tool_call_id or "", "")
        return f"### Tool result{f' of {tool}' if tool else ''} (call {message.tool_call_id}):"
    title = {"system": "System (instructions to the assistant)", "user": "User", "assistant": "Assistant"}
    return f"### {title[message.role]}{f' ({message.name})' if message.name else ''}:"


def tool_call_line(call: ToolCall) -> str:
    """A tool call as the judge reads it: the tool, its arguments as JSON, its id."""
    arguments = json.dumps(call.arguments, ensure_ascii=False, sort_keys=True)
    return f"[calls {call.name} with {arguments}{f' (call {call.id})' if call.id else ''}]"


def message_text(message: Message, tool_names: dict[str, str] | None = None) -> str:
    """One message rendered: its role line (system messages marked, a tool result named by its tool and call),
    its text, and each tool call it makes."""
    lines = [_role_line(message, tool_names or {})]
    if message.text:
        lines.append(message.text)
    lines += [tool_call_line(call) for call in message.tool_calls or ()]
    return "\n".join(lines)


def steps_text(steps: Sequence[Sequence[str]]) -> str:
    """The agent's graph steps: supersteps in order, the nodes of one superstep joined by '+'."""
    return "### Agent graph steps (nodes per superstep):\n" + " → ".join(" + ".join(step) for step in steps)


@dataclass
class Chunk:
    """One piece of a rendered conversation: a message (``index`` in its list, ``protected`` when it is never
    elided) or a fixed line (a block's header or footer, ``index`` None)."""

    text: str
    index: int | None = None
    protected: bool = True
    kept: bool = True


@dataclass
class Block:
    """The rendered messages of one conversation (or continuation) between a header and a footer."""

    chunks: list[Chunk] = field(default_factory=list)

    def text(self) -> str:
        out: list[str] = []
        skipped = 0
        for chunk in self.chunks:
            if not chunk.kept:
                skipped += 1
                continue
            if skipped:
                out.append(elided_line(skipped))
                skipped = 0
            out.append(chunk.text)
        if skipped:
            out.append(elided_line(skipped))
        return "\n\n".join(out)


def conversation_block(messages: Sequence[Message], *, start: int = 0, judged: tuple[int, int] | None = None,
                       head: bool = True, header: str | None = None, footer: str | None = None,
                       steps: Sequence[Sequence[str]] | None = None, prefix: Sequence[Message] = ()) -> Block:
    """The messages ``messages[start:]`` as a block: ``judged`` (a range of indices of ``messages``) is
    wrapped in the turn-to-judge markers and protected; ``head`` protects the leading system messages and the
    first user message (the task); ``prefix`` only names the tools its calls ran."""
    tool_names = {call.id: call.name for m in [*prefix, *messages] for call in m.tool_calls or () if call.id}
    first_user = next((i for i, m in enumerate(messages) if m.role == "user"), -1)
    block = Block([Chunk(header)] if header else [])
    for index in range(start, len(messages)):
        message = messages[index]
        if judged and index == max(judged[0], start):
            block.chunks.append(Chunk(TURN_START))
        # the turn judged, and the user message it answers, are its context's least
        in_turn = judged is not None and judged[0] - (messages[judged[0] - 1].role == "user") <= index < judged[1]
        is_head = head and index <= first_user and message.role in ("system", "user")
        block.chunks.append(Chunk(message_text(message, tool_names), index, protected=in_turn or is_head))
        if judged and index == judged[1] - 1:
            block.chunks.append(Chunk(TURN_END))
    if steps:
        block.chunks.append(Chunk(steps_text(steps)))
    if footer:
        block.chunks.append(Chunk(footer))
    return block


class ContextBudgetExceeded(ValueError):
    """What must be shown whole (the task and the turn judged) does not fit ``--max-context-tokens``."""


def fit_blocks(blocks: Sequence[Block], budget: int | None, count: Callable[[str], int], *,
               item: str = "?") -> str:
    """The blocks' text within ``budget`` tokens (``count`` measures a text): whole when it fits, else with the
    unprotected messages farthest from their block's ends elided first (the middle turns), each run of elided
    messages said by :func:`elided_line`. Raises :class:`ContextBudgetExceeded` when eliding every unprotected
    message is not enough."""

    def text() -> str:
        return "\n\n".join(block.text() for block in blocks)

    rendered = text()
    if budget is None or count(rendered) <= budget:
        return rendered
    # the order of elision: the message farthest from both ends of its block first
    order: list[tuple[int, int, Chunk]] = []
    for number, block in enumerate(blocks):
        messages = [c for c in block.chunks if c.index is not None]
        for position, chunk in enumerate(messages):
            if not chunk.protected:
                order.append((-min(position, len(messages) - 1 - position), number, chunk))
    order.sort(key=lambda entry: (entry[0], entry[1]))
    sizes = {id(chunk): count(chunk.text) + 2 for _, _, chunk in order}
    excess = count(rendered) - budget
    for _, _, chunk in order:
        chunk.kept = False
        excess -= sizes[id(chunk)]
        if excess <= 0:
            rendered = text()
            excess = count(rendered) - budget  # the markers' own tokens; the sizes' rounding
            if excess <= 0:
                return rendered
    raise ContextBudgetExceeded(
        f"item {item!r}: the conversation needs {count(text())} tokens with every message it may leave out "
        f"elided (the task and the turn judged are shown whole), over the budget of {budget} "
        "(--max-context-tokens)")
