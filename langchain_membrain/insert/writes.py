"""`Writer`: how one memory stores what ``add``, ``add_many`` and ``put`` are given.

An embedded item goes through, in order: the duplicate check (``dedupe``), the memory
operation (ADD, UPDATE, DELETE or IGNORE: operations.py), and the insert graph that places
it (graph.py), all under the teacher's time budget for that one item. What the insert
graph hands to training is the :class:`~.background.Background`'s. What one insert cost
travels with it, an :class:`InsertAccount`.
"""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, cast

import numpy as np

from ..errors import InvalidOperationError, MembrainError
from ..storage.forest import Forest
from ..teachers.base import RemoteTeacher, capable, is_fast
from ..teachers.budget import deadline as teacher_deadline
from ..tree.inputs import Namespace, as_namespace, memory_value
from ..tree.placement import Placement
from ..tree.tree import MembrainTree
from . import operations
from .background import Background
from .graph import InsertGraph
from .operations import OperationDecider, OperationDecision


def normalised(text: str) -> str:
    """``text`` as duplicates are compared: casefolded words, apostrophes, punctuation and
    spacing dropped ("im ALLERGIC to peanuts!!" is "I'm allergic to peanuts")."""
    return " ".join(re.findall(r"\w+", re.sub(r"['’]", "", text.casefold()))) or text.strip()


