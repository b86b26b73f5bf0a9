"""The protocols on the command line, read from their specs (:mod:`jurygraph.graphs.spec`, found by
:mod:`jurygraph.graphs.registry`): ``--protocol NAME`` (a built-in, an installed package's entry point, or
``MODULE:FACTORY``), each built-in option as a flag and every option as ``--param KEY=VALUE`` (typed by its
spec), how the options become a graph and its models, what data it judges, its request plan. Nothing here names a
protocol.

Defaults that depend on the data are decided once it is loaded (:func:`build_protocol`'s ``tasks``): a protocol
whose spec asks for ChatEval's position calibration judges pairwise data in both orders (``--calibrate bpc``)
whatever the source of the rows, unless ``--no-calibrate`` or another calibration is given. ``--calibrate`` wraps
whichever pairwise protocol was chosen, or runs the protocol's own calibration; both the default and the wrapping
are decided in the graphs layer (:mod:`jurygraph.graphs.calibration`), which :mod:`jurygraph.evaluators` asks too.
``--per-turn`` (``CONVERSATION_OPTIONS``, read by every protocol, with ``--rubric``, ``--max-context-tokens`` and
``--turn-aggregate``) judges each assistant turn of a conversation item (:func:`turns_setup`); which conversation
items a protocol has templates for is its spec's (``ProtocolSpec.conversations``, :func:`check_conversations`).
``--escalate-when`` / ``--review-when`` (``DOUBT_OPTIONS``, read by every protocol) then route the doubtful items
after the verdict to a stronger judge or a person (:func:`routed_setup`).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from langgraph.graph import StateGraph

from jurygraph.cli.preflight import UsageError
from jurygraph.cli.trajectory import add_trajectory_arguments, trajectory_setup
from jurygraph.graphs import calibration
from jurygraph.graphs.calibration import accepted_options, calibrated, position_defaults, wrapped
from jurygraph.graphs.escalation import ESCALATION, route_doubtful
from jurygraph.graphs.registry import (
    DEFAULT,
    UnknownProtocol,
    builtin,
    find,
    listed_options,
    names,
    resolve_name,
    single_agent,
)
from jurygraph.graphs.spec import Built, Option, ProtocolSpec
from jurygraph.graphs.turns import TURN_AGGREGATES, per_turn, turns_to_judge
from jurygraph.graphs.wiring import copied
from jurygraph.judging.benchmarks import task_of
from jurygraph.judging.doubt import SIGNALS, parse_conditions
from jurygraph.judging.items import EvalItem, TaskKind
from jurygraph.llm.models import JuryContext, ModelSpec
from jurygraph.prompts import load_prompt_file
from jurygraph.running.estimate import SCRIPTED_BOUNDS, most_requests


@dataclass
class ProtocolSetup:
    """A protocol ready to run: its uncompiled graph (calibrated and routed as asked), the models per agent
    name/role, the parameters the manifest records, and what its request plan is counted from."""

    graph: StateGraph
    models: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    every_agent_has_a_model: bool = False  # ``models`` covers every agent: no --model needed
    spec: ProtocolSpec | None = None
    # one judgment of an item: the calibrated protocol, before --per-turn, the trajectory match and the doubtful
    # items' routes (None: ``graph``); what a plan is counted on
    panel_graph: StateGraph | None = None
    escalation_graph: StateGraph | None = None  # what an escalated item runs
    escalation_plan: int | None = None  # its most requests, when its spec declares them
    # what the dry run's "most" scenario and the budget's reserves render, when the spec gives values for it
    # (ProtocolSpec.most_values); None: ``graph``
    most_graph: StateGraph | None = None
    most_panel_graph: StateGraph | None = None  # the same before the doubtful items' routes
    # --per-turn: the most turns one item of the loaded data has (:func:`check_conversations`); each turn costs what
    # one judgment of the protocol costs
    turns: int = 1

    def requests_per_item(self, sample: EvalItem | None = None, context: JuryContext | None = None) -> int:
        """The most model requests one item can cost under these parameters (every format re-ask and loop
        iteration included): what `eval` shows before a large plan starts, and what a dry run would print. A
        protocol whose spec declares no plan is counted on ``sample`` (the dry run's scripted panel, never
        agreeing; ``context``: the run's models); without one, two requests a node. ``--per-turn``: the plan of one
        turn times the most turns an item has."""
        spec, params = self.spec, self.params
        if spec is not None and spec.plan is not None:
            count = spec.plan(params) * calibration_factor(params)
        else:
            count = _counted(self.most_panel_graph or self.panel_graph or self.graph, sample, context)
        return count * self.turns + self.escalation_requests(sample, context)

    def escalation_requests(self, sample: EvalItem | None = None, context: JuryContext | None = None) -> int:
        """The most requests an escalated item adds (0: no escalation)."""
        if self.escalation_graph is None:
            return 0
        if self.escalation_plan is not None:
            return self.escalation_plan
        return _counted(self.escalation_graph, sample, context)

    def may_stop_early(self) -> bool:
        """Whether a dry run scripts both the fewest and the most requests (a protocol that does not declare its
        plan may: its graph is run both ways, and the two counts say)."""
        return self.stop_bounds() is not None

    def stop_bounds(self) -> tuple[str, str] | None:
        """When a plan may stop early, what gives its fewest and its most requests (what a dry run scripts);
        None for a fixed plan."""
        spec = self.spec
        if spec is None or (spec.plan is None and spec.bounds is None):
            return SCRIPTED_BOUNDS
        return spec.bounds(self.params) if spec.bounds is not None else None


def _counted(graph: StateGraph, sample: EvalItem | None, context: JuryContext | None) -> int:
    if sample is None:  # nothing to run it on: two requests (a call and a re-ask) per node, loops not counted
        return 2 * max(1, len(graph.nodes))
    return most_requests(graph, sample, context)


# --- the options --------------------------------------------------------------------------------------------


def flag_options() -> list[Option]:
    """The options that are ``eval``'s flags, in the order ``--help`` shows them: every built-in protocol's, then
    the calibrations' (each flag once)."""
    specs = list(builtin().values())
    own = [o for spec in specs if spec.calibration for o in spec.calibration.options]
    listed = listed_options(specs)
    return [*listed, *[o for o in dict.fromkeys([*calibration.OPTIONS, *own]) if o not in listed]]


def protocol_spec(name: str) -> ProtocolSpec:
    """The protocol ``--protocol`` names (UsageError when none)."""
    try:
        return find(name)
    except UnknownProtocol as err:
        raise UsageError(str(err)) from None
    except ValueError as err:  # a factory that cannot be an option-driven protocol
        raise UsageError(f"--protocol {name}: {err}") from None


def _params_given(args: argparse.Namespace) -> dict[str, str]:
    found: dict[str, str] = {}
    for pair in getattr(args, "param", None) or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--param must be KEY=VALUE, got {pair!r}")
        found[key.strip().replace("-", "_")] = value.strip()
    return found


def option_values(spec: ProtocolSpec, args: argparse.Namespace) -> dict[str, Any]:
    """The values of ``spec``'s options: a flag's (when the flag is that very option), else ``--param``'s (typed
    by the option), else the default; each checked against its range (UsageError naming it)."""
    flags = {o.name: o for o in flag_options()}
    given = _params_given(args)
    accepted = accepted_options(spec)
    unknown = sorted(set(given) - set(accepted))
    if unknown:
        known = ", ".join(accepted) or "none"
        raise UsageError(f"--param {unknown[0]}: not an option of --protocol {args.protocol} (its options: {known})")
    values: dict[str, Any] = {}
    for name, option in accepted.items():
        is_flag = flags.get(name) == option and hasattr(args, name)
        if name in given:
            if is_flag and getattr(args, name) != option.default:
                raise UsageError(f"{option.cli_flag} and --param {name} both give {name}: give it once")
            try:
                values[name] = option.parse(given[name])
            except ValueError as err:
                raise UsageError(f"--param {err}") from None
            shown = f"--param {name}"
        else:
            values[name] = getattr(args, name) if is_flag else option.default
            shown = option.cli_flag
        try:
            option.check(values[name], shown)
        except ValueError as err:
            raise UsageError(str(err)) from None
    return values


def check_ranges(args: argparse.Namespace) -> None:
    """Every protocol flag's value in its option's range (UsageError naming the flag), whichever protocol reads it."""
    for option in flag_options():
        try:
            option.check(getattr(args, option.name, None))
        except ValueError as err:
            raise UsageError(str(err)) from None


def check_options(protocol: str, given: set[str]) -> None:
    """A protocol option given on the command line that the chosen protocol does not read is a mistake (a
    typo'd protocol, an option meant for another): say which protocols read it rather than ignore it."""
    spec = protocol_spec(protocol)
    accepted = accepted_options(spec)
    for option in flag_options():
        if option.name == "calibrate":
            continue  # build_protocol says more precisely why a calibration cannot wrap this protocol or data
        if option.name in given and accepted.get(option.name) != option:
            readers = [name for name, other in builtin().items() if accepted_options(other).get(option.name) == option]
            raise UsageError(f"{option.cli_flag} is not an option of --protocol {protocol} (it is read by "
                             f"{', '.join(readers)})")


def check_task(protocol: str, tasks: set[str], dataset: str) -> None:
    """Before any request: a protocol that cannot judge the data's task would fail every item."""
    spec = protocol_spec(protocol)
    unjudged = sorted(set(tasks) - set(spec.tasks))
    if not unjudged:
        return
    if TaskKind.PAIRWISE.value in unjudged:
        able = ", ".join(name for name, other in builtin().items() if other.pairwise)
        raise UsageError(f"--protocol {protocol} rates single texts and cannot judge the pairwise items of "
                         f"{dataset}; for pairwise data use {able}")
    raise UsageError(f"--protocol {protocol} judges {', '.join(spec.tasks)} items, not the {', '.join(unjudged)} "
                     f"items of {dataset}")


def add_protocol_arguments(parser: argparse.ArgumentParser) -> None:
    listed = "{" + ",".join(names()) + "}"
    parser.add_argument("--protocol", default=DEFAULT, metavar=listed, help=f"which protocol (default: {DEFAULT})")
    group = parser.add_argument_group("protocol options")
    dests = [group.add_argument(option.cli_flag, **option.argparse_kwargs()).dest for option in flag_options()]
    group.add_argument("--param", action="append", metavar="KEY=VALUE",
                       help="an option of the protocol by name, typed as its spec (or its factory's signature) "
                            "says, e.g. --param turns=3; the way to set your own protocol's options "
                            "(--protocol MODULE:FACTORY, or an installed one)")
    # remembered so a run's manifest can record, and --resume restore, exactly the protocol's options
    parser.set_defaults(protocol_dests=dests)
    conversations = parser.add_argument_group("conversation items (every protocol)")
    for flag, kwargs in CONVERSATION_OPTIONS:
        conversations.add_argument(flag, **kwargs)
    doubt = parser.add_argument_group("doubtful items (every protocol)")
    for flag, kwargs in DOUBT_OPTIONS:
        doubt.add_argument(flag, **kwargs)
    add_trajectory_arguments(parser)


# read by every protocol: how it judges conversation items (messages, tool calls; issue 31); which items a protocol
# has conversation templates for is its spec's (ProtocolSpec.conversations)
CONVERSATION_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("--rubric", {"metavar": "FILE",
                  "help": "conversation items: your rubric (a text file: the criterion, any '#:' header lines "
                          "dropped) instead of the built-in one of the item's aspect (helpfulness, tool_use, "
                          "task_completion, safety)"}),
    ("--max-context-tokens", {"type": int, "metavar": "N",
                              "help": "conversation items: render a conversation whole up to N tokens, then with its "
                                      "middle messages elided (said in the prompt); the task and the turn judged are "
                                      "never elided (default: no limit)"}),
    ("--per-turn", {"action": "store_true",
                    "help": "conversation items: judge each assistant turn in its context and give per-turn verdicts "
                            "plus the conversation's (--turn-aggregate); jurygraph's own"}),
    ("--turn-aggregate", {"choices": TURN_AGGREGATES, "default": "mean",
                          "help": "--per-turn: the conversation's verdict is the mean of the turns' scores (default) "
                                  "or the lowest (min: the worst turn)"}),
]


