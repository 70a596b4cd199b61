"""`Background`: the learning half of a memory, behind its inserts.

A :class:`~.memory.MembrainMemory` places each fact at once (the insert graph, graph.py)
and hands the record of that placement here (:meth:`Background.placed`). This module
owns what happens after:

- the :class:`~.learner.Learner` (the two networks and their online trainer), created on
  the first insert with the embedder's dimension, from the stored checkpoint, else from the
  shipped prior, under one lock (:attr:`Background.lock`);
- supervision of each placement record (the deferred teacher question, the training and the
  corrections it brings), in a daemon thread fed by a queue that an add waits on for a
  bounded time (jobs.py: a trainer far behind skips the oldest waiting inserts, and counts
  them); or inline without ``background``;
- relabelling of aspects that have doubled since they were named;
- the models' checkpoint: saved every ``checkpoint_every`` supervised inserts by the one
  process of a database that trains (its trainer lock), reloaded by the others, which take
  over training when the trainer goes away;
- this process's counters and the learning and teacher stats that ``stats()`` reports;
- a bounded end (:meth:`Background.flush` with a ``timeout``, as ``close()`` and the exit
  hooks call it): the trainer's teacher questions run under a :class:`~.teachers.budget.Cutoff`,
  which the flush sets, so a teacher that hangs, refuses or answers slowly delays a close by
  ``timeout`` at most. The questions still pending then are **dropped**, not kept: their
  inserts keep the placement the student or the offline rule gave them (no memory is lost),
  the labels already answered are trained, and the checkpoint is written.

It is also the insert graph's :class:`~.graph.InsertHost`: the graph reaches the forest,
the embedder and the learner through it. It knows nothing of memory.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

from ..errors import CheckpointError, DimensionError
from ..storage.base import Storage
from ..storage.forest import Forest
from ..students.prior import load_prior, teacher_identity
from ..teachers import budget
from ..teachers.base import RemoteTeacher, Teacher, capable, is_fast, names_topics
from ..teachers.seat import TeacherSeat
from ..tree.inputs import Namespace
from ..tree.labels import LABELLED_FACTS, aspect_label, parent_of, relabel_avoid, stale_aspects, typical_facts
from ..tree.tree import MembrainTree
from ..tree.vocabulary import TopicVocabulary
from . import jobs
from .batches import answer_batch, batch_view, carry_out
from .config import DEFAULT_BATCH, LearnerConfig
from .jobs import JobQueue
from .learner import Learner
from .ledger import QUESTION_KINDS
from .operations import OperationDecider
from .records import PlaceRecord
from .stats import Counters, LearningStats, read_stored

if TYPE_CHECKING:
    from ..index.embeddings import EmbeddingCache
    from .config import MemoryConfig

logger = logging.getLogger("langchain_membrain")

#: Seconds a bounded flush waits, past its questions' cutoff, for the trainer to train what
#: those questions left (no teacher is asked by then): only an in-process teacher that is
#: itself slow, or a very long queue, runs into it.
DRAIN_MARGIN_S = 10.0

CHECKPOINT_NAME = "models"  # one pair of networks per database, shared by its namespaces
OPERATIONS_CHECKPOINT = "operations"  # the operation student (operation_student.py), saved beside them


def saved_questions(counters: dict[str, Any]) -> dict[str, int]:
    """Teacher questions by kind, as a checkpoint's counters recorded them (older
    checkpoints kept only the totals: their joint-question total counts as placements)."""
    saved = counters.get("questions")
    if isinstance(saved, dict):
        return {k: int(saved.get(k, 0)) for k in QUESTION_KINDS}
    return {"placement": int(counters.get("teacher_calls", 0)), "naming": int(counters.get("naming_calls", 0))}


def teacher_stats(teacher: Any) -> dict[str, Any]:
    """The teacher's own cost stats (an in-process teacher: the same keys, zero) and its
    circuit breakers' ``health``."""
    from ..teachers.budget import CircuitBreaker
    from ..teachers.costs import TeacherStats

    if capable(teacher, RemoteTeacher):
        return {**teacher.stats(), "health": teacher.health()}
    return {**TeacherStats().as_dict(), "mode": None, "health": {**CircuitBreaker().snapshot(), "slow": None}}


