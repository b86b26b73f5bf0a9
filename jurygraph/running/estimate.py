"""What a run will cost, before it runs: the REAL graph of the protocol on the REAL items, with no network.

Every model call is answered at once by :class:`SyntheticReplies` (a :class:`~jurygraph.llm.calls.ReplySource`,
so the call goes through the same cache-key, parameter and usage code as a paid one): a reply in the call's
answer form, as long as its output budget (``max_tokens`` from the generation parameters, the paper's defaults
and ``--gen``), so later turns' prompts grow as they would. Input tokens are the rendered prompts counted with the
model's tokenizer (:mod:`jurygraph.llm.tokens`); requests, input and output tokens come out of the graph's own
usage accounting, per agent and model.

Loops and early stops are bounded by scripting those replies (:class:`Scenario`): ``most`` has the panel never
agree (referees alternate between the two ends of the scale) and every Critic object; ``fewest`` has the panel
agree at once and every Critic say NO ISSUE at its first review. A protocol without loops gives the same count in
both, which is then exact: the server receives exactly those requests when every reply can be read (a format
re-ask adds one; :func:`jurygraph.cli.protocols.ProtocolSetup.requests_per_item` bounds them).

A call whose model sets no ``max_tokens`` (DEBATE's agents, ReFeR's reasoning area chair) is assumed to use
``reply_tokens`` (default 512, ChatEval's cap); the estimate lists the agents it assumed it for.

Large datasets: every item up to ``sample``; beyond, an evenly spaced sample of that many, scaled to the whole
(the estimate says so).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from langgraph.graph import StateGraph
from pydantic import BaseModel, ConfigDict

from jurygraph.judging.extraction import AnswerForm
from jurygraph.judging.items import EvalItem, TaskKind
from jurygraph.judging.state import COUNTS, usage_by_model
from jurygraph.llm.calls import Answer, PendingCall, effective_params
from jurygraph.llm.models import JuryContext, ModelSpec, to_spec
from jurygraph.llm.pricing import price_of
from jurygraph.llm.tokens import TokenCounter, counter_in

DEFAULT_REPLY_TOKENS = 512
DEFAULT_SAMPLE = 200
Shown = TypeVar("Shown", int, float)

# what a synthetic reply says before its answer line: plain evaluative prose, no digits, no answer labels, no
# NO ISSUE in capitals (which would end a debate)
_FILLER = ("The first response addresses the question directly and supports each claim with accurate, relevant "
           "detail, while the second stays general and leaves out the steps a reader would need to act on it. "
           "Both are fluent and polite, but only one of them is complete, and its structure makes the argument "
           "easy to follow from the premise to the conclusion. ")
_OBJECTION = "I disagree with this assessment: it overlooks important weaknesses of the text. "


@dataclass(frozen=True)
class Scenario:
    """How the synthetic panel behaves: ``agree`` (every judge gives the same judgment, else they alternate
    between the two ends of the scale) and ``no_issue`` (every Critic says NO ISSUE, else it objects)."""

    name: str
    agree: bool
    no_issue: bool


MOST = Scenario("most", agree=False, no_issue=False)
FEWEST = Scenario("fewest", agree=True, no_issue=True)
# what the two scenarios are, for a protocol that does not word its own bounds (ProtocolSpec.bounds)
SCRIPTED_BOUNDS = ("every judge agrees and every critic says NO ISSUE at once",
                   "the judges never agree and every critic objects")


class PlannedModel(BaseChatModel):
    """Stands in for a model spec in a dry run: its label, its parameters, what its client supports (native n,
    structured output), and no client: it is never sent anything (the dry run's replies answer every call)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    jurygraph_label: str
    jurygraph_native_n: bool = False
    jurygraph_structured: bool | str = False
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None

    @property
    def _llm_type(self) -> str:
        return "jurygraph-planned"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        raise RuntimeError(f"{self.jurygraph_label}: a dry run sends no request")

    @classmethod
    def of(cls, spec: ModelSpec) -> PlannedModel:
        clients = ("openai", "google_genai")
        structured: bool | str = spec.structured if spec.structured is not None else \
            "when_asked" if spec.provider in clients else True  # the embedded model always fills a JSON schema
        return cls(jurygraph_label=spec.label, jurygraph_native_n=spec.provider == "openai",
                   jurygraph_structured=structured, temperature=spec.temperature, max_tokens=spec.max_tokens)


def planned_context(context: JuryContext, replies: SyntheticReplies, cache: Any = None) -> JuryContext:
    """The run's context with every model spec replaced by its stand-in and the synthetic replies answering:
    no key, no client, no rate gate. ``cache``: a run's LLM cache, whose answers are free (a resumed run's
    estimate counts what is left to pay); the synthetic replies are never written to it."""

    def planned(choice: Any) -> Any:
        if choice is None or isinstance(choice, BaseChatModel):
            return choice
        return PlannedModel.of(to_spec(choice))

    return dataclasses.replace(context, models={name: planned(m) for name, m in context.models.items()},
                               default=planned(context.default), cache=cache, gates=None, replies=replies,
                               on_usage=None)


class SyntheticReplies:
    """The dry run's answers: at once, in the call's answer form, at the call's output budget, scripted by a
    :class:`Scenario`. Records the budget assumed for calls without ``max_tokens``."""

    def __init__(self, scenario: Scenario, *, reply_tokens: int = DEFAULT_REPLY_TOKENS, tokenizer: str = "download",
                 counters: dict[str, TokenCounter] | None = None, lengths: Mapping[str, float] | None = None) -> None:
        # lengths: an agent's replies as long as this many tokens (what a run's own replies measured), within the
        # call's output budget; without: every reply at its budget (the bound)
        self.scenario, self.reply_tokens, self.tokenizer = scenario, reply_tokens, tokenizer
        self.lengths = lengths or {}
        self.counters = counters if counters is not None else {}
        self.assumed: set[str] = set()  # agents whose calls had no max_tokens
        self.budgets: list[int] = []  # each request's output budget per reply (n samples come in parallel)
        self.reaskable = 0  # judging calls that an unreadable reply would re-ask (one reply, an answer form)
        self._order: dict[str, int] = {}  # agents in the order they first spoke: who takes which side

    def counter(self, label: str) -> TokenCounter:
        if label not in self.counters:
            self.counters[label] = counter_in(label, self.tokenizer)
        return self.counters[label]

    def answer(self, call: PendingCall) -> Answer:
        req, counter = call.request, self.counter(call.resolved.label)
        budget = effective_params(call.model, req).get("max_tokens")
        if budget is None:
            self.assumed.add(req.agent)
            budget = self.reply_tokens
        if req.agent in self.lengths:
            budget = max(1, min(int(budget), round(self.lengths[req.agent])))
        self.budgets.append(int(budget))
        self.reaskable += int(req.form is not None and req.n == 1)
        side = self._order.setdefault(req.agent, len(self._order)) % 2
        text, parsed = self._reply(req.form, req.role, counter, int(budget), side)
        prompt = counter.messages(call.messages)
        if req.want_logprobs:  # G-Eval's probability-weighted score: a leading score and its log-probabilities
            text = counter.truncate("1 - " + _repeat(_FILLER, int(budget)), int(budget))
            logprobs = {"content": [{"token": c, "logprob": 0.0, "top_logprobs": [{"token": c, "logprob": 0.0}]}
                                    for c in text]}
            return Answer(_message(text, prompt, counter.text(text), {"logprobs": logprobs}), cache=False)
        if call.kind == "samples":
            each = counter.text(text)
            if call.resolved.native_n:  # one request: the prompt once, every sample's completion
                first = _message(text, prompt, each * req.n)
                return Answer([first, *(_message(text, 0, 0) for _ in range(req.n - 1))], cache=False)
            return Answer([_message(text, prompt, each) for _ in range(req.n)], cache=False)
        if call.kind == "structured":
            raw = parsed.model_dump_json() if parsed is not None else text
            return Answer((_message(raw, prompt, counter.text(raw)), parsed), cache=False)
        return Answer(_message(text, prompt, counter.text(text)), cache=False)

    def _reply(self, form: AnswerForm | None, role: str, counter: TokenCounter, budget: int,
               side: int) -> tuple[str, BaseModel | None]:
        """The reply text at ``budget`` tokens (answer line included) and, for a judging call, its answer."""
        if form is None:
            if role == "critic" and self.scenario.no_issue:
                return "NO ISSUE", None
            prose = _OBJECTION + _FILLER if role == "critic" else _FILLER
            return counter.truncate(_repeat(prose, budget), budget), None
        parsed = form.schema().model_validate({"evidence": "", **self._values(form, side)})
        answer_part = counter.text(form.render(parsed))
        evidence = counter.truncate(_repeat(_FILLER, budget), max(1, budget - answer_part)).strip()
        parsed = parsed.model_copy(update={"evidence": evidence})
        return form.render(parsed), parsed

    def _values(self, form: AnswerForm, side: int) -> dict[str, Any]:
        """The judgment's values: one side for everyone when the panel agrees, alternate sides when not."""
        side = 0 if self.scenario.agree else side
        if form.kind is TaskKind.PAIRWISE:
            low, high = (form.scale.low, form.scale.high) if form.scale else (1.0, 10.0)
            first, second = (high, low) if side == 0 else (low, high)
            return {"score_assistant_1": first, "score_assistant_2": second}
        if form.kind is TaskKind.SCORE:
            low, high = (form.scale.low, form.scale.high) if form.scale else (1.0, 5.0)
            return {"score": high if side == 0 else low}
        letters = list(form.options or {}) or ["1", "2"]
        return {"answer": letters[min(side, len(letters) - 1)]}


def _repeat(text: str, tokens: int) -> str:
    """Enough of ``text`` repeated to hold ``tokens`` tokens in any tokenizer (a token is at least a byte)."""
    return text * (1 + tokens * 8 // len(text))


def _message(text: str, input_tokens: int, output_tokens: int, metadata: dict[str, Any] | None = None) -> AIMessage:
    return AIMessage(text, usage_metadata={"input_tokens": input_tokens, "output_tokens": output_tokens,
                                           "total_tokens": input_tokens + output_tokens},
                     response_metadata=metadata or {})


# --- the estimate over a dataset ---


@dataclass
class ModelEstimate:
    """One model's share of a run: items it serves, requests and tokens under each scenario, what counted them."""

    label: str
    tokenizer: str = ""
    exact_tokens: bool = False
    items: int = 0
    most: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0.0))
    fewest: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COUNTS, 0.0))
    price: Mapping[str, float] | None = None


