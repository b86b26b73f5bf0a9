"""A jurygraph panel as an inspect_ai scorer (``pip install 'jurygraph[inspect]'``).

    from jurygraph.integrations.inspect import panel_scorer

    Task(dataset=..., solver=generate(), scorer=panel_scorer("chateval", task="score", aspect="helpfulness",
                                                             scale=(1, 5), default="openai:gpt-4o-mini"))

Each sample's ``input`` is what the panel reads as the question (pairwise) or source (score), with the ``question``,
``source``, ``context`` and ``reference`` of the sample's metadata; the model's output is the response judged. The
``target``, on a score task, is the human label (``target="label"``, the default: a number) or a reference answer
the judges may read (``target="reference"``); on a pairwise task it is the second response: the model's output is
compared with the target answer (1.0: the output wins). The ``Score``'s ``value`` is the panel's score, its
``answer`` the verdict as the panel gave it, its ``explanation`` who said what, its ``metadata`` each member's
judgment and the doubt signals. A missing verdict is ``Score.unscored`` (inspect's own "no score", left out of the
metrics), never a 0.
"""

from __future__ import annotations

from typing import Any, Literal

from inspect_ai.scorer import Score, Scorer, Target, mean, scorer, stderr
from inspect_ai.solver import TaskState

from jurygraph.evaluators import PanelEvaluator, create_panel_evaluator
from jurygraph.evaluators.items import TEXT_FIELDS
from jurygraph.judging.items import TaskKind, format_score


def panel_scorer(protocol: str | Any | PanelEvaluator, *, target: Literal["label", "reference"] = "label",
                 name: str | None = None, **evaluator_options: Any) -> Scorer:
    """An inspect_ai scorer running ``protocol``'s panel (or an existing :class:`PanelEvaluator`; otherwise
    ``evaluator_options`` are :func:`~jurygraph.evaluators.create_panel_evaluator`'s), with the ``mean`` and
    ``stderr`` metrics; ``name``: the score's name in the log (default: the evaluator's ``feedback_key``)."""
    if target not in ("label", "reference"):
        raise ValueError(f"target={target!r}: the sample's target is the human 'label' or a 'reference' answer")
    panel = protocol if isinstance(protocol, PanelEvaluator) else create_panel_evaluator(protocol, **evaluator_options)
    target_is = target

    @scorer(metrics=[mean(), stderr()], name=name or panel.feedback_key)
    def jurygraph_panel() -> Scorer:
        async def score(state: TaskState, target: Target) -> Score:
            inputs, outputs, reference = _evaluation(panel.task, state, target.text, target_is)
            return as_score(await panel.acall(inputs=inputs, outputs=outputs, reference_outputs=reference))

        return score

    return jurygraph_panel()


def _evaluation(task: TaskKind, state: TaskState, target_text: str,
                target: str) -> tuple[dict[str, Any], Any, Any]:
    """(inputs, outputs, reference_outputs) of a sample, as the evaluator reads them."""
    # the sample's own texts for the judges (a Topical-Chat fact as "context"...) from its metadata
    texts = {key: value for key, value in (state.metadata or {}).items() if key in TEXT_FIELDS and value}
    if task is TaskKind.PAIRWISE:
        return {"question": state.input_text, **texts}, \
            {"response_1": state.output.completion, "response_2": target_text}, None
    inputs = {"source": state.input_text, **texts}
    if target == "reference":
        return {**inputs, "reference": target_text or None}, state.output.completion, None
    return inputs, state.output.completion, target_text or None


def as_score(results: list[dict[str, Any]]) -> Score:
    """The panel's results as one inspect ``Score`` (see the module's doc)."""
    panel, *members = results
    meta = panel["metadata"]
    metadata = {**meta, "members": {m["metadata"]["member"]: {k: v for k, v in m["metadata"].items()
                                                              if k not in ("member", "item_id")} | {"value": m["score"]}
                                    for m in members}}
    verdict = meta.get("verdict")
    if panel["score"] is None:
        return Score.unscored(reason="grader_failed", explanation=panel["comment"], metadata=metadata)
    answer = format_score(verdict) if isinstance(verdict, float) else None if verdict is None else str(verdict)
    return Score(value=panel["score"], answer=answer, explanation=panel["comment"], metadata=metadata)
