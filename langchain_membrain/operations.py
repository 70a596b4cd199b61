"""Memory operations: for every new item, ADD, UPDATE(old), DELETE(old) or IGNORE.

Definitions (README, Memories that change):

- The **candidates** of a new item are the ``k`` current facts of its namespace nearest to it
  by embedding cosine (its namespace only: an operation never reaches another one).
- **ADD**: the item is a new memory; it is placed in the tree as always.
- **UPDATE(old)**: the item supersedes the candidate ``old``; ``old``'s version is archived as
  history (text, times, ``valid_from``, ``valid_to`` and ``superseded_by``: the key that holds
  the new version) and the new text takes its place: same key, same parent in the tree.
- **DELETE(old)**: the item retracts ``old``; ``old`` is archived as history and leaves the
  tree. The item itself is stored as a memory when the answer says it is one (``keep``),
  else it is kept in the namespace's log.
- **IGNORE**: the item is not a memory: it states nothing (greetings, thanks, small talk, a
  question alone; :func:`states_something`); it is kept in the namespace's log
  (:meth:`~.tree.MembrainTree.log_ignored`), not in the tree.

Who decides: the memory's :class:`OperationDecider`. A student (:class:`OperationStudent`, a
small network over the item and each candidate) decides alone when its calibrated
confidence passes the gate; otherwise (and on a decaying audit schedule) the teacher is asked
with ``choose_operation(question) -> Operation``. A teacher without that method answers with
:func:`conservative_operation`, the offline rule. Every answer is validated by
:func:`validate_operation`: an unknown operation, an unknown candidate (which includes a fact
of another namespace) or a malformed answer becomes ADD, so nothing is ever lost.

Only ``add``/``add_many`` without a key run an operation; ``put(key, ...)`` keeps its
LangGraph meaning and always stores.
"""

from __future__ import annotations

import re
import threading
import warnings
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Literal, Sequence, cast

import numpy as np

from . import torchfile  # checkpoints read and written without torch
from .placement import Placement
from .teachers.budget import requests_sent
from .tree import MembrainTree

if TYPE_CHECKING:  # pragma: no cover
    from .forest import Forest

OpKind = Literal["ADD", "UPDATE", "DELETE", "IGNORE"]
OP_KINDS: tuple[str, ...] = ("ADD", "UPDATE", "DELETE", "IGNORE")


@dataclass(frozen=True)
class Operation:
    """One decision. ``target``: the candidate's key (UPDATE and DELETE only). ``keep``
    (DELETE only): whether the retracting item is itself a memory to store. ``placement``:
    where the item goes, when the teacher answered that with the operation (an LLM's one
    request per insert); the insert follows it instead of asking again. Not compared."""

    kind: OpKind
    target: str | None = None
    keep: bool = False
    placement: Placement | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in OP_KINDS:
            raise ValueError(f"an operation is one of {OP_KINDS}, not {self.kind!r}")


ADD = Operation("ADD")
IGNORE = Operation("IGNORE")


@dataclass(frozen=True)
class Candidate:
    """A current fact of the namespace shown with the question."""

    key: str
    text: str
    similarity: float  # cosine with the new item
    embedding: np.ndarray | None = field(default=None, repr=False, compare=False)
    valid_from: float = 0.0
    value: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class OperationQuestion:
    """What a teacher is asked: the new item and its candidates (nearest first)."""

    text: str
    embedding: np.ndarray | None
    candidates: tuple[Candidate, ...]
    namespace: tuple[str, ...] = ()
    value: dict[str, Any] = field(default_factory=dict, compare=False)
    #: A copy of the namespace's tree as the candidates were drawn, for teachers that are
    #: not ``fast`` (an LLM in one-call mode answers the operation and the placement of a
    #: stored item in one request); None for in-process teachers.
    tree: MembrainTree | None = field(default=None, repr=False, compare=False)

    def candidate(self, key: str) -> Candidate | None:
        return next((c for c in self.candidates if c.key == key), None)


# ------------------------------------------------------------------ the offline rule
_SMALL_TALK = frozenset("""
hi hello hey hiya yo howdy morning evening afternoon night good great nice cool awesome ok okay
okey alright fine sure yes yeah yep no nope thanks thank you thx ty cheers much so very lot a
bye goodbye see ya later soon take care have day weekend lol haha hah heh wow oh ah hmm right
indeed agreed sounds perfect got it gotcha noted welcome again appreciate the that helps helped
please np problem no worries all well glad to hear hear too same back there again you're youre
""".split())
_QUESTION_START = frozenset("""
what who whom whose where when why how which do does did is are was were can could would should
will shall may might have has had am
""".split())
_QUESTION_OPENERS = ("remind me", "tell me", "any idea", "do you remember", "do you know")
#: Words that say a stated fact replaces an earlier one ("now", "anymore", "moved"...).
CHANGE_CUES = frozenset("""
now anymore longer moved switched changed became started quit left stopped gave sold replaced
instead ended divorced retired
""".split())


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z']+", text.casefold().replace("’", "'"))


