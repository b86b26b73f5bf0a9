"""The protocols the command line knows, as one declarative table: each option is declared once (in
``OPTIONS``), each protocol (in ``PROTOCOLS``) names the options it reads and how they become its graph and
models. Graph modules stay pure factories: nothing here is imported by them.

``--calibrate`` wraps whichever pairwise protocol was chosen (:func:`calibrate_setup`); ChatEval and its
baselines judge pairwise data in both orders by default, as ChatEval's position calibration
(:func:`paper_positions`). ``--per-turn`` (``CONVERSATION_OPTIONS``, read by every protocol, with ``--rubric``,
``--max-context-tokens`` and ``--turn-aggregate``) judges each assistant turn of a conversation item
(:func:`turns_setup`). ``--escalate-when`` / ``--review-when`` (``DOUBT_OPTIONS``, read by every protocol) then
route the doubtful items after the verdict to a stronger judge or a person (:func:`routed_setup`).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from langgraph.graph import StateGraph

from jurygraph.cli.preflight import UsageError
from jurygraph.cli.trajectory import add_trajectory_arguments, trajectory_setup
from jurygraph.graphs.calibration import MODES, calibrate
from jurygraph.graphs.chateval import STOP_WHEN, STRATEGIES, create_chateval
from jurygraph.graphs.debate import DEFAULT_MAX_ITERATIONS, create_debate
from jurygraph.graphs.devil import create_chateval_devil
from jurygraph.graphs.ensemble import create_ensemble
from jurygraph.graphs.escalation import ESCALATION, route_doubtful
from jurygraph.graphs.faireval import create_faireval
from jurygraph.graphs.geval import create_analyze_rate, create_geval
from jurygraph.graphs.peer_discussion import create_refer_discussion
from jurygraph.graphs.refer import AREA_CHAIR, VARIANTS, create_refer, create_refer_peer, variant_samples
from jurygraph.graphs.single import create_single_agent
from jurygraph.graphs.turns import TURN_AGGREGATES, per_turn, turns_to_judge
from jurygraph.judging.aggregation import AGGREGATE_METHODS
from jurygraph.judging.benchmarks import task_of
from jurygraph.judging.doubt import SIGNALS, parse_conditions
from jurygraph.judging.items import EvalItem, TaskKind
from jurygraph.llm.models import ModelSpec
from jurygraph.nodes.debate import CRITIC_PERSONAS, NO_ISSUE_RULES
from jurygraph.nodes.discussion import SUMMARY_MODES
from jurygraph.nodes.geval import ESTIMATORS, FLUENCY_SCALES
from jurygraph.nodes.refer import FEEDBACK_MODES
from jurygraph.prompts import load_prompt_file


@dataclass
class ProtocolSetup:
    """A protocol ready to run: its uncompiled graph, the models per agent name/role, the parameters."""

    graph: StateGraph
    models: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    every_agent_has_a_model: bool = False  # ``models`` covers every agent: no --model needed
    escalation_requests: int = 0  # the most requests an escalated item adds (0: no escalation)
    turns: int = 1  # --per-turn: the most assistant turns one item has (each judged by the whole protocol)

    def requests_per_item(self) -> int:
        """The most model requests one item can cost under these parameters (every format re-ask and loop
        iteration included): what `eval` shows before a large plan starts, and what a dry run would print."""
        params = self.params
        protocol = PROTOCOLS.get(str(params.get("protocol")))
        count = protocol.requests(params) if protocol and protocol.requests else _by_nodes(self)
        return count * calibration_factor(params) * self.turns + self.escalation_requests

    def stop_bounds(self) -> tuple[str, str] | None:
        """When a plan may stop early, what gives its fewest and its most requests (what a dry run scripts);
        None for a fixed plan."""
        protocol = PROTOCOLS.get(str(self.params.get("protocol")))
        return protocol.bounds(self.params) if protocol and protocol.bounds else None


def _by_nodes(setup: ProtocolSetup) -> int:
    """A protocol without its own plan: two requests (a call and a re-ask) per node, loops not counted."""
    return 2 * max(1, len(setup.graph.nodes))


@dataclass(frozen=True)
class Option:
    """One command-line option: its flag and ``argparse`` keywords (``help`` names the protocols that read it)."""

    flag: str
    kwargs: dict[str, Any]


def option(flag: str, **kwargs: Any) -> Option:
    return Option(flag, kwargs)


# every protocol option, in the order `eval --help` shows them; each declared once
OPTIONS: list[Option] = [
    option("--strategy", choices=STRATEGIES, default="one-by-one",
           help="ChatEval communication strategy (default: one-by-one)"),
    option("--agents", type=int, default=None, help="ChatEval (and Ensemble): number of referees (default 2)"),
    option("--personas", default=None,
           help="ChatEval (and Ensemble): comma-separated persona names from the paper, or 'same-role'"),
    option("--turns", type=int, default=2, help="ChatEval: discussion turns (default 2)"),
    option("--summary-mode", choices=SUMMARY_MODES, default="append",
           help="ChatEval summarizer: append the round summary (Algorithm 3, arXiv; default), replace the history "
                "(ICLR), or code: raw messages plus each referee's running summary (the released code)"),
    option("--aggregate", choices=AGGREGATE_METHODS, default="average",
           help="ChatEval pairwise verdict: compare each assistant's average score over the referees (default, "
                "the paper) or a majority vote of their labels"),
    option("--stop-when", choices=STOP_WHEN, default=None,
           help="ChatEval (jurygraph's own, not the paper): consensus = judge every round and stop as soon as the "
                "referees agree (pairwise: the same winner; scores: within --consensus-tolerance)"),
    option("--consensus-tolerance", type=float, default=0.0,
           help="ChatEval --stop-when consensus: the largest spread of the referees' scores that counts as "
                "agreement (default 0)"),
    option("--devil", action="store_true",
           help="ChatEval (jurygraph's own): a DEBATE Critic (persona --critic) objects to the panel's majority "
                "after each turn; NO ISSUE (--no-issue-rule) ends the discussion"),
    option("--no-calibrate", action="store_true",
           help="chateval/single/ensemble on pairwise data: judge one order only (default: both orders, "
                "--calibrate bpc, as ChatEval's position calibration)"),
    option("--critic", choices=tuple(CRITIC_PERSONAS), default="strict",
           help="DEBATE (and chateval --devil): the Critic's persona (default: strict = DEBATE's Devil's Advocate; "
                "plain = MultiAgent baseline)"),
    option("--max-iterations", type=int, default=DEFAULT_MAX_ITERATIONS,
           help=f"DEBATE: n, the most Critic reviews (default {DEFAULT_MAX_ITERATIONS})"),
    option("--tie-breaker", action="store_true",
           help="DEBATE: a Tie-breaker decides when the Critic never says NO ISSUE"),
    option("--no-issue-rule", choices=NO_ISSUE_RULES, default="paper",
           help="DEBATE (and chateval --devil): when the Critic ends the debate: paper = 'NO ISSUE' anywhere in the "
                "reply (Algorithm 1, "
                "default); strict = the token alone on a line or opening the reply"),
    option("--commander-llm", action="store_true",
           help="DEBATE: the Commander's model words its request to the Scorer (one more call)"),
    option("--peers", default=None, metavar="SPEC,SPEC,...",
           help="ReFeR: one model spec per peer (K = their number; default 3 peers using --model)"),
    option("--area-chair", default=None, metavar="SPEC", help="ReFeR: the area chair's model spec"),
    option("--variant", choices=VARIANTS, default="turbo",
           help="ReFeR: turbo (area chair samples n, default 20) or lite (n = 1)"),
    option("--samples", type=int, default=None,
           help="number of samples n (ReFeR-Turbo's area chair: default 20; G-Eval/Analyze-Rate: default 20)"),
    option("--lite-from-turbo", action="store_true",
           help="ReFeR-Lite: take the first of Turbo's 20 area-chair samples (the released scripts) instead of "
                "its own n = 1 request (the paper)"),
    option("--peer-discussion", type=int, default=0, metavar="R",
           help="ReFeR (jurygraph's own, not the paper): the peers discuss R rounds one-by-one after their reviews, "
                "before the area chair reads their final reviews (default 0: no discussion)"),
    option("--feedback", choices=FEEDBACK_MODES, default="score",
           help="ReFeR: what peers pass to the area chair (default: score, the paper's best)"),
    option("--refer-template", default=None,
           help="ReFeR: a named prompt pair (e.g. aqua, bbh_du, csqa, gsm8k, icqd, agiqa)"),
    option("--prompt-file", default=None,
           help="ReFeR: a prompt file (e.g. from `jurygraph autoprompt`) for peers and area chair"),
    option("--ensemble-method", choices=("mean", "majority"), default="mean",
           help="Ensemble: average each answer's scores (default, the paper) or vote the labels"),
    option("--estimator", choices=ESTIMATORS, default="samples",
           help="G-Eval/Analyze-Rate expected score: mean of n samples (default) or probability-weighted from "
                "the score token's log-probabilities"),
    option("--sample-temperature", type=float, default=1.0,
           help="G-Eval/Analyze-Rate: temperature of the n samples (default 1, as in the papers)"),
    option("--fluency-scale", type=int, choices=FLUENCY_SCALES, default=3,
           help="G-Eval/Analyze-Rate on SummEval fluency: 3 = G-Eval's released 1-3 prompt (default), 5 = the "
                "project's 1-5 variant"),
    option("--calibrate", choices=MODES, default=None,
           help="pairwise tasks: FairEval's balanced position calibration (bpc), multiple evidence calibration "
                "(mec) or both, around the chosen protocol"),
    option("--mec-k", type=int, default=3, help="MEC: evidence samples per order (default 3)"),
    option("--mec-temperature", type=float, default=1.0, help="MEC: temperature of the evidence samples (default 1)"),
    option("--calibration-baseline", choices=("faireval", "chateval"), default="faireval",
           help="--protocol single with --calibrate: faireval = FairEval's own evaluator prompt, k reviews in one "
                "request (default, the papers' baseline); chateval = wrap ChatEval's single-agent graph"),
]


@dataclass(frozen=True)
class Protocol:
    """A protocol on the command line: its help, how its options become a graph, what it judges.

    ``paper_positions``: on pairwise data, judge both orders by default (ChatEval's position calibration).
    ``own_calibration``: what ``--calibrate`` runs instead of wrapping the protocol's graph (the single
    agent's: FairEval's own evaluator, unless ``--calibration-baseline chateval``)."""

    help: str
    build: Callable[[argparse.Namespace], ProtocolSetup]
    pairwise: bool = True
    paper_positions: bool = False
    own_calibration: Callable[[ProtocolSetup, str, argparse.Namespace], ProtocolSetup] | None = None
    requests: Callable[[dict[str, Any]], int] | None = None  # most requests per item, from the parameters
    bounds: Callable[[dict[str, Any]], tuple[str, str] | None] | None = None  # what gives the fewest/most requests
    options: tuple[str, ...] = ()  # the protocol options (dests) it reads; giving another one is an error
    # its single-agent form: what a stronger model runs alone on an escalated item (--escalate-to without
    # --escalate-protocol), with the most requests it costs
    single_agent: Callable[[argparse.Namespace], StateGraph] = lambda args: create_single_agent()
    single_agent_requests: Callable[[argparse.Namespace], int] = lambda args: 2


def _panel_size(params: dict[str, Any]) -> int:
    personas = params.get("personas")
    if isinstance(personas, str) and personas != "same-role":
        return len([p for p in personas.split(",") if p.strip()])
    return int(params.get("agents") or 2)


def _chateval_plan(params: dict[str, Any]) -> int:
    referees, turns = _panel_size(params), int(params.get("turns") or 2)
    summaries = turns - 1 if params.get("strategy") == "summarizer" else 0
    devils = turns - 1 if params.get("devil") else 0
    # every judgment may be re-asked once: the final turn's, or every turn's with early stop or the devil
    judged_turns = turns if params.get("stop_when") or params.get("devil") else 1
    return referees * turns + summaries + devils + referees * judged_turns


def _debate_plan(params: dict[str, Any]) -> int:
    n = int(params.get("max_iterations") or 1)
    # n Scorer turns (each may be re-asked) and n Critic reviews, the tie-breaker (and its re-ask), the Commander
    return 3 * n + (2 if params.get("tie_breaker") else 0) + (1 if params.get("commander_llm") else 0)


def _chateval_bounds(params: dict[str, Any]) -> tuple[str, str] | None:
    fewest, most = [], []
    if params.get("stop_when"):
        fewest.append("the referees agree in round 1")
        most.append(f"the referees never agree ({int(params.get('turns') or 2)} rounds)")
    if params.get("devil"):
        fewest.append("the devil's advocate says NO ISSUE after turn 1")
        most.append("the devil's advocate always objects")
    return ("; ".join(fewest), "; ".join(most)) if fewest else None


def _debate_bounds(params: dict[str, Any]) -> tuple[str, str]:
    n = int(params.get("max_iterations") or 1)
    tie = ", then the tie-breaker" if params.get("tie_breaker") else ""
    return "the Critic says NO ISSUE at its first review", f"the Critic never says NO ISSUE ({n} reviews{tie})"


def _refer_plan(params: dict[str, Any]) -> int:
    reviews = 1 + int(params.get("peer_discussion") or 0)  # each peer's review and its discussion turns
    return 2 * int(params.get("peers") or 3) * reviews + int(params.get("samples") or 1)  # n samples: n requests


def _samples_plan(params: dict[str, Any]) -> int:
    return int(params.get("samples") or 20)


def _chateval(args: argparse.Namespace) -> ProtocolSetup:
    options: dict[str, Any] = {"referees": args.agents, "personas": args.personas, "turns": args.turns,
                               "strategy": args.strategy, "summary_mode": args.summary_mode,
                               "aggregate": args.aggregate, "stop_when": args.stop_when,
                               "consensus_tolerance": args.consensus_tolerance}
    if args.devil:
        graph = create_chateval_devil(critic=args.critic, no_issue_rule=args.no_issue_rule, **options)
    else:
        graph = create_chateval(**options)
    params = {"strategy": args.strategy, "agents": args.agents, "personas": args.personas, "turns": args.turns,
              "aggregate": args.aggregate}
    if args.strategy == "summarizer":
        params["summary_mode"] = args.summary_mode
    # the options that depart from the paper are recorded only when chosen, so a paper run's manifest is unchanged
    if args.stop_when:
        params.update(stop_when=args.stop_when, consensus_tolerance=args.consensus_tolerance)
    if args.devil:
        params.update(devil=True, critic=args.critic, no_issue_rule=args.no_issue_rule)
    return ProtocolSetup(graph, {}, params)


def _debate(args: argparse.Namespace) -> ProtocolSetup:
    params = {"critic": args.critic, "max_iterations": args.max_iterations, "tie_breaker": args.tie_breaker,
              "commander_llm": args.commander_llm, "no_issue_rule": args.no_issue_rule}
    return ProtocolSetup(create_debate(**params), {}, params)


def _refer(args: argparse.Namespace) -> ProtocolSetup:
    specs = [s.strip() for s in (args.peers or "").split(",") if s.strip()]
    base_url = getattr(args, "base_url", None)
    options: dict[str, Any] = {
        "peers": len(specs) or 3, "variant": args.variant,
        "samples": None if args.variant == "lite" and args.samples in (None, 1) else args.samples,
        "feedback": args.feedback, "template": args.refer_template, "prompt_file": args.prompt_file,
        "lite_from_turbo": args.lite_from_turbo}
    rounds = args.peer_discussion or 0
    graph = create_refer_discussion(rounds=rounds, **options) if rounds else create_refer(**options)
    models: dict[str, Any] = {f"peer_{i}": ModelSpec.parse(spec, base_url=base_url)
                              for i, spec in enumerate(specs, 1)}
    if args.area_chair:
        models[AREA_CHAIR] = ModelSpec.parse(args.area_chair, base_url=base_url)
    params = {"peers": len(specs) or 3, "variant": args.variant,
              "samples": variant_samples(args.variant, args.samples if args.variant == "turbo" else None),
              "feedback": args.feedback, "template": args.refer_template, "prompt_file": args.prompt_file,
              "lite_from_turbo": args.lite_from_turbo}
    if rounds:
        params["peer_discussion"] = rounds
    return ProtocolSetup(graph, models, params, every_agent_has_a_model=bool(specs and args.area_chair))


def _single(args: argparse.Namespace) -> ProtocolSetup:
    return ProtocolSetup(create_single_agent(), {}, {})


def _ensemble(args: argparse.Namespace) -> ProtocolSetup:
    graph = create_ensemble(referees=args.agents, personas=args.personas, method=args.ensemble_method)
    return ProtocolSetup(graph, {}, {"agents": args.agents, "personas": args.personas,
                                     "method": args.ensemble_method})


def _form_filling(factory: Callable[..., StateGraph]) -> Callable[[argparse.Namespace], ProtocolSetup]:
    def build(args: argparse.Namespace) -> ProtocolSetup:
        n = args.samples or 20
        graph = factory(estimator=args.estimator, n=n, temperature=args.sample_temperature,
                        fluency_scale=args.fluency_scale)
        return ProtocolSetup(graph, {}, {"samples": n, "estimator": args.estimator,
                                         "temperature": args.sample_temperature,
                                         "fluency_scale": args.fluency_scale})

    return build


def _faireval_baseline(setup: ProtocolSetup, mode: str, args: argparse.Namespace) -> ProtocolSetup:
    """FairEval's calibrated single evaluator (FairEval.py): its own prompt, k reviews per order in ONE
    request at temperature 1, max_tokens 512; k = 1 without MEC, as ``FairEval.py -k 1``."""
    if args.calibration_baseline != "faireval":
        return calibrate_setup(setup, mode, args, baseline="chateval")
    k = args.mec_k if "mec" in mode else 1
    graph = create_faireval(k=k, bpc="bpc" in mode, params={"temperature": args.mec_temperature, "max_tokens": 512})
    params = {**setup.params, "calibrate": mode, "calibration_baseline": "faireval", "mec_k": k,
              "mec_temperature": args.mec_temperature}
    return ProtocolSetup(graph, setup.models, params, setup.every_agent_has_a_model)


# the options of every pairwise protocol: FairEval's calibrations around it
_CALIBRATION = ("calibrate", "mec_k", "mec_temperature")
_PANEL = ("agents", "personas", "no_calibrate")
_FORM_FILLING = ("samples", "estimator", "sample_temperature", "fluency_scale")

PROTOCOLS: dict[str, Protocol] = {
    "chateval": Protocol("ChatEval multi-referee debate", _chateval, paper_positions=True, requests=_chateval_plan,
                         bounds=_chateval_bounds,
                         options=(*_PANEL, "strategy", "turns", "summary_mode", "aggregate", "stop_when",
                                  "consensus_tolerance", "devil", "critic", "no_issue_rule", *_CALIBRATION)),
    "debate": Protocol("DEBATE: Scorer and Devil's-Advocate Critic relayed by a Commander", _debate,
                       requests=_debate_plan, bounds=_debate_bounds,
                       options=("critic", "max_iterations", "tie_breaker", "no_issue_rule", "commander_llm",
                                *_CALIBRATION)),
    "refer": Protocol("ReFeR: peer reviewers and an area chair", _refer, requests=_refer_plan,
                      options=("peers", "area_chair", "variant", "samples", "lite_from_turbo", "feedback",
                               "refer_template", "prompt_file", "peer_discussion", *_CALIBRATION),
                      single_agent=lambda args: create_refer_peer(template=args.refer_template,
                                                                  prompt_file=args.prompt_file)),
    "single": Protocol("Single-Agent baseline: one referee, ChatEval's single-agent prompt (released code; no "
                       "history, role or referee lines)", _single, paper_positions=True,
                       own_calibration=_faireval_baseline, requests=lambda params: 2,
                       options=("no_calibrate", "calibration_baseline", *_CALIBRATION)),
    "ensemble": Protocol("Multi-Agent (Ensemble) baseline: one independent referee per persona, no discussion",
                         _ensemble, paper_positions=True, requests=lambda params: 2 * _panel_size(params),
                         options=(*_PANEL, "ensemble_method", *_CALIBRATION)),
    "geval": Protocol("G-Eval: chain-of-thought form filling, expected score", _form_filling(create_geval),
                      pairwise=False, requests=_samples_plan, options=_FORM_FILLING,
                      single_agent=lambda args: _form_filling(create_geval)(args).graph,
                      single_agent_requests=lambda args: _samples_plan({"samples": args.samples})),
    "analyze-rate": Protocol("Analyze-Rate: G-Eval's prompt with an analysis before the rating",
                             _form_filling(create_analyze_rate), pairwise=False, requests=_samples_plan,
                             options=_FORM_FILLING,
                             single_agent=lambda args: _form_filling(create_analyze_rate)(args).graph,
                             single_agent_requests=lambda args: _samples_plan({"samples": args.samples})),
}

# read by every protocol: how it judges conversation items (messages, tool calls; issue 31)
CONVERSATION_OPTIONS: list[Option] = [
    option("--rubric", metavar="FILE",
           help="conversation items: your rubric (a text file: the criterion, any '#:' header lines dropped) instead "
                "of the built-in one of the item's aspect (helpfulness, tool_use, task_completion, safety)"),
    option("--max-context-tokens", type=int, metavar="N",
           help="conversation items: render a conversation whole up to N tokens, then with its middle messages "
                "elided (said in the prompt); the task and the turn judged are never elided (default: no limit)"),
    option("--per-turn", action="store_true",
           help="conversation items: judge each assistant turn in its context and give per-turn verdicts plus the "
                "conversation's (--turn-aggregate); jurygraph's own"),
    option("--turn-aggregate", choices=TURN_AGGREGATES, default="mean",
           help="--per-turn: the conversation's verdict is the mean of the turns' scores (default) or the lowest "
                "(min: the worst turn)"),
]

# read by every protocol: what happens, after the verdict, to the items the panel is unsure of
DOUBT_OPTIONS: list[Option] = [
    option("--escalate-when", nargs="+", action="extend", metavar="CONDITION",
           help="send an item whose panel is unsure to a stronger judge when any CONDITION holds: SIGNAL<VALUE or "
                "SIGNAL>VALUE (agreement, spread, margin, sample_spread, missing), flip or missing; e.g. "
                "agreement<1 margin<1 (jurygraph's own, beyond the papers)"),
    option("--escalate-to", metavar="SPEC",
           help="--escalate-when: the stronger model; alone, it judges with the protocol's single-agent prompt "
                "(with --escalate-protocol, it runs that protocol)"),
    option("--escalate-protocol", choices=sorted(PROTOCOLS),
           help="--escalate-when: another protocol judges the item (its paper defaults; the run's models unless "
                "--escalate-to), e.g. debate"),
    option("--review-when", nargs="+", action="extend", metavar="CONDITION",
           help="pause an item for a person's verdict when any CONDITION holds (as --escalate-when); the run ends "
                "with 'N items await review': answer them with `jurygraph review RUN_DIR`"),
]


def check_options(protocol: str, given: set[str]) -> None:
    """A protocol option given on the command line that the chosen protocol does not read is a mistake (a
    typo'd protocol, an option meant for another): say which protocols read it rather than ignore it."""
    for flag in OPTIONS:
        dest = flag.flag.lstrip("-").replace("-", "_")
        if dest == "calibrate":
            continue  # build_protocol says more precisely why a calibration cannot wrap this protocol or data
        if dest in given and dest not in PROTOCOLS[protocol].options:
            readers = [name for name, p in PROTOCOLS.items() if dest in p.options]
            raise UsageError(f"{flag.flag} is not an option of --protocol {protocol} (it is read by "
                             f"{', '.join(readers)})")


def check_task(protocol: str, tasks: set[str], dataset: str) -> None:
    """Before any request: a protocol that cannot judge the data's task would fail every item."""
    if not PROTOCOLS[protocol].pairwise and TaskKind.PAIRWISE.value in tasks:
        able = ", ".join(name for name, p in PROTOCOLS.items() if p.pairwise)
        raise UsageError(f"--protocol {protocol} rates single texts and cannot judge the pairwise items of "
                         f"{dataset}; for pairwise data use {able}")


def add_protocol_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--protocol", choices=sorted(PROTOCOLS), default="chateval",
                        help="which protocol (default: chateval)")
    group = parser.add_argument_group("protocol options")
    dests = [group.add_argument(spec.flag, **spec.kwargs).dest for spec in OPTIONS]
    # remembered so a run's manifest can record, and --resume restore, exactly the protocol's options
    parser.set_defaults(protocol_dests=dests)
    conversations = parser.add_argument_group("conversation items (every protocol)")
    for spec in CONVERSATION_OPTIONS:
        conversations.add_argument(spec.flag, **spec.kwargs)
    doubt = parser.add_argument_group("doubtful items (every protocol)")
    for spec in DOUBT_OPTIONS:
        doubt.add_argument(spec.flag, **spec.kwargs)
    add_trajectory_arguments(parser)


