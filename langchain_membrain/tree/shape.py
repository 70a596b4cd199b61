"""The shape of a tree: the reads every stage, feature and search makes of it.

Definitions (README, Concepts):

- The **root** is the subject; **aspects** are inner nodes; **facts** are leaves. Every
  non-root node has exactly one parent, and children keep the order of their attachment.
- The **path** of a node is the ids from the root down to it; its **depth** is the path's
  length less one; the tree's **height** is the largest depth.
- The **two-layer subtree** of a node ``n`` is ``n`` followed by its children.
- The **closure** of a fact ``f`` is ``f``, its siblings, its parent, the parent's siblings
  (the *uncles*) and the grandparent; when the parent is the root (no grandparent) it is
  ``f``, its siblings and its parent.

:class:`TreeShape` reads a :class:`networkx.DiGraph` whose nodes carry a
:class:`~.nodes.Node` under ``"node"`` and whose edges go parent -> child; it never writes.
:class:`~.tree.MembrainTree`, the one writer, is built on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import networkx as nx
import numpy as np

from ..errors import InvalidOperationError
from .nodes import Node

Role = Literal["self", "sibling", "parent", "uncle", "grandparent"]


@dataclass(frozen=True)
class ClosureMember:
    node_id: str
    role: Role


@dataclass(frozen=True)
class Closure:
    """The closure of ``fact_id``: members in a stable order (self, siblings, parent,
    uncles, grandparent), each tagged with its role."""

    fact_id: str
    parent_id: str
    grandparent_id: str | None
    members: tuple[ClosureMember, ...]

    @property
    def node_ids(self) -> list[str]:
        return [m.node_id for m in self.members]

    def role_of(self, node_id: str) -> Role | None:
        for m in self.members:
            if m.node_id == node_id:
                return m.role
        return None


class TreeShape:
    """Reads of a tree's shape: nodes, parents and children, paths, depths and closures."""

    graph: nx.DiGraph
    root_id: str
    max_height: int | None

    if TYPE_CHECKING:  # the writer's, which reads networkx's own node dict
        def node(self, node_id: str) -> Node: ...

    @property
    def subject(self) -> str:
        return self.node(self.root_id).text

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.graph

    def __len__(self) -> int:
        return self.graph.number_of_nodes()

    def parent(self, node_id: str) -> str | None:
        self.node(node_id)
        preds = list(self.graph.predecessors(node_id))
        return preds[0] if preds else None

    def children(self, node_id: str) -> list[str]:
        self.node(node_id)
        return list(self.graph.successors(node_id))

    def child_aspects(self, node_id: str) -> list[str]:
        return [c for c in self.children(node_id) if self.node(c).kind == "aspect"]

    def child_facts(self, node_id: str) -> list[str]:
        return [c for c in self.children(node_id) if self.node(c).kind == "fact"]

    def path(self, node_id: str) -> list[str]:
        """Ids from the root down to ``node_id``, both included."""
        out = [node_id]
        cur = self.parent(node_id)
        while cur is not None:
            out.append(cur)
            cur = self.parent(cur)
        return out[::-1]

    def depth(self, node_id: str) -> int:
        return len(self.path(node_id)) - 1

    def height(self) -> int:
        """Largest depth of any node (0 for a lone root)."""
        lengths = nx.single_source_shortest_path_length(self.graph, self.root_id)
        return max(lengths.values())

    def has_room(self, parent_id: str, levels: int) -> bool:
        """Whether ``levels`` more levels may hang below ``parent_id`` under ``max_height``:
        ``depth(parent_id) + levels <= max_height`` (always, without a bound). A new aspect
        needs two (itself and its facts)."""
        return self.max_height is None or self.depth(parent_id) + levels <= self.max_height

    def levels_below(self, node_id: str) -> int:
        """The levels that ``node_id`` with its subtree takes under a new parent: 1 for a
        fact; for an aspect, counting every aspect inside as needing a level of facts below
        it (empty or not), ``1 + max(d(n) + [n is an aspect])`` over the nodes ``n`` of its
        subtree, ``d`` their depth below ``node_id``."""
        lengths = nx.single_source_shortest_path_length(self.graph, node_id)
        return 1 + max(d + (self.node(n).kind == "aspect") for n, d in lengths.items())

    def facts(self) -> list[str]:
        return [n for n, d in self.graph.nodes(data="node") if d.kind == "fact"]

    def aspects(self) -> list[str]:
        return [n for n, d in self.graph.nodes(data="node") if d.kind == "aspect"]

    def descendants(self, node_id: str) -> list[str]:
        self.node(node_id)
        return list(nx.dfs_preorder_nodes(self.graph, node_id))[1:]

    def facts_below(self, node_id: str) -> list[str]:
        return [n for n in self.descendants(node_id) if self.node(n).kind == "fact"]

    def fact_count(self, node_id: str) -> int:
        """Number of facts at or below ``node_id`` (maintained incrementally)."""
        return self.node(node_id).n_facts

    def mean_embedding(self, node_id: str) -> np.ndarray | None:
        return self.node(node_id).mean_embedding

    def two_layer_subtree(self, node_id: str) -> list[str]:
        """``node_id`` followed by its children, in attachment order."""
        return [node_id, *self.children(node_id)]

    def closure(self, fact_id: str) -> Closure:
        node = self.node(fact_id)
        if node.kind != "fact":
            raise InvalidOperationError(f"a closure is built from a fact; {fact_id!r} is a {node.kind}")
        parent = self.parent(fact_id)
        assert parent is not None
        grandparent = self.parent(parent)
        members = [ClosureMember(fact_id, "self")]
        members += [ClosureMember(s, "sibling") for s in self.children(parent) if s != fact_id]
        members.append(ClosureMember(parent, "parent"))
        if grandparent is not None:
            members += [ClosureMember(u, "uncle") for u in self.children(grandparent) if u != parent]
            members.append(ClosureMember(grandparent, "grandparent"))
        return Closure(fact_id, parent, grandparent, tuple(members))
