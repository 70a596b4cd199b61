"""langchain-membrain: long-term agent memory as a tree, kept in order by small networks
that learn online from an LLM teacher.

The public names below are imported on first use (PEP 562), so that ``import
langchain_membrain`` (and the ``membrain`` commands that only read a database) load neither
torch, nor the embedder, nor an LLM SDK.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings
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
    from .index.facts import RetrievalConfig
    from .insert.config import LearnerConfig
    from .insert.pipeline import Learner
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
    "Learner": ".insert.pipeline",
    "LearnerConfig": ".insert.config",
    "RetrievalConfig": ".index.facts",
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


#: Module paths of 0.1 -> where each lives now (one release of DeprecationWarning), then
#: where the names it re-exported without defining them are defined.
_MOVED: dict[str, tuple[str, ...]] = {
    "actions": ("tree.actions",), "background": ("insert.background",), "batches": ("insert.batches",),
    "calibration": ("students.calibration",), "chat": ("index.chat",), "config": ("insert.config",),
    "decoding": ("students.decoding",), "dense": ("index.dense",), "embeddings": ("index.embeddings",),
    "evaluation": ("tree.evaluation",), "export": ("tree.export",), "features": ("students.features",),
    "filters": ("tree.filters",), "forest": ("storage.forest",),
    "formation": ("insert.formation", "tree.kinds"), "formation_student": ("students.formation",),
    "formation_writer": ("insert.formation_writer",), "graph": ("insert.graph",),
    "index_cache": ("storage.index_cache",), "inputs": ("tree.inputs",),
    "insert_records": ("insert.records",), "labels": ("tree.labels",), "ledger": ("insert.ledger",),
    "lexical": ("index.lexical",), "losses": ("students.losses",), "minilm": ("index.minilm",),
    "models": ("students.models", "students.nets"), "multistep": ("retrieval.multistep",),
    "nets": ("students.nets",), "nodes": ("tree.nodes",), "operation_rule": ("teachers.operation_rule",),
    "operation_student": ("students.operation",), "operation_types": ("tree.operation_types",),
    "operations": ("insert.operations", "students.operation", "teachers.operation_rule", "tree.operation_types"),
    "pipeline": ("insert.pipeline", "insert.config", "insert.records", "insert.ledger", "tree.placement",
                 "tree.labels", "teachers.base"),
    "placement": ("tree.placement",), "prior": ("students.prior",), "reads": ("retrieval.reads",),
    "records": ("tree.records",), "replay": ("students.replay",),
    "retriever": ("retrieval.retriever",), "scores": ("retrieval.scores",), "shadow": ("students.shadow",),
    "shutdown": ("insert.shutdown",), "slot_state": ("index.slot_state",), "stats": ("insert.stats",),
    "store": ("integrations.store",), "tools": ("integrations.tools",), "torchfile": ("students.torchfile",),
    "training": ("students.training", "students.training_config", "students.weights"),
    "training_config": ("students.training_config",), "tree_archive": ("tree.archive",),
    "tree_rows": ("tree.rows",), "writes": ("insert.writes",),
}


class _MovedModule(types.ModuleType):
    """An old module path: every name is looked up where the module lives now."""

    __targets__: list[str]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        for target in self.__targets__:
            module = importlib.import_module(target)
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``langchain_membrain.<old>`` for the modules of :data:`_MOVED`."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        old = fullname[len(__name__) + 1:] if fullname.startswith(__name__ + ".") else None
        if old not in _MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> types.ModuleType:
        old = spec.name[len(__name__) + 1:]
        module = _MovedModule(spec.name)
        module.__targets__ = [f"{__name__}.{m}" for m in _MOVED[old]]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        warnings.warn(f"{module.__name__} moved to {module.__targets__[0]}; the old path goes in the next release",
                      DeprecationWarning, stacklevel=2)


if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
    sys.meta_path.append(_MovedFinder())


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # the next access is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
