"""What supersedes the memories a search returns, placed just before them.

An UPDATE replaces a fact in place, so its old version is no longer searched. But two
statements can both stay current: a teacher answered ADD, the student decided alone, or a
database holds corrections stored before the rule recognised them. For each current fact a
search returns, :func:`superseder` looks among its nearest facts for a newer one that
supersedes it (teachers/supersession.py: a change statement about the same holder, near it)
and :func:`place` puts that one just before it, whatever its own score:

- the newer statement's score becomes the older fact's (it answers what that fact answered),
  so the scores still never rise down the list;
- the older fact stays, marked ``probably_superseded_by`` the newer one's key, and the newer
  one is marked ``supersedes`` the older one's key;
- the list may grow past its limit by the statements placed; nothing is dropped.

Nothing here needs a migration: the relation is read from the stored texts at search time.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from ..teachers.supersession import may_supersede_as_nearest, supersedes
from ..tree.records import MemoryRecord
from ..tree.tree import MembrainTree

#: A fact's superseder is looked for among this many of its nearest facts.
NEIGHBOURS = 6


def superseder(tree: MembrainTree, nearest: Callable[[object, int], list], key: str,
               eligible: Callable[[str], bool]) -> str | None:
    """The newest current fact of ``tree`` stated after fact ``key`` that supersedes it,
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

    best: tuple[tuple[float, float], str] | None = None
    for other, cos in nearest(node.embedding, NEIGHBOURS + 1):
        if other == key or not current(other) or stated(other) <= when or (best is not None and stated(other) <= best[0]):
            continue
        newer = tree.node(other)
        if not supersedes(newer.text, node.text, cos):
            if not may_supersede_as_nearest(newer.text, cos):
                continue
            # Else it may still supersede the fact it is nearest to of all it could: the
            # facts stated before it.
            runner_up = max((c for k, c in nearest(newer.embedding, NEIGHBOURS + 1)
                             if k not in (key, other) and current(k) and stated(k) < stated(other)), default=-1.0)
            if not supersedes(newer.text, node.text, cos, runner_up):
                continue
        best = (stated(other), other)
    return None if best is None else best[1]


def place(hits: list[MemoryRecord], newer: dict[tuple, MemoryRecord]) -> list[MemoryRecord]:
    """``hits`` with each superseding record of ``newer`` ({(namespace, older key): newer
    record}) just before the hit it supersedes (module docstring). A newer record already
    ranked before its older hit stays where it is, marked."""
    out = list(hits)
    i = 0
    while i < len(out):
        old = out[i]
        new = newer.get((old.namespace, old.key))
        if new is None or old.score is None:
            i += 1
            continue
        at = next((j for j, h in enumerate(out) if h.namespace == new.namespace and h.key == new.key), None)
        out[i] = replace(old, probably_superseded_by=new.key)
        if at is not None and at < i:
            out[at] = replace(out[at], supersedes=out[at].supersedes or old.key)
            i += 1
            continue
        if at is not None:
            del out[at]
        out.insert(i, replace(new, score=old.score, supersedes=old.key))
        i += 2
    return out
