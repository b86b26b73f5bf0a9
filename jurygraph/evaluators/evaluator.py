"""A jurygraph protocol as an openevals-shaped evaluator: :func:`create_panel_evaluator`.

    panel = create_panel_evaluator("chateval", task="score", aspect="helpfulness", scale=(1, 5),
                                   default="openai:gpt-4o-mini", run_dir="runs/panel")
    panel(inputs={"question": ...}, outputs={"response": ...}, reference_outputs={"score": 4})
    await panel.acall(inputs=..., outputs=..., reference_outputs=...)

The call returns the panel's result and one per member (:mod:`jurygraph.evaluators.results`); LangSmith's
``evaluate()``/``aevaluate()`` take ``panel`` and ``panel.acall`` as evaluators (they bind ``inputs``, ``outputs`` and
``reference_outputs`` by name), ``panel.comparative`` as a comparative experiment's evaluator and ``panel.summary`` as
a summary evaluator. Inside a ``@pytest.mark.langsmith`` test the results are also logged as the test's feedback.
The adapters of :mod:`jurygraph.integrations` wrap the same object for MLflow and inspect_ai.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from jurygraph.evaluators.items import harness_item, response_text
from jurygraph.evaluators.protocol import PanelProtocol, ProtocolLike, resolve_protocol
from jurygraph.evaluators.records import EvaluatorRun, evaluator_manifest
from jurygraph.evaluators.results import panel_results
from jurygraph.evaluators.session import PanelSession
from jurygraph.judging.aspects import get_aspect
from jurygraph.judging.items import EvalItem, Scale, TaskKind
from jurygraph.llm.limits import ProviderGates, ProviderLimit
from jurygraph.llm.models import JuryContext, ModelLike, ModelSpec, model_label
from jurygraph.running.checkpoints import KeepCheckpoints

Results = list[dict[str, Any]]


class PanelEvaluator:
    """A protocol's panel as an evaluator (see the module's doc). Made by :func:`create_panel_evaluator`."""

    def __init__(self, protocol: PanelProtocol, session: PanelSession, *, task: TaskKind, aspect: str | None,
                 scale: Scale | None, dataset: str | None, feedback_key: str, normalize: bool,
                 resamples: int = 1000) -> None:
        self.protocol, self.task, self.aspect, self.scale = protocol, task, aspect, scale
        self.dataset, self.feedback_key, self.normalize, self.resamples = dataset, feedback_key, normalize, resamples
        self._session = session
        self.__name__ = feedback_key  # what LangSmith names the evaluator's run after
        # the run directory is released (its manifest ended) when the evaluator is closed, collected or at exit
        self._finalizer = weakref.finalize(self, session.close)

    @property
    def run_dir(self) -> Path | None:
        return self._session.run.out if self._session.run is not None else None

    # --- openevals / LangSmith ----------------------------------------------------------------------------

    def __call__(self, *, inputs: Any = None, outputs: Any = None, reference_outputs: Any = None,
                 **kwargs: Any) -> Results:
        """Judge one evaluation; the panel's result, then one per member."""
        item = self.item(inputs, outputs, reference_outputs)
        with _langsmith_test_feedback(self.feedback_key) as log:
            results = self.results(self._session.judge(item))
            log(results)
        return results

    async def acall(self, *, inputs: Any = None, outputs: Any = None, reference_outputs: Any = None,
                    **kwargs: Any) -> Results:
        """The async twin of ``__call__`` (for ``aevaluate()``, async tests, inspect_ai)."""
        item = self.item(inputs, outputs, reference_outputs)
        with _langsmith_test_feedback(self.feedback_key) as log:
            results = self.results(await self._session.ajudge(item))
            log(results)
        return results

    def comparative(self, *, runs: Sequence[Any], inputs: Any = None, reference_outputs: Any = None) -> dict[str, Any]:
        """A LangSmith comparative experiment's evaluator (``evaluate((experiment_1, experiment_2),
        evaluators=[panel.comparative])``): the two runs' outputs as the pairwise item's responses (in the order
        given), ``scores`` 1.0 for the winner's run and 0.0 for the other's, 0.5 each on a tie, None each when
        the panel gave no verdict. The experiments' human preference, if any, is not read (runs come in any
        order)."""
        if self.task is not TaskKind.PAIRWISE:
            raise ValueError("comparative evaluation needs a pairwise panel: create_panel_evaluator(..., "
                             "task='pairwise')")
        if len(runs) != 2:
            raise ValueError(f"a pairwise panel compares two runs; got {len(runs)}")
        outputs = {"response_1": response_text(runs[0].outputs or {}, "runs[0].outputs"),
                   "response_2": response_text(runs[1].outputs or {}, "runs[1].outputs")}
        panel, *_ = self(inputs=inputs, outputs=outputs)
        score = panel["score"]
        return {"key": self.feedback_key, "scores": {runs[0].id: score, runs[1].id: None if score is None else
                                                     1.0 - score}, "comment": panel["comment"]}

    def summary(self, inputs: list[Any], outputs: list[Any], reference_outputs: list[Any]) -> dict[str, Any]:
        """A LangSmith summary evaluator: the panel diagnostics over the experiment's rows (each row's record:
        from this evaluator's run, or judged now), against the reference labels (:mod:`.summary`)."""
        from jurygraph.evaluators.summary import summary_results  # numpy and scipy: loaded when first needed

        records = self._session.judge_all([self.item(i, o, r) for i, o, r in zip(inputs, outputs, reference_outputs,
                                                                                 strict=True)])
        return {"results": summary_results(records, key=self.feedback_key, protocol=self.protocol.name,
                                           panel=self.protocol.spec.panel, resamples=self.resamples)}

    # --- the steps ---------------------------------------------------------------------------------------

    def item(self, inputs: Any, outputs: Any, reference_outputs: Any) -> EvalItem:
        """The jurygraph item of one evaluation (EvaluationInputError naming the argument at fault)."""
        return harness_item(self.task, inputs, outputs, reference_outputs, aspect=self.aspect, scale=self.scale,
                            dataset=self.dataset)

    def results(self, record: Mapping[str, Any]) -> Results:
        """An item's record (its results line) as the panel's result and one per member."""
        run_dir = str(self.run_dir) if self.run_dir is not None else None
        results = panel_results(record, key=self.feedback_key, task=self.task, scale=self.scale,
                                normalize=self.normalize, protocol=self.protocol.name, panel=self.protocol.spec.panel,
                                run_dir=run_dir)
        _note_in_trace(results[0]["metadata"])
        return results

    # --- lifetime -----------------------------------------------------------------------------------------

    def close(self) -> None:
        """Finish the run directory (its manifest's totals) and release it; a later call opens it again."""
        self._session.close()

    def __enter__(self) -> PanelEvaluator:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<PanelEvaluator {self.feedback_key}: {self.protocol.name}, {self.task.value}>"


