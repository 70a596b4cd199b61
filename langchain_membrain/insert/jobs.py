"""The background trainer's queue of jobs, which an add waits on for a bounded time only.

An insert is handed to the trainer with two bounds. While ``wait_below`` inserts or more wait,
the add waits for the trainer to take some, ``wait_s`` seconds at most: on a machine where the
trainer keeps up, that keeps what the student learns from within a few inserts of what it
decides. Past that time the insert is queued anyway, and when ``keep`` inserts wait already,
the oldest waiting insert is **skipped** (dropped from the queue: the trainer neither asks the
teacher about it nor trains on it) to make room. Its memory is placed, stored and searchable
whatever happens here; only what the student would have learnt from it is lost. Other jobs (a
batch question, the stop signal) are never dropped. So a starved trainer learns from fewer
inserts, and never holds an add up for longer than ``wait_s``.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections import deque
from typing import Any, Iterator

#: The longest an ``add`` waits (seconds) for the trainer of an in-process teacher while it is
#: ``max_training_lag`` inserts behind. Past it the insert is queued anyway, and once
#: :data:`LAG_SKIP_FACTOR` times the lag wait, the oldest waiting insert is skipped. Longer
#: than an ordinary training step, so that on a machine where the trainer keeps up the
#: student learns within a few inserts of its decisions; a starved trainer never holds an
#: add for longer. None: as long as it takes (and nothing is skipped).
LAG_WAIT_S: float | None = 0.5
LAG_SKIP_FACTOR = 4

#: Whether this context is a bulk import (``add_many`` of several items): its inserts wait
#: for the trainer as long as it takes, and none is skipped.
_IMPORTING: contextvars.ContextVar[bool] = contextvars.ContextVar("membrain_importing", default=False)


@contextlib.contextmanager
def importing() -> Iterator[None]:
    """Within it, inserts wait for the trainer rather than skip (a bulk import)."""
    token = _IMPORTING.set(True)
    try:
        yield
    finally:
        _IMPORTING.reset(token)


class JobQueue:
    """A first-in, first-out queue of the trainer's jobs (``put``, ``get``, ``task_done``,
    ``join``, as :class:`queue.Queue`), whose ``put`` waits a bounded time at most and
    makes room by dropping the oldest droppable insert (:meth:`put`)."""

    def __init__(self) -> None:
        self._jobs: deque[tuple[Any, bool, bool]] = deque()  # (job, an insert, droppable)
        self._changed = threading.Condition()
        self._unfinished = 0  # put and not yet done: waiting, or taken and running

    def put(self, job: Any, *, keep: int | None = None, wait_below: int | None = None,
            wait_s: float | None = None) -> int:
        """Queue ``job``; with either bound it is an insert. With ``wait_below``, first wait
        while that many inserts or more wait, ``wait_s`` seconds at most (None: as long as it
        takes). With ``keep``, the job is droppable, and the oldest droppable inserts are
        dropped while ``keep`` inserts or more wait. Returns how many were dropped."""
        dropped = 0
        with self._changed:
            if wait_below is not None:
                end = None if wait_s is None else time.monotonic() + wait_s
                while self._inserts() >= max(wait_below, 1):
                    left = None if end is None else end - time.monotonic()
                    if left is not None and left <= 0:
                        break
                    self._changed.wait(left)
            if keep is not None:
                droppable = [i for i, (_, _, can) in enumerate(self._jobs) if can]
                excess = self._inserts() - max(keep, 1) + 1
                for i in reversed(droppable[:max(excess, 0)]):
                    del self._jobs[i]
                    dropped += 1
            self._jobs.append((job, wait_below is not None or keep is not None, keep is not None))
            self._unfinished += 1 - dropped
            self._changed.notify_all()
        return dropped

    def _inserts(self) -> int:
        return sum(insert for _, insert, _ in self._jobs)

    def get(self) -> Any:
        """The oldest job, waiting for one to be put."""
        with self._changed:
            while not self._jobs:
                self._changed.wait()
            job = self._jobs.popleft()[0]
            self._changed.notify_all()
            return job

    def task_done(self) -> None:
        """A job taken with :meth:`get` is done."""
        with self._changed:
            self._unfinished -= 1
            self._changed.notify_all()

    def join(self, timeout: float | None = None) -> bool:
        """Wait until every job put is done (dropped ones count as done), ``timeout``
        seconds at most: whether they all were."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while self._unfinished:
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._changed.wait(left)
        return True

    @property
    def unfinished(self) -> int:
        """Jobs put and not yet done: how far the trainer is behind."""
        with self._changed:
            return self._unfinished

    def waiting(self) -> int:
        """Jobs put and not yet taken."""
        with self._changed:
            return len(self._jobs)


def put_insert(queue: JobQueue, job: Any, lag: int | None) -> int:
    """Hand an insert to the trainer's ``queue`` as this module describes: with ``lag`` (an
    in-process teacher), wait :data:`LAG_WAIT_S` at most while ``lag`` inserts wait, and skip
    the oldest past :data:`LAG_SKIP_FACTOR` times it; in a bulk import (:func:`importing`),
    wait as long as it takes and skip nothing; without ``lag`` (an LLM teacher), neither.
    Returns how many inserts were skipped."""
    bulk = _IMPORTING.get() or LAG_WAIT_S is None
    return queue.put(job, wait_below=lag, wait_s=None if bulk else LAG_WAIT_S,
                     keep=None if lag is None or bulk else lag * LAG_SKIP_FACTOR)
