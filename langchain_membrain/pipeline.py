"""The insert routine:

``embed -> stage-1 descent -> attach -> closure -> stage 2 -> decode -> apply -> train``.

The first half of this module holds the steps that do not depend on who decides (a
teacher or a model); the LangGraph graph (graph.py) and bulk ingestion call these same
functions. The second half is the learned insert (:class:`Learner`): the small networks
decide, the teacher is asked per policy, and training follows.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import numpy as np

from .actions import Action, Group, apply_actions, validate_action
from .decoding import DecodeConfig, action_key, decode, encode_actions
from .errors import DimensionError, InvalidOperationError, MembrainError
from .features import S1, Stage1Features, Stage2Features, stage1_features, stage2_features
from .models import ModelConfig
from .teachers.base import NewFact, Subtree, Teacher
from .training import OnlineTrainer, Policy, TrainingConfig
from .tree import MembrainTree

DEFAULT_TOP_K = 32
MAX_DESCENT = 256  # a guard: a valid tree is never this deep in practice


def cosine(a: np.ndarray | None, b: np.ndarray | None) -> float:
    """Cosine similarity; 0.0 when either vector is missing or zero."""
    if a is None or b is None:
        return 0.0
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def stage1_candidates(tree: MembrainTree, node_id: str, query: np.ndarray | None,
                      top_k: int = DEFAULT_TOP_K) -> list[str]:
    """``node_id`` then its child aspects; a node with more than ``top_k - 1`` child aspects
    keeps the most similar to ``query`` (by mean embedding), in attachment order."""
    aspects = tree.child_aspects(node_id)
    if len(aspects) > top_k - 1 and query is not None:
        sims = [cosine(tree.mean_embedding(a), query) for a in aspects]
        keep = set(np.argsort(sims)[::-1][: max(top_k - 1, 0)].tolist())
        aspects = [a for i, a in enumerate(aspects) if i in keep]
    return [node_id, *aspects]


@dataclass
class Stage1Step:
    """One stage-1 decision: the subtree shown and the index chosen."""

    subtree: Subtree
    choice: int


def descend(tree: MembrainTree, new_fact: NewFact, choose: Callable[[Subtree], int], *,
            top_k: int = DEFAULT_TOP_K) -> tuple[str, list[Stage1Step]]:
    """Stage 1: from the root, ask ``choose`` at each level until it picks the current node.

    Returns the parent to attach under and the decisions taken. An out-of-range choice is
    treated as "attach here" (callers validate teacher answers before this point).
    """
    cur = tree.root_id
    steps: list[Stage1Step] = []
    for _ in range(MAX_DESCENT):
        cands = stage1_candidates(tree, cur, new_fact.embedding, top_k)
        sub = Subtree(tree, cur, cands)
        i = choose(sub) if len(cands) > 1 else 0
        i = i if 0 <= i < len(cands) else 0
        steps.append(Stage1Step(sub, i))
        if i == 0:
            return cur, steps
        cur = cands[i]
    return cur, steps


def attach(tree: MembrainTree, new_fact: NewFact, parent_id: str, *, node_id: str | None = None,
           created_at: float | None = None) -> str:
    """Attach the new fact under ``parent_id``; returns its id."""
    return tree.add_fact(parent_id, new_fact.text, embedding=new_fact.embedding, node_id=node_id,
                         metadata=new_fact.metadata, created_at=created_at)


def rewrite(tree: MembrainTree, actions: list[Action], *, name_aspect: Callable[[list[str]], str],
            embed_label: Callable[[str], Any] | None = None, allow_aspects: bool = False):
    """Stage 2: apply an action series in order, each re-validated; see actions.apply_actions."""
    return apply_actions(tree, actions, name_aspect=name_aspect, embed_label=embed_label,
                         allow_aspects=allow_aspects)


def insert_with_teacher(tree: MembrainTree, new_fact: NewFact, teacher: Teacher, *,
                        node_id: str | None = None, embed_label: Callable[[str], Any] | None = None,
                        top_k: int = DEFAULT_TOP_K, allow_aspects: bool = False) -> str:
    """The whole insert decided by ``teacher`` alone (teacher forcing, no model)."""
    parent, _ = descend(tree, new_fact, lambda sub: teacher.choose_stage1(new_fact, sub), top_k=top_k)
    fact_id = attach(tree, new_fact, parent, node_id=node_id)
    actions = teacher.choose_stage2(tree, tree.closure(fact_id))
    rewrite(tree, actions, name_aspect=teacher.name_aspect, embed_label=embed_label,
            allow_aspects=allow_aspects)
    return fact_id


# =============================================================================== learned insert
# The insert decided by the small networks, with the teacher asked per policy. Split in two
# so that a background worker can take the slow half:
#
#   place(tree, fact)      descent -> attach -> closure -> stage 2 -> decode -> apply
#                          (the model's decisions; the teacher's only where the policy
#                          needs its answer *now*: teacher forcing, or an unsure model
#                          under execute="auto")
#   supervise(tree, rec)   deferred teacher queries (audits of the model's own executed
#                          decisions: DAgger), training on every label, corrections
#
# insert() = place() + supervise() + apply the corrections.

By = Literal["model", "teacher", "forced"]


@dataclass
class LearnerConfig:
    """Everything a :class:`Learner` is configured by.

    ``apply_corrections``: :meth:`Learner.insert` moves a fact (and applies the teacher's
    stage-2 actions) when a deferred audit disagrees with what the model executed.
    ``allow_aspects``: accept teacher actions that move whole aspects (the networks do not
    propose them; they are executed when the teacher decides, and never learned).
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    stage1: Policy = field(default_factory=Policy)
    # Stage 2's gate is lower: its calibrated confidence is that the *whole* action series
    # matches the teacher, a stricter event than one stage-1 choice (measured: bench learning).
    stage2: Policy = field(default_factory=lambda: Policy(confidence=0.6))
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    apply_corrections: bool = True
    allow_aspects: bool = False
    seed: int = 0


