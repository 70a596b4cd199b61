"""The lexical half of the search index: terms, fields, posting lists and BM25.

- **Terms** (:func:`tokenize`): lower-cased word tokens of two or more characters, stop words
  removed, Snowball-stemmed (PyStemmer; no stemming when it is not installed).
- **Field** of a fact: term -> weight, its own terms with weight 1 per occurrence plus
  whatever the index adds to it (former versions; with the chat signals, a session's
  neighbours and dates: chat.py). :class:`LexicalIndex` stores the fields and their posting
  lists; :class:`~.retrieval.FactIndex` decides what each field holds.
- **BM25** (Lucene variant): ``sum_t idf(t) * f(t,s) (k1 + 1) / (f(t,s) + k1 (1 - b + b |s| / avgdl))``
  over the distinct query terms, ``idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))``, ``f`` the
  (fractional) weight of ``t`` in the field, ``|s|`` the field's total weight, ``N`` the
  facts held (a fact with an empty field counts), ``k1 = 1.5``, ``b = 0.3`` (short chat
  turns: length normalisation mostly hurts).
"""

from __future__ import annotations

import math
import re
import threading
from typing import Any, Iterable, Mapping

import numpy as np

from .slot_state import set_slot_state, slot_state

try:  # optional: Snowball stemmer (extra "bench"); without it terms are not stemmed
    import Stemmer as _PyStemmer
except ImportError:  # pragma: no cover - exercised only where PyStemmer is missing
    _PyStemmer = None

__all__ = ["STOPWORDS", "LexicalIndex", "can_stem", "shared_stemmer", "term_counts", "tokenize", "tokenize_many"]

_STEMMERS = threading.local()

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


def can_stem() -> bool:
    """Whether PyStemmer is installed (without it, terms are not stemmed)."""
    return _PyStemmer is not None


def shared_stemmer() -> Any:
    """This thread's English stemmer, shared by every index: stemming is a pure function of
    the word, and a PyStemmer object (a C stemmer with a cache of the words it stemmed, about
    1 KB for a handful) is not to be used by two threads at once. One per index cost each
    namespace that kilobyte."""
    stemmer = getattr(_STEMMERS, "english", None)
    if stemmer is None:
        stemmer = _STEMMERS.english = _PyStemmer.Stemmer("english")
    return stemmer


def tokenize(text: str, stemmer: Any = None) -> list[str]:
    """Lower-case word tokens of 2+ characters, stop words removed, stemmed if a stemmer
    (PyStemmer ``Stemmer``) is given."""
    toks = [t for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]
    if stemmer is not None and toks:
        toks = stemmer.stemWords(toks)
    return toks


def term_counts(terms: Iterable[str]) -> dict[str, int]:
    """Each distinct term of ``terms`` and how many times it occurs, in first-seen order."""
    counts: dict[str, int] = {}
    for t in terms:
        counts[t] = counts.get(t, 0) + 1
    return counts


def tokenize_many(texts: list[str], stemmer: Any = None) -> list[list[str]]:
    """:func:`tokenize` of each text; each distinct word is stemmed once (a stem depends on
    the word alone, and most words of many texts are repeats)."""
    toks = [[t for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS] for text in texts]
    if stemmer is None:
        return toks
    words = list(dict.fromkeys(t for tt in toks for t in tt))
    stems = dict(zip(words, stemmer.stemWords(words)))
    return [[stems[t] for t in tt] for tt in toks]


