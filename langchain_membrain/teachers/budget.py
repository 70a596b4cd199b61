"""How long an insert waits for a teacher, and when a teacher is not asked at all.

Two mechanisms, used by :class:`~.guard.GuardedTeacher` (the LLM teachers) and set up by
``MembrainMemory``:

- **A deadline** (:func:`deadline`): within the block, every request a guarded teacher
  sends from this thread is cut at the deadline, and no request is sent once it has passed.
  ``MembrainMemory(teacher_budget=2.0)`` wraps each insert in one, so that the questions an
  ``add`` asks (its memory operation, its placement) wait at most ``teacher_budget`` seconds
  together; a question left without an answer is decided by the student, or by the offline
  rule while the student cannot decide yet, and asked again in the background, with no
  deadline, like an audit. A :class:`Cutoff` is a deadline that another thread sets later:
  the trainer's background questions run under one, which ``close()`` sets, so that they
  end in bounded time even when the teacher never answers. Nothing here sleeps or spawns
  threads.
- **A circuit breaker** (:class:`CircuitBreaker`): after ``threshold`` failed requests in a
  row the teacher is not asked for ``backoff_s`` seconds; then one request probes it: an
  answer closes the breaker, a failure opens it again for twice as long, up to
  ``max_backoff_s``. Its clock is injectable (``clock=``), so tests need no sleeps.

A guarded teacher keeps two breakers: one for failures (no answer within its own
``timeout``, a refused connection, an HTTP error, an unusable answer), and one, used only
under a deadline, for no answer within the budget (a hanging endpoint, or a slow model: its
questions then go straight to the background). While either is open the teacher is down for
the inserts: its line logs one warning when it goes down and one when it answers again
(:meth:`~.line.RequestLine._report`).

This module imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from typing import Any, Callable, Iterator

from .base import RemoteTeacher, capable

# Context variables rather than thread-locals: a thread starts with none set, and an asyncio
# task sees its own.
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("membrain_deadline", default=None)
_CUTOFF: contextvars.ContextVar[Cutoff | None] = contextvars.ContextVar("membrain_cutoff", default=None)

#: A request is not sent with less than this left before the deadline.
MIN_REQUEST_S = 0.05


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Within the block, a guarded teacher's requests from this thread end ``seconds`` from
    now at the latest (None: no bound). Nested blocks keep the earlier deadline."""
    if seconds is None:
        yield
        return
    previous = _DEADLINE.get()
    end = time.monotonic() + float(seconds)
    token = _DEADLINE.set(end if previous is None else min(previous, end))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


class Cutoff:
    """A deadline that another thread may set later, for the requests of the threads that
    run under it (:func:`under`). A memory's trainer thread asks its background questions
    under one with no end; ``close()`` and the exit hooks set its end, so that the question
    in flight is given up then, wherever its request is, and no question is sent after it.

    ``end`` is a ``time.monotonic()`` time, or None (no bound). A guarded teacher reads it
    again while it waits for a request (:func:`current_deadline`), so setting it reaches
    requests already sent.
    """

    def __init__(self) -> None:
        self.end: float | None = None

    def set(self, seconds: float) -> None:
        """End the requests ``seconds`` from now at the latest (an earlier end is kept)."""
        end = time.monotonic() + float(seconds)
        self.end = end if self.end is None else min(self.end, end)

    def clear(self) -> None:
        """No bound again."""
        self.end = None


@contextlib.contextmanager
def under(cutoff: Cutoff) -> Iterator[None]:
    """Within the block, this thread's requests end at ``cutoff.end`` too (when it is set)."""
    token = _CUTOFF.set(cutoff)
    try:
        yield
    finally:
        _CUTOFF.reset(token)


def current_deadline() -> float | None:
    """This thread's deadline (``time.monotonic()`` seconds): the earlier of its
    :func:`deadline` and its :class:`Cutoff`'s end; None when neither bounds it."""
    end = _DEADLINE.get()
    cutoff = _CUTOFF.get()
    cut = None if cutoff is None else cutoff.end
    if cut is None:
        return end
    return cut if end is None else min(end, cut)


def insert_deadline() -> float | None:
    """This thread's :func:`deadline` alone (an insert's budget), without its cutoff: what
    makes a request a foreground one (the slow breaker applies to those only)."""
    return _DEADLINE.get()


