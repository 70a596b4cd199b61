"""The membrain tree: one subject's memories as root, aspects and facts.

Definitions (README, Concepts):

- The **root** is the subject; **aspects** are inner nodes (sub-topics); **facts** are the
  memories and are always leaves. Every non-root node has exactly one parent.
- The **two-layer subtree** of a node ``n`` is ``n`` followed by its children.
- The **closure** of a fact ``f`` is ``f``, its siblings, its parent, the parent's siblings
  (the *uncles*) and the grandparent; when the parent is the root (no grandparent) it is
  ``f``, its siblings and its parent.
- The **archive** holds what left the tree without being lost (README, Memories that
  change): *history* entries (a fact superseded by an UPDATE or invalidated by a DELETE,
  with its text, times and the key of what replaced it) and *ignored* entries (items the
  memory operation judged not to be memories). Archived entries are not part of the graph:
  no stage, feature or search sees them unless asked; storage keeps them as rows of kind
  ``history``/``ignored`` whose parent is the root, written in the same transaction as the
  tree change that produced them.

A tree may carry a **height bound**, ``max_height``: no write creates an aspect, or moves
one, where facts would then lie more than ``max_height`` levels below the root. It bounds
growth and is not an invariant: branches already deeper (a tree written under another bound)
are kept as they are.

Every write checks its preconditions first and raises a :class:`~.errors.MembrainError`
subclass before touching anything, so a failed write leaves the tree exactly as it was.
Each node keeps the sum and count of the embeddings of the facts below it, updated along
one root path per write, so an aspect's mean embedding costs O(depth) to keep current.
"""

from __future__ import annotations

import gc
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal, Sequence

import networkx as nx
import numpy as np

from .errors import DimensionError, InvalidOperationError, InvariantError, MembrainError, NodeNotFoundError

NodeKind = Literal["root", "aspect", "fact", "history", "ignored"]
Role = Literal["self", "sibling", "parent", "uncle", "grandparent"]

ROOT_ID = "root"
SERIAL_VERSION = 1
ARCHIVE_KINDS = ("history", "ignored")
#: The metadata key of an archived entry that holds its history record (see :func:`history_of`).
HISTORY_KEY = "history"
#: The metadata key of a current fact that holds the time its version became valid (set by
#: an UPDATE; a fact never updated is valid from its ``created_at``).
VALID_FROM_KEY = "valid_from"


@dataclass(slots=True)
class Node:
    """One node of the tree. ``text`` is the fact text, the aspect label or the subject.
    Slotted, without a ``__dict__``: a process holds one per memory of each loaded namespace."""

    id: str
    kind: NodeKind
    text: str
    embedding: np.ndarray | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    metadata: dict[str, Any] = field(default_factory=dict)
    # Sum (float64 above a fact, to avoid drift) and count of the embeddings of the facts at
    # or below this node; a fact's sum is its own embedding (the same array). Maintained by
    # MembrainTree only, which never writes an array in place once a node holds it.
    emb_sum: np.ndarray | None = field(default=None, repr=False)
    emb_count: int = 0
    n_facts: int = 0  # facts at or below this node, embedded or not
    seq: int = 0  # order among siblings: set on every attach or move (persisted)

    @property
    def mean_embedding(self) -> np.ndarray | None:
        """Mean embedding of the facts below (a fact: its own embedding); None if none."""
        if self.emb_count == 0 or self.emb_sum is None:
            return None
        return (self.emb_sum / self.emb_count).astype(np.float32)


def _node_copy(node: Node) -> Node:
    """A copy of ``node`` with its own metadata dict; its arrays are shared (a tree replaces
    an array, never writes one in place). Field by field, without dataclasses.replace's
    per-call checks: a tree copy makes one per node."""
    n = node
    return Node(n.id, n.kind, n.text, n.embedding, n.created_at, n.updated_at, dict(n.metadata), n.emb_sum,
                n.emb_count, n.n_facts, n.seq)


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


