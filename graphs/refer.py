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

from jurygraph.graphs.peer_discussion import add_peer_discussion
from jurygraph.graphs.spec import Built, Option, Params, ProtocolSpec, panel_signals
from jurygraph.judging.items import EvalItem
from jurygraph.judging.state import JuryState
from jurygraph.llm.models import JuryContext
from jurygraph.nodes.aggregator import make_aggregator_node
from jurygraph.nodes.refer import (
    FEEDBACK_MODES,
    MISSING_PEERS,
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


def create_refer_discussion(*, rounds: int = 1, peers: int | Sequence[str | Peer] = 3,
                            **refer_options: Any) -> StateGraph:
    """An uncompiled ReFeR graph whose peers discuss ``rounds`` rounds (one-by-one) before the area chair
    (:mod:`jurygraph.graphs.peer_discussion`, jurygraph's own hybrid of ReFeR and ChatEval).

    The other options (``variant``, ``samples``, ``feedback``, ``template``, ``prompt_file``, ...) are
    :func:`create_refer`'s. A discussion turn uses the peer's own prompt, parameters and model, with the
    discussion so far appended (``prompts/refer/discussion.txt``); its judgment replaces the peer's earlier
    one, so the area chair reads each peer's last review.
    """
    if rounds < 1:
        raise ValueError("a peer discussion needs at least one round (rounds=0 is create_refer)")
    builder = create_refer(peers=peers, **refer_options)
    choose = _chooser(refer_options.get("template"), refer_options.get("prompt_file"))
    return add_peer_discussion(builder, refer_peers(peers), rounds, choose, AREA_CHAIR)


# --- the protocol on the command line and around a run (graphs/spec.py) ---------------------------------------

# n samples: ReFeR-Turbo's area chair's, and G-Eval's and Analyze-Rate's (graphs/geval.py)
SAMPLES = Option("samples", int, None,
                 "number of samples n (ReFeR-Turbo's area chair: default 20; G-Eval/Analyze-Rate: default 20)",
                 minimum=1)
OPTIONS: tuple[Option, ...] = (
    Option("peers", str, None, "ReFeR: one model spec per peer (K = their number; default 3 peers using --model)",
           metavar="SPEC,SPEC,..."),
    Option("area_chair", str, None, "ReFeR: the area chair's model spec", metavar="SPEC"),
    Option("variant", str, "turbo", "ReFeR: turbo (area chair samples n, default 20) or lite (n = 1)",
           choices=VARIANTS),
    SAMPLES,
    Option("lite_from_turbo", bool, False,
           "ReFeR-Lite: take the first of Turbo's 20 area-chair samples (jurygraph's option: a Turbo and a Lite run "
           "share one cached request) instead of its own n = 1 request (the paper)"),
    Option("peer_discussion", int, 0,
           "ReFeR (jurygraph's own, not the paper): the peers discuss R rounds one-by-one after their reviews, "
           "before the area chair reads their final reviews (default 0: no discussion)", minimum=0, metavar="R"),
    Option("missing_peers", str, "blank",
           "ReFeR: a peer whose judgment is missing is a blank evaluation in the area chair's prompt, the count of "
           "models kept, as the released scripts (default), or omitted (the prompt names one model fewer)",
           choices=MISSING_PEERS),
    Option("feedback", str, "score", "ReFeR: what peers pass to the area chair (default: score, the paper's best)",
           choices=FEEDBACK_MODES),
    Option("refer_template", str, None, "ReFeR: a named prompt pair (e.g. aqua, bbh_du, csqa, gsm8k, icqd, agiqa)"),
    Option("prompt_file", str, None,
           "ReFeR: a prompt file (e.g. from `jurygraph autoprompt`) for peers and area chair"),
)


def _model_specs(values: Params) -> list[str]:
    return [s.strip() for s in (values.get("peers") or "").split(",") if s.strip()]


def _build(values: Params) -> Built:
    specs = _model_specs(values)
    variant, samples = values["variant"], values["samples"]
    options: dict[str, Any] = {
        "peers": len(specs) or 3, "variant": variant,
        "samples": None if variant == "lite" and samples in (None, 1) else samples,
        "feedback": values["feedback"], "template": values["refer_template"], "prompt_file": values["prompt_file"],
        "lite_from_turbo": values["lite_from_turbo"], "missing_peers": values["missing_peers"]}
    rounds = values["peer_discussion"] or 0
    graph = create_refer_discussion(rounds=rounds, **options) if rounds else create_refer(**options)
    models = {f"peer_{i}": spec for i, spec in enumerate(specs, 1)}
    if values["area_chair"]:
        models[AREA_CHAIR] = values["area_chair"]
    params = {"peers": len(specs) or 3, "variant": variant,
              "samples": variant_samples(variant, samples if variant == "turbo" else None),
              "feedback": values["feedback"], "template": values["refer_template"],
              "prompt_file": values["prompt_file"], "lite_from_turbo": values["lite_from_turbo"]}
    if rounds:
        params["peer_discussion"] = rounds
    if values["missing_peers"] != "blank":  # recorded when chosen, so a default run's manifest is unchanged
        params["missing_peers"] = values["missing_peers"]
    return Built(graph, params, models, every_agent_has_a_model=bool(specs and values["area_chair"]))


def _plan(params: Params) -> int:
    reviews = 1 + int(params.get("peer_discussion") or 0)  # each peer's review and its discussion turns
    # Lite from Turbo sends Turbo's request (its first sample taken)
    samples = TURBO_SAMPLES if params.get("lite_from_turbo") else int(params.get("samples") or 1)
    # n samples: n requests (where the provider has no native n); a single sample (Lite) may be re-asked
    return 2 * int(params.get("peers") or 3) * reviews + samples + (1 if samples == 1 else 0)


SPEC = ProtocolSpec(
    name="refer",
    factory=create_refer,
    help="ReFeR: peer reviewers and an area chair",
    options=OPTIONS,
    build=_build,
    tasks=("score", "choice"),
    conversations=("score",),
    plan=_plan,
    single_agent=lambda values: create_refer_peer(template=values["refer_template"],
                                                  prompt_file=values["prompt_file"]),
    single_agent_plan=lambda values: 2,
    signals=lambda params, task: panel_signals(task, members=int(params.get("peers") or 3),
                                               samples=int(params.get("samples") or 1)),
    # 3 peers, area chair with n = 20 samples (Turbo) or 1 (Lite); the peers discussing one round (jurygraph's own)
    studio={"refer_turbo": lambda: create_refer(variant="turbo"),
            "refer_lite": lambda: create_refer(variant="lite"),
            "refer_peer_discussion": lambda: create_refer_discussion(rounds=1)},
    order=30,
)
