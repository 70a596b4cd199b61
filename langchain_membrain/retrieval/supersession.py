"""What supersedes the memories a search returns, placed just before them.

An UPDATE replaces a fact in place, so its old version is no longer searched. But two
statements can both stay current: a teacher answered ADD, the student decided alone, or a
database holds corrections stored before the rule recognised them. For each current fact a
search returns, :func:`superseder` looks among its nearest facts for a newer one that comes
before it, by one of two relations:

- it **supersedes** it (teachers/supersession.py: a change statement about the same holder,
  near it);
- it **restates** it (:func:`restates`): both are the speaker's own statements about
  themself, near each other, and the newer answers the query about as well as the older. Two
  such statements are most often one state told twice, the later one current ("I take the
  train to work since the parking got too expensive" after "I drive to work"), but the later
  one may only add to the earlier ("We got a dog" after "I have a cat"), so a restatement
  moves the newer one up and marks nothing.

:func:`place` puts the newer one just before the older, whatever its own score:

- the newer statement's score becomes the older fact's (it answers what that fact answered),
  so the scores still never rise down the list;
- where the newer one supersedes, the older fact stays, marked ``probably_superseded_by`` the
  newer one's key, and the newer one is marked ``supersedes`` the older one's key;
- the list may grow past its limit by the statements placed; nothing is dropped.

Nothing here needs a migration: both relations are read from the stored texts at search time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable

from ..teachers.supersession import may_supersede_as_nearest, speakers_own, supersedes
from ..tree.placement import cosine
from ..tree.records import MemoryRecord
from ..tree.tree import MembrainTree

#: A fact's superseder is looked for among this many of its nearest facts.
NEIGHBOURS = 6
#: :func:`restates`: the cosine (all-MiniLM-L6-v2) two statements need with each other, and how
#: much lower than the older one's the newer one's cosine with the query may be.
RESTATE_NEAR = 0.45
RESTATE_MARGIN = 0.1


@dataclass(frozen=True)
class Newer:
    """A current fact stated after a hit that comes before it: its key, and whether it
    supersedes the hit (else it restates it)."""

    key: str
    supersedes: bool


def restates(new: str, old: str, cos: float, new_to_query: float, old_to_query: float) -> bool:
    """Whether the later statement ``new`` restates the earlier ``old`` for a query (module
    docstring): both are the speaker's own (``speakers_own``), their cosine ``cos`` is at least
    :data:`RESTATE_NEAR`, and ``new``'s cosine with the query is at most :data:`RESTATE_MARGIN`
    below ``old``'s."""
    return (cos >= RESTATE_NEAR and new_to_query >= old_to_query - RESTATE_MARGIN
            and speakers_own(new) and speakers_own(old))


def superseder(tree: MembrainTree, nearest: Callable[[object, int], list], key: str,
               eligible: Callable[[str], bool], query: Any = None) -> Newer | None:
    """The newest current fact of ``tree`` stated after fact ``key`` that supersedes it, else
    the newest that restates it for the query embedding ``query`` (None: none restates),
    among its :data:`NEIGHBOURS` nearest facts (``nearest(embedding, k)``: (key, cosine)
    pairs, the index's); None if none. What else a candidate could supersede is read from
    its own nearest facts stated before it. ``eligible``: whether a key may be returned (the
    searched kinds, the filter)."""
    if key not in tree:
        return None
    node = tree.node(key)
    if node.embedding is None:
        return None
    when = (tree.valid_from(key), node.created_at)

    def stated(k: str) -> tuple[float, float]:
        return tree.valid_from(k), tree.node(k).created_at

    def current(k: object) -> bool:
        return isinstance(k, str) and k in tree and tree.node(k).kind == "fact" and eligible(k)

    best: dict[bool, tuple[tuple[float, float], str]] = {}  # supersedes? -> (stated, key)
    old_to_query: float | None = None
    for other, cos in nearest(node.embedding, NEIGHBOURS + 1):
        if other == key or not current(other) or stated(other) <= when or \
                (True in best and stated(other) <= best[True][0]):
            continue
        newer = tree.node(other)
        if _supersedes(nearest, node.text, newer, other, cos, key, current, stated):
            found = True
        elif query is not None and cos >= RESTATE_NEAR:  # the query's cosines only where it can hold
            if old_to_query is None:
                old_to_query = cosine(node.embedding, query)
            if not restates(newer.text, node.text, cos, cosine(newer.embedding, query), old_to_query):
                continue
            found = False
        else:
            continue
        if found not in best or stated(other) > best[found][0]:
            best[found] = (stated(other), other)
    for strong in (True, False):
        if strong in best:
            return Newer(best[strong][1], strong)
    return None


def _supersedes(nearest: Callable[[object, int], list], old: str, newer: Any, other: str, cos: float, key: str,
                current: Callable[[object], bool], stated: Callable[[str], tuple[float, float]]) -> bool:
    """Whether fact ``other`` (node ``newer``) supersedes the fact ``key`` (text ``old``) at
    their cosine ``cos``, the runner-up read from ``other``'s nearest facts stated before it
    where only the rule that reads it could hold."""
    if supersedes(newer.text, old, cos):
        return True
    if not may_supersede_as_nearest(newer.text, cos):
        return False
    runner_up = max((c for k, c in nearest(newer.embedding, NEIGHBOURS + 1)
                     if k not in (key, other) and current(k) and stated(k) < stated(other)), default=-1.0)
    return supersedes(newer.text, old, cos, runner_up)


def place(hits: list[MemoryRecord], newer: dict[tuple, tuple[MemoryRecord, bool]]) -> list[MemoryRecord]:
    """``hits`` with the record of each newer fact of ``newer`` ({(namespace, older key):
    (newer record, whether it supersedes)}) just before the hit it comes before (module
    docstring). A newer record already ranked before its older hit stays where it is."""
    out = list(hits)
    i = 0
    while i < len(out):
        old = out[i]
        found = newer.get((old.namespace, old.key))
        if found is None or old.score is None:
            i += 1
            continue
        new, strong = found
        at = next((j for j, h in enumerate(out) if h.namespace == new.namespace and h.key == new.key), None)
        if strong:
            out[i] = replace(old, probably_superseded_by=new.key)
        if at is not None and at < i:
            if strong:
                out[at] = replace(out[at], supersedes=out[at].supersedes or old.key)
            i += 1
            continue
        if at is not None:
            del out[at]
        out.insert(i, replace(new, score=old.score, supersedes=old.key if strong else new.supersedes))
        i += 2
    return out
