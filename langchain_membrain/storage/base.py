"""The storage interface every membrain backend implements, and the helpers they share.

A :class:`Storage` persists a forest of :class:`~langchain_membrain.tree.tree.MembrainTree`
(one tree per namespace, a tuple of strings) plus named model checkpoints. It stores
*rows* (:meth:`MembrainTree.node_row`), never trees: the memory drains a tree's changes
after each write and hands them to :meth:`Storage.write`, which commits them in one
transaction together with a bump of the namespace's version.

Concurrency model (the same for every backend):

- ``with storage.namespace_lock(ns):`` opens one transaction that holds the namespace's
  cross-process writer lock. Inside it, :meth:`~Storage.namespace_version`,
  :meth:`~Storage.load_tree` and :meth:`~Storage.write` run in that transaction, so the
  "reload if stale, modify, write" sequence is atomic and serialised against every other
  writer of that namespace. It commits when the outermost block exits normally and rolls
  back (nothing stored) when it raises.
- Outside a lock, each call is its own transaction (a write still takes the namespace
  lock for its own duration, so it serialises with lock holders).
- :meth:`~Storage.namespace_version` is one indexed lookup: the cheap way for a process
  to notice that another one wrote a namespace. A process that holds the namespace asks
  :meth:`~Storage.changes_since` instead: the same one round trip answers
  ``([], [], version)`` when nothing changed, and the changes when something did.
- Every write also records what it changed in the namespace's **change log**, in the same
  transaction, under the version it created. :meth:`~Storage.changes_since` returns the
  changes after a version, merged, so a process that is behind applies them to the tree it
  holds (:meth:`MembrainTree.apply_rows`) instead of reloading the whole namespace. The log
  keeps the last ``log_retention`` versions of each namespace (older entries are deleted
  as writes go on); a process further behind, or behind a write too large to log, gets
  None and reloads.
- A trainer lock (:meth:`~Storage.try_acquire_trainer`) lets one process at a time train
  a model; it is released when the holder releases it, closes the storage or dies.
"""

from __future__ import annotations

import abc
import hashlib
import json
import math
from contextlib import AbstractContextManager
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from ..errors import StorageError
from ..tree.inputs import Namespace
from ..tree.tree import MembrainTree

#: Version of the database layout written by this code. A database whose recorded version
#: is higher was written by a newer membrain and is refused (SchemaVersionError); a lower
#: one is upgraded in place when opened. 1: nodes, namespaces, checkpoints. 2: adds the
#: change log (``membrain_changes``); namespaces written before it have no log yet, so a
#: process behind one of their writes reloads it, as schema 1 did.
SCHEMA_VERSION = 2

#: Versions of change log kept per namespace by default (``log_retention``): a process
#: that is more writes behind than this reloads the namespace whole.
LOG_RETENTION = 1000

#: A write changing more rows than this is not logged (it would double the cost of a bulk
#: import): processes behind it reload, which then costs about what applying it would.
LOG_MAX_ROWS = 5000

#: The key of a fact's ``metadata`` under which the memory keeps the LangGraph BaseStore
#: value (a JSON object) of that fact (what memory.py already uses); the fact's node id is
#: the BaseStore key. Storage does not interpret it: it is stored in the metadata JSON like
#: any other key, so it must be JSON-serialisable (no NaN, no sets, no bytes).
STORE_VALUE_KEY = "value"

#: Kinds of stored rows: the tree's nodes, and the archived entries of the memory
#: operations (superseded/deleted facts and ignored items), raw inputs and working summaries
#: (their parent is the root). A database of an earlier release holds none of the last two.
NODE_KINDS = ("root", "aspect", "fact", "history", "ignored", "raw", "working")



# --------------------------------------------------------------------------- errors
class NotADatabaseError(StorageError):
    """The path names a file that is not a membrain (SQLite) database; it was not touched."""


class StorageUnavailableError(StorageError):
    """The database cannot be reached or opened: an unwritable or missing location, a server
    that does not answer, refused credentials, an unknown database, or a busy timeout."""


class VersionConflictError(StorageError):
    """A write whose ``expected_version`` is not the namespace's stored version: another
    process wrote it since this one loaded it (nothing was written; reload and retry)."""


