"""A node of the membrain tree (:mod:`.tree`): its record, and the checks of what goes in one.

A node is the root (the subject), an aspect (an inner node: a sub-topic), a fact (a memory,
always a leaf: a fact or an experience, :mod:`.formation`), or an entry kept beside the tree,
not in it: ``history`` (a former version of a fact), ``ignored`` (an item judged not to be a
memory), ``raw`` (an input as it was said, the source of the facts formed from it) and
``working`` (a session's running summary).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from ..errors import DimensionError, InvalidOperationError

NodeKind = Literal["root", "aspect", "fact", "history", "ignored", "raw", "working"]

ARCHIVE_KINDS = ("history", "ignored", "raw", "working")
#: The archived entries that record what left the tree (purge_history forgets them).
PAST_KINDS = ("history", "ignored")


@dataclass(slots=True)
class Node:
    """One node of the tree. ``text`` is the fact text, the aspect label or the subject.
    Slotted, without a ``__dict__``: a process holds one per memory of each loaded namespace."""

    id: str
    kind: NodeKind
    text: str
    embedding: np.ndarray | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)
    # Sum (float64 above a fact, to avoid drift) and count of the embeddings of the facts at
    # or below this node; a fact's sum is its own embedding (the same array). Maintained by
    # MembrainTree only, which never writes an array in place once a node holds it.
    emb_sum: np.ndarray | None = field(default=None, repr=False)
    emb_count: int = 0
    n_facts: int = 0  # facts at or below this node, embedded or not
    seq: int = 0  # order among siblings: set on every attach or move (persisted)

    @property
    def mean_embedding(self) -> np.ndarray | None:
        """Mean embedding of the facts below (a fact: its own embedding); None if none."""
        if self.emb_count == 0 or self.emb_sum is None:
            return None
        return (self.emb_sum / self.emb_count).astype(np.float32)


def copy_node(node: Node) -> Node:
    """A copy of ``node`` with its own metadata dict; its arrays are shared (a tree replaces
    an array, never writes one in place). Field by field, without dataclasses.replace's
    per-call checks: a tree copy makes one per node."""
    n = node
    return Node(n.id, n.kind, n.text, n.embedding, n.created_at, n.updated_at, dict(n.metadata), n.emb_sum,
                n.emb_count, n.n_facts, n.seq)


def as_vector(embedding: Any, dim: int | None) -> np.ndarray | None:
    """``embedding`` as a new float32 vector (None stays None), or DimensionError unless it
    is a non-empty, finite 1-d vector of ``dim`` numbers (any number when ``dim`` is None)."""
    if embedding is None:
        return None
    try:
        vec = np.asarray(embedding, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise DimensionError(f"embedding is not a numeric vector: {exc}") from None
    if vec.ndim != 1 or vec.size == 0:
        raise DimensionError(f"embedding must be a non-empty 1-d vector, got shape {vec.shape}")
    if dim is not None and vec.size != dim:
        raise DimensionError(f"embedding has {vec.size} dimensions, the tree uses {dim}")
    if not np.isfinite(vec).all():
        raise DimensionError("embedding contains NaN or infinity")
    return vec.copy()


def check_text(text: Any, what: str) -> str:
    """``text``, or InvalidOperationError naming ``what`` unless it is a str."""
    if not isinstance(text, str):
        raise InvalidOperationError(f"{what} must be a str, got {type(text).__name__}")
    return text
