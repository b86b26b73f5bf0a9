"""Graph state shared by all protocols, and the reducers that merge what parallel nodes write.

State holds plain data only (dicts, lists, LangChain messages) so that any checkpointer can store it
and read it back without registering our classes; :class:`~jurygraph.judging.items.EvalItem`,
:class:`~jurygraph.judging.judgments.Judgment` and :class:`~jurygraph.judging.judgments.Verdict` convert to and from it.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Annotated, Any

from langchain_core.messages import AnyMessage, BaseMessage
from typing_extensions import TypedDict  # pydantic (JSON schemas for LangGraph Studio) needs it on Python < 3.12

from jurygraph.judging.items import EvalItem, as_item
from jurygraph.judging.judgments import Judgment, Verdict

HistoryUpdate = list[BaseMessage] | dict[str, list[BaseMessage]]

# what an agent's usage entry counts (beside its role, model and call parameters), and the part of those counts
# that went through a provider batch (present only where some did)
COUNTS = ("requests", "input_tokens", "output_tokens")
BATCH_COUNTS = ("batch_requests", "batch_input_tokens", "batch_output_tokens")


def coerce_item(old: dict[str, Any] | None, new: EvalItem | dict[str, Any]) -> dict[str, Any]:
    """The item channel validates what it is given and keeps its JSON form."""
    return as_item(new).model_dump(mode="json", exclude_none=True)


def merge_histories(old: dict[str, list[BaseMessage]], new: dict[str, HistoryUpdate]) -> dict[str, list[BaseMessage]]:
    """Per-agent chat histories: a list appends to that agent's history; ``{"replace": [...]}`` replaces it."""
    merged = dict(old or {})
    for agent, update in (new or {}).items():
        if isinstance(update, dict):
            merged[agent] = list(update["replace"])
        else:
            merged[agent] = [*merged.get(agent, []), *update]
    return merged


def latest_turn(old: int, new: int) -> int:
    """Parallel speakers of one round all report their turn; the counter keeps the highest."""
    return max(old or 0, new or 0)


def merge_dicts(old: dict[str, Any], new: dict[str, Any] | None) -> dict[str, Any]:
    return {**(old or {}), **(new or {})}


def add_usage(old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Sum requests and tokens per agent (parallel agents write their own entries)."""
    merged = {agent: dict(entry) for agent, entry in (old or {}).items()}
    for agent, entry in (new or {}).items():
        into = merged.setdefault(agent, {k: v for k, v in entry.items() if not isinstance(v, int | float)})
        for key, value in entry.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                into[key] = into.get(key, 0) + value
            else:
                into[key] = value
    return merged


def usage_counts(entry: Mapping[str, Any]) -> dict[str, int]:
    """A usage entry's counts: requests and tokens, and the batch part of them when there is one."""
    return {key: int(entry.get(key, 0)) for key in (*COUNTS, *BATCH_COUNTS) if key in COUNTS or key in entry}


def usage_by_model(usage: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Per-agent usage summed per model (each entry's ``model`` label)."""
    totals: dict[str, dict[str, Any]] = {}
    for entry in usage.values():
        totals = add_usage(totals, {str(entry.get("model")): usage_counts(entry)})
    return totals


class JuryState(TypedDict, total=False):
    """What every protocol graph carries for one item."""

    item: Annotated[dict[str, Any], coerce_item]
    histories: Annotated[dict[str, list[AnyMessage]], merge_histories]
    transcript: Annotated[list[AnyMessage], operator.add]
    turn: Annotated[int, latest_turn]
    judgments: Annotated[dict[str, dict[str, Any]], merge_dicts]
    verdict: dict[str, Any]
    usage: Annotated[dict[str, dict[str, Any]], add_usage]


def judgments_of(state: dict[str, Any]) -> dict[str, Judgment]:
    """The per-agent judgments in a graph's state, as objects."""
    return {name: Judgment.model_validate(data) for name, data in (state.get("judgments") or {}).items()}


def verdict_of(state: dict[str, Any]) -> Verdict | None:
    """The verdict in a graph's state, as an object (None until the aggregator ran)."""
    data = state.get("verdict")
    return Verdict.model_validate(data) if data else None


# histories keys under this prefix are an escalation's agents (``graphs.escalation``), not the panel's
ESCALATION_PREFIX = "escalation/"


def message_data(message: BaseMessage) -> dict[str, Any]:
    """A message as plain data: who spoke, its type (system, human, ai) and its text."""
    return {"speaker": message.name or message.type, "type": message.type, "text": message.text}


def transcript_data(values: dict[str, Any]) -> list[dict[str, Any]]:
    """What the panel said about an item, in order, as plain data (``message_data``): the shared transcript; under a
    calibration each run's (``run`` names it); for protocols that keep no transcript, each agent's own words."""
    transcript = [message_data(m) for m in values.get("transcript") or []]
    runs = values.get("runs") or {}
    if not transcript:
        transcript = [{**message_data(m), "run": name} for name, run in runs.items()
                      for m in run.get("transcript") or []]
    if not transcript:
        transcript = [message_data(m) for agent, history in (values.get("histories") or {}).items()
                      if not agent.startswith(ESCALATION_PREFIX)
                      for m in history if m.type == "ai" and spoken_by(m, agent)]
    return transcript


def escalation_transcript(values: dict[str, Any]) -> list[dict[str, Any]]:
    """What the stronger judge of an escalation said: its agents' own words, ``run`` naming the escalation (and the
    answer order when it judged both)."""
    # "escalation", or "escalation/swapped_order" when the escalation judged both answer orders
    return [{**message_data(m), "run": agent.rpartition("/")[0]} for agent, history in
            (values.get("histories") or {}).items() if agent.startswith(ESCALATION_PREFIX)
            for m in history if m.type == "ai" and spoken_by(m, agent)]


def spoken_by(message: BaseMessage, agent: str) -> bool:
    """Whether a message in ``agent``'s history is its own (histories may be namespaced, e.g. ``run/agent``)."""
    return not message.name or agent == message.name or agent.endswith("/" + message.name)