@dataclass
class Estimate:
    """The estimate of a run: totals per model under the ``most`` and ``fewest`` scenarios, scaled from the
    rendered items to all of them. ``bounded``: the protocol may stop early, so the two differ."""

    items: int
    rendered: int
    models: dict[str, ModelEstimate]
    bounded: bool
    assumed_reply_tokens: dict[str, int]
    failed: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    # the most one rendered item costs (its longest loop): requests, input/output tokens, USD at list and batch
    # prices (what the budget reserves for an item in flight)
    item_most: dict[str, float] = field(default_factory=dict)
    reply_tokens: float = 0.0  # a request's mean output budget per reply (what its latency depends on)

    @property
    def scaled(self) -> bool:
        return self.rendered < self.items

    def total(self, key: str, scenario: str = "most") -> int:
        return sum(round(getattr(m, scenario)[key]) for m in self.models.values())

    def cost(self, scenario: str = "most", *, batch: bool = False) -> float | None:
        """USD under a scenario (at batch prices with ``batch``); None when no model has a price."""
        prices = [(m, m.price) for m in self.models.values() if m.price is not None]
        if not prices:
            return None
        return round(sum(_priced(getattr(m, scenario), p, batch=batch) for m, p in prices) / 1e6, 6)

    @property
    def exact_tokens(self) -> bool:
        return all(m.exact_tokens for m in self.models.values())

    def per_item(self, key: str = "requests", scenario: str = "most") -> float:
        return self.total(key, scenario) / self.items if self.items else 0.0


