"""`Forest`: the namespaces of one memory, each loaded namespace owned by one record.

A memory is a forest: one :class:`~.tree.MembrainTree` per namespace. This module owns
everything a process holds per namespace (loaded.py defines the record and how its index
follows its tree), and is the only code that holds it:

- :class:`~.loaded.Loaded`, one record per namespace loaded in this process: the tree, the stored
  version it reflects, its search index and what that index holds;
- the namespace's locks (kept across unloads, so that a thread waiting on one never ends up
  holding a lock nobody else uses);
- the least-recently-used order that bounds how many namespaces stay loaded
  (``max_loaded``), and when each was last checked against storage.

Its public operations are what the rest of the package uses (the memory's reads, the insert
graph's nodes in graph.py, the memory operations in operations.py): take a namespace's
:meth:`Forest.lock`, read its :meth:`Forest.tree` and :meth:`Forest.index` under it, and
change it with :meth:`Forest.mutate`, which persists the change atomically. Nothing here
knows about models or teachers.

With storage, a namespace another process wrote is brought up to date when read (at most
once per ``refresh_interval``) or written: from the storage's change log when it reaches
back far enough (``refreshed_by_change``), else by a reload (``refresh_reloads``). For a
namespace it holds, one query (``Storage.changes_since`` after the version it reflects)
both tells whether another process wrote it and brings what that process wrote.
"""

from __future__ import annotations

import contextlib
import contextvars
import gc
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterator, TypeVar

from ..errors import InvariantError
from ..index.facts import FactIndex
from ..tree.inputs import Namespace
from ..tree.nodes import Node
from ..tree.tree import MembrainTree, check_max_height
from . import index_cache
from .base import Storage
from .index_cache import IndexCache
from .loaded import Loaded, build_index, entries_of, in_order, record_loaded, sync_index
from .tree_cache import Stamp

T = TypeVar("T")

# The work to run once this thread's (or task's) open Forest.transaction has committed, or
# None outside one.
_AFTER_COMMIT: contextvars.ContextVar[list[Callable[[], None]] | None] = contextvars.ContextVar(
    "membrain_after_commit", default=None)
#: What ``Storage.changes_since`` answers: (rows to upsert, ids removed, current version).
Changes = tuple[list[dict[str, Any]], list[str], int]
@dataclass
class RefreshCounts:
    """How often this process brought a namespace up to date after another's writes."""

    refreshed_by_change: int = 0  # by applying the storage's change log
    refresh_reloads: int = 0  # by reloading the namespace whole
    refresh_seconds: float = 0.0  # spent on both (not saved: a measure of this process)


