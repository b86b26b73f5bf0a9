"""A command's start-up, before its first model request (issue 32): most of it is importing modules (LangGraph,
the model clients), which allocates objects that all live until the process ends. Python's cyclic garbage collector
runs over and over while they load and finds nothing to free: the console script pauses it
(:func:`pause_collection`) until the command is about to judge (:func:`resume_collection`), which imports the model
clients first, then freezes what was loaded (later collections leave it out) and collects again as usual."""

from __future__ import annotations

import contextlib
import gc
import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jurygraph.llm.models import JuryContext

# the module a provider's chat model comes from (what ModelSpec.build imports on the first call)
CLIENT_MODULES = {"openai": "langchain_openai", "google_genai": "langchain_google_genai"}

_paused = False


def pause_collection() -> None:
    """No cyclic collection until :func:`resume_collection` (the console script, for the commands that resume it)."""
    global _paused
    gc.disable()
    _paused = True


def resume_collection(context: JuryContext | None = None) -> None:
    """The model clients of ``context`` imported, then collection as usual again, over what is allocated from now
    on (what start-up loaded is frozen). Nothing when collection was not paused (a command run from Python)."""
    global _paused
    if not _paused:
        return
    if context is not None:
        import_clients(context)
    gc.freeze()
    gc.enable()
    _paused = False


def import_clients(context: JuryContext) -> None:
    """Import the chat-model modules the context's models are built from (a missing one is left to the model's
    own build, which says what to install)."""
    from jurygraph.llm.models import ModelSpec, to_spec

    choices: list[Any] = [*context.models.values(), context.default]
    for choice in choices:
        if not isinstance(choice, str | ModelSpec | dict):
            continue
        module = CLIENT_MODULES.get(to_spec(choice).provider)
        if module is not None:
            with contextlib.suppress(ImportError):
                importlib.import_module(module)
