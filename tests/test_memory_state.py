"""State a memory holds (issue 44): a config given to it is never changed, and its teacher is
held in one place that every question reads."""

from __future__ import annotations

import copy

from helpers import WordEmbeddings

from langchain_membrain.memory import MembrainMemory
from langchain_membrain.pipeline import LearnerConfig


class Words16(WordEmbeddings):
    dimensions = 16


class Words32(WordEmbeddings):
    dimensions = 32


FACTS = ["Maya is allergic to peanuts", "Tom plays football on Saturdays", "Maya lives in Lisbon",
         "Tom is learning Japanese"]


def test_one_config_serves_two_memories_of_different_dimensions_and_is_never_changed():
    config = LearnerConfig()
    before = copy.deepcopy(config)
    with MembrainMemory(embeddings=Words16(), learner=config, device="cpu", background=False) as small, \
            MembrainMemory(embeddings=Words32(), learner=config, background=False) as large:
        small.add_many(FACTS[:2], namespace="a")
        assert small.search("peanuts", namespace="a")
        large.add_many(FACTS, namespace="b")
        assert large.search("football", namespace="b")
        small.add(FACTS[2], namespace="a")  # was DimensionError: the models read 32-d, got 16
        assert small.search("Lisbon", namespace="a")[0].value["content"] == FACTS[2]
        assert small._learner.config.model.dim == 16 and large._learner.config.model.dim == 32
        assert small._learner.config.training.device == "cpu"
    assert config == before
    assert config.model.dim == before.model.dim and config.batch is None and config.training.device is None
