"""FairEval's calibrations (Wang et al. 2023, "Large Language Models are not Fair Evaluators") as graph
composition: they wrap ANY pairwise protocol (single agent, ensemble, ChatEval...) without copying it.

The wrapped protocol is compiled once and run as a subgraph inside one node per run; all runs share ONE
superstep (fan-out from START), then a ``calibrate`` node combines them.

- BPC, Balanced Position Calibration: one run on the item, one on ``item.swapped()`` (the two answers in
  the other order). The swapped run's verdict is mapped back (Assistant 1 <-> 2, scores swapped back),
  and each answer's final score is the mean of its scores in the two orders; the label follows the means.
  When the wrapped protocol aggregates by majority (ChatEval's ``aggregate="majority"``, the Ensemble's
  ``method="majority"``: every run's verdict is a vote), the votes of every judge in both orders are pooled
  instead and the most frequent label wins (equal top counts: a tie), so the vote the run records takes effect.
- MEC, Multiple Evidence Calibration: k runs (default 3) at temperature 1, each an independent sample of
  the whole protocol, scores averaged. FairEval's MEC prompt asks the judge to "first provide a
  comprehensive explanation of your evaluation, avoiding any potential bias and ensuring that the order in
  which the responses were presented does not affect your judgment", then the scores; ChatEval's final
  answer form (used by the single-agent, ensemble and ChatEval graphs) is that very prompt, so MEC only has
  to sample it k times. Decision: for a multi-agent protocol a "sample" is one whole run (for ChatEval: one
  whole discussion at temperature 1), because the protocol's verdict, not one referee's reply, is what the
  calibration averages; the wrapped protocol's graph is not touched. Each run gets ``temperature`` as the
  default of every call (``JuryContext.call_params``) and its own sample offset, so the k runs are k
  distinct requests (and cache entries).
- ``bpc+mec``: k runs in each order (2k runs), all mapped to the original order and averaged.

On the command line, ``--protocol single --calibrate ...`` is FairEval's own baseline instead
(:mod:`jurygraph.graphs.faireval`: FairEval's prompt, k reviews per order in ONE request with n = k);
``--calibration-baseline chateval`` wraps ChatEval's single-agent graph as every other protocol is wrapped.

State: the subgraph's state never mixes with the wrapper's. Each run node maps its input (the item, or the
swapped item) and namespaces its output: ``judgments`` and ``histories`` as ``"<run>/<agent>"`` (as the
agent said it, in the order it was shown), ``runs[<run>]`` with the run's own verdict, its verdict mapped
back to the original order, and its transcript; ``usage`` is summed per agent over the runs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from statistics import fmean
from typing import Annotated, Any, Literal

from langchain_core.runnables import RunnableLambda
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from jurygraph.graphs.spec import Built, Option, Params, ProtocolSpec
from jurygraph.graphs.wiring import GraphLike, compile_inner
from jurygraph.judging.aggregation import aggregate, majority_label
from jurygraph.judging.items import TaskKind, as_item
from jurygraph.judging.judgments import Judgment, PairwiseLabel, Verdict, map_back, pairwise_label
from jurygraph.judging.state import JuryState, merge_dicts
from jurygraph.llm.calls import current_context
from jurygraph.llm.models import JuryContext

CalibrationMode = Literal["bpc", "mec", "bpc+mec"]
MODES: tuple[str, ...] = ("bpc", "mec", "bpc+mec")
# what a run that may stop early records in its verdict (round_judgments: as said, in the order shown)
ROUND_KEYS = ("rounds", "max_rounds", "stopped", "round_judgments")
SAMPLE_STRIDE = 1000  # sample offsets of MEC runs are multiples of this, far from a protocol's own indices


class CalibrationState(JuryState, total=False):
    runs: Annotated[dict[str, dict[str, Any]], merge_dicts]


@dataclass(frozen=True)
class Run:
    """One run of the wrapped protocol: its node name, whether the answers are swapped, its MEC sample."""

    name: str
    swapped: bool
    sample: int  # 0 = not an MEC sample (the context's own temperature); 1..k = MEC samples


def calibration_runs(mode: str, k: int = 3) -> list[Run]:
    """The runs a calibration mode needs, in order."""
    if mode not in MODES:
        raise ValueError(f"unknown calibration {mode!r}; choose one of {', '.join(MODES)}")
    if k < 1:
        raise ValueError("MEC needs k >= 1 evidence samples")
    if mode == "bpc":
        return [Run("original_order", False, 0), Run("swapped_order", True, 0)]
    if mode == "mec":
        return [Run(f"evidence_{i}", False, i) for i in range(1, k + 1)]
    return [Run(f"{order}_e{i}", swapped, i)
            for order, swapped in (("original_order", False), ("swapped_order", True)) for i in range(1, k + 1)]


def _run_node(protocol: CompiledStateGraph[Any, Any, Any, Any], run: Run, temperature: float) -> RunnableLambda:
    """A node that runs the wrapped protocol on the item (or the swapped item) and namespaces its result."""

    def prepare(state: dict[str, Any]) -> tuple[dict[str, Any], JuryContext]:
        item = as_item(state["item"])
        if item.task is not TaskKind.PAIRWISE:
            raise ValueError(f"item {item.id!r}: position/evidence calibration needs a pairwise item, "
                             f"not a {item.task.value} item")
        context = current_context()
        if run.sample:
            context = replace(context, call_params={**context.call_params, "temperature": temperature},
                              sample_offset=context.sample_offset + run.sample * SAMPLE_STRIDE)
        return {"item": item.swapped() if run.swapped else item}, context

    def result(out: dict[str, Any]) -> dict[str, Any]:
        verdict = out.get("verdict") or {}
        return {
            "runs": {run.name: {"order": "swapped" if run.swapped else "original", "sample": run.sample,
                                "verdict": verdict, "verdict_in_original_order": map_back(verdict) if run.swapped
                                else verdict, "transcript": list(out.get("transcript") or [])}},
            "judgments": {f"{run.name}/{agent}": j for agent, j in (out.get("judgments") or {}).items()},
            "histories": {f"{run.name}/{agent}": {"replace": list(h)}
                          for agent, h in (out.get("histories") or {}).items()},
            "usage": out.get("usage") or {},
        }

    def run_sync(state: dict[str, Any]) -> dict[str, Any]:
        inputs, context = prepare(state)
        return result(protocol.invoke(inputs, context=context))

    async def run_async(state: dict[str, Any]) -> dict[str, Any]:
        inputs, context = prepare(state)
        return result(await protocol.ainvoke(inputs, context=context))

    return RunnableLambda(run_sync, afunc=run_async, name=run.name)


def _combine_node(runs: list[Run], mode: str) -> RunnableLambda:
    """The calibrated verdict: every run's scores in the original order, averaged per answer; or, when every
    run's verdict is a vote (the protocol aggregates by majority), every run's votes pooled."""

    def combine(state: dict[str, Any]) -> dict[str, Any]:
        stored = state.get("runs") or {}
        mapped = {run.name: (stored.get(run.name) or {}).get("verdict_in_original_order") or {} for run in runs}
        readable = [v for v in mapped.values() if v and not v.get("missing")]
        voted = bool(readable) and all(v.get("votes") is not None for v in readable)
        tied = [name for name, v in mapped.items() if (v.get("detail") or {}).get("unreadable_tie")]
        verdict = _unreadable_tie(runs, mapped, tied) if tied else \
            _pooled_votes(runs, mapped) if voted else _mean_scores(runs, mapped)
        per_run: dict[str, dict[str, Any]] = verdict.detail["runs"]
        for run in runs:  # early stop and the devil's advocate: each order's rounds (issue 14)
            own = ((stored.get(run.name) or {}).get("verdict") or {}).get("detail") or {}
            per_run[run.name].update({key: own[key] for key in ROUND_KEYS if key in own})
        method = {"bpc": "balanced position calibration", "mec": "multiple evidence calibration",
                  "bpc+mec": "balanced position + multiple evidence calibration"}[mode]
        rule = "unreadable judgment: tie (released code)" if tied else "pooled votes" if voted else "mean scores"
        verdict = verdict.model_copy(update={
            "method": f"{method}: {rule}" if not verdict.missing else "none",
            "n_judgments": sum(int(v.get("n_judgments", 0)) for v in mapped.values()),
            "n_missing": sum(int(v.get("n_missing", 0)) for v in mapped.values()),
            "detail": {"calibration": mode, **verdict.detail}})
        return {"verdict": verdict.to_state()}

    return RunnableLambda(combine, name="calibrate")


def _mean_scores(runs: list[Run], mapped: dict[str, dict[str, Any]]) -> Verdict:
    """FairEval's BPC/MEC: each answer's score is the mean of its scores over the runs; the label follows."""
    judgments: list[Judgment] = []
    for run in runs:
        verdict = mapped[run.name]
        s1, s2 = verdict.get("score_1"), verdict.get("score_2")
        if verdict.get("missing") or s1 is None or s2 is None:
            reason = "the run gave no verdict" if not verdict or verdict.get("missing") else \
                "the run's verdict has no scores to combine"
            judgments.append(Judgment.missing_for(run.name, TaskKind.PAIRWISE, "", reason, 0))
            continue
        judgments.append(Judgment(agent=run.name, kind=TaskKind.PAIRWISE, score_1=s1, score_2=s2,
                                  label=pairwise_label(s1, s2)))
    combined = aggregate(judgments, TaskKind.PAIRWISE, "mean")
    per_run = {j.agent: {"missing": True, "reason": j.reason} if j.missing
               else {"score_1": j.score_1, "score_2": j.score_2, "label": j.label} for j in judgments}
    return combined.model_copy(update={"detail": {"runs": per_run, "runs_missing": combined.n_missing}})


def _unreadable_tie(runs: list[Run], mapped: dict[str, dict[str, Any]], tied: list[str]) -> Verdict:
    """ChatEval's released scoring with an unreadable judgment in any order (``unreadable="code"``): the script
    reads both orders in one ``try``, so the whole item is a tie."""
    per_run = {run.name: {"label": mapped[run.name].get("label"),
                          "unreadable_tie": (mapped[run.name].get("detail") or {}).get("unreadable_tie")}
               for run in runs}
    missing = sum(1 for v in mapped.values() if not v or v.get("missing"))
    return Verdict(kind=TaskKind.PAIRWISE, method="unreadable judgment: tie", label="tie",
                   detail={"runs": per_run, "runs_missing": missing, "unreadable_tie": tied})


def _pooled_votes(runs: list[Run], mapped: dict[str, dict[str, Any]]) -> Verdict:
    """ChatEval's majority vote under position calibration: every judge of every run (each answer order, each
    evidence sample) casts one vote, read in the original order, and the most frequent label wins; equal top
    counts are a tie (so 8-7 and 6-9 in both orders, two votes each way, is a tie although the means are 7.0 and
    8.0). As the code's scoring script sums each assistant's scores over the referees AND both orders, the vote is
    over the referees and both orders, not a vote of the two orders' verdicts. The scores shown are the mean of
    the runs' scores, for reading only."""
    pooled: Counter[str] = Counter()
    per_run: dict[str, dict[str, Any]] = {}
    scores: list[tuple[float, float]] = []
    missing = 0
    for run in runs:
        verdict = mapped[run.name]
        if not verdict or verdict.get("missing"):
            per_run[run.name] = {"missing": True, "reason": "the run gave no verdict"}
            missing += 1
            continue
        votes = {str(label): int(count) for label, count in (verdict.get("votes") or {}).items()}
        pooled.update(votes)
        per_run[run.name] = {"label": verdict.get("label"), "votes": votes}
        if verdict.get("score_1") is not None and verdict.get("score_2") is not None:
            scores.append((float(verdict["score_1"]), float(verdict["score_2"])))
            per_run[run.name].update(score_1=verdict["score_1"], score_2=verdict["score_2"])
    winner, _ = majority_label(label for label, count in pooled.items() for _ in range(count))
    all_scored = len(scores) == len(runs) - missing
    label: PairwiseLabel = "1" if winner == "1" else "2" if winner == "2" else "tie"
    return Verdict(kind=TaskKind.PAIRWISE, method="majority", label=label,
                   score_1=fmean(s for s, _ in scores) if all_scored and scores else None,
                   score_2=fmean(s for _, s in scores) if all_scored and scores else None,
                   votes=dict(pooled), detail={"runs": per_run, "runs_missing": missing})


