"""The ledger of teacher questions: every question an insert costs, counted once, where
it is asked.

Definitions:

- a **question** is one thing asked of the teacher, by kind (:data:`QUESTION_KINDS`):
  ``placement`` (the joint question of an insert, or a batch of them), ``audit`` (the same
  question about an insert the student decided alone), ``operation`` (the memory
  operation, when its answer did not also place the insert), ``naming`` (an aspect's
  label) and ``formation`` (what an input states: formation.py);
- with a teacher that sends requests (``requests_sent``: the LLM teachers) a question
  counts the requests it sent, retries included, so the counts equal what the teacher's
  server received; an in-process teacher's question counts one;
- a question that got no usable answer is also a **failure**; one not sent at all (the
  circuit breaker open, the insert's budget spent) a **skipped** one; an audit the memory
  operation's question had answered already is a **shared answer**, not a question.
"""

from __future__ import annotations

import threading
from collections import Counter

QUESTION_KINDS = ("placement", "audit", "operation", "naming", "formation")


class QuestionLedger:
    """Teacher questions by kind, thread-safe (inserts and a background supervision both
    ask). ``unsure``: placement questions by the stage whose doubt asked them."""

    def __init__(self) -> None:
        self.questions: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.unsure: Counter[str] = Counter()
        self.shared_answers = 0
        self._lock = threading.Lock()

    def count(self, kind: str, *, failed: bool = False, shared: bool = False, sent: int | None = None) -> int | None:
        """Count one question of ``kind``; returns the requests it counts (None: a shared
        answer of an in-process teacher, which is not a question). ``sent``: the requests
        it sent, counted as they are: 0 for an answer given already (an audit's: a shared
        answer) or a question not sent (skipped); None: an in-process teacher's question,
        counted as one (a ``shared`` one only as a shared answer)."""
        with self._lock:
            if sent is None:
                if shared:
                    self.shared_answers += 1
                    return None
                sent = 1
            elif sent == 0:
                if failed:
                    self.skipped[kind] += 1
                elif kind == "audit":
                    self.shared_answers += 1
            self.questions[kind] += sent
            self.failures[kind] += failed
        return sent

    @property
    def teacher_calls(self) -> int:
        """Questions asked about inserts: formations, placements, audits and operation questions."""
        return (self.questions["placement"] + self.questions["audit"] + self.questions["operation"]
                + self.questions["formation"])

    @property
    def naming_calls(self) -> int:
        return self.questions["naming"]


__all__ = ["QUESTION_KINDS", "QuestionLedger"]
