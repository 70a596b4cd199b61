"""What the LangGraph insert graph costs: the same inserts run through the compiled graph
(``mem.graph.invoke``) and walked directly (``mem.add``, which ``add_many`` uses), each
into its own fresh memory, embeddings precomputed so that only the pipeline is timed.

    python -m langchain_membrain.bench graph [--data FILE.jsonl] [--limit 300]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from langchain_core.embeddings import Embeddings

from . import machine_description


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", help="JSON lines with 'text' (default: the bundled sample conversation)")
    parser.add_argument("--limit", type=int, default=300, help="inserts per mode")
    parser.add_argument("--json", help="write the results here")


class _Precomputed(Embeddings):
    """An embedder that returns vectors computed once up front (a LangChain Embeddings)."""

    def __init__(self, texts: list[str]):
        from ..index.embeddings import MiniLMEmbeddings

        self.vectors = dict(zip(texts, MiniLMEmbeddings().embed_array(texts)))
        self.fallback = MiniLMEmbeddings()

    def embed_array(self, texts: list[str]) -> np.ndarray:
        missing = [t for t in texts if t not in self.vectors]
        if missing:
            self.vectors.update(zip(missing, self.fallback.embed_array(missing)))
        return np.stack([self.vectors[t] for t in texts])

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_array(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed_array([text])[0].tolist()


def _texts(path: str | None, limit: int) -> list[str]:
    if path is None:
        path = str(Path(__file__).resolve().parent.parent / "data" / "sample_conversation.jsonl")
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    texts = list(dict.fromkeys(r["text"] for r in rows))
    return (texts * (limit // max(len(texts), 1) + 1))[:limit]


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from ..memory import MembrainMemory

    texts = _texts(args.data, args.limit)
    embedder = _Precomputed(sorted(set(texts)))
    results = {}
    for mode in ("direct (mem.add)", "compiled graph (mem.graph.invoke)"):
        with MembrainMemory(embeddings=embedder, operations=False) as mem:
            graph = mem.graph
            times = []
            for i, text in enumerate(texts):
                t0 = time.perf_counter()
                if mode.startswith("direct"):
                    mem.add(text, namespace="bench", key=f"k{i}")
                else:
                    graph.invoke({"text": text, "namespace": "bench", "key": f"k{i}"})
                times.append((time.perf_counter() - t0) * 1000)
            mem.flush()
        a = np.asarray(times)
        results[mode] = {"p50_ms": float(np.percentile(a, 50)), "p95_ms": float(np.percentile(a, 95)),
                         "inserts": len(times)}
    table = Table(title=f"One insert, embedding excluded ({len(texts)} inserts per mode, training in background)")
    for col in ("mode", "p50 ms", "p95 ms"):
        table.add_column(col, justify="left" if col == "mode" else "right")
    for mode, r in results.items():
        table.add_row(mode, f"{r['p50_ms']:.2f}", f"{r['p95_ms']:.2f}")
    console = Console()
    console.print(table)
    console.print(f"machine: {machine_description()}")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine_description(), "results": results}, indent=2))
    return 0
