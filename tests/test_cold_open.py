"""Issue 48, cold open: a namespace read from storage is indexed in one pass
(``FactIndex.add_many``, ``Forest._index_loaded``), and searching it then gives what the
writing process's index gives, and what indexing it fact by fact gives."""

from __future__ import annotations

import os
import random
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from helpers import WordEmbeddings  # noqa: E402

from langchain_membrain import MembrainMemory, RetrievalConfig
from langchain_membrain.bench.updates import GroundTruthTeacher, gt_value  # noqa: E402
from langchain_membrain.index import dense  # noqa: E402
from langchain_membrain.index.facts import FactIndex  # noqa: E402
from langchain_membrain.storage.forest import Forest  # noqa: E402

DIM = 16
CHAT = RetrievalConfig.for_chat()
WORDS = "apple banana cherry river mountain guitar painting swimming camping pottery dog cat".split()
QUERIES = ["Alice guitar river", "camping with Bob in May", "pottery", "when did Carol paint the river",
           "dog and cat", "banana"]


def items(n: int, seed: int = 0) -> list[tuple[str, str, object, dict, bool]]:
    """Chat turns as add_many items: every 7th an ignored turn (a context entry), every
    11th fact without an embedding, sessions interleaved."""
    rng = np.random.default_rng(seed)
    r = random.Random(seed)
    vecs = rng.normal(size=(n, DIM)).astype(np.float32)
    out = []
    for i in range(n):
        text = " ".join(r.choice(WORDS) for _ in range(r.randint(2, 6)))
        meta = {"speaker": r.choice(["Alice", "Bob", "Carol"]), "session": r.randint(1, 6),
                "date": f"1:00 pm on {r.randint(1, 28)} {r.choice(['May', 'June'])}, 2023"}
        context = i % 7 == 3
        out.append((f"f{i}", text, None if i % 11 == 5 else vecs[i], meta, context))
    return out


def in_turn(config: RetrievalConfig, entries) -> FactIndex:
    index = FactIndex(config)
    for fid, text, vec, meta, context in entries:
        if context:
            index.add_context(fid, text, meta)
        else:
            index.add(fid, text, vec, meta)
    return index


def same_hits(a: list, b: list, rel: float = 1e-9) -> None:
    """The same keys in the same order, and scores equal to float rounding."""
    assert [k for k, _ in a] == [k for k, _ in b]
    assert [s for _, s in a] == pytest.approx([s for _, s in b], rel=rel, abs=1e-12)


def fields(index: FactIndex) -> dict:
    return {f: index.field_of(f) for f in sorted(index.ids())}


@pytest.mark.parametrize("config", [RetrievalConfig(), CHAT], ids=["plain", "chat"])
def test_add_many_equals_adding_in_turn(config, monkeypatch):
    """Fields, session orders, speakers and search results of ``add_many`` are those of
    add/add_context in turn; past MOMENTS_MIN the bulk index reads its moments from the
    rows until its next write builds them, and both agree with the sums."""
    monkeypatch.setattr(dense, "MOMENTS_MIN", 32)
    entries = items(300)
    one, bulk = in_turn(config, entries), FactIndex(config)
    bulk.add_many(entries)
    assert fields(bulk) == fields(one) and bulk.ids() == one.ids() and bulk.speakers() == one.speakers()
    assert bulk._chat.session_orders() == one._chat.session_orders()
    assert bulk._dense._sums_upto == 0 and one._dense._sums_upto is None  # sums left to later writes
    q = np.random.default_rng(5).normal(size=DIM)
    for query in QUERIES:
        for mode in ("exact", "fast"):  # moments from float32 cosines: equal to float32 rounding
            same_hits(bulk.search(query, q, 10, mode=mode), one.search(query, q, 10, mode=mode), rel=1e-6)
    # Writes after the bulk load: an add builds the sums, a remove and an update keep them right.
    extra = ("new", "guitar by the river", np.ones(DIM, dtype=np.float32), {"speaker": "Alice", "session": 2})
    for index in (one, bulk):
        index.add(*extra)
        index.remove("f1")
        index.update("f2", text="mountain camping", embedding=-np.ones(DIM))
    assert bulk._dense._sums_upto is None and fields(bulk) == fields(one)  # 300 rows: one step
    for v in np.random.default_rng(2).normal(size=(5, DIM)):
        n = len(one._ids)
        assert bulk._dense.cos_moments(v, n) == pytest.approx(one._dense.cos_moments(v, n), rel=1e-9)
    for query in QUERIES:
        same_hits(bulk.search(query, q, 10, mode="exact"), one.search(query, q, 10, mode="exact"))


