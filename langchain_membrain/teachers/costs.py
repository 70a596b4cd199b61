"""What an LLM teacher's questions cost, per stage: requests, tokens, latency, failures.

Definitions: ``calls`` are requests sent (retries and failed requests included),
``decisions`` the questions answered (a placement given with the memory operation counts
as a ``place`` decision ``from_placement``, with no call); ``calls_per_insert`` is the total
of calls over ``inserts``; ``skipped`` are questions not sent at all (breaker open, deadline
passed).
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

STAGES: tuple[str, ...] = ("stage1", "stage2", "name", "place", "operation", "formation")


@dataclass
class StageStats:
    """Counters of one stage (``stage1``, ``stage2``, ``name``, ``place``)."""

    decisions: int = 0  # questions answered (asked, or read from a one-call placement)
    from_placement: int = 0  # decisions read from a one-call placement (no call of their own)
    calls: int = 0  # requests sent, retries and failed requests included
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    failures: int = 0  # failed attempts
    failure_kinds: Counter = field(default_factory=Counter)
    retries: int = 0
    fallbacks: int = 0  # decisions taken by the fallback teacher
    skipped: int = 0  # questions not sent at all (TeacherUnavailable: breaker open, deadline passed)
    max_prompt_tokens: int = 0  # the largest prompt sent, as characters / 4

    def as_dict(self) -> dict[str, Any]:
        return {
            "decisions": self.decisions, "from_placement": self.from_placement, "calls": self.calls,
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "latency_s": round(self.latency_s, 6),
            "mean_latency_s": round(self.latency_s / self.calls, 6) if self.calls else 0.0,
            "failures": self.failures, "failure_kinds": dict(self.failure_kinds),
            "retries": self.retries, "fallbacks": self.fallbacks, "skipped": self.skipped,
            "max_prompt_tokens": self.max_prompt_tokens,
            "calls_per_decision": self.calls / self.decisions if self.decisions else 0.0,
        }


class TeacherStats:
    """Thread-safe cost accounting of one teacher, per stage.

    ``inserts`` counts the inserts that asked this teacher's stage 2 or one-call placement
    (one per insert in either mode when the teacher decides every insert; a caller that
    asks only some decisions, like the Learner, keeps its own insert count).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.stages: dict[str, StageStats] = {s: StageStats() for s in STAGES}
        self.inserts = 0

    def add(self, stage: str, **counts: Any) -> None:
        with self._lock:
            st = self.stages[stage]
            for key, value in counts.items():
                if key == "failure_kind":
                    st.failure_kinds[value] += 1
                elif key == "max_prompt_tokens":
                    st.max_prompt_tokens = max(st.max_prompt_tokens, value)
                elif key == "inserts":
                    self.inserts += value
                else:
                    setattr(st, key, getattr(st, key) + value)

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = {s: st.as_dict() for s, st in self.stages.items()}
            total = StageStats()
            for st in self.stages.values():
                for key in ("decisions", "from_placement", "calls", "prompt_tokens", "completion_tokens",
                            "latency_s", "failures", "retries", "fallbacks", "skipped"):
                    setattr(total, key, getattr(total, key) + getattr(st, key))
                total.max_prompt_tokens = max(total.max_prompt_tokens, st.max_prompt_tokens)
                total.failure_kinds.update(st.failure_kinds)
            out["total"] = total.as_dict()
            out["inserts"] = self.inserts
            out["calls_per_insert"] = total.calls / self.inserts if self.inserts else 0.0
            return out

    def reset(self) -> None:
        with self._lock:
            self.stages = {s: StageStats() for s in STAGES}
            self.inserts = 0


__all__ = ["STAGES", "StageStats", "TeacherStats"]
