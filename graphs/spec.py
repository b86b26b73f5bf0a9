"""How a protocol declares itself: one :class:`ProtocolSpec` beside its factory, read by every command.

A protocol is a factory that returns an uncompiled ``StateGraph`` (``create_x(...)``) and, in the same module, a
spec saying what the command line and the tools around a run need to know about it::

    SPEC = ProtocolSpec(
        name="x", help="X: two advocates and a judge", factory=create_x,
        options=(Option("rounds", int, 3, "X: debate rounds (default 3)", minimum=1),),
        tasks=("pairwise",),
    )

The registry (:mod:`jurygraph.graphs.registry`) finds every ``SPEC`` (or ``SPECS``, a tuple of them) of a module
in ``jurygraph.graphs``, every entry point of the ``jurygraph.protocols`` group (a spec or a bare factory), and
``--protocol package.module:name`` (a spec or a bare factory). A bare factory gets a spec derived from its typed
signature and its docstring (:func:`derive_spec`): each keyword parameter of a plain type (``int``, ``float``,
``str``, ``bool``, a ``Literal``, or one of them or ``None``) is an option, given as ``--param name=value``.

What a spec declares, field by field (every one but ``name`` and ``factory`` has a default):

- ``options``: the :class:`Option` s it reads, typed, with defaults, ranges and help. A built-in protocol's options
  are ``eval``'s flags (``--turns 3``); every option can also be given as ``--param turns=3``.
- ``build``: how the options' values become the graph (:class:`Built`: the graph, the parameters the run's
  manifest records, model specs the options name). Default: ``factory(**values)``, every value recorded.
- ``tasks``: the task kinds it judges (``pairwise``, ``score``, ``choice``); other data is refused before a request.
- ``conversations``: the task kinds whose conversation items (messages, tool calls; ``EvalItem.messages``) it has
  templates for; such items of another kind are refused before a request. Default None: not declared, not checked
  (a protocol composed of the built-in nodes judges what they render).
- ``plan`` / ``bounds``: the most requests one item can cost (every format re-ask included), and what gives the
  fewest and the most when it may stop early. Without a ``plan`` the count comes from the graph itself: the dry
  run's scripted panel (never agreeing, every critic objecting) judges one item, and each judging call may be
  re-asked once (:func:`jurygraph.running.estimate.most_requests`).
- ``most_values``: from the options' values, those the dry run's "most" scenario and the budget's per-item reserve
  build the graph with, for a stop rule the scripted replies cannot hold off (they repeat the same scores every
  round, which a convergence rule reads as converged: D3's SAMRE gives ``{"epsilon": 0.0}``, never converging, so
  R rounds). Default: the run's own graph.
- ``position_calibration``: on pairwise data, judge both answer orders by default (ChatEval's position calibration;
  ``--no-calibrate`` keeps one), decided once the data is loaded. ``calibration``: what ``--calibrate`` runs
  instead of wrapping the graph, with its own options (:class:`OwnCalibration`; the single agent's: FairEval's own
  evaluator). Every protocol that judges pairwise data takes the calibration options
  (:data:`jurygraph.graphs.calibration.OPTIONS`).
- ``single_agent`` / ``single_agent_plan``: what a stronger model runs alone on an escalated item
  (``--escalate-to`` without ``--escalate-protocol``), and the most requests it costs (None: counted from its
  graph); without one, the ``single`` protocol's (ChatEval's single-agent prompt).
- ``signals``: the doubt signals of its panel (``agreement``/``spread`` of two or more members,
  ``sample_spread`` of n samples) under given parameters, for the check that a ``--escalate-when`` condition can
  hold; ``missing``, ``margin`` and ``flip`` are every protocol's. Default: unknown (no check).
- ``panel``: who its members are in a results line, for metaeval's panel diagnostics (:class:`PanelMembers`).
- ``studio``: the graphs LangGraph Studio serves for it (``langgraph.json``), each built with its defaults.
- ``order``: where it is listed among the protocols (its options' place in ``eval --help``).

How a run's state is read for doubt (:func:`jurygraph.judging.doubt.doubt_signals`) goes by the verdict's shape:
per-agent ``judgments`` are members; a verdict ``detail`` with ``scores`` and ``decided_by`` reads as DEBATE's,
``peers`` with ``missing_peers`` as ReFeR's, ``estimator`` ``"samples"`` as n samples, ``reviews`` as FairEval's.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

from langgraph.graph import StateGraph

from jurygraph.judging.panel import PanelMembers, judgments_key

__all__ = ["NOT_OPTIONS", "TASKS", "Built", "Option", "OwnCalibration", "PanelMembers", "Params", "ProtocolSpec",
           "derive_spec", "judgments_key", "panel_signals"]

Params = Mapping[str, Any]
TASKS: tuple[str, ...] = ("pairwise", "score", "choice")
# factory parameters that are never options: how the graph is typed, not what it does
NOT_OPTIONS = frozenset({"state_schema", "context_schema"})
_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")


@dataclass(frozen=True)
class Option:
    """One option of a protocol: its name (a factory parameter or a command-line destination), type, default,
    allowed values and help. ``type`` is ``str``, ``int``, ``float`` or ``bool`` (a flag: ``--name`` sets it);
    ``minimum`` (``exclusive``: the minimum itself refused) and ``choices`` are checked before anything runs.
    ``flag`` is its command-line flag when it is not ``--`` + the name with dashes; ``metavar`` names its value."""

    name: str
    type: type = str
    default: Any = None
    help: str = ""
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    exclusive: bool = False
    flag: str | None = None
    metavar: str | None = None

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def parse(self, text: str) -> Any:
        """A ``--param name=TEXT`` value as this option's type (``none`` is None for an option without a value)."""
        if text.strip().lower() in ("none", "null") and self.default is None and self.type is not bool:
            return None
        if self.type is bool:
            lowered = text.strip().lower()
            if lowered not in (*_TRUE, *_FALSE):
                raise ValueError(f"{self.name}={text}: write true or false")
            return lowered in _TRUE
        try:
            value = self.type(text)
        except ValueError:
            raise ValueError(f"{self.name}={text}: not {_a(self.type)}") from None
        return value

    def check(self, value: Any, shown: str | None = None) -> None:
        """A ValueError naming the option (``shown``: how the user gave it) when ``value`` is out of range."""
        if value is None or isinstance(value, bool):
            return
        where = shown or self.cli_flag
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{where} must be one of {', '.join(str(c) for c in self.choices)} (got {value})")
        if self.minimum is not None and isinstance(value, int | float) and \
                (value < self.minimum or (self.exclusive and value == self.minimum)):
            rule = f"greater than {self.minimum:g}" if self.exclusive else f"at least {self.minimum:g}"
            raise ValueError(f"{where} must be {rule} (got {value:g})")

    def argparse_kwargs(self) -> dict[str, Any]:
        """The keywords of ``ArgumentParser.add_argument`` for this option's flag."""
        if self.type is bool:
            return {"action": "store_true", "help": self.help}
        kwargs: dict[str, Any] = {"default": self.default, "help": self.help}
        if self.type is not str:
            kwargs["type"] = self.type
        if self.choices is not None:
            kwargs["choices"] = self.choices
        if self.metavar is not None:
            kwargs["metavar"] = self.metavar
        return kwargs