def test_add_many_into_an_index_that_holds_facts():
    """A bulk add after single adds: the last fact of a session before it gains its next
    neighbour, as with adds in turn."""
    entries = items(120, seed=3)
    one = in_turn(CHAT, entries)
    bulk = in_turn(CHAT, entries[:50])
    bulk.add_many(entries[50:])
    assert fields(bulk) == fields(one)
    q = np.random.default_rng(1).normal(size=DIM)
    for query in QUERIES:
        same_hits(bulk.search(query, q, 5, mode="exact"), one.search(query, q, 5, mode="exact"))


def test_add_many_refuses_a_held_or_repeated_id_or_a_bad_embedding_and_indexes_nothing():
    entries = items(20)
    index = FactIndex(CHAT)
    index.add_many(entries[:10])
    before = (index.ids(), fields(index))
    for bad in ([entries[0]], [entries[12], entries[12]],
                [entries[12], ("x", "apple", np.ones(DIM + 1), {}, False)],
                [entries[12], ("y", "apple", np.full(DIM, np.nan), {}, False)]):
        with pytest.raises(ValueError):
            index.add_many(bad)
        assert (index.ids(), fields(index)) == before


def test_the_graph_of_a_bulk_loaded_index_is_built_by_its_next_writes(monkeypatch):
    """After ``add_many`` the fast mode is exact (no graph yet); each write then inserts its
    own embedding and ANN_BUILD_STEP of the bulk load's, and once the graph holds half of
    them the fast mode uses it, with every waiting one still scored."""
    monkeypatch.setattr(dense, "ANN_BUILD_STEP", 100)
    config = RetrievalConfig(ann_min_facts=150, ann_candidates=20)
    rng = np.random.default_rng(7)
    vecs = rng.normal(size=(600, DIM)).astype(np.float32)
    index = FactIndex(config)
    index.add_many([(f"f{i}", f"w{i % 50} w{i % 7}", vecs[i], None, False) for i in range(600)])
    q = rng.normal(size=DIM)
    assert not index._dense.has_graph
    assert index.search("w3", q, 10, mode="fast") == index.search("w3", q, 10, mode="exact")
    waiting = []
    for i in range(4):
        index.add(f"n{i}", "w3 extra", rng.normal(size=DIM))
        waiting.append(index._dense.waiting)
    assert waiting == [601 - 100, 601 - 200, 601 - 300, 601 - 400]
    assert index._dense.has_graph  # 201 of 604 wait outside it
    index.remove("f598")  # waiting: never in the graph
    index.remove("f0")  # in the graph: marked deleted there
    near = index.nearest(vecs[599], 1)  # f599 waits outside the graph: scored exactly
    assert near[0][0] == "f599" and near[0][1] == pytest.approx(1.0)
    assert index.search("nothing lexical", vecs[599], 10, mode="fast")[0][0] == "f599"


