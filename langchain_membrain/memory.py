"""`MembrainMemory`: the one-line entry point.

A memory is a forest: one :class:`~.tree.MembrainTree` per namespace (a tuple of strings;
``"a/b"`` is accepted for ``("a", "b")``). Each fact node's id is its key, its text is the
text that was embedded, and its metadata holds

- ``"value"``: the value as the caller stored it (a dict; ``add(text)`` stores
  ``{"content": text, **metadata}``),
- ``"indexed"``: False for values stored without an embedding (not placed by the models).

Every public method is a thin wrapper over a handful of private operations that take the
namespace's lock, so many threads can add and search at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import os
import queue
import re
import sys
import threading
import time
from collections import deque
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from langchain_core.embeddings import Embeddings
from langgraph.store.base import get_text_at_path, tokenize_path

from .embeddings import EmbeddingCache, MiniLMEmbeddings, embed_texts
from .errors import CheckpointError, DimensionError, InvalidOperationError, MembrainError, ReadOnlyError
from .filters import check_filter, matches
from .forest import Forest, RefreshCounts
from .graph import InsertPipeline
from .inputs import Namespace, as_namespace, as_timestamp, check_text, memory_value
from .inputs import json_copy as _json_copy
from .operations import OperationDecider, OperationDecision, OperationStudent, execute as execute_operation
from .labels import LABELLED_FACTS, offline_label, stale_aspects, typical_facts
from .prior import load_operation_prior, load_prior, teacher_identity
from .records import MemoryRecord
from .pipeline import QUESTION_KINDS, Learner, LearnerConfig, PlaceRecord, cosine, relabel_avoid
from .retrieval import FactIndex, RetrievalConfig, relevance
from .storage import Storage, open_storage
from .stats import Counters, ForestStats, LearningStats, MemoryStats, read_stored
from .teachers.base import Teacher
from .teachers.budget import deadline as teacher_deadline
from .teachers.resolve import resolve_teacher  # noqa: F401 - the one resolver, importable from here as before
from .tree import HISTORY_KEY, MembrainTree, Node, check_max_height

logger = logging.getLogger("langchain_membrain")

CHECKPOINT_NAME = "models"  # one pair of networks per database, shared by its namespaces
OPERATIONS_CHECKPOINT = "operations"  # the operation student (operations.py), saved beside them


def _normalised(text: str) -> str:
    """``text`` as duplicates are compared: casefolded words, apostrophes, punctuation and
    spacing dropped ("im ALLERGIC to peanuts!!" is "I'm allergic to peanuts")."""
    return " ".join(re.findall(r"\w+", re.sub(r"['’]", "", text.casefold()))) or text.strip()


def _saved_questions(counters: dict[str, Any]) -> dict[str, int]:
    """Teacher questions by kind, as a checkpoint's counters recorded them (older
    checkpoints kept only the totals: their joint-question total counts as placements)."""
    saved = counters.get("questions")
    if isinstance(saved, dict):
        return {k: int(saved.get(k, 0)) for k in QUESTION_KINDS}
    return {"placement": int(counters.get("teacher_calls", 0)), "naming": int(counters.get("naming_calls", 0))}


@contextlib.contextmanager
def _progress(enabled: bool, total: int) -> Iterator[Callable[[], None]]:
    """A rich progress bar (rate and ETA) when enabled; yields the function that advances it."""
    if not enabled:
        yield lambda: None
        return
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn)

    columns = [TextColumn("adding memories"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[rate]}"), TimeRemainingColumn()]
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("add", total=total, rate="")
        start = time.perf_counter()

        def advance() -> None:
            done = bar.tasks[0].completed + 1
            bar.update(task, advance=1, rate=f"{done / max(time.perf_counter() - start, 1e-9):.0f}/s")

        yield advance


class _InsertHost:
    """What a memory's insert graph may use of it (:class:`~.graph.InsertHost`)."""

    def __init__(self, memory: "MembrainMemory"):
        self._memory = memory

    @property
    def forest(self) -> Forest:
        return self._memory._forest

    def embed(self, texts: list[str]) -> np.ndarray:
        return self._memory._embed(texts)

    @contextlib.contextmanager
    def learner(self, dim: int | None = None) -> Iterator[Learner]:
        memory = self._memory
        with memory._learner_lock:
            if dim is not None:
                yield memory._learner_for(dim)
            else:
                assert memory._learner is not None, "the learner is created by the insert's embed step"
                yield memory._learner

    def placed(self, ns: Namespace, record: PlaceRecord) -> None:
        self._memory._after_place(ns, record)


