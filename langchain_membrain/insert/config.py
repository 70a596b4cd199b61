"""The configurations, validated when they are made.

- :class:`MemoryConfig`: what ``MembrainMemory(...)`` was asked for. ``MembrainMemory.__init__``
  takes these as keyword arguments (its public signature) and builds one of these first,
  so a bad setting is refused before anything is opened, embedded or asked: no database
  file is created for a memory that cannot be made.
- :class:`LearnerConfig`: the students' policies, gates, model sizes and training.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..errors import ConfigurationError, InvalidOperationError
from ..students.decoding import DecodeConfig
from ..students.nets import ModelConfig  # torch-free (models.py re-exports it)
from ..students.training_config import Policy, TrainingConfig
from ..tree.tree import check_max_height

if TYPE_CHECKING:
    from langchain_core.embeddings import Embeddings

    from ..index.config import RetrievalConfig
    from ..storage.base import Storage


DEFAULT_BATCH = 4  # inserts one batch question is about, through a memory (LearnerConfig.batch)
MAX_BATCH = 16  # the most: each new fact then still gets a fair share of the question's prompt budget


@dataclass(frozen=True)
class LearnerConfig:
    """Everything a :class:`~.learner.Learner` is configured by.

    ``apply_corrections``: the insert's supervision moves a fact (and applies the teacher's
    stage-2 actions) when a deferred audit disagrees with what the model executed.
    ``allow_aspects``: accept teacher actions that move whole aspects (the networks do not
    propose them; they are executed when the teacher decides, and never learned).
    The audit rate of an insert is ``stage1.audit_rate``.
    """

    model: ModelConfig = field(default_factory=ModelConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    # Both gates at 0.9: a decision the student takes alone should be one the teacher would
    # have taken at least 9 times in 10 (the bar for agreement). Stage 2's confidence is
    # that the *whole* action series matches the teacher (calibration.PlattCalibrator).
    stage1: Policy = field(default_factory=Policy)
    stage2: Policy = field(default_factory=lambda: Policy(confidence=0.9))
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    apply_corrections: bool = True
    allow_aspects: bool = False
    # Ask about stage 2 at most once per this many unsure decisions under the same parent:
    # the others wait, executed as Idle. 1: ask at every unsure decision.
    stage2_defer: int = 1
    # Inserts the student is unsure of wait, placed by the student meanwhile, until this many
    # have gathered in a namespace; then one question about all of them (the teacher's
    # ``place_batch``) places and tidies them. 1: each asks on its own, during its insert.
    # Only for a teacher that answers batches (an LLM's, the evaluation teachers that stand
    # for one); the offline rule asks one by one whatever this says. None: DEFAULT_BATCH
    # through a memory (whose insert graph asks the batches and whose flush() asks what
    # still waits), 1 for a Learner driven directly.
    batch: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("stage2_defer", "batch"):
            value = getattr(self, name)
            if value is None and name == "batch":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, not {value!r}")
        if self.batch is not None and self.batch > MAX_BATCH:
            raise ValueError(f"batch is at most {MAX_BATCH}, not {self.batch!r}")


def check_max_loaded(n: int) -> int:
    """``max_loaded_namespaces`` as an int, or InvalidOperationError below 1."""
    if n < 1:
        raise InvalidOperationError("max_loaded_namespaces is at least 1")
    return int(n)


def check_device(device: Any) -> str | None:
    """``device`` as the string of a torch device this machine has, None kept; a
    :class:`~.errors.ConfigurationError` that says what to pass otherwise. Imports torch only
    when a device is named."""
    if device is None:
        return None
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ConfigurationError(f"device {device!r} is not a torch device; use 'cpu' or 'cuda'") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ConfigurationError("CUDA is not available here; use device='cpu' or leave device unset")
    if parsed.type == "cuda" and parsed.index is not None and parsed.index >= torch.cuda.device_count():
        raise ConfigurationError(f"device {device!r}: this machine has {torch.cuda.device_count()} CUDA "
                                 "device(s); use 'cuda' or leave device unset")
    if parsed.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigurationError("MPS is not available here; use device='cpu' or leave device unset")
    return str(parsed)


def check_teacher_budget(seconds: Any) -> float | None:
    """``teacher_budget`` as a float, None kept; InvalidOperationError unless a number > 0."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0:
        raise InvalidOperationError(f"teacher_budget is a number of seconds > 0 or None, not {seconds!r}")
    return float(seconds)


#: The settings ``MembrainMemory.reconfigure`` may change on an open memory; every other
#: one decides what the memory is built of (its storage, embedder, index, models, students).
CHANGEABLE = frozenset({"teacher", "teacher_model", "teacher_budget", "background", "checkpoint_every", "relabel",
                        "naming_interval", "search_mode", "dedupe", "refresh_interval", "max_loaded_namespaces"})


