"""Saved search indexes: a namespace's :class:`~.retrieval.FactIndex` written
to a local file, so that a new process searches a large namespace without indexing every
fact again.

What is saved: everything the index holds (slots, terms, fields, posting lists, session
orders, speakers, dates, former versions, the dense rows and moment sums) and the HNSW
graph as hnswlib's state (its large arrays raw, each with its CRC32), so that a restored
index searches in fast mode from its first query as the saving process did. An index
saved before its graph was built (a bulk load's, or one below ``ann_min_facts``) builds it
as a bulk-loaded one does (dense.py, "Bulk load"). Where: one file per namespace, in the
directory ``<database file>.index`` beside a SQLite file, or in a folder of its own per
database under ``MembrainMemory(index_dir=...)`` (PostgreSQL saves only there). When: at
:meth:`~.memory.MembrainMemory.close` (and so at interpreter exit), for each loaded
namespace of at least :data:`MIN_ENTRIES` indexed entries whose index changed since it was
loaded or saved. A process killed before it closes leaves the file it found.

Trust: a saved index is used only when its **fingerprint** matches the namespace just read
from storage: the stored version, and the ids, kinds, texts and update times of every
indexed entry (facts, raw and ignored items, in load order), hashed; and when it was
written with the same retrieval configuration and file format. When the namespace's tree
was itself read from a saved tree (tree_cache.py), an index saved at the same stored head
(version, time of the last write, dimension) is of the same stored namespace and is used
without computing the fingerprint. Anything else (another
process wrote the namespace since, a file that is missing, truncated, corrupt or of another
format) and the namespace is indexed from its rows as before, the file left to be replaced
at the next save: never an error, never a lost memory (the index is derived from the
stored rows; nothing is stored only here). The file is read with an unpickler that
builds only plain containers, ``Counter`` and numpy arrays, never an arbitrary object.

A restored index is the one the saving process searched with, so a restart searches as
that process did; a namespace indexed from its rows orders a fact moved to another session
by an update by its creation time (tests/test_cold_open.py), which can order tied scores
differently. In-memory storage, and PostgreSQL without ``index_dir``, save none.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import threading
import zlib
from typing import Any, Callable, Sequence

import numpy as np

from ..index.facts import FactIndex
from ..tree.nodes import Node
from ..tree.tree import MembrainTree
from . import mapped, tree_cache

#: File format; a file of another is ignored (and replaced at the next save). 2: with the
#: HNSW graph; 3: the raw arrays aligned and read mapped (mapped.py).
FORMAT = 3
MAGIC = b"MBRNIDX\n"
#: Namespaces with fewer indexed entries are indexed from their rows at load (a few ms)
#: and never saved.
MIN_ENTRIES = 2000
#: The HNSW graph's arrays (hnswlib's state, int8 bytes) written raw after the rows, each
#: with its CRC32, rather than copied through the pickle: nearly all of the graph's bytes.
_GRAPH_RAW = ("data_level0", "link_lists")

# The only globals a saved index's pickle may name (numpy 1 and 2 spell them differently).
_ALLOWED = {("collections", "Counter"), ("numpy", "dtype"), ("numpy", "ndarray"),
            ("numpy._core.numeric", "_frombuffer"), ("numpy.core.numeric", "_frombuffer"),
            ("numpy._core.multiarray", "scalar"), ("numpy.core.multiarray", "scalar"),
            ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "_reconstruct")}


def fingerprint(version: int, entries: Sequence[Node]) -> str:
    """What a saved index must match: the namespace's stored version and its indexed
    entries' ids, kinds, texts and update times, in order (module docstring)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{FORMAT}\x1f{int(version)}\x1f{len(entries)}\x1e".encode())
    for part in ("\x1f".join(n.id for n in entries), "\x1f".join(n.kind for n in entries),
                 "\x1f".join(n.text for n in entries)):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\x1e")
    h.update(np.array([n.updated_at for n in entries], dtype=np.float64).tobytes())
    return h.hexdigest()


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"a saved index does not name {module}.{name}")
        return super().find_class(module, name)