# read by every protocol: what happens, after the verdict, to the items the panel is unsure of
DOUBT_OPTIONS: list[tuple[str, dict[str, Any]]] = [
    ("--escalate-when", {"nargs": "+", "action": "extend", "metavar": "CONDITION",
                         "help": "send an item whose panel is unsure to a stronger judge when any CONDITION holds: "
                                 "SIGNAL<VALUE or SIGNAL>VALUE (agreement, spread, margin, sample_spread, missing), "
                                 "flip or missing; e.g. agreement<1 margin<1 (jurygraph's own, beyond the papers)"}),
    ("--escalate-to", {"metavar": "SPEC",
                       "help": "--escalate-when: the stronger model; alone, it judges with the protocol's "
                               "single-agent prompt (with --escalate-protocol, it runs that protocol)"}),
    ("--escalate-protocol", {"metavar": "{" + ",".join(names()) + "}",
                             "help": "--escalate-when: another protocol judges the item (its paper defaults; the "
                                     "run's models unless --escalate-to), e.g. debate"}),
    ("--review-when", {"nargs": "+", "action": "extend", "metavar": "CONDITION",
                       "help": "pause an item for a person's verdict when any CONDITION holds (as --escalate-when); "
                               "the run ends with 'N items await review': answer them with `jurygraph review "
                               "RUN_DIR`"}),
]


