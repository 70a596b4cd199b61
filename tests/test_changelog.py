"""Refresh by change: a copy of a tree that applies another copy's logged changes
(MembrainTree.apply_rows over merge_changes) ends up equal to a reload, with every
invariant, and a memory sharing a database with another process refreshes that way.

The storage side (the change log of each backend, compaction, upgrade) is tested in the
shared storage suite (tests/storage_helpers/suite.py); this module needs no database
server.
"""

from __future__ import annotations

import os
import uuid

import numpy as np
import pytest
from helpers import NO_POSTGRES, WordEmbeddings
from hypothesis import HealthCheck, settings
from hypothesis.stateful import invariant
from test_tree_properties import DIM, TreeMachine

from langchain_membrain import MembrainTree
from langchain_membrain.errors import InvariantError
from langchain_membrain.memory import MembrainMemory
from langchain_membrain.storage import open_storage
from langchain_membrain.storage.base import merge_changes


class FollowerMachine(TreeMachine):
    """The tree machine's writes, each committed to a simulated store and change log.
    Followers are copies loaded at some committed version: one applies every write as it
    comes, one catches up on several writes merged, and a new one joins every few writes;
    after catching up each equals a reload of what is stored, with every invariant."""

    def __init__(self):
        super().__init__()
        self.stored: dict[str, dict] = {}  # what the database holds: id -> row
        self.log: list[tuple[int, str, str, dict | None]] = []  # (version, op, id, row)
        self.version = 0
        self.commit()
        self.followers: list[list] = [[self.reference(), self.version, 1], [self.reference(), self.version, 3]]  # tree, at, every

    def commit(self) -> None:
        rows, removed = self.tree.drain_changes()
        if not rows and not removed:
            return
        self.version += 1
        for row in rows:
            self.stored[row["id"]] = row
            self.log.append((self.version, "upsert", row["id"], row))
        for rid in removed:
            self.stored.pop(rid, None)
            self.log.append((self.version, "remove", rid, None))

    def reference(self) -> MembrainTree:
        return MembrainTree.from_rows(self.stored.values(), dim=DIM)

    def catch_up(self, follower: list) -> None:
        tree, at, _ = follower
        if follower[2] == 1:  # one write at a time
            for v in range(at + 1, self.version + 1):
                rows, removed, _ = merge_changes(v, v - 1, [e for e in self.log if e[0] == v])
                tree.apply_rows(rows, removed)
        else:
            rows, removed, _ = merge_changes(self.version, at, [e for e in self.log if e[0] > at])
            tree.apply_rows(rows, removed)
        follower[1] = self.version
        tree.check_invariants(atol=1e-4)
        assert tree.to_dict() == self.reference().to_dict()
        assert tree.drain_changes() == ([], [])  # applied changes are stored already: not journalled

    @invariant()
    def followers_catch_up(self):
        self.commit()
        for follower in self.followers:
            if self.version - follower[1] >= follower[2]:
                self.catch_up(follower)
        if self.version and self.version % 4 == 0 and len(self.followers) < 6:
            self.followers.append([self.reference(), self.version, 2])
        # A caught-up follower's next own write gets a seq after every applied one: the new fact sorts last
        # among its siblings, as it would in a reload.
        tree, at, _ = self.followers[0]
        assert at == self.version
        probe = tree.copy()
        fid = probe.add_fact(probe.root_id, "probe", node_id="probe-fact")
        assert probe.children(probe.root_id)[-1] == fid
        assert MembrainTree.from_rows([probe.node_row(n) for n in [*probe.graph.nodes, *probe.archive]],
                                      dim=DIM).to_dict() == probe.to_dict()


FollowerMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=30, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestFollowerMachine = FollowerMachine.TestCase


def two_memories_with_a_short_log(tmp_path) -> tuple[MembrainMemory, MembrainMemory]:
    """Two memories (two processes' worth) on one SQLite file whose change log keeps 2 versions."""
    from langchain_membrain.storage import SQLiteStorage

    db = str(tmp_path / "shared.db")
    return tuple(MembrainMemory(embeddings=WordEmbeddings(), storage=SQLiteStorage(db, log_retention=2),
                                refresh_interval=0.0) for _ in range(2))  # type: ignore[return-value]


