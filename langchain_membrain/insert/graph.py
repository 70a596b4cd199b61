"""The insert pipeline as a LangGraph ``StateGraph``: the single definition of an insert.

::

    START -> embed -> stage1_descend -(unsure)-> stage1_teacher -> attach
                          +---------(attach here)-------------------^
    attach -> stage2_rewrite -(unsure, not asked yet)-> stage2_teacher -> apply_actions
                   +------------------------------------------------------^
    apply_actions -(its namespace's batch is full)-> batch_teacher -> train -> END
          +-----------------------------------------------------------^

The teacher is asked at most once per insert, one joint question (where the fact goes, the
stage-2 actions, the names of new aspects): in ``stage1_teacher`` when the model is unsure
during its descent, else in ``stage2_teacher`` when it is unsure of stage 2; a drawn audit
is asked later, by the background trainer (``train``). With batch questions
(``LearnerConfig.batch``, a teacher with ``place_batch``) those two nodes ask nothing: the
insert waits where the student put it, and the insert that fills its namespace's batch asks
one question about all of them in ``batch_teacher``.

The nodes are plain functions (methods of :class:`InsertGraph`) and the routing is three
plain functions, so the same definition runs either compiled (``mem.graph``, composable
into a user's graph as a subgraph) or walked directly by :meth:`InsertGraph.run`,
which ``MembrainMemory.add`` uses because a compiled graph adds its own cost to every step
(``bench graph`` measures it).
The descent loops inside ``stage1_descend`` (one graph step for many tree levels).

State in: ``text``, and optionally ``namespace``, ``metadata``, ``key`` (and, from the memory
operation that ran first, ``audit``: its audit draw, shared by the placement, and ``shared``:
its question answered the placement too, so this insert's audit is not counted again). State out:
``key``, ``parent_path`` (aspect labels from the root to the new fact's parent),
``teacher_calls``. The insert in flight travels in the state itself (``inflight``: an
:class:`InFlight`, its namespace, key and record), so nothing is held beside the graph. It
is an in-process value: the compiled graph keeps it in a channel that is never
checkpointed, so the state a user's checkpointer saves stays serialisable (a run resumed
from a checkpoint in the middle of an insert raises; the insert is started again).

The nodes reach the memory through :class:`InsertHost` alone: its namespaces (the
:class:`~.forest.Forest`, which owns each namespace's tree, index and locks), its embedder,
its learner and its trainer. ``MembrainMemory`` provides one; this module imports nothing of
memory.py. The benchmarks' :class:`~langchain_membrain.bench.bare_tree.TreeHost` is the
other: one bare tree and a learner driven directly, so that they measure the insert a user's
memory runs.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from dataclasses import dataclass, replace
from typing import (
    Annotated,
    Any,
    Callable,
    ContextManager,
    Iterator,
    Literal,
    Protocol,
    TypedDict,
    TypeVar,
    cast,
    get_type_hints,
)

import numpy as np

from ..errors import InvalidOperationError
from ..tree.inputs import Namespace, as_namespace, check_text, memory_value
from ..tree.placement import NewFact
from ..tree.tree import MembrainTree
from .learner import Learner
from .records import PlaceRecord

T = TypeVar("T")


class Namespaces(Protocol):
    """The trees an insert reads and writes, one per namespace (a memory's
    :class:`~.forest.Forest`, or :class:`OneTree`)."""

    def lock(self, ns: Namespace) -> ContextManager[Any]:
        """The namespace's lock: held around every read of its tree."""

    def tree(self, ns: Namespace, *, create: bool) -> MembrainTree | None:
        """The namespace's tree (a new one when it has none and ``create``)."""

    def mutate(self, ns: Namespace, write: Callable[[MembrainTree], T]) -> T:
        """Run ``write`` on the namespace's tree as one committed write."""


