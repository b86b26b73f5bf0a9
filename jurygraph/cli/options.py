"""Model options shared by ``eval`` and ``bench --method``, and the runtime context they ask for."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from jurygraph.cli.protocols import ProtocolSetup
from jurygraph.llm.limits import ProviderGates, parse_limits
from jurygraph.llm.models import JuryContext, ModelSpec, parse_gen


def key_values(pairs: Sequence[str] | None, what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key or not value:
            raise SystemExit(f"jurygraph: {what} must be KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def add_model_arguments(group: Any) -> None:
    """The model options of ``eval`` (also accepted by ``bench --method``)."""
    group.add_argument("--model", help="model spec for every agent: openai:<model>, google_genai:<model>, "
                                       "<model> with --base-url, or 'local' (the embedded offline model)")
    group.add_argument("--base-url", help="OpenAI-compatible server (vLLM, llama.cpp, Ollama), e.g. "
                                          "http://127.0.0.1:8000/v1")
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
    if default is None and args.base_url:
        raise SystemExit("jurygraph: --base-url needs --model NAME (the model name the server serves)")
    per_agent = {name: ModelSpec.parse(spec, base_url=args.base_url, **params)
                 for name, spec in key_values(args.models, "--models").items()}
    if setup is not None:
        per_agent = {**_specs(setup.models, args), **per_agent}
    limits = parse_limits(args.rps, args.in_flight)
    return JuryContext(models=per_agent, default=default, gates=ProviderGates(limits) if limits else None,
                       structured_output=bool(getattr(args, "structured_output", False)),
                       gen=parse_gen(getattr(args, "gen", None)))


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