def estimate(graph: Any, items: Iterable[EvalItem], *, context: JuryContext, total: int | None = None,
             prices: Mapping[str, Any] | None = None, sample: int | None = DEFAULT_SAMPLE, bounded: bool = True,
             reply_tokens: int = DEFAULT_REPLY_TOKENS, tokenizer: str = "download", cache: Any = None,
             lengths: Mapping[str, float] | None = None, most_graph: Any = None) -> Estimate:
    """Render ``graph`` (uncompiled or compiled) on the items with synthetic replies and add up what each model
    would be sent. ``total``: the number of items when ``items`` has no length (a stream); ``sample``: render at
    most this many, evenly spaced, and scale (None: all); ``bounded``: also run the ``fewest`` scenario (a
    protocol that may stop early); ``tokenizer``: one of :data:`~jurygraph.llm.tokens.TOKENIZER_MODES` (the dry
    run fetches a missing tiktoken encoding, the line before a run loads none); ``cache``: a run's LLM cache
    (what it answers costs nothing); ``lengths``: each agent's replies as long as a run measured them
    (:func:`reply_lengths`), for the expected figure rather than the bound; ``most_graph``: what the ``most``
    scenario renders instead of ``graph`` (the protocol built with its spec's ``most_values``)."""
    started = time.monotonic()
    count = total if total is not None else len(items)  # type: ignore[arg-type]
    chosen = list(_spaced(items, count, sample))
    app = graph.compile() if isinstance(graph, StateGraph) else graph
    apps = {MOST.name: app if most_graph is None else
            most_graph.compile() if isinstance(most_graph, StateGraph) else most_graph, FEWEST.name: app}
    counters: dict[str, TokenCounter] = {}
    scenarios = (MOST, FEWEST) if bounded else (MOST,)
    sources = {s.name: SyntheticReplies(s, reply_tokens=reply_tokens, tokenizer=tokenizer, counters=counters,
                                        lengths=lengths) for s in scenarios}
    # each rendered item's usage per model, by scenario
    per_item: dict[str, list[dict[str, dict[str, int]]]] = {s.name: [] for s in scenarios}
    # a scenario's context is the same for every item (nothing writes to it): built once, at the first item, where a
    # model spec it cannot read fails that item as before
    contexts: dict[str, JuryContext] = {}
    failed: dict[str, str] = {}
    for item in chosen:
        try:
            for scenario in scenarios:
                if scenario.name not in contexts:
                    contexts[scenario.name] = planned_context(context, sources[scenario.name], cache)
                state = apps[scenario.name].invoke({"item": item.model_dump(mode="json", exclude_none=True)},
                                                   context=contexts[scenario.name])
                per_item[scenario.name].append(usage_by_model(state.get("usage") or {}))
        except Exception as err:  # an item the protocol cannot judge: said, not guessed
            failed[item.id] = f"{type(err).__name__}: {err}"
    rendered = len(chosen) - len(failed)
    scale = count / rendered if rendered else 0.0
    models: dict[str, ModelEstimate] = {}
    for scenario in scenarios:
        for by_model in per_item[scenario.name]:
            for label, counts in by_model.items():
                model = models.setdefault(label, ModelEstimate(label, price=_price(label, prices)))
                bucket = getattr(model, scenario.name)
                for key in COUNTS:
                    bucket[key] += counts.get(key, 0) * scale
    for label, model in models.items():
        counter = counters.get(label) or counter_in(label, tokenizer)
        model.tokenizer, model.exact_tokens = counter.method, counter.exact
        model.items = sum(1 for by_model in per_item[MOST.name] if label in by_model)
        model.items = round(model.items * scale)
        if not bounded:
            model.fewest = dict(model.most)
    assumed = {agent: reply_tokens for source in sources.values() for agent in sorted(source.assumed)}
    budgets = sources[MOST.name].budgets
    return Estimate(count, rendered, models, bounded and _differs(models), assumed, failed,
                    time.monotonic() - started, _item_most(per_item[MOST.name], models),
                    sum(budgets) / len(budgets) if budgets else 0.0)


