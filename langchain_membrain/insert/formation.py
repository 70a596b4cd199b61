"""Formation: what one input becomes before it is stored (Mem-T's writer).

Definitions (README, Memory kinds):

- A memory's **kind** is one of :data:`MEMORY_KINDS`. A *fact* is an atomic statement, with
  an optional valid-time interval; an *experience* says how to do something; both are leaves
  of the namespace's tree. A *raw* item is an input as it was said, kept beside the tree in
  the order it came (never placed by the learned stages), the *source* of what was formed
  from it. The *working* memory is one running summary per (namespace, session).
- **Formation** turns an input into a :class:`Formation`: CrtRaw (the input is kept as a raw
  item), CrtFact / CrtExp (the :class:`Candidate` facts and experiences it states) and
  UpdWork (the session's new working summary). Each candidate then goes through the memory
  operation (ADD, UPDATE, DELETE, IGNORE) and placement like any fact.
- A teacher **forms** when it has the :class:`FormingTeacher` capability: it is asked one
  question per input, and its answer is validated by :func:`check_answer` (clipped or
  refused, with one warning, never losing the input). Any other teacher gets the **offline
  formation** (:func:`offline_formation`): the input is its own fact, as said, and needs no
  raw item beside it; the working memory is an extractive summary of the session
  (:func:`extractive_summary`), computed when read.
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, Sequence, runtime_checkable

from ..errors import InvalidOperationError
from ..index.lexical import STOPWORDS

#: Bounds on a teacher's answer: more candidates are dropped, longer texts clipped.
MAX_CANDIDATES = 20
MAX_CANDIDATE_CHARS = 1000
MAX_WORKING_CHARS = 2000


class FormationWarning(UserWarning):
    """A teacher's formation answer was clipped or partly refused (the input is kept)."""


@dataclass(frozen=True)
class Candidate:
    """A fact or experience stated by an input (CrtFact, CrtExp), with its valid-time
    interval in seconds since the epoch when the teacher gave one."""

    text: str
    kind: Literal["fact", "experience"] = "fact"
    valid_from: float | None = None
    valid_to: float | None = None


@dataclass(frozen=True)
class FormationInput:
    """What a forming teacher is shown: the input, its metadata and session, and the
    session's working memory before it."""

    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    session: str = ""
    working: str | None = None


@dataclass(frozen=True)
class Formation:
    """The decision for one input. ``as_said``: the input is its own fact (the offline
    formation; no raw item is kept beside it). ``by``: "teacher" or "offline".
    ``clipped``: what validation cut from the teacher's answer."""

    candidates: tuple[Candidate, ...]
    working: str | None = None
    as_said: bool = False
    by: str = "offline"
    clipped: tuple[str, ...] = ()


@runtime_checkable
class BatchFormingTeacher(Protocol):
    """A forming teacher that also answers about several inputs of one session in one
    question (``form_batch``: the mapping :func:`check_batch_answer` reads)."""

    def form_batch(self, items: list[FormationInput]) -> Any: ...


@runtime_checkable
class FormingTeacher(Protocol):
    """A teacher that forms memories: for one input, the facts and experiences it states
    and the session's new working summary, as a mapping ``{"facts": [...], "experiences":
    [...], "working": str | None}`` (each fact a str or ``{"text", "valid_from",
    "valid_to"}``), validated by :func:`check_answer`. ``forms``: whether it is asked (an
    LLM teacher forms only when built with ``formation=True``)."""

    forms: bool

    def form(self, item: FormationInput) -> Any: ...


def offline_formation(item: FormationInput) -> Formation:
    """The input is its own fact, as said (the default when the teacher does not form)."""
    return Formation((Candidate(item.text),), None, as_said=True)


def check_answer(answer: Any) -> Formation:
    """A forming teacher's answer as a :class:`Formation`, validated: at most
    MAX_CANDIDATES candidates, each text clipped to MAX_CANDIDATE_CHARS, the working
    summary to MAX_WORKING_CHARS; empty, non-text and repeated candidates dropped; a time
    that is not a finite number dropped. What was cut is warned once (FormationWarning) and
    listed in ``clipped``. An answer that is not a mapping is refused: the caller keeps the
    input as said."""
    formation = _checked(answer, [])
    _warn(formation.clipped)
    return formation


