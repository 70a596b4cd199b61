"""Retrieval on LoCoMo: membrain against flat baselines, in one run and one embedder.

Each conversation is ingested turn by turn into its own namespace (metadata: ``dia_id``,
``speaker``, ``session`` number, ``date`` of the session); a turn's text is
``"speaker: text"`` plus ``" [shares image: caption]"`` when it has one. For each question
of categories 1 to 4 every method returns its top k turns of that conversation:

- **all@k**: every evidence turn is in the top k; **any@k**: at least one is.

Methods: ``membrain`` (:class:`~langchain_membrain.memory.MembrainMemory` with its default
settings but the chat scorers on, :data:`RETRIEVAL`: the turns carry speaker, session and date;
memory operations on: each turn goes through ``memory.add`` without a key, as a chat sends it,
so a turn may be IGNOREd into the namespace's log or supersede an older turn;
``--no-operations`` turns them off), ``membrain_no_ops`` (the same memory with
``operations=False``: every turn stored, the behaviour before memory operations; measured in
the same run when operations are on), ``bm25`` (bm25s, no stemming), ``dense`` (cosine),
``flat_pipeline`` (FactIndex with the same configuration, without a tree: the strong flat
pipeline of retrieval.py),
``inmemorystore`` (LangGraph's ``InMemoryStore`` with an index config, its own search),
``postgresstore`` (LangGraph's ``PostgresStore`` with pgvector and the same index config and
embeddings; not in the default set: ask for it with ``--methods``; it needs the ``pgstore``
extra and a PostgreSQL server with pgvector, ``--postgres URL``, else a pgserver started for
the run, else it is skipped, saying why). Evidence ids are normalised first
(:func:`normalize_evidence`); questions left without a valid id are skipped.

**Evidence kept out of search**: after a conversation is ingested, its evidence turns (every
turn some question cites) that are not current facts of the namespace (IGNOREd, superseded,
deleted), as a share of all evidence turns, by status (:func:`evidence_out_of_search`).

Data: LoCoMo (Maharana et al., ACL 2024), CC BY-NC 4.0, evaluation only, never shipped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from langchain_core.embeddings import Embeddings

from ..index.config import RetrievalConfig
from ..index.embeddings import embed_texts
from ..index.facts import FactIndex, Mode
from ..insert.formation import FormationInput
from ..teachers.forming import formation_batch_messages, formation_messages
from ..teachers.heuristic import HeuristicTeacher
from ..teachers.prompts import prompt_tokens
from .locomo_postgres import POSTGRES_SCHEMA, POSTGRES_URL_VAR, PostgresStoreRetriever, bench_postgres
from .retriever import Retriever

CATEGORIES = {1: "multi_hop", 2: "temporal", 3: "open_domain", 4: "single_hop"}
CATEGORY_ORDER = ["overall", "multi_hop", "temporal", "single_hop", "open_domain"]
METHODS = ["membrain", "membrain_no_ops", "membrain_formed", "membrain_formed_one_step", "flat_pipeline", "bm25",
           "dense", "inmemorystore"]
#: Methods run only when ``--methods`` names them (they need more than the package).
OPTIONAL_METHODS = ["postgresstore"]
#: The memories formed by LoCoMoFormationTeacher (the dataset's observations and summaries).
FORMED = ("membrain_formed", "membrain_formed_one_step")
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")
#: membrain's and the flat pipeline's retrieval: every chat scorer on (LoCoMo's turns are a chat's).
RETRIEVAL = RetrievalConfig.for_chat()


# ----------------------------------------------------------------------------- data
def normalize_evidence(evidence: Any, valid: set[str] | None = None) -> list[str]:
    """Canonical evidence ids (``D<session>:<turn>``, no leading zeros), in order, deduplicated.

    Handles LoCoMo's malformed entries: several ids in one string (``"D8:6; D9:17"``, space or
    comma separated), an extra colon (``"D:11:26"``), leading zeros (``"D30:05"``), and drops
    what is not an id (``"D"``) and, when ``valid`` is given, ids that name no turn.
    """
    items = [evidence] if isinstance(evidence, str) else list(evidence or [])
    out: list[str] = []
    for item in items:
        for m in _EVIDENCE.finditer(str(item)):
            did = f"D{int(m.group(1))}:{int(m.group(2))}"
            if (valid is None or did in valid) and did not in out:
                out.append(did)
    return out


@dataclass
class Turn:
    dia_id: str
    speaker: str
    text: str  # as indexed: "speaker: text [shares image: caption]"
    session: int
    date: str


@dataclass
class Question:
    question: str
    category: str
    evidence: list[str]


@dataclass
class Conversation:
    sample_id: str
    speakers: list[str]
    turns: list[Turn]
    questions: list[Question] = field(default_factory=list)
    skipped: int = 0  # questions of categories 1-4 without a valid evidence id


def turn_text(turn: dict[str, Any]) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    if turn.get("blip_caption"):
        text += f" [shares image: {turn['blip_caption']}]"
    return text


def load_locomo(path: str | Path, conversations: int | None = None) -> list[Conversation]:
    """LoCoMo samples as :class:`Conversation` (sessions in numeric order, turns in order)."""
    data = json.loads(Path(path).read_text())
    out = []
    for sample in data[:conversations] if conversations else data:
        conv = sample["conversation"]
        nums = sorted(int(m.group(1)) for k in conv if (m := re.fullmatch(r"session_(\d+)", k)))
        turns = [Turn(t["dia_id"], t["speaker"], turn_text(t), n, conv.get(f"session_{n}_date_time", ""))
                 for n in nums for t in conv[f"session_{n}"]]
        c = Conversation(sample["sample_id"], [conv["speaker_a"], conv["speaker_b"]], turns)
        valid = {t.dia_id for t in turns}
        for qa in sample["qa"]:
            cat = CATEGORIES.get(qa.get("category"))
            if cat is None:
                continue
            ev = normalize_evidence(qa.get("evidence"), valid)
            if not ev:
                c.skipped += 1
                continue
            c.questions.append(Question(str(qa["question"]), cat, ev))
        out.append(c)
    return out


class DiskEmbeddingCache:
    """Embeds lists of texts in one batch and keeps them in ``cache_dir`` (one ``.npy`` per
    list, named by a hash of the embedder name and the texts), so reruns do not embed."""

    def __init__(self, embedder: Any, cache_dir: str | Path, name: str = "all-MiniLM-L6-v2"):
        self.embedder, self.dir, self.name = embedder, Path(cache_dir), name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.seconds = 0.0  # time spent embedding (cache misses only)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        h = hashlib.sha256(self.name.encode())
        for t in texts:
            h.update(t.encode())
            h.update(b"\0")
        path = self.dir / f"{h.hexdigest()[:24]}.npy"
        if path.exists():
            return np.load(path)
        t0 = time.perf_counter()
        vecs = np.asarray(embed_texts(self.embedder, list(texts)), dtype=np.float32)
        self.seconds += time.perf_counter() - t0
        np.save(path, vecs)
        return vecs


# -------------------------------------------------------------------------- methods
class BM25Retriever(Retriever):
    """bm25s (Lucene BM25, k1 = 1.5, b = 0.75), English stop words, no stemming."""

    def __init__(self, conv: Conversation):
        import bm25s

        self.ids = [t.dia_id for t in conv.turns]
        self.model = bm25s.BM25()
        self.model.index(bm25s.tokenize([t.text for t in conv.turns], stopwords="en", show_progress=False),
                         show_progress=False)

    def search(self, q: str, k: int) -> list[str]:
        import bm25s

        toks = bm25s.tokenize([q], stopwords="en", show_progress=False)
        if not toks.vocab:
            return []
        docs, _ = self.model.retrieve(toks, k=min(k, len(self.ids)), show_progress=False)
        return [self.ids[i] for i in docs[0]]


class DenseRetriever(Retriever):
    def __init__(self, conv: Conversation, embs: np.ndarray, qvecs: dict[str, np.ndarray]):
        self.ids, self.embs, self.qvecs = [t.dia_id for t in conv.turns], embs, qvecs

    def search(self, q: str, k: int) -> list[str]:
        sims = self.embs @ self.qvecs[q]
        return [self.ids[i] for i in np.argsort(-sims, kind="stable")[:k]]


class InMemoryStoreRetriever(Retriever):
    """LangGraph's ``InMemoryStore`` with an index config; embeddings served from the cache."""

    def __init__(self, conv: Conversation, embs: np.ndarray, lookup: Callable[[Sequence[str]], list[list[float]]]):
        from langgraph.store.memory import InMemoryStore

        self.ns = ("locomo", conv.sample_id)
        self.store = InMemoryStore(index={"dims": embs.shape[1], "embed": lookup, "fields": ["text"]})
        for t in conv.turns:
            self.store.put(self.ns, t.dia_id, {"text": t.text, "speaker": t.speaker})

    def search(self, q: str, k: int) -> list[str]:
        return [item.key for item in self.store.search(self.ns, query=q, limit=k)]


