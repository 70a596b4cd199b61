"""The joint questions, which show an outline of the whole tree: one-call placement
(:func:`place_messages`), a batch of placements (:func:`place_batch_messages`) and a memory
operation with its placement (:func:`operation_place_messages`), and the outline itself
(:func:`tree_outline`). The rest of the prompts, and the rules they share (data blocks, the
size budget), are in :mod:`.prompts`.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any, Sequence

from ..tree.tree import MembrainTree
from .prompts import (
    ACTIONS_RULES,
    DATA_RULE,
    LABEL_CHARS,
    NEW_TEXT_CHARS,
    QUESTION_BUDGET_CHARS,
    Message,
    candidate_entries,
    data_block,
    json_chars,
    label_path,
    nearest_first,
    shorten,
    similarity,
)

PLACE_SYSTEM = f"""You organise a long-term memory shaped like a tree. The root is the subject; \
aspects are sub-topics of their parent; facts are the memories and are always leaves. A new \
fact (number 0) must be placed. You see an outline of the tree: the root (number 1), the aspects \
with their paths, and a few facts under each node ("under" gives the number of their parent).

In one answer:
1. "parent": the number of the root or aspect the new fact belongs directly under: the \
deepest aspect whose topic covers it, or 1 (the root) when none does.
2. "actions": how to rearrange the neighbourhood once the fact is attached there. Numbers \
refer to the outline; 0 is the new fact, whose parent is then your "parent".

{ACTIONS_RULES}

