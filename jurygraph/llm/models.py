"""Which chat model each agent uses, resolved at run time from the graph's runtime context.

Models never live in graph state: a compiled graph is given a :class:`JuryContext` at ``invoke`` time
(``graph.invoke(state, config, context=JuryContext(...))``). It maps agent names or roles to model
*specs* (strings such as ``"openai:gpt-4o-mini"``, ``"google_genai:gemini-2.0-flash"``,
``"openai:llama3@http://127.0.0.1:8000/v1"``) or to chat model instances. Specs are turned into
LangChain chat models on first use, so building or compiling a graph needs no API key; a missing key
fails at the first call with the name of the variable to set.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from jurygraph.llm.cache import LLMCache
from jurygraph.llm.limits import ProviderGates
from jurygraph.llm.pricing import PROVIDER_URLS
from jurygraph.llm.redact import redact_url

Provider = Literal["openai", "google_genai", "local"]
KEY_VARIABLES: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "google_genai": ("GOOGLE_API_KEY", "GEMINI_API_KEY"),
}


ALL_AGENTS = "*"
# the generation parameters --gen may set, with how a value is read ("none" = leave it to the provider)
GEN_PARAMS: dict[str, type] = {"temperature": float, "top_p": float, "max_tokens": int, "n": int}


@dataclass(frozen=True)
class GenRange:
    """The values a generation parameter may take: ``low`` (excluded when ``low_open``) up to ``high`` (None: no
    upper bound)."""

    low: float
    high: float | None = None
    low_open: bool = False

    def __contains__(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        return above and (self.high is None or value <= self.high)

    def __str__(self) -> str:
        low = f"greater than {self.low:g}" if self.low_open else f"at least {self.low:g}"
        if self.high is None:
            return low
        return f"in ({self.low:g}, {self.high:g}]" if self.low_open else f"between {self.low:g} and {self.high:g}"


# what every model takes (a temperature below 0, no tokens or no samples mean nothing anywhere) ...
GEN_RANGES: dict[str, GenRange] = {"temperature": GenRange(0), "top_p": GenRange(0, 1, low_open=True),
                                   "max_tokens": GenRange(1), "n": GenRange(1)}
# ... and what a provider's API documents beyond it: the OpenAI Chat Completions API (also what an OpenAI-compatible
# server implements) and the Gemini API take a temperature from 0 to 2; the embedded llama.cpp model any from 0
PROVIDER_GEN_RANGES: dict[str, dict[str, GenRange]] = {
    "openai": {"temperature": GenRange(0, 2)},
    "google_genai": {"temperature": GenRange(0, 2)},
}


def gen_range(param: str, provider: str | None = None) -> GenRange:
    """The values ``param`` may take for a provider's models (None: for any model)."""
    return PROVIDER_GEN_RANGES.get(provider or "", {}).get(param) or GEN_RANGES[param]


def parse_gen(pairs: Sequence[str] | None) -> dict[str, dict[str, Any]]:
    """``AGENT.param=value`` overrides per agent name or role (``*`` or ``all``: every agent).

    The agent is everything before the last dot, so names with spaces work ("General Public.temperature=0.7").
    Raises ValueError, in one line, for an unknown parameter, a value of the wrong type or one no model takes
    (a provider's own range is checked against the run's models: :func:`check_gen_range`).
    """
    out: dict[str, dict[str, Any]] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        agent, dot, param = key.strip().rpartition(".")
        if not sep or not dot or not agent or not value.strip():
            raise ValueError(f"--gen must be AGENT.param=value (e.g. Critic.temperature=0.7), got {pair!r}")
        if param not in GEN_PARAMS:
            raise ValueError(f"--gen {pair!r}: unknown parameter {param!r}; known: {', '.join(GEN_PARAMS)}")
        text = value.strip()
        try:
            parsed = None if text.lower() == "none" else GEN_PARAMS[param](text)
        except ValueError:
            raise ValueError(f"--gen {pair!r}: {param} takes a {GEN_PARAMS[param].__name__} (or none)") from None
        if param == "n" and parsed is None:
            raise ValueError(f"--gen {pair!r}: n must be a positive integer")
        if parsed is not None and parsed not in GEN_RANGES[param]:
            raise ValueError(f"--gen {pair!r}: {param} must be {GEN_RANGES[param]} (got {parsed:g})")
        out.setdefault(ALL_AGENTS if agent.strip() == "all" else agent.strip(), {})[param] = parsed
    return out