def _task(args: argparse.Namespace, tasks: set[str] | None = None) -> str | None:
    """The task kind of the run's data when it is known: the loaded data's (one kind), else ``--task``, or a
    built-in dataset's."""
    if tasks is not None:
        return next(iter(tasks)) if len(tasks) == 1 else None
    return getattr(args, "task", None) or task_of(getattr(args, "dataset", None))


def _position_defaults(spec: ProtocolSpec, values: dict[str, Any], args: argparse.Namespace,
                       task: str | None) -> None:
    """The calibration a protocol takes by default on the loaded data (ChatEval's position calibration: ``--calibrate
    bpc`` on pairwise items, whatever their source; :func:`~jurygraph.graphs.calibration.position_defaults`
    decides), in ``values`` and in ``args`` too, so the run's manifest says what ran."""
    chosen = position_defaults(spec, values, task)
    values.update(chosen)
    for name, value in chosen.items():
        if hasattr(args, name):
            setattr(args, name, value)


def calibration_factor(params: dict[str, Any]) -> int:
    """How many times a calibrated protocol judges each item: k evidence samples (mec), both answer orders (bpc)."""
    mode = str(params.get("calibrate") or "")
    return (int(params.get("mec_k") or 1) if "mec" in mode else 1) * (2 if "bpc" in mode else 1)


