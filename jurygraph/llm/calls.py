"""Every model call of every agent goes through here, once: model lookup, cache, n samples, structured
output, the tolerant parser, the bounded re-ask, and usage accounting.

A node's logic is written once as a generator that *yields* :class:`ModelRequest` objects (or a list of
them, to be sent concurrently) and receives :class:`ModelReply` objects back, then returns its state
update. :func:`agent_node` turns such a generator into a LangGraph node with both a sync and an async
implementation, so graphs work with ``invoke`` in a notebook and with ``ainvoke`` in the runner.

Two hooks on the runtime context serve the cost features (issue 20). ``JuryContext.replies``, a
:class:`ReplySource`, answers the calls the cache does not hold instead of the provider: the dry run's synthetic
replies, or batch mode's replies from a provider batch (a call still to be batched stops its item's graph with
LangGraph's ``interrupt``). ``JuryContext.on_usage`` hears every paid call's usage as it is paid, before its answer
is cached or read (the runner records it in the run's spend ledger there, so a call the run used is a call on
record), with the call's HTTP attempts (retries included) and cache key; and a failed call's attempts (no request
paid).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
import warnings
from collections.abc import Awaitable, Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from langchain_core.callbacks import BaseCallbackManager
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.errors import GraphBubbleUp
from langgraph.runtime import get_runtime

from jurygraph.judging.extraction import AnswerForm, UnreadableReply
from jurygraph.judging.judgments import Judgment
from jurygraph.judging.state import BATCH_COUNTS, COUNTS
from jurygraph.llm.models import JuryContext, MissingAPIKey, ResolvedModel, call_attempts
from jurygraph.llm.redact import redact_text

REASK = "Your reply could not be read ({reason}). Answer again, and output with the following format strictly:\n{form}"


@dataclass
class ModelRequest:
    """One agent's call: the messages, and what to read from the reply (``form``) if a judgment is due.

    ``n`` > 1 asks for n samples (one request where the provider has a native ``n``); samples are not
    re-asked, an unreadable sample is a missing judgment. ``params`` override call parameters such as
    ``temperature``.
    """

    agent: str
    role: str
    messages: list[BaseMessage]
    form: AnswerForm | None = None
    n: int = 1
    params: dict[str, Any] = field(default_factory=dict)
    want_logprobs: bool = False
    sample_index: int = 0  # tells apart repeated identical requests (e.g. k sampled explanations)
    reasks: int | None = None  # re-asks with the format reminder when unreadable; None: the run's (JuryContext.reasks)
    # parameters the user asked for by name (--gen): a model without them is an error; a protocol's paper
    # default that the model class has no field for (a custom chat model without top_p) is not sent
    required_params: frozenset[str] = frozenset()


@dataclass
class ModelReply:
    """What came back: the agent's message (text form), its judgment when a form was given, and every sample."""

    message: AIMessage
    judgment: Judgment | None = None
    samples: list[AIMessage] = field(default_factory=list)
    sample_judgments: list[Judgment] = field(default_factory=list)
    model: str = ""


@dataclass(frozen=True)
class PendingCall:
    """A call the cache does not answer, as a :class:`ReplySource` sees it."""

    key: str | None  # its LLM cache key (None without a cache)
    kind: str  # "text", "structured" or "samples"
    messages: Sequence[BaseMessage]
    request: ModelRequest
    resolved: ResolvedModel
    model: Any  # the chat model bound with the request's parameters (what would be sent)


@dataclass(frozen=True)
class Answer:
    """A reply source's answer: what the provider call would have returned (an AIMessage, ``(raw, parsed)`` for
    a structured call, the list of samples), whether it was paid at batch prices, whether this call pays for it
    (identical calls batched as one line are paid by the first that reads it), and whether it may be cached (a
    provider's reply is; the dry run's synthetic one never)."""

    out: Any
    batch: bool = False
    paid: bool = True
    cache: bool = True


class ReplySource(Protocol):
    """Answers a call in place of the provider, or returns None to let it go to the provider."""

    def answer(self, call: PendingCall) -> Answer | None: ...


NodeBody = Callable[[dict[str, Any]], Generator[Any, Any, dict[str, Any]]]


