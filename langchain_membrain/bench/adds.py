"""``add()`` latency against the namespace's size (issue 48): p50 and p95 of one ``add`` into
a namespace of N facts, the embedding excluded.

For each size a store is built as ``bench cold`` builds it (one namespace: a root, ``N / 200``
aspects, N facts with random unit 384-d embeddings; :func:`.cold.build_store`). Each (size,
path) runs in a fresh process that opens the store with ``MembrainMemory(db)`` and its
defaults (offline teacher, background training, memory operations), except for the embedder:
a deterministic hash of the text (:class:`.tenants.HashEmbeddings`), so that embedding costs
nothing. It makes ``--warmup`` untimed adds (the namespace's load, the learner's creation),
then ``--adds`` timed ones of short random texts, and reports per add the wall time and the
calling thread's CPU time (``time.thread_time``: the foreground's own work, not the trainer's
nor the waiting).

The paths, in the same run (paired: the same store, the same texts, alternating per size):

- ``product``: the package as it is.
- ``deep copies``: every ``MembrainTree.copy`` is a full copy of the tree
  (``MembrainTree.deep_copy``: what ``copy`` was before copy-on-write).
- ``waits for the trainer``: an add waits while ``max_training_lag`` inserts wait for the
  trainer, however long that takes (no time bound, nothing skipped).

Beside a peer, with the bundled MiniLM embedder (``--paths minilm inmemorystore``): the
embedding then counts, as a user's add pays it.

- ``minilm``: the product, its embedder MiniLM (the store's facts keep their random
  embeddings: only the new texts are embedded).
- ``inmemorystore``: LangGraph's ``InMemoryStore`` with an index of the same embedder, holding
  the same N texts (put with random vectors, untimed, then the embedder switched to MiniLM),
  timed ``put`` of the same new texts.

Both then time ``--searches`` searches of the namespace (``limit=10``, the query embedded).
``--hog`` runs a CPU-bound process beside the timed runs, as on a shared machine.

    python -m langchain_membrain.bench adds [--facts 1000 5000 20000] [--adds 100] [--paths ...] [--hog]
        [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from . import machine_description
from .cold import NAMESPACE, WORDS, build_store

PATHS = ("product", "deep copies", "waits for the trainer")
PEER_PATHS = ("minilm", "inmemorystore")

# One (size, path): open, warm up, time the adds; prints one "wall cpu" line per timed add.
_CHILD = r"""
import random, sys, time
from langchain_membrain.bench.tenants import HashEmbeddings
from langchain_membrain.memory import MembrainMemory
from langchain_membrain.tree.tree import MembrainTree
db, path, warmup, adds, seed, words, ns = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), \
    int(sys.argv[5]), sys.argv[6].split(), sys.argv[7]
if path == "deep copies":
    MembrainTree.copy = MembrainTree.deep_copy
if path == "waits for the trainer":
    import langchain_membrain.insert.jobs as jobs
    jobs.LAG_WAIT_S = None
rng = random.Random(seed)
texts = [" ".join(rng.choice(words) for _ in range(6)) + f" (added {i})" for i in range(warmup + adds)]
with MembrainMemory(db, embeddings=HashEmbeddings()) as memory:
    for i, text in enumerate(texts):
        wall, cpu = time.perf_counter(), time.thread_time()
        memory.add(text, namespace=ns)
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        if i >= warmup:
            print(f"{wall} {cpu}", flush=True)
"""

# The same with MiniLM, for the product or LangGraph's InMemoryStore; then the searches
# ("search <wall>" lines).
_PEER_CHILD = r"""
import random, sqlite3, sys, time
import numpy as np
from langchain_membrain.index.embeddings import MiniLMEmbeddings
db, path, warmup, adds, seed, words, ns, searches = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
    int(sys.argv[4]), int(sys.argv[5]), sys.argv[6].split(), sys.argv[7], int(sys.argv[8])
rng = random.Random(seed)
texts = [" ".join(rng.choice(words) for _ in range(6)) + f" (added {i})" for i in range(warmup + adds)]
queries = ["what about " + " ".join(rng.choice(words) for _ in range(3)) for _ in range(searches)]
minilm = MiniLMEmbeddings()
namespace = tuple(ns.split("/"))

def timed(calls):
    for i, call in enumerate(calls):
        wall, cpu = time.perf_counter(), time.thread_time()
        call()
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
        if i >= warmup:
            print(f"{wall} {cpu}", flush=True)

if path == "minilm":
    from langchain_membrain.memory import MembrainMemory
    with MembrainMemory(db, embeddings=minilm) as memory:
        timed([lambda t=t: memory.add(t, namespace=namespace) for t in texts])
        for q in queries:
            wall = time.perf_counter(); memory.search(q, namespace=namespace, limit=10)
            print(f"search {time.perf_counter() - wall}", flush=True)
