"""A directed graph whose copies share their per-node records until one of them writes
(copy-on-write), so that copying a tree costs no per-node work.

A networkx ``DiGraph`` keeps three *outer* dicts keyed by node (``_node``: the node's
attribute dict; ``_succ``: its successors, ``_pred``: its predecessors) whose values are
the node's *records*, themselves dicts. :meth:`CowGraph.cow_copy` copies the three outer dicts
(pointers only: no record, no :class:`~.nodes.Node`) and from then on both graphs **share**
every record. A graph **owns** a node when its records are its own: every node of a graph
that was never copied, and, in a graph that was copied or is a copy, the nodes it has written
since (or added). :meth:`CowGraph.own` makes a node owned by replacing its three records with
copies (the ``Node`` in its attribute dict copied by :func:`~.nodes.copy_node`); a shared
record is never written, by either graph, so neither sees the other's writes.

What must go through :meth:`CowGraph.own` first: every write to a node's records. networkx's
own writes do (``add_node``, ``add_edge``, ``remove_node``, ``remove_edge`` and their
``*_from`` forms, ``clear_edges``: overridden here); a write to a ``Node``'s fields, or to a
node's attribute dict through ``graph.nodes[n]``, is the caller's to route through it
(:meth:`~.tree.MembrainTree._writable`). Edge data dicts are shared and never written (a
tree's edges carry no attributes).
"""

from __future__ import annotations

from typing import Any, Iterable

import networkx as nx

from .nodes import Node, copy_node


class CowGraph(nx.DiGraph):
    """A ``DiGraph`` with copy-on-write copies (module docstring)."""

    def __init__(self, incoming_graph_data: Any = None, **attr: Any):
        # None: nothing is shared (never copied), every node is owned; else the nodes owned.
        self._owned: set[Any] | None = None
        super().__init__(incoming_graph_data, **attr)

    # ------------------------------------------------------------------ copies
    def cow_copy(self) -> "CowGraph":
        """A copy sharing every node's records with this graph, which shares them too from
        now on: O(n) pointer copies of the three outer dicts, no per-node record made."""
        out = type(self)()
        out.graph = dict(self.graph)
        out._node = dict(self._node)
        out._adj = dict(self._succ)  # _adj is _succ in a DiGraph (setting one sets both)
        out._pred = dict(self._pred)
        self._owned, out._owned = set(), set()
        return out

    def own(self, n: Any) -> None:
        """Make ``n``'s records this graph's own (copies of the shared ones) before it
        writes them; nothing when it owns them already or ``n`` is not in the graph."""
        owned = self._owned
        if owned is None or n in owned or n not in self._node:
            return
        self._node[n] = {k: copy_node(v) if isinstance(v, Node) else v for k, v in self._node[n].items()}
        self._succ[n] = dict(self._succ[n])
        self._pred[n] = dict(self._pred[n])
        owned.add(n)

    def _own_all(self, nodes: Iterable[Any]) -> None:
        for n in nodes:
            self.own(n)

    # -------------------------------------------------- networkx's writes, owned first
    def add_node(self, node_for_adding: Any, **attr: Any) -> None:
        new = node_for_adding not in self._node
        self.own(node_for_adding)
        super().add_node(node_for_adding, **attr)
        if new and self._owned is not None:
            self._owned.add(node_for_adding)

    def add_nodes_from(self, nodes_for_adding: Iterable[Any], **attr: Any) -> None:
        for n in nodes_for_adding:
            if isinstance(n, tuple):
                self.add_node(n[0], **{**attr, **n[1]})
            else:
                self.add_node(n, **attr)

    def add_edge(self, u_of_edge: Any, v_of_edge: Any, **attr: Any) -> None:
        self._own_all((u_of_edge, v_of_edge))
        super().add_edge(u_of_edge, v_of_edge, **attr)

    def add_edges_from(self, ebunch_to_add: Iterable[Any], **attr: Any) -> None:
        edges = list(ebunch_to_add)
        if self._owned is not None:
            self._own_all(n for e in edges for n in e[:2])
        super().add_edges_from(edges, **attr)

    def remove_node(self, n: Any) -> None:
        if self._owned is not None and n in self._node:
            self._own_all([*self._succ[n], *self._pred[n]])
            self._owned.discard(n)
        super().remove_node(n)

    def remove_nodes_from(self, nodes: Iterable[Any]) -> None:
        for n in list(nodes):
            if n in self._node:
                self.remove_node(n)

    def remove_edge(self, u: Any, v: Any) -> None:
        self._own_all((u, v))
        super().remove_edge(u, v)

    def remove_edges_from(self, ebunch: Iterable[Any]) -> None:
        edges = list(ebunch)
        if self._owned is not None:
            self._own_all(n for e in edges for n in e[:2])
        super().remove_edges_from(edges)

    def clear_edges(self) -> None:
        self._own_all(list(self._node))
        super().clear_edges()

    def clear(self) -> None:
        super().clear()
        self._owned = None  # nothing left to share
