"""Fact retrieval for one namespace: an incrementally maintained hybrid index.

:class:`FactIndex` holds the facts of one namespace (one tree) and answers ``search(query, query_embedding, k)`` with
``[(fact_id, score), ...]``, best first: the "strong flat pipeline" (README, LoCoMo), each part in :class:`RetrievalConfig`.

Definitions (``s`` is a fact, ``q`` the query):

- **Lexical field** and **BM25**: lexical.py. A fact's field holds its own terms, the terms of its former versions
  (below) and what the chat scorers that are on add to it.
- **Dense score**: the z-scored cosine of the fact's embedding with the query's, over every embedded fact (dense.py).
- **Fused score**: ``bm25 / max(bm25) + dense_weight * z`` (``max`` over the scored set).
- **Chat scorers** (opt-in, ``RetrievalConfig.chat``; chat.py): the speaker boost, the session's context (neighbours'
  terms, session prior) and date terms, for facts that are turns of a conversation with
  ``speaker``/``session``/``date`` metadata. Off by default.
- **Relevance** (the score a search reports, :func:`relevance`): the final score ``s`` that :meth:`FactIndex.search`
  ranks by, every boost included, mapped to ``[0, 1]`` by ``1 / (1 + exp(-4 (s - 0.5)))``. Monotone, so ranking by it
  is ranking by ``s``; 0.5 for ``s = 0.5`` (half the best lexical match, or a cosine 2.5 deviations above the mean).
- **Former versions**: a fact that superseded others (an UPDATE keeps the key and archives the old text) still answers
  what they answered ("I moved into a house in Headingley" is where the person *lives*). Each term of the former
  versions joins its field with weight ``former_weight`` (its count in the version that says it most), and its cosine
  is the best over its own embedding and theirs. A raw item gets the facts formed from it the same way.
- The dense query text is :meth:`FactIndex.dense_query_text`: the query itself, without the speakers' names when
  :class:`~.chat.SpeakerBoost` strips them. With ``embed_query`` configured the index embeds it itself, otherwise the
  caller passes its embedding.

Plain facts with no metadata get BM25 over their own terms fused with the dense score.

Modes: ``mode="exact"`` scores every fact. ``mode="fast"`` scores only candidates, once the index holds at least
``ann_min_facts`` embedded facts (below that a matrix-vector product is cheap and exact, and fast equals exact): the
``ann_candidates`` nearest neighbours from an HNSW index (hnswlib) united with the best ``ann_candidates`` facts by
BM25 over the *selective* query terms, those whose posting list holds at most ``common_df * N`` facts. The common
terms' weights are then read from each candidate's own field, so every candidate's score is exactly its exact-mode
score; only the candidate set is approximate. A fast search touches the selective posting lists, an O(log N) graph
search and a few hundred candidates, never all facts (recall@10 against exact: ``bench scale``). An index filled by
:meth:`FactIndex.add_many` (a namespace read from storage) has no graph until the writes that follow build it, a slice
each (dense.py, "Bulk load"); until the graph holds half of the embeddings, fast equals exact.

Tree (``search(..., tree=MembrainTree)``): see :class:`RetrievalConfig` fields prefixed
``tree_``; fact ids must be the tree's fact node ids.

- **Topic match**: an aspect's cosine with the query is ``c(a) = max(cos(q, label(a)), cos(q, m(a)))`` (its label's
  embedding, the mean embedding of its facts), over the aspects holding at least ``tree_topic_min_facts`` facts;
  ``z(a)`` is ``c(a)`` z-scored with the mean and deviation of the query's cosines to the facts. When the best aspect
  has ``z >= tree_topic_min_z`` (the query is about a topic the tree holds, not about one fact), the aspects within
  ``tree_topic_margin`` of the best one match, and each fact below a matching aspect gets ``+ tree_topic_weight *
  dense_weight * z(a)`` for the best such ancestor: the fact's dense score and its topic's, on one scale. Otherwise
  nothing changes. In fast mode the matching aspects' facts join the candidates.

Thread-safety: a ``FactIndex`` is **not** thread-safe. Every method that reads or writes must be called with the
owner's lock held (``MembrainMemory`` already serialises writes to a namespace's tree; it must take the same lock
around ``search``). Distinct indexes share nothing and can be used from distinct threads.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterable, Literal

import numpy as np

from .chat import ChatSignals, group_max
from .config import RetrievalConfig, topic_weight
from .dense import DenseIndex
from .lexical import LexicalIndex, can_stem, shared_stemmer, term_counts, tokenize, tokenize_many
from .slot_state import set_slot_state, slot_state
from .tree_priors import aspect_groups, topic_boost, topic_match

#: Rows an index allocates one at a time before it doubles its capacity: a namespace of a few facts holds no spare
#: rows (an empty 384-d row is 1.5 KB), and from here on the capacities are the powers of two they always were.
GROW_EXACT_BELOW = 8
#: What a saved index (index_cache.py) leaves out, and the parts saved by their own ``state()``.
_UNSAVED, _PARTS = ("config", "embed_query", "_former_stack", "_lex", "_dense", "_chat"), ("_lex", "_dense", "_chat")

__all__ = ["FactIndex", "relevance"]

Mode = Literal["fast", "exact"]

#: :func:`relevance` is 0.5 at this ranking score; its log-odds grow by RELEVANCE_SLOPE per
#: unit of score.
RELEVANCE_MIDPOINT = 0.5
RELEVANCE_SLOPE = 4.0


def relevance(score: float) -> float:
    """The score a search reports for a hit: ``1 / (1 + exp(-4 (s - 0.5)))`` of the ranking score ``s`` that
    :meth:`FactIndex.search` returns (fused lexical and dense score plus every boost and prior; see the module
    docstring). A relevance in ``[0, 1]``, strictly increasing in ``s`` wherever floats can tell (so it never
    reorders hits), the same function for every namespace, entry point and ranking extension: an unrelated fact
    scores about 0.1 (``s`` near 0), a fact as near the query in meaning as 2.5 standard deviations above the
    namespace's mean 0.5, a fact that also holds the query's rarest words above 0.9."""
    x = -RELEVANCE_SLOPE * (float(score) - RELEVANCE_MIDPOINT)
    if x > 700.0:  # exp would overflow: the relevance is 0 to double precision
        return 0.0
    return 1.0 / (1.0 + math.exp(x))


@dataclass
class _Query:
    """One search's query side: what its steps share (FactIndex.search)."""

    text: str
    qvec: np.ndarray | None
    dense: bool  # a query embedding, a dense weight and embedded facts: the dense part scores
    use_ann: bool  # candidates from the HNSW graph and the selective posting lists
    allowed: np.ndarray | None  # filter_ids as slots
    tree: Any
    former: tuple[np.ndarray, np.ndarray] | None  # FactIndex._former_cos
    topics: dict[str, float]  # matching aspect -> z (tree_priors.topic_match)
    walked: list[str]  # query terms scored from their posting lists
    deferred: list[str]  # common query terms (fast mode) read from the candidates' fields


