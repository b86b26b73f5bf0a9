"""Prompt templates, one per file, with ``${slot}`` placeholders.

Templates are package data read with importlib.resources. :func:`render` fills every slot in ONE pass
over the template (``string.Template``), so text inside a slot value — an item that itself contains
``{chat_history}``, ``${agent_name}`` or ``{{Peer_response1}}`` — reaches the model verbatim.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

HEADER = "#:"  # leading lines of a prompt file that say where its text comes from; never sent to a model


def strip_header(text: str) -> str:
    """A template without its leading ``#:`` provenance lines."""
    lines = text.splitlines()
    while lines and lines[0].startswith(HEADER):
        lines.pop(0)
    return "\n".join(lines).rstrip("\n")


@cache
def load_prompt(name: str) -> str:
    """The template ``prompts/<name>.txt`` (provenance header removed), e.g. ``load_prompt("chateval/faireval")``."""
    path = resources.files(__package__).joinpath(f"{name}.txt")
    if not path.is_file():
        raise FileNotFoundError(f"no prompt template {name!r} (looked for {name}.txt in jurygraph.prompts)")
    return strip_header(path.read_text(encoding="utf-8"))


def load_prompt_file(path: str | Path) -> str:
    """A user's template file (e.g. written by ``jurygraph autoprompt``), provenance header removed."""
    return strip_header(Path(path).read_text(encoding="utf-8"))


@cache
def load_json(name: str) -> Any:
    """The parsed content of ``prompts/<name>.json`` (personas, aspect definitions)."""
    path = resources.files(__package__).joinpath(f"{name}.json")
    if not path.is_file():
        raise FileNotFoundError(f"no prompt data {name!r} (looked for {name}.json in jurygraph.prompts)")
    return json.loads(path.read_text(encoding="utf-8"))


def slots_of(template: str) -> set[str]:
    """The slot names a template uses."""
    return {m.group("named") or m.group("braced") for m in Template.pattern.finditer(template)
            if m.group("named") or m.group("braced")}


def render(template: str, /, **slots: object) -> str:
    """Fill each ``${slot}`` once; a slot the template uses but the caller did not give is an error."""
    missing = slots_of(template) - slots.keys()
    if missing:
        raise KeyError(f"prompt slot(s) without a value: {', '.join(sorted(missing))}")
    return Template(template).substitute({k: "" if v is None else str(v) for k, v in slots.items()})


def select_template(protocol: str, *, task: str, dataset: str | None = None, aspect: str | None = None,
                    variant: str | None = None, conversation: bool = False) -> str | None:
    """Which template ``protocol`` judges an item with, from the one table ``prompts/templates.json`` (or, for a
    protocol it does not list, the protocol's own ``prompts/<protocol>/select.json``, in the same form, so a
    protocol added later keeps its table in its folder): the most specific of ``dataset/aspect/variant``,
    ``dataset/aspect``, ``dataset``, ``task``, ``*`` it has, or None when it has no built-in template for the
    item. ``dataset`` is a built-in benchmark's canonical name. ``conversation``: the item is a conversation
    (messages, tool calls): its template is ``conversation/<task>`` (the rubric, not the dataset, says what is
    judged)."""
    tables = load_json("templates")
    table = tables[protocol] if protocol in tables else load_json(f"{protocol}/select")
    if conversation:
        return str(table[f"conversation/{task}"]) if f"conversation/{task}" in table else None
    keys = [f"{dataset}/{aspect}/{variant}", f"{dataset}/{aspect}"] if dataset and aspect else []
    for key in [*keys[0 if variant else 1:], *([dataset] if dataset else []), task, "*"]:
        if key in table:
            return str(table[key])
    return None
