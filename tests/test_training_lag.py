"""An add waits for a background trainer that lags for a bounded time only, and a trainer far
behind skips the oldest waiting inserts and counts them (insert/jobs.py, insert/background.py)."""

import threading
import time

import pytest
from test_cli import WordHashEmbeddings

from langchain_membrain import MembrainMemory
from langchain_membrain.insert import jobs
from langchain_membrain.insert.config import MemoryConfig
from langchain_membrain.insert.jobs import JobQueue


def test_put_drops_the_oldest_droppable_insert_past_keep():
    q = JobQueue()
    q.put("batch question")  # not an insert: never dropped, never counted
    q.put("import", wait_below=5)  # an insert of a bulk import: counted, never dropped
    assert [q.put(n, keep=3) for n in ("a", "b", "c", "d")] == [0, 0, 1, 1]
    assert q.waiting() == 4 and q.unfinished == 4
    assert [q.get() for _ in range(4)] == ["batch question", "import", "c", "d"]
    for _ in range(4):
        q.task_done()
    assert q.join(timeout=0) and q.unfinished == 0


def test_put_waits_at_the_lag_for_a_bounded_time_then_queues():
    q = JobQueue()
    q.put("a", keep=8)
    start = time.monotonic()
    assert q.put("b", wait_below=1, wait_s=0.2, keep=8) == 0  # nobody takes "a": the wait ends
    assert 0.2 <= time.monotonic() - start < 5.0 and q.waiting() == 2
    taker = threading.Timer(0.05, q.get)
    taker.start()
    assert q.put("c", wait_below=2, wait_s=30.0) == 0  # "a" taken: it is within the lag again
    taker.join()
    assert q.waiting() == 2


def test_join_waits_for_the_jobs_taken_and_gives_up_at_its_timeout():
    q = JobQueue()
    q.put("a", keep=4)
    assert not q.join(timeout=0.05)  # put, not yet done
    assert q.get() == "a"
    done = threading.Timer(0.05, q.task_done)
    done.start()
    assert q.join(timeout=10.0)
    done.join()


def test_a_blocked_trainer_holds_an_add_up_for_a_bounded_time_and_skipped_inserts_are_counted(monkeypatch):
    """The trainer is held at its first insert (as by a long training step): every add
    returns after ``LAG_WAIT_S`` at most, ``LAG_SKIP_FACTOR`` times the lag wait, the rest
    are skipped and counted; once the trainer is free it trains what waits, and every
    memory is stored."""
    monkeypatch.setattr(jobs, "LAG_WAIT_S", 0.05)
    texts = [f"fact number {i} about topic {i % 3}" for i in range(12)]
    with MembrainMemory(embeddings=WordHashEmbeddings(), max_training_lag=1) as mem:
        mem.add("warm up the learner", namespace=("u",))
        mem.flush()
        release, supervise = threading.Event(), mem._bg.supervise

        def held(ns, record):
            release.wait(60.0)
            supervise(ns, record)

        mem._bg.supervise = held
        for text in texts:  # would wait forever if an add waited for the trainer
            mem.add(text, namespace=("u",))
        kept = jobs.LAG_SKIP_FACTOR * 1
        assert mem.stats()["pending_training"] <= 1 + kept  # the one held, and those waiting
        release.set()
        mem.flush()
        process = mem.stats().process
        assert process.training_skipped >= len(texts) - 1 - kept and mem.stats()["training_skipped"] == process.training_skipped
        assert process.supervised + process.training_skipped == len(texts) + 1
        assert len(mem.search(None, namespace=("u",), limit=50)) == len(texts) + 1


@pytest.mark.parametrize("lag", [0, -1])
def test_the_lag_is_at_least_one(lag):
    with pytest.raises(Exception, match="max_training_lag"):
        MemoryConfig(max_training_lag=lag)