class LexicalIndex:
    """Fields and posting lists by slot (the index's row of a fact), and BM25 over them.

    A slot's field is replaced whole (:meth:`set_field`), touching only the posting lists of
    the terms that changed; a removed fact's field is ``{}``."""

    __slots__ = ("k1", "b", "fields", "postings", "total_len", "_len", "_arrays")

    def __init__(self, k1: float, b: float):
        self.k1, self.b = k1, b
        # slot -> field (the fact's own term counts when nothing else joins them)
        self.fields: list[Mapping[str, float]] = []
        self.postings: dict[str, dict[int, float]] = {}  # term -> slot -> weight
        self.total_len = 0.0  # the fields' total weight
        self._len = np.zeros(0, dtype=np.float64)  # slot -> field weight
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # posting lists as arrays (a cache)

    def new_slot(self) -> None:
        """Room for one more slot (an empty field); :meth:`grow` first."""
        self.fields.append({})

    def state(self) -> dict[str, Any]:
        """Everything but the posting arrays (a cache), for a saved index (index_cache.py)."""
        return slot_state(self, ("_arrays",))

    def set_state(self, state: dict[str, Any]) -> None:
        """Back from :meth:`state` (ValueError for another version's)."""
        set_slot_state(self, state, ("_arrays",))
        self._arrays = {}

    def grow(self, capacity: int) -> None:
        """Per-slot arrays of at least ``capacity`` rows."""
        if capacity > self._len.size:
            self._len = np.concatenate([self._len, np.zeros(capacity - self._len.size)])

    def set_field(self, slot: int, fld: Mapping[str, float]) -> None:
        """Replace a field, touching only the posting lists of terms that changed."""
        old, postings, arrays = self.fields[slot], self.postings, self._arrays
        if not old:  # a new slot's first field (every slot of a bulk load): nothing to compare
            for t, wt in fld.items():
                postings.setdefault(t, {})[slot] = wt
            if arrays:
                for t in fld:
                    arrays.pop(t, None)
        else:
            for t in old.keys() - fld.keys():
                plist = postings[t]
                del plist[slot]
                if not plist:
                    del postings[t]
                arrays.pop(t, None)
            for t, wt in fld.items():
                if old.get(t) != wt:
                    postings.setdefault(t, {})[slot] = wt
                    arrays.pop(t, None)
        total = float(sum(fld.values()))
        self.total_len += total - self._len[slot]
        self._len[slot] = total
        self.fields[slot] = fld

    def bm25(self, terms: list[str], n: int) -> tuple[np.ndarray, np.ndarray]:
        """(sorted slots, scores) of the facts with a non-zero BM25 score over ``terms``
        (each one in :attr:`postings`) among ``n`` facts, from their posting lists only."""
        if not terms or n == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        k1, b = self.k1, self.b
        avgdl = max(self.total_len / n, 1e-9)
        parts_s, parts_v = [], []
        for t in terms:
            slots, tf = self._posting(t)
            denom = tf + k1 * (1.0 - b + b * self._len[slots] / avgdl)
            parts_s.append(slots)
            parts_v.append(_idf(n, slots.size) * tf * (k1 + 1.0) / denom)
        if len(parts_s) == 1:
            order = np.argsort(parts_s[0])
            return parts_s[0][order], parts_v[0][order]
        slots = np.concatenate(parts_s)
        vals = np.concatenate(parts_v)
        uniq, inv = np.unique(slots, return_inverse=True)
        return uniq, np.bincount(inv, weights=vals, minlength=uniq.size)

    def bm25_direct(self, terms: list[str], cand: np.ndarray, n: int) -> np.ndarray:
        """BM25 over ``terms`` for the given slots only, read from their fields."""
        k1, b = self.k1, self.b
        avgdl = max(self.total_len / max(n, 1), 1e-9)
        norm = k1 * (1.0 - b + b * self._len[cand] / avgdl)
        out = np.zeros(cand.size)
        fields = [self.fields[s] for s in cand]
        for t in terms:
            tf = np.fromiter((f.get(t, 0.0) for f in fields), dtype=np.float64, count=cand.size)
            out += _idf(n, len(self.postings[t])) * tf * (k1 + 1.0) / (tf + norm)
        return out

    def _posting(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        arr = self._arrays.get(term)
        if arr is None:
            plist = self.postings[term]
            arr = (np.fromiter(plist.keys(), dtype=np.int64, count=len(plist)),
                   np.fromiter(plist.values(), dtype=np.float64, count=len(plist)))
            self._arrays[term] = arr
        return arr


def _idf(n: int, df: int) -> float:
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))
