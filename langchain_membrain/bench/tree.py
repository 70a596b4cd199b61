"""Tree operations at scale: build a four-level tree of N facts (default 100k) with random
384-d embeddings and time each operation (p50/p95 per call).

The baseline, measured in the same run: recomputing the mean embeddings on the path of
one fact from scratch (what a tree without incremental sums pays per write).

    python -m langchain_membrain.bench tree [--facts 100000] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import time
from typing import cast

import numpy as np

from ..tree.tree import MembrainTree
from . import machine_description


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--facts", type=int, default=100_000, help="facts to insert (default 100000)")
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--fanout", type=int, default=10, help="aspects per level (three levels)")
    parser.add_argument("--samples", type=int, default=2000, help="timed calls per operation")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the results here")


def _timed(fn, args_list) -> list[float]:
    out = []
    for args in args_list:
        t0 = time.perf_counter()
        fn(*args)
        out.append((time.perf_counter() - t0) * 1e6)
    return out


def _summary(samples_us: list[float]) -> dict[str, float]:
    a = np.asarray(samples_us)
    return {"p50_us": float(np.percentile(a, 50)), "p95_us": float(np.percentile(a, 95)), "n": int(a.size)}


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    rng = np.random.default_rng(args.seed)
    tree = MembrainTree("bench", dim=args.dim)
    leaves = []
    for i in range(args.fanout):
        a = tree.add_aspect(tree.root_id, f"a{i}")
        for j in range(args.fanout):
            b = tree.add_aspect(a, f"a{i}.{j}")
            for k in range(args.fanout):
                leaves.append(tree.add_aspect(b, f"a{i}.{j}.{k}"))
    vecs = rng.standard_normal((args.facts, args.dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    parents = [leaves[i % len(leaves)] for i in range(args.facts)]

    results: dict[str, dict[str, float]] = {}
    t0 = time.perf_counter()
    add_times = _timed(lambda p, v, i: tree.add_fact(p, f"fact {i}", embedding=v, node_id=f"f{i}"),
                       [(parents[i], vecs[i], i) for i in range(args.facts)])
    build_s = time.perf_counter() - t0
    results["add_fact"] = _summary(add_times)

    n = min(args.samples, args.facts)
    sample = [f"f{i}" for i in rng.choice(args.facts, size=n, replace=False)]
    results["closure"] = _summary(_timed(tree.closure, [(f,) for f in sample]))
    results["two_layer_subtree"] = _summary(_timed(tree.two_layer_subtree, [(tree.parent(f),) for f in sample[:200]]))
    results["path"] = _summary(_timed(tree.path, [(f,) for f in sample]))
    results["mean_embedding"] = _summary(_timed(tree.mean_embedding, [(tree.parent(f),) for f in sample]))

    def naive_means(fact_id: str) -> None:
        for anc in tree.path(fact_id)[:-1]:
            np.mean([cast(np.ndarray, tree.node(x).embedding) for x in tree.facts_below(anc)[:5000]], axis=0)

    results["baseline: naive path means (5k facts cap)"] = _summary(_timed(naive_means, [(f,) for f in sample[:20]]))

    half = sample[: n // 2]
    results["update_fact"] = _summary(_timed(lambda f, v: tree.update_fact(f, embedding=v),
                                             [(f, vecs[0]) for f in half[: n // 4]]))
    promoted = half[: n // 4]
    results["promote"] = _summary(_timed(tree.promote, [(f,) for f in promoted]))
    # A promoted fact now sits beside aspects: demote it back into one of them.
    demotes = [(f, tree.child_aspects(cast(str, tree.parent(f)))[0]) for f in promoted]
    results["demote"] = _summary(_timed(tree.demote, demotes))
    groups = []
    for leaf in leaves[: min(200, len(leaves))]:
        facts = tree.child_facts(leaf)[:4]
        if len(facts) >= 2:
            groups.append((facts, "g"))
    results["group"] = _summary(_timed(tree.group, groups))
    results["remove"] = _summary(_timed(tree.remove, [(f,) for f in sample[n // 2:]]))
    # What each stage-2 question and audit snapshot pays on a namespace this large.
    results["copy (whole tree, copy-on-write)"] = _summary(_timed(tree.copy, [()] * 5))
    results["baseline: deep_copy (node by node, the copy before)"] = _summary(_timed(tree.deep_copy, [()] * 5))
    results["baseline: networkx's own graph copy (nodes shared)"] = _summary(_timed(tree.graph.copy, [()] * 5))
    t0 = time.perf_counter()
    snapshot = tree.to_dict()
    results["to_dict (whole tree)"] = {"p50_us": (time.perf_counter() - t0) * 1e6, "p95_us": float("nan"), "n": 1}
    del snapshot

    machine = machine_description()
    table = Table(title=f"MembrainTree, {args.facts:,} facts, 4 levels, dim {args.dim} (built in {build_s:.1f} s)")
    table.add_column("operation")
    table.add_column("p50 µs", justify="right")
    table.add_column("p95 µs", justify="right")
    table.add_column("calls", justify="right")
    for name, r in results.items():
        table.add_row(name, f"{r['p50_us']:.1f}", f"{r['p95_us']:.1f}", str(r["n"]))
    console = Console()
    console.print(table)
    console.print(f"machine: {machine}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"facts": args.facts, "build_s": build_s, "machine": machine, "operations": results}, fh, indent=2)
    return 0