def most_requests(graph: Any, item: EvalItem, context: JuryContext | None = None) -> int:
    """The most requests ``graph`` can send for ``item``, counted from the graph itself: the ``most`` scenario (the
    panel never agrees, every critic objects) renders the item, and every judging call is re-asked as often as
    the context allows (:attr:`JuryContext.reasks`). ``context``: the run's models (a native n sends n samples in
    one request); without one, a model whose n samples are n requests. For a protocol that declares no plan."""
    context = context if context is not None and (context.default is not None or context.models) else \
        JuryContext(default=ModelSpec(provider="google_genai", model="plan"))
    replies = SyntheticReplies(MOST, tokenizer="approximate")
    app = graph.compile() if isinstance(graph, StateGraph) else graph
    state = app.invoke({"item": item.model_dump(mode="json", exclude_none=True)},
                       context=planned_context(context, replies))
    requests = sum(int(counts.get("requests", 0)) for counts in usage_by_model(state.get("usage") or {}).values())
    return requests + replies.reaskable * context.reasks


def _item_most(per_item: list[dict[str, dict[str, int]]], models: Mapping[str, ModelEstimate]) -> dict[str, float]:
    """The most one item costs: each count and USD figure's maximum over the items' usage per model."""
    most: dict[str, float] = {}
    for by_model in per_item:
        costs = {key: 0.0 for key in (*COUNTS, "cost_usd", "cost_usd_batch")}
        for label, counts in by_model.items():
            for key in COUNTS:
                costs[key] += counts.get(key, 0)
            price = models[label].price if label in models else None
            if price is not None:
                for batch, key in ((False, "cost_usd"), (True, "cost_usd_batch")):
                    costs[key] += _priced(counts, price, batch=batch) / 1e6
        most = {key: max(value, most.get(key, 0.0)) for key, value in costs.items()}
    return most