def calibrate(
    protocol: GraphLike,
    mode: CalibrationMode | str = "bpc",
    *,
    k: int = 3,
    temperature: float = 1.0,
    state_schema: type[Any] = CalibrationState,
    context_schema: type[Any] = JuryContext,
) -> StateGraph:
    """An uncompiled graph that runs a pairwise ``protocol`` as calibrated by FairEval.

    ``protocol``: a protocol's (uncompiled or compiled) graph, or a factory returning one; it must take
    ``{"item": ...}`` and leave a pairwise ``verdict`` with ``score_1``/``score_2``. ``mode``: ``"bpc"``,
    ``"mec"`` or ``"bpc+mec"``; ``k``/``temperature``: MEC's evidence samples and their temperature.
    A run whose verdict is missing is left out of the mean and counted in ``detail["runs_missing"]``. When every
    readable run's verdict is a vote (the protocol aggregates by majority), the runs' votes are pooled instead of
    their scores averaged (``verdict.votes``; the method ends with ``pooled votes``).
    """
    runs = calibration_runs(mode, k)
    compiled = compile_inner(protocol)  # namespaced per run inside the wrapper
    builder = StateGraph(state_schema, context_schema=context_schema)
    for run in runs:
        builder.add_node(run.name, _run_node(compiled, run, temperature))
        builder.add_edge(START, run.name)
    builder.add_node("calibrate", _combine_node(runs, mode))
    builder.add_edge([run.name for run in runs], "calibrate")
    builder.add_edge("calibrate", END)
    return builder