@dataclass
class MembrainNamespace(Retriever):
    """A namespace as membrain holds it: the tree and the FactIndex (``tree=None`` for the
    flat pipeline). ``qvec`` maps the dense query text to its embedding."""

    index: FactIndex
    tree: Any
    qvec: Callable[[str], np.ndarray]
    mode: Mode = "exact"

    def search(self, q: str, k: int) -> list[str]:
        emb = self.qvec(self.index.dense_query_text(q))
        return [str(f) for f, _ in self.index.search(q, emb, k, tree=self.tree, mode=self.mode)]


def build_flat(conv: Conversation, embs: np.ndarray, config: RetrievalConfig | None = None) -> FactIndex:
    """The strong flat pipeline alone: a FactIndex over the turns, no tree."""
    index = FactIndex(config)
    for turn, emb in zip(conv.turns, embs):
        index.add(turn.dia_id, turn.text, emb, _turn_metadata(turn))
    return index


def _turn_metadata(turn: Turn) -> dict[str, Any]:
    return {"dia_id": turn.dia_id, "speaker": turn.speaker, "session": turn.session, "date": turn.date}


# --------------------------------------------------------- a formation teacher
class LoCoMoFormationTeacher(HeuristicTeacher):
    """Forms each LoCoMo turn from the dataset's observations and session summaries: an
    evaluation teacher that stands in for an LLM, reading LoCoMo's LLM-extracted
    *observations* (each citing its turn) and *session summaries* at the teacher boundary
    only. A turn gets the observations that cite it as facts and its session's summary as
    the working memory; placement, stage 2, operations and naming are the offline
    heuristic's. A turn is known by its value's ``conversation`` (sample id) and ``dia_id``.

    Args:
        samples: LoCoMo samples as the JSON file holds them (a list of dicts with
            ``sample_id``, ``observation`` and ``session_summary``).
    """

    name = "locomo-formation"
    forms = True

    def __init__(self, samples: Sequence[dict[str, Any]], **kwargs: Any):
        super().__init__(**kwargs)
        self._facts: dict[tuple[str, str], list[str]] = {}
        self._summaries: dict[tuple[str, str], str] = {}
        for sample in samples:
            sid = str(sample["sample_id"])
            for session_key, by_speaker in (sample.get("observation") or {}).items():
                for entries in (by_speaker or {}).values():
                    for entry in entries:
                        if not isinstance(entry, (list, tuple)) or len(entry) < 2:
                            continue
                        for did in normalize_evidence(entry[1]):
                            self._facts.setdefault((sid, did), []).append(str(entry[0]))
            for key, text in (sample.get("session_summary") or {}).items():
                m = re.fullmatch(r"session_(\d+)_summary", key)
                if m and isinstance(text, str):
                    self._summaries[sid, m.group(1)] = text
        self.prompt_tokens: list[int] = []  # per question, what an LLM's prompt would take

    def form(self, item: FormationInput) -> dict[str, Any]:
        self.prompt_tokens.append(prompt_tokens(formation_messages(item.text, item.metadata, item.working)))
        return {"facts": self._facts_of(item), "working": self._summary_of(item)}

    def form_batch(self, items: list[FormationInput]) -> dict[str, Any]:
        """Several turns of one session in one question (as an LLM is asked them)."""
        self.prompt_tokens.append(prompt_tokens(formation_batch_messages(items)))
        return {"inputs": [{"number": n, "facts": self._facts_of(i)} for n, i in enumerate(items, 1)],
                "working": self._summary_of(items[-1])}

    def _facts_of(self, item: FormationInput) -> list[str]:
        key = (str(item.metadata.get("conversation", "")), str(item.metadata.get("dia_id", "")))
        return list(self._facts.get(key, []))

    def _summary_of(self, item: FormationInput) -> str | None:
        return self._summaries.get((str(item.metadata.get("conversation", "")), str(item.metadata.get("session", ""))))


