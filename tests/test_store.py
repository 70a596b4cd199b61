"""MembrainStore against LangGraph's store contract (and where we do better than InMemoryStore)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Mapping
from datetime import timezone
from types import MappingProxyType

import pytest
from helpers import StrictClock, WordEmbeddings
from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchItem,
    SearchOp,
)

from langchain_membrain.index.embeddings import MiniLMEmbeddings
from langchain_membrain.integrations.store import MembrainStore
from langchain_membrain.memory import MembrainMemory


@pytest.fixture
def store() -> Iterator[MembrainStore]:
    """A store whose consecutive writes get distinct, ordered timestamps (StrictClock)."""
    embed = WordEmbeddings()
    with MembrainMemory(embeddings=embed, clock=StrictClock()) as mem:
        yield MembrainStore(mem, index={"embed": embed, "dims": 64})


def keys(items) -> list[str]:
    return [i.key for i in items]


# ------------------------------------------------------------------ put / get
def test_put_then_get_returns_langgraph_item_with_value_unchanged(store):
    value = {"content": "Alice likes tea", "tags": ["drink", "pref"], "meta": {"n": 1}}
    before = time.time()
    store.put(("users", "alice"), "k1", value)
    after = time.time()
    item = store.get(("users", "alice"), "k1")
    assert type(item) is Item
    assert (item.namespace, item.key, item.value) == (("users", "alice"), "k1", value)
    assert item.created_at.tzinfo == timezone.utc and item.created_at == item.updated_at
    # stamped by the put, on the wall clock (datetime keeps microseconds: 1e-6 of slack)
    assert before - 1e-6 <= item.created_at.timestamp() <= after + 1e-6


def test_stored_value_is_isolated_from_caller_mutations(store):
    value = {"content": "Alice likes tea", "meta": {"n": 1}}
    store.put(("users",), "k", value)
    value["meta"]["n"] = 2
    got = store.get(("users",), "k")
    got.value["meta"]["n"] = 3
    assert store.get(("users",), "k").value == {"content": "Alice likes tea", "meta": {"n": 1}}


def test_put_accepts_any_mapping(store):
    store.put(("users",), "k", MappingProxyType({"content": "read only"}))
    assert store.get(("users",), "k").value == {"content": "read only"}
    assert isinstance(store.get(("users",), "k").value, Mapping)


def test_update_replaces_value_and_keeps_created_at(store):
    store.put(("users",), "k", {"content": "Alice likes tea"})
    first = store.get(("users",), "k")
    store.put(("users",), "k", {"content": "Alice likes coffee now"})
    second = store.get(("users",), "k")
    assert second.value == {"content": "Alice likes coffee now"}
    assert second.created_at == first.created_at
    assert second.updated_at > first.updated_at


def test_update_with_new_text_is_found_by_the_new_text_once(store):
    store.put(("users",), "k", {"content": "Alice likes tea"})
    store.put(("users",), "other", {"content": "Bob owns a red bicycle"})
    store.put(("users",), "k", {"content": "Alice plays chess"})
    hits = store.search(("users",), query="who plays chess?")
    assert keys(hits) == ["k", "other"]
    assert hits[0].value == {"content": "Alice plays chess"}


def test_get_missing_key_or_namespace_is_none_and_creates_nothing(store):
    store.put(("users",), "k", {"content": "x"})
    assert store.get(("users",), "nope") is None
    assert store.get(("ghosts", "casper"), "k") is None
    assert store.search(("ghosts",), query="anything") == []
    assert store.search(("ghosts",)) == []
    assert store.list_namespaces() == [("users",)]


# --------------------------------------------------------------------- delete
def test_delete_by_put_none_and_by_delete(store):
    store.put(("users",), "a", {"content": "one"})
    store.put(("users",), "b", {"content": "two"})
    store.batch([PutOp(("users",), "a", None)])
    assert store.get(("users",), "a") is None
    store.delete(("users",), "b")
    assert store.get(("users",), "b") is None
    assert store.search(("users",)) == []


def test_delete_missing_is_a_no_op_and_empty_namespaces_disappear(store):
    store.delete(("users",), "never-there")
    store.delete(("nobody", "here"), "k")
    store.put(("users", "alice"), "k", {"content": "x"})
    store.put(("users", "bob"), "k", {"content": "y"})
    store.delete(("users", "alice"), "k")
    assert store.list_namespaces() == [("users", "bob")]


# --------------------------------------------------------------------- search
def test_search_with_query_is_best_first_with_scores_across_sub_namespaces(store):
    store.put(("users", "alice"), "tea", {"content": "Alice drinks green tea every morning"})
    store.put(("users", "alice", "work"), "job", {"content": "Alice works as a nurse"})
    store.put(("users", "bob"), "bike", {"content": "Bob rides a red bike"})
    hits = store.search(("users",), query="who drinks green tea in the morning?")
    assert all(type(h) is SearchItem for h in hits)
    assert hits[0].key == "tea" and hits[0].namespace == ("users", "alice")
    scores = [h.score for h in hits]
    assert all(isinstance(s, float) for s in scores) and scores == sorted(scores, reverse=True)
    assert {h.namespace for h in hits} == {("users", "alice"), ("users", "alice", "work"), ("users", "bob")}
    # a query that names a subject searches that subject's namespaces
    named = store.search(("users",), query="what does Alice drink in the morning?")
    assert named[0].key == "tea" and {h.namespace for h in named} == {("users", "alice"), ("users", "alice", "work")}


def test_the_readme_store_example_finds_the_named_users_fact(store):
    store.put(("users", "maya"), "diet", {"content": "vegetarian since 2019"})
    store.put(("users", "ben"), "diet", {"content": "eats everything"})
    assert [h.namespace for h in store.search(("users",), query="what does Maya eat?", limit=3)] == [("users", "maya")]
    assert store.search(("users",), query="who eats everything?", limit=3)[0].namespace == ("users", "ben")


def test_search_without_query_is_newest_first_without_scores(store):
    for k in ["a", "b", "c"]:
        store.put(("notes",), k, {"content": f"note {k}"})
    assert keys(store.search(("notes",))) == ["c", "b", "a"]
    assert all(h.score is None for h in store.search(("notes",)))
    store.put(("notes",), "a", {"content": "note a, edited"})
    assert keys(store.search(("notes",))) == ["a", "c", "b"]


def test_empty_query_means_no_query(store):
    for k in ["a", "b"]:
        store.put(("notes",), k, {"content": f"note {k}"})
    for query in ["", "   "]:
        hits = store.search(("notes",), query=query)
        assert keys(hits) == ["b", "a"] and all(h.score is None for h in hits)


def test_search_under_empty_prefix_spans_the_whole_store(store):
    store.put(("a",), "1", {"content": "apples are red"})
    store.put(("b", "c"), "2", {"content": "bananas are yellow"})
    store.put(("d",), "3", {"content": "cherries are red too"})
    assert keys(store.search(())) == ["3", "2", "1"]
    assert keys(store.search((), limit=2, offset=1)) == ["2", "1"]
    assert keys(store.search((), query="yellow bananas", limit=1)) == ["2"]


def test_namespaces_may_be_lists_or_path_strings(store):
    store.put(("users", "alice"), "k", {"content": "x"})
    store.put(["users", "bob"], "k", {"content": "y"})
    store.put("users/cat", "k", {"content": "z"})
    assert store.list_namespaces() == [("users", "alice"), ("users", "bob"), ("users", "cat")]
    assert keys(store.search(["users", "alice"])) == ["k"]
    assert keys(store.search("users/alice")) == ["k"]
    assert keys(store.search(["users"], query="x", limit=1)) == ["k"]
    assert store.get(["users", "bob"], "k").namespace == ("users", "bob")
    assert store.batch([GetOp(["users", "cat"], "k")])[0].value == {"content": "z"}
    with pytest.raises(InvalidNamespaceError):
        store.put("langgraph/x", "k", {"content": "x"})


@pytest.fixture
def people(store) -> MembrainStore:
    rows = [
        ("ann", {"content": "Ann", "age": 31, "role": "admin", "team": {"name": "core", "size": 5}}),
        ("ben", {"content": "Ben", "age": 25, "role": "user", "team": {"name": "web", "size": 3}}),
        ("cal", {"content": "Cal", "age": 40, "role": "user", "team": {"name": "core", "size": 5}}),
        ("dot", {"content": "Dot", "role": "guest"}),
    ]
    for key, value in rows:
        store.put(("people",), key, value)
    return store


@pytest.mark.parametrize("filter, expected", [
    ({"role": "user"}, {"ben", "cal"}),
    ({"role": "user", "age": 40}, {"cal"}),
    ({"team.name": "core"}, {"ann", "cal"}),
    ({"team": {"name": "core", "size": 5}}, {"ann", "cal"}),
    ({"age": {"$eq": 25}}, {"ben"}),
    ({"age": {"$ne": 25}}, {"ann", "cal", "dot"}),
    ({"age": {"$gt": 31}}, {"cal"}),
    ({"age": {"$gte": 31}}, {"ann", "cal"}),
    ({"age": {"$lt": 31}}, {"ben"}),
    ({"age": {"$lte": 31}}, {"ann", "ben"}),
    ({"age": {"$gt": 20, "$lt": 35}}, {"ann", "ben"}),
    ({"team.size": {"$lt": 4}}, {"ben"}),
    ({"role": "nobody"}, set()),
])
def test_search_filters(people, filter, expected):
    assert set(keys(people.search(("people",), filter=filter))) == expected
    assert set(keys(people.search(("people",), query="person", filter=filter))) == expected


def test_unknown_filter_operator_is_rejected(people):
    with pytest.raises(ValueError):
        people.search(("people",), filter={"age": {"$near": 3}})


@pytest.mark.parametrize("query", [None, "note about things"])
def test_limit_and_offset_page_through_results_in_order(store, query):
    for i in range(7):
        store.put(("notes",), f"n{i}", {"content": f"note {i} about things" + " x" * i})
    everything = keys(store.search(("notes",), query=query, limit=100))
    assert len(everything) == 7
    pages = [keys(store.search(("notes",), query=query, limit=3, offset=o)) for o in (0, 3, 6)]
    assert [len(p) for p in pages] == [3, 3, 1]
    assert sum(pages, []) == everything
    assert store.search(("notes",), query=query, limit=3, offset=7) == []
    assert store.search(("notes",), query=query, limit=0) == []


@pytest.mark.parametrize("page", [{"limit": -1}, {"offset": -1}, {"limit": -5, "offset": 2}])
def test_a_negative_limit_or_offset_is_refused_as_the_memory_refuses_it(store, page):
    """``store.search(limit=-1)`` used to return [] where ``memory.search`` raised."""
    from langchain_membrain.errors import InvalidOperationError

    store.put(("notes",), "n", {"content": "a note"})
    with pytest.raises(InvalidOperationError, match="non-negative") as from_memory:
        store.memory.search("note", namespace=("notes",), **page)
    with pytest.raises(InvalidOperationError, match="non-negative") as from_store:
        store.search(("notes",), query="note", **page)
    assert type(from_store.value) is type(from_memory.value)
    with pytest.raises(InvalidOperationError):  # validated before any op of the batch runs
        store.batch([PutOp(("notes",), "m", {"content": "never stored"}),
                     SearchOp(("notes",), None, None, page.get("limit", 10), page.get("offset", 0))])
    assert store.get(("notes",), "m") is None


# ------------------------------------------------------------- list_namespaces
@pytest.fixture
def tree_of_namespaces(store) -> MembrainStore:
    for ns in [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"),
               ("a", "c", "f"), ("x", "y", "v1"), ("x", "z", "v1")]:
        store.put(ns, "k", {"content": "/".join(ns)})
    return store


def test_list_namespaces_all_sorted(tree_of_namespaces):
    assert tree_of_namespaces.list_namespaces() == [
        ("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f"),
        ("a", "c", "f"), ("x", "y", "v1"), ("x", "z", "v1")]


def test_list_namespaces_prefix_suffix_and_wildcards(tree_of_namespaces):
    s = tree_of_namespaces
    assert s.list_namespaces(prefix=("a", "b", "d")) == [("a", "b", "d", "e"), ("a", "b", "d", "i")]
    assert s.list_namespaces(prefix=["x"]) == [("x", "y", "v1"), ("x", "z", "v1")]
    assert s.list_namespaces(suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert s.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert s.list_namespaces(suffix=("*", "v1")) == [("x", "y", "v1"), ("x", "z", "v1")]
    assert s.list_namespaces(prefix=("a",), suffix=("c", "f")) == [("a", "c", "f")]
    assert s.list_namespaces(prefix=("nope",)) == []


def test_list_namespaces_max_depth_limit_offset(tree_of_namespaces):
    s = tree_of_namespaces
    assert s.list_namespaces(prefix=("a", "b"), max_depth=3) == [("a", "b", "c"), ("a", "b", "d"), ("a", "b", "f")]
    assert s.list_namespaces(max_depth=1) == [("a",), ("x",)]
    assert s.list_namespaces(limit=2) == [("a", "b", "c"), ("a", "b", "d", "e")]
    assert s.list_namespaces(limit=2, offset=5) == [("x", "y", "v1"), ("x", "z", "v1")]
    assert s.list_namespaces(max_depth=2, limit=1, offset=1) == [("a", "c")]


def test_list_namespaces_op_with_several_conditions_of_one_kind(tree_of_namespaces):
    op = ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("a", "*", "d")),
                                            MatchCondition("prefix", ("*", "b")),
                                            MatchCondition("suffix", ("i",))))
    assert tree_of_namespaces.batch([op]) == [[("a", "b", "d", "i")]]
    clash = ListNamespacesOp(match_conditions=(MatchCondition("prefix", ("a",)), MatchCondition("prefix", ("x",))))
    assert tree_of_namespaces.batch([clash]) == [[]]


# ---------------------------------------------------------------------- batch
def test_batch_runs_ops_in_order_and_returns_results_in_op_order(store):
    ns = ("users", "alice")
    results = store.batch([
        PutOp(ns, "k", {"content": "Alice likes tea"}),
        GetOp(ns, "k"),
        SearchOp(("users",), query="tea"),
        ListNamespacesOp(),
        GetOp(ns, "missing"),
        PutOp(ns, "k", None),
        GetOp(ns, "k"),
        SearchOp(("users",)),
    ])
    assert results[0] is None
    assert results[1].value == {"content": "Alice likes tea"}
    assert keys(results[2]) == ["k"]
    assert results[3] == [ns]
    assert results[4] is None and results[5] is None and results[6] is None
    assert results[7] == []


def test_batch_validates_every_op_before_running_any(store):
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("ok",), "k", {"content": "x"}), PutOp(("bad.label",), "k", {"content": "y"})])
    assert store.get(("ok",), "k") is None


def test_batch_rejects_unknown_ops(store):
    with pytest.raises(ValueError):
        store.batch(["not an op"])


# ---------------------------------------------------------------------- async
async def test_async_methods_match_sync_ones(store):
    await store.aput(("users", "alice"), "k", {"content": "Alice likes tea", "n": 1})
    item = await store.aget(("users", "alice"), "k")
    assert item == store.get(("users", "alice"), "k")
    assert await store.asearch(("users",), query="tea") == store.search(("users",), query="tea")
    assert await store.asearch(("users",), filter={"n": 1}) == store.search(("users",), filter={"n": 1})
    assert await store.alist_namespaces(prefix=("users",)) == [("users", "alice")]
    assert await store.apath(("users", "alice"), "k") == store.path(("users", "alice"), "k")
    await store.adelete(("users", "alice"), "k")
    assert await store.aget(("users", "alice"), "k") is None


async def test_abatch_returns_what_batch_returns(store):
    store.put(("users",), "k", {"content": "Alice likes tea"})
    ops = [GetOp(("users",), "k"), SearchOp(("users",), query="tea"), ListNamespacesOp(max_depth=1)]
    assert await store.abatch(ops) == store.batch(ops)
    assert (await store.abatch([PutOp(("users",), "k2", {"content": "more"}), GetOp(("users",), "k2")]))[1].key == "k2"


async def test_concurrent_async_writes_and_reads_lose_nothing(store):
    async def write_then_read(i: int) -> None:
        await store.aput(("load", f"u{i % 4}"), f"k{i}", {"content": f"fact number {i}", "i": i})
        assert (await store.aget(("load", f"u{i % 4}"), f"k{i}")).value["i"] == i
        await store.asearch(("load",), query=f"fact number {i}", limit=3)

    await asyncio.gather(*(write_then_read(i) for i in range(40)))
    assert sorted(h.value["i"] for h in store.search(("load",), limit=100)) == list(range(40))


# ------------------------------------------------------------------ isolation
def test_namespaces_are_isolated_label_by_label(store):
    store.put(("users", "alice"), "k", {"content": "Alice secret: likes tea"})
    store.put(("users", "alice2"), "k", {"content": "Alice2 secret: likes tea"})
    store.put(("users", "bob"), "k", {"content": "Bob secret: likes tea"})
    store.put(("users/alice",), "k", {"content": "slash label secret: likes tea"})
    for query in [None, "secret likes tea"]:
        hits = store.search(("users", "alice"), query=query, limit=100)
        assert [(h.namespace, h.value["content"]) for h in hits] == [(("users", "alice"), "Alice secret: likes tea")]
    assert store.get(("users", "bob"), "k").value["content"] == "Bob secret: likes tea"
    assert len(store.search(("users",), query="secret", limit=100)) == 3


# ----------------------------------------------------------------- validation
@pytest.mark.parametrize("namespace", [(), ("langgraph",), ("langgraph", "x"), ("a.b",), ("",), ("a", ""),
                                       ("a", 1), ("nul\x00",)])
def test_put_rejects_invalid_namespaces(store, namespace):
    with pytest.raises(InvalidNamespaceError):
        store.put(namespace, "k", {"content": "x"})
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(namespace, "k", {"content": "x"})])
    assert store.list_namespaces() == []


@pytest.mark.parametrize("namespace", [("a.b",), ("",), ("a", 1)])
def test_reads_reject_invalid_labels(store, namespace):
    for call in [lambda: store.get(namespace, "k"), lambda: store.search(namespace),
                 lambda: store.list_namespaces(prefix=namespace), lambda: store.list_namespaces(suffix=namespace),
                 lambda: store.batch([SearchOp(namespace)]), lambda: store.path(namespace, "k")]:
        with pytest.raises(InvalidNamespaceError):
            call()


def test_reserved_root_is_readable_but_not_writable(store):
    assert store.get(("langgraph",), "k") is None
    assert store.search(("langgraph",)) == []


# ------------------------------------------------------------------------ ttl
def test_ttl_is_not_supported(store):
    assert store.supports_ttl is False
    with pytest.raises(NotImplementedError):
        store.put(("users",), "k", {"content": "x"}, ttl=5)
    with pytest.raises(NotImplementedError):
        store.batch([PutOp(("users",), "k", {"content": "x"}, ttl=1.0)])
    store.put(("users",), "k", {"content": "x"}, ttl=None)
    assert store.get(("users",), "k", refresh_ttl=False).value == {"content": "x"}


# -------------------------------------------------------------------- indexing
def test_index_false_stores_without_embedding(store):
    store.put(("docs",), "raw", {"content": "unindexed tea notes", "kind": "raw"}, index=False)
    store.put(("docs",), "idx", {"content": "indexed coffee notes", "kind": "idx"})
    assert store.get(("docs",), "raw").value["kind"] == "raw"
    assert set(keys(store.search(("docs",)))) == {"raw", "idx"}
    assert keys(store.search(("docs",), filter={"kind": "raw"})) == ["raw"]
    # As in LangGraph's stores, unembedded items follow the scored ones, without a score.
    hits = store.search(("docs",), query="tea notes")
    assert keys(hits) == ["idx", "raw"] and hits[0].score is not None and hits[1].score is None


def test_indexed_fields_from_config_and_per_put():
    store = MembrainStore(index={"embed": WordEmbeddings(), "fields": ["title"]})
    store.put(("docs",), "a", {"title": "gardening tips", "content": "quantum physics lecture"})
    store.put(("docs",), "b", {"title": "quantum physics", "content": "gardening"})
    assert store.search(("docs",), query="quantum physics")[0].key == "b"
    store.put(("docs",), "c", {"title": "cooking", "body": "volcanic eruptions explained"}, index=["body"])
    assert store.search(("docs",), query="volcanic eruptions")[0].key == "c"


def test_default_text_is_content_then_text_then_json(store):
    store.put(("docs",), "a", {"text": "penguins waddle", "other": "zzz"})
    store.put(("docs",), "b", {"species": "walrus", "habitat": "arctic"})
    assert store.search(("docs",), query="penguins waddle")[0].key == "a"
    assert store.search(("docs",), query='{"habitat": "arctic", "species": "walrus"}')[0].key == "b"


def test_index_embed_may_be_a_function_sync_or_async():
    words = WordEmbeddings()

    def embed(texts):
        return words.embed_documents(list(texts))

    async def aembed(texts):
        return words.embed_documents(list(texts))

    for fn in (embed, aembed):
        store = MembrainStore(index={"embed": fn, "dims": 64})
        store.put(("docs",), "a", {"content": "penguins waddle"})
        store.put(("docs",), "b", {"content": "eagles soar"})
        assert store.search(("docs",), query="eagles")[0].key == "b"


def test_index_embed_names_resolve_offline_or_are_refused():
    assert isinstance(MembrainStore(index={"embed": "minilm"}).memory.embeddings, MiniLMEmbeddings)
    with pytest.raises(ValueError, match="offline"):
        MembrainStore(index={"embed": "openai:text-embedding-3-small"})


def test_index_config_conflicts_are_refused():
    with pytest.raises(ValueError, match="dims"):
        MembrainStore(index={"embed": WordEmbeddings(), "dims": 384})
    memory = MembrainMemory(embeddings=WordEmbeddings())
    with pytest.raises(ValueError, match="embedder"):
        MembrainStore(memory, index={"embed": WordEmbeddings()})
    assert MembrainStore(memory, index={"embed": memory.embeddings}).memory is memory


# ---------------------------------------------------------------------- extras
def test_path_of_an_item(store):
    store.put(("users",), "k", {"content": "x"})
    assert store.path(("users",), "k") == store.memory.path("k", namespace=("users",))
    assert isinstance(store.path(["users"], "k"), list)
    assert store.path(("users",), "missing") is None
    assert store.path(("nobody",), "k") is None


def test_store_shares_a_given_memory(store):
    memory = MembrainMemory(embeddings=WordEmbeddings())
    memory.add("Alice likes tea", namespace="users/alice", key="k")
    shared = MembrainStore(memory)
    assert shared.get(("users", "alice"), "k").value == {"content": "Alice likes tea"}
    shared.close()  # a given memory is not the store's to close
    assert shared.get(("users", "alice"), "k") is not None


def test_from_conn_string_passes_the_location_to_the_memory(tmp_path):
    with MembrainStore.from_conn_string(str(tmp_path / "memories.db"), index={"embed": WordEmbeddings()}) as store:
        assert isinstance(store, MembrainStore) and isinstance(store.memory, MembrainMemory)
        store.put(("users",), "k", {"content": "Alice likes tea"})
        assert store.search(("users",), query="tea")[0].key == "k"


@pytest.mark.slow
def test_default_minilm_finds_the_semantically_right_memory():
    store = MembrainStore()
    facts = {
        "diet": "Alice is vegetarian and never eats meat",
        "pet": "Alice has a golden retriever called Max",
        "job": "Alice works night shifts as an ICU nurse",
        "city": "Alice moved to Lisbon last spring",
    }
    for key, text in facts.items():
        store.put(("users", "alice"), key, {"content": text})
    assert store.search(("users",), query="what food should I cook for her?")[0].key == "diet"
    assert store.search(("users",), query="does she own a dog?")[0].key == "pet"
    assert store.search(("users",), query="where does she live?")[0].key == "city"