def _task(args: argparse.Namespace) -> str | None:
    """The task kind of the run's data when it is known: ``--task``, or a built-in dataset's."""
    return getattr(args, "task", None) or task_of(getattr(args, "dataset", None))


def paper_positions(args: argparse.Namespace) -> None:
    """ChatEval "employ[s] position calibration techniques in both single-agent and multi-agent settings"
    (§3.2): each pairwise item is judged in both orders and the scores combined, as its scoring script sums
    each assistant's scores over the referees and both orders. So on a pairwise dataset the command line of
    ``chateval``, ``single`` and ``ensemble`` applies FairEval's BPC (``--calibrate bpc``) unless another
    calibration is asked for or ``--no-calibrate`` keeps one order. The task must be known: a built-in
    dataset, a file in a pairwise benchmark's layout (FairEval's, MT-Bench's) or ``--task pairwise``; a factory
    called from Python is never wrapped."""
    if _task(args) == TaskKind.PAIRWISE and getattr(args, "calibrate", None) is None \
            and not getattr(args, "no_calibrate", False):
        args.calibrate = "bpc"
        # the protocol's OWN graph calibrated, not the baseline --calibrate alone would run instead
        if PROTOCOLS[args.protocol].own_calibration is not None:
            args.calibration_baseline = "chateval"


