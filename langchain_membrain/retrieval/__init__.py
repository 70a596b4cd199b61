"""Reading a memory: a search in one or several steps.

Owns the read path (:mod:`.reads`: candidates from the index, filters, kinds, the tree's
context), the second search step (:mod:`.multistep`), calibrated scores (:mod:`.scores`) and
the statements that supersede a returned memory, placed before it (:mod:`.supersession`), and the LangChain
retriever (:mod:`.retriever`).

May import: ``errors``, ``tree``, ``index``, ``storage``, ``teachers``.

Until 0.1 this name was the index module, now :mod:`langchain_membrain.index.facts`; its names
(``RetrievalConfig``, ``FactIndex``, ...) are still found here for one release, with a
DeprecationWarning.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    for where in ("facts", "chat", "lexical"):  # what the 0.1 module defined or re-exported
        module = importlib.import_module(f"..index.{where}", __name__)
        if hasattr(module, name):
            warnings.warn(f"langchain_membrain.retrieval.{name} moved to langchain_membrain.index.{where}.{name}; "
                          "the old path goes in the next release", DeprecationWarning, stacklevel=2)
            return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
