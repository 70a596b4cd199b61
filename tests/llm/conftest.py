"""Fixtures of the LLM-teacher tests: the local OpenAI-compatible server, a small tree with
hand-made embeddings, a fallback teacher of our own and a fake chat model factory."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import pytest
from langchain_core.messages import AIMessage, BaseMessage

sys.path.insert(0, str(Path(__file__).parent))
from llm_helpers import RecordingFallback, ToolFakeChatModel, vec  # noqa: E402
from openai_server import OpenAITestServer  # noqa: E402

from langchain_membrain.tree.tree import MembrainTree  # noqa: E402


@pytest.fixture
def server():
    """A fresh local chat-completions server per test."""
    with OpenAITestServer() as srv:
        yield srv
    assert not srv.errors, srv.errors[0]  # a broken script must not pass as a "bad answer"


@pytest.fixture
def small_tree() -> MembrainTree:
    """computer: laptops (2 facts, and batteries with 1 fact), desktops (1 fact), 1 root fact.

    Node ids are readable: a-laptops, a-batteries, a-desktops, f-*.
    """
    t = MembrainTree("computer")
    t.add_aspect(t.root_id, "laptops", node_id="a-laptops", embedding=vec(1, 0))
    t.add_aspect(t.root_id, "desktops", node_id="a-desktops", embedding=vec(0, 1))
    t.add_fact("a-laptops", "The first laptop was sold in 1981", node_id="f-first", embedding=vec(1, 0.1))
    t.add_fact("a-laptops", "A laptop keyboard is compact", node_id="f-keys", embedding=vec(1, 0.2))
    t.add_aspect("a-laptops", "batteries", node_id="a-batteries", embedding=vec(1, 0, 1))
    t.add_fact("a-batteries", "Laptop batteries last hours", node_id="f-batt", embedding=vec(1, 0, 1))
    t.add_fact("a-desktops", "Desktop towers hold GPUs", node_id="f-tower", embedding=vec(0, 1))
    t.add_fact(t.root_id, "The mouse was invented in 1964", node_id="f-mouse", embedding=vec(0, 0, 0, 1))
    return t


@pytest.fixture
def fallback() -> RecordingFallback:
    return RecordingFallback()


@pytest.fixture
def fake_model_factory():
    def make(responder: Callable[[list[BaseMessage], list[dict]], AIMessage]) -> ToolFakeChatModel:
        return ToolFakeChatModel(responder=responder, seen=[])
    return make