def agent_node(body: NodeBody, name: str, *,
               on_failure: Callable[[dict[str, Any], Exception], dict[str, Any]] | None = None) -> RunnableLambda:
    """A LangGraph node (sync + async) from a generator body; model usage is added to the update.
    ``on_failure(state, error)``, if given, is the update when the body or a model call raises (it may
    re-raise: e.g. ReFeR records a failing peer as a missing judgment and goes on)."""

    def run_sync(state: dict[str, Any]) -> dict[str, Any]:
        try:
            return _drive_sync(body(state), current_context())
        except GraphBubbleUp:
            raise  # an interrupt (a call waiting for its batch) is not a failure
        except Exception as err:
            if on_failure is None:
                raise
            return on_failure(state, err)

    async def run_async(state: dict[str, Any]) -> dict[str, Any]:
        try:
            return await _drive_async(body(state), current_context())
        except GraphBubbleUp:
            raise
        except Exception as err:
            if on_failure is None:
                raise
            return on_failure(state, err)

    return GraphNode(run_sync, afunc=run_async, name=name)


class GraphNode(RunnableLambda):
    """A graph node's ``RunnableLambda`` (a function of the state alone) that, when no callback handler is there to
    hear it (nothing traces the run), calls its function at once: LangGraph has already opened the node's own run
    and set its config as the context, and a ``RunnableLambda`` would open a second run inside it (a callback
    manager, two signature inspections of the function, a child config) for no one, ~0.2 ms a node at zero latency
    (benchmarks/README.md, "Where the time goes"). Traced, it is a ``RunnableLambda`` as before. A sync-only
    function is then called on the event loop rather than in a worker thread: use it for quick, pure functions."""

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        if not kwargs and _unheard(config):
            afunc = getattr(self, "afunc", None)
            return await afunc(input) if afunc is not None else self.func(input)
        return await super().ainvoke(input, config, **kwargs)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        if not kwargs and _unheard(config) and hasattr(self, "func"):
            return self.func(input)
        return super().invoke(input, config, **kwargs)


def _unheard(config: RunnableConfig | None) -> bool:
    """Whether a node's config carries a callback manager with no handler (a graph's node run that nothing traces).
    No manager at all is not known to be unheard: LangChain would look for tracing in the environment."""
    manager = (config or {}).get("callbacks")
    return isinstance(manager, BaseCallbackManager) and not manager.handlers and not manager.inheritable_handlers


def current_context() -> JuryContext:
    """The runtime context of the graph run a node belongs to (an empty one outside a run)."""
    try:
        context = get_runtime(JuryContext).context
    except RuntimeError:
        context = None
    return context if isinstance(context, JuryContext) else JuryContext()


def _drive_sync(gen: Generator[Any, Any, dict[str, Any]], ctx: JuryContext) -> dict[str, Any]:
    usage: dict[str, dict[str, Any]] = {}
    reply: Any = None
    try:
        while True:
            request = gen.send(reply)
            if isinstance(request, list):
                reply = [_call_sync(r, ctx, usage) for r in request]
            else:
                reply = _call_sync(request, ctx, usage)
    except StopIteration as stop:
        return _with_usage(stop.value, usage)


async def _drive_async(gen: Generator[Any, Any, dict[str, Any]], ctx: JuryContext) -> dict[str, Any]:
    usage: dict[str, dict[str, Any]] = {}
    reply: Any = None
    try:
        while True:
            request = gen.send(reply)
            if isinstance(request, list):
                reply = list(await asyncio.gather(*(_call_async(r, ctx, usage) for r in request)))
            else:
                reply = await _call_async(request, ctx, usage)
    except StopIteration as stop:
        return _with_usage(stop.value, usage)


def _with_usage(update: dict[str, Any] | None, usage: dict[str, dict[str, Any]]) -> dict[str, Any]:
    update = dict(update or {})
    if usage:
        update["usage"] = usage
    return update


# --- one request: the same steps in sync and async form; only the I/O differs ---