@contextlib.contextmanager
def progress(enabled: bool | Callable[[int, int], None], total: int) -> Iterator[Callable[[], None]]:
    """A rich progress bar (rate and ETA) when enabled, or ``enabled(done, total)`` called
    after each item when it is a function; yields the function that advances it."""
    if callable(enabled):
        report, done = enabled, 0

        def count() -> None:
            nonlocal done
            done += 1
            report(done, total)

        yield count
        return
    if not enabled:
        yield lambda: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = [TextColumn("adding memories"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[rate]}"), TimeRemainingColumn()]
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("add", total=total, rate="")
        start = time.perf_counter()

        def advance() -> None:
            done = bar.tasks[0].completed + 1
            bar.update(task, advance=1, rate=f"{done / max(time.perf_counter() - start, 1e-9):.0f}/s")

        yield advance


def prepare(namespace: Any, texts: list[str], metadatas: list[Any],
            keys: list[Any]) -> list[tuple[Namespace, dict[str, Any], str]]:
    """(namespace, value, text) of each item of ``add_many``, every one validated before
    anything is stored; the error for a bad item of several names it by its index ("item 3
    of 10: memory text is empty")."""
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
    return prepared


def asked_teacher(decision: OperationDecision | None) -> bool:
    """Whether an item's operation question reached the teacher: asked, and, for a teacher
    that sends requests, sent at least one (a question the breaker or the budget stopped is
    not one)."""
    return decision is not None and decision.asked and decision.requests != 0


@dataclass
class InsertAccount:
    """What one insert cost, counted on it as it runs (never from differences of counters
    that other threads' inserts change meanwhile): ``placements``, the teacher questions each
    of its placements counted (its record's ``teacher_calls``); ``untaught``, whether one of
    its questions got no answer (the stat ``without_teacher``)."""

    placements: list[int] = field(default_factory=list)
    untaught: bool = False


class Writer:
    """The write path of one memory over its forest, insert graph and memory operations."""

    def __init__(self, forest: Forest, graph: InsertGraph, operations: OperationDecider,
                 background: Background):
        self.forest = forest
        self.graph = graph
        self.operations = operations
        self.background = background

    def place(self, ns: Namespace, value: dict[str, Any], text: str, vec: np.ndarray,
              key: str | None = None, *, account: InsertAccount | None = None, audit: bool | None = None,
              shared: bool = False, offered: Placement | None = None) -> str:
        """Place one embedded memory through the insert pipeline; returns its key, and
        counts what it cost on ``account``. ``audit``, ``shared`` and ``offered``: see
        ``InsertState``."""
        # The graph's state types an embedding as a list (JSON); its embed step takes an array too.
        done = self.graph.run({"namespace": ns, "text": text, "key": key, "value": value,
                                  "embedding": cast(Any, vec), "audit": audit, "shared": shared,
                                  "offered": offered})
        record = done["inflight"].record
        if account is not None and record is not None:
            account.placements.append(record.teacher_calls)
            account.untaught |= record.deferred is not None
        return cast(str, done["key"])

    def insert(self, ns: Namespace, key: str | None, value: dict[str, Any], text: str, vec: np.ndarray, *,
               budget: float | None, merge: bool = False, operate: bool = False) -> str:
        """Place one embedded memory through the insert pipeline; returns its key. With
        ``merge``, a duplicate of a stored fact (see ``dedupe``) is not stored again: the
        check and the insert hold the namespace's insert lock, so two threads adding the
        same memory store it once. With ``operate``, the memory operation (operations.py)
        decides first whether it is added, updates or deletes an old fact, or is ignored.
        The teacher's questions wait ``budget`` seconds at most, together."""
        bg = self.background
        account = InsertAccount()
        with bg.lock:
            bg.learner_for(int(vec.size))  # the models' first load is not the teacher's time
        with teacher_deadline(budget), self.one_commit(ns):
            done = self._insert_now(ns, key, value, text, vec, account, merge=merge, operate=operate)
        if account.untaught:
            bg.counts["without_teacher"] += 1
        return done

    @contextlib.contextmanager
    def one_commit(self, ns: Namespace) -> Iterator[None]:
        """What the block writes to ``ns`` commits once, at its end (``Forest.transaction``,
        inside the namespace's insert lock), when the teacher answers in-process. A remote
        teacher's questions may take up to the insert's budget, and no writer should wait
        on the storage for them: then each step commits its own write."""
        if not is_fast(self.background.teacher):
            yield
            return
        with self.forest.insert_lock(ns), self.forest.transaction(ns):
            yield

    def _insert_now(self, ns: Namespace, key: str | None, value: dict[str, Any], text: str,
                    vec: np.ndarray, account: InsertAccount, *, merge: bool, operate: bool) -> str:
        if not merge and not operate:
            return self.place(ns, value, text, vec, key, account=account)
        with self.forest.insert_lock(ns):
            dup = None
            if merge:
                with self.forest.lock(ns):
                    dup = self.duplicate_of(ns, value, text, vec)
            if dup is not None:
                def touch(tree: MembrainTree) -> bool:
                    if dup not in tree:  # removed by another process meanwhile
                        return False
                    tree.update_fact(dup)
                    return True

                if self.forest.mutate(ns, touch):
                    self.background.counts["merged"] += 1
                    return dup
            if not operate:
                return self.place(ns, value, text, vec, account=account)
            return self._operate(ns, value, text, vec, account)

    def _operate(self, ns: Namespace, value: dict[str, Any], text: str, vec: np.ndarray,
                 account: InsertAccount) -> str:
        """Run the memory operation for one item, then place it unless the operation did.
        Call holding the namespace's insert lock.

        One question per insert: an LLM in one-call mode answers the operation and the
        placement in one request, so an operation question counts only when the placement
        asked none (the offline rule, a stand-in for such an LLM, is counted the same way);
        in "per_decision" mode they are two requests, counted apart. One audit draw for the
        item's operation and its placement: an audited item is then one request (in
        one-call mode, the operation's question answers the placement too, and its deferred
        audit is not counted again).

        Counted from this item's own decision and this insert's own records (``account``)."""
        bg, ops = self.background, self.operations
        teacher = bg.teacher
        joint = not (capable(teacher, RemoteTeacher) and teacher.mode == "per_decision")
        with bg.lock:
            audit = bg.learner_for(int(vec.size)).draw_audit()
        placements = account.placements

        def place(ns_: Namespace, value_: dict[str, Any], text_: str, vec_: np.ndarray, *,
                  decision: OperationDecision) -> str:
            shared = joint and asked_teacher(decision)
            # the teacher's placement, when it answered it with the operation
            offered = decision.operation.placement if decision.by == "teacher" else None
            return self.place(ns_, value_, text_, vec_, account=account, audit=audit, shared=shared, offered=offered)

        decision = operations.decide(self.forest, ops, ns, value, text, vec, audit=audit)
        op = decision.operation
        op_asked = asked_teacher(decision)
        if decision.asked and not decision.answered:
            account.untaught = True
        placed = len(placements)
        # A DELETE that keeps its item places it before the old fact is retired: in one commit
        # (one_commit), or, with a remote teacher, in two, where a crash between them leaves
        # both stored, never neither.
        kept = place(ns, value, text, vec, decision=decision) if op.kind == "DELETE" and op.keep else None
        done = operations.apply(self.forest, ns, op, value, text, vec, kept)
        if done is None:
            done = place(ns, value, text, vec, decision=decision)
        if decision.requests is not None:
            # A teacher that sends requests: every request of the operation's question is
            # counted, as an operation question (its one-call answer may place the fact
            # too: the learner then counts no placement request).
            with bg.lock:
                bg.learner_for(int(vec.size)).ledger.count("operation", sent=decision.requests,
                                                            failed=not decision.answered)
        elif op_asked and (not joint or not sum(placements[placed:])):
            with bg.lock:
                bg.learner_for(int(vec.size)).ledger.count("operation")
        return done

    def duplicate_of(self, ns: Namespace, value: dict[str, Any], text: str, vec: np.ndarray) -> str | None:
        """The stored fact this memory duplicates: among the facts nearest by embedding (equal
        texts embed alike), one whose normalised text and other value fields are the same.
        Call under the lock."""
        tree = self.forest.tree(ns, create=False)
        index = self.forest.index(ns)
        if tree is None or index is None:
            return None
        fields = {k: v for k, v in value.items() if k != "content"}
        wanted = normalised(text)
        for found, _ in index.nearest(vec, k=8):
            fid = cast(str, found)
            if fid in tree and normalised(tree.node(fid).text) == wanted:
                old = tree.node(fid).metadata.get("value", {})
                if {k: v for k, v in old.items() if k != "content"} == fields:
                    return fid
        return None

    def update_in_place(self, ns: Namespace, key: str, value: dict[str, Any], text: str | None, *,
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
            with self.forest.lock(ns):
                tree = self.forest.tree(ns, create=False)
                if tree is None or key not in tree:
                    return False
        return self.forest.mutate(ns, write)

    def delete(self, ns: Namespace, key: str) -> bool:
        """Retire the fact ``key`` (archived as a tombstone in the same write); False if none."""
        with self.forest.lock(ns):
            tree = self.forest.tree(ns, create=False)
            if tree is None or key not in tree or tree.node(key).kind != "fact":
                return False

        def write(tree: MembrainTree) -> bool:
            if key not in tree or tree.node(key).kind != "fact":
                return False
            tree.retire(key)
            return True

        return self.forest.mutate(ns, write)

    def purge(self, ns: Namespace, cutoff: float | None, kind: str | None) -> int:
        """Remove the archived entries of ``kind`` (None: every kind) last changed before
        ``cutoff`` (None: all), in one write; returns how many."""
        with self.forest.lock(ns):
            tree = self.forest.tree(ns, create=False)
            if tree is None or not tree.archive:
                return 0

        def write(tree: MembrainTree) -> int:
            doomed = [e.id for e in tree.archived(kind) if cutoff is None or e.updated_at < cutoff]
            tree.purge_archived(doomed)
            return len(doomed)

        return self.forest.mutate(ns, write)