def is_small_talk(text: str) -> bool:
    """Every word of ``text`` is a greeting, thanks or filler word (e.g. "Thanks a lot!",
    "good morning :)"); a text with any content word is not small talk."""
    words = [w.replace("'", "") for w in _words(text)]
    return bool(words) and all(w in _SMALL_TALK for w in words)


def is_question(text: str) -> bool:
    """``text`` asks something: it ends with "?", or starts with an interrogative word or
    an opener like "remind me" and has no sentence after it."""
    stripped = text.strip()
    if stripped.endswith("?"):
        return True
    words = _words(stripped)
    if not words:
        return False
    low = " ".join(words)
    single_sentence = not re.search(r"[.!]\s+\S", stripped)
    return single_sentence and (words[0] in _QUESTION_START and len(words) <= 12
                                and words[0] not in ("have", "has", "had", "am", "is", "was", "do")
                                or low.startswith(_QUESTION_OPENERS))


#: A chat turn may come as "Name: text" (a transcript line). Up to three capitalised words
#: and a colon; the rule reads what was said after it.
_SPEAKER = re.compile(r"^\s*[A-Z][\w'.-]*(?:\s[A-Z][\w'.-]*){0,2}:\s+(?=\S)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def utterance(text: str) -> str:
    """``text`` without a leading speaker label ("Joanna: ..."); unchanged without one."""
    return _SPEAKER.sub("", text, count=1)


def sentences(text: str) -> list[str]:
    """The sentences of ``text``: split after ".", "!" or "?" followed by a space, and at
    line breaks; empty pieces dropped."""
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]


def states_something(text: str) -> bool:
    """Whether ``text`` (its :func:`utterance`) has a sentence that is neither a question
    (:func:`is_question`) nor small talk (:func:`is_small_talk`): a statement, which may be
    a memory. "Wow, that looks great! Is that your third one?" states something;
    "Thanks! Where do I live?" does not. A piece without a letter or digit (emoji, "...")
    states nothing; text in a script the word lists do not cover states something unless it
    ends with "?"."""
    return any(re.search(r"\w", s) and not (is_question(s) or is_small_talk(s))
               for s in sentences(utterance(text)))


@dataclass(frozen=True)
class RuleConfig:
    """Thresholds of :func:`conservative_operation` (cosines of MiniLM embeddings)."""

    update_similarity: float = 0.60  # the old fact must be this close to the new item
    update_margin: float = 0.30  # and this much closer than the second candidate


def conservative_operation(question: OperationQuestion, config: RuleConfig = RuleConfig()) -> Operation:
    """The offline teacher's rule, built to never drop a memory:

    - IGNORE only when the item states nothing (:func:`states_something` is false): every
      sentence is a question or small talk. A turn that asks something *and* says something
      ("I found a great trail yesterday. Do you know any?") is a memory: in conversation,
      questions and greetings often carry facts, and an ADD of small talk costs a row where
      an IGNORE of a fact loses it from search;
    - UPDATE(c) only when the item states a change (one of :data:`CHANGE_CUES`) and its
      nearest candidate ``c`` has cosine >= ``update_similarity`` and beats the second by
      ``update_margin`` (one clear old fact about the same thing);
    - ADD otherwise. It never answers DELETE (a retraction it cannot be sure of is stored as
      a memory, which loses nothing).
    """
    text = question.text
    if not states_something(text):
        return IGNORE
    cands = question.candidates
    if cands and set(_words(text)) & CHANGE_CUES:
        top = cands[0].similarity
        second = cands[1].similarity if len(cands) > 1 else -1.0
        if top >= config.update_similarity and top - second >= config.update_margin:
            return Operation("UPDATE", cands[0].key)
    return ADD


def rule_identity(config: RuleConfig = RuleConfig()) -> str:
    """Who :func:`conservative_operation` is, for deciding whether a shipped operation
    prior was taught by it: its thresholds and a digest of the word lists it reads (a
    changed list changes its answers)."""
    import hashlib
    import json

    words = "|".join(" ".join(sorted(w)) for w in (_SMALL_TALK, _QUESTION_START, _QUESTION_OPENERS, CHANGE_CUES))
    digest = hashlib.sha256(words.encode()).hexdigest()[:16]
    return f"conservative_operation{json.dumps(asdict(config), sort_keys=True)} words {digest}"