def assert_both_equal_a_reload(a: MembrainMemory, b: MembrainMemory, ns: str) -> None:
    """Both memories' trees of ``ns`` hold the invariants and equal the stored tree."""
    tree = b.tree(ns)
    tree.check_invariants()
    reloaded, _ = b._storage.load_tree((ns,))
    assert tree.to_dict() == reloaded.to_dict()
    assert a.tree(ns).to_dict() == reloaded.to_dict()


def test_merge_needs_every_version_and_stops_at_a_reset() -> None:
    row = {"id": "f", "kind": "fact"}
    entries = [(2, "upsert", "f", row), (3, "remove", "f", None), (4, "upsert", "g", row)]
    assert merge_changes(4, 1, entries) == ([row], ["f"], 4)
    assert merge_changes(4, 1, [(2, "remove", "f", None), (3, "upsert", "f", row), (4, "upsert", "g", row)]) \
        == ([row, row], [], 4)
    assert merge_changes(4, 0, entries) is None  # version 1 was compacted
    assert merge_changes(5, 1, entries) is None  # version 5 was not logged
    assert merge_changes(4, 1, [*entries[:2], (4, "reset", "", None)]) is None


def test_changes_that_do_not_fit_the_tree_are_refused() -> None:
    tree = MembrainTree("s", dim=DIM)
    a = tree.add_aspect("root", "topic", node_id="a")
    f = tree.add_fact(a, "fact", embedding=np.ones(DIM), node_id="f")
    tree.drain_changes()
    row = tree.node_row(f)
    bad = [
        ([dict(row, id="g", parent="nowhere")], []),  # unknown parent
        ([dict(row, id="g", parent=f)], []),  # a fact as parent
        ([dict(tree.node_row(a), parent=a)], []),  # a cycle
        ([], [a]),  # the aspect goes, its fact is left without a parent
        ([dict(row, kind="aspect")], []),  # a fact turned aspect
        ([dict(tree.node_row("root"), id="root2")], []),  # a second root
    ]
    for rows, removed in bad:
        follower = MembrainTree.from_rows([tree.node_row(n) for n in tree.graph.nodes], dim=DIM)
        with pytest.raises(InvariantError):
            follower.apply_rows(rows, removed)


@pytest.fixture(params=["sqlite", "postgres"])
def shared_storage(request, tmp_path):
    """A function opening a new Storage on one database shared by the test's memories."""
    if request.param == "sqlite":
        db = str(tmp_path / "shared.db")
        yield lambda: open_storage(db)
        return
    url = os.environ.get("MEMBRAIN_TEST_POSTGRES_URL")
    if not url:
        pytest.skip(NO_POSTGRES)
    import psycopg

    schema = f"membrain_test_{uuid.uuid4().hex[:12]}"
    yield lambda: open_storage(url, schema=schema)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_a_memory_refreshes_by_change_after_another_ones_writes(shared_storage) -> None:
    """Two memories on one database: each sees the other's adds, updates and deletes by
    applying the logged changes, searches find them, and the tree equals a reload."""
    a = MembrainMemory(embeddings=WordEmbeddings(), storage=shared_storage(), refresh_interval=0.0)
    b = MembrainMemory(embeddings=WordEmbeddings(), storage=shared_storage(), refresh_interval=0.0)
    try:
        texts = ["my dog rex loves the park", "the cat sleeps on the sofa", "pasta with tomato sauce",
                 "fresh bread from the bakery", "the quarterly report is due monday", "rex the dog barks"]
        keys = [a.add(t, namespace="team") for t in texts]
        assert {r.key for r in b.search("dog rex", namespace="team", limit=10)} >= {keys[0], keys[5]}
        kb = b.add("bob grows tomatoes", namespace="team")  # b's first load was whole; now b wrote
        before = b.stats()  # (stats refreshes too: taken while b is up to date)
        a.delete(keys[1], namespace="team")
        a.put("team", keys[2], {"content": "pasta with pesto"})
        a.add("alice keeps bees", namespace="team")
        hits = {r.key: r for r in b.search("pesto bees tomatoes", namespace="team", limit=10)}
        after = b.stats()
        assert after["refreshed_by_change"] == before["refreshed_by_change"] + 1
        assert after["refresh_reloads"] == before["refresh_reloads"]
        assert keys[2] in hits and kb in hits and keys[1] not in hits
        assert b.get(keys[1], namespace="team") is None
        assert b.get(keys[2], namespace="team").value["content"] == "pasta with pesto"
        assert_both_equal_a_reload(a, b, "team")
    finally:
        a.close(), b.close()


