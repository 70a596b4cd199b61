"""Validation of what callers hand to a memory: namespaces, texts and values.

One place, so that the memory, the store, the graph and the CLI reject bad input the same
way, with a :class:`~.errors.MembrainError` (a ``ValueError``) that says what is wrong.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any, Sequence

from ..errors import InvalidOperationError, MembrainError

Namespace = tuple[str, ...]
DEFAULT_NAMESPACE: Namespace = ("memories",)
MAX_TEXT_CHARS = 100_000  # a memory is a fact, not a document: longer texts are refused


class NamespaceError(MembrainError):
    """A namespace that is not a non-empty sequence of non-empty strings."""


def as_namespace(namespace: str | Sequence[str] | None) -> Namespace:
    """Normalise ``"a/b"``, ``["a", "b"]`` or ``("a", "b")`` to ``("a", "b")``; None is
    the default namespace ``("memories",)``."""
    if namespace is None:
        return DEFAULT_NAMESPACE
    if isinstance(namespace, str):
        parts = tuple(namespace.split("/"))
    elif isinstance(namespace, (tuple, list)):
        parts = tuple(namespace)
    else:
        raise NamespaceError(f"a namespace is a str or a tuple of str, got {type(namespace).__name__}")
    if not parts or any(not isinstance(p, str) or not p for p in parts):
        raise NamespaceError(f"invalid namespace {namespace!r}: labels must be non-empty strings")
    # LangGraph's rule for store namespaces, applied everywhere so that a namespace ``add``
    # accepts is one the store accepts too.
    if any("." in p or "\x00" in p for p in parts):
        raise NamespaceError(f"invalid namespace {namespace!r}: labels cannot contain '.' or NUL")
    return parts


def check_text(text: Any, what: str = "memory text") -> str:
    """A memory's text (or a query: ``what`` names it in errors): a non-blank str without
    NUL or lone surrogates (valid UTF-8), at most MAX_TEXT_CHARS long."""
    if not isinstance(text, str):
        raise InvalidOperationError(f"{what} must be a str, got {type(text).__name__}")
    if not text.strip():
        raise InvalidOperationError(f"{what} is empty")
    if "\x00" in text:
        raise InvalidOperationError(f"{what} may not contain NUL characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: no text any embedder or database takes
        raise InvalidOperationError(f"{what} is not valid Unicode: a lone surrogate at index {exc.start}") from None
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidOperationError(f"{what} has {len(text)} characters; the limit is {MAX_TEXT_CHARS}")
    return text


def as_timestamp(when: Any, what: str = "a time") -> float:
    """A point in time as seconds since the epoch (the unit of every time membrain stores):
    a ``datetime`` (a naive one is local time, as ``datetime.timestamp`` reads it) or a
    finite number of seconds."""
    if isinstance(when, datetime):
        return when.timestamp()
    if isinstance(when, (int, float)) and not isinstance(when, bool) and math.isfinite(when):
        return float(when)
    raise InvalidOperationError(f"{what} is a datetime or seconds since the epoch, got {when!r}")


def json_copy(value: Any) -> Any:
    """A deep copy through JSON: rejects what could not be persisted (NaN, objects, NUL)."""
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidOperationError(f"values must be JSON-serialisable: {exc}") from None
    if "\\u0000" in text:
        raise InvalidOperationError("values may not contain NUL characters")
    return json.loads(text)


def memory_value(namespace: Any, text: Any, metadata: Any) -> tuple[Namespace, dict[str, Any], str]:
    """Validate one memory as ``add`` takes it; returns (namespace, stored value, text), the
    value being ``{"content": text, **metadata}``."""
    ns = as_namespace(namespace)
    text = check_text(text)
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidOperationError("metadata must be a dict")
    if metadata and "content" in metadata:
        raise InvalidOperationError("metadata may not use the key 'content' (it holds the text)")
    return ns, {"content": text, **json_copy(metadata or {})}, text
