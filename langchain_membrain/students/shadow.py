"""The shadow teacher's scores: how often the student's own decisions match an
evaluation-only teacher's, overall and per class.

A shadow (``MembrainMemory(shadow_teacher=...)``, ``Learner(shadow=...)``) is asked about
every decision the student takes alone; its answers are never executed, counted as
questions or trained on. Definitions:

- stage 1 is scored per descent level, stage 2 per action series (Group members as a set,
  labels ignored: :func:`~.decoding.action_key`);
- the **classes** (:data:`SHADOW_CLASSES`) are stage 1's "stop" (index 0: attach here) and
  stage 2's "idle" (an empty series) and its action kinds; per class, **recall** is
  agreed / shadow and **precision** agreed / student, so that a rare class the student
  never takes stays visible behind a high overall agreement.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from ..tree.actions import Action
from .decoding import action_key


def same_actions(a: list[Action], b: list[Action]) -> bool:
    """Whether two action series are the same set of actions (labels ignored)."""
    return {action_key(x) for x in a} == {action_key(x) for x in b}


# The classes scored: stage 1's "attach here" (index 0), stage 2's empty
# series and its action kinds (decoding.action_key's first field).
SHADOW_CLASSES: dict[str, tuple[str, ...]] = {"stage1": ("stop",), "stage2": ("idle", "promote", "demote", "group")}


def stage1_classes(student: int, shadow: int) -> Counter[tuple[str, str]]:
    """One stage-1 level's per-class outcomes, keyed (class, outcome)."""
    return Counter({("stop", "student"): int(student == 0), ("stop", "shadow"): int(shadow == 0),
                    ("stop", "agreed"): int(student == 0 and shadow == 0)})


def stage2_classes(executed: list[Action], shadow: list[Action]) -> Counter[tuple[str, str]]:
    """One stage-2 decision's per-class outcomes: actions by kind, and the empty series as "idle"."""
    mine, theirs = {action_key(a) for a in executed}, {action_key(a) for a in shadow}
    out: Counter[tuple[str, str]] = Counter()
    for keys, outcome in ((mine, "student"), (theirs, "shadow"), (mine & theirs, "agreed")):
        out.update((k[0], outcome) for k in keys)
    out[("idle", "student")] += not mine
    out[("idle", "shadow")] += not theirs
    out[("idle", "agreed")] += not mine and not theirs
    return out

class ShadowScores:
    """Counts of the student's own decisions against the shadow's, thread-safe."""

    def __init__(self) -> None:
        # (agreed, total) per stage
        self.agreement: dict[str, list[int]] = {"stage1": [0, 0], "stage2": [0, 0]}
        # keyed (stage, class, outcome), outcome "shadow" (the shadow chose the class),
        # "student" (the student did) or "agreed" (both)
        self.classes: Counter[tuple[str, str, str]] = Counter()
        self.seconds = 0.0  # time spent asking the shadow (left out of insert times)
        self._lock = threading.Lock()

    def add(self, stage: str, agreed: bool, classes: Counter[tuple[str, str]] | None = None) -> None:
        """One decision of ``stage``: whether the shadow agreed, and its per-class outcomes."""
        with self._lock:
            self.agreement[stage][0] += bool(agreed)
            self.agreement[stage][1] += 1
            for (cls, outcome), n in (classes or {}).items():
                self.classes[(stage, cls, outcome)] += n

    def per_class(self) -> dict[str, dict[str, dict[str, Any]]]:
        """``{stage: {class: {"shadow", "student", "agreed", "recall", "precision"}}}``
        (recall and precision None on no sample); see the module docstring."""
        with self._lock:
            counts = Counter(self.classes)
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for stage, names in SHADOW_CLASSES.items():
            out[stage] = {}
            for cls in names:
                shadow, student, agreed = (counts[(stage, cls, k)] for k in ("shadow", "student", "agreed"))
                out[stage][cls] = {"shadow": shadow, "student": student, "agreed": agreed,
                                   "recall": agreed / shadow if shadow else None,
                                   "precision": agreed / student if student else None}
        return out


__all__ = ["SHADOW_CLASSES", "ShadowScores", "same_actions", "stage1_classes", "stage2_classes"]