def test_a_memory_further_behind_than_the_log_reloads(tmp_path) -> None:
    a, b = two_memories_with_a_short_log(tmp_path)
    try:
        a.add("the first fact", namespace="n")
        assert len(b.search("first", namespace="n")) == 1
        before = b.stats()
        for i in range(4):
            a.add(f"fact number {i} about bees", namespace="n")
        hits = [r.text for r in b.search("bees", namespace="n", limit=10)]
        assert sorted(hits[:4]) == [f"fact number {i} about bees" for i in range(4)]
        after = b.stats()
        assert after["refresh_reloads"] == before["refresh_reloads"] + 1
        assert after["refreshed_by_change"] == before["refreshed_by_change"]
        assert b.tree("n").to_dict() == a.tree("n").to_dict()
    finally:
        a.close(), b.close()


def _count_calls(storage, name: str) -> list:
    """Count the calls of one method of a Storage the test made and handed to a memory
    (a list that grows by one per call); it wraps that object's own attribute only."""
    calls: list = []
    method = getattr(storage, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return method(*args, **kwargs)

    setattr(storage, name, counted)
    return calls


def test_a_check_reads_the_version_and_the_changes_in_one_query(shared_storage) -> None:
    """A memory holding a namespace learns whether another process wrote it, and what it
    wrote, from one ``changes_since`` query, when reading and when writing (under the
    namespace lock): no separate version lookup; nothing is applied when nothing changed."""
    b_storage = shared_storage()  # the Storage b is given: the test counts its calls
    a = MembrainMemory(embeddings=WordEmbeddings(), storage=shared_storage(), refresh_interval=0.0)
    b = MembrainMemory(embeddings=WordEmbeddings(), storage=b_storage, refresh_interval=0.0)
    try:
        a.add("my dog rex loves the park", namespace="team")
        b.add("the cat sleeps on the sofa", namespace="team")  # b's first load: whole
        before = b.stats()
        versions = _count_calls(b_storage, "namespace_version")
        reads = _count_calls(b_storage, "changes_since")
        b.search("cat", namespace="team")  # nothing changed since b's write
        assert len(reads) == 1 and not versions
        assert b.refresh_counts.refreshed_by_change == before["refreshed_by_change"]
        a.add("pasta with tomato sauce", namespace="team")
        assert "pasta with tomato sauce" in [r.text for r in b.search("pasta", namespace="team")]
        assert len(reads) == 2 and not versions
        a.add("fresh bread from the bakery", namespace="team")
        b.add("bob grows tomatoes", namespace="team")  # catches up under the lock, then writes
        assert len(reads) >= 3 and not versions
        after = b.stats()
        assert after["refreshed_by_change"] == before["refreshed_by_change"] + 2
        assert after["refresh_reloads"] == before["refresh_reloads"]
        assert_both_equal_a_reload(a, b, "team")
    finally:
        a.close(), b.close()


def test_a_write_behind_a_compacted_log_or_a_deleted_namespace_reloads(tmp_path) -> None:
    """A write by a memory further behind than the log reloads the namespace under the
    lock, and one whose namespace another process deleted starts it afresh."""
    a, b = two_memories_with_a_short_log(tmp_path)
    try:
        a.add("the first fact", namespace="n")
        b.add("the cat sleeps on the sofa", namespace="n")
        for i in range(4):
            a.add(f"fact number {i} about bees", namespace="n")
        a.flush()  # a's background writes (a renamed aspect) land before b's write, not during it
        counts = b.refresh_counts  # (not stats(): it would catch up first)
        reloads, by_change = counts.refresh_reloads, counts.refreshed_by_change
        b.add("bob grows tomatoes", namespace="n")
        assert counts.refresh_reloads == reloads + 1
        assert counts.refreshed_by_change == by_change
        assert_both_equal_a_reload(a, b, "n")
        assert len(b.tree("n").facts()) == 7
        assert a._storage.delete_namespace(("n",))
        key = b.add("a fresh start", namespace="n")
        assert b.tree("n").facts() == [key]
        assert [r.key for r in a.search("fresh start bees", namespace="n", limit=10)] == [key]
    finally:
        a.close(), b.close()
