"""SQLite storage: the shared suite on a temporary file, plus SQLite's own bad inputs."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))  # the shared suite lives next to this file

from storage_helpers.suite import *  # noqa: E402,F401,F403  (the shared tests)
from storage_helpers.suite import DIM, NS, Backend, snapshot  # noqa: E402

from langchain_membrain.errors import SchemaVersionError, StorageError  # noqa: E402
from langchain_membrain.storage import (  # noqa: E402
    SCHEMA_VERSION,
    NotADatabaseError,
    SQLiteStorage,
    StorageUnavailableError,
    open_storage,
)
from langchain_membrain.tree.tree import MembrainTree  # noqa: E402


@pytest.fixture
def storage_backend(tmp_path: Path):
    path = tmp_path / "membrain.db"

    def raw(statement: str, params: tuple) -> list:
        with sqlite3.connect(path) as conn:
            return conn.execute(statement, params).fetchall()

    backend = Backend(open=lambda **kw: open_storage(str(path), **kw), raw=raw, worker_args=["--target", str(path)],
                      concurrent_facts=100, scratch=str(tmp_path))
    yield backend
    for storage in backend.opened:
        storage.close()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def small_tree() -> MembrainTree:
    tree = MembrainTree("s", dim=DIM)
    tree.add_fact("root", "a fact", embedding=np.ones(DIM))
    return tree


def test_open_storage_picks_the_backend(tmp_path: Path) -> None:
    for target in (str(tmp_path / "a.db"), tmp_path / "b.db", None, ":memory:"):
        with open_storage(target) as storage:
            assert isinstance(storage, SQLiteStorage)
    with pytest.raises(StorageError):
        open_storage(42)


def test_file_uses_wal_and_full_sync(tmp_path: Path) -> None:
    """The crash guarantee the README states rests on these two settings."""
    with open_storage(tmp_path / "m.db") as storage:
        conn = storage._thread_conn()
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    with open_storage(tmp_path / "m.db", synchronous="NORMAL") as storage:
        assert storage._thread_conn().execute("PRAGMA synchronous").fetchone()[0] == 1
    with pytest.raises(StorageError):
        open_storage(tmp_path / "m.db", synchronous="OFF")


def test_in_memory_storage_is_private_and_thread_safe() -> None:
    with open_storage(None) as storage, open_storage(":memory:") as other:
        storage.write(NS, *small_tree().drain_changes())
        assert other.list_namespaces() == []

        def bump() -> None:
            for _ in range(20):
                with storage.namespace_lock(NS):
                    tree, version = storage.load_tree(NS)
                    tree.add_fact("root", "x", embedding=np.zeros(DIM))
                    storage.write(NS, *tree.drain_changes(), expected_version=version)

        threads = [threading.Thread(target=bump) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert storage.namespace_version(NS) == 61
        assert len(storage.load_tree(NS)[0].facts()) == 61


def test_a_file_that_is_not_a_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("these are my notes, not a database\n" * 100)
    before = digest(path)
    with pytest.raises(NotADatabaseError, match="not an SQLite database"):
        open_storage(path)
    assert digest(path) == before
    assert sorted(os.listdir(tmp_path)) == ["notes.txt"]


def test_an_unwritable_location_is_refused(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for target in (tmp_path / "missing-dir" / "m.db", a_file / "m.db", tmp_path):
        with pytest.raises(StorageUnavailableError):
            open_storage(target)
    assert not (tmp_path / "missing-dir").exists()
    # A read-only file system location (root ignores permission bits, so use one the
    # kernel refuses to anyone): /proc.
    with pytest.raises(StorageUnavailableError):
        open_storage("/proc/membrain-test.db")


def test_a_schema_from_the_future_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with open_storage(path) as storage:
        storage.write(NS, *small_tree().drain_changes())
        storage.save_checkpoint("stage1", b"weights", {"steps": 1})
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE membrain_schema SET version = ?", (SCHEMA_VERSION + 1,))
    conn.close()
    before = digest(path)
    with pytest.raises(SchemaVersionError, match="newer membrain"):
        open_storage(path)
    assert digest(path) == before
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM membrain_nodes").fetchone()[0] == 2
    conn.close()


def test_a_writer_waiting_too_long_gets_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    holder = open_storage(path)
    waiter = open_storage(path, busy_timeout=0.2)
    holder.write(NS, *small_tree().drain_changes())
    with holder.namespace_lock(NS):
        with pytest.raises(StorageUnavailableError, match="locked"):
            waiter.write(("other",), *small_tree().drain_changes())
        assert waiter.namespace_version(NS) == 1  # readers are not blocked (WAL)
        open_storage(path, busy_timeout=0.2).close()  # nor is opening the store
    waiter.write(("other",), *small_tree().drain_changes())
    holder.close()
    waiter.close()


def test_reopened_file_gives_the_same_tree(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    tree = small_tree()
    with open_storage(path) as storage:
        storage.write(NS, *tree.drain_changes())
    with open_storage(path) as storage:
        assert snapshot(storage) == (tree.to_dict(), 1)
