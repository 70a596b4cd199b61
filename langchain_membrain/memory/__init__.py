"""`MembrainMemory`: the one-line entry point.

A memory is a forest: one :class:`~.tree.MembrainTree` per namespace (a tuple of strings;
``"a/b"`` is accepted for ``("a", "b")``). Each fact node's id is its key, its text is the
text that was embedded, and its metadata holds

- ``"value"``: the value as the caller stored it (a dict; ``add(text)`` stores
  ``{"content": text, **metadata}``),
- ``"indexed"``: False for values stored without an embedding (not placed by the models).

Public methods are thin wrappers over operations that take the namespace's lock, so many
threads add and search at once. The work lies in the parts :mod:`.parts` builds from the
frozen :class:`~..insert.config.MemoryConfig`: namespaces (``storage.forest``), writes and
training (``insert``), reads (``retrieval.reads``) and the exit (``insert.shutdown``).
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Sequence

from langchain_core.embeddings import Embeddings

from ..errors import InvalidOperationError, NodeNotFoundError
from ..index.config import RetrievalConfig
from ..insert import shutdown
from ..insert.config import LearnerConfig, MemoryConfig
from ..insert.formation import extractive_summary
from ..insert.operations import OperationDecision
from ..insert.stats import ForestStats, MemoryStats
from ..retrieval import reads
from ..storage.base import Storage
from ..tree.archive import working_id
from ..tree.filters import check_filter
from ..tree.inputs import Namespace, as_namespace, as_timestamp, check_text
from ..tree.kinds import check_kinds
from ..tree.records import MemoryRecord
from ..tree.tree import MembrainTree
from .parts import MemoryParts
from .surface import Forward, in_thread

if TYPE_CHECKING:  # multistep imports LangChain's chat models: not on every start
    from ..retrieval.multistep import Retrieved


class MembrainMemory:
    """Long-term memory as a forest of trees, one per namespace. ``MembrainMemory()``
    works offline with no arguments: the bundled MiniLM embedder, the heuristic teacher,
    everything in memory."""

    # The settings as the parts hold them (read-only; see reconfigure).
    background = Forward("_bg")
    checkpoint_every = Forward("_bg")
    relabel = Forward("_bg")
    naming_interval = Forward("_bg")
    prior = Forward("_bg")
    prior_used = Forward("_bg")  # "trusted", "weights only" or None (stats())
    _learner = Forward("_bg", "current")  # None before the first insert (tests, benchmarks)
    embeddings = Forward("_parts")
    index_fields = Forward("_parts")
    retrieval = Forward("_parts")
    search_mode = Forward("_parts")
    dedupe = Forward("_parts")
    operations = Forward("_parts")
    teacher_budget = Forward("_parts")
    # The namespaces' settings (forest.py).
    refresh_interval = Forward("_forest", doc="Seconds between two checks for other processes' "
                                "writes (to a namespace when it is read, and to the trainer's checkpoint).")
    max_height = Forward("_forest", doc="How many levels below the subject a fact may lie (None: unbounded).")
    max_loaded_namespaces = Forward("_forest", "max_loaded", doc=(
        "With storage, namespaces kept loaded at once (least recently used unloaded first)."))
    refresh_counts = Forward("_forest", "counts", doc=(
        "This process's live counts of namespaces brought up to date after other processes' writes "
        "(by their change log or by a reload), and the seconds spent."))

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
        clock: Callable[[], float] = time.time,
        index_dir: str | os.PathLike[str] | None = None,
    ):
        """Open a memory. Each argument is the field of the same name of
        :class:`~.config.MemoryConfig`, documented there; all of them are validated before
        the storage is opened or the teacher resolved. The memory keeps that config, frozen,
        as :attr:`config`, and builds its parts from it alone."""
        self.config = cfg = MemoryConfig(
            storage, teacher=teacher, teacher_model=teacher_model, embeddings=embeddings, index_fields=index_fields,
            learner=learner, device=device, background=background, refresh_interval=refresh_interval,
            checkpoint_every=checkpoint_every, retrieval=retrieval, search_mode=search_mode, dedupe=dedupe,
            relabel=relabel, naming_interval=naming_interval, prior=prior, max_loaded_namespaces=max_loaded_namespaces,
            max_training_lag=max_training_lag, operations=operations, shadow_teacher=shadow_teacher,
            max_height=max_height, teacher_budget=teacher_budget, clock=clock, index_dir=index_dir)
        parts = self._parts = MemoryParts(cfg)
        self._storage, self._forest, self._bg, self._operations = parts.storage, parts.forest, parts.bg, parts.decider
        self._insert_graph, self._writer, self._former = parts.insert_graph, parts.writer, parts.former
        self._embed, self._embed_label = parts.embed, parts.embed_label
        self._counts = self._bg.counts  # this process's counters (stats().process)
        self._learner_lock = self._bg.lock
        self._closed = False
        self._graph: Any = None
        shutdown.register(self)  # flushed and closed at interpreter exit if never closed

    @property
    def teacher(self) -> Any:
        """Who the models imitate (resolved by :func:`~.teachers.resolve.resolve_teacher`);
        change it with :meth:`reconfigure` (``teacher=``)."""
        return self._bg.teacher

    def reconfigure(self, **changes: Any) -> MemoryConfig:
        """Change settings of the open memory: ``memory.reconfigure(teacher="openai:gpt-4o-mini",
        teacher_budget=5.0)``. Each keyword is a :class:`~.config.MemoryConfig` field of
        :data:`~.config.CHANGEABLE` (the teacher and its budget, ``background``,
        ``checkpoint_every``, ``relabel``, ``naming_interval``, ``search_mode``, ``dedupe``,
        ``refresh_interval``, ``max_loaded_namespaces``); the others decide what the memory is
        built of, and a new memory is opened to change them. The new config is validated as
        the constructor's is, then reaches every part before this returns; it becomes
        :attr:`config`, and is returned. A new teacher answers every question from the next
        one on (placement, stage 2, audit, batch, memory operation, naming); what was decided
        at construction stays (the search's topic weight, whether the shipped prior was
        trusted). Raises :class:`~.errors.ConfigurationError` for a field that cannot change
        and :class:`~.errors.InvalidOperationError` for a value the constructor refuses."""
        config = self.config.changed(**changes)
        self._parts.configure(config, teacher_changed=bool({"teacher", "teacher_model"} & set(changes)))
        self.config = config
        return config

    # ------------------------------------------------------------- namespaces
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
        return self._parts.list_namespaces(prefix, suffix, max_depth, limit, offset, current_only)

    # ----------------------------------------------------------------- writes
    @property
    def read_only(self) -> bool:
        """Whether the storage is open for reading only (a read-only SQLite file, directory
        or mount, or ``open_storage(path, read_only=True)``): search, get, history, stats
        and export work; add, put, delete and purge_history raise
        :class:`~.errors.ReadOnlyError` before anything is embedded or asked, and the
        models are never trained or saved."""
        return self._storage is not None and self._storage.read_only

    def add(self, text: str, *, namespace: str | Sequence[str] | None = None,
            metadata: dict[str, Any] | None = None, key: str | None = None, kind: str | None = None,
            session: str | None = None) -> str:
        """Store one memory (value ``{"content": text, **metadata}``) and return its key.
        ``kind`` and ``session``: see :meth:`add_many`."""
        return self.add_many([text], namespace=namespace, metadatas=[metadata], keys=[key], kind=kind,
                             session=session)[0]

    def add_many(self, texts: Sequence[str], *, namespace: str | Sequence[str] | None = None,
                 metadatas: Sequence[dict[str, Any] | None] | None = None,
                 keys: Sequence[str | None] | None = None,
                 progress: bool | Callable[[int, int], None] | None = None,
                 kind: str | None = None, session: str | None = None) -> list[str]:
        """Store many memories (embedded in one batch) and return their keys.

        ``kind`` None (the default): each text is an input, *formed* into memories
        (formation.py). A teacher that forms keeps the input as a raw item and stores the
        facts and experiences it states, each placed in the tree, with the raw item as their
        source; the key returned is the raw item's. Any other teacher stores the input as
        its own fact, as said, and returns that fact's key. ``kind="fact"`` or
        ``"experience"`` stores the text as that kind directly; ``"raw"`` keeps it as a raw
        item only (searchable, never placed); ``"working"`` makes it the session's working
        memory. ``session``: the session the inputs belong to, which keeps one working memory
        (:meth:`working`); it is recorded in each stored value as ``"session"``, so
        ``session="a"`` is ``metadata={"session": "a"}`` (and wins over a metadata's
        ``"session"``). Default: each metadata's ``"session"``, else none.

        ``progress``: show a progress bar (default: on a terminal, for 200 memories or more),
        or a function called as ``progress(done, total)`` after each input is stored.
        Every input is validated before anything is stored; the error for a bad item of
        several names it by its index ("item 3 of 10: memory text is empty").
        """
        return self._parts.add_many(namespace, texts, metadatas, keys, progress, kind, session)

    def put(self, namespace: str | Sequence[str], key: str, value: dict[str, Any], *,
            index: bool | Sequence[str] | None = None, kind: str = "fact") -> None:
        """Insert or replace the value under ``key`` (LangGraph store semantics).

        The embedded text comes from ``index`` (a list of value fields or paths), else the
        memory's ``index_fields``: by default ``content``, then ``text``, else the value's
        JSON. ``index=False`` stores the value without embedding it (not placed, listed
        after the scored results of a query). When the text of an existing key changes,
        the fact is placed again; otherwise only its value changes. ``created_at`` is kept.
        ``kind``: "fact" or "experience", a leaf of the tree either way.
        """
        self._parts.put(namespace, key, value, index, kind)

    def text_of(self, value: dict[str, Any], fields: list[str] | None = None) -> str:
        """The text embedded for ``value``: the first present of ``fields`` (default
        ``content``, then ``text``), else the value's JSON; several fields are joined."""
        return self._parts.text_of(value, fields)

    def delete(self, key: str, *, namespace: str | Sequence[str] | None = None) -> bool:
        """Delete a memory; returns False if there was none.

        The memory leaves the tree (``get`` and ``search`` no longer return it) but not the
        history: its last version is archived as a tombstone, in the same write, so
        ``history(key)`` shows it with status ``"deleted"`` and ``valid_to`` the time of the
        deletion (as a memory operation's DELETE does). ``purge_history`` forgets it for good."""
        ns = as_namespace(namespace)
        self._parts.check_writable()
        return self._writer.delete(ns, key)

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
        self._parts.check_writable()
        cutoff = None if before is None else as_timestamp(before, "before")
        if kind not in (None, "history", "ignored"):
            raise InvalidOperationError(f"kind is 'history', 'ignored' or None, got {kind!r}")
        return self._writer.purge(ns, cutoff, kind)

    # ------------------------------------------------------------------ reads
    def history(self, key: str, *, namespace: str | Sequence[str] | None = None) -> list[MemoryRecord]:
        """Every version of the memory ``key``, oldest first: its superseded or deleted
        versions (status ``"superseded"``/``"deleted"``, each with ``valid_from``,
        ``valid_to`` and ``superseded_by``), then the current one if it still exists.
        An archived entry's own id (``key@vN``) is accepted too.

        [] when no namespace holds ``key``. When ``namespace`` lacks it but another one has
        it (looked for among the namespaces this process holds loaded: every namespace,
        without storage), a :class:`~.errors.NodeNotFoundError` names the ``namespace=`` to
        pass."""
        ns = as_namespace(namespace)
        found = reads.history(self._forest, ns, key)
        if not found:
            elsewhere = [other for other in self._forest.loaded_namespaces()
                         if other != ns and reads.history(self._forest, other, key)]
            if elsewhere:
                raise NodeNotFoundError(f"no memory {key!r} in {ns!r}; it is in "
                                        f"{' and '.join(map(repr, elsewhere))}: pass namespace={elsewhere[0]!r}")
        return found

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
        return reads.ignored(self._forest, as_namespace(namespace), limit)

    def get(self, key: str, *, namespace: str | Sequence[str] | None = None) -> MemoryRecord | None:
        """The memory stored under ``key`` in ``namespace``, or None: a current fact or
        experience, a raw item, or a session's current working memory (kind ``"working"``,
        the key ``add(..., kind="working")`` returns). An archived version is read with
        :meth:`history` (or :meth:`working_history`)."""
        return reads.get(self._forest, as_namespace(namespace), key)

    def path(self, key: str, *, namespace: str | Sequence[str] | None = None) -> list[str]:
        """Labels of the aspects from the root down to the memory (empty if under the root)."""
        record = self.get(key, namespace=namespace)
        if record is None:
            raise InvalidOperationError(f"no memory {key!r} in {as_namespace(namespace)!r}")
        return record.path

    def search(self, query: str | None = None, *, namespace: str | Sequence[str] | None = None,
               limit: int = 5, offset: int = 0, filter: dict[str, Any] | None = None,
               exact_namespace: bool = False, include_history: bool = False,
               kinds: str | Sequence[str] | None = None, min_score: float | None = None) -> list[MemoryRecord]:
        """Memories in ``namespace`` and every namespace below it (unless
        ``exact_namespace``), matching ``filter``: best first for a query, newest first
        without one. No ``namespace`` (None, or ``()``) searches every namespace of the
        memory, as ``membrain search`` without ``--ns`` does; pass the namespace to search
        one user's memories only. ``include_history`` adds superseded and deleted versions
        (their ``status`` says which); with it, every hit is ranked by its plain cosine with
        the query, so current and past versions rank on one scale.

        A hit's ``score`` is the estimated probability that it is relevant to the query
        (scores.py: calibrated on a labelled set, comparable across namespaces, their sizes
        and kinds); the same fact scores the same for the same query whether one namespace
        or many are searched, here, in :class:`~.store.MembrainStore` and in the retriever.
        Hits come in the order their namespace's index ranks them (the fused score, every
        boost included), their scores made non-increasing down it (a run that rises gets its
        mean: scores.non_increasing), namespaces merged by score. ``min_score``: drop hits
        scoring below it (and unscored ones); :data:`~.scores.DEFAULT_MIN_SCORE` (0.3) is
        the documented threshold, which the agent tools use. With ``include_history`` the
        score is instead the cosine with the query, clipped to ``[0, 1]`` (archived versions
        are in no index). Unembedded facts come last, with None.

        A newer current fact that supersedes a hit, or restates it (retrieval/supersession.py),
        is placed just before it with the hit's score, whatever its own; a superseded hit stays,
        marked (``probably_superseded_by``, ``supersedes``). A list may exceed ``limit``.

        A query that names a subject, one of the searched namespaces' labels below
        ``namespace`` as a word ("what does Maya eat?" under ``("users",)``), searches the
        namespaces it names only.

        ``kinds``: the memory kinds searched, one or several of "fact", "experience", "raw"
        and "working" (default: the first three, fused). A fact and the raw item it was
        formed from take one slot: the better scoring of the two stands for both (a fact
        hit's ``sources`` name its raw items)."""
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
        spaces = reads.named_subjects(spaces, len(prefix), query) or spaces
        searched = check_kinds(kinds)
        if "working" in searched:
            raise InvalidOperationError("the working memory is read with memory.working(namespace, session)")
        hits = reads.search(self._forest, spaces, query, filter=filter, limit=limit, offset=offset,
                            include_history=include_history, embed=self._embed, mode=self.search_mode,
                            kinds=searched)
        if min_score is None:
            return hits
        if isinstance(min_score, bool) or not isinstance(min_score, (int, float)) or not 0.0 <= min_score <= 1.0:
            raise InvalidOperationError(f"min_score is a probability in [0, 1] or None, got {min_score!r}")
        return [h for h in hits if h.score is not None and h.score >= min_score]

    def working(self, namespace: str | Sequence[str] | None = None,
                session: str | None = None) -> MemoryRecord | None:
        """The working memory of ``session`` (None: the inputs added without one): a running
        summary of the session, kind ``"working"``. A forming teacher writes it with each
        input; otherwise it is an extractive summary of the session's facts and raw items
        (formation.extractive_summary), computed now. None when the session holds nothing."""
        ns = as_namespace(namespace)
        session = "" if session is None else str(session)
        found = reads.working(self._forest, ns, session)
        if found:
            return found[0]
        texts = reads.session_texts(self._forest, ns, session)
        if not texts:
            return None
        now = time.time()
        summary = extractive_summary(texts)
        return MemoryRecord(working_id(session), ns, summary, {"content": summary, "session": session}, [],
                            now, now, kind="working")

    def working_history(self, namespace: str | Sequence[str] | None = None,
                        session: str | None = None) -> list[MemoryRecord]:
        """Every version of ``session``'s working memory that a teacher wrote, oldest first."""
        return reads.working(self._forest, as_namespace(namespace), "" if session is None else str(session),
                             history=True)

    def working_memories(self, namespace: str | Sequence[str] | None = None) -> list[MemoryRecord]:
        """The current working memory of each session of ``namespace`` that a teacher wrote."""
        return reads.working_memories(self._forest, as_namespace(namespace))

    def retrieve(self, query: str, namespace: str | Sequence[str] | None = None, *, llm: Any,
                 max_steps: int = 6) -> Retrieved:
        """Retrieval in several steps (multistep.py): ``llm`` (a LangChain chat model with
        tool calling) searches ``namespace`` kind by kind, at most ``max_steps`` times, then
        finishes. Returns the hits gathered (raw items already shown are left out of later
        steps) and the trace of every tool call. ``multistep.retrieval_graph`` is the same
        as a LangGraph subgraph. An ``llm`` that is no chat model, or one that cannot call
        tools, is a :class:`~.errors.ConfigurationError` before anything is searched."""
        query = check_text(query, "the query")
        from ..retrieval.multistep import retrieve

        return retrieve(self, query, as_namespace(namespace), llm, max_steps=max_steps)

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
        return MemoryStats(forest=ForestStats.of(reads.trees(self._forest, names), namespaces=len(names)),
                           loaded_namespaces=self._forest.loaded(), inserts_in_flight=self._insert_graph.in_flight(),
                           operations=self._operations.stats(), formation=self._former.student.stats(),
                           **self._bg.report())

    # ------------------------------------------------------------- integrations
    @property
    def graph(self):
        """The insert pipeline as a compiled LangGraph ``StateGraph`` (see graph.py)."""
        if self._graph is None:
            self._graph = self._insert_graph.compile()
        return self._graph

    def as_retriever(self, namespace: str | Sequence[str] | None = None, *, k: int = 4,
                     filter: dict[str, Any] | None = None):
        """A LangChain retriever over one namespace (and the namespaces below it)."""
        from ..retrieval.retriever import MembrainRetriever

        return MembrainRetriever(memory=self, namespace=as_namespace(namespace), k=k, filter=filter)

    # -------------------------------------------------------------------- async
    aadd = in_thread(add)
    aadd_many = in_thread(add_many)
    asearch = in_thread(search)
    aget = in_thread(get)
    adelete = in_thread(delete)

    # -------------------------------------------------------------- lifecycle
    def flush(self, timeout: float | None = None) -> None:
        """Wait until background training has caught up (and save a checkpoint).

        ``timeout``: seconds the teacher's pending questions may still take (None: as long
        as the teacher's own timeouts allow). Questions still pending then are dropped:
        their memories keep the placement they were given, and what was answered is trained
        (``Background.flush``)."""
        self._bg.flush(timeout)

    def close(self, timeout: float = shutdown.CLOSE_TIMEOUT_S) -> None:
        """Finish background training, save the models, release the storage (idempotent).

        The teacher's pending questions get ``timeout`` seconds, then are dropped (their
        memories keep their placement: nothing stored is lost); what they left is trained and
        the checkpoint written. A teacher that hangs, refuses connections or answers slowly
        delays ``close()`` by about ``timeout``, whatever timeout its client has."""
        if self._closed:
            return
        started = time.monotonic()
        self._bg.flush(timeout, final=True)
        self._closed = True
        shutdown.forget(self)
        self._bg.stop(timeout=max(1.0, timeout - (time.monotonic() - started)))
        if self._storage is not None:
            self._forest.save_indexes()  # a restart then reads them instead of indexing
            self._storage.close()

    def __enter__(self) -> MembrainMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

