"""Does an agent's trajectory match a reference trajectory? Tool-call matching that needs no model.

The four modes are agentevals' (``langchain-ai/agentevals``, ``create_trajectory_match_evaluator``), written anew
here on the messages of conversation items (:class:`~jurygraph.judging.conversations.Message`: OpenAI-style dicts,
tool calls in OpenAI's or LangChain's form, or LangChain messages):

``strict``     the same number of messages with the same role at each position; where one has tool calls the other
               has them too, the same calls in that message (in any order within the message). Contents are not
               compared.
``unordered``  the same tool calls over the whole trajectory, in any order (each call matched once).
``subset``     every tool call of the agent is one of the reference's (the agent made no call the reference does not
               have; it may have made fewer).
``superset``   every tool call of the reference is one of the agent's (the agent made every expected call, perhaps
               more).

Two calls match when their tool names are equal and their arguments match by ``tool_args``: ``exact`` (equal),
``ignore`` (any), ``subset`` (the agent's arguments are a part of the reference's) or ``superset`` (the agent's
arguments include all of the reference's). ``overrides`` change that per tool: a mode name, a list of argument keys
that must be equal (a dotted key reaches into nested objects, ``"filter.city"``), or a function
``(agent_args, reference_args) -> bool``.

Two departures from agentevals' code, both towards what its documentation says: calls are paired by a maximum
matching, not first come first served (agentevals can answer "no match" where a pairing exists, when a loose
argument mode lets one call match several), and the arguments are always compared agent-first, reference-second
(agentevals swaps the two in its ``subset`` trajectory mode and in one direction of ``unordered``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from jurygraph.judging.conversations import Message, ToolCall, parse_messages

MatchMode = Literal["strict", "unordered", "subset", "superset"]
ArgsMode = Literal["exact", "ignore", "subset", "superset"]
MATCH_MODES: tuple[str, ...] = get_args(MatchMode)
ARGS_MODES: tuple[str, ...] = get_args(ArgsMode)

ArgsMatcher = Callable[[Mapping[str, Any], Mapping[str, Any]], bool]
Override = str | Sequence[str] | ArgsMatcher

__all__ = ["ARGS_MODES", "MATCH_MODES", "TrajectoryMatch", "match_trajectory"]


def _all_calls(messages: Sequence[Message]) -> list[ToolCall]:
    return [call for message in messages for call in message.tool_calls or ()]


# --- arguments ------------------------------------------------------------------------------------------------


def _exact(agent: Mapping[str, Any], reference: Mapping[str, Any]) -> bool:
    return dict(agent) == dict(reference)


def _subset(agent: Mapping[str, Any], reference: Mapping[str, Any]) -> bool:
    return all(key in reference and reference[key] == value for key, value in agent.items())


def _superset(agent: Mapping[str, Any], reference: Mapping[str, Any]) -> bool:
    return _subset(reference, agent)


def _ignore(agent: Mapping[str, Any], reference: Mapping[str, Any]) -> bool:
    return True


_ARGS: dict[str, ArgsMatcher] = {"exact": _exact, "ignore": _ignore, "subset": _subset, "superset": _superset}
_ABSENT = object()


def _at(args: Mapping[str, Any], path: str) -> Any:
    value: Any = args
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _ABSENT
        value = value[part]
    return value


def _on_keys(keys: Sequence[str]) -> ArgsMatcher:
    def matcher(agent: Mapping[str, Any], reference: Mapping[str, Any]) -> bool:
        return all(_at(agent, key) == _at(reference, key) for key in keys)

    return matcher


def args_matcher(mode: str, override: Override | None = None) -> ArgsMatcher:
    """How two calls' arguments are compared: the override when there is one, else ``mode``."""
    if override is None:
        if mode not in _ARGS:
            raise ValueError(f"tool arguments mode {mode!r}: choose one of {', '.join(ARGS_MODES)}")
        return _ARGS[mode]
    if isinstance(override, str):
        if override not in _ARGS:
            raise ValueError(f"tool arguments override {override!r}: a mode ({', '.join(ARGS_MODES)}), a list of "
                             "keys or a function")
        return _ARGS[override]
    if callable(override):
        return override
    return _on_keys([str(key) for key in override])


# --- matching -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrajectoryMatch:
    """How trajectories are compared: the mode, the arguments' mode and the per-tool overrides."""

    mode: MatchMode = "strict"
    tool_args: ArgsMode = "exact"
    overrides: Mapping[str, Override] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in MATCH_MODES:
            raise ValueError(f"trajectory match mode {self.mode!r}: choose one of {', '.join(MATCH_MODES)}")
        args_matcher(self.tool_args)
        for override in self.overrides.values():
            args_matcher(self.tool_args, override)

    def calls_match(self, agent: ToolCall, reference: ToolCall) -> bool:
        if agent.name != reference.name:
            return False
        return args_matcher(self.tool_args, self.overrides.get(agent.name))(agent.arguments, reference.arguments)

    def __call__(self, messages: Sequence[Any], reference: Sequence[Any]) -> bool:
        """Whether the agent's ``messages`` match the ``reference`` trajectory in this mode (messages as dicts,
        :class:`~jurygraph.judging.conversations.Message` or LangChain messages; a ValueError for one that is not)."""
        messages = parse_messages(messages, item=None)
        reference = parse_messages(reference, item=None, field="reference")
        if self.mode == "strict":
            return self._strict(messages, reference)
        agent, expected = _all_calls(messages), _all_calls(reference)
        if self.mode == "subset":
            return self._covers(agent, expected, every="agent")
        if self.mode == "superset":
            return self._covers(agent, expected, every="reference")
        return len(agent) == len(expected) and self._covers(agent, expected, every="agent")

    def _strict(self, messages: Sequence[Message], reference: Sequence[Message]) -> bool:
        if len(messages) != len(reference):
            return False
        for mine, theirs in zip(messages, reference, strict=True):
            if mine.role != theirs.role or bool(mine.tool_calls) != bool(theirs.tool_calls):
                return False
            agent, expected = mine.tool_calls or [], theirs.tool_calls or []
            if len(agent) != len(expected) or not self._covers(agent, expected, every="agent"):
                return False
        return True

    def _covers(self, agent: Sequence[ToolCall], reference: Sequence[ToolCall], *, every: str) -> bool:
        """Whether every call on one side (``every``: "agent" or "reference") pairs with its own call on the other
        side: a maximum bipartite matching (Kuhn's augmenting paths; trajectories are short)."""
        left, right = (agent, reference) if every == "agent" else (reference, agent)

        def fits(i: int, j: int) -> bool:
            return self.calls_match(left[i], right[j]) if every == "agent" else self.calls_match(right[j], left[i])

        edges = [[j for j in range(len(right)) if fits(i, j)] for i in range(len(left))]
        owner: dict[int, int] = {}  # right index -> left index paired with it

        def augment(i: int, seen: set[int]) -> bool:
            for j in edges[i]:
                if j in seen:
                    continue
                seen.add(j)
                if j not in owner or augment(owner[j], seen):
                    owner[j] = i
                    return True
            return False

        return all(augment(i, set()) for i in range(len(left)))


def match_trajectory(messages: Sequence[Any], reference: Sequence[Any], mode: MatchMode = "strict", *,
                     tool_args: ArgsMode = "exact", overrides: Mapping[str, Override] | None = None) -> bool:
    """Whether an agent's trajectory (its messages) matches a reference trajectory (see the module's doc)."""
    return TrajectoryMatch(mode, tool_args, dict(overrides or {}))(messages, reference)