def _in_context(req: ModelRequest, ctx: JuryContext) -> ModelRequest:
    """The request with the run's parameters and sample offset applied.

    Precedence (lowest first): the protocol's paper defaults in ``req.params``, a wrapper's run-wide
    ``call_params`` (MEC samples a whole protocol at temperature 1), the user's ``--gen`` overrides.
    An ``n`` override applies to calls that sample (n > 1): a single-reply judging call read with the
    re-ask cannot become n samples, so asking for that by agent or role name is an error, not ignored.
    """
    gen = ctx.gen_for(req.agent, req.role)
    if not ctx.call_params and not ctx.sample_offset and not gen:
        return req
    n = gen.pop("n", None)
    if n is not None and req.n == 1 and (req.agent in ctx.gen or req.role in ctx.gen) and n != 1:
        raise ValueError(f"--gen n={n} for agent {req.agent!r} (role {req.role!r}): this agent makes single-reply "
                         "calls; n applies to agents that sample (G-Eval, ReFeR Turbo's area chair)")
    return replace(req, params={**req.params, **ctx.call_params, **gen}, n=n if n and req.n > 1 else req.n,
                   sample_index=req.sample_index + ctx.sample_offset,
                   required_params=frozenset(gen) | frozenset(ctx.call_params))


def _call_sync(req: ModelRequest, ctx: JuryContext, usage: dict[str, dict[str, Any]]) -> ModelReply:
    req = _in_context(req, ctx)
    resolved = ctx.model_for(req.agent, req.role)  # a MissingAPIKey here stops a run as ProviderUnavailable does
    plan = _plan(req, resolved, ctx)
    result: Any = None
    try:
        while True:
            kind, payload = plan.send(result)
            try:
                result = _io_sync(kind, payload, req, resolved, ctx, usage)
            except Exception as err:
                classified = classify_error(err, resolved)
                if classified is err:
                    raise
                raise classified from err
    except StopIteration as stop:
        return stop.value


async def _call_async(req: ModelRequest, ctx: JuryContext, usage: dict[str, dict[str, Any]]) -> ModelReply:
    req = _in_context(req, ctx)
    resolved = ctx.model_for(req.agent, req.role)  # a MissingAPIKey here stops a run as ProviderUnavailable does
    plan = _plan(req, resolved, ctx)
    result: Any = None
    try:
        while True:
            kind, payload = plan.send(result)
            try:
                result = await _io_async(kind, payload, req, resolved, ctx, usage)
            except Exception as err:
                classified = classify_error(err, resolved)
                if classified is err:
                    raise
                raise classified from err
    except StopIteration as stop:
        return stop.value


def _plan(req: ModelRequest, resolved: ResolvedModel, ctx: JuryContext) -> Generator[Any, Any, ModelReply]:
    """The decision logic of a call, independent of sync/async I/O. Yields (kind, messages)."""
    name, form = req.agent, req.form
    if req.n > 1:
        samples: list[AIMessage] = yield ("samples", req.messages)
        judgments = [read_or_missing(form, name, s.text, 1) for s in samples] if form else []
        return ModelReply(samples[0], None, samples, judgments, resolved.label)
    # JSON-schema output only when the model must (local) or the run asked for it; the papers read free text
    structured = form is not None and (resolved.structured or (resolved.structured is None and ctx.structured_output))
    messages, attempts = list(req.messages), 1
    while True:
        reason: UnreadableReply | None = None
        if structured:
            message, parsed = yield ("structured", messages)
            if parsed is not None:
                try:
                    judgment = form.from_structured(name, parsed, attempts)  # type: ignore[union-attr]
                    # the others hear the model's own words (its text field), not a rewrite in the answer form
                    spoken = _named(message, name).model_copy(update={"content": judgment.evidence or ""})
                    return ModelReply(spoken, judgment, [message], [], resolved.label)
                except UnreadableReply as err:
                    reason = err  # e.g. a score off the scale
            reply = _named(message, name)
        else:
            reply = _named((yield ("text", messages)), name)
        if form is None:
            return ModelReply(reply, None, [reply], [], resolved.label)
        try:
            return ModelReply(reply, form.read(name, reply.text, attempts), [reply], [], resolved.label)
        except UnreadableReply as err:
            reason = reason or err
        if attempts > (ctx.reasks if req.reasks is None else req.reasks):
            missing = Judgment.missing_for(name, form.kind, reply.text, str(reason), attempts)
            return ModelReply(reply, missing, [reply], [], resolved.label)
        messages = [*messages, AIMessage(reply.text), HumanMessage(REASK.format(reason=reason, form=form.reminder))]
        attempts += 1


