"""Saved trees: a large namespace's :class:`~.tree.MembrainTree` written beside
its SQLite file with its saved search index (index_cache.py), so that a new process opens
it without reading and decoding every row and rebuilding the tree from them.

What is saved: the tree as it is (its nodes, their adjacency, the archive, the subtree
sums), pickled, the embeddings of its nodes written raw as one float32 matrix after the
pickle (read back mapped from the file, mapped.py, as that matrix's rows, as a tree built
from rows holds them), each part with its CRC32. The tree's clock is not saved: the loading
process gives its own.

Trust: a saved tree is used as it is only when its **stamp** matches the namespace's stored
head, read by one query that reads no node: the namespace's version, the time of its last
write and its dimension (``Storage.namespace_head``). A tree saved at an earlier version is
used when the namespace's change log reaches back to it (``Storage.changes_since``): the
writes since are applied to it as a running process applies another's (forest.py). Every
write to a namespace bumps its version in the transaction that writes its rows, and a
namespace deleted and written again continues its version numbers (storage/base.py), so any
write since the save (this process's, another's, one whose process crashed before closing)
is seen: the file is brought up to date from the log, or not used where the log does not
reach back. Such a file, or a missing, truncated or corrupt one, or one of another format,
is never trusted: the namespace is read from its rows as before, and a new file written at
close. The file is read with an unpickler that builds only the tree's own classes, its graph
(a networkx ``DiGraph``) of plain dicts, plain containers and numpy arrays.
"""

from __future__ import annotations

import io
import json
import pickle
import sys
import zlib
from typing import Any, Callable

import numpy as np

from ..tree.cow import CowGraph
from ..tree.nodes import Node
from ..tree.tree import MembrainTree
from . import mapped

#: File format; a file of another is ignored (and replaced at the next save). 2: the nodes
#: pickled as their constructor's arguments, the vectors aligned and read mapped (mapped.py).
FORMAT = 2
MAGIC = b"MBRNTRE\n"

# The only globals a saved tree's pickle may name (numpy 1 and 2 spell them differently).
_ALLOWED = {("langchain_membrain.tree.tree", "MembrainTree"), ("langchain_membrain.tree.nodes", "Node"),
            ("langchain_membrain.storage.tree_cache", "_digraph"), ("langchain_membrain.storage.tree_cache", "_clock"),
            ("langchain_membrain.storage.tree_cache", "_row"), ("numpy", "dtype"), ("numpy", "ndarray"),
            ("numpy._core.numeric", "_frombuffer"), ("numpy.core.numeric", "_frombuffer"),
            ("numpy._core.multiarray", "scalar"), ("numpy.core.multiarray", "scalar"),
            ("numpy._core.multiarray", "_reconstruct"), ("numpy.core.multiarray", "_reconstruct")}

#: What a saved tree must match: (version, time of the last write, dimension) of the
#: namespace's stored head (module docstring).
Stamp = tuple[int, float, "int | None"]


def _digraph(attrs: dict[str, Any], nodes: dict[str, Any], succ: dict[str, Any], pred: dict[str, Any]) -> CowGraph:
    """A tree's graph of these attribute, node, successor and predecessor dicts (networkx's
    own fields; its cached views are not saved), sharing nothing with another graph."""
    if not all(type(d) is dict for d in (attrs, nodes, succ, pred)):
        raise pickle.UnpicklingError("a saved tree's graph is not made of dicts")
    graph = CowGraph()
    graph.graph, graph._node, graph._succ, graph._pred = attrs, nodes, succ, pred
    graph._adj = succ
    return graph


class _Pickler(pickle.Pickler):
    """Pickles a tree with its clock left out (:func:`_clock`), its graph as its dicts
    (:func:`_digraph`) and its nodes' embeddings collected into :attr:`vectors` (written
    raw), each pickled as its row (:func:`_row`). A ``reducer_override`` rather than a
    ``persistent_id``: the pickler calls it for objects other than plain containers,
    strings and numbers only, not for each of the tree's millions of objects."""

    def __init__(self, file: io.BytesIO, tree: MembrainTree):
        super().__init__(file, protocol=5)
        self.clock, self.dim = tree.clock, tree.dim
        self.vectors: list[np.ndarray] = []
        self._seen: dict[int, int] = {}

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is Node:
            return Node, _node_args(obj)
        if type(obj) is CowGraph:
            return _digraph, (obj.graph, obj._node, obj._succ, obj._pred)
        if obj is self.clock:
            return _clock, ()
        if type(obj) is np.ndarray and obj.dtype == np.float32 and obj.ndim == 1 and obj.size == self.dim:
            row = self._seen.get(id(obj))
            if row is None:
                row = self._seen[id(obj)] = len(self.vectors)
                self.vectors.append(obj)
            return _row, (row,)
        return NotImplemented