@dataclass
class Stage1Decision:
    """One level of the descent. Indices are into ``candidates`` (0: attach here).

    ``teacher_choice`` is the teacher's answer when it was asked during :meth:`place`;
    ``audit`` marks a decision the teacher is to be asked about in :meth:`supervise`;
    ``calibrate`` says whether its label is an unbiased sample (not asked *because* the
    model was unsure). ``shadow_choice`` is the evaluation teacher's answer (metrics only).
    """

    node_id: str
    candidates: list[str]
    feats: Stage1Features
    logits: np.ndarray
    model_choice: int
    confidence: float
    executed: int
    by: By
    teacher_choice: int | None = None
    audit: bool = False
    calibrate: bool = False
    shadow_choice: int | None = None
    trivial_choice: int = 0


@dataclass
class Stage2Decision:
    """The stage-2 decision on the closure of the new fact (actions are pre-application)."""

    feats: Stage2Features
    type_logits: np.ndarray
    model_actions: list[Action]
    confidence: float
    executed: list[Action]
    by: By
    teacher_actions: list[Action] | None = None
    audit: bool = False
    calibrate: bool = False
    shadow_actions: list[Action] | None = None


@dataclass
class Correction:
    """The teacher would have put ``fact_id`` under ``to_parent`` (it is under ``from_parent``)."""

    fact_id: str
    from_parent: str
    to_parent: str
    reason: str = "stage1"


@dataclass
class PendingLevel:
    """A stage-1 level whose decision the policy sends to the teacher now."""

    sub: Subtree
    feats: Stage1Features
    logits: np.ndarray
    model_choice: int
    confidence: float
    calibrate: bool
    trivial_choice: int