class InsertHost(Protocol):
    """What the insert graph uses of the memory it inserts into."""

    @property
    def forest(self) -> Namespaces:
        """The memory's namespaces: locks, trees and committed writes."""

    def embed(self, texts: list[str]) -> np.ndarray:
        """The texts' embeddings, one row each, with the memory's embedder."""

    def learner(self, dim: int | None = None) -> ContextManager[Learner]:
        """The learner, held under its lock for the ``with`` block; ``dim`` creates it on
        first use for embeddings of that size (from a checkpoint or the prior)."""

    def placed(self, ns: Namespace, record: PlaceRecord) -> None:
        """An insert was placed: count it and hand it to training."""

    def settle_batch(self, ns: Namespace, carrier: PlaceRecord | None = None) -> None:
        """Ask the batch question about the inserts waiting in ``ns`` and carry out its
        answer (``Learner.settle_batch``): now, or in the background for a slow teacher."""


@dataclass(frozen=True)
class InFlight:
    """An insert in flight, in the graph's state: its namespace, its key (None: the tree
    names the fact), the embedded fact, and its record once the descent began it (the
    Learner's steps fill the record as they decide)."""

    ns: Namespace
    key: str | None
    fact: NewFact
    record: PlaceRecord | None = None


class InsertState(TypedDict, total=False):
    """The insert graph's state. Inputs: text, namespace, metadata, key."""

    text: str
    namespace: str | list[str] | tuple[str, ...]
    metadata: dict[str, Any] | None
    key: str | None
    value: dict[str, Any] | None  # the stored value, when it is not {"content": text, **metadata}
    embedding: list[float] | None  # the text's embedding, when the caller has it already
    audit: bool | None  # the caller's audit draw for this insert (Learner.draw_audit); None: drawn here
    shared: bool  # the teacher already answered this insert's placement with its memory operation
    # ... and its answer (operations.Operation.placement), followed instead of asking again;
    # an in-process object: a compiled graph's caller leaves it out
    offered: Any
    inflight: InFlight  # the insert in flight (an in-process value, never checkpointed)
    route: str
    parent_path: list[str]
    teacher_calls: int


Node = Callable[[InsertState], dict[str, Any]]


def compiled_state() -> type:
    """:class:`InsertState` for LangGraph: its ``inflight`` in a channel that is never
    checkpointed (``UntrackedValue``)."""
    from langgraph.channels.untracked_value import UntrackedValue

    hints: dict[str, Any] = get_type_hints(InsertState)
    hints["inflight"] = Annotated[InFlight, UntrackedValue(InFlight)]
    return cast(type, TypedDict("InsertState", hints, total=False))  # type: ignore[operator]


