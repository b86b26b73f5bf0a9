"""Estimated cost of a run from token usage and a price table (USD per million tokens).

The built-in table is a snapshot of list prices and will age: pass your own (``--prices FILE.json``,
``{"model-name": {"input": 0.15, "output": 0.6}}``); it is merged over the built-in one. Models not in
the table (local servers, fakes) add nothing, and the estimate says so by being None when no model matched.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PRICES_PER_MILLION: dict[str, dict[str, float]] = {
    "gpt-4o-mini": {"input": 0.15, "output": 0.60},
    "gpt-4o": {"input": 2.50, "output": 10.00},
    "gpt-4.1-nano": {"input": 0.10, "output": 0.40},
    "gpt-4.1-mini": {"input": 0.40, "output": 1.60},
    "gpt-4.1": {"input": 2.00, "output": 8.00},
    "gpt-4-turbo": {"input": 10.00, "output": 30.00},
    "gpt-4": {"input": 30.00, "output": 60.00},
    "gpt-3.5-turbo": {"input": 0.50, "output": 1.50},
    "gemini-2.0-flash": {"input": 0.10, "output": 0.40},
    "gemini-1.5-flash": {"input": 0.075, "output": 0.30},
    "gemini-1.5-pro": {"input": 1.25, "output": 5.00},
}


# base URLs of the providers themselves: a model there is billed at list price
PROVIDER_URLS = ("https://api.openai.com", "https://generativelanguage.googleapis.com")


def model_name(label: str) -> str:
    """'openai:gpt-4o-mini@http://...' -> 'gpt-4o-mini'."""
    return label.split(":", 1)[-1].split("@", 1)[0]


def price_for(label: str, table: Mapping[str, Mapping[str, float]]) -> Mapping[str, float] | None:
    name = model_name(label)
    if name in table:
        return table[name]
    # dated snapshots ('gpt-4o-mini-2024-07-18') price like their family: longest matching prefix wins
    matches = [key for key in table if name.startswith(key)]
    return table[max(matches, key=len)] if matches else None


def at_own_server(label: str) -> bool:
    """Whether a model label names a model served at a --base-url other than the provider's own API."""
    _, at, url = label.partition("@")
    return bool(at) and not url.startswith(PROVIDER_URLS)


def estimate_cost(usage: Mapping[str, Mapping[str, Any]], prices: Mapping[str, Any] | None = None) -> float | None:
    """Total USD over agents' usage entries ({model, input_tokens, output_tokens}); None if nothing priced.
    A model at a non-provider --base-url (vLLM, Ollama...) is priced only by ``prices``, never by list prices."""
    table = {**PRICES_PER_MILLION, **(prices or {})}
    total, priced = 0.0, False
    for entry in usage.values():
        label = str(entry.get("model", ""))
        price = price_for(label, dict(prices or {}) if at_own_server(label) else table)
        if price is None:
            continue
        priced = True
        total += entry.get("input_tokens", 0) / 1e6 * price["input"]
        total += entry.get("output_tokens", 0) / 1e6 * price["output"]
    return round(total, 6) if priced else None
