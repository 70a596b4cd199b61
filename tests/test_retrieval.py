"""FactIndex: incremental equals rebuilt, each pipeline part does what it says, fast vs exact."""

from __future__ import annotations

import random
import zlib

import numpy as np
import pytest

from langchain_membrain.bench.locomo import normalize_evidence
from langchain_membrain.errors import InvalidOperationError
from langchain_membrain.index.chat import DateTerms, SessionContext, SpeakerBoost, date_tokens
from langchain_membrain.index.config import RetrievalConfig
from langchain_membrain.index.facts import FactIndex
from langchain_membrain.index.lexical import tokenize

DIM = 16
CHAT = RetrievalConfig.for_chat()  # every chat scorer on: the facts of make_facts are chat turns


def unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    x = rng.normal(size=(n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


WORDS = "apple banana cherry river mountain guitar painting swimming camping pottery dog cat".split()


def make_facts(n: int, seed: int = 0) -> list[tuple[str, str, np.ndarray, dict]]:
    rng = np.random.default_rng(seed)
    r = random.Random(seed)
    vecs = unit(rng, n)
    facts = []
    for i in range(n):
        text = " ".join(r.choice(WORDS) for _ in range(r.randint(2, 6)))
        meta = {"speaker": r.choice(["Alice", "Bob"]), "session": r.randint(1, 4),
                "date": f"1:00 pm on {r.randint(1, 28)} May, 2023"}
        facts.append((f"f{i}", text, vecs[i], meta))
    return facts


def snapshot(index: FactIndex) -> dict:
    """Postings and fields by fact id (slots differ between two indexes)."""
    ids = sorted(index.ids())
    postings = {}
    for t, plist in index._lex.postings.items():
        postings[t] = sorted((index._ids[s], round(w, 9)) for s, w in plist.items())
    return {"fields": {f: index.field_of(f) for f in ids}, "postings": postings,
            "total": round(index._lex.total_len, 6)}


def test_incremental_index_equals_rebuilt_after_adds_removes_updates():
    facts = make_facts(60)
    inc = FactIndex(CHAT)
    for f in facts:
        inc.add(*f)
    r = random.Random(1)
    removed = set(r.sample([f[0] for f in facts], 20))
    for fid in removed:
        inc.remove(fid)
    # an update of text keeps the fact's place in its session
    kept = [f for f in facts if f[0] not in removed]
    fid, _, vec, meta = kept[5]
    inc.update(fid, text="guitar guitar river")
    kept[5] = (fid, "guitar guitar river", vec, meta)

    fresh = FactIndex(CHAT)
    for f in kept:
        fresh.add(*f)
    assert snapshot(inc) == snapshot(fresh)
    q = unit(np.random.default_rng(5), 1)[0]
    for query in ["Alice guitar river", "camping with Bob in May", "pottery"]:
        a = inc.search(query, q, 10, mode="exact")
        b = fresh.search(query, q, 10, mode="exact")
        assert [x for x, _ in a] == [x for x, _ in b]
        assert np.allclose([s for _, s in a], [s for _, s in b])
        assert not removed & {x for x, _ in a}


def test_neighbour_terms_are_half_weighted_and_follow_removal():
    idx = FactIndex(RetrievalConfig(stem=False, chat=(SessionContext(),)))
    idx.add("a", "apple", None, {"session": 1})
    idx.add("b", "banana", None, {"session": 1})
    idx.add("c", "cherry", None, {"session": 1})
    idx.add("x", "river", None, {"session": 2})
    assert idx.field_of("b") == {"banana": 1.0, "apple": 0.5, "cherry": 0.5}
    assert idx.field_of("x") == {"river": 1.0}  # another session: no neighbours
    idx.remove("b")
    assert idx.field_of("a") == {"apple": 1.0, "cherry": 0.5}
    assert idx.field_of("c") == {"cherry": 1.0, "apple": 0.5}


def test_stemming_matches_inflections():
    idx = FactIndex()
    idx.add("run", "She was running marathons every weekend", None, {})
    idx.add("other", "A quiet afternoon with tea", None, {})
    assert idx.search("marathon runner runs", None, 1)[0][0] == "run"
    plain = FactIndex(RetrievalConfig(stem=False))
    plain.add("run", "She was running marathons every weekend", None, {})
    assert plain.search("marathon runs", None, 1) == []  # nothing matches unstemmed
    assert tokenize("Paintings painted", None) == ["paintings", "painted"]


def test_date_terms_from_metadata():
    assert date_tokens("1:56 pm on 8 May, 2023") == ["may", "2023"]
    assert date_tokens("2024-01-15") == ["january", "2024"]
    assert date_tokens(None) == []
    idx = FactIndex(RetrievalConfig(chat=(DateTerms(),)))
    idx.add("m", "we met", None, {"date": "10:00 am on 3 July, 2022", "session": 1})
    idx.add("n", "we met", None, {"date": "10:00 am on 3 March, 2021", "session": 2})
    assert idx.search("what happened in July 2022", None, 1)[0][0] == "m"
    assert idx.field_of("m") == dict.fromkeys(idx.terms("met July 2022"), 1.0)


def test_speaker_named_in_query_boosts_that_speaker():
    rng = np.random.default_rng(0)
    v = unit(rng, 2)
    cfg_on = RetrievalConfig(dense_weight=0.0, chat=(SpeakerBoost(),))
    cfg_off = RetrievalConfig(dense_weight=0.0, chat=(SpeakerBoost(weight=0.0),))  # names seen, no boost
    for cfg, expect in [(cfg_on, "bob"), (cfg_off, "alice")]:
        idx = FactIndex(cfg)
        # Alice's fact matches the query terms better; Bob's less, but the query names Bob.
        idx.add("alice", "I love hiking in the mountains and hiking trails", v[0], {"speaker": "Alice"})
        idx.add("bob", "hiking is fine", v[1], {"speaker": "Bob"})
        assert idx.named_speaker("What does Bob think of hiking trails?") == "Bob"
        assert idx.search("What does Bob think of hiking trails?", None, 1)[0][0] == expect
    assert idx.named_speaker("Do Alice and Bob like hiking?") is None  # two names: no boost


def test_dense_query_drops_speaker_names():
    for strip, expect in [(True, "What did friends give ?"), (False, "What did Caroline's friends give Melanie?")]:
        idx = FactIndex(RetrievalConfig(chat=(SpeakerBoost(strip_names=strip),)))
        idx.add("1", "x", None, {"speaker": "Caroline"})
        idx.add("2", "y", None, {"speaker": "Melanie Smith"})
        assert idx.dense_query_text("What did Caroline's friends give Melanie?") == expect


def test_the_default_reads_no_chat_metadata_and_for_chat_does():
    """``RetrievalConfig()`` (what ``MembrainMemory()`` uses) scores chat turns by their words
    and meaning alone: a query naming a speaker does not lift that speaker's facts, the dense
    query keeps the name, a fact's field holds its own terms only (no session neighbours, no
    date) and an ignored turn lends nothing. ``for_chat()`` turns the three scorers on."""
    turns = [("alice", "I love hiking in the mountains and hiking trails",
              {"speaker": "Alice", "session": 1, "date": "1:00 pm on 8 May, 2023"}),
             ("bob", "hiking is fine", {"speaker": "Bob", "session": 1, "date": "1:00 pm on 8 May, 2023"}),
             ("carol", "we painted the kitchen", {"speaker": "Carol", "session": 2, "date": "3 July, 2022"})]
    query = "What does Bob think of hiking trails?"
    plain, chat = FactIndex(RetrievalConfig()), FactIndex(RetrievalConfig.for_chat())
    for idx in (plain, chat):
        for fid, text, meta in turns:
            idx.add(fid, text, None, meta)
        idx.add_context("ignored", "Do you like kayaks?", {"session": 2})
    assert plain.search(query, None, 1)[0][0] == "alice" and chat.search(query, None, 1)[0][0] == "bob"
    assert plain.named_speaker(query) is None and plain.speakers() == []
    assert plain.dense_query_text(query) == query and chat.dense_query_text(query) == "What does think of hiking trails?"
    assert plain.field_of("bob") == dict.fromkeys(plain.terms("hiking is fine"), 1.0)
    assert {"mountain", "2023"} <= set(chat.field_of("bob")) and "kayak" in chat.field_of("carol")
    assert plain.search("kayaks", None, 1) == [] and plain.search("May 2023", None, 1) == []
    assert {f for f, _ in chat.search("May 2023", None, 3)} == {"alice", "bob"}


def test_chat_scorers_are_checked():
    assert RetrievalConfig().chat == () and len(RetrievalConfig.for_chat().chat) == 3
    assert RetrievalConfig.for_chat(dense_weight=0.3).dense_weight == 0.3
    assert RetrievalConfig(chat=[DateTerms()]).chat == (DateTerms(),)  # type: ignore[arg-type]
    with pytest.raises(InvalidOperationError, match="not 'speaker'"):
        RetrievalConfig(chat=("speaker",))  # type: ignore[arg-type]
    with pytest.raises(InvalidOperationError, match="twice"):
        RetrievalConfig(chat=(SpeakerBoost(), SpeakerBoost(weight=2.0)))


def test_embed_query_is_used_on_the_stripped_text():
    seen = []
    idx = FactIndex(CHAT, embed_query=lambda t: seen.append(t) or np.ones(DIM))
    idx.add("1", "Anna: tea", np.ones(DIM), {"speaker": "Anna"})
    idx.search("Does Anna like tea?", k=1)
    assert seen == ["Does like tea?"]


def test_session_prior_lifts_facts_of_the_best_session():
    for prior, expect in [(0.5, "s1b"), (0.0, "s2")]:
        idx = FactIndex(RetrievalConfig(dense_weight=0.0, chat=(SessionContext(prior=prior, neighbour_weight=0.0),)))
        idx.add("s1a", "guitar concert tonight guitar", None, {"session": 1})
        idx.add("s1b", "concert", None, {"session": 1})
        idx.add("s2", "concert concert", None, {"session": 2})
        top = [f for f, _ in idx.search("guitar concert", None, 3)]
        assert top[0] == "s1a" and top[1] == expect


def test_metadata_free_facts_work():
    rng = np.random.default_rng(3)
    v = unit(rng, 3)
    idx = FactIndex()
    idx.add("a", "the user prefers dark roast coffee", v[0])
    idx.add("b", "the user lives in Lyon", v[1])
    idx.add("c", "the user has a cat named Miso", v[2], metadata={})
    assert idx.search("coffee preference", v[0], 1)[0][0] == "a"
    assert idx.search("xyzzy", v[2], 1)[0][0] == "c"  # dense only
    assert idx.search("Lyon", None, 1)[0][0] == "b"  # lexical only
    assert idx.speakers() == [] and idx.named_speaker("where does the user live") is None
    assert {f for f, _ in idx.search("user", None, 5, filter_ids=["a", "c"])} == {"a", "c"}


def test_z_score_uses_exact_moments():
    rng = np.random.default_rng(7)
    v = unit(rng, 50)
    idx = FactIndex(RetrievalConfig(dense_weight=1.0))
    for i in range(50):
        idx.add(i, "w", v[i])
    idx.remove(3)
    q = unit(rng, 1)[0]
    keep = np.array([i for i in range(50) if i != 3])
    cos = v[keep] @ q
    z = (cos - cos.mean()) / cos.std()
    got = dict(idx.search("nothing", q, 49, mode="exact"))
    assert np.allclose([got[i] for i in keep], z, atol=1e-4)


@pytest.mark.skipif(pytest.importorskip("hnswlib") is None, reason="hnswlib missing")
def test_fast_mode_recall_against_exact_on_random_data():
    rng = np.random.default_rng(11)
    n, dim = 3000, 32
    vecs = unit(rng, n, dim)
    idx = FactIndex(RetrievalConfig(ann_min_facts=1000))
    for i in range(n):
        idx.add(i, f"w{i % 50} w{i % 7}", vecs[i])
    for i in range(0, 300, 3):
        idx.remove(i)
    assert idx._dense._hnsw is not None
    hits = total = 0
    for j in range(40):
        q = unit(rng, 1, dim)[0]
        text = f"w{j % 50}" if j % 2 else "nothing matches"
        fast = {f for f, _ in idx.search(text, q, 10, mode="fast")}
        exact = {f for f, _ in idx.search(text, q, 10, mode="exact")}
        hits += len(fast & exact)
        total += len(exact)
        assert not any(i < 300 and i % 3 == 0 for i in fast)  # removed facts never return
    assert hits / total >= 0.95


@pytest.mark.parametrize("ann_min_facts", [10_000, 100])  # exact, then through HNSW
def test_nearest_finds_the_closest_live_facts(ann_min_facts):
    rng = np.random.default_rng(5)
    vecs = unit(rng, 400, 16)
    idx = FactIndex(RetrievalConfig(ann_min_facts=ann_min_facts))
    assert idx.nearest(vecs[0]) == []
    for i, v in enumerate(vecs):
        idx.add(i, f"fact {i}", v)
    idx.remove(7)
    (best, cos), *rest = idx.nearest(vecs[3], k=3)
    assert best == 3 and cos == pytest.approx(1.0, abs=1e-5) and len(rest) == 2
    assert rest[0][1] >= rest[1][1] and 3 not in {f for f, _ in rest}
    assert all(f != 7 for f, _ in idx.nearest(vecs[7], k=5))


def test_duplicate_and_bad_dimension_are_rejected():
    idx = FactIndex()
    idx.add("a", "x", np.ones(4))
    with pytest.raises(ValueError):
        idx.add("a", "y", np.ones(4))
    with pytest.raises(ValueError):
        idx.add("b", "y", np.ones(5))
    with pytest.raises(KeyError):
        idx.remove("zz")


@pytest.mark.parametrize("raw, expected", [
    (["D1:3"], ["D1:3"]),
    (["D8:6; D9:17"], ["D8:6", "D9:17"]),
    (["D:11:26"], ["D11:26"]),
    (["D30:05"], ["D30:5"]),
    (["D"], []),
    (["D1:3 D1:4", "D1:3"], ["D1:3", "D1:4"]),
    ("D2:1, D2:2", ["D2:1", "D2:2"]),
])
def test_normalize_evidence(raw, expected):
    assert normalize_evidence(raw) == expected


def test_normalize_evidence_drops_ids_that_name_no_turn():
    assert normalize_evidence(["D10:19", "D1:2"], valid={"D1:1", "D1:2"}) == ["D1:2"]


class _HashEmbeddings:
    """A deterministic bag-of-words embedder (no model): each word adds a seeded vector."""

    def embed_array(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i] += np.random.default_rng(zlib.crc32(w.encode())).normal(size=DIM)
            out[i] /= np.linalg.norm(out[i]) or 1.0
        return out


def test_locomo_bench_end_to_end_on_a_tiny_conversation(tmp_path):
    import json

    from langchain_membrain.bench.locomo import load_locomo, run_locomo

    turns1 = [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a puppy named Rex"},
              {"speaker": "Bo", "dia_id": "D1:2", "text": "Lovely, I went sailing on the lake",
               "blip_caption": "a boat on a lake"}]
    turns2 = [{"speaker": "Ann", "dia_id": "D2:1", "text": "Rex learned to fetch the ball"},
              {"speaker": "Bo", "dia_id": "D2:2", "text": "I painted a sunset over the sea"},
              {"speaker": "Ann", "dia_id": "D2:3", "text": "Wow! How long did it take?"}]
    sample = {"sample_id": "conv-x", "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bo", "session_1": turns1, "session_2": turns2,
        "session_1_date_time": "1:00 pm on 8 May, 2023", "session_2_date_time": "2:00 pm on 9 June, 2023",
        "session_3_date_time": "3:00 pm on 1 July, 2023"},
        "qa": [{"question": "What is the name of Ann's puppy?", "evidence": ["D1:01"], "category": 4},
               {"question": "What did Bo paint and where did he sail?", "evidence": ["D2:2; D1:2"], "category": 1},
               {"question": "When did Ann adopt a puppy?", "evidence": ["D"], "category": 2},
               {"question": "What did Ann ask Bo about his painting?", "evidence": ["D2:3"], "category": 4},
               {"question": "Unanswerable?", "evidence": ["D1:1"], "category": 5}],
        "observation": {"session_1_observation": {"Ann": [["Ann adopted a puppy named Rex.", "D1:1"]]}},
        "session_summary": {"session_1_summary": "Ann adopted Rex; Bo went sailing."}}
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps([sample]))
    conv = load_locomo(path)[0]
    assert conv.turns[1].text == "Bo: Lovely, I went sailing on the lake [shares image: a boat on a lake]"
    assert [q.evidence for q in conv.questions] == [["D1:1"], ["D2:2", "D1:2"], ["D2:3"]] and conv.skipped == 1
    out = run_locomo(str(path), ks=(1, 5), cache_dir=str(tmp_path / "cache"), embedder=_HashEmbeddings(),
                     log=lambda s: None)
    res = out["results"]
    assert set(res) == {"membrain", "membrain_no_ops", "membrain_formed", "membrain_formed_one_step",
                        "flat_pipeline", "bm25", "dense", "inmemorystore"}
    for method in res:
        # 5 turns: everything stored is found at k=5; the product (operations on) IGNOREs the
        # question-only turn D2:3, so the question citing it is missed there alone
        expected = 2 / 3 if method == "membrain" else 1.0
        assert res[method]["overall"]["all@5"] == pytest.approx(expected), method
        assert set(res[method]) == {"overall", "multi_hop", "single_hop"}
    assert out["evidence_out"]["membrain"] == {"evidence": 4, "out": 1, "ignored": 1, "superseded": 0,
                                               "deleted": 0, "missing": 0}
    assert out["evidence_out"]["membrain_no_ops"]["out"] == 0
    assert out["operations"]["membrain"]["by_kind"]["IGNORE"] == 1
    assert out["ranked"]["flat_pipeline"][0][0] == "D1:1"  # the puppy question's turn ranks first
    assert out["timing"]["membrain"]["ingest_ms_per_turn"] > 0
    formed = out["formation"]["membrain_formed"]
    assert formed["formation_per_input"] == 2 / 5  # one batch question per session
    assert 0 < formed["prompt_tokens_max"] <= 1500
    assert formed["student_share"] == 0.0  # five turns: too few labels to learn from
    assert len(list((tmp_path / "cache").glob("*.npy"))) >= 2  # embeddings cached for reruns