def _node_args(node: Node) -> tuple[Any, ...]:
    """``Node``'s constructor arguments for ``node``: read back by one call of the
    constructor rather than a dataclass's field-by-field ``__setstate__``. The kind and the
    metadata's keys (the same few words on every node) are interned, and a value's string
    equal to the text is the text itself, so that the pickle writes each once and the reader
    makes each once."""
    n, intern = node, sys.intern
    metadata = {intern(k) if type(k) is str else k: v for k, v in n.metadata.items()}
    value = metadata.get("value")
    if type(value) is dict:
        metadata["value"] = {intern(k) if type(k) is str else k: n.text if type(v) is str and v == n.text else v
                             for k, v in value.items()}
    return (n.id, intern(n.kind), n.text, n.embedding, n.created_at, n.updated_at, metadata, n.emb_sum,
            n.emb_count, n.n_facts, n.seq)


def _clock() -> None:
    """Named in a saved tree where its clock was; the reader returns its own (never called)."""
    raise pickle.UnpicklingError("a saved tree is read by tree_cache.decode only")


def _row(row: int) -> None:
    """Named in a saved tree for a node's embedding, the ``row``-th of the vectors after the
    pickle; the reader returns that row (never called)."""
    raise pickle.UnpicklingError("a saved tree is read by tree_cache.decode only")


class _Unpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, clock: Callable[[], float], vectors: np.ndarray):
        super().__init__(file)
        self.clock, self.vectors = clock, vectors

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"a saved tree does not name {module}.{name}")
        if module == __name__ and name == "_clock":
            return lambda: self.clock
        if module == __name__ and name == "_row":
            return self._vector
        return super().find_class(module, name)

    def _vector(self, row: Any) -> np.ndarray:
        if type(row) is not int or not 0 <= row < len(self.vectors):
            raise pickle.UnpicklingError("a saved tree names an unknown vector")
        return self.vectors[row]


def encode(tree: MembrainTree, head: Stamp) -> list[bytes | memoryview]:
    """The file's parts for ``tree`` at the stored head ``head``: magic, header, pickle,
    vectors. ValueError for a tree with changes not written yet (it is not the stored one)."""
    if tree.unwritten:
        raise ValueError("the tree has changes not written to storage")
    buf = io.BytesIO()
    pickler = _Pickler(buf, tree)
    pickler.dump(tree)
    blob = buf.getbuffer()
    dim = tree.dim or 0
    vectors = np.stack(pickler.vectors) if pickler.vectors else np.zeros((0, dim), dtype=np.float32)
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    meta = json.dumps({"format": FORMAT, "stamp": list(head), "pickle_bytes": len(blob),
                       "pickle_crc": zlib.crc32(blob), "rows": int(vectors.shape[0]), "dim": dim,
                       "vectors_crc": mapped.crc(vectors)}).encode("utf-8")
    return mapped.laid_out([MAGIC + len(meta).to_bytes(8, "little") + meta, blob], [vectors])


def decode(f: io.BufferedReader, head: Stamp, clock: Callable[[], float]) -> tuple[MembrainTree, Stamp] | None:
    """(tree, the stored head it was saved at) of a file written by :func:`encode` at the
    stored head ``head`` or at an earlier version of the same dimension (the caller then
    applies the changes since, or reads the rows); None for a later or another head, another
    format, or a file that does not read whole with its CRCs."""
    if f.read(len(MAGIC)) != MAGIC:
        return None
    meta = json.loads(f.read(int.from_bytes(f.read(8), "little")).decode("utf-8"))
    saved = meta.get("stamp")
    if meta.get("format") != FORMAT or not isinstance(saved, list) or len(saved) != 3 or \
            not (saved == list(head) or (type(saved[0]) is int and saved[0] < head[0] and saved[2] == head[2])):
        return None
    blob = f.read(meta["pickle_bytes"])
    if len(blob) != meta["pickle_bytes"] or zlib.crc32(blob) != meta["pickle_crc"]:
        return None
    vectors = mapped.read_array(f, (int(meta["rows"]), int(meta["dim"])), np.float32, meta["vectors_crc"])
    if vectors is None or f.read(1):
        return None
    tree = _Unpickler(io.BytesIO(blob), clock, vectors).load()
    if type(tree) is not MembrainTree or tree.dim != head[2]:
        return None
    return tree, (saved[0], float(saved[1]), saved[2])


__all__ = ["FORMAT", "Stamp", "decode", "encode"]
