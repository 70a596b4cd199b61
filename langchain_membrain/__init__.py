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
    from .errors import (
        CheckpointError,
        ConfigurationError,
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
    from .index.config import RetrievalConfig
    from .insert.config import LearnerConfig
    from .insert.learner import Learner
    from .integrations.store import MembrainStore
    from .integrations.tools import memory_tools
    from .memory import MembrainMemory
    from .retrieval.retriever import MembrainRetriever
    from .students.training_config import Policy
    from .teachers import HeuristicTeacher, LLMTeacher, OpenAITeacher
    from .tree.actions import Demote, Group, Promote
    from .tree.nodes import Node
    from .tree.records import MemoryRecord
    from .tree.tree import Closure, ClosureMember, MembrainTree

__version__ = "0.1.0"

# public name -> the submodule that defines it
_LAZY: dict[str, str] = {
    "Demote": ".tree.actions",
    "Group": ".tree.actions",
    "Promote": ".tree.actions",
    "CheckpointError": ".errors",
    "ConfigurationError": ".errors",
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
    "MemoryRecord": ".tree.records",
    "Learner": ".insert.learner",
    "LearnerConfig": ".insert.config",
    "RetrievalConfig": ".index.config",
    "MembrainRetriever": ".retrieval.retriever",
    "MembrainStore": ".integrations.store",
    "HeuristicTeacher": ".teachers",
    "LLMTeacher": ".teachers",
    "OpenAITeacher": ".teachers",
    "memory_tools": ".integrations.tools",
    "Policy": ".students.training_config",
    "Closure": ".tree.tree",
    "ClosureMember": ".tree.tree",
    "MembrainTree": ".tree.tree",
    "Node": ".tree.nodes",
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
    "ConfigurationError",
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
