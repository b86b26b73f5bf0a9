"""Token counts for cost estimates: the provider's own tokenizer where a library has it, else an approximation
that says it is one.

OpenAI models are counted with tiktoken, in the encoding tiktoken maps the model to (``o200k_base`` for gpt-4o,
gpt-4.1, gpt-5 and the o-series, ``cl100k_base`` for gpt-4 and gpt-3.5). tiktoken downloads an encoding's file on
first use and caches it (``TIKTOKEN_CACHE_DIR``, else ``<tmp>/data-gym-cache``); no PyPI package of a reasonable
size ships those files (litellm's 44 MB wheel carries two of them), so:

- ``counter_for(label)`` uses an encoding only when its file is already cached: reading it costs ~0.3 s, and a
  download never happens behind a user's back (the one-line estimate before a run stays instant);
- ``counter_for(label, download=True)`` (the dry run) fetches a missing file itself, with a timeout (tiktoken's
  own fetch has none, so an offline machine that drops packets would hang), into tiktoken's cache;
- everything else (Gemini, a model at your own server, an encoding that cannot be had) is **approximate**:
  UTF-8 bytes / 4.8. Measured on the prompts of the built-in datasets (ChatEval on FairEval and SummEval, ReFeR on
  Topical-Chat; 120 prompts of 570-1,030 tokens), o200k_base and cl100k_base both give 4.8 characters per token
  (4.5-5.5 per prompt), so the approximation is within ~10 % for English prompts; it counts bytes, not
  characters, so text in other scripts (3 bytes a character in UTF-8, ~1.3 characters a token) is not
  undercounted fourfold.

A chat request is billed for its messages plus OpenAI's framing: 3 tokens per message, 1 per name, 3 priming the
reply (OpenAI's cookbook count for the chat models since gpt-3.5-turbo-0613); the same framing is added in the
approximation.
"""

from __future__ import annotations

import hashlib
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

APPROX_BYTES_PER_TOKEN = 4.8
PER_MESSAGE, PER_NAME, PER_REPLY = 3, 1, 3
DOWNLOAD_TIMEOUT = 20.0

# where tiktoken fetches each encoding, and the SHA-256 it checks (tiktoken_ext/openai_public.py)
ENCODING_FILES: dict[str, tuple[str, str]] = {
    "o200k_base": ("https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
                   "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"),
    "cl100k_base": ("https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
                    "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"),
}

_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


@dataclass(frozen=True)
class TokenCounter:
    """Counts tokens of text and of chat requests for one model. ``exact``: the model's own tokenizer;
    ``method`` says which (``tiktoken o200k_base``) or why not (``approximate: ...``)."""

    method: str
    exact: bool
    _encode: Callable[[str], list[int]] | None = None
    _decode: Callable[[list[int]], str] | None = None

    def text(self, text: str) -> int:
        if self._encode is not None:
            return len(self._encode(text))
        return math.ceil(len(text.encode("utf-8")) / APPROX_BYTES_PER_TOKEN)

    def messages(self, messages: Sequence[Any]) -> int:
        """The prompt tokens of a chat request with these messages (LangChain messages or OpenAI dicts)."""
        total = PER_REPLY
        for message in messages:
            role, content, name = _parts(message)
            total += PER_MESSAGE + self.text(role) + self.text(content)
            if name:
                total += PER_NAME + self.text(name)
        return total

    def truncate(self, text: str, tokens: int) -> str:
        """The longest start of ``text`` that is at most ``tokens`` tokens."""
        if tokens <= 0:
            return ""
        if self._encode is not None and self._decode is not None:
            return self._decode(self._encode(text)[:tokens])
        return text.encode("utf-8")[:int(tokens * APPROX_BYTES_PER_TOKEN)].decode("utf-8", "ignore")

    @property
    def approximate(self) -> bool:
        return not self.exact


