"""TopicTeacher: a teacher that knows which topic each fact is about (evaluation only).

It stands in for an LLM that knows topics, as the WordNet :class:`~.oracle.OracleTeacher`
stands in for one that knows a taxonomy. It reads the data's labels at the teacher boundary
only: ``paths`` maps each fact's exact text to its label path (a topic, then optionally a
subtopic, then deeper labels). Nothing else in the product sees them.

Definitions (``path(f)``: the label path of fact ``f``; an unknown text has the empty path):

- **stands for**: an aspect at depth ``d`` stands for the path of ``d`` labels shared by a
  strict majority of the facts below it (a topic at depth 1, a subtopic at depth 2) — as an
  LLM reads what an aspect holds, whoever created it; the root stands for the empty path. Aspects the teacher creates are named after the label
  they stand for, so a student reading labels sees the topic's name.
- **belongs**: fact ``f`` belongs under node ``n`` when ``stands(n)`` is a prefix of
  ``path(f)``.

Rules:

- stage 1 (descent): go into the child aspect whose stands-for path is the longest prefix of
  ``path(f)`` longer than the current node's; else attach here;
- stage 2, for each fact ``x`` directly under the new fact's parent ``P``:
  Promote(x) when ``x`` does not belong under ``P`` (``P`` an aspect); else Demote(x, S) into
  the sibling aspect ``S`` that ``x`` belongs under (the deepest); the facts left that share
  the next label below ``stands(P)`` are grouped — at the top level as soon as two share a
  topic, deeper only once ``P`` holds more than ``split_after`` facts (a topic gets
  sub-aspects once it has grown past a few facts, as an LLM would split a crowded topic);
- naming: the label the grouped facts share (underscores read as spaces).

``max_levels`` bounds how many aspect levels the teacher builds (the product's height
minus one: ``max_height=4`` leaves room for three); ``from_oracle_rows`` cuts WordNet
ancestries to that many classes below the file's top node (the oracle's taxonomy bounded to
the product's height).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable, Mapping, Sequence

from ..teachers.base import BaseTeacher, sequential_placements
from ..tree.actions import Action, Demote, Group, Promote
from ..tree.placement import NewFact, Placement, Subtree
from ..tree.tree import Closure, MembrainTree

__all__ = ["TopicTeacher"]

Path = tuple[str, ...]


def _is_prefix(prefix: Path, path: Path) -> bool:
    return len(prefix) <= len(path) and path[: len(prefix)] == prefix


class TopicTeacher(BaseTeacher):
    """Places facts by their known label paths (module docstring).

    Args:
        paths: fact text -> label path (topic, then subtopic, ...).
        split_after: facts an aspect below the top level must hold before its facts are
            grouped by their next label.
        max_levels: aspect levels built at most (None: as deep as the paths go).
    """

    name = "topics"
    fast = True

    def __init__(self, paths: Mapping[str, Sequence[str]], *, split_after: int = 4,
                 max_levels: int | None = 3):
        self._paths: dict[str, Path] = {}
        for text, path in paths.items():
            if not isinstance(text, str) or isinstance(path, str):
                raise TypeError("paths maps a fact's text to a sequence of labels")
            labels = tuple(str(p) for p in path if str(p).strip())
            self._paths[text] = labels[:max_levels] if max_levels is not None else labels
        self.split_after = int(split_after)

    @classmethod
    def from_oracle_rows(cls, rows: Iterable[Mapping[str, Any]], *, levels: int = 3,
                         split_after: int = 4) -> "TopicTeacher":
        """The WordNet oracle's classes as label paths, cut to ``levels`` classes below the
        common top node (rows as ``bench hierarchy`` reads them: ``text`` and ``path``, the
        ancestors' names from the top down)."""
        rows = list(rows)
        paths = {str(r["text"]): [str(p) for p in (r.get("path") or [])] for r in rows}
        tops = {tuple(p[:1]) for p in paths.values() if p}
        skip = 1 if len(tops) == 1 else 0  # the file's single top node is the root itself
        return cls({t: p[skip: skip + levels] for t, p in paths.items()}, split_after=split_after,
                   max_levels=levels)

    def path_of(self, text: str) -> Path:
        """The label path of a fact text (empty when unknown)."""
        return self._paths.get(text, ())

    # --------------------------------------------------------------- what a node holds
    def stands(self, tree: MembrainTree, node_id: str) -> Path:
        """The label path of the node's level (an aspect at depth ``d`` stands for a path of
        ``d`` labels) shared by a strict majority of the facts below it; ``()`` for the root
        and for an aspect no such path is the majority of."""
        node = tree.node(node_id)
        if node.kind != "aspect":
            return ()
        depth = tree.depth(node_id)
        paths = [self.path_of(tree.node(f).text) for f in tree.facts_below(node_id)]
        if not paths:
            return ()
        label, n = Counter(p[:depth] for p in paths).most_common(1)[0]
        return label if len(label) == depth and 2 * n > len(paths) else ()

    def place_batch(self, facts: Sequence[tuple[str, NewFact]], tree: MembrainTree) -> list[Placement]:
        """The batch question (one question: the teacher stands for an LLM shown all the
        facts in one request), answered fact by fact; see ``sequential_placements``."""
        return sequential_placements(self, facts, tree)

    # ------------------------------------------------------------------ stage 1
    def choose_stage1(self, new_fact: NewFact, subtree: Subtree) -> int:
        """The candidate aspect whose stands-for path is the longest prefix of the fact's."""
        path = self.path_of(new_fact.text)
        here = len(self.stands(subtree.tree, subtree.candidates[0]))
        best_i, best_len = 0, here
        for i, cand in enumerate(subtree.candidates[1:], start=1):
            s = self.stands(subtree.tree, cand)
            if len(s) > best_len and _is_prefix(s, path):
                best_i, best_len = i, len(s)
        return best_i

    # ------------------------------------------------------------------ stage 2
    def choose_stage2(self, tree: MembrainTree, closure: Closure) -> list[Action]:
        """Promote facts that do not belong here, Demote them into the sibling aspect they
        belong under, Group those left by their next label."""
        parent = closure.parent_id
        is_aspect = tree.node(parent).kind == "aspect"
        here = self.stands(tree, parent)
        if is_aspect and not here:  # a mixed aspect: nothing here can be said about it
            return []
        siblings = [(self.stands(tree, a), a) for a in tree.child_aspects(parent)]
        actions: list[Action] = []
        groups: dict[Path, list[str]] = {}
        for x in tree.child_facts(parent):
            path = self.path_of(tree.node(x).text)
            if not path:
                continue
            if is_aspect and not _is_prefix(here, path):
                if tree.parent(parent) is not None:
                    actions.append(Promote(x))
                continue
            target = max(((len(s), a) for s, a in siblings if s and len(s) > len(here) and _is_prefix(s, path)),
                         default=None)
            if target is not None:
                actions.append(Demote(x, target[1]))
            elif len(path) > len(here):
                groups.setdefault(path[: len(here) + 1], []).append(x)
        crowded = not is_aspect or tree.fact_count(parent) > self.split_after
        if crowded:
            for label, members in groups.items():
                if len(members) >= 2:
                    actions.append(Group(tuple(members), label=self.label(label)))
        return actions

    # ------------------------------------------------------------------- naming
    @staticmethod
    def label(path: Path) -> str:
        """The name of the aspect standing for ``path``: its last label, as words."""
        return path[-1].replace("_", " ") if path else "group"

    def name_aspect(self, fact_texts: list[str]) -> str:
        """The deepest label shared by all the texts (``"group"`` when none is)."""
        paths = [self.path_of(t) for t in fact_texts]
        common: Path = ()
        if paths and all(paths):
            for depth in range(1, min(len(p) for p in paths) + 1):
                if len({p[:depth] for p in paths}) != 1:
                    break
                common = paths[0][:depth]
        return self.label(common)