def calibration_factor(params: dict[str, Any]) -> int:
    """How many times a calibrated protocol judges each item: k evidence samples (mec), both answer orders (bpc)."""
    mode = str(params.get("calibrate") or "")
    return (int(params.get("mec_k") or 1) if "mec" in mode else 1) * (2 if "bpc" in mode else 1)


def calibrate_setup(setup: ProtocolSetup, mode: str, args: argparse.Namespace, *,
                    baseline: str | None = None) -> ProtocolSetup:
    """``--calibrate {bpc,mec,bpc+mec}``: the chosen protocol's graph wrapped with :func:`calibrate`."""
    graph = calibrate(setup.graph, mode, k=args.mec_k, temperature=args.mec_temperature)
    params = {**setup.params, "calibrate": mode}
    if baseline is not None:
        params["calibration_baseline"] = baseline
    if "mec" in mode:
        params.update(mec_k=args.mec_k, mec_temperature=args.mec_temperature)
    return ProtocolSetup(graph, setup.models, params, setup.every_agent_has_a_model)


def _calibrated(setup: ProtocolSetup, protocol: Protocol, args: argparse.Namespace) -> ProtocolSetup:
    mode = getattr(args, "calibrate", None)
    if not mode:
        return setup
    if not protocol.pairwise:
        raise ValueError(f"--calibrate {mode} wraps pairwise protocols; {args.protocol} rates single texts")
    task = _task(args)
    if task is not None and task != TaskKind.PAIRWISE:
        raise ValueError(f"--calibrate {mode} needs a pairwise dataset (e.g. faireval); "
                         f"{getattr(args, 'dataset', None) or 'this dataset'} holds {task} items")
    if protocol.own_calibration is not None:
        return protocol.own_calibration(setup, mode, args)
    return calibrate_setup(setup, mode, args)