def check_batch_answer(answer: Any, n: int) -> list[Formation]:
    """A forming teacher's answer about ``n`` inputs at once (``{"inputs": [{"number": i,
    "facts": [...], "experiences": [...]}, ...], "working": ...}``, numbered from 1) as one
    :class:`Formation` per input, each validated as :func:`check_answer` does. An entry for
    an input that was not shown is dropped, an input without an entry states nothing, and
    the working summary is the last input's. One warning for the whole answer."""
    if not isinstance(answer, dict) or not isinstance(answer.get("inputs"), (list, tuple)):
        raise InvalidOperationError("a batch formation answer is a mapping with a list of inputs")
    clipped: list[str] = []
    per: list[dict[str, list[Any]]] = [{"facts": [], "experiences": []} for _ in range(n)]
    for entry in answer["inputs"]:
        number = entry.get("number") if isinstance(entry, dict) else None
        if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= n:
            clipped.append(f"an entry for input {number!r}, which was not shown")
            continue
        for field_name in ("facts", "experiences"):
            items = entry.get(field_name) or []
            per[number - 1][field_name] += items if isinstance(items, (list, tuple)) else [None]
    out = [_checked({**p, "working": answer.get("working") if i == n - 1 else None}, clipped)
           for i, p in enumerate(per)]
    _warn(tuple(clipped))
    return out


def _checked(answer: Any, clipped: list[str]) -> Formation:
    """:func:`check_answer` without its warning; what it cuts is added to ``clipped``."""
    if not isinstance(answer, dict):
        raise InvalidOperationError(f"a formation answer is a mapping, got {type(answer).__name__}")
    mine: list[str] = []
    out: list[Candidate] = []
    seen: set[str] = set()
    kinds: tuple[tuple[Literal["fact", "experience"], str], ...] = (("fact", "facts"), ("experience", "experiences"))
    for kind, field_name in kinds:
        items = answer.get(field_name) or []
        if not isinstance(items, (list, tuple)):
            mine.append(f"{field_name} is not a list")
            continue
        for raw in items:
            cand = _candidate(raw, kind, mine)
            if cand is None or cand.text.casefold() in seen:
                continue
            seen.add(cand.text.casefold())
            out.append(cand)
    if len(out) > MAX_CANDIDATES:
        mine.append(f"{len(out) - MAX_CANDIDATES} candidates over {MAX_CANDIDATES}")
        out = out[:MAX_CANDIDATES]
    working = answer.get("working")
    if working is not None and not isinstance(working, str):
        mine.append("working is not a str")
        working = None
    if working is not None:
        working = working.strip() or None
        if working is not None and len(working) > MAX_WORKING_CHARS:
            mine.append(f"working summary clipped from {len(working)} characters")
            working = working[:MAX_WORKING_CHARS]
    clipped += mine
    return Formation(tuple(out), working, by="teacher", clipped=tuple(mine))


def _warn(clipped: tuple[str, ...] | list[str]) -> None:
    if clipped:
        warnings.warn(f"formation answer: {'; '.join(clipped)}", FormationWarning, stacklevel=4)


def _candidate(raw: Any, kind: Literal["fact", "experience"], clipped: list[str]) -> Candidate | None:
    times: dict[str, float | None] = {"valid_from": None, "valid_to": None}
    if isinstance(raw, dict):
        text = raw.get("text")
        for name in times:
            t = raw.get(name)
            if t is None:
                continue
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t):
                clipped.append(f"{name} {t!r} is not a time")
                continue
            times[name] = float(t)
    else:
        text = raw
    if not isinstance(text, str) or not text.strip():
        clipped.append(f"a {kind} without text")
        return None
    text = text.strip()
    if len(text) > MAX_CANDIDATE_CHARS:
        clipped.append(f"a {kind} clipped from {len(text)} characters")
        text = text[:MAX_CANDIDATE_CHARS]
    return Candidate(text, kind, times["valid_from"], times["valid_to"])


_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def extractive_summary(texts: Sequence[str], max_chars: int = 600) -> str:
    """An extractive summary of a session: its sentences that carry the most distinct
    content words not already said by an earlier chosen sentence, greedily, in the order
    they were said, within ``max_chars``. Small talk ("Wow, thanks!") carries none and is
    left out."""
    sentences = [s.strip() for t in texts for s in _SENTENCE.split(t) if s.strip()]
    words = [{w for w in re.findall(r"\w+", s.casefold()) if w not in STOPWORDS and len(w) > 2} for s in sentences]
    chosen: list[int] = []
    covered: set[str] = set()
    used = 0
    while True:
        best, gain = -1, 0
        for i, ws in enumerate(words):
            g = len(ws - covered)
            if i not in chosen and g > gain and used + len(sentences[i]) + 2 <= max_chars:
                best, gain = i, g
        if best < 0:
            break
        chosen.append(best)
        covered |= words[best]
        used += len(sentences[best]) + 2
    return " ".join(sentences[i] if sentences[i][-1] in ".!?" else sentences[i] + "." for i in sorted(chosen))
