"""One resolver for every way of naming a teacher: :func:`resolve_teacher`.

``MembrainMemory(teacher=...)``, the CLI (``membrain add`` and the others) and
:func:`as_teacher` all go through it, so a teacher is built the same way everywhere:

- ``None``: the offline :class:`~.heuristic.HeuristicTeacher`, unless ``env`` is given and
  configures an LLM (below). ``MembrainMemory()`` passes no ``env``: a library never makes
  network calls it was not asked for; the CLI passes ``os.environ``;
- with ``env`` (a mapping such as ``os.environ``): ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL``
  set selects an :class:`~.openai_teacher.OpenAITeacher` on that endpoint, with
  ``MEMBRAIN_TEACHER_MODEL`` as the model (required then); neither set: the offline teacher;
- a LangChain chat model: an :class:`~.llm.LLMTeacher`;
- a string ``"provider:model"`` (LangChain's ``init_chat_model`` convention, e.g.
  ``"openai:gpt-4o-mini"``): that chat model, built by ``init_chat_model`` (needs
  ``langchain`` and the provider's package), as an :class:`~.llm.LLMTeacher`. Any other
  string (a bare ``"gpt-4o"``) is a :class:`~.errors.ConfigurationError` that says what to pass;
- an ``openai.OpenAI`` / ``openai.AsyncOpenAI`` client with ``model``: an
  :class:`~.openai_teacher.OpenAITeacher`;
- any other :class:`~.base.Teacher` (``choose_stage1``, ``choose_stage2``, ``name_aspect``):
  itself.

The LLM teachers it builds raise on a failed answer (``raise_on_failure=True``) so that the
memory counts the failure and decides without the teacher; ``**options`` are passed to them.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Mapping

from ..errors import ConfigurationError, InvalidOperationError, TeacherError

ENV_KEYS = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMBRAIN_TEACHER_MODEL")
WHAT_TO_PASS = "pass a LangChain chat model, an `openai.OpenAI` client with `teacher_model=`, or 'provider:model'"


def env_wants_llm(env: Mapping[str, str] | None) -> bool:
    """Whether ``env`` configures an LLM teacher (``OPENAI_API_KEY`` or ``OPENAI_BASE_URL``)."""
    return env is not None and bool(env.get("OPENAI_API_KEY") or env.get("OPENAI_BASE_URL"))


def resolve_teacher(teacher: Any = None, model: str | None = None, *, env: Mapping[str, str] | None = None,
                    embed: Callable[[list[str]], Any] | None = None, **options: Any) -> Any:
    """The :class:`~.base.Teacher` that ``teacher`` names (see the module docstring).

    Args:
        teacher: None, a LangChain chat model, ``"provider:model"``, an ``openai`` client,
            or a Teacher.
        model: the model name, for an ``openai`` client.
        env: the environment to read ``OPENAI_*`` from when ``teacher`` is None (the CLI
            passes ``os.environ``); None: do not read it.
        embed: text -> vectors, for the offline teacher's labels.
        **options: passed to the LLM teacher built (``timeout``, ``mode``, ``fallback``...;
            ``raise_on_failure`` defaults to True).

    Raises:
        InvalidOperationError: an ``openai`` client without ``model``.
        TeacherError: ``env`` selects an LLM without ``MEMBRAIN_TEACHER_MODEL``.
        ConfigurationError: a string that is not ``"provider:model"``, or a model that
            ``init_chat_model`` cannot build here (``langchain`` or the provider's package
            missing, an unknown provider).
        TypeError: anything else.
    """
    options.setdefault("raise_on_failure", True)
    if teacher is None:
        if env_wants_llm(env):
            return _from_env(env, options)  # type: ignore[arg-type]
        from .heuristic import HeuristicTeacher

        return HeuristicTeacher(embed=embed)
    if isinstance(teacher, str):
        teacher = chat_model_named(teacher)
    import openai  # a core dependency

    if isinstance(teacher, (openai.OpenAI, openai.AsyncOpenAI)):
        from .openai_teacher import OpenAITeacher

        if not model:
            raise InvalidOperationError("an OpenAI client needs teacher_model='...' (the model name)")
        if isinstance(teacher, openai.AsyncOpenAI):
            return OpenAITeacher(async_client=teacher, model=model, **options)
        return OpenAITeacher(teacher, model, **options)
    from langchain_core.language_models import BaseChatModel

    if isinstance(teacher, BaseChatModel):
        from .llm import LLMTeacher

        return LLMTeacher(teacher, **options)
    if all(callable(getattr(teacher, m, None)) for m in ("choose_stage1", "choose_stage2", "name_aspect")):
        return teacher
    raise TypeError(f"a teacher is a Teacher, a LangChain chat model or an openai.OpenAI client, "
                    f"not {type(teacher).__name__}")


def chat_model_named(name: str) -> Any:
    """The LangChain chat model that ``"provider:model"`` names, built by LangChain's
    ``init_chat_model``; a :class:`~.errors.ConfigurationError` naming the fix otherwise."""
    provider, _, model = name.partition(":")
    if not provider.strip() or not model.strip():
        raise ConfigurationError(f"teacher={name!r} names no provider: {WHAT_TO_PASS}, "
                                 "e.g. 'openai:gpt-4o-mini'")
    try:
        from langchain.chat_models import init_chat_model
    except ImportError:
        raise ConfigurationError(f"teacher={name!r} is built by LangChain's init_chat_model: pip install langchain "
                                 f"and the provider's package (e.g. langchain-{provider}), or {WHAT_TO_PASS}") from None
    try:
        return init_chat_model(name)
    except Exception as exc:  # a missing provider package, an unknown provider, a missing key
        raise ConfigurationError(f"teacher={name!r} could not be built by init_chat_model ({exc}); "
                                 f"install the provider's package, or {WHAT_TO_PASS}") from exc


def _from_env(env: Mapping[str, str], options: dict[str, Any]) -> Any:
    import openai

    from .openai_teacher import OpenAITeacher

    model = env.get("MEMBRAIN_TEACHER_MODEL")
    if not model:
        raise TeacherError("set MEMBRAIN_TEACHER_MODEL to the teacher's model name")
    base_url = env.get("OPENAI_BASE_URL") or None
    api_key = env.get("OPENAI_API_KEY") or "not-needed"  # local servers need none
    return OpenAITeacher(openai.OpenAI(base_url=base_url, api_key=api_key), model,
                         async_client=openai.AsyncOpenAI(base_url=base_url, api_key=api_key), **options)


def describe_teacher(teacher: Any, env: Mapping[str, str] | None = None) -> str:
    """A one-line description of a resolved teacher (the CLI prints it)."""
    if teacher is None or type(teacher).__name__ == "HeuristicTeacher":
        return "offline heuristic teacher"
    model = getattr(teacher, "model", None)
    if isinstance(model, str):
        where = (env or os.environ).get("OPENAI_BASE_URL") or "OpenAI"
        return f"LLM teacher {model} at {where}"
    return type(teacher).__name__


def as_teacher(teacher: Any, **options: Any) -> Any:
    """What ``MembrainMemory(teacher=...)`` and other entry points accept, as a Teacher.

    :func:`~.resolve.resolve_teacher` (the one resolver), except that ``None`` stays
    ``None`` (the caller's default teacher) and an LLM teacher it builds falls back to its
    own fallback teacher instead of raising (``raise_on_failure=False`` unless given): a
    LangChain chat model becomes an :class:`LLMTeacher` (``options`` are passed on); a
    Teacher (anything with ``choose_stage1``, ``choose_stage2`` and ``name_aspect``) is
    returned as it is. Anything else is a :class:`TypeError`.
    """
    if teacher is None:
        return None
    return resolve_teacher(teacher, **{"raise_on_failure": False, **options})
