"""The membrain tree: one subject's memories as root, aspects and facts.

Definitions (README, Concepts):

- The **root** is the subject; **aspects** are inner nodes (sub-topics); **facts** are the
  memories and are always leaves. Every non-root node has exactly one parent.
- The reads of its shape (paths, depths, the two-layer subtree of a node, the closure of a
  fact) are the base class :class:`~.shape.TreeShape`.
- The **archive** holds what left the tree without being lost (README, Memories that
  change): *history* entries (a fact superseded by an UPDATE or invalidated by a DELETE,
  with its text, times and the key of what replaced it) and *ignored* entries (items the
  memory operation judged not to be memories), and raw inputs and working summaries
  (:mod:`.tree_archive`). Archived entries are not part of the graph: no stage, feature or
  search sees them unless asked; storage keeps them as rows of their kind whose parent is the
  root, written in the same transaction as the tree change that produced them.

A tree may carry a **height bound**, ``max_height``: no write creates an aspect, or moves
one, where facts would then lie more than ``max_height`` levels below the root. It bounds
growth and is not an invariant: branches already deeper (a tree written under another bound)
are kept as they are.

Every write checks its preconditions first and raises a :class:`~.errors.MembrainError`
subclass before touching anything, so a failed write leaves the tree exactly as it was.
Each node keeps the sum and count of the embeddings of the facts below it, updated along
one root path per write, so an aspect's mean embedding costs O(depth) to keep current.

The node record is :class:`~.nodes.Node`; the tree as rows (what storage persists, a tree
rebuilt from them, another copy's changes applied) is the base class :class:`~.tree_rows.TreeRows`.
"""

from __future__ import annotations

import gc
import time
import uuid
from typing import Any, Callable, Sequence

import networkx as nx
import numpy as np

from ..errors import InvalidOperationError, InvariantError, NodeNotFoundError
from .archive import HISTORY_KEY as HISTORY_KEY  # public names of this module
from .archive import TreeArchive
from .archive import working_id as working_id
from .cow import CowGraph
from .kinds import VALID_TIME_KEY
from .nodes import ARCHIVE_KINDS, Node, as_vector, check_text, copy_node
from .nodes import NodeKind as NodeKind  # re-exported, as SERIAL_VERSION: public names of this module
from .rows import SERIAL_VERSION as SERIAL_VERSION
from .rows import TreeRows
from .shape import Closure as Closure  # public names of this module
from .shape import ClosureMember as ClosureMember
from .shape import Role as Role
from .shape import TreeShape

ROOT_ID = "root"
#: The metadata key of a current fact that holds the time its version became valid (set by
#: an UPDATE; a fact never updated is valid from its ``created_at``).
VALID_FROM_KEY = "valid_from"


def stated_valid_time(node: Node) -> tuple[float | None, float | None]:
    """The interval a current fact is known to hold: the one a forming teacher gave it
    (``kinds.VALID_TIME_KEY``), its start else the time of its last UPDATE; None where unknown
    (a fact never updated and given no time has only its creation time)."""
    start, end = node.metadata.get(VALID_TIME_KEY) or (None, None)
    if start is None and VALID_FROM_KEY in node.metadata:
        start = float(node.metadata[VALID_FROM_KEY])
    return start, end


def check_max_height(max_height: Any) -> int | None:
    """``max_height`` as given, or InvalidOperationError unless it is None or an int >= 1."""
    if max_height is None:
        return None
    if isinstance(max_height, bool) or not isinstance(max_height, int) or max_height < 1:
        raise InvalidOperationError(f"max_height must be None or an int >= 1, not {max_height!r}")
    return max_height