def test_small_and_large_indexes_score_alike(monkeypatch):
    """A small index computes the dense z-score's moments from its rows; past MOMENTS_MIN
    it keeps running sums instead. Both give the same scores, across adds and removals."""
    import langchain_membrain.index.dense as dense

    facts = make_facts(300, seed=7)
    q = unit(np.random.default_rng(8), 1)[0]

    def scores(moments_min: int) -> list:
        monkeypatch.setattr(dense, "MOMENTS_MIN", moments_min)
        index = FactIndex(CHAT)
        for f in facts:
            index.add(*f)
        for f in facts[:40]:
            index.remove(f[0])
        assert (index._dense._m2 is None) == (moments_min > 300)
        return index.search("Alice guitar river", q, 10, mode="exact")

    rows, sums = scores(10**6), scores(64)
    assert [x for x, _ in rows] == [x for x, _ in sums]
    assert np.allclose([s for _, s in rows], [s for _, s in sums])


def test_deferred_graph_insertion_finds_the_same_facts():
    """Facts indexed with ``defer_ann`` (a process catching up on other processes'
    writes) are found by fast searches and ``nearest`` before they enter the HNSW graph,
    as in an index that inserted every fact at once; removing or updating one that waits
    works, and the next write that does not defer puts every waiting one in the graph."""
    rng = np.random.default_rng(21)
    n, dim = 600, 16
    vecs = unit(rng, n + 40, dim)
    # Candidates and ef above n: the graph returns every fact, so both indexes score the same set.
    config = RetrievalConfig(ann_min_facts=200, ann_candidates=1000, hnsw_ef_search=1000)
    now, later = FactIndex(config), FactIndex(config)
    for i in range(n):
        for idx in (now, later):
            idx.add(i, f"w{i % 30} w{i % 7}", vecs[i])
    for i in range(n, n + 40):
        now.add(i, f"w{i % 30} fresh", vecs[i])
        later.add(i, f"w{i % 30} fresh", vecs[i], defer_ann=True)
    assert len(later._dense._pending) == 40
    for idx in (now, later):
        idx.remove(n + 3)  # waiting in ``later``
        idx.remove(5)
        idx.update(n + 4, embedding=vecs[0], defer_ann=idx is later)
    for j in range(30):
        q = vecs[n + j] if j % 2 else unit(rng, 1, dim)[0]
        text = f"w{j % 30} fresh" if j % 3 else "nothing"
        assert later.search(text, q, 10, mode="fast") == now.search(text, q, 10, mode="fast")
        assert later.nearest(q, k=5) == now.nearest(q, k=5)
    assert {f for f, _ in later.nearest(vecs[0], k=2)} == {0, n + 4}
    later.add("flush", "a local write", vecs[1])
    assert not later._dense._pending
    assert later._dense._hnsw.get_current_count() == n + 40  # the one removed while waiting never entered


