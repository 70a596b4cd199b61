"""PostgreSQL storage: the shared suite plus PostgreSQL's own cases, on a real server.

Runs against ``$MEMBRAIN_TEST_POSTGRES_URL``, which conftest.py points at a server of its own
(pgserver, the ``dev`` extra) when the environment sets none. No server at all: every test
here skips, saying so. Set but the server is unreachable: every test fails. Each test works
in a schema of its own, dropped afterwards.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from urllib.parse import urlencode

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))  # the shared suite lives next to this file

from helpers import NO_POSTGRES  # noqa: E402
from storage_helpers.suite import *  # noqa: E402,F401,F403  (the shared tests)
from storage_helpers.suite import DIM, NS, Backend, snapshot  # noqa: E402

from langchain_membrain.errors import SchemaVersionError, StorageError  # noqa: E402
from langchain_membrain.storage import (  # noqa: E402
    SCHEMA_VERSION,
    StorageUnavailableError,
    open_storage,
)
from langchain_membrain.tree.tree import MembrainTree  # noqa: E402

URL = os.environ.get("MEMBRAIN_TEST_POSTGRES_URL")

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not URL, reason=NO_POSTGRES),
]


def admin():
    """A plain psycopg connection to the test server; fails the test if it is unreachable."""
    import psycopg

    try:
        return psycopg.connect(URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as exc:
        pytest.fail(f"MEMBRAIN_TEST_POSTGRES_URL is set but the server cannot be reached: {exc}")


@pytest.fixture
def schema():
    name = f"membrain_test_{uuid.uuid4().hex[:12]}"
    yield name
    with admin() as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def storage_backend(schema: str, tmp_path):
    admin().close()  # unreachable server: fail here, loudly

    def raw(statement: str, params: tuple) -> list:
        with admin() as conn:
            conn.execute(f'SET search_path TO "{schema}"')
            cur = conn.execute(statement.replace("?", "%s"), params)
            return cur.fetchall() if cur.description else []

    backend = Backend(open=lambda **kw: open_storage(URL, schema=schema, **kw), raw=raw,
                      worker_args=["--target", URL, "--schema", schema], concurrent_facts=200,
                      scratch=str(tmp_path))
    yield backend
    for storage in backend.opened:
        storage.close()


def small_tree() -> MembrainTree:
    tree = MembrainTree("s", dim=DIM)
    tree.add_fact("root", "a fact", embedding=np.ones(DIM))
    return tree


def test_an_unreachable_server_fails_fast() -> None:
    start = time.monotonic()
    with pytest.raises(StorageUnavailableError, match="cannot connect") as info:
        open_storage("postgresql://postgres:s3cret-pw@127.0.0.1:1/test", connect_timeout=2)
    # the behaviour under test is a bound: an error within connect_timeout (2 s), not a hang;
    # 10 s is generous on purpose (a refused port fails at once)
    assert time.monotonic() - start < 10
    assert "s3cret-pw" not in str(info.value)  # URLs in messages hide the password


@pytest.mark.parametrize("change", ["role", "database", "password"])
def test_refused_credentials_give_a_typed_error(change: str, schema: str) -> None:
    """An unknown role or database is refused by the server. (The CI server trusts local
    connections, so a wrong password cannot be refused there; on a server that checks
    passwords libpq's "password authentication failed" takes the same path.)"""
    import psycopg

    info = psycopg.conninfo.conninfo_to_dict(URL)
    if change == "role":
        info["user"] = f"no_such_role_{uuid.uuid4().hex[:8]}"
    elif change == "database":
        info["dbname"] = f"no_such_db_{uuid.uuid4().hex[:8]}"
    else:
        info["password"] = "certainly-wrong"
    auth = info.get("user", "postgres") + (f":{info['password']}" if info.get("password") else "")
    where = urlencode({key: info[key] for key in ("host", "port") if key in info})  # a socket folder too
    bad = f"postgresql://{auth}@/{info.get('dbname', '')}?{where}"
    if change == "password":
        try:  # trust auth accepts any password: then the store simply opens
            open_storage(bad, schema=schema).close()
        except StorageUnavailableError as exc:
            assert "password" in str(exc)
            assert "certainly-wrong" not in str(exc)
        return
    with pytest.raises(StorageUnavailableError, match="does not exist"):
        open_storage(bad, schema=schema)


def test_a_schema_from_the_future_is_refused_untouched(schema: str) -> None:
    with open_storage(URL, schema=schema) as storage:
        storage.write(NS, *small_tree().drain_changes())
    with admin() as conn:
        conn.execute(f'UPDATE "{schema}".membrain_schema SET version = %s', (SCHEMA_VERSION + 1,))
    with pytest.raises(SchemaVersionError, match="newer membrain"):
        open_storage(URL, schema=schema)
    with admin() as conn:
        assert conn.execute(f'SELECT count(*) FROM "{schema}".membrain_nodes').fetchone()[0] == 2
        assert conn.execute(f'SELECT version FROM "{schema}".membrain_schema').fetchone()[0] == SCHEMA_VERSION + 1


def test_schemas_are_independent_and_names_are_checked(schema: str) -> None:
    other = f"{schema}_b"
    try:
        with open_storage(URL, schema=schema) as a, open_storage(URL, schema=other) as b:
            a.write(NS, *small_tree().drain_changes())
            assert b.list_namespaces() == []
            # Locks are per schema too: holding one schema's lock does not block the other.
            with a.namespace_lock(NS):
                b.write(NS, *small_tree().drain_changes())
            assert snapshot(b)[1] == 1
    finally:
        with admin() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{other}" CASCADE')
    for bad in ["x; DROP TABLE y", "1abc", "", 'a"b']:
        with pytest.raises(StorageError, match="identifier"):
            open_storage(URL, schema=bad)


def test_nul_characters_are_refused_before_writing(schema: str) -> None:
    with open_storage(URL, schema=schema) as storage:
        tree = small_tree()
        storage.write(NS, *tree.drain_changes())
        before = snapshot(storage)
        for row in (dict(tree.node_row("root"), text="a\x00b"),
                    dict(tree.node_row("root"), metadata={"k": "a\x00b"})):
            with pytest.raises(StorageError, match="U\\+0000"):
                storage.write(NS, [row], [])
        assert snapshot(storage) == before


def test_namespace_lock_serialises_other_writers_and_times_out(schema: str) -> None:
    holder = open_storage(URL, schema=schema)
    waiter = open_storage(URL, schema=schema, lock_timeout=0.3)
    try:
        holder.write(NS, *small_tree().drain_changes())
        with holder.namespace_lock(NS):
            with pytest.raises(StorageUnavailableError, match="lock"):
                waiter.write(NS, [small_tree().node_row("root")], [])
            waiter.write(("elsewhere",), *small_tree().drain_changes())  # other namespaces are free
            assert waiter.namespace_version(NS) == 1  # readers never wait
        assert waiter.write(NS, [small_tree().node_row("root")], []) == 2
    finally:
        holder.close()
        waiter.close()