def create_panel_evaluator(
    protocol: ProtocolLike,
    *,
    task: Literal["score", "pairwise"] | TaskKind = "score",
    aspect: str | None = None,
    scale: tuple[float, float] | Scale | None = None,
    models: Mapping[str, ModelLike | Mapping[str, Any]] | None = None,
    default: ModelLike | Mapping[str, Any] | None = None,
    run_dir: str | Path | None = None,
    feedback_key: str | None = None,
    normalize: bool = True,
    dataset: str | None = None,
    context: JuryContext | None = None,
    limits: Mapping[str, ProviderLimit] | None = None,
    keep_checkpoints: KeepCheckpoints = "final",
    prices: Mapping[str, Any] | None = None,
    resamples: int = 1000,
    **protocol_options: Any,
) -> PanelEvaluator:
    """Any protocol as an evaluator for LangSmith, pytest, MLflow and inspect_ai.

    ``protocol``: as ``jurygraph eval --protocol`` takes it: a built-in name (``"chateval"``, ``"debate"``,
    ``"refer"``...), an installed package's (entry point ``jurygraph.protocols``), ``"module:factory"``; or a
    :class:`~jurygraph.graphs.spec.ProtocolSpec` or a factory. ``protocol_options``: its spec's options by the names
    ``--param`` takes (``agents=3``, ``turns=3``, ``critic="plain"``, ReFeR's ``peers="openai:a,openai:b"``...),
    typed and checked as the spec says; on a pairwise task the calibration options too: ChatEval, the single agent
    and the ensemble judge both answer orders by default (decided as ``jurygraph eval`` decides it),
    ``no_calibrate=True`` keeps one, ``calibrate="mec"`` asks for another. ``task``: ``"score"`` (one response on
    ``scale``, with ``aspect``) or ``"pairwise"`` (two responses). ``models``/``default``: the agents' models (specs
    such as ``"openai:gpt-4o-mini"``, or chat models), as in :class:`~jurygraph.llm.models.JuryContext`, over those
    the protocol's options name; ``context`` a whole context instead (``gen``, ``structured_output``...), ``limits``
    the provider gates every call shares (``{"openai": ProviderLimit(requests_per_second=5, max_in_flight=8)}``).
    ``feedback_key``: the results' key (default: the protocol's name); ``normalize``: a score item's score in 0-1
    (default) or on the scale. ``dataset``: a built-in benchmark whose templates and aspects the items use
    (``"summeval"``, ``"topical-chat"``). ``run_dir``: every evaluation is an item of this run directory (checkpoints,
    call cache, the spend ledger; ``jurygraph show``/``report``/``metaeval`` read it), and a repeated evaluation is
    answered from it; ``prices``: what the models cost there, as ``--prices`` gives them. ``resamples``: the
    bootstrap resamples of the summary evaluator's confidence intervals.
    """
    kind = TaskKind(task)
    if kind not in (TaskKind.SCORE, TaskKind.PAIRWISE):
        raise ValueError(f"task={kind.value!r}: a panel evaluator scores ('score') or compares two responses "
                         "('pairwise')")
    scale_ = _scale(kind, scale, dataset, aspect)
    resolved = resolve_protocol(protocol, kind, protocol_options)
    jury = _context(context, {**resolved.models, **(models or {})} if resolved.models else models, default, limits)
    key = feedback_key or resolved.name.rpartition(":")[2]
    run = None
    if run_dir is not None:
        manifest = evaluator_manifest(resolved.name, resolved.params, _model_labels(jury), task=kind.value,
                                      aspect=aspect, dataset=dataset,
                                      scale=[scale_.low, scale_.high] if scale_ else None)
        run = EvaluatorRun(Path(run_dir), manifest, keep_checkpoints, prices)
    session = PanelSession(resolved, jury, run)
    return PanelEvaluator(resolved, session, task=kind, aspect=aspect, scale=scale_, dataset=dataset,
                          feedback_key=key, normalize=normalize, resamples=resamples)