@dataclass
class PlaceRecord:
    """What :meth:`Learner.place` decided, for :meth:`Learner.supervise` and the caller."""

    fact_id: str
    new_fact: NewFact
    placed_under: str
    steps: list[Stage1Decision]
    stage2: Stage2Decision | None
    applied: list[Action]
    teacher_calls: int = 0
    teacher_failures: int = 0
    place_ms: float = 0.0  # wall-clock time of place(), the shadow teacher excluded
    place_cpu_ms: float = 0.0  # CPU time of this process during place(), shadow excluded
    shadow_parent: str | None = None
    supervised: bool = False
    # Progress of the step functions (descend_model / teacher_level / ... / apply_stage2):
    cursor: str = ""  # the node the descent stands on
    descended: bool = False  # the descent chose "attach here" (or had no choice)
    pending: "PendingLevel | None" = None  # a stage-1 level waiting for the teacher
    stage2_pending: bool = False  # the stage-2 decision is waiting for the teacher
    clock: tuple[float, float, float] = (0.0, 0.0, 0.0)  # (wall start, CPU start, shadow seconds)


@dataclass
class SupervisionResult:
    """What :meth:`Learner.supervise` did: teacher calls, optimiser steps, and corrections
    (a stage-1 re-placement and/or the teacher's stage-2 actions) for the caller to apply."""

    corrections: list[Correction]
    actions: list[Action]
    teacher_calls: int
    teacher_failures: int
    steps: int
    train_ms: float


@dataclass
class InsertResult:
    """The outcome of :meth:`Learner.insert`.

    ``stage1_by``/``stage2_by``: who decided ("model", "teacher", "mixed" when levels of
    the descent differ, "forced" when there was no choice). ``teacher_calls`` counts every
    teacher question of this insert (naming a new aspect not included: see
    ``naming_calls``). ``actions``: the stage-2 actions applied, corrections included.
    """

    fact_id: str
    parent_id: str
    placed_under: str
    stage1_by: str
    stage2_by: str
    teacher_calls: int
    teacher_failures: int
    actions: list[Action]
    corrections: list[Correction]
    record: PlaceRecord
    supervision: SupervisionResult
    naming_calls: int = 0


def _who(steps: list[Stage1Decision]) -> str:
    kinds = {s.by for s in steps if s.by != "forced"}
    if not kinds:
        return "forced"
    return kinds.pop() if len(kinds) == 1 else "mixed"


_LABEL_WORD = re.compile(r"[a-zA-Z][a-zA-Z'-]+")


def fallback_label(texts: list[str]) -> str:
    """A label when the teacher cannot name a group: the two most frequent longer words."""
    words = Counter(w.lower() for t in texts for w in _LABEL_WORD.findall(t) if len(w) > 3)
    return " ".join(w for w, _ in words.most_common(2)) or "group"