def manifest_args(manifest: dict[str, Any]) -> argparse.Namespace:
    """The protocol options a run was made with, from its manifest (saved as `eval --resume` reads them)."""
    saved = dict(manifest.get("cli") or {})
    saved.update(saved.pop("protocol_args", None) or {})
    parser = argparse.ArgumentParser()
    add_protocol_arguments(parser)
    args = parser.parse_args(["--protocol", str(manifest.get("protocol") or saved.get("protocol") or "chateval")])
    for key, value in saved.items():
        setattr(args, key, value)
    return args


def build_protocol(args: argparse.Namespace) -> ProtocolSetup:
    protocol = PROTOCOLS[args.protocol]
    if protocol.paper_positions:
        paper_positions(args)
    setup = protocol.build(args)
    setup.params.setdefault("protocol", args.protocol)
    setup = turns_setup(_calibrated(setup, protocol, args), args)
    setup.graph = trajectory_setup(setup.graph, setup.params, args)  # before the panel; escalation after it
    return routed_setup(setup, args)


def turns_setup(setup: ProtocolSetup, args: argparse.Namespace) -> ProtocolSetup:
    """The conversation options: ``--per-turn`` wraps the (calibrated) protocol with
    :func:`~jurygraph.graphs.turns.per_turn`; ``--rubric`` and ``--max-context-tokens`` reach the templates
    through the run's context (:func:`jurygraph.cli.options.context_from_args`). Each is recorded in ``params``
    only when chosen, so a run without them has the manifest it had."""
    params = dict(setup.params)
    if getattr(args, "rubric", None):
        params["rubric"] = str(args.rubric)
    if getattr(args, "max_context_tokens", None):
        params["max_context_tokens"] = int(args.max_context_tokens)
    if not getattr(args, "per_turn", False):
        if getattr(args, "turn_aggregate", "mean") != "mean":
            raise UsageError("--turn-aggregate combines the verdicts of --per-turn: give --per-turn too")
        return dataclasses.replace(setup, params=params)
    params.update(per_turn=True, turn_aggregate=args.turn_aggregate)
    graph = per_turn(setup.graph, aggregate=args.turn_aggregate)
    return ProtocolSetup(graph, setup.models, params, setup.every_agent_has_a_model, setup.escalation_requests)


