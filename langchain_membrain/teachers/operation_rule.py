"""The offline rule of the memory operation (:func:`conservative_operation`) and the text
heuristics it reads: whether an item is small talk, a question, or states something.

A teacher without ``choose_operation`` (the offline heuristic teacher) answers with this
rule; it never drops a memory (README, Memories that change). :func:`rule_identity` names
it, thresholds and word lists included, for deciding whether a shipped operation prior was
taught by it.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from ..tree.operation_types import ADD, IGNORE, Operation, OperationQuestion
from . import supersession
from .supersession import TELLING, carried_statement, change_cue, content_words, same_word, supersedes

_SMALL_TALK = frozenset("""
hi hello hey hiya yo howdy morning evening afternoon night good great nice cool awesome ok okay
okey alright fine sure yes yeah yep no nope thanks thank you thx ty cheers much so very lot a
bye goodbye see ya later soon take care have day weekend lol haha hah heh wow oh ah hmm right
indeed agreed sounds perfect got it gotcha noted welcome again appreciate the that helps helped
please np problem no worries all well glad to hear hear too same back there again you're youre
""".split())
_QUESTION_START = frozenset("""
what who whom whose where when why how which do does did is are was were can could would should
will shall may might have has had am
""".split())
_QUESTION_OPENERS = ("remind me", "tell me", "any idea", "do you remember", "do you know")
#: Words that say a stated fact replaces an earlier one ("now", "anymore", "moved"...): the
#: operation student reads them as one of its input flags.
CHANGE_CUES = frozenset("""
now anymore longer moved switched changed became started quit left stopped gave sold replaced
instead ended divorced retired
""".split())


def has_change_cue(text: str) -> bool:
    """Whether ``text`` says that something changed (:func:`.supersession.change_cue`: "moved
    to", "quit ... and joined", "no longer", "passed away", "cancelled", "... now"...)."""
    return change_cue(text)


def lower_words(text: str) -> list[str]:
    """The words of ``text``: runs of letters and apostrophes, case-folded, a typographic
    apostrophe read as a plain one (the unit every word list here is matched against)."""
    return re.findall(r"[a-z']+", text.casefold().replace("’", "'"))


def is_small_talk(text: str) -> bool:
    """Every word of ``text`` is a greeting, thanks or filler word (e.g. "Thanks a lot!",
    "good morning :)"); a text with any content word is not small talk."""
    words = [w.replace("'", "") for w in lower_words(text)]
    return bool(words) and all(w in _SMALL_TALK for w in words)


def is_question(text: str) -> bool:
    """``text`` asks something: it ends with "?", or starts with an interrogative word or
    an opener like "remind me" and has no sentence after it."""
    stripped = text.strip()
    if stripped.endswith("?"):
        return True
    words = lower_words(stripped)
    if not words:
        return False
    low = " ".join(words)
    single_sentence = not re.search(r"[.!]\s+\S", stripped)
    return single_sentence and (words[0] in _QUESTION_START and len(words) <= 12
                                and words[0] not in ("have", "has", "had", "am", "is", "was", "do")
                                or low.startswith(_QUESTION_OPENERS))


#: A chat turn may come as "Name: text" (a transcript line). Up to three capitalised words
#: and a colon; the rule reads what was said after it.
_SPEAKER = re.compile(r"^\s*[A-Z][\w'.-]*(?:\s[A-Z][\w'.-]*){0,2}:\s+(?=\S)")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def utterance(text: str) -> str:
    """``text`` without a leading speaker label ("Joanna: ..."); unchanged without one."""
    return _SPEAKER.sub("", text, count=1)


def sentences(text: str) -> list[str]:
    """The sentences of ``text``: split after ".", "!" or "?" followed by a space, and at
    line breaks; empty pieces dropped."""
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]


