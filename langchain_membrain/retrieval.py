"""Fact retrieval for one namespace: an incrementally maintained hybrid index.

:class:`FactIndex` holds the facts of one namespace (one tree) and answers
``search(query, query_embedding, k)`` with ``[(fact_id, score), ...]``, best first. It is
the "strong flat pipeline" of the README's LoCoMo results, every part switchable in :class:`RetrievalConfig`
so that each can be measured, plus the parts that use the tree.

Definitions (``s`` is a fact, ``q`` the query):

- **Lexical field** of a fact: the bag of its own terms (weight 1 per occurrence), plus
  each term of the previous and of the next fact of the same *session* with weight
  ``neighbour_weight`` (default 0.5), plus the session's month and year as terms (weight 1).
  Terms are lower-cased word tokens of two or more characters, stop words removed,
  Snowball-stemmed (PyStemmer; no stemming when it is not installed). The session of a
  fact is ``metadata["session"]``; the order within a session is insertion order; the
  date is ``metadata["date"]`` (a ``datetime``/``date`` or a string such as
  ``"1:56 pm on 8 May, 2023"`` or ``"2023-05-08"``).
- **BM25** (Lucene variant): ``sum_t idf(t) * f(t,s) (k1 + 1) / (f(t,s) + k1 (1 - b + b |s| / avgdl))``
  over the distinct query terms, ``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))``, ``f`` the
  (fractional) weight of ``t`` in the field, ``|s|`` the field's total weight, ``k1 = 1.5``,
  ``b = 0.3`` (short chat turns: length normalisation mostly hurts).
- **Dense score**: cosine of the fact embedding with the query embedding, turned into a
  z-score ``(cos - mean) / std`` with mean and standard deviation over *all* facts of the
  index. Both come from running first and second moments of the stored embeddings
  (``mean = q . mu``, ``var = q^T E[x x^T] q - mean^2``), so no scan is needed.
- **Fused score**: ``bm25 / max(bm25) + dense_weight * z`` (``max`` over the scored set;
  linear fusion beat reciprocal-rank fusion on LoCoMo).
- **Speaker boost**: when the query names exactly one of the speakers seen
  (``metadata["speaker"]``), facts of that speaker get ``+ speaker_boost``.
- **Session prior**: ``+ session_prior * max(score of the facts in the same session)``.
- **Relevance** (the score a search reports, :func:`relevance`): the final score ``s`` that
  :meth:`FactIndex.search` ranks by, every boost included, mapped to ``[0, 1]`` by
  ``1 / (1 + exp(-4 (s - 0.5)))``. Monotone, so ranking by it is ranking by ``s``; 0.5 for
  ``s = 0.5`` (half the best lexical match, or a cosine 2.5 deviations above the mean).
- **Former versions**: a fact that superseded others (memory operations: an UPDATE keeps
  the key and archives the old text) still answers what they answered: "I moved into a
  house in Headingley" is where the person *lives*, though only the version it replaced
  said "live". Each term of the former versions joins the fact's field with weight
  ``former_weight`` (per term, its count in the version that says it most), and the
  fact's cosine is the best over its own embedding and theirs. A fact that never changed
  is scored as before.
- The dense query drops the speakers' names (they carry no topic, and pull the query
  toward every turn of that speaker): with ``embed_query`` configured the index embeds the
  stripped text itself, otherwise the caller may pass the embedding of
  :meth:`FactIndex.dense_query_text`.

Every metadata-driven part degrades to a no-op when its key is absent: plain facts with no
metadata get BM25 over their own terms fused with the dense score.

Modes: ``mode="exact"`` scores every fact. ``mode="fast"`` scores only candidates, once the
index holds at least ``ann_min_facts`` embedded facts (below that a matrix-vector product
is cheap and exact, and fast equals exact): the ``ann_candidates`` nearest neighbours from
an HNSW index (hnswlib) united with the best ``ann_candidates`` facts by BM25 over the
*selective* query terms, those whose posting list holds at most ``common_df * N`` facts.
The common terms' weights are then read from each candidate's own field, so every
candidate's score is exactly its exact-mode score; only the candidate set is approximate.
A fast search touches the selective posting lists, an O(log N) graph search and a few
hundred candidates, never all facts. Recall@10 against exact is measured by
``python -m langchain_membrain.bench scale``.

Tree (``search(..., tree=MembrainTree)``): see :class:`RetrievalConfig` fields prefixed
``tree_``; fact ids must be the tree's fact node ids.

- **Topic match**: an aspect's cosine with the query is ``c(a) = max(cos(q, label(a)),
  cos(q, m(a)))`` (its label's embedding, the mean embedding of its facts), over the aspects
  holding at least ``tree_topic_min_facts`` facts; ``z(a)`` is ``c(a)`` z-scored with the
  mean and deviation of the query's cosines to the facts. When the best aspect has
  ``z >= tree_topic_min_z`` (the query is about a topic the tree holds, not about one
  fact), the aspects within ``tree_topic_margin`` of the best one match, and each fact
  below a matching aspect gets ``+ tree_topic_weight * dense_weight * z(a)`` for the best
  such ancestor: the fact's dense score and its topic's, on one scale. Otherwise nothing
  changes. In fast mode the matching aspects' facts join the candidates.

Thread-safety: a ``FactIndex`` is **not** thread-safe. Every method that reads or writes
must be called with the owner's lock held (``MembrainMemory`` already serialises writes to a
namespace's tree; it must take the same lock around ``search``). Distinct indexes share
nothing and can be used from distinct threads.
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from dataclasses import dataclass, replace
from datetime import date, datetime
from typing import Any, Callable, Hashable, Iterable, Literal, Mapping, cast

import numpy as np

try:  # optional: Snowball stemmer (extra "bench"); without it terms are not stemmed
    import Stemmer as _PyStemmer
except ImportError:  # pragma: no cover - exercised only where PyStemmer is missing
    _PyStemmer = None

_STEMMERS = threading.local()


def _shared_stemmer() -> Any:
    """This thread's English stemmer, shared by every index: stemming is a pure function of
    the word, and a PyStemmer object (a C stemmer with a cache of the words it stemmed, about
    1 KB for a handful) is not to be used by two threads at once. One per index cost each
    namespace that kilobyte."""
    stemmer = getattr(_STEMMERS, "english", None)
    if stemmer is None:
        stemmer = _STEMMERS.english = _PyStemmer.Stemmer("english")
    return stemmer

#: Rows an index allocates one at a time before it doubles its capacity: a namespace of a
#: few facts holds no spare rows (an empty 384-d row is 1.5 KB), and from here on the
#: capacities are the powers of two they always were.
GROW_EXACT_BELOW = 8

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

try:  # optional: HNSW for the fast mode; without it the dense part is exact
    import hnswlib as _hnswlib
except ImportError:  # pragma: no cover
    _hnswlib = None

__all__ = ["FactIndex", "RetrievalConfig", "tokenize", "date_tokens", "relevance", "STOPWORDS"]

Mode = Literal["fast", "exact"]

# English stop words (a common short list, plus chat fillers); question words stay out of
# facts and queries alike so that "when did X" does not match every "when" in a chat.
STOPWORDS = frozenset("""
a about above after again against all also am an and any are as at be because been before
being below between both but by can could did do does doing down during each few for from
further had has have having he her here hers herself him himself his how i if in into is it
its itself just me more most my myself no nor not now of off on once only or other our ours
ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were
what when where which while who whom why will with would you your yours yourself yourselves
yeah yes oh hey hi wow ok okay really thanks thank
""".split())

_TOKEN = re.compile(r"\b\w\w+\b")
_MONTHS = ("january february march april may june july august september october november "
           "december").split()
_MONTH_RE = re.compile(r"\b(" + "|".join(m[:3] for m in _MONTHS) + r")[a-z]*\b", re.I)
_YEAR_RE = re.compile(r"\b(1[89]\d\d|2\d\d\d)\b")

#: :func:`relevance` is 0.5 at this ranking score; its log-odds grow by RELEVANCE_SLOPE per
#: unit of score.
RELEVANCE_MIDPOINT = 0.5
RELEVANCE_SLOPE = 4.0


def relevance(score: float) -> float:
    """The score a search reports for a hit: ``1 / (1 + exp(-4 (s - 0.5)))`` of the ranking
    score ``s`` that :meth:`FactIndex.search` returns (fused lexical and dense score plus
    every boost and prior; see the module docstring). A relevance in ``[0, 1]``, strictly
    increasing in ``s`` wherever floats can tell (so it never reorders hits), the same
    function for every namespace, entry point and ranking extension: an unrelated fact
    scores about 0.1 (``s`` near 0), a fact as near the query in meaning as 2.5 standard
    deviations above the namespace's mean 0.5, a fact that also holds the query's rarest
    words above 0.9."""
    x = -RELEVANCE_SLOPE * (float(score) - RELEVANCE_MIDPOINT)
    if x > 700.0:  # exp would overflow: the relevance is 0 to double precision
        return 0.0
    return 1.0 / (1.0 + math.exp(x))


@dataclass(frozen=True)
class RetrievalConfig:
    """Switches and weights of the pipeline. Defaults: the strong flat pipeline; the tree
    parts are off because none measured as a gain on LoCoMo (see the bench). Setting a
    weight to 0 turns its part off."""

    stem: bool = True
    k1: float = 1.5
    b: float = 0.3
    neighbour_weight: float = 0.5  # weight of the previous/next fact's terms in a field
    date_terms: bool = True  # the session's month and year as terms
    dense_weight: float = 0.2  # fused = bm25 / max(bm25) + dense_weight * z(cos)
    strip_names: bool = True  # drop speaker names from the dense query
    # + to facts of the one speaker the query names; 1.0 = the scale of the normalised BM25
    # term, so that speaker's facts come first unless another fact is much better.
    speaker_boost: float = 1.0
    session_prior: float = 0.5  # + session_prior * best score in the fact's session
    # Fast mode.
    ann_min_facts: int = 2000
    ann_candidates: int = 200
    common_df: float = 0.05  # fast mode: posting lists longer than this share of N are not walked
    hnsw_m: int = 32
    hnsw_ef_construction: int = 100
    hnsw_ef_search: int = 200
    # Tree (used only when search() gets a tree).
    tree_aspect_prior: float = 0.0  # + w * best score among the facts of the fact's aspect
    # Topic match (FactIndex docstring, "Topic match"): facts below the aspects that match
    # the query best get + tree_topic_weight * dense_weight * the aspect's z-scored cosine.
    # None ("auto"): MembrainMemory turns it on (TOPIC_WEIGHT) when its teacher names topics
    # (an LLM, an endpoint, an evaluation teacher) and off under the offline rule, whose
    # aspects are keyword clusters of the embeddings: boosting them lowered LoCoMo's
    # single-hop recall. A FactIndex used alone reads None as off.
    tree_topic_weight: float | None = None
    tree_topic_margin: float = 0.05  # aspects within this cosine of the best one match too
    tree_topic_min_facts: int = 3  # smaller aspects say too little about a topic
    tree_topic_min_z: float = 2.0  # the best aspect must stand this far above the facts
    # Former versions of a fact (those it superseded, :meth:`FactIndex.set_former`): their
    # terms join its lexical field with this weight (0: off), and with ``former_dense`` its
    # cosine is the best over its own embedding and theirs.
    former_weight: float = 1.0
    former_dense: bool = True


TOPIC_WEIGHT = 1.0  # the topic match's weight when "auto" turns it on


def topic_weight(config: RetrievalConfig) -> float:
    """The topic match's weight in effect: ``tree_topic_weight``, None (auto, unresolved) as 0."""
    return float(config.tree_topic_weight or 0.0)