def _a(kind: type) -> str:
    return {int: "a whole number", float: "a number"}.get(kind, f"a {kind.__name__}")


@dataclass
class Built:
    """A protocol built from its options' values: the uncompiled graph, the parameters a run's manifest records,
    the model specs its options name per agent (``{"peer_1": "openai:gpt-4o"}``: parsed with the run's
    ``--base-url``), and whether they give every agent a model (then no ``--model`` is needed)."""

    graph: StateGraph
    params: dict[str, Any]
    models: dict[str, str] = field(default_factory=dict)
    every_agent_has_a_model: bool = False


@dataclass(frozen=True)
class OwnCalibration:
    """What ``--calibrate MODE`` runs for a protocol instead of wrapping its graph: ``build(built, mode, values)``
    from the protocol as built, the mode and the options' values (its own ``options`` included); None: wrap the
    graph as any protocol's (its options' values are then recorded with the calibration)."""

    build: Callable[[Built, str, Params], Built | None]
    options: tuple[Option, ...] = ()
    # its options' values when the position calibration is applied by default (not asked for with --calibrate)
    position_defaults: Mapping[str, Any] = field(default_factory=dict)


def panel_signals(task: str, *, members: int = 1, samples: int = 1) -> set[str]:
    """The doubt signals of a panel of ``members`` judges with ``samples`` samples of a rating on ``task`` items
    (the protocol's own; ``missing``, ``margin`` and ``flip`` are added for every protocol)."""
    found = set()
    if members >= 2:
        found.add("spread" if task == "score" else "agreement")
    if samples >= 2 and task == "score":
        found.add("sample_spread")
    return found