@dataclass(frozen=True)
class MemoryConfig:
    """The settings of a :class:`~.memory.MembrainMemory`, one field per keyword argument
    of its constructor (same names, same defaults). ``__post_init__`` validates them and
    normalises the scalars (booleans, ints, floats; ``index_fields`` a tuple). Frozen: a
    memory holds the one it was made with, and the library never changes a config (a
    changed copy is ``dataclasses.replace``'s).

    Args:
        storage: None keeps everything in this process; a path opens (or creates) a
            SQLite database; a ``postgresql://`` URL a PostgreSQL one (extra
            ``[postgres]``); or an open :class:`~.storage.Storage`.
        teacher: who the models imitate: None (the offline :class:`HeuristicTeacher`),
            a LangChain chat model, ``"provider:model"`` (built by LangChain's
            ``init_chat_model``, e.g. ``"openai:gpt-4o-mini"``), an ``openai.OpenAI``
            client (with ``teacher_model``), or any :class:`~.teachers.Teacher`
            (teachers.resolve.resolve_teacher). The
            ``OPENAI_*`` environment is not read: a library makes no network call it
            was not given; the CLI reads it (``resolve_teacher(env=os.environ)``).
        embeddings: any LangChain ``Embeddings`` (default: the bundled MiniLM).
        index_fields: value fields embedded by ``put`` (default ``content``, then
            ``text``, else the value's JSON).
        learner: policies and model sizes (:class:`~.learner.LearnerConfig`).
        device: torch device for the models (default CUDA when available, else CPU):
            ``"cpu"``, ``"cuda"`` (``"cuda:1"``) or ``"mps"``; a device that torch does not
            know or that this machine lacks is refused here (``check_device``).
        background: train in a background thread (``add`` returns once the fact is
            placed); False trains inside each ``add``.
        refresh_interval: seconds between checks for other processes' writes.
        checkpoint_every: inserts between model checkpoints (with storage).
        retrieval: the search pipeline's switches and weights (:class:`RetrievalConfig`;
            for chat turns with speaker, session and date metadata,
            ``RetrievalConfig.for_chat()`` turns on the chat scorers of chat.py).
        search_mode: ``"fast"`` (posting lists and an HNSW index: sub-linear) or
            ``"exact"`` (every fact scored).
        dedupe: ``add``/``add_many`` without a key do not store a memory twice: when
            the namespace holds a fact with the same text (ignoring case, punctuation
            and spacing) and the same other value fields, its ``updated_at`` is bumped
            and its key returned (counted as ``stats()["merged"]``). ``put`` never
            merges. Texts that differ are never merged, however similar their
            embeddings: "X is allergic to peanuts" and "X is not allergic to peanuts"
            have a cosine of 0.98 with MiniLM.
        relabel: rename an aspect each time the facts below it have doubled
            (from 4 facts on), from its most typical facts (counted as
            ``stats()["relabelled"]`` when the label changes): by the offline labeller,
            or by the teacher at most once per ``naming_interval`` inserts (a counted
            naming question).
        naming_interval: inserts between two naming questions to the teacher.
        prior: start new models, and the operation student, from the pretrained
            priors shipped with the package (prior.py) instead of from scratch, when
            no checkpoint is stored.
        max_loaded_namespaces: with storage, namespaces kept in this process at once;
            the least recently used past it are unloaded and reloaded from storage when
            next used (a small namespace costs about 50 KB loaded). Without storage
            every namespace stays (memory is its only copy).
        max_training_lag: inserts the background trainer of an in-process teacher
            (``fast``) may be behind before an ``add`` waits for it, and then for
            ``jobs.LAG_WAIT_S`` (0.5 s) at most: the student so learns within a few
            inserts of its decisions where the trainer keeps up. Past that time the insert
            is queued anyway; once four times this many wait (``LAG_SKIP_FACTOR``), the
            oldest waiting insert is skipped (neither audited by the teacher nor learnt
            from; its memory is stored as placed), counted in
            ``stats().process.training_skipped``. ``add_many`` of several items (a bulk
            import) waits as long as it takes and skips nothing. With an LLM teacher adds
            never wait and nothing is skipped.
        operations: ``add``/``add_many`` without a key decide, for each item, ADD,
            UPDATE(old), DELETE(old) or IGNORE (operations.py; README, Memories that
            change): superseded and deleted facts are kept as history, ignored items in
            the namespace's log. ``True``: a student network learns the teacher's
            operations and decides alone once its calibrated gate opens; ``"teacher"``:
            the teacher decides every one; False: every item is stored as a new memory.
        shadow_teacher: for evaluation: a second teacher (same forms as ``teacher``)
            asked about every decision the student takes alone, never counted, trained
            on or executed. ``stats()["shadow_agreement"]`` then says how often it
            agreed (stage 1 per level, stage 2 per whole action series). It costs one
            teacher call per decision: with an LLM, that is the price of the check.
        max_height: how many levels below the subject a fact may lie: 4 (the default)
            allows three levels of aspects, which keeps a long chat browsable; no
            aspect is created or moved deeper, by the student or the teacher (its
            action is dropped, the fact stays where it is). None: no bound, for
            content that is deeply hierarchical (a taxonomy).
        teacher_budget: seconds one ``add`` (each item of ``add_many``, each ``put``) may
            wait for the teacher, its memory operation's and its placement's questions
            together (default 2.0; None: as long as the teacher's own ``timeout``). A
            question the teacher does not answer in time (slow, hanging, down) is decided
            by the student, or by the offline rule while the student cannot decide yet
            (before warm-up); the fact is stored and searchable at once, and the
            placement question is asked again by the background trainer, with no
            budget, like an audit: its answer corrects the placement as audits do.
            Counted in ``stats()["without_teacher"]``; see also the teacher's circuit
            breaker (``stats()["teacher"]["health"]``). Applies to LLM teachers (an
            in-process teacher answers at once).
        clock: what stamps ``created_at``, ``updated_at`` and archive times (seconds since
            the epoch); default the wall clock (``time.time``). A test or a replay of dated
            data passes its own.
        index_dir: a local directory where large namespaces' search indexes and trees are
            saved at ``close()`` and read back by the next process (storage/index_cache.py),
            in a folder per database. Default None: beside a SQLite file
            (``<file>.index``); none for PostgreSQL, whose memories then stay in the
            database only. The files hold the memories' texts and embeddings.
    """

    storage: str | os.PathLike[str] | Storage | None = None
    teacher: Any = None
    teacher_model: str | None = None
    embeddings: Embeddings | None = None
    index_fields: Sequence[str] | None = None
    learner: LearnerConfig | None = None
    device: str | None = None
    background: bool = True
    refresh_interval: float = 1.0
    checkpoint_every: int = 50
    retrieval: RetrievalConfig | None = None
    search_mode: str = "fast"
    dedupe: bool = True
    relabel: bool = True
    naming_interval: int = 50
    prior: bool = True
    max_loaded_namespaces: int = 1000
    max_training_lag: int = 4
    operations: bool | str = True
    shadow_teacher: Any = None
    max_height: int | None = 4
    teacher_budget: float | None = 2.0
    clock: Callable[[], float] = time.time
    index_dir: str | os.PathLike[str] | None = None

    def changed(self, **changes: Any) -> MemoryConfig:
        """A copy with ``changes``, validated as a new config is: only the fields of
        :data:`CHANGEABLE` may change (ConfigurationError for another, or for a name that is
        no field)."""
        fixed = sorted(set(changes) - CHANGEABLE)
        if fixed:
            unknown = [name for name in fixed if name not in {f.name for f in fields(self)}]
            raise ConfigurationError(
                f"no MemoryConfig field {unknown[0]!r}" if unknown else
                f"{', '.join(fixed)} cannot change on an open memory (it decides what the memory is built of): "
                f"open a new MembrainMemory; reconfigure() changes {', '.join(sorted(CHANGEABLE))}")
        return replace(self, **changes)

    def __post_init__(self) -> None:
        if not callable(self.clock):
            raise InvalidOperationError(f"clock is a callable returning seconds, not {self.clock!r}")
        if self.operations not in (True, False, "teacher"):
            raise InvalidOperationError(f"operations is True, False or 'teacher', not {self.operations!r}")
        if self.search_mode not in ("fast", "exact"):
            raise InvalidOperationError(f"search_mode is 'fast' or 'exact', not {self.search_mode!r}")
        if self.max_training_lag < 1:
            raise InvalidOperationError("max_training_lag is at least 1")
        if self.index_dir is not None and not isinstance(self.index_dir, (str, os.PathLike)):
            raise InvalidOperationError(f"index_dir is a directory path or None, not {self.index_dir!r}")
        normal = {
            "device": check_device(self.device), "max_height": check_max_height(self.max_height), "teacher_budget": check_teacher_budget(self.teacher_budget),
            "max_loaded_namespaces": check_max_loaded(self.max_loaded_namespaces),
            "max_training_lag": int(self.max_training_lag),
            "index_fields": tuple(self.index_fields) if self.index_fields else ("content", "text"),
            "background": bool(self.background), "dedupe": bool(self.dedupe), "relabel": bool(self.relabel),
            "prior": bool(self.prior), "refresh_interval": float(self.refresh_interval),
            "checkpoint_every": int(self.checkpoint_every), "naming_interval": int(self.naming_interval)}
        for name, value in normal.items():  # frozen: set once, here, and never again
            object.__setattr__(self, name, value)
