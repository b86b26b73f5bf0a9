"""Checks made before a run starts, so that a command that cannot work costs nothing and says why in one line:
numeric options in range, models that have their API key and a server that listens."""

from __future__ import annotations

import argparse
import socket
from typing import Any
from urllib.parse import urlsplit

from jurygraph.llm.models import JuryContext, ModelSpec, to_spec
from jurygraph.llm.redact import redact_url


class UsageError(ValueError):
    """The command cannot run as given (exit 2, one line)."""


# option -> (smallest allowed value, whether the smallest is excluded); a protocol's options carry their own
# ranges (graphs/spec.py: Option.minimum), checked with its options (cli.protocols.option_values)
_BOUNDS: dict[str, tuple[float, bool]] = {
    "limit": (1, False), "concurrency": (1, False), "timeout": (0, True), "max_retries": (0, False),
    "workers": (1, False), "shard_size": (1, False),
    "max_context_tokens": (1, False),  # every protocol's conversation option (cli.protocols)
}


def validate_numbers(args: argparse.Namespace) -> None:
    """Range checks of the run's options: ``--limit``/``--concurrency`` >= 1, ``--timeout`` > 0,
    ``--max-retries`` >= 0, ``--workers``/``--shard-size`` >= 1."""
    for dest, (low, exclusive) in _BOUNDS.items():
        value = getattr(args, dest, None)
        if value is None or isinstance(value, bool):
            continue
        if value < low or (exclusive and value == low):
            rule = f"greater than {low:g}" if exclusive else f"at least {low:g}"
            raise UsageError(f"--{dest.replace('_', '-')} must be {rule} (got {value:g})")


def os_error_line(err: OSError) -> str:
    """An OS error as one line naming the file: '<file>: <reason>'."""
    where = err.filename or ""
    reason = err.strerror or str(err)
    return f"{where}: {reason}" if where else reason


def _specs(context: JuryContext) -> list[ModelSpec]:
    choices: list[Any] = [*context.models.values(), context.default]
    specs = []
    for choice in choices:
        if isinstance(choice, str | ModelSpec | dict):
            specs.append(to_spec(choice))
    return specs


def check_models(context: JuryContext, connect_timeout: float = 3.0) -> None:
    """Every model's API key is set, and every ``--base-url`` server accepts a connection (no request is sent).
    Raises UsageError naming the variable, or the provider, URL (without credentials) and the reason."""
    seen: set[str] = set()
    for spec in _specs(context):
        spec.check_key()
        if not spec.base_url or spec.base_url in seen:
            continue
        seen.add(spec.base_url)
        parts = urlsplit(spec.base_url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            with socket.create_connection((parts.hostname or "", port), timeout=connect_timeout):
                pass
        except OSError as err:
            reason = err.strerror or type(err).__name__
            raise UsageError(f"{spec.provider} at {redact_url(spec.base_url)}: cannot connect ({reason}); "
                             "is the server running?") from None