def read_or_missing(form: AnswerForm, agent: str, text: str, attempts: int) -> Judgment:
    """The judgment in a reply, or a missing judgment with the raw text and the reason."""
    try:
        return form.read(agent, text, attempts)
    except UnreadableReply as err:
        return Judgment.missing_for(agent, form.kind, text, str(err), attempts)


def _named(message: BaseMessage, name: str) -> AIMessage:
    return AIMessage(
        content=message.text, name=name, id=message.id,
        usage_metadata=getattr(message, "usage_metadata", None),
        response_metadata=getattr(message, "response_metadata", {}) or {},
    )


def _io_sync(kind: str, messages: Sequence[BaseMessage], req: ModelRequest, resolved: ResolvedModel,
             ctx: JuryContext, usage: dict[str, dict[str, Any]]) -> Any:
    cache_key = _cache_key(ctx, kind, messages, req, resolved)
    model = _bound(resolved, req)
    _usage_entry(usage, req, resolved)["params"] = effective_params(model, req)  # also for cached answers
    hit = ctx.cache.get(cache_key) if ctx.cache and cache_key else None
    if hit is not None:
        return _decode(kind, hit, req)
    answer = _answered(ctx, cache_key, kind, messages, req, resolved, model)
    if answer is None:
        gate = _gate(ctx, resolved)
        config = _trace(req)

        def send() -> Any:
            if kind == "samples":
                return _samples_sync(model, resolved, messages, req.n, gate, config)
            if kind == "structured":
                with gate:
                    structured = model.with_structured_output(req.form.schema(), include_raw=True)  # type: ignore[union-attr]
                    raw = structured.invoke(list(messages), config)
                return raw["raw"], raw["parsed"]
            with gate:
                return model.invoke(list(messages), config)

        with _attempts_of(ctx, req, resolved) as attempts:
            answer = Answer(_retry_sync(send))
    else:
        attempts = [0]
    if answer.paid:
        _account(usage, req, resolved, answer.out, ctx, batch=answer.batch, attempts=attempts[0], key=cache_key)
    if cache_key and answer.cache:
        ctx.cache.put(cache_key, _encode(kind, answer.out))  # type: ignore[union-attr]
    return answer.out


async def _io_async(kind: str, messages: Sequence[BaseMessage], req: ModelRequest, resolved: ResolvedModel,
                    ctx: JuryContext, usage: dict[str, dict[str, Any]]) -> Any:
    cache_key = _cache_key(ctx, kind, messages, req, resolved)
    model = _bound(resolved, req)
    _usage_entry(usage, req, resolved)["params"] = effective_params(model, req)  # also for cached answers
    hit = await ctx.cache.aget(cache_key) if ctx.cache and cache_key else None
    if hit is not None:
        return _decode(kind, hit, req)
    answer = _answered(ctx, cache_key, kind, messages, req, resolved, model)
    if answer is None:
        gate = _gate(ctx, resolved)
        config = _trace(req)

        async def send() -> Any:
            if kind == "samples":
                return await _samples_async(model, resolved, messages, req.n, gate, config)
            if kind == "structured":
                async with gate:
                    structured = model.with_structured_output(req.form.schema(), include_raw=True)  # type: ignore[union-attr]
                    raw = await structured.ainvoke(list(messages), config)
                return raw["raw"], raw["parsed"]
            async with gate:
                return await model.ainvoke(list(messages), config)

        with _attempts_of(ctx, req, resolved) as attempts:
            answer = Answer(await _retry_async(send))
    else:
        attempts = [0]
    if answer.paid:
        _account(usage, req, resolved, answer.out, ctx, batch=answer.batch, attempts=attempts[0], key=cache_key)
    if cache_key and answer.cache:
        await ctx.cache.aput(cache_key, _encode(kind, answer.out))  # type: ignore[union-attr]
    return answer.out


@contextlib.contextmanager
def _attempts_of(ctx: JuryContext, req: ModelRequest, resolved: ResolvedModel) -> Iterator[list[int]]:
    """Count the HTTP attempts of one call sent to the provider (its model client's request hook adds to the list);
    a call that fails (or is cancelled) tells ``ctx.on_usage`` the attempts it made, with no request paid."""
    attempts = [0]
    token = call_attempts.set(attempts)
    try:
        yield attempts
    except BaseException:
        if ctx.on_usage is not None and attempts[0]:
            ctx.on_usage({req.agent: {"role": req.role, "model": resolved.label, **dict.fromkeys(COUNTS, 0),
                                      "attempts": attempts[0]}})
        raise
    finally:
        call_attempts.reset(token)