def resolve_topic_weight(config: RetrievalConfig, *, teacher_names_topics: bool) -> RetrievalConfig:
    """``config`` with an "auto" topic weight decided: :data:`TOPIC_WEIGHT` when the teacher
    names topics, else 0; an explicit weight is kept."""
    if config.tree_topic_weight is not None:
        return config
    return replace(config, tree_topic_weight=TOPIC_WEIGHT if teacher_names_topics else 0.0)


def tokenize(text: str, stemmer: Any = None) -> list[str]:
    """Lower-case word tokens of 2+ characters, stop words removed, stemmed if a stemmer
    (PyStemmer ``Stemmer``) is given."""
    toks = [t for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]
    if stemmer is not None and toks:
        toks = stemmer.stemWords(toks)
    return toks


def date_tokens(value: Any) -> list[str]:
    """The month name and year of a date as terms (``["may", "2023"]``); [] if none found.

    Accepts ``datetime``/``date``, ISO strings (``2023-05-08``) and free text such as
    LoCoMo's ``"1:56 pm on 8 May, 2023"``.
    """
    if value is None:
        return []
    if isinstance(value, (datetime, date)):
        return [_MONTHS[value.month - 1], str(value.year)]
    text = str(value)
    try:
        d = datetime.fromisoformat(text.strip())
        return [_MONTHS[d.month - 1], str(d.year)]
    except ValueError:
        pass
    out = []
    m = _MONTH_RE.search(text)
    if m:
        prefix = m.group(1).lower()
        out.append(next(name for name in _MONTHS if name.startswith(prefix)))
    y = _YEAR_RE.search(text)
    if y:
        out.append(y.group(1))
    return out


