"""Issue 48, saved search indexes (index_cache.py): a memory saves each large namespace's
index at close, a restart reads it back instead of indexing every fact, and searches as the
process before it; a stale, missing or corrupt file is never trusted, never an error, and
loses nothing: the namespace is indexed from its rows as before."""

from __future__ import annotations

import io
import json
import os
import pickle
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from test_cold_open import CHAT, DIM, QUERIES, chat_events, fields, hits, items, memory, same_hits  # noqa: E402

from langchain_membrain import RetrievalConfig
from langchain_membrain.index.facts import FactIndex  # noqa: E402
from langchain_membrain.storage import index_cache, mapped  # noqa: E402
from langchain_membrain.storage.index_cache import IndexCache, fingerprint  # noqa: E402

NS = ("chat",)


@pytest.fixture(autouse=True)
def small_namespaces_saved(monkeypatch):
    monkeypatch.setattr(index_cache, "MIN_ENTRIES", 1)


@pytest.mark.parametrize("config", [RetrievalConfig(), CHAT], ids=["plain", "chat"])
def test_a_saved_index_reads_back_as_it_was(tmp_path, config):
    """Fields, ids, speakers, embeddings and search results of a restored index are the
    saved one's; another fingerprint or configuration reads nothing."""
    index = FactIndex(config)
    index.add_many(items(200))
    index.set_former("f4", [("old apple text", np.ones(DIM))])
    cache = IndexCache(str(tmp_path / "db.index"))
    assert cache.save(NS, index, "fp1")
    back = cache.load(NS, "fp1", lambda: FactIndex(config))
    assert back is not None and fields(back) == fields(index) and back.ids() == index.ids()
    assert back.speakers() == index.speakers()
    assert [[t for t, _ in back.former(k)] for k in back.ids()] == [[t for t, _ in index.former(k)] for k in index.ids()]
    q = np.random.default_rng(5).normal(size=DIM)
    for query in QUERIES:
        for mode in ("exact", "fast"):
            same_hits(back.search(query, q, 10, mode=mode), index.search(query, q, 10, mode=mode), rel=0)
    assert cache.load(NS, "fp2", lambda: FactIndex(config)) is None
    other = RetrievalConfig(dense_weight=0.5) if config == RetrievalConfig() else RetrievalConfig()
    assert cache.load(NS, "fp1", lambda: FactIndex(other)) is None
    # Writes after a restore: as on the saved index.
    for ix in (index, back):
        ix.add("new", "guitar by the river", np.ones(DIM, dtype=np.float32), {"speaker": "Alice", "session": 2})
        ix.remove("f1")
        ix.update("f2", text="mountain camping", embedding=-np.ones(DIM))
    assert fields(back) == fields(index)
    for query in QUERIES:
        same_hits(back.search(query, q, 10, mode="exact"), index.search(query, q, 10, mode="exact"), rel=1e-9)


