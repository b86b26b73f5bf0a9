"""ReFeR (Narsupalli et al.): peer reviewers and an area chair (Algorithm 1, Appendix B).

Phase 1: K peers, each with its own model, evaluate the item independently — they are K nodes of ONE
LangGraph superstep (fan-out from START), so none sees another's evaluation. Phase 2: the area chair waits
for all of them (a barrier edge ``[peer_1, ..., peer_K] -> area_chair``), reads the item and the peers'
evaluations in peer order, and samples n responses: ReFeR-Turbo n = 20 at temperature 1 (final score = mean
of the ratings), ReFeR-Lite n = 1. With an OpenAI-compatible model the n samples are one request.

Decisions where the paper is silent:
- C_final (Algorithm 1's "Choose 1"): the first sample whose rating is closest to the mean (for reasoning:
  the first sample giving the majority answer); every sample's comment and rating stay in the verdict.
- Reasoning with n > 1: the final answer is the majority of the samples' answers; a tie gives no answer.
- A peer whose reply cannot be read, or whose model fails for good, is a blank evaluation (``" "``) in its
  place in the area chair's prompt, which still names every peer ("three" models), as the released scripts
  pass it; ``missing_peers="omit"`` (CLI ``--missing-peers omit``) leaves it out instead (the prompt then says
  "two" and numbers the rest First, Second, ...). Either way it is counted in
  ``verdict.detail["missing_peers"]``. A missing key or an unknown model is raised, not hidden.
- Generation parameters follow Appendix C: peers use the provider's defaults (temperature not sent) with
  max_tokens 128 (NLG) or 192 (multimodal); reasoning peers temperature 1, top_p 1, max_tokens 256; the area
  chair temperature 1, top_p 1, max_tokens 256 (reasoning: no limit), in both variants.
- ReFeR-Lite is, by default, its own area-chair request with n = 1 (the paper: "n=20 (varies for ReFeR Lite
  and Turbo)"; the released Topical-Chat scripts also call the area chair with n = 1). ``lite_from_turbo=True``
  (CLI ``--lite-from-turbo``, the project's option) takes the first of Turbo's 20 samples instead, so a Turbo
  and a Lite run share one cached request.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from langgraph.graph import END, START, StateGraph

from jurygraph.judging.items import EvalItem
from jurygraph.judging.state import JuryState
from jurygraph.llm.models import JuryContext
from jurygraph.nodes.aggregator import make_aggregator_node
from jurygraph.nodes.refer import (
    FEEDBACK_MODES,
    MissingPeers,
    Peer,
    make_area_chair_node,
    make_peer_node,
    template_for,
)

Variant = Literal["turbo", "lite"]
VARIANTS: tuple[str, ...] = ("turbo", "lite")
TURBO_SAMPLES = 20  # Section 2.3.1 / Appendix C
AREA_CHAIR = "area_chair"


class ReferState(JuryState, total=False):
    """ReFeR keeps the shared state: peers' and the area chair's judgments, histories, the verdict."""


def refer_peers(peers: int | Sequence[str | Peer]) -> list[Peer]:
    """K peers named peer_1..peer_K (each looked up by name in the models mapping, else the 'peer' role)."""
    if isinstance(peers, int):
        if peers < 1:
            raise ValueError("ReFeR needs at least one peer")
        return [Peer(f"peer_{i}") for i in range(1, peers + 1)]
    panel = [p if isinstance(p, Peer) else Peer(p) for p in peers]
    names = [p.name for p in panel]
    if not panel or len(set(names)) != len(names) or AREA_CHAIR in names:
        raise ValueError(f"peer names must be distinct, not empty and not {AREA_CHAIR!r}: {names}")
    return panel


def variant_samples(variant: str, samples: int | None) -> int:
    """n for the area chair: Turbo 20 unless given; Lite always 1 (a different n is a contradiction)."""
    if variant == "turbo":
        n = TURBO_SAMPLES if samples is None else samples
    elif variant == "lite":
        if samples not in (None, 1):
            raise ValueError(f"ReFeR-Lite samples the area chair once (n = 1), not {samples}; use variant='turbo'")
        n = 1
    else:
        raise ValueError(f"unknown ReFeR variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    if n < 1:
        raise ValueError("samples must be at least 1")
    return n


def create_refer(
    *,
    peers: int | Sequence[str | Peer] = 3,
    variant: Variant | str = "turbo",
    samples: int | None = None,
    feedback: str = "score",
    temperature: float = 1.0,
    template: str | None = None,
    prompt_file: str | Path | None = None,
    lite_from_turbo: bool = False,
    missing_peers: MissingPeers | str = "blank",
    state_schema: type[Any] = ReferState,
    context_schema: type[Any] = JuryContext,
) -> StateGraph:
    """An uncompiled ReFeR graph that judges one item (``{"item": EvalItem}``).

    ``peers``: K (default 3) or peer names/:class:`Peer` objects; ``variant``: 'turbo' (n = ``samples``,
    default 20) or 'lite' (n = 1); ``feedback``: what peers pass to the area chair — 'score' (the paper's
    best, Appendix K), 'comment' or 'both'; ``temperature``: the area chair's (Appendix C: 1). The prompts
    come from the item's dataset/aspect or task (Appendix N), a named ``template`` (e.g. 'aqua', 'icqd'),
    or a ``prompt_file`` (e.g. written by ``jurygraph autoprompt``). The verdict holds the final score (or
    answer), the chosen comment and every sample's comment and rating. ``lite_from_turbo`` (Lite only): the
    area chair sends Turbo's request (n = 20) and the verdict is its first sample. ``missing_peers``: a peer
    whose judgment is missing is a blank evaluation in the area chair's prompt, the count of models kept, as
    the released scripts do (``"blank"``), or left out (``"omit"``). Generation parameters are Appendix C's
    (see the module docstring).
    """
    panel = refer_peers(peers)
    n = variant_samples(variant, samples)
    if lite_from_turbo and variant != "lite":
        raise ValueError("lite_from_turbo applies to variant='lite' (Lite = the first of Turbo's samples)")
    if feedback not in FEEDBACK_MODES:
        raise ValueError(f"unknown feedback mode {feedback!r}; choose one of {', '.join(FEEDBACK_MODES)}")
    choose = _chooser(template, prompt_file)

    builder = StateGraph(state_schema, context_schema=context_schema)
    for peer in panel:
        builder.add_node(peer.name, make_peer_node(peer, choose))
        builder.add_edge(START, peer.name)
    builder.add_node(AREA_CHAIR, make_area_chair_node([p.name for p in panel], choose,
                                                      samples=TURBO_SAMPLES if lite_from_turbo else n,
                                                      temperature=temperature, feedback=feedback,
                                                      use_first=lite_from_turbo, missing_peers=missing_peers))
    builder.add_edge([p.name for p in panel], AREA_CHAIR)  # the barrier: the area chair waits for every peer
    builder.add_edge(AREA_CHAIR, END)
    return builder


def _chooser(template: str | None, prompt_file: str | Path | None) -> Callable[[EvalItem], Any]:
    """Each item's peer prompt (``template``, ``prompt_file`` or the paper's for its task); a missing prompt file is
    an error now, not at the first item."""
    if prompt_file is not None and not Path(prompt_file).is_file():
        raise FileNotFoundError(f"prompt file {str(prompt_file)!r} does not exist")

    def choose(item: EvalItem) -> Any:
        return template_for(item, template, prompt_file)

    return choose


def create_refer_peer(
    *,
    peer: str = "peer",
    template: str | None = None,
    prompt_file: str | Path | None = None,
    state_schema: type[Any] = ReferState,
    context_schema: type[Any] = JuryContext,
) -> StateGraph:
    """One model judging alone with ReFeR's peer prompt (no other peer, no area chair): ReFeR's single-agent form,
    which is what an escalation to a stronger model runs for a ReFeR panel (``--escalate-to``). The verdict is the
    peer's judgment (missing when it is); ``template``/``prompt_file`` as :func:`create_refer`'s."""
    choose = _chooser(template, prompt_file)

    builder = StateGraph(state_schema, context_schema=context_schema)
    builder.add_node(peer, make_peer_node(Peer(peer), choose))
    builder.add_node("aggregate", make_aggregator_node([peer]))
    builder.add_edge(START, peer)
    builder.add_edge(peer, "aggregate")
    builder.add_edge("aggregate", END)
    return builder
