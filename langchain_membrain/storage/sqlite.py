"""SQLite backend (stdlib :mod:`sqlite3`): the embedded default for a persistent memory.

Durability: the database runs in WAL mode with ``synchronous=FULL`` by default, so every
committed transaction is fsynced to the write-ahead log before :meth:`write` (or the
outermost ``namespace_lock`` block) returns: an acknowledged write survives a killed
process *and* an operating-system crash or power cut (on a disk that honours fsync).
``synchronous="NORMAL"`` is faster and still survives a killed process (the WAL lives in
the OS page cache), but may lose the last commits on power loss.

Concurrency: one connection per thread (WAL lets readers proceed while one writer
writes); every write transaction starts with ``BEGIN IMMEDIATE``, which takes SQLite's
single writer lock at once (waiting up to ``busy_timeout`` seconds), so writers of one file
are serialised across threads and processes and never hit a snapshot conflict. SQLite has
one writer lock per file, so :meth:`namespace_lock` serialises writers of *all*
namespaces of the file, which is what SQLite does anyway. The trainer lock is a
:mod:`~.file_lock` on ``<database>.trainer-<hash>.lock``. A ``:memory:`` database lives in
this object only: one connection guarded by a re-entrant lock.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import urllib.parse
from contextlib import contextmanager, nullcontext
from typing import Any, Iterable, Iterator, Sequence

from ..errors import ReadOnlyError, SchemaVersionError, StorageError
from ..tree.inputs import Namespace
from .base import (
    LOG_RETENTION,
    SCHEMA_VERSION,
    NotADatabaseError,
    Storage,
    StorageClosedError,
    StorageUnavailableError,
    check_checkpoint,
    check_name,
    check_retention,
    check_write,
    decode_namespace,
    decode_row,
    encode_namespace,
    encode_rows,
    lock_key,
    merge_log_rows,
)
from .file_lock import AVAILABLE as FLOCK
from .file_lock import try_lock, unlock


def _check_location(path: str) -> None:
    """StorageUnavailableError unless ``path`` can be a database file: not a directory, in
    a directory that exists."""
    if os.path.isdir(path):
        raise StorageUnavailableError(f"{path!r} is a directory, not a database file")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise StorageUnavailableError(f"cannot create {path!r}: directory {parent!r} does not exist")


def _writable(path: str) -> bool:
    """Whether this process may write the database file and create files beside it (the
    ``-wal``/``-shm`` files): False for a read-only file, directory or mount."""
    return os.access(path, os.W_OK) and os.access(os.path.dirname(os.path.abspath(path)), os.W_OK | os.X_OK)


def _permission_denied(exc: BaseException) -> bool:
    """Whether an error opening a database read-write says it may not be written."""
    text = str(exc).lower()
    return any(s in text for s in ("readonly", "read-only", "unable to open database file", "permission"))


_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS membrain_schema (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        version INTEGER NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS membrain_namespaces (
        ns TEXT PRIMARY KEY,
        version INTEGER NOT NULL,
        dim INTEGER,
        updated_at REAL NOT NULL
    )""",
    # Clustered on (ns, id): loading one namespace is one range scan of the primary key.
    """CREATE TABLE IF NOT EXISTS membrain_nodes (
        ns TEXT NOT NULL,
        id TEXT NOT NULL,
        parent TEXT,
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        seq INTEGER NOT NULL,
        embedding BLOB,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        metadata TEXT NOT NULL,
        PRIMARY KEY (ns, id)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS membrain_checkpoints (
        name TEXT PRIMARY KEY,
        data BLOB NOT NULL,
        counters TEXT NOT NULL,
        version INTEGER NOT NULL,
        updated_at REAL NOT NULL
    )""",
    # The change log (schema 2): per namespace and version, each node the write upserted
    # (op 'upsert', with its row) or removed (op 'remove'), or one 'reset' entry (id '')
    # left by delete_namespace. Clustered on (ns, version): reading what changed after a
    # version, and compacting, are range scans of the primary key.
    """CREATE TABLE IF NOT EXISTS membrain_changes (
        ns TEXT NOT NULL,
        version INTEGER NOT NULL,
        id TEXT NOT NULL,
        op TEXT NOT NULL,
        parent TEXT,
        kind TEXT,
        text TEXT,
        seq INTEGER,
        embedding BLOB,
        created_at REAL,
        updated_at REAL,
        metadata TEXT,
        PRIMARY KEY (ns, version, id)
    ) WITHOUT ROWID""",
)

