"""MembrainMemory as users meet it: adding, searching, training behind the scenes,
threads, persistence, and the insert graph."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest
from helpers import WordEmbeddings
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from langchain_membrain import InvalidOperationError, MembrainError
from langchain_membrain.index.config import RetrievalConfig
from langchain_membrain.insert.config import LearnerConfig
from langchain_membrain.insert.decisions import stage1_feats
from langchain_membrain.memory import MembrainMemory
from langchain_membrain.students.training_config import Policy, StageTraining, TrainingConfig
from langchain_membrain.teachers.heuristic import HeuristicTeacher
from langchain_membrain.tree.inputs import NamespaceError

TOPICS = {
    "pets": ["my dog rex loves the park", "the cat sleeps on the sofa", "rex the dog barks at night",
             "we feed the cat fish on fridays", "the dog needs a new leash"],
    "food": ["pasta with tomato sauce for dinner", "I bake bread every sunday", "pizza on friday evenings",
             "fresh bread from the bakery", "tomato soup with bread"],
    "work": ["the quarterly report is due monday", "meeting with the design team at noon",
             "my manager approved the budget", "the report needs new charts", "budget review with the team"],
}


def memory(**kw) -> MembrainMemory:
    return MembrainMemory(embeddings=WordEmbeddings(), **kw)


def all_facts():
    return [t for texts in TOPICS.values() for t in texts]


def test_add_search_get_delete():
    with memory() as mem:
        keys = mem.add_many(all_facts(), namespace="me")
        mem.flush()
        hits = mem.search("when is the report due", namespace="me", limit=3)
        assert hits[0].text == "the quarterly report is due monday"
        assert hits[0].score is not None and hits[0].namespace == ("me",)
        rec = mem.get(keys[0], namespace="me")
        assert rec.value == {"content": all_facts()[0]} and rec.path == mem.path(keys[0], namespace="me")
        assert mem.delete(keys[0], namespace="me") and mem.get(keys[0], namespace="me") is None
        assert not mem.delete(keys[0], namespace="me")
        mem.tree("me").check_invariants()


def test_chat_scorers_are_opt_in_through_the_memory(tmp_path):
    """``MembrainMemory()`` ranks chat turns by their words and meaning; with
    ``retrieval=RetrievalConfig.for_chat()`` a question naming a speaker ranks that speaker's
    turn first, also in a memory reopened from its database (its search index is rebuilt
    with that memory's configuration)."""
    db = str(tmp_path / "chat.db")
    turns = [("I love hiking in the mountains and hiking trails", "Alice"), ("hiking is fine", "Bob")]
    question = "What does Bob think of hiking trails?"
    with memory(storage=db) as mem:
        mem.add_many([t for t, _ in turns], namespace="chat",
                     metadatas=[{"speaker": s, "session": 1} for _, s in turns])
        mem.flush()
        assert mem.search(question, namespace="chat", limit=1)[0].text == turns[0][0]
    with memory(storage=db, retrieval=RetrievalConfig.for_chat()) as mem:
        assert mem.retrieval.chat == RetrievalConfig.for_chat().chat
        assert mem.search(question, namespace="chat", limit=1)[0].text == turns[1][0]


def test_bad_input_is_refused_with_typed_errors():
    with memory() as mem:
        for bad in (None, 42, "", "   ", "x" * 100_001, "nul\x00byte"):
            with pytest.raises(MembrainError):
                mem.add(bad)
        with pytest.raises(NamespaceError):
            mem.add("ok", namespace=("a", ""))
        with pytest.raises(InvalidOperationError):
            mem.add("ok", metadata={"content": "clash"})
        with pytest.raises(InvalidOperationError):
            mem.add("ok", metadata={"x": float("nan")})
        with pytest.raises(InvalidOperationError):
            mem.add_many(["fine", 3])  # validated before anything is stored
        assert mem.stats()["facts"] == 0


def test_add_many_says_which_item_is_bad():
    with memory(background=False) as mem:
        with pytest.raises(InvalidOperationError, match=r"^item 2 of 3: memory text is empty$"):
            mem.add_many(["a fact", "another fact", "   "], namespace="u")
        with pytest.raises(InvalidOperationError, match=r"^item 1 of 2: memory text must be a str, got int$"):
            mem.add_many(["fine", 3], namespace="u")
        with pytest.raises(InvalidOperationError, match=r"^item 1 of 2: values must be JSON-serialisable"):
            mem.add_many(["a", "b"], metadatas=[None, {"x": float("nan")}], namespace="u")
        with pytest.raises(InvalidOperationError, match=r"^item 0 of 2: a key is a non-empty str$"):
            mem.add_many(["a", "b"], keys=["", "k"], namespace="u")
        with pytest.raises(NamespaceError, match=r"^invalid namespace"):  # every item's: no index
            mem.add_many(["a", "b"], namespace=("u", ""))
        with pytest.raises(InvalidOperationError, match=r"^memory text is empty$"):  # add(): one item
            mem.add("  ", namespace="u")
        assert mem.namespaces() == []  # nothing stored


def test_training_happens_in_the_background_and_flush_waits():
    with memory(operations=False) as mem:  # every item an insert ("a new leash, week 1" would update week 0's)
        mem.add_many([f"{fact}, week {week}" for week in range(3) for fact in all_facts()], namespace="me")
        mem.flush()
        stats = mem.stats()
        assert stats["inserts"] == 45 and stats["supervised"] == 45 and stats["pending_training"] == 0
        assert stats["stage1"]["labelled"] + stats["stage2"]["labelled"] > 0
        assert stats["stage2"]["optimiser_steps"] > 0
        assert stats["worker_errors"] == 0


def test_a_memory_runs_its_networks_on_one_thread_and_leaves_the_callers_setting_alone():
    import torch

    seen: list[int] = []
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        # Untraced inference, so that the stage-2 network's own forward runs (and the spy).
        eager = LearnerConfig(training=TrainingConfig(trace_inference=False))
        with memory(background=False, learner=eager) as mem:
            facts = all_facts()
            mem.add(facts[0], namespace="me")  # the learner is built at the first insert
            forward = mem._learner.trainer.infer2.forward

            def spy(*args, **kwargs):
                seen.append(torch.get_num_threads())
                return forward(*args, **kwargs)

            mem._learner.trainer.infer2.forward = spy
            mem.add_many(facts[1:], namespace="me")
            mem.search("the dog", namespace="me")
            mem.flush()
            assert mem.stats()["stage2"]["optimiser_steps"] > 0
            assert torch.get_num_threads() == 2
        assert seen and set(seen) == {1}
    finally:
        torch.set_num_threads(before)


class ExplodingTeacher(HeuristicTeacher):
    """A teacher that works while placing, then fails while the worker supervises."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def choose_stage2(self, tree, closure):
        self.calls += 1
        if self.calls > 3:
            raise RuntimeError("teacher exploded")
        return super().choose_stage2(tree, closure)


def test_a_failing_teacher_never_loses_a_fact():
    cfg = LearnerConfig()
    with memory(teacher=ExplodingTeacher(), learner=cfg) as mem:
        keys = mem.add_many(all_facts(), namespace="me")
        mem.flush()
        assert all(mem.get(k, namespace="me") for k in keys)
        assert mem.stats()["teacher_failures"] > 0
        mem.tree("me").check_invariants()


def test_a_crash_in_the_worker_is_counted_not_raised():
    with memory() as mem:
        mem.add("first fact about dogs", namespace="me")
        mem.flush()
        # Break the learner the worker uses; adds go on, the failure shows in stats().
        original = mem._learner.supervise
        mem._learner.supervise = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom"))
        mem.add("second fact about cats", namespace="me")
        mem.flush()
        stats = mem.stats()
        assert stats["worker_errors"] == 1 and "boom" in stats["last_worker_error"]
        mem._learner.supervise = original
        mem.add("third fact about birds", namespace="me")
        mem.flush()
        assert mem.stats()["facts"] == 3


def test_many_threads_add_search_and_delete_at_once():
    # Training runs in the background throughout; lighter optimiser settings keep it quick.
    light = TrainingConfig(stage1=StageTraining(batch_size=32), stage2=StageTraining(batch_size=32))
    mem = memory(learner=LearnerConfig(training=light))
    acked: list[str] = []
    deleted: list[str] = []
    lock = threading.Lock()
    errors: list[BaseException] = []
    texts = all_facts()

    def worker(seed: int) -> None:
        rng = random.Random(seed)
        mine: list[str] = []
        try:
            for i in range(50):
                r = rng.random()
                if r < 0.6 or not mine:
                    key = mem.add(f"{rng.choice(texts)} #{seed}-{i}", namespace="shared")
                    mine.append(key)
                    with lock:
                        acked.append(key)
                elif r < 0.85:
                    mem.search(rng.choice(texts), namespace="shared", limit=3)
                else:
                    key = mine.pop(rng.randrange(len(mine)))
                    assert mem.delete(key, namespace="shared")
                    with lock:
                        deleted.append(key)
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    mem.flush()
    assert not errors, errors[:3]
    tree = mem.tree("shared")
    tree.check_invariants()
    present = set(tree.facts())
    assert set(acked) - set(deleted) == present
    assert mem.stats()["worker_errors"] == 0
    mem.close()


def test_persistence_round_trip(tmp_path):
    db = tmp_path / "membrain.db"
    with memory(storage=str(db)) as mem:
        keys = mem.add_many(all_facts(), namespace="me")
        mem.flush()
        before = mem.tree("me").to_dict()
        hits = [(r.key, round(r.score, 6)) for r in mem.search("fresh bread", namespace="me")]
        decision = _model_choice(mem)
    with memory(storage=str(db)) as again:
        assert again.tree("me").to_dict() == before
        assert [(r.key, round(r.score, 6)) for r in again.search("fresh bread", namespace="me")] == hits
        assert all(again.get(k, namespace="me") for k in keys)
        assert _model_choice(again) == decision  # the checkpoint was loaded
        again.add("the dog likes the beach", namespace="me")
        assert again.stats()["facts"] == len(keys) + 1


def _model_choice(mem: MembrainMemory) -> list[float]:
    """The stage-1 logits of the learned model on a fixed decision."""
    from langchain_membrain.teachers.base import NewFact, Subtree
    from langchain_membrain.tree.placement import stage1_candidates

    tree = MembrainMemory.tree(mem, "me")
    vec = np.asarray(mem.embeddings.embed_query("a dog in the park"), dtype=np.float32)
    fact = NewFact("a dog in the park", vec)
    sub = Subtree(tree, tree.root_id, stage1_candidates(tree, tree.root_id, vec))
    with mem._learner_lock:
        learner = mem._bg.learner_for(vec.size)
        return np.round(learner.trainer.predict_stage1(stage1_feats(learner.config, tree, fact, sub)), 5).tolist()


def test_two_memories_share_one_database(tmp_path):
    db = str(tmp_path / "shared.db")
    a, b = memory(storage=db, refresh_interval=0.0), memory(storage=db, refresh_interval=0.0)
    try:
        ka = a.add("alice keeps bees", namespace="team")
        kb = b.add("bob grows tomatoes", namespace="team")
        assert {r.key for r in a.search("bees tomatoes", namespace="team", limit=5)} == {ka, kb}
        assert b.get(ka, namespace="team") is not None
        a.tree("team").check_invariants()
    finally:
        a.close(), b.close()


def test_put_replaces_and_keeps_created_at():
    with memory() as mem:
        mem.put("me", "k", {"content": "the dog sleeps"})
        first = mem.get("k", namespace="me")
        mem.put("me", "k", {"content": "the dog sleeps", "mood": "calm"})  # same text: value only
        mem.put("me", "k", {"content": "the cat hunts"})  # new text: placed again
        last = mem.get("k", namespace="me")
        assert last.text == "the cat hunts" and last.created_at == first.created_at
        assert mem.stats()["facts"] == 1


def test_graph_is_the_pipeline_and_composes_as_a_subgraph():
    with memory() as mem:
        mermaid = mem.graph.get_graph().draw_mermaid()
        for node in ("embed", "stage1_descend", "stage1_teacher", "attach", "stage2_rewrite",
                     "stage2_teacher", "apply_actions", "batch_teacher", "train"):
            assert node in mermaid
        out = mem.graph.invoke({"text": "the dog needs a bath", "namespace": "me"})
        assert mem.get(out["key"], namespace="me").text == "the dog needs a bath"

        class Outer(TypedDict, total=False):
            text: str
            namespace: str
            key: str
            parent_path: list[str]
            reply: str

        def respond(state: Outer) -> dict:
            return {"reply": f"stored {state['key']} under {state['parent_path']}"}

        outer = StateGraph(Outer)
        outer.add_node("remember", mem.graph)
        outer.add_node("respond", respond)
        outer.add_edge(START, "remember")
        outer.add_edge("remember", "respond")
        outer.add_edge("respond", END)
        result = outer.compile().invoke({"text": "pizza on saturday", "namespace": "me"})
        assert result["reply"].startswith("stored ") and mem.get(result["key"], namespace="me")


def test_the_insert_graph_runs_under_a_checkpointer_and_holds_nothing_beside_its_state():
    from langgraph.checkpoint.memory import InMemorySaver

    with memory() as mem:
        graph = mem.graph.copy(update={"checkpointer": InMemorySaver()})
        config = {"configurable": {"thread_id": "t"}}
        out = graph.invoke({"text": "the dog needs a bath", "namespace": "me"}, config)
        assert mem.get(out["key"], namespace="me").text == "the dog needs a bath"
        saved = graph.get_state(config).values  # checkpointed: the insert in flight is not
        assert saved["key"] == out["key"] and "inflight" not in saved
        assert mem.stats().inserts_in_flight == 0


async def test_async_parity():
    with memory() as mem:
        key = await mem.aadd("the cat chases mice", namespace="me")
        hits = await mem.asearch("cat", namespace="me")
        assert hits[0].key == key and (await mem.aget(key, namespace="me")).text == "the cat chases mice"
        assert await mem.adelete(key, namespace="me")


def test_a_corrupt_checkpoint_falls_back_to_fresh_models_and_keeps_memories(tmp_path):
    from langchain_membrain.storage import open_storage

    db = str(tmp_path / "m.db")
    with memory(storage=db) as mem:
        keys = mem.add_many(all_facts(), namespace="me")
    with open_storage(db) as storage:
        storage.save_checkpoint("models", b"not a checkpoint", {})
    with memory(storage=db) as again:
        again.add("the cat likes the sun", namespace="me")
        stats = again.stats()
        assert "cannot read checkpoint" in stats["checkpoint_error"]
        assert all(again.get(k, namespace="me") for k in keys) and stats["facts"] == len(keys) + 1
    with memory(storage=db) as third:  # the unusable checkpoint was replaced on close
        third.add("the dog likes the snow", namespace="me")
        assert third.stats()["checkpoint_error"] is None


def test_stats_of_a_reopened_memory_report_the_saved_learning_counters(tmp_path):
    db = str(tmp_path / "m.db")
    with memory(storage=db) as mem:
        mem.add_many(all_facts(), namespace="me")
        mem.flush()
        before = mem.stats()
    with memory(storage=db) as again:  # nothing inserted in this process yet
        stats = again.stats()
        assert stats["teacher_calls"] == before["teacher_calls"] > 0
        assert stats["naming_calls"] == before["naming_calls"]
        assert stats["stage1"]["agreement"] == before["stage1"]["agreement"]
        assert stats["saved_inserts"] == len(all_facts())
        again.add("the dog likes the beach", namespace="me")
        again.flush()
        after = again.stats()  # counts continue across processes
        assert after["inserts"] == len(all_facts()) + 1 and after["naming_calls"] >= before["naming_calls"]


def test_a_process_that_does_not_train_survives_a_corrupt_checkpoint(tmp_path):
    from langchain_membrain.storage import open_storage

    db = str(tmp_path / "shared.db")
    trainer = memory(storage=db, refresh_interval=0.0)
    other = memory(storage=db, refresh_interval=0.0)
    try:
        trainer.add("alice keeps bees", namespace="team")
        other.add("bob grows tomatoes", namespace="team")
        assert trainer.stats()["trainer"] and not other.stats()["trainer"]
        with open_storage(db) as storage:
            storage.save_checkpoint("models", b"garbage", {})
        key = other.add("carol bakes bread", namespace="team")  # picks the checkpoint up: no raise
        assert other.get(key, namespace="team") is not None
        assert "cannot read checkpoint" in other.stats()["checkpoint_error"]
    finally:
        other.close(), trainer.close()


class SilentTeacher(HeuristicTeacher):
    """A teacher that never says where a fact goes (it answers the memory operations)."""

    def place(self, new_fact, tree):
        raise RuntimeError("no answer")


def test_an_add_whose_placement_got_no_answer_counts_as_one_without_the_teacher():
    told = Policy(execute="teacher", query="always")
    with memory(teacher=SilentTeacher(), learner=LearnerConfig(stage1=told, stage2=told), background=False) as mem:
        keys = mem.add_many(all_facts()[:4], namespace="me")
        assert all(mem.get(k, namespace="me") is not None for k in keys)  # stored all the same
        assert mem.stats()["without_teacher"] == 3  # the first, in an empty tree, had nothing to ask
        mem.graph.invoke({"text": "the dog needs a bath", "namespace": "me"})  # an insert, not an add
        assert mem.stats()["without_teacher"] == 3


class GatedTeacher(HeuristicTeacher):
    """A slow teacher, as an LLM is: the worker's questions wait until ``release`` is set."""

    fast = False

    def __init__(self):
        super().__init__()
        self.asked, self.release = threading.Event(), threading.Event()

    def place(self, new_fact, tree):
        if threading.current_thread().name == "membrain-trainer":  # the joint question of an audit
            self.asked.set()
            assert self.release.wait(30), "the test never released the teacher"
        return super().place(new_fact, tree)


def test_adds_and_searches_do_not_wait_for_a_slow_teacher():
    teacher = GatedTeacher()
    audit_all = Policy(execute="model", query="always")  # every decision is asked afterwards
    with memory(teacher=teacher, learner=LearnerConfig(stage1=audit_all, stage2=audit_all)) as mem:
        facts = all_facts()
        mem.add_many(facts[:3], namespace="me")
        assert teacher.asked.wait(30)  # the worker is now inside a teacher call
        done = threading.Event()

        def more() -> None:
            mem.add_many(facts[3:], namespace="me")
            mem.search("the dog", namespace="me")
            done.set()

        threading.Thread(target=more, daemon=True).start()
        finished = done.wait(30)
        teacher.release.set()  # let the worker go on, whatever the outcome
        assert finished, "an add or a search waited for the teacher"
        mem.flush()
        stats = mem.stats()
        assert stats["supervised"] == len(facts) and stats["worker_errors"] == 0
        assert stats["teacher_calls"] > 0
        assert {r.text for r in mem.search(None, namespace="me", limit=100)} == set(facts)
        mem.tree("me").check_invariants()


def test_a_failed_compiled_graph_run_leaves_nothing_in_flight():
    with memory() as mem:
        # enough facts for the teacher to group some (a subject groups from about 20 facts)
        mem.add_many([f"{fact} (note {i})" for i in range(3) for fact in all_facts()], namespace="me")
        mem.flush()
        aspect = mem.tree("me").aspects()[0]
        with pytest.raises(InvalidOperationError):  # the key names an aspect: attach refuses
            mem.graph.invoke({"text": "the dog needs a bath", "namespace": "me", "key": aspect})
        assert mem.stats()["inserts_in_flight"] == 0  # its record went with its state
        with pytest.raises(InvalidOperationError):  # through add: cleaned up at once
            mem.put("me", aspect, {"content": "the cat sleeps"})
        assert mem.stats()["inserts_in_flight"] == 0


def test_the_same_memory_added_twice_is_stored_once(tmp_path):
    db = str(tmp_path / "m.db")
    with memory(storage=db) as mem:
        first = mem.add("My dog Rex loves the park.", namespace="me")
        before = mem.get(first, namespace="me").updated_at
        assert mem.add("my dog rex loves  the park!", namespace="me") == first
        assert mem.get(first, namespace="me").updated_at > before
        # Texts that differ are kept apart, however close their embeddings.
        negated = mem.add("My dog Rex does not love the park.", namespace="me")
        # So are equal texts with other fields, other namespaces, and put() with a new key.
        tagged = mem.add("My dog Rex loves the park.", namespace="me", metadata={"source": "vet"})
        elsewhere = mem.add("My dog Rex loves the park.", namespace="you")
        mem.put("me", "explicit", {"content": "My dog Rex loves the park."})
        assert mem.add("My dog Rex loves the park", namespace="me", metadata={"source": "vet"}) == tagged
        assert len({first, negated, tagged, elsewhere, "explicit"}) == 5
        stats = mem.stats()
        assert stats["merged"] == 2 and stats["facts"] == 5

        results: list[str] = []
        threads = [threading.Thread(target=lambda: results.append(mem.add("the cat sleeps on the sofa",
                                                                          namespace="me")))
                   for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(set(results)) == 1 and mem.stats()["facts"] == 6
    with memory(storage=db) as again:  # a new process sees the stored facts as duplicates too
        assert again.add("My dog Rex loves the park", namespace="me") == first
    with memory(dedupe=False) as mem:
        assert mem.add("the same", namespace="me") != mem.add("the same", namespace="me")


def test_duplicates_ignore_case_apostrophes_and_punctuation():
    with memory() as mem:
        first = mem.add("I'm allergic to peanuts", namespace="me")
        assert mem.add("im ALLERGIC to peanuts!!", namespace="me") == first
        assert mem.add("I’m allergic to peanuts.", namespace="me") == first  # typographic apostrophe
        assert mem.add("I'm not allergic to peanuts", namespace="me") != first
        assert mem.stats()["merged"] == 2


def test_a_namespace_the_store_refuses_is_refused_by_add_too():
    from langchain_membrain.tree.inputs import NamespaceError

    with memory() as mem:
        with pytest.raises(NamespaceError, match="cannot contain"):
            mem.add("the dog sleeps", namespace="users/jo.smith")
        with pytest.raises(NamespaceError, match="cannot contain"):
            mem.search("dog", namespace=("users", "jo.smith"))
        assert mem.namespaces() == []


def test_training_keeps_pace_while_add_many_runs():
    """The background worker supervises earlier inserts while a long add_many goes on (an
    add that held the tree's lock from start to end starved it until the batch was done)."""
    facts = [f"{fact}, note {i}" for i in range(8) for fact in all_facts()]
    with memory() as mem:
        done = threading.Event()

        def add_all() -> None:
            mem.add_many(facts, namespace="me")
            done.set()

        threading.Thread(target=add_all, daemon=True).start()
        seen_while_adding = 0
        while not done.wait(0.01):  # read the counter without taking any lock
            seen_while_adding = max(seen_while_adding, mem._counts["supervised"])
        # Measured on 2 cores: 24 to 29 of 120 supervised meanwhile; 9 when the worker starved.
        assert seen_while_adding >= len(facts) // 8
        mem.flush()
        assert mem.stats()["supervised"] == len(facts)


def test_namespaces_past_the_cap_are_unloaded_and_come_back_from_storage(tmp_path):
    """Thousands of tenants: with storage, only the most recently used namespaces stay
    loaded; an unloaded one is read back on its next use, with every write."""
    with memory(storage=tmp_path / "m.db", max_loaded_namespaces=3) as mem:
        keys = {f"user/{i}": mem.add(f"user {i} keeps bees on the roof", namespace=f"user/{i}")
                for i in range(10)}
        assert mem.stats()["loaded_namespaces"] <= 3
        for ns, key in keys.items():
            assert mem.get(key, namespace=ns).text.startswith(ns.replace("/", " "))
            assert [r.key for r in mem.search("bees", namespace=ns)] == [key]
        mem.add("user 0 also keeps hens", namespace="user/0")
        assert len(mem.search(None, namespace="user/0", limit=10)) == 2
        assert mem.stats()["loaded_namespaces"] <= 3 and mem.stats()["facts"] == 11
    with pytest.raises(InvalidOperationError):
        memory(max_loaded_namespaces=0)


def test_search_without_a_namespace_spans_every_namespace():
    with memory(background=False) as mem:
        mem.add("Alice keeps bees in her garden", namespace="users/alice")
        mem.add("Bob keeps a canoe in the garage", namespace="users/bob")
        mem.add("The team meets on Tuesdays")  # the default namespace, ("memories",)
        everywhere = {r.namespace for r in mem.search("keeps", limit=10)}
        assert everywhere == {("users", "alice"), ("users", "bob"), ("memories",)}
        assert {r.namespace for r in mem.search("keeps", namespace=(), limit=10)} == everywhere
        assert {r.namespace for r in mem.search(limit=10)} == everywhere  # listing, newest first
        assert {r.namespace for r in mem.search("keeps", namespace="users/alice")} == {("users", "alice")}
        with pytest.raises(InvalidOperationError, match="needs the namespace"):
            mem.search("keeps", exact_namespace=True)


@pytest.mark.parametrize("max_height", [1, 2])
def test_the_tree_never_grows_past_max_height(tmp_path, max_height):
    """Whoever decides (the student from its prior or the teacher), no add makes a fact lie
    deeper than ``max_height``; every fact is kept; a reopened memory applies the bound to
    the trees it loads."""
    facts = all_facts() * 3  # repeats are merged (dedupe); vary them so all are stored
    facts = [f"{t} ({i})" for i, t in enumerate(facts)]
    with memory(storage=tmp_path / "m.db", max_height=max_height, background=False) as mem:
        mem.add_many(facts, namespace="me")
        tree = mem.tree("me")
        assert tree.height() <= max_height and len(tree.facts()) == len(facts)
        assert (len(tree.aspects()) > 0) == (max_height > 1)
    with memory(storage=tmp_path / "m.db", max_height=max_height) as mem:
        assert mem.tree("me").max_height == max_height


def test_max_height_is_checked():
    with pytest.raises(InvalidOperationError):
        memory(max_height=0)
    with memory() as mem:
        assert mem.max_height == 4


def test_add_many_reports_its_progress_to_a_function():
    """``progress`` may be a function: called as (done, total) after each input is stored;
    anything else that is not a bool is refused before anything is stored."""
    seen: list[tuple[int, int]] = []
    with MembrainMemory(embeddings=WordEmbeddings(), background=False) as mem:
        keys = mem.add_many(["I like tea", "I run on Sundays", "My sister plays the cello"], namespace="u",
                            progress=lambda done, total: seen.append((done, total)))
        assert seen == [(1, 3), (2, 3), (3, 3)] and len(keys) == 3
        with pytest.raises(InvalidOperationError, match="progress"):
            mem.add_many(["I like coffee"], namespace="v", progress="yes")  # type: ignore[arg-type]
        assert mem.namespaces() == [("u",)]
