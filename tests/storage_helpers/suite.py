"""The storage test suite shared by every backend.

A backend's test module defines a ``storage_backend`` fixture returning a :class:`Backend`
(how to open a fresh :class:`Storage` on the test's own database/schema, how to run raw SQL
on it, how to point a subprocess at it) and star-imports this module; pytest then collects
these tests once per backend module. Real databases only: no mocks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

from langchain_membrain.errors import InvariantError, StorageError
from langchain_membrain.storage import (
    SCHEMA_VERSION,
    STORE_VALUE_KEY,
    Storage,
    StorageClosedError,
    VersionConflictError,
)
from langchain_membrain.tree.tree import MembrainTree

WORKER = os.path.join(os.path.dirname(__file__), "worker.py")
DIM = 4
NS = ("user-1", "memories")


@dataclass
class Backend:
    """What the shared tests need to know about one backend under test."""

    open: Callable[..., Storage]  # a new Storage on the test's own database (options as keywords)
    raw: Callable[[str, tuple], list]  # run one SQL statement ("?" placeholders) and fetch its rows
    worker_args: list[str]  # --target/--schema for worker.py
    concurrent_facts: int = 100  # facts per process in the two-writer test
    scratch: str = ""  # a directory of the test's own, for files the workers wait on
    opened: list[Storage] = field(default_factory=list)

    def fresh(self, **options) -> Storage:
        storage = self.open(**options)
        self.opened.append(storage)
        return storage


def emb(rng: np.random.Generator) -> np.ndarray:
    return rng.random(DIM).astype(np.float32)


def run_worker(backend: Backend, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, WORKER, *args, *backend.worker_args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def start_worker(backend: Backend, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-u", WORKER, *args, *backend.worker_args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def snapshot(storage: Storage, ns=NS) -> tuple[dict, int]:
    loaded = storage.load_tree(ns)
    assert loaded is not None
    tree, version = loaded
    return tree.to_dict(), version


# ---------------------------------------------------------------------- round trip
def write_every_kind(tree: MembrainTree, facts: list[str], rng: np.random.Generator,
                     persist: Callable[[], None]) -> tuple[str, str]:
    """Each kind of tree write on six root facts, ``persist()`` after each step; returns
    the ids of the two aspects it creates (both pruned by the end)."""
    work = tree.group(facts[:3], "work", embedding=emb(rng))  # new aspect + three moves
    persist()
    sub = tree.group(facts[:2], "projects", embedding=emb(rng))
    persist()
    tree.promote(facts[0])  # out of "projects" into "work"
    tree.demote(facts[3], work)
    persist()
    tree.move(facts[1], "root")  # empties "projects": pruned, so a removed aspect row
    tree.remove(facts[0])
    persist()
    tree.update_fact(facts[4], text="edited", embedding=emb(rng), metadata={STORE_VALUE_KEY: {"v": 2}})
    tree.set_label(work, "job", embedding=emb(rng))
    persist()
    tree.remove(facts[2])
    tree.remove(facts[3])  # empties "work" and "projects": pruned aspects are removed rows
    persist()
    return work, sub


def test_round_trip_over_many_writes(storage_backend: Backend) -> None:
    """Each kind of tree write, persisted from drained changes, reloads to the same tree."""
    rng = np.random.default_rng(1)
    storage = storage_backend.fresh()
    tree = MembrainTree("Ada", dim=DIM)
    version = 0

    def persist() -> None:
        nonlocal version
        rows, removed = tree.drain_changes()
        version = storage.write(NS, rows, removed, expected_version=version)
        reopened = storage_backend.fresh()  # another Storage object: nothing cached
        loaded, stored_version = snapshot(reopened, NS)
        assert stored_version == version == storage.namespace_version(NS)
        assert loaded == tree.to_dict()
        reopened.close()

    facts = [tree.add_fact("root", f"fact {i}", embedding=emb(rng), metadata={STORE_VALUE_KEY: {"i": i}})
             for i in range(6)]
    tree.add_fact("root", "no embedding, unicode é ✓ and 'quotes'", metadata={"source": "chat", "tags": [1, 2.5]})
    persist()
    work, sub = write_every_kind(tree, facts, rng, persist)
    assert work not in tree and sub not in tree
    assert storage.load_tree(NS)[0].to_dict() == tree.to_dict()
    # The reloaded tree keeps working: its next writes persist correctly too.
    again, v = storage.load_tree(NS)
    again.add_fact("root", "after reload", embedding=emb(rng))
    storage.write(NS, *again.drain_changes(), expected_version=v)
    assert storage.load_tree(NS)[0].to_dict() == again.to_dict()


def test_raw_items_and_working_memories_round_trip(storage_backend: Backend) -> None:
    """The entries memory kinds add beside the tree (raw items, a session's working memory
    and its earlier version) persist and reload with the tree, and changes to them too."""
    rng = np.random.default_rng(3)
    storage = storage_backend.fresh()
    tree = MembrainTree("Ada", dim=DIM)
    raw = tree.keep_raw(None, "Ada: I play the cello", embedding=emb(rng), metadata={STORE_VALUE_KEY: {"session": 1}})
    tree.add_fact("root", "Ada plays the cello", embedding=emb(rng), metadata={"kind": "fact", "sources": [raw]})
    tree.set_working("1", "music talk", embedding=emb(rng))
    version = storage.write(NS, *tree.drain_changes(), expected_version=0)
    tree.set_working("1", "music and travel")
    storage.write(NS, *tree.drain_changes(), expected_version=version)
    loaded = storage_backend.fresh().load_tree(NS)[0]
    assert loaded.to_dict() == tree.to_dict()
    assert [e.text for e in loaded.working_history("1")] == ["music talk", "music and travel"]
    assert loaded.archived("raw")[0].id == raw


def test_namespaces_are_separate_listed_and_deleted(storage_backend: Backend) -> None:
    storage = storage_backend.fresh()
    spaces = [("a",), ("a", "b"), ("a/b",), ("ünï", "cödé", "x,y"), ("z",)]
    trees = {}
    for i, ns in enumerate(spaces):
        tree = MembrainTree(f"subject {i}", dim=DIM)
        for j in range(i + 1):
            tree.add_fact("root", f"{ns} {j}", embedding=np.full(DIM, j, dtype=np.float32))
        storage.write(ns, *tree.drain_changes())
        trees[ns] = tree
    assert storage.list_namespaces() == sorted(spaces)
    assert storage.namespace_versions() == {ns: 1 for ns in spaces}
    reopened = storage_backend.fresh()
    for ns, tree in trees.items():
        assert snapshot(reopened, ns)[0] == tree.to_dict()
    assert reopened.load_tree(("missing",)) is None
    assert reopened.namespace_version(("missing",)) == 0
    assert reopened.delete_namespace(("a",)) is True
    assert reopened.delete_namespace(("a",)) is False
    assert storage.list_namespaces() == sorted(set(spaces) - {("a",)})
    assert storage.load_tree(("a",)) is None
    assert snapshot(storage, ("a", "b"))[0] == trees[("a", "b")].to_dict()
    for bad in [(), "a", ("",), ("a", 3), None]:
        with pytest.raises(StorageError):
            storage.namespace_version(bad)


def test_trees_load_lazily_one_namespace_at_a_time(storage_backend: Backend) -> None:
    """Opening and listing read no node; loading one namespace reads only its rows: a
    namespace whose rows are broken does not disturb the others."""
    storage = storage_backend.fresh()
    for name in ("good", "broken"):
        tree = MembrainTree(name, dim=DIM)
        a = tree.add_aspect("root", "topic")
        tree.add_fact(a, "fact", embedding=np.ones(DIM))
        storage.write((name,), *tree.drain_changes())
    broken_key = json.dumps(["broken"], separators=(",", ":"))
    storage_backend.raw("UPDATE membrain_nodes SET parent = ? WHERE ns = ? AND kind = ?",
                        ("no-such-node", broken_key, "aspect"))
    reopened = storage_backend.fresh()
    assert reopened.list_namespaces() == [("broken",), ("good",)]
    tree, _ = reopened.load_tree(("good",))
    assert len(tree) == 3
    with pytest.raises(InvariantError):
        reopened.load_tree(("broken",))


# ----------------------------------------------------------------- write semantics
def test_conflicting_or_bad_writes_store_nothing(storage_backend: Backend) -> None:
    rng = np.random.default_rng(2)
    storage = storage_backend.fresh()
    tree = MembrainTree("s", dim=DIM)
    f = tree.add_fact("root", "kept", embedding=emb(rng))
    version = storage.write(NS, *tree.drain_changes())
    before = snapshot(storage)
    good_row = tree.node_row(f)

    with pytest.raises(VersionConflictError):
        storage.write(NS, [dict(good_row, text="changed")], [], expected_version=version - 1)
    with pytest.raises(StorageError):
        storage.write(("new-ns",), [dict(good_row)], [])  # a new namespace's first write needs the root
    bad_rows = [
        dict(good_row, metadata={"x": {1, 2}}),  # not JSON
        dict(good_row, metadata={"x": float("nan")}),
        dict(good_row, kind="leaf"),
        dict(good_row, embedding=[1.0, float("inf"), 0.0, 0.0]),
        dict(good_row, embedding=[1.0, 2.0]),  # other dimension than stored
        dict(good_row, parent=None),  # a fact without a parent
        dict(good_row, seq="1"),
        {k: v for k, v in good_row.items() if k != "text"},
        "not a row",
    ]
    for bad in bad_rows:
        with pytest.raises(StorageError):
            # a valid row first: the bad one must not leave it half-written
            storage.write(NS, [dict(tree.node_row("root"), text="renamed"), bad], [])
    with pytest.raises(StorageError):
        storage.write(NS, [good_row], [f])  # written and removed at once
    assert storage.write(NS, [], [], expected_version=version) == version  # nothing to do: no bump
    assert snapshot(storage) == before
    assert storage.namespace_version(NS) == version


def test_lock_block_commits_on_exit_and_rolls_back_on_error(storage_backend: Backend) -> None:
    rng = np.random.default_rng(3)
    storage = storage_backend.fresh()
    other = storage_backend.fresh()
    tree = MembrainTree("s", dim=DIM)
    tree.add_fact("root", "first", embedding=emb(rng))
    v1 = storage.write(NS, *tree.drain_changes())

    # An exception escaping the block: nothing of the block is stored.
    with pytest.raises(RuntimeError):
        with storage.namespace_lock(NS):
            assert storage.namespace_version(NS) == v1
            tree.add_fact("root", "lost", embedding=emb(rng))
            storage.write(NS, *tree.drain_changes(), expected_version=v1)
            raise RuntimeError("crash before the block ends")
    assert other.namespace_version(NS) == v1
    assert len(other.load_tree(NS)[0]) == 2

    # A failed write inside the block is undone on its own (savepoint); the block's other
    # write commits when the block exits.
    tree, _ = storage.load_tree(NS)
    with storage.namespace_lock(NS):
        with storage.namespace_lock(NS):  # re-entrant
            tree.add_fact("root", "kept", embedding=emb(rng))
            v2 = storage.write(NS, *tree.drain_changes(), expected_version=v1)
        with pytest.raises(VersionConflictError):
            storage.write(NS, [tree.node_row("root")], [], expected_version=v1)
        with pytest.raises(StorageError):
            storage.write(NS, [dict(tree.node_row("root"), text="x"), dict(tree.node_row("root"), kind="?")], [])
        # An inner block that raises after writing is undone alone; the outer one goes on.
        with pytest.raises(RuntimeError):
            with storage.namespace_lock(NS):
                assert storage.write(NS, [dict(tree.node_row("root"), text="undone")], []) == v2 + 1
                raise RuntimeError("inner failure")
        assert storage.namespace_version(NS) == v2
        assert storage.load_tree(NS)[0].subject == "s"
    assert v2 == v1 + 1
    assert snapshot(other) == (tree.to_dict(), v2)


def test_threads_share_one_storage(storage_backend: Backend) -> None:
    """Four threads of one process, each with its own tree copy, reload-if-stale under the lock."""
    storage = storage_backend.fresh()
    seed = MembrainTree("s", dim=DIM)
    storage.write(NS, *seed.drain_changes())
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        rng = np.random.default_rng(k)
        tree, synced = None, -1
        try:
            for i in range(15):
                with storage.namespace_lock(NS):
                    version = storage.namespace_version(NS)
                    if tree is None or version != synced:
                        tree, synced = storage.load_tree(NS)
                    tree.add_fact("root", f"{k}-{i}", embedding=emb(rng), node_id=f"t{k}-{i}")
                    synced = storage.write(NS, *tree.drain_changes(), expected_version=version)
        except BaseException as exc:  # reported to the main thread
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    tree, version = storage_backend.fresh().load_tree(NS)
    assert version == 61
    assert sorted(tree.facts()) == sorted(f"t{k}-{i}" for k in range(4) for i in range(15))


# ---------------------------------------------------------------------- change log
def catch_up(storage: Storage, tree: MembrainTree, at: int, ns=NS) -> int:
    """Apply what changed after ``at`` to ``tree`` (must be reachable); check it equals a
    reload and keeps every invariant; return the version it reached."""
    changes = storage.changes_since(ns, at)
    assert changes is not None, f"the log does not reach back to version {at}"
    rows, removed, head = changes
    tree.apply_rows(rows, removed)
    tree.check_invariants()
    reloaded, version = storage.load_tree(ns)
    assert version == head
    assert tree.to_dict() == reloaded.to_dict()
    return head


def test_changes_since_bring_a_loaded_tree_up_to_date(storage_backend: Backend) -> None:
    """Each kind of tree write, read back from the log by another Storage object and
    applied to a tree it loaded earlier, one write at a time or several merged."""
    rng = np.random.default_rng(11)
    storage, other = storage_backend.fresh(), storage_backend.fresh()
    tree = MembrainTree("Ada", dim=DIM)
    facts = [tree.add_fact("root", f"fact {i}", embedding=emb(rng), metadata={STORE_VALUE_KEY: {"i": i}})
             for i in range(6)]
    tree.add_fact("root", "no embedding, unicode é ✓", metadata={"tags": [1, 2.5]})
    version = storage.write(NS, *tree.drain_changes())
    step, step_at = other.load_tree(NS)  # follows every write
    merged, merged_at = other.load_tree(NS)  # follows every third write
    assert other.changes_since(NS, step_at) == ([], [], step_at)

    def persist() -> None:
        nonlocal version, step_at, merged_at
        version = storage.write(NS, *tree.drain_changes(), expected_version=version)
        step_at = catch_up(other, step, step_at)
        if version % 3 == 0:
            merged_at = catch_up(other, merged, merged_at)

    write_every_kind(tree, facts, rng, persist)
    tree.move(facts[1], tree.add_aspect("root", "again", embedding=emb(rng)))
    persist()
    catch_up(other, merged, merged_at)
    assert step.to_dict() == merged.to_dict() == tree.to_dict()
    assert other.changes_since(("missing",), 0) is None


def test_the_log_is_compacted_and_a_sleeper_reloads(storage_backend: Backend) -> None:
    rng = np.random.default_rng(12)
    storage = storage_backend.fresh(log_retention=3)
    tree = MembrainTree("s", dim=DIM)
    tree.add_fact("root", "first", embedding=emb(rng))
    first = storage.write(NS, *tree.drain_changes())
    for i in range(6):
        tree.add_fact("root", f"fact {i}", embedding=emb(rng))
        head = storage.write(NS, *tree.drain_changes())
        if i == 2:
            recent, recent_at = storage.load_tree(NS)
    key = json.dumps(list(NS), separators=(",", ":"))
    logged = storage_backend.raw("SELECT DISTINCT version FROM membrain_changes WHERE ns = ?", (key,))
    assert sorted(r[0] for r in logged) == [head - 2, head - 1, head]  # bounded: the last three
    assert storage.changes_since(NS, first) is None  # asleep longer than the log reaches: reload
    assert head - recent_at == 3
    catch_up(storage, recent, recent_at)  # three writes behind: still in the log
    with pytest.raises(StorageError):
        storage_backend.fresh(log_retention=0)


def test_a_deleted_namespace_never_reuses_a_version(storage_backend: Backend) -> None:
    rng = np.random.default_rng(13)
    storage, other = storage_backend.fresh(), storage_backend.fresh()
    tree = MembrainTree("old", dim=DIM)
    for i in range(3):
        tree.add_fact("root", f"old {i}", embedding=emb(rng))
        storage.write(NS, *tree.drain_changes())
    held, at = other.load_tree(NS)
    assert at == 3
    assert storage.delete_namespace(NS)
    assert other.changes_since(NS, at) is None  # gone
    fresh_tree = MembrainTree("new", dim=DIM)
    fresh_tree.add_fact("root", "new 0", embedding=emb(rng))
    assert storage.write(NS, *fresh_tree.drain_changes(), expected_version=0) == 5  # after the reset at 4
    assert other.changes_since(NS, at) is None  # the old tree cannot be patched into the new one
    assert other.changes_since(NS, 5) == ([], [], 5)


def test_a_write_too_large_to_log_makes_followers_reload(storage_backend: Backend) -> None:
    rng = np.random.default_rng(14)
    storage = storage_backend.fresh()
    storage.log_max_rows = 5
    tree = MembrainTree("s", dim=DIM)
    for i in range(3):
        tree.add_fact("root", f"small {i}", embedding=emb(rng))
    v1 = storage.write(NS, *tree.drain_changes())
    for i in range(6):
        tree.add_fact("root", f"bulk {i}", embedding=emb(rng))
    v2 = storage.write(NS, *tree.drain_changes())
    assert storage.changes_since(NS, v1) is None  # behind the bulk write: reload
    held, at = storage.load_tree(NS)
    tree.add_fact("root", "after", embedding=emb(rng))
    storage.write(NS, *tree.drain_changes())
    assert storage.changes_since(NS, v1) is None
    assert at == v2 and catch_up(storage, held, at) == v2 + 1  # later small writes are logged again
    assert len(held.facts()) == 10


def test_a_schema_1_database_is_upgraded_in_place(storage_backend: Backend) -> None:
    rng = np.random.default_rng(15)
    storage = storage_backend.open()
    tree = MembrainTree("s", dim=DIM)
    tree.add_fact("root", "written by schema 1", embedding=emb(rng))
    version = storage.write(NS, *tree.drain_changes())
    storage.save_checkpoint("stage1", b"weights", {"steps": 1})
    storage.close()
    # Make it what membrain 0.x with schema 1 left: no change log.
    storage_backend.raw("DROP TABLE membrain_changes", ())
    storage_backend.raw("UPDATE membrain_schema SET version = 1", ())
    upgraded = storage_backend.fresh()
    assert storage_backend.raw("SELECT version FROM membrain_schema", ()) == [(SCHEMA_VERSION,)]
    assert upgraded.load_tree(NS)[0].to_dict() == tree.to_dict()
    assert upgraded.load_checkpoint("stage1") == (b"weights", {"steps": 1})
    assert upgraded.changes_since(NS, version - 1) is None  # written before the log existed: reload
    tree.add_fact("root", "written by schema 2", embedding=emb(rng))
    upgraded.write(NS, *tree.drain_changes())
    held, _ = upgraded.load_tree(NS)
    tree.add_fact("root", "and another", embedding=emb(rng))
    upgraded.write(NS, *tree.drain_changes())
    catch_up(upgraded, held, version + 1)


# --------------------------------------------------------------------- checkpoints
def test_checkpoint_round_trip(storage_backend: Backend) -> None:
    storage = storage_backend.fresh()
    blob = bytes(range(256)) + np.random.default_rng(4).bytes(1 << 20)
    counters = {"steps": 12, "agreement": 0.75, "history": [1, 2, 3], "nested": {"calls": 4}}
    assert storage.load_checkpoint("stage1") is None
    assert storage.checkpoint_version("stage1") == 0
    storage.save_checkpoint("stage1", blob, counters)
    assert storage.checkpoint_version("stage1") == 1
    storage.save_checkpoint("stage2", b"", None)
    reopened = storage_backend.fresh()
    assert reopened.load_checkpoint("stage1") == (blob, counters)
    assert reopened.load_checkpoint("stage2") == (b"", {})
    storage.save_checkpoint("stage1", b"newer", {"steps": 13})  # replaces
    assert reopened.load_checkpoint("stage1") == (b"newer", {"steps": 13})
    assert reopened.checkpoint_version("stage1") == 2
    assert reopened.delete_checkpoint("stage1") is True
    assert storage.load_checkpoint("stage1") is None
    assert storage.checkpoint_version("stage1") == 0
    for data, ctr in [("text", {}), (b"x", {"a": float("nan")}), (b"x", {"a": object()}), (b"x", [1])]:
        with pytest.raises(StorageError):
            storage.save_checkpoint("stage2", data, ctr)
    assert storage.load_checkpoint("stage2") == (b"", {})
    with pytest.raises(StorageError):
        storage.save_checkpoint("", b"x", {})


def test_trainer_lock_is_exclusive(storage_backend: Backend) -> None:
    first, second = storage_backend.fresh(), storage_backend.fresh()
    assert first.try_acquire_trainer("stage1") is True
    assert first.try_acquire_trainer("stage1") is True  # already held by this object
    assert second.try_acquire_trainer("stage1") is False
    assert second.try_acquire_trainer("stage2") is True  # another model: another lock
    first.release_trainer("stage1")
    assert second.try_acquire_trainer("stage1") is True
    second.close()  # closing releases every trainer lock it held
    assert first.try_acquire_trainer("stage1") is True


def test_trainer_lock_is_freed_when_its_process_dies(storage_backend: Backend) -> None:
    storage = storage_backend.fresh()
    holder = start_worker(storage_backend, "hold-trainer", "--name", "stage1")
    try:
        assert holder.stdout.readline().strip() == "HELD", holder.stderr.read()
        assert storage.try_acquire_trainer("stage1") is False
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    deadline = time.monotonic() + 10
    while not storage.try_acquire_trainer("stage1"):
        assert time.monotonic() < deadline, "the dead holder's trainer lock was never freed"
        time.sleep(0.05)


def test_closed_storage_refuses_calls(storage_backend: Backend) -> None:
    storage = storage_backend.open()
    storage.close()
    storage.close()  # idempotent
    with pytest.raises(StorageClosedError):
        storage.namespace_version(NS)
    with pytest.raises(StorageClosedError):
        storage.try_acquire_trainer("stage1")


# ----------------------------------------------------------------- other processes
def test_sigkill_mid_ingest_keeps_every_acknowledged_fact(storage_backend: Backend) -> None:
    """A writer killed at several points: after each kill the stored tree is valid, holds
    every fact whose write was acknowledged and none whose removal was acknowledged, and
    a tree loaded before the round catches up by the logged changes to that same tree."""
    acked: set[str] = set()
    deleted: set[str] = set()
    # Removals tried by a write that was not acknowledged: a kill can land after the commit
    # reached the database and before the writer heard back, so they may or may not be applied.
    may_delete: set[str] = set()
    rng = np.random.default_rng(5)

    def record(line: str) -> bool:
        """Parse "ACK <added>[ DEL <removed>]" or "TRY <added> DEL <removed>"; True for an ACK."""
        words = line.split()
        assert words[0] in ("ACK", "TRY"), line
        if len(words) == 4:
            (deleted if words[0] == "ACK" else may_delete).add(words[3])
        if words[0] == "ACK":
            acked.add(words[1])
        return words[0] == "ACK"

    follower: MembrainTree | None = None
    follower_at = 0
    for round_, kill_after in enumerate((3, 12, 25, 40)):
        proc = start_worker(storage_backend, "write", "--ns", "/".join(NS), "--count", "1000", "--removes",
                            "--seed", str(round_), "--prefix", f"r{round_}")
        seen = 0
        try:
            while seen < kill_after:
                line = proc.stdout.readline()
                assert line, f"writer ended early: {proc.stderr.read()}"
                seen += record(line)
            time.sleep(float(rng.uniform(0, 0.03)))  # land anywhere, often mid-transaction
        finally:
            proc.send_signal(signal.SIGKILL)
            out, _ = proc.communicate()
        # Lines printed between our last read and the kill were acknowledged too.
        for line in out.splitlines():
            record(line)
        storage = storage_backend.fresh()
        tree, _ = storage.load_tree(NS)  # from_rows checks every invariant
        tree.check_invariants()
        facts = set(tree.facts())
        lost = acked - deleted - may_delete - facts
        assert not lost, f"lost acknowledged facts: {sorted(lost)}"
        assert not (deleted & facts), f"acknowledged removals came back: {sorted(deleted & facts)}"
        if follower is None:
            follower, follower_at = storage.load_tree(NS)
        else:
            follower_at = catch_up(storage, follower, follower_at)  # equal to the reload above
        storage.close()
    assert len(acked) >= 80


def test_sigkill_inside_a_transaction_stores_none_of_it(storage_backend: Backend) -> None:
    """Killed after its rows were written but before the lock block committed: none of that
    write is stored, the tree is the one of the last acknowledged write, and the namespace
    lock is free again for the next writer."""
    proc = start_worker(storage_backend, "write", "--ns", "/".join(NS), "--count", "100", "--removes",
                        "--seed", "7", "--prefix", "k", "--pause-at", "20")
    lines = []
    reader = storage_backend.fresh()
    held = None
    try:
        while not lines or not lines[-1].startswith("PAUSED"):
            line = proc.stdout.readline()
            assert line, f"writer ended early: {proc.stderr.read()}"
            lines.append(line.strip())
            if held is None and len(lines) == 10:
                held = reader.load_tree(NS)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    assert lines[-1] == "PAUSED k-20"
    assert [line.split()[1] for line in lines if line.startswith("ACK")] == [f"k-{i}" for i in range(20)]
    storage = storage_backend.fresh()
    tree, version = storage.load_tree(NS)
    assert version == 20  # twenty acknowledged writes, the twenty-first rolled back
    assert "k-20" not in tree and "k-19" in tree
    # The rolled-back write left nothing in the change log either: a tree loaded earlier
    # catches up to exactly the stored one.
    assert catch_up(reader, *held) == 20
    # The dead writer's lock is gone: another process can write at once.
    result = run_worker(storage_backend, "write", "--ns", "/".join(NS), "--count", "3", "--prefix", "after")
    assert result.returncode == 0, result.stderr
    assert storage.namespace_version(NS) == 23
    assert catch_up(reader, held[0], 20) == 23


@pytest.mark.slow
def test_two_processes_write_one_namespace_and_a_third_sees_all(storage_backend: Backend) -> None:
    """Two writers interleave on one namespace, each catching up on the other's writes by
    applying the logged changes; every caught-up tree equals a reload (--verify), none
    had to reload, and the final tree holds every fact."""
    n = storage_backend.concurrent_facts
    go = os.path.join(storage_backend.scratch, "go")
    writers = [start_worker(storage_backend, "write", "--ns", "/".join(NS), "--count", str(n), "--seed", str(k),
                            "--prefix", f"p{k}", "--removes", "--verify", "--go", go,
                            # a pause between writes: SQLite's busy handler is not fair, and a
                            # writer that commits and locks again at once would starve the other
                            "--delay", "0.01") for k in range(2)]
    for w in writers:
        assert w.stdout.readline().strip() == "READY", w.stderr.read()
    open(go, "w").close()  # both start writing now
    outputs = [w.communicate(timeout=240) for w in writers]
    applied = 0
    for w, (out, err) in zip(writers, outputs):
        assert w.returncode == 0, out[-500:] + err
        last = out.splitlines()[-1].split()
        assert last[0] == "DONE" and last[2] == "reloaded=0", last
        applied += int(last[1].split("=")[1])
    assert applied > 0  # they did interleave
    removed = {line.split()[3] for w, (out, _) in zip(writers, outputs) for line in out.splitlines()
               if line.startswith("ACK") and " DEL " in line}
    result = run_worker(storage_backend, "read", "--ns", "/".join(NS))
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["facts"] == sorted({f"p{k}-{i}" for k in range(2) for i in range(n)} - removed)
    assert seen["version"] == 2 * n
    # And this process agrees.
    tree, version = storage_backend.fresh().load_tree(NS)
    assert version == 2 * n and len(tree.facts()) == 2 * n - len(removed)