class StorageClosedError(StorageError):
    """The storage was closed."""


# ------------------------------------------------------------------------ helpers
def encode_namespace(ns: Any) -> str:
    """A namespace (non-empty tuple of non-empty strings) as its stored key: a JSON array.

    JSON keeps the encoding unambiguous whatever characters the labels hold.
    """
    if isinstance(ns, str) or not isinstance(ns, (tuple, list)) or not ns:
        raise StorageError(f"a namespace is a non-empty tuple of strings, got {ns!r}")
    for label in ns:
        if not isinstance(label, str) or not label:
            raise StorageError(f"namespace labels must be non-empty strings, got {ns!r}")
    return json.dumps(list(ns), ensure_ascii=False, separators=(",", ":"))


def decode_namespace(key: str) -> Namespace:
    return tuple(json.loads(key))


def lock_key(*parts: str) -> int:
    """A stable signed 64-bit integer for a lock name (PostgreSQL advisory lock key)."""
    digest = hashlib.blake2b("\x1f".join(parts).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def embedding_to_bytes(embedding: Any) -> bytes | None:
    """A 1-d finite vector as little-endian float32 bytes (what the tree holds: float32)."""
    if embedding is None:
        return None
    try:
        vec = np.asarray(embedding, dtype="<f4")
    except (TypeError, ValueError) as exc:
        raise StorageError(f"embedding is not a numeric vector: {exc}") from None
    if vec.ndim != 1 or vec.size == 0 or not np.all(np.isfinite(vec)):
        raise StorageError("an embedding must be a non-empty 1-d vector of finite numbers")
    return vec.tobytes()


def embedding_from_bytes(data: bytes | memoryview | None) -> np.ndarray | None:
    if data is None:
        return None
    return np.frombuffer(bytes(data), dtype="<f4")


def encode_rows(rows: Iterable[dict[str, Any]], removed: Iterable[str]) -> tuple[list[tuple], list[str], int | None]:
    """Validate and serialise a write's rows and removed ids *before* any transaction starts,
    so a bad row raises StorageError with nothing stored touched.

    Returns (encoded rows, removed ids, the embedding dimension the rows use or None).
    """
    out: list[tuple] = []
    dim: int | None = None
    ids: set[str] = set()
    for row in rows:
        if not isinstance(row, dict):
            raise StorageError(f"a row is a dict (MembrainTree.node_row), got {type(row).__name__}")
        try:
            nid, kind, text, parent = row["id"], row["kind"], row["text"], row["parent"]
            seq, emb, created, updated = row["seq"], row["embedding"], row["created_at"], row["updated_at"]
            metadata = row["metadata"]
        except KeyError as exc:
            raise StorageError(f"row {row.get('id')!r} lacks the field {exc}") from None
        if not isinstance(nid, str) or not nid:
            raise StorageError(f"a node id is a non-empty string, got {nid!r}")
        if nid in ids:
            raise StorageError(f"node {nid!r} appears twice in one write")
        ids.add(nid)
        if kind not in NODE_KINDS:
            raise StorageError(f"node {nid!r} has unknown kind {kind!r}")
        if not isinstance(text, str):
            raise StorageError(f"node {nid!r}: text must be a str")
        if (parent is None) != (kind == "root") or (parent is not None and not isinstance(parent, str)):
            raise StorageError(f"node {nid!r}: only the root (and every root) has no parent")
        if isinstance(seq, bool) or not isinstance(seq, int):
            raise StorageError(f"node {nid!r}: seq must be an int")
        for name, value in (("created_at", created), ("updated_at", updated)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise StorageError(f"node {nid!r}: {name} must be a finite number")
        blob = embedding_to_bytes(emb)
        if blob is not None:
            size = len(blob) // 4
            if dim is not None and size != dim:
                raise StorageError(f"node {nid!r}: embedding of {size} dimensions, others have {dim}")
            dim = size
        if metadata is None:
            metadata = {}
        if not isinstance(metadata, dict):
            raise StorageError(f"node {nid!r}: metadata must be a dict")
        try:
            meta_json = json.dumps(metadata, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise StorageError(f"node {nid!r}: metadata is not JSON-serialisable: {exc}") from None
        out.append((nid, parent, kind, text, int(seq), blob, float(created), float(updated), meta_json))
    removed_ids = list(removed)
    for rid in removed_ids:
        if not isinstance(rid, str) or not rid:
            raise StorageError(f"a removed id is a non-empty string, got {rid!r}")
        if rid in ids:
            raise StorageError(f"node {rid!r} is both written and removed in one write")
    return out, removed_ids, dim


def decode_row(nid: str, parent: str | None, kind: str, text: str, seq: int, blob: Any,
               created: float, updated: float, metadata: Any) -> dict[str, Any]:
    """A stored row back into the :meth:`MembrainTree.node_row` shape (embedding as an array)."""
    if isinstance(metadata, (str, bytes)):
        metadata = json.loads(metadata)
    return {
        "id": nid,
        "kind": kind,
        "text": text,
        "parent": parent,
        "seq": int(seq),
        "embedding": embedding_from_bytes(blob),
        "created_at": float(created),
        "updated_at": float(updated),
        "metadata": metadata if metadata is not None else {},
    }


def check_write(ns: Sequence[str], head: Any, encoded: list[tuple], removed_ids: list[str], dim: int | None,
                expected_version: int | None) -> tuple[int, int | None]:
    """Check a write against the namespace's stored ``head`` (``(version, dim)`` or None
    when absent), inside the write's transaction; returns the current version and the
    embedding dimension the namespace will record.

    Raises VersionConflictError when another writer moved the version on, and
    StorageError for a first write without the root or an embedding of another dimension.
    """
    current = int(head[0]) if head else 0
    if expected_version is not None and expected_version != current:
        raise VersionConflictError(
            f"namespace {tuple(ns)!r} is at version {current}, expected {expected_version}: reload it"
        )
    if head is None and not any(r[2] == "root" for r in encoded):
        raise StorageError(f"namespace {tuple(ns)!r} does not exist: its first write must hold the root")
    stored_dim = None if head is None or head[1] is None else int(head[1])
    if dim is not None and stored_dim is not None and dim != stored_dim:
        raise StorageError(f"namespace {tuple(ns)!r} holds {stored_dim}-d embeddings, got {dim}-d")
    return current, (stored_dim if stored_dim is not None else dim)


def redact_url(url: str) -> str:
    """A connection URL with its password replaced, for error messages."""
    if "://" in url and "@" in url:
        scheme, rest = url.split("://", 1)
        creds, host = rest.rsplit("@", 1)
        if ":" in creds:
            creds = creds.split(":", 1)[0] + ":***"
        return f"{scheme}://{creds}@{host}"
    return url


def check_retention(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise StorageError(f"log_retention is a positive number of versions, got {value!r}")
    return value


def merge_changes(head: int, after: int,
                  entries: Iterable[tuple[int, str, str, dict[str, Any] | None]]
                  ) -> tuple[list[dict[str, Any]], list[str], int] | None:
    """The change log entries of one namespace with a version above ``after``, merged into
    what a copy at version ``after`` must apply to reach ``head``: (rows to upsert, ids to
    remove, ``head``); None when the entries do not cover every version from ``after + 1``
    to ``head`` (compacted, not logged, or the namespace was deleted: a ``reset`` entry).

    ``entries`` are (version, op, node id, row or None), ops ``upsert``/``remove``/``reset``,
    in version order. Merging keeps the last state of each node: an upsert after a removal
    revives the node, a removal after an upsert drops it.
    """
    rows: dict[str, dict[str, Any]] = {}
    removed: set[str] = set()
    seen: set[int] = set()
    for version, op, nid, row in entries:
        seen.add(version)
        if op == "upsert":
            assert row is not None  # an upsert carries its row
            rows[nid] = row
            removed.discard(nid)
        elif op == "remove":
            rows.pop(nid, None)
            removed.add(nid)
        else:  # reset, or an op from a newer writer this code does not know: reload
            return None
    if seen != set(range(after + 1, head + 1)):
        return None
    return list(rows.values()), sorted(removed), head


def merge_log_rows(found: Sequence[tuple], version: int) -> tuple[list[dict[str, Any]], list[str], int] | None:
    """:meth:`Storage.changes_since` from the rows of the backends' one query: (head
    version, entry version, op, node columns...) per log entry after ``version``, in
    version order, or one row of NULL entry columns; no row when the namespace is absent."""
    if not found:
        return None
    head = int(found[0][0])
    if head == version:
        return [], [], version
    return merge_changes(head, int(version), (
        (int(e[1]), e[2], e[3], decode_row(*e[3:]) if e[2] == "upsert" else None) for e in found if e[1] is not None))


# ---------------------------------------------------------------------- interface
class Storage(abc.ABC):
    """Persistent home of a forest of membrain trees and of model checkpoints.

    Thread-safe; safe to share one database between processes (SQLite: on one machine;
    PostgreSQL: across machines). Use as a context manager or call :meth:`close`.
    """

    #: Where the data lives (a file path, ``:memory:`` or a URL with its password hidden).
    location: str

    #: Versions of change log kept per namespace (the ``log_retention`` option).
    log_retention: int = LOG_RETENTION

    #: Writes changing more rows than this are not logged (see :data:`LOG_MAX_ROWS`).
    log_max_rows: int = LOG_MAX_ROWS

    #: Open for reading only (a read-only file, directory or mount, or ``read_only=True``):
    #: every write raises :class:`~langchain_membrain.errors.ReadOnlyError`, and this process
    #: never trains (no checkpoint is written).
    read_only: bool = False

    # ----------------------------------------------------------------- namespaces
    @abc.abstractmethod
    def list_namespaces(self) -> list[Namespace]:
        """Every namespace with a stored tree, sorted. Loads no node."""

    def namespaces_with_facts(self) -> list[Namespace]:
        """Every namespace whose stored tree holds at least one current fact, sorted (not
        those left with only archived versions: deleted or superseded memories). The
        backends answer in one query; this fallback loads each namespace's rows."""
        out = []
        for ns in self.list_namespaces():
            found = self.load_rows(ns)
            if found is not None and any(row["kind"] == "fact" for row in found[0]):
                out.append(ns)
        return out

    @abc.abstractmethod
    def namespace_versions(self) -> dict[Namespace, int]:
        """The stored version of every namespace, in one query (a refresh check for all)."""

    @abc.abstractmethod
    def namespace_version(self, ns: Sequence[str]) -> int:
        """The namespace's stored version (0 when it does not exist). One indexed lookup:
        compare it with the version returned by your last :meth:`write`/:meth:`load_tree`
        to know whether another process changed the namespace."""

    def namespace_head(self, ns: Sequence[str]) -> tuple[int, float, int | None] | None:
        """The namespace's stored head: (version, time of its last write, embedding
        dimension), by one query that reads no node; None when it is not stored, or for a
        storage that keeps no such head (the default). A saved tree is trusted only when
        its head is the one read here (tree_cache.py)."""
        return None

    @abc.abstractmethod
    def load_rows(self, ns: Sequence[str]) -> tuple[list[dict[str, Any]], int | None, int] | None:
        """(rows, embedding dimension or None, version) of one namespace, read in one
        consistent snapshot; None when the namespace does not exist. Rows are in the
        :meth:`MembrainTree.node_row` shape, embeddings as float32 arrays."""

    @abc.abstractmethod
    def changes_since(self, ns: Sequence[str], version: int
                      ) -> tuple[list[dict[str, Any]], list[str], int] | None:
        """What changed in a namespace after ``version``, from its change log, read in one
        snapshot: (rows to upsert, node ids to remove, the current version), merged so that
        applying them once (:meth:`MembrainTree.apply_rows`) to a tree loaded at ``version``
        gives the tree stored now. ``([], [], version)`` when nothing changed. None when the
        log does not reach back to ``version`` (older entries compacted, a write too large
        to log, a database upgraded from schema 1, a namespace deleted or recreated since,
        or a namespace that does not exist): reload with :meth:`load_tree` then."""

    def load_tree(self, ns: Sequence[str]) -> tuple[MembrainTree, int] | None:
        """(tree, version) of one namespace, or None when it does not exist.

        Only this namespace's rows are read (trees load lazily, one namespace at a time).
        Raises :class:`~langchain_membrain.errors.InvariantError` if the stored rows do not
        form a valid tree (they always do when written by :meth:`write` from drained changes).
        The tree's change journal is empty: its next drain holds only later changes.
        """
        loaded = self.load_rows(ns)
        if loaded is None:
            return None
        rows, dim, version = loaded
        return MembrainTree.from_rows(rows, dim=dim), version

    @abc.abstractmethod
    def write(
        self,
        ns: Sequence[str],
        rows: Iterable[dict[str, Any]],
        removed: Iterable[str] = (),
        *,
        expected_version: int | None = None,
    ) -> int:
        """Upsert ``rows``, delete the ``removed`` node ids (unknown ids are ignored) and bump
        the namespace's version by one, all in one transaction; return the new version
        (an empty write to an existing namespace changes nothing and returns its version).

        ``rows``/``removed`` are what :meth:`MembrainTree.drain_changes` returns. With
        ``expected_version``, raise :class:`VersionConflictError` (writing nothing) unless
        the stored version equals it (0 for a namespace that does not exist yet). Bad rows
        raise :class:`StorageError` before anything is written. Outside a
        :meth:`namespace_lock` the write is durable when this returns; inside one it is
        durable when the outermost lock block exits.
        """

    @abc.abstractmethod
    def namespace_lock(self, ns: Sequence[str]) -> AbstractContextManager[None]:
        """Hold the namespace's cross-process writer lock for the ``with`` block, in one
        transaction that commits when the block exits normally and rolls back when it
        raises. Re-entrant within a thread. Do not take locks of several namespaces in
        different orders in different processes (deadlock: PostgreSQL detects and raises,
        SQLite serialises all writers of a file anyway)."""

    @abc.abstractmethod
    def delete_namespace(self, ns: Sequence[str]) -> bool:
        """Delete a namespace's tree and version in one transaction; True if it existed.

        Its change log is replaced by one ``reset`` entry, so that a process holding the
        old tree reloads, and a namespace created again under the same name continues the
        version numbers (a version is never reused for another tree)."""

    # ---------------------------------------------------------------- checkpoints
    @abc.abstractmethod
    def save_checkpoint(self, name: str, data: bytes, counters: dict[str, Any] | None = None) -> None:
        """Store (replacing) the checkpoint ``name``: opaque bytes (model and optimiser
        state) plus JSON counters, atomically."""

    @abc.abstractmethod
    def load_checkpoint(self, name: str) -> tuple[bytes, dict[str, Any]] | None:
        """(bytes, counters) of the checkpoint ``name``, or None when there is none."""

    @abc.abstractmethod
    def checkpoint_version(self, name: str) -> int:
        """How many times the checkpoint ``name`` was saved (0: none). One indexed lookup:
        a process that does not train polls it and loads the bytes only when it grew."""

    @abc.abstractmethod
    def delete_checkpoint(self, name: str) -> bool:
        """Delete the checkpoint ``name``; True if it existed."""

    @abc.abstractmethod
    def try_acquire_trainer(self, name: str) -> bool:
        """Try (without waiting) to become the one process that trains model ``name``.

        True if this storage object now holds (or already held) the trainer lock. The lock
        is released by :meth:`release_trainer`, :meth:`close`, or the death of the process.
        """

    @abc.abstractmethod
    def release_trainer(self, name: str) -> None:
        """Release the trainer lock ``name`` if this storage object holds it."""

    # ------------------------------------------------------------------- lifetime
    @abc.abstractmethod
    def close(self) -> None:
        """Release every lock held and close every connection. Idempotent."""

    def __enter__(self) -> "Storage":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.location!r})"


def check_name(name: Any, what: str = "checkpoint name") -> str:
    if not isinstance(name, str) or not name:
        raise StorageError(f"a {what} is a non-empty string, got {name!r}")
    return name


def check_checkpoint(data: Any, counters: Any) -> str:
    """Validate a checkpoint's bytes and counters; return the counters as JSON text."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise StorageError(f"checkpoint data must be bytes, got {type(data).__name__}")
    counters = {} if counters is None else counters
    if not isinstance(counters, dict):
        raise StorageError("checkpoint counters must be a dict")
    try:
        return json.dumps(counters, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise StorageError(f"checkpoint counters are not JSON-serialisable: {exc}") from None


def iter_chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]