def read_rubric(path: str | None) -> str | None:
    """The text of a ``--rubric FILE`` (its ``#:`` header lines dropped); a missing or empty file is a UsageError."""
    if not path:
        return None
    try:
        text = load_prompt_file(path).strip()
    except OSError as err:
        raise UsageError(f"--rubric {path}: {err.strerror or err}") from None
    if not text:
        raise UsageError(f"--rubric {path}: the file holds no rubric text")
    return text


def check_conversations(args: argparse.Namespace, items: Iterable[EvalItem]) -> int:
    """Before any request: the conversation options need conversation items (given on data without any, they
    would change nothing); returns the most assistant turns ``--per-turn`` judges of one item (1 without it)."""
    given = [flag for flag, value in (("--rubric", getattr(args, "rubric", None)),
                                      ("--max-context-tokens", getattr(args, "max_context_tokens", None)),
                                      ("--per-turn", getattr(args, "per_turn", False))) if value]
    if not given:
        return 1
    most, conversations = 1, 0
    for item in items:
        if item.conversational:
            conversations += 1
            if args.per_turn:
                most = max(most, len(turns_to_judge(item)))
    if not conversations:
        raise UsageError(f"{', '.join(given)}: for conversation items (with messages), and "
                         f"{getattr(args, 'dataset', None) or 'the dataset'} has none")
    return most