# --- the calibration options of every pairwise protocol on the command line (graphs/spec.py) ------------------

CALIBRATE = Option("calibrate", str, None,
                   "pairwise tasks: FairEval's balanced position calibration (bpc), multiple evidence calibration "
                   "(mec) or both, around the chosen protocol", choices=MODES)
MEC_K = Option("mec_k", int, 3, "MEC: evidence samples per order (default 3)", minimum=1)
MEC_TEMPERATURE = Option("mec_temperature", float, 1.0, "MEC: temperature of the evidence samples (default 1)")
OPTIONS: tuple[Option, ...] = (CALIBRATE, MEC_K, MEC_TEMPERATURE)
# read by the protocols that judge both orders by default (ProtocolSpec.position_calibration)
NO_CALIBRATE = Option("no_calibrate", bool, False,
                      "chateval/single/ensemble on pairwise data: judge one order only (default: both orders, "
                      "--calibrate bpc, as ChatEval's position calibration)")


def accepted_options(spec: ProtocolSpec) -> dict[str, Option]:
    """Every option ``spec`` reads: its own, ``no_calibrate`` with ChatEval's position calibration, and the
    calibrations' when it judges pairwise data."""
    found = {o.name: o for o in spec.options}
    if spec.position_calibration:
        found.setdefault(NO_CALIBRATE.name, NO_CALIBRATE)
    if spec.pairwise:
        for option in [*OPTIONS, *(spec.calibration.options if spec.calibration else ())]:
            found.setdefault(option.name, option)
    return found


