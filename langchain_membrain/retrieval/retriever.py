"""`MembrainRetriever`: a LangChain retriever over a :class:`~.memory.MembrainMemory`."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol, Sequence, runtime_checkable

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field

from ..tree.inputs import as_namespace
from ..tree.records import MemoryRecord

__all__ = ["MembrainRetriever", "SearchableMemory", "record_to_document"]

#: Metadata keys set by the retriever; a value field of the same name is not copied.
RESERVED_METADATA = ("key", "namespace", "path", "score")


@runtime_checkable
class SearchableMemory(Protocol):
    """What the retriever needs of a memory: its ``search`` (``MembrainMemory`` has it).
    A protocol, so that this module does not import memory.py, whose ``as_retriever``
    imports this one."""

    def search(self, query: str | None = None, *, namespace: str | Sequence[str] | None = None,
               limit: int = 5, filter: dict[str, Any] | None = None) -> list[MemoryRecord]: ...


def record_to_document(record: MemoryRecord) -> Document:
    """A memory as a Document: the fact text as ``page_content``; ``metadata`` holds the
    value's other fields plus ``key``, ``namespace`` (tuple), ``path`` (aspect labels from
    the root) and ``score``; ``id`` is the key."""
    metadata = {k: v for k, v in record.value.items()
                if k not in RESERVED_METADATA and not (isinstance(v, str) and v == record.text)}
    metadata.update(key=record.key, namespace=record.namespace, path=list(record.path), score=record.score)
    return Document(page_content=record.text, metadata=metadata, id=record.key)


class MembrainRetriever(BaseRetriever):
    """Retrieve memories relevant to a query, best first.

    Searches ``namespace`` and every namespace below it. ``k`` and ``filter`` can also be
    given per call: ``retriever.invoke("query", k=3, filter={"kind": "preference"})``.

    Example:
        ```python
        memory = MembrainMemory()
        memory.add("Alice is allergic to peanuts", namespace="users/alice")
        retriever = MembrainRetriever(memory=memory, namespace="users/alice", k=2)
        retriever.invoke("what food should Alice avoid?")
        ```
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: SearchableMemory
    """The memory to search (a ``MembrainMemory``)."""
    namespace: tuple[str, ...] | list[str] | str | None = None
    """The namespace (prefix) to search; ``"a/b"`` or a tuple. None: the memory's default."""
    k: int = Field(default=4, ge=0)
    """How many documents to return."""
    filter: dict[str, Any] | None = None
    """A LangGraph-style value filter (see :mod:`langchain_membrain.tree.filters`)."""

    def _search(self, query: str, k: int | None, filter: dict[str, Any] | None) -> list[Document]:
        records = self.memory.search(query, namespace=as_namespace(self.namespace),
                                     limit=self.k if k is None else k,
                                     filter=self.filter if filter is None else filter)
        return [record_to_document(r) for r in records]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                k: int | None = None, filter: dict[str, Any] | None = None) -> list[Document]:
        return self._search(query, k, filter)

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun,
                                       k: int | None = None,
                                       filter: dict[str, Any] | None = None) -> list[Document]:
        return await asyncio.to_thread(self._search, query, k, filter)
