"""Model options shared by ``eval`` and ``bench --method``, and the runtime context they ask for."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langgraph.graph import StateGraph

from jurygraph.cli.preflight import UsageError
from jurygraph.cli.protocols import ProtocolSetup, read_rubric
from jurygraph.graphs.escalation import ESCALATION
from jurygraph.judging.items import EvalItem
from jurygraph.llm.limits import ProviderGates, parse_limits
from jurygraph.llm.models import ALL_AGENTS, JuryContext, ModelSpec, check_gen_range, parse_gen, to_spec
from jurygraph.llm.redact import redact_url


def key_values(pairs: Sequence[str] | None, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key or not value:
            raise UsageError(f"{what} must be KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def add_model_arguments(group: Any) -> None:
    """The model options of ``eval`` (also accepted by ``bench --method``)."""
    group.add_argument("--model", help="model spec for every agent: openai:<model>, google_genai:<model>, "
                                       "<model> with --base-url, or 'local' (the embedded offline model)")
    group.add_argument("--base-url", help="the server of every model spec without its own @URL: an OpenAI-compatible "
                                          "server (vLLM, llama.cpp, Ollama), e.g. http://127.0.0.1:8000/v1, or a "
                                          "Gemini-API endpoint for google_genai: specs")
    group.add_argument("--models", action="append", metavar="AGENT=SPEC",
                       help="a model for one agent or role, e.g. --models Critic=openai:gpt-4o")
    group.add_argument("--timeout", type=float, default=120.0, help="seconds per model call (default 120)")
    group.add_argument("--max-retries", type=int, default=6,
                       help="retries of a model call on 429/5xx/timeouts/connection errors, with exponential "
                             "backoff and jitter, honouring Retry-After (default 6)")
    group.add_argument("--rps", action="append", metavar="[PROVIDER=]N",
                       help="requests per second to a provider (openai, google_genai, or a --base-url), shared "
                             "by all agents and items; a bare N limits every provider")
    group.add_argument("--in-flight", action="append", metavar="[PROVIDER=]N",
                       help="requests in flight to a provider at once (same keys as --rps)")
    group.add_argument("--structured-output", action="store_true",
                       help="ask OpenAI/Gemini models for judgments as JSON-schema output (the papers read free "
                            "text, the default); the other agents then hear the model's own text field")
    group.add_argument("--gen", action="append", metavar="AGENT.PARAM=VALUE",
                       help="override a generation parameter (temperature: 0-2 for OpenAI and Gemini; top_p in "
                            "(0, 1]; max_tokens, n: at least 1; VALUE 'none' = the provider's default) for an agent "
                            "name or role of the protocol, or '*'/all for every agent, e.g. "
                            "--gen Critic.temperature=0.7 --gen area_chair.max_tokens=256; default: each "
                            "protocol's paper settings")


def context_from_args(args: argparse.Namespace, setup: ProtocolSetup | None = None) -> JuryContext:
    """The runtime context a command line asks for: models per agent, timeouts, retries, request limits."""
    params = {"timeout": args.timeout, "max_retries": args.max_retries}
    default = ModelSpec.parse(args.model, base_url=args.base_url, **params) if args.model else None
    per_agent = {name: ModelSpec.parse(spec, base_url=args.base_url, **params)
                 for name, spec in key_values(args.models, "--models").items()}
    if setup is not None:
        per_agent = {**_specs(setup.models, args), **per_agent}
    # --model is needed only when some agent would have no model (ReFeR's --peers and --area-chair name all)
    if default is None and args.base_url and not (setup is not None and setup.every_agent_has_a_model):
        raise UsageError("--base-url needs --model NAME (the model name the server serves) for the agents "
                         "that no other option gives a model")
    _one_provider_per_base_url([default, *per_agent.values()], args.base_url)
    limits = parse_limits(args.rps, args.in_flight)
    return JuryContext(models=per_agent, default=default, gates=ProviderGates(limits) if limits else None,
                       structured_output=bool(getattr(args, "structured_output", False)),
                       gen=parse_gen(getattr(args, "gen", None)),
                       rubric=read_rubric(getattr(args, "rubric", None)),
                       max_context_tokens=getattr(args, "max_context_tokens", None))


def _one_provider_per_base_url(specs: Sequence[Any], base_url: str | None) -> None:
    """``--base-url`` is the server of every model spec without its own ``@URL``, whatever its provider (an
    OpenAI-compatible server for ``openai:``, a Gemini-API endpoint for ``google_genai:``). One server speaks one
    API: when specs of both providers would share it, say so instead of sending requests to the wrong API."""
    if not base_url:
        return
    providers = sorted({spec.provider for spec in specs if isinstance(spec, ModelSpec) and spec.base_url == base_url})
    if len(providers) > 1:
        raise UsageError(f"--base-url {redact_url(base_url)} would serve both {' and '.join(providers)} models; "
                         "give the others their own server as PROVIDER:MODEL@URL")


def _specs(models: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Protocol-given model specs (e.g. ReFeR's --peers) with the run's timeout and retry settings."""
    params = {"timeout": args.timeout, "max_retries": args.max_retries}
    out: dict[str, Any] = {}
    for name, model in models.items():
        if isinstance(model, str):
            model = ModelSpec.parse(model, base_url=args.base_url, **params)
        elif isinstance(model, ModelSpec):
            model = model.model_copy(update=params)
        out[name] = model
    return out


# --- --gen names agents the protocol has, with values their models take ---


