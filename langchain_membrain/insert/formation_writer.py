"""`FormationWriter`: how one memory stores what its inputs become (formation.py).

For the inputs of one ``add`` / ``add_many`` call, in the order given:

1. the **formation** of each input: the offline formation when the teacher does not form
   (the input is its own fact, stored by :meth:`~.writes.Writer.insert` as before); raw only,
   unasked, where the formation student is sure the teacher would form nothing; otherwise the
   teacher's answer, one question per run of up to :data:`BATCH` consecutive inputs of one
   namespace and session when it answers batches (``form_batch``), else one per input;
2. the **writes** of each formed input: its raw item first (what was said is kept whatever
   the teacher answered), then each fact or experience through ``Writer.insert`` (duplicate
   check, memory operation, placement), marked with its kind, sources and valid time in a
   second write (a crash between the two leaves a plain fact), then the session's working
   summary when the answer changed it.

An answer that fails or is refused keeps its inputs as said, with one FormationWarning.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Any, Callable, cast

import numpy as np

from ..students.formation import FormationStudent
from ..teachers.base import RemoteTeacher, capable
from ..tree.inputs import Namespace
from ..tree.kinds import KIND_KEY, SOURCES_KEY, VALID_TIME_KEY
from ..tree.tree import MembrainTree
from .formation import (
    BatchFormingTeacher,
    Candidate,
    Formation,
    FormationInput,
    FormationWarning,
    FormingTeacher,
    check_answer,
    check_batch_answer,
    offline_formation,
)
from .writes import Writer

#: Most inputs one batch formation question shows.
BATCH = 8


@dataclass(frozen=True)
class Input:
    """One validated, embedded input of ``add_many``."""

    ns: Namespace
    key: str | None
    value: dict[str, Any]
    text: str
    vec: np.ndarray
    session: str


class FormationWriter:
    """Forms and stores inputs (module docstring); owns the formation student."""

    def __init__(self, writer: Writer, embed: Callable[[list[str]], np.ndarray]):
        self.writer, self.embed = writer, embed
        self.forest, self.background = writer.forest, writer.background
        self.student = FormationStudent()  # learns which inputs state nothing

    def store(self, inputs: list[Input], *, budget: float | None, dedupe: bool, operations: bool,
              advance: Callable[[], None] = lambda: None) -> list[str]:
        """Form and store ``inputs``; returns each input's key: its fact's when it is its
        own fact, else its raw item's. ``dedupe`` and ``operations``: the memory's settings,
        for the inputs given without a key (as ``add`` applies them)."""
        def write(item: Input, formation: Formation) -> str:
            free = item.key is None
            return self._write(item, formation, budget=budget, merge=dedupe and free, operate=operations and free)

        teacher = self.background.teacher
        if not (capable(teacher, FormingTeacher) and teacher.forms):
            out = []
            for item in inputs:
                out.append(write(item, Formation((), as_said=True)))
                advance()
            return out
        size = BATCH if capable(teacher, BatchFormingTeacher) else 1
        keys: list[str] = []
        run: list[tuple[Input, float | None]] = []

        def flush() -> None:
            for item, formation in zip([i for i, _ in run], self._ask([i for i, _ in run], [p for _, p in run])):
                keys.append(write(item, formation))
                advance()
            run.clear()

        for item in inputs:
            p = self.student.prob_raw_only(item.vec)
            if self.student.decides(p):
                flush()  # the inputs before it first: a session is stored in the order it was said
                keys.append(write(item, Formation((), None, by="student")))
                advance()
                continue
            if run and (len(run) == size or (run[0][0].ns, run[0][0].session) != (item.ns, item.session)):
                flush()
            run.append((item, p))
        flush()
        return keys

    # ------------------------------------------------------------- the question
    def _ask(self, items: list[Input], predicted: list[float | None]) -> list[Formation]:
        """The teacher's formations of ``items`` (one session of one namespace), validated
        and counted as one question; each kept as said when the answer fails or is refused."""
        if not items:
            return []
        teacher: Any = self.background.teacher
        working = self._working_text(items[0].ns, items[0].session)
        shown = [FormationInput(i.text, {k: v for k, v in i.value.items() if k != "content"}, i.session, working)
                 for i in items]
        before = teacher.requests_sent() if capable(teacher, RemoteTeacher) else None
        failed = False
        try:
            if len(items) == 1:
                formations = [check_answer(teacher.form(shown[0]))]
            else:
                formations = check_batch_answer(teacher.form_batch(shown), len(items))
        except Exception as exc:  # an untrusted answer, or a failed request: keep the inputs as said
            warnings.warn(f"formation failed ({type(exc).__name__}: {exc}); the input is kept as said",
                          FormationWarning, stacklevel=4)
            formations, failed = [offline_formation(i) for i in shown], True
        sent = None if before is None else teacher.requests_sent() - before
        with self.background.lock:
            self.background.learner_for(int(items[0].vec.size)).ledger.count("formation", sent=sent, failed=failed)
        if not failed:
            for item, formation, p in zip(items, formations, predicted):
                self.student.observe(item.vec, not formation.candidates, p)
        return formations

    def _working_text(self, ns: Namespace, session: str) -> str | None:
        with self.forest.lock(ns):
            tree = self.forest.tree(ns, create=False)
            found = None if tree is None else tree.working(session)
            return None if found is None else found.text

    # ------------------------------------------------------------------ writes
    def _write(self, item: Input, formation: Formation, *, budget: float | None, merge: bool, operate: bool) -> str:
        """Store one input as ``formation`` says (module docstring, step 2)."""
        ns, value = item.ns, item.value
        if formation.as_said:
            return self.writer.insert(ns, item.key, value, item.text, item.vec, budget=budget, merge=merge,
                                      operate=operate)
        working = formation.working if formation.working != self._working_text(ns, item.session) else None
        texts = [c.text for c in formation.candidates]
        vecs: Any = self.embed(texts + ([working] if working else [])) if texts or working else []
        with self.writer.one_commit(ns):  # the raw item, its facts and the summary: one commit
            raw_key = self.forest.mutate(ns, lambda t: t.keep_raw(item.key, item.text, embedding=item.vec,
                                                                  metadata={"value": value}))
            for cand, cvec in zip(formation.candidates, vecs):
                fact = self.writer.insert(ns, None, {**value, "content": cand.text}, cand.text, cvec, budget=budget,
                                          merge=merge, operate=operate)
                self.forest.mutate(ns, functools.partial(mark_formed, key=fact, cand=cand, raw_key=raw_key))
            if working:
                meta = {"value": {**value, "content": working}, SOURCES_KEY: [raw_key]}
                self.forest.mutate(ns, lambda t: t.set_working(item.session, cast(str, working), metadata=meta,
                                                                embedding=vecs[-1]))
        return raw_key


def mark_formed(tree: MembrainTree, key: str, cand: Candidate, raw_key: str | None) -> None:
    """Record on the fact ``key`` its kind, its valid time and ``raw_key`` among its sources
    (a duplicate of an earlier fact gains a source). Nothing when the operation made it no
    fact (IGNORE, a retraction) or another process removed it."""
    if key not in tree or tree.node(key).kind != "fact":
        return
    meta = dict(tree.node(key).metadata)
    if raw_key is not None:
        meta[SOURCES_KEY] = [*(s for s in meta.get(SOURCES_KEY, ()) if s != raw_key), raw_key]
    meta[KIND_KEY] = cand.kind
    if cand.valid_from is not None or cand.valid_to is not None:
        meta[VALID_TIME_KEY] = [cand.valid_from, cand.valid_to]
    if meta != {KIND_KEY: "fact", **tree.node(key).metadata}:
        tree.update_fact(key, metadata=meta)
