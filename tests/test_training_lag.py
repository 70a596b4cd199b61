"""How long an add waits for a background trainer that lags an in-process teacher
(insert/background.py: ``max_training_lag`` inserts, then ``LAG_WAIT_S`` seconds at most,
up to ``LAG_HARD_FACTOR`` times the lag, where it waits as long as it takes)."""

import threading
import time

import pytest
from test_cli import WordHashEmbeddings

from langchain_membrain.insert import background
from langchain_membrain.insert.config import MemoryConfig
from langchain_membrain.memory.parts import MemoryParts
from langchain_membrain.teachers.heuristic import HeuristicTeacher


def lagging_trainer(lag: int):
    """The background half of a memory with an in-process teacher whose trainer has not
    started: the queue holds ``lag`` inserts it has not taken."""
    bg = MemoryParts(MemoryConfig(embeddings=WordHashEmbeddings(), teacher=HeuristicTeacher(),
                                  max_training_lag=lag)).bg
    for _ in range(lag):
        bg.queue.put_nowait(None)
    return bg


def waited(bg) -> float:
    start = time.monotonic()
    background.wait_for_trainer(bg.queue, bg.max_training_lag)
    return time.monotonic() - start


def test_an_add_waits_a_bounded_time_for_a_trainer_that_lags():
    bg = lagging_trainer(2)
    assert bg.queue.maxsize == 2 * background.LAG_HARD_FACTOR  # the hard bound, put waits for it
    assert background.LAG_WAIT_S is not None
    assert background.LAG_WAIT_S <= waited(bg) < background.LAG_WAIT_S + 2.0
    bg.queue.get_nowait()  # the trainer took one: it is within the lag again
    assert waited(bg) < background.LAG_WAIT_S


def test_the_wait_ends_when_the_trainer_takes_an_insert(monkeypatch):
    monkeypatch.setattr(background, "LAG_WAIT_S", 30.0)
    bg = lagging_trainer(1)
    taker = threading.Timer(0.05, bg.queue.get)
    taker.start()
    assert waited(bg) < 20.0
    taker.join()


def test_without_a_time_bound_the_lag_is_the_queues_bound(monkeypatch):
    monkeypatch.setattr(background, "LAG_WAIT_S", None)
    bg = lagging_trainer(3)
    assert bg.queue.maxsize == 3 and bg.queue.full()


@pytest.mark.parametrize("lag", [0, -1])
def test_the_lag_is_at_least_one(lag):
    with pytest.raises(Exception, match="max_training_lag"):
        MemoryConfig(max_training_lag=lag)