def available_signals(protocol: str, params: dict[str, Any], task: str | None) -> set[str] | None:
    """The doubt signals a run of ``protocol`` with these parameters gives on ``task`` items (None: task unknown)."""
    if task is None:
        return None
    found = {"missing"}
    if task == TaskKind.PAIRWISE:
        found.add("margin")
        if "bpc" in str(params.get("calibrate") or ""):
            found.add("flip")
    panel = (protocol in ("chateval", "ensemble") and _panel_size(params) >= 2) or \
        (protocol == "refer" and int(params.get("peers") or 3) >= 2)
    if panel:
        found.add("spread" if task == TaskKind.SCORE else "agreement")
    samples = (protocol == "refer" and int(params.get("samples") or 1) >= 2) or \
        (protocol in ("geval", "analyze-rate") and params.get("estimator") == "samples"
         and int(params.get("samples") or 20) >= 2)
    if task == TaskKind.SCORE and samples:
        found.add("sample_spread")
    return found


def check_doubt_signals(setup: ProtocolSetup, args: argparse.Namespace) -> None:
    """A doubt condition on a signal this run never gives would never hold: `eval` says so before anything is
    spent (UsageError naming the condition, what the signal needs and what the run gives)."""
    protocol = str(setup.params.get("protocol"))
    found = available_signals(protocol, setup.params, _task(args))
    if found is None:
        return
    for flag in ("escalate_when", "review_when"):
        for condition in parse_conditions(setup.params.get(flag) or []) if setup.params.get(flag) else []:
            if condition.signal not in found:
                raise UsageError(f"--{flag.replace('_', '-')} {condition.text}: {protocol} on {_task(args)} items "
                                 f"gives no {condition.signal} signal (it needs {SIGNALS[condition.signal].applies}); "
                                 f"it gives {', '.join(sorted(found))}")