# ------------------------------------------------------------------ former versions
def test_a_fact_answers_what_its_former_versions_said():
    """A fact that superseded another (memory operations' UPDATE) is found by the words and
    the meaning of the version it replaced; without former versions, or with the part
    turned off, it is scored on its own text only."""
    rng = np.random.default_rng(3)
    v = unit(rng, 4)
    config = RetrievalConfig(stem=False, chat=(SessionContext(prior=0.0),))  # sessions, for the move below
    idx = FactIndex(config)
    idx.add("home", "bought a house in Headingley", v[0])
    idx.add("pet", "the ferret lives aboard", v[1])
    idx.add("job", "night shifts at the hospital", v[2])
    assert "home" not in {f for f, _ in idx.search("flat Leeds", v[3], 3)[:1]}
    idx.set_former("home", [("rent a flat in Leeds", v[3])])
    assert [k for k in idx.ids() if idx.former(k)] == ["home"]
    assert idx.search("flat Leeds", v[3], 1)[0][0] == "home"  # lexical and dense alike
    assert idx.search("nothing", v[3], 1, mode="exact")[0][0] == "home"  # dense: the old version's cosine
    assert idx.field_of("home")["leeds"] == config.former_weight
    idx.update("home", metadata={"session": 2})  # a fact that moves keeps its former versions
    assert idx.field_of("home")["leeds"] == config.former_weight
    idx.set_former("home", [])
    assert "leeds" not in idx.field_of("home") and not idx.former("home")
    assert idx.search("nothing", v[3], 1, mode="exact")[0][0] != "home"
    off = FactIndex(RetrievalConfig(stem=False, former_weight=0.0, former_dense=False))
    off.add("home", "bought a house in Headingley", v[0])
    off.add("pet", "the ferret lives aboard", v[1])
    off.set_former("home", [("rent a flat in Leeds", v[3])])
    assert off.search("flat Leeds", None, 3) == [] and off.search("nothing", v[3], 1)[0][0] == "pet"
    with pytest.raises(KeyError):
        idx.set_former("nope", [])
    with pytest.raises(ValueError):
        idx.set_former("home", [("x", np.ones(DIM + 1))])