def _calibrated(setup: ProtocolSetup, built: Built, spec: ProtocolSpec, values: dict[str, Any],
                args: argparse.Namespace, task: str | None) -> ProtocolSetup:
    mode = values.get("calibrate", getattr(args, "calibrate", None))  # given to a protocol that cannot take it: said
    if not mode:
        return setup
    if not spec.pairwise:
        raise ValueError(f"--calibrate {mode} wraps pairwise protocols; {args.protocol} rates single texts")
    if task is not None and task != TaskKind.PAIRWISE:
        raise ValueError(f"--calibrate {mode} needs a pairwise dataset (e.g. faireval); "
                         f"{getattr(args, 'dataset', None) or 'this dataset'} holds {task} items")
    return _setup(calibrated(Built(setup.graph, dict(setup.params), built.models, built.every_agent_has_a_model),
                             spec, mode, values), spec, args)


def _setup(built: Built, spec: ProtocolSpec, args: argparse.Namespace) -> ProtocolSetup:
    models: dict[str, Any] = {name: ModelSpec.parse(text, base_url=getattr(args, "base_url", None))
                              for name, text in built.models.items()}
    return ProtocolSetup(built.graph, models, dict(built.params), built.every_agent_has_a_model, spec)


def manifest_args(manifest: dict[str, Any]) -> argparse.Namespace:
    """The protocol options a run was made with, from its manifest (saved as `eval --resume` reads them)."""
    saved = dict(manifest.get("cli") or {})
    saved.update(saved.pop("protocol_args", None) or {})
    parser = argparse.ArgumentParser()
    add_protocol_arguments(parser)
    args = parser.parse_args(["--protocol", str(manifest.get("protocol") or saved.get("protocol") or DEFAULT)])
    for key, value in saved.items():
        setattr(args, key, value)
    return args


