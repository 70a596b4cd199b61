"""`MemoryParts`: what a :class:`~.memory.MembrainMemory` is built of, from its config.

A memory is made from one frozen :class:`~.config.MemoryConfig`. This module turns it into
the parts that do the work, each made once here: the embedder (and the label cache), the
teacher's seat and the operation decider, the storage, the search settings, the
:class:`~.forest.Forest` of namespaces, the :class:`~.background.Background` learner, the
insert pipeline and the writers. It also holds the write plumbing the public verbs share
(the read-only check, the embedded text of a value, the items of ``add_many`` and ``put``)
and the namespace listing, so that the memory keeps the public verbs and their contracts.

Behaviour follows the config and what the teacher says of itself (``names_topics``,
``choose_operation``: teachers.base), never the teacher's class.
"""

from __future__ import annotations

import contextlib
import json
import sys
from typing import Any, Callable, Sequence, cast

import numpy as np

from ..errors import InvalidOperationError, ReadOnlyError
from ..index.config import RetrievalConfig, resolve_topic_weight
from ..index.embeddings import EmbeddingCache, MiniLMEmbeddings, embed_texts
from ..index.facts import FactIndex
from ..insert.background import Background, own_config
from ..insert.config import MemoryConfig
from ..insert.formation import Candidate
from ..insert.formation_writer import FormationWriter, Input, mark_formed
from ..insert.graph import InsertGraph
from ..insert.jobs import importing
from ..insert.operations import OperationDecider
from ..insert.writes import Writer, prepare
from ..insert.writes import progress as progress_bar
from ..retrieval import reads
from ..storage import open_storage
from ..storage.base import Storage
from ..storage.forest import Forest
from ..storage.index_cache import IndexCache
from ..students.operation import OperationStudent
from ..students.prior import load_operation_prior
from ..teachers.base import names_topics
from ..teachers.resolve import resolve_teacher
from ..teachers.seat import TeacherSeat
from ..tree.inputs import Namespace, as_namespace, check_text
from ..tree.inputs import json_copy as _json_copy
from ..tree.kinds import check_kinds


