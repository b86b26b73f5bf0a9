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

On the command line (``jurygraph eval --protocol d3``) D3 is :data:`SPEC`, at the end of this module.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from langgraph.graph import END, START, StateGraph

from jurygraph.graphs.spec import Built, Option, Params, ProtocolSpec, panel_signals
from jurygraph.judging.state import JuryState
from jurygraph.llm.models import JuryContext
from jurygraph.nodes.d3 import (
    MODES,
    PERSONA_CHOICES,
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


# --- the spec: D3 on the command line (graphs/spec.py) -------------------------------------------------------

STOPPING = ("rounds", "epsilon", "convergence_window", "min_rounds", "token_budget")  # SAMRE's, None = released
SAMRE_ONLY = (*STOPPING, "no_unread_summaries")
MORE_ONLY = ("advocates",)
# the options' names are eval's flags: those another protocol reads with another meaning (ChatEval's personas and
# unreadable) or too general to be D3's alone on `eval --help` are named for D3
OPTIONS: tuple[Option, ...] = (
    Option("d3_mode", str, "samre",
           "D3 (Debate, Deliberate, Decide): samre = one advocate per answer over up to --rounds rounds, stopped "
           "early when the judge's scores converge (default); more = --advocates advocates per answer, one round",
           choices=MODES),
    Option("jurors", int, DEFAULT_JURORS, f"D3: the jury's size (default {DEFAULT_JURORS})", minimum=1,
           metavar="N"),
    Option("jury_personas", str, "pool",
           "D3: the jurors' personas: pool = drawn from the released 50-persona pool with --persona-seed (default, "
           "as the README and the paper describe the jury); curated = the released code's five curated identities, "
           "cycled; or NAME,NAME,... of the pool (prompts/d3/personas.json), cycled",
           metavar="{pool,curated,NAME,...}"),
    Option("persona_seed", int, None,
           f"D3 --jury-personas pool: the draw's seed (default {DEFAULT_PERSONA_SEED}), recorded in the manifest "
           "and in every verdict", metavar="SEED"),
    Option("rounds", int, None, f"D3 samre: at most R debate rounds (default {SAMRE_DEFAULTS['rounds']})",
           minimum=1, metavar="R"),
    Option("epsilon", float, None,
           "D3 samre: converged when the judge's score gaps over the last --convergence-window rounds span less "
           f"than epsilon and trend neither up nor down (default {SAMRE_DEFAULTS['epsilon']:g}; 0 never converges)",
           minimum=0),
    Option("convergence_window", int, None,
           f"D3 samre: rounds in the convergence window (default {SAMRE_DEFAULTS['convergence_window']})", minimum=1,
           metavar="W"),
    Option("min_rounds", int, None,
           f"D3 samre: no convergence before this round (default {SAMRE_DEFAULTS['min_rounds']}, the released "
           "code's; --convergence-window 2 --min-rounds 2 is the README's 'converge by round 2')", minimum=1,
           metavar="N"),
    Option("token_budget", int, None,
           "D3 samre: stop after the round in which the debate's tokens (input and output) pass B (default none: "
           "the released code counts no tokens)", minimum=1, metavar="B"),
    Option("no_unread_summaries", bool, False,
           "D3 samre: leave out the judge's and each juror's summary of its own reply, which nobody reads (the "
           "released code asks for them: one request each)"),
    Option("advocates", int, None, f"D3 more: advocates per answer (default {MORE_DEFAULTS['advocates']})",
           minimum=1, metavar="K"),
    Option("verdict_by", str, "jury",
           "D3: jury = the jurors' tally (default, the released code); judge = the judge's own result (samre: its "
           "mean round scores; more: the scorer's)", choices=VERDICTS),
    Option("d3_ties", str, "keep",
           "D3: equal votes are a tie (default, jurygraph's rule); code = the second answer wins, as the released "
           "code's tally", choices=TIES),
    Option("vote_reading", str, "binary",
           "D3: a juror's vote is its last (1, 0) or (0, 1) (default); any = SAMRE's code, its last tuple of any "
           "integers, added to the tally as it is", choices=VOTE_READINGS),
    Option("d3_unreadable", str, "missing",
           "D3: a judge, scorer or juror reply without its tuple is re-asked once, then missing (default, "
           "jurygraph's rule); code = read as (0, 0), never re-asked, as the released code", choices=UNREADABLE),
)


def _personas(text: str) -> str | list[str]:
    """``--jury-personas``: ``pool``, ``curated``, or pool names separated by commas."""
    if text in PERSONA_CHOICES:
        return text
    return [name.strip() for name in text.split(",") if name.strip()]


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _resolved(values: Params) -> dict[str, Any]:
    """The options' values with the mode's released defaults filled in (what a run records and its plan reads)."""
    mode = values["d3_mode"]
    chosen = {"d3_mode": mode, "jurors": int(values["jurors"]), "jury_personas": values["jury_personas"]}
    if values["jury_personas"] == "pool":
        chosen["persona_seed"] = DEFAULT_PERSONA_SEED if values["persona_seed"] is None else values["persona_seed"]
    if mode == "samre":
        chosen.update({k: SAMRE_DEFAULTS[k] if values[k] is None else values[k] for k in STOPPING})
        chosen["unread_summaries"] = not values["no_unread_summaries"]
    else:
        chosen["advocates"] = MORE_DEFAULTS["advocates"] if values["advocates"] is None else values["advocates"]
    chosen.update(verdict_by=values["verdict_by"], d3_ties=values["d3_ties"], vote_reading=values["vote_reading"],
                  d3_unreadable=values["d3_unreadable"])
    return chosen


def _build(values: Params) -> Built:
    mode = values["d3_mode"]
    other = MORE_ONLY if mode == "samre" else SAMRE_ONLY
    given = [_flag(name) for name in other if values[name] not in (None, False)]
    if given:
        raise ValueError(f"{', '.join(given)}: D3 {'more' if mode == 'samre' else 'samre'} option(s); "
                         f"--d3-mode {mode} does not read them")
    if values["persona_seed"] is not None and values["jury_personas"] != "pool":
        raise ValueError("--persona-seed draws the jury from the persona pool: it needs --jury-personas pool")
    personas = _personas(values["jury_personas"])
    chosen = _resolved(values)
    samre = {k: chosen[k] for k in STOPPING} if mode == "samre" else {}
    graph = create_d3(mode=mode, jurors=chosen["jurors"], personas=personas, persona_seed=values["persona_seed"],
                      verdict=values["verdict_by"], ties=values["d3_ties"], vote_reading=values["vote_reading"],
                      unreadable=values["d3_unreadable"], advocates=chosen.get("advocates"),
                      unread_summaries=chosen.get("unread_summaries"), **samre)
    seed = chosen.get("persona_seed")
    chosen["jury"] = [juror.persona for juror in draw_jury(chosen["jurors"], personas, seed)]
    return Built(graph, chosen)


def _samre(params: Params, name: str) -> Any:
    """A SAMRE setting as a run recorded it, or its released default."""
    value = params.get(name)
    return SAMRE_DEFAULTS[name] if value is None else value


def _plan(params: Params) -> int:
    """The most requests of one item: every reply that holds a tuple (the judge's or scorer's, each juror's vote)
    may be re-asked once (not with the code's reading of an unreadable reply); SAMRE runs R rounds."""
    again = 0 if params.get("d3_unreadable") == "code" else 1
    jurors = int(params.get("jurors") or DEFAULT_JURORS)
    if params.get("d3_mode", "samre") == "more":
        advocates = int(params.get("advocates") or MORE_DEFAULTS["advocates"])
        return 2 * advocates + 2 + 1 + (1 + again) + jurors * (1 + again)
    rounds, summary = int(_samre(params, "rounds")), int(_samre(params, "unread_summaries"))
    # a round: each advocate's defense and its summary (heard), the judge's score, its re-ask, its unread summary
    return rounds * (4 + 1 + again + summary) + jurors * (1 + again + summary)


def _bounds(params: Params) -> tuple[str, str] | None:
    """SAMRE may stop before R rounds: on convergence, from the code's minimum round, or on the token budget."""
    if params.get("d3_mode", "samre") == "more":
        return None
    rounds = int(_samre(params, "rounds"))
    first = max(int(_samre(params, "convergence_window")), int(_samre(params, "min_rounds")))
    fewest = []
    if params.get("token_budget") is not None and rounds > 1:
        fewest.append("the debate's tokens pass the budget in round 1")
    if first < rounds and float(_samre(params, "epsilon")) > 0:
        fewest.append(f"the judge's score gaps converge at round {first}")
    if not fewest:
        return None
    return " or ".join(fewest), f"the score gaps never converge ({rounds} rounds)"


SPEC = ProtocolSpec(
    name="d3",
    factory=create_d3,
    help="D3 (Debate, Deliberate, Decide): advocates per answer, a judge, a jury voting on the anonymized transcript",
    options=OPTIONS,
    build=_build,
    tasks=("pairwise",),
    conversations=(),  # its released prompts judge two plain answers; no conversation templates
    plan=_plan,
    bounds=_bounds,
    # the scripted judge repeats its scores, which the convergence rule reads as converged: the most renders R rounds
    most_values=lambda values: {"epsilon": 0.0} if values.get("d3_mode", "samre") == "samre" else {},
    # the jurors and the judge (SAMRE's Judge, MORE's Scorer) are the panel; the advocates give no judgment
    signals=lambda params, task: panel_signals(task, members=int(params.get("jurors") or DEFAULT_JURORS) + 1),
    studio={"d3_samre": lambda: create_d3(mode="samre"), "d3_more": lambda: create_d3(mode="more")},
    order=80,
)

__all__ = ["MORE_DEFAULTS", "OPTIONS", "SAMRE_DEFAULTS", "SPEC", "VERDICTS", "D3State", "create_d3"]
