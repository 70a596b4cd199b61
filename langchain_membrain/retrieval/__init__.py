"""Reading a memory: a search in one or several steps.

Owns the read path (:mod:`.reads`: candidates from the index, filters, kinds, the tree's
context), the second search step (:mod:`.multistep`), calibrated scores (:mod:`.scores`) and
the statements that supersede a returned memory, placed before it (:mod:`.supersession`),
and the LangChain retriever (:mod:`.retriever`).

May import: ``errors``, ``tree``, ``index``, ``storage``, ``teachers``.
"""
