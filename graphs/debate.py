"""DEBATE (Kim, Kim, Yoon): a Scorer and a Devil's-Advocate Critic debate, relayed by a Commander.

The graph is Figure 1's star around the Commander, with Algorithm 1's loop as its conditional edge::

    START -> commander -(next_step)-> scorer | critic | tie_breaker | finalize
    scorer -> commander      critic -> commander      tie_breaker -> finalize -> END

The Commander frames the task and forwards every message (D.1 steps 2-6); after each Critic review it
ends the debate on NO ISSUE (:func:`~jurygraph.nodes.debate.ends_debate`), otherwise the Scorer
revises, for at most ``max_iterations`` reviews (default 4, the paper's best n, Figure 2). When the
debate is inconclusive the n-th iteration's score stands, or, with ``tie_breaker=True``, the
Tie-breaker reads the debate log and decides (Appendix E.3).

Models per agent come from the runtime context by agent name (``Scorer``, ``Critic``,
``Tie-breaker``, ``Commander``) or role (``scorer``, ``critic``, ``tie_breaker``, ``commander``); the
Commander calls its model only with ``commander_llm=True`` (see :mod:`jurygraph.nodes.debate`).
"""

from __future__ import annotations

import operator
from collections.abc import Hashable, Mapping
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph

from jurygraph.graphs.spec import Built, Option, PanelMembers, Params, ProtocolSpec
from jurygraph.judging.state import JuryState
from jurygraph.llm.models import JuryContext
from jurygraph.nodes.debate import (
    CRITIC_PERSONAS,
    NO_ISSUE_RULES,
    SUMMEVAL_TEMPLATES,
    CriticPersona,
    NoIssueRule,
    SummEvalTemplates,
    make_commander_node,
    make_critic_node,
    make_finalize_node,
    make_scorer_node,
    make_tie_breaker_node,
)

DEFAULT_MAX_ITERATIONS = 4  # Figure 2 (left): n = 4 gives DEBATE's best correlation


class DebateState(JuryState, total=False):
    """JuryState plus the debate's counters: ``iteration`` = Critic reviews so far, ``speaker`` = who
    spoke last (the Commander relays it), ``next_step`` = the Commander's routing decision,
    ``scores`` = every Scorer judgment with its iteration, ``reviews`` = every Critic review."""

    iteration: int
    speaker: str
    next_step: str
    scores: Annotated[list[dict[str, Any]], operator.add]
    reviews: Annotated[list[dict[str, Any]], operator.add]


def _edge_labels(tie_breaker: bool) -> dict[Hashable, str]:
    """Readable labels of the Commander's conditional edge (they show in ``draw_mermaid()``)."""
    labels: dict[Hashable, str] = {"score or revise": "scorer", "review": "critic",
                                   ("NO ISSUE" if tie_breaker else "NO ISSUE or n reached"): "finalize"}
    if tie_breaker:
        labels["n reached"] = "tie_breaker"
    return labels


def create_debate(
    *,
    critic: str | CriticPersona = "strict",
    max_iterations: int = DEFAULT_MAX_ITERATIONS,
    tie_breaker: bool = False,
    commander_llm: bool = False,
    template: str | None = None,
    no_issue_rule: NoIssueRule | str = "paper",
    summeval_templates: SummEvalTemplates | str = "geval",
    state_schema: type[Any] = DebateState,
    context_schema: type[Any] = JuryContext,
) -> StateGraph:
    """An uncompiled DEBATE graph that scores one item on one aspect (``{"item": EvalItem}``).

    ``critic``: the Critic's persona -- ``"strict"`` (DEBATE, Section 2; default), ``"moderate"``,
    ``"weak"``, ``"plain"`` (the MultiAgent baseline), ``"sophisticated"`` (Appendix C), or a
    :class:`CriticPersona` with your own text. ``max_iterations``: n of Algorithm 1.
    ``tie_breaker``: decide inconclusive debates with the Tie-breaker instead of the n-th score.
    ``commander_llm``: the Commander's model formulates its request to the Scorer (one call per item)
    instead of the fixed zero-shot CoT request; relays stay verbatim either way.
    ``template``: a predefined template replacing the built-in one (same slots).
    ``no_issue_rule``: when a Critic reply ends the debate -- ``"paper"`` (Algorithm 1 line 8, the capitals
    NO ISSUE anywhere in the reply; default) or ``"strict"`` (the token must stand alone or open the reply,
    so "no issue with X, but ..." continues). ``summeval_templates``: SummEval's consistency, fluency and
    relevance templates -- ``"geval"`` (G-Eval's released ``*_detailed.txt``, which the paper says its templates
    follow; default) or ``"jurygraph"`` (the project's own in the frame of G.2); coherence is G.2 either way.
    Every call is at temperature 0, top_p 1. The verdict's ``detail`` says how the debate ended and lists every
    score the Scorer gave.
    """
    if max_iterations < 1:
        raise ValueError("max_iterations must be at least 1 (Algorithm 1 runs i = 1..n)")
    persona = CriticPersona.of(critic)
    if summeval_templates not in SUMMEVAL_TEMPLATES:
        raise ValueError(f"unknown SummEval templates {summeval_templates!r}; choose one of "
                         f"{', '.join(SUMMEVAL_TEMPLATES)}")
    builder = StateGraph(state_schema, context_schema=context_schema)
    commander = make_commander_node(persona, max_iterations, tie_breaker, template, llm=commander_llm,
                                    summeval_templates=summeval_templates)
    builder.add_node("commander", commander)
    builder.add_node("scorer", make_scorer_node(template, summeval_templates=summeval_templates))
    builder.add_node("critic", make_critic_node(no_issue_rule=no_issue_rule))
    builder.add_node("finalize", make_finalize_node(persona, max_iterations))
    if tie_breaker:
        builder.add_node("tie_breaker", make_tie_breaker_node(template, summeval_templates=summeval_templates))
        builder.add_edge("tie_breaker", "finalize")
    labels = _edge_labels(tie_breaker)
    by_node = {node: str(label) for label, node in labels.items()}

    def route(state: dict[str, Any]) -> str:
        """Algorithm 1's loop: the Commander's decision (``next_step``) as this edge's label."""
        return by_node[str(state["next_step"])]

    builder.add_edge(START, "commander")
    builder.add_conditional_edges("commander", route, labels)
    builder.add_edge("scorer", "commander")
    builder.add_edge("critic", "commander")
    builder.add_edge("finalize", END)
    return builder