def validate_operation(answer: Any, question: OperationQuestion) -> tuple[Operation, str | None]:
    """A teacher's answer as a valid Operation for ``question``, and the reason it was
    rejected (None when it was valid). Rejected answers become ADD: an unknown operation, a
    target that is not one of the question's candidates (a fact of another namespace never
    is), a missing target, or anything that is not an :class:`Operation` or its dict form
    ``{"operation": ..., "target": ..., "keep": ...}``."""
    if isinstance(answer, dict):
        try:
            kind = str(answer.get("operation", answer.get("kind", ""))).upper()
            target = answer.get("target")
            answer = Operation(cast(OpKind, kind), None if target in (None, "") else str(target),
                               bool(answer.get("keep", False)))  # __post_init__ rejects an unknown kind
        except (ValueError, TypeError) as exc:
            return ADD, f"malformed operation: {exc}"
    if not isinstance(answer, Operation):
        return ADD, f"an operation answer is an Operation, got {type(answer).__name__}"
    if answer.kind in ("UPDATE", "DELETE"):
        if answer.target is None:
            return ADD, f"{answer.kind} without a target"
        if question.candidate(answer.target) is None:
            return ADD, f"{answer.kind} of {answer.target!r}, which is not a candidate"
        return answer, None
    return Operation(answer.kind, placement=answer.placement), None


def ask_teacher(teacher: Any, question: OperationQuestion) -> tuple[Operation, str | None]:
    """The teacher's validated answer (see :func:`validate_operation`); a teacher without
    ``choose_operation`` answers with :func:`conservative_operation`; one that raises gives
    ADD with the error as the reason. A guarded LLM teacher is asked through
    ``try_operation``, which raises where ``choose_operation`` would answer with its
    fallback's rule: such an answer is not the teacher's."""
    choose = getattr(teacher, "try_operation", None) or getattr(teacher, "choose_operation", None)
    if not callable(choose):
        return conservative_operation(question), None
    try:
        answer = choose(question)
    except Exception as exc:  # noqa: BLE001 - an answer is untrusted: any failure is ADD
        return ADD, f"{type(exc).__name__}: {exc}"
    return validate_operation(answer, question)


# ------------------------------------------------------------------ candidates
def candidates_for(tree: MembrainTree, nearest: Sequence[tuple[str, float]]) -> tuple[Candidate, ...]:
    """The question's candidates from ``(key, cosine)`` pairs (nearest first), keeping the
    current facts of ``tree`` only."""
    out = []
    for key, sim in nearest:
        if key in tree and tree.node(key).kind == "fact":
            node = tree.node(key)
            out.append(Candidate(key, node.text, float(sim), node.embedding, tree.valid_from(key),
                                 dict(node.metadata.get("value") or {})))
    return tuple(out)


# ------------------------------------------------------------------ applying
def execute(forest: Forest, decider: OperationDecider, ns: tuple[str, ...], value: dict[str, Any],
            text: str, vec: np.ndarray, *, place: Callable[[tuple[str, ...], dict[str, Any], str, np.ndarray], str],
            audit: bool | None = None) -> str | None:
    """Decide and apply the operation for one item added without a key; returns the key it
    now has, or None for ADD (the caller then places it as always). Call holding the
    namespace's insert lock. ``place`` places an item through the insert graph (a DELETE
    that keeps its item places it) and returns its key. ``audit``: the caller's audit draw
    for this item (see :meth:`OperationDecider.decide`).

    Crash safety: every change is one committed write (``forest.mutate``). An UPDATE
    archives the old version and writes the new one in the same transaction. A DELETE whose
    item is kept places the item first and retires the old fact after, so a crash between
    the two leaves both stored (today's behaviour), never neither.
    """
    with forest.lock(ns):
        tree = forest.tree(ns, create=False)
        index = forest.index(ns)
        nearest = index.nearest(vec, k=decider.k) if tree is not None and index is not None else []
        # the index of a namespace is keyed by its tree's fact ids
        cands = candidates_for(tree, cast("list[tuple[str, float]]", nearest)) if tree is not None else ()
        snapshot = None
        if not getattr(decider.teacher, "fast", False):  # O(n), beside an LLM's latency
            snapshot = tree.copy() if tree is not None else MembrainTree("/".join(ns))
    question = OperationQuestion(text, vec, cands, ns, value, snapshot)
    op = decider.decide(question, audit=audit)
    meta = {"value": value, "indexed": True}
    if op.kind == "ADD":
        return None
    if op.kind == "IGNORE":
        return forest.mutate(ns, lambda t: t.log_ignored(None, text, embedding=vec, metadata=meta))
    target = op.target
    if op.kind == "UPDATE":
        def update(t: MembrainTree) -> str | None:
            if target is None or target not in t or t.node(target).kind != "fact":
                return None  # gone meanwhile (another process): fall back to ADD
            t.supersede(target, text, embedding=vec, metadata=meta)
            return target

        return forest.mutate(ns, update)
    # DELETE
    new_key = place(ns, value, text, vec) if op.keep else None

    def delete(t: MembrainTree) -> str | None:
        logged = None
        if not op.keep:
            logged = t.log_ignored(None, text, embedding=vec, metadata=meta, reason="retraction")
        if target is not None and target in t and t.node(target).kind == "fact":
            t.retire(target, superseded_by=new_key or logged)
        return new_key or logged

    return forest.mutate(ns, delete)


