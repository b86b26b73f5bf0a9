"""Helpers every protocol's nodes use: node names from agent names, how a message is heard by others, and
the ``{chat_history}`` slot."""

from __future__ import annotations

import re
from collections.abc import Sequence

from langchain_core.messages import AIMessage, BaseMessage


def node_id(name: str) -> str:
    """A code-friendly node name from an agent name: 'General Public' -> 'general_public'."""
    slug = re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower()
    return slug or "agent"


def spoken(message: AIMessage, turn: int) -> AIMessage:
    """The message as heard by others: the speaker's name and the turn it was said in."""
    return AIMessage(content=message.text, name=message.name, id=message.id,
                     additional_kwargs={}, response_metadata={"turn": turn})


def render_history(messages: Sequence[BaseMessage]) -> str:
    """The chat_history slot as the original code fills it: '[speaker]: text' per message."""
    return "\n".join(f"[{m.name}]: {m.text}" if m.name else m.text for m in messages)
