"""Recency among near-duplicates at search time: a correction ranks before what it corrects.

When the operation that should have superseded an old fact did not run (the offline rule
was unsure, the item was stored as a new memory), both statements stay current: "I work
night shifts at the hospital" and, later, "I don't work night shifts anymore, I moved to
days". Among a query's hits, :func:`prefer_newer` finds such pairs (cosine of their
embeddings >= ``RetrievalConfig.recency_similarity``, 0.45, or 0.15 less when the newer one
states a change: :func:`~.operation_rule.has_change_cue`) and ranks the newer one where the
older stood;
the older is kept, marked ``probably_superseded_by`` the newer one's key, and nothing is
lost from search or history. ``RetrievalConfig.for_chat()`` turns it off: conversation turns
repeat a topic without correcting it; with a teacher that answers the operations (an
LLM) it is off too (:func:`resolve_recency`). The thresholds were chosen on the tuning personas of
``bench updates`` (RESULTS.md, updates), the held-out ones measured after.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from ..index.facts import RetrievalConfig, relevance
from ..teachers.operation_rule import has_change_cue
from ..tree.nodes import Node
from ..tree.placement import cosine

#: ``RetrievalConfig.recency_similarity`` where "auto" turns recency on.
RECENCY_SIMILARITY = 0.45
#: Recency reorders only a query's first this many hits (search fetches them whatever its
#: ``limit``), so a hit's place does not depend on how many are asked for.
RECENCY_WINDOW = 5


#: A newer hit that states a change needs this much less cosine with the older one.
CUE_EASING = 0.15
#: The newer hit must be this near the older one's relevance to the query
#: (``retrieval.relevance`` of their ranking scores): a fact far less relevant to the query
#: is no answer to it, however near the older fact.
RELEVANCE_GAP = 0.8


def prefer_newer(scored: list[tuple[str, float | None]], entry: Callable[[str], Node],
                 near: float | None) -> tuple[list[tuple[str, float | None]], dict[str, str]]:
    """``scored`` (key, ranking score), best first, with each newer hit among the first
    :data:`RECENCY_WINDOW` moved to the rank of the older hit above it that it is nearest to
    of all the older hits there (the two trade places; the scores stay in order), and {older
    key: newer key} of the pairs moved. Near: cosine >= ``near``, or >= ``near -
    CUE_EASING`` when the newer one states a change; and the newer one's relevance to the
    query at most :data:`RELEVANCE_GAP` below the older one's. ``entry``: a key's node (its
    embedding, text and time). Unscored hits (None) stay last. ``near`` 0 or None: off."""
    if not near or near <= 0:
        return scored, {}
    keys = [k for k, s in scored if s is not None]
    scores = [s for _, s in scored if s is not None]
    marks: dict[str, str] = {}
    window = min(len(keys), RECENCY_WINDOW)
    for j in range(1, window):
        newer = entry(keys[j])
        if newer.embedding is None:
            continue
        older = [(cosine(entry(keys[i]).embedding, newer.embedding), i) for i in range(window)
                 if i != j and entry(keys[i]).embedding is not None
                 and (entry(keys[i]).created_at, entry(keys[i]).seq) < (newer.created_at, newer.seq)]
        if not older:
            continue
        cos, i = max(older)  # the older hit it is nearest to: the same subject, if any
        bar = near - CUE_EASING if has_change_cue(newer.text) else near
        if (i < j and keys[i] not in marks and cos >= bar
                and relevance(scores[j]) >= relevance(scores[i]) - RELEVANCE_GAP):
            marks[keys[i]] = keys[j]
            keys[i], keys[j] = keys[j], keys[i]
    return list(zip(keys, scores)) + [(k, s) for k, s in scored if s is None], marks


def resolve_recency(config: RetrievalConfig, teacher: Any) -> RetrievalConfig:
    """``config`` with an "auto" (None) recency decided: :data:`RECENCY_SIMILARITY` when the
    memory operations are the offline rule's (``teacher`` has no ``choose_operation``), which
    updates only the corrections it is sure of; 0 (off) with a teacher that answers them (an
    LLM), whose ADD says that two near facts are both current. An explicit value is kept."""
    if config.recency_similarity is not None:
        return config
    from ..teachers.base import OperationTeacher, capable

    return replace(config, recency_similarity=0.0 if capable(teacher, OperationTeacher) else RECENCY_SIMILARITY)
