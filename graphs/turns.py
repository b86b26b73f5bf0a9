"""Per-turn judging (``--per-turn``, jurygraph's own): judge each assistant turn of a conversation item in its
context, then give the conversation's verdict from the turns' (their mean, or the worst turn's).

Like :mod:`jurygraph.graphs.calibration`, a wrapper around ANY protocol's graph: the protocol is compiled once and
run as a subgraph for every turn, on the item with ``turn`` set (its templates mark that turn and show the messages
before it as its context: :mod:`jurygraph.nodes.conversation`). The turns are judged in ONE superstep, fanned out
with ``Send`` (their number is the item's), so an item's turns are judged concurrently and a crash resumes with the
turns that had not finished.

- Score items: turn k is assistant turn k (:func:`jurygraph.judging.conversations.assistant_turns`); the verdict's
  score is the mean (``aggregate="mean"``) or the lowest (``"min"``) of the turns' readable scores.
- Pairwise items: the turns both continuations have (a turn inside the shared prefix is the same for both and is not
  judged); each assistant's score is the mean, or its lowest, over the turns; the label follows those scores. A turn
  whose verdict has no scores (a majority vote of labels only) cannot be combined: it is counted as missing, with
  the reason, as a calibration does.
- An item whose ``turn`` is set is judged at that turn only; an item without messages is judged whole, its
  verdict passed through.

State: each turn's run is namespaced as a calibration's (``judgments`` and ``histories`` as ``"turn_<k>/<agent>"``,
``runs["turn_<k>"]`` with the turn's verdict and transcript; a wrapped calibration's own runs as
``runs["turn_<k>/<run>"]``); ``usage`` is summed per agent. The verdict's ``detail["turns"]`` lists the per-turn
verdicts (what the results line carries), ``detail["turn_aggregate"]`` the rule.
"""

from __future__ import annotations

from collections.abc import Callable
from statistics import fmean
from typing import Annotated, Any, Literal

from langchain_core.runnables import RunnableLambda
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Send

from jurygraph.graphs.wiring import GraphLike, compile_inner
from jurygraph.judging.conversations import assistant_turns
from jurygraph.judging.items import EvalItem, TaskKind, as_item
from jurygraph.judging.judgments import Verdict, pairwise_label
from jurygraph.judging.state import JuryState, merge_dicts
from jurygraph.llm.calls import current_context
from jurygraph.llm.models import JuryContext

TurnAggregate = Literal["mean", "min"]
TURN_AGGREGATES: tuple[str, ...] = ("mean", "min")
JUDGE_TURN, COMBINE_TURNS = "judge_turn", "combine_turns"


class PerTurnState(JuryState, total=False):
    runs: Annotated[dict[str, dict[str, Any]], merge_dicts]


def turns_to_judge(item: EvalItem) -> list[int]:
    """The assistant turns ``--per-turn`` judges of an item (1-based): its own ``turn`` when set; every turn of a
    score item's conversation; the turns both continuations of a pairwise item have, beyond the shared prefix;
    none for an item without messages (it is judged whole)."""
    if not item.conversational:
        return []
    if item.turn is not None:
        return [item.turn]
    if item.task is TaskKind.SCORE:
        return list(range(1, len(assistant_turns(item.messages or [])) + 1))
    prefix = list(item.messages or [])
    sides = [assistant_turns([*prefix, *(own or [])]) for own in (item.messages_1, item.messages_2)]
    common = min(len(side) for side in sides)
    return [k for k in range(1, common + 1) if all(side[k - 1][1] > len(prefix) for side in sides)]


def run_name(turn: int | None) -> str:
    return "whole" if turn is None else f"turn_{turn}"


def _fan_out(state: dict[str, Any]) -> list[Send]:
    item = as_item(state["item"])
    turns = turns_to_judge(item)
    if item.conversational and not turns:
        raise ValueError(f"item {item.id!r}: no assistant turn to judge (--per-turn judges the assistant's turns; "
                         "a pairwise item's turns must be in both continuations)")
    chosen = [item.model_copy(update={"turn": k}) for k in turns] or [item]
    return [Send(JUDGE_TURN, {"item": one.model_dump(mode="json", exclude_none=True)}) for one in chosen]


def _turn_node(protocol: CompiledStateGraph[Any, Any, Any, Any]) -> RunnableLambda:
    """A node that runs the protocol on the item at one turn and namespaces its result under ``turn_<k>``."""

    def result(turn: int | None, out: dict[str, Any]) -> dict[str, Any]:
        name = run_name(turn)
        inner_runs = out.get("runs") or {}
        runs = {name: {"turn": turn, "verdict": out.get("verdict") or {},
                       "transcript": list(out.get("transcript") or [])}}
        runs.update({f"{name}/{run}": entry for run, entry in inner_runs.items()})
        return {
            "runs": runs,
            "judgments": {f"{name}/{agent}": j for agent, j in (out.get("judgments") or {}).items()},
            "histories": {f"{name}/{agent}": {"replace": list(h)} for agent, h in (out.get("histories") or {}).items()},
            "usage": out.get("usage") or {},
        }

    def run_sync(payload: dict[str, Any]) -> dict[str, Any]:
        turn = as_item(payload["item"]).turn
        return result(turn, protocol.invoke({"item": payload["item"]}, context=current_context()))

    async def run_async(payload: dict[str, Any]) -> dict[str, Any]:
        turn = as_item(payload["item"]).turn
        return result(turn, await protocol.ainvoke({"item": payload["item"]}, context=current_context()))

    return RunnableLambda(run_sync, afunc=run_async, name=JUDGE_TURN)