def check_gen_range(agent: str, param: str, value: Any, spec: ModelSpec) -> None:
    """Raise ValueError, in one line naming the ``--gen`` flag and the value, when ``spec``'s provider documents a
    narrower range for ``param`` than every model's."""
    allowed = gen_range(param, spec.provider)
    if value is not None and value not in allowed:
        raise ValueError(f"--gen '{agent}.{param}={value:g}': {param} must be {allowed} for {spec.label} "
                         f"(got {value:g})")


class MissingAPIKey(RuntimeError):
    """The provider needs an API key and the environment has none."""


class ModelSpec(BaseModel):
    """A model by name: provider, model, and call parameters. Holds no secret, only the key's variable name."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: Provider
    model: str
    base_url: str | None = None
    api_key_env: str | None = Field(default=None, description="environment variable holding the API key")
    temperature: float = 0.0
    max_tokens: int | None = None
    timeout: float | None = 120.0
    max_retries: int = 2
    structured: bool | None = Field(
        default=None, description="JSON-schema output for judgments: True always, False never, None = when the "
                                  "run asks for it (--structured-output) and the provider supports it")

    @classmethod
    def parse(cls, text: str, *, base_url: str | None = None, **params: Any) -> ModelSpec:
        """``provider:model[@base_url]``; a bare model name with ``base_url`` is an OpenAI-compatible server."""
        text = text.strip()
        if not text:
            raise ValueError("empty model spec")
        if text in {"local", "embedded"} or text.startswith("local:"):
            return cls(provider="local", model=text.partition(":")[2] or "smollm2-135m-instruct", **params)
        provider, sep, rest = text.partition(":")
        if not sep or provider.startswith("http"):
            if base_url is None:
                raise ValueError(
                    f"model spec {text!r} names no provider: write openai:<model>, google_genai:<model>, "
                    "or give --base-url for an OpenAI-compatible server"
                )
            provider, rest = "openai", text
        if provider not in ("openai", "google_genai"):
            raise ValueError(f"unknown provider {provider!r} in model spec {text!r} (openai, google_genai, local)")
        model, _, url = rest.partition("@")
        if not model:
            raise ValueError(f"model spec {text!r} has no model name")
        url = url or base_url or ""
        return cls(provider=provider, model=model, base_url=url or None, **params)  # type: ignore[arg-type]

    @property
    def provider_key(self) -> str:
        """The provider whose limits this model's requests count against (a server is its base URL)."""
        return self.base_url or self.provider

    @property
    def label(self) -> str:
        """The name stored in results, manifests, checkpoints and cache keys: never a credential of the URL."""
        return f"{self.provider}:{self.model}" + (f"@{redact_url(self.base_url)}" if self.base_url else "")

    def key_variable(self) -> str | None:
        """The environment variable that holds this model's key, or None when no key is needed."""
        if self.api_key_env:
            return self.api_key_env
        if self.provider == "local" or (self.base_url and not self.base_url.startswith(PROVIDER_URLS)):
            return None  # your own server (vLLM, a Gemini-API proxy, a test fake) may need no key
        return KEY_VARIABLES[self.provider][0]

    def build(self) -> BaseChatModel:
        """The LangChain chat model for this spec; raises MissingAPIKey naming the variable to set."""
        if self.provider == "local":
            from jurygraph.llm.local_model import load_local_model

            return load_local_model(self.model, temperature=self.temperature, max_tokens=self.max_tokens)
        key = self._api_key()
        count = _CountAttempt(self.label)
        base_url, query = split_query(self.base_url)
        if self.provider == "openai":
            import httpx
            from langchain_openai import ChatOpenAI

            from jurygraph.llm.transport import OPENAI_API, ShardedPools

            # our own async HTTP client: langchain-openai's shared default is bound to the first event loop
            # that used it, which breaks a second asyncio.run (e.g. a resumed run in the same process); its
            # connections in small pools side by side (up to 16 x 32), which stay cheap with many kept alive
            http_async_client = httpx.AsyncClient(
                timeout=self.timeout, event_hooks={"request": [count]},
                transport=ShardedPools(base_url or OPENAI_API, verify=_tls_context()))
            # and a sync one with the same hook, so that a call from a sync invoke (a notebook, a review) counts too
            http_client = httpx.Client(timeout=self.timeout, event_hooks={"request": [count]}, verify=_tls_context())
            return ChatOpenAI(
                model=self.model, base_url=base_url, api_key=key or "not-needed",  # type: ignore[arg-type]
                temperature=self.temperature, max_tokens=self.max_tokens,  # type: ignore[call-arg]
                timeout=self.timeout, max_retries=self.max_retries, http_async_client=http_async_client,
                http_client=http_client, default_query=query or None,
            )
        from langchain_google_genai import ChatGoogleGenerativeAI

        from jurygraph.llm.transport import HttpxTransport

        # google-genai counts attempts, the first included (and reads 0 as "its default of 5"): retries + 1.
        # Our transport keeps its async calls on httpx, where the hook counts them: given none, google-genai sends
        # them through aiohttp whenever aiohttp is installed (inspect_ai, MLflow and many more bring it)
        return ChatGoogleGenerativeAI(  # type: ignore[call-arg]
            model=self.model, google_api_key=key or "not-needed", base_url=base_url,
            temperature=self.temperature, max_output_tokens=self.max_tokens, timeout=self.timeout,
            max_retries=self.max_retries + 1,
            client_args={"event_hooks": {"request": [count]},
                         "transport": HttpxTransport(base_url, verify=_tls_context()),
                         **({"params": query} if query else {})},
        )

    def check_key(self) -> None:
        """Raise MissingAPIKey (naming the variable) if this model needs a key and none is set."""
        self._api_key()

    def _api_key(self) -> str | None:
        names = (self.api_key_env,) if self.api_key_env else KEY_VARIABLES.get(self.provider, ())
        for name in names:
            if os.environ.get(name):
                return os.environ[name]
        if self.key_variable() is None:
            return None
        raise MissingAPIKey(
            f"{' or '.join(names)} is not set: export {names[0]}=... to use {self.label}"
            + (" (or pass --base-url for an OpenAI-compatible server)" if self.provider == "openai" else "")
        )


