"""D3 (Bandi & Harrasse, "Debate, Deliberate, Decide", arXiv 2410.04663; code github.com/abirharrasse/D3-Judge):
advocates defend the two answers before a judge, and a jury of personas votes on the anonymized transcript.

Two protocols, two wirings of the agents of :mod:`jurygraph.nodes.d3`::

    SAMRE  START -> advocate_1 -> advocate_2 -> judge -(next round)-> advocate_1
                                                judge -(converged, token budget or R)-> transcript
    MORE   START -> advocate_1_1..k -> aggregator_1 -> advocate_2_1..k -> aggregator_2 -> judge -> scorer -> transcript
    both   transcript -> jury_1..n -> verdict -> END

SAMRE (Single-Advocate Multi-Round Evaluation) debates for at most R rounds and stops early on the released code's
budgeted stopping rule: the score gaps of the last ``convergence_window`` rounds lie within ``epsilon`` and move
neither strictly up nor strictly down, after at least ``min_rounds`` rounds, or the debate's tokens exceed
``token_budget``. MORE (Multi-Advocate One-Round Evaluation) has k advocates per answer in one round, merged by each
group's aggregator. The jurors run in one superstep (they are independent); the verdict is the jury's tally.

Defaults are the released code's (SAMRE: R = 5, epsilon 5, window 3, at least 3 rounds; MORE: k = 3; 5 jurors;
temperature 0, 4096 max tokens) but for the jury's personas, which follow the README and the paper (as
``personas.py`` quotes it): 5 drawn from the 50-persona pool with a fixed seed (42), recorded, where the released
code cycles five curated identities (``personas="curated"``); ``docs/FIDELITY.md`` lists each option that departs
from the code.
Models per agent come from the runtime context by agent name (``Advocate1``, ``Judge``, ``Jury3``,
``AdvocateGroup2_Aggregator``...) or role (``advocate``, ``aggregator``, ``judge``, ``scorer``, ``juror``).

A SAMRE round is three LangGraph steps (3R + 3 in all): the default recursion limit of langgraph 1.2 (10007) is far
above any R, but the LangGraph releases of 2025 (25) allow R <= 7; pass ``config={"recursion_limit": ...}`` there.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from langgraph.graph import END, START, StateGraph

from jurygraph.judging.state import JuryState
from jurygraph.llm.models import JuryContext
from jurygraph.nodes.d3 import (
    MODES,
    TIES,
    UNREADABLE,
    VOTE_READINGS,
    Mode,
    Personas,
    Stopping,
    Ties,
    Unreadable,
    VoteReading,
    draw_jury,
    make_juror_node,
    make_more_advocate_node,
    make_more_aggregator_node,
    make_more_judge_node,
    make_more_scorer_node,
    make_samre_advocate_node,
    make_samre_judge_node,
    make_transcript_node,
    make_verdict_node,
)

VerdictBy = Literal["jury", "judge"]
VERDICTS: tuple[str, ...] = ("jury", "judge")
# the released defaults: samre_arch's README example (n_rounds=5, n_juries=5) and BudgetConfig's max_rounds 5;
# samre_arch's convergence_epsilon 5.0; check_convergence's window 3 and min_rounds 3; more_arch's n_advocates 3
SAMRE_DEFAULTS: dict[str, Any] = {"rounds": 5, "epsilon": 5.0, "convergence_window": 3, "min_rounds": 3,
                                  "token_budget": None, "unread_summaries": True}
MORE_DEFAULTS: dict[str, Any] = {"advocates": 3}
DEFAULT_JURORS = 5
DEFAULT_PERSONA_SEED = 42  # personas.py's own example draw (get_random_personas(5, seed=42))
NEXT_ROUND, STOP = "next round", "converged, token budget or R"


class D3State(JuryState, total=False):
    """JuryState plus the debate: ``round`` = rounds judged, ``stopped`` = why SAMRE stopped (None: on),
    ``arguments`` = each side's argument per round (what the judge, the opponent and the jury hear), ``defenses`` =
    MORE's individual defenses, ``judge_rounds`` = the judge's feedback and scores per round, ``debate_tokens`` = the
    tokens of the debate's calls so far, ``anonymized_transcript`` = what the jury reads."""

    round: int
    stopped: str | None
    arguments: Annotated[list[dict[str, Any]], operator.add]
    defenses: Annotated[list[dict[str, Any]], operator.add]
    judge_rounds: Annotated[list[dict[str, Any]], operator.add]
    debate_tokens: Annotated[int, operator.add]
    anonymized_transcript: str