def own_config(config: LearnerConfig | None, device: str | None) -> LearnerConfig:
    """A memory's learner config: ``config`` (default: LearnerConfig()), with ``device`` when
    given, as a new value. Configs are frozen, so one config object may configure several
    memories, of different devices and embedding dimensions, and none changes it."""
    own = config if config is not None else LearnerConfig()
    if device is not None:
        own = dataclasses.replace(own, training=dataclasses.replace(own.training, device=device))
    return own


def effective_config(config: LearnerConfig, dim: int) -> LearnerConfig:
    """The config a memory's learner runs with: ``config`` for embeddings of ``dim``
    dimensions, with the memory's batch default; a new value, ``config`` is not changed."""
    return dataclasses.replace(config, model=dataclasses.replace(config.model, dim=int(dim)),
                               batch=DEFAULT_BATCH if config.batch is None else config.batch)


@dataclass
class _BatchJob:
    """A slow teacher's batch question, for the trainer thread: the namespace and the
    inserts it is about."""

    ns: Namespace
    records: list[PlaceRecord]


class Background:
    """The learner of one memory, its trainer thread, its checkpoints and its counters.

    ``settings`` gives ``background``, ``checkpoint_every``, ``relabel``,
    ``naming_interval``, ``prior`` and ``max_training_lag``; the first five are kept as
    attributes, read at each use. The memory's attributes of those names, and its
    ``teacher`` and ``prior_used``, are these. ``teacher``: the memory's
    :class:`~.teachers.seat.TeacherSeat` (or a teacher, given a seat of its own), shared with
    the learner and the operation decider.
    """

    def __init__(self, forest: Forest, storage: Storage | None, teacher: Teacher | TeacherSeat, *,
                 shadow: Teacher | None,
                 operations: OperationDecider, learner_config: LearnerConfig,
                 embed: Callable[[list[str]], np.ndarray], embed_label: EmbeddingCache, settings: MemoryConfig):
        self.forest = forest
        self.storage = storage
        self.seat = TeacherSeat.of(teacher)
        self.shadow = shadow
        self.operations = operations
        self.learner_config = learner_config
        self._embed = embed
        self.embed_label = embed_label
        self.vocabulary = TopicVocabulary(embed_label)
        self.max_training_lag = settings.max_training_lag
        self.prior = settings.prior
        self.configure(settings)
        self.prior_used: str | None = None  # "trusted", "weights only" or None (stats())
        self.current: Learner | None = None  # the learner, once the first insert made it
        self.lock = threading.RLock()  # held around every use of the learner
        self.is_trainer = False
        self._checkpoint_seen = 0
        self._checkpoint_checked = float("-inf")  # monotonic time of the last look (non-trainers)
        # This process's counters (stats().process); the forest counts its refreshes.
        self.counts = {"inserts": 0, "corrections": 0, "supervised": 0, "worker_errors": 0, "merged": 0,
                       "relabelled": 0, "without_teacher": 0, "training_skipped": 0}
        self.stored_counts: Counters | None = None  # as the checkpoint the models came from recorded them
        self._last_naming = -self.naming_interval  # supervised-insert count at the last naming question
        self.recent_calls: deque[int] = deque(maxlen=100)  # teacher calls of the last inserts
        self.last_worker_error: str | None = None
        self.checkpoint_error: str | None = None
        self.queue = JobQueue()
        self.queue_bound: int | None = None  # the lag an add waits at; follows the teacher (_fit_teacher)
        self.offline_names = False
        self._fit_teacher()
        self.worker: threading.Thread | None = None
        # The end of the trainer's teacher questions: none until a bounded flush sets it.
        self.cutoff = budget.Cutoff()
        self._load_operation_student()

    def configure(self, settings: MemoryConfig) -> None:
        """The settings read at each use (``MembrainMemory.reconfigure``)."""
        self.background = settings.background
        self.checkpoint_every = settings.checkpoint_every
        self.relabel = settings.relabel
        self.naming_interval = settings.naming_interval

    # ------------------------------------------------------------------ teacher
    @property
    def teacher(self) -> Teacher:
        """The memory's teacher, as its seat holds it (the learner and the operation decider
        read the same seat). Setting it changes the teacher of every question from the next
        one on, and what follows from it (:meth:`_fit_teacher`)."""
        return self.seat.teacher

    @teacher.setter
    def teacher(self, teacher: Teacher) -> None:
        self.seat.teacher = teacher
        self._fit_teacher()

    def _fit_teacher(self) -> None:
        """Settle what depends on who the teacher is: whether the offline labeller renames
        aspects, how many inserts may wait for the trainer and the learner's stand-in."""
        teacher = self.teacher
        # Whether the offline labeller may rename aspects between the teacher's naming
        # questions: only when the teacher's own labels do not name topics (see relabel).
        self.offline_names = not names_topics(teacher)
        # Bounded for a fast (in-process) teacher: an add waits a little at this lag, and
        # skips the oldest waiting insert past a multiple of it. Unbounded for a slow one (an
        # LLM): an add never waits for its answers, and every audit is worth having.
        self.queue_bound = self.max_training_lag if is_fast(teacher) else None
        if self.current is not None:
            with self.lock:
                self.current.stand_in = self.offline_rule()

    # ------------------------------------------------------------ the insert host
    def embed(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts)

    @contextlib.contextmanager
    def learner(self, dim: int | None = None) -> Iterator[Learner]:
        """The learner under its lock; ``dim`` creates it on first use (see learner_for)."""
        with self.lock:
            if dim is not None:
                yield self.learner_for(dim)
            else:
                assert self.current is not None, "the learner is created by the insert's embed step"
                yield self.current

    def placed(self, ns: Namespace, record: PlaceRecord) -> None:
        """An insert was placed: count it, then train on it (now, or in the worker)."""
        self.counts["inserts"] += 1
        if not self.is_trainer:
            self.recent_calls.append(record.teacher_calls)
            self.maybe_reload_checkpoint()
            return
        if not self.background:
            self.supervise(ns, record)
            return
        # The hand-off may wait for the trainer, which may need this namespace: after the commit.
        self.forest.after_commit(lambda: self._hand_to_trainer(ns, record))

    def _hand_to_trainer(self, ns: Namespace, record: PlaceRecord) -> None:
        self._start_worker()
        self.counts["training_skipped"] += jobs.put_insert(self.queue, (ns, record), self.queue_bound)

    def _start_worker(self) -> None:
        if self.worker is None or not self.worker.is_alive():
            self.worker = threading.Thread(target=self._work, name="membrain-trainer", daemon=True)
            self.worker.start()

    def settle_batch(self, ns: Namespace, carrier: PlaceRecord | None = None) -> None:
        """The batch question about the inserts waiting in ``ns`` (Learner.settle_batch).
        An in-process teacher answers now, within this write; any other is asked by the
        trainer thread, holding no lock (as audits are), on the tree as the namespace's
        earlier batches left it, and its answer is carried out then as one committed write."""
        learner = self.current
        assert learner is not None, "a batch fills after its inserts made the learner"
        if is_fast(self.teacher) or not self.background or not self.is_trainer:
            def write(tree: MembrainTree) -> None:
                with self.lock:
                    learner.settle_batch(tree, learner.waiting.take(ns), carrier)

            self.forest.mutate(ns, write)
            return
        with self.lock:
            records = learner.waiting.take(ns)
        if records:
            self._start_worker()
            self.queue.put(_BatchJob(ns, records))

    def _answer_batch(self, job: _BatchJob) -> None:
        """The trainer thread's half of a slow teacher's batch question."""
        learner = self.current
        assert learner is not None
        with self.forest.lock(job.ns):
            tree = self.forest.tree(job.ns, create=False)
            if tree is None:
                return
            with self.lock:
                view, live = batch_view(tree, job.records)
        plans = answer_batch(learner, view, live) if live else None
        if plans is None:
            return
        learner.trainer.train_ready()

        def write(tree: MembrainTree) -> None:
            with self.lock:
                carry_out(tree, live, plans, learner.rewrite)

        self.forest.mutate(job.ns, write)

    # ------------------------------------------------------------------ learner
    def learner_for(self, dim: int) -> Learner:
        """The learner, created on first use with the embedder's dimension, from the latest
        checkpoint when storage holds one, else from the shipped prior (``prior``). Call
        under ``lock``."""
        if self.current is None:
            cfg = effective_config(self.learner_config, dim)
            learner = Learner(self.seat, cfg, embed_label=lambda label: self.embed_label([label])[0],
                              label_aspect=self.label_aspect, shadow=self.shadow, stand_in=self.offline_rule())
            restored = False
            if self.storage is not None:
                self.is_trainer = self.storage.try_acquire_trainer(CHECKPOINT_NAME)
                restored = self._restore(learner, self.storage)
            else:
                self.is_trainer = True
            if not restored and self.prior:
                self._start_from_prior(learner)
            self.current = learner
        elif self.current.config.model.dim != dim:
            raise DimensionError(f"the models read {self.current.config.model.dim}-d embeddings, got {dim}")
        return self.current

    def _restore(self, learner: Learner, storage: Storage) -> bool:
        """Load the stored checkpoint into a new learner; whether there was a usable one."""
        restored = False
        found = storage.load_checkpoint(CHECKPOINT_NAME)
        if found is not None:
            try:
                learner.load_bytes(found[0])
                # The memory's lifetime counts continue from the checkpoint's, as the
                # learner's counters do (stats(): stored + this process's).
                self.stored_counts = Counters.from_mapping(found[1])
                learner.ledger.questions.update(saved_questions(found[1]))
                restored = True
            except CheckpointError as exc:
                # Documented fallback: the memories are untouched; the models start afresh
                # (the unusable checkpoint is replaced at the next save).
                self.checkpoint_error = str(exc)
                logger.warning("membrain: ignoring the stored model checkpoint: %s", exc)
            self._checkpoint_seen = storage.checkpoint_version(CHECKPOINT_NAME)
        return restored

    def offline_rule(self) -> Teacher | None:
        """What places a fact when the teacher gives no answer and the student is not warm
        yet: the LLM teacher's own fallback (the HeuristicTeacher by default), else the
        offline HeuristicTeacher; None for an in-process teacher (it always answers)."""
        if is_fast(self.teacher):
            return None
        if capable(self.teacher, RemoteTeacher):
            return self.teacher.fallback
        from ..teachers.heuristic import HeuristicTeacher

        return HeuristicTeacher(embed=self.embed_label)

    def _start_from_prior(self, learner: Learner) -> None:
        """Load the shipped prior into a new learner when it fits (prior.py); trusted when
        the prior was taught by this memory's teacher."""
        found = load_prior()
        if found is None:
            return
        state, manifest = found
        trusted = manifest.get("teacher") == teacher_identity(self.teacher)
        try:
            learner.trainer.load_prior(state, trusted=trusted)
        except CheckpointError as exc:  # other dimensions (another embedder): start afresh
            logger.info("membrain: the shipped prior does not fit these models: %s", exc)
            return
        self.prior_used = "trusted" if trusted else "weights only"

    # -------------------------------------------------------------- supervision
    def _work(self) -> None:
        """The background trainer: supervise queued inserts until told to stop. A failure
        is logged and counted (see ``stats()``), never raised into the host process."""
        while True:
            item = self.queue.get()
            try:
                if item is None:
                    return
                with budget.under(self.cutoff):
                    if isinstance(item, _BatchJob):
                        self._answer_batch(item)
                    else:
                        self.supervise(*item)
            except Exception as exc:  # noqa: BLE001 - the worker must survive anything
                self.counts["worker_errors"] += 1
                self.last_worker_error = f"{type(exc).__name__}: {exc}"
                logger.exception("membrain: background training failed")
            finally:
                self.queue.task_done()

    def supervise(self, ns: Namespace, record: PlaceRecord) -> None:
        """Deferred teacher question and training for one insert; apply the teacher's
        corrections (moves, stage-2 actions) as one committed write. The teacher is asked
        on the record's own snapshot, with no lock held, so adds and searches never wait
        for its answer; what it asks for is re-validated on the live tree when applied."""
        learner = self.current
        assert learner is not None, "an insert is supervised after its placement made the learner"
        result = learner.supervise(record, train=False)
        # Optimiser steps outside every lock: the trainer locks itself per step, so adds and
        # searches wait for one step at most, never for a whole batch.
        result.steps = learner.trainer.train_ready()
        self.recent_calls.append(record.teacher_calls + result.teacher_calls)
        self.counts["supervised"] += 1
        if learner.config.apply_corrections and (result.corrections or result.actions):
            def write(t: MembrainTree) -> None:
                with self.lock:
                    learner.apply_corrections(t, result)

            self.forest.mutate(ns, write)
            self.counts["corrections"] += len(result.corrections) + bool(result.actions)
        if self.relabel:
            self.relabel_above(ns, record.fact_id)
        if self.storage is not None and self.counts["supervised"] % max(self.checkpoint_every, 1) == 0:
            self.save_checkpoint()

    def label_aspect(self, texts: list[str], avoid: list[str], mean: np.ndarray | None = None,
                     context: np.ndarray | None = None) -> str:
        """The offline name of ``texts`` (labels.aspect_label): the topic of the shipped
        vocabulary that fits them within surroundings of mean ``context``, else their own
        phrase nearest their mean embedding; never one of ``avoid``. Names the aspects the
        models create, and renamed aspects between the teacher's naming questions."""
        return aspect_label(texts, self.embed_label, vocabulary=self.vocabulary, mean=mean, context=context,
                            avoid=avoid)

    def relabel_above(self, ns: Namespace, fact_id: str) -> None:
        """Rename the aspects above ``fact_id`` that have doubled since they were
        named (labels.py), with no lock held; the new labels are written in one commit, to
        the aspects that still exist."""
        with self.forest.lock(ns):
            tree = self.forest.tree(ns, create=False)
            if tree is None or fact_id not in tree:
                return
            todo = {a: (typical_facts(tree, a), relabel_avoid(tree, a), tree.mean_embedding(a),
                        tree.mean_embedding(parent_of(tree, a)))
                    for a in stale_aspects(tree, fact_id)}
        if not todo:
            return
        learner = self.current
        assert learner is not None, "aspects are relabelled after an insert made the learner"
        names = {}
        for a, (texts, avoid, mean, context) in todo.items():
            # The teacher is asked to rename one aspect per ``naming_interval`` inserts at
            # most (a counted question). The others get the offline labeller's name when the
            # offline rule is the teacher; a teacher that names topics (an LLM) keeps its
            # names until it is due again, so no keyword replaces a topic's name.
            due = self.counts["supervised"] - self._last_naming >= self.naming_interval
            label = None
            if due:
                self._last_naming = self.counts["supervised"]
                label = learner.name_aspect(texts)
                if label.casefold() in {x.casefold() for x in avoid}:
                    label = None  # an ancestor's, sibling's or child's label: not a name for this one
            elif not self.offline_names:
                continue
            names[a] = label or self.label_aspect(texts, avoid, mean, context)
        if not names:
            return
        vecs = dict(zip(names, self.embed_label(list(names.values()))))

        def write(t: MembrainTree) -> int:
            renamed = 0
            for a, label in names.items():
                if a in t and t.node(a).kind == "aspect":
                    renamed += t.node(a).text != label
                    t.set_label(a, label, embedding=vecs[a],
                                metadata={**t.node(a).metadata, LABELLED_FACTS: t.fact_count(a)})
            return renamed

        self.counts["relabelled"] += self.forest.mutate(ns, write)

    # -------------------------------------------------------------- checkpoints
    def _load_operation_student(self) -> None:
        """The operation student from its stored checkpoint, when there is a usable one."""
        student = self.operations.student
        if self.storage is None or student is None:
            return
        found = self.storage.load_checkpoint(OPERATIONS_CHECKPOINT)
        if found is not None:
            try:
                student.load_bytes(found[0])
            except CheckpointError as exc:  # documented fallback: the student starts afresh
                self.checkpoint_error = str(exc)
                logger.warning("membrain: ignoring the stored operation student: %s", exc)

    def save_checkpoint(self) -> None:
        """Save the models (and the operation student, once it has labels), with the
        lifetime counters, when this process is the database's trainer."""
        learner = self.current
        if self.storage is None or learner is None or not self.is_trainer or self.storage.read_only:
            return
        with self.lock:
            data = learner.state_bytes()
            learning = self._learning_stats(learner)
        self.storage.save_checkpoint(CHECKPOINT_NAME, data, {**self.lifetime_counts().as_dict(), **learning})
        self._checkpoint_seen = self.storage.checkpoint_version(CHECKPOINT_NAME)
        student = self.operations.student
        if student is not None and student.labelled:
            self.storage.save_checkpoint(OPERATIONS_CHECKPOINT, student.state_bytes(), student.stats())

    def maybe_reload_checkpoint(self) -> None:
        """A process that does not train picks up the trainer's newer checkpoints, and
        takes over training if the trainer went away. Checked at most once per
        ``refresh_interval``: it runs after an insert, which must not pay for it each time.
        Never raises: the fact is already stored when this runs."""
        learner = self.current
        if self.storage is None or learner is None:
            return
        now = time.monotonic()
        if now - self._checkpoint_checked < self.forest.refresh_interval:
            return
        self._checkpoint_checked = now
        if self.storage.try_acquire_trainer(CHECKPOINT_NAME):
            self.is_trainer = True
        version = self.storage.checkpoint_version(CHECKPOINT_NAME)
        if version > self._checkpoint_seen:
            found = self.storage.load_checkpoint(CHECKPOINT_NAME)
            if found is not None:
                try:
                    with self.lock:
                        learner.load_bytes(found[0])
                except CheckpointError as exc:
                    self.checkpoint_error = str(exc)
                    logger.warning("membrain: ignoring the stored model checkpoint: %s", exc)
            self._checkpoint_seen = version

    # --------------------------------------------------------------- lifecycle
    def flush(self, timeout: float | None = None, *, final: bool = False) -> bool:
        """Ask the batch questions of inserts still waiting (:meth:`settle_batch`), wait until
        background training has caught up, and save a checkpoint.

        ``timeout``: seconds the teacher's questions may still take (None: as long as the
        teacher's own timeouts allow). Past it, the question in flight is given up and the
        questions still pending are dropped (see the module docstring); what they leave
        is trained, within :data:`DRAIN_MARGIN_S` more. ``final`` (close): the cutoff stays
        set, so nothing is asked afterwards. Returns whether training caught up."""
        if timeout is not None:
            self.cutoff.set(timeout)
        try:
            learner = self.current
            with budget.under(self.cutoff):
                for ns in ([] if learner is None else list(learner.waiting.counts())):
                    self.settle_batch(ns)
            if learner is not None and self.is_trainer:
                learner.trainer.train_ready()
            caught_up = self._join_queue(None if timeout is None else timeout + DRAIN_MARGIN_S)
            if not caught_up:
                logger.warning("membrain: the trainer still had %d inserts to train when the flush's time was up; "
                               "the checkpoint holds what it had trained", self.queue.unfinished)
            self.save_checkpoint()
            return caught_up
        finally:
            if timeout is not None and not final:
                self.cutoff.clear()

    def _join_queue(self, timeout: float | None) -> bool:
        """``queue.join()``, for ``timeout`` seconds at most: whether the queue emptied."""
        if self.worker is None or not self.worker.is_alive():
            return True
        return self.queue.join(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the trainer thread (after what is queued; waits ``timeout`` seconds at most)."""
        if self.worker is not None and self.worker.is_alive():
            self.queue.put(None)  # after what is queued; a trainer still busy past ``timeout`` stays a daemon
            self.worker.join(timeout=timeout)

    # ------------------------------------------------------------------ reports
    def process_counts(self) -> Counters:
        """This process's counters: the memory's and the forest's refreshes."""
        refresh = self.forest.counts
        return Counters(**self.counts, refreshed_by_change=refresh.refreshed_by_change,
                        refresh_reloads=refresh.refresh_reloads)

    def lifetime_counts(self) -> Counters:
        """What a checkpoint saves: the counts it was loaded with plus this process's."""
        process = self.process_counts()
        return process if self.stored_counts is None else self.stored_counts + process

    def _learning_stats(self, learner: Learner) -> dict[str, Any]:
        """Per-stage counters of the learner and the total teacher calls (under its lock)."""
        out: dict[str, Any] = {}
        for stage, c in learner.counters.items():
            out[stage] = {"decisions": c.decisions, "model_executed": c.model_executed,
                          "agreement": c.agreement, "labelled": c.labelled, "loss": c.loss,
                          "optimiser_steps": c.steps}
        out["teacher_calls"] = learner.ledger.teacher_calls  # joint questions: placements and audits
        out["naming_calls"] = learner.ledger.naming_calls  # the teacher asked to (re)name aspects
        out["questions"] = {k: learner.ledger.questions[k] for k in QUESTION_KINDS}
        out["teacher_failures"] = sum(learner.ledger.failures.values())  # questions without a usable answer
        out["teacher_skipped"] = sum(learner.ledger.skipped.values())  # of those, not sent (breaker, budget)
        out["asked_when_unsure"] = dict(learner.ledger.unsure)  # placement questions, by the unsure stage
        out["audits_shared"] = learner.ledger.shared_answers  # answered by an operation question, not counted
        if self.shadow is not None:
            out["shadow_agreement"] = {k: {"agreed": a, "decisions": n, "rate": a / n if n else None}
                                       for k, (a, n) in learner.shadow_scores.agreement.items()}
            out["shadow_per_class"] = learner.shadow_scores.per_class()  # stop; idle and each action kind
            out["shadow_seconds"] = learner.shadow_scores.seconds
        return out

    def report(self) -> dict[str, Any]:
        """The fields of :class:`~.stats.MemoryStats` this half of the memory knows: the
        counters, the learning stats (from the live models, else from the saved checkpoint
        without loading them), pending training, errors, the teacher's stats."""
        stored, learning = self.stored_counts, None
        learner = self.current
        if learner is not None:
            with self.lock:
                learning = LearningStats.from_mapping(self._learning_stats(learner))
        elif self.storage is not None:
            # A process that has not inserted yet (e.g. `membrain stats`): what the last
            # saved checkpoint recorded, without loading the models.
            stored, learning = read_stored(self.storage, CHECKPOINT_NAME)
        recent = sum(self.recent_calls) / len(self.recent_calls) if self.recent_calls else None
        return {"process": self.process_counts(), "stored": stored, "learning": learning,
                "pending_training": self.queue.unfinished, "last_worker_error": self.last_worker_error,
                "waiting_for_batch": 0 if learner is None else sum(learner.waiting.counts().values()),
                "checkpoint_error": self.checkpoint_error, "trainer": self.is_trainer, "prior": self.prior_used,
                "recent_teacher_calls_per_insert": recent, "teacher": teacher_stats(self.teacher)}
