"""`MemoryStats`: what ``MembrainMemory.stats()`` reports, typed.

Two kinds of counters are kept apart:

- ``process``: what this process counted since it opened the memory;
- ``stored``: what the models' checkpoint recorded when this process read it (every earlier
  process's counts, as the trainer saved them); None without storage or before the first
  checkpoint. ``lifetime`` is the two summed, which is what the checkpoint saves next.

The learning counters (:class:`LearningStats`: agreement per stage with its sample size,
teacher questions) belong to the models and are lifetime counts: read from the live models
once this process has inserted, else from the saved checkpoint without loading them.

A ``MemoryStats`` is also a read-only mapping with the flat keys ``stats()`` always had
(``stats()["inserts"]``, ``["teacher_calls"]``, ``["stage1"]["agreement"]``...): the
counters there are the lifetime ones. :meth:`MemoryStats.as_dict` gives that mapping as a
plain ``dict`` (for JSON).

This module imports nothing heavy: ``membrain stats`` builds its report with it without
loading torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ..storage.base import Storage
    from ..tree.tree import MembrainTree

STAGES = ("stage1", "stage2")


@dataclass(frozen=True)
class Counters:
    """What a memory counts as it works."""

    inserts: int = 0  # facts placed through the insert graph
    merged: int = 0  # adds that were duplicates of a stored fact (``dedupe``)
    supervised: int = 0  # inserts the trainer has handled
    corrections: int = 0  # teacher corrections applied to the tree
    relabelled: int = 0  # aspects renamed as they grew
    worker_errors: int = 0  # failures of the background trainer
    without_teacher: int = 0  # adds decided without the teacher's answer (failed, down, or past teacher_budget)
    training_skipped: int = 0  # inserts the trainer skipped, max_training_lag behind: not audited nor learnt from
    refreshed_by_change: int = 0  # namespaces brought up to date from the change log
    refresh_reloads: int = 0  # namespaces reloaded whole after another process's write

    @classmethod
    def from_mapping(cls, counts: Mapping[str, Any]) -> Counters:
        """The counters found in ``counts`` (a checkpoint's record); absent ones are 0."""
        return cls(**{f.name: int(counts.get(f.name) or 0) for f in fields(cls)})

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def __add__(self, other: Counters) -> Counters:
        return Counters(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})


@dataclass(frozen=True)
class StageStats:
    """One stage's decisions and how often the model agreed with the teacher."""

    decisions: int = 0  # decisions taken (by the model or the teacher)
    model_executed: int = 0  # decisions the model took alone
    labelled: int = 0  # decisions the teacher labelled: the sample size of ``agreement``
    agreement: float | None = None  # prequential agreement with the teacher over ``labelled``
    loss: float | None = None
    optimiser_steps: int = 0

    @classmethod
    def from_mapping(cls, stage: Mapping[str, Any]) -> StageStats:
        return cls(decisions=int(stage.get("decisions") or 0), model_executed=int(stage.get("model_executed") or 0),
                   labelled=int(stage.get("labelled") or 0), agreement=stage.get("agreement"),
                   loss=stage.get("loss"), optimiser_steps=int(stage.get("optimiser_steps") or 0))

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class LearningStats:
    """The models' lifetime counters: per stage, and the questions put to the teacher."""

    stages: dict[str, StageStats]  # "stage1" (placement), "stage2" (rewrites)
    teacher_calls: int = 0  # joint questions: placements and audits
    naming_calls: int = 0  # questions that named or renamed an aspect
    questions: dict[str, int] = field(default_factory=dict)  # by kind (placement, naming, operation...)
    teacher_failures: int = 0  # questions without a usable answer (failed, or not sent)
    teacher_skipped: int = 0  # of those, questions not sent (breaker open, budget spent)
    asked_when_unsure: dict[str, int] | None = None  # placement questions, by the unsure stage
    audits_shared: int = 0  # audits answered by an item's operation question (one request), not counted
    shadow_agreement: dict[str, Any] | None = None  # with a shadow teacher (``shadow_teacher``)
    shadow_seconds: float | None = None
    # the same per class (stop; idle and each action kind): Learner.shadow_per_class
    shadow_per_class: dict[str, Any] | None = None

    @property
    def teacher_questions(self) -> int:
        """Every question put to the teacher: joint ones and naming ones."""
        return self.teacher_calls + self.naming_calls

    @classmethod
    def from_mapping(cls, counts: Mapping[str, Any]) -> LearningStats | None:
        """The learning counters of a checkpoint's record (or of the live models, in the
        same form); None when it holds none."""
        if "stage1" not in counts:
            return None
        return cls(stages={s: StageStats.from_mapping(counts.get(s) or {}) for s in STAGES},
                   teacher_calls=int(counts.get("teacher_calls") or 0),
                   naming_calls=int(counts.get("naming_calls") or 0),
                   questions={k: int(v) for k, v in (counts.get("questions") or {}).items()},
                   teacher_failures=int(counts.get("teacher_failures") or 0),
                   teacher_skipped=int(counts.get("teacher_skipped") or 0),
                   asked_when_unsure=counts.get("asked_when_unsure"),
                   audits_shared=int(counts.get("audits_shared") or 0),
                   shadow_agreement=counts.get("shadow_agreement"), shadow_seconds=counts.get("shadow_seconds"),
                   shadow_per_class=counts.get("shadow_per_class"))

    def as_dict(self) -> dict[str, Any]:
        """The flat form a checkpoint saves and ``stats()[...]`` reads."""
        out: dict[str, Any] = {s: stage.as_dict() for s, stage in self.stages.items()}
        out.update(teacher_calls=self.teacher_calls, naming_calls=self.naming_calls, questions=dict(self.questions),
                   teacher_failures=self.teacher_failures, teacher_skipped=self.teacher_skipped,
                   audits_shared=self.audits_shared)
        if self.asked_when_unsure is not None:
            out["asked_when_unsure"] = dict(self.asked_when_unsure)
        if self.shadow_agreement is not None:
            out["shadow_agreement"] = self.shadow_agreement
            out["shadow_seconds"] = self.shadow_seconds
        if self.shadow_per_class is not None:
            out["shadow_per_class"] = self.shadow_per_class
        return out