# --- the protocol on the command line and around a run (graphs/spec.py) ---------------------------------------

CRITIC = Option("critic", str, "strict",
                "DEBATE (and chateval --devil): the Critic's persona (default: strict = DEBATE's Devil's Advocate; "
                "plain = MultiAgent baseline)", choices=tuple(CRITIC_PERSONAS))
NO_ISSUE_RULE = Option("no_issue_rule", str, "paper",
                       "DEBATE (and chateval --devil): when the Critic ends the debate: paper = 'NO ISSUE' anywhere in "
                       "the reply (Algorithm 1, default); strict = the token alone on a line or opening the reply",
                       choices=NO_ISSUE_RULES)
OPTIONS: tuple[Option, ...] = (
    CRITIC,
    Option("max_iterations", int, DEFAULT_MAX_ITERATIONS,
           f"DEBATE: n, the most Critic reviews (default {DEFAULT_MAX_ITERATIONS})", minimum=1),
    Option("tie_breaker", bool, False, "DEBATE: a Tie-breaker decides when the Critic never says NO ISSUE"),
    NO_ISSUE_RULE,
    Option("summeval_templates", str, "geval",
           "DEBATE on SummEval consistency/fluency/relevance: geval = G-Eval's released prompts, which the paper says "
           "its templates follow (default; fluency 1-3), or jurygraph = the project's own (1-5)",
           choices=SUMMEVAL_TEMPLATES),
    Option("commander_llm", bool, False,
           "DEBATE: the Commander's model words its request to the Scorer (one more call)"),
)
SCORER = "Scorer"
# its panel for metaeval: the one Scorer, before and after the Critic's reviews
BEFORE, AFTER = "Scorer (before critique)", "Scorer (after critique)"


def _build(values: Params) -> Built:
    params = {"critic": values["critic"], "max_iterations": values["max_iterations"],
              "tie_breaker": values["tie_breaker"], "commander_llm": values["commander_llm"],
              "no_issue_rule": values["no_issue_rule"]}
    if values["summeval_templates"] != "geval":  # recorded when chosen, so a default run's manifest is unchanged
        params["summeval_templates"] = values["summeval_templates"]
    return Built(create_debate(**params), params)


def _plan(params: Params) -> int:
    n = int(params.get("max_iterations") or 1)
    # the Scorer's first score and its n revisions (each may be re-asked), n Critic reviews, the tie-breaker (and its
    # re-ask), the Commander
    return 2 * (n + 1) + n + (2 if params.get("tie_breaker") else 0) + (1 if params.get("commander_llm") else 0)


def _bounds(params: Params) -> tuple[str, str]:
    n = int(params.get("max_iterations") or 1)
    tie = ", then the tie-breaker" if params.get("tie_breaker") else ""
    return "the Critic says NO ISSUE at its first review", f"the Critic never says NO ISSUE ({n} reviews{tie})"


def _score(value: Any) -> dict[str, Any]:
    if value is None:
        return {"kind": "score", "missing": True, "reason": "no score in this iteration"}
    return {"kind": "score", "missing": False, "score": float(value)}


def _members(record: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The Scorer's first score and its last (``verdict.detail.scores``)."""
    scores = (((record.get("verdict") or {}).get("detail") or {}).get("scores")) or []
    return {BEFORE: _score(scores[0]), AFTER: _score(scores[-1])} if scores else {}


def _rounds(record: Mapping[str, Any]) -> list[dict[str, dict[int, Any]]]:
    """The Scorer's score of every iteration: one member revising after each critique."""
    scores = (((record.get("verdict") or {}).get("detail") or {}).get("scores")) or []
    return [{SCORER: {i: None if s is None else float(s) for i, s in enumerate(scores)}}] if scores else []


SPEC = ProtocolSpec(
    name="debate",
    factory=create_debate,
    help="DEBATE: Scorer and Devil's-Advocate Critic relayed by a Commander",
    options=OPTIONS,
    build=_build,
    tasks=("score",),
    conversations=("score",),
    plan=_plan,
    bounds=_bounds,
    signals=lambda params, task: set(),  # one Scorer: no panel to agree or disagree
    panel=PanelMembers(read=_members, agent_of_member=lambda member: SCORER, rounds=_rounds),
    # strict Critic, n = 4 iterations (its Figure 2 best), the Scorer's last score decides
    studio={"debate": lambda: create_debate()},
    order=20,
)