def _defaults(args: argparse.Namespace, protocol: str) -> argparse.Namespace:
    """A protocol's options at their defaults, with the run's data and server: how an escalation protocol runs."""
    values = {spec.flag.lstrip("-").replace("-", "_"): spec.kwargs.get("default") for spec in OPTIONS}
    keep = {name: getattr(args, name, None) for name in ("dataset", "task", "base_url")}
    return argparse.Namespace(**{**values, **keep, "protocol": protocol})


def escalation_setup(setup: ProtocolSetup, args: argparse.Namespace) -> ProtocolSetup:
    """The graph an escalated item runs: ``--escalate-protocol``'s (its defaults), else the protocol's single agent;
    judged in both orders (or sampled) as the panel was when it is calibrated. ``params`` says what it is."""
    name = getattr(args, "escalate_protocol", None)
    if name:
        escalated = PROTOCOLS[name]
        task = _task(args)
        if task == TaskKind.PAIRWISE and not escalated.pairwise:
            raise UsageError(f"--escalate-protocol {name} rates single texts and cannot judge the pairwise items of "
                             f"{getattr(args, 'dataset', None) or 'this dataset'}")
        built = escalated.build(_defaults(args, name))
        graph, requests = built.graph, escalated.requests(built.params) if escalated.requests else _by_nodes(built)
        what = {"protocol": name}
    else:
        protocol = PROTOCOLS[args.protocol]
        graph, requests = protocol.single_agent(args), protocol.single_agent_requests(args)
        what = {"protocol": f"{args.protocol} single agent"}
    mode = setup.params.get("calibrate")
    if mode:
        calibrated = calibrate_setup(ProtocolSetup(graph), str(mode), args)
        graph, requests = calibrated.graph, requests * calibration_factor(calibrated.params)
        what["calibrate"] = str(mode)
    return ProtocolSetup(graph, {}, what, escalation_requests=requests)


