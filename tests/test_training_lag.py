"""An add never waits for the background trainer (insert/background.py): with an in-process
teacher, past ``max_training_lag`` inserts waiting, the oldest waiting insert is skipped and
counted; a batch question and the stop signal are never dropped."""

import queue

import pytest
from test_cli import WordHashEmbeddings

from langchain_membrain.insert import background
from langchain_membrain.insert.config import MemoryConfig
from langchain_membrain.memory import MembrainMemory
from langchain_membrain.memory.parts import MemoryParts
from langchain_membrain.teachers.heuristic import HeuristicTeacher


def test_past_the_bound_the_oldest_insert_is_dropped_and_nothing_waits():
    def trainee(i, droppable=True):
        return background.Trainee(("ns",), i, droppable)  # a placement record stands in as i

    q: queue.Queue = queue.Queue()
    for i in range(3):
        assert background.enqueue_dropping_oldest(q, trainee(i), bound=3) == 0
    assert background.enqueue_dropping_oldest(q, trainee(3), bound=3) == 1
    assert [t.record for t in q.queue] == [1, 2, 3] and q.unfinished_tasks == 3
    job, kept = object(), trainee(0, droppable=False)  # a batch question, an import's insert
    q2: queue.Queue = queue.Queue()
    for item in (job, kept, trainee(1)):
        background.enqueue_dropping_oldest(q2, item, bound=0)
    assert background.enqueue_dropping_oldest(q2, trainee(2), bound=3) == 1
    assert list(q2.queue) == [job, kept, trainee(2)]
    assert background.enqueue_dropping_oldest(q2, None, bound=2) == 1  # the stop signal goes in
    assert list(q2.queue) == [job, kept, None]


def test_an_in_process_teacher_s_queue_is_bounded_by_the_lag():
    bg = MemoryParts(MemoryConfig(embeddings=WordHashEmbeddings(), teacher=HeuristicTeacher(), max_training_lag=3)).bg
    assert bg.training_bound == 3


def test_stats_before_the_first_insert_hold_the_learning_counters():
    with MembrainMemory(embeddings=WordHashEmbeddings()) as memory:
        s = memory.stats()
        assert s["questions"] == {} and s["stage1"]["decisions"] == 0 and s["skipped_training"] == 0


def test_an_import_is_trained_whole_and_single_adds_may_be_skipped():
    with MembrainMemory(embeddings=WordHashEmbeddings(), max_training_lag=1) as memory:
        memory.add_many([f"fact number {i} about topic {i % 7}" for i in range(60)], namespace="u")
        memory.flush()
        assert memory.stats()["supervised"] == 60 and memory.stats()["skipped_training"] == 0
        for i in range(40):
            memory.add(f"another fact {i} on subject {i % 5}", namespace="u")
        memory.flush()
        counts = memory.stats()
        assert counts["supervised"] + counts["skipped_training"] == 100
        assert len(memory.search(None, namespace="u", limit=1000)) == 100  # every memory kept


@pytest.mark.parametrize("lag", [0, -1])
def test_the_lag_is_at_least_one(lag):
    with pytest.raises(Exception, match="max_training_lag"):
        MemoryConfig(max_training_lag=lag)
