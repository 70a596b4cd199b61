"""A database read without a MembrainMemory (``membrain show``, ``export``, ``stats``)."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidOperationError
from ..insert.stats import Counters, ForestStats, MemoryStats, read_stored

# As in memory.py (a test checks both); not imported from there, which loads torch.
CHECKPOINT_NAME = "models"


class StoredMemory:
    """A database read without a MembrainMemory: its namespaces, their trees, and the
    counters of the last saved model checkpoint. Loads no model, no embedder, no torch:
    what ``membrain show``, ``export`` and ``stats`` need, at a fraction of the start-up.

    ``stats()`` reports what ``MembrainMemory.stats()`` reports in a process that has not
    inserted yet: the forest's counts and the saved checkpoint's counters (teacher calls,
    agreement per stage, stored counters), this process's counters all zero."""

    def __init__(self, storage: str | None):
        from ..storage import open_storage

        self._storage = open_storage(storage) if storage is not None else None
        self._trees: dict[tuple[str, ...], Any] = {}

    def namespaces(self) -> list[tuple[str, ...]]:
        return sorted(tuple(ns) for ns in self._storage.list_namespaces()) if self._storage is not None else []

    def tree(self, namespace: Any = None) -> Any:
        from ..tree.inputs import as_namespace

        ns = as_namespace(namespace)
        if ns not in self._trees:
            loaded = self._storage.load_tree(ns) if self._storage is not None else None
            if loaded is None:
                raise InvalidOperationError(f"no memories in namespace {ns!r}")
            self._trees[ns] = loaded[0]
        return self._trees[ns]

    def stats(self) -> MemoryStats:
        names = self.namespaces()
        trees = []
        for ns in names:
            try:
                trees.append(self.tree(ns))
            except InvalidOperationError:  # deleted since it was listed
                continue
        stored, learning = read_stored(self._storage, CHECKPOINT_NAME) if self._storage is not None else (None, None)
        return MemoryStats(ForestStats.of(trees, namespaces=len(names)), process=Counters(), stored=stored,
                           learning=learning, loaded_namespaces=len(self._trees))

    def flush(self) -> None:
        """Nothing to write: the view only reads."""

    def close(self) -> None:
        if self._storage is not None:
            self._storage.close()

    def __enter__(self) -> "StoredMemory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