def _scale(task: TaskKind, scale: tuple[float, float] | Scale | None, dataset: str | None,
           aspect: str | None) -> Scale | None:
    if task is not TaskKind.SCORE:
        if scale is not None:
            raise ValueError("scale= is for task='score'; a pairwise panel's scores are its template's")
        return None
    if isinstance(scale, Scale):
        return scale
    if scale is not None:
        low, high = scale
        return Scale(low=low, high=high)
    built_in = get_aspect(dataset, aspect) if dataset and aspect else None
    if built_in is None:
        raise ValueError("a score panel needs its scale: scale=(1, 5) (or dataset= and aspect= of a built-in "
                         "benchmark, e.g. dataset='summeval', aspect='coherence')")
    return built_in.scale


def _context(context: JuryContext | None, models: Mapping[str, Any] | None, default: Any,
             limits: Mapping[str, ProviderLimit] | None) -> JuryContext:
    jury = context or JuryContext()
    changes: dict[str, Any] = {}
    if models is not None:
        changes["models"] = {**jury.models, **models}
    if default is not None:
        changes["default"] = default
    if limits is not None:
        changes["gates"] = ProviderGates(limits)
    if not changes:
        return jury
    from dataclasses import replace

    return replace(jury, **changes)


def _model_labels(context: JuryContext) -> dict[str, str]:
    def label(model: Any) -> str:
        if isinstance(model, ModelSpec):
            return model.label
        if isinstance(model, str):
            with contextlib.suppress(ValueError):
                return ModelSpec.parse(model).label
            return model
        if isinstance(model, Mapping):
            return str(model.get("spec") or model.get("model") or model)
        return model_label(model)

    labels = {name: label(model) for name, model in context.models.items()}
    if context.default is not None:
        labels["default"] = label(context.default)
    return labels


@contextlib.contextmanager
def _langsmith_test_feedback(key: str) -> Iterator[Callable[[Results], None]]:
    """Inside a ``@pytest.mark.langsmith`` test: the panel's work traced as the test's feedback run, and each
    result logged as the test's feedback (LangSmith's pytest integration); elsewhere nothing."""
    try:
        from langsmith import testing
        from langsmith.testing._internal import _TEST_CASE
    except ImportError:
        yield lambda results: None
        return
    if _TEST_CASE.get() is None:
        yield lambda results: None
        return

    def log(results: Results) -> None:
        for result in results:
            testing.log_feedback(key=result["key"], score=result["score"], value=result.get("value"),
                                 comment=result["comment"])

    with testing.trace_feedback(name=key):
        yield log


def _note_in_trace(metadata: Mapping[str, Any]) -> None:
    """The verdict's metadata (doubt signals, item id, run directory) on the evaluator's LangSmith run, when one
    is being traced: where a harness's trace shows why the panel was unsure."""
    from langsmith.run_helpers import get_current_run_tree

    run = get_current_run_tree()
    if run is not None:
        run.metadata["jurygraph"] = dict(metadata)

