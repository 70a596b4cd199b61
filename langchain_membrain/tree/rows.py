"""A tree as rows: the unit storage backends persist, and a tree rebuilt from them.

A **row** is one node (or archived entry) as a JSON-compatible dict: ``id``, ``kind``,
``text``, ``parent`` (an archived entry's is the root), ``seq`` (its order among its
siblings), ``embedding``, ``created_at``, ``updated_at``, ``metadata``. A tree journals the
ids it writes and removes; a backend that persists those rows and removals (one transaction
per drain) keeps an exact copy, from which :meth:`TreeRows.from_rows` rebuilds the tree and
with which :meth:`TreeRows.apply_rows` brings another process's copy up to date.

:class:`TreeRows` is that side of :class:`~.tree.MembrainTree` (its base class), kept
apart from the tree's reads and writes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, TypeVar

import networkx as nx
import numpy as np

from ..errors import InvariantError, MembrainError
from .cow import CowGraph
from .nodes import ARCHIVE_KINDS, Node, as_vector, check_text

SERIAL_VERSION = 1

TreeT = TypeVar("TreeT", bound="TreeRows")


class TreeRows:
    """The rows side of :class:`~.tree.MembrainTree`: rows of its nodes, its change journal
    drained as rows, rows applied, a tree rebuilt from rows or from :meth:`to_dict`."""

    # What MembrainTree provides (tree.py); declared here for the type checker.
    graph: CowGraph
    root_id: str
    dim: int | None
    version: int
    archive: dict[str, Node]
    _seq: int
    _dirty: dict[str, None]
    _removed: dict[str, None]

    if TYPE_CHECKING:
        def __init__(self, subject: str = "", *, root_id: str = ..., dim: int | None = None) -> None: ...

        def node(self, node_id: str) -> Node: ...

        def parent(self, node_id: str) -> str | None: ...

        def path(self, node_id: str) -> list[str]: ...

        def _claim_dim(self, vec: np.ndarray | None) -> None: ...

        def _add_to_ancestors(self, node_id: str, sign: int) -> None: ...

        def _writable(self, node_id: str) -> Node: ...

    def node_row(self, node_id: str) -> dict[str, Any]:
        """One node (or archived entry, whose parent is the root) as a JSON-compatible row
        (the unit that storage backends persist)."""
        archived = self.archive.get(node_id)
        n = archived if archived is not None else self.node(node_id)
        return {
            "id": n.id,
            "kind": n.kind,
            "text": n.text,
            "parent": self.root_id if archived is not None else self.parent(node_id),
            "seq": n.seq,
            "embedding": None if n.embedding is None else n.embedding.tolist(),
            "created_at": n.created_at,
            "updated_at": n.updated_at,
            "metadata": n.metadata,
        }

    @property
    def unwritten(self) -> bool:
        """Whether the tree holds changes :meth:`drain_changes` has not returned yet."""
        return bool(self._dirty or self._removed)

    def drain_changes(self) -> tuple[list[dict[str, Any]], list[str]]:
        """Rows written and ids removed since the last drain, then forget them.

        A backend that persists both (in one transaction) keeps an exact copy of the tree.
        """
        rows = [self.node_row(i) for i in sorted(self._dirty) if i in self.graph or i in self.archive]
        removed = sorted(self._removed)
        self._dirty, self._removed = {}, {}
        return rows, removed

    def apply_rows(self, rows: Iterable[dict[str, Any]], removed: Iterable[str] = ()) -> None:
        """Bring this tree up to date with changes another copy of it made: ``rows`` it wrote
        and ids it ``removed`` (what that copy's :meth:`drain_changes` returned, or several
        such drains merged in order: a later row replaces an earlier one, a removal drops
        it). Afterwards this tree equals one rebuilt with :meth:`from_rows` from the other
        copy's rows (same nodes, parents, sibling order, sums).

        Cost: O(changed rows x depth) plus the children of each container whose sums
        changed, not O(tree). Removed ids not in the tree are ignored (created and removed
        elsewhere meanwhile). Applied changes are not journalled (:meth:`drain_changes`
        does not return them: they are stored already).

        Raises InvariantError when the changes do not fit this tree (a parent that does not
        exist, a fact with children, a cycle, a node left without a parent, a changed kind);
        the tree may then be half-updated and must be rebuilt from storage.
        """
        rows, removed = list(rows), list(removed)
        archived = [r for r in rows if r["kind"] in ARCHIVE_KINDS]
        try:
            self._apply_rows([r for r in rows if r["kind"] not in ARCHIVE_KINDS],
                             [r for r in removed if r in self.graph])
            self._apply_archive(archived, [r for r in removed if r in self.archive])
        except InvariantError:
            raise
        except MembrainError as exc:
            raise InvariantError(f"changes do not apply: {exc}") from None
        except (KeyError, IndexError, TypeError, ValueError, AttributeError, nx.NetworkXError) as exc:
            raise InvariantError(f"changes do not apply: {exc!r}") from None

    def _apply_archive(self, rows: list[dict[str, Any]], removed: list[str]) -> None:
        """The archive's part of :meth:`apply_rows`: history and ignored entries (rows of
        those kinds) join it, removed ones leave it; an entry never shares an id with a
        node of the tree."""
        for nid in removed:
            del self.archive[nid]
        for row in sorted(rows, key=lambda r: r.get("seq", 0)):
            node = self._node_from_row(row)
            if node.id in self.graph:
                raise InvariantError(f"{node.id!r} is both in the tree and archived")
            self.archive[node.id] = node
            self._seq = max(self._seq, node.seq)

    def _apply_rows(self, rows: list[dict[str, Any]], removed: list[str]) -> None:
        root_row = None
        incoming: dict[str, tuple[Node, str]] = {}
        for row in rows:  # parse and check every row before touching the tree
            if row["kind"] == "root":
                if row["id"] != self.root_id or row["parent"] is not None:
                    raise InvariantError(f"a second root {row['id']!r}")
                root_row = row
                continue
            node = self._node_from_row(row)
            if node.id in incoming or node.id == self.root_id:
                raise InvariantError(f"node id {node.id!r} appears twice")
            if not isinstance(row["parent"], str):
                raise InvariantError(f"node {node.id!r} has no parent")
            incoming[node.id] = (node, row["parent"])
        if self.root_id in removed:
            raise InvariantError("the root cannot be removed")
        if not removed and all(node.kind == "fact" and nid not in self.graph for nid, (node, _) in incoming.items()):
            self._attach_new_facts(incoming)  # another process's adds: O(new facts x depth)
        else:
            self._apply_nodes(incoming, removed)
        if root_row is not None:
            root = self._writable(self.root_id)
            root.text = check_text(root_row["text"], "subject")
            root.created_at, root.updated_at = float(root_row["created_at"]), float(root_row["updated_at"])
            root.metadata = dict(root_row["metadata"] or {})
        if incoming:
            self._seq = max(self._seq, max(node.seq for node, _ in incoming.values()))
        self.version += 1

    def _attach_new_facts(self, incoming: dict[str, tuple[Node, str]]) -> None:
        """The part of :meth:`_apply_rows` for changes that only add facts new to this tree
        (what another process's ``add()`` logs): each is attached to its parent, last among
        its siblings unless its seq says otherwise, and counted on its ancestors (as
        :meth:`add_fact` does), without recomputing any container from all its children."""
        attach = sorted((node.seq, nid, parent) for nid, (node, parent) in incoming.items())
        added: dict[str, int] = {}  # parent -> facts attached to it here
        for _, nid, parent in attach:
            if parent not in self.graph or self.node(parent).kind == "fact":
                raise InvariantError(f"node {nid!r} is attached to {parent!r}, which is not a root or aspect")
        for _, nid, parent in attach:
            self.graph.add_node(nid, node=incoming[nid][0])
            self.graph.add_edge(parent, nid)
            added[parent] = added.get(parent, 0) + 1
            self._add_to_ancestors(nid, +1)
        for parent, k in added.items():
            # The new facts came last and in seq order: the siblings stay in seq order
            # when the last one before them has a lower seq (else sort them, as below).
            kids = list(self.graph.successors(parent))
            if len(kids) > k and self.node(kids[-k - 1]).seq > self.node(kids[-k]).seq:
                self._sort_children(parent)

    def _sort_children(self, parent: str) -> None:
        """Put a container's children in ``seq`` order, as :meth:`from_rows` builds them."""
        kids = list(self.graph.successors(parent))
        seqs = [self.node(k).seq for k in kids]
        if any(a > b for a, b in zip(seqs, seqs[1:])):
            kids.sort(key=lambda k: self.node(k).seq)
            self.graph.remove_edges_from([(parent, k) for k in kids])
            self.graph.add_edges_from([(parent, k) for k in kids])

    def _apply_nodes(self, incoming: dict[str, tuple[Node, str]], removed: list[str]) -> None:
        """The general part of :meth:`_apply_rows`: nodes replaced, moved, added or removed,
        and the counts and sums of every container they touch recomputed from its children."""
        # Containers whose counts and sums may change: the old ancestors of every node
        # that goes or moves (now), and the new ones (after the changes).
        stale: set[str] = set()

        def mark_ancestors(nid: str) -> None:
            cur = self.parent(nid)
            while cur is not None and cur not in stale:
                stale.add(cur)
                cur = self.parent(cur)

        for nid in removed:
            mark_ancestors(nid)
        for nid in incoming:
            if nid in self.graph:
                mark_ancestors(nid)
        orphans: set[str] = set()
        for nid in removed:
            orphans.update(self.graph.successors(nid))
            self.graph.remove_node(nid)
        stale.difference_update(removed)
        attach: list[tuple[int, str, str]] = []
        for nid, (node, parent) in incoming.items():
            if nid in self.graph:
                old = self.node(nid)
                if old.kind != node.kind:
                    raise InvariantError(f"node {nid!r} changed kind from {old.kind} to {node.kind}")
                self.graph.add_node(nid, node=node)  # replaces the record; children edges stay
                old_parent = self.parent(nid)
                if old_parent == parent and old.seq == node.seq:
                    continue  # same place among the same siblings
                # A new seq under the same parent: it moved away and back meanwhile, so
                # it now sorts after its siblings; re-attaching it puts it there.
                if old_parent is not None:
                    self.graph.remove_edge(old_parent, nid)
            else:
                self.graph.add_node(nid, node=node)
            attach.append((node.seq, nid, parent))
        attach.sort()
        reordered: set[str] = set()
        for _, nid, parent in attach:
            if parent not in self.graph or self.node(parent).kind == "fact":
                raise InvariantError(f"node {nid!r} is attached to {parent!r}, which is not a root or aspect")
            self.graph.add_edge(parent, nid)
            reordered.add(parent)
        for nid in orphans:
            if nid in self.graph and self.parent(nid) is None:
                raise InvariantError(f"node {nid!r} lost its parent")
        limit = len(self.graph)
        for nid in incoming:  # walk each changed node up to the root: no cycle, new ancestors
            path: list[str] = []
            cur: str | None = nid
            while cur is not None and cur != self.root_id:
                path.append(cur)
                cur = self.parent(cur)
                if cur is None or len(path) > limit:
                    raise InvariantError(f"node {nid!r} is not connected to the root")
            stale.update(path[1:])
            stale.add(self.root_id)
            if self.node(nid).kind == "aspect":
                stale.add(nid)  # a replaced aspect record: its sums are recomputed
        self._recount(stale)
        # Siblings in ``seq`` order, as from_rows builds them. Attaching in seq order
        # already gives it when the writers caught up before writing (they do: under the
        # namespace lock); this pass keeps it for any other log, at O(siblings).
        for parent in reordered:
            self._sort_children(parent)

    def _recount(self, containers: set[str]) -> None:
        """Recompute the fact count and embedding sum and count of each of ``containers``
        from its children's, children before parents (so a container below another in the
        set is current when its parent sums it)."""
        depth = {nid: len(self.path(nid)) for nid in containers}
        for nid in sorted(containers, key=depth.__getitem__, reverse=True):
            node = self._writable(nid)
            n_facts, count, total = 0, 0, None
            for child in self.graph.successors(nid):
                c = self.node(child)
                n_facts += c.n_facts
                if c.emb_count:
                    assert c.emb_sum is not None  # a node with embedded facts below has their sum
                    count += c.emb_count
                    total = c.emb_sum.astype(np.float64) if total is None else total + c.emb_sum
            node.n_facts, node.emb_count, node.emb_sum = n_facts, count, total

    def to_dict(self) -> dict[str, Any]:
        """A JSON-compatible snapshot (nodes in pre-order, children in order)."""
        nodes = [self.node_row(nid) for nid in nx.dfs_preorder_nodes(self.graph, self.root_id)]
        nodes += [self.node_row(nid) for nid in self.archive]
        return {"format": SERIAL_VERSION, "root_id": self.root_id, "dim": self.dim, "nodes": nodes}

    @classmethod
    def from_dict(cls: type[TreeT], data: dict[str, Any]) -> TreeT:
        """Rebuild a tree written by :meth:`to_dict`; raises InvariantError if malformed."""
        if not isinstance(data, dict) or data.get("format") != SERIAL_VERSION:
            raise InvariantError(f"unknown tree format {getattr(data, 'get', lambda k: None)('format')!r}")
        try:
            return cls.from_rows(data["nodes"], dim=data.get("dim"))
        except KeyError as exc:
            raise InvariantError(f"malformed tree data: missing {exc}") from None

    @classmethod
    def from_rows(cls: type[TreeT], rows: Iterable[dict[str, Any]], *, dim: int | None = None) -> TreeT:
        """Rebuild a tree from :meth:`node_row` rows in any order (siblings ordered by
        ``seq``). Raises InvariantError if the rows do not form a valid tree.

        Built in bulk (sums computed bottom-up once), so loading is O(n), not O(n * depth).
        """
        try:
            rows = list(rows)
            roots = [r for r in rows if r["kind"] == "root"]
            if len(roots) != 1 or roots[0]["parent"] is not None:
                raise InvariantError("the rows must hold exactly one root, without a parent")
            root = roots[0]
            tree = cls(check_text(root["text"], "subject"), root_id=root["id"], dim=dim)
            rnode = tree.node(tree.root_id)  # a new tree: it shares nothing, owns every record
            rnode.created_at, rnode.updated_at = root["created_at"], root["updated_at"]
            rnode.metadata = dict(root["metadata"] or {})
            by_parent: dict[str, list[dict[str, Any]]] = {}
            archived = [r for r in rows if r["kind"] in ARCHIVE_KINDS]
            for r in rows:
                if r is not root and r["kind"] not in ARCHIVE_KINDS:
                    by_parent.setdefault(r["parent"], []).append(r)
            vectors = tree._stacked_vectors(rows)
            graph = tree.graph
            placed = [(rnode, rnode)]  # (node, its parent), parents before children
            for parent_node, _ in placed:
                children = by_parent.get(parent_node.id)
                if not children:
                    continue
                if parent_node.kind == "fact":
                    raise InvariantError(f"fact {parent_node.id!r} has children")
                children.sort(key=_seq_of)
                nodes = [tree._node_from_row(row, vectors) for row in children]
                for node in nodes:
                    if node.id in graph:
                        raise InvariantError(f"node id {node.id!r} appears twice")
                    graph.add_node(node.id, node=node)
                graph.add_edges_from((parent_node.id, node.id) for node in nodes)
                tree._seq = max(tree._seq, max(node.seq for node in nodes))
                placed.extend((node, parent_node) for node in nodes)
            if len(placed) + len(archived) != len(rows):
                raise InvariantError(f"{len(rows) - len(placed) - len(archived)} rows are not connected to the root")
            for row in sorted(archived, key=_seq_of):
                node = tree._node_from_row(row, vectors)
                if node.id in tree.graph or node.id in tree.archive:
                    raise InvariantError(f"node id {node.id!r} appears twice")
                tree.archive[node.id] = node
                tree._seq = max(tree._seq, node.seq)
            for node, above in reversed(placed[1:]):  # children before parents: sums bottom-up
                above.n_facts += node.n_facts
                if node.emb_count:
                    assert node.emb_sum is not None  # a node with embedded facts below has their sum
                    if above.emb_sum is None:
                        above.emb_sum = node.emb_sum.astype(np.float64)  # a copy, its own buffer
                    else:
                        above.emb_sum += node.emb_sum  # the parent's own buffer: safe in place
                    above.emb_count += node.emb_count
        except InvariantError:
            raise
        except MembrainError as exc:
            raise InvariantError(f"malformed tree data: {exc}") from None
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise InvariantError(f"malformed tree data: {exc!r}") from None
        tree.version = 0
        tree._dirty, tree._removed = {}, {}
        return tree

    def _stacked_vectors(self, rows: list[dict[str, Any]]) -> dict[int, np.ndarray]:
        """The rows' embeddings checked together (as :func:`as_vector` checks one) and copied
        into one matrix: ``id(row)`` -> its row of that matrix, for the rows that have one.
        {} when they are not all finite vectors of one size (each is then checked alone, and
        the first bad one named)."""
        given = [r for r in rows if r["embedding"] is not None]
        if not given:
            return {}
        try:
            mat = np.array([r["embedding"] for r in given], dtype=np.float32)
        except (TypeError, ValueError):
            return {}
        if mat.ndim != 2 or mat.shape[1] == 0 or (self.dim is not None and mat.shape[1] != self.dim) \
                or not np.isfinite(mat).all():
            return {}
        self._claim_dim(mat[0])
        # Views of one matrix: nothing changes a node's vector in place (a write replaces it).
        return {id(r): v for r, v in zip(given, mat)}

    def _node_from_row(self, row: dict[str, Any], vectors: dict[int, np.ndarray] | None = None) -> Node:
        """A detached node from a serialised row (its sums hold only itself); ``vectors``:
        embeddings checked already (:meth:`_stacked_vectors`)."""
        kind = row["kind"]
        if kind not in ("fact", "aspect", *ARCHIVE_KINDS):
            raise InvariantError(f"unexpected node kind {kind!r}")
        nid = row["id"]
        if not isinstance(nid, str) or not nid:
            raise InvariantError("node ids must be non-empty strings")
        vec = vectors.get(id(row)) if vectors else None
        if vec is None:
            vec = as_vector(row["embedding"], self.dim)
            self._claim_dim(vec)
        node = Node(nid, kind, check_text(row["text"], "node text"), vec, float(row["created_at"]),
                    float(row["updated_at"]), dict(row["metadata"] or {}), seq=int(row.get("seq", 0)))
        if kind == "fact":
            node.n_facts = 1
            if vec is not None:
                node.emb_sum, node.emb_count = vec, 1
        return node


def _seq_of(row: dict[str, Any]) -> int:
    """A row's order among its siblings (0 when it has none)."""
    return row.get("seq", 0)
