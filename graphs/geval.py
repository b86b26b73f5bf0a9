"""G-Eval (Liu et al. 2023) and Analyze-Rate (Chiang & Lee 2023) as graphs: one form-filling evaluator whose
verdict is the expected score (see :mod:`jurygraph.nodes.geval` for the two estimators)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langgraph.graph import END, START, StateGraph

from jurygraph.graphs.refer import SAMPLES
from jurygraph.graphs.spec import Built, Option, Params, ProtocolSpec, panel_signals
from jurygraph.judging.state import JuryState
from jurygraph.llm.models import JuryContext
from jurygraph.nodes.geval import (
    ESTIMATORS,
    FLUENCY_SCALES,
    MAX_TOKENS,
    OFF_SCALE,
    Estimator,
    OffScale,
    make_form_filling_node,
)


def create_geval(
    *,
    estimator: Estimator | str = "samples",
    n: int = 20,
    temperature: float = 1.0,
    template: str | None = None,
    agent: str = "G-Eval",
    fluency_scale: int = 3,
    max_tokens: int | None = MAX_TOKENS["geval"],
    off_scale: OffScale | str = "keep",
    state_schema: type[Any] = JuryState,
    context_schema: type[Any] = JuryContext,
) -> StateGraph:
    """An uncompiled G-Eval graph for score items: the aspect's G-Eval prompt, "Evaluation Form (scores ONLY)".

    SummEval's prompts are G-Eval's released ``*_detailed.txt``; fluency is rated 1-3 as released
    (``fluency_scale=5``: the project's 1-5 variant). Samples at ``temperature`` with top_p 1 and
    ``max_tokens`` 5, as the released ``gpt4_eval.py`` sends (the paper gives none; ``None``: not sent).
    ``off_scale``: a sample's score off the prompt's scale ("4" on the 1-3 fluency) is kept, as the released
    ``meta_eval_summeval.py`` keeps the number (``"keep"``), or left out as a missing judgment (``"drop"``).

    ``estimator="samples"``: mean of ``n`` replies sampled at ``temperature`` (one request with native n
    where supported). ``"logprobs"``: probability-weighted score from the score token's log-probabilities,
    falling back to the samples with the reason in ``verdict.detail["fallback_reason"]``.
    """
    return _one_evaluator(make_form_filling_node(agent=agent, style="geval", estimator=estimator, n=n,
                                                 temperature=temperature, template=template,
                                                 fluency_scale=fluency_scale, max_tokens=max_tokens,
                                                 off_scale=off_scale),
                          "geval", state_schema, context_schema)


def create_analyze_rate(
    *,
    estimator: Estimator | str = "samples",
    n: int = 20,
    temperature: float = 1.0,
    template: str | None = None,
    agent: str = "Analyze-Rate",
    fluency_scale: int = 3,
    max_tokens: int | None = MAX_TOKENS["analyze-rate"],
    off_scale: OffScale | str = "keep",
    state_schema: type[Any] = JuryState,
    context_schema: type[Any] = JuryContext,
) -> StateGraph:
    """An uncompiled Analyze-Rate graph: G-Eval's prompt asking for "Analysis:" first, then the rating
    (samples at ``temperature``, top_p 1, ``max_tokens`` 256). ``off_scale`` as :func:`create_geval`'s (Analyze-Rate's
    released meta-evaluation script also keeps an off-scale number)."""
    return _one_evaluator(make_form_filling_node(agent=agent, style="analyze-rate", estimator=estimator, n=n,
                                                 temperature=temperature, template=template,
                                                 fluency_scale=fluency_scale, max_tokens=max_tokens,
                                                 off_scale=off_scale),
                          "analyze_rate", state_schema, context_schema)


def _one_evaluator(node: Any, name: str, state_schema: type[Any], context_schema: type[Any]) -> StateGraph:
    builder = StateGraph(state_schema, context_schema=context_schema)
    builder.add_node(name, node)
    builder.add_edge(START, name)
    builder.add_edge(name, END)
    return builder


# --- the protocols on the command line and around a run (graphs/spec.py) --------------------------------------

OPTIONS: tuple[Option, ...] = (
    SAMPLES,
    Option("estimator", str, "samples",
           "G-Eval/Analyze-Rate expected score: mean of n samples (default) or probability-weighted from the score "
           "token's log-probabilities", choices=ESTIMATORS),
    Option("sample_temperature", float, 1.0,
           "G-Eval/Analyze-Rate: temperature of the n samples (default 1, as in the papers)"),
    Option("fluency_scale", int, 3,
           "G-Eval/Analyze-Rate on SummEval fluency: 3 = G-Eval's released 1-3 prompt (default), 5 = the project's "
           "1-5 variant", choices=FLUENCY_SCALES),
    Option("off_scale", str, "keep",
           "G-Eval/Analyze-Rate: a sample's score off the prompt's scale is kept, as the released meta-evaluation "
           "scripts keep it (default), or dropped as a missing judgment", choices=OFF_SCALE),
)


def _form_filling(factory: Callable[..., StateGraph]) -> Callable[[Params], Built]:
    def build(values: Params) -> Built:
        n = values["samples"] or 20
        graph = factory(estimator=values["estimator"], n=n, temperature=values["sample_temperature"],
                        fluency_scale=values["fluency_scale"], off_scale=values["off_scale"])
        params = {"samples": n, "estimator": values["estimator"], "temperature": values["sample_temperature"],
                  "fluency_scale": values["fluency_scale"]}
        if values["off_scale"] != "keep":  # recorded when chosen, so a default run's manifest is unchanged
            params["off_scale"] = values["off_scale"]
        return Built(graph, params)

    return build


def _samples(params: Params) -> int:
    return int(params.get("samples") or 20)


def _signals(params: Params, task: str) -> set[str]:
    return panel_signals(task, samples=_samples(params) if params.get("estimator") == "samples" else 1)


def _spec(name: str, factory: Callable[..., StateGraph], help: str, studio: str, order: int) -> ProtocolSpec:
    build = _form_filling(factory)
    return ProtocolSpec(name=name, factory=factory, help=help, options=OPTIONS, build=build, tasks=("score",),
                        conversations=("score",),
                        plan=_samples, single_agent=lambda values: build(values).graph,
                        single_agent_plan=lambda values: _samples({"samples": values["samples"]}),
                        signals=_signals, studio={studio: lambda: factory()}, order=order)


SPECS = (
    _spec("geval", create_geval, "G-Eval: chain-of-thought form filling, expected score", "geval", 60),
    _spec("analyze-rate", create_analyze_rate, "Analyze-Rate: G-Eval's prompt with an analysis before the rating",
          "analyze_rate", 70),
)