class Forest:
    """The loaded namespaces of one memory, their locks and their sync with storage.

    Args:
        storage: where namespaces persist, or None (this process holds the only copy, and
            nothing is ever unloaded).
        new_index: makes an empty search index for a namespace.
        refresh_interval: seconds between two checks of a namespace for other processes'
            writes, when it is read.
        max_loaded: with storage, namespaces kept loaded at once; the least recently used
            past it are unloaded, and reloaded from storage when next used.
        max_height: the height bound of every namespace's tree (``MembrainTree.max_height``).
        index_cache: where namespaces' search indexes are saved and read back
            (:class:`~.index_cache.IndexCache`), or None.
    """

    #: Whether a namespace read from storage is indexed in one pass (``FactIndex.add_many``);
    #: False indexes it fact by fact (``bench cold``'s baseline, and the tests that compare
    #: the two).
    bulk_load: bool = True

    def __init__(self, storage: Storage | None, *, new_index: Callable[[], FactIndex],
                 refresh_interval: float = 1.0, max_loaded: int = 1000, max_height: int | None = None,
                 clock: Callable[[], float] = time.time, index_cache: IndexCache | None = None):
        self.storage = storage
        self.index_cache = index_cache  # saved indexes (index_cache.py), None: every load indexes the rows
        self.clock = clock  # every tree's (MembrainTree.clock)
        self.max_height = check_max_height(max_height)
        self.new_index = new_index
        self.refresh_interval = float(refresh_interval)
        self.max_loaded = int(max_loaded)
        self.counts = RefreshCounts()
        # Least recently used first; without storage its order is not kept (never unloaded).
        self._loaded: OrderedDict[Namespace, Loaded] = OrderedDict()
        self._checked: dict[Namespace, float] = {}  # monotonic time of the last storage check
        self._locks: dict[Namespace, threading.RLock] = {}
        # One per namespace, held by an add() from its duplicate check to the end of its
        # insert. Only adds take it, so the background worker, which needs the tree lock
        # between the insert's steps, is never starved by a long add_many.
        self._insert_locks: dict[Namespace, threading.RLock] = {}
        self._guard = threading.Lock()  # guards the dicts above across namespaces

    # ------------------------------------------------------------------ locks
    def lock(self, ns: Namespace) -> threading.RLock:
        """The namespace's lock: hold it around every read of its tree or index."""
        with self._guard:
            return self._locks.setdefault(ns, threading.RLock())

    def insert_lock(self, ns: Namespace) -> threading.RLock:
        """The namespace's insert lock (see ``MembrainMemory.add``): taken before :meth:`lock`
        and before a :meth:`transaction` (a formed input holds it around its inserts)."""
        with self._guard:
            return self._insert_locks.setdefault(ns, threading.RLock())

    @contextlib.contextmanager
    def transaction(self, ns: Namespace) -> Iterator[None]:
        """Every write to ``ns`` made inside the block by this thread (:meth:`mutate`) commits
        together, once, as the block ends: the namespace's lock and its storage transaction
        are held throughout, and each write inside is a savepoint. If the block fails,
        what it wrote is rolled back and the namespace is reloaded from storage on next use.
        What :meth:`after_commit` was handed inside runs after the commit, outside the locks
        (not after a failure). A block inside another joins it."""
        if _AFTER_COMMIT.get() is not None:
            with self.lock(ns):
                yield
            return
        after: list[Callable[[], None]] = []
        token = _AFTER_COMMIT.set(after)
        try:
            with self.lock(ns):
                if self.storage is None:
                    yield
                else:
                    try:
                        with self.storage.namespace_lock(ns):
                            yield
                    except BaseException:
                        self.drop(ns)
                        raise
        finally:
            _AFTER_COMMIT.reset(token)
        for work in after:
            work()

    @staticmethod
    def after_commit(work: Callable[[], None]) -> None:
        """Run ``work`` once the :meth:`transaction` open in this thread has committed; now,
        outside one."""
        pending = _AFTER_COMMIT.get()
        if pending is None:
            work()
        else:
            pending.append(work)

    # ------------------------------------------------------------------ reads
    def tree(self, ns: Namespace, *, create: bool) -> MembrainTree | None:
        """The namespace's tree for reading: refreshed from storage when another process
        wrote it (checked at most once per ``refresh_interval``); a new empty one when it
        has none and ``create``, else None. Call under its :meth:`lock`."""
        state = self._loaded.get(ns)
        if self.storage is not None:
            due = time.monotonic() - self._checked.get(ns, float("-inf")) >= self.refresh_interval
            if state is None or due:
                self._checked[ns] = time.monotonic()
                asked = time.perf_counter()
                stored, changes = self._stored_version(ns, state)
                if stored != (state.synced if state else 0):
                    state = self._catch_up(ns, changes, started=asked)
        if state is None and create:
            state = self._loaded[ns] = Loaded(self._new_tree(ns))
        if state is None:
            return None
        self._touch(ns)
        return state.tree

    def index(self, ns: Namespace) -> FactIndex | None:
        """The namespace's search index as of its last :meth:`tree` or write (None before
        its first indexed write). Call under its :meth:`lock`, after :meth:`tree`."""
        state = self._loaded.get(ns)
        return None if state is None else state.index

    def unindexed(self, ns: Namespace) -> frozenset[str]:
        """The namespace's facts stored without an embedding. Call under its :meth:`lock`."""
        state = self._loaded.get(ns)
        return frozenset() if state is None else frozenset(state.unindexed)

    def formed(self, ns: Namespace) -> list[str]:
        """The namespace's facts formed from raw items (they have sources). Call under its :meth:`lock`."""
        state = self._loaded.get(ns)
        return [] if state is None else list(state.sources)

    def loaded(self) -> int:
        """How many namespaces this process holds now."""
        return len(self._loaded)

    def loaded_namespaces(self) -> list[Namespace]:
        """The namespaces held now that have facts or history (without storage, the memory's
        namespaces; as storage lists them, a namespace whose facts were all deleted is kept
        for its history)."""
        return [ns for ns, s in list(self._loaded.items()) if not _is_empty(s.tree)]

    # ------------------------------------------------------------------ writes
    def mutate(self, ns: Namespace, write: Callable[[MembrainTree], T]) -> T:
        """Run ``write`` on the namespace's tree and persist what it changed, atomically;
        returns what ``write`` returns.

        With storage, the namespace's cross-process lock is held throughout: the tree is
        brought up to date first if another process wrote it, and the changes are committed
        in one transaction. If anything fails, the in-memory namespace is dropped (it is
        reloaded from storage on next use), so memory never runs ahead of what is stored.
        An emptied namespace is forgotten (and deleted from storage: it is not listed).
        """
        with self.lock(ns):
            if self.storage is None:
                tree = self.tree(ns, create=True)
                assert tree is not None
                try:
                    result = write(tree)
                finally:
                    self._sync_index(ns, *tree.drain_changes())
                if _is_empty(tree):
                    self.drop(ns)
                return result
            try:
                with self.storage.namespace_lock(ns):
                    state = self._loaded.get(ns)
                    asked = time.perf_counter()
                    stored, changes = self._stored_version(ns, state)
                    if state is None or stored != state.synced:
                        if not stored:
                            self.drop(ns)  # deleted by another process: start afresh, index too
                        state = self._catch_up(ns, changes, started=asked) if stored else None
                    if state is None:
                        state = self._loaded[ns] = Loaded(self._new_tree(ns))
                    tree = state.tree
                    result = write(tree)
                    rows, removed = tree.drain_changes()
                    if _is_empty(tree):
                        self.storage.delete_namespace(ns)
                        self.drop(ns)
                    elif rows or removed:
                        state.synced = self.storage.write(ns, rows, removed, expected_version=stored)
                        self._sync_index(ns, rows, removed)
                        self._touch(ns)
                    self._checked[ns] = time.monotonic()
                return result
            except BaseException:
                self.drop(ns)
                raise

    def drop(self, ns: Namespace) -> None:
        """Forget what this process holds of a namespace (it is reloaded from storage on
        next use). Call under its :meth:`lock`."""
        with self._guard:
            self._loaded.pop(ns, None)

    # ------------------------------------------------------------------ sync with storage
    def catch_up(self, ns: Namespace) -> MembrainTree | None:
        """Bring a namespace another process wrote up to date now (see :meth:`_catch_up`);
        its tree, or None when it is not stored. Call under its :meth:`lock`."""
        _, changes = self._stored_version(ns, self._loaded.get(ns))
        state = self._catch_up(ns, changes)
        return None if state is None else state.tree

    def _stored_version(self, ns: Namespace, state: Loaded | None) -> tuple[int, Changes | None]:
        """The namespace's stored version and, when this process holds it, what changed since
        the version it reflects, from one query (``([], [], version)`` when nothing did).
        The changes are None when the namespace is not held, or when the log cannot answer
        (the version then costs a second query)."""
        assert self.storage is not None
        if state is not None and state.synced:
            changes = self.storage.changes_since(ns, state.synced)
            if changes is not None:
                return changes[2], changes
        return self.storage.namespace_version(ns), None

    def _catch_up(self, ns: Namespace, changes: Changes | None, *, started: float | None = None) -> Loaded | None:
        """Apply ``changes`` (:meth:`_stored_version`'s) to the tree and its search index
        (O(changes), counted as ``refreshed_by_change``), or reload it whole when there are
        none to apply (the log does not reach back) or a change does not apply
        (``refresh_reloads``). ``started``: when the caller's query was sent, so that
        ``refresh_seconds`` counts it too."""
        start = time.perf_counter() if started is None else started
        try:
            return self._refresh(ns, changes)
        finally:
            self.counts.refresh_seconds += time.perf_counter() - start

    def _refresh(self, ns: Namespace, changes: Changes | None) -> Loaded | None:
        state = self._loaded.get(ns)
        if state is None or not state.synced:
            return self._load(ns)
        if changes is not None and self._apply(ns, state, changes):
            self._checked[ns] = time.monotonic()
            self.counts.refreshed_by_change += 1
            self._touch(ns)
            return state
        self.counts.refresh_reloads += 1
        return self._load(ns)

    def _apply(self, ns: Namespace, state: Loaded, changes: Changes) -> bool:
        """Apply another process's writes (``changes``, from the change log) to the tree and
        its search index; False, and the namespace dropped, when one does not apply."""
        rows, removed, version = changes
        try:
            state.tree.apply_rows(rows, removed)
        except InvariantError:
            self.drop(ns)  # half-applied: never used again, the caller reloads it
            return False
        state.synced = version
        self._sync_index(ns, rows, removed, defer_ann=True)  # inserted in HNSW at our next write
        return True

    def _load(self, ns: Namespace, *, saved_files: bool = True) -> Loaded | None:
        """(Re)load a namespace from storage, indexing every fact and ignored item oldest
        first (the order sessions read); None if it is not stored. With ``saved_files``, from
        its saved tree and index where they are of the stored namespace or of an earlier
        version the change log reaches back to (then the writes since are applied)."""
        assert self.storage is not None
        with paused_gc():
            saved = self._saved_tree(ns) if saved_files else None
            found = saved[:2] if saved else self.storage.load_tree(ns)
            self._checked[ns] = time.monotonic()
            if found is None:
                self.drop(ns)
                return None
            tree, version = found
            tree.max_height, tree.clock = self.max_height, self.clock
            state = self._loaded[ns] = Loaded(tree, synced=version, tree_saved=version if saved else -1)
            entries = entries_of(tree, ordered=False)
            if self.bulk_load:
                self._index_loaded(ns, state, entries, saved[2] if saved else None)
            else:
                self._sync_index(ns, [tree.node_row(n.id) for n in in_order(entries)], [])
            if saved and saved[3] is not None and not self._apply(ns, state, saved[3]):
                return self._load(ns, saved_files=False)
        self._touch(ns)
        return state

    def _saved_tree(self, ns: Namespace) -> tuple[MembrainTree, int, Stamp, Changes | None] | None:
        """(tree, version, the stored head it was saved at, the changes since or None) from
        the namespace's saved tree (tree_cache.py), without reading its rows: when it was
        saved at the stored head, or at an earlier version the change log reaches back to;
        None otherwise. The head is read only where a saved tree is (most namespaces, the
        small ones, have none)."""
        cache = self.index_cache
        if cache is None or self.storage is None or not os.path.exists(cache.path(ns, ".tree")):
            return None
        head = cache.stamp(ns)
        found = None if head is None else cache.load_tree(ns, head, self.clock)
        if found is None:
            return None
        tree, saved = found
        if saved == head:
            return tree, saved[0], saved, None
        changes = self.storage.changes_since(ns, saved[0])
        return None if changes is None else (tree, saved[0], saved, changes)

    def _index_loaded(self, ns: Namespace, state: Loaded, entries: list[Node], head: Stamp | None = None) -> None:
        """Index a namespace just loaded (loaded.py: :func:`record_loaded`, then
        :func:`build_index`), or restore its saved index instead when one matches it
        (index_cache.py; ``head``: the stored head of the saved tree the namespace was read
        from)."""
        kept = record_loaded(state, entries)
        cache = self.index_cache
        if cache is not None and len(entries) >= index_cache.MIN_ENTRIES:
            state.index = cache.load(ns, lambda: index_cache.fingerprint(state.synced, in_order(entries)),
                                     self.new_index, head)
            if state.index is not None:
                state.saved = state.synced
                return
        build_index(state, kept, self.new_index)

    def _sync_index(self, ns: Namespace, rows: list[dict[str, Any]], removed: list[str], *,
                    defer_ann: bool = False) -> None:
        """:func:`~.loaded.sync_index` of the namespace, when it is loaded."""
        state = self._loaded.get(ns)
        if state is not None:
            sync_index(state, self.new_index, rows, removed, defer_ann=defer_ann)

    def save_indexes(self) -> int:
        """Save the search index and the tree of each loaded namespace of at least
        ``MIN_ENTRIES`` indexed entries, each when it changed since it was loaded or saved
        (index_cache.py, tree_cache.py); how many files were written. Nothing without an
        ``index_cache``. A tree is saved only at the stored head it reflects: not when
        another process wrote the namespace since."""
        cache, written = self.index_cache, 0
        if cache is None or not cache.writable:
            return 0
        for ns in list(self._loaded):
            with self.lock(ns):
                state = self._loaded.get(ns)
                if state is None or not state.synced or (state.saved == state.tree_saved == state.synced):
                    continue
                entries = entries_of(state.tree)
                if len(entries) < index_cache.MIN_ENTRIES:
                    continue
                head = cache.stamp(ns)
                if head is not None and head[0] != state.synced:
                    head = None  # another process wrote since: the index is saved by its fingerprint only
                if state.index is not None and state.saved != state.synced and \
                        cache.save(ns, state.index, index_cache.fingerprint(state.synced, entries), head):
                    state.saved = state.synced
                    written += 1
                if state.tree_saved != state.synced and head is not None and cache.save_tree(ns, state.tree, head):
                    state.tree_saved = state.synced
                    written += 1
        return written

    def _new_tree(self, ns: Namespace) -> MembrainTree:
        return MembrainTree("/".join(ns), max_height=self.max_height, clock=self.clock)

    def _touch(self, ns: Namespace) -> None:
        """Mark a namespace as just used; with storage, unload the least recently used
        ones past ``max_loaded`` (each is reloaded from storage when next used, so nothing
        is lost). A namespace whose lock another thread holds is skipped: it is in use.
        Call under ``ns``'s lock."""
        if self.storage is None:
            return
        with self._guard:
            if ns in self._loaded:
                self._loaded.move_to_end(ns)
            over = len(self._loaded) - self.max_loaded
            candidates = [old for old in self._loaded if old != ns][: max(over, 0) * 2]
        for old in candidates:
            if over <= 0:
                break
            lock = self.lock(old)
            if not lock.acquire(blocking=False):
                continue
            try:
                self.drop(old)
                self._checked.pop(old, None)
                over -= 1
            finally:
                lock.release()

