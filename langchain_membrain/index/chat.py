"""Chat signals: opt-in scorers for facts that are turns of a conversation.

A chat turn often carries who said it, in which session and when (``metadata["speaker"]``,
``metadata["session"]``, ``metadata["date"]``). Three scorers read them; none is on by
default (``RetrievalConfig()``), each is turned on by naming it in ``RetrievalConfig.chat``,
and :meth:`RetrievalConfig.for_chat <langchain_membrain.index.config.RetrievalConfig.for_chat>`
turns on all three with the weights tuned on LoCoMo:

- :class:`SpeakerBoost`: a query that names exactly one of the speakers seen (any word of
  the name) lifts that speaker's facts by ``weight`` (1.0: the scale of the normalised BM25
  term, so that speaker's facts come first unless another fact is much better). With
  ``strip_names`` the dense query drops the speakers' names: they carry no topic, and pull
  the query toward every turn of that speaker.
- :class:`SessionContext`: the facts of a session, in insertion order, lend each other
  context. Each term of the previous and of the next fact of the same session joins a
  fact's lexical field with weight ``neighbour_weight`` (an ignored turn stands in that
  order too, ``FactIndex.add_context``), and each fact gets ``+ prior * max(score of the
  facts in its session)``.
- :class:`DateTerms`: the month and year of a fact's date join its field as terms (weight
  1). The date is a ``datetime``/``date`` or a string such as ``"1:56 pm on 8 May, 2023"``
  or ``"2023-05-08"`` (:func:`date_tokens`).

The scorers are a closed set, not a plug-in interface: they keep per-fact state inside the
index (:class:`ChatSignals`), updated with every write. Each degrades to a no-op on facts
without its metadata key.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Mapping, Union

import numpy as np

from ..errors import InvalidOperationError
from .lexical import shared_stemmer
from .slot_state import set_slot_state, slot_state

__all__ = ["CHAT_SCORERS", "ChatScorer", "ChatSignals", "DateTerms", "SessionContext", "SpeakerBoost",
           "check_chat", "date_tokens", "group_max"]


@dataclass(frozen=True)
class SpeakerBoost:
    """``+ weight`` to the facts of the one speaker the query names; ``strip_names``: the
    dense query without the speakers' names (module docstring)."""

    weight: float = 1.0
    strip_names: bool = True


@dataclass(frozen=True)
class SessionContext:
    """A session's neighbours' terms in each field (``neighbour_weight``) and ``+ prior *``
    the best score in the fact's session (module docstring)."""

    prior: float = 0.5
    neighbour_weight: float = 0.5


@dataclass(frozen=True)
class DateTerms:
    """The month and year of ``metadata["date"]`` as terms of the fact's field."""


ChatScorer = Union[SpeakerBoost, SessionContext, DateTerms]

#: Every chat scorer with the weights tuned on LoCoMo (``RetrievalConfig.for_chat()``).
CHAT_SCORERS: tuple[ChatScorer, ...] = (SpeakerBoost(), SessionContext(), DateTerms())


def check_chat(scorers: Any) -> tuple[ChatScorer, ...]:
    """``scorers`` as a tuple, each a chat scorer and none of a kind twice; else
    InvalidOperationError."""
    out = tuple(scorers)
    for s in out:
        if not isinstance(s, (SpeakerBoost, SessionContext, DateTerms)):
            raise InvalidOperationError(f"chat takes SpeakerBoost, SessionContext or DateTerms, not {s!r}")
    kinds = [type(s) for s in out]
    if len(set(kinds)) < len(kinds):
        raise InvalidOperationError(f"chat names a scorer twice: {out!r}")
    return out


_MONTHS = ("january february march april may june july august september october november "
           "december").split()
_MONTH_RE = re.compile(r"\b(" + "|".join(m[:3] for m in _MONTHS) + r")[a-z]*\b", re.I)
_YEAR_RE = re.compile(r"\b(1[89]\d\d|2\d\d\d)\b")


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


def group_max(groups: np.ndarray, values: np.ndarray) -> np.ndarray:
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