def test_nearest_is_exact_while_most_of_a_bulk_load_waits_outside_the_graph(monkeypatch):
    monkeypatch.setattr(dense, "ANN_BUILD_STEP", 100)
    rng = np.random.default_rng(11)
    vecs = rng.normal(size=(600, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    index = FactIndex(RetrievalConfig(ann_min_facts=150))
    index.add_many([(f"f{i}", f"w{i}", vecs[i], None, False) for i in range(600)])
    index.add("n0", "new", rng.normal(size=DIM))  # the graph exists, 501 of 601 wait outside it
    assert index._dense._hnsw is not None and not index._dense.has_graph
    q = vecs[5] + 0.5 * vecs[7]
    q /= np.linalg.norm(q)
    top = np.argsort(-(vecs @ q))[:5]
    assert [k for k, _ in index.nearest(q, 5)] == [f"f{i}" for i in top]


def test_the_moment_sums_of_a_bulk_loaded_index_are_built_by_its_next_writes(monkeypatch):
    """Each write after ``add_many`` folds SUMS_BUILD_STEP rows into the sums; meanwhile the
    moments come from the rows, writes behind the build's front count in the sums and those
    past it are read when the build gets there: once built, the moments are the in-turn
    index's."""
    monkeypatch.setattr(dense, "MOMENTS_MIN", 32)
    monkeypatch.setattr(dense, "SUMS_BUILD_STEP", 50)
    entries = [e for e in items(300, seed=4) if not e[4]]
    one, bulk = in_turn(RetrievalConfig(), entries), FactIndex(RetrievalConfig())
    bulk.add_many(entries)
    rng = np.random.default_rng(9)
    fronts = []
    # Updated and removed: behind the build's front, past it, behind it.
    for i, (fid, gone) in enumerate([("f1", "f2"), ("f250", "f291"), ("f260", "f100")]):
        vec = rng.normal(size=DIM)
        for index in (one, bulk):
            index.add(f"new{i}", "apple", vec)  # past the front: read when the build gets there
            index.update(fid, embedding=-vec)
            index.remove(gone)
        fronts.append(bulk._dense._sums_upto)
    assert fronts == [100, 200, None]
    n = len(one._ids)
    for v in rng.normal(size=(5, DIM)):
        assert bulk._dense.cos_moments(v, n) == pytest.approx(one._dense.cos_moments(v, n), rel=1e-9)


# ------------------------------------------------------------------ through the memory
def memory(db, **kw) -> MembrainMemory:
    return MembrainMemory(str(db) if isinstance(db, (str, os.PathLike)) else db, teacher=GroundTruthTeacher(), embeddings=WordEmbeddings(), background=False,
                          relabel=False, prior=False, operations="teacher", **kw)


def chat_events(n: int) -> list[tuple[str, dict]]:
    """Chat turns with speaker, session and date; every 9th a question (IGNORE), every 13th
    an UPDATE of an earlier turn that shares its words (a superseded fact)."""
    r = random.Random(11)
    out: list[tuple[str, dict]] = []
    for i in range(n):
        meta = {"speaker": r.choice(["Alice", "Bob", "Carol"]), "session": i // 20,
                "date": f"{r.randint(1, 28)} {r.choice(['May', 'June', 'July'])}, 2023"}
        if i % 9 == 4:
            text, ev = f"what about the {r.choice(WORDS)}?", {"id": f"e{i}", "op": "IGNORE"}
        elif i % 13 == 12 and i > 13:
            old = out[i - 13]
            text = old[0] + " now " + r.choice(WORDS)
            ev = {"id": f"e{i}", "op": "UPDATE", "target": old[1]["gt_id"]}
            # In the old turn's session: a fact whose update moves it to another session
            # goes last there in the writing process's index, but stands by its creation
            # time in a reloaded one (fact by fact or in one pass alike).
            meta["session"] = old[1]["session"]
        else:
            text = " ".join(r.choice(WORDS) for _ in range(r.randint(3, 6))) + f" {i}"
            ev = {"id": f"e{i}", "op": "ADD"}
        out.append((text, {**meta, **gt_value(ev)}))
    return out


def hits(mem: MembrainMemory, mode: str) -> list[list[tuple[str, float]]]:
    out = []
    for query in QUERIES + ["what did Bob say about apple in June"]:
        found = mem.search(query, namespace="chat", limit=10) if mode == "default" else \
            [(k, s) for k, s in mem._forest.index(("chat",)).search(query, WordEmbeddings().embed_query(query), 10,
                                                                   mode=mode)]
        out.append([(r.key, r.score) for r in found] if mode == "default" else found)
    return out


@pytest.mark.parametrize("retrieval", [RetrievalConfig(), CHAT], ids=["plain", "chat"])
def test_a_reopened_memory_searches_as_the_live_one(tmp_path, retrieval, monkeypatch):
    """A few hundred chat turns with ignored questions and superseded facts: after a reopen
    (indexed in one pass, and fact by fact as before issue 48) every search returns the
    live memory's keys with its scores."""
    db = tmp_path / "m.db"
    with memory(db, retrieval=retrieval) as mem:
        for text, meta in chat_events(260):
            mem.add(text, namespace="chat", metadata=meta)
        former = sorted(k for k in mem._forest.index(("chat",)).ids() if mem._forest.index(("chat",)).former(k))
        assert mem.ignored(namespace="chat") and former
        live = {mode: hits(mem, mode) for mode in ("default", "exact", "fast")}
    for bulk in (True, False):
        monkeypatch.setattr(Forest, "bulk_load", bulk)
        with memory(db, retrieval=retrieval) as mem:
            reopened = {mode: hits(mem, mode) for mode in ("default", "exact", "fast")}
            index = mem._forest.index(("chat",))
            assert sorted(k for k in index.ids() if index.former(k)) == former
        for mode in live:
            for a, b in zip(reopened[mode], live[mode]):
                same_hits(a, b)



@pytest.mark.parametrize("promote_after", [0, 10**9])
def test_a_load_leaves_the_garbage_collector_as_it_found_it(tmp_path, monkeypatch, promote_after):
    """The collector is paused while a namespace loads (forest.paused_gc), and on after it
    only if it was on before; nothing is left frozen, whether the load's objects were moved
    to the oldest generation (a large load) or not: a cycle that was alive during the load
    and dropped after it is still collected."""
    import gc
    import weakref

    from langchain_membrain.storage import forest

    monkeypatch.setattr(forest, "PROMOTE_AFTER", promote_after)

    class Cycle:
        me: object

    db = tmp_path / "m.db"
    with memory(db) as mem:
        mem.add("apple banana cherry", namespace="chat")
    for was_on in (True, False):
        (gc.enable if was_on else gc.disable)()
        try:
            cycle = Cycle()
            cycle.me = cycle
            alive = weakref.ref(cycle)
            with memory(db) as mem:
                assert mem.search("apple", namespace="chat", limit=1)
                assert gc.isenabled() is was_on and gc.get_freeze_count() == 0
            del cycle
            gc.collect()
            assert alive() is None
        finally:
            gc.enable()


def test_bench_cold_times_both_paths_on_a_small_store(tmp_path):
    """``bench cold`` builds a store (SQLite, and PostgreSQL where the tests have a server),
    opens it in fresh processes both ways and reports."""
    import argparse
    import json

    from langchain_membrain.bench import cold

    out, pg = tmp_path / "cold.json", os.environ.get("MEMBRAIN_TEST_POSTGRES_URL")
    args = argparse.Namespace(facts=[300], runs=1, baseline_max=300, seed=0, json=str(out), postgres=pg)
    assert cold.run(args) == 0
    rows = json.loads(out.read_text())["results"]
    assert [row["storage"] for row in rows] == ["SQLite"] + ["PostgreSQL"] * bool(pg)
    for row in rows:
        assert row["facts"] == 300 and set(row) >= {"saved", "bulk", "per-fact"}
        assert all(0 < t < 120 for path in ("saved", "bulk", "per-fact") for t in row[path]["wall"] + row[path]["cpu"])