@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block (for the whole process), back on
    after it if it was on.

    Loading a namespace allocates a few objects per fact (nodes, rows, fields, posting
    entries) that all survive the load: each collection the allocations trigger meanwhile
    walks every object allocated before, and finds no garbage. Reference counting still
    frees what the block drops; a cycle made in it waits for the next collection.

    Left in the youngest generation, the survivors of a large load would be walked by the
    next young collection (the first search's) and again by the one after. ``gc.freeze``
    then ``gc.unfreeze`` moves them to the oldest generation at once, where only a full
    collection walks them (and collects any cycle among them): nothing stays frozen. Only
    after a load of at least :data:`PROMOTE_AFTER` objects: a small one gains nothing, and
    promoting every young object of the process at each of a service's many small loads
    would keep its young garbage cycles until a full collection."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            if gc.get_count()[0] >= PROMOTE_AFTER:  # objects allocated since the last collection
                gc.freeze()
                gc.unfreeze()
            gc.enable()


#: Objects a load allocates (``gc.get_count()[0]`` at its end) from which :func:`paused_gc`
#: moves them to the collector's oldest generation: a namespace of some 10,000 facts.
PROMOTE_AFTER = 200_000


def _is_empty(tree: MembrainTree) -> bool:
    """A namespace with no fact, no aspect and no history: not kept, not listed."""
    return tree.fact_count(tree.root_id) == 0 and not tree.aspects() and not tree.archive