def check_gen_options(args: argparse.Namespace, setup: ProtocolSetup, context: JuryContext,
                      items: Iterable[EvalItem], *, restored: bool = False) -> None:
    """``--gen`` and ``--models`` against the protocol as built: the agents and roles they name are the graph's (the
    escalation's included), found by running it on the first item; ``--gen``'s values in each reached model's
    documented range. ``restored``: ``--gen``'s values are a resumed run's own (from before these checks): a
    warning, so the run can go on."""
    named = set(key_values(getattr(args, "models", None), "--models"))
    if not context.gen and not named:
        return
    agents = None
    if (set(context.gen) - {ALL_AGENTS}) or named:
        first = next(iter(items), None)
        # the panel as it judges one item: a trajectory match before it may decide the first item for no call
        graphs = [setup.panel_graph or setup.graph]
        if setup.escalation_graph is not None:
            graphs.append(setup.escalation_graph)
        agents = graph_agents(graphs, first, context) if first is not None else None
    protocol = str(setup.params.get("protocol") or args.protocol)
    try:
        check_models_names(named, agents, protocol, escalation=setup.escalation_graph is not None)
    except UsageError as err:
        if not getattr(args, "resume", None):
            raise
        # --models defines the run and cannot change on --resume: a run made before this check goes on
        print(f"jurygraph: warning: {err} (the run's own --models, kept on --resume)", file=sys.stderr)
    if not context.gen:
        return
    if restored:
        try:
            check_gen(context, agents, protocol)
        except UsageError as err:
            print(f"jurygraph: warning: {err} (the run's own --gen, kept on --resume)", file=sys.stderr)
        return
    check_gen(context, agents, protocol)


def check_models_names(named: set[str], agents: dict[str, str] | None, protocol: str, *, escalation: bool) -> None:
    """Each ``--models AGENT=SPEC`` names an agent or a role the protocol calls (``agents``: :func:`graph_agents`;
    not checked when None): a misspelt name would otherwise leave that agent on ``--model``, silently."""
    if agents is None:
        return
    known = {*agents, *agents.values(), *([ESCALATION] if escalation else [])}
    for target in sorted(named - known):
        raise UsageError(_unknown_agent(f"--models {target}=...", target, agents, protocol))


def _unknown_agent(given: str, target: str, agents: dict[str, str], protocol: str) -> str:
    names, roles = list(agents), sorted(set(agents.values()) - set(agents))
    close = difflib.get_close_matches(target, [*names, *roles], n=1, cutoff=0.6)
    return (f"{given}: {protocol} has no agent or role {target!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
            + f"; its agents: {', '.join(names)}" + (f"; roles: {', '.join(roles)}" if roles else ""))


def graph_agents(graphs: Iterable[Any], item: EvalItem, context: JuryContext) -> dict[str, str] | None:
    """Every agent the graphs call on ``item`` (name -> role), read from the graphs themselves: each is run as the
    dry run runs it (synthetic replies, no request sent), once with a panel that never agrees and a Critic that
    always objects (every loop at its longest, the tie-breaker called) and once the other way. None when a graph
    cannot be run so (then nobody can say which names it has). A ``--gen`` an agent cannot take (``n`` for a
    single-reply call) is raised as the UsageError it would fail every item with."""
    from jurygraph.running.estimate import FEWEST, MOST, SyntheticReplies, planned_context

    heard: dict[str, str] = {}

    class Listening(SyntheticReplies):
        def answer(self, call: Any) -> Any:
            heard[call.request.agent] = call.request.role
            return super().answer(call)

    state = {"item": item.model_dump(mode="json", exclude_none=True)}
    for graph in graphs:
        app = graph.compile() if isinstance(graph, StateGraph) else graph
        for scenario in (MOST, FEWEST):
            try:
                app.invoke(state, context=planned_context(context, Listening(scenario, tokenizer="approximate")))
            except ValueError as err:
                if str(err).startswith("--gen"):
                    raise UsageError(str(err)) from None
                return None
            except Exception:
                return None
    return heard


def check_gen(context: JuryContext, agents: dict[str, str] | None, protocol: str) -> None:
    """Each ``--gen`` names an agent or a role of the protocol (``agents``: :func:`graph_agents`; not checked when
    None), and its value is in the documented range of every model it reaches. UsageError in one line naming the
    flag, the value, and for an unknown name the close match and the names there are."""
    for target, params in context.gen.items():
        if target != ALL_AGENTS and agents is not None and target not in agents and target not in agents.values():
            first = f"{target}.{next(iter(params))}={_shown_value(next(iter(params.values())))}"
            raise UsageError(_unknown_agent(f"--gen '{first}'", target, agents, protocol) + "; or '*' for every agent")
        for spec in _reached(context, target, agents):
            for param, value in params.items():
                try:
                    check_gen_range(target, param, value, spec)
                except ValueError as err:
                    raise UsageError(str(err)) from None


def _shown_value(value: Any) -> str:
    return "none" if value is None else f"{value:g}"


def _reached(context: JuryContext, target: str, agents: dict[str, str] | None) -> list[ModelSpec]:
    """The model specs a ``--gen`` override for ``target`` applies to: those of the agents it names (every model
    of the run for '*', or when the agents are not known), and the escalation's stronger model."""
    def spec(choice: Any) -> ModelSpec | None:
        return None if choice is None or isinstance(choice, BaseChatModel) else to_spec(choice)

    if target == ALL_AGENTS or agents is None:
        choices = [*context.models.values(), context.default]
    else:
        named = [(agent, role) for agent, role in agents.items() if target in (agent, role)]
        choices = [context.models.get(agent, context.models.get(role, context.default)) for agent, role in named]
        choices.append(context.models.get(ESCALATION))
    return [found for found in map(spec, choices) if found is not None]
