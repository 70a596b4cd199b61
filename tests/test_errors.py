"""Bad input that a new user tries is refused with a typed :class:`MembrainError` whose
message says what to pass instead: a teacher named by a string, a retrieval model that is
missing or cannot call tools, a text with a lone surrogate, an unknown or absent device."""

from __future__ import annotations

import sys
import types

import pytest
from helpers import WordEmbeddings
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda

from langchain_membrain import InvalidOperationError, MembrainError
from langchain_membrain.errors import ConfigurationError
from langchain_membrain.memory import MembrainMemory
from langchain_membrain.teachers.llm import LLMTeacher
from langchain_membrain.teachers.resolve import resolve_teacher


def memory(**kw) -> MembrainMemory:
    return MembrainMemory(embeddings=WordEmbeddings(), background=False, **kw)


WHAT_TO_PASS = "pass a LangChain chat model, an `openai.OpenAI` client with `teacher_model=`, or 'provider:model'"


def test_a_bare_model_name_as_teacher_says_what_to_pass(tmp_path):
    db = tmp_path / "m.db"
    with pytest.raises(ConfigurationError, match="names no provider") as caught:
        MembrainMemory(db, teacher="gpt-4o", embeddings=WordEmbeddings())
    assert WHAT_TO_PASS in str(caught.value) and isinstance(caught.value, MembrainError)
    assert not db.exists()  # refused before the storage is opened
    for bad in (":gpt-4o", "openai:", " : "):
        with pytest.raises(ConfigurationError, match="names no provider"):
            resolve_teacher(bad)


def test_a_provider_model_teacher_without_langchain_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "langchain", None)  # not installed: import fails
    monkeypatch.setitem(sys.modules, "langchain.chat_models", None)
    with pytest.raises(ConfigurationError, match="pip install langchain") as caught:
        resolve_teacher("openai:gpt-4o-mini")
    assert "langchain-openai" in str(caught.value) and WHAT_TO_PASS in str(caught.value)


def fake_init_chat_model(monkeypatch, build):
    """Stand ``langchain.chat_models.init_chat_model`` in with ``build`` (no network, no langchain)."""
    package = types.ModuleType("langchain")
    chat_models = types.ModuleType("langchain.chat_models")
    chat_models.init_chat_model = build  # type: ignore[attr-defined]
    package.chat_models = chat_models  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "langchain", package)
    monkeypatch.setitem(sys.modules, "langchain.chat_models", chat_models)


class StructuredFake(GenericFakeChatModel):
    """A fake chat model an LLMTeacher accepts (it asks for structured output at once)."""

    def with_structured_output(self, schema, **kwargs):
        return RunnableLambda(lambda _: {"raw": None, "parsed": None, "parsing_error": None})


def test_a_provider_model_teacher_is_built_by_init_chat_model(monkeypatch):
    asked = []

    def build(name):
        asked.append(name)
        return StructuredFake(messages=iter([]))

    fake_init_chat_model(monkeypatch, build)
    with memory(teacher="openai:gpt-4o-mini") as mem:
        assert asked == ["openai:gpt-4o-mini"] and isinstance(mem.teacher, LLMTeacher)
        assert isinstance(mem.teacher.model, StructuredFake)


def test_a_provider_model_teacher_with_langchain_installed(monkeypatch):
    pytest.importorskip("langchain.chat_models")
    pytest.importorskip("langchain_openai")
    monkeypatch.setenv("OPENAI_API_KEY", "not-used")  # building the model calls no endpoint
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    teacher = resolve_teacher("openai:gpt-4o-mini")
    assert isinstance(teacher, LLMTeacher) and teacher.model.model_name == "gpt-4o-mini"
    with pytest.raises(ConfigurationError, match="could not be built by init_chat_model") as caught:
        resolve_teacher("no-such-provider:model")
    assert WHAT_TO_PASS in str(caught.value)


def test_a_provider_model_that_init_chat_model_cannot_build_is_a_typed_error(monkeypatch):
    def build(name):
        raise ImportError("Unable to import langchain_banana. Please install with `pip install -U langchain-banana`")

    fake_init_chat_model(monkeypatch, build)
    with pytest.raises(ConfigurationError, match="langchain-banana") as caught:
        resolve_teacher("banana:big")
    assert WHAT_TO_PASS in str(caught.value)


def test_retrieve_without_a_chat_model_says_what_to_pass():
    with memory() as mem:
        mem.add("the dog sleeps", namespace="u")
        with pytest.raises(ConfigurationError, match="needs llm=, a LangChain chat model with tool calling"):
            mem.retrieve("where does the dog sleep", "u", llm=None)


def test_retrieve_with_a_model_that_cannot_call_tools_says_so():
    with memory() as mem:
        mem.add("the dog sleeps", namespace="u")
        llm = GenericFakeChatModel(messages=iter([AIMessage("done")]))
        with pytest.raises(ConfigurationError, match="this chat model .* does not support tool calling; "
                                                     "`retrieve` needs a model with `bind_tools`"):
            mem.retrieve("where does the dog sleep", "u", llm=llm)


def test_a_lone_surrogate_is_refused_like_any_invalid_text():
    with memory() as mem:
        with pytest.raises(InvalidOperationError, match="lone surrogate at index 3"):
            mem.add("abc\ud800", namespace="u")
        with pytest.raises(InvalidOperationError, match="item 1 of 2: memory text is not valid Unicode"):
            mem.add_many(["fine", "abc\udfff"], namespace="u")
        mem.add("the dog sleeps", namespace="u")
        with pytest.raises(InvalidOperationError, match="the search query is not valid Unicode"):
            mem.search("abc\ud800", namespace="u")
        assert mem.get("abc", namespace="u") is None and len(mem.search(namespace="u")) == 1


def test_an_unknown_device_is_refused_at_construction(tmp_path):
    db = tmp_path / "m.db"
    with pytest.raises(ConfigurationError, match="device 'banana' is not a torch device; use 'cpu' or 'cuda'"):
        MembrainMemory(db, device="banana", embeddings=WordEmbeddings())
    assert not db.exists()


def test_cuda_where_there_is_none_is_refused_at_construction(monkeypatch, tmp_path):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    db = tmp_path / "m.db"
    for device in ("cuda", "cuda:0"):
        with pytest.raises(ConfigurationError, match="CUDA is not available here; use device='cpu' or leave device unset"):
            MembrainMemory(db, device=device, embeddings=WordEmbeddings())
    assert not db.exists()
    with memory(device="cpu") as mem:
        assert mem.config.device == "cpu"
