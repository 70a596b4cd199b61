"""Search indexes over a namespace's facts, and the embedders.

Owns the lexical index (BM25 postings), the dense index (HNSW), the chat context (sessions,
speakers, dates), their fusion into one ranked list (:mod:`.facts`) and the text embedders
(MiniLM run in numpy).

May import: ``errors``.
"""
