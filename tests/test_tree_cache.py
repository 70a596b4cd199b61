"""Issue 48, saved trees (tree_cache.py): a memory saves each large namespace's tree beside
its saved index at close, and a restart reads it back instead of reading and rebuilding
every row, with the same tree and the same search results; any write since the save (by
another process, or by one that never closed) makes the file stale, and a stale, corrupt or
foreign file is never trusted: the namespace is read from its rows, nothing lost."""

from __future__ import annotations

import json
import mmap
import os
import pickle
import sys
import uuid
import zlib

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from helpers import NO_POSTGRES, WordEmbeddings  # noqa: E402
from test_cold_open import chat_events, hits, memory, same_hits  # noqa: E402

from langchain_membrain import MembrainMemory  # noqa: E402
from langchain_membrain.bench.updates import GroundTruthTeacher  # noqa: E402
from langchain_membrain.storage import index_cache, mapped, open_storage, tree_cache  # noqa: E402
from langchain_membrain.tree.tree import MembrainTree  # noqa: E402

NS = ("chat",)


@pytest.fixture(autouse=True)
def small_namespaces_saved(monkeypatch):
    monkeypatch.setattr(index_cache, "MIN_ENTRIES", 1)


def opened(db):
    mem = memory(db)
    mem.search("apple", namespace="chat", limit=1)  # loads the namespace
    return mem


def state(mem):
    return mem._forest._loaded[NS]


def from_rows(mem) -> MembrainTree:
    rows, dim, _ = mem._forest.storage.load_rows(NS)
    return MembrainTree.from_rows(rows, dim=dim)


def tree_file(db) -> str:
    (name,) = [n for n in os.listdir(str(db) + ".index") if n.endswith(".tree")]
    return os.path.join(str(db) + ".index", name)


def filled(db, n: int = 150) -> None:
    with memory(db) as mem:
        for text, meta in chat_events(n):
            mem.add(text, namespace="chat", metadata=meta)


def test_a_restart_reads_the_saved_tree_and_it_is_the_stored_one(tmp_path):
    """The restored tree equals the tree built from the rows (nodes, texts, embeddings,
    archive, sums), searches as the rows' does, and takes writes as it would."""
    db = tmp_path / "m.db"
    filled(db)
    with opened(db) as mem:
        assert state(mem).tree_saved == state(mem).synced  # restored, not read from rows
        tree = mem._forest.tree(NS, create=False)
        expected = from_rows(mem)
        assert tree.to_dict() == expected.to_dict() and tree.archive.keys() == expected.archive.keys()
        for nid in expected.graph:
            a, b = tree.node(nid), expected.node(nid)
            assert (a.n_facts, a.emb_count) == (b.n_facts, b.emb_count)
            if b.emb_sum is not None:
                np.testing.assert_allclose(a.emb_sum, b.emb_sum, rtol=1e-12)
        twin = tree.copy()  # copy-on-write, as a tree read from rows copies
        twin.remove(tree.facts()[0])
        assert tree.to_dict() == expected.to_dict() and len(twin) == len(tree) - 1
        restored = {mode: hits(mem, mode) for mode in ("default", "exact", "fast")}
    with memory(db) as mem:  # the rows' tree and index
        mem._forest.index_cache = None
        mem.search("apple", namespace="chat", limit=1)
        assert state(mem).tree_saved == -1
        rebuilt = {mode: hits(mem, mode) for mode in restored}
    for mode in restored:
        for a, b in zip(restored[mode], rebuilt[mode]):
            same_hits(a, b)
    with opened(db) as mem:
        mem.add("Alice bought a new purple guitar by the river", namespace="chat", metadata={"speaker": "Alice"})
    with opened(db) as mem:
        assert state(mem).tree_saved == state(mem).synced  # saved again at close, after the write
        assert mem._forest.tree(NS, create=False).to_dict() == from_rows(mem).to_dict()
        assert any("purple" in r.value["content"] for r in mem.search("purple guitar", namespace="chat", limit=3))


def corrupt(path: str, how: str) -> None:
    data = open(path, "rb").read()
    if how == "truncated":
        data = data[: len(data) - 100]
    elif how == "flipped":
        data = data[:-40] + bytes(b ^ 0xFF for b in data[-40:])
    elif how == "garbage":
        data = os.urandom(len(data))
    elif how == "malicious":  # a valid header and CRC, a pickle naming a global the reader must refuse
        head_len = int.from_bytes(data[8:16], "little")
        head = json.loads(data[16:16 + head_len])
        blob = pickle.dumps(os.system)
        head.update(pickle_bytes=len(blob), pickle_crc=zlib.crc32(blob), rows=0, vectors_crc=zlib.crc32(b""))
        raw = json.dumps(head).encode()
        data = data[:8] + len(raw).to_bytes(8, "little") + raw + blob
        data += mapped.padding(len(data))  # so that only the unpickler can refuse it
    open(path, "wb").write(data)