class CachedEmbeddings(Embeddings):
    """A LangChain embedder over a :class:`DiskEmbeddingCache` (reruns do not embed)."""

    def __init__(self, cache: DiskEmbeddingCache):
        self.cache = cache

    def embed_array(self, texts: list[str]) -> np.ndarray:
        return self.cache.embed(texts)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.cache.embed(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.cache.embed([text])[0].tolist()


class MemoryNamespace(Retriever):
    """membrain as a user runs it: one conversation ingested turn by turn into its own
    namespace of a :class:`MembrainMemory` (learned placement, training behind the
    scenes), searched with ``memory.search``."""

    def __init__(self, memory: Any, conv: Conversation, embs: np.ndarray, stats: dict[str, Any]):
        self.memory, self.ns = memory, ("locomo", conv.sample_id)
        self.turn_of: dict[str, str] = {}  # raw item key -> its dia_id
        t0 = time.perf_counter()
        calls0 = memory.stats().get("teacher_calls", 0)
        # No keys: the chat path (``add`` runs the memory operation only without a key). A
        # hit's turn is read from its value's ``dia_id`` (an UPDATE gives the new turn the
        # old one's key).
        keys = memory.add_many([t.text for t in conv.turns], namespace=self.ns,
                               metadatas=[{**_turn_metadata(t), "conversation": conv.sample_id} for t in conv.turns],
                               progress=False)
        self.turn_of = {k: t.dia_id for k, t in zip(keys, conv.turns)}
        stats.setdefault("ingest_s", []).append(time.perf_counter() - t0)
        memory.flush()
        stats.setdefault("turns", []).append(len(conv.turns))
        stats.setdefault("teacher_calls", []).append(memory.stats().get("teacher_calls", 0) - calls0)
        stats["teacher"] = type(memory.teacher).__name__

    def search(self, q: str, k: int) -> list[str]:
        """The turns of the top ``k`` hits: a raw hit is its own turn, a fact hit counts
        its source turns (its own value's turn when it has no raw source)."""
        out: list[str] = []
        for r in self.memory.search(q, namespace=self.ns, limit=k, exact_namespace=True):
            turns = [self.turn_of[s] for s in r.sources if s in self.turn_of] or [str(r.value.get("dia_id", r.key))]
            out += [t for t in turns if t not in out]
        return out


def evidence_out_of_search(memory: Any, conv: Conversation) -> dict[str, int]:
    """Evidence turns of ``conv`` that default search cannot return, by status: ``{"evidence":
    n, "out": m, "ignored": .., "superseded": .., "deleted": .., "missing": ..}``. A turn is in
    search when a current fact's value has its ``dia_id``; otherwise its status is that of the
    archived entry holding it (``missing``: in neither, which would be a loss)."""
    ns = ("locomo", conv.sample_id)
    evidence = {e for q in conv.questions for e in q.evidence}
    current = {str(r.value.get("dia_id")) for r in memory.search(None, namespace=ns, limit=10**9,
                                                                exact_namespace=True)}
    archived = {str(r.value.get("dia_id")): r.status
                for r in memory.search(None, namespace=ns, limit=10**9, exact_namespace=True, include_history=True)
                if r.status != "current"}
    archived.update({str(r.value.get("dia_id")): r.status for r in memory.ignored(namespace=ns, limit=10**9)})
    out = {"evidence": len(evidence), "out": 0, "ignored": 0, "superseded": 0, "deleted": 0, "missing": 0}
    for did in evidence - current:
        out["out"] += 1
        out[archived.get(did, "missing")] += 1
    return out


# ------------------------------------------------------------------------ scoring
def score(ranked: dict[str, list[list[str]]], conv_questions: list[Question], ks: Sequence[int]) -> dict:
    """``{method: {category: {metric: value, "n": count}}}`` from ranked dia ids."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for method, lists in ranked.items():
        acc: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for q, top in zip(conv_questions, lists):
            ev = set(q.evidence)
            for k in ks:
                got = set(top[:k]) & ev
                for cat in ("overall", q.category):
                    acc[cat][f"all@{k}"].append(float(got == ev))
                    acc[cat][f"any@{k}"].append(float(bool(got)))
        out[method] = {cat: {**{m: float(np.mean(v)) for m, v in acc[cat].items()},
                             "n": len(next(iter(acc[cat].values())))}
                       for cat in CATEGORY_ORDER if cat in acc}
    return out


def run_locomo(data: str, *, conversations: int | None = None, ks: Sequence[int] = (5, 10),
               methods: Sequence[str] = METHODS, cache_dir: str | None = None,
               config: RetrievalConfig = RETRIEVAL, flat_config: RetrievalConfig | None = None,
               mode: str = "exact", embedder: Any = None, operations: bool = True,
               postgres: str | None = None, log: Callable[[str], None] = print) -> dict:
    """Run every method on every conversation; returns ``{"results", "timing", "tree",
    "evidence_out", ...}``. ``config``: membrain's retrieval (and the flat pipeline's, unless
    ``flat_config``). ``operations``: whether ``membrain`` runs memory operations (the
    product default). ``postgres``: postgresstore's server (see :func:`bench_postgres`); the
    method is dropped, with a logged reason, when it cannot run."""
    unknown = [m for m in methods if m not in METHODS + OPTIONAL_METHODS]
    if unknown:
        raise ValueError(f"unknown methods {unknown}; known: {METHODS + OPTIONAL_METHODS}")
    methods = list(methods)
    if "postgresstore" not in methods:
        return _run_locomo(data, conversations, ks, methods, cache_dir, config, flat_config, mode, embedder,
                           operations, None, log)
    with bench_postgres(postgres, log) as url:
        if url is None:
            methods.remove("postgresstore")
        return _run_locomo(data, conversations, ks, methods, cache_dir, config, flat_config, mode, embedder,
                           operations, url, log)


def _run_locomo(data: str, conversations: int | None, ks: Sequence[int], methods: Sequence[str],
                cache_dir: str | None, config: RetrievalConfig, flat_config: RetrievalConfig | None, mode: str,
                embedder: Any, operations: bool, postgres_url: str | None, log: Callable[[str], None]) -> dict:
    convs = load_locomo(data, conversations)
    if embedder is None:
        from ..index.embeddings import MiniLMEmbeddings

        embedder = MiniLMEmbeddings()
    cache = DiskEmbeddingCache(embedder, cache_dir or Path(tempfile.gettempdir()) / "membrain-locomo-cache")
    kmax = max(ks)
    memories: dict[str, Any] = {}  # one MembrainMemory per method (one pair of models) across conversations
    ops_of = {"membrain": operations, "membrain_no_ops": False, **{m: operations for m in FORMED}}
    evidence_out: dict[str, dict[str, int]] = {}
    ranked: dict[str, list[list[str]]] = {m: [] for m in methods}
    latency: dict[str, list[float]] = {m: [] for m in methods}
    ingest: dict[str, dict[str, Any]] = {m: {} for m in ops_of}
    shapes = []
    questions: list[Question] = []
    for conv in convs:
        embs = cache.embed([t.text for t in conv.turns])
        by_text = {t.text: e for t, e in zip(conv.turns, embs)}
        qs = [q.question for q in conv.questions]
        qfull = dict(zip(qs, cache.embed(qs)))
        retrievers: dict[str, Retriever] = {}
        if any(m in methods for m in ("membrain", "membrain_no_ops", "flat_pipeline", *FORMED)):
            flat = build_flat(conv, embs, flat_config or config)
            stripped = sorted({flat.dense_query_text(q) for q in qs})
            qstrip = dict(zip(stripped, cache.embed(stripped)))
            lookup = {**qfull, **qstrip}.__getitem__
            for m, ops in ops_of.items():
                if m not in methods:
                    continue
                if m not in memories:
                    from ..memory import MembrainMemory

                    teacher = None
                    if m in FORMED:
                        teacher = LoCoMoFormationTeacher(json.loads(Path(data).read_text()))
                    memories[m] = MembrainMemory(embeddings=CachedEmbeddings(cache), teacher=teacher,
                                                 retrieval=config if m != "membrain_formed_one_step"
                                                 else replace(config, second_step=0),
                                                 operations=ops, search_mode=mode)
                retrievers[m] = MemoryNamespace(memories[m], conv, embs, ingest[m])
                counts = evidence_out.setdefault(m, {})
                for name, n in evidence_out_of_search(memories[m], conv).items():
                    counts[name] = counts.get(name, 0) + n
                if m == "membrain":
                    shapes.append(_tree_shape(memories[m].tree(("locomo", conv.sample_id))))
            if "flat_pipeline" in methods:
                retrievers["flat_pipeline"] = MembrainNamespace(flat, None, lookup, "exact")
        retrievers.update(_baselines(conv, embs, {**by_text, **qfull}, cache, methods, postgres_url))
        try:
            for m in methods:
                r = retrievers[m]
                for q in qs:
                    t0 = time.perf_counter()
                    ranked[m].append(r.search(q, kmax))
                    latency[m].append(time.perf_counter() - t0)
        finally:
            for r in retrievers.values():
                r.close()
        questions += conv.questions
        log(f"{conv.sample_id}: {len(conv.turns)} turns, {len(conv.questions)} questions"
            f" ({conv.skipped} skipped: no valid evidence id)")
    results = score(ranked, questions, ks)
    timing = _timing(latency, ingest)
    operation_stats, formation = {}, {}
    for m, memory in memories.items():
        if ops_of[m]:
            operation_stats[m] = {k: v for k, v in memory.stats()["operations"].items() if k != "student"}
        if m in FORMED:
            formation[m] = _formation_stats(memory, sum(ingest[m]["turns"]))
        memory.close()
    return {"results": results, "timing": timing, "tree": shapes, "evidence_out": evidence_out,
            "operations": operation_stats, "formation": formation,
            "questions": len(questions), "embedding_s": cache.seconds,
            "ranked": ranked, "question_list": questions}


def _formation_stats(memory: Any, inputs: int) -> dict[str, Any]:
    """Formation questions per input (and every question per input, naming and operations
    included), the formation student's share of inputs decided alone and its agreement with
    the teacher, and the prompt tokens an LLM's formation question would take (max, mean)."""
    stats = memory.stats()
    questions, student = stats["questions"], stats["formation"]
    tokens = memory.teacher.prompt_tokens or [0]
    return {"formation_per_input": questions["formation"] / max(inputs, 1),
            "student_share": student["student_share"], "student_agreement": student["agreement"] or 0.0,
            "student_sure_compared": student["compared"],
            "questions_per_input": sum(questions.values()) / max(inputs, 1),
            "prompt_tokens_max": max(tokens), "prompt_tokens_mean": float(np.mean(tokens))}