def _choice(name: str, value: Any, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")


def _only_for(mode: str, given: dict[str, Any], other: str) -> None:
    """An option of the other mode is refused, not silently ignored."""
    passed = sorted(name for name, value in given.items() if value is not None)
    if passed:
        raise ValueError(f"{', '.join(passed)}: {other} option(s); mode {mode!r} does not read them")


def create_d3(
    *,
    mode: Mode | str = "samre",
    jurors: int = DEFAULT_JURORS,
    personas: Personas | Sequence[str] = "pool",
    persona_seed: int | None = None,
    verdict: VerdictBy | str = "jury",
    ties: Ties | str = "keep",
    vote_reading: VoteReading | str = "binary",
    unreadable: Unreadable | str = "missing",
    advocates: int | None = None,
    rounds: int | None = None,
    epsilon: float | None = None,
    convergence_window: int | None = None,
    min_rounds: int | None = None,
    token_budget: int | None = None,
    unread_summaries: bool | None = None,
    state_schema: type[Any] = D3State,
    context_schema: type[Any] = JuryContext,
) -> StateGraph:
    """An uncompiled D3 graph that compares the two answers of one pairwise item (``{"item": EvalItem}``).

    ``mode``: ``"samre"`` (one advocate per answer, up to ``rounds`` rounds with budgeted stopping; default) or
    ``"more"`` (``advocates`` advocates per answer, one round).
    ``jurors``: the jury's size (default 5). ``personas``: ``"pool"`` (a sample of the 50-persona pool drawn with
    ``persona_seed``, default 42, as the README and the paper describe the jury; default), ``"curated"`` (the
    released code's five, cycled), or a list of pool names (cycled). The jury and the seed are recorded in the
    verdict's ``detail``.
    ``verdict``: ``"jury"`` (the jury's tally; default) or ``"judge"`` (the judge's own result: SAMRE's mean round
    scores, MORE's scorer). ``ties``: ``"keep"`` (equal votes or scores are a tie; default) or ``"code"`` (the
    released code's: the second answer). ``vote_reading``: ``"binary"`` (a juror's last ``(1, 0)``/``(0, 1)``;
    default) or ``"any"`` (SAMRE's code: its last tuple of any integers, added to the tally as it is).
    ``unreadable``: ``"missing"`` (a reply without its tuple is re-asked once, then missing; default) or ``"code"``
    (no re-ask; it counts as ``(0, 0)``, as in the released code).

    SAMRE only (None = the released default): ``rounds`` R (5), ``epsilon`` (5.0), ``convergence_window`` (3),
    ``min_rounds`` (3), ``token_budget`` (None: no budget, as the released code, which counts no tokens; a number
    stops after the round in which the debate's calls passed it), ``unread_summaries`` (True: the judge and each
    juror summarise their reply after it, as the code does, though nobody reads those summaries).
    MORE only: ``advocates`` k (3).
    """
    _choice("mode", mode, MODES)
    _choice("verdict", verdict, VERDICTS)
    _choice("ties", ties, TIES)
    _choice("vote_reading", vote_reading, VOTE_READINGS)
    _choice("unreadable", unreadable, UNREADABLE)
    if persona_seed is not None and personas != "pool":
        raise ValueError("persona_seed draws the jury from the persona pool: it needs personas='pool'")
    jury = draw_jury(jurors, personas, DEFAULT_PERSONA_SEED if persona_seed is None else persona_seed)
    samre_options = {"rounds": rounds, "epsilon": epsilon, "convergence_window": convergence_window,
                     "min_rounds": min_rounds, "token_budget": token_budget, "unread_summaries": unread_summaries}
    detail: dict[str, Any] = {"mode": mode, "jury": [{"agent": j.agent, "persona": j.persona, "identity": j.identity}
                                                     for j in jury],
                              "personas": personas if isinstance(personas, str) else list(personas),
                              "ties": ties, "vote_reading": vote_reading, "unreadable": unreadable}
    if personas == "pool":
        detail["persona_seed"] = DEFAULT_PERSONA_SEED if persona_seed is None else persona_seed
    builder = StateGraph(state_schema, context_schema=context_schema)
    debate_end: str | None = None  # where MORE's debate ends; SAMRE's judge leaves it by its conditional edge
    if mode == "samre":
        _only_for(mode, {"advocates": advocates}, "MORE")
        chosen = {**SAMRE_DEFAULTS, **{k: v for k, v in samre_options.items() if v is not None}}
        stopping = Stopping(max_rounds=int(chosen["rounds"]), epsilon=float(chosen["epsilon"]),
                            window=int(chosen["convergence_window"]), min_rounds=int(chosen["min_rounds"]),
                            token_budget=chosen["token_budget"])
        if stopping.max_rounds < 1 or stopping.window < 1 or stopping.min_rounds < 1:
            raise ValueError("rounds, convergence_window and min_rounds must be at least 1")
        if stopping.epsilon < 0 or (stopping.token_budget is not None and stopping.token_budget < 1):
            raise ValueError("epsilon must be at least 0 and token_budget at least 1")
        summaries = bool(chosen["unread_summaries"])
        detail.update(max_rounds=stopping.max_rounds, epsilon=stopping.epsilon, convergence_window=stopping.window,
                      min_rounds=stopping.min_rounds, token_budget=stopping.token_budget, unread_summaries=summaries)
        _wire_samre(builder, stopping, summaries, unreadable)
    else:
        _only_for(mode, samre_options, "SAMRE")
        k = MORE_DEFAULTS["advocates"] if advocates is None else advocates
        if k < 1:
            raise ValueError("advocates must be at least 1")
        summaries = False  # MORE's code has no summarizer
        detail.update(max_rounds=1, advocates=k)
        debate_end = _wire_more(builder, k, unreadable)
    builder.add_node("transcript", make_transcript_node())
    if debate_end is not None:
        builder.add_edge(debate_end, "transcript")
    nodes = []
    for i, juror in enumerate(jury, 1):
        node = f"jury_{i}"
        builder.add_node(node, make_juror_node(juror, mode, vote_reading, summaries, unreadable, node))
        builder.add_edge("transcript", node)
        nodes.append(node)
    builder.add_node("verdict", make_verdict_node(mode, jury, verdict=verdict, ties=ties,  # type: ignore[arg-type]
                                                  detail=detail))
    builder.add_edge(nodes, "verdict")
    builder.add_edge("verdict", END)
    return builder


def _wire_samre(builder: StateGraph, stopping: Stopping, summaries: bool, unreadable: str) -> None:
    """Advocate 1, advocate 2 (who hears advocate 1's argument of the round), the judge; then another round or the
    transcript (the judge's conditional edge leaves the debate itself)."""
    builder.add_node("advocate_1", make_samre_advocate_node(1, "advocate_1"))
    builder.add_node("advocate_2", make_samre_advocate_node(2, "advocate_2"))
    builder.add_node("judge", make_samre_judge_node(stopping, summaries, unreadable))
    builder.add_edge(START, "advocate_1")
    builder.add_edge("advocate_1", "advocate_2")
    builder.add_edge("advocate_2", "judge")

    def route(state: dict[str, Any]) -> str:
        """Budgeted stopping: the judge recorded why the debate stops (None: it goes on)."""
        return NEXT_ROUND if state.get("stopped") is None else STOP

    builder.add_conditional_edges("judge", route, {NEXT_ROUND: "advocate_1", STOP: "transcript"})


def _wire_more(builder: StateGraph, k: int, unreadable: str) -> str:
    """Group 1's k advocates (one superstep), its aggregator; group 2's (who hear group 1's merged argument), its
    aggregator; the judge's feedback, the scorer's scores."""
    previous: str | list[str] = START
    for side in (1, 2):
        advocates = [f"advocate_{side}_{i}" for i in range(1, k + 1)]
        for i, node in enumerate(advocates, 1):
            builder.add_node(node, make_more_advocate_node(side, i, k, node))
            builder.add_edge(previous, node)  # type: ignore[arg-type]
        aggregator = f"aggregator_{side}"
        builder.add_node(aggregator, make_more_aggregator_node(side, aggregator))
        builder.add_edge(advocates, aggregator)
        previous = aggregator
    builder.add_node("judge", make_more_judge_node())
    builder.add_node("scorer", make_more_scorer_node(unreadable))
    builder.add_edge(previous, "judge")  # type: ignore[arg-type]
    builder.add_edge("judge", "scorer")
    return "scorer"


__all__ = ["MORE_DEFAULTS", "SAMRE_DEFAULTS", "VERDICTS", "D3State", "create_d3"]