def states_something(text: str) -> bool:
    """Whether ``text`` (its :func:`utterance`) has a sentence that is neither a question
    (:func:`is_question`) nor small talk (:func:`is_small_talk`): a statement, which may be
    a memory. "Wow, that looks great! Is that your third one?" states something;
    "Thanks! Where do I live?" does not; "Did I tell you I moved to Porto?" does (the
    statement it carries: :func:`carried_statement`). A piece without a letter or digit
    (emoji, "...") states nothing; text in a script the word lists do not cover states
    something unless it ends with "?"."""
    return any(re.search(r"\w", s) and (carried_statement(s) is not None or not (is_question(s) or is_small_talk(s)))
               for s in sentences(utterance(text)))


@dataclass(frozen=True)
class RuleConfig:
    """Thresholds of :func:`conservative_operation`: cosines (all-MiniLM-L6-v2) at which a
    change statement supersedes a fact (:func:`.supersession.supersedes`)."""

    near: float = supersession.NEAR  # whatever their words
    near_sharing: float = supersession.NEAR_SHARING  # when they share a content word
    near_nearest: float = supersession.NEAR_NEAREST  # when the fact is the nearest candidate
    margin: float = supersession.MARGIN  # by this much
    near_slot: float = supersession.NEAR_SLOT  # when both name one attribute held one value at a time


def conservative_operation(question: OperationQuestion, config: RuleConfig = RuleConfig()) -> Operation:
    """The offline teacher's rule, built to never drop a memory:

    - IGNORE only when the item states nothing (:func:`states_something` is false): every
      sentence is a question or small talk. A turn that asks something *and* says something
      ("I found a great trail yesterday. Do you know any?") is a memory: in conversation,
      questions and greetings often carry facts, and an ADD of small talk costs a row where
      an IGNORE of a fact loses it from search;
    - UPDATE(c) when the item supersedes a candidate (:func:`.supersession.supersedes`: it
      states a change, about the same holder, away from nothing ``c`` does not say, and is
      near ``c``, nearer than the other candidates): of several such candidates, ``c`` is the
      one sharing the most content words with the item, then the nearest. A retraction ("Rex passed away", "the
      trip is cancelled") is an UPDATE too: the statement of the end takes the fact's key, and
      the fact's history keeps what it said;
    - ADD otherwise. It never answers DELETE: a statement that ends something is itself
      worth remembering, and the key keeps its history.
    """
    text = question.text
    if not states_something(text):
        return IGNORE
    cands = question.candidates
    superseded = []
    for i, cand in enumerate(cands):  # nearest first
        runner_up = max((c.similarity for j, c in enumerate(cands) if j != i), default=-1.0)
        if supersedes(text, cand.text, cand.similarity, runner_up, near=config.near, near_sharing=config.near_sharing,
                      near_nearest=config.near_nearest, margin=config.margin, near_slot=config.near_slot):
            superseded.append(cand)
    if not superseded:
        return ADD
    # Of the facts it supersedes, the one that says most of what it changes ("I'm no longer
    # strictly vegan" changes "I'm vegan, strictly", not "my vegan restaurant"), then the nearest.
    words = content_words(text)
    best = max(superseded, key=lambda c: (sum(any(same_word(w, o) for o in content_words(c.text)) for w in words),
                                          c.similarity))
    return Operation("UPDATE", best.key)


def rule_identity(config: RuleConfig = RuleConfig()) -> str:
    """Who :func:`conservative_operation` is, for deciding whether a shipped operation
    prior was taught by it: its thresholds and a digest of the word lists and patterns it
    reads (a changed list changes its answers)."""
    import hashlib
    import json

    words = "|".join(" ".join(sorted(w)) for w in (_SMALL_TALK, _QUESTION_START, _QUESTION_OPENERS,
                                                     supersession.word_lists()))
    digest = hashlib.sha256((words + TELLING.pattern).encode()).hexdigest()[:16]
    return f"conservative_operation{json.dumps(asdict(config), sort_keys=True)} words {digest}"