def _extended(arr: np.ndarray, capacity: int) -> np.ndarray:
    """``arr`` with -1 appended up to ``capacity`` entries."""
    if capacity <= arr.size:
        return arr
    return np.concatenate([arr, np.full(capacity - arr.size, -1, dtype=np.int64)])


def _name_words(name: str) -> list[str]:
    return [w for w in re.findall(r"\w+", name.lower()) if len(w) >= 2]


def _speaker_of(meta: Mapping[str, Any]) -> str | None:
    spk = meta.get("speaker")
    return str(spk) if spk not in (None, "") else None


class ChatSignals:
    """The chat metadata of one index's slots (its rows), kept only for the scorers that are
    on, and what those scorers add to a search. With none on, nothing is kept and every
    method answers as for a fact without chat metadata."""

    __slots__ = ("speaker", "session", "dates", "_stem", "_speakers", "_speaker_count", "_spk_num",
                 "_spk_arr", "_sess_key", "_sessions", "_sess_num", "_sess_arr", "_dates")

    def __init__(self, scorers: tuple[ChatScorer, ...], *, stem: bool):
        self.speaker = next((s for s in scorers if isinstance(s, SpeakerBoost)), None)
        self.session = next((s for s in scorers if isinstance(s, SessionContext)), None)
        self.dates = any(isinstance(s, DateTerms) for s in scorers)
        self._stem = stem  # date terms are stemmed as the facts' words are
        self._speakers: list[str | None] = []  # slot -> speaker
        self._speaker_count: Counter = Counter()  # display name -> facts
        self._spk_num: dict[str, int] = {}  # display name -> small int (for array ops)
        self._spk_arr = np.zeros(0, dtype=np.int64)  # slot -> speaker number, -1 none
        self._sess_key: list[str | None] = []  # slot -> session key
        self._sessions: dict[str, list[int]] = {}  # session key -> slots in insertion order
        self._sess_num: dict[str, int] = {}  # session key -> small int
        self._sess_arr = np.zeros(0, dtype=np.int64)  # slot -> session number, -1 none
        self._dates: list[tuple[str, ...]] = []  # slot -> date terms

    def state(self) -> dict[str, Any]:
        """The signals by slot, for a saved index (index_cache.py); the scorers are the config's."""
        return slot_state(self, ("speaker", "session", "dates"))

    def set_state(self, state: dict[str, Any]) -> None:
        """Back from :meth:`state` (ValueError for another version's)."""
        set_slot_state(self, state, ("speaker", "session", "dates"))

    # ----------------------------------------------------------------- writes
    def grow(self, capacity: int) -> None:
        """Per-slot arrays of at least ``capacity`` rows."""
        if self.speaker is not None:
            self._spk_arr = _extended(self._spk_arr, capacity)
        if self.session is not None:
            self._sess_arr = _extended(self._sess_arr, capacity)

    def session_key(self, meta: Mapping[str, Any]) -> str | None:
        """The session a fact with this metadata belongs to (None: none, or SessionContext off)."""
        if self.session is None:
            return None
        s = meta.get("session")
        return None if s is None or s == "" else str(s)

    def add(self, slot: int, meta: Mapping[str, Any] | None, *, context: bool = False) -> None:
        """Record a new slot (the last one): a fact, last of its session; ``context``: an
        item that only stands in its session's order (no speaker, no date)."""
        meta = meta or {}
        if self.speaker is not None:
            self._speakers.append(None)
            self._count_in(slot, None if context else _speaker_of(meta))
        if self.session is not None:
            key = self.session_key(meta)
            self._sess_key.append(key)
            if key is not None:
                self._sessions.setdefault(key, []).append(slot)
                self._sess_arr[slot] = self._sess_num.setdefault(key, len(self._sess_num))
        if self.dates:
            self._dates.append(() if context else self._date_terms(meta))

    def update(self, slot: int, meta: Mapping[str, Any]) -> None:
        """New metadata for a fact that stays in its session: its speaker and date."""
        if self.speaker is not None:
            self._count_out(slot)
            self._count_in(slot, _speaker_of(meta))
        if self.dates:
            self._dates[slot] = self._date_terms(meta)

    def remove(self, slot: int) -> None:
        """Forget a fact or a context item: it leaves its session's order and its speaker's
        count (call :meth:`neighbours` first for the slots whose fields change)."""
        key = self._sess_key[slot] if self.session is not None else None
        if key is not None:
            self._sessions[key].remove(slot)
        if self.speaker is not None:
            self._count_out(slot)
            self._spk_arr[slot] = -1

    def _count_in(self, slot: int, spk: str | None) -> None:
        self._speakers[slot] = spk
        self._spk_arr[slot] = self._spk_num.setdefault(spk, len(self._spk_num)) if spk else -1
        if spk:
            self._speaker_count[spk] += 1

    def _count_out(self, slot: int) -> None:
        old = self._speakers[slot]
        if old:
            self._speaker_count[old] -= 1
            if not self._speaker_count[old]:
                del self._speaker_count[old]

    def _date_terms(self, meta: Mapping[str, Any]) -> tuple[str, ...]:
        """A fact's date terms as a tuple: most facts have none, and () is one object."""
        toks = date_tokens(meta.get("date"))
        return tuple(shared_stemmer().stemWords(toks) if (self._stem and toks) else toks)

    # ------------------------------------------------------------------ reads
    def session_of(self, slot: int) -> str | None:
        return self._sess_key[slot] if self.session is not None else None

    def date_terms(self, slot: int) -> tuple[str, ...]:
        return self._dates[slot] if self.dates else ()

    def neighbour_weight(self) -> float:
        """The weight of a session neighbour's terms in a field (0: none)."""
        return self.session.neighbour_weight if self.session is not None else 0.0

    def previous(self, slot: int) -> list[int]:
        """The slot before ``slot`` when ``slot`` is the last of its session (0 or 1 slot; O(1))."""
        key = self.session_of(slot)
        order = self._sessions[key] if key is not None else []
        return order[-2:-1] if order and order[-1] == slot else []

    def neighbours(self, slot: int) -> list[int]:
        """The previous and next slots of ``slot`` in its session (0 to 2 slots)."""
        key = self.session_of(slot)
        if key is None:
            return []
        order = self._sessions[key]
        try:
            i = order.index(slot)
        except ValueError:
            return []
        return [order[j] for j in (i - 1, i + 1) if 0 <= j < len(order)]

    def session_orders(self) -> list[list[int]]:
        """Each session's slots in insertion order ([] with SessionContext off)."""
        return list(self._sessions.values())

    def speakers(self) -> list[str]:
        return sorted(self._speaker_count)

    # ----------------------------------------------------------------- search
    def dense_query_text(self, query: str) -> str:
        """``query`` without the speaker names seen (SpeakerBoost with ``strip_names``)."""
        if self.speaker is None or not self.speaker.strip_names or not self._speaker_count:
            return query
        words = {w for name in self._speaker_count for w in _name_words(name)}
        if not words:
            return query
        pat = re.compile(r"\b(" + "|".join(map(re.escape, sorted(words, key=len, reverse=True)))
                         + r")(?:'s|s')?\b", re.I)
        out = re.sub(r"\s+", " ", pat.sub(" ", query)).strip()
        return out or query

    def named_speaker(self, query: str) -> str | None:
        """The one speaker seen whose name (any word of it) the query contains; None if zero
        or several are named."""
        qwords = set(re.findall(r"\w+", query.lower()))
        hits = [name for name in self._speaker_count if qwords & set(_name_words(name))]
        return hits[0] if len(hits) == 1 else None

    def boost_speaker(self, query: str, cand: np.ndarray, score: np.ndarray) -> np.ndarray:
        """``score`` of the candidate slots, the named speaker's facts lifted."""
        boost = self.speaker
        if boost is None or not boost.weight:
            return score
        spk = self.named_speaker(query)
        if spk is None:
            return score
        return score + boost.weight * (self._spk_arr[cand] == self._spk_num[spk])

    def add_session_prior(self, cand: np.ndarray, score: np.ndarray) -> np.ndarray:
        """The candidates' ``score`` plus the session prior over it."""
        if self.session is None or not self.session.prior:
            return score
        return score + self.session.prior * group_max(self._sess_arr[cand], score)