class MembrainTree(TreeShape, TreeArchive, TreeRows):
    """A tree of memories for one subject, backed by a :class:`networkx.DiGraph`.

    Edges go parent -> child; children keep the order in which they were attached.
    """

    def __init__(self, subject: str = "", *, root_id: str = ROOT_ID, dim: int | None = None,
                 max_height: int | None = None, clock: Callable[[], float] = time.time):
        # What stamps created_at / updated_at / archive times (seconds since the epoch): the
        # wall clock, or a caller's (tests, replays of dated data).
        self.clock = clock
        self.graph: CowGraph = CowGraph()
        self.root_id = root_id
        self.dim = dim
        self.max_height = check_max_height(max_height)
        self.version = 0  # bumped by every successful write
        self._seq = 0
        # Change journal for storage backends: ids written or removed since the last drain
        # (dicts as sets: an empty set takes 216 bytes, an empty dict 64, in every tree).
        self._dirty: dict[str, None] = {root_id: None}
        self._removed: dict[str, None] = {}
        self.archive: dict[str, Node] = {}  # history and ignored entries, in insertion order
        now = self.clock()
        self.graph.add_node(root_id, node=Node(root_id, "root", check_text(subject, "subject"), None, now, now))

    def node(self, node_id: str) -> Node:
        """The record of ``node_id``; NodeNotFoundError if the tree has none."""
        try:
            # networkx's own node dict, not the ``nodes`` view: read hundreds of times per insert
            return self.graph._node[node_id]["node"]
        except (KeyError, TypeError):
            raise NodeNotFoundError(f"no node {node_id!r} in the tree") from None

    # ----------------------------------------------------------------- writes
    def add_aspect(
        self,
        parent_id: str,
        label: str,
        *,
        node_id: str | None = None,
        embedding: Any = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Add an (empty) aspect under a root or aspect; its ``embedding`` is its label's.
        Refused where its facts would be deeper than ``max_height``."""
        self._require_container(parent_id)
        self._require_room(parent_id, 2)
        label = check_text(label, "aspect label")
        vec = as_vector(embedding, self.dim)
        node_id = self._new_id(node_id, "a")
        self._claim_dim(vec)
        now = self.clock()
        node = Node(node_id, "aspect", label, vec, now, now, dict(metadata or {}), seq=self._next_seq())
        self.graph.add_node(node_id, node=node)
        self.graph.add_edge(parent_id, node_id)
        self._touch(node_id)
        return node_id

    def add_fact(
        self,
        parent_id: str,
        text: str,
        *,
        embedding: Any = None,
        node_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        created_at: float | None = None,
    ) -> str:
        """Attach a new fact (a leaf) under a root or aspect."""
        self._require_container(parent_id)
        text = check_text(text, "fact text")
        vec = as_vector(embedding, self.dim)
        node_id = self._new_id(node_id, "f")
        self._claim_dim(vec)
        now = self.clock()
        created = now if created_at is None else float(created_at)
        node = Node(node_id, "fact", text, vec, created, now, dict(metadata or {}), n_facts=1,
                    seq=self._next_seq())
        if vec is not None:
            node.emb_sum, node.emb_count = vec, 1
        self.graph.add_node(node_id, node=node)
        self.graph.add_edge(parent_id, node_id)
        self._add_to_ancestors(node_id, +1)
        self._touch(node_id)
        return node_id

    def promote(self, node_id: str) -> None:
        """Move a fact (or an aspect with its subtree) up to be a child of its grandparent."""
        node = self.node(node_id)
        if node.kind == "root":
            raise InvalidOperationError("the root cannot be promoted")
        parent = self.parent(node_id)
        grandparent = None if parent is None else self.parent(parent)
        if parent is None or grandparent is None:
            raise InvalidOperationError(f"{node_id!r} has no grandparent to be promoted to")
        self._move(node_id, grandparent)

    def demote(self, node_id: str, aspect_id: str) -> None:
        """Move a fact (or an aspect with its subtree) under one of its sibling aspects."""
        node = self.node(node_id)
        target = self.node(aspect_id)
        if node.kind == "root":
            raise InvalidOperationError("the root cannot be demoted")
        if target.kind != "aspect":
            raise InvalidOperationError(f"demote target {aspect_id!r} is a {target.kind}, not an aspect")
        if aspect_id == node_id or self.parent(aspect_id) != self.parent(node_id):
            raise InvalidOperationError(f"demote target {aspect_id!r} is not a sibling of {node_id!r}")
        if node.kind == "aspect":
            self._require_room(aspect_id, self.levels_below(node_id))
        self._move(node_id, aspect_id)

    def group(
        self,
        fact_ids: Sequence[str],
        label: str,
        *,
        node_id: str | None = None,
        embedding: Any = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Put two or more facts sharing one parent under a new aspect of that parent."""
        ids = list(fact_ids)
        if len(ids) < 2 or len(set(ids)) != len(ids):
            raise InvalidOperationError("group needs at least two distinct facts")
        for fid in ids:
            if self.node(fid).kind != "fact":
                raise InvalidOperationError(f"group members must be facts; {fid!r} is not")
        parents = {self.parent(fid) for fid in ids}
        if len(parents) != 1:
            raise InvalidOperationError("grouped facts must share one parent")
        parent = parents.pop()
        assert parent is not None  # facts always have a parent
        self._require_room(parent, 2)
        label = check_text(label, "aspect label")
        vec = as_vector(embedding, self.dim)
        if node_id is not None and node_id in self.graph:
            raise InvalidOperationError(f"node id {node_id!r} is already used")
        aspect = self.add_aspect(parent, label, node_id=node_id, embedding=vec, metadata=metadata)
        for fid in ids:
            self._move(fid, aspect, prune=False)
        return aspect

    def move(self, node_id: str, parent_id: str) -> None:
        """Re-attach a fact or aspect (with its subtree) under any root or aspect that is
        not inside it. Used to re-place a fact when the teacher disagrees later."""
        node = self.node(node_id)
        if node.kind == "root":
            raise InvalidOperationError("the root cannot be moved")
        self._require_container(parent_id)
        if parent_id == node_id or node_id in self.path(parent_id):
            raise InvalidOperationError(f"cannot move {node_id!r} under itself")
        if node.kind == "aspect":
            self._require_room(parent_id, self.levels_below(node_id))
        if self.parent(node_id) != parent_id:
            self._move(node_id, parent_id)

    def remove(self, node_id: str) -> None:
        """Remove a fact; aspects it leaves empty are removed too (never the root)."""
        node = self.node(node_id)
        if node.kind != "fact":
            raise InvalidOperationError(f"only facts can be removed; {node_id!r} is a {node.kind}")
        parent = self.parent(node_id)
        self._add_to_ancestors(node_id, -1)
        self.graph.remove_node(node_id)
        self._forget(node_id)
        self._prune_empty(parent)
        self._touch()

    def update_fact(
        self,
        fact_id: str,
        *,
        text: str | None = None,
        embedding: Any = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        """Change a fact's text, embedding and/or metadata (metadata is replaced whole)."""
        node = self.node(fact_id)
        if node.kind != "fact":
            raise InvalidOperationError(f"{fact_id!r} is a {node.kind}, not a fact")
        node = self._writable(fact_id)
        if text is not None:
            check_text(text, "fact text")
        vec = as_vector(embedding, self.dim)
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidOperationError("metadata must be a dict")
        if vec is not None:
            self._claim_dim(vec)
            self._add_to_ancestors(fact_id, -1)
            node.embedding = vec
            node.emb_sum, node.emb_count = vec, 1
            self._add_to_ancestors(fact_id, +1)
        if text is not None:
            node.text = text
        if metadata is not None:
            node.metadata = dict(metadata)
        node.updated_at = self.clock()
        self._touch(fact_id)

    def set_label(self, aspect_id: str, label: str, *, embedding: Any = None,
                  metadata: dict[str, Any] | None = None) -> None:
        """Rename an aspect (and optionally replace its label embedding and metadata)."""
        node = self.node(aspect_id)
        if node.kind != "aspect":
            raise InvalidOperationError(f"{aspect_id!r} is a {node.kind}, not an aspect")
        label = check_text(label, "aspect label")
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidOperationError("metadata must be a dict")
        vec = as_vector(embedding, self.dim)
        self._claim_dim(vec)
        node = self._writable(aspect_id)
        node.text = label
        if vec is not None:
            node.embedding = vec
        if metadata is not None:
            node.metadata = dict(metadata)
        node.updated_at = self.clock()
        self._touch(aspect_id)

    # ---------------------------------------------------------------- archive
    def valid_from(self, fact_id: str) -> float:
        """When the current version of a fact became valid (its last UPDATE, else its creation)."""
        node = self.node(fact_id)
        return float(node.metadata.get(VALID_FROM_KEY, node.created_at))

    def supersede(self, fact_id: str, text: str, *, embedding: Any = None,
                  metadata: dict[str, Any] | None = None, when: float | None = None,
                  source: str | None = None) -> str:
        """UPDATE: archive the current version of ``fact_id`` as history and put the new
        version (``text``, ``embedding``, ``metadata``) in its place, under the same key and
        parent. Returns the archived entry's id. ``source`` is the key of the item that
        brought the new version (recorded on the archived entry)."""
        node = self.node(fact_id)
        if node.kind != "fact":
            raise InvalidOperationError(f"{fact_id!r} is a {node.kind}, not a fact")
        check_text(text, "fact text")
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidOperationError("metadata must be a dict")
        as_vector(embedding, self.dim)  # checked before anything changes
        now = self.clock() if when is None else float(when)
        entry = self._archive_version(fact_id, "update", now, superseded_by=fact_id, source=source)
        meta = dict(node.metadata if metadata is None else metadata)
        meta[VALID_FROM_KEY] = now
        self.update_fact(fact_id, text=text, embedding=embedding, metadata=meta)
        return entry

    def retire(self, fact_id: str, *, superseded_by: str | None = None, when: float | None = None) -> str:
        """DELETE: archive ``fact_id`` as invalid from ``when`` (now) and remove it from the
        tree (aspects it leaves empty go too). ``superseded_by``: the key of the item that
        retracted it, when that item was stored. Returns the archived entry's id."""
        node = self.node(fact_id)
        if node.kind != "fact":
            raise InvalidOperationError(f"only facts can be retired; {fact_id!r} is a {node.kind}")
        now = self.clock() if when is None else float(when)
        entry = self._archive_version(fact_id, "delete", now, superseded_by=superseded_by, source=superseded_by)
        self.remove(fact_id)
        return entry

    def _archive_version(self, fact_id: str, operation: str, when: float, *, superseded_by: str | None,
                         source: str | None) -> str:
        node = self.node(fact_id)
        n = 1 + sum(1 for e in self.archive.values() if e.metadata.get(HISTORY_KEY, {}).get("key") == fact_id)
        entry_id = f"{fact_id}@v{n}"
        while entry_id in self.graph or entry_id in self.archive:
            n += 1
            entry_id = f"{fact_id}@v{n}"
        meta = {k: v for k, v in node.metadata.items() if k != VALID_FROM_KEY}
        meta[HISTORY_KEY] = {
            "key": fact_id, "operation": operation,
            "valid_from": self.valid_from(fact_id), "valid_to": when,
            "superseded_by": superseded_by, "source": source,
            "path": [self.node(a).text for a in self.path(fact_id)[1:-1]],
        }
        self.archive[entry_id] = Node(entry_id, "history", node.text, node.embedding, node.created_at, when,
                                      meta, seq=self._next_seq())
        self._touch(entry_id)
        return entry_id

    # -------------------------------------------------------------- internals
    def _touch(self, node_id: str | None = None) -> None:
        self.version += 1
        if node_id is not None:
            self._dirty[node_id] = None
            self._removed.pop(node_id, None)

    def _writable(self, node_id: str) -> Node:
        """``node_id``'s record, this tree's own (:meth:`CowGraph.own`): every write to a
        node's fields goes through it, so a copy sharing the record never sees the write."""
        self.graph.own(node_id)
        return self.node(node_id)

    def _forget(self, node_id: str) -> None:
        self._dirty.pop(node_id, None)
        self._removed[node_id] = None

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _new_id(self, node_id: str | None, prefix: str) -> str:
        if node_id is None:
            return f"{prefix}-{uuid.uuid4().hex}"
        if not isinstance(node_id, str) or not node_id:
            raise InvalidOperationError("node ids must be non-empty strings")
        if node_id in self.graph or node_id in self.archive:
            raise InvalidOperationError(f"node id {node_id!r} is already used")
        return node_id

    def _claim_dim(self, vec: np.ndarray | None) -> None:
        if vec is not None and self.dim is None:
            self.dim = int(vec.size)

    def _require_room(self, parent_id: str, levels: int) -> None:
        if not self.has_room(parent_id, levels):
            raise InvalidOperationError(
                f"{levels} more level(s) below {parent_id!r} (depth {self.depth(parent_id)}) would make the "
                f"tree deeper than max_height={self.max_height}")

    def _require_container(self, node_id: str) -> None:
        if self.node(node_id).kind == "fact":
            raise InvalidOperationError(f"{node_id!r} is a fact; facts are always leaves")

    def _add_to_ancestors(self, node_id: str, sign: int) -> None:
        """Add (sign=+1) or subtract (sign=-1) the subtree of ``node_id`` (its fact count,
        embedding sum and count) on every proper ancestor: O(depth)."""
        node = self.node(node_id)
        cur = self.parent(node_id)
        while cur is not None:
            anc = self._writable(cur)
            anc.n_facts += sign * node.n_facts
            if node.emb_count:
                assert node.emb_sum is not None  # a node with embedded facts below has their sum
                if anc.emb_sum is None:
                    anc.emb_sum = np.zeros(node.emb_sum.shape, dtype=np.float64)
                anc.emb_sum = anc.emb_sum + sign * node.emb_sum
                anc.emb_count += sign * node.emb_count
                if anc.emb_count == 0:
                    anc.emb_sum = None  # exact zero: no rounding residue left behind
            cur = self.parent(cur)

    def _move(self, node_id: str, new_parent: str, *, prune: bool = True) -> None:
        node = self._writable(node_id)
        old_parent = self.parent(node_id)
        self._add_to_ancestors(node_id, -1)
        self.graph.remove_edge(old_parent, node_id)
        self.graph.add_edge(new_parent, node_id)
        self._add_to_ancestors(node_id, +1)
        node.updated_at = self.clock()
        node.seq = self._next_seq()
        if prune:
            self._prune_empty(old_parent)
        self._touch(node_id)

    def _prune_empty(self, node_id: str | None) -> None:
        while node_id is not None and self.node(node_id).kind == "aspect" and not self.children(node_id):
            up = self.parent(node_id)
            self.graph.remove_node(node_id)
            self._forget(node_id)
            node_id = up

    # ----------------------------------------------------------------- copies
    def copy(self) -> "MembrainTree":
        """An independent copy: same ids, texts, order, sums and version, an empty change
        journal. Writes to either tree never show in the other.

        Copy-on-write (:mod:`.cow`): the two trees share every node's record, and each
        copies a node's record before its first write to it, so a copy costs three pointer
        copies of the graph's outer dicts and one of the archive's (no per-node object) and
        each later write O(records it touches). Archived entries are shared as they are: a
        tree adds, replaces and removes them, never writes one.

        Used to let a slow reader (an LLM teacher auditing an earlier insert, a stage-2
        question) work on a frozen view while the tree itself keeps taking writes.
        """
        out = MembrainTree.__new__(MembrainTree)
        out.root_id, out.dim, out.version, out._seq = self.root_id, self.dim, self.version, self._seq
        out.max_height, out.clock = self.max_height, self.clock
        out._dirty, out._removed = {}, {}
        out.archive = dict(self.archive)
        out.graph = self.graph.cow_copy()
        return out

    def deep_copy(self) -> "MembrainTree":
        """An independent copy made node by node (what :meth:`copy` did before it was
        copy-on-write): O(n), sharing nothing with this tree but the embedding and sum
        arrays (a tree replaces them and never writes one in place). Kept as the reference
        :meth:`copy` is tested and measured against.
        """
        # Thousands of small dicts in a row trigger the cyclic garbage collector again and
        # again, and each of its full passes walks every object alive: that, not the copying,
        # was most of the time (a copy creates no cycle that needs collecting meanwhile).
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._copy()
        finally:
            if collecting:
                gc.enable()

    def _copy(self) -> "MembrainTree":
        out = MembrainTree.__new__(MembrainTree)
        out.root_id, out.dim, out.version, out._seq = self.root_id, self.dim, self.version, self._seq
        out.max_height, out.clock = self.max_height, self.clock
        out._dirty, out._removed = {}, {}
        out.archive = {k: copy_node(n) for k, n in self.archive.items()}
        # The graph's adjacency is built as networkx's DiGraph lays it out (_node, _succ is
        # _adj, _pred sharing each edge's data dict) rather than through add_node/add_edge
        # and their per-call checks. Dicts keep insertion order, so sibling order is kept.
        src = self.graph
        succ: dict[str, dict[str, dict]] = {u: {v: {} for v in nbrs} for u, nbrs in src._succ.items()}
        pred: dict[str, dict[str, dict]] = {v: {} for v in succ}
        for u, nbrs in succ.items():
            for v, data in nbrs.items():
                pred[v][u] = data
        graph = CowGraph()
        graph._node = {nid: {"node": copy_node(data["node"])} for nid, data in src._node.items()}
        graph._adj = graph._succ = succ
        graph._pred = pred
        out.graph = graph
        return out

    # ------------------------------------------------------------- invariants
    def check_invariants(self, *, atol: float = 1e-5) -> None:
        """Raise InvariantError on any violation of the tree's invariants:

        one root with no parent; every other node has exactly one parent; it is a tree
        (connected, acyclic) reached from the root; facts are leaves; embeddings share one
        dimension; each node's embedding count is the number of embedded facts below it and
        its mean is the mean of their embeddings (within ``atol``).
        """
        g = self.graph
        if self.root_id not in g or self.node(self.root_id).kind != "root":
            raise InvariantError("the root is missing")
        if g.in_degree(self.root_id) != 0:
            raise InvariantError("the root has a parent")
        if not nx.is_arborescence(g):
            raise InvariantError("the graph is not a tree rooted at the root")
        for nid, node in g.nodes(data="node"):
            if node is None or node.id != nid:
                raise InvariantError(f"node record of {nid!r} is missing or mislabelled")
            if node.kind == "root" and nid != self.root_id:
                raise InvariantError(f"second root {nid!r}")
            if node.kind == "fact" and g.out_degree(nid) != 0:
                raise InvariantError(f"fact {nid!r} has children")
            if node.embedding is not None and self.dim is not None and node.embedding.size != self.dim:
                raise InvariantError(f"{nid!r} has an embedding of another dimension")
        # Recompute every node's fact count and embedding sum from scratch, bottom-up.
        counts: dict[str, int] = {}
        embedded: dict[str, int] = {}
        sums: dict[str, np.ndarray | None] = {}
        for nid in nx.dfs_postorder_nodes(g, self.root_id):
            node = self.node(nid)
            if node.kind == "fact":
                counts[nid], embedded[nid] = 1, int(node.embedding is not None)
                sums[nid] = None if node.embedding is None else node.embedding.astype(np.float64)
                continue
            kids = list(g.successors(nid))
            counts[nid] = sum(counts[k] for k in kids)
            embedded[nid] = sum(embedded[k] for k in kids)
            parts = [part for part in (sums[k] for k in kids) if part is not None]
            total = sums[nid] = np.sum(parts, axis=0) if parts else None
            if node.n_facts != counts[nid]:
                raise InvariantError(f"{nid!r} counts {node.n_facts} facts below, has {counts[nid]}")
            if node.emb_count != embedded[nid]:
                raise InvariantError(f"{nid!r} counts {node.emb_count} embedded facts, has {embedded[nid]}")
            mean = node.mean_embedding
            if total is not None and (mean is None or not np.allclose(mean, total / embedded[nid], atol=atol)):
                raise InvariantError(f"mean embedding of {nid!r} is stale")
        for aid, entry in self.archive.items():
            if entry.id != aid or entry.kind not in ARCHIVE_KINDS:
                raise InvariantError(f"archived entry {aid!r} is mislabelled")
            if aid in g:
                raise InvariantError(f"{aid!r} is both in the tree and archived")

