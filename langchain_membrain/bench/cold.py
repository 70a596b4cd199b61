"""Cold open to first search (issue 48): a new process opens a SQLite memory of N facts and
runs one search; measured from before the process starts to the search's return.

For each size a store is built directly through the storage (one namespace: a root,
``N / 200`` aspects, N facts with short texts and random unit 384-d embeddings), so that
building it takes seconds. Each run is a fresh ``python -c`` process that imports the
package, opens ``MembrainMemory(db)`` (its defaults: bundled MiniLM embedder, offline
teacher) and searches the namespace once; it reports the wall time since the parent
started it and its CPU time (``time.process_time()``, every thread), both at the search's
return (the exit is not counted). Two ways of indexing the loaded namespace, in the same
run: ``saved`` (the index and the tree a previous process saved at close, read back:
index_cache.py, tree_cache.py; one untimed process opens the store and closes it first, to
save them), ``bulk`` (the saved index and tree neither read nor written: the rows read
and ``FactIndex.add_many`` over them) and ``per-fact`` (``Forest.bulk_load = False`` and the
garbage collector left on: ``FactIndex.add`` per fact with the HNSW graph built at load, the releases before
issue 48), the latter only up to ``--baseline-max`` facts.

With ``--postgres URL`` each store is also written to that PostgreSQL database (a schema of
its own, dropped after) and timed the same way, ``saved`` reading the files saved under
``MembrainMemory(index_dir=...)``.

    python -m langchain_membrain.bench cold [--facts 1000 5000 20000] [--runs 3] [--postgres URL] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import machine_description

NAMESPACE = ("users", "maya")
DIM = 384
QUERY = "who plays the piano and likes tea?"
WORDS = ("maya tom ines ravi piano tea coffee dog cat lisbon chess bread garden bike marathon japanese "
         "database surgery peanuts manchester sourdough fiction climbing gym").split()

# One run: import, open, first search; prints wall seconds since the parent's start time
# and CPU seconds of this process, at the search's return. argv[1]: the run, as JSON.
_CHILD = r"""
import contextlib, json, sys, time
run = json.loads(sys.argv[1])
from langchain_membrain.storage import forest, open_storage
from langchain_membrain.storage.forest import Forest
from langchain_membrain.memory import MembrainMemory
Forest.bulk_load = run["path"] != "per-fact"
if not Forest.bulk_load:  # the path before issue 48: the collector on throughout
    forest.paused_gc = contextlib.nullcontext
storage = open_storage(run["target"], schema=run["schema"]) if run["schema"] else run["target"]
memory = MembrainMemory(storage, **({"index_dir": run["index_dir"]} if run["index_dir"] else {}))
if run["path"] != "saved":  # the namespace indexed from its rows, its saved index neither read nor written
    memory._forest.index_cache = None
hits = memory.search(run["query"], namespace="/".join(run["namespace"]), limit=5)
wall, cpu = time.time() - run["started"], time.process_time()
assert hits, "the search found nothing"
print(f"{wall} {cpu} {len(hits)}")
memory.close()
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--facts", type=int, nargs="+", default=[1000, 5000, 20000],
                        help="store sizes (default 1000 5000 20000)")
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per size and path (default 3)")
    parser.add_argument("--baseline-max", type=int, default=20000,
                        help="largest size the per-fact baseline is run at (it is slow)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--postgres", metavar="URL", help="also time each store written to this PostgreSQL database")
    parser.add_argument("--json", help="write the results here")