def build_protocol(args: argparse.Namespace, tasks: set[str] | None = None) -> ProtocolSetup:
    """The protocol ``args`` ask for, ready to run. ``tasks``: the task kinds of the loaded data (the defaults
    that depend on them are decided on them); without, the task ``--task`` or a built-in ``--dataset`` names."""
    args.protocol = resolve_name(args.protocol)
    spec = protocol_spec(args.protocol)
    values = option_values(spec, args)
    task = _task(args, tasks)
    _position_defaults(spec, values, args, task)
    setup = _assembled(spec, values, args, task)
    longest = spec.most_values(values) if spec.most_values is not None else None
    if longest:
        most = _assembled(spec, {**values, **longest}, args, task)
        setup.most_graph, setup.most_panel_graph = most.graph, most.panel_graph or most.graph
    return setup


def _assembled(spec: ProtocolSpec, values: dict[str, Any], args: argparse.Namespace, task: str | None) -> ProtocolSetup:
    built = spec.create(values)
    setup = _setup(built, spec, args)
    setup.params.setdefault("protocol", args.protocol)
    # one judgment of the item, what a plan is counted on: before --per-turn, the trajectory match and the routes
    setup = _calibrated(setup, built, spec, values, args, task)
    # the wrappers below edit the graph in place (the match, the routes): they edit a copy, the panel stays itself
    setup = dataclasses.replace(setup, graph=copied(setup.graph), panel_graph=setup.graph)
    setup = turns_setup(setup, args)
    setup.graph = trajectory_setup(setup.graph, setup.params, args)  # before the panel; escalation after it
    return routed_setup(setup, spec, values, args, task)


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
    return dataclasses.replace(setup, graph=per_turn(setup.graph, aggregate=args.turn_aggregate), params=params)


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


def check_conversations(setup: ProtocolSetup, args: argparse.Namespace, items: Iterable[EvalItem],
                        tasks: set[str]) -> None:
    """Before any request, on the loaded data (``tasks``: its task kinds): the protocol (and ``--escalate-protocol``)
    has conversation templates for the data's conversation items, as its spec says (``conversations``; a spec that
    does not say is not checked); the conversation options need conversation items (given on data without any, they
    would change nothing). Sets ``setup.turns``: the most assistant turns ``--per-turn`` judges of one item (1
    without it), what its request plan multiplies. One pass over the items, only when something needs it."""
    given = [flag for flag, value in (("--rubric", getattr(args, "rubric", None)),
                                      ("--max-context-tokens", getattr(args, "max_context_tokens", None)),
                                      ("--per-turn", getattr(args, "per_turn", False))) if value]
    protocol = str(setup.params.get("protocol"))
    judges = [("--protocol", protocol, setup.spec or protocol_spec(protocol))]
    if getattr(args, "escalate_protocol", None):
        judges.append(("--escalate-protocol", args.escalate_protocol, protocol_spec(args.escalate_protocol)))
    # the task kinds some judge has no conversation templates for: only their items need looking at
    unsure = {task for _, _, spec in judges if spec.conversations is not None for task in tasks
              if task not in spec.conversations}
    if not given and not unsure:
        return
    most, conversations = 1, 0
    for item in items:
        if not item.conversational:
            continue
        conversations += 1
        for flag, name, spec in judges:
            if spec.conversations is not None and item.task.value not in spec.conversations:
                able = ", ".join(other for other, s in builtin().items()
                                 if s.conversations and item.task.value in s.conversations)
                raise UsageError(f"{flag} {name} has no conversation templates for {item.task.value} items "
                                 f"(item {item.id!r} is a conversation){f'; for them use {able}' if able else ''}")
        if getattr(args, "per_turn", False):
            most = max(most, len(turns_to_judge(item)))
    if given and not conversations:
        raise UsageError(f"{', '.join(given)}: for conversation items (with messages), and "
                         f"{getattr(args, 'dataset', None) or 'the dataset'} has none")
    setup.turns = most


def available_signals(spec: ProtocolSpec, params: dict[str, Any], task: str | None) -> set[str] | None:
    """The doubt signals a run of ``spec`` with these parameters gives on ``task`` items (None: unknown, when the
    task is, or when the spec does not say)."""
    if task is None or spec.signals is None:
        return None
    found = {"missing", *spec.signals(params, task)}
    if task == TaskKind.PAIRWISE:
        found.add("margin")
        if "bpc" in str(params.get("calibrate") or ""):
            found.add("flip")
    return found


