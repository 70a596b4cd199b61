"""Add and search latency against the number of facts N, with precomputed embeddings.

Data (seeded, synthetic): 384-d unit embeddings drawn around ``sqrt(N)`` random cluster
centres (``normalize(centre + 0.6 * noise / sqrt(d))``), so that nearest neighbours are
meaningful as in real text embeddings; each fact's text is a few words of its cluster's
topic vocabulary plus Zipf-distributed common words; every 20 consecutive facts form one
session (so neighbour terms are exercised: the index runs with
:class:`~langchain_membrain.index.chat.SessionContext` on). A query is a stored fact's embedding plus
noise, with three of that fact's words.

Methods: membrain ``FactIndex`` in ``fast`` mode (posting lists + HNSW candidates) and in
``exact`` mode (every fact scored); numpy brute force (``E @ q`` then ``argpartition``, dense
only); LangGraph's ``InMemoryStore`` (its own search, sizes up to ``--store-max`` only: it
scores every item in Python). Reported: add p50/p95 (one fact per call, on the last facts; embedding
excluded), search p50/p95, recall@10 of fast against exact (overlap of the two top-10 sets),
resident memory of the index scaled to 100k facts and per fact beyond its float32 vector,
the cold open of the saved index (index_cache.py: save, then load into a new process's
index, its HNSW graph with it), and a log-log plot.

Build: all but the last ``--add-sample`` facts in one bulk build (``FactIndex.add_many``,
the HNSW graph built at once on every core), then the last ones one ``add()`` call each;
the add p50/p95 are those single adds, into an index of about N facts.

Above ``--baseline-max`` facts, the exact mode and the numpy brute force (each O(N) a query)
run on the first ``--exact-queries`` queries only, and recall is measured on those.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..index.chat import SessionContext
from ..index.config import RetrievalConfig
from ..index.facts import FactIndex
from ..storage.index_cache import IndexCache


def _rss_mb() -> float:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def synthetic(n: int, n_queries: int, dim: int = 384, seed: int = 0, *,
              kind: str = "clustered") -> dict[str, Any]:
    """Clustered unit embeddings, topic texts and noisy queries (see the module docstring).
    ``kind="random"``: embeddings uniform on the sphere (no cluster structure: the hardest
    case for an ANN index) and queries uniform too, not near any fact."""
    rng = np.random.default_rng(seed)
    n_clusters = max(1, int(np.sqrt(n)))
    centres = rng.normal(size=(n_clusters, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    labels = rng.integers(0, n_clusters, size=n)
    emb = centres[labels] + 0.6 * rng.normal(size=(n, dim)).astype(np.float32) / np.sqrt(dim)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    common = rng.zipf(1.3, size=(n, 6)) % 5000
    topic = rng.integers(0, 30, size=(n, 3))
    texts = [" ".join([f"t{labels[i]}x{w}" for w in topic[i]] + [f"w{w}" for w in common[i]]) for i in range(n)]
    src = rng.integers(0, n, size=n_queries)
    q = emb[src] + 0.05 * rng.normal(size=(n_queries, dim)).astype(np.float32)
    if kind == "random":
        emb = rng.normal(size=(n, dim)).astype(np.float32)
        emb /= np.linalg.norm(emb, axis=1, keepdims=True)
        q = rng.normal(size=(n_queries, dim)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    qtexts = [" ".join(texts[i].split()[j] for j in (0, 3, 4)) for i in src]
    return {"emb": emb.astype(np.float32), "texts": texts, "q": q.astype(np.float32), "qtexts": qtexts}


def _pct(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": 1e3 * float(np.percentile(xs, 50)), "p95_ms": 1e3 * float(np.percentile(xs, 95))}


def _config() -> RetrievalConfig:
    return RetrievalConfig(chat=(SessionContext(),))


def _build(data: dict[str, Any], out: dict[str, Any], add_sample: int) -> FactIndex:
    """All but the last ``add_sample`` facts in one bulk build (``FactIndex.add_many``, the
    HNSW graph built at once on every core), then the last ones one call each (timed: the
    add p50/p95 of an index of about N facts); the index's resident memory into ``out``."""
    emb, texts = data["emb"], data["texts"]
    n = len(texts)
    bulk = max(0, n - add_sample)
    gc.collect()
    rss0 = _rss_mb()
    index = FactIndex(_config())
    start = time.perf_counter()
    if bulk:
        index.add_many(((i, texts[i], emb[i], {"session": i // 20}, False) for i in range(bulk)),
                       graph_threads=os.cpu_count() or 1)
        out["bulk_build_s"] = time.perf_counter() - start
        print(f"  bulk-built {bulk}/{n} in {out['bulk_build_s']:.0f} s, RSS +{_rss_mb() - rss0:.0f} MB",
              file=sys.stderr, flush=True)
    add = []
    for i in range(bulk, n):
        t0 = time.perf_counter()
        index.add(i, texts[i], emb[i], {"session": i // 20})
        add.append(time.perf_counter() - t0)
    gc.collect()
    rss = _rss_mb() - rss0
    out["build_s"] = time.perf_counter() - start
    out["single_adds"] = n - bulk
    out["rss_mb_per_100k"] = rss * 100_000 / n
    out["rss_bytes_per_fact_beyond_vector"] = rss * 2**20 / n - emb.shape[1] * emb.itemsize
    out["membrain_add"] = _pct(add)
    return index


def _searches(index: FactIndex, data: dict[str, Any], out: dict[str, Any], n_exact: int, k: int) -> None:
    """Fast mode on every query; exact mode, recall and the dense recall on the first ``n_exact``."""
    emb = data["emb"]
    res: dict[str, list] = {"fast": [], "exact": []}
    for mode in ("fast", "exact"):
        lat = []
        pairs = list(zip(data["qtexts"], data["q"]))
        for qt, qv in pairs if mode == "fast" else pairs[:n_exact]:
            t0 = time.perf_counter()
            res[mode].append([f for f, _ in index.search(qt, qv, k, mode=mode)])
            lat.append(time.perf_counter() - t0)
        out[f"membrain_{mode}"] = _pct(lat)
    out["exact_queries"] = n_exact
    out["recall@10_fast_vs_exact"] = float(np.mean(
        [len(set(a) & set(b)) / max(len(b), 1) for a, b in zip(res["fast"], res["exact"])]))
    # the dense part alone (``nearest``: the HNSW graph once fast mode built one, plus the
    # few facts not yet in it) against the exact top-10
    hits = []
    for qv in data["q"][:n_exact]:
        found = {i for i, _ in index.nearest(qv, k)}
        hits.append(len(found & set(np.argsort(-(emb @ qv))[:k].tolist())) / k)
    out["recall@10_dense_nearest"] = float(np.mean(hits))


def _save(index: FactIndex, directory: str, out: dict[str, Any]) -> IndexCache:
    """Save the index as ``close()`` does for a large namespace (timed)."""
    cache = IndexCache(directory)
    t0 = time.perf_counter()
    if not cache.save(("scale",), index, "bench"):
        raise RuntimeError("the index could not be saved")
    out["cold_save_s"] = time.perf_counter() - t0
    out["cold_file_mb"] = os.path.getsize(cache.path(("scale",))) / 2**20
    return cache


def _load(cache: IndexCache, data: dict[str, Any], out: dict[str, Any], k: int) -> None:
    """Load the saved index (its HNSW graph with it) into a new one, as a new process does
    (timed), and search it in fast mode."""
    gc.collect()
    t0 = time.perf_counter()
    loaded = cache.load(("scale",), "bench", lambda: FactIndex(_config()))
    out["cold_load_s"] = time.perf_counter() - t0
    if loaded is None:
        raise RuntimeError("the saved index did not load")
    lat = []
    for qt, qv in list(zip(data["qtexts"], data["q"]))[:20]:
        t0 = time.perf_counter()
        loaded.search(qt, qv, k)
        lat.append(time.perf_counter() - t0)
    out["cold_first_searches"] = _pct(lat)


def bench_size(n: int, n_queries: int, *, store_max: int, k: int = 10, kind: str = "clustered",
               baseline_max: int = 300_000, exact_queries: int = 50, add_sample: int = 2000) -> dict[str, Any]:
    data = synthetic(n, n_queries, kind=kind)
    emb = data["emb"]
    out: dict[str, Any] = {"n": n}
    index = _build(data, out, add_sample)
    n_exact = n_queries if n <= baseline_max else min(n_queries, exact_queries)
    _searches(index, data, out, n_exact, k)
    with tempfile.TemporaryDirectory(prefix="membrain-scale-") as tmp:
        cache = _save(index, tmp, out)
        del index  # freed before the load, as in a new process (and half the peak memory)
        _load(cache, data, out, k)
    gc.collect()
    lat = []
    for qv in data["q"][:n_exact]:
        t0 = time.perf_counter()
        sims = emb @ qv
        top = np.argpartition(-sims, k)[:k]
        top[np.argsort(-sims[top])]
        lat.append(time.perf_counter() - t0)
    out["numpy_bruteforce"] = _pct(lat)
    if n <= store_max:
        out.update(_bench_store(data, k))
    return out


def _bench_store(data: dict[str, Any], k: int) -> dict[str, Any]:
    from langgraph.store.memory import InMemoryStore

    vec_of = {t: v for t, v in zip(data["texts"], data["emb"])}
    vec_of.update({t: v for t, v in zip(data["qtexts"], data["q"])})

    def embed(texts: Sequence[str]) -> list[list[float]]:
        return [vec_of[t].tolist() for t in texts]

    store = InMemoryStore(index={"dims": data["emb"].shape[1], "embed": embed, "fields": ["text"]})
    add = []
    for i, t in enumerate(data["texts"]):
        t0 = time.perf_counter()
        store.put(("scale",), str(i), {"text": t})
        add.append(time.perf_counter() - t0)
    lat = []
    for qt in data["qtexts"][:50]:
        t0 = time.perf_counter()
        store.search(("scale",), query=qt, limit=k)
        lat.append(time.perf_counter() - t0)
    return {"inmemorystore_add": _pct(add), "inmemorystore_search": _pct(lat)}


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for key, label in [("membrain_fast", "membrain fast"), ("membrain_exact", "membrain exact"),
                       ("numpy_bruteforce", "numpy brute force (dense only)"),
                       ("inmemorystore_search", "InMemoryStore"), ("membrain_add", "membrain add")]:
        pts = [(r["n"], r[key]["p50_ms"]) for r in rows if key in r]
        if pts:
            ax.plot(*zip(*pts), marker="o", label=label, linestyle="--" if "add" in key else "-")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("facts (N)")
    ax.set_ylabel("p50 latency (ms)")
    ax.set_title("search latency against N (2 cores)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", default="1000,10000,100000", help="comma-separated N")
    parser.add_argument("--queries", type=int, default=200, help="queries per size")
    parser.add_argument("--store-max", type=int, default=10000,
                        help="largest N for LangGraph's InMemoryStore (it scans every item)")
    parser.add_argument("--baseline-max", type=int, default=300_000,
                        help="above this N, exact mode and numpy brute force (O(N) a query) run on "
                             "--exact-queries queries only, recall measured on those")
    parser.add_argument("--exact-queries", type=int, default=50, help="queries for exact above --baseline-max")
    parser.add_argument("--add-sample", type=int, default=2000,
                        help="the last this many facts are added one call each (add p50/p95 timed on them); "
                             "the facts before them are built in bulk (FactIndex.add_many)")
    parser.add_argument("--embeddings", choices=["clustered", "random"], default="clustered",
                        help="synthetic embeddings: clustered (text-like) or uniform random (ANN worst case)")
    parser.add_argument("--json", default=None, help="write the rows here")
    parser.add_argument("--plot", default="bench_out/scale.png", help="log-log PNG of latency against N")


def run(args: argparse.Namespace) -> int:
    rows = []
    for n in [int(x) for x in args.sizes.split(",") if x]:
        row = bench_size(n, args.queries, store_max=args.store_max, kind=args.embeddings,
                         baseline_max=args.baseline_max, exact_queries=args.exact_queries,
                         add_sample=args.add_sample)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print_table(rows)
    if args.plot:
        Path(args.plot).parent.mkdir(parents=True, exist_ok=True)
        plot(rows, Path(args.plot))
        print(f"wrote {args.plot}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
        print(f"wrote {args.json}")
    return 0


def print_table(rows: list[dict[str, Any]]) -> None:
    cols = ["membrain_add", "membrain_fast", "membrain_exact", "numpy_bruteforce",
            "inmemorystore_add", "inmemorystore_search"]
    print("N\t" + "\t".join(f"{c} p50/p95 ms" for c in cols)
          + "\trecall@10 fast\tRSS MB/100k\tbytes/fact beyond vector\tcold load s\tbuild s")
    for r in rows:
        cells = [f"{r[c]['p50_ms']:.3f}/{r[c]['p95_ms']:.3f}" if c in r else "skipped" for c in cols]
        print(f"{r['n']}\t" + "\t".join(cells) + f"\t{r['recall@10_fast_vs_exact']:.3f}\t{r['rss_mb_per_100k']:.0f}"
              f"\t{r['rss_bytes_per_fact_beyond_vector']:.0f}\t{r['cold_load_s']:.2f}\t{r['build_s']:.0f}")
