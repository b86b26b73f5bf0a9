"""A LangSmith run export as items: one conversation item per trace (its root run), with the agent's steps.

An export is a JSON array (or JSONL, or ``{"runs": [...]}``) of runs as the LangSmith client gives them
(``client.list_runs(...)``, each ``run.model_dump()``; the fields ``id``, ``name``, ``run_type``, ``inputs``,
``outputs``, ``parent_run_id``, ``trace_id``, ``dotted_order``, ``extra``). Each root run (no parent in the export)
becomes one item:

- ``messages``: the conversation of its inputs and outputs. A LangGraph agent's run has ``inputs.messages`` and
  ``outputs.messages`` (its state before and after: the outputs usually repeat the inputs, which are then not
  counted twice); a chat model's run ``inputs.messages`` (a list of lists) and ``outputs.generations``; an OpenAI
  client's run ``inputs.messages`` and ``outputs.choices``. Messages may be OpenAI dicts, LangChain's dict form
  (``type``: human, ai, tool) or LangChain's serialized form (``{"lc": 1, "type": "constructor", ...}``).
- ``steps``: for a LangGraph trace, the node names of each superstep, from the node runs' metadata
  (``langgraph_node``, ``langgraph_step``, ``langgraph_checkpoint_ns``), a subgraph's nodes named with their path
  (``research:look``), in the order the supersteps ran: what ``from_thread`` reads from checkpoints.
- ``meta``: the run's id, name, trace id and start time.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from jurygraph.judging.conversations import Message

__all__ = ["LANGSMITH_FIELDS", "RunFieldError", "is_langsmith_run", "run_item", "traces"]

LANGSMITH_FIELDS = frozenset({"id", "run_type", "inputs"})


class RunFieldError(ValueError):
    """A field of a run that cannot be read; ``field`` names it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def is_langsmith_run(row: Any) -> bool:
    """Whether a row looks like a LangSmith run (``id``, ``run_type``, ``inputs``)."""
    return isinstance(row, Mapping) and set(row) >= LANGSMITH_FIELDS


def traces(runs: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """The export's traces: each root run's id (a run whose parent is not in the export), in the export's order, and
    every run under it (itself included), found through the parent links."""
    by_id = {str(run.get("id")): run for run in runs}

    def root_of(run: Mapping[str, Any]) -> str:
        seen: set[str] = set()
        while run.get("parent_run_id") not in (None, "") and str(run["parent_run_id"]) in by_id:
            if str(run["id"]) in seen:  # a cycle of parent links: stop where it closes
                break
            seen.add(str(run["id"]))
            run = by_id[str(run["parent_run_id"])]
        return str(run.get("id"))

    found: dict[str, list[Mapping[str, Any]]] = {}
    for run in runs:
        found.setdefault(root_of(run), []).append(run)
    return found


def _message(raw: Any, field: str) -> dict[str, Any]:
    if isinstance(raw, Mapping) and raw.get("lc") == 1 and raw.get("type") == "constructor":
        from langchain_core._api import LangChainBetaWarning
        from langchain_core.load import load  # LangChain's own reader of its serialized objects

        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", LangChainBetaWarning)
                # an export is data from elsewhere: revive chat messages only, never a model or a client
                raw = load(dict(raw), allowed_objects="messages")
        except (ValueError, TypeError, KeyError) as err:
            raise RunFieldError(field, f"a serialized message that cannot be read ({err})") from None
    try:
        message = Message.model_validate(raw).model_dump(mode="json", exclude_none=True)
    except ValueError as err:
        raise RunFieldError(field, f"not a message: {err}") from None
    return message


def _messages(raw: Any, field: str) -> list[dict[str, Any]]:
    if isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], list):
        raw = raw[0]  # a chat model's inputs: one list of messages per prompt
    if not isinstance(raw, list):
        raise RunFieldError(field, "must be a list of messages")
    return [_message(message, f"{field}[{k}]") for k, message in enumerate(raw)]


def _outputs(outputs: Mapping[str, Any]) -> list[dict[str, Any]]:
    if "messages" in outputs:
        return _messages(outputs["messages"], "outputs.messages")
    generations = outputs.get("generations")
    if isinstance(generations, list) and generations:
        first = generations[0][0] if isinstance(generations[0], list) and generations[0] else generations[0]
        if isinstance(first, Mapping) and "message" in first:
            return [_message(first["message"], "outputs.generations[0][0].message")]
        if isinstance(first, Mapping) and isinstance(first.get("text"), str):
            return [{"role": "assistant", "content": first["text"]}]
    choices = outputs.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping) and "message" in choices[0]:
        return [_message(choices[0]["message"], "outputs.choices[0].message")]
    raise RunFieldError("outputs", "holds no messages (outputs.messages, outputs.generations or outputs.choices)")


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return a.get("role") == b.get("role") and a.get("content") == b.get("content") and \
        a.get("tool_calls") == b.get("tool_calls")


def run_messages(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A run's conversation: its input messages, then what its outputs add."""
    inputs, outputs = run.get("inputs"), run.get("outputs")
    if not isinstance(inputs, Mapping) or "messages" not in inputs:
        raise RunFieldError("inputs.messages", "missing: the run's input is not a conversation")
    if not isinstance(outputs, Mapping) or not outputs:
        raise RunFieldError("outputs", "missing: the run has no output (still running, or it failed"
                                       + (f": {run['error']}" if run.get("error") else "") + ")")
    before, after = _messages(inputs["messages"], "inputs.messages"), _outputs(outputs)
    if len(after) >= len(before) and all(_same(a, b) for a, b in zip(before, after, strict=False)):
        return after  # an agent's state after the run holds its input too
    return [*before, *after]


def _order(run: Mapping[str, Any]) -> str:
    return str(run.get("dotted_order") or run.get("start_time") or "")


def run_steps(trace: Sequence[Mapping[str, Any]]) -> list[list[str]] | None:
    """A LangGraph trace's supersteps (node names, subgraph nodes with their path), None when it has none."""
    groups: dict[tuple[str, Any], tuple[str, set[str]]] = {}
    for run in sorted(trace, key=_order):
        metadata = (run.get("extra") or {}).get("metadata") or {}
        node, step = metadata.get("langgraph_node"), metadata.get("langgraph_step")
        if not node or step is None or run.get("name") != node:
            continue  # a model, tool or router run inside a node: the node's own run names it
        levels = str(metadata.get("langgraph_checkpoint_ns") or node).split("|")
        graph = "|".join(levels[:-1])  # the (sub)graph the node ran in, with its task ids
        path = ":".join(level.partition(":")[0] for level in levels)
        names = groups.setdefault((graph, step), (_order(run), set()))[1]
        names.add(path)
    if not groups:
        return None
    return [sorted(names) for _, names in sorted(groups.values(), key=lambda group: group[0])]


def run_item(run: Mapping[str, Any], trace: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One root run's item fields (``id``, ``messages``, ``steps``, ``meta``); ``trace``: every run of its trace."""
    fields: dict[str, Any] = {"id": str(run["id"]), "messages": run_messages(run),
                              "meta": {key: run.get(key) for key in ("name", "trace_id", "start_time")
                                       if run.get(key) is not None}}
    fields["meta"]["run_id"] = str(run["id"])
    steps = run_steps(trace)
    if steps:
        fields["steps"] = steps
    return fields