_NODE_COLUMNS = "id, parent, kind, text, seq, embedding, created_at, updated_at, metadata"
_LOG = (
    f"INSERT INTO membrain_changes (ns, version, op, {_NODE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_UPSERT = (
    f"INSERT INTO membrain_nodes (ns, {_NODE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT (ns, id) DO UPDATE SET parent = excluded.parent, kind = excluded.kind, "
    "text = excluded.text, seq = excluded.seq, embedding = excluded.embedding, "
    "created_at = excluded.created_at, updated_at = excluded.updated_at, metadata = excluded.metadata"
)



def _schema_table(conn: sqlite3.Connection) -> Any:
    """The row naming membrain's schema table, or None (raises on a file that is no database)."""
    return conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'membrain_schema'").fetchone()

class SQLiteStorage(Storage):
    """Membrain storage in one SQLite file (or ``":memory:"``).

    :param path: the database file (created if missing; its directory must exist), or
        ``":memory:"`` for a private in-process database.
    :param busy_timeout: seconds a writer waits for another writer before giving up with
        :class:`StorageUnavailableError`.
    :param synchronous: ``"FULL"`` (default: acknowledged writes survive power loss) or
        ``"NORMAL"`` (survive a killed process only).
    :param log_retention: versions of change log kept per namespace (see :mod:`.base`).
    :param read_only: open an existing database for reading only (an SQLite ``mode=ro``
        connection): every write raises :class:`~langchain_membrain.errors.ReadOnlyError`
        and nothing is ever written, not even the WAL switch or a trainer lock file. A
        database whose file or directory this process cannot write (``chmod``, a read-only
        mount) is opened so without asking, as is one whose read-write opening fails for
        want of write permission. In a read-only directory the database must have been
        closed cleanly (no ``-wal`` file left with unmerged writes), since SQLite cannot
        create its ``-shm`` index there; it is then read as ``immutable``, so writes made
        meanwhile by another process (through another mount) are not seen.
    """

    def __init__(self, path: str | os.PathLike[str] = ":memory:", *, busy_timeout: float = 30.0,
                 synchronous: str = "FULL", log_retention: int = LOG_RETENTION, read_only: bool = False):
        path = os.fspath(path)
        if synchronous.upper() not in ("FULL", "NORMAL", "EXTRA"):
            raise StorageError(f"synchronous must be FULL, NORMAL or EXTRA, got {synchronous!r}")
        self.location = path
        self.read_only = bool(read_only)
        self._uri: str | None = None  # the read-only connection's URI (set when opened so)
        self.log_retention = check_retention(log_retention)
        self._memory = path == ":memory:" or path == ""
        self._busy_timeout = float(busy_timeout)
        self._synchronous = synchronous.upper()
        self._closed = False
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        # In-memory: one shared connection, so its use is serialised by this lock.
        self._mem_lock = threading.RLock() if self._memory else None
        self._trainers: dict[str, Any] = {}
        self._trainers_lock = threading.Lock()
        if self._memory and self.read_only:
            raise StorageError("a private :memory: database cannot be opened read-only (it would be empty)")
        if not self._memory:
            _check_location(path)
            if self.read_only and not os.path.isfile(path):
                raise StorageUnavailableError(f"cannot open {path!r} read-only: there is no such file")
            if not self.read_only and os.path.isfile(path) and not _writable(path):
                self.read_only = True  # a read-only file, directory or mount: read it as it is
        if self.read_only:
            self._open_read_only()
            return
        try:
            self._open()
        except StorageError as exc:
            # The read-write opening failed for want of write permission (what os.access
            # cannot tell, e.g. some network or overlay file systems): read it instead.
            if self._memory or not os.path.isfile(path) or not _permission_denied(exc):
                raise
            self.read_only = True
            try:
                self._open_read_only()
            except StorageError as again:
                raise again from exc

    # ------------------------------------------------------------------ opening
    def _open(self) -> None:
        """Check the file is a membrain database of a known schema *before* writing
        anything, then switch it to WAL and create the tables if missing."""
        conn = self._connect()
        try:
            try:
                found = _schema_table(conn)
            except sqlite3.DatabaseError as exc:  # "file is not a database", encrypted, ...
                raise NotADatabaseError(f"{self.location!r} is not an SQLite database ({exc}); left untouched") from None
            version = self._check_schema(conn) if found else None
            try:
                if not self._memory:
                    mode = self._enable_wal(conn)
                    if str(mode).lower() != "wal":
                        raise StorageUnavailableError(f"{self.location!r}: cannot enable WAL (journal mode {mode!r})")
                if version == SCHEMA_VERSION:
                    # Set up already: opening takes no write lock, so it never waits for a writer.
                    self._register(conn)
                    return
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for statement in _SCHEMA:
                        conn.execute(statement)
                    # Re-check under the write lock: another process may have created or
                    # upgraded it. An older layout is upgraded in place: the statements
                    # above created the tables it lacked (schema 1: the change log).
                    found_version = self._check_schema(conn)
                    if found_version is None:
                        conn.execute("INSERT INTO membrain_schema (id, version) VALUES (1, ?)", (SCHEMA_VERSION,))
                    elif found_version < SCHEMA_VERSION:
                        conn.execute("UPDATE membrain_schema SET version = ? WHERE id = 1", (SCHEMA_VERSION,))
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            except sqlite3.DatabaseError as exc:
                raise StorageUnavailableError(f"cannot write {self.location!r}: {exc}") from None
        except BaseException:
            conn.close()
            raise
        self._register(conn)

    def _open_read_only(self) -> None:
        """Open an existing membrain database for reading: a ``mode=ro`` connection, or
        ``immutable`` where SQLite cannot create the WAL index (a read-only directory) and no
        unmerged ``-wal`` file would be missed. Checks the schema; writes nothing."""
        target = "file:" + urllib.parse.quote(os.path.abspath(self.location))
        self._uri = target + "?mode=ro"
        conn = self._connect()
        try:
            try:
                found = _schema_table(conn)
            except sqlite3.DatabaseError as exc:
                conn.close()
                wal = self.location + "-wal"
                if os.path.exists(wal) and os.path.getsize(wal) > 0:
                    raise StorageUnavailableError(
                        f"cannot read {self.location!r} read-only ({exc}): its {wal!r} holds writes not yet "
                        "merged into the database, which SQLite reads only where it can create the "
                        "'-shm' file; open it once where it is writable (or copy it with its -wal file)"
                    ) from None
                self._uri = target + "?mode=ro&immutable=1"
                conn = self._connect()
                try:
                    found = _schema_table(conn)
                except sqlite3.DatabaseError as exc:
                    raise NotADatabaseError(
                        f"{self.location!r} is not an SQLite database ({exc}); left untouched") from None
            if not found:
                raise NotADatabaseError(f"{self.location!r} holds no membrain memory, and is open read-only "
                                        "(its tables cannot be created); left untouched")
            version = self._check_schema(conn)
            if version is None or version < SCHEMA_VERSION:
                raise StorageUnavailableError(
                    f"{self.location!r} was written by an older membrain (schema {version}) and is read-only: "
                    "open it once where it is writable, to upgrade it")
        except BaseException:
            conn.close()
            raise
        self._register(conn)

    def _enable_wal(self, conn: sqlite3.Connection) -> str:
        """Switch the file to WAL. Two processes opening a new file at once can make this
        fail at once with "database is locked" (SQLite does not run the busy handler for
        it), so it is retried until ``busy_timeout``."""
        deadline = time.monotonic() + self._busy_timeout
        while True:
            try:
                return conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _check_schema(self, conn: sqlite3.Connection) -> int | None:
        row = conn.execute("SELECT version FROM membrain_schema WHERE id = 1").fetchone()
        if row is None:
            return None
        version = int(row[0])
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{self.location!r} was written by a newer membrain (schema {version}; this one "
                f"reads up to {SCHEMA_VERSION}); upgrade langchain-membrain to open it"
            )
        return version

    def _connect(self) -> sqlite3.Connection:
        try:
            # isolation_level=None: we issue BEGIN/COMMIT ourselves (BEGIN IMMEDIATE for writes).
            conn = sqlite3.connect(self._uri or self.location, timeout=self._busy_timeout, isolation_level=None,
                                   check_same_thread=False, uri=self._uri is not None)
        except sqlite3.Error as exc:
            raise StorageUnavailableError(f"cannot open {self.location!r}: {exc}") from None
        try:
            if self._uri is None:  # a read-only connection writes nothing to sync (and this reads the schema)
                conn.execute(f"PRAGMA synchronous = {self._synchronous}")  # validated in __init__
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise NotADatabaseError(f"{self.location!r} is not an SQLite database ({exc}); left untouched") from None
        return conn

    def _register(self, conn: sqlite3.Connection) -> None:
        with self._conns_lock:
            self._conns.append(conn)
        if self._memory:
            self._shared = conn
        else:
            self._local.conn = conn

    def _thread_conn(self) -> sqlite3.Connection:
        if self._closed:
            raise StorageClosedError(f"{self!r} is closed")
        if self._memory:
            return self._shared
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._register(conn)
        return conn

    # ------------------------------------------------------------- transactions
    @contextmanager
    def _errors(self) -> Iterator[None]:
        """sqlite3 errors as typed membrain errors."""
        try:
            yield
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise StorageUnavailableError(
                    f"{self.location!r} stayed locked by another writer for {self._busy_timeout:g} s: {exc}"
                ) from None
            raise StorageError(f"{self.location!r}: {exc}") from None
        except sqlite3.DatabaseError as exc:
            raise StorageError(f"{self.location!r}: {exc}") from None

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``), or a savepoint inside the one this
        thread already holds, so that every write is atomic on its own even inside a lock."""
        if self.read_only:
            raise ReadOnlyError(f"{self.location!r} is open read-only: nothing was written")
        depth = getattr(self._local, "depth", 0)
        guard = self._mem_lock if self._mem_lock is not None else nullcontext()
        with guard:
            conn = self._thread_conn()
            if depth:
                name = f"membrain_sp{depth}"
                with self._errors():
                    conn.execute(f"SAVEPOINT {name}")
                self._local.depth = depth + 1
                try:
                    with self._errors():
                        yield conn
                except BaseException:
                    with self._errors():
                        conn.execute(f"ROLLBACK TO {name}")
                        conn.execute(f"RELEASE {name}")
                    raise
                else:
                    with self._errors():
                        conn.execute(f"RELEASE {name}")
                finally:
                    self._local.depth = depth
                return
            with self._errors():
                conn.execute("BEGIN IMMEDIATE")
            self._local.depth = 1
            try:
                with self._errors():
                    yield conn
                    conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass  # the connection is unusable; the transaction is gone either way
                raise
            finally:
                self._local.depth = 0

    @contextmanager
    def _read(self, snapshot: bool = False) -> Iterator[sqlite3.Connection]:
        """A connection for reading: the open transaction of this thread if any, else a
        read transaction when several statements must see one snapshot."""
        guard = self._mem_lock if self._mem_lock is not None else nullcontext()
        with guard:
            conn = self._thread_conn()
            depth: int = getattr(self._local, "depth", 0)
            if not snapshot or depth or conn.in_transaction:
                with self._errors():
                    yield conn
                return
            with self._errors():
                conn.execute("BEGIN")
                try:
                    yield conn
                finally:
                    conn.execute("COMMIT")  # read-only: nothing to keep or lose

    # --------------------------------------------------------------- namespaces
    def list_namespaces(self) -> list[Namespace]:
        with self._read() as conn:
            rows = conn.execute("SELECT ns FROM membrain_namespaces").fetchall()
        return sorted(decode_namespace(r[0]) for r in rows)

    def namespaces_with_facts(self) -> list[Namespace]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT n.ns FROM membrain_namespaces n WHERE EXISTS "
                "(SELECT 1 FROM membrain_nodes d WHERE d.ns = n.ns AND d.kind = 'fact')").fetchall()
        return sorted(decode_namespace(r[0]) for r in rows)

    def namespace_versions(self) -> dict[Namespace, int]:
        with self._read() as conn:
            rows = conn.execute("SELECT ns, version FROM membrain_namespaces").fetchall()
        return {decode_namespace(ns): int(v) for ns, v in rows}

    def namespace_version(self, ns: Sequence[str]) -> int:
        key = encode_namespace(ns)
        with self._read() as conn:
            row = conn.execute("SELECT version FROM membrain_namespaces WHERE ns = ?", (key,)).fetchone()
        return int(row[0]) if row else 0

    def namespace_head(self, ns: Sequence[str]) -> tuple[int, float, int | None] | None:
        with self._read() as conn:
            row = conn.execute("SELECT version, updated_at, dim FROM membrain_namespaces WHERE ns = ?",
                               (encode_namespace(ns),)).fetchone()
        return None if row is None else (int(row[0]), float(row[1]), None if row[2] is None else int(row[2]))

    def load_rows(self, ns: Sequence[str]) -> tuple[list[dict[str, Any]], int | None, int] | None:
        key = encode_namespace(ns)
        with self._read(snapshot=True) as conn:
            head = conn.execute("SELECT version, dim FROM membrain_namespaces WHERE ns = ?", (key,)).fetchone()
            if head is None:
                return None
            stored = conn.execute(f"SELECT {_NODE_COLUMNS} FROM membrain_nodes WHERE ns = ?", (key,)).fetchall()
        rows = [decode_row(*r) for r in stored]
        return rows, (None if head[1] is None else int(head[1])), int(head[0])

    def changes_since(self, ns: Sequence[str], version: int) -> tuple[list[dict[str, Any]], list[str], int] | None:
        key = encode_namespace(ns)
        # One statement (one snapshot, no transaction to open): the head version beside
        # each later log entry; one row of NULL entry columns when nothing is logged after.
        with self._read() as conn:
            found = conn.execute(
                f"SELECT n.version, c.version, c.op, {', '.join('c.' + c for c in _NODE_COLUMNS.split(', '))} "
                "FROM membrain_namespaces n LEFT JOIN membrain_changes c ON c.ns = n.ns AND c.version > ? "
                "WHERE n.ns = ? ORDER BY c.version", (int(version), key)).fetchall()
        return merge_log_rows(found, version)

    def write(self, ns: Sequence[str], rows: Iterable[dict[str, Any]], removed: Iterable[str] = (), *,
              expected_version: int | None = None) -> int:
        key = encode_namespace(ns)
        encoded, removed_ids, dim = encode_rows(rows, removed)  # validate before the transaction
        with self._transaction() as conn:
            head = conn.execute("SELECT version, dim FROM membrain_namespaces WHERE ns = ?", (key,)).fetchone()
            current, new_dim = check_write(ns, head, encoded, removed_ids, dim, expected_version)
            if head is not None and not encoded and not removed_ids:
                return current  # nothing changed: no version bump, so no process reloads for nothing
            with self._errors():
                if head is None:
                    # A namespace deleted earlier continues its version numbers after its
                    # reset entry: a version never names two different trees.
                    last = conn.execute("SELECT max(version) FROM membrain_changes WHERE ns = ?", (key,)).fetchone()
                    current = int(last[0] or 0)
                new = current + 1
                conn.executemany(_UPSERT, [(key, *r) for r in encoded])
                conn.executemany("DELETE FROM membrain_nodes WHERE ns = ? AND id = ?",
                                 [(key, rid) for rid in removed_ids])
                self._log(conn, key, new, encoded, removed_ids)
                now = time.time()
                if head is None:
                    conn.execute("INSERT INTO membrain_namespaces (ns, version, dim, updated_at) VALUES (?, ?, ?, ?)",
                                 (key, new, dim, now))
                else:
                    conn.execute("UPDATE membrain_namespaces SET version = ?, dim = ?, updated_at = ? WHERE ns = ?",
                                 (new, new_dim, now, key))
            return new

    def _log(self, conn: sqlite3.Connection, key: str, version: int, encoded: list[tuple],
             removed_ids: list[str]) -> None:
        """Record a write in the change log (same transaction) and drop entries past the
        retention; a write too large to log clears the log, so processes behind reload."""
        if len(encoded) + len(removed_ids) > self.log_max_rows:
            conn.execute("DELETE FROM membrain_changes WHERE ns = ?", (key,))
            return
        conn.executemany(_LOG, [(key, version, "upsert", *r) for r in encoded])
        conn.executemany(_LOG, [(key, version, "remove", rid, *([None] * 8)) for rid in removed_ids])
        if version > self.log_retention:
            conn.execute("DELETE FROM membrain_changes WHERE ns = ? AND version <= ?",
                         (key, version - self.log_retention))

    @contextmanager
    def namespace_lock(self, ns: Sequence[str]) -> Iterator[None]:
        encode_namespace(ns)  # validate; SQLite's writer lock covers the whole file
        with self._transaction():
            yield

    def delete_namespace(self, ns: Sequence[str]) -> bool:
        key = encode_namespace(ns)
        with self._transaction() as conn, self._errors():
            head = conn.execute("SELECT version FROM membrain_namespaces WHERE ns = ?", (key,)).fetchone()
            if head is None:
                return False
            conn.execute("DELETE FROM membrain_nodes WHERE ns = ?", (key,))
            conn.execute("DELETE FROM membrain_namespaces WHERE ns = ?", (key,))
            conn.execute("DELETE FROM membrain_changes WHERE ns = ?", (key,))
            conn.execute(_LOG, (key, int(head[0]) + 1, "reset", "", *([None] * 8)))
            return True

    # -------------------------------------------------------------- checkpoints
    def save_checkpoint(self, name: str, data: bytes, counters: dict[str, Any] | None = None) -> None:
        check_name(name)
        counters_json = check_checkpoint(data, counters)
        with self._transaction() as conn, self._errors():
            conn.execute(
                "INSERT INTO membrain_checkpoints (name, data, counters, version, updated_at) VALUES (?, ?, ?, 1, ?) "
                "ON CONFLICT (name) DO UPDATE SET data = excluded.data, counters = excluded.counters, "
                "version = membrain_checkpoints.version + 1, updated_at = excluded.updated_at",
                (name, bytes(data), counters_json, time.time()),
            )

    def load_checkpoint(self, name: str) -> tuple[bytes, dict[str, Any]] | None:
        check_name(name)
        with self._read() as conn:
            row = conn.execute("SELECT data, counters FROM membrain_checkpoints WHERE name = ?", (name,)).fetchone()
        return None if row is None else (bytes(row[0]), json.loads(row[1]))

    def checkpoint_version(self, name: str) -> int:
        check_name(name)
        with self._read() as conn:
            row = conn.execute("SELECT version FROM membrain_checkpoints WHERE name = ?", (name,)).fetchone()
        return int(row[0]) if row else 0

    def delete_checkpoint(self, name: str) -> bool:
        check_name(name)
        with self._transaction() as conn, self._errors():
            return conn.execute("DELETE FROM membrain_checkpoints WHERE name = ?", (name,)).rowcount > 0

    def try_acquire_trainer(self, name: str) -> bool:
        check_name(name, "trainer name")
        if self._closed:
            raise StorageClosedError(f"{self!r} is closed")
        with self._trainers_lock:
            if name in self._trainers:
                return True
            if self.read_only:
                return False  # nothing to train for: no checkpoint can be written
            if self._memory or not FLOCK:
                # A private in-memory database has no other process to exclude; elsewhere
                # than POSIX the lock is held within this process only.
                self._trainers[name] = None
                return True
            fd = try_lock(self._trainer_path(name))
            if fd is None:
                return False
            self._trainers[name] = fd
            return True

    def _trainer_path(self, name: str) -> str:
        return f"{self.location}.trainer-{lock_key(name) & 0xFFFFFFFFFFFF:012x}.lock"

    def release_trainer(self, name: str) -> None:
        with self._trainers_lock:
            fd = self._trainers.pop(name, None)
        if fd is not None:
            unlock(fd, self._trainer_path(name))

    # ----------------------------------------------------------------- lifetime
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for name in list(self._trainers):
            self.release_trainer(name)
        with self._conns_lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            try:
                conn.close()
            except sqlite3.Error:
                pass
