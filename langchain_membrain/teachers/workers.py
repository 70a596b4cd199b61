"""Daemon worker threads that run a guarded teacher's sync requests.

A guarded teacher (:mod:`.guard`) sends each sync request on one of these threads and waits
for its :class:`~concurrent.futures.Future` with its own timeout, so that a request runs no
longer than the teacher allows, whatever timeout the user's client has (a LangChain chat
model's default is none at all). A request past its time is *abandoned*: its waiter stops
waiting, and the thread stays blocked in the request until the server answers, which may be
never.

Why not :class:`~concurrent.futures.ThreadPoolExecutor`: its workers are non-daemon threads,
and ``concurrent.futures`` joins every one of them at interpreter exit
One request stuck in an HTTP read that never ends then keeps the process alive forever,
closed memory or not. These threads are daemons that
nobody joins: the process exits while a worker is still blocked in an abandoned read. A
worker runs no torch code (only a client's request), so ending it with the interpreter is
safe (see shutdown.py for why the trainer, which does, is flushed before exit instead).

This module imports nothing heavy.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable, Literal

from . import budget

#: Seconds between two looks at the deadline while a request or a request slot is awaited:
#: a cutoff set meanwhile (close()) is seen within this.
POLL_S = 0.05

#: What a worker reads from its queue: a call, or None (an idle worker exits).
_Job = tuple[Future, Callable[..., Any], tuple[Any, ...]]


class DaemonWorkers:
    """At most ``size`` daemon threads running the calls handed to :meth:`submit`.

    A thread is started when a call arrives and no worker is idle, up to ``size``; a call
    that finds every worker busy (e.g. all blocked in abandoned requests) waits in the queue,
    and its waiter may cancel it there (``Future.cancel()`` is true only for a call that never
    started). Threads are never joined: :meth:`shutdown` cancels the queued calls and tells
    the idle workers to exit, and returns at once; a later call starts new workers.
    """

    def __init__(self, size: int, name: str):
        if size < 1:
            raise ValueError(f"size is at least 1, not {size}")
        self.size = int(size)
        self.name = name
        self._lock = threading.Lock()
        self._new_generation()

    def _new_generation(self) -> None:
        # Workers read the queue and release the semaphore they were started with, so that
        # a shutdown's leftovers never reach the workers started after it.
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # released by a worker each time it waits for a job
        self._threads: list[threading.Thread] = []

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        """Run ``fn(*args)`` on a worker; its result or exception comes in the Future."""
        future: Future = Future()
        with self._lock:
            self._jobs.put((future, fn, args))
            if not self._idle.acquire(blocking=False):  # no idle worker to take it: start one
                self._threads = [t for t in self._threads if t.is_alive()]
                if len(self._threads) < self.size:
                    t = threading.Thread(target=self._work, args=(self._jobs, self._idle),
                                         name=f"{self.name}-{len(self._threads)}", daemon=True)
                    t.start()
                    self._threads.append(t)
        return future

    def alive(self) -> int:
        """Worker threads alive, idle ones included (for tests and diagnostics)."""
        with self._lock:
            return sum(t.is_alive() for t in self._threads)

    def shutdown(self) -> None:
        """Cancel the calls still queued, and let idle workers exit; returns at once (a
        worker blocked in an abandoned call stays a daemon until its call returns)."""
        with self._lock:
            jobs, threads = self._jobs, self._threads
            self._new_generation()
        while True:
            try:
                job = jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job[0].cancel()
        for _ in threads:
            jobs.put(None)

    @staticmethod
    def _work(jobs: queue.SimpleQueue[_Job | None], idle: threading.Semaphore) -> None:
        while True:
            job = jobs.get()
            if job is None:
                return
            future, fn, args = job
            if future.set_running_or_notify_cancel():  # False: cancelled while it was queued
                try:
                    result = fn(*args)
                except BaseException as exc:  # noqa: BLE001 - handed to the waiter
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del job, future, fn, args  # hold no answer while idle
            idle.release()


def wait_within(future: Future, timeout: float) -> Literal["done", "never_started", "deadline", "timeout"]:
    """Wait for ``future`` ``timeout`` seconds at most, or until this thread's deadline
    (:func:`~.budget.current_deadline`), read again every :data:`POLL_S` so that a cutoff
    set meanwhile ends the wait. What ended it: ``"done"`` (its result or exception is
    there), ``"never_started"`` (it was still queued, and is cancelled), ``"deadline"`` or
    ``"timeout"`` (it runs on, abandoned)."""
    give_up = time.monotonic() + timeout
    while True:
        end = budget.current_deadline()
        limit = give_up if end is None else min(give_up, end)
        left = limit - time.monotonic()
        if left <= 0:
            break
        try:
            future.exception(timeout=min(left, POLL_S))
            return "done"
        except FutureTimeout:
            continue
    if future.cancel():
        return "never_started"
    return "deadline" if limit < give_up else "timeout"


def acquire_within(sem: threading.Semaphore) -> bool:
    """Take ``sem``; False when this thread's deadline passes first. Waits in steps of
    :data:`POLL_S`, reading the deadline again, so that a cutoff set meanwhile ends the wait."""
    while True:
        end = budget.current_deadline()
        wait = POLL_S if end is None else min(POLL_S, end - time.monotonic())
        if wait <= 0:
            return sem.acquire(blocking=False)
        if sem.acquire(timeout=wait):
            return True
