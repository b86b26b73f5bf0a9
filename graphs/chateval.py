"""ChatEval (Chan et al.): a panel of referees with personas discussing over T turns.

The three communication strategies of the paper are three wirings of the same nodes:

- one-by-one (Algorithm 1): referees speak in turn; each hears everything said before it.
- simultaneous (Algorithm 2): the referees of a round run in ONE LangGraph superstep, so nobody hears
  a same-round message; a delivery node then adds the round to every history (the paper's buffer).
- summarizer (Algorithm 3): as simultaneous, but a summarizer LLM condenses the round. ``summary_mode``:
  ``append`` (default): Algorithm 3 as printed (arXiv text), the round's summary is appended to every
  history and the raw messages reach nobody; ``replace``: the ICLR text, a cumulative summary replaces
  every history; ``code``: the released code, every referee receives the raw messages AND its own
  running summary of its whole memory (see :mod:`jurygraph.nodes.discussion`).

The verdict (``aggregate``): ``"average"`` (default): each assistant's mean score over the referees'
final judgments, equal means a tie, as the paper's "average" for direct scores and its scoring script
(which sums the scores); ``"majority"``: a vote of each referee's label. Generation parameters are the
paper's and the released configs': temperature 0, 512 max tokens (``--gen`` overrides them).

:func:`wire_turns` expresses any mix: each turn is a list of speaking groups, a group speaks
simultaneously, groups follow one another.

Beyond the paper (opt-in, jurygraph's own): ``stop_when="consensus"`` asks every referee for its judgment
each turn and turns every hand-over between turns into a conditional edge to the aggregator, taken when the
panel agrees (:func:`stop_on_consensus`, an edit of the edges :func:`wire_turns` drew);
:func:`create_chateval_devil` inserts a devil's advocate after every turn (:mod:`jurygraph.graphs.devil`).

``SPEC`` (at the end) is the protocol as every command sees it (:mod:`jurygraph.graphs.spec`): ``--protocol
chateval`` with its options, the devil's included.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda
from langgraph.graph import END, START, StateGraph

from jurygraph.graphs.calibration import NO_CALIBRATE
from jurygraph.graphs.debate import CRITIC, NO_ISSUE_RULE
from jurygraph.graphs.devil import add_devil
from jurygraph.graphs.spec import Built, Option, Params, ProtocolSpec, panel_signals
from jurygraph.graphs.wiring import exit_when, replace_edges, turn_boundaries
from jurygraph.judging.aggregation import (
    AGGREGATE_METHODS,
    CODE_ATTEMPTS,
    UNREADABLE_RULES,
    AggregateMethod,
    UnreadableRule,
    consensus,
)
from jurygraph.judging.state import JuryState, judgments_of, merge_dicts
from jurygraph.llm.models import JuryContext
from jurygraph.nodes.aggregator import make_aggregator_node
from jurygraph.nodes.common import node_id
from jurygraph.nodes.debate import CriticPersona, NoIssueRule
from jurygraph.nodes.discussion import (
    SUMMARY_MODES,
    SummaryMode,
    make_delivery_node,
    make_summarizer_node,
    merge_buffer,
)
from jurygraph.nodes.referee import ChatEvalTemplate, Referee, chateval_personas, make_referee_node

Strategy = Literal["one-by-one", "simultaneous", "summarizer"]
STRATEGIES: tuple[str, ...] = ("one-by-one", "simultaneous", "summarizer")
StopWhen = Literal["consensus"]
STOP_WHEN: tuple[str, ...] = ("consensus",)
TurnPlan = Sequence[Sequence[str]]  # one turn: groups of referee names; a group speaks simultaneously


class ChatEvalState(JuryState, total=False):
    round_buffer: Annotated[dict[str, AIMessage], merge_buffer]
    summary: str
    summaries: Annotated[dict[str, str], merge_dicts]  # summary_mode="code": each referee's running summary
    reviews: Annotated[list[dict[str, Any]], operator.add]  # the devil's advocate's objections (graphs/devil.py)
    # each referee's judgment of each round, when judgments are asked every round (``judge_every_turn``)
    round_judgments: Annotated[list[dict[str, Any]], operator.add]


def strategy_plan(strategy: str, names: Sequence[str], turns: int) -> list[TurnPlan]:
    """The speaking plan of a named strategy: per turn, the groups that speak one after another."""
    if strategy == "one-by-one":
        return [[(n,) for n in names] for _ in range(turns)]
    if strategy in ("simultaneous", "summarizer"):
        return [[tuple(names)] for _ in range(turns)]
    raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")


def wire_turns(builder: StateGraph, referees: Sequence[Referee], plan: Sequence[TurnPlan], *,
               summarize: bool = False, summary_mode: SummaryMode = "append",
               template: ChatEvalTemplate | None = None, summary_template: str | None = None,
               after: str = START, judge_every_turn: bool = False,
               unreadable: UnreadableRule | str = "missing") -> str:
    """Add the speaking nodes of ``plan`` to ``builder`` and wire them; returns the last node.

    A group of one referee speaks straight into everyone's history. A group of several speaks in one
    superstep into the round buffer, then a delivery node (or, with ``summarize``, a summarizer node)
    passes the round on. Every referee hears every message, its own included, as in the original code;
    a referee's last turn in the plan carries the answer form and yields its judgment (with
    ``judge_every_turn``, every turn does: early stop and the devil's advocate need each round's judgments).
    ``unreadable``: how a judging turn treats an unreadable reply (:func:`~jurygraph.nodes.referee.make_referee_node`).
    """
    by_name = {r.name: r for r in referees}
    audience = [r.name for r in referees]
    last_turn = {name: t for t, turn in enumerate(plan, 1) for group in turn for name in group}
    unknown = set(last_turn) - set(by_name)
    if unknown:
        raise KeyError(f"plan names referees not on the panel: {sorted(unknown)}")
    previous = after
    for t, turn in enumerate(plan, 1):
        for g, group in enumerate(turn, 1):
            speakers = [by_name[n] for n in group]
            buffered = len(speakers) > 1
            nodes = []
            for referee in speakers:
                node = f"{node_id(referee.name)}_t{t}"
                final = judge_every_turn or last_turn[referee.name] == t
                builder.add_node(node, make_referee_node(referee, t, final=final, audience=audience,
                                                         buffered=buffered, template=template,
                                                         record_round=judge_every_turn, unreadable=unreadable))
                builder.add_edge(previous, node)
                nodes.append(node)
            if not buffered:
                previous = nodes[0]
                continue
            suffix = f"t{t}" if len(turn) == 1 else f"t{t}_g{g}"
            is_last_round = t == len(plan) and g == len(turn)
            if summarize and not is_last_round:
                join = f"summarizer_{suffix}"
                builder.add_node(join, make_summarizer_node(group, audience, t, join, summary_mode, summary_template))
            else:
                # after the last round nobody speaks again: deliver without paying for a summary
                join = f"round_{suffix[1:]}"
                builder.add_node(join, make_delivery_node(group, audience, join))
            builder.add_edge(nodes, join)
            previous = join
    return previous


def create_chateval(
    *,
    referees: int | None = None,
    personas: Sequence[str | Referee] | str | None = None,
    turns: int = 2,
    strategy: Strategy | str = "one-by-one",
    summary_mode: SummaryMode = "append",
    aggregate: AggregateMethod = "average",
    template: str | None = None,
    final_prompt: str | None = None,
    summary_template: str | None = None,
    stop_when: StopWhen | None = None,
    consensus_tolerance: float = 0.0,
    record_rounds: bool = False,
    judge_every_turn: bool = False,
    unreadable: UnreadableRule | str = "missing",
    state_schema: type[Any] = ChatEvalState,
    context_schema: type[Any] = JuryContext,
) -> StateGraph:
    """An uncompiled ChatEval graph that judges one item (``{"item": EvalItem}``).

    ``referees``: panel size (default 2: General Public, Critic); ``personas``: the paper's persona
    names, custom :class:`Referee` objects, or ``"same-role"`` for the Annotator ablation. Each
    referee's model comes from the runtime context by its name, else the ``"referee"`` role. The
    verdict combines the final-turn judgments: scores are averaged; pairwise, ``aggregate="average"``
    (the paper) compares each assistant's mean score, ``"majority"`` votes the referees' labels.

    ``stop_when="consensus"`` (jurygraph's own, not the paper's): every referee answers in the final-turn
    form in every round, and after each round a conditional edge goes to the aggregator as soon as the
    panel agrees (pairwise: the same winner; scores: within ``consensus_tolerance``); the verdict's
    ``detail["rounds"]`` records the round it stopped at. ``record_rounds`` records it without stopping, and
    ``judge_every_turn`` asks for the answer form every turn without stopping (for hybrids that edit the
    hand-overs themselves, e.g. :func:`jurygraph.graphs.devil.create_chateval_devil`).

    ``unreadable``: a final reply that cannot be read is re-asked once with the format reminder and then a missing
    judgment, left out of the verdict and counted (``"missing"``, jurygraph's rule, default); or, as the released
    code, the same prompt is sent again up to 3 times in all and a pairwise item with an unreadable judgment is a
    tie (``"code"``; the scoring script's ``except``: "tie"; score items keep the judgment missing).
    """
    if turns < 1:
        raise ValueError("turns must be at least 1")
    if summary_mode not in SUMMARY_MODES:
        raise ValueError("summary_mode must be 'append' (Algorithm 3, arXiv), 'replace' (ICLR) or 'code' "
                         "(the released code)")
    if aggregate not in (*AGGREGATE_METHODS, "mean"):
        raise ValueError(f"aggregate must be one of {', '.join(AGGREGATE_METHODS)}, not {aggregate!r}")
    if stop_when not in (None, *STOP_WHEN):
        raise ValueError(f"stop_when must be one of {', '.join(STOP_WHEN)} or None, not {stop_when!r}")
    if consensus_tolerance < 0:
        raise ValueError("consensus_tolerance must be at least 0")
    if unreadable not in UNREADABLE_RULES:
        raise ValueError(f"unreadable must be one of {', '.join(UNREADABLE_RULES)}, not {unreadable!r}")
    panel = chateval_personas(personas, referees)
    plan = strategy_plan(strategy, [r.name for r in panel], turns)
    builder = StateGraph(state_schema, context_schema=context_schema)
    frame = ChatEvalTemplate(template, final_prompt)
    last = wire_turns(builder, panel, plan, summarize=strategy == "summarizer", summary_mode=summary_mode,
                      template=frame, summary_template=summary_template,
                      judge_every_turn=judge_every_turn or stop_when is not None, unreadable=unreadable)
    names = [r.name for r in panel]
    annotate = rounds_detail(names, turns, consensus_tolerance) if stop_when or record_rounds else None
    builder.add_node("aggregate", make_aggregator_node(names, method=aggregate, annotate=annotate,
                                                       unreadable=unreadable))
    builder.add_edge(last, "aggregate")
    builder.add_edge("aggregate", END)
    if stop_when == "consensus":
        stop_on_consensus(builder, names, consensus_tolerance)
    return builder


def stop_on_consensus(builder: StateGraph, names: Sequence[str], tolerance: float = 0.0,
                      ends: Sequence[str] | None = None, exit_to: str = "aggregate") -> StateGraph:
    """Early stop as an edit of edges: each node that ends a turn (``ends``, default every hand-over of
    :func:`turn_boundaries`) gets a conditional edge to ``exit_to`` when the referees ``names`` agree."""
    agree = panel_agrees(names, tolerance)
    for end_of_turn in ends if ends is not None else [end for end, _ in turn_boundaries(builder)]:
        if end_of_turn.startswith("summarizer_"):
            check, deliver = _check_before_summary(builder, end_of_turn, names, exit_to)
            exit_when(builder, check, agree, deliver, label="consensus")
        else:
            exit_when(builder, end_of_turn, agree, exit_to, label="consensus")
    return builder


def _check_before_summary(builder: StateGraph, summarizer: str, names: Sequence[str],
                          exit_to: str) -> tuple[str, str]:
    """With the summarizer, agreement is checked before the round's summary, so an agreeing panel pays for no
    summary: ``[speakers] -> consensus_tN -> summarizer_tN`` and, for the exit, ``round_N -> exit_to`` (a free
    delivery, as after the last round, so the transcript keeps the round)."""
    suffix = summarizer.removeprefix("summarizer_")
    check, deliver = f"consensus_{suffix}", f"round_{suffix[1:]}"
    sources = next(s for s, target in builder.waiting_edges if target == summarizer)
    builder.add_node(check, RunnableLambda(lambda state: {}, name=check))  # a branching point: no update
    builder.add_node(deliver, make_delivery_node(names, names, deliver))
    replace_edges(builder, remove=[(s, summarizer) for s in sources],
                  add=[(sources, check), (check, summarizer), (deliver, exit_to)])
    return check, deliver


def panel_agrees(names: Sequence[str], tolerance: float = 0.0) -> Callable[[dict[str, Any]], bool]:
    """A condition on the state: every referee's latest judgment agrees (:func:`consensus`)."""
    members = tuple(names)

    def agree(state: dict[str, Any]) -> bool:
        stored = judgments_of(state)
        return all(n in stored for n in members) and consensus([stored[n] for n in members], tolerance)

    return agree


def rounds_detail(names: Sequence[str], turns: int,
                  tolerance: float = 0.0) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """What the verdict records about the rounds: how many ran of ``turns``, why it stopped (``consensus``,
    the devil's ``no_issue``, or ``None`` = all rounds), whether the panel agreed at the end, and each
    referee's judgment of each round (``round_judgments``, when asked every round: how referees moved)."""
    agree = panel_agrees(names, tolerance)

    def detail(state: dict[str, Any]) -> dict[str, Any]:
        ran = int(state.get("turn") or 0)
        reviews = state.get("reviews") or []
        stopped = None
        if reviews and reviews[-1].get("no_issue"):
            stopped = "no_issue"
        elif ran < turns:
            stopped = "consensus"
        found: dict[str, Any] = {"rounds": ran, "max_rounds": turns, "stopped": stopped, "consensus": agree(state)}
        if state.get("round_judgments"):
            found["round_judgments"] = list(state["round_judgments"])
        return found

    return detail


def create_chateval_devil(
    *,
    referees: int | None = None,
    personas: Sequence[str | Referee] | str | None = None,
    critic: str | CriticPersona = "strict",
    no_issue_rule: NoIssueRule | str = "paper",
    stop_when: StopWhen | None = None,
    consensus_tolerance: float = 0.0,
    **chateval_options: Any,
) -> StateGraph:
    """An uncompiled ChatEval graph with a devil's advocate after every turn but the last
    (:mod:`jurygraph.graphs.devil`, jurygraph's own hybrid of ChatEval and DEBATE).

    ``critic``: the devil's system message, one of DEBATE's Critic personas (default ``"strict"``, DEBATE's
    Devil's Advocate) or a :class:`CriticPersona`; ``no_issue_rule``: DEBATE's ``"paper"`` substring test
    (default) or ``"strict"``. ``stop_when``/``consensus_tolerance`` as in :func:`create_chateval`; the other
    options (``turns``, ``strategy``, ``aggregate``, ...) are :func:`create_chateval`'s. The verdict's
    ``detail["rounds"]`` and ``detail["stopped"]`` (``"no_issue"``, ``"consensus"`` or None) say how it ended.
    """
    if stop_when not in (None, *STOP_WHEN):
        raise ValueError(f"stop_when must be one of {', '.join(STOP_WHEN)} or None, not {stop_when!r}")
    names = [r.name for r in chateval_personas(personas, referees)]
    builder = create_chateval(referees=referees, personas=personas, consensus_tolerance=consensus_tolerance,
                              judge_every_turn=True, record_rounds=True, **chateval_options)
    ends = add_devil(builder, names, critic=critic, no_issue_rule=no_issue_rule)
    if stop_when == "consensus":
        stop_on_consensus(builder, names, consensus_tolerance, ends=ends)
    return builder


# --- the protocol on the command line and around a run (graphs/spec.py) ---------------------------------------

AGENTS = Option("agents", int, None, "ChatEval (and Ensemble): number of referees (default 2)", minimum=1)
PERSONAS = Option("personas", str, None,
                  "ChatEval (and Ensemble): comma-separated persona names from the paper, or 'same-role'")
OPTIONS: tuple[Option, ...] = (
    Option("strategy", str, "one-by-one", "ChatEval communication strategy (default: one-by-one)",
           choices=STRATEGIES),
    AGENTS,
    PERSONAS,
    Option("turns", int, 2, "ChatEval: discussion turns (default 2)", minimum=1),
    Option("summary_mode", str, "append",
           "ChatEval summarizer: append the round summary (Algorithm 3, arXiv; default), replace the history (ICLR), "
           "or code: raw messages plus each referee's running summary (the released code)", choices=SUMMARY_MODES),
    Option("aggregate", str, "average",
           "ChatEval pairwise verdict: compare each assistant's average score over the referees (default, the "
           "paper) or a majority vote of their labels", choices=AGGREGATE_METHODS),
    Option("unreadable", str, "missing",
           "ChatEval: a final reply that cannot be read is re-asked once with the format reminder, then a missing "
           "judgment left out of the verdict (default, jurygraph's rule); code = as the released code, the same "
           "prompt up to 3 times, then a pairwise item with an unreadable judgment is a tie", choices=UNREADABLE_RULES),
    Option("stop_when", str, None,
           "ChatEval (jurygraph's own, not the paper): consensus = judge every round and stop as soon as the "
           "referees agree (pairwise: the same winner; scores: within --consensus-tolerance)", choices=STOP_WHEN),
    Option("consensus_tolerance", float, 0.0,
           "ChatEval --stop-when consensus: the largest spread of the referees' scores that counts as agreement "
           "(default 0)", minimum=0),
    Option("devil", bool, False,
           "ChatEval (jurygraph's own): a DEBATE Critic (persona --critic) objects to the panel's majority after "
           "each turn; NO ISSUE (--no-issue-rule) ends the discussion"),
    NO_CALIBRATE,
    CRITIC,
    NO_ISSUE_RULE,
)


def panel_size(params: Params) -> int:
    """How many referees the parameters ``agents``/``personas`` give (ChatEval's and the Ensemble's)."""
    personas = params.get("personas")
    if isinstance(personas, str) and personas != "same-role":
        return len([p for p in personas.split(",") if p.strip()])
    return int(params.get("agents") or 2)


def _build(values: Params) -> Built:
    options: dict[str, Any] = {"referees": values["agents"], "personas": values["personas"], "turns": values["turns"],
                               "strategy": values["strategy"], "summary_mode": values["summary_mode"],
                               "aggregate": values["aggregate"], "stop_when": values["stop_when"],
                               "consensus_tolerance": values["consensus_tolerance"], "unreadable": values["unreadable"]}
    if values["devil"]:
        graph = create_chateval_devil(critic=values["critic"], no_issue_rule=values["no_issue_rule"], **options)
    else:
        graph = create_chateval(**options)
    params = {"strategy": values["strategy"], "agents": values["agents"], "personas": values["personas"],
              "turns": values["turns"], "aggregate": values["aggregate"]}
    if values["strategy"] == "summarizer":
        params["summary_mode"] = values["summary_mode"]
    # the options that depart from the paper are recorded only when chosen, so a paper run's manifest is unchanged
    if values["stop_when"]:
        params.update(stop_when=values["stop_when"], consensus_tolerance=values["consensus_tolerance"])
    if values["devil"]:
        params.update(devil=True, critic=values["critic"], no_issue_rule=values["no_issue_rule"])
    if values["unreadable"] != "missing":
        params["unreadable"] = values["unreadable"]
    return Built(graph, params)


def _plan(params: Params) -> int:
    referees, turns = panel_size(params), int(params.get("turns") or 2)
    # the summarizer's summary of each round but the last; the released code's mode: each referee's running summary
    summaries = (turns - 1) * (referees if params.get("summary_mode") == "code" else 1) \
        if params.get("strategy") == "summarizer" else 0
    devils = turns - 1 if params.get("devil") else 0
    # every judgment may be re-asked once: the final turn's, or every turn's with early stop or the devil; with the
    # released code's rule it may be sent twice more instead
    judged_turns = turns if params.get("stop_when") or params.get("devil") else 1
    again = CODE_ATTEMPTS - 1 if params.get("unreadable") == "code" else 1
    return referees * turns + summaries + devils + referees * judged_turns * again


def _bounds(params: Params) -> tuple[str, str] | None:
    fewest, most = [], []
    if params.get("stop_when"):
        fewest.append("the referees agree in round 1")
        most.append(f"the referees never agree ({int(params.get('turns') or 2)} rounds)")
    if params.get("devil"):
        fewest.append("the devil's advocate says NO ISSUE after turn 1")
        most.append("the devil's advocate always objects")
    return ("; ".join(fewest), "; ".join(most)) if fewest else None


SPEC = ProtocolSpec(
    name="chateval",
    factory=create_chateval,
    help="ChatEval multi-referee debate",
    options=OPTIONS,
    build=_build,
    tasks=("pairwise", "score"),
    conversations=("pairwise", "score"),
    plan=_plan,
    bounds=_bounds,
    position_calibration=True,
    signals=lambda params, task: panel_signals(task, members=panel_size(params)),
    # 2 referees (General Public, Critic), 2 turns, one graph per strategy; then jurygraph's own edits
    studio={"chateval_one_by_one": lambda: create_chateval(strategy="one-by-one"),
            "chateval_simultaneous": lambda: create_chateval(strategy="simultaneous"),
            "chateval_summarizer": lambda: create_chateval(strategy="summarizer"),
            "chateval_early_stop": lambda: create_chateval(stop_when="consensus"),
            "chateval_devil": lambda: create_chateval_devil()},
    order=10,
)