def _identity(storage: Any) -> str:
    """One database, whatever process opens it: a SQLite file's path, a PostgreSQL URL (its
    password left out) and schema."""
    from .sqlite import SQLiteStorage

    if isinstance(storage, SQLiteStorage):
        return "sqlite:" + os.path.abspath(storage.location)
    return f"{type(storage).__name__}:{storage.location}:{getattr(storage, 'schema', '')}"


def _config_key(index: FactIndex) -> str:
    return repr(index.config)


class IndexCache:
    """The saved indexes and trees of one database (module docstring).

    Args:
        directory: where the files are (created at the first save).
        writable: False for a database opened read-only: saved files are read, none written.
        head: ``ns -> Stamp | None``, the namespace's stored head (``Storage.namespace_head``),
            which a saved tree must match; None: no tree is saved or read.
    """

    def __init__(self, directory: str, *, writable: bool = True,
                 head: Callable[[Sequence[str]], tree_cache.Stamp | None] | None = None):
        self.directory = directory
        self.writable = writable
        self.head = head

    @classmethod
    def for_storage(cls, storage: Any, directory: str | os.PathLike[str] | None = None) -> IndexCache | None:
        """Where ``storage`` saves its namespaces' indexes and trees: under ``directory``
        when given, in a folder of its own per database (several may share ``directory``);
        else beside a SQLite database file. None for storage in memory, and for PostgreSQL
        without ``directory``."""
        from .sqlite import SQLiteStorage

        if storage is None or (isinstance(storage, SQLiteStorage) and storage.location in ("", ":memory:")):
            return None
        local = isinstance(storage, SQLiteStorage)
        if directory is None and not local:
            return None
        where = os.path.abspath(storage.location) + ".index" if directory is None else os.path.join(
            os.path.abspath(directory), hashlib.blake2b(_identity(storage).encode("utf-8"), digest_size=12).hexdigest())
        return cls(where, writable=not getattr(storage, "read_only", False), head=storage.namespace_head)

    def path(self, ns: Sequence[str], suffix: str = ".idx") -> str:
        """The namespace's saved index (``.idx``) or saved tree (``.tree``)."""
        from .base import encode_namespace

        name = hashlib.blake2b(encode_namespace(ns).encode("utf-8"), digest_size=16).hexdigest()
        return os.path.join(self.directory, name + suffix)

    def stamp(self, ns: Sequence[str]) -> tree_cache.Stamp | None:
        """The namespace's stored head, which a saved tree must match (tree_cache.py); None
        without ``head`` or when it cannot be read (no tree is then saved or read)."""
        try:
            return None if self.head is None else self.head(ns)
        except Exception:  # noqa: BLE001 - a storage error here reads the rows, which say what is wrong
            return None

    # ------------------------------------------------------------------ read
    def load(self, ns: Sequence[str], fp: str | Callable[[], str], new_index: Callable[[], FactIndex],
             head: tree_cache.Stamp | None = None) -> FactIndex | None:
        """The namespace's saved index if its fingerprint is ``fp`` (or ``fp()``: computed
        only when needed) and it reads whole; None otherwise (missing, stale, corrupt,
        another configuration or format). ``head``: the namespace's stored head when its
        tree was just read from a saved tree of that head (tree_cache.py); an index saved
        at the same head is of the same stored namespace, its fingerprint not computed."""
        try:
            with open(self.path(ns), "rb") as f:
                return self._read(f, fp, new_index, head)
        except Exception:  # noqa: BLE001 - any unreadable file is rebuilt, never an error
            return None

    @staticmethod
    def _read(f: io.BufferedReader, fp: str | Callable[[], str], new_index: Callable[[], FactIndex],
              stored: tree_cache.Stamp | None) -> FactIndex | None:
        if f.read(len(MAGIC)) != MAGIC:
            return None
        head = json.loads(f.read(int.from_bytes(f.read(8), "little")).decode("utf-8"))
        index = new_index()
        if head.get("format") != FORMAT or head.get("config") != _config_key(index):
            return None
        if (stored is None or head.get("stamp") != list(stored)) and \
                head.get("fingerprint") != (fp if isinstance(fp, str) else fp()):
            return None
        blob = f.read(head["pickle_bytes"])
        if len(blob) != head["pickle_bytes"] or zlib.crc32(blob) != head["pickle_crc"]:
            return None
        state = _Unpickler(io.BytesIO(blob)).load()
        cap, rows, dim = int(head["capacity"]), int(head["rows"]), head["dim"]
        dense = state["_dense"]
        if len(state["_ids"]) != rows or dense["_has_emb"].size != cap or dense["dim"] != dim:
            return None
        # The saved rows only, mapped: the first write past them gives the matrix its spare
        # capacity (DenseIndex.set).
        emb = np.zeros((cap, 0), dtype=np.float32) if not dim else \
            mapped.read_array(f, (rows, dim), np.float32, head["emb_crc"])
        if emb is None:
            return None
        dense["_emb"] = emb
        graph = dense["_graph"]
        for name, dtype, size, crc in head["graph_arrays"]:  # the graph's large arrays, raw
            if graph is None or name not in _GRAPH_RAW or dtype != "int8":
                return None
            graph[name] = mapped.read_array(f, (int(size),), np.int8, crc)
            if graph[name] is None:
                return None
        if f.read(1):
            return None
        index.set_state(state)
        return index

    def load_tree(self, ns: Sequence[str], head: tree_cache.Stamp,
                  clock: Callable[[], float]) -> tuple[MembrainTree, tree_cache.Stamp] | None:
        """(tree, the head it was saved at): the namespace's saved tree (tree_cache.py) if it
        was saved at the stored head ``head`` or at an earlier version, and reads whole;
        None otherwise."""
        try:
            with open(self.path(ns, ".tree"), "rb") as f:
                return tree_cache.decode(f, head, clock)
        except Exception:  # noqa: BLE001 - any unreadable file is rebuilt, never an error
            return None

    # ------------------------------------------------------------------ write
    def save(self, ns: Sequence[str], index: FactIndex, fp: str, head: tree_cache.Stamp | None = None) -> bool:
        """Write the namespace's index with its fingerprint ``fp`` and, when known, the
        stored head ``head`` it reflects (atomically: a reader sees the old file or the new
        one). False, and nothing written, when it cannot be."""
        def parts() -> list[bytes | memoryview]:
            state = index.state()
            rows, dense = len(state["_ids"]), state["_dense"]
            emb = np.ascontiguousarray(dense.pop("_emb")[:rows])
            graph = dense["_graph"]
            raw = [(name, np.ascontiguousarray(graph.pop(name))) for name in _GRAPH_RAW] if graph else []
            blob = pickle.dumps(state, protocol=5)
            meta = json.dumps({"format": FORMAT, "fingerprint": fp, "config": _config_key(index),
                               "stamp": None if head is None else list(head),
                               "pickle_bytes": len(blob), "pickle_crc": zlib.crc32(blob), "rows": rows,
                               "capacity": int(dense["_has_emb"].size), "dim": dense["dim"],
                               "emb_crc": mapped.crc(emb),
                               "graph_arrays": [[name, str(a.dtype), a.size, mapped.crc(a)]
                                                for name, a in raw]}).encode("utf-8")
            return mapped.laid_out([MAGIC + len(meta).to_bytes(8, "little") + meta, blob],
                                   [emb] * bool(dense["dim"]) + [a for _, a in raw])

        return self._write(self.path(ns), parts)

    def save_tree(self, ns: Sequence[str], tree: MembrainTree, head: tree_cache.Stamp) -> bool:
        """Write the namespace's tree, stored at head ``head`` (tree_cache.py), atomically;
        False, and nothing written, when it cannot be (a tree with unwritten changes)."""
        return self._write(self.path(ns, ".tree"), lambda: tree_cache.encode(tree, head))

    def _write(self, path: str, parts: Callable[[], list[bytes | memoryview]]) -> bool:
        """Write ``parts()`` to ``path`` through a temporary file, fsynced and renamed over
        it: a reader sees the old file or the new one. False, and nothing written, on error."""
        if not self.writable:
            return False
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            os.makedirs(self.directory, exist_ok=True)
            data = parts()
            with open(tmp, "wb") as f:
                for part in data:
                    f.write(part)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
            return True
        except Exception:  # noqa: BLE001 - a cache that cannot be written is rebuilt next time
            try:
                os.remove(tmp)
            except OSError:
                pass
            return False


__all__ = ["IndexCache", "fingerprint", "MIN_ENTRIES"]