@pytest.mark.parametrize("how", ["compacted", "truncated", "flipped", "garbage", "malicious"])
def test_a_bad_saved_tree_or_one_the_log_cannot_bring_up_to_date_is_not_trusted(tmp_path, how):
    """A damaged file, or one saved before writes the change log no longer holds (another
    process, keeping one version of log, wrote three times and saved nothing): the namespace
    is read from its rows, with every fact (the new ones too), and a good file is written
    at close."""
    db = tmp_path / "m.db"
    filled(db, 120)
    path = tree_file(db)
    if how == "compacted":
        storage = open_storage(str(db), log_retention=1)
        with memory(storage) as mem:
            mem._forest.index_cache = None  # this process saves nothing
            for i in range(3):
                mem.add(f"a new fact about the purple guitar, take {i}", namespace="chat")
        storage.close()
    else:
        corrupt(path, how)
    with opened(db) as mem:
        assert state(mem).tree_saved == -1  # read from the rows
        tree = mem._forest.tree(NS, create=False)
        assert tree.to_dict() == from_rows(mem).to_dict()
        assert any("purple" in tree.node(f).text for f in tree.facts()) == (how == "compacted")
        got = hits(mem, "exact")
    with opened(db) as mem:
        assert state(mem).tree_saved == state(mem).synced  # the file written at close is good
        assert mem._forest.tree(NS, create=False).to_dict() == from_rows(mem).to_dict()
        assert hits(mem, "exact") == got


@pytest.mark.parametrize("closed", [True, False], ids=["closed", "killed"])
def test_writes_since_the_save_are_applied_from_the_change_log(tmp_path, closed):
    """Another process wrote since the save and saved nothing (it closed, or it was killed
    before closing): a restart reads the saved tree and index and applies those writes from
    the change log, as a running process applies another's, with the tree and search results
    of the rows; its close saves both again."""
    db = tmp_path / "m.db"
    filled(db, 120)
    writer = opened(db)
    writer._forest.index_cache = None  # this process saves nothing
    first = writer.search("apple", namespace="chat", limit=1)[0].key
    writer.add("Alice bought a new purple guitar by the river", namespace="chat", metadata={"speaker": "Alice"})
    writer.delete(first, namespace="chat")
    if closed:
        writer.close()
    with opened(db) as mem:
        saved, synced = state(mem).tree_saved, state(mem).synced
        assert 0 < saved < synced and state(mem).saved == saved  # both files read, then caught up
        tree = mem._forest.tree(NS, create=False)
        assert tree.to_dict() == from_rows(mem).to_dict() and first not in tree.facts()
        caught_up = hits(mem, "exact") + [[(r.key, r.score) for r in mem.search("purple guitar", namespace="chat")]]
    assert any(k for k, _ in caught_up[-1])
    with memory(db) as mem:  # the rows' tree and index
        mem._forest.index_cache = None
        mem.search("apple", namespace="chat", limit=1)
        rebuilt = hits(mem, "exact") + [[(r.key, r.score) for r in mem.search("purple guitar", namespace="chat")]]
    for a, b in zip(caught_up, rebuilt):
        same_hits(a, b)
    with opened(db) as mem:
        assert state(mem).tree_saved == state(mem).saved == state(mem).synced  # saved again at the last close
    if not closed:
        writer.close()


def test_a_tree_with_unwritten_changes_is_not_saved(tmp_path):
    tree = MembrainTree("subject", dim=4)  # its root not written yet
    with pytest.raises(ValueError):
        tree_cache.encode(tree, (1, 0.0, 4))


def test_an_index_saved_at_the_saved_trees_head_is_used_without_its_fingerprint(tmp_path, monkeypatch):
    """Tree and index saved at one stored head: a restart reads both, and does not hash
    every entry to check the index. With the tree file damaged, the tree comes from the
    rows and the index is checked by its fingerprint (and still used)."""
    db = tmp_path / "m.db"
    filled(db, 120)
    calls = []
    real = index_cache.fingerprint
    monkeypatch.setattr(index_cache, "fingerprint", lambda *a: calls.append(1) or real(*a))
    with opened(db) as mem:
        assert state(mem).saved == state(mem).tree_saved == state(mem).synced and calls == []
        got = hits(mem, "exact")
    corrupt(tree_file(db), "flipped")
    with opened(db) as mem:
        assert state(mem).tree_saved == -1 and state(mem).saved == state(mem).synced and calls
        assert hits(mem, "exact") == got