@dataclass(frozen=True)
class ForestStats:
    """The stored trees: how many, and how big."""

    namespaces: int = 0
    facts: int = 0
    aspects: int = 0
    max_depth: int = 0

    @classmethod
    def of(cls, trees: Iterable[MembrainTree], *, namespaces: int) -> ForestStats:
        """The totals of ``trees`` (those of the ``namespaces`` still there when read)."""
        facts = aspects = depth = 0
        for tree in trees:
            facts += tree.fact_count(tree.root_id)
            aspects += len(tree.aspects())
            depth = max(depth, tree.height())
        return cls(namespaces, facts, aspects, depth)


@dataclass(frozen=True)
class MemoryStats(Mapping[str, Any]):
    """What a memory reports (``MembrainMemory.stats()``); see the module docstring."""

    forest: ForestStats
    process: Counters  # counted by this process
    stored: Counters | None = None  # as the models' checkpoint recorded them when read
    learning: LearningStats | None = None  # None before any model or checkpoint exists
    loaded_namespaces: int = 0  # namespaces this process holds now
    pending_training: int = 0  # inserts queued for the background trainer
    waiting_for_batch: int = 0  # inserts placed by the student, waiting for their batch question
    inserts_in_flight: int = 0  # started in the insert graph and not finished
    last_worker_error: str | None = None
    checkpoint_error: str | None = None  # why a stored checkpoint was ignored
    trainer: bool = False  # whether this process trains the models (one per database)
    prior: str | None = None  # "trusted", "weights only" or None: how the shipped prior was used
    recent_teacher_calls_per_insert: float | None = None  # over the last 100 inserts
    teacher: dict[str, Any] | None = None  # the teacher's own cost stats, when it keeps any (stats()["teacher"]: {})
    operations: dict[str, Any] | None = None  # ADD/UPDATE/DELETE/IGNORE decisions (operations.py)
    formation: dict[str, Any] | None = None  # the formation student's decisions (formation_student.py)

    @property
    def lifetime(self) -> Counters:
        """Every process's counts: the stored ones plus this process's."""
        return self.process if self.stored is None else self.stored + self.process

    @property
    def teacher_calls_per_insert(self) -> float | None:
        """Joint teacher questions per insert, over the memory's lifetime."""
        if self.learning is None:
            return None
        return self.learning.teacher_calls / max(self.lifetime.inserts, 1)

    def as_dict(self) -> dict[str, Any]:
        """The flat mapping ``stats()[...]`` reads, as a plain dict."""
        return dict(self._flat)

    @cached_property
    def _flat(self) -> dict[str, Any]:
        f = self.forest
        out: dict[str, Any] = {"namespaces": f.namespaces, "facts": f.facts, "aspects": f.aspects,
                               "max_depth": f.max_depth, **self.lifetime.as_dict()}
        if self.stored is not None:
            out["saved_inserts"] = self.stored.inserts
        out.update(pending_training=self.pending_training, waiting_for_batch=self.waiting_for_batch,
                   inserts_in_flight=self.inserts_in_flight,
                   last_worker_error=self.last_worker_error, checkpoint_error=self.checkpoint_error,
                   trainer=self.trainer, loaded_namespaces=self.loaded_namespaces, prior=self.prior,
                   recent_teacher_calls_per_insert=self.recent_teacher_calls_per_insert)
        # Before the first insert made the models: their counters, all zero.
        learning = self.learning or LearningStats(stages={s: StageStats() for s in STAGES})
        out.update(learning.as_dict())
        out["teacher_calls_per_insert"] = self.teacher_calls_per_insert
        # Under every teacher and in every process: {} where the teacher keeps no cost
        # counters (the offline heuristic) or no operation was decided here.
        out["teacher"] = self.teacher if self.teacher is not None else {}
        out["operations"] = self.operations if self.operations is not None else {}
        out["formation"] = self.formation if self.formation is not None else {}
        return out

    def __getitem__(self, key: str) -> Any:
        return self._flat[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._flat)

    def __len__(self) -> int:
        return len(self._flat)


def read_stored(storage: Storage, checkpoint: str) -> tuple[Counters | None, LearningStats | None]:
    """The counters saved with the named checkpoint, without loading its models (a process
    that has not inserted yet; ``membrain stats``); (None, None) when there is none."""
    saved = storage.load_checkpoint(checkpoint)
    if saved is None:
        return None, None
    return Counters.from_mapping(saved[1]), LearningStats.from_mapping(saved[1])
