"""Model options shared by ``eval`` and ``bench --method``, and the runtime context they ask for."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from jurygraph.cli.preflight import UsageError
from jurygraph.cli.protocols import ProtocolSetup, read_rubric
from jurygraph.llm.limits import ProviderGates, parse_limits
from jurygraph.llm.models import JuryContext, ModelSpec, parse_gen
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
                       help="override a generation parameter (temperature, top_p, max_tokens, n; VALUE 'none' = "
                            "the provider's default) for an agent name or role, or '*'/all for every agent, e.g. "
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