@functools.cache
def _tls_context() -> Any:
    """One TLS context (httpx's default: certifi's CA bundle) for the HTTP clients of every model: each client made
    its own, and reading the bundle takes ~15 ms, before the first request."""
    import httpx

    return httpx.create_ssl_context()


def split_query(url: str | None) -> tuple[str | None, dict[str, str]]:
    """A base URL without its query string, and the query's parameters. The clients append their endpoint's path to
    the base URL as text (``.../v1?api_key=K`` + ``chat/completions`` = ``.../v1/?api_key=Kchat/completions``), so
    a query (a proxy's ``?api_key=``, Azure's ``?api-version=``) is given to them as parameters of every request."""
    if not url or "?" not in url:
        return url, {}
    parts = urlsplit(url)
    return urlunsplit(parts._replace(query="", fragment="")), dict(parse_qsl(parts.query, keep_blank_values=True))


class _CountAttempt:
    """An httpx request hook counting a model's HTTP attempts in ``http_attempts``. langchain-google-genai hands
    the same client arguments to its sync and its async httpx client, so the hook serves both: it counts when
    called and returns an awaitable that does nothing (the sync client ignores it)."""

    def __init__(self, label: str) -> None:
        self.label = label

    def __call__(self, request: Any) -> _Done:
        http_attempts[self.label] += 1
        attempts = call_attempts.get()
        if attempts is not None:  # the call this request belongs to counts it (its ledger row's attempts)
            attempts[0] += 1
        return _DONE


class _Done:
    def __await__(self) -> Any:
        return iter(())


_DONE = _Done()

ModelLike = str | ModelSpec | BaseChatModel