class FactIndex:
    """Hybrid lexical + dense index of one namespace's facts, kept up to date per write.

    Args:
        config: weights and switches (:class:`RetrievalConfig`).
        embed_query: optional ``text -> vector``; used by :meth:`search` when no query
            embedding is passed (the text embedded is :meth:`dense_query_text`).
        dim: embedding dimension; taken from the first embedding when None.

    Fact ids are any hashable (``MembrainMemory``: the tree's fact node ids). Internally each
    fact gets a *slot* (row of the embedding matrix, HNSW label); slots are not reused.
    """

    # Slots, not a __dict__: a process may hold an index for each of thousands of namespaces.
    __slots__ = ("config", "embed_query", "_stem", "_slot", "_ids", "_text", "_own", "_alive", "_lex", "_dense",
                 "_chat", "_former", "_former_terms", "_former_stack", "_context")

    def __init__(self, config: RetrievalConfig | None = None, *,
                 embed_query: Callable[[str], Any] | None = None, dim: int | None = None):
        self.config = config or RetrievalConfig()
        self.embed_query = embed_query
        self._stem = bool(self.config.stem and can_stem())  # terms stemmed (by shared_stemmer)
        self._slot: dict[Hashable, int] = {}  # fact id -> slot
        self._ids: list[Hashable | None] = []  # slot -> fact id (None once removed)
        self._text: list[str] = []
        # slot -> own terms and their counts. Plain dicts, not Counters: a saved index
        # (index_cache.py) unpickles a dict several times faster than a Counter.
        self._own: list[dict[str, int]] = []
        self._alive = np.zeros(0, dtype=bool)  # slot -> a fact held (not removed, not a context entry)
        cfg = self.config
        self._lex = LexicalIndex(cfg.k1, cfg.b)  # slot -> field, posting lists
        self._dense = DenseIndex(dim, ann_min_facts=cfg.ann_min_facts, hnsw_m=cfg.hnsw_m,  # slot -> embedding
                                 hnsw_ef_construction=cfg.hnsw_ef_construction, hnsw_ef_search=cfg.hnsw_ef_search)
        self._chat = ChatSignals(cfg.chat, stem=self._stem)  # slot -> speaker, session, date
        # Former versions (set_former): slot -> [(text, unit vector or None)], their terms
        # (max count over the versions), and all their vectors stacked (a cache).
        self._former: dict[int, list[tuple[str, np.ndarray | None]]] = {}
        self._former_terms: dict[int, Counter] = {}
        self._former_stack: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        # Context entries (add_context): id -> slot. A context slot stands in its session's
        # order (so its words join its neighbours' fields) but is never alive, has no field
        # and no embedding: search never returns it, and the lexical statistics leave it out.
        self._context: dict[Hashable, int] = {}

    @property
    def dim(self) -> int | None:
        """The embedding dimension (None until the first embedding)."""
        return self._dense.dim

    # ------------------------------------------------------------------ reads
    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, fact_id: object) -> bool:
        return fact_id in self._slot

    def ids(self) -> list[Hashable]:
        return list(self._slot)

    def speakers(self) -> list[str]:
        """Distinct ``metadata["speaker"]`` values of the facts held ([] unless
        :class:`~.chat.SpeakerBoost` is on)."""
        return self._chat.speakers()

    def terms(self, text: str) -> list[str]:
        """The lexical terms of ``text`` as this index sees them."""
        return tokenize(text, shared_stemmer() if self._stem else None)  # this thread's stemmer

    def field_of(self, fact_id: Hashable) -> dict[str, float]:
        """The lexical field of a fact (term -> weight), see the module docstring."""
        return dict(self._lex.fields[self._slot[fact_id]])

    def state(self) -> dict[str, Any]:
        """All the index holds but what ``_UNSAVED`` names, for a saved index (index_cache.py)."""
        return {**slot_state(self, _UNSAVED), **{k: getattr(self, k).state() for k in _PARTS}}

    def set_state(self, state: dict[str, Any]) -> None:
        """Back from :meth:`state` (consumed) into a new index of its configuration; ValueError if not."""
        for k in _PARTS:
            getattr(self, k).set_state(state.pop(k))
        set_slot_state(self, state, _UNSAVED)

    # ----------------------------------------------------------------- writes
    def add(self, fact_id: Hashable, text: str, embedding: Any = None,
            metadata: dict[str, Any] | None = None, *, defer_ann: bool = False) -> None:
        """Index a new fact; it becomes the last fact of its session. Raises ValueError if
        the id is already held or the embedding has the wrong shape.

        ``defer_ann``: leave the embedding out of the HNSW graph for now (it is scored
        exactly by every search until then) and insert it with the next write that does
        not defer, or once ANN_PENDING_MAX wait: a process catching up on other
        processes' facts does not pay their graph insertion inside a search."""
        if fact_id in self._slot:
            raise ValueError(f"fact {fact_id!r} is already indexed")
        vec = self._dense.check(embedding)
        slot = self._new_slot(fact_id, text, metadata)
        self._slot[fact_id] = slot
        self._alive[slot] = True
        for s in (slot, *self._chat.previous(slot)):  # the previous one gains this one as "next"
            self._refresh_field(s)
        if vec is not None:
            self._dense.set(slot, vec, len(self._ids), defer_ann)

    def add_many(self, items: Iterable[tuple[Hashable, str, Any, dict[str, Any] | None, bool]], *,
                 graph_threads: int = 0) -> None:
        """Index many facts and context entries at once, in order: each item ``(id, text,
        embedding, metadata, context)`` as :meth:`add` ``(id, text, embedding, metadata)``
        would, or :meth:`add_context` ``(id, text, metadata)`` when ``context``. The index
        then holds what those calls in turn give it (slots, session orders, fields,
        embeddings), built in one pass; the dense sums and graph are built by later writes
        (dense.py, "Bulk load"). Search results are those of the calls in turn, scores to
        float rounding. ValueError, and nothing indexed, for an id held or given twice or
        an embedding of the wrong shape.

        ``graph_threads`` > 0: build the dense sums and the HNSW graph now (the graph on
        that many threads) rather than over the writes that follow (a bulk build: the index
        then holds what adding the facts one by one gives it, to float rounding and the
        graph's own randomness)."""
        items = list(items)
        ids = [it[0] for it in items if not it[4]]
        if len(set(ids)) != len(ids) or any(i in self._slot for i in ids):
            raise ValueError("add_many: a fact id is already indexed or given twice")
        given = [it[2] for it in items if not it[4] and it[2] is not None]
        vecs = self._dense.check_many(given)  # validated before any slot exists
        emb_slots: list[int] = []
        touched: dict[int, None] = {}  # slots whose field is computed below, in slot order
        self._grow(len(self._ids) + len(items))
        terms = tokenize_many([it[1] for it in items], shared_stemmer() if self._stem else None)
        for (item_id, text, embedding, metadata, context), own in zip(items, terms):
            if context:
                key = self._chat.session_key(metadata or {})
                if key is None or item_id in self._context or item_id in self._slot:
                    continue
                slot = self._context[item_id] = self._new_slot(item_id, text, metadata, context=True, terms=own)
                touched.update(dict.fromkeys(self._chat.previous(slot)))
                continue
            slot = self._new_slot(item_id, text, metadata, terms=own)
            self._slot[item_id] = slot
            self._alive[slot] = True
            touched.update(dict.fromkeys(self._chat.previous(slot)))
            touched[slot] = None
            if embedding is not None:
                emb_slots.append(slot)
        # Every field once, from the final session orders (neighbours by position).
        around: dict[int, list[int]] = {}
        if self._chat.neighbour_weight():
            for order in self._chat.session_orders():
                for i, s in enumerate(order):
                    if s in touched:
                        around[s] = [order[j] for j in (i - 1, i + 1) if 0 <= j < len(order)]
        for s in touched:
            self._refresh_field(s, around.get(s, []))
        self._dense.set_many(np.asarray(emb_slots, dtype=np.int64), vecs, len(self._ids))
        if graph_threads > 0:
            self._dense.build_now(len(self._ids), graph_threads)

    def add_context(self, item_id: Hashable, text: str, metadata: dict[str, Any] | None = None) -> None:
        """Hold an item that is not a memory (an ignored turn) in its session's order: it is
        never returned, but its words join its neighbours' fields as a neighbour fact's do
        (:class:`~.chat.SessionContext`), so the answer after an ignored question still carries
        the question's words. Nothing happens without a session (or with SessionContext
        off), or when the id is held already."""
        key = self._chat.session_key(metadata or {})
        if key is None or item_id in self._context or item_id in self._slot:
            return
        slot = self._context[item_id] = self._new_slot(item_id, text, metadata, context=True)
        for s in self._chat.previous(slot):
            self._refresh_field(s)

    def remove_context(self, item_id: Hashable) -> None:
        """Forget a context entry (its neighbours' fields are recomputed); no-op if absent."""
        slot = self._context.pop(item_id, None)
        if slot is None:
            return
        prev_next = self._chat.neighbours(slot)
        self._chat.remove(slot)
        for s in prev_next:
            self._refresh_field(s)

    def update(self, fact_id: Hashable, *, text: str | None = None, embedding: Any = None,
               metadata: dict[str, Any] | None = None, defer_ann: bool = False) -> None:
        """Change a fact's text, embedding and/or metadata (metadata replaced whole). The fact
        keeps its place in its session unless its session changes (then it goes last)."""
        slot = self._slot[fact_id]
        vec = self._dense.check(embedding)
        if metadata is not None and self._chat.session_key(metadata) != self._chat.session_of(slot):
            old_text, old_emb = self._text[slot], self._dense.vector(slot)
            former = self._former.get(slot, [])
            self.remove(fact_id)
            self.add(fact_id, old_text if text is None else text,
                     old_emb if vec is None else vec, metadata)
            self.set_former(fact_id, former)
            return
        if metadata is not None:
            self._chat.update(slot, metadata)
        if text is not None:
            self._text[slot] = text
            self._own[slot] = term_counts(self.terms(text))
        if text is not None or metadata is not None:
            for s in (slot, *self._chat.neighbours(slot)):
                self._refresh_field(s)
        if vec is not None:
            self._dense.set(slot, vec, len(self._ids), defer_ann)

    def set_former(self, fact_id: Hashable, versions: Iterable[tuple[str, Any]]) -> None:
        """Replace the former versions of a fact: ``(text, embedding or None)`` of each
        version it superseded (see the module docstring; ``[]``: none). KeyError if the
        fact is not held, ValueError for an embedding of the wrong shape."""
        slot = self._slot[fact_id]
        versions = [(str(text), self._dense.check(vec)) for text, vec in versions]
        if not versions and slot not in self._former:
            return
        self._former.pop(slot, None)
        self._former_terms.pop(slot, None)
        if versions:
            self._former[slot] = versions
            terms: Counter = Counter()
            for text, _ in versions:
                terms |= Counter(self.terms(text))  # | keeps the larger count
            self._former_terms[slot] = terms
        self._former_stack = None
        self._refresh_field(slot)

    def former(self, fact_id: Hashable) -> list[tuple[str, np.ndarray | None]]:
        """The former versions credited to a fact (:meth:`set_former`): ``(text, unit
        vector or None)`` each; [] for none or a fact not held."""
        slot = self._slot.get(fact_id)
        return list(self._former.get(slot, ())) if slot is not None else []

    def remove(self, fact_id: Hashable) -> None:
        """Drop a fact; its session neighbours' fields are recomputed. KeyError if absent."""
        slot = self._slot.pop(fact_id)
        if self._former.pop(slot, None) is not None:
            self._former_terms.pop(slot, None)
            self._former_stack = None
        prev_next = self._chat.neighbours(slot)
        self._chat.remove(slot)
        self._lex.set_field(slot, {})
        for s in prev_next:
            self._refresh_field(s)
        self._dense.unset(slot, len(self._ids))
        self._alive[slot] = False
        self._ids[slot] = None
        self._own[slot] = {}
        self._text[slot] = ""

    # ----------------------------------------------------------------- search
    def dense_query_text(self, query: str) -> str:
        """The text whose embedding the dense part compares: ``query``, without the speaker
        names this index has seen when :class:`~.chat.SpeakerBoost` strips them."""
        return self._chat.dense_query_text(query)

    def named_speaker(self, query: str) -> str | None:
        """The one speaker whose name (any word of it) the query contains; None if zero or
        several are named, or when :class:`~.chat.SpeakerBoost` is off."""
        return self._chat.named_speaker(query)

    def nearest(self, embedding: Any, k: int = 1) -> list[tuple[Hashable, float]]:
        """The ``k`` facts whose embeddings have the highest cosine with ``embedding``, with
        those cosines, best first ([] when no fact has an embedding). Approximate (HNSW)
        once the fast mode's index exists, exact below that."""
        n_emb = self._dense.n_emb
        if not n_emb or k <= 0:
            return []
        vec = self._dense.check(embedding)
        if vec is None:
            raise ValueError("nearest() needs an embedding")
        return [(self._ids[s], cos) for s, cos in self._dense.nearest(vec, min(k, n_emb), len(self._ids))]

    def search(self, query: str, query_embedding: Any = None, k: int = 10, *,
               tree: Any = None, mode: Mode = "fast",
               filter_ids: Iterable[Hashable] | None = None) -> list[tuple[Hashable, float]]:
        """The ``k`` best facts for ``query`` as ``[(fact_id, score)]``, best first.

        Args:
            query: the query text (lexical part, speaker detection).
            query_embedding: embedding of :meth:`dense_query_text` (or of ``query``); when
                None, ``embed_query`` is used if configured, else the search is lexical only.
            k: number of results.
            tree: the namespace's :class:`~langchain_membrain.tree.tree.MembrainTree` for the tree
                parts of the score (ignored when None).
            mode: ``"fast"`` (candidates from posting lists and HNSW) or ``"exact"`` (all).
            filter_ids: only these fact ids may be returned.
        """
        if k <= 0 or not self._slot:
            return []
        q = self._query(query, query_embedding, tree, mode, filter_ids)
        if q is None:
            return []
        lex_slots, lex_scores = self._lex.bm25(q.walked, len(self._slot))  # sorted slots, scores
        cand = self._candidates(q, lex_slots, lex_scores, k)
        if cand.size == 0:
            return []
        score = self._boosted(q, cand, self._fused(q, cand, lex_slots, lex_scores))
        if score.size > k:
            top = np.argpartition(-score, k - 1)[:k]
            order = top[np.argsort(-score[top], kind="stable")]
        else:
            order = np.argsort(-score, kind="stable")
        return [(self._ids[cand[i]], float(score[i])) for i in order]

    # --------------------------------------------------------- search steps
    def _query(self, query: str, query_embedding: Any, tree: Any, mode: Mode,
               filter_ids: Iterable[Hashable] | None) -> _Query | None:
        """The query side of a search; None when ``filter_ids`` names no fact held."""
        cfg = self.config
        if query_embedding is None and self.embed_query is not None:
            query_embedding = self.embed_query(self.dense_query_text(query))
        qvec = self._dense.query(query_embedding)
        allowed = None
        if filter_ids is not None:
            allowed = np.array([self._slot[f] for f in filter_ids if f in self._slot], dtype=np.int64)
            if allowed.size == 0:
                return None
        n_emb = self._dense.n_emb
        dense = qvec is not None and bool(cfg.dense_weight) and n_emb > 0
        use_ann = (mode == "fast" and dense and self._dense.has_graph and n_emb >= cfg.ann_min_facts
                   and allowed is None)
        former = self._former_cos(qvec) if dense and qvec is not None else None
        topics = (topic_match(tree, qvec, cfg, lambda q: self._dense.cos_moments(q, len(self._ids)))
                  if tree is not None and dense and qvec is not None and topic_weight(cfg) else {})
        # Lexical: walk only posting lists. In fast mode (ANN on) the lists of common terms
        # (df > common_df * N) are not walked: their weights are read from the candidates'
        # own fields (_fused), so candidate scores stay exact.
        postings = self._lex.postings
        terms = [t for t in dict.fromkeys(self.terms(query)) if t in postings]
        walked, deferred = terms, []
        if use_ann:
            cut = cfg.common_df * len(self._slot)
            walked = [t for t in terms if len(postings[t]) <= cut]
            deferred = [t for t in terms if len(postings[t]) > cut]
        return _Query(query, qvec, dense, use_ann, allowed, tree, former, topics, walked, deferred)

    def _candidates(self, q: _Query, lex_slots: np.ndarray, lex_scores: np.ndarray, k: int) -> np.ndarray:
        """The slots a search scores (sorted)."""
        if not q.dense:  # lexical only: a fact without a matching term has no evidence at all
            return lex_slots if q.allowed is None else np.intersect1d(lex_slots, q.allowed)
        if not q.use_ann:
            return np.flatnonzero(self._alive[: len(self._ids)]) if q.allowed is None else q.allowed
        cfg = self.config
        assert q.qvec is not None  # q.dense
        n_ann = min(max(cfg.ann_candidates, 4 * k), self._dense.n_emb - self._dense.waiting)
        near = self._dense.graph_neighbours(q.qvec, n_ann)
        top_lex = lex_slots
        if lex_slots.size > cfg.ann_candidates:
            part = np.argpartition(-lex_scores, cfg.ann_candidates)[: cfg.ann_candidates]
            top_lex = lex_slots[part]
        cand = np.union1d(near, top_lex)
        if q.former is not None:  # facts whose former versions are near the query
            owners, best = q.former
            cand = np.union1d(cand, owners[np.argsort(-best)[: cfg.ann_candidates]])
        if q.topics:  # the facts of the matching aspects
            below = [self._slot[f] for a in q.topics for f in q.tree.facts_below(a) if f in self._slot]
            cand = np.union1d(cand, np.array(below[: cfg.ann_candidates], dtype=np.int64))
        return cand

    def _fused(self, q: _Query, cand: np.ndarray, lex_slots: np.ndarray, lex_scores: np.ndarray) -> np.ndarray:
        """The candidates' fused scores: normalised BM25 plus the weighted dense z-score."""
        c_lex = np.zeros(cand.size)
        if lex_slots.size:
            pos = np.minimum(np.searchsorted(lex_slots, cand), lex_slots.size - 1)
            hit = lex_slots[pos] == cand
            c_lex[hit] = lex_scores[pos[hit]]
        if q.deferred:
            c_lex += self._lex.bm25_direct(q.deferred, cand, len(self._slot))
        mx = c_lex.max() if c_lex.size else 0.0
        score = c_lex / mx if mx > 0 else np.zeros(cand.size)
        if q.dense and q.qvec is not None:
            score = score + self.config.dense_weight * self._dense.z(q.qvec, cand, len(self._ids), q.former)
        return score

    def _boosted(self, q: _Query, cand: np.ndarray, score: np.ndarray) -> np.ndarray:
        """``score`` with the speaker boost, then the priors over the boosted scores (session,
        aspect) and the topic match."""
        cfg = self.config
        base = self._chat.boost_speaker(q.text, cand, score)
        score = self._chat.add_session_prior(cand, base)
        ids = [self._ids[s] for s in cand] if q.tree is not None else []
        if q.tree is not None and cfg.tree_aspect_prior:
            score = score + cfg.tree_aspect_prior * group_max(aspect_groups(q.tree, ids), base)
        if q.topics:
            score = score + topic_weight(cfg) * cfg.dense_weight * topic_boost(q.tree, q.topics, ids)
        return score

    # -------------------------------------------------------------- internals
    def _new_slot(self, item_id: Hashable, text: str, metadata: dict[str, Any] | None, *,
                  context: bool = False, terms: list[str] | None = None) -> int:
        """A new slot (row) for a fact or a context entry, last in its session; ``terms``:
        :meth:`terms` of ``text`` when the caller has them."""
        slot = len(self._ids)
        self._ids.append(item_id)
        self._text.append(text)
        self._own.append(term_counts(self.terms(text) if terms is None else terms))
        self._lex.new_slot()
        self._grow(slot + 1)
        self._chat.add(slot, metadata, context=context)
        return slot

    def _refresh_field(self, slot: int, neighbours: list[int] | None = None) -> None:
        """Recompute one fact's lexical field from its own terms, former versions and chat
        context (session neighbours, date). ``neighbours``: its session neighbours when the
        caller knows them (add_many), else they are looked up."""
        if not self._alive[slot]:
            return  # a context entry's or a removed fact's: it has no field
        own = self._own[slot]
        w_next, w_former = self._chat.neighbour_weight(), self.config.former_weight
        if not w_next:
            neighbours = []
        elif neighbours is None:
            neighbours = self._chat.neighbours(slot)
        former = self._former_terms.get(slot) if w_former else None
        dates = self._chat.date_terms(slot)
        if not neighbours and not former and not dates:
            # Nothing but its own terms: the field is their dict itself, not a copy (both
            # are replaced, never changed in place).
            self._lex.set_field(slot, own)
            return
        fld: dict[str, float] = dict(own)
        for nb in neighbours:
            for t, c in self._own[nb].items():
                fld[t] = fld.get(t, 0.0) + w_next * c
        for t, c in (former or {}).items():
            fld[t] = fld.get(t, 0.0) + w_former * c
        for t in dates:
            fld[t] = fld.get(t, 0.0) + 1.0
        self._lex.set_field(slot, fld)

    def _grow(self, n: int) -> None:
        cap = self._alive.size
        if n <= cap:
            return
        new = n if cap < GROW_EXACT_BELOW else max(n, 2 * cap)
        self._alive = np.concatenate([self._alive, np.zeros(new - cap, dtype=bool)])
        self._lex.grow(new)
        self._dense.grow(new)
        self._chat.grow(new)

    def _former_cos(self, qvec: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(sorted slots, best cosine with ``qvec`` over each one's former versions), or None
        when no fact has a former version with an embedding (or ``former_dense`` is off).
        Scans the former versions' vectors: as many as the archived versions still owned."""
        if not self.config.former_dense or not self._former:
            return None
        if self._former_stack is None:
            slots: list[int] = []
            firsts: list[int] = []
            rows: list[np.ndarray] = []
            for slot in sorted(self._former):
                vecs = [v for _, v in self._former[slot] if v is not None]
                if vecs:
                    slots.append(slot)
                    firsts.append(len(rows))
                    rows.extend(vecs)
            self._former_stack = (np.asarray(slots, dtype=np.int64), np.asarray(firsts, dtype=np.int64),
                                  np.asarray(rows, dtype=np.float32).reshape(len(rows), -1) if rows
                                  else np.zeros((0, 0), dtype=np.float32))
        owners, starts, mat = self._former_stack
        if not owners.size:
            return None
        return owners, np.maximum.reduceat(mat @ qvec, starts)
