"""Small real collaborators shared by the tests (no mocks of our own classes)."""

from __future__ import annotations

import zlib

import numpy as np
from langchain_core.embeddings import Embeddings

#: Why a PostgreSQL test skips: conftest.py found no server for the session.
NO_POSTGRES = ("no PostgreSQL server to test against: pip install -e '.[dev]' (its pgserver starts one; "
               "CPython 3.12 at most) or set MEMBRAIN_TEST_POSTGRES_URL")


class WordEmbeddings(Embeddings):
    """Bag of words hashed into 64 buckets: texts sharing words are similar. Instant."""

    dimensions = 64

    def _vec(self, text: str) -> list[float]:
        v = np.zeros(self.dimensions)
        for word in text.lower().replace("?", " ").replace(".", " ").replace(",", " ").split():
            v[zlib.crc32(word.encode()) % self.dimensions] += 1.0
        n = np.linalg.norm(v)
        return (v / n if n else v).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vec(text)


class StrictClock:
    """The wall clock, strictly increasing: each call is at least 1 µs (datetime's resolution)
    after the one before, so consecutive writes get distinct, ordered timestamps without a
    sleep (MembrainMemory(clock=...))."""

    def __init__(self) -> None:
        self.last = 0.0

    def __call__(self) -> float:
        import time

        self.last = max(round(time.time(), 6), round(self.last + 1e-6, 6))  # whole microseconds
        return self.last


_FORCED: dict[int, tuple[object, object]] = {}  # id(teacher) -> (teacher, its teacher-forcing learner)


def insert_by_teacher(tree, new_fact, teacher, **kw) -> str:
    """Insert ``new_fact`` decided by ``teacher`` alone, through the insert graph
    (``learner.teacher_forcing``, one learner per teacher); the new fact's id."""
    from langchain_membrain.bench.bare_tree import insert_fact
    from langchain_membrain.insert.learner import teacher_forcing

    entry = _FORCED.get(id(teacher))
    if entry is None or entry[0] is not teacher:
        dim = int(np.asarray(new_fact.embedding).size)
        entry = _FORCED[id(teacher)] = (teacher, teacher_forcing(teacher, dim, **kw))
    return insert_fact(tree, entry[1], new_fact).fact_id


def small_model(dim: int):
    """Networks small enough for unit tests: one layer of width 32 over ``dim``-wide embeddings."""
    from langchain_membrain.students.nets import ModelConfig

    return ModelConfig(dim=dim, d_model=32, heads=4, layers=1)


def small_learner(dim: int):
    """A learner of the offline teacher with :func:`small_model` networks, trained on the CPU."""
    from langchain_membrain.insert.config import LearnerConfig
    from langchain_membrain.insert.learner import Learner
    from langchain_membrain.students.training_config import TrainingConfig
    from langchain_membrain.teachers.heuristic import HeuristicTeacher

    return Learner(HeuristicTeacher(), LearnerConfig(model=small_model(dim), training=TrainingConfig(device="cpu")))


def small_trainer(dim: int):
    """An online trainer of :func:`small_model` networks on the CPU."""
    from langchain_membrain.students.training import OnlineTrainer
    from langchain_membrain.students.training_config import TrainingConfig

    return OnlineTrainer(small_model(dim), TrainingConfig(device="cpu"))
