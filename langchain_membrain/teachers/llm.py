"""A teacher over any LangChain chat model.

``LLMTeacher(ChatOpenAI(model=..., base_url=...))`` asks its questions through
``model.with_structured_output(Schema, include_raw=True)``, so it works with every chat
model that supports tool calling or JSON schema (ChatOpenAI, ChatOllama, ChatAnthropic, ...).
Token counts come from the answer's ``usage_metadata``.

The prompts are in :mod:`.prompts`; validation and fallback are in :mod:`.guard`; retry,
timeout, concurrency and stats in :mod:`.line`. For the timeout to be the only limit,
build the model with its own retries off (``ChatOpenAI(..., max_retries=0)``): the teacher
retries by itself.
A sync call that runs past ``timeout`` is abandoned in its worker thread (its answer is
dropped, and its concurrency slot is freed at once, so an abandoned call may briefly run
beside ``max_concurrency`` others); an async one is cancelled. The worker threads are
daemons (workers.py): an abandoned call, even one that never returns because the model has
no timeout of its own, never keeps the process from exiting.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel

from ..errors import TeacherError
from . import prompts
from .answers import RawAnswer
from .guard import GuardedTeacher

StructuredMethod = Literal["function_calling", "json_schema", "json_mode"]


def _to_langchain(messages: list[prompts.Message]) -> list[BaseMessage]:
    # Message objects, not (role, text) tuples: tuples would be read as prompt templates.
    return [SystemMessage(content=m["content"]) if m["role"] == "system" else HumanMessage(content=m["content"])
            for m in messages]


def _answer_text(msg: Any) -> str | None:
    """The answer as the model wrote it: tool-call arguments, else the text content."""
    if not isinstance(msg, AIMessage):
        return None
    if msg.tool_calls:
        return json.dumps(msg.tool_calls[0].get("args", {}))
    for call in msg.invalid_tool_calls or ():
        return call.get("args")
    content = msg.content
    if isinstance(content, list):
        content = "".join(c.get("text", "") if isinstance(c, dict) else str(c) for c in content)
    return content or None


def _split_raw(runnable: Any) -> tuple[Any, Any] | None:
    """``(model, parse)`` for the shape LangChain's chat models give
    ``with_structured_output(..., include_raw=True)``: ``RunnableMap(raw=model) | parse``,
    where ``parse`` turns ``{"raw": message}`` into ``{"raw", "parsed", "parsing_error"}``;
    None for any other shape (then the runnable is invoked whole)."""
    from langchain_core.runnables import RunnableParallel, RunnableSequence

    if not isinstance(runnable, RunnableSequence) or not isinstance(runnable.first, RunnableParallel):
        return None
    steps = runnable.first.steps__
    if list(steps) != ["raw"]:
        return None
    parse = RunnableSequence(*runnable.middle, runnable.last) if runnable.middle else runnable.last
    return steps["raw"], parse


class LLMTeacher(GuardedTeacher):
    """A teacher that asks a LangChain chat model.

    Args:
        model: any :class:`~langchain_core.language_models.BaseChatModel` with structured
            output (tools or JSON schema).
        method: passed to ``with_structured_output`` (``"function_calling"``,
            ``"json_schema"``, ``"json_mode"``); None: the model's default.
        **options: see :class:`~.guard.GuardedTeacher` (``mode``, ``fallback``,
            ``timeout``, ``max_concurrency``, ``max_retries``, ...).

    Raises:
        TeacherError: the model has no structured output support.
    """

    name = "llm"

    def __init__(self, model: BaseChatModel, *, method: StructuredMethod | None = None, **options: Any):
        super().__init__(**options)
        self.model = model
        self.method = method
        self._runnables: dict[type[BaseModel], Any] = {}
        for schema in prompts.SCHEMAS.values():
            self._runnable(schema)  # fail now, not at the first insert

    def _runnable(self, schema: type[BaseModel]) -> Any:
        runnable = self._runnables.get(schema)
        if runnable is None:
            kwargs: dict[str, Any] = {"include_raw": True}
            if self.method is not None:
                kwargs["method"] = self.method
            try:
                runnable = self.model.with_structured_output(schema, **kwargs)
            except (NotImplementedError, ValueError, TypeError) as exc:
                raise TeacherError(f"{type(self.model).__name__} has no structured output: {exc}") from exc
            self._runnables[schema] = runnable
        return runnable

    @staticmethod
    def _raw(out: Any) -> RawAnswer:
        if not isinstance(out, dict) or "raw" not in out:  # a model that ignored include_raw
            return RawAnswer(parsed=out if isinstance(out, (BaseModel, dict)) else None)
        msg = out.get("raw")
        usage = getattr(msg, "usage_metadata", None) or {}
        meta = getattr(msg, "response_metadata", None) or {}
        extra = getattr(msg, "additional_kwargs", None) or {}
        err = out.get("parsing_error")
        return RawAnswer(
            parsed=out.get("parsed"),
            text=_answer_text(msg),
            finish_reason=meta.get("finish_reason"),
            refusal=extra.get("refusal") or (str(err) if err is not None and "refus" in str(err).lower() else None),
            parse_error=None if err is None else f"{type(err).__name__}: {err}",
            prompt_tokens=int(usage.get("input_tokens") or 0),
            completion_tokens=int(usage.get("output_tokens") or 0),
        )

    def _request(self, messages: list[prompts.Message], schema: type[BaseModel]) -> RawAnswer:
        runnable = self._runnable(schema)
        split = _split_raw(runnable)
        if split is None:
            return self._raw(runnable.invoke(_to_langchain(messages)))
        # The model is called on this (daemon) thread, not on the thread of a LangChain
        # executor: an executor's threads are joined at interpreter exit, so a call abandoned
        # in one, on a server that never answers, would keep the process alive.
        model, parse = split
        return self._raw(parse.invoke({"raw": model.invoke(_to_langchain(messages))}))

    async def _arequest(self, messages: list[prompts.Message], schema: type[BaseModel]) -> RawAnswer:
        return self._raw(await self._runnable(schema).ainvoke(_to_langchain(messages)))