# every HTTP request the OpenAI-compatible and Gemini clients of this process sent, their own retries and the
# failed ones included, by model label: the runner reports the difference over a run as its attempts
http_attempts: Counter[str] = Counter()
# the HTTP attempts of the model call running in this context (jurygraph.llm.calls sets it around each call; httpx
# calls its request hooks in the task that sends, and the call's own tasks (n samples) share the list)
call_attempts: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("call_attempts", default=None)


def to_spec(value: str | ModelSpec | Mapping[str, Any]) -> ModelSpec:
    if isinstance(value, ModelSpec):
        return value
    if isinstance(value, str):
        return ModelSpec.parse(value)
    data = dict(value)
    if "spec" in data:
        return ModelSpec.parse(data.pop("spec"), **data)
    return ModelSpec.model_validate(data)


_built: weakref.WeakKeyDictionary[Any, dict[ModelSpec, BaseChatModel]] = weakref.WeakKeyDictionary()
_built_sync: dict[ModelSpec, BaseChatModel] = {}
_built_lock = threading.Lock()


def build_model(spec: ModelSpec) -> BaseChatModel:
    """One chat model per distinct spec, so HTTP clients and connection pools are shared by all agents.

    Async clients are bound to the event loop that first used them, so each loop gets its own models
    (a second ``asyncio.run`` must not reuse connections of a closed loop).
    """
    try:
        loop: Any = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    with _built_lock:
        table = _built_sync if loop is None else _built.setdefault(loop, {})
        model = table.get(spec)
        if model is None:
            model = table[spec] = spec.build()
        return model


@dataclass
class JuryContext:
    """Runtime context of every jurygraph protocol graph.

    ``models`` maps an agent name (``"Critic"``) or an agent role (``"referee"``, ``"summarizer"``,
    ``"scorer"``, ``"area_chair"``...) to a model; lookups try the name, then the role, then
    ``default``. ``cache`` (optional) answers repeated calls without sending them; ``reasks`` is the
    number of format re-asks for an unreadable judgment (the design allows one).
    ``call_params`` are defaults for every call of the graph run (a request's own params win) and
    ``sample_offset`` is added to every request's sample index: a wrapper that runs a whole protocol k
    times (FairEval's MEC) gives each run ``temperature=1`` and its own offset, so the runs are k
    distinct samples, also in the LLM cache. ``gates`` applies per-provider request limits.

    Generation parameters of a call, lowest to highest precedence: the model's own settings, the
    protocol's paper defaults (the ``params`` its nodes put on each request), ``call_params`` (a wrapper's
    run-wide setting), then ``gen``: the user's overrides (``--gen AGENT.param=value``) by ``"*"`` (every
    agent), then role, then agent name. ``structured_output`` turns JSON-schema output on for judging
    calls where the model supports it; off (the default), every model answers in the paper's free-text
    form, read by the tolerant parser (a model marked ``jurygraph_structured=True``, such as the embedded
    local model, always uses it).
    """

    # LangGraph Studio builds its context form from this class's JSON schema: only the JSON fields (model
    # spec strings, numbers) appear there; Python-only values (model objects, cache, gates) are hidden
    __pydantic_config__ = ConfigDict(arbitrary_types_allowed=True)  # type: ignore[misc]

    models: Mapping[str, str | SkipJsonSchema[ModelSpec | BaseChatModel | Mapping[str, Any]]] = field(
        default_factory=dict)
    default: str | SkipJsonSchema[ModelSpec | BaseChatModel | Mapping[str, Any]] | None = None
    cache: SkipJsonSchema[LLMCache | None] = None
    reasks: int = 1
    call_params: Mapping[str, Any] = field(default_factory=dict)
    sample_offset: int = 0
    gates: SkipJsonSchema[ProviderGates | None] = None
    structured_output: bool = False
    gen: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # issue 20's hooks, read by jurygraph.llm.calls: a ReplySource answering the calls the cache misses instead of
    # the provider (the dry run, batch mode), and a callback hearing each paid call's usage ({agent: counts})
    replies: SkipJsonSchema[Any] = None
    on_usage: SkipJsonSchema[Callable[[dict[str, dict[str, Any]]], None] | None] = None
    # conversation items (issue 31): a rubric's text that replaces the built-in rubric of the item's aspect
    # (``--rubric FILE``), and the token budget of a rendered conversation (``--max-context-tokens``)
    rubric: str | None = None
    max_context_tokens: int | None = None

    def gen_for(self, agent: str, role: str) -> dict[str, Any]:
        """The user's generation overrides for one agent: every agent's, then its role's, then its own."""
        return {**self.gen.get(ALL_AGENTS, {}), **self.gen.get(role, {}), **self.gen.get(agent, {})}

    def model_for(self, agent: str, role: str) -> ResolvedModel:
        """The chat model for an agent, with a label naming it and what it supports."""
        choice = self.models.get(agent, self.models.get(role, self.default))
        if choice is None:
            choice = default_model_spec()
            if choice is None:
                raise LookupError(
                    f"no model for agent {agent!r} (role {role!r}): pass context=JuryContext(default=...) "
                    "or a models mapping, or install jurygraph[local] for the embedded offline model"
                )
        if isinstance(choice, BaseChatModel):
            return ResolvedModel(choice, model_label(choice), supports_structured(choice), supports_native_n(choice),
                                 type(choice).__name__)
        spec = to_spec(choice)  # type: ignore[arg-type]
        model = build_model(spec)
        structured = supports_structured(model) if spec.structured is None else spec.structured
        return ResolvedModel(model, spec.label, structured, supports_native_n(model), spec.provider_key)


