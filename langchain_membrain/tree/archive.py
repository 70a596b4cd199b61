"""What a :class:`~.tree.MembrainTree` keeps beside its graph (its *archive*): entries that
are no node of the tree, so that no stage, feature or tree search sees them unless asked.

- ``history``: a former version of a fact (written by ``supersede`` and ``retire``);
- ``ignored``: an item the memory operation judged not to be a memory;
- ``raw``: an input as it was said, the source of the facts formed from it (formation.py);
- ``working``: a session's running summary; one current entry per session (id
  :func:`working_id`), each replaced version kept as ``<id>@vN``.

Storage keeps each as a row of its kind whose parent is the root, written in the same
transaction as the change that produced it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np

from ..errors import InvalidOperationError, NodeNotFoundError
from .nodes import PAST_KINDS, Node, NodeKind, as_vector, check_text

#: The metadata key of an archived entry that holds its history record.
HISTORY_KEY = "history"


def working_id(session: str) -> str:
    """The id of a session's current working memory (``"working"`` for no session)."""
    return f"working:{session}" if session else "working"


class TreeArchive:
    """The archive's side of :class:`~.tree.MembrainTree`."""

    # What MembrainTree provides (tree.py); declared here for the type checker.
    archive: dict[str, Node]
    dim: int | None
    clock: Callable[[], float]

    if TYPE_CHECKING:
        def _new_id(self, node_id: str | None, prefix: str) -> str: ...

        def _claim_dim(self, vec: np.ndarray | None) -> None: ...

        def _touch(self, node_id: str | None = None) -> None: ...

        def _forget(self, node_id: str) -> None: ...

        def _next_seq(self) -> int: ...

    def archived(self, kind: str | None = None) -> list[Node]:
        """Entries beside the tree of one kind (``"history"``, ``"ignored"``, ``"raw"``,
        ``"working"``), or the past (history and ignored) for None; oldest first."""
        kinds = PAST_KINDS if kind is None else (kind,)
        return sorted((n for n in self.archive.values() if n.kind in kinds), key=lambda n: (n.updated_at, n.seq))

    def history(self, key: str) -> list[Node]:
        """The archived versions of the fact ``key`` (superseded or deleted), oldest first."""
        return [n for n in self.archived("history") if n.metadata.get(HISTORY_KEY, {}).get("key") == key]

    def former_versions(self, keys: Iterable[str]) -> dict[str, list[Node]]:
        """For each of ``keys`` that has some: the archived versions its current fact
        superseded (UPDATEs since the key was last deleted, if ever), oldest first. One pass
        over the archive, for search to credit a fact with what its old versions said."""
        wanted = set(keys)
        found: dict[str, list[Node]] = {}
        for entry in self.archive.values():
            key = entry.metadata.get(HISTORY_KEY, {}).get("key") if entry.kind == "history" else None
            if key in wanted:
                found.setdefault(key, []).append(entry)
        out = {}
        for key, entries in found.items():
            entries.sort(key=lambda n: n.seq)
            deletes = [i for i, n in enumerate(entries) if n.metadata[HISTORY_KEY].get("operation") != "update"]
            chain = entries[deletes[-1] + 1:] if deletes else entries
            if chain:
                out[key] = chain
        return out

    def purge_archived(self, entry_ids: Iterable[str]) -> None:
        """Forget archived entries for good (the tree and its current facts are untouched).
        NodeNotFoundError, before anything changes, for an id that is not archived."""
        entry_ids = list(dict.fromkeys(entry_ids))
        missing = [e for e in entry_ids if e not in self.archive]
        if missing:
            raise NodeNotFoundError(f"not archived: {missing[0]!r}")
        for entry_id in entry_ids:
            del self.archive[entry_id]
            self._forget(entry_id)
        if entry_ids:
            self._touch()

    def log_ignored(self, node_id: str | None, text: str, *, embedding: Any = None,
                    metadata: dict[str, Any] | None = None, reason: str = "ignore") -> str:
        """Keep an item that is not a memory in the namespace's log (not the tree)."""
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidOperationError("metadata must be a dict")
        node_id = self._new_id(node_id, "i")
        meta = {**dict(metadata or {}), HISTORY_KEY: {"key": node_id, "operation": reason}}
        return self._keep_beside(node_id, "ignored", "i", text, embedding, meta)

    def keep_raw(self, node_id: str | None, text: str, *, embedding: Any = None,
                 metadata: dict[str, Any] | None = None) -> str:
        """Keep an input as it was said (a *raw* item, beside the tree: never placed), the
        source of the facts formed from it; returns its id."""
        return self._keep_beside(node_id, "raw", "r", text, embedding, metadata)

    def set_working(self, session: str, text: str, *, metadata: dict[str, Any] | None = None,
                    embedding: Any = None) -> str:
        """Replace the working memory of ``session`` (its running summary) with ``text``; the
        text it replaces stays as an entry of its own (``working_history``). Returns the
        current entry's id, which is the same for every version of the session's summary."""
        if not isinstance(session, str):
            raise InvalidOperationError("a session is a str")
        check_text(text, "working memory")  # checked before the current version moves
        as_vector(embedding, self.dim)
        node_id = working_id(session)
        old = self.archive.get(node_id)
        if old is not None:
            n = 1 + sum(1 for e in self.archive.values() if e.kind == "working" and e.id.startswith(node_id + "@v"))
            self.archive[f"{node_id}@v{n}"] = Node(f"{node_id}@v{n}", "working", old.text, None, old.created_at,
                                                   old.updated_at, dict(old.metadata), seq=self._next_seq())
            self._touch(f"{node_id}@v{n}")
            del self.archive[node_id]
        meta = {**dict(metadata or {}), "session": session}
        return self._keep_beside(node_id, "working", "w", text, embedding, meta)

    def working(self, session: str) -> Node | None:
        """The current working memory of ``session``, or None."""
        return self.archive.get(working_id(session))

    def current_working(self) -> list[Node]:
        """The current working memory of each session that has one, oldest first."""
        return [e for e in self.archived("working") if e.id == working_id(str(e.metadata.get("session", "")))]

    def working_history(self, session: str) -> list[Node]:
        """Every version of ``session``'s working memory, oldest first (the current one last)."""
        node_id = working_id(session)
        return [n for n in self.archived("working") if n.id == node_id or n.id.startswith(node_id + "@v")]

    def _keep_beside(self, node_id: str | None, kind: NodeKind, prefix: str, text: str, embedding: Any,
                     metadata: dict[str, Any] | None) -> str:
        text = check_text(text, "text")
        vec = as_vector(embedding, self.dim)
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidOperationError("metadata must be a dict")
        node_id = self._new_id(node_id, prefix)
        self._claim_dim(vec)
        now = self.clock()
        self.archive[node_id] = Node(node_id, kind, text, vec, now, now, dict(metadata or {}), seq=self._next_seq())
        self._touch(node_id)
        return node_id

