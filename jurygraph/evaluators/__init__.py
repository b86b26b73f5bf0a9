"""Any jurygraph protocol as a judge other harnesses take as their own (docs/INTEGRATIONS.md).

:func:`create_panel_evaluator` returns an openevals-shaped evaluator (sync, with an async twin ``acall``) for
LangSmith's ``evaluate()``/``aevaluate()`` and its pytest integration, with a comparative evaluator and a summary
evaluator (the panel diagnostics); :mod:`jurygraph.integrations` adapts it to MLflow and inspect_ai. With
``run_dir=`` every evaluation is an item of a jurygraph run directory.

This package is an interface beside the command line: it imports the core layers, never ``jurygraph.cli``.
"""

from jurygraph.evaluators.evaluator import PanelEvaluator, create_panel_evaluator
from jurygraph.evaluators.items import EvaluationInputError
from jurygraph.evaluators.session import PanelFailed
from jurygraph.llm.limits import ProviderLimit

__all__ = ["EvaluationInputError", "PanelEvaluator", "PanelFailed", "ProviderLimit", "create_panel_evaluator"]