def cut_off() -> bool:
    """Whether this thread runs under a :class:`Cutoff` whose end has passed (its questions
    are given up: the memory is closing)."""
    cutoff = _CUTOFF.get()
    return cutoff is not None and cutoff.end is not None and time.monotonic() >= cutoff.end


def requests_sent(teacher: Any) -> int | None:
    """The requests ``teacher`` has sent from this thread so far (retries included), for a
    caller that counts a question's requests as the difference around it; None for a
    teacher that answers in-process (each of its questions counts as one)."""
    return int(teacher.requests_sent()) if capable(teacher, RemoteTeacher) else None


class CircuitBreaker:
    """Stop asking a teacher that keeps failing; probe it again on an exponential back-off.

    States: ``"closed"`` (asked as usual), ``"open"`` (not asked until the back-off has
    passed), ``"half-open"`` (one probe request allowed). :meth:`allow` says whether a request
    may be sent now; :meth:`success` and :meth:`failure` report each request's outcome.

    Args:
        threshold: failed requests in a row that open the breaker (at least 1).
        backoff_s: seconds the breaker stays open the first time.
        max_backoff_s: the longest back-off (it doubles after each failed probe).
        clock: seconds, monotonic (default ``time.monotonic``); inject one in tests.
    """

    def __init__(self, threshold: int = 3, backoff_s: float = 10.0, max_backoff_s: float = 300.0, *,
                 clock: Callable[[], float] = time.monotonic):
        if not isinstance(threshold, int) or isinstance(threshold, bool) or threshold < 1:
            raise ValueError(f"threshold is an int >= 1, not {threshold!r}")
        if not backoff_s > 0 or not max_backoff_s >= backoff_s:
            raise ValueError("backoff_s > 0 and max_backoff_s >= backoff_s are required")
        self.threshold = threshold
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.clock = clock
        self._lock = threading.Lock()
        self.state = "closed"
        self.consecutive_failures = 0
        self.times_opened = 0
        self.last_failure: str | None = None
        self._backoff = self.backoff_s
        self._reopen_at = 0.0

    def twin(self) -> CircuitBreaker:
        """A new breaker with the same settings and clock."""
        return CircuitBreaker(self.threshold, self.backoff_s, self.max_backoff_s, clock=self.clock)

    def allow(self) -> bool:
        """Whether a request may be sent now (an open breaker whose back-off has passed lets
        one probe through; call :meth:`release` if that probe is not sent after all)."""
        with self._lock:
            if self.state == "closed":
                return True
            if self.state == "open" and self.clock() >= self._reopen_at:
                self.state = "half-open"
                return True
            return False

    def release(self) -> None:
        """A request :meth:`allow` let through was not sent: a probe's turn passes on."""
        with self._lock:
            if self.state == "half-open":
                self.state = "open"

    def success(self) -> bool:
        """A request was answered. True when this closes an open breaker (a recovery)."""
        with self._lock:
            recovered = self.state != "closed"
            self.state, self.consecutive_failures, self._backoff = "closed", 0, self.backoff_s
            return recovered

    def failure(self, reason: str = "") -> bool:
        """A request failed. True when this opens a closed breaker."""
        with self._lock:
            self.consecutive_failures += 1
            self.last_failure = reason or None
            if self.state == "half-open":  # the probe failed: open again, for longer
                self._backoff = min(self._backoff * 2, self.max_backoff_s)
                self.state, self._reopen_at = "open", self.clock() + self._backoff
                return False
            if self.state == "closed" and self.consecutive_failures >= self.threshold:
                self.state, self._reopen_at = "open", self.clock() + self._backoff
                self.times_opened += 1
                return True
            return False

    def inconclusive(self) -> None:
        """A request ended without saying whether the teacher works (cut by a deadline): a
        probe counts as failed (the back-off doubles); otherwise nothing changes."""
        with self._lock:
            if self.state == "half-open":
                self._backoff = min(self._backoff * 2, self.max_backoff_s)
                self.state, self._reopen_at = "open", self.clock() + self._backoff

    def snapshot(self) -> dict[str, Any]:
        """The state as a dict (``stats()["teacher"]["health"]``)."""
        with self._lock:
            retry = max(0.0, self._reopen_at - self.clock()) if self.state == "open" else 0.0
            return {"state": self.state, "consecutive_failures": self.consecutive_failures,
                    "times_opened": self.times_opened, "retry_in_s": round(retry, 3),
                    "backoff_s": self._backoff, "last_failure": self.last_failure}