def _answered(ctx: JuryContext, key: str | None, kind: str, messages: Sequence[BaseMessage], req: ModelRequest,
              resolved: ResolvedModel, model: Any) -> Answer | None:
    """The context's reply source's answer to a call the cache missed (the caller pays and caches it as a
    provider's reply, which is an :class:`Answer` paid, unbatched and cacheable), or None: send it. The source
    may also stop the graph (an interrupt: the call waits for a batch)."""
    if ctx.replies is None:
        return None
    return ctx.replies.answer(PendingCall(key, kind, messages, req, resolved, model))


def _bound(resolved: ResolvedModel, req: ModelRequest) -> Any:
    """The model with this request's parameter overrides (temperature, logprobs...) as field values."""
    params = dict(req.params)
    if req.want_logprobs:
        params.update(logprobs=True, top_logprobs=params.get("top_logprobs", 20))
    if not params:
        return resolved.model
    fields = type(resolved.model).model_fields
    # a parameter may be named by its field's alias (Gemini's max_output_tokens is aliased max_tokens)
    aliases = {f.alias: name for name, f in fields.items() if f.alias and f.alias not in fields}
    params = {aliases.get(key, key): value for key, value in params.items()}
    unknown = set(params) - set(fields)
    required = {aliases.get(key, key) for key in req.required_params} | ({"logprobs"} if req.want_logprobs else set())
    params = {key: value for key, value in params.items() if key in fields or key in required}
    unknown &= required
    if unknown:
        raise TypeError(f"{resolved.label} has no parameter(s) {', '.join(sorted(unknown))} (agent {req.agent!r})")
    try:
        key = (id(resolved.model), repr(sorted(params.items())))
    except TypeError:  # parameter names that do not sort: a copy of its own
        return resolved.model.model_copy(update=params)
    held = _bound_models.get(key)
    if held is None or held[0] is not resolved.model:
        if len(_bound_models) >= _BOUND_MODELS_KEPT:
            _bound_models.clear()
        bound = resolved.model.model_copy(update=params)
        _bound_models[key] = held = (resolved.model, bound)
    return held[1]


# One copy of a model per distinct parameter set, not one per call: a copy is a new pydantic object, and LangChain
# serialises a chat model (``dumpd``, for its callbacks' ``on_chat_model_start``) once per instance, which was ~0.5 ms
# of CPU per call at zero latency (benchmarks/README.md, "Where the time goes"). Keyed by the base model's identity,
# which the entry holds (so the id is not reused while it is kept); cleared whole when full.
_bound_models: dict[tuple[int, str], tuple[Any, Any]] = {}
_BOUND_MODELS_KEPT = 256


# Provider clients retry 429, 5xx, timeouts and connection errors themselves (exponential backoff with jitter,
# honouring Retry-After). A 200 whose body is not JSON (a proxy's error page, a cut connection) or that has no
# choice to read (the client then fails with an IndexError) they do not: it is transient too, so it
# is retried here a few times before the call fails with one line naming the server.
_GARBLED = (json.JSONDecodeError, IndexError)
_GARBLED_RETRIES = 3


class ProviderUnavailable(RuntimeError):
    """A call failed in a way that no retry and no other item escapes: a rejected or missing key, no access,
    an unknown model, no server at the URL. The runner stops the run at the first one."""


class UnreadableResponse(RuntimeError):
    """The server kept answering 200 with a body that is not a chat completion."""


_FATAL_STATUS = {401: "401 Unauthorized (check the API key)", 403: "403 Forbidden (no access to this model)",
                 404: "404 Not Found (unknown model or wrong URL)"}


def _endpoint(resolved: ResolvedModel) -> str:
    """Where a model's requests go, without credentials, for error lines."""
    model = resolved.model
    url = getattr(model, "openai_api_base", None) or getattr(model, "base_url", None) or resolved.provider
    return redact_text(str(url or "default endpoint"))


def _causes(err: BaseException) -> list[BaseException]:
    """The error and what it was raised from (langchain-google-genai wraps google-genai's errors)."""
    chain: list[BaseException] = []
    while err is not None and err not in chain and len(chain) < 5:
        chain.append(err)
        err = err.__cause__  # type: ignore[assignment]
    return chain


