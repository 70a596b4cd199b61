"""LangGraph and LangChain faces of a memory: the ``BaseStore`` (:mod:`.store`) and the
agent tools (:mod:`.tools`). The retriever lives in ``retrieval`` because
``MembrainMemory.as_retriever`` returns one.

May import: ``memory`` and everything below it.
"""