def test_an_ignored_turn_lends_its_words_to_its_neighbours_and_is_never_returned():
    """A question the memory ignored stands in its session between the facts around it: the
    answer after it is found by the question's words, as if the question were stored; the
    ignored turn itself is never a hit, and once forgotten its words leave the fields."""
    rng = np.random.default_rng(7)
    v = unit(rng, 3)
    idx = FactIndex(RetrievalConfig(stem=False, chat=(SessionContext(prior=0.0),)))
    s1 = {"session": 1}
    idx.add("jerseys", "I like to collect jerseys", v[0], s1)
    idx.add_context("q", "Who is your favourite basketball player?", s1)
    idx.add("answer", "The Wolves are my team and LeBron is the man", v[1], s1)
    idx.add("other", "We painted the kitchen yellow", v[2], {"session": 2})
    assert len(idx) == 3 and "q" not in idx
    assert idx.search("favourite basketball player", None, 1)[0][0] in {"jerseys", "answer"}
    assert "basketball" in idx.field_of("answer") and "basketball" in idx.field_of("jerseys")
    assert "q" not in {f for f, _ in idx.search("favourite basketball player", v[1], 10, mode="exact")}
    idx.add_context("no session", "hello there", {})  # nothing to stand between
    idx.remove_context("q")
    assert "basketball" not in idx.field_of("answer") and "jerseys" in idx.field_of("answer")
    idx.remove_context("q")  # absent: nothing happens