class Learner:
    """The learned insert: both networks, their trainer, the teacher and the policies.

    Args:
        teacher: the decision maker imitated (its answers are validated; a bad answer is a
            counted teacher failure and the model's own decision is used instead).
        config: :class:`LearnerConfig`.
        embed_label: optional text -> vector for the label of an aspect created by Group.
        shadow: an evaluation-only teacher, asked about every decision before it is
            executed; its answers are stored in the records (``shadow_choice``,
            ``shadow_parent``, ``shadow_actions``) and never counted, trained on or executed.

    Threads: the trainer has its own lock, but :class:`MembrainTree` is not thread-safe; a
    caller that runs :meth:`supervise` in a background thread must serialise tree access
    (one lock around ``place``, ``supervise`` and ``apply_corrections`` on a tree).
    """

    def __init__(self, teacher: Teacher, config: LearnerConfig | None = None, *,
                 embed_label: Callable[[str], Any] | None = None, shadow: Teacher | None = None):
        self.teacher = teacher
        self.config = config or LearnerConfig()
        self.trainer = OnlineTrainer(self.config.model, self.config.training)
        self.embed_label = embed_label
        self.shadow = shadow
        self.rng = np.random.default_rng(self.config.seed)
        self.naming_calls = 0
        # Guards the teacher-call counts: inserts and a background supervision both ask the
        # teacher. Not the trainer's lock, which an optimiser step holds for milliseconds.
        self._count_lock = threading.Lock()
        self.inserts = 0

    # ------------------------------------------------------------------ policies
    @property
    def stage1_policy(self) -> Policy:
        return self.config.stage1

    @stage1_policy.setter
    def stage1_policy(self, p: Policy) -> None:
        self.config.stage1 = p

    @property
    def stage2_policy(self) -> Policy:
        return self.config.stage2

    @stage2_policy.setter
    def stage2_policy(self, p: Policy) -> None:
        self.config.stage2 = p

    @property
    def counters(self):
        return self.trainer.counters

    def _gate(self, policy: Policy, stage: str, confidence: float) -> tuple[bool, bool, bool]:
        """(ask the teacher now, audit later, label is an unbiased sample) for one decision.

        execute="teacher": ask now (its answer is executed). execute="auto": the model
        decides when it is past warm-up and its calibrated confidence reaches
        ``policy.confidence``, else the teacher is asked now (unless query="never").
        When the model decides: query="always" audits every decision, "uncertain" the
        unsure ones plus a random ``audit_rate`` share, "never" none. The third value is
        True for teacher forcing, warm-up, query="always" and the random share only.
        """
        # One random draw per decision, whatever the confidence: decisions it selects form
        # an unbiased sample, the only kind calibration may be fitted on.
        drawn = policy.query != "never" and self.rng.random() < policy.audit_rate
        if policy.execute == "teacher":
            return True, False, True
        warm = self.trainer.labelled_count(stage) >= policy.warmup
        sure = warm and confidence >= policy.confidence
        if policy.execute == "auto" and not sure and policy.query != "never":
            return True, False, not warm or policy.query == "always" or drawn
        if policy.query == "always":
            return False, True, True
        if policy.query == "uncertain" and (drawn or not sure):
            return False, True, drawn
        return False, False, False

    # ------------------------------------------------------------------ teacher calls
    def _ask1(self, new_fact: NewFact, sub: Subtree, rec: PlaceRecord | SupervisionResult) -> int | None:
        """The teacher's stage-1 index, or None (a counted failure) if it is not valid."""
        self._count("stage1", rec, calls=1)
        try:
            i = self.teacher.choose_stage1(new_fact, sub)
        except Exception:  # an untrusted teacher: any exception is a failed answer
            i = None
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)) \
                or not 0 <= int(i) < len(sub.candidates):
            self._count("stage1", rec, failures=1)
            return None
        return int(i)

    def _ask2(self, tree: MembrainTree, fact_id: str, rec: PlaceRecord | SupervisionResult) -> list[Action] | None:
        """The teacher's stage-2 series if every action is valid on the tree as it is and no
        node is acted on twice; else None (a counted failure)."""
        self._count("stage2", rec, calls=1)
        try:
            actions = list(self.teacher.choose_stage2(tree, tree.closure(fact_id)))
            touched: list[str] = []
            for act in actions:
                validate_action(tree, act, allow_aspects=self.config.allow_aspects)
                touched += list(act.node_ids) if isinstance(act, Group) else [act.node_id]
            if len(touched) != len(set(touched)):
                raise InvalidOperationError("a node is acted on twice")
            return actions
        except Exception:
            self._count("stage2", rec, failures=1)
            return None

    def _count(self, stage: str, rec: PlaceRecord | SupervisionResult, *, calls: int = 0, failures: int = 0) -> None:
        """Count teacher calls and failures, on the stage's counters and on the record."""
        with self._count_lock:
            c = self.trainer.counters[stage]
            c.teacher_calls += calls
            c.teacher_failures += failures
        rec.teacher_calls += calls
        rec.teacher_failures += failures

    def name_aspect(self, texts: list[str]) -> str:
        """A label for an aspect holding ``texts``: the teacher's, or a keyword fallback when
        it fails (counted in ``naming_calls``)."""
        with self._count_lock:
            self.naming_calls += 1
        try:
            label = self.teacher.name_aspect(texts)
        except Exception:
            label = None
        return label if isinstance(label, str) and label.strip() else fallback_label(texts)

    # ------------------------------------------------------------------ place
    def _model_descend_from(self, tree: MembrainTree, new_fact: NewFact, node_id: str) -> str:
        """Where the model alone would attach ``new_fact``, descending from ``node_id``."""
        def choose(sub: Subtree) -> int:
            return int(np.argmax(self.trainer.predict_stage1(self._feats1(tree, new_fact, sub))))
        cur = node_id
        for _ in range(MAX_DESCENT):
            cands = stage1_candidates(tree, cur, new_fact.embedding, self.config.model.top_k)
            i = choose(Subtree(tree, cur, cands)) if len(cands) > 1 else 0
            if i == 0:
                return cur
            cur = cands[i]
        return cur

    def _feats1(self, tree: MembrainTree, new_fact: NewFact, sub: Subtree) -> Stage1Features:
        return stage1_features(tree, new_fact, sub, max_facts=self.config.model.max_context_facts)

    def _feats2(self, tree: MembrainTree, fact_id: str) -> Stage2Features:
        return stage2_features(tree, tree.closure(fact_id), max_facts=self.config.model.max_closure_facts)

    def _check_fact(self, tree: MembrainTree, new_fact: NewFact) -> None:
        dim = self.config.model.dim
        emb = np.asarray(new_fact.embedding)
        if emb.ndim != 1 or emb.size != dim:
            raise DimensionError(f"the new fact's embedding has shape {emb.shape}, the model reads {dim}")
        if tree.dim is not None and tree.dim != dim:
            raise DimensionError(f"the tree holds {tree.dim}-d embeddings, the model reads {dim}")

    def place(self, tree: MembrainTree, new_fact: NewFact, *, node_id: str | None = None) -> PlaceRecord:
        """The fast half of an insert: descend, attach, rewrite the closure.

        The same steps the insert graph (graph.py) runs as nodes, called in order. The
        fact is attached before anything that can fail for the teacher's sake, and
        teacher answers are validated, so the fact is never lost.
        """
        rec = self.begin(tree, new_fact)
        while not rec.descended:
            if self.descend_model(tree, rec):
                self.teacher_level(tree, rec)
        self.attach(tree, rec, node_id=node_id)
        if self.propose_stage2(tree, rec):
            self.teacher_stage2(tree, rec)
        self.apply_stage2(tree, rec)
        return rec

    # The steps of place(), in order. Each takes the tree as it is when it runs (a graph
    # may run them under separate locks), so each re-validates the ids it reads.
    def begin(self, tree: MembrainTree, new_fact: NewFact) -> PlaceRecord:
        """Start an insert at the root."""
        self._check_fact(tree, new_fact)
        rec = PlaceRecord("", new_fact, tree.root_id, [], None, [], cursor=tree.root_id)
        rec.clock = (time.perf_counter(), time.process_time(), 0.0)
        return rec

    def _shadow_time(self, rec: PlaceRecord, seconds: float) -> None:
        t0, c0, s = rec.clock
        rec.clock = (t0, c0, s + seconds)

    def descend_model(self, tree: MembrainTree, rec: PlaceRecord) -> bool:
        """Descend by the model's decisions from ``rec.cursor`` until it attaches (returns
        False, ``rec.descended`` set) or reaches a level the policy sends to the teacher
        now (returns True, ``rec.pending`` set)."""
        if rec.cursor not in tree or tree.node(rec.cursor).kind == "fact":
            rec.cursor = tree.root_id  # the tree changed under us: start again
        new_fact, pol = rec.new_fact, self.config.stage1
        for _ in range(MAX_DESCENT):
            cands = stage1_candidates(tree, rec.cursor, new_fact.embedding, self.config.model.top_k)
            if len(cands) == 1:
                break  # no child aspect: nothing to decide, attach here
            sub = Subtree(tree, rec.cursor, cands)
            feats = self._feats1(tree, new_fact, sub)
            logits = self.trainer.predict_stage1(feats)
            conf = self.trainer.confidence_stage1(logits)
            mchoice = int(np.argmax(logits))
            ask_now, audit, calibrate = self._gate(pol, "stage1", conf)
            best_cos = feats.num[1:1 + feats.n_candidates, S1["is_best_cos"]]
            trivial = int(np.argmax(best_cos)) if best_cos.max() > 0 else 0
            if ask_now:
                rec.pending = PendingLevel(sub, feats, logits, mchoice, conf, calibrate, trivial)
                return True
            step = Stage1Decision(rec.cursor, cands, feats, logits, mchoice, conf, mchoice, "model", None,
                                  audit, calibrate, trivial_choice=trivial)
            self.trainer.counters["stage1"].model_executed += 1
            if self._record_step(tree, rec, step):
                return False
        rec.descended = True
        return False

    def teacher_level(self, tree: MembrainTree, rec: PlaceRecord) -> None:
        """Ask the teacher about the pending level and execute its answer (the model's own
        choice if the answer is not valid)."""
        p, rec.pending = rec.pending, None
        if p is None or p.sub.node_id not in tree or tree.node(p.sub.node_id).kind == "fact":
            return  # nothing pending, or the level vanished: descend_model starts again
        teacher = self._ask1(rec.new_fact, p.sub, rec)
        executed = teacher if teacher is not None else p.model_choice
        step = Stage1Decision(p.sub.node_id, p.sub.candidates, p.feats, p.logits, p.model_choice, p.confidence,
                              executed, "teacher" if teacher is not None else "model", teacher, False,
                              p.calibrate, trivial_choice=p.trivial_choice)
        if teacher is None:
            self.trainer.counters["stage1"].model_executed += 1
        self._record_step(tree, rec, step)

    def _record_step(self, tree: MembrainTree, rec: PlaceRecord, step: Stage1Decision) -> bool:
        """Count and keep one executed level; move the cursor. True when it attaches here."""
        self.trainer.counters["stage1"].decisions += 1
        if self.shadow is not None:
            s0 = time.perf_counter()
            step.shadow_choice = self._shadow1(rec.new_fact, Subtree(tree, step.node_id, step.candidates))
            self._shadow_time(rec, time.perf_counter() - s0)
        rec.steps.append(step)
        if step.executed == 0:
            rec.descended = True
            return True
        rec.cursor = step.candidates[step.executed]
        return False

    def attach(self, tree: MembrainTree, rec: PlaceRecord, *, node_id: str | None = None,
               created_at: float | None = None) -> str:
        """Attach the new fact where the descent stopped (the root if that node is gone)."""
        new_fact = rec.new_fact
        if self.shadow is not None:
            s0 = time.perf_counter()
            try:
                rec.shadow_parent, _ = descend(tree, new_fact, lambda s: self.shadow.choose_stage1(new_fact, s),
                                               top_k=self.config.model.top_k)
            except Exception:
                rec.shadow_parent = None
            self._shadow_time(rec, time.perf_counter() - s0)
        if rec.cursor not in tree or tree.node(rec.cursor).kind == "fact":
            rec.cursor = tree.root_id
        rec.placed_under = rec.cursor
        rec.fact_id = attach(tree, new_fact, rec.cursor, node_id=node_id, created_at=created_at)
        self.inserts += 1
        return rec.fact_id

    def propose_stage2(self, tree: MembrainTree, rec: PlaceRecord) -> bool:
        """The model's stage-2 actions on the new fact's closure; True when the policy
        sends the decision to the teacher now."""
        if rec.fact_id not in tree:
            return False
        try:
            feats = self._feats2(tree, rec.fact_id)
            mask = feats.type_mask()
            if not mask[:, 1:].any():
                return False  # only Idle is possible: no decision
            t_logits, d_logits, g_logits = self.trainer.predict_stage2(feats)
            model_actions = decode(tree, feats, t_logits, d_logits, g_logits, self.config.decode)
        except MembrainError:
            return False  # stage 2 is an improvement; a failure in it must never undo the insert
        conf = self.trainer.confidence_stage2(t_logits, mask)
        ask_now, audit, calibrate = self._gate(self.config.stage2, "stage2", conf)
        rec.stage2 = Stage2Decision(feats, t_logits, model_actions, conf, model_actions, "model", None,
                                    audit and not ask_now, calibrate)
        rec.stage2_pending = ask_now
        return ask_now

    def teacher_stage2(self, tree: MembrainTree, rec: PlaceRecord) -> None:
        """Ask the teacher for the stage-2 actions; a valid answer replaces the model's."""
        dec, rec.stage2_pending = rec.stage2, False
        if dec is None or rec.fact_id not in tree:
            return
        teacher = self._ask2(tree, rec.fact_id, rec)
        if teacher is not None:
            dec.teacher_actions, dec.executed, dec.by = teacher, teacher, "teacher"

    def apply_stage2(self, tree: MembrainTree, rec: PlaceRecord) -> list[Action]:
        """Apply the chosen stage-2 actions (each re-validated) and close the record."""
        dec = rec.stage2
        try:
            if dec is not None and rec.fact_id in tree:
                c = self.trainer.counters["stage2"]
                c.decisions += 1
                c.model_executed += dec.by == "model"
                if self.shadow is not None:
                    s0 = time.perf_counter()
                    try:
                        dec.shadow_actions = list(self.shadow.choose_stage2(tree, tree.closure(rec.fact_id)))
                    except Exception:
                        dec.shadow_actions = None
                    self._shadow_time(rec, time.perf_counter() - s0)
                rec.applied, _ = rewrite(tree, dec.executed, name_aspect=self.name_aspect, embed_label=self.embed_label,
                                         allow_aspects=self.config.allow_aspects)
        except MembrainError:
            pass  # stage 2 is an improvement; a failure in it must never undo the insert
        t0, c0, shadow_s = rec.clock
        rec.place_ms = (time.perf_counter() - t0 - shadow_s) * 1000
        rec.place_cpu_ms = max(time.process_time() - c0 - shadow_s, 0.0) * 1000
        return rec.applied

    def _shadow1(self, new_fact: NewFact, sub: Subtree) -> int | None:
        try:
            i = self.shadow.choose_stage1(new_fact, sub)
            return int(i) if 0 <= int(i) < len(sub.candidates) else None
        except Exception:
            return None

    # ------------------------------------------------------------------ supervise
    @staticmethod
    def asks_teacher(record: PlaceRecord) -> bool:
        """Whether :meth:`supervise` would ask the teacher about this record (it holds
        audited decisions not yet supervised)."""
        if record.supervised:
            return False
        dec = record.stage2
        return (any(s.audit and s.teacher_choice is None for s in record.steps)
                or (dec is not None and dec.audit and dec.teacher_actions is None))

    def supervise(self, tree: MembrainTree, record: PlaceRecord, *, train: bool = True) -> SupervisionResult:
        """The slow half: deferred teacher queries, training, corrections.

        Labels answered during :meth:`place` are queued for training as they are.
        Audited decisions are asked now, on the tree as it is *now* (it may have changed
        since ``place``; ids are re-validated and steps whose node is gone are skipped):
        the model's decision is recomputed on the same state, scored against the teacher
        (prequentially) and queued. The first audited level where the teacher's choice
        differs from what was executed yields a :class:`Correction`: the teacher's choice,
        then the model's own descent below it. An audited stage-2 decision where the
        teacher's actions differ from the model's returns the teacher's actions.
        Calling it twice for one record does nothing the second time. With ``train=False``
        the labels are only queued: the caller runs ``trainer.train_ready()`` itself (a
        background worker does so without holding the tree's lock).
        """
        res = SupervisionResult([], [], 0, 0, 0, 0.0)
        if record.supervised:
            return res
        record.supervised = True
        tr = self.trainer
        fact = record.fact_id
        alive = fact in tree and tree.node(fact).kind == "fact"
        first_disagreement: tuple[str, int, list[str]] | None = None
        for step in record.steps:
            if step.teacher_choice is not None:
                tr.observe_stage1(step.feats, step.teacher_choice, step.logits, calibrate=step.calibrate)
            elif step.audit:
                if step.node_id not in tree or tree.node(step.node_id).kind == "fact":
                    continue
                cands = stage1_candidates(tree, step.node_id, record.new_fact.embedding, self.config.model.top_k)
                if len(cands) < 2:
                    continue
                sub = Subtree(tree, step.node_id, cands)
                t = self._ask1(record.new_fact, sub, res)
                if t is None:
                    continue
                feats = self._feats1(tree, record.new_fact, sub)
                tr.observe_stage1(feats, t, tr.predict_stage1(feats), calibrate=step.calibrate)
                executed_id = step.candidates[step.executed] if step.executed < len(step.candidates) else None
                if first_disagreement is None and cands[t] != executed_id:
                    first_disagreement = (step.node_id, t, cands)
        if first_disagreement is not None and alive:
            node, t, cands = first_disagreement
            target = node if t == 0 else self._model_descend_from(tree, record.new_fact, cands[t])
            current = tree.parent(fact)
            if target != current and target in tree and tree.node(target).kind != "fact":
                res.corrections.append(Correction(fact, current, target, "stage1"))

        dec = record.stage2
        if dec is not None:
            if dec.teacher_actions is not None:
                labels = encode_actions(dec.feats, dec.teacher_actions)
                agreed = {action_key(a) for a in dec.model_actions} == {action_key(a) for a in dec.teacher_actions}
                tr.observe_stage2(dec.feats, labels, dec.type_logits, agreed, calibrate=dec.calibrate)
            elif dec.audit and alive and not res.corrections:
                feats = self._feats2(tree, fact)
                if feats.type_mask()[:, 1:].any():
                    teacher = self._ask2(tree, fact, res)
                    if teacher is not None:
                        t_l, d_l, g_l = tr.predict_stage2(feats)
                        mine = decode(tree, feats, t_l, d_l, g_l, self.config.decode)
                        agreed = {action_key(a) for a in mine} == {action_key(a) for a in teacher}
                        tr.observe_stage2(feats, encode_actions(feats, teacher), t_l, agreed,
                                          calibrate=dec.calibrate)
                        if not agreed:
                            res.actions = teacher
        if train:
            t0 = time.perf_counter()
            res.steps = tr.train_ready()
            res.train_ms = (time.perf_counter() - t0) * 1000
        return res

    def apply_corrections(self, tree: MembrainTree, res: SupervisionResult) -> list[Action]:
        """Apply a supervision's corrections to ``tree`` (moves first, then the teacher's
        stage-2 actions, each re-validated); returns the actions applied."""
        for c in res.corrections:
            try:
                if tree.parent(c.fact_id) == c.from_parent:
                    tree.move(c.fact_id, c.to_parent)
            except MembrainError:
                pass
        applied, _ = rewrite(tree, res.actions, name_aspect=self.name_aspect, embed_label=self.embed_label,
                             allow_aspects=self.config.allow_aspects) if res.actions else ([], [])
        return applied

    # ------------------------------------------------------------------ insert
    def insert(self, tree: MembrainTree, new_fact: NewFact, *, node_id: str | None = None) -> InsertResult:
        """descent -> attach -> closure -> stage 2 -> decode -> apply -> train (-> correct)."""
        named = self.naming_calls
        rec = self.place(tree, new_fact, node_id=node_id)
        sup = self.supervise(tree, rec)
        extra = self.apply_corrections(tree, sup) if self.config.apply_corrections else []
        return InsertResult(
            fact_id=rec.fact_id,
            parent_id=tree.parent(rec.fact_id),
            placed_under=rec.placed_under,
            stage1_by=_who(rec.steps),
            stage2_by=rec.stage2.by if rec.stage2 is not None else "forced",
            teacher_calls=rec.teacher_calls + sup.teacher_calls,
            teacher_failures=rec.teacher_failures + sup.teacher_failures,
            actions=list(rec.applied) + list(extra),
            corrections=sup.corrections,
            record=rec,
            supervision=sup,
            naming_calls=self.naming_calls - named,
        )

    # ------------------------------------------------------------------ checkpoints
    def save(self, path_or_buffer) -> None:
        self.trainer.save(path_or_buffer)

    def load(self, path_or_buffer) -> None:
        self.trainer.load(path_or_buffer)

    def state_bytes(self) -> bytes:
        return self.trainer.state_bytes()

    def load_bytes(self, data: bytes) -> None:
        self.trainer.load_bytes(data)


__all__ = [
    "Correction", "InsertResult", "Learner", "LearnerConfig", "PlaceRecord", "Stage1Decision", "Stage2Decision",
    "SupervisionResult", "attach", "cosine", "descend", "fallback_label", "insert_with_teacher", "rewrite",
    "stage1_candidates",
]
