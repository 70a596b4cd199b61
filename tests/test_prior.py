"""The prior shipped with the package: a new memory is competent from its first insert."""

from __future__ import annotations

import hashlib
from importlib import resources

import pytest

from langchain_membrain import MembrainMemory
from langchain_membrain.personas import load_personas
from langchain_membrain.prior import load_prior, teacher_identity
from langchain_membrain.teachers.heuristic import HeuristicTeacher

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def heldout_persona() -> list[str]:
    """One persona the prior never saw (the held-out set)."""
    rows = next(iter(load_personas("heldout").values()))
    return [r["text"] for r in rows]


def test_the_shipped_prior_was_taught_by_the_default_teacher_from_the_files_it_names():
    found = load_prior()
    assert found is not None
    _, manifest = found
    # Rebuild it (python -m langchain_membrain.bench pretrain) whenever the heuristic changes.
    assert manifest["teacher"] == teacher_identity(HeuristicTeacher())
    root = resources.files("langchain_membrain")
    for source in manifest["sources"]:
        assert hashlib.sha256(root.joinpath(source["file"]).read_bytes()).hexdigest() == source["sha256"]
    assert not any("locomo" in s["file"].lower() or "wordnet" in s["file"].lower() for s in manifest["sources"])


def questions_per_insert(mem: MembrainMemory, texts: list[str]) -> float:
    """Placement questions (and audits) per insert: what the prior's two networks decide.
    The memory-operation student ships without a prior, so its questions are left out."""
    for text in texts:
        mem.add(text, namespace="me")
    mem.flush()
    q = mem.stats()["questions"]
    return (q["placement"] + q["audit"]) / len(texts)


def test_a_new_memory_decides_most_inserts_itself_from_the_start():
    texts = heldout_persona()
    with MembrainMemory(background=False) as mem:
        with_prior = questions_per_insert(mem, texts)
        assert mem.stats()["prior"] == "trusted"
    with MembrainMemory(background=False, prior=False) as mem:
        from_scratch = questions_per_insert(mem, texts)
        assert mem.stats()["prior"] is None
    assert from_scratch > 0.8  # warm-up: the teacher decides every insert with a choice
    assert with_prior < 0.5 < from_scratch


class OtherTeacher(HeuristicTeacher):
    """Another teacher (as an LLM would be): the prior's calibration is not for it."""


def test_another_teacher_keeps_the_weights_but_starts_with_closed_gates():
    texts = heldout_persona()[:30]
    with MembrainMemory(teacher=OtherTeacher(), background=False) as mem:
        asked = questions_per_insert(mem, texts)
        stats = mem.stats()
    assert stats["prior"] == "weights only"
    # Until this teacher's own labels pass the warm-up, every insert with a decision asks it.
    assert asked > 0.8
