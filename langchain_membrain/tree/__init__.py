"""The memory's data: one namespace's tree and what it is made of.

Owns the tree (root, aspects, facts; closure and two-layer subtree), its nodes, rows and
archive, the stage actions (Promote, Demote, Group) and placement, memory kinds, records,
inputs and filters, the topic labels, the tree's evaluation and export.

May import: ``errors``. Nothing here imports torch, an index or a database.

``langchain_membrain.tree.MembrainTree`` (and every other name of :mod:`.tree.tree`) is
imported from here on first use.
"""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    tree = importlib.import_module(".tree", __name__)
    try:
        return getattr(tree, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
