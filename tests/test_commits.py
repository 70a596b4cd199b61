"""One input, one commit: an ``add()`` writes its fact and the tree's changes (placement,
stage-2 actions, training's corrections when inline) in one transaction, and a formed input
its raw item, its facts and the session's summary in one, both counted by SQLite's trace
callback on the calling thread's connection."""

from __future__ import annotations

import pytest
from helpers import WordEmbeddings
from test_memory_kinds import ScriptedFormer

from langchain_membrain.errors import StorageError
from langchain_membrain.memory import MembrainMemory

FACTS = ["Maya is allergic to peanuts", "Ben plays the cello on Sundays", "We visited Kyoto in April",
         "I live in Leeds.", "I live in York now.", "Maya is vegetarian since 2019"]


def traced(mem: MembrainMemory) -> list[str]:
    statements: list[str] = []
    mem._storage._thread_conn().set_trace_callback(lambda sql: statements.append(sql.split()[0].upper()))
    return statements


@pytest.mark.parametrize("background", [False, True])
def test_a_plain_add_commits_once(tmp_path, background):
    with MembrainMemory(tmp_path / "m.db", embeddings=WordEmbeddings(), background=background) as mem:
        mem.add("a first fact, before the trace")
        statements = traced(mem)
        for text in FACTS:
            statements.clear()
            mem.add(text)
            assert statements.count("COMMIT") == 1, (text, statements)
        assert {r.text for r in mem.search(None, limit=20)} >= set(FACTS) - {"I live in Leeds."}
        assert mem.history(mem.search("York", limit=1)[0].key)  # the move updated Leeds, in that commit


def test_a_formed_input_commits_once_with_its_raw_item_facts_and_summary(tmp_path):
    said = "Oh nice! I play the cello, since 2019. What about you?"
    teacher = ScriptedFormer({said: {"facts": ["Maya started the cello in 2019", "Ana asked about hobbies"],
                                     "experiences": ["tune the cello before every practice"],
                                     "working": "Maya and Ana talk about music"}})
    with MembrainMemory(tmp_path / "m.db", embeddings=WordEmbeddings(), teacher=teacher, background=False) as mem:
        mem.add("a first input", session="s1")
        statements = traced(mem)
        key = mem.add(said, session="s1")
        assert statements.count("COMMIT") == 1, statements
        assert mem.get(key).kind == "raw" and mem.working(session="s1").text == "Maya and Ana talk about music"
        assert len(mem.search(None, kinds=["fact", "experience"], limit=10)) == 3


def test_an_input_that_fails_midway_leaves_nothing_of_it_stored(tmp_path):
    """The raw item is written first; when a later write of the same input fails, the
    whole input rolls back, in storage and in memory."""
    said = "We moved to Porto last spring, and the kids love it"
    teacher = ScriptedFormer({said: {"facts": ["We moved to Porto last spring"], "working": "x" * 10}})
    with MembrainMemory(tmp_path / "m.db", embeddings=WordEmbeddings(), teacher=teacher, background=False) as mem:
        mem.add("I live in Lisbon")
        before = {r.text for r in mem.search(None, kinds=["fact", "raw"], limit=20)}
        tree = mem.tree()

        def fail(*args, **kwargs):
            raise StorageError("the disk is full")

        tree.set_working = fail  # the input's last write
        with pytest.raises(StorageError, match="disk is full"):
            mem.add(said)
        assert {r.text for r in mem.search(None, kinds=["fact", "raw"], limit=20)} == before
    with MembrainMemory(tmp_path / "m.db", embeddings=WordEmbeddings(), teacher=teacher) as again:
        assert {r.text for r in again.search(None, kinds=["fact", "raw"], limit=20)} == before
