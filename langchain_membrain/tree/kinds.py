"""Memory kinds: what a stored item is (README, Memory kinds).

A *fact* is an atomic statement, with an optional valid-time interval; an *experience* says
how to do something; both are leaves of a namespace's tree. A *raw* item is an input as it
was said, the source of what was formed from it. The *working* memory is one running summary
per (namespace, session). The keys below name where a node's metadata holds its kind, its
sources and its valid time.
"""

from __future__ import annotations

from typing import Any, Literal, cast

from ..errors import InvalidOperationError

MemoryKind = Literal["fact", "experience", "raw", "working"]
MEMORY_KINDS: tuple[MemoryKind, ...] = ("fact", "experience", "raw", "working")
#: What ``search`` returns without ``kinds``: the working memory is read with ``working()``.
SEARCHED_KINDS: tuple[MemoryKind, ...] = ("fact", "experience", "raw")
#: The node metadata key holding a leaf's memory kind ("fact" when absent).
KIND_KEY = "kind"
#: The node metadata key holding the keys of the raw items a fact was formed from.
SOURCES_KEY = "sources"
#: The node metadata key holding a fact's valid-time interval ``[from, to]`` (either None).
VALID_TIME_KEY = "valid_time"


def check_kinds(kinds: Any) -> tuple[MemoryKind, ...]:
    """``kinds`` (one kind or several) as a tuple, or InvalidOperationError naming the
    unknown one; None is every searched kind (:data:`SEARCHED_KINDS`)."""
    if kinds is None:
        return SEARCHED_KINDS
    items = [kinds] if isinstance(kinds, str) else kinds
    try:
        items = list(items)
    except TypeError:
        raise InvalidOperationError(f"kinds is a kind or a list of kinds, got {type(kinds).__name__}") from None
    for k in items:
        if k not in MEMORY_KINDS:
            raise InvalidOperationError(f"unknown memory kind {k!r}: one of {', '.join(MEMORY_KINDS)}")
    if not items:
        raise InvalidOperationError("kinds is empty: name at least one kind")
    return tuple(dict.fromkeys(cast("list[MemoryKind]", items)))
