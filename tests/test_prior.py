"""The prior shipped with the package: a new memory is competent from its first insert."""

from __future__ import annotations

import hashlib
from importlib import resources

import pytest

from langchain_membrain import MembrainMemory
from langchain_membrain.bench.persona_sets import load_personas
from langchain_membrain.students.prior import (
    OPERATIONS_MANIFEST_FILE,
    load_operation_prior,
    load_prior,
    operation_teacher_identity,
    teacher_identity,
)
from langchain_membrain.teachers.heuristic import HeuristicTeacher
from langchain_membrain.teachers.operation_rule import conservative_operation, rule_identity
from langchain_membrain.tree.operation_types import Operation, OperationQuestion

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


def test_the_long_chats_are_well_formed_and_the_held_out_one_is_apart():
    """data/CHATS.md: conversations in order, the held-out chat with people of its own and
    not among the prior's sources."""
    import json

    root = resources.files("langchain_membrain")
    speakers = {}
    for name in ("data/chats.jsonl", "data/chats_heldout.jsonl"):
        rows = [json.loads(line) for line in root.joinpath(name).read_text("utf-8").splitlines() if line.strip()]
        by_chat: dict[str, list[dict]] = {}
        for r in rows:
            assert set(r) == {"conversation", "session", "date", "speaker", "text"} and r["text"].strip()
            by_chat.setdefault(r["conversation"], []).append(r)
        for chat in by_chat.values():
            assert len(chat) >= 250 and len({r["speaker"] for r in chat}) == 2
            assert [(r["session"], r["date"]) for r in chat] == sorted((r["session"], r["date"]) for r in chat)
        speakers[name] = {r["speaker"] for r in rows}
    assert not speakers["data/chats.jsonl"] & speakers["data/chats_heldout.jsonl"]
    _, manifest = load_prior()
    assert "data/chats.jsonl" in {s["file"] for s in manifest["sources"]}
    assert not any("heldout" in s["file"] for s in manifest["sources"])


def questions_per_insert(mem: MembrainMemory, texts: list[str]) -> float:
    """Placement questions (and audits) per insert: what the prior's two networks decide.
    The operation student's prior is checked apart (its questions are counted apart)."""
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


# ------------------------------------------------------------------ the operation student's prior
def test_the_shipped_operation_prior_was_taught_by_the_offline_rule_from_the_files_it_names():
    import json

    root = resources.files("langchain_membrain")
    manifest = json.loads(root.joinpath(OPERATIONS_MANIFEST_FILE).read_text(encoding="utf-8"))
    # Rebuild it (bench pretrain --part operations) whenever the rule or its word lists change.
    assert manifest["teacher"] == rule_identity() == operation_teacher_identity(HeuristicTeacher())
    for source in manifest["sources"]:
        assert hashlib.sha256(root.joinpath(source["file"]).read_bytes()).hexdigest() == source["sha256"]
    assert not any("heldout" in s["file"] or "locomo" in s["file"].lower() for s in manifest["sources"])
    assert load_operation_prior(HeuristicTeacher())[1] is True


def operation_questions(mem: MembrainMemory, texts: list[str]) -> dict:
    for text in texts:
        mem.add(text, namespace="me")
    return mem.stats()["operations"]


def test_a_new_memory_decides_most_operations_itself_from_the_start():
    """With the prior, the operation student decides alone from the first items, and what
    it decides is what the rule would have (a shadow check on every item); without it,
    the rule is asked about every item of the warm-up."""
    texts = heldout_persona()[:40] + ["Thanks, that helps!", "What was the name of my dentist?", "Hi there!"]
    with MembrainMemory(background=False) as mem:
        ops = operation_questions(mem, texts)
    assert ops["student"]["prior"] == "trusted"
    assert ops["student_decided"] >= 0.8 * len(texts) and ops["teacher_questions"] <= 0.2 * len(texts)
    assert ops["by_kind"]["IGNORE"] == 3  # the three that state nothing, decided as the rule would
    with MembrainMemory(background=False, prior=False) as mem:
        ops = operation_questions(mem, texts)
    assert ops["student"]["prior"] is None and ops["teacher_questions"] == len(texts)


