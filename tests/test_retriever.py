"""MembrainRetriever: LangChain's standard retriever tests, and our own."""

from __future__ import annotations

import functools

import pytest
from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_tests.integration_tests import RetrieversIntegrationTests

from langchain_membrain.memory import MembrainMemory
from langchain_membrain.retrieval.retriever import MembrainRetriever

FACTS = [
    ("tea", "Alice drinks green tea every morning", {"kind": "habit"}),
    ("nurse", "Alice works night shifts as a nurse", {"kind": "job", "since": 2019}),
    ("dog", "Alice has a golden retriever called Max", {"kind": "pet"}),
    ("lisbon", "Alice moved to Lisbon last spring", {"kind": "home"}),
]


def make_memory() -> MembrainMemory:
    memory = MembrainMemory(embeddings=DeterministicFakeEmbedding(size=32))
    for key, text, meta in FACTS:
        memory.add(text, namespace=("users", "alice"), metadata=meta, key=key)
    memory.add("Bob rides a red bike", namespace=("users", "bob"), key="bike")
    return memory


@functools.lru_cache(maxsize=1)
def shared_memory() -> MembrainMemory:
    return make_memory()


class TestMembrainRetrieverStandard(RetrieversIntegrationTests):
    @property
    def retriever_constructor(self) -> type[MembrainRetriever]:
        return MembrainRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        return {"memory": shared_memory(), "namespace": ("users",), "k": 2}

    @property
    def retriever_query_example(self) -> str:
        return "What does Alice drink?"


@pytest.fixture
def memory() -> MembrainMemory:
    return make_memory()


def test_documents_carry_text_key_namespace_path_score_and_value_fields(memory):
    retriever = MembrainRetriever(memory=memory, namespace="users/alice", k=1)
    [doc] = retriever.invoke("Alice works night shifts as a nurse")
    assert isinstance(doc, Document)
    assert doc.page_content == "Alice works night shifts as a nurse"
    assert doc.id == "nurse"
    meta = doc.metadata
    assert meta["key"] == "nurse" and meta["namespace"] == ("users", "alice")
    assert meta["path"] == memory.path("nurse", namespace=("users", "alice"))
    assert isinstance(meta["score"], float) and meta["score"] > 0  # the fused retrieval score
    assert meta["kind"] == "job" and meta["since"] == 2019
    assert "content" not in meta  # the text is the page content, not repeated


def test_results_are_best_first_and_scoped_to_the_namespace(memory):
    docs = MembrainRetriever(memory=memory, namespace=("users", "alice"), k=10).invoke("Bob rides a red bike")
    assert len(docs) == len(FACTS)
    assert all(d.metadata["namespace"] == ("users", "alice") for d in docs)
    scores = [d.metadata["score"] for d in docs]
    assert scores == sorted(scores, reverse=True)
    everyone = MembrainRetriever(memory=memory, namespace="users", k=1).invoke("Bob rides a red bike")
    assert [d.metadata["key"] for d in everyone] == ["bike"]


def test_k_and_filter_per_call_override_the_fields(memory):
    retriever = MembrainRetriever(memory=memory, namespace="users", k=4, filter={"kind": "pet"})
    assert [d.id for d in retriever.invoke("anything")] == ["dog"]
    assert [d.id for d in retriever.invoke("anything", filter={"kind": {"$ne": "pet"}}, k=10)] != []
    assert "dog" not in [d.id for d in retriever.invoke("anything", filter={"kind": {"$ne": "pet"}}, k=10)]
    assert len(retriever.invoke("anything", filter={}, k=3)) == 3
    assert retriever.invoke("anything", k=0) == []


async def test_ainvoke_honours_k_and_filter(memory):
    retriever = MembrainRetriever(memory=memory, namespace="users", k=4)
    assert len(await retriever.ainvoke("Alice drinks green tea every morning", k=2)) == 2
    docs = await retriever.ainvoke("x", filter={"since": {"$gte": 2000}})
    assert [d.id for d in docs] == ["nurse"]
    sync = retriever.invoke("Alice drinks green tea every morning")
    assert [d.id for d in await retriever.ainvoke("Alice drinks green tea every morning")] == [d.id for d in sync]


def test_negative_k_is_refused(memory):
    with pytest.raises(ValueError):
        MembrainRetriever(memory=memory, k=-1)
