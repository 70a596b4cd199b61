"""MemoryConfig (config.py): the constructor's settings, one field per keyword argument,
validated before anything is opened."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from langchain_membrain.errors import InvalidOperationError
from langchain_membrain.insert.config import MemoryConfig
from langchain_membrain.memory import MembrainMemory


def test_the_config_has_the_constructors_keywords_and_defaults():
    params = {n: p.default for n, p in inspect.signature(MembrainMemory.__init__).parameters.items() if n != "self"}
    fields = {f.name: f.default for f in dataclasses.fields(MemoryConfig)}
    assert list(fields) == list(params)
    assert fields == params


@pytest.mark.parametrize("kwargs, message", [
    ({"teacher_budget": 0}, "teacher_budget is a number of seconds > 0 or None"),
    ({"teacher_budget": True}, "teacher_budget is a number of seconds > 0 or None"),
    ({"operations": "sometimes"}, "operations is True, False or 'teacher'"),
    ({"max_loaded_namespaces": 0}, "max_loaded_namespaces is at least 1"),
    ({"search_mode": "slow"}, "search_mode is 'fast' or 'exact'"),
    ({"max_training_lag": 0}, "max_training_lag is at least 1"),
    ({"max_height": 0}, "max_height must be None or an int >= 1"),
    ({"clock": 12.0}, "clock is a callable returning seconds"),
    ({"index_dir": 3}, "index_dir is a directory path or None"),
])
def test_a_bad_setting_is_refused_before_the_storage_is_opened(tmp_path, kwargs, message):
    with pytest.raises(InvalidOperationError, match=message):
        MemoryConfig(**kwargs)
    db = tmp_path / "m.db"
    with pytest.raises(InvalidOperationError, match=message):
        MembrainMemory(str(db), **kwargs)
    assert not db.exists()


def test_scalars_are_normalised():
    cfg = MemoryConfig(teacher_budget=3, checkpoint_every=7.0, refresh_interval=2, background=0, index_fields=("a",))
    assert cfg.teacher_budget == 3.0 and isinstance(cfg.teacher_budget, float)
    assert cfg.checkpoint_every == 7 and isinstance(cfg.checkpoint_every, int)
    assert cfg.refresh_interval == 2.0 and cfg.background is False and cfg.index_fields == ("a",)
    assert MemoryConfig().index_fields == ("content", "text")
    assert MemoryConfig(teacher_budget=None).teacher_budget is None


def test_reconfigure_reaches_every_part_and_becomes_the_config():
    from helpers import WordEmbeddings

    with MembrainMemory(embeddings=WordEmbeddings(), relabel=False, naming_interval=9) as mem:
        assert (mem.background, mem.relabel, mem.naming_interval, mem.checkpoint_every, mem.prior) == (
            True, False, 9, 50, True)
        before = mem.config
        new = mem.reconfigure(relabel=True, naming_interval=3, search_mode="exact", refresh_interval=5,
                              teacher_budget=1, max_loaded_namespaces=7)
        assert mem.config is new and before.relabel is False  # the old config is untouched
        assert (new.relabel, new.naming_interval, new.search_mode, new.refresh_interval) == (True, 3, "exact", 5.0)
        assert mem._bg.relabel is True and mem._bg.naming_interval == 3  # what the trainer reads
        assert (mem.search_mode, mem.refresh_interval, mem.max_loaded_namespaces) == ("exact", 5.0, 7)
        assert mem._parts.teacher_budget == 1.0
        assert mem.prior_used is None
        mem.add("Maya is allergic to peanuts")
        assert mem.prior_used == mem.stats()["prior"]


def test_reconfigure_with_dedupe_off_stores_a_repeated_text_again():
    from helpers import WordEmbeddings

    with MembrainMemory(embeddings=WordEmbeddings(), operations=False) as mem:
        first = mem.add("Maya is allergic to peanuts")
        assert mem.add("Maya is allergic to peanuts") == first
        mem.reconfigure(dedupe=False)
        assert mem.add("Maya is allergic to peanuts") != first


def test_a_setting_is_not_set_as_an_attribute_and_a_fixed_one_is_refused():
    from helpers import WordEmbeddings

    from langchain_membrain.errors import ConfigurationError

    with MembrainMemory(embeddings=WordEmbeddings()) as mem:
        with pytest.raises(AttributeError, match=r"reconfigure\(relabel=...\)"):
            mem.relabel = False
        with pytest.raises(AttributeError, match="fixed when the memory opens"):
            mem.retrieval = None
        with pytest.raises(AttributeError):
            mem.teacher = None
        config = mem.config
        with pytest.raises(ConfigurationError, match="retrieval cannot change on an open memory"):
            mem.reconfigure(retrieval=None, relabel=False)
        with pytest.raises(ConfigurationError, match="no MemoryConfig field 'relable'"):
            mem.reconfigure(relable=False)
        with pytest.raises(InvalidOperationError, match="search_mode"):
            mem.reconfigure(search_mode="slow")
        assert mem.config is config and mem.relabel is True and mem.search_mode == "fast"


def test_configs_are_frozen_and_a_memory_keeps_the_one_it_was_made_with():
    """No config is changed after it is made, by the caller or the library: a changed copy
    is dataclasses.replace's. One LearnerConfig may configure several memories, on
    different devices, and comes back as it was."""
    from helpers import WordEmbeddings

    from langchain_membrain.index.config import RetrievalConfig
    from langchain_membrain.insert.config import LearnerConfig
    from langchain_membrain.teachers.heuristic import HeuristicConfig

    learner = LearnerConfig()
    before = dataclasses.replace(learner)
    for frozen, field in ((MemoryConfig(), "dedupe"), (learner, "seed"), (learner.training, "device"),
                          (learner.stage1, "warmup"), (learner.model, "dim"), (learner.decode, "idle_margin"),
                          (learner.training.stage1, "lr"), (RetrievalConfig(), "k1"),
                          (HeuristicConfig(), "theta0")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(frozen, field, getattr(frozen, field))
    with MembrainMemory(embeddings=WordEmbeddings(), learner=learner, device="cpu", dedupe=False,
                        background=False, prior=False) as mem:
        assert mem.config.dedupe is False and mem.config.learner is learner and mem.config.device == "cpu"
        key = mem.add("Maya is allergic to peanuts")
        record = mem.get(key)
        assert record is not None
        with pytest.raises(dataclasses.FrozenInstanceError):  # a record handed out is a copy nobody changes
            record.text = "changed"  # type: ignore[misc]
        assert mem.get(key) == record and mem.search("peanuts")[0].text == "Maya is allergic to peanuts"
        assert mem._learner is not None and mem._learner.config.training.device == "cpu"
        assert mem._learner.config.model.dim == WordEmbeddings().dimensions
    assert learner == before and learner.training.device is None and learner.model.dim == 384