def _priced(counts: Mapping[str, float], price: Mapping[str, float], *, batch: bool) -> float:
    """What the tokens in ``counts`` cost at ``price`` (USD per million tokens; its batch prices with ``batch``), in
    millionths of a USD: the caller divides by 1e6 (a sum once)."""
    prefix = "batch_" if batch else ""
    return (counts.get("input_tokens", 0) * price[f"{prefix}input"]
            + counts.get("output_tokens", 0) * price[f"{prefix}output"])


def _price(label: str, prices: Mapping[str, Any] | None) -> Mapping[str, float] | None:
    """A model's prices; its batch prices are its list prices unless jurygraph batches its calls (OpenAI's Batch
    API only: a Gemini call of a --batch run is sent online)."""
    price = price_of(label, prices)
    if price is None or label.startswith("openai:"):
        return price
    return {**price, "batch_input": price["input"], "batch_output": price["output"]}


def _differs(models: Mapping[str, ModelEstimate]) -> bool:
    return any(round(m.most[key]) != round(m.fewest[key]) for m in models.values() for key in COUNTS)


def _spaced(items: Iterable[EvalItem], count: int, sample: int | None) -> Iterable[EvalItem]:
    """Every item, or ``sample`` of them evenly spaced over ``count`` (a stream is read once)."""
    if sample is None or count <= sample:
        yield from items
        return
    picks = {math.floor(i * count / sample) for i in range(sample)}
    for index, item in enumerate(items):
        if index in picks:
            yield item


@dataclass
class ReplyLengths:
    """How long a run's replies were: each agent's mean output tokens per reply, over how many replies of how many
    finished items; ``source`` says whose (``"pilot"``: ``--pilot N``; ``"run"``: the run's own, on ``--resume``)."""

    by_agent: dict[str, float]
    replies: int
    items: int
    source: str

    def label(self) -> str:
        whose = f"the pilot's {self.items} items" if self.source == "pilot" else \
            f"the run's own {self.items} finished items"
        return f"reply lengths from {whose} ({self.replies:,} replies)"