def position_defaults(spec: ProtocolSpec, values: Params, task: str | None) -> dict[str, Any]:
    """The calibration options a protocol takes by default on ``task`` items (``{}``: none); the one place this is
    decided (``jurygraph eval`` and :mod:`jurygraph.evaluators` both ask here).

    ChatEval "employ[s] position calibration techniques in both single-agent and multi-agent settings" (§3.2):
    each pairwise item is judged in both orders and the scores combined, as its scoring script sums each
    assistant's scores over the referees and both orders. So a protocol whose spec asks for it
    (``position_calibration``) applies FairEval's BPC (``calibrate="bpc"``, with its own calibration's
    ``position_defaults``) to pairwise data unless ``values`` give another calibration or ``no_calibrate`` keeps
    one order. ``task``: the kind of the loaded items (None when unknown or mixed: nothing is decided), whatever
    their source; a factory called from Python is never wrapped."""
    if not spec.position_calibration or task != TaskKind.PAIRWISE or values.get("calibrate") is not None \
            or values.get("no_calibrate"):
        return {}
    return {"calibrate": "bpc", **(spec.calibration.position_defaults if spec.calibration else {})}


def wrapped(built: Built, mode: str, values: Params, recorded: Params | None = None) -> Built:
    """``built``'s graph run as ``mode`` calibrates it (:func:`calibrate`, with ``values``' ``mec_k`` and
    ``mec_temperature``), the calibration in its parameters (``recorded``: more of them, e.g. the protocol's own
    calibration options)."""
    graph = calibrate(built.graph, mode, k=values["mec_k"], temperature=values["mec_temperature"])
    params = {**built.params, "calibrate": mode, **(recorded or {})}
    if "mec" in mode:
        params.update(mec_k=values["mec_k"], mec_temperature=values["mec_temperature"])
    return Built(graph, params, built.models, built.every_agent_has_a_model)


def calibrated(built: Built, spec: ProtocolSpec, mode: str, values: Params) -> Built:
    """The protocol ``spec`` built as ``built``, calibrated by ``mode``: what its own calibration runs instead
    (``spec.calibration``, e.g. FairEval's evaluator for the single agent), else its graph wrapped
    (:func:`wrapped`). The caller has checked that the protocol and the data are pairwise."""
    if spec.calibration is None:
        return wrapped(built, mode, values)
    own = spec.calibration.build(built, mode, values)
    if own is None:  # the protocol's own graph wrapped, its calibration's options recorded
        return wrapped(built, mode, values, recorded={o.name: values[o.name] for o in spec.calibration.options})
    return own