class MembrainMemory:
    """Long-term memory as a forest of trees, one per namespace.

    ``MembrainMemory()`` works offline with no arguments: the bundled MiniLM embedder, the
    heuristic teacher, everything in memory.
    """

    def __init__(
        self,
        storage: str | os.PathLike[str] | Storage | None = None,
        *,
        teacher: Any = None,
        teacher_model: str | None = None,
        embeddings: Embeddings | None = None,
        index_fields: Sequence[str] | None = None,
        learner: LearnerConfig | None = None,
        device: str | None = None,
        background: bool = True,
        refresh_interval: float = 1.0,
        checkpoint_every: int = 50,
        retrieval: RetrievalConfig | None = None,
        search_mode: str = "fast",
        dedupe: bool = True,
        relabel: bool = True,
        naming_interval: int = 50,
        prior: bool = True,
        max_loaded_namespaces: int = 1000,
        max_training_lag: int = 4,
        operations: bool | str = True,
        shadow_teacher: Any = None,
        max_height: int | None = 4,
        teacher_budget: float | None = 2.0,
    ):
        """
        Args:
            storage: None keeps everything in this process; a path opens (or creates) a
                SQLite database; a ``postgresql://`` URL a PostgreSQL one (extra
                ``[postgres]``); or an open :class:`~.storage.Storage`.
            teacher: who the models imitate: None (the offline :class:`HeuristicTeacher`),
                a LangChain chat model, an ``openai.OpenAI`` client (with ``teacher_model``),
                or any :class:`~.teachers.Teacher` (teachers.resolve.resolve_teacher). The
                ``OPENAI_*`` environment is not read: a library makes no network call it
                was not given; the CLI reads it (``resolve_teacher(env=os.environ)``).
            embeddings: any LangChain ``Embeddings`` (default: the bundled MiniLM).
            index_fields: value fields embedded by ``put`` (default ``content``, then
                ``text``, else the value's JSON).
            learner: policies and model sizes (:class:`~.pipeline.LearnerConfig`).
            device: torch device for the models (default CUDA when available, else CPU).
            background: train in a background thread (``add`` returns once the fact is
                placed); False trains inside each ``add``.
            refresh_interval: seconds between checks for other processes' writes.
            checkpoint_every: inserts between model checkpoints (with storage).
            retrieval: the search pipeline's switches and weights (:class:`RetrievalConfig`).
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
            max_loaded_namespaces: with storage, namespaces kept in this process at once;
                the least recently used past it are unloaded and reloaded from storage when
                next used (a small namespace costs about 50 KB loaded). Without storage
                every namespace stays (memory is its only copy).
            prior: start new models, and the operation student, from the pretrained
                priors shipped with the package (prior.py) instead of from scratch, when
                no checkpoint is stored.
            max_training_lag: inserts the background trainer may be behind before an
                ``add`` waits for it (its labels are learned from within this many inserts),
                with an in-process teacher (``fast``); with an LLM teacher adds never wait.
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
            max_height: how many levels below the subject a fact may lie: 4 (the default)
                allows three levels of aspects, which keeps a long chat browsable; no
                aspect is created or moved deeper, by the student or the teacher (its
                action is dropped, the fact stays where it is). None: no bound, for
                content that is deeply hierarchical (a taxonomy).
        """
        max_height = check_max_height(max_height)
        if teacher_budget is not None and (isinstance(teacher_budget, bool) or not isinstance(teacher_budget, (int, float))
                                           or not teacher_budget > 0):
            raise InvalidOperationError(f"teacher_budget is a number of seconds > 0 or None, not {teacher_budget!r}")
        self.teacher_budget = None if teacher_budget is None else float(teacher_budget)
        self._local = threading.local()  # per thread: whether the current add went without the teacher
        self.embeddings = embeddings if embeddings is not None else MiniLMEmbeddings()
        self.index_fields = list(index_fields) if index_fields else ["content", "text"]
        # Labels (aspect names and their n-gram candidates) are embedded through a cache:
        # naming and renaming embed the same short phrases again and again.
        self._embed_label = EmbeddingCache(self._embed)
        self.teacher = resolve_teacher(teacher, teacher_model, embed=self._embed_label)
        from .teachers.heuristic import HeuristicTeacher

        # Whether the offline labeller may rename aspects between the teacher's naming
        # questions: only when the offline rule is the teacher (see _relabel).
        self._offline_names = isinstance(self.teacher, HeuristicTeacher)
        self._shadow = None if shadow_teacher is None else resolve_teacher(shadow_teacher, teacher_model,
                                                                            embed=self._embed_label)
        self.background = bool(background)
        self.checkpoint_every = int(checkpoint_every)
        self.dedupe = bool(dedupe)
        if operations not in (True, False, "teacher"):
            raise InvalidOperationError(f"operations is True, False or 'teacher', not {operations!r}")
        self.operations = bool(operations)
        self.relabel = bool(relabel)
        self._learner_config = learner or LearnerConfig()
        if device is not None:
            self._learner_config.training.device = device
        student = None
        if operations is True:
            teacher = self.teacher
            student = OperationStudent(prior=(lambda: load_operation_prior(teacher)) if prior else None,
                                       threads=self._learner_config.training.threads)
        self._operations = OperationDecider(self.teacher, student=student)
        self._storage: Storage | None = (
            storage if isinstance(storage, Storage) or storage is None else open_storage(storage)
        )
        if max_loaded_namespaces < 1:
            raise InvalidOperationError("max_loaded_namespaces is at least 1")
        if search_mode not in ("fast", "exact"):
            raise InvalidOperationError(f"search_mode is 'fast' or 'exact', not {search_mode!r}")
        self.retrieval = retrieval or RetrievalConfig()
        self.search_mode = search_mode
        # Every namespace's tree, search index, locks and sync with storage (forest.py).
        self._forest = Forest(self._storage, new_index=self._new_index, refresh_interval=refresh_interval,
                              max_loaded=max_loaded_namespaces, max_height=max_height)
        self._closed = False
        self._learner: Learner | None = None
        self._learner_lock = threading.RLock()
        self._is_trainer = False
        self._checkpoint_seen = 0
        self._checkpoint_checked = float("-inf")  # monotonic time of the last look (non-trainers)
        # This process's counters (stats().process); the forest counts its refreshes.
        self._counts = {"inserts": 0, "corrections": 0, "supervised": 0, "worker_errors": 0, "merged": 0,
                        "relabelled": 0, "without_teacher": 0}
        self._stored_counts: Counters | None = None  # as the checkpoint the models came from recorded them
        self.naming_interval = int(naming_interval)
        self.prior = bool(prior)
        self.prior_used: str | None = None  # "trusted", "weights only" or None (stats())
        self._last_naming = -self.naming_interval  # supervised-insert count at the last naming question
        self._recent_calls: deque[int] = deque(maxlen=100)  # teacher calls of the last inserts
        self._last_worker_error: str | None = None
        self._checkpoint_error: str | None = None
        # Bounded for a fast (in-process) teacher: an add waits while the trainer is this
        # many inserts behind, so an insert's labels are trained on within that many inserts.
        # Unbounded for a slow one (an LLM), whose audits the trainer waits for: an add
        # never waits for an LLM's answer to someone else's insert.
        if max_training_lag < 1:
            raise InvalidOperationError("max_training_lag is at least 1")
        fast = getattr(self.teacher, "fast", False)
        self._queue: queue.Queue = queue.Queue(maxsize=int(max_training_lag) if fast else 0)
        self._worker: threading.Thread | None = None
        self._pipeline = InsertPipeline(_InsertHost(self))
        self._graph = None
        if self._storage is not None and self._operations.student is not None:
            found = self._storage.load_checkpoint(OPERATIONS_CHECKPOINT)
            if found is not None:
                try:
                    self._operations.student.load_bytes(found[0])
                except CheckpointError as exc:  # documented fallback: the student starts afresh
                    self._checkpoint_error = str(exc)
                    logger.warning("membrain: ignoring the stored operation student: %s", exc)
        _register_for_exit(self)  # flushed and closed at interpreter exit if never closed

    # ------------------------------------------------------------- namespaces
    @property
    def refresh_interval(self) -> float:
        """Seconds between two checks for other processes' writes (to a namespace when it
        is read, and to the trainer's checkpoint)."""
        return self._forest.refresh_interval

    @refresh_interval.setter
    def refresh_interval(self, seconds: float) -> None:
        self._forest.refresh_interval = float(seconds)

    @property
    def max_height(self) -> int | None:
        """How many levels below the subject a fact may lie (None: unbounded)."""
        return self._forest.max_height

    @property
    def max_loaded_namespaces(self) -> int:
        """With storage, namespaces kept loaded at once (least recently used unloaded first)."""
        return self._forest.max_loaded

    @max_loaded_namespaces.setter
    def max_loaded_namespaces(self, n: int) -> None:
        if n < 1:
            raise InvalidOperationError("max_loaded_namespaces is at least 1")
        self._forest.max_loaded = int(n)

    @property
    def refresh_counts(self) -> RefreshCounts:
        """This process's live counts of namespaces brought up to date after other
        processes' writes (by their change log or by a reload), and the seconds spent."""
        return self._forest.counts

    def _new_index(self) -> FactIndex:
        """An empty search index for a namespace (made by the forest at a namespace's first write)."""
        return FactIndex(self.retrieval, embed_query=lambda t: self._embed([t])[0])

    def namespaces(self) -> list[Namespace]:
        """Every namespace that holds memories."""
        return self.list_namespaces(limit=sys.maxsize)

    def tree(self, namespace: str | Sequence[str] | None = None) -> MembrainTree:
        """The live tree of a namespace (read it under no concurrent writes, or copy it)."""
        ns = as_namespace(namespace)
        with self._forest.lock(ns):
            tree = self._forest.tree(ns, create=False)
        if tree is None:
            raise InvalidOperationError(f"no memories in namespace {ns!r}")
        return tree

    def list_namespaces(self, *, prefix: Sequence[str] | None = None, suffix: Sequence[str] | None = None,
                        max_depth: int | None = None, limit: int = 100, offset: int = 0,
                        current_only: bool = False) -> list[Namespace]:
        """Namespaces holding memories, sorted; ``prefix``/``suffix`` may use ``"*"`` as a
        wildcard label; ``max_depth`` truncates longer namespaces (deduplicated). A namespace
        whose memories were all deleted or superseded still holds their history and is
        listed; ``current_only`` lists only namespaces holding at least one current memory
        (as :class:`~.store.MembrainStore` lists them)."""

        def fits(ns: Namespace, pattern: Sequence[str] | None, at_end: bool) -> bool:
            if not pattern:
                return True
            pattern = tuple(pattern)
            if len(pattern) > len(ns):
                return False
            part = ns[-len(pattern):] if at_end else ns[: len(pattern)]
            return all(p == "*" or p == n for p, n in zip(pattern, part))

        if self._storage is not None:
            found = self._storage.namespaces_with_facts() if current_only else self._storage.list_namespaces()
        else:
            found = self._forest.loaded_namespaces()
            if current_only:
                found = [ns for ns in found if self._holds_facts(ns)]
        found = [ns for ns in found if fits(ns, prefix, False) and fits(ns, suffix, True)]
        if max_depth is not None:
            found = list({ns[:max_depth] for ns in found})
        found.sort()
        return found[offset: offset + limit]

    def _holds_facts(self, ns: Namespace) -> bool:
        """Whether the (in-process) namespace holds a current fact, not only history."""
        with self._forest.lock(ns):
            tree = self._forest.tree(ns, create=False)
            return tree is not None and tree.fact_count(tree.root_id) > 0

    # ----------------------------------------------------------------- writes
    @property
    def read_only(self) -> bool:
        """Whether the storage is open for reading only (a read-only SQLite file, directory
        or mount, or ``open_storage(path, read_only=True)``): search, get, history, stats
        and export work; add, put, delete and purge_history raise
        :class:`~.errors.ReadOnlyError` before anything is embedded or asked, and the
        models are never trained or saved."""
        return self._storage is not None and self._storage.read_only

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyError(f"the memory's storage {self._storage.location!r} is open read-only: "
                                "nothing was written")

    def _embed(self, texts: list[str]) -> np.ndarray:
        return embed_texts(self.embeddings, texts)

    def add(self, text: str, *, namespace: str | Sequence[str] | None = None,
            metadata: dict[str, Any] | None = None, key: str | None = None) -> str:
        """Store one memory (value ``{"content": text, **metadata}``) and return its key."""
        return self.add_many([text], namespace=namespace, metadatas=[metadata], keys=[key])[0]

    def add_many(self, texts: Sequence[str], *, namespace: str | Sequence[str] | None = None,
                 metadatas: Sequence[dict[str, Any] | None] | None = None,
                 keys: Sequence[str | None] | None = None, progress: bool | None = None) -> list[str]:
        """Store many memories (embedded in one batch) and return their keys.

        ``progress``: show a progress bar (default: on a terminal, for 200 memories or more).
        Every input is validated before anything is stored; the error for a bad item of
        several names it by its index ("item 3 of 10: memory text is empty").
        """
        if isinstance(texts, str):
            raise InvalidOperationError("add_many takes a list of texts; use add() for one")
        self._check_writable()
        texts = list(texts)
        metadatas = list(metadatas) if metadatas is not None else [None] * len(texts)
        keys = list(keys) if keys is not None else [None] * len(texts)
        if not (len(metadatas) == len(keys) == len(texts)):
            raise InvalidOperationError("texts, metadatas and keys must have the same length")
        as_namespace(namespace)  # one namespace for every item: its error names no item
        prepared = []
        for i, (t, m, k) in enumerate(zip(texts, metadatas, keys)):
            try:
                prepared.append(memory_value(namespace, t, m))
                if k is not None and (not isinstance(k, str) or not k):
                    raise InvalidOperationError("a key is a non-empty str")
            except MembrainError as exc:
                if len(texts) == 1:  # add(), or a list of one: nothing to tell apart
                    raise
                raise type(exc)(f"item {i} of {len(texts)}: {exc}") from None
        vecs = self._embed([text for _, _, text in prepared])
        if progress is None:
            progress = len(texts) >= 200 and sys.stderr.isatty()
        out = []
        with _progress(progress, len(texts)) as advance:
            for (ns, value, text), vec, key in zip(prepared, vecs, keys):
                out.append(self._insert(ns, key, value, text, vec, merge=self.dedupe and key is None,
                                        operate=self.operations and key is None))
                advance()
        return out

    def _place(self, ns: Namespace, value: dict[str, Any], text: str, vec: np.ndarray,
               key: str | None = None, *, audit: bool | None = None, shared: bool = False) -> str:
        """Place one embedded memory through the insert pipeline; returns its key. ``audit``
        and ``shared``: see ``InsertState``."""
        return self._pipeline.run({"namespace": ns, "text": text, "key": key, "value": value,
                                   "embedding": vec, "audit": audit, "shared": shared})["key"]

    def _insert(self, ns: Namespace, key: str | None, value: dict[str, Any], text: str,
                vec: np.ndarray, *, merge: bool = False, operate: bool = False) -> str:
        """Place one embedded memory through the insert pipeline; returns its key. With
        ``merge``, a duplicate of a stored fact (see ``dedupe``) is not stored again: the
        check and the insert hold the namespace's insert lock, so two threads adding the
        same memory store it once. With ``operate``, the memory operation (operations.py)
        decides first whether it is added, updates or deletes an old fact, or is ignored.
        The teacher's questions wait ``teacher_budget`` seconds at most, together."""
        self._local.untaught = False
        with self._learner_lock:
            self._learner_for(int(vec.size))  # the models' first load is not the teacher's time
        with teacher_deadline(self.teacher_budget):
            done = self._insert_now(ns, key, value, text, vec, merge=merge, operate=operate)
        if self._local.untaught:
            self._counts["without_teacher"] += 1
        return done

    def _insert_now(self, ns: Namespace, key: str | None, value: dict[str, Any], text: str,
                    vec: np.ndarray, *, merge: bool = False, operate: bool = False) -> str:
        if not merge and not operate:
            return self._place(ns, value, text, vec, key)
        with self._forest.insert_lock(ns):
            dup = None
            if merge:
                with self._forest.lock(ns):
                    dup = self._duplicate_of(ns, value, text, vec)
            if dup is not None:
                def touch(tree: MembrainTree) -> bool:
                    if dup not in tree:  # removed by another process meanwhile
                        return False
                    tree.update_fact(dup)
                    return True

                if self._forest.mutate(ns, touch):
                    self._counts["merged"] += 1
                    return dup
            if not operate:
                return self._place(ns, value, text, vec)
            # One question per insert: an LLM in one-call mode answers the operation and the
            # placement in one request, so an operation question counts only when the
            # placement asked none (the offline rule, a stand-in for such an LLM, is counted
            # the same way); in "per_decision" mode they are two requests, counted apart.
            # One audit draw for the item's operation and its placement: an audited item is
            # then one request (in one-call mode, the operation's question answers the
            # placement too, and its deferred audit is not counted again).
            joint = getattr(self.teacher, "mode", "one_call") == "one_call"
            with self._learner_lock:
                audit = self._learner_for(int(vec.size)).draw_audit()
            asked = self._operations.counters.asked

            def place(ns_: Namespace, value_: dict[str, Any], text_: str, vec_: np.ndarray) -> str:
                shared = joint and self._operations.counters.asked > asked
                return self._place(ns_, value_, text_, vec_, audit=audit, shared=shared)

            done = execute_operation(self._forest, self._operations, ns, value, text, vec, place=place,
                                     audit=audit)
            op_asked = self._operations.counters.asked > asked
            decision = self._operations.last_here()
            if decision is not None and decision.asked and not decision.answered:
                self._local.untaught = True
            placed = self._placement_questions()
            if done is None:
                done = place(ns, value, text, vec)
            if decision is not None and decision.requests is not None:
                # A teacher that sends requests: every request of the operation's question
                # is counted, as an operation question (its one-call answer may place the
                # fact too: the learner then counts no placement request).
                with self._learner_lock:
                    self._learner_for(int(vec.size)).count_question("operation", requests=decision.requests,
                                                                    failed=not decision.answered)
            elif op_asked and (not joint or self._placement_questions() == placed):
                with self._learner_lock:
                    self._learner_for(int(vec.size)).count_question("operation")
            return done

    def _placement_questions(self) -> int:
        learner = self._learner
        return 0 if learner is None else learner.questions["placement"]

    def _duplicate_of(self, ns: Namespace, value: dict[str, Any], text: str, vec: np.ndarray) -> str | None:
        """The stored fact this memory duplicates: among the facts nearest by embedding (equal
        texts embed alike), one whose normalised text and other value fields are the same.
        Call under the lock."""
        tree = self._forest.tree(ns, create=False)
        index = self._forest.index(ns)
        if tree is None or index is None:
            return None
        fields = {k: v for k, v in value.items() if k != "content"}
        wanted = _normalised(text)
        for fid, _ in index.nearest(vec, k=8):
            if fid in tree and _normalised(tree.node(fid).text) == wanted:
                old = tree.node(fid).metadata.get("value", {})
                if {k: v for k, v in old.items() if k != "content"} == fields:
                    return fid
        return None

    def put(self, namespace: str | Sequence[str], key: str, value: dict[str, Any], *,
            index: bool | Sequence[str] | None = None) -> None:
        """Insert or replace the value under ``key`` (LangGraph store semantics).

        The embedded text comes from ``index`` (a list of value fields or paths), else the
        memory's ``index_fields``: by default ``content``, then ``text``, else the value's
        JSON. ``index=False`` stores the value without embedding it (not placed, listed
        after the scored results of a query). When the text of an existing key changes,
        the fact is placed again; otherwise only its value changes. ``created_at`` is kept.
        """
        ns = as_namespace(namespace)
        self._check_writable()
        if not isinstance(key, str) or not key:
            raise InvalidOperationError("a key is a non-empty str")
        if not isinstance(value, dict):
            raise InvalidOperationError(f"a value is a dict, got {type(value).__name__}")
        value = _json_copy(value)
        if index is False:
            self._update_in_place(ns, key, value, None, placed=False)
            return
        text = check_text(self.text_of(value, None if index in (None, True) else list(index)))
        if self._update_in_place(ns, key, value, text, placed=True):
            return
        self._insert(ns, key, value, text, self._embed([text])[0])

    def text_of(self, value: dict[str, Any], fields: list[str] | None = None) -> str:
        """The text embedded for ``value``: the first present of ``fields`` (default
        ``content``, then ``text``), else the value's JSON; several fields are joined."""
        explicit = fields is not None
        found: list[str] = []
        for path in fields or self.index_fields:
            found += [t for t in get_text_at_path(value, tokenize_path(path)) if t]
            if found and not explicit:
                break  # defaults are alternatives: the first present field wins
        if found:
            return "\n".join(found)
        return json.dumps(value, sort_keys=True, ensure_ascii=False)

    def _update_in_place(self, ns: Namespace, key: str, value: dict[str, Any], text: str | None, *,
                         placed: bool) -> bool:
        """Store ``value`` without (re)placing the fact: an unindexed value (``placed`` False:
        always done; the fact sits under the root with no embedding), or a placed fact whose
        text is unchanged. Returns False when the fact must go through the pipeline."""

        def write(tree: MembrainTree) -> bool:
            exists = key in tree
            if exists and tree.node(key).kind != "fact":
                raise InvalidOperationError(f"key {key!r} is used by an aspect")
            if placed:
                if not exists or tree.node(key).text != text or tree.node(key).embedding is None:
                    return False
                tree.update_fact(key, metadata={"value": value, "indexed": True})
                return True
            meta = {"value": value, "indexed": False}
            if exists:
                created = tree.node(key).created_at
                tree.remove(key)
                tree.add_fact(tree.root_id, "", node_id=key, metadata=meta, created_at=created)
            else:
                tree.add_fact(tree.root_id, "", node_id=key, metadata=meta)
            return True

        if placed:  # cheap check first: most puts of new keys need no transaction here
            with self._forest.lock(ns):
                tree = self._forest.tree(ns, create=False)
                if tree is None or key not in tree:
                    return False
        return self._forest.mutate(ns, write)

    def delete(self, key: str, *, namespace: str | Sequence[str] | None = None) -> bool:
        """Delete a memory; returns False if there was none.

        The memory leaves the tree (``get`` and ``search`` no longer return it) but not the
        history: its last version is archived as a tombstone, in the same write, so
        ``history(key)`` shows it with status ``"deleted"`` and ``valid_to`` the time of the
        deletion (as a memory operation's DELETE does). ``purge_history`` forgets it for good."""
        ns = as_namespace(namespace)
        self._check_writable()
        with self._forest.lock(ns):
            tree = self._forest.tree(ns, create=False)
            if tree is None or key not in tree or tree.node(key).kind != "fact":
                return False

        def write(tree: MembrainTree) -> bool:
            if key not in tree or tree.node(key).kind != "fact":
                return False
            tree.retire(key)
            return True

        return self._forest.mutate(ns, write)

    # ------------------------------------------------------------------ reads
    def _record(self, ns: Namespace, tree: MembrainTree, key: str, score: float | None = None) -> MemoryRecord:
        node = tree.node(key)
        labels = [tree.node(a).text for a in tree.path(key)[1:-1]]
        value = copy.deepcopy(node.metadata.get("value", {}))  # callers never alias stored state
        return MemoryRecord(key, ns, node.text, value, labels, node.created_at, node.updated_at, score,
                            valid_from=tree.valid_from(key))

    @staticmethod
    def _archived_record(ns: Namespace, entry: Node, score: float | None = None) -> MemoryRecord:
        """An archived entry (history or ignored) as a record; its key is the entry's id."""
        h = entry.metadata.get(HISTORY_KEY, {})
        if entry.kind == "ignored":
            status = "ignored"
        else:
            status = "superseded" if h.get("operation") == "update" else "deleted"
        value = copy.deepcopy(entry.metadata.get("value", {}))
        return MemoryRecord(entry.id, ns, entry.text, value, list(h.get("path", [])), entry.created_at,
                            entry.updated_at, score, status, h.get("valid_from", entry.created_at),
                            h.get("valid_to"), h.get("superseded_by"))

    def history(self, key: str, *, namespace: str | Sequence[str] | None = None) -> list[MemoryRecord]:
        """Every version of the memory ``key``, oldest first: its superseded or deleted
        versions (status ``"superseded"``/``"deleted"``, each with ``valid_from``,
        ``valid_to`` and ``superseded_by``), then the current one if it still exists.
        An archived entry's own id (``key@vN``) is accepted too. [] for an unknown key."""
        ns = as_namespace(namespace)
        with self._forest.lock(ns):
            tree = self._forest.tree(ns, create=False)
            if tree is None:
                return []
            entry = tree.archive.get(key)
            if entry is not None:
                key = entry.metadata.get(HISTORY_KEY, {}).get("key", key)
            out = [self._archived_record(ns, e) for e in tree.history(key)]
            if key in tree and tree.node(key).kind == "fact":
                out.append(self._record(ns, tree, key))
            return out

    @property
    def last_operation(self) -> OperationDecision | None:
        """The memory operation decided for the latest ``add`` in this process (ADD, UPDATE,
        DELETE or IGNORE, who decided it and the candidates shown), or None before the first.
        Shared by every thread of this memory: read it right after your own ``add`` only when
        no other thread adds meanwhile. An ``add`` that runs no operation (operations off, an
        exact duplicate, ``put``) leaves it as it was.

        A property, not a method: read ``memory.last_operation`` (``memory.last_operation()``
        calls the decision it returns and raises TypeError). Kept a property for the code that
        reads it so; each read returns the decision as it stands then, which a later ``add``
        replaces but never changes."""
        return self._operations.last

    def ignored(self, *, namespace: str | Sequence[str] | None = None, limit: int = 100) -> list[MemoryRecord]:
        """The namespace's log of items judged not to be memories (IGNORE, and retractions
        that were not memories themselves), newest first."""
        ns = as_namespace(namespace)
        with self._forest.lock(ns):
            tree = self._forest.tree(ns, create=False)
            if tree is None:
                return []
            entries = tree.archived("ignored")[::-1][:limit]
            return [self._archived_record(ns, e) for e in entries]

    def purge_history(self, namespace: str | Sequence[str] | None = None, *, before: Any = None,
                      kind: str | None = None) -> int:
        """Forget archived entries of ``namespace`` for good, so that its archive does not
        grow forever: superseded and deleted versions (``kind="history"``), the log of
        ignored items (``"ignored"``), or both (None), archived before ``before`` (a
        ``datetime`` or seconds since the epoch; None: all). The time is a version's
        ``valid_to`` or an ignored item's arrival. Current facts are never touched, but a
        purged version no longer lends its words to the fact that replaced it in search.
        One write: with storage, one transaction, so a crash leaves all of it or none.
        Returns how many entries were removed."""
        ns = as_namespace(namespace)
        self._check_writable()
        cutoff = None if before is None else as_timestamp(before, "before")
        if kind not in (None, "history", "ignored"):
            raise InvalidOperationError(f"kind is 'history', 'ignored' or None, got {kind!r}")
        with self._forest.lock(ns):
            tree = self._forest.tree(ns, create=False)
            if tree is None or not tree.archive:
                return 0

        def write(tree: MembrainTree) -> int:
            doomed = [e.id for e in tree.archived(kind) if cutoff is None or e.updated_at < cutoff]
            tree.purge_archived(doomed)
            return len(doomed)

        return self._forest.mutate(ns, write)

    def get(self, key: str, *, namespace: str | Sequence[str] | None = None) -> MemoryRecord | None:
        """The memory stored under ``key``, or None."""
        ns = as_namespace(namespace)
        with self._forest.lock(ns):
            tree = self._forest.tree(ns, create=False)
            if tree is None or key not in tree or tree.node(key).kind != "fact":
                return None
            return self._record(ns, tree, key)

    def path(self, key: str, *, namespace: str | Sequence[str] | None = None) -> list[str]:
        """Labels of the aspects from the root down to the memory (empty if under the root)."""
        record = self.get(key, namespace=namespace)
        if record is None:
            raise InvalidOperationError(f"no memory {key!r} in {as_namespace(namespace)!r}")
        return record.path

    def search(self, query: str | None = None, *, namespace: str | Sequence[str] | None = None,
               limit: int = 5, offset: int = 0, filter: dict[str, Any] | None = None,
               exact_namespace: bool = False, include_history: bool = False) -> list[MemoryRecord]:
        """Memories in ``namespace`` and every namespace below it (unless
        ``exact_namespace``), matching ``filter``: best first for a query, newest first
        without one. No ``namespace`` (None, or ``()``) searches every namespace of the
        memory, as ``membrain search`` without ``--ns`` does; pass the namespace to search
        one user's memories only. ``include_history`` adds superseded and deleted versions
        (their ``status`` says which); with it, every hit is ranked by its plain cosine with
        the query, so current and past versions rank on one scale.

        A hit's ``score`` is its relevance in ``[0, 1]``: ``retrieval.relevance`` of the
        fused ranking score its namespace's index ranks it by (every boost included), so
        hits are best first by it, and the same fact scores the same for the same query
        whether one namespace or many are searched, here, in :class:`~.store.MembrainStore`
        and in the retriever. Across namespaces hits are merged by that same score. With
        ``include_history`` it is instead the cosine with the query, clipped to ``[0, 1]``
        (archived versions are in no index). Unembedded facts come last, with None."""
        # Unlike add/get/delete, which act on one namespace (the default ``("memories",)``
        # when none is given), a search without one spans them all: limiting it to the
        # default namespace found nothing that was added under another, without a word.
        prefix = () if namespace is None or namespace == () else as_namespace(namespace)
        if exact_namespace and not prefix:
            raise InvalidOperationError("exact_namespace=True needs the namespace to search")
        check_filter(filter)
        if not isinstance(limit, int) or not isinstance(offset, int) or limit < 0 or offset < 0:
            raise InvalidOperationError("limit and offset are non-negative integers")
        if limit == 0:
            return []
        spaces = [ns for ns in self.namespaces()
                  if ns == prefix or (not exact_namespace and ns[: len(prefix)] == prefix)]
        query = check_text(query, "the search query") if query is not None else None
        embedded: dict[str, np.ndarray] = {}  # one embedding per distinct dense query text
        hits: list[MemoryRecord] = []
        vectors: dict[tuple[Namespace, str], np.ndarray] = {}  # for cosines (history, merge ties)
        for ns in spaces:
            with self._forest.lock(ns):
                tree = self._forest.tree(ns, create=False)
                if tree is None:
                    continue
                for key, score in self._rank(ns, tree, query, filter, offset + limit, embedded):
                    hits.append(self._record(ns, tree, key, score))
                    if score is not None:
                        vectors[ns, key] = tree.node(key).embedding
                if include_history:
                    for entry in tree.archived("history"):
                        if filter and not matches(entry.metadata.get("value", {}), filter):
                            continue
                        scored = query is not None and entry.embedding is not None
                        hits.append(self._archived_record(ns, entry, 0.0 if scored else None))
                        if scored:
                            vectors[ns, entry.id] = entry.embedding
        if query is None:
            hits.sort(key=lambda r: (-r.updated_at, r.key))
            return hits[offset: offset + limit]
        # The plain cosine with the query ranks current and archived versions together
        # (include_history), and breaks exact ties between namespaces (each namespace's
        # only fact holding a query word scores the same: BM25 over its namespace's best).
        merging = len({h.namespace for h in hits if h.score is not None}) > 1
        q = None
        if vectors and (include_history or merging):
            q = next(iter(embedded.values())) if len(embedded) == 1 else self._embed([query])[0]
        ranked: list[tuple[tuple, MemoryRecord]] = []  # (what ranks it, the hit)
        for h in hits:
            rank = h.score
            tie = 0.0
            if rank is not None:
                if include_history:  # on one scale: the cosine, clipped to [0, 1]
                    rank = cosine(vectors[h.namespace, h.key], q)
                    h.score = min(max(rank, 0.0), 1.0)
                else:  # one scale for every namespace and entry point (retrieval.relevance)
                    tie = cosine(vectors[h.namespace, h.key], q) if merging else 0.0
                    h.score = relevance(rank)
            # Ranked by what the score is a monotone function of (ties in the reported
            # score never reorder hits); as LangGraph's stores do, items stored without an
            # embedding come last, unscored.
            ranked.append(((rank is None, -(rank or 0.0), -tie, -h.updated_at), h))
        ranked.sort(key=lambda p: p[0])
        return [h for _, h in ranked][offset: offset + limit]

    def _rank(self, ns: Namespace, tree: MembrainTree, query: str | None, filter: dict[str, Any] | None,
              k: int, embedded: dict[str, np.ndarray]) -> list[tuple[str, float | None]]:
        """(key, score) of up to ``k`` best facts of one namespace matching ``filter``, then
        its matching unembedded facts (score None). Without a query: every matching fact.

        With a query and no filter nothing here walks the tree's facts, so the cost is the
        index's (sub-linear in fast mode)."""
        def passes(f: str) -> bool:
            return not filter or matches(tree.node(f).metadata.get("value", {}), filter)

        facts = [f for f in tree.facts() if passes(f)] if filter or query is None else None
        if query is None:
            return [(f, None) for f in facts]
        index = self._forest.index(ns)
        scored: list[tuple[str, float | None]] = []
        if index is not None and len(index):
            dense_text = index.dense_query_text(query)
            if dense_text not in embedded:
                embedded[dense_text] = self._embed([dense_text])[0]
            scored = [(f, float(s)) for f, s in index.search(
                query, embedded[dense_text], k, tree=tree, mode=self.search_mode,
                filter_ids=facts)]
        unscored = [(f, None) for f in sorted(self._forest.unindexed(ns)) if passes(f)]
        return scored + unscored

    # --------------------------------------------------------------- learning
    def _learner_for(self, dim: int) -> Learner:
        """The learner, created on first use with the embedder's dimension, from the latest
        checkpoint when storage holds one, else from the shipped prior (``prior``). Call
        under ``_learner_lock``."""
        if self._learner is None:
            cfg = self._learner_config
            cfg.model.dim = int(dim)
            learner = Learner(self.teacher, cfg, embed_label=lambda label: self._embed_label([label])[0],
                              label_aspect=self._label_aspect, shadow=self._shadow, stand_in=self._offline_rule())
            restored = False
            if self._storage is not None:
                self._is_trainer = self._storage.try_acquire_trainer(CHECKPOINT_NAME)
                found = self._storage.load_checkpoint(CHECKPOINT_NAME)
                if found is not None:
                    try:
                        learner.load_bytes(found[0])
                        # The memory's lifetime counts continue from the checkpoint's, as
                        # the learner's counters do (stats(): stored + this process's).
                        self._stored_counts = Counters.from_mapping(found[1])
                        learner.questions.update(_saved_questions(found[1]))
                        restored = True
                    except CheckpointError as exc:
                        # Documented fallback: the memories are untouched; the models start
                        # afresh (the unusable checkpoint is replaced at the next save).
                        self._checkpoint_error = str(exc)
                        logger.warning("membrain: ignoring the stored model checkpoint: %s", exc)
                    self._checkpoint_seen = self._storage.checkpoint_version(CHECKPOINT_NAME)
            else:
                self._is_trainer = True
            if not restored and self.prior:
                self._start_from_prior(learner)
            self._learner = learner
        elif self._learner.config.model.dim != dim:
            raise DimensionError(f"the models read {self._learner.config.model.dim}-d embeddings, got {dim}")
        return self._learner

    def _offline_rule(self) -> Teacher | None:
        """What places a fact when the teacher gives no answer and the student is not warm
        yet: the LLM teacher's own fallback (the HeuristicTeacher by default), else the
        offline HeuristicTeacher; None for an in-process teacher (it always answers)."""
        if getattr(self.teacher, "fast", False):
            return None
        fallback = getattr(self.teacher, "fallback", None)
        if callable(getattr(fallback, "choose_stage1", None)):
            return fallback
        from .teachers.heuristic import HeuristicTeacher

        return HeuristicTeacher(embed=self._embed_label)

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

    def _after_place(self, ns: Namespace, record: PlaceRecord) -> None:
        """An insert was placed: count it, then train on it (now, or in the worker)."""
        self._counts["inserts"] += 1
        if record.deferred:
            self._local.untaught = True
        if not self._is_trainer:
            self._recent_calls.append(record.teacher_calls)
            self._maybe_reload_checkpoint()
            return
        if not self.background:
            self._supervise(ns, record)
            return
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._work, name="membrain-trainer", daemon=True)
            self._worker.start()
        self._queue.put((ns, record))

    def _work(self) -> None:
        """The background trainer: supervise queued inserts until told to stop. A failure
        is logged and counted (see ``stats()``), never raised into the host process."""
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                self._supervise(*item)
            except Exception as exc:  # noqa: BLE001 - the worker must survive anything
                self._counts["worker_errors"] += 1
                self._last_worker_error = f"{type(exc).__name__}: {exc}"
                logger.exception("membrain: background training failed")
            finally:
                self._queue.task_done()

    def _supervise(self, ns: Namespace, record: PlaceRecord) -> None:
        """Deferred teacher question and training for one insert; apply the teacher's
        corrections (moves, stage-2 actions) as one committed write. The teacher is asked
        on the record's own snapshot, with no lock held, so adds and searches never wait
        for its answer; what it asks for is re-validated on the live tree when applied."""
        learner = self._learner
        result = learner.supervise(record, train=False)
        # Optimiser steps outside every lock: the trainer locks itself per step, so adds and
        # searches wait for one step at most, never for a whole batch.
        result.steps = learner.trainer.train_ready()
        self._recent_calls.append(record.teacher_calls + result.teacher_calls)
        self._counts["supervised"] += 1
        if learner.config.apply_corrections and (result.corrections or result.actions):
            def write(t: MembrainTree) -> None:
                with self._learner_lock:
                    learner.apply_corrections(t, result)

            self._forest.mutate(ns, write)
            self._counts["corrections"] += len(result.corrections) + bool(result.actions)
        if self.relabel:
            self._relabel(ns, record.fact_id)
        if self._storage is not None and self._counts["supervised"] % max(self.checkpoint_every, 1) == 0:
            self._save_checkpoint()

    def _label_aspect(self, texts: list[str], avoid: list[str], mean: np.ndarray | None = None) -> str:
        """The offline labeller (labels.py): the phrase of ``texts`` nearest their mean
        embedding, different from ``avoid``. Names the aspects the models create, and
        renamed aspects between the teacher's naming questions."""
        return offline_label(texts, self._embed_label, mean=mean, avoid=avoid, max_candidates=32)

    def _relabel(self, ns: Namespace, fact_id: str) -> None:
        """Rename the aspects above ``fact_id`` that have doubled since they were
        named (labels.py), with no lock held; the new labels are written in one commit, to
        the aspects that still exist."""
        with self._forest.lock(ns):
            tree = self._forest.tree(ns, create=False)
            if tree is None or fact_id not in tree:
                return
            todo = {a: (typical_facts(tree, a), relabel_avoid(tree, a), tree.mean_embedding(a))
                    for a in stale_aspects(tree, fact_id)}
        if not todo:
            return
        names = {}
        for a, (texts, avoid, mean) in todo.items():
            # The teacher is asked to rename one aspect per ``naming_interval`` inserts at
            # most (a counted question). The others get the offline labeller's name when the
            # offline rule is the teacher; a teacher that names topics (an LLM) keeps its
            # names until it is due again, so no keyword replaces a topic's name.
            due = self._counts["supervised"] - self._last_naming >= self.naming_interval
            label = None
            if due:
                self._last_naming = self._counts["supervised"]
                label = self._learner.name_aspect(texts)
                if label.casefold() in {x.casefold() for x in avoid}:
                    label = None  # an ancestor's, sibling's or child's label: not a name for this one
            elif not self._offline_names:
                continue
            names[a] = label or self._label_aspect(texts, avoid, mean)
        vecs = dict(zip(names, self._embed_label(list(names.values()))))

        def write(t: MembrainTree) -> int:
            renamed = 0
            for a, label in names.items():
                if a in t and t.node(a).kind == "aspect":
                    renamed += t.node(a).text != label
                    t.set_label(a, label, embedding=vecs[a],
                                metadata={**t.node(a).metadata, LABELLED_FACTS: t.fact_count(a)})
            return renamed

        self._counts["relabelled"] += self._forest.mutate(ns, write)

    def _save_checkpoint(self) -> None:
        if self._storage is None or self._learner is None or not self._is_trainer or self._storage.read_only:
            return
        with self._learner_lock:
            data = self._learner.state_bytes()
            learning = self._learning_stats()
        self._storage.save_checkpoint(CHECKPOINT_NAME, data, {**self._lifetime_counts().as_dict(), **learning})
        self._checkpoint_seen = self._storage.checkpoint_version(CHECKPOINT_NAME)
        student = self._operations.student
        if student is not None and student.labelled:
            self._storage.save_checkpoint(OPERATIONS_CHECKPOINT, student.state_bytes(), student.stats())

    def _process_counts(self) -> Counters:
        """This process's counters: the memory's and the forest's refreshes."""
        refresh = self._forest.counts
        return Counters(**self._counts, refreshed_by_change=refresh.refreshed_by_change,
                        refresh_reloads=refresh.refresh_reloads)

    def _lifetime_counts(self) -> Counters:
        """What a checkpoint saves: the counts it was loaded with plus this process's."""
        process = self._process_counts()
        return process if self._stored_counts is None else self._stored_counts + process

    def _learning_stats(self) -> dict[str, Any]:
        """Per-stage counters of the learner and the total teacher calls (under its lock)."""
        out: dict[str, Any] = {}
        for stage, c in self._learner.counters.items():
            out[stage] = {"decisions": c.decisions, "model_executed": c.model_executed,
                          "agreement": c.agreement, "labelled": c.labelled, "loss": c.loss,
                          "optimiser_steps": c.steps}
        out["teacher_calls"] = self._learner.teacher_calls  # joint questions: placements and audits
        out["naming_calls"] = self._learner.naming_calls  # the teacher asked to (re)name aspects
        out["questions"] = {k: self._learner.questions[k] for k in QUESTION_KINDS}
        out["teacher_failures"] = sum(self._learner.failures.values())  # questions without a usable answer
        out["teacher_skipped"] = sum(self._learner.skipped.values())  # of those, not sent (breaker, budget)
        out["asked_when_unsure"] = dict(self._learner.unsure)  # placement questions, by the unsure stage
        out["audits_shared"] = self._learner.shared_answers  # answered by an operation question, not counted
        if self._shadow is not None:
            out["shadow_agreement"] = {k: {"agreed": a, "decisions": n, "rate": a / n if n else None}
                                       for k, (a, n) in self._learner.shadow_agreement.items()}
            out["shadow_seconds"] = self._learner.shadow_seconds
        return out

    def _maybe_reload_checkpoint(self) -> None:
        """A process that does not train picks up the trainer's newer checkpoints, and
        takes over training if the trainer went away. Checked at most once per
        ``refresh_interval``: it runs after an insert, which must not pay for it each time.
        Never raises: the fact is already stored when this runs."""
        if self._storage is None or self._learner is None:
            return
        now = time.monotonic()
        if now - self._checkpoint_checked < self.refresh_interval:
            return
        self._checkpoint_checked = now
        if self._storage.try_acquire_trainer(CHECKPOINT_NAME):
            self._is_trainer = True
        version = self._storage.checkpoint_version(CHECKPOINT_NAME)
        if version > self._checkpoint_seen:
            found = self._storage.load_checkpoint(CHECKPOINT_NAME)
            if found is not None:
                try:
                    with self._learner_lock:
                        self._learner.load_bytes(found[0])
                except CheckpointError as exc:
                    self._checkpoint_error = str(exc)
                    logger.warning("membrain: ignoring the stored model checkpoint: %s", exc)
            self._checkpoint_seen = version

    # ------------------------------------------------------------------ reports
    def stats(self) -> MemoryStats:
        """What the memory holds and has counted (:class:`~.stats.MemoryStats`): the
        forest's size; this process's counters apart from those the models' checkpoint
        stored (``process``, ``stored``, and ``lifetime``, their sum); the models' learning
        counters (agreement per stage with its sample size, teacher questions: from the live
        models, else from the saved checkpoint without loading them); pending training,
        inserts in flight, worker and checkpoint errors, the teacher's own cost stats and
        the memory operations. ``stats()["inserts"]`` and the other flat keys still read
        (lifetime counters); ``stats().as_dict()`` is that mapping as a dict."""
        names = self.namespaces()
        trees = []
        for ns in names:
            with self._forest.lock(ns):
                tree = self._forest.tree(ns, create=False)
                if tree is not None:
                    trees.append(tree)
        stored, learning = self._stored_counts, None
        if self._learner is not None:
            with self._learner_lock:
                learning = LearningStats.from_mapping(self._learning_stats())
        elif self._storage is not None:
            # A process that has not inserted yet (e.g. `membrain stats`): what the last
            # saved checkpoint recorded, without loading the models.
            stored, learning = read_stored(self._storage, CHECKPOINT_NAME)
        return MemoryStats(
            forest=ForestStats.of(trees, namespaces=len(names)), process=self._process_counts(),
            stored=stored, learning=learning, loaded_namespaces=self._forest.loaded(),
            pending_training=self._queue.unfinished_tasks, inserts_in_flight=self._pipeline.in_flight(),
            last_worker_error=self._last_worker_error, checkpoint_error=self._checkpoint_error,
            trainer=self._is_trainer, prior=self.prior_used,
            recent_teacher_calls_per_insert=(sum(self._recent_calls) / len(self._recent_calls)
                                             if self._recent_calls else None),
            teacher=self._teacher_stats(), operations=self._operations.stats())

    def _teacher_stats(self) -> dict[str, Any]:
        """The teacher's own cost stats (an in-process teacher: the same keys, zero) and its
        circuit breakers' ``health``."""
        from .teachers.budget import CircuitBreaker
        from .teachers.guard import TeacherStats

        stats = getattr(self.teacher, "stats", None)
        out = dict(stats()) if callable(stats) else {**TeacherStats().as_dict(), "mode": None}
        health = getattr(self.teacher, "health", None)
        out["health"] = health() if callable(health) else {**CircuitBreaker().snapshot(), "slow": None}
        return out

    # ------------------------------------------------------------- integrations
    @property
    def graph(self):
        """The insert pipeline as a compiled LangGraph ``StateGraph`` (see graph.py)."""
        if self._graph is None:
            self._graph = self._pipeline.compile()
        return self._graph

    def as_retriever(self, namespace: str | Sequence[str] | None = None, *, k: int = 4,
                     filter: dict[str, Any] | None = None):
        """A LangChain retriever over one namespace (and the namespaces below it)."""
        from .retriever import MembrainRetriever

        return MembrainRetriever(memory=self, namespace=as_namespace(namespace), k=k, filter=filter)

    # -------------------------------------------------------------------- async
    async def aadd(self, text: str, **kwargs: Any) -> str:
        return await asyncio.to_thread(self.add, text, **kwargs)

    async def aadd_many(self, texts: Sequence[str], **kwargs: Any) -> list[str]:
        return await asyncio.to_thread(self.add_many, texts, **kwargs)

    async def asearch(self, query: str | None = None, **kwargs: Any) -> list[MemoryRecord]:
        return await asyncio.to_thread(self.search, query, **kwargs)

    async def aget(self, key: str, **kwargs: Any) -> MemoryRecord | None:
        return await asyncio.to_thread(self.get, key, **kwargs)

    async def adelete(self, key: str, **kwargs: Any) -> bool:
        return await asyncio.to_thread(self.delete, key, **kwargs)

    # -------------------------------------------------------------- lifecycle
    def flush(self) -> None:
        """Wait until background training has caught up (and save a checkpoint)."""
        if self._worker is not None and self._worker.is_alive():
            self._queue.join()
        self._save_checkpoint()

    def close(self) -> None:
        """Finish background training, save the models, release the storage (idempotent)."""
        if self._closed:
            return
        self.flush()
        self._closed = True
        _forget_at_exit(self)
        if self._worker is not None and self._worker.is_alive():
            self._queue.put(None)
            self._worker.join(timeout=30)
        if self._storage is not None:
            self._storage.close()

    def __enter__(self) -> "MembrainMemory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# ------------------------------------------------------------------ process exit