def reply_lengths(out_dir: Path, source: str = "run") -> ReplyLengths | None:
    """Each agent's mean reply length in a run directory's finished items (their usage: output tokens per reply; n
    samples from one OpenAI request are n replies), or None when no item is finished."""
    from jurygraph.running.rundir import iter_results

    tokens: dict[str, int] = {}
    replies: dict[str, int] = {}
    items = 0
    for record in iter_results(out_dir):
        if record.get("status") != "ok":
            continue
        items += 1
        for agent, entry in (record.get("usage") or {}).items():
            requests = int(entry.get("requests", 0))
            if not requests:
                continue
            n = int((entry.get("params") or {}).get("n") or 1)
            native = str(entry.get("model", "")).startswith("openai:")
            replies[agent] = replies.get(agent, 0) + requests * (n if native else 1)
            tokens[agent] = tokens.get(agent, 0) + int(entry.get("output_tokens", 0))
    if not replies:
        return None
    return ReplyLengths({agent: tokens[agent] / count for agent, count in replies.items()}, sum(replies.values()),
                        items, source)


def wall_time(requests: float, reply_tokens: float, *, concurrency: int,
              limits: Iterable[tuple[str, float, float | None, int | None]] = ()) -> tuple[float, str]:
    """Seconds a run needs at least, and what binds it: the items' concurrency (each item's calls one after
    another), or a provider's rate limit (its requests / rps) or in-flight limit (its requests x latency / in
    flight); ``limits``: (provider, its requests, rps, in flight). A request's latency is assumed to be 0.5 s +
    its reply's tokens at 50 a second (n samples come in parallel)."""
    latency = 0.5 + reply_tokens / 50.0
    bounds = [(requests * latency / concurrency, f"--concurrency {concurrency} items, ~{latency:.1f} s a request "
                                                  "(assumed: 0.5 s + 50 output tokens/s), an item's calls in turn")]
    for provider, count, rps, in_flight in limits:
        if rps:
            bounds.append((count / rps, f"--rps {rps:g} for {provider}"))
        if in_flight:
            bounds.append((count * latency / in_flight, f"--in-flight {in_flight} for {provider}, ~{latency:.1f} s "
                                                        "a request"))
    return max(bounds)


def _shape(low: Shown, high: Shown) -> Shown | dict[str, Shown]:
    """The JSON shape of every estimated total: the value when the bounds agree, else {"min": .., "max": ..}."""
    return high if low == high else {"min": low, "max": high}


def requests_shape(low: float, high: float) -> int | dict[str, int]:
    """A count's bounds rounded to integers, in :func:`_shape`."""
    return _shape(round(low), round(high))


def per_item_shape(low: float, high: float) -> float | dict[str, float]:
    """Requests per item, a mean: an integer when every item costs the same, else to two decimals (a trajectory
    match that decides some items for nothing makes the others' cost an average, not a round number)."""
    def mean(x: float) -> float:
        return round(x) if abs(x - round(x)) < 1e-9 else round(x, 2)

    fewest, most = mean(low), mean(high)
    return most if fewest == most else {"min": fewest, "max": most}


def by_model_json(estimate: Estimate) -> dict[str, dict[str, Any]]:
    out = {}
    for label, model in estimate.models.items():
        entry: dict[str, Any] = {"items": model.items}
        per_item = estimate.items or 1
        entry["requests_per_item"] = per_item_shape(model.fewest["requests"] / per_item,
                                                    model.most["requests"] / per_item)
        for key in COUNTS:
            entry[key] = requests_shape(model.fewest[key], model.most[key])
        entry["cost_usd"] = _cost_shape(model, batch=False)
        entry["cost_usd_batch"] = _cost_shape(model, batch=True)
        entry["tokenizer"] = model.tokenizer
        entry["approximate"] = not model.exact_tokens
        out[label] = entry
    return out


def _cost_shape(model: ModelEstimate, *, batch: bool) -> float | dict[str, float] | None:
    if model.price is None:
        return None
    low, high = (_priced(getattr(model, s), model.price, batch=batch) / 1e6 for s in ("fewest", "most"))
    return _shape(round(low, 6), round(high, 6))


def costs_shape(estimate: Estimate, *, batch: bool = False) -> float | dict[str, float] | None:
    low, high = estimate.cost("fewest", batch=batch), estimate.cost("most", batch=batch)
    if low is None or high is None:
        return None
    return _shape(low, high)
