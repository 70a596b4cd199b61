"""The fields of a slotted object as a dict, and back: what a saved search index holds
(index_cache.py) of each part of a :class:`~.retrieval.FactIndex`."""

from __future__ import annotations

from typing import Any, Sequence


def slot_state(obj: Any, skip: Sequence[str] = ()) -> dict[str, Any]:
    """``obj``'s slots but ``skip``, by name (the objects themselves, not copies)."""
    return {k: getattr(obj, k) for k in type(obj).__slots__ if k not in skip}


def set_slot_state(obj: Any, state: Any, skip: Sequence[str] = ()) -> None:
    """Set ``obj``'s slots from a :func:`slot_state` ``state``; ValueError, and nothing set,
    unless it holds exactly the slots but ``skip`` (written by another version)."""
    if not isinstance(state, dict) or set(state) != {k for k in type(obj).__slots__ if k not in skip}:
        raise ValueError("the saved state holds other fields than this version's")
    for k, v in state.items():
        setattr(obj, k, v)