def _baselines(conv: Any, embs: np.ndarray, known: dict[str, Any], cache: Any,
               methods: Sequence[str], postgres_url: str | None = None) -> dict[str, Retriever]:
    """The flat baselines among ``methods`` for one conversation (``known``: the embeddings
    of its turns and questions, text -> vector; ``postgres_url``: postgresstore's server)."""
    out: dict[str, Retriever] = {}
    if "bm25" in methods:
        out["bm25"] = BM25Retriever(conv)
    if "dense" in methods:
        out["dense"] = DenseRetriever(conv, embs, known)

    def lookup_many(texts: Sequence[str]) -> list[list[float]]:
        return [(known[t] if t in known else cache.embed([t])[0]).tolist() for t in texts]

    if "inmemorystore" in methods:
        out["inmemorystore"] = InMemoryStoreRetriever(conv, embs, lookup_many)
    if "postgresstore" in methods:
        assert postgres_url, "postgresstore needs a server (run_locomo drops it without one)"
        out["postgresstore"] = PostgresStoreRetriever(conv, embs, lookup_many, postgres_url)
    return out


def _timing(latency: dict[str, list[float]], ingest: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Search latency percentiles per method, and ingest cost per turn of the memories."""
    timing: dict[str, dict[str, Any]] = {
        m: {"search_p50_ms": 1e3 * float(np.percentile(v, 50)),
            "search_p95_ms": 1e3 * float(np.percentile(v, 95))} for m, v in latency.items() if v}
    for m, st in ingest.items():
        if st:
            n_turns = sum(st["turns"]) or 1
            timing.setdefault(m, {})["ingest_ms_per_turn"] = 1e3 * sum(st["ingest_s"]) / n_turns
            timing[m]["teacher_calls_per_turn"] = sum(st["teacher_calls"]) / n_turns
            timing[m]["teacher"] = st.get("teacher")
    return timing


def _tree_shape(tree: Any) -> dict[str, Any]:
    if tree is None:
        return {}
    try:
        from ..tree.evaluation import tree_shape

        return tree_shape(tree)
    except ImportError:
        return {"facts": tree.fact_count(tree.root_id), "aspects": len(tree.aspects()), "height": tree.height()}


# --------------------------------------------------------------------------- CLI
def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, help="path to locomo JSON (list of samples)")
    parser.add_argument("--conversations", type=int, default=None, help="use the first N conversations")
    parser.add_argument("--k", default="5,10", help="comma-separated cut-offs (default 5,10)")
    parser.add_argument("--methods", default=",".join(METHODS),
                        help=f"comma-separated methods (default: {','.join(METHODS)}; also: "
                             f"{','.join(OPTIONAL_METHODS)})")
    parser.add_argument("--postgres", default=os.environ.get(POSTGRES_URL_VAR) or None, metavar="URL",
                        help=f"PostgreSQL with pgvector for postgresstore (default: ${POSTGRES_URL_VAR}; "
                             f"unset: a pgserver started for the run); its schema {POSTGRES_SCHEMA} is "
                             "dropped and made afresh")
    parser.add_argument("--mode", choices=["fast", "exact"], default="fast", help="membrain search mode")
    parser.add_argument("--cache-dir", default=None, help="embedding cache (default: a temp dir)")
    parser.add_argument("--operations", action=argparse.BooleanOptionalAction, default=True,
                        help="membrain runs memory operations, the product default (--no-operations: off; "
                             "membrain_no_ops is then dropped from the default methods)")
    parser.add_argument("--json", default=None, help="write {method: {category: {metric: value}}} here")


def run(args: argparse.Namespace) -> int:
    ks = [int(x) for x in args.k.split(",") if x]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not args.operations and args.methods == ",".join(METHODS):
        methods.remove("membrain_no_ops")  # it would repeat membrain
    out = run_locomo(args.data, conversations=args.conversations, ks=ks, methods=methods,
                     cache_dir=args.cache_dir, mode=args.mode, operations=args.operations,
                     postgres=args.postgres)
    print_table(out, ks)
    if args.json:
        payload = {m: {c: {k: v for k, v in r.items() if k != "n"} for c, r in cats.items()}
                   for m, cats in out["results"].items()}
        Path(args.json).write_text(json.dumps(payload, indent=2))
        side = Path(args.json).with_suffix(".details.json")
        side.write_text(json.dumps({"timing": out["timing"], "tree": out["tree"],
                                    "evidence_out": out["evidence_out"], "operations": out["operations"],
                                    "formation": out["formation"],
                                    "questions": out["questions"], "results_with_n": out["results"]}, indent=2))
        print(f"wrote {args.json} and {side}")
    return 0


def print_table(out: dict, ks: Sequence[int]) -> None:
    metrics = [f"{m}@{k}" for m in ("all", "any") for k in ks]
    res = out["results"]
    try:
        from rich.console import Console
        from rich.table import Table

        have_rich = True
    except ImportError:  # pragma: no cover
        have_rich = False
    rows = []
    for m, cats in res.items():
        for c in CATEGORY_ORDER:
            if c in cats:
                rows.append([m, c, str(cats[c]["n"])] + [f"{cats[c][x]:.3f}" for x in metrics])
    head = ["method", "category", "n", *metrics]
    if have_rich:
        t = Table(title=f"LoCoMo retrieval ({out['questions']} questions)")
        for h in head:
            t.add_column(h)
        for r in rows:
            t.add_row(*r)
        Console().print(t)
    else:
        print("\t".join(head))
        for r in rows:
            print("\t".join(r))
    for m, t in out["timing"].items():
        print(m, {k: (round(v, 3) if isinstance(v, float) else v) for k, v in t.items()})
    for m, c in out.get("evidence_out", {}).items():
        share = c["out"] / max(c["evidence"], 1)
        print(f"{m}: evidence turns kept out of default search: {c['out']}/{c['evidence']} = {share:.2%} "
              f"(ignored {c['ignored']}, superseded {c['superseded']}, deleted {c['deleted']}, "
              f"missing {c['missing']})")
    for m, st in out.get("operations", {}).items():
        print(m, "operations:", st)
    for m, st in out.get("formation", {}).items():
        print(m, "formation:", {k: round(v, 3) for k, v in st.items()})
    if out["tree"]:
        print("tree shape per conversation:", out["tree"])