def _name_words(name: str) -> list[str]:
    return [w for w in re.findall(r"\w+", name.lower()) if len(w) >= 2]


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
    __slots__ = ("config", "embed_query", "dim", "_stem", "_slot", "_ids", "_text", "_own", "_date", "_field",
                 "_len", "_postings", "_posting_arrays", "_total_len", "_sessions", "_sess_key", "_sess_num",
                 "_sess_arr", "_speaker", "_speaker_count", "_spk_num", "_spk_arr", "_emb", "_alive", "_has_emb",
                 "_m1", "_m2", "_m2_pending", "_n_emb", "_hnsw", "_ann_pending", "_former", "_former_terms",
                 "_former_stack", "_context")

    def __init__(self, config: RetrievalConfig | None = None, *,
                 embed_query: Callable[[str], Any] | None = None, dim: int | None = None):
        self.config = config or RetrievalConfig()
        self.embed_query = embed_query
        self.dim = dim
        self._stem = bool(self.config.stem and _PyStemmer)  # terms stemmed (by _shared_stemmer)
        self._slot: dict[Hashable, int] = {}  # fact id -> slot
        self._ids: list[Hashable | None] = []  # slot -> fact id (None once removed)
        self._text: list[str] = []
        self._own: list[Counter] = []  # slot -> own terms
        self._date: list[tuple[str, ...]] = []  # slot -> date terms
        # slot -> full lexical field (its own terms' Counter when nothing else joins them)
        self._field: list[Mapping[str, float]] = []
        self._len = np.zeros(0, dtype=np.float64)  # slot -> field weight
        self._postings: dict[str, dict[int, float]] = {}
        self._posting_arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # cache
        self._total_len = 0.0
        self._sessions: dict[str, list[int]] = {}  # session key -> slots in insertion order
        self._sess_key: list[str | None] = []
        self._sess_num: dict[str, int] = {}  # session key -> small int (for array ops)
        self._sess_arr = np.zeros(0, dtype=np.int64)  # slot -> session number, -1 none
        self._speaker: list[str | None] = []
        self._speaker_count: Counter = Counter()  # display name -> facts
        self._spk_num: dict[str, int] = {}  # display name -> small int
        self._spk_arr = np.zeros(0, dtype=np.int64)  # slot -> speaker number, -1 none
        self._emb = np.zeros((0, dim or 0), dtype=np.float32)
        self._alive = np.zeros(0, dtype=bool)
        self._has_emb = np.zeros(0, dtype=bool)
        self._m1: np.ndarray | None = None  # sum of embeddings (float64)
        self._m2: np.ndarray | None = None  # sum of outer products (float64)
        # Embeddings (float64) and signs counted in ``_m1`` whose outer products are not in
        # ``_m2`` yet (see MOMENTS_PENDING_MAX).
        self._m2_pending: list[tuple[np.ndarray, int]] = []
        self._n_emb = 0
        self._hnsw: Any = None
        # Slots whose embedding is not in the HNSW graph yet (defer_ann): every search
        # scores them exactly beside the graph's candidates, so results never miss them.
        self._ann_pending: dict[int, None] = {}
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
    def _stemmer(self) -> Any:
        """The stemmer of this index's terms (this thread's, see _shared_stemmer), or None."""
        return _shared_stemmer() if self._stem else None

    # ------------------------------------------------------------------ reads
    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, fact_id: object) -> bool:
        return fact_id in self._slot

    def ids(self) -> list[Hashable]:
        return list(self._slot)

    def former_ids(self) -> list[Hashable]:
        """The facts credited with former versions (:meth:`set_former`)."""
        return [self._ids[s] for s in self._former]

    def speakers(self) -> list[str]:
        """Distinct ``metadata["speaker"]`` values of the facts held."""
        return sorted(self._speaker_count)

    def terms(self, text: str) -> list[str]:
        """The lexical terms of ``text`` as this index sees them."""
        return tokenize(text, self._stemmer)

    def field_of(self, fact_id: Hashable) -> dict[str, float]:
        """The lexical field of a fact (term -> weight), see the module docstring."""
        return dict(self._field[self._slot[fact_id]])

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
        vec = self._check_vec(embedding)
        meta = dict(metadata or {})
        spk = meta.get("speaker")
        spk = str(spk) if spk not in (None, "") else None
        slot = self._new_slot(fact_id, text, self._date_terms(meta), spk, self._session_key(meta))
        self._slot[fact_id] = slot
        self._alive[slot] = True
        if spk:
            self._speaker_count[spk] += 1
        for s in (slot, *self._previous(slot)):  # the previous one gains this one as "next"
            self._refresh_field(s)
        if vec is not None:
            self._set_vec(slot, vec, defer_ann)

    def add_context(self, item_id: Hashable, text: str, metadata: dict[str, Any] | None = None) -> None:
        """Hold an item that is not a memory (an ignored turn) in its session's order: it is
        never returned, but its words join its neighbours' fields as a neighbour fact's do
        (``neighbour_weight``), so the answer after an ignored question still carries the
        question's words. Nothing happens without a session, or when the id is held already."""
        key = self._session_key(dict(metadata or {}))
        if key is None or item_id in self._context or item_id in self._slot:
            return
        slot = self._context[item_id] = self._new_slot(item_id, text, (), None, key)
        for s in self._previous(slot):
            self._refresh_field(s)

    def remove_context(self, item_id: Hashable) -> None:
        """Forget a context entry (its neighbours' fields are recomputed); no-op if absent."""
        slot = self._context.pop(item_id, None)
        if slot is None:
            return
        prev_next = self._neighbours(slot)
        self._sessions[cast(str, self._sess_key[slot])].remove(slot)  # a context entry has a session
        for s in prev_next:
            self._refresh_field(s)

    def update(self, fact_id: Hashable, *, text: str | None = None, embedding: Any = None,
               metadata: dict[str, Any] | None = None, defer_ann: bool = False) -> None:
        """Change a fact's text, embedding and/or metadata (metadata replaced whole). The fact
        keeps its place in its session unless its session changes (then it goes last)."""
        slot = self._slot[fact_id]
        vec = self._check_vec(embedding)
        if metadata is not None and self._session_key(metadata) != self._sess_key[slot]:
            old_text, old_emb = self._text[slot], self._emb[slot].copy() if self._has_emb[slot] else None
            former = self._former.get(slot, [])
            self.remove(fact_id)
            self.add(fact_id, old_text if text is None else text,
                     old_emb if vec is None else vec, metadata)
            self.set_former(fact_id, former)
            return
        if metadata is not None:
            meta = dict(metadata)
            old = self._speaker[slot]
            if old:
                self._speaker_count[old] -= 1
                if not self._speaker_count[old]:
                    del self._speaker_count[old]
            spk = meta.get("speaker")
            spk = str(spk) if spk not in (None, "") else None
            self._speaker[slot] = spk
            self._spk_arr[slot] = self._spk_num.setdefault(spk, len(self._spk_num)) if spk else -1
            if spk:
                self._speaker_count[spk] += 1
            self._date[slot] = self._date_terms(meta)
        if text is not None:
            self._text[slot] = text
            self._own[slot] = Counter(self.terms(text))
        if text is not None or metadata is not None:
            for s in (slot, *self._neighbours(slot)):
                self._refresh_field(s)
        if vec is not None:
            if self._has_emb[slot]:
                self._moments(self._emb[slot], -1)
            self._set_vec(slot, vec, defer_ann)

    def set_former(self, fact_id: Hashable, versions: Iterable[tuple[str, Any]]) -> None:
        """Replace the former versions of a fact: ``(text, embedding or None)`` of each
        version it superseded (see the module docstring; ``[]``: none). KeyError if the
        fact is not held, ValueError for an embedding of the wrong shape."""
        slot = self._slot[fact_id]
        versions = [(str(text), self._check_vec(vec)) for text, vec in versions]
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

    def remove(self, fact_id: Hashable) -> None:
        """Drop a fact; its session neighbours' fields are recomputed. KeyError if absent."""
        slot = self._slot.pop(fact_id)
        if self._former.pop(slot, None) is not None:
            self._former_terms.pop(slot, None)
            self._former_stack = None
        prev_next = self._neighbours(slot)
        key = self._sess_key[slot]
        if key is not None:
            self._sessions[key].remove(slot)
        self._set_field(slot, {})
        for s in prev_next:
            self._refresh_field(s)
        spk = self._speaker[slot]
        if spk:
            self._speaker_count[spk] -= 1
            if not self._speaker_count[spk]:
                del self._speaker_count[spk]
        if self._has_emb[slot]:
            self._moments(self._emb[slot], -1)
            self._has_emb[slot] = False
            pending = slot in self._ann_pending
            self._ann_pending.pop(slot, None)
            if self._hnsw is not None:
                try:
                    self._hnsw.mark_deleted(slot)
                except RuntimeError:
                    if not pending:  # only a slot still waiting may be absent from the graph
                        raise
        self._alive[slot] = False
        self._spk_arr[slot] = -1
        self._ids[slot] = None
        self._own[slot] = Counter()
        self._text[slot] = ""

    # ----------------------------------------------------------------- search
    def dense_query_text(self, query: str) -> str:
        """``query`` without the speaker names this index has seen (when ``strip_names``)."""
        if not self.config.strip_names or not self._speaker_count:
            return query
        words = {w for name in self._speaker_count for w in _name_words(name)}
        if not words:
            return query
        pat = re.compile(r"\b(" + "|".join(map(re.escape, sorted(words, key=len, reverse=True)))
                         + r")(?:'s|s')?\b", re.I)
        out = re.sub(r"\s+", " ", pat.sub(" ", query)).strip()
        return out or query

    def named_speaker(self, query: str) -> str | None:
        """The one speaker whose name (any word of it) the query contains; None if zero or
        several are named."""
        qwords = set(re.findall(r"\w+", query.lower()))
        hits = [name for name in self._speaker_count if qwords & set(_name_words(name))]
        return hits[0] if len(hits) == 1 else None

    def nearest(self, embedding: Any, k: int = 1) -> list[tuple[Hashable, float]]:
        """The ``k`` facts whose embeddings have the highest cosine with ``embedding``, with
        those cosines, best first ([] when no fact has an embedding). Approximate (HNSW)
        once the fast mode's index exists, exact below that."""
        if not self._n_emb or k <= 0:
            return []
        vec = self._check_vec(embedding)
        if vec is None:
            raise ValueError("nearest() needs an embedding")
        k = min(k, self._n_emb)
        if self._hnsw is not None:
            k_ann = min(k, self._n_emb - len(self._ann_pending))
            found = self._hnsw.knn_query(vec.reshape(1, -1), k=k_ann)[0][0] if k_ann > 0 else []
            slots = np.union1d(np.asarray(found, dtype=np.int64), self._pending_slots())
            slots = slots[np.argsort(-(self._emb[slots] @ vec), kind="stable")[:k]]
        else:
            n_slots = len(self._ids)
            cos = np.where(self._has_emb[:n_slots], self._emb[:n_slots] @ vec, -np.inf)
            slots = np.argpartition(-cos, k - 1)[:k]  # every add asks this: no full sort
        sims = self._emb[slots] @ vec
        order = np.argsort(-sims, kind="stable")
        return [(self._ids[slots[i]], float(sims[i])) for i in order]

    def search(self, query: str, query_embedding: Any = None, k: int = 10, *,
               tree: Any = None, mode: Mode = "fast",
               filter_ids: Iterable[Hashable] | None = None) -> list[tuple[Hashable, float]]:
        """The ``k`` best facts for ``query`` as ``[(fact_id, score)]``, best first.

        Args:
            query: the query text (lexical part, speaker detection).
            query_embedding: embedding of :meth:`dense_query_text` (or of ``query``); when
                None, ``embed_query`` is used if configured, else the search is lexical only.
            k: number of results.
            tree: the namespace's :class:`~langchain_membrain.tree.MembrainTree` for the tree
                parts of the score (ignored when None).
            mode: ``"fast"`` (candidates from posting lists and HNSW) or ``"exact"`` (all).
            filter_ids: only these fact ids may be returned.
        """
        if k <= 0 or not self._slot:
            return []
        cfg = self.config
        qvec = self._query_vec(query, query_embedding)
        allowed = None
        if filter_ids is not None:
            allowed = np.array([self._slot[f] for f in filter_ids if f in self._slot], dtype=np.int64)
            if allowed.size == 0:
                return []
        n_slots = len(self._ids)
        use_ann = (mode == "fast" and qvec is not None and cfg.dense_weight and self._hnsw is not None
                   and self._n_emb >= cfg.ann_min_facts and allowed is None)
        former = self._former_cos(qvec) if qvec is not None and cfg.dense_weight else None
        topics = (self._topic_match(tree, qvec) if tree is not None and qvec is not None and cfg.dense_weight
                  and topic_weight(cfg) and self._n_emb else {})
        # 1. lexical: walk only posting lists. In fast mode (ANN on) the lists of common
        # terms (df > common_df * N) are not walked: their weights are read from the
        # candidates' own fields below, so candidate scores stay exact.
        terms = [t for t in dict.fromkeys(self.terms(query)) if t in self._postings]
        walked, deferred = terms, []
        if use_ann:
            cut = cfg.common_df * len(self._slot)
            walked = [t for t in terms if len(self._postings[t]) <= cut]
            deferred = [t for t in terms if len(self._postings[t]) > cut]
        lex_slots, lex_scores = self._bm25(walked)  # sorted slots, scores
        # 2. candidate set
        if qvec is None or not cfg.dense_weight or not self._n_emb:
            # lexical only: a fact without a matching term has no evidence at all
            cand = lex_slots if allowed is None else np.intersect1d(lex_slots, allowed)
        elif not use_ann:
            cand = np.flatnonzero(self._alive[:n_slots]) if allowed is None else allowed
        else:
            n_ann = min(max(cfg.ann_candidates, 4 * k), self._n_emb - len(self._ann_pending))
            self._hnsw.set_ef(max(cfg.hnsw_ef_search, n_ann))
            labels, _ = self._hnsw.knn_query(qvec.reshape(1, -1), k=n_ann)
            labels = [np.union1d(labels[0].astype(np.int64), self._pending_slots())]
            top_lex = lex_slots
            if lex_slots.size > cfg.ann_candidates:
                part = np.argpartition(-lex_scores, cfg.ann_candidates)[: cfg.ann_candidates]
                top_lex = lex_slots[part]
            cand = np.union1d(labels[0].astype(np.int64), top_lex)
            if former is not None:  # facts whose former versions are near the query
                owners, best = former
                cand = np.union1d(cand, owners[np.argsort(-best)[: cfg.ann_candidates]])
            if topics:  # the facts of the matching aspects
                below = [self._slot[f] for a in topics for f in tree.facts_below(a) if f in self._slot]
                cand = np.union1d(cand, np.array(below[: cfg.ann_candidates], dtype=np.int64))
        if cand.size == 0:
            return []
        # 3. fused score on the candidates
        c_lex = np.zeros(cand.size)
        if lex_slots.size:
            pos = np.minimum(np.searchsorted(lex_slots, cand), lex_slots.size - 1)
            hit = lex_slots[pos] == cand
            c_lex[hit] = lex_scores[pos[hit]]
        if deferred:
            c_lex += self._bm25_direct(deferred, cand)
        mx = c_lex.max() if c_lex.size else 0.0
        score = c_lex / mx if mx > 0 else np.zeros(cand.size)
        if qvec is not None and cfg.dense_weight and self._n_emb:
            score = score + cfg.dense_weight * self._dense_z(qvec, cand, former)
        # 4. speaker boost
        spk = self.named_speaker(query) if cfg.speaker_boost else None
        if spk is not None:
            score = score + cfg.speaker_boost * (self._spk_arr[cand] == self._spk_num[spk])
        # 5. session prior (time structure) and aspect prior (tree)
        base = score
        if cfg.session_prior:
            score = score + cfg.session_prior * _group_max(self._sess_arr[cand], base)
        if tree is not None and cfg.tree_aspect_prior:
            groups = self._aspect_groups(tree, cand)
            score = score + cfg.tree_aspect_prior * _group_max(groups, base)
        if topics:
            score = score + topic_weight(cfg) * cfg.dense_weight * self._topic_boost(tree, topics, cand)
        if score.size > k:
            top = np.argpartition(-score, k - 1)[:k]
            order = top[np.argsort(-score[top], kind="stable")]
        else:
            order = np.argsort(-score, kind="stable")
        return [(self._ids[cand[i]], float(score[i])) for i in order]

    # -------------------------------------------------------------- internals
    def _stem_list(self, toks: list[str]) -> list[str]:
        return _shared_stemmer().stemWords(toks) if (self._stem and toks) else toks

    def _date_terms(self, meta: dict[str, Any]) -> tuple[str, ...]:
        """A fact's date terms (stemmed as its words are), as a tuple: most facts have
        none, and the empty tuple is one object."""
        return tuple(self._stem_list(date_tokens(meta.get("date")) if self.config.date_terms else []))

    @staticmethod
    def _session_key(meta: dict[str, Any]) -> str | None:
        s = meta.get("session")
        return None if s is None or s == "" else str(s)

    def _new_slot(self, item_id: Hashable, text: str, date: tuple[str, ...], speaker: str | None,
                  key: str | None) -> int:
        """A new slot (row) for a fact or a context entry, last in its session (``key``)."""
        slot = len(self._ids)
        self._ids.append(item_id)
        self._text.append(text)
        self._own.append(Counter(self.terms(text)))
        self._date.append(date)
        self._field.append({})
        self._grow(slot + 1)
        self._speaker.append(speaker)
        self._spk_arr[slot] = self._spk_num.setdefault(speaker, len(self._spk_num)) if speaker else -1
        self._sess_key.append(key)
        if key is not None:
            self._sessions.setdefault(key, []).append(slot)
            self._sess_arr[slot] = self._sess_num.setdefault(key, len(self._sess_num))
        return slot

    def _previous(self, slot: int) -> list[int]:
        """The slot before ``slot``, the last of its session (0 or 1 slot; O(1))."""
        key = self._sess_key[slot]
        order = self._sessions[key] if key is not None else []
        return order[-2:-1] if order and order[-1] == slot else []

    def _neighbours(self, slot: int) -> list[int]:
        """The previous and next slots of ``slot`` in its session (0 to 2 slots)."""
        key = self._sess_key[slot]
        if key is None:
            return []
        order = self._sessions[key]
        try:
            i = order.index(slot)
        except ValueError:
            return []
        return [order[j] for j in (i - 1, i + 1) if 0 <= j < len(order)]

    def _refresh_field(self, slot: int) -> None:
        """Recompute one fact's lexical field from its own terms, neighbours and date."""
        if not self._alive[slot]:
            return  # a context entry's or a removed fact's: it has no field
        own = self._own[slot]
        w_next, w_former = self.config.neighbour_weight, self.config.former_weight
        neighbours = self._neighbours(slot) if w_next else []
        former = self._former_terms.get(slot) if w_former else None
        if not neighbours and not former and not self._date[slot]:
            # Nothing but its own terms: the field is their Counter itself, not a copy (both
            # are replaced, never changed in place).
            self._set_field(slot, own)
            return
        fld: dict[str, float] = dict(own)
        for nb in neighbours:
            for t, c in self._own[nb].items():
                fld[t] = fld.get(t, 0.0) + w_next * c
        for t, c in (former or {}).items():
            fld[t] = fld.get(t, 0.0) + w_former * c
        for t in self._date[slot]:
            fld[t] = fld.get(t, 0.0) + 1.0
        self._set_field(slot, fld)

    def _set_field(self, slot: int, fld: Mapping[str, float]) -> None:
        """Replace a field, touching only the posting lists of terms that changed."""
        old = self._field[slot]
        for t in old.keys() - fld.keys():
            plist = self._postings[t]
            del plist[slot]
            if not plist:
                del self._postings[t]
            self._posting_arrays.pop(t, None)
        for t, wt in fld.items():
            if old.get(t) != wt:
                self._postings.setdefault(t, {})[slot] = wt
                self._posting_arrays.pop(t, None)
        total = float(sum(fld.values()))
        self._total_len += total - self._len[slot]
        self._len[slot] = total
        self._field[slot] = fld

    def _idf(self, df: int) -> float:
        n = len(self._slot)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def _bm25(self, terms: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(sorted slots, scores) of the facts with a non-zero BM25 score over ``terms``,
        computed from their posting lists only."""
        n = len(self._slot)
        if not terms or n == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        k1, b = self.config.k1, self.config.b
        avgdl = max(self._total_len / n, 1e-9)
        parts_s, parts_v = [], []
        for t in terms:
            slots, tf = self._posting(t)
            denom = tf + k1 * (1.0 - b + b * self._len[slots] / avgdl)
            parts_s.append(slots)
            parts_v.append(self._idf(slots.size) * tf * (k1 + 1.0) / denom)
        if len(parts_s) == 1:
            order = np.argsort(parts_s[0])
            return parts_s[0][order], parts_v[0][order]
        slots = np.concatenate(parts_s)
        vals = np.concatenate(parts_v)
        uniq, inv = np.unique(slots, return_inverse=True)
        return uniq, np.bincount(inv, weights=vals, minlength=uniq.size)

    def _bm25_direct(self, terms: list[str], cand: np.ndarray) -> np.ndarray:
        """BM25 over ``terms`` for the given slots only, read from their fields."""
        k1, b = self.config.k1, self.config.b
        avgdl = max(self._total_len / max(len(self._slot), 1), 1e-9)
        norm = k1 * (1.0 - b + b * self._len[cand] / avgdl)
        out = np.zeros(cand.size)
        fields = [self._field[s] for s in cand]
        for t in terms:
            tf = np.fromiter((f.get(t, 0.0) for f in fields), dtype=np.float64, count=cand.size)
            out += self._idf(len(self._postings[t])) * tf * (k1 + 1.0) / (tf + norm)
        return out

    def _posting(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        arr = self._posting_arrays.get(term)
        if arr is None:
            plist = self._postings[term]
            arr = (np.fromiter(plist.keys(), dtype=np.int64, count=len(plist)),
                   np.fromiter(plist.values(), dtype=np.float64, count=len(plist)))
            self._posting_arrays[term] = arr
        return arr

    def _check_vec(self, embedding: Any) -> np.ndarray | None:
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

    def _grow(self, n: int) -> None:
        cap = self._alive.size
        if n <= cap:
            return
        new = n if cap < GROW_EXACT_BELOW else max(n, 2 * cap)
        emb = np.zeros((new, self.dim or 0), dtype=np.float32)
        emb[:cap] = self._emb[:cap]
        self._emb = emb
        self._alive = np.concatenate([self._alive, np.zeros(new - cap, dtype=bool)])
        self._has_emb = np.concatenate([self._has_emb, np.zeros(new - cap, dtype=bool)])
        self._sess_arr = np.concatenate([self._sess_arr, np.full(new - cap, -1, dtype=np.int64)])
        self._len = np.concatenate([self._len, np.zeros(new - cap)])
        self._spk_arr = np.concatenate([self._spk_arr, np.full(new - cap, -1, dtype=np.int64)])

    def _moments(self, vec: np.ndarray, sign: int) -> None:
        """Count an embedding in (or out); past MOMENTS_MIN embeddings, keep the sums of
        the embeddings and of their outer products (a dim x dim matrix: 1.2 MB at 384-d,
        which a small namespace does without; :meth:`_dense_z` then reads the rows)."""
        self._n_emb += sign
        if self._m2 is None and self._n_emb >= MOMENTS_MIN:  # ``vec`` is among the rows already
            live = self._emb[np.flatnonzero(self._has_emb[: len(self._ids)])].astype(np.float64)
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

    def _pending_slots(self) -> np.ndarray:
        return np.fromiter(self._ann_pending, dtype=np.int64, count=len(self._ann_pending))

    def _set_vec(self, slot: int, vec: np.ndarray, defer_ann: bool = False) -> None:
        self._emb[slot] = vec
        self._has_emb[slot] = True
        self._moments(vec, +1)
        if _hnswlib is None:
            return
        cfg = self.config
        if self._hnsw is None:
            if self._n_emb < cfg.ann_min_facts:
                return  # built lazily once the index is large enough to need it
            self._hnsw = _hnswlib.Index(space="ip", dim=self.dim)
            self._hnsw.init_index(max_elements=max(2 * self._emb.shape[0], 1024),
                                  ef_construction=cfg.hnsw_ef_construction, M=cfg.hnsw_m)
            self._hnsw.set_num_threads(1)
            live = np.flatnonzero(self._has_emb[: len(self._ids)])
            self._hnsw.add_items(self._emb[live], live)
            self._ann_pending.clear()
            return
        self._ann_pending[slot] = None
        if not defer_ann or len(self._ann_pending) > ANN_PENDING_MAX:
            slots = self._pending_slots()
            self._ann_pending.clear()
            if slots.max() >= self._hnsw.get_max_elements():
                self._hnsw.resize_index(max(2 * self._hnsw.get_max_elements(), int(slots.max()) + 1))
            self._hnsw.add_items(self._emb[slots], slots)

    def _query_vec(self, query: str, query_embedding: Any) -> np.ndarray | None:
        if query_embedding is None and self.embed_query is not None:
            query_embedding = self.embed_query(self.dense_query_text(query))
        if query_embedding is None or self.dim is None:
            return None
        vec = np.asarray(query_embedding, dtype=np.float32).reshape(-1)
        if vec.size != self.dim:
            raise ValueError(f"query embedding has {vec.size} dimensions, the index uses {self.dim}")
        norm = float(np.linalg.norm(vec))
        return vec / norm if norm > 0 else None

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

    def _dense_z(self, qvec: np.ndarray, cand: np.ndarray,
                 former: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
        """z-scored cosine of the candidates (0 for facts without an embedding); with
        ``former`` (:meth:`_former_cos`), a fact's cosine is the best over its versions."""
        n_slots = len(self._ids)
        if cand.size * 4 > n_slots:  # a contiguous product beats gathering most rows
            cos = (self._emb[:n_slots] @ qvec)[cand]
        else:
            cos = self._emb[cand] @ qvec
        if former is not None:
            owners, best = former
            pos = np.minimum(np.searchsorted(owners, cand), owners.size - 1)
            hit = owners[pos] == cand
            cos[hit] = np.maximum(cos[hit], best[pos[hit]])
        mean, std = self._cos_moments(qvec.astype(np.float64))
        z = (cos - mean) / std if std > 1e-6 else cos - mean
        return np.where(self._has_emb[cand], z, 0.0)

    def _cos_moments(self, q: np.ndarray) -> tuple[float, float]:
        """Mean and standard deviation of the cosines of ``q`` to every embedded fact."""
        n_slots = len(self._ids)
        if self._m1 is None or self._m2 is None:  # a small index: the moments from its rows
            every = self._emb[np.flatnonzero(self._has_emb[:n_slots])].astype(np.float64) @ q
            return float(every.mean()), float(every.std())
        second = float(q @ self._m2 @ q)
        if self._m2_pending:  # outer products not folded in yet: (q . v)^2 each
            proj = np.stack([v for v, _ in self._m2_pending]) @ q
            second += float(np.array([s for _, s in self._m2_pending]) @ (proj * proj))
        mean = float(q @ self._m1) / self._n_emb
        return mean, math.sqrt(max(second / self._n_emb - mean * mean, 0.0))

    def _topic_match(self, tree: Any, qvec: np.ndarray) -> dict[str, float]:
        """The aspects matching the query (class docstring, "Topic match") -> their z."""
        cfg = self.config
        q = qvec.astype(np.float64)
        scored: dict[str, float] = {}
        for a in tree.aspects():
            node = tree.node(a)
            if node.n_facts < cfg.tree_topic_min_facts:
                continue
            c = -1.0
            for v in (node.embedding, node.mean_embedding):
                if v is not None:
                    norm = float(np.linalg.norm(v))
                    if norm > 0:
                        c = max(c, float(v @ q) / norm)
            if c > -1.0:
                scored[a] = c
        if not scored:
            return {}
        mean, std = self._cos_moments(q)
        best = max(scored.values())
        if std <= 1e-12 or (best - mean) / std < cfg.tree_topic_min_z:
            return {}
        return {a: (c - mean) / std for a, c in scored.items() if c >= best - cfg.tree_topic_margin}

    def _topic_boost(self, tree: Any, topics: dict[str, float], cand: np.ndarray) -> np.ndarray:
        """Each candidate's best matching ancestor's z (0 when none matches)."""
        out = np.zeros(cand.size)
        for i, s in enumerate(cand):
            node = self._ids[s]
            if node not in tree:
                continue
            p = tree.parent(node)
            while p is not None:
                if p in topics:
                    out[i] = max(out[i], topics[p])
                p = tree.parent(p)
        return out

    def _aspect_groups(self, tree: Any, cand: np.ndarray) -> np.ndarray:
        """Group number of each candidate's parent aspect; -1 when under the root."""
        nums: dict[str, int] = {}
        out = np.full(cand.size, -1, dtype=np.int64)
        for i, s in enumerate(cand):
            fid = self._ids[s]
            if fid in tree:
                p = tree.parent(fid)
                if p is not None and p != tree.root_id:
                    out[i] = nums.setdefault(p, len(nums))
        return out


def _group_max(groups: np.ndarray, values: np.ndarray) -> np.ndarray:
    """For each element, the max of ``values`` over the elements of its group; 0 where the
    group is -1 (no group)."""
    out = np.zeros(values.size)
    mask = groups >= 0
    if not mask.any():
        return out
    g = groups[mask]
    best = np.full(int(g.max()) + 1, -np.inf)  # group numbers are small non-negative ints
    np.maximum.at(best, g, values[mask])
    out[mask] = best[g]
    return out
