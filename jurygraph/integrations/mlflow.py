"""A jurygraph panel as an MLflow scorer, for ``mlflow.genai.evaluate`` (``pip install 'jurygraph[mlflow]'``).

    from jurygraph.integrations.mlflow import panel_scorer

    judge = panel_scorer("chateval", task="score", aspect="helpfulness", scale=(1, 5), default="openai:gpt-4o-mini")
    mlflow.genai.evaluate(data=rows, scorers=[judge])

The scorer takes MLflow's ``inputs``, ``outputs`` and ``expectations`` (the human label, as an evaluator's
``reference_outputs``) and returns a list of ``Feedback``: the panel's (its ``rationale`` the account of who said
what, its metadata the verdict, the doubt signals and each member's value), then one per member named
``<name>/<member>``. A missing verdict is a ``Feedback`` without a value and with an ``error`` (MLflow's own "no
score", left out of the mean), never a 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mlflow.entities import AssessmentError, AssessmentSource, AssessmentSourceType, Feedback
from mlflow.genai.scorers import scorer

from jurygraph.evaluators import PanelEvaluator, create_panel_evaluator

MISSING = "MISSING_VERDICT"


def panel_scorer(protocol: str | Any | PanelEvaluator, *, name: str | None = None, timeout: float | None = None,
                 **evaluator_options: Any) -> Any:
    """An MLflow ``@scorer`` running ``protocol``'s panel (or an existing :class:`PanelEvaluator`; otherwise
    ``evaluator_options`` are :func:`~jurygraph.evaluators.create_panel_evaluator`'s). ``name``: the feedback's
    name (default: the evaluator's ``feedback_key``); ``timeout``: MLflow's per-call limit in seconds (its default
    300; 0 for none)."""
    panel = protocol if isinstance(protocol, PanelEvaluator) else create_panel_evaluator(protocol, **evaluator_options)
    key = name or panel.feedback_key

    def judge(inputs: Any = None, outputs: Any = None, expectations: Any = None) -> list[Feedback]:
        return feedback(panel(inputs=inputs, outputs=outputs, reference_outputs=expectations), panel.protocol.name,
                        key)

    judge.__name__ = key
    return scorer(judge, name=key, timeout=timeout)


def feedback(results: list[dict[str, Any]], protocol: str, key: str) -> list[Feedback]:
    """The panel's results as MLflow ``Feedback`` (see the module's doc)."""
    panel, *members = results
    member_values = {f"member.{m['metadata']['member']}": _text(m["score"]) for m in members}
    found = [_one(panel, key, protocol, _metadata(panel["metadata"]) | member_values)]
    for member in members:
        name = member["metadata"]["member"]
        found.append(_one(member, f"{key}/{name}", f"{protocol}/{name}", _metadata(member["metadata"])))
    return found


def _one(result: Mapping[str, Any], name: str, source: str, metadata: dict[str, str]) -> Feedback:
    judge = AssessmentSource(source_type=AssessmentSourceType.LLM_JUDGE, source_id=f"jurygraph:{source}")
    if result["score"] is None:
        return Feedback(name=name, value=None, rationale=result["comment"], source=judge, metadata=metadata,
                        error=AssessmentError(error_code=MISSING, error_message=result["comment"]))
    return Feedback(name=name, value=result["score"], rationale=result["comment"], source=judge, metadata=metadata)


def _metadata(metadata: Mapping[str, Any]) -> dict[str, str]:
    """MLflow's assessment metadata is text: each value as text, the doubt signals as ``doubt.<signal>``."""
    flat: dict[str, str] = {}
    for key, value in metadata.items():
        if key == "doubt":
            flat.update({f"doubt.{signal}": _text(v) for signal, v in (value or {}).items()})
        elif value is not None:
            flat[key] = _text(value)
    return flat


def _text(value: Any) -> str:
    if value is None:
        return "missing"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)
