"""Several workers, one memory: what ``add()`` and ``search()`` cost right after another
process wrote the namespace, refreshed by change, against the same calls with no other
writer and against reloading the namespace whole (the behaviour before the change log).

``python -m langchain_membrain.bench workers [--facts 1000 10000] [--processes 2 4]
[--target postgresql://...] [--ops 40]``

For each size, a fresh store (a temporary SQLite file; with ``--target`` a PostgreSQL URL,
a fresh schema dropped afterwards) is filled with one namespace of that many facts (a
three-level tree: top aspects, leaf aspects of 20 facts; 384-d unit vectors from a hash of
the text, so no embedding model is timed). Then N worker processes (``MembrainMemory``
with ``refresh_interval=0``: every call checks the stored version) open it and load the
namespace (``load_s``: the whole-namespace load, tree and search index, that a refresh by
reload pays). Three phases, each op timed in the process that runs it:

- **alone**: worker 0 alone runs ``--ops`` timed calls (alternately ``search`` and
  ``add``; each ``search`` is followed by an untimed ``add``), no other writer;
- **after another's write**: the N workers take turns, one call at a time, so every
  timed call comes right after the other workers' writes (N - 1 of them since its own
  last turn): the call first applies the logged changes (counted by the memory as
  ``refreshed_by_change``; a call that had to reload is reported in ``reloads``); the
  ``refresh`` column is the time of that catch-up alone, inside the call;
- **reload (before)**: the same turns with the change log ignored (``changes_since``
  answers None), so every catch-up reloads the namespace whole, as before.

Turns keep one process busy at a time (a worker waits for its own background training,
``flush()``, before passing the turn), so on a small machine the phases compare the cost
of refreshing, not CPU contention between workers. Model checkpoints are not saved during
the run (``checkpoint_every`` huge): reloading a checkpoint another process saved is a
separate cost, paid once per ``checkpoint_every`` inserts.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import time
import uuid
import zlib
from typing import Any

import numpy as np

NS = ("bench", "workers")
LEAF = 20  # facts per leaf aspect
DIM = 384


def _unit(text: str) -> np.ndarray:
    v = np.random.default_rng(zlib.crc32(text.encode())).normal(size=DIM)
    return (v / np.linalg.norm(v)).astype(np.float32)


def namespace_rows(n_facts: int, seed: int = 0) -> list[dict[str, Any]]:
    """Rows of a valid tree of ``n_facts`` facts: root, top aspects of LEAF leaf aspects,
    leaf aspects of LEAF facts; facts near their leaf's centroid, aspects labelled by it."""
    from ..storage.base import STORE_VALUE_KEY

    rng = np.random.default_rng(seed)
    now = time.time() - 3600
    rows: list[dict[str, Any]] = [{"id": "root", "kind": "root", "text": "bench", "parent": None, "seq": 0, "embedding": None,
             "created_at": now, "updated_at": now, "metadata": {}}]
    seq = 0
    n_leaves = max(1, -(-n_facts // LEAF))
    n_tops = max(1, -(-n_leaves // LEAF))
    tops = []
    for t in range(n_tops):
        seq += 1
        tops.append(f"top-{t}")
        rows.append({"id": f"top-{t}", "kind": "aspect", "text": f"topic {t}", "parent": "root", "seq": seq,
                     "embedding": _unit(f"topic {t}"), "created_at": now, "updated_at": now, "metadata": {}})
    made = 0
    for leaf in range(n_leaves):
        seq += 1
        centre = _unit(f"leaf {leaf}")
        rows.append({"id": f"leaf-{leaf}", "kind": "aspect", "text": f"subtopic {leaf}", "parent": tops[leaf % n_tops],
                     "seq": seq, "embedding": centre, "created_at": now, "updated_at": now, "metadata": {}})
        for _ in range(min(LEAF, n_facts - made)):
            seq += 1
            v = centre + 0.3 * rng.normal(size=DIM).astype(np.float32) / np.sqrt(DIM)
            text = f"fact {made} of subtopic {leaf}"
            rows.append({"id": f"f-{made}", "kind": "fact", "text": text, "parent": f"leaf-{leaf}", "seq": seq,
                         "embedding": (v / np.linalg.norm(v)).astype(np.float32), "created_at": now + made,
                         "updated_at": now + made,
                         "metadata": {STORE_VALUE_KEY: {"content": text}, "indexed": True}})
            made += 1
    return rows


def _worker(idx: int, n_proc: int, target: str, options: dict, ops: int, reload_ops: int,
            sync: dict, results: Any) -> None:
    from ..memory import MembrainMemory
    from ..storage import open_storage
    from .tenants import HashEmbeddings

    storage = open_storage(target, **options)
    mem = MembrainMemory(storage, embeddings=HashEmbeddings(DIM), refresh_interval=0.0,
                         checkpoint_every=10 ** 9, prior=True)
    out: dict[str, Any] = {"idx": idx, "records": []}
    counter = [0]
    refresh = mem.refresh_counts  # namespaces brought up to date, and the seconds spent

    def add() -> None:
        counter[0] += 1
        mem.add(f"worker {idx} note {counter[0]} about subtopic {counter[0] % 50}", namespace=NS)

    def timed(phase: str, kind: str) -> None:
        before = (refresh.refreshed_by_change, refresh.refresh_reloads, refresh.refresh_seconds)
        start = time.perf_counter()
        if kind == "search":
            mem.search(f"note about subtopic {counter[0] % 50}", namespace=NS, limit=5)
        else:
            add()
        seconds = time.perf_counter() - start
        out["records"].append({"phase": phase, "kind": kind, "s": seconds,
                               "refresh_s": refresh.refresh_seconds - before[2],
                               "by_change": refresh.refreshed_by_change - before[0],
                               "reloads": refresh.refresh_reloads - before[1]})
        if kind == "search":
            add()  # every call ends with a write, which the next worker catches up on

    def take_turns(first: str, second: str | None, blocks: int) -> None:
        """``blocks`` turns of this worker: in each, a timed call right after the other
        workers' writes (``first``), then, with ``second``, the same call again at once,
        when no one else has written since (``second``): both sample the same model
        state, so their difference is the refresh."""
        for k in range(blocks):
            with sync["cond"]:
                while sync["turn"].value % n_proc != idx:
                    sync["cond"].wait()
            kind = "search" if k % 2 == 0 else "add"
            timed(first, kind)
            if second is not None:
                timed(second, kind)
            mem.flush()  # our background training ends before the next worker's turn starts
            with sync["cond"]:
                sync["turn"].value += 1
                sync["cond"].notify_all()

    try:
        start = time.perf_counter()
        mem.search("warm up", namespace=NS)  # the first access loads the whole namespace
        out["load_s"] = time.perf_counter() - start
        for _ in range(3):  # warm up the models and the index
            add()
            mem.search("warm up again", namespace=NS)
        sync["barrier"].wait()
        take_turns("after another's write", "alone", ops)
        sync["barrier"].wait()
        # as before the change log: reload whole (on this instance only: setattr, not a method assignment)
        setattr(storage, "changes_since", lambda ns, version: None)
        take_turns("reload (before)", None, reload_ops)
        sync["barrier"].wait()
        out["facts_at_end"] = len(mem.tree(NS).facts())
    finally:
        mem.close()
        results.put(out)


def run_size(target: str | None, n_facts: int, n_proc: int, ops: int, reload_ops: int) -> dict[str, Any]:
    """Fill a fresh store with one namespace of ``n_facts`` facts, run the three phases with
    ``n_proc`` workers; return per phase and call the p50/p95 in milliseconds."""
    from ..storage import is_postgres_url, open_storage

    options: dict[str, Any] = {}
    tmp = None
    if target is None:
        tmp = tempfile.TemporaryDirectory(prefix="membrain-workers-")
        target = os.path.join(tmp.name, "membrain.db")
    elif is_postgres_url(target):
        options["schema"] = f"membrain_bench_{uuid.uuid4().hex[:8]}"
    try:
        with open_storage(target, **options) as storage:
            storage.write(NS, namespace_rows(n_facts), [])
        ctx = mp.get_context("spawn")
        sync = {"barrier": ctx.Barrier(n_proc), "turn": ctx.Value("i", 0), "cond": ctx.Condition()}
        results = ctx.Queue()
        procs = [ctx.Process(target=_worker, args=(i, n_proc, target, options, ops, reload_ops, sync, results))
                 for i in range(n_proc)]
        for p in procs:
            p.start()
        outs = [results.get(timeout=3600) for _ in procs]
        for p in procs:
            p.join()
        if any(p.exitcode for p in procs):
            raise SystemExit(f"a worker failed: exit codes {[p.exitcode for p in procs]}")
    finally:
        if options.get("schema"):
            import psycopg

            with psycopg.connect(target, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{options["schema"]}" CASCADE')  # generated name
        if tmp is not None:
            tmp.cleanup()
    records = [r for o in outs for r in o["records"]]
    result: dict[str, Any] = {"facts": n_facts, "processes": n_proc,
                              "load_s": statistics.median(o["load_s"] for o in outs)}
    for phase in ("alone", "after another's write", "reload (before)"):
        for kind in ("add", "search"):
            times = sorted(r["s"] for r in records if r["phase"] == phase and r["kind"] == kind)
            if times:
                result[f"{phase}|{kind}|p50"] = 1000 * times[len(times) // 2]
                result[f"{phase}|{kind}|p95"] = 1000 * times[min(len(times) - 1, int(0.95 * len(times)))]
        phase_records = [r for r in records if r["phase"] == phase]
        refresh = sorted(r["refresh_s"] for r in phase_records)
        result[f"{phase}|refresh|p50"] = 1000 * refresh[len(refresh) // 2]
        result[f"{phase}|refresh|p95"] = 1000 * refresh[min(len(refresh) - 1, int(0.95 * len(refresh)))]
        result[f"{phase}|by_change"] = sum(r["by_change"] for r in phase_records)
        result[f"{phase}|reloads"] = sum(r["reloads"] for r in phase_records)
        result[f"{phase}|calls"] = len(phase_records)
    return result


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--facts", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--processes", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--target", default=None, help="a postgresql:// URL (default: a temporary SQLite file)")
    parser.add_argument("--ops", type=int, default=40, help="timed calls per worker and phase")
    parser.add_argument("--reload-ops", type=int, default=6, help="timed calls per worker in the reload phase")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from . import machine_description

    backend = "PostgreSQL" if args.target else "SQLite"
    table = Table(title=f"Refresh by change, {backend}: call latency in ms, p50 / p95 ({machine_description()})")
    for col in ("facts", "workers", "load s", "add alone", "add after write", "ratio",
                "search alone", "search after write", "ratio", "refresh by change", "add reload",
                "search reload", "by change / reloads"):
        table.add_column(col, justify="right")
    for n_facts in args.facts:
        for n_proc in args.processes:
            r = run_size(args.target, n_facts, n_proc, args.ops, args.reload_ops)

            def cell(phase: str, kind: str) -> str:
                return f"{r[f'{phase}|{kind}|p50']:.1f} / {r[f'{phase}|{kind}|p95']:.1f}"

            def ratio(kind: str) -> str:
                return f"{r['after another' + chr(39) + f's write|{kind}|p50'] / r[f'alone|{kind}|p50']:.2f}x"

            after = "after another's write"
            table.add_row(str(n_facts), str(n_proc), f"{r['load_s']:.2f}", cell("alone", "add"), cell(after, "add"),
                          ratio("add"), cell("alone", "search"), cell(after, "search"), ratio("search"),
                          cell(after, "refresh"), cell("reload (before)", "add"), cell("reload (before)", "search"),
                          f"{r[after + '|by_change']} / {r[after + '|reloads']}")
    Console(width=220).print(table)
    return 0
