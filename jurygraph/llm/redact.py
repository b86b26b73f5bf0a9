"""Secrets out of URLs and messages before anything is stored or printed.

A base URL or a checkpoint URL may carry credentials (``http://user:TOKEN@host/v1``,
``...?api_key=TOKEN``); run directories, checkpoints, caches and error lines must never hold them.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

MASK = "***"
# query parameters whose value is a credential (matched case-insensitively, as a part of the name)
_SECRET_PARAMS = ("key", "token", "secret", "password", "passwd", "pwd", "auth", "sig", "signature", "credential")
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>]+")


def _secret_param(name: str) -> bool:
    lowered = name.lower()
    return any(part in lowered for part in _SECRET_PARAMS)


def redact_url(url: str) -> str:
    """The URL with its password (or lone token as user) and token-like query values replaced by ***."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user, has_password, _ = userinfo.partition(":")
        # over HTTP a lone user name is often the token itself (https://TOKEN@host); a database's is a user name
        lone_token = not has_password and parts.scheme in ("http", "https")
        netloc = f"{MASK}@{host}" if lone_token else f"{user}{':' + MASK if has_password else ''}@{host}"
    # each parameter as written, only a credential's value replaced
    query = "&".join(_redact_param(param) for param in parts.query.split("&")) if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _redact_param(param: str) -> str:
    name, has_value, _ = param.partition("=")
    return f"{name}={MASK}" if has_value and _secret_param(name) else param


def redact_text(text: str) -> str:
    """Every URL inside a message redacted (error texts of HTTP clients quote the URL they called)."""
    return _URL.sub(lambda match: redact_url(match.group(0)), text)


def redact_values(value: Any) -> Any:
    """A JSON-like value (settings, option lists) with every URL inside its strings redacted: a model spec given as
    ``--models Critic=openai:m@https://host/v1?api_key=K`` is stored as ``...?api_key=***``."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {key: redact_values(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redact_values(item) for item in value]
    return value
