"""PostgreSQL backend (psycopg 3 + psycopg_pool, the ``[postgres]`` extra): one memory shared
by processes on several machines.

- Connections come from a pool (autocommit connections; transactions are explicit).
- :meth:`namespace_lock` is one transaction holding ``pg_advisory_xact_lock`` on a 64-bit
  hash of (schema, namespace): writers of one namespace are serialised across machines,
  writers of different namespaces run in parallel, and the lock can never outlive its
  transaction (a crashed client's transaction is rolled back and its lock freed). Waiting
  for it is bounded by ``lock_timeout`` (then :class:`StorageUnavailableError`).
- The trainer lock is a session-level ``pg_try_advisory_lock`` held on a dedicated
  connection: the server frees it when the holder releases it, closes, or dies (its
  connection drops).
- Durability is PostgreSQL's: with the default ``synchronous_commit = on`` a write that
  returned is flushed to the server's WAL.
- Every value is passed as a query parameter; the only identifier ever composed into SQL
  is the schema name, validated and quoted with :class:`psycopg.sql.Identifier`.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Sequence

from ..errors import SchemaVersionError, StorageError
from ..tree.inputs import Namespace
from .base import (
    LOG_RETENTION,
    SCHEMA_VERSION,
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
    redact_url,
)

try:
    import psycopg
    from psycopg import sql
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError:  # the optional extra is not installed: PostgresStorage() says how to get it
    psycopg = None  # type: ignore[assignment]

_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_NODE_COLUMNS = "id, parent, kind, text, seq, embedding, created_at, updated_at, metadata"

_TABLES = (
    """CREATE TABLE IF NOT EXISTS {s}.membrain_schema (
        id integer PRIMARY KEY CHECK (id = 1),
        version integer NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS {s}.membrain_namespaces (
        ns text PRIMARY KEY,
        version bigint NOT NULL,
        dim integer,
        updated_at double precision NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS {s}.membrain_nodes (
        ns text NOT NULL,
        id text NOT NULL,
        parent text,
        kind text NOT NULL,
        text text NOT NULL,
        seq bigint NOT NULL,
        embedding bytea,
        created_at double precision NOT NULL,
        updated_at double precision NOT NULL,
        metadata jsonb NOT NULL,
        PRIMARY KEY (ns, id)
    )""",
    """CREATE TABLE IF NOT EXISTS {s}.membrain_checkpoints (
        name text PRIMARY KEY,
        data bytea NOT NULL,
        counters jsonb NOT NULL,
        version bigint NOT NULL,
        updated_at double precision NOT NULL
    )""",
    # The change log (schema 2); see the SQLite backend for its rows.
    """CREATE TABLE IF NOT EXISTS {s}.membrain_changes (
        ns text NOT NULL,
        version bigint NOT NULL,
        id text NOT NULL,
        op text NOT NULL,
        parent text,
        kind text,
        text text,
        seq bigint,
        embedding bytea,
        created_at double precision,
        updated_at double precision,
        metadata jsonb,
        PRIMARY KEY (ns, version, id)
    )""",
)
_LOG = (f"INSERT INTO {{s}}.membrain_changes (ns, version, op, {_NODE_COLUMNS}) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb)")


def _no_nul(*values: Any) -> None:
    """PostgreSQL text and jsonb cannot hold U+0000: refuse it before any transaction."""
    for value in values:
        if isinstance(value, str) and ("\x00" in value or "\\u0000" in value):
            raise StorageError("PostgreSQL cannot store the character U+0000 (in an id, text or metadata)")


class PostgresStorage(Storage):
    """Membrain storage in a PostgreSQL database.

    :param url: a libpq URL or conninfo string (``postgresql://user:pw@host:5432/db``).
    :param schema: the PostgreSQL schema holding the ``membrain_*`` tables (created if
        missing); several independent memories can share one database under different schemas.
    :param connect_timeout: seconds to wait for the server before failing (at least 2: libpq's floor).
    :param lock_timeout: seconds a writer waits for a namespace lock held elsewhere.
    :param min_size, max_size: connection pool bounds.
    :param log_retention: versions of change log kept per namespace (see :mod:`.base`).
    """

    def __init__(self, url: str, *, schema: str = "public", connect_timeout: float = 5.0,
                 lock_timeout: float = 30.0, min_size: int = 1, max_size: int = 8,
                 log_retention: int = LOG_RETENTION):
        if psycopg is None:
            raise StorageUnavailableError(
                "PostgreSQL storage needs psycopg 3 and psycopg_pool: pip install 'langchain-membrain[postgres]'"
            )
        if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema):
            raise StorageError(f"schema must be a plain SQL identifier (letters, digits, _), got {schema!r}")
        self.location = redact_url(url)
        self.log_retention = check_retention(log_retention)
        self._url = url
        self._schema = schema
        self._s = sql.Identifier(schema)
        self._connect_timeout = max(2, int(math.ceil(connect_timeout)))
        self._lock_timeout_ms = int(lock_timeout * 1000)
        self._closed = False
        self._local = threading.local()
        self._trainers: dict[str, Any] = {}
        self._trainers_lock = threading.Lock()
        self._init_database()
        self._pool = ConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            kwargs=self._connect_kwargs(),
            open=False,
            check=ConnectionPool.check_connection,  # a connection dropped by the server is replaced
            name=f"membrain-{schema}",
        )
        try:
            self._pool.open(wait=True, timeout=self._connect_timeout + 5)
        except PoolTimeout as exc:
            self._pool.close()
            raise StorageUnavailableError(f"cannot fill the connection pool for {self.location}: {exc}") from None

    # ------------------------------------------------------------------ opening
    @property
    def schema(self) -> str:
        """The schema holding this storage's tables."""
        return self._schema

    def _connect_kwargs(self) -> dict[str, Any]:
        return {
            "autocommit": True,
            "connect_timeout": self._connect_timeout,
            "options": f"-c lock_timeout={self._lock_timeout_ms}",
        }

    def _q(self, text: str) -> sql.Composed:
        """A statement with ``{s}`` replaced by the quoted schema (the only composed identifier)."""
        return sql.SQL(text).format(s=self._s)

    def _connect(self) -> "psycopg.Connection":
        try:
            return psycopg.connect(self._url, **self._connect_kwargs())
        except psycopg.OperationalError as exc:
            # Unreachable server, refused password, unknown role or database: libpq's reason.
            reason = " ".join(str(exc).split())
            raise StorageUnavailableError(f"cannot connect to {self.location}: {reason}") from None
        except psycopg.Error as exc:  # e.g. a malformed conninfo
            raise StorageError(f"cannot connect to {self.location}: {exc}") from None

    def _init_database(self) -> None:
        """Refuse a schema from the future before writing anything; else create the tables
        (under an advisory lock, so two processes opening a new database do not race)."""
        with self._connect() as conn, self._errors():
            if self._check_schema(conn) == SCHEMA_VERSION:
                return  # set up already: needs no CREATE privilege and takes no lock
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(self._schema, "init"),))
                exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (self._schema,)).fetchone()
                if not exists:
                    conn.execute(self._q("CREATE SCHEMA IF NOT EXISTS {s}"))
                for statement in _TABLES:  # an older layout gains the tables it lacked
                    conn.execute(self._q(statement))
                found = self._check_schema(conn)
                if found is None:
                    conn.execute(self._q("INSERT INTO {s}.membrain_schema (id, version) VALUES (1, %s)"),
                                 (SCHEMA_VERSION,))
                elif found < SCHEMA_VERSION:  # upgraded in place (schema 1: the change log)
                    conn.execute(self._q("UPDATE {s}.membrain_schema SET version = %s WHERE id = 1"),
                                 (SCHEMA_VERSION,))

    def _check_schema(self, conn: "psycopg.Connection") -> int | None:
        table = sql.Identifier(self._schema, "membrain_schema").as_string(conn)
        if _first(conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()) is None:
            return None
        row = conn.execute(self._q("SELECT version FROM {s}.membrain_schema WHERE id = 1")).fetchone()
        if row is None:
            return None
        if int(row[0]) > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"schema {self._schema!r} of {self.location} was written by a newer membrain (schema "
                f"{row[0]}; this one reads up to {SCHEMA_VERSION}); upgrade langchain-membrain to open it"
            )
        return int(row[0])

    # ------------------------------------------------------------- transactions
    @contextmanager
    def _errors(self) -> Iterator[None]:
        """psycopg errors as typed membrain errors."""
        try:
            yield
        except PoolTimeout as exc:
            raise StorageUnavailableError(f"no connection to {self.location} available: {exc}") from None
        except psycopg.OperationalError as exc:  # connection lost, lock timeout, server shutting down
            raise StorageUnavailableError(f"{self.location}: {' '.join(str(exc).split())}") from None
        except psycopg.Error as exc:
            raise StorageError(f"{self.location}: {' '.join(str(exc).split())}") from None

    @contextmanager
    def _pooled(self) -> Iterator["psycopg.Connection"]:
        if self._closed:
            raise StorageClosedError(f"{self!r} is closed")
        with self._errors(), self._pool.connection() as conn:
            yield conn

    @contextmanager
    def _transaction(self) -> Iterator["psycopg.Connection"]:
        """A transaction, or a savepoint inside the one this thread already holds, so that
        every write is atomic on its own even inside a namespace lock."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            with self._errors(), conn.transaction():
                yield conn
            return
        with self._pooled() as conn, conn.transaction():
            self._local.conn = conn
            try:
                yield conn
            finally:
                self._local.conn = None

    @contextmanager
    def _read(self, snapshot: bool = False) -> Iterator["psycopg.Connection"]:
        """A connection for reading: this thread's open transaction if any, else a pooled
        one, in a repeatable-read transaction when several statements must agree."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            with self._errors():
                yield conn
            return
        with self._pooled() as conn:
            if not snapshot:
                yield conn
                return
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                yield conn

    def _lock_namespace(self, conn: "psycopg.Connection", key: str) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(self._schema, "ns", key),))

    # --------------------------------------------------------------- namespaces
    def list_namespaces(self) -> list[Namespace]:
        with self._read() as conn:
            rows = conn.execute(self._q("SELECT ns FROM {s}.membrain_namespaces")).fetchall()
        return sorted(decode_namespace(r[0]) for r in rows)

    def namespaces_with_facts(self) -> list[Namespace]:
        with self._read() as conn:
            rows = conn.execute(self._q(
                "SELECT n.ns FROM {s}.membrain_namespaces n WHERE EXISTS "
                "(SELECT 1 FROM {s}.membrain_nodes d WHERE d.ns = n.ns AND d.kind = 'fact')")).fetchall()
        return sorted(decode_namespace(r[0]) for r in rows)

    def namespace_versions(self) -> dict[Namespace, int]:
        with self._read() as conn:
            rows = conn.execute(self._q("SELECT ns, version FROM {s}.membrain_namespaces")).fetchall()
        return {decode_namespace(ns): int(v) for ns, v in rows}

    def namespace_version(self, ns: Sequence[str]) -> int:
        key = encode_namespace(ns)
        with self._read() as conn:
            row = conn.execute(self._q("SELECT version FROM {s}.membrain_namespaces WHERE ns = %s"), (key,)).fetchone()
        return int(row[0]) if row else 0

    def namespace_head(self, ns: Sequence[str]) -> tuple[int, float, int | None] | None:
        with self._read() as conn:
            row = conn.execute(self._q("SELECT version, updated_at, dim FROM {s}.membrain_namespaces WHERE ns = %s"),
                               (encode_namespace(ns),)).fetchone()
        return None if row is None else (int(row[0]), float(row[1]), None if row[2] is None else int(row[2]))

    def load_rows(self, ns: Sequence[str]) -> tuple[list[dict[str, Any]], int | None, int] | None:
        key = encode_namespace(ns)
        with self._read(snapshot=True) as conn:
            head = conn.execute(self._q("SELECT version, dim FROM {s}.membrain_namespaces WHERE ns = %s"),
                                (key,)).fetchone()
            if head is None:
                return None
            # Binary transfer: bytea and jsonb arrive without hex/text parsing.
            with conn.cursor(binary=True) as cur:
                cur.execute(self._q(f"SELECT {_NODE_COLUMNS} FROM {{s}}.membrain_nodes WHERE ns = %s"), (key,))
                stored = cur.fetchall()
        rows = [decode_row(*r) for r in stored]
        return rows, (None if head[1] is None else int(head[1])), int(head[0])

    def changes_since(self, ns: Sequence[str], version: int) -> tuple[list[dict[str, Any]], list[str], int] | None:
        key = encode_namespace(ns)
        # One statement (one snapshot, one round trip): the head version beside each later
        # log entry; one row of NULL entry columns when nothing is logged after.
        columns = ", ".join("c." + c for c in _NODE_COLUMNS.split(", "))
        with self._read() as conn, conn.cursor(binary=True) as cur:
            cur.execute(self._q(f"SELECT n.version, c.version, c.op, {columns} FROM {{s}}.membrain_namespaces n "
                                "LEFT JOIN {s}.membrain_changes c ON c.ns = n.ns AND c.version > %s "
                                "WHERE n.ns = %s ORDER BY c.version"), (int(version), key))
            found = cur.fetchall()
        return merge_log_rows(found, version)

    def _log(self, conn: "psycopg.Connection", key: str, version: int, encoded: list[tuple],
             removed_ids: list[str]) -> None:
        """Record a write in the change log (same transaction) and drop entries past the
        retention; a write too large to log clears the log, so processes behind reload."""
        if len(encoded) + len(removed_ids) > self.log_max_rows:
            conn.execute(self._q("DELETE FROM {s}.membrain_changes WHERE ns = %s"), (key,))
            return
        entries = [(key, version, "upsert", *r) for r in encoded]
        entries += [(key, version, "remove", rid, *([None] * 8)) for rid in removed_ids]
        with conn.cursor() as cur:
            cur.executemany(self._q(_LOG), entries)
        if version > self.log_retention:
            conn.execute(self._q("DELETE FROM {s}.membrain_changes WHERE ns = %s AND version <= %s"),
                         (key, version - self.log_retention))

    def write(self, ns: Sequence[str], rows: Iterable[dict[str, Any]], removed: Iterable[str] = (), *,
              expected_version: int | None = None) -> int:
        key = encode_namespace(ns)
        encoded, removed_ids, dim = encode_rows(rows, removed)  # validate before the transaction
        for r in encoded:
            _no_nul(r[0], r[1], r[3], r[8])
        _no_nul(key, *removed_ids)
        with self._transaction() as conn:
            self._lock_namespace(conn, key)  # serialise with every other writer of this namespace
            head = conn.execute(self._q("SELECT version, dim FROM {s}.membrain_namespaces WHERE ns = %s"),
                                (key,)).fetchone()
            current, new_dim = check_write(ns, head, encoded, removed_ids, dim, expected_version)
            if head is not None and not encoded and not removed_ids:
                return current  # nothing changed: no version bump, so no process reloads for nothing
            with self._errors():
                if head is None:
                    # A namespace deleted earlier continues its version numbers after its
                    # reset entry: a version never names two different trees.
                    last = conn.execute(self._q("SELECT max(version) FROM {s}.membrain_changes WHERE ns = %s"),
                                        (key,)).fetchone()
                    current = int(_first(last) or 0)
                new = current + 1
                if encoded:
                    with conn.cursor() as cur:
                        cur.executemany(
                            self._q(
                                f"INSERT INTO {{s}}.membrain_nodes (ns, {_NODE_COLUMNS}) "
                                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb) "
                                "ON CONFLICT (ns, id) DO UPDATE SET parent = EXCLUDED.parent, kind = EXCLUDED.kind, "
                                "text = EXCLUDED.text, seq = EXCLUDED.seq, embedding = EXCLUDED.embedding, "
                                "created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at, "
                                "metadata = EXCLUDED.metadata"
                            ),
                            [(key, *r) for r in encoded],
                        )
                if removed_ids:
                    conn.execute(self._q("DELETE FROM {s}.membrain_nodes WHERE ns = %s AND id = ANY(%s)"),
                                 (key, removed_ids))
                self._log(conn, key, new, encoded, removed_ids)
                now = time.time()
                if head is None:
                    conn.execute(self._q("INSERT INTO {s}.membrain_namespaces (ns, version, dim, updated_at) "
                                         "VALUES (%s, %s, %s, %s)"), (key, new, dim, now))
                else:
                    conn.execute(self._q("UPDATE {s}.membrain_namespaces SET version = %s, dim = %s, updated_at = %s "
                                         "WHERE ns = %s"),
                                 (new, new_dim, now, key))
            return new

    @contextmanager
    def namespace_lock(self, ns: Sequence[str]) -> Iterator[None]:
        key = encode_namespace(ns)
        with self._transaction() as conn:
            with self._errors():
                self._lock_namespace(conn, key)
            yield

    def delete_namespace(self, ns: Sequence[str]) -> bool:
        key = encode_namespace(ns)
        with self._transaction() as conn, self._errors():
            self._lock_namespace(conn, key)
            head = conn.execute(self._q("SELECT version FROM {s}.membrain_namespaces WHERE ns = %s"),
                                (key,)).fetchone()
            if head is None:
                return False
            conn.execute(self._q("DELETE FROM {s}.membrain_nodes WHERE ns = %s"), (key,))
            conn.execute(self._q("DELETE FROM {s}.membrain_namespaces WHERE ns = %s"), (key,))
            conn.execute(self._q("DELETE FROM {s}.membrain_changes WHERE ns = %s"), (key,))
            conn.execute(self._q(_LOG), (key, int(head[0]) + 1, "reset", "", *([None] * 8)))
            return True

    # -------------------------------------------------------------- checkpoints
    def save_checkpoint(self, name: str, data: bytes, counters: dict[str, Any] | None = None) -> None:
        check_name(name)
        counters_json = check_checkpoint(data, counters)
        _no_nul(name, counters_json)
        with self._transaction() as conn, self._errors():
            conn.execute(
                self._q("INSERT INTO {s}.membrain_checkpoints AS c (name, data, counters, version, updated_at) "
                        "VALUES (%s, %s, %s::jsonb, 1, %s) ON CONFLICT (name) DO UPDATE SET data = EXCLUDED.data, "
                        "counters = EXCLUDED.counters, version = c.version + 1, updated_at = EXCLUDED.updated_at"),
                (name, bytes(data), counters_json, time.time()),
            )

    def load_checkpoint(self, name: str) -> tuple[bytes, dict[str, Any]] | None:
        check_name(name)
        _no_nul(name)
        with self._read() as conn:
            row = conn.execute(self._q("SELECT data, counters FROM {s}.membrain_checkpoints WHERE name = %s"),
                               (name,)).fetchone()
        if row is None:
            return None
        counters = row[1] if isinstance(row[1], dict) else json.loads(row[1])
        return bytes(row[0]), counters

    def checkpoint_version(self, name: str) -> int:
        check_name(name)
        _no_nul(name)
        with self._read() as conn:
            row = conn.execute(self._q("SELECT version FROM {s}.membrain_checkpoints WHERE name = %s"),
                               (name,)).fetchone()
        return int(row[0]) if row else 0

    def delete_checkpoint(self, name: str) -> bool:
        check_name(name)
        _no_nul(name)
        with self._transaction() as conn, self._errors():
            cur = conn.execute(self._q("DELETE FROM {s}.membrain_checkpoints WHERE name = %s"), (name,))
            return cur.rowcount > 0

    def try_acquire_trainer(self, name: str) -> bool:
        check_name(name, "trainer name")
        if self._closed:
            raise StorageClosedError(f"{self!r} is closed")
        with self._trainers_lock:
            if name in self._trainers:
                return True
            # A session lock on a connection of its own: it lives exactly as long as that
            # connection, so a dead holder's lock is freed by the server.
            conn = self._connect()
            try:
                with self._errors():
                    got = _first(conn.execute("SELECT pg_try_advisory_lock(%s)",
                                              (lock_key(self._schema, "trainer", name),)).fetchone())
            except BaseException:
                conn.close()
                raise
            if not got:
                conn.close()
                return False
            self._trainers[name] = conn
            return True

    def release_trainer(self, name: str) -> None:
        with self._trainers_lock:
            conn = self._trainers.pop(name, None)
        if conn is not None:
            # Unlock before closing: the server frees a closed session's locks only when its
            # backend has exited, a moment after close() returns, and another process trying
            # the lock in that moment would be refused. Closing still frees them if this fails.
            try:
                conn.execute("SELECT pg_advisory_unlock_all()")
            except Exception:  # noqa: BLE001 - a dead connection: its session is gone anyway
                pass
            conn.close()

    # ----------------------------------------------------------------- lifetime
    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for name in list(self._trainers):
            self.release_trainer(name)
        self._pool.close()


def _first(row: tuple[Any, ...] | None) -> Any:
    """The first column of a query that always returns one row (an aggregate, a function)."""
    assert row is not None
    return row[0]
