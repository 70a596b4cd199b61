"""Persistence of membrain trees and model checkpoints.

``open_storage(target)`` picks the backend from its argument:

- ``"postgresql://..."`` or ``"postgres://..."``: :class:`~.postgres.PostgresStorage`
  (import it from :mod:`.postgres`; it needs the ``[postgres]`` extra: psycopg 3 and
  psycopg_pool), to share one memory between processes on several machines;
- any other string or path (``"membrain.db"``): :class:`~.sqlite.SQLiteStorage`, a file
  shared safely by the processes of one machine;
- ``None`` or ``":memory:"``: a private in-process SQLite database (nothing persists).

See :mod:`.base` for the interface and its concurrency model.

Also owns :mod:`.forest` (the namespaces a process holds, each write committed as one
transaction) and :mod:`.index_cache` (a namespace's search index saved beside the store).

May import: ``errors``, ``tree``, ``index``.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import ReadOnlyError, SchemaVersionError, StorageError
from ..tree.inputs import Namespace
from .base import (
    SCHEMA_VERSION,
    STORE_VALUE_KEY,
    NotADatabaseError,
    Storage,
    StorageClosedError,
    StorageUnavailableError,
    VersionConflictError,
)
from .sqlite import SQLiteStorage


def is_postgres_url(target: Any) -> bool:
    return isinstance(target, str) and target.split("://", 1)[0].lower() in ("postgresql", "postgres")


def open_storage(target: str | os.PathLike[str] | None = None, **options: Any) -> Storage:
    """Open (creating if needed) the storage named by ``target``.

    ``options`` go to the backend: ``busy_timeout``/``synchronous``/``read_only`` for SQLite
    (``read_only=True`` opens an existing file for reading only; a file, directory or mount
    this process cannot write is opened so by itself, see :class:`SQLiteStorage`);
    ``schema``, ``connect_timeout``, ``min_size``/``max_size`` (pool) for PostgreSQL;
    ``log_retention`` (versions of change log kept per namespace) for both.
    Raises :class:`NotADatabaseError`, :class:`StorageUnavailableError` or
    :class:`~langchain_membrain.errors.SchemaVersionError` (all StorageError) when it cannot.
    """
    if target is None:
        return SQLiteStorage(":memory:", **options)
    if is_postgres_url(target):
        if options.pop("read_only", False):
            raise StorageError("read_only=True is for SQLite files; a PostgreSQL database is opened read-write")
        from .postgres import PostgresStorage  # imported lazily: psycopg is an optional extra

        return PostgresStorage(str(target), **options)
    if not isinstance(target, (str, os.PathLike)):
        raise StorageError(f"a storage target is a path, a postgresql:// URL or None, got {target!r}")
    return SQLiteStorage(target, **options)


__all__ = [
    "SCHEMA_VERSION",
    "STORE_VALUE_KEY",
    "Namespace",
    "NotADatabaseError",
    "ReadOnlyError",
    "SQLiteStorage",
    "SchemaVersionError",
    "Storage",
    "StorageClosedError",
    "StorageError",
    "StorageUnavailableError",
    "VersionConflictError",
    "is_postgres_url",
    "open_storage",
]