def routed_setup(setup: ProtocolSetup, args: argparse.Namespace) -> ProtocolSetup:
    """``--escalate-when`` / ``--escalate-to`` / ``--escalate-protocol`` / ``--review-when``: the doubtful items'
    routes after the verdict (:func:`~jurygraph.graphs.escalation.route_doubtful`), recorded in ``params``."""
    escalate_when, review_when = getattr(args, "escalate_when", None), getattr(args, "review_when", None)
    stronger, other = getattr(args, "escalate_to", None), getattr(args, "escalate_protocol", None)
    if not (escalate_when or review_when or stronger or other):
        return setup
    if (stronger or other) and not escalate_when:
        raise UsageError("--escalate-to / --escalate-protocol need --escalate-when CONDITION (e.g. agreement<1): "
                         "which items to escalate")
    if escalate_when and not (stronger or other):
        raise UsageError("--escalate-when needs where the items go: --escalate-to SPEC (a stronger model judging "
                         "alone) or --escalate-protocol NAME (another protocol)")
    escalate = parse_conditions(escalate_when) if escalate_when else []
    review = parse_conditions(review_when) if review_when else []
    params, models, extra = dict(setup.params), dict(setup.models), 0
    escalation = None
    if escalate:
        built = escalation_setup(setup, args)
        escalation, extra = built.graph, built.escalation_requests
        params["escalate_when"] = [c.text for c in escalate]
        params["escalation"] = built.params
        if stronger:
            models[ESCALATION] = stronger  # every agent of the escalation (JuryContext.models["escalation"])
            params["escalate_to"] = ModelSpec.parse(stronger, base_url=getattr(args, "base_url", None)).label
    if review:
        params["review_when"] = [c.text for c in review]
    graph = route_doubtful(setup.graph, escalate_when=escalate, escalation=escalation, review_when=review)
    return ProtocolSetup(graph, models, params, setup.every_agent_has_a_model, escalation_requests=extra)
