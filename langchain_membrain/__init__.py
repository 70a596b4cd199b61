"""langchain-membrain: long-term agent memory as a tree, kept in order by small networks
that learn online from an LLM teacher.

The public names below are imported on first use (PEP 562), so that ``import
langchain_membrain`` (and the ``membrain`` commands that only read a database) load neither
torch, nor the embedder, nor an LLM SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time see __getattr__ below
    from .actions import Demote, Group, Promote
    from .errors import (
        CheckpointError,
        DimensionError,
        InvalidOperationError,
        InvariantError,
        MembrainError,
        NodeNotFoundError,
        ReadOnlyError,
        SchemaVersionError,
        StorageError,
        TeacherError,
    )
    from .memory import MembrainMemory
    from .pipeline import Learner, LearnerConfig
    from .records import MemoryRecord
    from .retrieval import RetrievalConfig
    from .retriever import MembrainRetriever
    from .store import MembrainStore
    from .teachers import HeuristicTeacher, LLMTeacher, OpenAITeacher
    from .tools import memory_tools
    from .training import Policy
    from .tree import Closure, ClosureMember, MembrainTree, Node

__version__ = "0.1.0"

# public name -> the submodule that defines it
_LAZY: dict[str, str] = {
    "Demote": ".actions",
    "Group": ".actions",
    "Promote": ".actions",
    "CheckpointError": ".errors",
    "DimensionError": ".errors",
    "InvalidOperationError": ".errors",
    "InvariantError": ".errors",
    "MembrainError": ".errors",
    "NodeNotFoundError": ".errors",
    "ReadOnlyError": ".errors",
    "SchemaVersionError": ".errors",
    "StorageError": ".errors",
    "TeacherError": ".errors",
    "MembrainMemory": ".memory",
    "MemoryRecord": ".records",
    "Learner": ".pipeline",
    "LearnerConfig": ".pipeline",
    "RetrievalConfig": ".retrieval",
    "MembrainRetriever": ".retriever",
    "MembrainStore": ".store",
    "HeuristicTeacher": ".teachers",
    "LLMTeacher": ".teachers",
    "OpenAITeacher": ".teachers",
    "memory_tools": ".tools",
    "Policy": ".training",
    "Closure": ".tree",
    "ClosureMember": ".tree",
    "MembrainTree": ".tree",
    "Node": ".tree",
}

__all__ = [
    "HeuristicTeacher",
    "LLMTeacher",
    "Learner",
    "LearnerConfig",
    "MembrainMemory",
    "MembrainRetriever",
    "MembrainStore",
    "MemoryRecord",
    "OpenAITeacher",
    "Policy",
    "RetrievalConfig",
    "memory_tools",
    "CheckpointError",
    "Closure",
    "ClosureMember",
    "Demote",
    "DimensionError",
    "Group",
    "InvalidOperationError",
    "InvariantError",
    "MembrainError",
    "MembrainTree",
    "Node",
    "NodeNotFoundError",
    "Promote",
    "ReadOnlyError",
    "SchemaVersionError",
    "StorageError",
    "TeacherError",
    "__version__",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # the next access is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