@dataclass(frozen=True)
class ProtocolSpec:
    """What a protocol is to every command (see the module's doc for each field)."""

    name: str
    factory: Callable[..., StateGraph]
    help: str = ""
    options: tuple[Option, ...] = ()
    build: Callable[[Params], Built] | None = None
    tasks: tuple[str, ...] = TASKS
    conversations: tuple[str, ...] | None = None
    plan: Callable[[Params], int] | None = None
    bounds: Callable[[Params], tuple[str, str] | None] | None = None
    most_values: Callable[[Params], Mapping[str, Any]] | None = None
    position_calibration: bool = False
    calibration: OwnCalibration | None = None
    single_agent: Callable[[Params], StateGraph] | None = None
    single_agent_plan: Callable[[Params], int] | None = None
    signals: Callable[[Params, str], set[str]] | None = None
    panel: PanelMembers = field(default_factory=PanelMembers)
    studio: Mapping[str, Callable[[], StateGraph]] = field(default_factory=dict)
    order: int = 1000
    source: str = ""  # where it came from, when not a built-in: "module:attr" or the entry point's

    def __post_init__(self) -> None:
        unknown = set(self.tasks) - set(TASKS)
        if unknown:
            raise ValueError(f"protocol {self.name!r}: unknown task kinds {sorted(unknown)}; choose from {TASKS}")
        beyond = set(self.conversations or ()) - set(self.tasks)
        if beyond:
            raise ValueError(f"protocol {self.name!r}: conversation templates for {sorted(beyond)} items, which it "
                             f"does not judge (its tasks: {', '.join(self.tasks)})")
        names = [o.name for o in self.options]
        if len(set(names)) != len(names):
            raise ValueError(f"protocol {self.name!r}: an option is declared twice in {names}")

    @property
    def pairwise(self) -> bool:
        return "pairwise" in self.tasks

    def option(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)

    def defaults(self) -> dict[str, Any]:
        """Every option at its default."""
        return {o.name: o.default for o in self.options}

    def create(self, values: Params | None = None) -> Built:
        """The protocol built from ``values`` (its options; the others at their defaults)."""
        given = {**self.defaults(), **(values or {})}
        if self.build is not None:
            return self.build(given)
        return Built(self.factory(**{o.name: given[o.name] for o in self.options}),
                     {o.name: given[o.name] for o in self.options})


# --- a spec from a bare factory ---------------------------------------------------------------------------


def derive_spec(factory: Callable[..., Any], name: str, *, source: str = "") -> ProtocolSpec:
    """The spec of a factory that declares none: its keyword parameters of plain types are its options (typed,
    with their defaults; the help from the docstring's parameter list when it has one), every task kind, a plan
    counted from the graph. A required parameter that no option can give is an error here, not at the first item."""
    signature = inspect.signature(factory)
    hints = typing.get_type_hints(factory)
    described = _described(factory)
    options, required = [], []
    for parameter in signature.parameters.values():
        if parameter.name in NOT_OPTIONS or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        typed = _plain(hints.get(parameter.name, type(parameter.default) if parameter.default is not None
                                 and parameter.default is not parameter.empty else str))
        if typed is None:
            if parameter.default is parameter.empty:
                required.append(parameter.name)
            continue  # e.g. a list of personas: the factory's default stands
        kind, choices = typed
        default = None if parameter.default is parameter.empty else parameter.default
        helped = described.get(parameter.name, "")
        options.append(Option(parameter.name, kind, default, helped, choices=choices))
        if parameter.default is parameter.empty:
            required.append(parameter.name)
    doc = inspect.getdoc(factory) or ""
    summary = doc.strip().splitlines()[0] if doc.strip() else f"{name} (from {source or factory.__qualname__})"
    spec = ProtocolSpec(name=name, factory=factory, help=summary, options=tuple(options), source=source)
    if required:
        missing = [n for n in required if not any(o.name == n for o in options)]
        if missing:
            raise ValueError(f"{source or name}: parameters {', '.join(missing)} have no default and no plain type "
                             "(int, float, str, bool, a Literal): give them defaults, or declare a ProtocolSpec")
        object.__setattr__(spec, "build", _requiring(spec, required))
    return spec


def _requiring(spec: ProtocolSpec, required: list[str]) -> Callable[[Params], Built]:
    def build(values: Params) -> Built:
        absent = [n for n in required if values.get(n) is None]
        if absent:
            raise ValueError(f"--protocol {spec.source or spec.name} needs "
                             + " ".join(f"--param {n}=VALUE" for n in absent))
        chosen = {o.name: values[o.name] for o in spec.options}
        return Built(spec.factory(**chosen), chosen)

    return build


def _plain(hint: Any) -> tuple[type, tuple[Any, ...] | None] | None:
    """(type, choices) of a parameter annotation an option can carry, else None."""
    if hint in (str, int, float, bool):
        return hint, None
    if hint is Path:
        return str, None
    origin = typing.get_origin(hint)
    if origin is Literal:
        values = typing.get_args(hint)
        kinds = {type(v) for v in values}
        return (kinds.pop(), tuple(values)) if len(kinds) == 1 and kinds <= {str, int, float} else None
    if origin in (Union, types.UnionType):
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        plain = [_plain(a) for a in members]
        if any(p is None for p in plain):
            return None
        kinds = {p[0] for p in plain if p is not None}
        if len(kinds) != 1:
            return None
        kind = kinds.pop()
        # a Literal widened by its base type (``Strategy | str``) takes any value of that type
        choices = None if any(p is not None and p[1] is None for p in plain) else \
            tuple(c for p in plain if p is not None for c in (p[1] or ()))
        return kind, choices
    return None


def _described(factory: Callable[..., Any]) -> dict[str, str]:
    """Parameter name -> its description in the factory's docstring (Google, NumPy, reST or Epydoc style)."""
    import docstring_parser

    doc = inspect.getdoc(factory)
    if not doc:
        return {}
    try:
        parsed = docstring_parser.parse(doc)
    except docstring_parser.ParseError:
        return {}
    return {p.arg_name: re.sub(r"\s+", " ", p.description or "").strip() for p in parsed.params}
