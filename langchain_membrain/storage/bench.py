"""Benchmark: open a store holding many facts and load one namespace lazily.

``python -m langchain_membrain.storage.bench [--target membrain.db|postgresql://...]
[--facts 100000] [--namespaces 100] [--dim 384]`` fills a fresh store (a temporary SQLite
file by default; for PostgreSQL a fresh schema, dropped afterwards) with ``--facts`` facts
spread over ``--namespaces`` trees (root, 10 aspects, facts under them, random float32
embeddings), then measures, each in a new Storage object:

- ``open_s``: opening the store (connect, schema check): no node is read;
- ``list_s``: listing the namespaces and their versions;
- ``load_one_s``: loading one namespace as a MembrainTree (rows read + tree rebuilt and
  checked), i.e. what the first access to a namespace costs;
- ``load_big_s``: with ``--big``, loading one namespace that holds all ``--facts`` facts.

:func:`run_load_benchmark` returns the numbers as a dict (for a ``bench`` subcommand).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid
from typing import Any

import numpy as np

from . import is_postgres_url, open_storage
from .base import STORE_VALUE_KEY

ASPECTS_PER_TREE = 10


def _tree_rows(rng: np.random.Generator, n_facts: int, dim: int, start: float) -> list[dict[str, Any]]:
    """Rows of a valid tree: a root, ASPECTS_PER_TREE aspects, n_facts facts below them."""
    rows: list[dict[str, Any]] = [{"id": "root", "kind": "root", "text": "subject", "parent": None, "seq": 0, "embedding": None,
             "created_at": start, "updated_at": start, "metadata": {}}]
    seq = 0
    aspects = []
    for a in range(ASPECTS_PER_TREE):
        seq += 1
        aid = f"a-{a}"
        aspects.append(aid)
        rows.append({"id": aid, "kind": "aspect", "text": f"aspect {a}", "parent": "root", "seq": seq,
                     "embedding": rng.random(dim, dtype=np.float32), "created_at": start, "updated_at": start,
                     "metadata": {}})
    vectors = rng.random((n_facts, dim), dtype=np.float32)
    for f in range(n_facts):
        seq += 1
        rows.append({"id": f"f-{f}", "kind": "fact", "text": f"fact number {f} about something", "seq": seq,
                     "parent": aspects[f % ASPECTS_PER_TREE], "embedding": vectors[f], "created_at": start + f,
                     "updated_at": start + f, "metadata": {STORE_VALUE_KEY: {"content": f"fact {f}", "n": f}}})
    return rows


def run_load_benchmark(target: str | None = None, *, n_facts: int = 100_000, n_namespaces: int = 100,
                       dim: int = 384, big: bool = False, seed: int = 0) -> dict[str, Any]:
    """Fill a fresh store and time opening it and loading one namespace; return the numbers."""
    rng = np.random.default_rng(seed)
    cleanup = None
    options: dict[str, Any] = {}
    if target is None:
        tmp = tempfile.TemporaryDirectory(prefix="membrain-bench-")
        target = os.path.join(tmp.name, "membrain.db")
        cleanup = tmp.cleanup
    elif is_postgres_url(target):
        schema = f"membrain_bench_{uuid.uuid4().hex[:8]}"
        options["schema"] = schema

        def cleanup() -> None:
            import psycopg

            with psycopg.connect(target, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')  # generated name, not input
    elif os.path.exists(target):
        raise SystemExit(f"{target} exists: the benchmark needs a fresh store")
    result: dict[str, Any] = {"target": target if not is_postgres_url(target) else "postgresql",
                              "facts": n_facts, "namespaces": n_namespaces, "dim": dim}
    try:
        per_ns = n_facts // n_namespaces
        start = time.perf_counter()
        with open_storage(target, **options) as storage:
            for k in range(n_namespaces):
                storage.write((f"user-{k}", "memories"), _tree_rows(rng, per_ns, dim, 1.7e9), [])
            if big:
                storage.write(("big",), _tree_rows(rng, n_facts, dim, 1.7e9), [])
        result["fill_s"] = round(time.perf_counter() - start, 2)

        start = time.perf_counter()
        storage = open_storage(target, **options)
        result["open_s"] = round(time.perf_counter() - start, 4)
        with storage:
            start = time.perf_counter()
            names = storage.list_namespaces()
            storage.namespace_versions()
            result["list_s"] = round(time.perf_counter() - start, 4)
            assert len(names) == n_namespaces + (1 if big else 0)
            start = time.perf_counter()
            found = storage.load_tree(("user-0", "memories"))
            assert found is not None
            tree = found[0]
            result["load_one_s"] = round(time.perf_counter() - start, 4)
            result["load_one_facts"] = len(tree.facts())
            times = []
            for _ in range(50):  # the per-namespace refresh check: median of 50
                start = time.perf_counter()
                storage.namespace_version(("user-0", "memories"))
                times.append(time.perf_counter() - start)
            result["version_check_ms"] = round(float(np.median(times)) * 1000, 3)
            if big:
                start = time.perf_counter()
                loaded = storage.load_rows(("big",))
                result["load_big_rows_s"] = round(time.perf_counter() - start, 2)
                assert loaded is not None
                start = time.perf_counter()
                found = storage.load_tree(("big",))
                assert found is not None
                tree = found[0]
                result["load_big_s"] = round(time.perf_counter() - start, 2)
                result["load_big_facts"] = len(tree.facts())
    finally:
        if cleanup is not None:
            cleanup()
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default=None, help="a new SQLite path or a postgresql:// URL (default: temp file)")
    p.add_argument("--facts", type=int, default=100_000)
    p.add_argument("--namespaces", type=int, default=100)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--big", action="store_true", help="also load one namespace holding all the facts")
    args = p.parse_args(argv)
    print(json.dumps(run_load_benchmark(args.target, n_facts=args.facts, n_namespaces=args.namespaces,
                                        dim=args.dim, big=args.big), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
