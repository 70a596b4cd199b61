"""An agent with long-term memory: `create_agent` + `MembrainStore` + membrain's memory tools.

    python examples/agent_with_memory.py

With ``OPENAI_API_KEY`` set (and optionally ``OPENAI_BASE_URL`` and ``MEMBRAIN_CHAT_MODEL``,
default ``gpt-4o-mini``) the agent runs on ``ChatOpenAI``. Without a key it runs offline on a
scripted chat model that makes the same tool calls a real model would: save two memories,
then search them.
"""

from __future__ import annotations

import itertools
import json
import os
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage

from langchain_membrain.integrations.store import MembrainStore
from langchain_membrain.integrations.tools import memory_tools

USER_MESSAGE = (
    "Please remember two things about me: I am vegetarian, and my favourite colour is teal. "
    "Then look up what you know about my diet."
)
SYSTEM_PROMPT = (
    "You have a long-term memory. Save each fact the user asks you to remember as its own memory "
    "with save_memory, then answer questions by calling search_memory."
)


class ScriptedChatModel(GenericFakeChatModel):
    """A fake chat model that plays back scripted messages and accepts tools."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> "ScriptedChatModel":
        return self


def scripted_model() -> BaseChatModel:
    ids = itertools.count(1)

    def call(name: str, **args: Any) -> dict[str, Any]:
        return {"name": name, "args": args, "id": f"call_{next(ids)}", "type": "tool_call"}

    return ScriptedChatModel(messages=iter([
        AIMessage("", tool_calls=[call("save_memory", content="The user is vegetarian"),
                                  call("save_memory", content="The user's favourite colour is teal")]),
        AIMessage("", tool_calls=[call("search_memory", query="What does the user eat?", limit=2)]),
        AIMessage("You told me you are vegetarian, so I'll stick to meat-free suggestions."),
    ]))


def chat_model() -> BaseChatModel:
    """ChatOpenAI when an API key is set, else the scripted offline model."""
    if os.environ.get("OPENAI_API_KEY"):
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(model=os.environ.get("MEMBRAIN_CHAT_MODEL", "gpt-4o-mini"),
                          base_url=os.environ.get("OPENAI_BASE_URL") or None, temperature=0)
    return scripted_model()


def report(messages: list[Any]) -> None:
    """Print what the agent stored and found, from its tool calls and their results."""
    calls = {c["id"]: c for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
    for message in messages:
        if not isinstance(message, ToolMessage):
            continue
        call = calls[message.tool_call_id]
        if call["name"] == "save_memory":
            print(f"stored: {call['args']['content']!r} ({message.content})")
        elif call["name"] == "search_memory":
            print(f"searched: {call['args']['query']!r}")
            for hit in json.loads(message.content):
                print(f"found: {hit['content']!r} score={hit['score']:.3f} path={hit['path']}")
    print(f"agent: {messages[-1].content}")


def main() -> None:
    store = MembrainStore()  # the bundled MiniLM embedder, in memory
    agent = create_agent(chat_model(), memory_tools(store, ("memories", "{user_id}")),
                         system_prompt=SYSTEM_PROMPT, store=store)
    result = agent.invoke({"messages": [{"role": "user", "content": USER_MESSAGE}]},
                          config={"configurable": {"user_id": "alice"}})
    report(result["messages"])
    print(f"memories of alice: {len(store.search(('memories', 'alice'), limit=100))}")


if __name__ == "__main__":
    main()