def build_store(path: str, n_facts: int, seed: int = 0, schema: str | None = None) -> float:
    """Write a one-namespace store of ``n_facts`` facts (module docstring) to the SQLite file
    or PostgreSQL URL ``path`` (in ``schema``); seconds taken."""
    from ..storage import open_storage

    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    t0 = 1.7e9
    rows: list[dict[str, Any]] = [{"id": "root", "kind": "root", "text": "maya", "parent": None, "seq": 0,
                                   "embedding": None, "created_at": t0, "updated_at": t0, "metadata": {}}]
    n_aspects = max(1, n_facts // 200)
    aspects = rng.normal(size=(n_aspects, DIM)).astype(np.float32)
    aspects /= np.linalg.norm(aspects, axis=1, keepdims=True)
    for a in range(n_aspects):
        rows.append({"id": f"a{a}", "kind": "aspect", "text": f"topic {a}", "parent": "root", "seq": a + 1,
                     "embedding": aspects[a], "created_at": t0, "updated_at": t0, "metadata": {}})
    words = rng.integers(0, len(WORDS), size=(n_facts, 5))
    with open_storage(path, **({"schema": schema} if schema else {})) as storage:
        for lo in range(0, n_facts, 50_000):  # a few writes: bounded memory for the rows
            hi = min(lo + 50_000, n_facts)
            vecs = rng.normal(size=(hi - lo, DIM)).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            for i in range(lo, hi):
                text = " ".join(WORDS[w] for w in words[i]) + f" (note {i})"
                rows.append({"id": f"f{i}", "kind": "fact", "text": text, "parent": f"a{i % n_aspects}",
                             "seq": n_aspects + 1 + i, "embedding": vecs[i - lo], "created_at": t0 + i,
                             "updated_at": t0 + i, "metadata": {"value": {"content": text}, "indexed": True}})
            storage.write(NAMESPACE, rows, [])
            rows = []
    return time.perf_counter() - start


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMBRAIN_DB")}
    env["HF_HUB_OFFLINE"] = "1"
    return env


def _drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def time_open(target: str, path: str, cwd: str, schema: str | None = None,
              index_dir: str | None = None) -> tuple[float, float]:
    """(wall, CPU) seconds of one fresh process's open and first search."""
    run = {"target": target, "path": path, "schema": schema, "index_dir": index_dir, "started": time.time(),
           "query": QUERY, "namespace": NAMESPACE}
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(run)], env=_env(), cwd=cwd,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the {path} run exited with {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    wall, cpu, _ = proc.stdout.split()[-3:]
    return float(wall), float(cpu)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="membrain-cold-") as tmp:
        for n in args.facts:
            backends: list[tuple[str, str, str | None, str | None]] = [
                ("SQLite", str(Path(tmp) / f"cold-{n}.db"), None, None)]
            if args.postgres:
                backends.append(("PostgreSQL", args.postgres, f"membrain_cold_{n}", str(Path(tmp) / "pg-index")))
            for storage, target, schema, index_dir in backends:
                if schema:
                    _drop_schema(target, schema)
                console.print(f"[dim]building a {n}-fact {storage} store…[/]")
                built = build_store(target, n, args.seed, schema)
                row: dict[str, Any] = {"facts": n, "storage": storage, "build_s": round(built, 2)}
                paths = ["saved", "bulk"] + (["per-fact"] if n <= args.baseline_max else [])
                console.print(f"[dim]{n} facts: saving its index…[/]")
                time_open(target, "saved", tmp, schema, index_dir)  # indexes the rows, saves the index at close
                for i in range(max(args.runs, 1)):  # the paths alternate: load drifts hit both alike
                    for path in paths:
                        console.print(f"[dim]{n} facts, {storage}, {path}, run {i + 1}…[/]")
                        wall, cpu = time_open(target, path, tmp, schema, index_dir)
                        row.setdefault(path, {"wall": [], "cpu": []})
                        row[path]["wall"].append(wall)
                        row[path]["cpu"].append(cpu)
                for path in paths:
                    row[path]["wall_median"] = statistics.median(row[path]["wall"])
                    row[path]["cpu_median"] = statistics.median(row[path]["cpu"])
                results.append(row)
                if schema:
                    _drop_schema(target, schema)
                else:
                    os.remove(target)
                shutil.rmtree(index_dir or target + ".index", ignore_errors=True)
    machine: dict[str, Any] = {"description": machine_description(), "cpu_count": os.cpu_count(), "platform": platform.platform(),
               "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
    table = Table(title=f"Cold open to first search, fresh process ({args.runs} runs, median)",
                  title_justify="left")
    for col in ("facts", "storage", "saved wall s", "saved CPU s", "bulk wall s", "bulk CPU s", "per-fact wall s",
                "per-fact CPU s", "bulk / saved (wall)"):
        table.add_column(col, justify="right")
    for row in results:
        s, b, p = row["saved"], row["bulk"], row.get("per-fact")
        table.add_row(f"{row['facts']:,}", row["storage"], f"{s['wall_median']:.2f}", f"{s['cpu_median']:.2f}",
                      f"{b['wall_median']:.2f}", f"{b['cpu_median']:.2f}",
                      f"{p['wall_median']:.2f}" if p else "-", f"{p['cpu_median']:.2f}" if p else "-",
                      f"{b['wall_median'] / s['wall_median']:.2f}x")
    console.print(table)
    console.print(f"machine: {machine['description']}; {platform.platform()}; os.cpu_count()={os.cpu_count()}"
                  + (f"; load average {machine['load_average'][0]:.2f}" if machine["load_average"] else ""))
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "results": results}, indent=2))
    return 0