@dataclass(frozen=True)
class ResolvedModel:
    model: BaseChatModel
    label: str
    structured: bool | None  # True: always JSON-schema output; False: never; None: when the run asks for it
    native_n: bool
    provider: str = ""  # what request limits apply to: 'openai', 'google_genai', a base URL, a class name


def default_model_spec() -> ModelSpec | None:
    """The embedded offline model, when its optional extra is installed."""
    from jurygraph.llm.local_model import local_model_available

    return ModelSpec(provider="local", model="smollm2-135m-instruct") if local_model_available() else None


def uses_local_model(context: JuryContext) -> bool:
    """Whether the context names the embedded model, or leaves every agent to it (no models at all)."""
    choices = [*context.models.values(), context.default]
    if context.default is None and not context.models:
        return default_model_spec() is not None
    return any(to_spec(choice).provider == "local" for choice in choices  # type: ignore[arg-type]
               if choice is not None and not isinstance(choice, BaseChatModel))


def model_label(model: BaseChatModel) -> str:
    """The label of a chat model instance: its own ``jurygraph_label`` (a stand-in for a spec), else class:name."""
    label = getattr(model, "jurygraph_label", None)
    if label:
        return str(label)
    name = getattr(model, "model_name", None) or getattr(model, "model", None)
    return f"{type(model).__name__}:{name}" if name else type(model).__name__


def supports_structured(model: BaseChatModel) -> bool | None:
    """When judgments are requested from this model as JSON-schema output.

    None (OpenAI-compatible and Gemini clients): only when the run asks for it (``--structured-output``,
    ``JuryContext.structured_output``); the papers read free text, so that is the default. An explicit
    ``jurygraph_structured`` attribute wins: True always (the embedded local model cannot follow a
    free-text answer form, so it fills a grammar-constrained JSON object), False never.
    ``ModelSpec.structured`` overrides both.
    """
    explicit = getattr(model, "jurygraph_structured", None)
    if explicit is not None:
        return None if explicit == "when_asked" else bool(explicit)  # "when_asked": a stand-in for such a client
    return None if type(model).__name__ in {"ChatOpenAI", "AzureChatOpenAI", "ChatGoogleGenerativeAI"} else False


def supports_native_n(model: BaseChatModel) -> bool:
    """Whether one request can return n samples (OpenAI-compatible APIs), so the prompt is paid once."""
    explicit = getattr(model, "jurygraph_native_n", None)
    if explicit is not None:
        return bool(explicit)
    return type(model).__name__ in {"ChatOpenAI", "AzureChatOpenAI"}
