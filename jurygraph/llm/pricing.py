"""Estimated cost of a run from token usage and a price table (USD per million tokens).

The built-in table is a snapshot of list prices (``PRICES_DATE``, from ``PRICES_SOURCE``) and will age: pass your
own (``--prices FILE.json``, ``{"model-name": {"input": 0.15, "output": 0.6}}``, optionally ``"batch_input"`` and
``"batch_output"``); it is merged over the built-in one. Models not in the table (local servers, fakes) add
nothing, and the estimate says so by being None when no model matched.

Batch prices: OpenAI's Batch API and Gemini's batch mode bill half the list price (``BATCH_DISCOUNT``) unless a
model's entry names its own ``batch_input``/``batch_output``. A usage entry's ``batch_input_tokens`` and
``batch_output_tokens`` (the part of its tokens that went through a batch) are priced so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# the list prices below were taken on this date from these pages (the 2026 pages still showed them; checked
# 2026-11-25 against copies of OpenAI's pricing page from March and July 2026)
PRICES_DATE = "2026-11-22"
PRICES_SOURCE = "https://platform.openai.com/docs/pricing, https://ai.google.dev/gemini-api/docs/pricing"
BATCH_DISCOUNT = 0.5

PRICES_PER_MILLION: dict[str, dict[str, float]] = {
    "gpt-5": {"input": 1.25, "output": 10.00},
    "gpt-5-mini": {"input": 0.25, "output": 2.00},
    "gpt-5-nano": {"input": 0.05, "output": 0.40},
    "gpt-4o-mini": {"input": 0.15, "output": 0.60},
    "gpt-4o": {"input": 2.50, "output": 10.00},
    "gpt-4.1-nano": {"input": 0.10, "output": 0.40},
    "gpt-4.1-mini": {"input": 0.40, "output": 1.60},
    "gpt-4.1": {"input": 2.00, "output": 8.00},
    "gpt-4-turbo": {"input": 10.00, "output": 30.00},
    "gpt-4": {"input": 30.00, "output": 60.00},
    "gpt-3.5-turbo": {"input": 0.50, "output": 1.50},
    "o3": {"input": 2.00, "output": 8.00},
    "o4-mini": {"input": 1.10, "output": 4.40},
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


def price_of(label: str, prices: Mapping[str, Any] | None = None) -> Mapping[str, float] | None:
    """A model label's prices (USD per million tokens; ``batch_input``/``batch_output`` filled in), or None.
    A model at a non-provider --base-url (vLLM, Ollama...) is priced only by ``prices``, never by list prices."""
    table = dict(prices or {}) if at_own_server(label) else {**PRICES_PER_MILLION, **(prices or {})}
    price = price_for(label, table)
    if price is None:
        return None
    return {"batch_input": price["input"] * BATCH_DISCOUNT, "batch_output": price["output"] * BATCH_DISCOUNT,
            **price}


def entry_cost(entry: Mapping[str, Any], price: Mapping[str, float]) -> float:
    """USD of one usage entry: its tokens at list price, the part sent through a batch at batch price."""
    batch_in, batch_out = entry.get("batch_input_tokens", 0), entry.get("batch_output_tokens", 0)
    return ((entry.get("input_tokens", 0) - batch_in) * price["input"] + batch_in * price["batch_input"]
            + (entry.get("output_tokens", 0) - batch_out) * price["output"]
            + batch_out * price["batch_output"]) / 1e6


def estimate_cost(usage: Mapping[str, Mapping[str, Any]], prices: Mapping[str, Any] | None = None) -> float | None:
    """Total USD over agents' usage entries ({model, input_tokens, output_tokens, batch_...}); None if nothing
    priced."""
    total, priced = 0.0, False
    for entry in usage.values():
        price = price_of(str(entry.get("model", "")), prices)
        if price is None:
            continue
        priced = True
        total += entry_cost(entry, price)
    return round(total, 6) if priced else None


def prices_line(prices_file: str | None = None) -> str:
    """Where the prices of an estimate come from, for the user to judge them."""
    built_in = (f"list prices of {PRICES_DATE} ({PRICES_SOURCE}); batch: {BATCH_DISCOUNT:.0%} of list for OpenAI "
                "models (a --batch run sends other providers' calls online)")
    return f"{prices_file} over the built-in {built_in}" if prices_file else f"built-in {built_in}"