def check_doubt_signals(setup: ProtocolSetup, args: argparse.Namespace, tasks: set[str] | None = None) -> None:
    """A doubt condition on a signal this run never gives would never hold: `eval` says so before anything is
    spent (UsageError naming the condition, what the signal needs and what the run gives)."""
    protocol = str(setup.params.get("protocol"))
    task = _task(args, tasks)
    spec = setup.spec or protocol_spec(protocol)
    found = available_signals(spec, setup.params, task)
    if found is None:
        return
    for flag in ("escalate_when", "review_when"):
        for condition in parse_conditions(setup.params.get(flag) or []) if setup.params.get(flag) else []:
            if condition.signal not in found:
                givers = _giving(condition.signal)
                raise UsageError(f"--{flag.replace('_', '-')} {condition.text}: {protocol} on {task} items "
                                 f"gives no {condition.signal} signal (it needs {SIGNALS[condition.signal].applies}"
                                 f"{f', as {givers} give' if givers else ''}); it gives {', '.join(sorted(found))}")


def _giving(signal: str) -> str:
    """The built-in protocols whose panel gives ``signal`` at their defaults, on some task they judge."""
    found = []
    for name, spec in builtin().items():
        params = spec.create().params if spec.signals is not None else {}
        if spec.signals is not None and any(signal in spec.signals(params, task) for task in spec.tasks):
            found.append(name)
    return ", ".join(found)


def escalation_setup(setup: ProtocolSetup, spec: ProtocolSpec, values: dict[str, Any], args: argparse.Namespace,
                     task: str | None) -> ProtocolSetup:
    """The graph an escalated item runs: ``--escalate-protocol``'s (its defaults), else the protocol's single agent;
    judged in both orders (or sampled) as the panel was when it is calibrated. ``params`` says what it is."""
    name = getattr(args, "escalate_protocol", None)
    plan: int | None
    if name:
        escalated = protocol_spec(name)
        if task is not None and task not in escalated.tasks:
            if task == TaskKind.PAIRWISE:
                raise UsageError(f"--escalate-protocol {name} rates single texts and cannot judge the pairwise items "
                                 f"of {getattr(args, 'dataset', None) or 'this dataset'}")
            raise UsageError(f"--escalate-protocol {name} judges {', '.join(escalated.tasks)} items, not {task} items")
        built = escalated.create()  # its defaults
        graph, plan = built.graph, escalated.plan(built.params) if escalated.plan is not None else None
        what: dict[str, Any] = {"protocol": name}
    else:
        graph, plan = single_agent(spec, values)
        what = {"protocol": f"{args.protocol} single agent"}
    mode = setup.params.get("calibrate")
    if mode:
        around = wrapped(Built(graph, {}), str(mode), values)
        graph = around.graph
        plan = plan * calibration_factor(around.params) if plan is not None else None
        what["calibrate"] = str(mode)
    return ProtocolSetup(graph, {}, what, escalation_graph=graph, escalation_plan=plan)


def routed_setup(setup: ProtocolSetup, spec: ProtocolSpec, values: dict[str, Any], args: argparse.Namespace,
                 task: str | None = None) -> ProtocolSetup:
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
    params, models = dict(setup.params), dict(setup.models)
    escalation = None
    if escalate:
        built = escalation_setup(setup, spec, values, args, task)
        escalation = built.graph
        params["escalate_when"] = [c.text for c in escalate]
        params["escalation"] = built.params
        if stronger:
            models[ESCALATION] = stronger  # every agent of the escalation (JuryContext.models["escalation"])
            params["escalate_to"] = ModelSpec.parse(stronger, base_url=getattr(args, "base_url", None)).label
    if review:
        params["review_when"] = [c.text for c in review]
    graph = route_doubtful(setup.graph, escalate_when=escalate, escalation=escalation, review_when=review)
    return dataclasses.replace(setup, graph=graph, models=models, params=params, spec=spec,
                               panel_graph=setup.panel_graph or setup.graph,
                               escalation_graph=escalation,
                               escalation_plan=built.escalation_plan if escalate else None)
