"""The steps of an insert, decided by the small networks and their teacher.

In :class:`Learner` the networks decide, the teacher is asked at most one joint question per
insert (every label, descent level and stage 2 from one answer), and training follows. The insert graph's nodes
(graph.py) are the steps' only driver.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import replace
from typing import Any, Callable, Sequence, cast

import numpy as np

from ..errors import MembrainError
from ..students.decoding import encode_actions
from ..students.features import S1
from ..students.nets import ModelConfig
from ..students.shadow import ShadowScores, same_actions, stage1_classes, stage2_classes
from ..students.training import OnlineTrainer
from ..students.training_config import Policy
from ..teachers.base import BatchTeacher, RemoteTeacher, Teacher, capable, safe_choice
from ..teachers.budget import requests_sent
from ..teachers.seat import SeatedTeacher, TeacherSeat
from ..tree.actions import Action, apply_actions
from ..tree.labels import fallback_label, name_groups
from ..tree.placement import MAX_DESCENT, NewFact, Placement, Subtree, attach, descend, destination, stage1_candidates
from ..tree.tree import MembrainTree
from .asking import Asking, sent_since
from .batches import WaitingInserts, answer_batch, batch_view, carry_out
from .config import LearnerConfig
from .decisions import (
    attach_here,
    check_fact,
    model_descend_from,
    model_stage2,
    plan_labels,
    second_opinion,
    stage1_feats,
    unsure,
    warm,
)
from .ledger import QuestionLedger
from .records import (
    Audit,
    Clock,
    Correction,
    Descent,
    PlaceRecord,
    Stage1Decision,
    Stage1Label,
    Stage2Decision,
    SupervisionResult,
)

WAITING_TRACKED = 10_000  # parents whose waiting stage-2 decisions are counted (stage2_defer)


class Learner:
    """The learned insert: both networks, their trainer, the teacher and the policies.

    Args:
        teacher: the decision maker imitated (a bad answer is a counted failure and the model's
            own decision is used), or the :class:`~.teachers.seat.TeacherSeat` holding it,
            which every question reads.
        config: :class:`LearnerConfig`.
        embed_label: optional text -> vector for the label of an aspect created by Group.
        label_aspect: names an aspect the *model* creates, ``(texts, avoid, mean) -> label``
            (``avoid``: :func:`nearby_labels`; ``mean``: the facts' mean embedding or None),
            without asking the teacher; default
            :func:`fallback_label`. Aspects the teacher creates carry the teacher's labels.
        shadow: an evaluation-only teacher, asked about every decision before it is
            executed; its answers are stored in the records (``shadow_choice``,
            ``shadow_parent``, ``shadow_actions``) and never counted, trained on or executed.
        stand_in: the offline rule that chooses the parent when the teacher gives no answer
            while stage 1 is not warm yet (the model decides once it is); None: the model
            always. Its decisions are neither counted as questions nor trained on.

    Threads: the trainer has its own lock, but :class:`MembrainTree` is not thread-safe; a
    caller must serialise tree access around the insert's steps (the graph's nodes do) and
    :meth:`apply_corrections`. :meth:`supervise` does not read the live tree.
    """

    teacher = SeatedTeacher()  # the seat's teacher, read at each question

    def __init__(self, teacher: Teacher | TeacherSeat, config: LearnerConfig | None = None, *,
                 embed_label: Callable[[str], Any] | None = None,
                 label_aspect: Callable[..., str] | None = None, shadow: Teacher | None = None,
                 stand_in: Teacher | None = None):
        self.seat = TeacherSeat.of(teacher)
        self.stand_in = stand_in
        self.config = config or LearnerConfig()
        self.trainer = OnlineTrainer(self.config.model, self.config.training)
        # Stage 1's temperature is fitted for its gate (calibration.Calibrator).
        self.trainer.calib["stage1"].gate = self.config.stage1.confidence
        self.trainer.linear1.calib.gate = self.config.stage1.confidence
        self.trainer.idle2.gate = self.config.stage2.confidence
        self.embed_label = embed_label
        self.label_aspect = label_aspect or fallback_label
        self.shadow = shadow
        self.rng = np.random.default_rng(self.config.seed)
        self.ledger = QuestionLedger()  # the teacher questions asked, by kind
        self.asking = Asking(self.seat, self.ledger)
        self.shadow_scores = ShadowScores()  # with a shadow: the student's own decisions against it
        self._count_lock = threading.Lock()
        self.inserts = 0
        # (subject, parent id) -> unsure stage-2 decisions that waited since the teacher was
        # last asked about that parent (stage2_defer > 1); least recently seen dropped first.
        self._stage2_waits: OrderedDict[tuple[str, str], int] = OrderedDict()
        self.waiting = WaitingInserts()  # per namespace, the inserts waiting for its batch question

    @property
    def counters(self):
        return self.trainer.counters

    def unbiased(self, rec: PlaceRecord, policy: Policy, stage: str) -> bool:
        """Whether a label of this insert may calibrate ``stage``: the question was not asked
        *because* the model was unsure (an audit draw, teacher forcing, warm-up, or
        query="always"). A question stage 2 asked calibrates stage 1 whatever this says
        (:meth:`teacher_stage2`)."""
        return (rec.audit.drawn or policy.execute == "teacher" or policy.query == "always"
                or not warm(self.trainer, policy, stage))

    # ------------------------------------------------------------------ the teacher
    def draw_audit(self) -> bool:
        """One audit draw (stage 1's ``audit_rate``), for a caller that shares it between this
        insert's placement (``begin(audit=...)``) and its memory operation."""
        return bool(self.rng.random() < self.config.stage1.audit_rate)

    def name_aspect(self, texts: list[str]) -> str:
        """A label from the teacher (counted in ``naming_calls``), or the model's own
        labeller's when it fails (a counted failure)."""
        teacher = self.teacher  # read once (see Asking.ask)
        before = requests_sent(teacher)
        # a remote teacher's try_ raises where it would fall back silently
        ask = teacher.try_name_aspect if capable(teacher, RemoteTeacher) else teacher.name_aspect
        try:
            label = ask(texts)
        except Exception:
            label = None
        ok = isinstance(label, str) and bool(label.strip())
        self.asking.count("naming", None, failed=not ok, sent=sent_since(teacher, before))
        return cast(str, label) if ok else self.label_aspect(texts, [])  # ok: a str

    def rewrite(self, tree: MembrainTree, actions: list[Action]) -> list[Action]:
        """Apply ``actions`` on ``tree``, each re-validated and every Group named
        (labels.name_groups, by ``label_aspect``); returns the actions applied."""
        named = name_groups(tree, actions, self.label_aspect)
        applied, _ = apply_actions(tree, named, name_aspect=lambda texts: self.label_aspect(texts, []),
                                   embed_label=self.embed_label, allow_aspects=self.config.allow_aspects)
        return applied

    # The insert's steps (graph.py runs them as its nodes). Each takes the tree as it is when
    # it runs (the graph may run them under separate locks), so each re-validates the ids it
    # reads. Each replaces the record's decisions it takes (records.Audit, Descent, Answer, Clock).
    def begin(self, tree: MembrainTree, new_fact: NewFact, *, audit: bool | None = None,
              shared: bool = False, offered: Placement | None = None) -> PlaceRecord:
        """Start an insert at the root and draw whether it is an audit (every insert under
        query="always"). One draw per insert, whatever the model's confidence, so audited
        inserts are an unbiased sample; ``audit``: the caller's draw (:meth:`draw_audit`)
        instead. ``shared``, ``offered``: see :class:`~.records.Audit`."""
        check_fact(self.config, tree, new_fact)
        pol = self.config.stage1
        draw = self.draw_audit() if audit is None else bool(audit)
        drawn = pol.query == "always" or (pol.query == "uncertain" and draw)
        return PlaceRecord("", new_fact, tree.root_id, [], None, [], audit=Audit(drawn, shared, offered),
                           descent=Descent(tree.root_id), clock=Clock(time.perf_counter(), time.process_time()))

    def _shadow_time(self, rec: PlaceRecord, seconds: float) -> None:
        self.shadow_scores.seconds += seconds
        rec.clock = replace(rec.clock, shadow_s=rec.clock.shadow_s + seconds)

    def descend_model(self, tree: MembrainTree, rec: PlaceRecord) -> bool:
        """Descend by the model's decisions from the descent's cursor. Returns True, and
        stops, at the first level where the model is unsure (the teacher is then asked the
        joint question); False once it attaches (``Descent.done``)."""
        cursor = rec.descent.cursor
        if cursor not in tree or tree.node(cursor).kind == "fact":
            cursor = tree.root_id  # the tree changed under us: start again
        new_fact, pol, tr = rec.new_fact, self.config.stage1, self.trainer
        for _ in range(MAX_DESCENT):
            cands = stage1_candidates(tree, cursor, new_fact.embedding, self.config.model.top_k)
            if len(cands) == 1:
                break  # no child aspect: nothing to decide, attach here
            sub = Subtree(tree, cursor, cands)
            feats = stage1_feats(self.config, tree, new_fact, sub)
            logits = tr.predict_stage1(feats)
            conf = tr.confidence_stage1(logits)
            mchoice = int(np.argmax(logits))
            if unsure(tr, pol, "stage1", conf):
                mchoice, conf = second_opinion(tr, self.config, feats, mchoice, conf)
            mchoice, conf = attach_here(tr, self.config, feats, logits, mchoice, conf)
            best_cos = feats.num[1:1 + feats.n_candidates, S1["is_best_cos"]]
            trivial = int(np.argmax(best_cos)) if best_cos.max() > 0 else 0
            step = Stage1Decision(cursor, cands, feats, logits, mchoice, conf, mchoice, "model",
                                  trivial_choice=trivial)
            if self.shadow is not None:
                s0 = time.perf_counter()
                step.shadow_choice = self._shadow1(rec.new_fact, sub)
                self._shadow_time(rec, time.perf_counter() - s0)
            rec.steps.append(step)
            tr.counters["stage1"].decisions += 1
            if not rec.answer.asked and unsure(tr, pol, "stage1", conf):
                rec.descent = replace(rec.descent, cursor=cursor)
                return True
            tr.counters["stage1"].model_executed += 1
            if step.shadow_choice is not None:
                self.shadow_scores.add("stage1", mchoice == step.shadow_choice, stage1_classes(mchoice, step.shadow_choice))
            if mchoice == 0:
                break
            cursor = cands[mchoice]
        rec.descent = replace(rec.descent, cursor=cursor, done=True)
        return False

    def teacher_place(self, tree: MembrainTree, rec: PlaceRecord) -> None:
        """Ask the joint question now and follow its path; if the answer is not valid, the
        model descends on its own from where it stopped. With batch questions the insert
        waits instead, where the model's descent ends (:meth:`settle_batch`)."""
        descent = rec.descent
        if descent.done:
            return
        if self.batching and not rec.audit.shared:
            rec.answer = replace(rec.answer, batched="stage1")
            cursor = model_descend_from(self.trainer, self.config, tree, rec.new_fact, descent.cursor)
            rec.descent = replace(descent, cursor=cursor, done=True, placed_by="model")
            return
        self.ledger.unsure["stage1"] += 1
        cursor = descent.cursor
        if cursor not in tree or tree.node(cursor).kind == "fact":
            cursor = tree.root_id
        offered, rec.audit = rec.audit.offered, replace(rec.audit, offered=None)
        plan = self.asking.ask(tree, rec.new_fact, "placement", rec, offered=offered)
        if plan is None:  # no answer: decided without the teacher, asked again in supervise
            rec.answer = replace(rec.answer, asked=True, deferred="stage1")
            cursor, by = self._descend_without_teacher(tree, rec.new_fact, cursor)
            for step in rec.steps[-1:]:
                step.by = "offline rule" if by == "offline rule" else step.by
        else:
            labels1 = plan_labels(self.config, tree, rec.new_fact, plan,
                                  self.unbiased(rec, self.config.stage1, "stage1"))
            rec.answer = replace(rec.answer, asked=True, plan=plan, labels1=labels1)
            cursor, by = plan.parent_id, "teacher"
            for step in rec.steps[-1:]:
                step.by = "teacher"
        rec.descent = replace(descent, cursor=cursor, placed_by=by, done=True)

    def _descend_without_teacher(self, tree: MembrainTree, new_fact: NewFact, node_id: str) -> tuple[str, str]:
        """Where the fact goes when the teacher gave no answer, and who chose: the model once
        stage 1 is warm, the ``stand_in`` (the offline rule) before, and always where the
        model executes nothing (execute="teacher")."""
        pol = self.config.stage1
        if self.stand_in is not None and (pol.execute == "teacher" or not warm(self.trainer, pol, "stage1")):
            stand_in = self.stand_in
            return destination(descend(tree, new_fact, lambda sub: safe_choice(stand_in, new_fact, sub),
                                       top_k=self.config.model.top_k, start=node_id)), "offline rule"
        return model_descend_from(self.trainer, self.config, tree, new_fact, node_id), "model"

    def attach(self, tree: MembrainTree, rec: PlaceRecord, *, node_id: str | None = None,
               created_at: float | None = None) -> str:
        """Attach the new fact where the descent stopped (the root if that node is gone).
        An audited insert the model decided alone keeps a snapshot of the tree first."""
        new_fact, descent, answer = rec.new_fact, rec.descent, rec.answer
        shadow = self.shadow
        if shadow is not None:
            s0 = time.perf_counter()
            try:
                shadow_parent: str | None = destination(descend(
                    tree, new_fact, lambda s: shadow.choose_stage1(new_fact, s), top_k=self.config.model.top_k))
            except Exception:
                shadow_parent = None
            descent = replace(descent, shadow_parent=shadow_parent)
            self._shadow_time(rec, time.perf_counter() - s0)
        if (rec.audit.drawn and not answer.asked and not answer.batched) or answer.deferred:
            rec.audit = replace(rec.audit, snapshot=tree.copy())
        if descent.cursor not in tree or tree.node(descent.cursor).kind == "fact":
            descent = replace(descent, cursor=tree.root_id)
        if descent.placed_by == "forced" and rec.steps:
            descent = replace(descent, placed_by="model")
        rec.descent = descent
        rec.placed_under = descent.cursor
        rec.fact_id = attach(tree, new_fact, descent.cursor, node_id=node_id, created_at=created_at)
        self.inserts += 1
        return rec.fact_id

    def propose_stage2(self, tree: MembrainTree, rec: PlaceRecord) -> bool:
        """The stage-2 decision on the new fact's closure: the teacher's actions when the
        joint question was answered, else the model's. True when the model is unsure and
        the teacher has not been asked yet (it is then asked now)."""
        answer, tr = rec.answer, self.trainer
        if rec.fact_id not in tree or answer.batched:
            return False  # a waiting insert's stage 2 comes with its batch's answer
        try:
            decided = model_stage2(tr, self.config, tree, rec.fact_id)
        except MembrainError:
            return False  # stage 2 is an improvement; a failure in it must never undo the insert
        calibrate = self.unbiased(rec, self.config.stage2, "stage2")
        if answer.plan is not None:
            actions = answer.plan.bind(rec.fact_id)
            if decided is not None:
                feats, logits, mine, conf = decided
                rec.stage2 = Stage2Decision(feats, logits, mine, conf, actions, "teacher", actions, calibrate,
                                            gate_sample=calibrate or answer.move_to is None)
            elif actions:  # e.g. aspect moves, which the model does not decide: executed, not learned
                rec.applied = actions
            return False
        if decided is None:
            return False
        feats, logits, mine, conf = decided
        rec.stage2 = Stage2Decision(feats, logits, mine, conf, mine, "model", None, calibrate, gate_sample=calibrate)
        if answer.asked or not unsure(tr, self.config.stage2, "stage2", conf):
            return False
        # Unsure: Idle alone when the network proposes Idle and the linear student is sure of it.
        idle = tr.idle2.prob(feats) if not mine and len(feats.fact_tok) else 0.0
        if tr.idle2.sure(idle) and not unsure(tr, self.config.stage2, "stage2", idle):
            rec.stage2.confidence = idle
            return False
        if self.batching and not rec.audit.shared:
            rec.answer, rec.stage2 = replace(answer, batched="stage2"), None
            rec.audit = replace(rec.audit, snapshot=None)
            return False
        if self._waits(tree, rec.fact_id):
            rec.stage2.executed = []  # Idle until the parent's turn to ask comes
            return False
        return True

    def _waits(self, tree: MembrainTree, fact_id: str) -> bool:
        """Whether an unsure stage-2 decision waits instead of asking: fewer than
        ``stage2_defer - 1`` decisions under the same parent have waited since the teacher
        was last asked about it. A teacher whose stage 2 covers every fact child of the
        parent (the oracle does; an LLM shown the closure can) tidies the waiting facts too,
        with one question per ``stage2_defer`` unsure inserts there."""
        defer = self.config.stage2_defer
        if defer <= 1:
            return False
        key = (tree.node(tree.root_id).text, tree.parent(fact_id) or tree.root_id)
        with self._count_lock:
            waited = self._stage2_waits.pop(key, 0)
            if waited + 1 >= defer:
                return False
            self._stage2_waits[key] = waited + 1
            while len(self._stage2_waits) > WAITING_TRACKED:
                self._stage2_waits.popitem(last=False)
        return True

    def teacher_stage2(self, tree: MembrainTree, rec: PlaceRecord) -> None:
        """Ask the joint question now, about the tree without the new fact; its stage-2
        actions replace the model's, and a parent that differs moves the fact (both are
        carried out by :meth:`apply_stage2`)."""
        if rec.answer.asked or rec.fact_id not in tree:
            return
        # asked now: an audit has nothing left to ask
        offered, rec.audit = rec.audit.offered, replace(rec.audit, offered=None, snapshot=None)
        self.ledger.unsure["stage2"] += 1
        view = tree.copy()
        view.remove(rec.fact_id)
        plan = self.asking.ask(view, rec.new_fact, "placement", rec, offered=offered)
        if plan is None:  # no answer: the model's stage 2 stands; asked again in supervise, on view
            rec.answer = replace(rec.answer, asked=True, deferred="stage2")
            rec.audit = replace(rec.audit, snapshot=view)
            return
        rec.descent = replace(rec.descent, placed_by="teacher")
        # Stage 1 was sure at every level (it would have asked otherwise): its labels here are
        # a sample of what its gate let through, so they calibrate it. They keep its window
        # fresh after warm-up, where 2% audits alone barely renew it (a new teacher's gate
        # stayed fitted to the warm-up's mistakes). Stage 2 is not
        # calibrated on stage 1's questions the other way round: its gate never sees those
        # inserts, and they are harder for it, so its gate would shut more often than it
        # should.
        labels1 = plan_labels(self.config, view, rec.new_fact, plan, True)
        move_to = plan.parent_id if plan.parent_id != tree.parent(rec.fact_id) else None
        rec.answer = replace(rec.answer, asked=True, plan=plan, labels1=labels1, move_to=move_to)
        if move_to is None and rec.stage2 is not None:
            actions = plan.bind(rec.fact_id)
            dec = rec.stage2
            dec.teacher_actions, dec.executed, dec.by = actions, actions, "teacher"

    def apply_stage2(self, tree: MembrainTree, rec: PlaceRecord) -> list[Action]:
        """Move the fact where the teacher put it (if it said elsewhere), apply the chosen
        stage-2 actions (each re-validated) and close the record."""
        try:
            move_to = rec.answer.move_to
            if move_to is not None and rec.fact_id in tree and move_to in tree and tree.node(move_to).kind != "fact":
                tree.move(rec.fact_id, move_to)
                rec.stage2 = None
                self.propose_stage2(tree, rec)  # the teacher's actions, on the new closure
            dec = rec.stage2
            if dec is not None and dec.by == "model" and self.config.stage2.execute == "teacher":
                dec.executed = []  # the teacher gave no answer, and the model executes nothing: Idle
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
                    if dec.by == "model" and dec.shadow_actions is not None:
                        self.shadow_scores.add("stage2", same_actions(dec.executed, dec.shadow_actions),
                                       stage2_classes(dec.executed, dec.shadow_actions))
                rec.applied = self.rewrite(tree, dec.executed)
            elif rec.applied and rec.fact_id in tree:
                rec.applied = self.rewrite(tree, rec.applied)
        except MembrainError:
            pass  # stage 2 is an improvement; a failure in it must never undo the insert
        clock = rec.clock
        rec.clock = replace(clock, place_ms=(time.perf_counter() - clock.wall0 - clock.shadow_s) * 1000,
                            place_cpu_ms=max(time.process_time() - clock.cpu0 - clock.shadow_s, 0.0) * 1000)
        return rec.applied

    # ------------------------------------------------------------------ batch questions
    @property
    def batching(self) -> bool:
        """Whether unsure inserts wait for a batch question: ``config.batch`` > 1 and the
        teacher answers batches (``place_batch(facts, tree)``)."""
        return (self.config.batch or 1) > 1 and capable(self.teacher, BatchTeacher)

    def wait_in_batch(self, key: Any, rec: PlaceRecord) -> bool:
        """Queue a waiting insert under ``key`` (its namespace); whether that batch is full."""
        return bool(rec.answer.batched) and self.waiting.add(key, rec, self.config.batch or 1)

    def settle_batch(self, tree: MembrainTree, records: list[PlaceRecord], carrier: PlaceRecord | None = None) -> int:
        """Ask the batch question about the waiting inserts ``records`` and carry out its
        answer on ``tree`` (batches.batch_view, batches.answer_batch, batches.carry_out in
        turn); returns how many facts it placed. ``carrier``: the insert whose question
        this is (its ``teacher_calls`` count the requests)."""
        view, live = batch_view(tree, records)
        plans = answer_batch(self, view, live, carrier) if live else None
        return 0 if plans is None else carry_out(tree, live, plans, self.rewrite)

    def _shadow1(self, new_fact: NewFact, sub: Subtree) -> int | None:
        try:
            assert self.shadow is not None  # called only with a shadow
            i = self.shadow.choose_stage1(new_fact, sub)
            return int(i) if 0 <= int(i) < len(sub.candidates) else None
        except Exception:
            return None

    # ------------------------------------------------------------------ supervise
    def supervise(self, record: PlaceRecord, *, train: bool = True) -> SupervisionResult:
        """The slow half: the deferred audit, training, corrections. Reads no live tree.

        Labels answered during the insert's steps are queued for training as they are. An
        audited insert that the model decided alone is asked now, on the snapshot taken
        before its attach, so the teacher judges exactly the state the model decided on;
        every level of its path and its stage-2 actions are scored against the model
        (prequentially) and queued. A teacher's parent that differs from the model's
        yields a :class:`Correction` (and the teacher's actions, applied after the move);
        the same parent with other actions yields the teacher's actions. Calling it twice
        for one record does nothing the second time. With ``train=False`` the labels are
        only queued: the caller runs ``trainer.train_ready()`` itself.
        """
        res = SupervisionResult([], [], 0, 0, 0, 0.0)
        audit, answer = record.audit, record.answer
        if audit.done:
            return res
        record.audit = replace(audit, snapshot=None, done=True)
        tr = self.trainer
        view = audit.snapshot
        # An insert asked already, or with nothing decided, has nothing to audit. An insert
        # whose question got no answer (deferred) is asked now, its own placement question.
        if view is not None and (not answer.asked or answer.deferred) and (record.steps or record.stage2 is not None):
            kind = "placement" if answer.deferred else "audit"
            plan = self.asking.ask(view, record.new_fact, kind, res, shared=audit.shared, offered=audit.offered)
            if plan is not None:
                # Asked because stage 1 was unsure: a label for calibration only when unbiased.
                calibrate = answer.deferred != "stage1" or self.unbiased(record, self.config.stage1, "stage1")
                record.answer = replace(answer, plan=plan,
                                        labels1=plan_labels(self.config, view, record.new_fact, plan, calibrate))
                actions = plan.bind(record.fact_id)
                if plan.parent_id != record.placed_under:
                    res.corrections.append(Correction(record.fact_id, record.placed_under, plan.parent_id))
                    res.actions = actions
                elif record.stage2 is not None:
                    record.stage2.teacher_actions = actions
                    if not same_actions(record.stage2.model_actions, actions):
                        res.actions = actions
                elif actions:
                    res.actions = actions
        self.observe(record.answer.labels1, record.stage2)
        if train:
            t0 = time.perf_counter()
            res.steps = tr.train_ready()
            res.train_ms = (time.perf_counter() - t0) * 1000
        return res

    def observe(self, labels1: Sequence[Stage1Label], dec: Stage2Decision | None) -> None:
        """Queue an insert's labels for training (each scored first: prequential)."""
        tr = self.trainer
        for lab in labels1:
            tr.observe_stage1(lab.feats, lab.target, tr.predict_stage1(lab.feats), calibrate=lab.calibrate)
        if dec is not None and dec.teacher_actions is not None:
            labels = encode_actions(dec.feats, dec.teacher_actions)
            tr.observe_stage2(dec.feats, labels, dec.type_logits, same_actions(dec.model_actions, dec.teacher_actions),
                              calibrate=dec.calibrate, gate_sample=dec.gate_sample)

    def apply_corrections(self, tree: MembrainTree, res: SupervisionResult) -> list[Action]:
        """Apply a supervision's corrections to ``tree`` (moves first, then the teacher's
        stage-2 actions, each re-validated); returns the actions applied."""
        for c in res.corrections:
            try:
                if tree.parent(c.fact_id) == c.from_parent:
                    tree.move(c.fact_id, c.to_parent)
            except MembrainError:
                pass
        return self.rewrite(tree, res.actions) if res.actions else []

    # ------------------------------------------------------------------ checkpoints
    def save(self, path_or_buffer) -> None:
        self.trainer.save(path_or_buffer)

    def load(self, path_or_buffer) -> None:
        self.trainer.load(path_or_buffer)

    def state_bytes(self) -> bytes:
        return self.trainer.state_bytes()

    def load_bytes(self, data: bytes) -> None:
        self.trainer.load_bytes(data)


def teacher_forcing(teacher: Teacher, dim: int, *, allow_aspects: bool = False,
                    embed_label: Callable[[str], Any] | None = None, seed: int = 0) -> Learner:
    """A learner whose every decision is its teacher's (both stages ``Policy(execute="teacher",
    query="always")``; its ``fallback`` places a fact it gives no answer for): a tree built by
    the teacher alone through the insert graph, the benchmarks' reference trees."""
    told = Policy(execute="teacher", query="always")
    cfg = LearnerConfig(model=ModelConfig(dim=int(dim)), allow_aspects=allow_aspects, seed=seed, stage1=told, stage2=told)
    return Learner(teacher, cfg, embed_label=embed_label,
                   stand_in=teacher.fallback if capable(teacher, RemoteTeacher) else None)


__all__ = ["Learner", "teacher_forcing"]