def _as_vector(embedding: Any, dim: int | None) -> np.ndarray | None:
    if embedding is None:
        return None
    try:
        vec = np.asarray(embedding, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise DimensionError(f"embedding is not a numeric vector: {exc}") from None
    if vec.ndim != 1 or vec.size == 0:
        raise DimensionError(f"embedding must be a non-empty 1-d vector, got shape {vec.shape}")
    if dim is not None and vec.size != dim:
        raise DimensionError(f"embedding has {vec.size} dimensions, the tree uses {dim}")
    if not np.isfinite(vec).all():
        raise DimensionError("embedding contains NaN or infinity")
    return vec.copy()


def check_max_height(max_height: Any) -> int | None:
    """``max_height`` as given, or InvalidOperationError unless it is None or an int >= 1."""
    if max_height is None:
        return None
    if isinstance(max_height, bool) or not isinstance(max_height, int) or max_height < 1:
        raise InvalidOperationError(f"max_height must be None or an int >= 1, not {max_height!r}")
    return max_height


def _check_text(text: Any, what: str) -> str:
    if not isinstance(text, str):
        raise InvalidOperationError(f"{what} must be a str, got {type(text).__name__}")
    return text


class MembrainTree:
    """A tree of memories for one subject, backed by a :class:`networkx.DiGraph`.

    Edges go parent -> child; children keep the order in which they were attached.
    """

    def __init__(self, subject: str = "", *, root_id: str = ROOT_ID, dim: int | None = None,
                 max_height: int | None = None, clock: Callable[[], float] = time.time):
        # What stamps created_at / updated_at / archive times (seconds since the epoch): the
        # wall clock, or a caller's (tests, replays of dated data).
        self.clock = clock
        self.graph: nx.DiGraph = nx.DiGraph()
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
        self.graph.add_node(root_id, node=Node(root_id, "root", _check_text(subject, "subject"), None, now, now))

    # ------------------------------------------------------------------ reads
    @property
    def subject(self) -> str:
        return self.node(self.root_id).text

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.graph

    def __len__(self) -> int:
        return self.graph.number_of_nodes()

    def node(self, node_id: str) -> Node:
        try:
            # networkx's own node dict, not the ``nodes`` view: read hundreds of times per insert
            return self.graph._node[node_id]["node"]
        except (KeyError, TypeError):
            raise NodeNotFoundError(f"no node {node_id!r} in the tree") from None

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
        label = _check_text(label, "aspect label")
        vec = _as_vector(embedding, self.dim)
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
        text = _check_text(text, "fact text")
        vec = _as_vector(embedding, self.dim)
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
        label = _check_text(label, "aspect label")
        vec = _as_vector(embedding, self.dim)
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
        if text is not None:
            _check_text(text, "fact text")
        vec = _as_vector(embedding, self.dim)
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
        label = _check_text(label, "aspect label")
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidOperationError("metadata must be a dict")
        vec = _as_vector(embedding, self.dim)
        self._claim_dim(vec)
        node.text = label
        if vec is not None:
            node.embedding = vec
        if metadata is not None:
            node.metadata = dict(metadata)
        node.updated_at = self.clock()
        self._touch(aspect_id)

    # ---------------------------------------------------------------- archive
    def archived(self, kind: str | None = None) -> list[Node]:
        """Archived entries (``"history"``, ``"ignored"`` or both), oldest first."""
        return sorted((n for n in self.archive.values() if kind is None or n.kind == kind),
                      key=lambda n: (n.updated_at, n.seq))

    def history(self, key: str) -> list[Node]:
        """The archived versions of the fact ``key`` (superseded or deleted), oldest first."""
        return [n for n in self.archived("history") if n.metadata.get(HISTORY_KEY, {}).get("key") == key]

    def former_versions(self, keys: Iterable[str]) -> dict[str, list[Node]]:
        """For each of ``keys`` that has some: the archived versions its current fact
        superseded (UPDATEs since the key was last deleted, if ever), oldest first. One pass
        over the archive, for search to credit a fact with what its old versions said."""
        wanted = set(keys)
        found: dict[str, list[Node]] = {}
        for entry in self.archive.values():
            key = entry.metadata.get(HISTORY_KEY, {}).get("key") if entry.kind == "history" else None
            if key in wanted:
                found.setdefault(key, []).append(entry)
        out = {}
        for key, entries in found.items():
            entries.sort(key=lambda n: n.seq)
            deletes = [i for i, n in enumerate(entries) if n.metadata[HISTORY_KEY].get("operation") != "update"]
            chain = entries[deletes[-1] + 1:] if deletes else entries
            if chain:
                out[key] = chain
        return out

    def purge_archived(self, entry_ids: Iterable[str]) -> None:
        """Forget archived entries for good (the tree and its current facts are untouched).
        NodeNotFoundError, before anything changes, for an id that is not archived."""
        entry_ids = list(dict.fromkeys(entry_ids))
        missing = [e for e in entry_ids if e not in self.archive]
        if missing:
            raise NodeNotFoundError(f"not archived: {missing[0]!r}")
        for entry_id in entry_ids:
            del self.archive[entry_id]
            self._forget(entry_id)
        if entry_ids:
            self._touch()

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
        _check_text(text, "fact text")
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidOperationError("metadata must be a dict")
        _as_vector(embedding, self.dim)  # checked before anything changes
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

    def log_ignored(self, node_id: str | None, text: str, *, embedding: Any = None,
                    metadata: dict[str, Any] | None = None, reason: str = "ignore") -> str:
        """Keep an item that is not a memory in the namespace's log (not the tree)."""
        text = _check_text(text, "text")
        vec = _as_vector(embedding, self.dim)
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidOperationError("metadata must be a dict")
        node_id = self._new_id(node_id, "i")
        self._claim_dim(vec)
        now = self.clock()
        meta = {**dict(metadata or {}), HISTORY_KEY: {"key": node_id, "operation": reason}}
        self.archive[node_id] = Node(node_id, "ignored", text, vec, now, now, meta, seq=self._next_seq())
        self._touch(node_id)
        return node_id

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

    def _forget(self, node_id: str) -> None:
        self._dirty.pop(node_id, None)
        self._removed[node_id] = None

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
            root = self.node(self.root_id)
            root.text = _check_text(root_row["text"], "subject")
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
                self.graph.nodes[nid]["node"] = node  # children edges stay
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
        depth: dict[str, int] = {}
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
        for nid in stale:
            depth[nid] = len(self.path(nid))
        for nid in sorted(stale, key=depth.__getitem__, reverse=True):  # children before parents
            node = self.node(nid)
            n_facts, count, total = 0, 0, None
            for child in self.graph.successors(nid):
                c = self.node(child)
                n_facts += c.n_facts
                if c.emb_count:
                    assert c.emb_sum is not None  # a node with embedded facts below has their sum
                    count += c.emb_count
                    total = c.emb_sum.astype(np.float64) if total is None else total + c.emb_sum
            node.n_facts, node.emb_count, node.emb_sum = n_facts, count, total
        # Siblings in ``seq`` order, as from_rows builds them. Attaching in seq order
        # already gives it when the writers caught up before writing (they do: under the
        # namespace lock); this pass keeps it for any other log, at O(siblings).
        for parent in reordered:
            self._sort_children(parent)

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
            anc = self.node(cur)
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
        node = self.node(node_id)
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

    # ---------------------------------------------------------- serialisation
    def copy(self) -> "MembrainTree":
        """An independent copy: same ids, texts, order, sums and version, an empty change
        journal. Writes to either tree never show in the other. O(n); the embedding and sum
        arrays are shared, not copied, since a tree replaces them and never writes one in
        place.

        Used to let a slow reader (an LLM teacher auditing an earlier insert) work on a
        frozen view while the tree itself keeps taking writes.
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
        out.archive = {k: _node_copy(n) for k, n in self.archive.items()}
        # The graph's adjacency is built as networkx's DiGraph lays it out (_node, _succ is
        # _adj, _pred sharing each edge's data dict) rather than through add_node/add_edge
        # and their per-call checks. Dicts keep insertion order, so sibling order is kept.
        src = self.graph
        succ: dict[str, dict[str, dict]] = {u: {v: {} for v in nbrs} for u, nbrs in src._succ.items()}
        pred: dict[str, dict[str, dict]] = {v: {} for v in succ}
        for u, nbrs in succ.items():
            for v, data in nbrs.items():
                pred[v][u] = data
        graph = nx.DiGraph()
        graph._node = {nid: {"node": _node_copy(data["node"])} for nid, data in src._node.items()}
        graph._adj = graph._succ = succ
        graph._pred = pred
        out.graph = graph
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-compatible snapshot (nodes in pre-order, children in order)."""
        nodes = [self.node_row(nid) for nid in nx.dfs_preorder_nodes(self.graph, self.root_id)]
        nodes += [self.node_row(nid) for nid in self.archive]
        return {"format": SERIAL_VERSION, "root_id": self.root_id, "dim": self.dim, "nodes": nodes}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "MembrainTree":
        """Rebuild a tree written by :meth:`to_dict`; raises InvariantError if malformed."""
        if not isinstance(data, dict) or data.get("format") != SERIAL_VERSION:
            raise InvariantError(f"unknown tree format {getattr(data, 'get', lambda k: None)('format')!r}")
        try:
            return cls.from_rows(data["nodes"], dim=data.get("dim"))
        except KeyError as exc:
            raise InvariantError(f"malformed tree data: missing {exc}") from None

    @classmethod
    def from_rows(cls, rows: Iterable[dict[str, Any]], *, dim: int | None = None) -> "MembrainTree":
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
            tree = cls(_check_text(root["text"], "subject"), root_id=root["id"], dim=dim)
            rnode = tree.node(tree.root_id)
            rnode.created_at, rnode.updated_at = root["created_at"], root["updated_at"]
            rnode.metadata = dict(root["metadata"] or {})
            by_parent: dict[str, list[dict[str, Any]]] = {}
            archived = [r for r in rows if r["kind"] in ARCHIVE_KINDS]
            for r in rows:
                if r is not root and r["kind"] not in ARCHIVE_KINDS:
                    by_parent.setdefault(r["parent"], []).append(r)
            order = [tree.root_id]  # parents before children
            for parent in order:
                for row in sorted(by_parent.get(parent, ()), key=lambda r: r.get("seq", 0)):
                    node = tree._node_from_row(row)
                    if node.id in tree.graph:
                        raise InvariantError(f"node id {node.id!r} appears twice")
                    if tree.node(parent).kind == "fact":
                        raise InvariantError(f"fact {parent!r} has children")
                    tree.graph.add_node(node.id, node=node)
                    tree.graph.add_edge(parent, node.id)
                    tree._seq = max(tree._seq, node.seq)
                    order.append(node.id)
            if len(order) + len(archived) != len(rows):
                raise InvariantError(f"{len(rows) - len(order) - len(archived)} rows are not connected to the root")
            for row in sorted(archived, key=lambda r: r.get("seq", 0)):
                node = tree._node_from_row(row)
                if node.id in tree.graph or node.id in tree.archive:
                    raise InvariantError(f"node id {node.id!r} appears twice")
                tree.archive[node.id] = node
                tree._seq = max(tree._seq, node.seq)
            for nid in reversed(order[1:]):  # children before parents: sums bottom-up
                node = tree.node(nid)
                above = tree.node(next(iter(tree.graph.predecessors(nid))))
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

    def _node_from_row(self, row: dict[str, Any]) -> Node:
        """A detached node from a serialised row (its sums hold only itself)."""
        kind = row["kind"]
        if kind not in ("fact", "aspect", *ARCHIVE_KINDS):
            raise InvariantError(f"unexpected node kind {kind!r}")
        nid = row["id"]
        if not isinstance(nid, str) or not nid:
            raise InvariantError("node ids must be non-empty strings")
        vec = _as_vector(row["embedding"], self.dim)
        self._claim_dim(vec)
        node = Node(nid, kind, _check_text(row["text"], "node text"), vec, float(row["created_at"]),
                    float(row["updated_at"]), dict(row["metadata"] or {}), seq=int(row.get("seq", 0)))
        if kind == "fact":
            node.n_facts = 1
            if vec is not None:
                node.emb_sum, node.emb_count = vec, 1
        return node

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