class MemoryParts:
    """The parts of one memory, built from ``cfg`` (validated already: nothing here checks
    a setting). The settings :meth:`configure` may change are read at each use."""

    def __init__(self, cfg: MemoryConfig):
        self.embeddings = cfg.embeddings if cfg.embeddings is not None else MiniLMEmbeddings()
        self.index_fields = list(cfg.index_fields or ())
        # Labels (aspect names and their n-gram candidates) are embedded through a cache:
        # naming and renaming embed the same short phrases again and again.
        self.embed_label = EmbeddingCache(self.embed)
        resolved = resolve_teacher(cfg.teacher, cfg.teacher_model, embed=self.embed_label)
        shadow = (None if cfg.shadow_teacher is None
                  else resolve_teacher(cfg.shadow_teacher, cfg.teacher_model, embed=self.embed_label))
        self.operations = bool(cfg.operations)
        learner_config = own_config(cfg.learner, cfg.device)  # a new value: configs are frozen
        seat = TeacherSeat(resolved)  # the one place the teacher is held, read at each question
        student = None
        if cfg.operations is True:
            student = OperationStudent(prior=(lambda: load_operation_prior(seat.teacher)) if cfg.prior else None,
                                       threads=learner_config.training.threads)
        self.decider = OperationDecider(seat, student=student)
        self.storage: Storage | None = (cfg.storage if isinstance(cfg.storage, Storage) or cfg.storage is None
                                        else open_storage(cfg.storage))
        # The tree joins search (the topic match) when the teacher names topics: any teacher
        # but the offline rule (RetrievalConfig.tree_topic_weight, teachers.base.names_topics).
        self.retrieval = resolve_topic_weight(cfg.retrieval or RetrievalConfig(),
                                              teacher_names_topics=names_topics(resolved))
        # Every namespace's tree, search index, locks and sync with storage (forest.py).
        self.forest = Forest(self.storage, new_index=self.new_index, refresh_interval=cfg.refresh_interval,
                             max_loaded=cfg.max_loaded_namespaces, max_height=cfg.max_height, clock=cfg.clock,
                             index_cache=IndexCache.for_storage(self.storage, cfg.index_dir))
        # The learner, its trainer thread, its checkpoints and this process's counters; the
        # insert graph reaches the forest, the embedder and the learner through it.
        self.bg = Background(self.forest, self.storage, seat, shadow=shadow, operations=self.decider,
                             learner_config=learner_config, embed=self.embed, embed_label=self.embed_label,
                             settings=cfg)
        self.insert_graph = InsertGraph(self.bg)
        self.writer = Writer(self.forest, self.insert_graph, self.decider, self.bg)
        self.former = FormationWriter(self.writer, self.embed)
        self.configure(cfg)

    def configure(self, cfg: MemoryConfig, *, teacher_changed: bool = False) -> None:
        """Hand the settings of :data:`~.config.CHANGEABLE` to every part that reads them."""
        self.teacher_budget, self.dedupe, self.search_mode = cfg.teacher_budget, cfg.dedupe, cfg.search_mode
        self.forest.refresh_interval, self.forest.max_loaded = cfg.refresh_interval, cfg.max_loaded_namespaces
        self.bg.configure(cfg)
        if teacher_changed:
            self.bg.teacher = resolve_teacher(cfg.teacher, cfg.teacher_model, embed=self.embed_label)

    # ---------------------------------------------------------------- embedding
    def embed(self, texts: list[str]) -> np.ndarray:
        return embed_texts(self.embeddings, texts)

    def embed_query(self, text: str) -> np.ndarray:
        """One text's embedding (each search index's ``embed_query``)."""
        return self.embed([text])[0]

    def new_index(self) -> FactIndex:
        """An empty search index for a namespace (made by the forest at a namespace's first write)."""
        return FactIndex(self.retrieval, embed_query=self.embed_query)

    # ---------------------------------------------------------------- namespaces
    def list_namespaces(self, prefix: Sequence[str] | None, suffix: Sequence[str] | None, max_depth: int | None,
                        limit: int, offset: int, current_only: bool) -> list[Namespace]:
        """``MembrainMemory.list_namespaces``."""
        if self.storage is not None:
            found = self.storage.namespaces_with_facts() if current_only else self.storage.list_namespaces()
        else:
            found = self.forest.loaded_namespaces()
            if current_only:
                found = [ns for ns in found if reads.holds_facts(self.forest, ns)]
        found = reads.select_namespaces(found, prefix=prefix, suffix=suffix, max_depth=max_depth)
        return found[offset: offset + limit]

    # -------------------------------------------------------------------- writes
    def check_writable(self) -> None:
        if self.storage is not None and self.storage.read_only:
            raise ReadOnlyError(f"the memory's storage {self.storage.location!r} is open read-only: "
                                "nothing was written")

    def text_of(self, value: dict[str, Any], fields: list[str] | None = None) -> str:
        """``MembrainMemory.text_of``."""
        from langgraph.store.base import get_text_at_path, tokenize_path  # on first use: not on every start

        explicit = fields is not None
        found: list[str] = []
        for path in fields or self.index_fields:
            found += [t for t in get_text_at_path(value, tokenize_path(path)) if t]
            if found and not explicit:
                break  # defaults are alternatives: the first present field wins
        if found:
            return "\n".join(found)
        return json.dumps(value, sort_keys=True, ensure_ascii=False)

    def add_many(self, namespace: str | Sequence[str] | None, texts: Sequence[str],
                 metadatas: Sequence[dict[str, Any] | None] | None, keys: Sequence[str | None] | None,
                 progress: bool | Callable[[int, int], None] | None, kind: str | None,
                 session: str | None) -> list[str]:
        """``MembrainMemory.add_many``: validate every input, embed them in one batch, store."""
        if isinstance(texts, str):
            raise InvalidOperationError("add_many takes a list of texts; use add() for one")
        if kind is not None:
            check_kinds(kind)
        if session is not None and not isinstance(session, str):
            raise InvalidOperationError(f"a session is a str, got {type(session).__name__}")
        if not (progress is None or isinstance(progress, bool) or callable(progress)):
            raise InvalidOperationError(f"progress is a bool or a function (done, total), got {type(progress).__name__}")
        self.check_writable()
        texts = list(texts)
        metadatas = list(metadatas) if metadatas is not None else [None] * len(texts)
        keys = list(keys) if keys is not None else [None] * len(texts)
        prepared = prepare(namespace, texts, metadatas, keys)
        if session is not None:  # recorded as a metadata's session is (reads.session_texts reads it)
            for _, value, _ in prepared:
                value["session"] = session
        vecs = self.embed([text for _, _, text in prepared])
        if progress is None:
            progress = len(texts) >= 200 and sys.stderr.isatty()
        # A bulk import waits for the trainer as long as it takes and skips nothing; one add
        # (add() is add_many of one) waits a bounded time, then skips (jobs.py).
        bulk = importing() if len(texts) > 1 else contextlib.nullcontext()
        with progress_bar(progress, len(texts)) as advance, bulk:
            if kind is None:
                inputs = [Input(ns, key, value, text, vec, session if session is not None else
                                str(value.get("session", ""))) for (ns, value, text), vec, key in zip(prepared, vecs, keys)]
                return self.former.store(inputs, budget=self.teacher_budget, dedupe=self.dedupe,
                                         operations=self.operations, advance=advance)
            out = []
            for (ns, value, text), vec, key in zip(prepared, vecs, keys):
                out.append(self._store(ns, key, value, text, vec, kind, session))
                advance()
            return out

    def _store(self, ns: Namespace, key: str | None, value: dict[str, Any], text: str, vec: np.ndarray,
               kind: str, session: str | None) -> str:
        """One validated, embedded item of ``add_many``, stored directly as ``kind``."""
        session = session if session is not None else str(value.get("session", ""))
        if kind == "raw":
            return self.forest.mutate(ns, lambda t: t.keep_raw(key, text, embedding=vec, metadata={"value": value}))
        if kind == "working":
            return self.forest.mutate(ns, lambda t: t.set_working(session, text, metadata={"value": value},
                                                                   embedding=vec))
        done = self.writer.insert(ns, key, value, text, vec, budget=self.teacher_budget,
                                  merge=self.dedupe and key is None, operate=self.operations and key is None)
        if kind == "experience":
            self.forest.mutate(ns, lambda t: mark_formed(t, done, Candidate(text, "experience"), None))
        return done

    def put(self, namespace: str | Sequence[str], key: str, value: dict[str, Any],
            index: bool | Sequence[str] | None, kind: str) -> None:
        """``MembrainMemory.put``."""
        ns = as_namespace(namespace)
        self.check_writable()
        if kind not in ("fact", "experience"):
            raise InvalidOperationError(f"put stores a 'fact' or an 'experience', not {kind!r}")
        if not isinstance(key, str) or not key:
            raise InvalidOperationError("a key is a non-empty str")
        if not isinstance(value, dict):
            raise InvalidOperationError(f"a value is a dict, got {type(value).__name__}")
        value = _json_copy(value)
        if index is False:
            self.writer.update_in_place(ns, key, value, None, placed=False)
        else:
            text = check_text(self.text_of(value, None if index in (None, True) else list(cast(Sequence[str], index))))
            if not self.writer.update_in_place(ns, key, value, text, placed=True):
                self.writer.insert(ns, key, value, text, self.embed([text])[0], budget=self.teacher_budget)
        with self.forest.lock(ns):  # the stored kind, without copying the record
            tree = self.forest.tree(ns, create=False)
            stored = reads.kind_of(tree, key) if tree is not None and key in tree else kind
        if stored != kind:
            self.forest.mutate(ns, lambda t: mark_formed(t, key, Candidate("", cast(Any, kind)), None))