class InsertGraph:
    """The nodes and routes of the insert graph, bound to one memory (its :class:`InsertHost`)."""

    def __init__(self, host: InsertHost):
        self.host = host
        self.forest = host.forest
        self._open = 0  # inserts started and not finished (stats: inserts_in_flight)
        self._guard = threading.Lock()
        self._steps = {name: self._guarded(step) for name, step in self.nodes().items()}
        self._routes = self.routes()

    # ------------------------------------------------------------------ the insert in flight
    @staticmethod
    def _flight(state: InsertState) -> InFlight:
        flight = state.get("inflight")
        if flight is None:
            raise InvalidOperationError("no insert in flight in the state (a run resumed from a checkpoint "
                                        "in the middle of an insert: start it again)")
        return flight

    @classmethod
    def _record(cls, state: InsertState) -> tuple[InFlight, PlaceRecord]:
        flight = cls._flight(state)
        if flight.record is None:
            raise InvalidOperationError("the insert's descent has not begun")
        return flight, flight.record

    def _opened(self, n: int) -> None:
        with self._guard:
            self._open += n

    def in_flight(self) -> int:
        """Inserts started and not finished (including any a failed compiled run left)."""
        with self._guard:
            return self._open

    @contextlib.contextmanager
    def _session(self, ns: Namespace) -> Iterator[tuple[MembrainTree, Learner]]:
        """The namespace's tree, locked, with the learner locked too (lock order: tree first)."""
        with self.forest.lock(ns):
            tree = self.forest.tree(ns, create=True)
            assert tree is not None
            with self.host.learner() as learner:
                yield tree, learner

    # ------------------------------------------------------------------ nodes
    def embed(self, state: InsertState) -> dict[str, Any]:
        """Validate the input and embed the text (unless ``embedding`` is given)."""
        if state.get("value") is not None:  # a store value: its text was chosen by the caller
            ns, text, value = as_namespace(state.get("namespace")), check_text(state.get("text")), state["value"]
        else:
            ns, value, text = memory_value(state.get("namespace"), state.get("text"), state.get("metadata"))
        key = state.get("key") or uuid.uuid4().hex
        given = state.get("embedding")
        vec = self.host.embed([text])[0] if given is None else np.asarray(given, dtype=np.float32)
        return self.start(ns, NewFact(text, vec, {"value": value, "indexed": True}), key)

    def start(self, ns: Namespace, new_fact: NewFact, key: str | None) -> dict[str, Any]:
        """Register an embedded fact as an insert in flight; the state for the next node.
        ``key`` None: the tree names the fact."""
        with self.host.learner(int(np.asarray(new_fact.embedding).size)):
            pass  # created now, so that a wrong dimension fails before anything is stored
        self._opened(1)
        return {"inflight": InFlight(ns, key, new_fact), "key": key, "teacher_calls": 0}

    def stage1_descend(self, state: InsertState) -> dict[str, Any]:
        """Descend by the model's decisions until it attaches or the policy asks the teacher."""
        flight = self._flight(state)
        with self._session(flight.ns) as (tree, learner):
            rec = flight.record
            if rec is None:
                rec = learner.begin(tree, flight.fact, audit=state.get("audit"), shared=bool(state.get("shared")),
                                    offered=state.get("offered"))
                flight = replace(flight, record=rec)
            asks = learner.descend_model(tree, rec)
        return {"route": "teacher" if asks else "attach", "inflight": flight}

    def stage1_teacher(self, state: InsertState) -> dict[str, Any]:
        """Ask the teacher the joint question and follow its placement."""
        flight, rec = self._record(state)
        with self._session(flight.ns) as (tree, learner):
            learner.teacher_place(tree, rec)
        return {}

    def attach(self, state: InsertState) -> dict[str, Any]:
        """Attach the fact (one committed write). A key that exists is replaced: its fact
        is removed and placed anew, keeping its created_at."""
        flight, rec = self._record(state)
        key = flight.key

        def write(tree: MembrainTree) -> None:
            created = None
            if key is not None and key in tree:
                node = tree.node(key)
                if node.kind != "fact":
                    raise InvalidOperationError(f"key {key!r} is used by an aspect")
                created = node.created_at
                tree.remove(key)
            with self.host.learner() as learner:
                learner.attach(tree, rec, node_id=key, created_at=created)

        self.forest.mutate(flight.ns, write)
        return {}

    def stage2_rewrite(self, state: InsertState) -> dict[str, Any]:
        """The model's stage-2 actions on the new fact's closure."""
        flight, rec = self._record(state)
        with self._session(flight.ns) as (tree, learner):
            asks = learner.propose_stage2(tree, rec)
        return {"route": "teacher" if asks else "apply"}

    def stage2_teacher(self, state: InsertState) -> dict[str, Any]:
        """Ask the teacher the joint question (its actions, and its parent if it differs)."""
        flight, rec = self._record(state)
        with self._session(flight.ns) as (tree, learner):
            learner.teacher_stage2(tree, rec)
        return {}

    def apply_actions(self, state: InsertState) -> dict[str, Any]:
        """Apply the stage-2 actions (one committed write)."""
        flight, rec = self._record(state)

        def write(tree: MembrainTree) -> None:
            with self.host.learner() as learner:
                learner.apply_stage2(tree, rec)

        self.forest.mutate(flight.ns, write)
        with self.host.learner() as learner:
            full = learner.wait_in_batch(flight.ns, rec)
        return {"route": "batch" if full else "train"}

    def batch_teacher(self, state: InsertState) -> dict[str, Any]:
        """Ask the batch question about the namespace's waiting inserts and carry out its
        answer (one committed write)."""
        flight, rec = self._record(state)
        self.host.settle_batch(flight.ns, rec)
        return {}

    def train(self, state: InsertState) -> dict[str, Any]:
        """Hand the record to training (a background worker by default) and report."""
        flight, rec = self._record(state)
        ns = flight.ns
        self.host.placed(ns, rec)
        path = []
        with self.forest.lock(ns):
            tree = self.forest.tree(ns, create=False)
            if tree is not None and rec.fact_id in tree:
                path = [tree.node(a).text for a in tree.path(rec.fact_id)[1:-1]]
        self._opened(-1)
        return {"key": rec.fact_id, "parent_path": path, "teacher_calls": rec.teacher_calls}

    # ------------------------------------------------------------------ routes
    @staticmethod
    def after_descend(state: InsertState) -> Literal["stage1_teacher", "attach"]:
        return "stage1_teacher" if state["route"] == "teacher" else "attach"

    @staticmethod
    def after_stage2(state: InsertState) -> Literal["stage2_teacher", "apply_actions"]:
        return "stage2_teacher" if state["route"] == "teacher" else "apply_actions"

    @staticmethod
    def after_apply(state: InsertState) -> Literal["batch_teacher", "train"]:
        return "batch_teacher" if state["route"] == "batch" else "train"

    EDGES: dict[str, str] = {
        "embed": "stage1_descend",
        "stage1_teacher": "attach",
        "attach": "stage2_rewrite",
        "stage2_teacher": "apply_actions",
        "batch_teacher": "train",
    }

    def nodes(self) -> dict[str, Callable[[InsertState], dict[str, Any]]]:
        """The steps of an insert, by name, in the order they run."""
        return {"embed": self.embed, "stage1_descend": self.stage1_descend, "stage1_teacher": self.stage1_teacher,
                "attach": self.attach, "stage2_rewrite": self.stage2_rewrite, "stage2_teacher": self.stage2_teacher,
                "apply_actions": self.apply_actions, "batch_teacher": self.batch_teacher, "train": self.train}

    def routes(self) -> dict[str, Callable[[InsertState], str]]:
        return {"stage1_descend": self.after_descend, "stage2_rewrite": self.after_stage2,
                "apply_actions": self.after_apply}

    # ------------------------------------------------------------------ running
    def compile(self):
        """The pipeline as a compiled LangGraph ``StateGraph``."""
        from langgraph.graph import END, START, StateGraph  # imported on first use: a slow import

        builder = StateGraph(compiled_state())
        for name, step in self._steps.items():
            builder.add_node(name, step)
        builder.add_edge(START, "embed")
        for src, dst in self.EDGES.items():
            builder.add_edge(src, dst)
        for src, route in self._routes.items():
            builder.add_conditional_edges(src, route)
        builder.add_edge("train", END)
        return builder.compile(name="membrain_insert")

    def run(self, state: InsertState, *, start: str = "embed") -> InsertState:
        """Walk the same nodes and routes without LangGraph (no per-step overhead), from
        ``start`` ("stage1_descend" for a state that :meth:`start` made)."""
        state = InsertState(**state)  # a copy: the caller's dict is left as it was
        routes, node = self._routes, start
        while True:
            state.update(cast(InsertState, self._steps[node](state)))
            if node == "train":
                return state
            node = routes[node](state) if node in routes else self.EDGES[node]

    def _guarded(self, step: Callable[[InsertState], dict[str, Any]]) -> Node:
        """``step`` such that an insert whose node raises is no longer in flight (its
        record, in the state, is dropped with it)."""
        def run(state: InsertState) -> dict[str, Any]:
            try:
                return step(state)
            except BaseException:
                if state.get("inflight") is not None:
                    self._opened(-1)
                raise
        return run


__all__ = ["InFlight", "InsertGraph", "InsertHost", "InsertState", "Namespaces"]