{DATA_RULE} Schema: {{"parent": <number>, "actions": [...]}}."""


# The joint question's outline, when ``tree_outline`` is called on its own: the entries'
# JSON stops at this many characters. The questions themselves fit their outline into what
# PROMPT_BUDGET_CHARS leaves (place_messages, operation_place_messages).
OUTLINE_BUDGET_CHARS = 24_000
OUTLINE_TOP_ASPECTS = 12  # the root's child aspects shown at most (the most similar first)
OUTLINE_SUB_ASPECTS = 6  # an expanded aspect's child aspects shown at most
OUTLINE_FACT_CHARS = 160  # an outline fact's text, clipped


def tree_outline(tree: MembrainTree, *, max_aspects: int = 200, facts_per_node: int = 5,
                 max_chars: int = OUTLINE_FACT_CHARS, budget_chars: int = OUTLINE_BUDGET_CHARS,
                 near: Any = None, top_aspects: int = OUTLINE_TOP_ASPECTS,
                 sub_aspects: int = OUTLINE_SUB_ASPECTS) -> tuple[list[dict[str, Any]], list[str], bool]:
    """The numbered outline shown by one-call placement, within ``budget_chars`` of JSON.

    What is shown: the root, its direct facts and up to ``top_aspects`` of its child
    aspects; then the shown aspects are expanded one at a time, the one most similar to
    ``near`` (the new fact's embedding; without it, breadth-first) first: its direct facts
    (up to ``facts_per_node``, nearest first, texts clipped to ``max_chars``) and up to
    ``sub_aspects`` of its child aspects (nearest first), until the budget is spent or
    ``max_aspects`` aspects are shown. So the branch nearest the new fact is shown deepest
    and the top level widest. What is left out under a shown node is counted in a
    ``{"kind": "more facts"}`` or ``{"kind": "more aspects"}`` entry.

    An aspect below the top level has a ``path``: the labels from the top level down to it
    (every entry says which node it is ``under``). The
    entries are then written breadth-first in the tree's order (each node followed by its
    shown facts), so a tree that fits is numbered the same whatever the new fact.
    Returns (entries, ids, truncated) where ``ids[k]`` is the node numbered ``k``
    (``ids[0]`` is reserved for the new fact: "") and ``truncated`` says whether anything
    was left out for lack of room.
    """
    choice = _OutlineChoice(tree, max_aspects=max_aspects, facts_per_node=facts_per_node, max_chars=max_chars,
                            budget_chars=budget_chars, near=near, top_aspects=top_aspects, sub_aspects=sub_aspects)
    choice.choose()
    entries, ids = _numbered_outline(tree, choice, max_chars)
    return entries, ids, choice.truncated


def _outline_aspect_entry(tree: MembrainTree, nid: str, num: int, under: int | None) -> dict[str, Any]:
    """The outline entry of the root or an aspect, numbered ``num``, under the node numbered
    ``under`` (None for the root)."""
    node = tree.node(nid)
    entry: dict[str, Any] = {"number": num, "kind": node.kind, "label": shorten(node.text, LABEL_CHARS)}
    path = label_path(tree, nid)[1:]
    if len(path) > 1:  # below the top level: the labels from the top level down to it
        entry["path"] = path
    entry["facts_below"] = tree.fact_count(nid)
    if under is not None:
        entry["under"] = under
    return entry


def _outline_fact_entry(tree: MembrainTree, fid: str, num: int, under: int, max_chars: int) -> dict[str, Any]:
    return {"number": num, "kind": "fact", "under": under, "text": shorten(tree.node(fid).text, max_chars)}


def _entry_size(entry: dict[str, Any]) -> int:
    """Characters an entry takes in the data block."""
    return json_chars(entry) + 4  # ",\n  " between entries


class _OutlineChoice:
    """Which nodes :func:`tree_outline` shows: ``shown_aspects``/``shown_facts`` (container
    -> its child aspects / facts shown), ``marked`` ((container, marker kind) pairs that
    have room for a "more ..." entry) and ``truncated``, chosen by :meth:`choose` within
    ``budget_chars``."""

    BIG = 99_999  # sizes are measured with the widest number an entry may carry

    def __init__(self, tree: MembrainTree, *, max_aspects: int, facts_per_node: int, max_chars: int,
                 budget_chars: int, near: Any, top_aspects: int, sub_aspects: int):
        self.tree, self.near, self.max_chars = tree, near, max_chars
        self.max_aspects, self.facts_per_node, self.budget_chars = max_aspects, facts_per_node, budget_chars
        self.top_aspects, self.sub_aspects = top_aspects, sub_aspects
        self.marker = _entry_size({"kind": "more aspects", "under": self.BIG, "count": self.BIG})
        self.used = _entry_size(_outline_aspect_entry(tree, tree.root_id, self.BIG, None))
        self.truncated = False
        self.shown_facts: dict[str, list[str]] = {}
        self.shown_aspects: dict[str, list[str]] = {}
        self.n_aspects = 0
        self.heap: list[tuple[float, int, str]] = []
        self.marked: set[tuple[str, str]] = set()

    def choose(self) -> None:
        """Expand the root, then the shown aspects, nearest ``near`` first (without it,
        breadth-first), until the budget is spent."""
        self.expand(self.tree.root_id, 0)
        while self.heap:
            _, _, aid = heapq.heappop(self.heap)
            self.expand(aid, self.tree.depth(aid))

    def expand(self, nid: str, depth: int) -> None:
        """Choose a container's child aspects (first: they are where descents go), then its facts."""
        tree, near, big = self.tree, self.near, self.BIG
        room = self.budget_chars - 2 * self.marker
        kids = tree.child_aspects(nid)
        aspects = self.shown_aspects.setdefault(nid, [])
        cap = self.top_aspects if depth == 0 else self.sub_aspects
        for aid in nearest_first(tree, kids, near)[:cap]:
            cost = _entry_size(_outline_aspect_entry(tree, aid, big, big))
            if self.n_aspects >= self.max_aspects or self.used + cost > room:
                self.truncated = True
                break
            self.used += cost
            self.n_aspects += 1
            aspects.append(aid)
            rank = -similarity(tree, aid, near) if near is not None else float(depth + 1)
            heapq.heappush(self.heap, (rank, self.n_aspects, aid))
        if len(kids) > len(aspects) and self.used + self.marker <= self.budget_chars:
            self.used += self.marker
            self.marked.add((nid, "more aspects"))
        facts = self.shown_facts.setdefault(nid, [])
        all_facts = tree.child_facts(nid)
        for fid in nearest_first(tree, all_facts, near)[:self.facts_per_node]:
            cost = _entry_size(_outline_fact_entry(tree, fid, big, big, self.max_chars))
            if self.used + cost > room:
                self.truncated = True
                break
            self.used += cost
            facts.append(fid)
        if len(all_facts) > len(facts) and self.used + self.marker <= self.budget_chars:
            self.used += self.marker
            self.marked.add((nid, "more facts"))


