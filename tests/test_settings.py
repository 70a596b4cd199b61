"""Documented parameters do what they say: ``session=`` is recorded as a metadata's session
is, ``get`` finds every key ``add`` returns, and ``history`` of a key stored in another
namespace says which namespace to pass."""

from __future__ import annotations

import pytest
from helpers import WordEmbeddings

from langchain_membrain.errors import NodeNotFoundError
from langchain_membrain.memory import MembrainMemory


def memory(storage=None) -> MembrainMemory:
    return MembrainMemory(storage, embeddings=WordEmbeddings(), background=False)


def test_session_is_the_metadata_session_with_the_offline_teacher():
    with memory() as mem:
        by_arg = mem.add("the dog sleeps on the sofa", namespace="u", session="a")
        by_meta = mem.add("the cat eats fish", namespace="u", metadata={"session": "a"})
        other = mem.add("the report is due monday", namespace="u", session="b")
        mem.add("rain is expected tomorrow", namespace="u")
        assert mem.get(by_arg, namespace="u").value == {"content": "the dog sleeps on the sofa", "session": "a"}
        assert mem.get(other, namespace="u").value["session"] == "b"
        assert mem.get(by_meta, namespace="u").value["session"] == "a"
        working = mem.working("u", "a")
        assert working is not None and working.kind == "working"
        assert "dog" in working.text and "cat" in working.text and "report" not in working.text
        assert "report" in mem.working("u", "b").text
        unsessioned = mem.working("u")  # the inputs added without a session only
        assert "rain" in unsessioned.text and "dog" not in unsessioned.text and "report" not in unsessioned.text


def test_session_wins_over_the_metadata_session():
    with memory() as mem:
        key = mem.add("the dog sleeps on the sofa", namespace="u", metadata={"session": "x"}, session="a")
        assert mem.get(key, namespace="u").value["session"] == "a"
        assert mem.working("u", "x") is None and "dog" in mem.working("u", "a").text


def test_get_finds_the_working_memory_key_add_returned():
    with memory() as mem:
        key = mem.add("we are planning a trip to rome", namespace="u", kind="working", session="1")
        assert key == "working:1"
        found = mem.get(key, namespace="u")
        assert found is not None and found.kind == "working" and found.text == "we are planning a trip to rome"
        mem.add("the trip to rome is booked", namespace="u", kind="working", session="1")
        assert mem.get(key, namespace="u").text == "the trip to rome is booked"
        assert mem.get("working:1@v1", namespace="u") is None  # a former version: working_history
        assert [r.text for r in mem.working_history("u", "1")][0] == "we are planning a trip to rome"
        assert mem.get("working:2", namespace="u") is None


@pytest.mark.parametrize("stored", [False, True])
def test_history_of_a_key_in_another_namespace_names_it(tmp_path, stored):
    with memory(tmp_path / "m.db" if stored else None) as mem:
        key = mem.add("the dog sleeps on the sofa", namespace=("users", "ann"))
        assert [r.key for r in mem.history(key, namespace=("users", "ann"))] == [key]
        with pytest.raises(NodeNotFoundError, match=r"pass namespace=\('users', 'ann'\)"):
            mem.history(key)
        with pytest.raises(NodeNotFoundError, match=r"no memory .* in \('users', 'bob'\)"):
            mem.history(key, namespace=("users", "bob"))
        assert mem.history("no-such-key") == []
        mem.delete(key, namespace=("users", "ann"))  # its history is still found
        with pytest.raises(NodeNotFoundError, match="pass namespace="):
            mem.history(key)