# ------------------------------------------------------------------ the decider
@dataclass
class OperationCounters:
    """What ``stats()["operations"]`` reports."""

    decisions: int = 0
    asked: int = 0  # teacher questions about the operation (requests, retries included, with an LLM)
    student_decided: int = 0  # decisions the student took alone (gate open)
    compared: int = 0  # answered questions the student had proposed an answer for
    agreement_hits: int = 0  # student == teacher, over the compared decisions
    teacher_failures: int = 0  # questions without a usable answer (decided without the teacher)
    teacher_skipped: int = 0  # of those, questions not sent (breaker open, budget spent)
    fallback_decided: int = 0  # stored as ADD because the teacher gave no usable answer
    by_kind: dict[str, int] = field(default_factory=lambda: {k: 0 for k in OP_KINDS})
    last_failure: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"decisions": self.decisions, "teacher_questions": self.asked,
                "student_decided": self.student_decided,
                "student_share": self.student_decided / max(self.decisions, 1),
                "agreement": self.agreement_hits / self.compared if self.compared else None,
                "compared": self.compared, "teacher_failures": self.teacher_failures,
                "teacher_skipped": self.teacher_skipped, "fallback_decided": self.fallback_decided,
                "by_kind": dict(self.by_kind), "last_failure": self.last_failure}


@dataclass(frozen=True)
class OperationDecision:
    """One item's decided operation: ``by`` "student" (it decided alone), "teacher" (the
    teacher's answer) or "fallback" (the teacher was asked and gave no usable answer, or was
    not asked while it is down or past the insert's budget: the item is stored as a new
    memory, ADD, which loses nothing; when the question was only an audit of a proposal the
    student could take alone, the student's answer stands, ``by`` "student"); ``candidates``: the keys of the candidates shown,
    nearest first; ``asked``: whether the teacher was asked; ``requests``: the requests sent
    for it (None: not asked, or an in-process teacher); ``answered``: whether the teacher
    gave the answer."""

    operation: Operation
    by: Literal["student", "teacher", "fallback"]
    candidates: tuple[str, ...] = ()
    asked: bool = False
    requests: int | None = None
    answered: bool = False


