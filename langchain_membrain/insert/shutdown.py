"""Process exit: every memory still open is flushed, then closed, in bounded time.

A memory that is never closed must still train its pending inserts and save its models
when the interpreter exits, and must not take the process down. Its trainer is a daemon
thread: left running torch code (which releases the GIL) while the interpreter finalises,
CPython ends it with pthread_exit as it takes the GIL back, and unwinding that thread
through torch's C++ frames calls std::terminate ("terminate called without an active
exception", status 134). So every open memory is flushed before the interpreter starts
shutting down its threads, and closed (worker stopped, checkpoint saved) at exit. Held by
weak reference: registering never keeps a memory alive.

Both are bounded (by :data:`EXIT_TIMEOUT_S`; ``close()`` called by the user, by
:data:`CLOSE_TIMEOUT_S`): a teacher that hangs, refuses connections or answers slowly must
not keep a process from exiting. The questions still pending then are dropped
(``Background.flush``), and the guarded teachers' request threads are daemons
(teachers/workers.py), so none of them is joined at exit.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Protocol

logger = logging.getLogger("langchain_membrain")

#: Seconds ``close()`` (and the flush at exit) gives the teacher's pending questions before
#: dropping them; the close then trains what they left and writes the checkpoint.
CLOSE_TIMEOUT_S = 2.0

#: The same at interpreter exit, for a memory never closed: shorter, because the process
#: exits only after this flush, the close after it and the interpreter's own teardown
#: (over a second with torch loaded, on a small shared machine), and must be gone within 5 s of
#: its last statement.
EXIT_TIMEOUT_S = 1.0


class Closable(Protocol):
    """What the exit hooks call: ``flush`` (train what is pending, save) and ``close``, each
    with a timeout for the teacher's pending questions."""

    def flush(self, timeout: float | None = None) -> None: ...

    def close(self, timeout: float = CLOSE_TIMEOUT_S) -> None: ...


_LIVE: Any = None  # weakref.WeakSet of the open memories; created with the exit hooks
_LIVE_LOCK = threading.Lock()


def register(memory: Closable) -> None:
    """Flush and close ``memory`` at interpreter exit unless it was closed (:func:`forget`) before."""
    global _LIVE
    import weakref

    with _LIVE_LOCK:
        if _LIVE is None:
            _LIVE = weakref.WeakSet()
            _install_exit_hooks()
        _LIVE.add(memory)


def forget(memory: Closable) -> None:
    """``memory`` was closed: nothing to do for it at exit."""
    with _LIVE_LOCK:
        if _LIVE is not None:
            _LIVE.discard(memory)


def _install_exit_hooks() -> None:
    import atexit

    atexit.register(_at_exit, close=True)
    # The flush runs once the main thread has finished, on a non-daemon thread: the interpreter
    # joins it before it runs atexit's hooks and tears down, so the trainer is idle again
    # (not in torch code) by then.
    try:
        threading.Thread(target=_flush_after_main, name="membrain-exit", daemon=False).start()
    except RuntimeError:  # the interpreter is shutting down already: atexit's close remains
        pass


def _flush_after_main() -> None:
    threading.main_thread().join()
    _at_exit(close=False)


def _at_exit(close: bool) -> None:
    """Flush (before threads are joined) or close (at exit) every memory still open: still
    registered when its turn comes (a memory forgets itself as it closes)."""
    with _LIVE_LOCK:
        memories = list(_LIVE) if _LIVE is not None else []
    for memory in memories:
        try:
            if close:
                memory.close(EXIT_TIMEOUT_S)
            else:
                with _LIVE_LOCK:
                    still_open = memory in _LIVE
                if still_open:
                    memory.flush(EXIT_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - one memory's failure must not stop the others
            logger.warning("membrain: could not %s a memory at exit: %s", "close" if close else "flush", exc)
