"""The sans-I/O core of a teacher's question: a generator that holds the question's logic
(prompts, validation, retries, counting, fallback) and does no I/O.

It yields a :class:`Send` when it needs an answer (and is sent back the raw answer, or the
exception the request raised) and a :class:`Sleep` before a rate-limited retry; its return
value is the answer. A driver (``RequestLine.run`` on the caller's thread,
``RequestLine.arun`` on an event loop, line.py) carries out each step with :func:`advance`.
Cores compose with ``yield from``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generator, TypeVar, Union

from pydantic import BaseModel

from . import prompts

T = TypeVar("T")


@dataclass(frozen=True)
class Send:
    """A core's request: send ``messages`` asking for ``schema``; the driver sends back the
    RawAnswer, or the exception the request raised (a timeout, an HTTP error...)."""

    messages: list[prompts.Message]
    schema: type[BaseModel]


@dataclass(frozen=True)
class Sleep:
    """A core's wait before a rate-limited retry, in seconds."""

    seconds: float


@dataclass(frozen=True)
class Done:
    """A core's answer, once it has returned."""

    value: Any


# A question's logic without its I/O: a generator that yields Send and Sleep, is sent
# what they gave, and returns the answer (see RequestLine.run).
Core = Generator[Union[Send, Sleep], Any, T]


def advance(core: Core[Any], reply: Any) -> Send | Sleep | Done:
    """Resume ``core`` with ``reply`` (the last step's outcome; None to start): its next
    step, or its answer as a :class:`Done`."""
    try:
        return core.send(reply)
    except StopIteration as done:
        return Done(done.value)


__all__ = ["Core", "Done", "Send", "Sleep", "advance"]