def _scores(verdict: dict[str, Any], kind: TaskKind) -> tuple[float, ...] | str:
    """A turn verdict's scores (score; or score_1, score_2), or why it has none to combine."""
    if not verdict:
        return "the turn gave no verdict"
    if verdict.get("missing"):
        return str((verdict.get("detail") or {}).get("reason") or "the turn's verdict is missing")
    keys = ("score",) if kind is TaskKind.SCORE else ("score_1", "score_2")
    if any(verdict.get(key) is None for key in keys):
        return "the turn's verdict has no scores to combine"
    return tuple(float(verdict[key]) for key in keys)


def combine_turns(item: EvalItem, verdicts: dict[int, dict[str, Any]], aggregate: str) -> Verdict:
    """The conversation's verdict from its turns' verdicts: the mean, or the lowest, of their scores (pairwise:
    per assistant, the label from the two); unreadable turns are left out and counted."""
    kind = item.task
    per_turn, readable, reasons = [], [], {}
    for turn in sorted(verdicts):
        verdict = verdicts[turn]
        per_turn.append({"turn": turn, **{k: v for k, v in verdict.items() if k != "detail"}})
        found = _scores(verdict, kind)
        if isinstance(found, str):
            reasons[str(turn)] = found
        else:
            readable.append(found)
    combine: Callable[[list[float]], float] = fmean if aggregate == "mean" else min
    detail: dict[str, Any] = {"turn_aggregate": aggregate, "turns": per_turn, "turns_missing": len(reasons)}
    if reasons:
        detail["missing_turns"] = reasons
    counts: dict[str, Any] = {"n_judgments": sum(int(v.get("n_judgments", 0)) for v in verdicts.values()),
                              "n_missing": sum(int(v.get("n_missing", 0)) for v in verdicts.values())}
    if not readable:
        detail["reason"] = "no turn gave a verdict with scores"
        return Verdict(kind=kind, method="none", missing=True, detail=detail, **counts)
    method = f"per turn: {'mean' if aggregate == 'mean' else 'lowest'} of {len(readable)} turn" + \
        ("s" if len(readable) != 1 else "")
    if kind is TaskKind.SCORE:
        return Verdict(kind=kind, method=method, score=combine([s[0] for s in readable]), detail=detail, **counts)
    s1, s2 = combine([s[0] for s in readable]), combine([s[1] for s in readable])
    return Verdict(kind=kind, method=method, score_1=s1, score_2=s2, label=pairwise_label(s1, s2), detail=detail,
                   **counts)


def _combine_node(aggregate: str) -> RunnableLambda:
    def combine(state: dict[str, Any]) -> dict[str, Any]:
        item = as_item(state["item"])
        runs = state.get("runs") or {}
        if not item.conversational:  # judged whole: its verdict as the protocol gave it
            return {"verdict": (runs.get(run_name(None)) or {}).get("verdict") or {}}
        verdicts = {int(entry["turn"]): entry.get("verdict") or {} for name, entry in runs.items()
                    if "/" not in name and entry.get("turn") is not None}
        return {"verdict": combine_turns(item, verdicts, aggregate).to_state()}

    return RunnableLambda(combine, name=COMBINE_TURNS)


def per_turn(
    protocol: GraphLike,
    *,
    aggregate: TurnAggregate | str = "mean",
    state_schema: type[Any] = PerTurnState,
    context_schema: type[Any] = JuryContext,
) -> StateGraph:
    """An uncompiled graph that judges each assistant turn of a conversation item with ``protocol`` (its graph,
    compiled or not, or a factory) and combines the turns' verdicts: ``aggregate="mean"`` (default) or ``"min"``
    (the worst turn). See the module's doc for the turns judged and the state it keeps."""
    if aggregate not in TURN_AGGREGATES:
        raise ValueError(f"unknown turn aggregate {aggregate!r}; choose one of {', '.join(TURN_AGGREGATES)}")
    compiled = compile_inner(protocol)
    builder = StateGraph(state_schema, context_schema=context_schema)
    builder.add_node(JUDGE_TURN, _turn_node(compiled))
    builder.add_node(COMBINE_TURNS, _combine_node(str(aggregate)))
    builder.add_conditional_edges(START, _fan_out, [JUDGE_TURN])
    builder.add_edge(JUDGE_TURN, COMBINE_TURNS)
    builder.add_edge(COMBINE_TURNS, END)
    return builder


__all__ = ["TURN_AGGREGATES", "PerTurnState", "TurnAggregate", "combine_turns", "per_turn", "turns_to_judge"]
