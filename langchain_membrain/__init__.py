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
from .memory import MembrainMemory, MemoryRecord
from .pipeline import Learner, LearnerConfig
from .retrieval import RetrievalConfig
from .retriever import MembrainRetriever
from .store import MembrainStore
from .teachers import HeuristicTeacher, LLMTeacher, OpenAITeacher
from .tools import memory_tools
from .training import Policy
from .tree import Closure, ClosureMember, MembrainTree, Node

__version__ = "0.1.0"

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
    "SchemaVersionError",
    "StorageError",
    "TeacherError",
    "__version__",
]
