"""The stage-2 action space and how an action is checked and applied to a tree.

| action | effect |
| --- | --- |
| Promote(node) | move the node up to be a child of its grandparent |
| Demote(node, target) | move the node down under one of its sibling aspects |
| Group(facts) | facts sharing one parent get a new aspect (child of that parent) as their parent |
| Idle | do nothing (represented by the absence of an action) |

Promote and Demote normally take facts; with aspect actions switched on (an option of the
decoder and the teachers) they may take an aspect, moving its whole subtree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Union

from ..errors import InvalidOperationError, NodeNotFoundError
from .tree import MembrainTree

ACTION_TYPES: tuple[str, ...] = ("idle", "promote", "demote", "group")
IDLE, PROMOTE, DEMOTE, GROUP = range(4)


@dataclass(frozen=True)
class Promote:
    node_id: str


@dataclass(frozen=True)
class Demote:
    node_id: str
    target_id: str


@dataclass(frozen=True)
class Group:
    node_ids: tuple[str, ...]
    label: str | None = None  # None: named when applied
    # Metadata of the new aspect (e.g. what a teacher means it to stand for); not compared.
    metadata: Mapping[str, Any] | None = field(default=None, compare=False)
    # The new aspect's id (None: a fresh one), so that a later answer of the same batch
    # question can place a fact under it (Learner.settle_batch); not compared.
    aspect_id: str | None = field(default=None, compare=False)


Action = Union[Promote, Demote, Group]


def past_height(tree: Any, group: Group) -> bool:
    """Whether ``group``'s facts share a parent with no room for a new aspect (the tree's
    max_height): a teacher's answer leaves such a group out, and the rest of it stands.
    False when the members do not share one parent or are unknown (validation says why)."""
    try:
        parents = {tree.parent(m) for m in group.node_ids}
    except NodeNotFoundError:
        return False
    return len(parents) == 1 and None not in parents and not tree.has_room(parents.pop(), 2)


def validate_action(tree: MembrainTree, action: Action, *, allow_aspects: bool = False) -> None:
    """Raise InvalidOperationError unless ``action`` can be applied to ``tree`` now."""
    if isinstance(action, Promote):
        kind = tree.node(action.node_id).kind
        if kind != "fact" and not (allow_aspects and kind == "aspect"):
            raise InvalidOperationError(f"cannot promote a {kind}")
        parent = tree.parent(action.node_id)
        if parent is None or tree.parent(parent) is None:
            raise InvalidOperationError(f"{action.node_id!r} has no grandparent")
    elif isinstance(action, Demote):
        kind = tree.node(action.node_id).kind
        if kind != "fact" and not (allow_aspects and kind == "aspect"):
            raise InvalidOperationError(f"cannot demote a {kind}")
        target = tree.node(action.target_id)
        if target.kind != "aspect" or action.target_id == action.node_id:
            raise InvalidOperationError(f"demote target {action.target_id!r} is not an aspect")
        if tree.parent(action.target_id) != tree.parent(action.node_id):
            raise InvalidOperationError(f"demote target {action.target_id!r} is not a sibling")
        if kind == "aspect" and not tree.has_room(action.target_id, tree.levels_below(action.node_id)):
            raise InvalidOperationError(f"demoting {action.node_id!r} would pass max_height")
    elif isinstance(action, Group):
        ids = action.node_ids
        if len(ids) < 2 or len(set(ids)) != len(ids):
            raise InvalidOperationError("a group needs at least two distinct facts")
        if any(tree.node(i).kind != "fact" for i in ids):
            raise InvalidOperationError("only facts can be grouped")
        parents = {tree.parent(i) for i in ids}
        parent = parents.pop() if len(parents) == 1 else None
        if parent is None:  # a fact always has a parent: None here means several
            raise InvalidOperationError("grouped facts must share one parent")
        if not tree.has_room(parent, 2):
            raise InvalidOperationError("a new aspect there would pass max_height")
    else:
        raise InvalidOperationError(f"unknown action {action!r}")


def apply_action(
    tree: MembrainTree,
    action: Action,
    *,
    name_aspect: Callable[[list[str]], str] | None = None,
    embed_label: Callable[[str], object] | None = None,
    allow_aspects: bool = False,
) -> str | None:
    """Validate then apply one action; return the new aspect's id for a Group, else None.

    A Group without a label is named by ``name_aspect(fact_texts)``; ``embed_label`` gives
    the new aspect's label embedding.
    """
    validate_action(tree, action, allow_aspects=allow_aspects)
    if isinstance(action, Promote):
        tree.promote(action.node_id)
    elif isinstance(action, Demote):
        tree.demote(action.node_id, action.target_id)
    else:
        label = action.label
        if not label:
            texts = [tree.node(i).text for i in action.node_ids]
            label = name_aspect(texts) if name_aspect else "group"
        emb = embed_label(label) if embed_label else None
        return tree.group(action.node_ids, label, embedding=emb, node_id=action.aspect_id,
                          metadata=None if action.metadata is None else dict(action.metadata))
    return None


def apply_actions(tree: MembrainTree, actions: list[Action], **kwargs) -> tuple[list[Action], list[tuple[Action, str]]]:
    """Apply a series in order, re-validating each against the tree as it is then.

    Returns (applied, skipped) where skipped pairs an action with the reason it no longer
    applied (it breaks a precondition, or names a node that is gone); a skipped action
    changes nothing.
    """
    applied: list[Action] = []
    skipped: list[tuple[Action, str]] = []
    for action in actions:
        try:
            apply_action(tree, action, **kwargs)
        except (InvalidOperationError, NodeNotFoundError) as exc:
            skipped.append((action, str(exc)))
        else:
            applied.append(action)
    return applied, skipped
