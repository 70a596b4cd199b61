"""Helpers of the LLM-teacher tests: hand-made embeddings, a fallback teacher of our own,
and a LangChain fake chat model with tool calling."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool

from langchain_membrain.teachers.base import BaseTeacher, NewFact, Subtree
from langchain_membrain.tree.actions import Action
from langchain_membrain.tree.tree import Closure, MembrainTree

DIM = 4


def vec(*xs: float) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    v[: len(xs)] = xs
    return v


def new_fact(text: str, *xs: float) -> NewFact:
    return NewFact(text, vec(*(xs or (1.0,))))


class RecordingFallback(BaseTeacher):
    """A fallback teacher with recognisable answers: the last candidate, Idle, "fallback label"."""

    name = "recording"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def choose_stage1(self, new_fact: NewFact, subtree: Subtree) -> int:
        self.calls.append("stage1")
        return len(subtree.candidates) - 1

    def choose_stage2(self, tree: MembrainTree, closure: Closure) -> list[Action]:
        self.calls.append("stage2")
        return []

    def name_aspect(self, fact_texts: list[str]) -> str:
        self.calls.append("name")
        return "fallback label"


class ToolFakeChatModel(GenericFakeChatModel):
    """GenericFakeChatModel with tool calling, so ``with_structured_output`` works.

    ``responder(messages, tools)`` returns the AIMessage (usually with ``tool_calls``); the
    prompts it saw are kept in ``seen``.
    """

    responder: Callable[[list[BaseMessage], list[dict]], AIMessage]
    messages: Any = iter(())
    seen: list = []

    def bind_tools(self, tools: Any, *, tool_choice: Any = None, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], tool_choice=tool_choice, **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=self.responder(messages, kwargs.get("tools") or []))])


def tool_answer(tools: list[dict], args: dict, *, tokens: tuple[int, int] = (50, 5)) -> AIMessage:
    """An AIMessage calling the (only) offered tool with ``args``."""
    return AIMessage(content="", tool_calls=[{"name": tools[0]["function"]["name"], "args": args, "id": "c1"}],
                     usage_metadata={"input_tokens": tokens[0], "output_tokens": tokens[1],
                                     "total_tokens": sum(tokens)})
