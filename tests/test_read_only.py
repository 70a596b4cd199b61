"""A database that may only be read: opened read-only, searched, never written.

Two ways in: ``open_storage(path, read_only=True)`` on any file, and a file in a directory
this process cannot write (``chmod``), which opens read-only by itself. Tests run as root
here, and root writes through ``chmod``: that test then drops to the ``nobody`` user in a
forked child (a real read-only directory for it), and skips where that is not allowed.
The embeddings are the instant bag-of-words ones of helpers.py.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import sqlite3
import sys
import tempfile
import traceback
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from helpers import WordEmbeddings  # noqa: E402

from langchain_membrain import MembrainMemory, MembrainStore  # noqa: E402
from langchain_membrain.cli import main as cli_main  # noqa: E402
from langchain_membrain.errors import ReadOnlyError, StorageError  # noqa: E402
from langchain_membrain.storage import NotADatabaseError, StorageUnavailableError, open_storage  # noqa: E402
from langchain_membrain.tree.export import tree_to_html, tree_to_json  # noqa: E402

NS = ("u", "maya")


def memory(storage, **kw) -> MembrainMemory:
    kw.setdefault("background", False)
    return MembrainMemory(storage, embeddings=WordEmbeddings(), relabel=False, prior=False, operations=False, **kw)


def fill(path: str) -> dict[str, str]:
    """A database with two current facts, a deleted one and a model checkpoint."""
    with memory(path) as mem:
        keys = {"bees": mem.add("I keep bees on the allotment.", namespace=NS),
                "van": mem.add("I drive a red van to work.", namespace=NS),
                "cat": mem.add("My cat is called Miso.", namespace=NS)}
        assert mem.delete(keys["cat"], namespace=NS)
    return keys


def digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_read_only_storage_reads_everything_and_refuses_every_write(tmp_path: Path) -> None:
    path = str(tmp_path / "m.db")
    keys = fill(path)
    with memory(path) as mem:
        expected = [(r.key, r.score) for r in mem.search("bees allotment", namespace=NS)]
    before, checkpoint = digest(path), sqlite3.connect(path).execute(
        "SELECT version FROM membrain_checkpoints WHERE name = 'models'").fetchone()
    storage = open_storage(path, read_only=True)
    assert storage.read_only and not storage.try_acquire_trainer("models")
    for write in (lambda: storage.write(NS, [], ["x"]), lambda: storage.save_checkpoint("models", b"x"),
                  lambda: storage.delete_namespace(NS), lambda: storage.delete_checkpoint("models")):
        with pytest.raises(ReadOnlyError):
            write()
    with memory(storage, background=True) as mem:  # a trainer thread that must never write
        assert mem.read_only
        assert [(r.key, r.score) for r in mem.search("bees allotment", namespace=NS)] == expected
        assert mem.get(keys["van"], namespace=NS).text == "I drive a red van to work."
        assert [v.status for v in mem.history(keys["cat"], namespace=NS)] == ["deleted"]
        assert json.dumps(tree_to_json(mem.tree(NS))) and "red van" in tree_to_html(mem.tree(NS))
        assert mem.stats()["facts"] == 2
        writes = [lambda: mem.add("I also keep hens.", namespace=NS),
                  lambda: mem.add_many(["a", "b"], namespace=NS),
                  lambda: mem.put(NS, keys["van"], {"content": "I sold the van."}),
                  lambda: mem.delete(keys["van"], namespace=NS),
                  lambda: mem.purge_history(NS),
                  lambda: MembrainStore(mem).put(NS, "k", {"content": "via the store"})]
        for write in writes:
            with pytest.raises(ReadOnlyError, match="read-only"):
                write()
        mem.flush()  # no checkpoint to save: the trainer never started
        assert mem.stats().process.worker_errors == 0 and mem.stats().process.inserts == 0
        assert mem.get(keys["van"], namespace=NS).text == "I drive a red van to work."
    assert digest(path) == before  # not a byte written
    assert not list(tmp_path.glob("*.lock"))
    assert sqlite3.connect(path).execute(
        "SELECT version FROM membrain_checkpoints WHERE name = 'models'").fetchone() == checkpoint
    with memory(path) as mem:  # and it is still a writable memory where it is writable
        assert not mem.read_only and mem.add("I also keep hens.", namespace=NS)


def test_read_only_refuses_what_it_cannot_read(tmp_path: Path) -> None:
    with pytest.raises(StorageUnavailableError, match="no such file"):
        open_storage(str(tmp_path / "missing.db"), read_only=True)
    assert not (tmp_path / "missing.db").exists()
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    before = digest(str(other))
    with pytest.raises(NotADatabaseError, match="holds no membrain memory"):
        open_storage(str(other), read_only=True)
    assert digest(str(other)) == before
    with pytest.raises(StorageError):
        open_storage(None, read_only=True)


def _read(path: str, keys: dict[str, str]) -> dict:
    """What a reader gets from the database (errors reported, not raised)."""
    result: dict = {}
    try:
        assert not os.access(path, os.W_OK) and not os.access(os.path.dirname(path), os.W_OK)
        with memory(path, background=True) as mem:
            result["read_only"] = mem.read_only
            result["search"] = [r.key for r in mem.search("bees allotment", namespace=NS)]
            result["get"] = mem.get(keys["van"], namespace=NS).text
            result["history"] = [v.status for v in mem.history(keys["cat"], namespace=NS)]
            try:
                mem.add("I also keep hens.", namespace=NS)
            except ReadOnlyError as exc:
                result["add"] = type(exc).__name__
        result["export"] = cli_main(["export", "--db", path, "--ns", "u/maya", "--format", "json",
                                     "--output", os.devnull])
    except BaseException:  # noqa: BLE001 - reported to the test, which fails
        result["error"] = traceback.format_exc()
    return result


def _read_as_nobody(path: str, keys: dict[str, str], out) -> None:
    """In a forked child: drop root for the ``nobody`` user, then :func:`_read`."""
    try:
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)
    except OSError as exc:
        out.send({"skip": f"cannot drop root privileges to test a read-only directory: {exc}"})
        return
    out.send(_read(path, keys))


def test_a_database_in_a_read_only_directory_opens_read_only_by_itself() -> None:
    """The database file 0444 in a 0555 directory: SQLite can create neither its -wal nor
    its -shm file there. It opens read-only (it used to be "not an SQLite database (unable
    to open database file)"), is searched, exported, and refuses an add with ReadOnlyError."""
    if sys.platform == "win32" or not hasattr(os, "fork"):
        pytest.skip("POSIX permissions and fork")
    top = tempfile.mkdtemp(prefix="membrain-ro-")  # not under pytest's root-only tmp folder
    folder = os.path.join(top, "db")
    os.makedirs(folder)
    path = os.path.join(folder, "m.db")
    try:
        keys = fill(path)
        assert sorted(os.listdir(folder)) == ["m.db"]  # closed cleanly: no -wal, no -shm
        # The same export where it is writable (this also loads every module the child needs:
        # once it is nobody, it cannot read the interpreter's root-only folders).
        assert cli_main(["export", "--db", path, "--ns", "u/maya", "--format", "json", "--output", os.devnull]) == 0
        before = digest(path)
        os.chmod(top, 0o755)
        os.chmod(path, 0o444)
        os.chmod(folder, 0o555)
        if os.geteuid() == 0:  # root writes through chmod: read as nobody, in a child
            ctx = multiprocessing.get_context("fork")
            mine, theirs = ctx.Pipe(duplex=False)
            child = ctx.Process(target=_read_as_nobody, args=(path, keys, theirs))
            child.start()
            assert mine.poll(120), "the child did not answer"
            result = mine.recv()
            child.join(30)
            if "skip" in result:
                pytest.skip(result["skip"])
        else:
            result = _read(path, keys)
        assert "error" not in result, result.get("error")
        assert result == {"read_only": True, "search": [keys["bees"], keys["van"]],
                          "get": "I drive a red van to work.", "history": ["deleted"], "add": "ReadOnlyError",
                          "export": 0}
        assert digest(path) == before and sorted(os.listdir(folder)) == ["m.db"]
    finally:
        os.chmod(folder, 0o755)
        shutil.rmtree(top, ignore_errors=True)
