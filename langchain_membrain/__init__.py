"""langchain-membrain: long-term agent memory as a tree, kept in order by small networks
that learn online from an LLM teacher."""

from .actions import Demote, Group, Promote
from .errors import (
    CheckpointError,
    DimensionError,
    InvalidOperationError,
    InvariantError,
    MembrainError,
    NodeNotFoundError,
    SchemaVersionError,
    StorageError,
    TeacherError,
)
from .tree import Closure, ClosureMember, MembrainTree, Node

__version__ = "0.1.0"

__all__ = [
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
    "SchemaVersionError",
    "StorageError",
    "TeacherError",
    "__version__",
]