def _numbered_outline(tree: MembrainTree, choice: _OutlineChoice, max_chars: int) -> tuple[list[dict[str, Any]],
                                                                                               list[str]]:
    """The chosen nodes as numbered entries, written breadth-first in the tree's order
    (each node followed by its shown facts and its "more ..." markers), and the ids behind
    the numbers (``ids[0]``, the new fact's number, is "")."""
    ids: list[str] = [""]
    entries: list[dict[str, Any]] = []
    number: dict[str, int] = {}
    queue = deque([tree.root_id])
    while queue:
        nid = queue.popleft()
        number[nid] = len(ids)
        ids.append(nid)
        parent = tree.parent(nid)
        entries.append(_outline_aspect_entry(tree, nid, number[nid], None if parent is None else number[parent]))
        picked = set(choice.shown_facts.get(nid, ()))
        facts = [f for f in tree.child_facts(nid) if f in picked]
        for fid in facts:
            number[fid] = len(ids)
            ids.append(fid)
            entries.append(_outline_fact_entry(tree, fid, number[fid], number[nid], max_chars))
        hidden = len(tree.child_facts(nid)) - len(facts)
        if hidden and (nid, "more facts") in choice.marked:
            entries.append({"kind": "more facts", "under": number[nid], "count": hidden})
        picked = set(choice.shown_aspects.get(nid, ()))
        kids = [a for a in tree.child_aspects(nid) if a in picked]
        queue.extend(kids)
        hidden = len(tree.child_aspects(nid)) - len(kids)
        if hidden and (nid, "more aspects") in choice.marked:
            entries.append({"kind": "more aspects", "under": number[nid], "count": hidden})
    return entries, ids


def _with_outline(system: str, payload: dict[str, Any], tree: MembrainTree, budget_chars: int,
                  **outline: Any) -> tuple[list[Message], list[str]]:
    """The question of ``system`` over ``payload`` and the outline of ``tree`` in what
    ``budget_chars`` leaves after them (``outline``: :func:`tree_outline`'s arguments);
    returns the messages and the outline's ids."""
    room = budget_chars - len(system) - len(data_block({**payload, "outline_truncated": True})) - 8
    entries, ids, truncated = tree_outline(tree, budget_chars=max(room, 0), **outline)
    payload["outline"] = entries
    if truncated:
        payload["outline_truncated"] = True
    return [{"role": "system", "content": system}, {"role": "user", "content": data_block(payload)}], ids


def place_messages(new_text: str, tree: MembrainTree, *, max_aspects: int = 200, facts_per_node: int = 5,
                   max_chars: int = OUTLINE_FACT_CHARS, near: Any = None,
                   budget_chars: int = QUESTION_BUDGET_CHARS) -> tuple[list[Message], list[str]]:
    """The one-call placement question and the ids behind its numbers (``ids[0]`` = new
    fact). Its outline (:func:`tree_outline`) takes what ``budget_chars`` leaves after the
    instructions and the new fact; ``near`` (the new fact's embedding) decides which
    branches it shows."""
    payload: dict[str, Any] = {"subject": shorten(tree.subject, LABEL_CHARS),
                               "new_fact": shorten(new_text, NEW_TEXT_CHARS), "outline": []}
    return _with_outline(PLACE_SYSTEM, payload, tree, budget_chars, max_aspects=max_aspects,
                         facts_per_node=facts_per_node, max_chars=max_chars, near=near)


PLACE_BATCH_SYSTEM = f"""You organise a long-term memory shaped like a tree. The root is the subject; \
aspects are sub-topics of their parent; facts are the memories and are always leaves. Several new \
facts must be placed. You see an outline of the tree (the root is number 1; "under" gives an \
entry's parent) and the new facts, numbered after the outline.

Answer one entry per new fact, in the order shown. Each entry is applied before the next:
1. "parent": the number of the root or outline aspect the fact belongs directly under: the \
deepest aspect whose topic covers it, or 1 (the root) when none does.
2. "actions": how to rearrange that neighbourhood once the fact is attached. They may name \
outline nodes, this fact and new facts already placed. For new facts that share a topic no \
aspect covers, give them the same parent and group them in the actions of the last of them.

{ACTIONS_RULES}

{DATA_RULE} Schema: {{"placements": [{{"fact": <number>, "parent": <number>, "actions": [...]}}, ...]}}."""