def _parts(message: Any) -> tuple[str, str, str | None]:
    if isinstance(message, dict):
        content = message.get("content") or ""
        role, name = str(message.get("role", "")), message.get("name")
    else:
        content = message.content
        role, name = _ROLES.get(message.type, message.type), getattr(message, "name", None)
    if isinstance(content, list):  # content parts: the text parts count (an image is priced apart)
        content = "\n".join(str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content)
    return role, str(content), name


APPROXIMATE = TokenCounter(f"approximate (UTF-8 bytes / {APPROX_BYTES_PER_TOKEN:g})", exact=False)


def encoding_name(label: str) -> str | None:
    """The tiktoken encoding of an OpenAI model label ('openai:gpt-4o-mini@URL' -> 'o200k_base'), or None."""
    provider, _, rest = label.partition(":")
    if provider != "openai":
        return None
    try:
        from tiktoken.model import encoding_name_for_model
    except ImportError:
        return None
    try:
        return encoding_name_for_model(rest.split("@", 1)[0])
    except KeyError:
        return None


def counter_for(label: str, *, download: bool = False) -> TokenCounter:
    """The token counter for a model label: tiktoken's when the model has an encoding whose file is cached (or,
    with ``download``, can be fetched now), else the approximation, whose ``method`` says why."""
    name = encoding_name(label)
    if name is None:
        return APPROXIMATE
    return _encoding_counter(name, download)


# how an estimate counts tokens: "download" (the dry run: fetch a missing encoding), "approximate" (never a
# tokenizer, not even one on disk, ~0.3 s to read: the line before a run stays instant)
TOKENIZER_MODES = ("download", "approximate")


def counter_in(label: str, mode: str) -> TokenCounter:
    """:func:`counter_for` in one of ``TOKENIZER_MODES``."""
    if mode == "approximate":
        return APPROXIMATE if encoding_name(label) is None else _approximate("no tokenizer loaded before a run")
    if mode != "download":
        raise ValueError(f"tokenizer {mode!r}: one of {', '.join(TOKENIZER_MODES)}")
    return counter_for(label, download=True)


@cache
def _encoding_counter(name: str, download: bool) -> TokenCounter:
    if name not in ENCODING_FILES:
        return _approximate(f"{name} is not an encoding jurygraph fetches")
    url, sha256 = ENCODING_FILES[name]
    path = cache_path(url)
    if path is None or not path.exists():
        if not download:
            return _approximate(f"tiktoken's {name} is not cached (a --dry-run fetches it)")
        try:
            _fetch(url, sha256, path)
        except Exception as err:  # offline, a proxy, a blocked socket: the estimate still comes, approximated
            return _approximate(f"tiktoken's {name} could not be downloaded ({type(err).__name__})")
    import tiktoken

    encoding = tiktoken.get_encoding(name)
    return TokenCounter(f"tiktoken {name}", True, encoding.encode_ordinary, encoding.decode)


def _approximate(why: str) -> TokenCounter:
    return TokenCounter(f"{APPROXIMATE.method}: {why}", exact=False)


def cache_path(url: str) -> Path | None:
    """Where tiktoken caches the file at ``url`` (its own rule: the SHA-1 of the URL in its cache directory);
    None when caching is turned off (``TIKTOKEN_CACHE_DIR=""``)."""
    directory = os.environ.get("TIKTOKEN_CACHE_DIR", os.environ.get("DATA_GYM_CACHE_DIR"))
    if directory is None:
        directory = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    if directory == "":
        return None
    return Path(directory) / hashlib.sha1(url.encode()).hexdigest()


def _fetch(url: str, sha256: str, path: Path | None) -> None:
    if path is None:
        raise FileNotFoundError("tiktoken's cache is turned off (TIKTOKEN_CACHE_DIR is empty)")
    import httpx

    data = httpx.get(url, timeout=DOWNLOAD_TIMEOUT, follow_redirects=True).raise_for_status().content
    if hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError(f"{url}: not the expected file (SHA-256 differs)")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