def test_former_versions_without_embeddings_are_found_by_their_words_only():
    """Former versions archived without an embedding (an old store) take part lexically; the
    dense search goes on over the facts' own vectors."""
    rng = np.random.default_rng(5)
    v = unit(rng, 3)
    idx = FactIndex(RetrievalConfig(stem=False))
    idx.add("home", "bought a house in Headingley", v[0])
    idx.add("pet", "the ferret lives aboard", v[1])
    idx.set_former("home", [("rent a flat in Leeds", None)])
    assert idx.search("flat Leeds", v[2], 1, mode="exact")[0][0] == "home"
    assert idx.search("ferret", v[1], 1)[0][0] == "pet"


def test_a_term_said_by_several_former_versions_counts_once_per_version_that_says_it_most():
    idx = FactIndex(RetrievalConfig(stem=False))
    idx.add("job", "lead nurse", np.ones(DIM))
    idx.set_former("job", [("ward nurse nights", None), ("practice nurse nurse days", None)])
    field = idx.field_of("job")
    assert field["nurse"] == 1 + 2 and field["nights"] == field["days"] == 1


@pytest.mark.skipif(pytest.importorskip("hnswlib") is None, reason="hnswlib missing")
def test_fast_mode_finds_a_fact_by_its_former_version():
    """Past ``ann_min_facts`` the HNSW graph holds the facts' own embeddings only: the
    facts whose former versions are near the query join the candidates, so fast mode
    scores them as exact mode does."""
    rng = np.random.default_rng(8)
    n = 1500
    vecs = unit(rng, n + 1)
    idx = FactIndex(RetrievalConfig(ann_min_facts=500, ann_candidates=50))
    for i in range(n):
        idx.add(i, f"w{i % 40}", vecs[i])
    idx.set_former(7, [("an old version", vecs[n])])
    assert idx._dense._hnsw is not None
    fast = idx.search("nothing", vecs[n], 5, mode="fast")
    assert fast[0][0] == 7 and fast == idx.search("nothing", vecs[n], 5, mode="exact")
