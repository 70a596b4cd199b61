"""The dense half of the search index: unit embeddings by slot, the running moments of the
dense z-score, and the HNSW graph of the fast mode.

- **Dense score** (:meth:`DenseIndex.z`): cosine of a fact's embedding with the query
  embedding, as a z-score ``(cos - mean) / std`` over *all* embedded facts. Past
  :data:`MOMENTS_MIN` embeddings both come from running first and second moments
  (``mean = q . mu``, ``var = q^T E[x x^T] q - mean^2``), so no scan is needed; below, from
  the rows themselves (cheaper than a dim x dim matrix per small namespace).
- **HNSW graph** (hnswlib, inner product on unit vectors): built once ``ann_min_facts``
  facts are embedded; the fast mode's nearest neighbours (:meth:`DenseIndex.graph_neighbours`).
  Without hnswlib the dense part is exact.
- **Bulk load** (:meth:`DenseIndex.set_many`, a namespace read from storage): the rows are
  stacked in one step and nothing else is built then. The moment sums and the HNSW graph
  are built by the single writes that follow, a slice each (:data:`SUMS_BUILD_STEP` rows
  folded into the sums, :data:`ANN_BUILD_STEP` embeddings inserted into the graph), so no
  write pays for the whole namespace. Until the sums are complete the moments come from
  the float32 cosines of the query with every row (the products exact scoring computes
  anyway), which differ from the sums' by float32 rounding. Until the graph holds an
  embedding, every search scores it exactly beside the graph's candidates, and the fast
  mode scores every fact (it is exact) while the graph holds fewer than half of them
  (:attr:`DenseIndex.has_graph`). :meth:`DenseIndex.build_now` builds the sums and the whole
  graph at once instead (a bulk build, the graph on several threads).
- **Saved** (index_cache.py): the graph as hnswlib's own state, checked against the rows
  when it is read back (:meth:`DenseIndex.set_state`).

Slots are the owning index's rows (:class:`~.retrieval.FactIndex`); ``n_slots`` arguments
are the rows it has handed out so far.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .slot_state import set_slot_state, slot_state

try:  # optional: HNSW for the fast mode; without it the dense part is exact
    import hnswlib as _hnswlib
except ImportError:  # pragma: no cover
    _hnswlib = None

__all__ = ["ANN_BUILD_STEP", "ANN_PENDING_MAX", "MOMENTS_MIN", "MOMENTS_PENDING_MAX", "SUMS_BUILD_STEP",
           "DenseIndex"]

# Embeddings past which an index keeps running moments for the dense z-score (below, it
# computes them from its rows: cheaper than a dim x dim matrix per small namespace).
MOMENTS_MIN = 256

#: Embeddings counted in or out of the running moments whose outer products wait, to be
#: added to the dim x dim sum together (one matrix product) once this many wait: a single
#: write then costs no O(dim^2) update, and a search adds the few waiting ones exactly.
MOMENTS_PENDING_MAX = 32

#: Embeddings indexed with ``defer_ann`` wait outside the HNSW graph (searched exactly,
#: beside it) until the next write that is not deferred, or until this many wait.
ANN_PENDING_MAX = 256

#: Embeddings of a bulk load (``set_many``) that one write inserts into the HNSW graph:
#: the graph is built over the writes that follow, a bounded slice each.
ANN_BUILD_STEP = 64

#: Rows of a bulk load that one write folds into the moment sums (see ANN_BUILD_STEP).
SUMS_BUILD_STEP = 1024


#: What a saved index holds of a dense index in another form: the graph, as hnswlib's own
#: state (a dict of plain values and numpy arrays, see :meth:`DenseIndex.state`).
_NOT_SAVED = ("_hnsw",)
#: The graph state's values that must be plain (the arrays are checked by their shapes).
_GRAPH_SCALARS = ("ser_version", "dim", "cur_element_count", "max_elements", "size_data_per_element")


class DenseIndex:
    """Unit embeddings by slot (a row of a matrix that grows with the index), their moments
    and the HNSW graph over them."""

    __slots__ = ("dim", "n_emb", "_ann_min_facts", "_hnsw_m", "_hnsw_ef_construction", "_hnsw_ef_search",
                 "_emb", "_has_emb", "_m1", "_m2", "_m2_pending", "_sums_upto", "_hnsw", "_pending", "_backlog")

    def __init__(self, dim: int | None, *, ann_min_facts: int, hnsw_m: int, hnsw_ef_construction: int,
                 hnsw_ef_search: int):
        self.dim = dim  # taken from the first embedding when None
        self.n_emb = 0  # slots holding an embedding
        self._ann_min_facts = ann_min_facts
        self._hnsw_m, self._hnsw_ef_construction, self._hnsw_ef_search = hnsw_m, hnsw_ef_construction, hnsw_ef_search
        self._emb = np.zeros((0, dim or 0), dtype=np.float32)
        self._has_emb = np.zeros(0, dtype=bool)
        self._m1: np.ndarray | None = None  # sum of embeddings (float64)
        self._m2: np.ndarray | None = None  # sum of outer products (float64)
        # Embeddings (float64) and signs counted in ``_m1`` whose outer products are not in
        # ``_m2`` yet (see MOMENTS_PENDING_MAX).
        self._m2_pending: list[tuple[np.ndarray, int]] = []
        # None: the sums (when kept) count every embedding. A slot number k: they are being
        # built from the rows after a bulk load, and count the embeddings of slots < k only.
        self._sums_upto: int | None = None
        self._hnsw: Any = None
        # Slots whose embedding is not in the HNSW graph yet (defer_ann): every search
        # scores them exactly beside the graph's candidates, so results never miss them.
        self._pending: dict[int, None] = {}
        # Slots of a bulk load not in the graph yet, oldest first (scored as _pending's are);
        # single writes insert them a slice at a time (ANN_BUILD_STEP).
        self._backlog: dict[int, None] = {}

    # ------------------------------------------------------------------ reads
    @property
    def has_graph(self) -> bool:
        """Whether the HNSW graph exists (``ann_min_facts`` facts were embedded) and holds
        at least half of the embeddings: otherwise scoring every fact is cheaper than
        scoring the graph's neighbours and every embedding waiting outside it (a namespace
        loaded in bulk, whose graph its next writes build)."""
        return self._hnsw is not None and 2 * self.waiting <= self.n_emb

    @property
    def waiting(self) -> int:
        """Embeddings waiting outside the graph (``defer_ann``, or a bulk load's)."""
        return len(self._pending) + len(self._backlog)

    def vector(self, slot: int) -> np.ndarray | None:
        """A copy of the slot's unit embedding, None when it has none."""
        return self._emb[slot].copy() if self._has_emb[slot] else None

    def check(self, embedding: Any) -> np.ndarray | None:
        """``embedding`` as a unit float32 vector (None stays None); ValueError for the wrong
        dimension or a NaN/infinity. The first one fixes the dimension."""
        if embedding is None:
            return None
        vec = np.asarray(embedding, dtype=np.float32).reshape(-1)
        if self.dim is None:
            self.dim = vec.size
            self._emb = np.zeros((self._emb.shape[0], self.dim), dtype=np.float32)
        if vec.size != self.dim:
            raise ValueError(f"embedding has {vec.size} dimensions, the index uses {self.dim}")
        norm = float(np.linalg.norm(vec))
        if not np.isfinite(norm):
            raise ValueError("embedding contains NaN or infinity")
        return vec / norm if norm > 0 else vec  # cosine: store unit vectors

    def check_many(self, embeddings: list[Any]) -> np.ndarray:
        """``embeddings`` (each as :meth:`check` takes one, none None) as rows of unit float32
        vectors, each row equal to ``check`` of it; ValueError as :meth:`check`."""
        if not embeddings:
            return np.zeros((0, self.dim or 0), dtype=np.float32)
        mat = np.asarray(embeddings, dtype=np.float32)
        if mat.ndim != 2:
            raise ValueError("embeddings of different sizes")
        self.check(mat[0])  # fixes the dimension; the error for a wrong one
        if mat.shape[1] != self.dim:
            raise ValueError(f"embedding has {mat.shape[1]} dimensions, the index uses {self.dim}")
        # Each norm as check() computes it (np.linalg.norm of a vector is sqrt(x.dot(x))),
        # so that the unit rows are bit for bit the ones adding the facts one by one stores;
        # a vectorised sum of squares rounds differently.
        norms = np.sqrt(np.array([row.dot(row) for row in mat], dtype=np.float32))
        if not np.all(np.isfinite(norms)):
            raise ValueError("embedding contains NaN or infinity")
        return mat / np.where(norms > 0, norms, 1.0)[:, None]

    def query(self, embedding: Any) -> np.ndarray | None:
        """A query embedding as a unit vector; None without one, before any embedding, or
        for a zero vector."""
        if embedding is None or self.dim is None:
            return None
        vec = np.asarray(embedding, dtype=np.float32).reshape(-1)
        if vec.size != self.dim:
            raise ValueError(f"query embedding has {vec.size} dimensions, the index uses {self.dim}")
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm > 0 else None

    # ----------------------------------------------------------------- writes
    def state(self) -> dict[str, Any]:
        """Everything the index holds, for a saved index (index_cache.py): its fields, and
        under ``"_graph"`` the HNSW graph as hnswlib's state (None without a graph). The rows
        (``_emb``) are the index's own matrix, not a copy."""
        graph = None if self._hnsw is None else self._hnsw.__getstate__()[0]
        return {**slot_state(self, _NOT_SAVED), "_graph": graph}

    def set_state(self, state: dict[str, Any]) -> None:
        """Back from :meth:`state` (consumed; ValueError for another version's, or for a
        graph that does not fit the rows). A state saved without its graph but with
        embeddings enough for one leaves the graph to the writes that follow, as after a
        bulk load."""
        graph = state.pop("_graph", None)
        set_slot_state(self, state, _NOT_SAVED)
        self._hnsw = None
        if graph is not None:
            self._hnsw = self._graph_from(graph)
        elif self._pending or self._backlog:
            raise ValueError("slots wait for a graph the saved state does not hold")

    def _graph_from(self, graph: dict[str, Any]) -> Any:
        """The HNSW graph back from its saved state, checked against the rows first: its
        dimension and space, its labels distinct slots of the rows, and every embedded slot
        that waits for no insertion among them (a removed fact's label stays in the graph,
        marked deleted; a waiting slot's may hold its previous vector)."""
        if _hnswlib is None:
            raise ValueError("a saved graph needs hnswlib")
        if not isinstance(graph, dict) or any(type(graph.get(k)) is not int for k in _GRAPH_SCALARS):
            raise ValueError("not a saved graph")
        labels = np.asarray(graph["label_lookup_external"]).astype(np.int64)
        if labels.size and (labels.min() < 0 or labels.max() >= self._has_emb.size):
            raise ValueError("the saved graph holds a slot the rows do not")
        in_graph = np.zeros(self._has_emb.size, dtype=bool)
        in_graph[labels] = True
        expected = self._has_emb.copy()
        expected[self._waiting_slots()] = False
        if (graph["dim"] != self.dim or graph["space"] != "ip" or labels.size != graph["cur_element_count"]
                or np.unique(labels).size != labels.size or not in_graph[expected].all()
                or graph["data_level0"].size != graph["cur_element_count"] * graph["size_data_per_element"]):
            raise ValueError("the saved graph does not fit the rows")
        hnsw = _hnswlib.Index.__new__(_hnswlib.Index)
        hnsw.__setstate__((graph,))
        hnsw.set_num_threads(1)
        return hnsw

    def build_now(self, n_slots: int, threads: int) -> None:
        """What the writes after a bulk load would build a slice at a time, done at once (a
        bulk build): every row folded into sums being built, and every embedding waiting
        outside the graph inserted into it, on ``threads`` threads (the graph created once
        ``ann_min_facts`` embeddings exist)."""
        while self._sums_upto is not None:
            self._build_sums(n_slots, step=65536)
        if _hnswlib is None or (self._hnsw is None and self.n_emb < self._ann_min_facts):
            return
        if self._hnsw is None:
            self._new_graph()
            self._backlog = dict.fromkeys(np.flatnonzero(self._has_emb[:n_slots]).tolist())
        slots = self._waiting_slots()
        self._pending.clear()
        self._backlog.clear()
        self._hnsw.set_num_threads(max(1, threads))
        try:
            self._insert(slots)
        finally:
            self._hnsw.set_num_threads(1)

    def _new_graph(self) -> None:
        self._hnsw = _hnswlib.Index(space="ip", dim=self.dim)
        self._hnsw.init_index(max_elements=max(2 * self._has_emb.size, 1024),
                              ef_construction=self._hnsw_ef_construction, M=self._hnsw_m)
        self._hnsw.set_num_threads(1)

    def grow(self, capacity: int) -> None:
        """Rows for at least ``capacity`` slots."""
        cap = self._has_emb.size
        if capacity <= cap:
            return
        self._has_emb = np.concatenate([self._has_emb, np.zeros(capacity - cap, dtype=bool)])
        self._room(capacity)

    def _room(self, upto: int) -> None:
        """Matrix rows for the slots below ``upto``. A restored index's matrix holds its
        saved rows only (mapped from its file, storage/mapped.py), until the first write past
        them; growing copies the rows into a matrix of the new capacity."""
        if upto > self._emb.shape[0]:
            emb = np.zeros((self._has_emb.size, self.dim or 0), dtype=np.float32)
            emb[: self._emb.shape[0]] = self._emb
            self._emb = emb

    def set(self, slot: int, vec: np.ndarray, n_slots: int, defer_ann: bool = False) -> None:
        """Give a slot a (checked) embedding, replacing the one it had. A write that does
        not defer also builds a slice of what a bulk load left (module docstring)."""
        if self._has_emb[slot]:
            self._has_emb[slot] = False  # out of the rows first: sums built from them skip it
            self._moments(self._emb[slot], -1, n_slots, slot)
        self._room(slot + 1)
        self._emb[slot] = vec
        self._has_emb[slot] = True
        self._moments(vec, +1, n_slots, slot)
        if not defer_ann:
            self._build_sums(n_slots)
        if _hnswlib is None:
            return
        if self._hnsw is None:
            if self.n_emb < self._ann_min_facts:
                return  # built lazily once the index is large enough to need it
            self._new_graph()
            live = np.flatnonzero(self._has_emb[:n_slots])
            self._pending.clear()
            if live.size <= self._ann_min_facts:  # grown one write at a time: all of them now
                self._insert(live)
                self._backlog.clear()
                return
            self._backlog = dict.fromkeys(live.tolist())  # after a bulk load: a slice per write
        else:
            self._backlog.pop(slot, None)  # its new vector waits with this write's
            self._pending[slot] = None
            if not defer_ann or len(self._pending) > ANN_PENDING_MAX:
                slots = np.fromiter(self._pending, dtype=np.int64, count=len(self._pending))
                self._pending.clear()
                self._insert(slots)
        if not defer_ann and self._backlog:
            slots = np.fromiter(self._backlog, dtype=np.int64, count=min(ANN_BUILD_STEP, len(self._backlog)))
            for s in slots.tolist():
                del self._backlog[s]
            self._insert(slots)

    def set_many(self, slots: np.ndarray, vecs: np.ndarray, n_slots: int) -> None:
        """Give slots that hold no embedding yet their (checked) embeddings at once (a bulk
        load, module docstring): the rows only; the sums and the graph count them as the
        writes that follow build them. The result equals :meth:`set` of each in turn but
        for when the sums and the graph are built."""
        if not slots.size:
            return
        if self._has_emb[slots].any() or np.unique(slots).size != slots.size:
            raise ValueError("set_many takes distinct slots without an embedding")
        self._room(int(slots.max()) + 1)
        self._emb[slots] = vecs
        self._has_emb[slots] = True
        self.n_emb += int(slots.size)
        if self._sums_upto is None and self.n_emb >= MOMENTS_MIN and self.dim:
            # Sums kept or due: (re)built from the rows, from the first slot, by later writes.
            self._m1, self._m2 = np.zeros(self.dim), np.zeros((self.dim, self.dim))
            self._m2_pending, self._sums_upto = [], 0
        if self._hnsw is not None:
            self._backlog.update(dict.fromkeys(slots.tolist()))

    def _build_sums(self, n_slots: int, step: int | None = None) -> None:
        """Fold the next ``step`` (default SUMS_BUILD_STEP) rows into sums being built
        (no-op otherwise)."""
        if self._sums_upto is None or self._m1 is None or self._m2 is None:
            return
        lo = self._sums_upto
        hi = min(lo + (step or SUMS_BUILD_STEP), n_slots)
        rows = self._emb[lo + np.flatnonzero(self._has_emb[lo:hi])].astype(np.float64)
        self._m1 += rows.sum(axis=0)
        self._m2 += rows.T @ rows
        self._sums_upto = None if hi >= n_slots else hi

    def _insert(self, slots: np.ndarray) -> None:
        """Insert these slots' embeddings into the graph, in this order."""
        if not slots.size:
            return
        if slots.max() >= self._hnsw.get_max_elements():
            self._hnsw.resize_index(max(2 * self._hnsw.get_max_elements(), int(slots.max()) + 1))
        self._hnsw.add_items(self._emb[slots], slots)

    def unset(self, slot: int, n_slots: int) -> None:
        """A removed fact's slot: its embedding leaves the moments and the graph."""
        if not self._has_emb[slot]:
            return
        self._has_emb[slot] = False  # out of the rows first: sums built from them skip it
        self._moments(self._emb[slot], -1, n_slots, slot)
        waited = slot in self._pending or slot in self._backlog
        self._pending.pop(slot, None)
        self._backlog.pop(slot, None)
        if self._hnsw is not None:
            try:
                self._hnsw.mark_deleted(slot)
            except RuntimeError:
                if not waited:  # only a slot still waiting may be absent from the graph
                    raise

    def _moments(self, vec: np.ndarray, sign: int, n_slots: int, slot: int) -> None:
        """Count ``slot``'s embedding in (or out); past MOMENTS_MIN embeddings, keep the sums
        of the embeddings and of their outer products (a dim x dim matrix: 1.2 MB at 384-d,
        which a small namespace does without; :meth:`cos_moments` then reads the rows)."""
        self.n_emb += sign
        if self._sums_upto is not None and slot >= self._sums_upto:
            return  # sums being built: they count this row when the build reaches it
        if self._m2 is None and self.n_emb >= MOMENTS_MIN:  # ``vec`` is among the rows already
            live = self._emb[np.flatnonzero(self._has_emb[:n_slots])].astype(np.float64)
            self._m1, self._m2 = live.sum(axis=0), live.T @ live
            return
        if self._m1 is not None and self._m2 is not None:  # set together, above
            v = vec.astype(np.float64)
            self._m1 += sign * v
            self._m2_pending.append((v, sign))
            if len(self._m2_pending) >= MOMENTS_PENDING_MAX:
                self._fold_m2()

    def _fold_m2(self) -> None:
        """Add the waiting outer products to ``_m2`` in one matrix product."""
        assert self._m2 is not None
        vecs = np.stack([v for v, _ in self._m2_pending])
        signs = np.array([s for _, s in self._m2_pending], dtype=np.float64)
        self._m2 += (vecs * signs[:, None]).T @ vecs
        self._m2_pending = []

    def _waiting_slots(self) -> np.ndarray:
        """The slots whose embeddings wait outside the graph (``_pending``, ``_backlog``)."""
        return np.fromiter((*self._pending, *self._backlog), dtype=np.int64, count=self.waiting)

    # ----------------------------------------------------------------- search
    def nearest(self, vec: np.ndarray, k: int, n_slots: int) -> list[tuple[int, float]]:
        """The ``k`` slots (1 <= k <= n_emb) whose embeddings have the highest cosine with the
        unit vector ``vec``, with those cosines, best first."""
        if self.has_graph:  # else every row in one product: cheaper than gathering the waiting ones
            k_ann = min(k, self.n_emb - self.waiting)
            found = self._hnsw.knn_query(vec.reshape(1, -1), k=k_ann)[0][0] if k_ann > 0 else []
            slots = np.union1d(np.asarray(found, dtype=np.int64), self._waiting_slots())
            slots = slots[np.argsort(-(self._emb[slots] @ vec), kind="stable")[:k]]
        else:
            cos = np.where(self._has_emb[:n_slots], self._emb[:n_slots] @ vec, -np.inf)
            slots = np.argpartition(-cos, k - 1)[:k]  # every add asks this: no full sort
        sims = self._emb[slots] @ vec
        order = np.argsort(-sims, kind="stable")
        return [(int(slots[i]), float(sims[i])) for i in order]

    def graph_neighbours(self, qvec: np.ndarray, n: int) -> np.ndarray:
        """The graph's ``n`` nearest slots to ``qvec`` (searched with ef at least
        ``hnsw_ef_search``) and every slot waiting outside it, sorted."""
        if n <= 0:
            return np.sort(self._waiting_slots())
        self._hnsw.set_ef(max(self._hnsw_ef_search, n))
        labels, _ = self._hnsw.knn_query(qvec.reshape(1, -1), k=n)
        return np.union1d(labels[0].astype(np.int64), self._waiting_slots())

    def z(self, qvec: np.ndarray, cand: np.ndarray, n_slots: int,
          former: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """z-scored cosine of the candidates (0 for facts without an embedding); with
        ``former`` (sorted owner slots, each one's best cosine over its former versions), a
        fact's cosine is the best over its versions."""
        every = None
        if cand.size * 4 > n_slots:  # a contiguous product beats gathering most rows
            every = self._emb[:n_slots] @ qvec
            cos = every[cand]
        else:
            cos = self._emb[cand] @ qvec
        if former is not None:
            owners, best = former
            pos = np.minimum(np.searchsorted(owners, cand), owners.size - 1)
            hit = owners[pos] == cand
            cos[hit] = np.maximum(cos[hit], best[pos[hit]])
        mean, std = self.cos_moments(qvec.astype(np.float64), n_slots, every)
        z = (cos - mean) / std if std > 1e-6 else cos - mean
        return np.where(self._has_emb[cand], z, 0.0)

    def cos_moments(self, q: np.ndarray, n_slots: int, every: np.ndarray | None = None) -> tuple[float, float]:
        """Mean and standard deviation of the cosines of ``q`` to every embedded fact.
        ``every``: the float32 products of ``q`` with the first ``n_slots`` rows, when the
        caller has them (read only by an index loaded in bulk, whose sums wait)."""
        if self._m1 is None or self._m2 is None or self._sums_upto is not None:
            live = np.flatnonzero(self._has_emb[:n_slots])
            if self.n_emb < MOMENTS_MIN:  # a small index: from its rows, in float64
                cos = self._emb[live].astype(np.float64) @ q
            else:  # loaded in bulk (set_many), sums not complete yet: the float32 products
                if every is None:
                    every = self._emb[:n_slots] @ q.astype(np.float32)
                cos = every[live].astype(np.float64)
            return float(cos.mean()), float(cos.std())
        second = float(q @ self._m2 @ q)
        if self._m2_pending:  # outer products not folded in yet: (q . v)^2 each
            proj = np.stack([v for v, _ in self._m2_pending]) @ q
            second += float(np.array([s for _, s in self._m2_pending]) @ (proj * proj))
        mean = float(q @ self._m1) / self.n_emb
        return mean, math.sqrt(max(second / self.n_emb - mean * mean, 0.0))
