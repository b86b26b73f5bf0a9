"""Thin adapters that hand a jurygraph panel to other evaluation harnesses, each an optional extra with the
harness itself (docs/INTEGRATIONS.md):

- :mod:`jurygraph.integrations.mlflow` (``pip install 'jurygraph[mlflow]'``): an MLflow ``@scorer`` returning
  ``Feedback`` for ``mlflow.genai.evaluate``;
- :mod:`jurygraph.integrations.inspect` (``pip install 'jurygraph[inspect]'``): an inspect_ai ``@scorer`` returning
  ``Score``.

LangSmith (``evaluate()``, ``aevaluate()``, pytest) takes :func:`jurygraph.evaluators.create_panel_evaluator`'s
evaluator as it is. Each module imports its harness when it is imported, never before.
"""
