"""``bench locomo --methods postgresstore``: LangGraph's PostgresStore beside InMemoryStore.

The run against a server uses ``$MEMBRAIN_TEST_POSTGRES_URL`` (conftest.py's pgserver, which
bundles pgvector) and needs ``langgraph.store.postgres`` (the ``pgstore`` extra).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest
from helpers import NO_POSTGRES, WordEmbeddings

from langchain_membrain.bench.locomo import POSTGRES_SCHEMA, run_locomo

URL = os.environ.get("MEMBRAIN_TEST_POSTGRES_URL")
HAVE_PGSTORE = importlib.util.find_spec("langgraph.store.postgres") is not None


def _sample(sample_id: str, texts: list[str], qa: list[tuple[str, str]]) -> dict:
    turns = [{"speaker": "Ann" if i % 2 == 0 else "Bo", "dia_id": f"D1:{i + 1}", "text": t}
             for i, t in enumerate(texts)]
    return {"sample_id": sample_id, "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bo", "session_1": turns, "session_1_date_time": "1:00 pm on 8 May, 2023"},
        "qa": [{"question": q, "evidence": [ev], "category": 4} for q, ev in qa]}


@pytest.fixture
def two_conversations(tmp_path):
    """Two conversations whose turn ids overlap (D1:1...): the second has fewer turns, so an
    id past its end could only come from the other conversation's namespace."""
    a = _sample("conv-a", ["I adopted a puppy named Rex", "I went sailing on the lake", "Rex learned to fetch",
                           "I painted a sunset over the sea", "My sister moved to Lisbon"],
                [("What is the name of Ann's puppy?", "D1:1"), ("Where did Bo go sailing?", "D1:2"),
                 ("Where did Ann's sister move?", "D1:5")])
    b = _sample("conv-b", ["I bake sourdough bread every Sunday", "My cat sleeps on the piano",
                           "We hiked the mountain trail"],
                [("What does Ann bake on Sunday?", "D1:1"), ("Where does Bo's cat sleep?", "D1:2")])
    path = tmp_path / "two.json"
    path.write_text(json.dumps([a, b]))
    return path


@pytest.mark.postgres
@pytest.mark.skipif(not HAVE_PGSTORE, reason="langgraph.store.postgres is not installed (the pgstore extra)")
@pytest.mark.skipif(not URL, reason=NO_POSTGRES)
def test_postgresstore_ranks_as_inmemorystore_does(two_conversations, tmp_path):
    import psycopg

    logs: list[str] = []
    out = run_locomo(str(two_conversations), ks=(1, 3), methods=["inmemorystore", "postgresstore"],
                     cache_dir=str(tmp_path / "cache"), embedder=WordEmbeddings(), postgres=URL, log=logs.append)
    ranked = out["ranked"]
    assert len(ranked["postgresstore"]) == 5
    assert ranked["postgresstore"] == ranked["inmemorystore"]  # both plain cosine over the same vectors
    assert all(set(r) <= {"D1:1", "D1:2", "D1:3"} for r in ranked["postgresstore"][3:])  # conv-b's own turns
    assert out["results"]["postgresstore"] == out["results"]["inmemorystore"]
    assert out["results"]["postgresstore"]["overall"]["all@3"] == 1.0
    assert out["timing"]["postgresstore"]["search_p50_ms"] > 0
    with psycopg.connect(URL, autocommit=True) as conn:  # the run's schema is gone afterwards
        assert conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (POSTGRES_SCHEMA,)).fetchone() is None


def test_postgresstore_without_a_server_is_skipped_saying_why(two_conversations, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pgserver", None)  # import pgserver raises ImportError
    logs: list[str] = []
    out = run_locomo(str(two_conversations), ks=(1,), methods=["inmemorystore", "postgresstore"],
                     cache_dir=str(tmp_path / "cache"), embedder=WordEmbeddings(), postgres=None, log=logs.append)
    assert set(out["results"]) == {"inmemorystore"}
    assert any(line.startswith("postgresstore skipped:") for line in logs), logs