def mapped_from_file(array: np.ndarray) -> bool:
    base = array
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base.obj if isinstance(base, memoryview) else base, mmap.mmap)


@pytest.mark.parametrize("maps", [True, False], ids=["mapped", "read"])
def test_the_saved_arrays_are_mapped_where_the_platform_allows_and_read_elsewhere(tmp_path, monkeypatch, maps):
    """A restart maps the saved rows and vectors from the files (mapped.py), aligned, or
    reads them (``MAP`` False, as on Windows): the same tree and search results either way,
    and a write after the restart (past the mapped rows) searches as the rows say."""
    monkeypatch.setattr(mapped, "MAP", maps)
    db = tmp_path / "m.db"
    filled(db)
    with opened(db) as mem:
        assert state(mem).saved == state(mem).tree_saved == state(mem).synced
        tree, index = mem._forest.tree(NS, create=False), mem._forest.index(NS)
        rows, vectors = index._dense._emb, [tree.node(f).embedding for f in tree.facts()]
        assert mapped_from_file(rows) == all(mapped_from_file(v) for v in vectors) == maps
        assert rows.flags.writeable and (rows.ctypes.data % mapped.ALIGN == 0 or not maps)
        assert tree.to_dict() == from_rows(mem).to_dict()
        mem.add("Alice bought a new purple guitar by the river", namespace="chat", metadata={"speaker": "Alice"})
        after = hits(mem, "exact") + [[(r.key, r.score) for r in mem.search("purple guitar", namespace="chat")]]
    with memory(db) as mem:  # the rows' tree and index
        mem._forest.index_cache = None
        mem.search("apple", namespace="chat", limit=1)
        rebuilt = hits(mem, "exact") + [[(r.key, r.score) for r in mem.search("purple guitar", namespace="chat")]]
    assert after[-1] and len(after) == len(rebuilt)
    for a, b in zip(after, rebuilt):
        same_hits(a, b)


PG_URL = os.environ.get("MEMBRAIN_TEST_POSTGRES_URL")


@pytest.fixture
def pg_schema():
    if not PG_URL:
        pytest.skip(NO_POSTGRES)
    import psycopg

    name = f"membrain_test_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.mark.postgres
def test_postgres_saves_its_indexes_and_trees_under_index_dir_only(tmp_path, pg_schema):
    """PostgreSQL saves nothing by default; with ``index_dir`` a restart reads the saved
    tree and index (a folder per database under it) and searches as the rows' would; a
    write since, by a process that saves nothing, is applied from the change log."""
    index_dir = tmp_path / "saved"
    opened_storages = []

    def pg_memory(**kw):
        storage = open_storage(PG_URL, schema=pg_schema)
        opened_storages.append(storage)
        mem = MembrainMemory(storage, teacher=GroundTruthTeacher(), embeddings=WordEmbeddings(), background=False,
                             relabel=False, prior=False, operations="teacher", **kw)
        return mem

    try:
        with pg_memory() as mem:
            for text, meta in chat_events(150):
                mem.add(text, namespace="chat", metadata=meta)
            mem.search("apple", namespace="chat", limit=1)
        with pg_memory() as mem:
            mem.search("apple", namespace="chat", limit=1)
            assert state(mem).saved == state(mem).tree_saved == -1  # nothing saved without index_dir
            rebuilt = hits(mem, "exact")
        assert not index_dir.exists()
        with pg_memory(index_dir=index_dir) as mem:  # from the rows; saved at close
            mem.search("apple", namespace="chat", limit=1)
            assert state(mem).tree_saved == -1
        (folder,) = list(index_dir.iterdir())
        assert sorted(p.suffix for p in folder.iterdir()) == [".idx", ".tree"]
        with pg_memory(index_dir=index_dir) as mem:
            mem.search("apple", namespace="chat", limit=1)
            assert state(mem).saved == state(mem).tree_saved == state(mem).synced  # both read back
            assert mem._forest.tree(NS, create=False).to_dict() == from_rows(mem).to_dict()
            assert hits(mem, "exact") == rebuilt
        with pg_memory() as mem:  # another process writes and saves nothing
            mem.add("Alice bought a new purple guitar by the river", namespace="chat")
        with pg_memory(index_dir=index_dir) as mem:
            mem.search("apple", namespace="chat", limit=1)
            assert 0 < state(mem).tree_saved == state(mem).saved < state(mem).synced  # caught up from the log
            assert mem._forest.tree(NS, create=False).to_dict() == from_rows(mem).to_dict()
            assert any("purple" in r.value["content"] for r in mem.search("purple guitar", namespace="chat", limit=3))
    finally:
        for storage in opened_storages:
            storage.close()
