"""A lock held by one process at a time, on a side file, released by the OS when its holder
dies: an exclusive ``flock`` on ``path``. SQLite's trainer lock (sqlite.py).

The holder removes the file as it releases the lock, so no empty lock files stay behind; a
process that opened the file meanwhile finds, once it gets the lock, that the file is gone,
and locks the one that is there now. Where ``flock`` does not exist (Windows),
:data:`AVAILABLE` is False and the caller holds the lock within its process only.
"""

from __future__ import annotations

import os

from .base import StorageUnavailableError

try:  # POSIX only
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

#: Whether this platform has ``flock``.
AVAILABLE = fcntl is not None


def _same_file(fd: int, path: str) -> bool:
    """Whether the open file ``fd`` is still the file at ``path`` (not removed or replaced)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino)


def try_lock(path: str) -> int | None:
    """The descriptor of ``path``, created if need be and locked, when no other process holds
    its lock; None when one does. StorageUnavailableError when the file cannot be created."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StorageUnavailableError(f"cannot create the lock file {path!r}: {exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        # The holder waited for may have removed the file as it released it: a lock on a
        # file that is no longer at ``path`` excludes nobody.
        if _same_file(fd, path):
            return fd
        os.close(fd)


def unlock(fd: int, path: str) -> None:
    """Release the lock :func:`try_lock` took on ``path`` (descriptor ``fd``), removing the
    file while still holding it: no other process holds it, the lock being exclusive."""
    try:
        if _same_file(fd, path):
            os.unlink(path)
    except OSError:
        pass  # left in place: harmless, reused by the next holder
    fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)
