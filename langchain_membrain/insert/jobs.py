"""The background trainer's queue of jobs, which an add never waits on.

An insert is handed to the trainer with a bound: when that many inserts wait already, the
oldest waiting insert is **skipped** (dropped from the queue: the trainer neither asks the
teacher about it nor trains on it) to make room. Its memory is placed, stored and searchable
whatever happens here; only what the student would have learnt from it is lost. Other jobs
(a batch question, the stop signal) are never dropped. So a starved or slow trainer learns
later, or from fewer inserts, and never holds up the writer. A bulk import (``add_many``)
waits instead: it is not a user waiting on one add, and every insert of it is learnt from.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any


class JobQueue:
    """A first-in, first-out queue of the trainer's jobs (``put``, ``get``, ``task_done``,
    ``join``, as :class:`queue.Queue`), whose ``put`` never blocks: with a ``bound`` it drops
    the oldest droppable job to keep at most ``bound`` of them waiting."""

    def __init__(self) -> None:
        self._jobs: deque[tuple[Any, bool]] = deque()  # (job, droppable)
        self._changed = threading.Condition()
        self._unfinished = 0  # put and not yet done: waiting, or taken and running

    def put(self, job: Any, *, bound: int | None = None, wait: bool = False) -> int:
        """Queue ``job``; with ``bound``, it is droppable, and the oldest droppable jobs
        are dropped until fewer than ``bound`` of them wait, or, with ``wait``, the call
        waits until the trainer has taken enough of them. Returns how many were dropped."""
        dropped = 0
        with self._changed:
            if bound is not None and wait:
                while self._droppable() >= max(bound, 1):
                    self._changed.wait()
            if bound is not None:
                while self._droppable() >= max(bound, 1):
                    oldest = next(i for i, (_, droppable) in enumerate(self._jobs) if droppable)
                    del self._jobs[oldest]
                    dropped += 1
            self._jobs.append((job, bound is not None))
            self._unfinished += 1 - dropped
            self._changed.notify_all()
        return dropped

    def _droppable(self) -> int:
        return sum(droppable for _, droppable in self._jobs)

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