# A memory that is never closed must still train its pending inserts and save its models
# when the interpreter exits, and must not take the process down. Its trainer is a daemon
# thread: left running torch code (which releases the GIL) while the interpreter finalises,
# CPython ends it with pthread_exit as it takes the GIL back, and unwinding that thread
# through torch's C++ frames calls std::terminate ("terminate called without an active
# exception", status 134). So every open memory is flushed before the interpreter starts
# shutting down its threads, and closed (worker stopped, checkpoint saved) at exit. Held by
# weak reference: registering never keeps a memory alive.
_LIVE: Any = None  # weakref.WeakSet of the open memories; created with the exit hooks
_LIVE_LOCK = threading.Lock()


def _register_for_exit(memory: MembrainMemory) -> None:
    global _LIVE
    import weakref

    with _LIVE_LOCK:
        if _LIVE is None:
            _LIVE = weakref.WeakSet()
            _install_exit_hooks()
        _LIVE.add(memory)


def _forget_at_exit(memory: MembrainMemory) -> None:
    with _LIVE_LOCK:
        if _LIVE is not None:
            _LIVE.discard(memory)


def _install_exit_hooks() -> None:
    import atexit
    import concurrent.futures.thread  # noqa: F401 - registers its own exit hook first (see below)

    atexit.register(_at_exit, close=True)
    try:
        # threading's exit hooks run before atexit's, before non-daemon threads are joined,
        # in reverse order of registration: ours runs before concurrent.futures stops its
        # executors, so an LLM teacher (whose requests run on one) still answers the flush.
        threading._register_atexit(_at_exit, close=False)  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):  # another Python; or already shutting down
        pass


def _at_exit(close: bool) -> None:
    """Flush (before threads are joined) or close (at exit) every memory still open."""
    with _LIVE_LOCK:
        memories = list(_LIVE) if _LIVE is not None else []
    for memory in memories:
        try:
            if close:
                memory.close()
            elif not memory._closed:
                memory.flush()
        except Exception as exc:  # noqa: BLE001 - one memory's failure must not stop the others
            logger.warning("membrain: could not %s a memory at exit: %s", "close" if close else "flush", exc)
