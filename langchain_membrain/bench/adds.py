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
- ``lag in inserts``: an add waits for the trainer whenever it is ``max_training_lag``
  inserts behind, however long that takes (``background.LAG_WAIT_S = None``: the bound
  before it was bounded in time too).
- ``before``: both of the above, the release before.

    python -m langchain_membrain.bench adds [--facts 1000 5000 20000] [--adds 100] [--json out.json]
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

PATHS = ("product", "deep copies", "lag in inserts", "before")

# One (size, path): open, warm up, time the adds; prints one "wall cpu" line per timed add.
_CHILD = r"""
import random, sys, time
from langchain_membrain.bench.tenants import HashEmbeddings
from langchain_membrain.memory import MembrainMemory
from langchain_membrain.tree.tree import MembrainTree
db, path, warmup, adds, seed, words, ns = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), \
    int(sys.argv[5]), sys.argv[6].split(), sys.argv[7]
if path in ("deep copies", "before"):
    MembrainTree.copy = MembrainTree.deep_copy
if path in ("lag in inserts", "before"):
    import langchain_membrain.insert.background as background
    background.LAG_WAIT_S = None
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


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--facts", type=int, nargs="+", default=[1000, 5000, 20000],
                        help="store sizes (default 1000 5000 20000)")
    parser.add_argument("--adds", type=int, default=100, help="timed adds per size and path (default 100)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed adds first (default 5)")
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS),
                        help="which paths to run (default all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the results here")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMBRAIN_DB")}
    env["HF_HUB_OFFLINE"] = "1"
    return env


def time_adds(db: str, path: str, args: argparse.Namespace, cwd: str) -> dict[str, list[float]]:
    """Wall and thread-CPU seconds of each timed add of one fresh process on ``db``."""
    proc = subprocess.run([sys.executable, "-c", _CHILD, db, path, str(args.warmup), str(args.adds),
                           str(args.seed), " ".join(WORDS), "/".join(NAMESPACE)],
                          env=_env(), cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the {path} run exited with {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    pairs = [line.split() for line in proc.stdout.splitlines() if line.strip()]
    return {"wall": [float(w) for w, _ in pairs], "cpu": [float(c) for _, c in pairs]}


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
            for kind in ("wall", "cpu")
            for name, fn in (("p50", statistics.median), ("p95", lambda v: percentile(v, 95)))}


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    results: dict[int, dict[str, Any]] = {}
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
    table = Table(title=f"add() by namespace size, SQLite, hash embedder ({args.adds} adds, ms)",
                  title_justify="left")
    for col in ("facts", "path", "wall p50", "wall p95", "CPU p50", "CPU p95"):
        table.add_column(col, justify="right")
    for n, by_path in results.items():
        for path, r in by_path.items():
            table.add_row(f"{n:,}", path, f"{r['wall_p50_ms']:.1f}", f"{r['wall_p95_ms']:.1f}",
                          f"{r['cpu_p50_ms']:.1f}", f"{r['cpu_p95_ms']:.1f}")
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
        Path(args.json).write_text(json.dumps({"machine": machine, "results": results}, indent=2))
    return 0