class OperationDecider:
    """Decides each item's operation: the student when its gate is open, else the teacher.

    Without a student (``student=None``) every decision is the teacher's. With the offline
    heuristic teacher the decisions cost nothing, so the default memory asks it every time
    and the student (if any) only learns; see :class:`OperationStudent` for the gate.
    """

    def __init__(self, teacher: Any, *, k: int = 5, student: Any = None):
        self.teacher = teacher
        self.k = int(k)
        self.student = student
        self.counters = OperationCounters()
        self.last: OperationDecision | None = None  # the latest decision (a new object each time)
        self._guard = threading.Lock()
        self._local = threading.local()

    def decide(self, question: OperationQuestion, *, audit: bool | None = None) -> Operation:
        """The item's operation. ``audit``: whether this item is an audit (the teacher is
        asked whatever the student's confidence), when the caller draws it (the memory
        draws one per insert for the operation and the placement together); None: the
        student draws its own at its ``audit_rate``."""
        c = self.counters
        student_op, trusted, gate = (None, False, False)
        if self.student is not None:
            gate = self.student.gate_open()
            student_op, trusted = self.student.propose(question)
        can_audit = trusted and student_op is not None
        audit = can_audit and (self.student.audit_due() if audit is None else audit)
        alone = can_audit and not audit
        if alone:
            assert student_op is not None  # alone implies can_audit
            op = student_op
            with self._guard:
                c.student_decided += 1
        else:
            before = requests_sent(self.teacher)
            op, failure = ask_teacher(self.teacher, question)
            after = requests_sent(self.teacher)
            requests = None if before is None or after is None else after - before
            by: Literal["student", "teacher", "fallback"] = "teacher"
            with self._guard:
                c.asked += 1 if requests is None else requests
                if failure is not None:
                    # No answer of the teacher's: not a label, not compared. The student's
                    # own answer when it could have decided alone (this was its audit), else
                    # ADD (ask_teacher's), which loses nothing.
                    c.teacher_failures += 1
                    c.teacher_skipped += requests == 0
                    c.last_failure = failure
                    if can_audit:
                        assert student_op is not None  # can_audit implies a proposal
                        op, by = student_op, "student"
                    else:
                        by = "fallback"
                        c.fallback_decided += 1
                elif student_op is not None:
                    c.compared += 1
                    c.agreement_hits += int(student_op == op)
            if self.student is not None and failure is None:
                # Asked *because* the student was unsure (its gate open, its answer below
                # the bar): a label it is not fairly measured on (see learn).
                self.student.learn(question, op, student_op, unbiased=audit or not gate)
        with self._guard:
            c.decisions += 1
            c.by_kind[op.kind] += 1
            decision = OperationDecision(op, "student" if alone else by, tuple(c.key for c in question.candidates),
                                         not alone, None if alone else requests, not alone and failure is None)
            self.last = decision
        self._local.decision = decision
        return op

    def last_here(self) -> OperationDecision | None:
        """The latest decision taken on the calling thread (``last`` is any thread's)."""
        return getattr(self._local, "decision", None)

    def stats(self) -> dict[str, Any]:
        out = self.counters.as_dict()
        if self.student is not None:
            out["student"] = self.student.stats()
        return out


# ------------------------------------------------------------------ the student
RETRACTION_CUES = frozenset("forget scratch ignore cancel cancelled off never died sold gave gone".split())


def item_flags(text: str) -> np.ndarray:
    """Cheap lexical facts about an item the student reads beside its embedding: question,
    small talk, whether it states anything at all (:func:`states_something`: not every
    sentence a question or small talk), a change cue, a retraction cue, and its length
    (words / 20, capped at 2). Any teacher ignores items that state nothing more often than
    others; the embedding alone blurs "Thanks! Where do I live?" with "I live in Leeds"."""
    words = set(_words(text))
    return np.array([float(is_question(text)), float(is_small_talk(text)), float(states_something(text)),
                     float(bool(words & CHANGE_CUES)), float(bool(words & RETRACTION_CUES)),
                     min(len(_words(text)) / 20.0, 2.0)], np.float32)


N_FLAGS = 6  # len(item_flags(...))
N_PAIR = 5  # per candidate: cosine, gap to the nearest, margin over the best other, rank, present