def place_batch_messages(new_texts: Sequence[str], tree: MembrainTree, *, max_aspects: int = 200,
                         facts_per_node: int = 5, max_chars: int = OUTLINE_FACT_CHARS, near: Any = None,
                         budget_chars: int = QUESTION_BUDGET_CHARS) -> tuple[list[Message], list[str], int]:
    """The batch question about several new facts and the ids behind the outline's numbers;
    the new facts are numbered from the third value returned, in order. Each new fact is
    clipped to an equal share of a third of ``budget_chars``; the outline takes the rest
    (:func:`tree_outline`, expanded nearest ``near``)."""
    clip = max(80, min(NEW_TEXT_CHARS, budget_chars // 3 // max(len(new_texts), 1)))
    payload: dict[str, Any] = {"subject": shorten(tree.subject, LABEL_CHARS), "outline": [],
                               "new_facts": [{"number": 99_999, "text": shorten(t, clip)} for t in new_texts]}
    room = budget_chars - len(PLACE_BATCH_SYSTEM) - len(data_block({**payload, "outline_truncated": True})) - 8
    entries, ids, truncated = tree_outline(tree, max_aspects=max_aspects, facts_per_node=facts_per_node,
                                           max_chars=max_chars, budget_chars=max(room, 0), near=near)
    payload["outline"] = entries
    first = len(ids)
    for k, entry in enumerate(payload["new_facts"]):
        entry["number"] = first + k
    if truncated:
        payload["outline_truncated"] = True
    return ([{"role": "system", "content": PLACE_BATCH_SYSTEM},
             {"role": "user", "content": data_block(payload)}], ids, first)


OPERATION_PLACE_SYSTEM = f"""You keep a person's long-term memory, shaped like a tree, up to date. \
A new item arrives. You see it, the stored facts most similar to it ("candidates", numbered from \
1), and an outline of the tree (the root is number 1 there, the new item number 0). In one answer:

1. "operation": "ADD" (a new memory that replaces nothing shown), "UPDATE" (a newer version of \
one candidate: "target" is its candidate number; the old one is kept as history), "DELETE" (the \
item says a candidate is no longer true without replacing it: "target" is its number, "keep" \
true when the item itself is worth remembering, as in "our cat died in May"), or "IGNORE" (it \
states nothing worth remembering: a greeting, thanks, small talk, a question alone; an item that \
asks and also says something is a memory). When unsure, "ADD".
2. Only for "ADD", or "DELETE" with "keep" true: "parent", the number in the outline of the \
root or aspect the new fact belongs directly under (the deepest aspect whose topic covers it, \
or 1), and "actions", how to rearrange its neighbourhood once attached (0 is the new fact). \
Otherwise "parent" and "actions" are null.

{ACTIONS_RULES}

{DATA_RULE} Schema: {{"operation": ..., "target": <number or null>, "keep": <bool or null>, \
"parent": <number or null>, "actions": [...] or null}}."""


def operation_place_messages(new_text: str, candidates: list[tuple[str, float]], tree: MembrainTree, *,
                             max_aspects: int = 200, facts_per_node: int = 5, max_chars: int = OUTLINE_FACT_CHARS,
                             near: Any = None, budget_chars: int = QUESTION_BUDGET_CHARS
                             ) -> tuple[list[Message], list[str]]:
    """The one-call question of an insert with a memory operation: the operation question's
    candidates plus the placement outline (what ``budget_chars`` leaves, see
    :func:`place_messages`); returns the messages and the outline's ids."""
    payload: dict[str, Any] = {"subject": shorten(tree.subject, LABEL_CHARS), "new_item": shorten(new_text, 600),
                               "candidates": candidate_entries(candidates, min(max_chars, OUTLINE_FACT_CHARS)),
                               "outline": []}
    return _with_outline(OPERATION_PLACE_SYSTEM, payload, tree, budget_chars, max_aspects=max_aspects,
                         facts_per_node=facts_per_node, max_chars=max_chars, near=near)
