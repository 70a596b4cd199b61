"""Every error membrain raises on purpose.

All of them derive from :class:`MembrainError`, itself a :class:`ValueError`, so a caller
can catch one class for "membrain refused this input" and still tell the cases apart.
"""

from __future__ import annotations


class MembrainError(ValueError):
    """Base class of every error raised deliberately by membrain."""


class NodeNotFoundError(MembrainError):
    """A node id that is not in the tree."""


class InvalidOperationError(MembrainError):
    """A tree write whose preconditions do not hold (the tree is left unchanged)."""


class InvariantError(MembrainError):
    """The tree violates one of its invariants (a bug, or a corrupt serialisation)."""


class DimensionError(MembrainError):
    """An embedding whose shape does not match the tree's or the model's dimension."""


class CheckpointError(MembrainError):
    """A model checkpoint that cannot be loaded (corrupt, or of other dimensions)."""


class ConfigurationError(MembrainError):
    """A setting or argument that names something unusable here (an unknown device, a
    teacher named by a bare model name, a chat model that cannot call tools); the message
    says what to pass instead."""


class TeacherError(MembrainError):
    """A teacher answer that failed validation (the caller falls back)."""


class StorageError(MembrainError):
    """A storage backend that cannot be opened or written."""


class SchemaVersionError(StorageError):
    """A database written by an unknown (newer) schema version."""


class ReadOnlyError(StorageError):
    """A write to a memory whose storage is open read-only (a read-only file, directory or
    mount, or ``read_only=True``): nothing was changed."""
