"""Memory per tenant: many small namespaces in one process.

``python -m langchain_membrain.bench tenants --namespaces 20000`` adds ``--facts`` memories
(default 3) to each of N namespaces and reports the process's resident memory over its
base (and per namespace, from the growth over the second half of the namespaces), in memory and on SQLite with ``max_loaded_namespaces`` (``--cap``), then reads every
write back (after unloading, from storage). Embeddings are deterministic random unit
vectors (a hash of the text), so the embedder's cost and memory are not measured.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np
from langchain_core.embeddings import Embeddings


class HashEmbeddings(Embeddings):
    """A unit vector per text, from a hash of it: no model, stable across runs."""

    def __init__(self, dim: int = 384):
        self.dim = dim

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        out = []
        for t in texts:
            v = np.random.default_rng(zlib.crc32(t.encode())).normal(size=self.dim)
            out.append((v / np.linalg.norm(v)).tolist())
        return out

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespaces", type=int, default=20000)
    parser.add_argument("--facts", type=int, default=3, help="memories per namespace")
    parser.add_argument("--cap", type=int, default=1000, help="max_loaded_namespaces on SQLite")


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def fill(storage, n: int, facts: int, cap: int) -> dict:
    from ..memory import MembrainMemory

    with MembrainMemory(storage, embeddings=HashEmbeddings(), relabel=False, max_loaded_namespaces=cap,
                        operations=False) as mem:
        mem.add("warm up", namespace="warm")
        mem.flush()
        base, t0 = rss_mb(), time.perf_counter()
        keys = {}
        half = base
        for i in range(n):
            if i == n // 2:
                mem.flush()
                half = rss_mb()
            ns = f"tenant/{i}"
            keys[ns] = mem.add_many([f"tenant {i} note {j}" for j in range(facts)], namespace=ns)
        mem.flush()
        end, seconds = rss_mb(), time.perf_counter() - t0
        grown = end - base
        loaded = mem.stats()["loaded_namespaces"]
        sample = list(keys.items())[:: max(n // 200, 1)]
        readable = all(mem.get(k, namespace=ns) is not None for ns, ks in sample for k in ks)
    # Per namespace from the second half's growth: costs paid once during the first writes
    # (torch and the optimisers, built at the first training step, hundreds of MB) are not
    # spread over the namespaces.
    return {"mb_over_base": grown, "kb_per_namespace": 1000 * (end - half) / max(n - n // 2, 1),
            "seconds": seconds, "loaded_at_end": loaded, "writes_readable": readable}


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from . import machine_description

    rows = {"in memory (nothing can be unloaded)": fill(None, args.namespaces, args.facts, args.cap)}
    with tempfile.TemporaryDirectory() as tmp:
        rows[f"SQLite, max_loaded_namespaces={args.cap}"] = fill(Path(tmp) / "t.db", args.namespaces, args.facts,
                                                                 args.cap)
    table = Table(title=f"{args.namespaces} namespaces x {args.facts} memories")
    for col in ("storage", "MB over base", "KB per namespace (second half)", "loaded at end", "seconds",
                "every write readable"):
        table.add_column(col, justify="right")
    for name, r in rows.items():
        table.add_row(name, f"{r['mb_over_base']:.0f}", f"{r['kb_per_namespace']:.1f}", str(r["loaded_at_end"]),
                      f"{r['seconds']:.0f}", str(r["writes_readable"]))
    console = Console()
    console.print(table)
    console.print(f"[dim]{machine_description()}[/]")
    return 0
