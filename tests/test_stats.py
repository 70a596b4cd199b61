"""``MembrainMemory.stats()`` is a typed :class:`MemoryStats`: this process's counters apart
from the stored (lifetime) ones, agreement per stage with its sample size, and the flat
mapping every existing reader uses."""

from __future__ import annotations

import json

from helpers import WordEmbeddings

from langchain_membrain.cli import stats_rows
from langchain_membrain.insert.stats import Counters, ForestStats, LearningStats, MemoryStats, StageStats
from langchain_membrain.memory import MembrainMemory

FACTS = ["Maya is allergic to peanuts", "Maya plays the piano", "Tom plays football",
         "Tom climbs on Mondays", "Maya is learning Japanese", "Tom has a dog"]

#: The flat keys readers of stats() use (the package, its benchmarks, examples and tests).
FLAT_KEYS = {"namespaces", "facts", "aspects", "max_depth", "inserts", "corrections", "supervised",
             "worker_errors", "merged", "relabelled", "refreshed_by_change", "refresh_reloads",
             "pending_training", "inserts_in_flight", "last_worker_error", "checkpoint_error", "trainer",
             "loaded_namespaces", "prior", "recent_teacher_calls_per_insert", "stage1", "stage2",
             "teacher_calls", "naming_calls", "questions", "teacher_failures", "asked_when_unsure",
             "teacher_calls_per_insert", "operations"}


def test_stats_are_typed_and_keep_every_flat_key():
    with MembrainMemory(embeddings=WordEmbeddings(), background=False) as mem:
        mem.add_many(FACTS, namespace="users/x")
        stats = mem.stats()
    assert isinstance(stats, MemoryStats)
    assert FLAT_KEYS <= set(stats)
    assert stats["inserts"] == stats.process.inserts == stats.lifetime.inserts == len(FACTS)
    assert stats.stored is None and "saved_inserts" not in stats  # nothing stored: no stored counters
    assert stats["teacher_calls"] == stats.learning.teacher_calls > 0
    assert stats["naming_calls"] == stats.learning.naming_calls
    assert stats.get("no such key") is None and "stage1" in stats
    for stage in ("stage1", "stage2"):
        assert stats[stage] == stats.learning.stages[stage].as_dict()
        assert stats[stage]["labelled"] == stats.learning.stages[stage].labelled
    assert dict(stats) == stats.as_dict() and json.loads(json.dumps(stats.as_dict(), default=str))
    assert stats.forest == ForestStats(namespaces=1, facts=len(FACTS), aspects=stats["aspects"],
                                       max_depth=stats["max_depth"])


def test_this_process_counts_apart_from_the_stored_counts(tmp_path):
    db = str(tmp_path / "m.db")
    with MembrainMemory(db, embeddings=WordEmbeddings()) as first:
        first.add_many(FACTS[:4], namespace="users/x")
    with MembrainMemory(db, embeddings=WordEmbeddings()) as again:
        cold = again.stats()  # no model loaded: the counters come from the saved checkpoint
        assert cold.process == Counters() and cold.stored.inserts == 4 and cold.stored.supervised == 4
        assert cold["inserts"] == cold["saved_inserts"] == cold.lifetime.inserts == 4
        again.add_many(FACTS[4:], namespace="users/x")
        again.flush()
        warm = again.stats()
    assert warm.process.inserts == 2 and warm.stored.inserts == 4
    assert warm["inserts"] == warm.lifetime.inserts == 6 and warm["saved_inserts"] == 4
    assert warm.learning.teacher_calls >= cold.learning.teacher_calls
    with MembrainMemory(db, embeddings=WordEmbeddings()) as third:  # what the second one saved
        assert third.stats().stored.inserts == 6


def test_membrain_stats_prints_fields_each_once():
    stages = {"stage1": StageStats(decisions=2, labelled=2, agreement=0.0),
              "stage2": StageStats(decisions=130, labelled=120, agreement=0.81)}
    stats = MemoryStats(ForestStats(1, 34, 5, 3), process=Counters(inserts=1), stored=Counters(inserts=34),
                        learning=LearningStats(stages, teacher_calls=12, naming_calls=3))
    rows = dict(stats_rows(stats))
    assert len(rows) == len(stats_rows(stats))  # no field twice
    assert rows["inserts"] == "35 (1 in this process)"
    assert rows["teacher questions"] == "15 (12 joint, 3 naming)"
    # each stage's agreement with its sample size, never averaged across stages
    assert rows["stage 1 agreement with the teacher"] == "0% of 2 labelled decisions"
    assert rows["stage 2 agreement with the teacher"] == "81% of 120 labelled decisions"
    fresh = dict(stats_rows(MemoryStats(ForestStats(), process=Counters())))
    assert fresh["teacher questions"].startswith("none yet") and fresh["inserts"] == "0"


def test_membrain_stats_says_who_decided_the_memory_operations():
    with MembrainMemory(embeddings=WordEmbeddings(), background=False, operations="teacher") as mem:
        for fact in FACTS + ["Thanks!"]:
            mem.add(fact, namespace="u")
        rows = dict(stats_rows(mem.stats()))
    assert rows["memory operations"] == "7 decided (ADD 6, IGNORE 1): 0 by the student, 7 asked"


def test_every_key_exists_under_every_teacher(tmp_path):
    """``stats()["teacher"]`` used to raise KeyError under a teacher that keeps no cost
    counters (the offline one did not): it is a dict with any teacher, {} where it keeps
    none, as ``operations`` is where none was decided, also in a process that only reads
    (``membrain stats``'s StoredMemory)."""
    from langchain_membrain.bench.updates import GroundTruthTeacher
    from langchain_membrain.cli import StoredMemory

    db = str(tmp_path / "m.db")
    keys = FLAT_KEYS | {"teacher"}
    for teacher, operations in ((None, True), (None, False), (None, "teacher"), (GroundTruthTeacher(), "teacher")):
        with MembrainMemory(db, teacher=teacher, embeddings=WordEmbeddings(), background=False,
                            operations=operations) as mem:
            mem.add_many(FACTS[:2], namespace="users/x")
            stats = mem.stats()
        assert keys <= set(stats), keys - set(stats)
        assert isinstance(stats["teacher"], dict) and isinstance(stats["operations"], dict)
    with StoredMemory(db) as stored:
        stats = stored.stats()
        assert stats["teacher"] == {} and stats["operations"] == {} and "stage1" in stats


def test_stats_before_the_first_insert_hold_the_learning_counters():
    from test_cli import WordHashEmbeddings

    from langchain_membrain.memory import MembrainMemory

    with MembrainMemory(embeddings=WordHashEmbeddings()) as memory:
        s = memory.stats()
        assert s["questions"] == {} and s["stage1"]["decisions"] == 0 and s["stage2"]["labelled"] == 0