def _status(err: Exception) -> int | None:
    """The HTTP status of a provider error: openai's ``status_code``, google-genai's ``code``. Gemini answers a
    wrong API key with 400 API_KEY_INVALID, which no retry fixes either: read as 401."""
    for cause in _causes(err):
        status = getattr(cause, "status_code", None) or getattr(cause, "code", None)
        if isinstance(status, int):
            return 401 if status == 400 and ("API_KEY_INVALID" in str(cause) or "API key not valid" in str(cause)) \
                else status
    return None


def _refused(err: Exception) -> bool:
    """A connection error after the client's own retries: openai's, or httpx's under google-genai; a timeout
    is transient and is not."""
    import httpx

    try:
        import openai
    except ImportError:
        openai = None  # type: ignore[assignment]
    if openai is not None and isinstance(err, openai.APIConnectionError):
        return not isinstance(err, openai.APITimeoutError)
    return any(isinstance(cause, httpx.ConnectError) for cause in _causes(err))


def classify_error(err: Exception, resolved: ResolvedModel) -> Exception:
    """The error a failed call should raise: ProviderUnavailable for what no other item escapes, a one-line
    UnreadableResponse for garbled bodies, else the error itself."""
    where = f"{resolved.label.split(':', 1)[0]} at {_endpoint(resolved)}"
    if isinstance(err, MissingAPIKey):
        return err  # already names the variable to set; the runner stops the run on it
    status = _status(err)
    if status in _FATAL_STATUS:
        return ProviderUnavailable(f"{where}: {_FATAL_STATUS[status]} for {redact_text(resolved.label)}")
    kind = type(err).__name__
    if _refused(err):
        return ProviderUnavailable(f"{where}: cannot connect ({err.__cause__ or err})")
    if isinstance(err, _GARBLED) and _http_client(resolved.model):  # an HTTP client's parse error
        return UnreadableResponse(f"{where}: the response is not a chat completion ({kind}: {err})")
    return err


def _http_client(model: Any) -> bool:
    """Whether a model speaks HTTP to a provider (its parse errors are a server's garbled body, not a bug)."""
    return hasattr(model, "openai_api_base") or type(model).__name__ == "ChatGoogleGenerativeAI"


def _garbled_delay(attempt: int) -> float:
    return min(4.0, 0.25 * 2**attempt) * (0.5 + random.random())


def _retry_sync(send: Callable[[], Any]) -> Any:
    for attempt in range(_GARBLED_RETRIES):
        try:
            return send()
        except _GARBLED:
            time.sleep(_garbled_delay(attempt))
    return send()


async def _retry_async(send: Callable[[], Awaitable[Any]]) -> Any:
    for attempt in range(_GARBLED_RETRIES):
        try:
            return await send()
        except _GARBLED:
            await asyncio.sleep(_garbled_delay(attempt))
    return await send()


def _gate(ctx: JuryContext, resolved: ResolvedModel) -> Any:
    """The provider's request gate (rate + in-flight limits), or a no-op."""
    gate = ctx.gates.gate(resolved.provider) if ctx.gates is not None else None
    return gate if gate is not None else _NO_GATE


class _NoGate:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


_NO_GATE = _NoGate()


def _trace(req: ModelRequest) -> RunnableConfig:
    """The agent's name and role on its model call's trace (LangSmith metadata and tags; inert untraced)."""
    return {"tags": [f"agent:{req.agent}"], "metadata": {"agent": req.agent, "role": req.role}}


def _samples_sync(model: Any, resolved: ResolvedModel, messages: Sequence[BaseMessage], n: int,
                  gate: Any, config: RunnableConfig) -> list[AIMessage]:
    if resolved.native_n:
        with gate:
            result = model.generate([list(messages)], n=n, tags=config["tags"], metadata=config["metadata"])
            return [g.message for g in result.generations[0]]
    samples = []
    for _ in range(n):
        with gate:
            samples.append(model.invoke(list(messages), config))
    return samples


