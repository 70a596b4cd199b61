"""An add never waits for the background trainer: past ``max_training_lag`` waiting inserts
the oldest is skipped and counted (insert/jobs.py, insert/background.py)."""

import threading

import pytest
from test_cli import WordHashEmbeddings

from langchain_membrain import MembrainMemory
from langchain_membrain.insert.config import MemoryConfig
from langchain_membrain.insert.jobs import JobQueue


def test_put_drops_the_oldest_droppable_job_past_the_bound_and_never_blocks():
    q = JobQueue()
    q.put("batch question")  # not droppable
    assert [q.put(n, bound=2) for n in ("a", "b", "c", "d")] == [0, 0, 1, 1]
    assert q.waiting() == 3 and q.unfinished == 3
    assert [q.get() for _ in range(3)] == ["batch question", "c", "d"]
    for _ in range(3):
        q.task_done()
    assert q.join(timeout=0) and q.unfinished == 0


def test_join_waits_for_the_jobs_taken_and_gives_up_at_its_timeout():
    q = JobQueue()
    q.put("a", bound=4)
    assert not q.join(timeout=0.05)  # put, not yet done
    assert q.get() == "a"
    done = threading.Timer(0.05, q.task_done)
    done.start()
    assert q.join(timeout=10.0)
    done.join()


def test_a_blocked_trainer_never_holds_up_an_add_and_skipped_inserts_are_counted():
    """The trainer is held at its first insert (as by a long training step): every add
    returns, ``max_training_lag`` inserts wait, the rest are skipped and counted; once the
    trainer is free it trains what waits, and every memory is stored."""
    texts = [f"fact number {i} about topic {i % 3}" for i in range(12)]
    with MembrainMemory(embeddings=WordHashEmbeddings(), max_training_lag=3) as mem:
        mem.add("warm up the learner", namespace=("u",))
        mem.flush()
        release, supervise = threading.Event(), mem._bg.supervise

        def held(ns, record):
            release.wait(60.0)
            supervise(ns, record)

        mem._bg.supervise = held
        for text in texts:  # would wait forever if an add waited for the trainer
            mem.add(text, namespace=("u",))
        assert mem.stats()["pending_training"] <= 1 + 3  # the one held, and 3 waiting
        release.set()
        mem.flush()
        process = mem.stats().process
        assert process.training_skipped >= len(texts) - 1 - 3 and mem.stats()["training_skipped"] == process.training_skipped
        assert process.supervised + process.training_skipped == len(texts) + 1
        assert len(mem.search(None, namespace=("u",), limit=50)) == len(texts) + 1


@pytest.mark.parametrize("lag", [0, -1])
def test_the_lag_is_at_least_one(lag):
    with pytest.raises(Exception, match="max_training_lag"):
        MemoryConfig(max_training_lag=lag)
