"""`MemoryRecord`: a stored memory as the memory's reads return it.

Its own module, below memory.py, so that what only reads records (the retriever) need not
import the memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .inputs import Namespace


@dataclass(frozen=True)
class MemoryRecord:
    """A stored memory, as search and get return it."""

    key: str
    namespace: Namespace
    text: str
    value: dict[str, Any]
    path: list[str]
    created_at: float
    updated_at: float
    score: float | None = None
    #: "current" (in the tree), "superseded" (an UPDATE replaced it), "deleted" (a DELETE
    #: retracted it) or "ignored" (the namespace's log). Only current records are searched
    #: by default (README, Memories that change).
    status: str = "current"
    valid_from: float | None = None
    valid_to: float | None = None  # None while current
    superseded_by: str | None = None  # the key holding what replaced it (history only)
    #: "fact", "experience", "raw" or "working" (formation.MEMORY_KINDS).
    kind: str = "fact"
    #: The keys of the raw items a fact or experience was formed from; empty for one stored
    #: as it was said (its own source).
    sources: list[str] = field(default_factory=list)
    #: The key of a newer current memory that supersedes this one, when a search placed it
    #: just before this one (retrieval/supersession.py): this one is probably out of date.
    probably_superseded_by: str | None = None
    #: The key of the older current memory this one supersedes, when a search placed this one
    #: just before it; None otherwise.
    supersedes: str | None = None
