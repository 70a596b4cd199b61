"""Calibrated relevance: fit and measure ``hit.score`` (scores.py).

``python -m langchain_membrain.bench scores`` builds namespaces of 1 to 500 facts through
``MembrainMemory.add`` (MiniLM, operations off so every fact stays): the facts of
``data/relevance.json`` (written for this project: groups of facts with the queries they
answer, and queries nothing answers) and of the tuning part of ``data/corrections_tune.jsonl``
(a correction's old and new statements answer its question) among facts of the tuning personas (``personas.jsonl``,
``topics.jsonl``). Each namespace is searched (``limit=10``) with the queries of its groups
(answerable), with other groups' queries and with the unanswerable ones. The groups and
unanswerable queries are split in two by their position; each half is searched again through
the product with the logistic model of scores.py fitted on the other half's hits (two folds),
and it prints, over both halves:

- AUROC of ``hit.score`` for relevant against irrelevant hits (and of the previous score,
  ``retrieval.relevance`` of the ranking score, in the same run);
- at the threshold (``--threshold``, default scores.DEFAULT_MIN_SCORE): the share of
  unanswerable queries with no hit above it and of answerable ones keeping a relevant hit
  above it, overall and per namespace size;
- a reliability table: predicted against observed share of relevant hits, by bins.

``--write`` stores the coefficients fitted on every case in ``data/relevance_model.json``.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from ..retrieval import reads, scores

SIZES = (1, 2, 5, 10, 30, 100, 300, 500)


@dataclass
class Case:
    """One search: a query on a namespace and the keys that answer it (none: unanswerable)."""

    ns: tuple[str, ...]
    query: str
    relevant: set[str]
    held_out: bool
    size: int
    hits: list[tuple[str, float]] = field(default_factory=list)  # (key, score) as search reported
    ranked: list[str] = field(default_factory=list)  # the keys in the index's order, as scored
    features: list[np.ndarray] = field(default_factory=list)  # of ranked, in its order
    old: list[float] = field(default_factory=list)  # retrieval.relevance of the ranking score, of ranked


def _data() -> tuple[dict[str, Any], list[str]]:
    """relevance.json with the tuning corrections (corrections_tune.jsonl) as groups of their own:
    a correction's old and new statements both answer its question; a look-alike's new
    statement is stored beside the old one (``others``) and answers nothing. Then the pool of
    other facts."""
    from .corrections import CORRECTING, TUNE, load

    files = resources.files("langchain_membrain.data")
    data = json.loads(files.joinpath("relevance.json").read_text(encoding="utf-8"))
    data["groups"] = data["groups"] + [
        {"facts": [c["old"], c["new"]], "queries": [c["question"]]} if c["type"] in CORRECTING
        else {"facts": [c["old"]], "others": [c["new"]], "queries": [c["question"]]} for c in load(TUNE)[0]]
    pool = [json.loads(line)["text"] for name in ("personas.jsonl", "topics.jsonl")
            for line in files.joinpath(name).read_text(encoding="utf-8").splitlines() if line.strip()]
    return data, pool


def build(mem: Any, data: dict[str, Any], pool: list[str], seed: int, per_size: int) -> list[Case]:
    """Fill the namespaces and list their searches."""
    rng = random.Random(seed)
    groups, unans = data["groups"], data["unanswerable"]
    cases: list[Case] = []
    for size in SIZES:
        layouts = ([[g] for g in range(len(groups))] if size == 1
                   else [rng.sample(range(len(groups)), min(8, max(1, size // 2))) for _ in range(per_size)])
        for n, chosen in enumerate(layouts):
            ns = ("scores", str(size), str(n))
            facts = [(g, f) for g in chosen for f in groups[g]["facts"]][:size]
            others = [f for g in chosen for f in groups[g].get("others", [])][:size - len(facts)]
            filler = rng.sample(pool, size - len(facts) - len(others)) + others
            texts = [(None, t) for t in filler] + facts
            rng.shuffle(texts)
            keys: dict[int, set[str]] = {}
            for g, text in texts:
                key = mem.add(text, namespace=ns)
                if g is not None:
                    keys.setdefault(g, set()).add(key)
            for g in chosen:
                for q in groups[g]["queries"]:
                    cases.append(Case(ns, q, keys.get(g, set()), g % 2 == 1, size))
            others = [g for g in range(len(groups)) if g not in chosen]
            for g in rng.sample(others, min(3, len(others))):
                cases.append(Case(ns, groups[g]["queries"][0], set(), g % 2 == 1, size))
            for i in rng.sample(range(len(unans)), 4):
                cases.append(Case(ns, unans[i], set(), i % 2 == 1, size))
    return cases


def search(mem: Any, cases: list[Case]) -> None:
    """Search every case through the product, keeping what scores.calibrated saw."""
    from ..index.facts import relevance

    seen: list[tuple[list[str], list[np.ndarray], list[float]]] = []
    real = reads.calibrated

    def recording(query, qvec, hits, size, model=None):
        seen.append(([k for k, _, _, _ in hits], scores.features(query, qvec, hits, size),
                     [relevance(s) for _, s, _, _ in hits]))
        return real(query, qvec, hits, size, model)

    reads.calibrated = recording
    try:
        for c in cases:
            seen.clear()
            found = mem.search(c.query, namespace=c.ns, exact_namespace=True, limit=10)
            c.hits = [(h.key, float(h.score)) for h in found]
            c.ranked, c.features, c.old = seen[0] if seen else ([], [], [])
    finally:
        reads.calibrated = real


def metrics(cases: list[Case], threshold: float, old: bool = False) -> dict[str, Any]:
    """AUROC, the shares kept and emptied at ``threshold``, reliability bins."""
    s, y = [], []
    empty = kept = n_un = n_ans = 0
    for c in cases:
        vals = c.old if old else [v for _, v in c.hits]
        labels = [int(k in c.relevant) for k in (c.ranked if old else [k for k, _ in c.hits])]
        s += vals
        y += labels
        if c.relevant:
            n_ans += 1
            kept += any(v >= threshold and lab for v, lab in zip(vals, labels))
        else:
            n_un += 1
            empty += not any(v >= threshold for v in vals)
    bins = []
    arr, lab = np.asarray(s), np.asarray(y)
    for lo in np.arange(0, 1, 0.1):
        inside = (arr >= lo) & ((arr < lo + 0.1) | (lo >= 0.9))
        if inside.any():
            bins.append((f"{lo:.1f}-{lo + 0.1:.1f}", float(arr[inside].mean()), float(lab[inside].mean()),
                         int(inside.sum())))
    return {"auroc": scores.auroc(s, y), "unanswerable_empty": empty / max(n_un, 1),
            "answerable_kept": kept / max(n_ans, 1), "answerable": n_ans, "unanswerable": n_un,
            "hits": len(s), "relevant_hits": int(sum(y)), "reliability": bins}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threshold", type=float, default=scores.DEFAULT_MIN_SCORE)
    parser.add_argument("--per-size", type=int, default=3, help="namespaces per size above 1")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--l2", type=float, default=1e-6, help="L2 penalty per hit (measured: 1e-3 kept fewer answers)")
    parser.add_argument("--write", action="store_true", help="store the fitted model in data/relevance_model.json")
    parser.add_argument("--json", help="write the results as JSON to this path")


def _print(name: str, m: dict[str, Any]) -> None:
    print(f"{name}: AUROC {m['auroc']:.3f} | unanswerable empty {m['unanswerable_empty']:.2f} "
          f"({m['unanswerable']}) | answerable kept {m['answerable_kept']:.2f} ({m['answerable']}) | "
          f"hits {m['hits']} ({m['relevant_hits']} relevant)")


def _fit(cases: list[Case], l2: float) -> tuple[np.ndarray, float]:
    x = np.array([f for c in cases for f in c.features])
    y = np.array([int(k in c.relevant) for c in cases for k in c.ranked])
    return scores.fit(x, y, l2=l2)


def cross_fit(mem: Any, cases: list[Case], l2: float) -> tuple[np.ndarray, float]:
    """Each half searched again through the product with the model fitted on the other half
    (two folds); returns the model fitted on every case (the one ``--write`` ships)."""
    for held_out in (True, False):
        model = _fit([c for c in cases if c.held_out != held_out], l2)
        with scores.use_model(model):
            search(mem, [c for c in cases if c.held_out == held_out])
    return _fit(cases, l2)


def report(cases: list[Case], threshold: float) -> dict[str, Any]:
    """Print and return the metrics of the cross-fitted scores."""
    new, old = metrics(cases, threshold), metrics(cases, threshold, old=True)
    _print("calibrated hit.score (cross-fitted)", new)
    _print("before: retrieval.relevance of the ranking score", old)
    print("threshold | unanswerable empty | answerable kept   (calibrated / before)")
    for t in (0.2, 0.3, 0.4, 0.5, 0.6):
        m, o = metrics(cases, t), metrics(cases, t, old=True)
        print(f"  {t:.1f} | {m['unanswerable_empty']:.2f} / {o['unanswerable_empty']:.2f} | "
              f"{m['answerable_kept']:.2f} / {o['answerable_kept']:.2f}")
    print("per namespace size: size | AUROC | unanswerable empty | answerable kept (at the threshold)")
    per_size = {}
    for size in SIZES:
        m = per_size[size] = metrics([c for c in cases if c.size == size], threshold)
        print(f"  {size} | {m['auroc']:.3f} | {m['unanswerable_empty']:.2f} | {m['answerable_kept']:.2f}")
    print("reliability: predicted bin | mean predicted | observed relevant | hits")
    for b in new["reliability"]:
        print(f"  {b[0]} | {b[1]:.3f} | {b[2]:.3f} | {b[3]}")
    return {"calibrated": new, "before": old, "per_size": per_size}


def run(args: argparse.Namespace) -> int:
    from ..index.embeddings import MiniLMEmbeddings
    from ..memory import MembrainMemory
    from . import machine_description
    from .economy_stream import PrecomputedEmbeddings

    data, pool = _data()
    texts = sorted(set(pool) | {f for g in data["groups"] for f in g["facts"] + g.get("others", [])}
                   | {q for g in data["groups"] for q in g["queries"]} | set(data["unanswerable"]))
    base = MiniLMEmbeddings()
    known = dict(zip(texts, np.asarray(base.embed_documents(texts), np.float32)))
    with MembrainMemory(embeddings=PrecomputedEmbeddings(base, known), background=False, relabel=False,
                        operations=False) as mem:
        cases = build(mem, data, pool, args.seed, args.per_size)
        with scores.use_model((np.zeros(len(scores.FEATURES)), 0.0)):  # the features, whatever model is shipped
            search(mem, cases)
        model = cross_fit(mem, cases, args.l2)
    print(f"bench scores: {len(cases)} searches over namespaces of {SIZES} facts, two folds (groups and "
          f"unanswerable queries split by position); threshold {args.threshold}; {machine_description()}")
    print("model (every case): " + ", ".join(f"{n} {w:+.3f}" for n, w in zip(scores.FEATURES, model[0]))
          + f", bias {model[1]:+.3f}")
    out = report(cases, args.threshold)
    if args.write:
        path = resources.files("langchain_membrain.data").joinpath(scores.MODEL_FILE)
        with open(str(path), "w") as fh:
            json.dump({"features": list(scores.FEATURES), "weights": [round(float(w), 6) for w in model[0]],
                       "bias": round(model[1], 6), "command": "membrain bench scores --write",
                       "data": "data/relevance.json and the tuning corrections (corrections_tune.jsonl); "
                               "personas.jsonl and topics.jsonl as the other facts",
                       "cross_fitted": {k: out["calibrated"][k] for k in ("auroc", "unanswerable_empty",
                                                                          "answerable_kept")}}, fh, indent=1)
            fh.write("\n")
        print(f"wrote {path}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"machine": machine_description(), **out, "model": [list(model[0]), model[1]]}, fh, indent=2)
    return 0
