"""How :class:`~langchain_membrain.memory.MembrainMemory` shows its parts: settings read
through (:class:`Forward`, read-only: ``memory.reconfigure`` is the one way to change one) and
the async twins of its methods (:func:`in_thread`)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Concatenate, Coroutine, ParamSpec, TypeVar, cast

from ..insert.config import CHANGEABLE


class Forward:
    """A memory's read-only attribute that is its part's ``attr`` (default: the same name).
    ``memory.config`` is the settings' one source: a setting changes through
    :meth:`MembrainMemory.reconfigure`, which reaches every part, or not at all."""

    def __init__(self, part: str, attr: str | None = None, *, doc: str | None = None):
        self.part, self.attr, self.__doc__ = part, attr, doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.attr = self.attr or name

    def __get__(self, memory: Any, owner: type | None = None) -> Any:
        return self if memory is None else getattr(getattr(memory, self.part), cast(str, self.attr))

    def __set__(self, memory: Any, value: Any) -> None:
        how = (f"change it with memory.reconfigure({self.name}=...)" if self.name in CHANGEABLE
               else "it is fixed when the memory opens")
        raise AttributeError(f"{self.name} is read-only: {how}")


_M = TypeVar("_M")
_P = ParamSpec("_P")
_R = TypeVar("_R")


def in_thread(method: Callable[Concatenate[_M, _P], _R]
              ) -> Callable[Concatenate[_M, _P], Coroutine[Any, Any, _R]]:
    """The async twin of a memory's method: the method, run in a worker thread."""
    name = method.__name__

    async def twin(memory: _M, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return await asyncio.to_thread(getattr(memory, name), *args, **kwargs)

    twin.__name__ = twin.__qualname__ = f"a{name}"
    twin.__doc__ = f":meth:`{name}` in a worker thread (``asyncio.to_thread``)."
    return twin