class AskingTeacher(HeuristicTeacher):
    """A teacher with its own operation answers (as an LLM has): the prior is not its."""

    def choose_operation(self, question: OperationQuestion) -> Operation:
        return conservative_operation(question)


def test_another_operation_teacher_keeps_the_weights_but_asks_through_the_warm_up():
    texts = heldout_persona()[:30]
    with MembrainMemory(teacher=AskingTeacher(), background=False) as mem:
        ops = operation_questions(mem, texts)
    assert ops["student"]["prior"] == "weights only"
    assert ops["teacher_questions"] == len(texts) and ops["student_decided"] == 0
    # the weights already know the rule: the proposals agree with it from the first item
    assert ops["agreement"] >= 0.9


def test_a_prior_for_another_embedder_is_not_used():
    from helpers import WordEmbeddings

    with MembrainMemory(embeddings=WordEmbeddings(), background=False) as mem:
        ops = operation_questions(mem, ["I like green tea.", "Hello!"])
    assert ops["student"]["prior"] is None and ops["teacher_questions"] == 2


def test_an_audited_operation_is_the_teachers_decision():
    """With the prior trusted the student would decide alone; an audit still asks the
    teacher, and the decision is reported as the teacher's even when both say ADD."""
    from langchain_membrain.index.embeddings import MiniLMEmbeddings
    from langchain_membrain.insert.operations import OperationDecider
    from langchain_membrain.students.operation import OperationStudent
    from langchain_membrain.students.training_config import Policy

    teacher = HeuristicTeacher()
    student = OperationStudent(policy=Policy(confidence=0.9, audit_rate=1.0, warmup=48),
                               prior=lambda: load_operation_prior(teacher))
    decider = OperationDecider(teacher, student=student)
    text = "I play five-a-side football on Thursdays."
    op = decider.decide(OperationQuestion(text, MiniLMEmbeddings().embed_documents([text])[0], ()))
    assert student.prior_used == "trusted" and student.gate_open()
    assert decider.last is not None and (decider.last.operation, decider.last.by) == (op, "teacher")
    assert op.kind == "ADD"
    assert decider.counters.student_decided == 0 and decider.counters.asked == 1


# ------------------------------------------------------------------ fine-tuning from the prior
def _rates(trainer) -> list[float]:
    return [g["lr"] for opt in (trainer.opt1, trainer.opt2) for g in opt.param_groups]


def test_a_trainer_fine_tunes_the_prior_at_scaled_rates_and_a_checkpoint_keeps_them():
    """A fresh Adam moves every weight by about its learning rate per step: at the rates
    of training from scratch a new teacher's first batches undo the prior (bench/RESULTS.md,
    economy), so a trainer that starts from it uses ``prior_lr_scale`` of them."""
    from langchain_membrain.students.nets import ModelConfig
    from langchain_membrain.students.training import OnlineTrainer
    from langchain_membrain.students.training_config import TrainingConfig

    state, _ = load_prior()
    config = TrainingConfig(prior_lr_scale=0.25)
    scratch = OnlineTrainer(ModelConfig(), config)
    for trusted in (True, False):
        tuned = OnlineTrainer(ModelConfig(), config)
        tuned.load_prior(state, trusted=trusted)
        assert _rates(tuned) == pytest.approx([0.25 * r for r in _rates(scratch)])
    reloaded = OnlineTrainer(ModelConfig(), config)
    reloaded.load_bytes(tuned.state_bytes())
    assert _rates(reloaded) == _rates(tuned)


@pytest.mark.parametrize("scale", [0.0, -0.5, 1.5])
def test_prior_lr_scale_outside_its_range_is_refused(scale):
    from langchain_membrain.students.training_config import TrainingConfig

    with pytest.raises(ValueError, match="prior_lr_scale"):
        TrainingConfig(prior_lr_scale=scale)