def graph_index(config: RetrievalConfig, n: int = 300) -> tuple[FactIndex, np.ndarray]:
    """An index grown one fact at a time past its graph's size, and the embedding of the
    fact it removed (marked deleted in the graph)."""
    rng = np.random.default_rng(3)
    index = FactIndex(config)
    for i in range(n):
        index.add(f"f{i}", f"w{i % 20}", rng.normal(size=DIM), {"speaker": "Alice", "session": i // 10})
    removed = index._dense.vector(7)
    index.remove("f7")
    assert index._dense.has_graph and removed is not None
    return index, removed


def test_a_restored_index_keeps_its_graph_and_searches_as_the_saved_one(tmp_path):
    """The HNSW graph is saved: a restored index is in fast mode from its first search,
    with the saved index's results (the same graph); writes after it go on as before."""
    config = RetrievalConfig(ann_min_facts=50, ann_candidates=20)
    index, removed = graph_index(config)
    cache = IndexCache(str(tmp_path / "db.index"))
    assert cache.save(NS, index, "fp")
    back = cache.load(NS, "fp", lambda: FactIndex(config))
    assert back is not None and back._dense.has_graph and back._dense.waiting == 0
    rng = np.random.default_rng(4)
    for _ in range(10):
        q = rng.normal(size=DIM)
        for query in ("w3", "w11 w4", "nothing"):
            assert back.search(query, q, 10, mode="fast") == index.search(query, q, 10, mode="fast")
            assert back.nearest(q, 5) == index.nearest(q, 5)
    assert "f7" not in {f for f, _ in back.nearest(removed, 3)}
    for i in range(20):
        back.add(f"n{i}", "w3", rng.normal(size=DIM))
    back.update("f2", embedding=rng.normal(size=DIM))
    q = rng.normal(size=DIM)
    assert back._dense.has_graph and back.nearest(q, 1)[0][0] == back.search("", q, 1, mode="exact")[0][0]


def test_an_index_saved_before_its_graph_was_built_builds_it_with_the_writes_that_follow(tmp_path):
    """A bulk load saved before its next writes built the graph: fast mode is exact after
    a restore until the writes that follow have built it (dense.py, "Bulk load")."""
    config = RetrievalConfig(ann_min_facts=50, ann_candidates=20)
    rng = np.random.default_rng(3)
    index = FactIndex(config)
    index.add_many((f"f{i}", f"w{i % 20}", rng.normal(size=DIM), None, False) for i in range(300))
    cache = IndexCache(str(tmp_path / "db.index"))
    assert cache.save(NS, index, "fp")
    back = cache.load(NS, "fp", lambda: FactIndex(config))
    assert back is not None and not back._dense.has_graph
    q = rng.normal(size=DIM)
    assert back.search("w3", q, 10, mode="fast") == index.search("w3", q, 10, mode="exact")
    for i in range(20):
        back.add(f"n{i}", "w3", rng.normal(size=DIM))
    assert back._dense.has_graph


def graph_bytes_at(path: str) -> int:
    """Where the graph's raw arrays start in a saved file (after the pickle and the rows,
    each raw array aligned)."""
    data = open(path, "rb").read()
    head_len = int.from_bytes(data[8:16], "little")
    head = json.loads(data[16:16 + head_len])
    rows_at = 16 + head_len + head["pickle_bytes"] + len(mapped.padding(16 + head_len + head["pickle_bytes"]))
    end = rows_at + head["rows"] * head["dim"] * 4
    return end + len(mapped.padding(end))


@pytest.mark.parametrize("how", ["flipped", "truncated", "labels"])
def test_a_corrupt_or_mismatched_graph_is_not_trusted(tmp_path, how):
    """A bit flipped in the graph's bytes, a file cut inside them, or a graph (with valid
    CRCs) whose labels are not the rows' slots: nothing loads, so the namespace is indexed
    from its rows."""
    config = RetrievalConfig(ann_min_facts=50, ann_candidates=20)
    index, _ = graph_index(config)
    cache = IndexCache(str(tmp_path / "db.index"))
    if how == "labels":
        index._dense._hnsw.add_items(np.ones((1, DIM), dtype=np.float32), [10_000])
    assert cache.save(NS, index, "fp")
    path = cache.path(NS)
    data = bytearray(open(path, "rb").read())
    at = graph_bytes_at(path)
    assert len(data) - at > 300 * DIM * 4  # the graph holds its own copy of the vectors
    if how == "flipped":
        data[at + 1000] ^= 0x10
    elif how == "truncated":
        data = data[:at + 1000]
    open(path, "wb").write(bytes(data))
    assert cache.load(NS, "fp", lambda: FactIndex(config)) is None


def reopened(db, **kw):
    mem = memory(db, **kw)
    mem.search("apple", namespace="chat", limit=1)  # loads the namespace
    return mem


def state(mem):
    return mem._forest._loaded[NS]


@pytest.mark.parametrize("retrieval", [RetrievalConfig(), CHAT], ids=["plain", "chat"])
def test_a_restart_reads_the_saved_index_and_searches_as_before(tmp_path, retrieval):
    db = tmp_path / "m.db"
    with memory(db, retrieval=retrieval) as mem:
        for text, meta in chat_events(260):
            mem.add(text, namespace="chat", metadata=meta)
        live = {mode: hits(mem, mode) for mode in ("default", "exact", "fast")}
    assert os.listdir(str(db) + ".index")
    with reopened(db, retrieval=retrieval) as mem:
        assert state(mem).saved == state(mem).synced  # restored, not rebuilt
        restored = {mode: hits(mem, mode) for mode in live}
    with reopened(db, retrieval=retrieval) as mem:
        mem._forest.index_cache = None
        mem._forest.drop(NS)
        rebuilt = {mode: hits(mem, mode) for mode in live}
        assert state(mem).saved == -1
    for mode in live:
        for a, b, c in zip(restored[mode], live[mode], rebuilt[mode]):
            same_hits(a, b)
            same_hits(c, b)


def corrupt(path: str, how: str) -> None:
    data = open(path, "rb").read()
    if how == "truncated":
        data = data[: len(data) // 2]
    elif how == "flipped":
        data = data[:-40] + bytes(b ^ 0xFF for b in data[-40:])
    elif how == "garbage":
        data = os.urandom(len(data))
    elif how == "empty":
        data = b""
    elif how == "malicious":  # a valid header naming a global the reader must refuse
        head_len = int.from_bytes(data[8:16], "little")
        head = json.loads(data[16:16 + head_len])
        blob = pickle.dumps(os.system)
        head.update(pickle_bytes=len(blob), pickle_crc=__import__("zlib").crc32(blob))
        raw = json.dumps(head).encode()
        data = data[:8] + len(raw).to_bytes(8, "little") + raw + blob
    open(path, "wb").write(data)


@pytest.mark.parametrize("graph", [False, True], ids=["no-graph", "graph"])
@pytest.mark.parametrize("how", ["truncated", "flipped", "garbage", "empty", "malicious", "missing", "stale"])
def test_a_bad_or_stale_saved_index_is_rebuilt_silently(tmp_path, how, graph):
    """Whatever happened to the file, or when another process wrote the namespace without
    saving its index, the namespace is indexed from its rows: nothing lost, the same search
    results as a load without a saved index, and a good file written at close. ``graph``:
    a namespace large enough for its HNSW graph, saved with it (the flipped bytes fall in
    the graph's)."""
    db = tmp_path / "m.db"
    kw = {"retrieval": RetrievalConfig(ann_min_facts=30)} if graph else {}
    with memory(db, **kw) as mem:
        for text, meta in chat_events(120):
            mem.add(text, namespace="chat", metadata=meta)
    (name,) = [n for n in os.listdir(str(db) + ".index") if n.endswith(".idx")]
    path = os.path.join(str(db) + ".index", name)
    if how == "stale":
        with reopened(db, **kw) as mem:
            mem._forest.index_cache = None  # this process saves nothing
            mem.add("a new fact about the guitar", namespace="chat")
        # Without the saved tree (which the change log would bring up to date with its
        # index, test_tree_cache.py) the index is judged by its fingerprint alone.
        os.remove(path[: -len(".idx")] + ".tree")
    elif how == "missing":
        os.remove(path)
    else:
        corrupt(path, how)
    with reopened(db, **kw) as mem:
        assert state(mem).saved == -1  # rebuilt
        got = hits(mem, "exact")
        n = len(mem._forest.index(NS))
    with reopened(db, **kw) as mem:
        assert state(mem).saved == state(mem).synced  # the file written at close is good
        assert hits(mem, "exact") == got and len(mem._forest.index(NS)) == n
        if how == "stale":
            assert any(r.key for r in mem.search("new guitar fact", namespace="chat", limit=3))


def test_the_unpickler_refuses_any_other_global():
    with pytest.raises(pickle.UnpicklingError):
        index_cache._Unpickler(io.BytesIO(pickle.dumps(os.system))).load()


def test_fingerprint_covers_version_ids_texts_and_times():
    from langchain_membrain.tree.nodes import Node

    nodes = [Node("a", "fact", "apple", updated_at=1.0), Node("b", "fact", "pear", updated_at=2.0)]
    base = fingerprint(3, nodes)
    assert fingerprint(3, nodes) == base and fingerprint(4, nodes) != base
    assert fingerprint(3, nodes[::-1]) != base and fingerprint(3, nodes[:1]) != base
    for change in ({"text": "apples"}, {"updated_at": 1.5}, {"id": "c"}, {"kind": "raw"}):
        other = [Node(**{"id": "a", "kind": "fact", "text": "apple", "updated_at": 1.0, **change}), nodes[1]]
        assert fingerprint(3, other) != base


def test_small_namespaces_and_read_only_databases_save_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(index_cache, "MIN_ENTRIES", 1000)
    db = tmp_path / "m.db"
    with memory(db) as mem:
        mem.add("apple banana", namespace="chat")
    assert not os.path.exists(str(db) + ".index")
    assert not IndexCache(str(tmp_path / "x"), writable=False).save(NS, FactIndex(), "fp")
    assert IndexCache.for_storage(None) is None