async def _samples_async(model: Any, resolved: ResolvedModel, messages: Sequence[BaseMessage], n: int,
                         gate: Any, config: RunnableConfig) -> list[AIMessage]:
    if resolved.native_n:
        async with gate:
            result = await model.agenerate([list(messages)], n=n, tags=config["tags"], metadata=config["metadata"])
            return [g.message for g in result.generations[0]]

    async def one() -> AIMessage:
        async with gate:
            return await model.ainvoke(list(messages), config)

    return list(await asyncio.gather(*(one() for _ in range(n))))


def _usage_entry(usage: dict[str, dict[str, Any]], req: ModelRequest, resolved: ResolvedModel) -> dict[str, Any]:
    return usage.setdefault(req.agent, {"role": req.role, "model": resolved.label, **dict.fromkeys(COUNTS, 0)})


_RECORDED_PARAMS = {"temperature": "temperature", "top_p": "top_p", "max_tokens": "max_tokens",
                    "max_output_tokens": "max_tokens"}


def effective_params(model: Any, req: ModelRequest) -> dict[str, Any]:
    """The generation parameters a call is sent with (the bound model's values, None = provider default)."""
    fields = type(model).model_fields if hasattr(type(model), "model_fields") else {}
    out = {name: getattr(model, field) for field, name in _RECORDED_PARAMS.items() if field in fields}
    out["n"] = req.n
    return out


def _account(usage: dict[str, dict[str, Any]], req: ModelRequest, resolved: ResolvedModel, out: Any,
             ctx: JuryContext, *, batch: bool = False, attempts: int = 0, key: str | None = None) -> None:
    """Add tokens and requests to the agent's usage and tell ``ctx.on_usage`` (with the call's HTTP ``attempts`` and
    cache ``key``), before the answer is cached or read; n native samples count as one request. ``batch``: paid at
    batch prices, also counted under ``batch_*``."""
    messages = out if isinstance(out, list) else [out[0] if isinstance(out, tuple) else out]
    paid = {"requests": 1 if (not isinstance(out, list) or resolved.native_n) else len(out),
            "input_tokens": 0, "output_tokens": 0}
    # with native n, OpenAI-compatible clients put the WHOLE response's usage (the prompt once, every choice's
    # completion) on each choice's message: count it once, not n times
    for message in messages[:1] if resolved.native_n else messages:
        meta = getattr(message, "usage_metadata", None) or {}
        paid["input_tokens"] += int(meta.get("input_tokens", 0))
        paid["output_tokens"] += int(meta.get("output_tokens", 0))
    if batch:
        paid.update({batch_key: paid[key] for key, batch_key in zip(COUNTS, BATCH_COUNTS, strict=True)})
    entry = _usage_entry(usage, req, resolved)
    for key, value in paid.items():
        entry[key] = entry.get(key, 0) + value
    if ctx.on_usage is not None:
        ctx.on_usage({req.agent: {"role": req.role, "model": resolved.label, **paid, "attempts": attempts,
                                  "key": key}})


# --- cache plumbing: the key covers everything that changes the answer, including the sample count ---


def _cache_key(ctx: JuryContext, kind: str, messages: Sequence[BaseMessage], req: ModelRequest,
               resolved: ResolvedModel) -> str | None:
    if ctx.cache is None:
        return None
    return ctx.cache.key(resolved.label, kind, messages, {**req.params, "n": req.n, "sample": req.sample_index,
                                                           "logprobs": req.want_logprobs,
                                                           "schema": req.form.kind.value if kind == "structured"
                                                           and req.form else None})


def _encode(kind: str, out: Any) -> Any:
    from langchain_core.load import dumpd

    if kind == "structured":
        raw, parsed = out
        return {"raw": dumpd(raw), "parsed": parsed.model_dump() if parsed is not None else None}
    if kind == "samples":
        return [dumpd(m) for m in out]
    return dumpd(out)


def _decode(kind: str, data: Any, req: ModelRequest) -> Any:
    from langchain_core._api import LangChainBetaWarning
    from langchain_core.load import load

    def message(obj: Any) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", LangChainBetaWarning)  # load() is beta; its format is stable for messages
            return load(obj, allowed_objects="messages")

    if kind == "structured":
        parsed = data["parsed"]
        schema = req.form.schema() if req.form else None
        structured = schema.model_validate(parsed) if parsed is not None and schema else None
        return message(data["raw"]), structured
    if kind == "samples":
        return [message(m) for m in data]
    return message(data)