else:
    from langchain_core.embeddings import Embeddings
    from langgraph.store.memory import InMemoryStore

    class Switched(Embeddings):  # random vectors while the store is filled, MiniLM after
        filling = True
        def embed_documents(self, docs):
            if self.filling:
                v = np.random.default_rng(len(docs)).normal(size=(len(docs), 384)).astype(np.float32)
                return (v / np.linalg.norm(v, axis=1, keepdims=True)).tolist()
            return minilm.embed_documents(docs)
        def embed_query(self, text):
            return minilm.embed_query(text)

    embed = Switched()
    store = InMemoryStore(index={"dims": 384, "embed": embed})
    rows = sqlite3.connect(db).execute("SELECT id, text FROM membrain_nodes WHERE kind = 'fact'").fetchall()
    from langgraph.store.base import PutOp
    for lo in range(0, len(rows), 1000):
        store.batch([PutOp(namespace, key, {"content": text}) for key, text in rows[lo:lo + 1000]])
    embed.filling = False
    timed([lambda i=i, t=t: store.put(namespace, f"new{i}", {"content": t}) for i, t in enumerate(texts)])
    for q in queries:
        wall = time.perf_counter(); store.search(namespace, query=q, limit=10)
        print(f"search {time.perf_counter() - wall}", flush=True)
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--facts", type=int, nargs="+", default=[1000, 5000, 20000],
                        help="store sizes (default 1000 5000 20000)")
    parser.add_argument("--adds", type=int, default=100, help="timed adds per size and path (default 100)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed adds first (default 5)")
    parser.add_argument("--paths", nargs="+", choices=PATHS + PEER_PATHS, default=list(PATHS),
                        help="which paths to run (default the four hash-embedder paths; with a peer: minilm "
                             "inmemorystore)")
    parser.add_argument("--searches", type=int, default=50, help="timed searches after the peer paths' adds")
    parser.add_argument("--hog", action="store_true", help="a CPU-bound process runs beside the timed runs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the results here")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMBRAIN_DB")}
    env["HF_HUB_OFFLINE"] = "1"
    return env


def time_adds(db: str, path: str, args: argparse.Namespace, cwd: str) -> dict[str, list[float]]:
    """Wall and thread-CPU seconds of each timed add of one fresh process on ``db``."""
    peer = path in PEER_PATHS
    proc = subprocess.run([sys.executable, "-c", _PEER_CHILD if peer else _CHILD, db, path, str(args.warmup),
                           str(args.adds), str(args.seed), " ".join(WORDS), "/".join(NAMESPACE),
                           *([str(args.searches)] if peer else [])],
                          env=_env(), cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the {path} run exited with {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    lines = [line.split() for line in proc.stdout.splitlines() if line.strip()]
    pairs = [line for line in lines if line[0] != "search"]
    out = {"wall": [float(w) for w, _ in pairs], "cpu": [float(c) for _, c in pairs]}
    if peer:
        out["search"] = [float(line[1]) for line in lines if line[0] == "search"]
    return out


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, linear between order statistics."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarise(times: dict[str, list[float]]) -> dict[str, float]:
    """p50 and p95 of the wall and CPU times, in milliseconds."""
    return {f"{kind}_{name}_ms": round(1000 * fn(times[kind]), 2)
            for kind in ("wall", "cpu", "search") if times.get(kind)
            for name, fn in (("p50", statistics.median), ("p95", lambda v: percentile(v, 95)))}


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    console = Console()
    results: dict[int, dict[str, Any]] = {}
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.hog else None
    try:
        _run_sizes(args, console, results)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    _report(args, console, results)
    return 0


def _run_sizes(args: argparse.Namespace, console: Any, results: dict[int, dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory(prefix="membrain-adds-") as tmp:
        for n in args.facts:
            console.print(f"[dim]building a {n}-fact store…[/]")
            pristine = Path(tmp) / f"adds-{n}.db"
            build_store(str(pristine), n, args.seed)
            results[n] = {}
            for path in args.paths:  # each path adds to its own copy of the store
                db = Path(tmp) / f"adds-{n}-run.db"
                db.write_bytes(pristine.read_bytes())
                console.print(f"[dim]{n} facts, {path}…[/]")
                times = time_adds(str(db), path, args, tmp)
                results[n][path] = {**summarise(times), **times}
                db.unlink()
            pristine.unlink()


def _report(args: argparse.Namespace, console: Any, results: dict[int, dict[str, Any]]) -> None:
    from rich.table import Table

    table = Table(title=f"add() (put for inmemorystore) by namespace size, SQLite; hash embedder but on the minilm "
                        f"and inmemorystore paths ({args.adds} adds, ms){'; a CPU hog beside' if args.hog else ''}",
                  title_justify="left")
    for col in ("facts", "path", "wall p50", "wall p95", "CPU p50", "CPU p95", "search p50", "search p95"):
        table.add_column(col, justify="right")
    for n, by_path in results.items():
        for path, r in by_path.items():
            search = [f"{r[k]:.1f}" if k in r else "-" for k in ("search_p50_ms", "search_p95_ms")]
            table.add_row(f"{n:,}", path, f"{r['wall_p50_ms']:.1f}", f"{r['wall_p95_ms']:.1f}",
                          f"{r['cpu_p50_ms']:.1f}", f"{r['cpu_p95_ms']:.1f}", *search)
    console.print(table)
    small, large = min(results), max(results)
    if small != large:
        for path in args.paths:
            ratio = results[large][path]["wall_p95_ms"] / results[small][path]["wall_p95_ms"]
            console.print(f"{path}: wall p95 at {large:,} / at {small:,} = {ratio:.2f}")
    machine = {"description": machine_description(), "platform": platform.platform(),
               "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
    console.print(f"machine: {machine['description']}; load average "
                  + (f"{machine['load_average'][0]:.2f}" if machine["load_average"] else "?"))
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "hog": args.hog, "results": results}, indent=2))