class _StudentNet:
    """The operation network (models.OperationNet). Weights loaded from a checkpoint or the
    prior run in numpy (nets.operation_logits: the same logits, to float32 rounding) until
    the network is first trained; torch is imported then, or at its first use for a random
    initialisation. In torch, single items run through a TorchScript trace: the trace
    shares the network's parameters, so training reaches it, and it cuts the Python overhead
    of the insert's hot path (as the stages' inference does, training.OnlineTrainer._inference)."""

    def __init__(self, dim: int, k: int, hidden: int = 64, seed: int = 0, weights: Any = None):
        self.k, self.dim, self.hidden, self.seed = k, dim, hidden, seed
        self.weights = weights  # the loaded state dict (numpy) while the network is not in torch
        self._network: Any = None
        self._traced: Any = None  # None: not yet traced; False: failed, run eagerly

    @property
    def built(self) -> bool:
        """Whether the network is in torch yet."""
        return self._network is not None

    @property
    def torch(self) -> Any:
        import torch

        return torch

    @property
    def network(self) -> Any:
        """The torch module, built on first use (from ``weights`` when loaded, else a random
        initialisation seeded by ``seed``)."""
        if self._network is None:
            import torch

            from .models import OperationNet
            torch.manual_seed(self.seed)
            network = OperationNet(self.dim, self.k, N_FLAGS, N_PAIR, self.hidden)
            if self.weights is not None:
                network.load_state_dict(torchfile.as_tensors(self.weights))
            self._network, self.weights = network, None
        return self._network

    @property
    def params(self) -> list:
        return list(self.network.parameters())

    def _tensors(self, batch: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]) -> list:
        # from_numpy wraps the stacked arrays without a second copy (the insert's hot path).
        return [self.torch.from_numpy(np.stack([b[i] for b in batch]).astype(np.float32, copy=False))
                for i in range(4)]

    def logits(self, batch: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]):
        """Logits (B, 2 + 3k), masked with -inf where a candidate is missing (training)."""
        return self.network(*self._tensors(batch))

    def infer(self, row: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
        """One item's logits, without autograd: in numpy while the loaded weights are not
        in torch, else through the trace where it could be made."""
        if self._network is None and self.weights is not None:
            from .minilm import blas_threads
            from .nets import operation_logits

            with blas_threads(1):
                return operation_logits(self.weights, *row).astype(np.float64)
        torch = self.torch
        args = self._tensors([row])
        self.network  # noqa: B018 - built outside inference mode (its parameters must train)
        with torch.inference_mode():
            if self._traced is None:
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        self._traced = torch.jit.trace(self.network, tuple(args), check_trace=False)
                except Exception:  # noqa: BLE001 - the eager network is the same computation
                    self._traced = False
            out = (self.network if self._traced is False else self._traced)(*args)
        return out[0].numpy().astype(np.float64)


class OperationStudent:
    """The small network that learns the teacher's operations online (README, Memories
    that change), with the stages' gate: it decides alone once it has seen ``policy.warmup``
    labels and its temperature-calibrated probability (calibration.Calibrator) of its answer is
    at least ``policy.confidence``; a share ``policy.audit_rate`` of those decisions still
    goes to the teacher so agreement stays measured. Trained with cross-entropy on every
    teacher answer, in batches of ``batch`` labels plus a replay sample.

    ``prior``: called once, when the network is first needed, for the shipped prior
    (prior.py) as ``(state bytes, trusted)``, or None. A trusted prior (taught by the teacher
    this student learns from) keeps its calibration, label count and recent agreement, so the
    gate may be open from the first item; an untrusted one gives only its weights, and the
    gate stays closed until this teacher's own answers open it."""

    def __init__(self, k: int = 5, *, policy: Any = None, batch: int = 8, steps: int = 8, lr: float = 1e-2,
                 replay: int = 512, window: int = 64, seed: int = 0, threads: int | None = 1,
                 prior: Callable[[], tuple[bytes, bool] | None] | None = None):
        from .calibration import Calibrator
        from .training import Policy

        self.k = int(k)
        self.policy = policy or Policy(confidence=0.9, audit_rate=0.02, warmup=48)
        self.batch, self.steps, self.lr, self.replay_size = int(batch), int(steps), float(lr), int(replay)
        self.calibrator = Calibrator(128)
        self.net: _StudentNet | None = None
        self._opt: Any = None  # torch's Adam, made when the network first trains (it imports torch._dynamo)
        self._opt_state: Any = None  # the loaded optimiser state (numpy) until then
        self._pending: list = []
        self._replay: list = []
        self._rng = np.random.default_rng(seed)
        self.seed = seed
        self.threads = threads  # CPU threads of the network's forwards and steps (models.torch_threads)
        self.labelled = 0
        self.agreed = 0
        self._recent: deque[int] = deque(maxlen=int(window))  # 1 = agreed, over recent labels
        self.optimiser_steps = 0
        self._lock = threading.RLock()
        self._prior = prior
        self.prior_used: str | None = None  # "trusted", "weights only" or None (stats())

    # -- encoding
    def encode(self, q: OperationQuestion) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        if q.embedding is None:
            return None
        e = np.asarray(q.embedding, np.float32)
        dim = e.size
        cands = np.zeros((self.k, dim), np.float32)
        num = np.zeros((self.k, N_PAIR), np.float32)
        shown = q.candidates[: self.k]
        sims = [c.similarity for c in shown]
        top = sims[0] if sims else 0.0
        for i, c in enumerate(shown):
            if c.embedding is None:
                continue
            # how clearly this candidate is *the* old fact the item is about: its lead over
            # the best other candidate (-1 when it is the only one, as a cosine's floor)
            best_other = max((s for j, s in enumerate(sims) if j != i), default=-1.0)
            cands[i] = c.embedding
            num[i] = (c.similarity, top - c.similarity, c.similarity - best_other, i / self.k, 1.0)
        return e, item_flags(q.text), cands, num

    def label_index(self, q: OperationQuestion, op: Operation) -> int | None:
        if op.kind == "ADD":
            return 0
        if op.kind == "IGNORE":
            return 1
        keys = [c.key for c in q.candidates[: self.k]]
        if op.target not in keys:
            return None
        j = keys.index(op.target)
        offset = 2 if op.kind == "UPDATE" else (2 + self.k if op.keep else 2 + 2 * self.k)
        return offset + j

    def operation_of(self, q: OperationQuestion, index: int) -> Operation:
        if index == 0:
            return ADD
        if index == 1:
            return IGNORE
        j = (index - 2) % self.k
        kind = (index - 2) // self.k
        key = q.candidates[j].key
        return Operation("UPDATE", key) if kind == 0 else Operation("DELETE", key, keep=kind == 1)

    def _ensure(self, dim: int) -> _StudentNet:
        if self.net is None and self._prior is not None:
            found, self._prior = self._prior(), None
            if found is not None:
                self._start_from_prior(*found, dim=dim)
        if self.net is None:
            self.net = _StudentNet(dim, self.k, seed=self.seed)  # a random initialisation, in torch
        return self.net

    def _optimiser(self) -> Any:
        """Adam over the network (built here, with the loaded state when there is one)."""
        if self._opt is None:
            import torch

            assert self.net is not None  # after _ensure (_train) or under state_bytes' check
            opt = torch.optim.Adam(self.net.params, lr=self.lr, weight_decay=1e-4)
            if self._opt_state is not None:
                opt.load_state_dict(torchfile.as_tensors(self._opt_state))
            self._opt, self._opt_state = opt, None
        return self._opt

    # -- deciding
    def propose(self, q: OperationQuestion) -> tuple[Operation | None, bool]:
        """(the student's operation, whether the gate lets it decide alone)."""
        row = self.encode(q)
        if row is None:
            return None, False
        with self._lock:
            net = self._ensure(row[0].size)
            if net.built or net.weights is None:
                from .models import torch_threads  # torch is imported lazily in this module

                with torch_threads(self.threads):
                    logits = net.infer(row)
            else:
                logits = net.infer(row)  # numpy (see _StudentNet)
            self._last_logits = logits
            probs = self.calibrator.probs(logits)
            best = int(np.argmax(probs))
            return self.operation_of(q, best), self.gate_open() and probs[best] >= self.policy.confidence

    def gate_open(self) -> bool:
        """Whether the student may decide alone at all: after ``policy.warmup`` labels, and
        while its agreement with the teacher over the recent window is at least
        ``policy.confidence`` (a calibrated probability alone can be fitted to a run of
        easy, majority-class answers)."""
        recent = self._recent
        return (self.labelled >= self.policy.warmup and len(recent) == recent.maxlen
                and sum(recent) / len(recent) >= self.policy.confidence)

    def audit_due(self) -> bool:
        return bool(self._rng.random() < self.policy.audit_rate)

    # -- learning
    def learn(self, q: OperationQuestion, op: Operation, proposed: Operation | None, *,
              unbiased: bool = True) -> None:
        """Learn the teacher's answer ``op`` to ``q`` (``proposed``: the student's own).
        Every label trains the network; only an ``unbiased`` one (asked whatever the
        student's confidence: warm-up, a closed gate, an audit, teacher forcing) joins the
        agreement window and the calibration, as the stages' calibration does: the items
        asked because the student was unsure are its hardest, and counting them would
        measure its agreement on those alone and shut the gate on a student that decides
        the rest well."""
        row = self.encode(q)
        label = self.label_index(q, op)
        if row is None or label is None:
            return
        with self._lock:
            self._ensure(row[0].size)
            self.labelled += 1
            self.agreed += int(proposed == op)
            if proposed is not None and unbiased:
                self._recent.append(int(proposed == op))
                self.calibrator.add(self._last_logits, label)
                self.calibrator.maybe_fit(16)
            self._pending.append((row, label))
            if len(self._pending) >= self.batch:
                from .models import torch_threads  # training: torch from here on

                with torch_threads(self.threads):
                    self._train()

    def _train(self) -> None:
        assert self.net is not None  # learn calls _ensure first
        torch = self.net.torch
        opt = self._optimiser()
        data = self._pending
        self._replay.extend(data)
        if len(self._replay) > self.replay_size:
            del self._replay[: len(self._replay) - self.replay_size]
        self._pending = []
        for _ in range(self.steps):
            picks = [self._replay[i] for i in self._rng.choice(len(self._replay), min(32, len(self._replay)),
                                                               replace=False)]
            batch = data + picks
            logits = self.net.logits([b[0] for b in batch])
            target = torch.tensor([b[1] for b in batch])
            loss = torch.nn.functional.cross_entropy(logits, target)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.net.params, 1.0)
            opt.step()
            self.optimiser_steps += 1

    # -- checkpoints
    STATE_FORMAT = 2  # 2: the states-something flag and the margin feature

    def state_bytes(self, *, optimiser: bool = True) -> bytes:
        """The student's weights, optimiser, calibration and counters (b"" before its
        first question): what the memory saves as the ``operations`` checkpoint. A prior
        is written without the optimiser (two thirds of the bytes): a memory starting from
        it fine-tunes with a fresh one."""
        with self._lock:
            if self.net is None:
                return b""
            import io

            # Without torch while the network and the optimiser are still the loaded ones
            # (nothing trained here): torchfile writes what torch.save would.
            plain = not self.net.built and (not optimiser or (self._opt is None and self._opt_state is not None))
            state = {"format": self.STATE_FORMAT, "dim": self.net.dim, "k": self.k,
                     "modules": self.net.weights if plain else self.net.network.state_dict(),
                     "temperature": self.calibrator.temperature,
                     "labelled": self.labelled, "agreed": self.agreed, "recent": list(self._recent),
                     "steps": self.optimiser_steps}
            if optimiser:
                state["optimiser"] = self._opt_state if plain else self._optimiser().state_dict()
            if plain:
                return torchfile.save(state)
            buf = io.BytesIO()
            self.net.torch.save(state, buf)
            return buf.getvalue()

    def load_bytes(self, data: bytes) -> None:
        """Restore :meth:`state_bytes`; CheckpointError (nothing changed) when the bytes are
        not a student of this shape."""
        from .errors import CheckpointError

        if not data:
            return
        from .nets import check_weights, operation_shapes

        try:
            try:  # without torch (torchfile); what it does not understand, torch reads
                state = torchfile.load(data)
            except torchfile.UnsupportedFile:
                import io

                import torch

                state = torchfile.as_numpy(torch.load(io.BytesIO(data), weights_only=True))
            if not isinstance(state, dict) or state.get("format") != self.STATE_FORMAT or state.get("k") != self.k:
                raise CheckpointError("not an operation-student checkpoint of this shape")
            dim = int(state["dim"])
            weights = state["modules"]
            check_weights(weights, operation_shapes(dim, self.k, N_FLAGS, N_PAIR))  # as load_state_dict checks
            net = _StudentNet(dim, self.k, seed=self.seed, weights=weights)
            opt_state = state.get("optimiser")
            if opt_state is not None:  # as Adam.load_state_dict checks: one group of every parameter
                groups = opt_state["param_groups"]
                if len(groups) != 1 or len(groups[0]["params"]) != len(weights):
                    raise CheckpointError("the optimiser state does not fit the network")
        except CheckpointError:
            raise
        except Exception as exc:  # noqa: BLE001 - any unreadable checkpoint is the same error
            raise CheckpointError(f"unreadable operation-student checkpoint: {exc}") from None
        with self._lock:
            self._prior = None  # a checkpoint replaces the prior
            self.net, self._opt, self._opt_state = net, None, opt_state
            self.calibrator.temperature = float(state["temperature"])
            self.labelled, self.agreed = int(state["labelled"]), int(state["agreed"])
            self._recent.clear()
            self._recent.extend(int(x) for x in state["recent"])
            self.optimiser_steps = int(state["steps"])

    def _start_from_prior(self, data: bytes, trusted: bool, *, dim: int) -> None:
        from .errors import CheckpointError

        try:
            self.load_bytes(data)
        except CheckpointError:  # a prior of another shape: start from scratch
            return
        if self.net is None or self.net.dim != dim:  # another embedder's prior
            self.net = self._opt = self._opt_state = None
            self.optimiser_steps = 0
            self._forget_teacher()
            return
        if not trusted:
            self._forget_teacher()
        self.prior_used = "trusted" if trusted else "weights only"

    def _forget_teacher(self) -> None:
        """Drop what was learned about a teacher's answers beyond the weights: the label
        counts, the recent agreement and the calibration (the gate closes again)."""
        self.labelled = self.agreed = 0
        self._recent.clear()
        self.calibrator.temperature = 1.0

    def stats(self) -> dict[str, Any]:
        return {"prior": self.prior_used, "labelled": self.labelled,
                "agreement": self.agreed / self.labelled if self.labelled else None,
                "optimiser_steps": self.optimiser_steps, "temperature": self.calibrator.temperature,
                "recent_agreement": sum(self._recent) / len(self._recent) if self._recent else None,
                "gate_open": self.gate_open()}
