"""Dendrogram purity of the online tree against flat, MemTree's rule and offline clustering.

The facts are inserted one by one, in file order, through the insert graph under
``learner.teacher_forcing`` (the teacher alone decides; no model). A fact's class is ``tuple(path[:2])``, the ground-truth
ancestor one level below the subject; facts with a shorter path are in no pair but still
count as leaves (``evaluation.dendrogram_purity``). Methods, all in one run on the same
embeddings (all-MiniLM-L6-v2):

- ``heuristic``: the HeuristicTeacher with its defaults (fact actions only);
- ``heuristic+aspects``: the same with ``aspect_actions=True`` (whole aspects promoted and
  demoted, ``allow_aspects=True``);
- ``memtree``: MemTree's rule alone: cosine to the mean, theta0 = 0.4, rate = 0.5, D = 10, no
  size awareness, no stage-2 tidying; a new fact whose most similar sibling fact reaches the
  threshold is paired with it under a new aspect (MemTree's leaf expansion), which is
  the only way its tree gets aspects;
- ``flat``: every fact under the root;
- ``average_linkage``: offline UPGMA over all facts at once (scipy), a binary tree;
- ``oracle``: the OracleTeacher (ground-truth ``path_ids``; a check that reads 1.0), when
  every row has ids.

Usage::

    python -m langchain_membrain.bench hierarchy --data ../shared/data/wordnet_animal_facts.jsonl \\
        --json bench_out/hierarchy_animal.json --export bench_out/tree_animal.json

    # A second domain, sampled from WordNet itself (never shipped; needs the Debian package:
    # apt-get update && apt-get install -y wordnet-base), 500 synsets of the food.n.02 subtree,
    # parent-closed, the same fields as the animal file:
    python -m langchain_membrain.bench hierarchy --wordnet food.n.02 --size 500 --seed 0 \\
        --save-data bench_out/wordnet_food.jsonl --json bench_out/hierarchy_food.json

``--set KEY=VALUE`` (repeatable) overrides a HeuristicConfig field for both heuristic runs.

Measured (2-core CPU, MiniLM, default HeuristicConfig; purity; the heuristic's balanced top
levels, this release):

| data | heuristic | +aspects | memtree | product | flat | average linkage |
| --- | --- | --- | --- | --- | --- | --- |
| wordnet_animal_facts.jsonl | 0.736 | 0.727 | 0.715 | 0.746 | 0.671 | 0.842 |
| food.n.01, 600 facts | 0.468 | 0.491 | 0.452 | 0.470 | 0.345 | 0.503 |
| mean of 11 WordNet samples | 0.590 | | | | 0.449 | 0.683 |

``product`` builds the tree through ``MembrainMemory().add`` (the student deciding where it is
confident, from the shipped prior); ``product+oracle`` the same with the OracleTeacher. Both
run under the product's height bound (``--max-height``, default 4), which cuts the oracle's
deeper taxonomy (animals 0.783, food.n.01 0.688; 1.000 with ``--max-height none``).

The 11 samples: animal (the shared file and seeds 1, 2), food.n.02 (seeds 0, 1), food.n.01,
artifact.n.01 (seeds 0, 1), person.n.01, location.n.01, act.n.02; the stage-1 and group
thresholds were picked by the mean over eight of them (not food.n.01, artifact seed 1,
act), ``aspect_margin`` over all eleven. Aspect actions help on some domains (artifact seed 1
+0.08, location +0.04, food.n.01 +0.04) and hurt on the animal file (-0.11): about even.
Online trees are sensitive to their thresholds: one domain's purity moves by 0.05 to 0.1
between neighbouring settings (animals: 0.73 to 0.86), so single-file numbers carry that
much noise.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import MembrainError
from ..teachers.heuristic import HeuristicConfig, HeuristicTeacher
from ..tree.actions import Action, Group
from ..tree.tree import Closure, MembrainTree, check_max_height
from . import embed_cached

__all__ = ["MemTreeRuleTeacher", "build_online", "configure", "run"]


def _unit(v: np.ndarray | None) -> np.ndarray | None:
    if v is None:
        return None
    n = float(np.linalg.norm(v))
    return None if n == 0.0 else np.asarray(v, dtype=np.float64) / n


class MemTreeRuleTeacher(HeuristicTeacher):
    """MemTree's rule alone, as a baseline (Rezazadeh et al., 2024, adapted to leaf facts).

    Stage 1 is the HeuristicTeacher's with ``size_aware=False`` (cosine to each child
    aspect's mean, theta(d) = 0.4 * exp(0.5 * d / 10)). There is no stage-2 tidying: the one
    action is MemTree's leaf expansion, which pairs the new fact with its most similar
    sibling fact under a new aspect when their cosine reaches theta(depth of the parent)
    and beats the best sibling aspect.
    """

    name = "memtree"

    def __init__(self, config: HeuristicConfig | None = None):
        super().__init__(config or HeuristicConfig.memtree())

    def choose_stage2(self, tree: MembrainTree, closure: Closure) -> list[Action]:
        fid, parent = closure.fact_id, closure.parent_id
        self._observe([tree.node(fid).text])
        e = _unit(tree.node(fid).embedding)
        if e is None:
            return []
        best, best_sim = None, -np.inf
        for c in tree.children(parent):
            if c == fid:
                continue
            u = _unit(tree.mean_embedding(c))
            sim = -np.inf if u is None else float(np.dot(e, u))
            if sim > best_sim:
                best, best_sim = c, sim
        if best is None or tree.node(best).kind != "fact":
            return []
        if best_sim < self.config.theta(tree.depth(parent)):
            return []
        return [Group((best, fid))]


def configure(parser: argparse.ArgumentParser) -> None:
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", help="JSON lines with 'text' and optional 'path' (and 'path_ids', 'id')")
    src.add_argument("--wordnet", metavar="SYNSET",
                     help="sample a subtree of WordNet instead, e.g. food.n.02 (needs wordnet-base)")
    parser.add_argument("--size", type=int, default=500, help="--wordnet: synsets to sample (default 500)")
    parser.add_argument("--seed", type=int, default=0, help="--wordnet: sampling seed (default 0)")
    parser.add_argument("--wordnet-dir", default="/usr/share/wordnet", help="folder with data.noun, index.noun")
    parser.add_argument("--save-data", help="--wordnet: also write the sampled rows to this JSON lines file")
    parser.add_argument("--limit", type=int, help="use only the first N facts")
    parser.add_argument("--product", action=argparse.BooleanOptionalAction, default=True,
                        help="also build the tree through MembrainMemory().add, the product's own path "
                             "(the student decides where it is confident)")
    parser.add_argument("--max-height", default="4", metavar="N|none",
                        help="the product's MembrainMemory(max_height=...) (default 4, the product's "
                             "default; 'none': unbounded, for a taxonomy)")
    parser.add_argument("--json", dest="json_out", help="write the results here")
    parser.add_argument("--export", help="write the heuristic teacher's tree here (MembrainTree.to_dict JSON)")
    parser.add_argument("--cache", help="embeddings cache (.npy), reused when it has one row per fact")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a HeuristicConfig field (repeatable)")


def _parse_overrides(items: list[str]) -> dict[str, Any]:
    known = {f.name: f.type for f in fields(HeuristicConfig)}
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or key not in known:
            raise MembrainError(f"--set {item!r}: expected KEY=VALUE with KEY one of {sorted(known)}")
        out[key] = json.loads(raw.lower()) if raw.lower() in {"true", "false"} else json.loads(raw)
    return out




def build_online(rows: list, emb: np.ndarray, teacher: Any, *, allow_aspects: bool = False,
                 subject: str = "") -> tuple[MembrainTree, list[str], float]:
    """Insert every row in order with ``teacher`` alone; returns (tree, fact ids, seconds)."""
    from ..insert.learner import teacher_forcing
    from ..tree.placement import NewFact
    from .bare_tree import insert_fact
    from .oracle import oracle_metadata

    tree = MembrainTree(subject, dim=int(emb.shape[1]))
    learner = teacher_forcing(teacher, int(emb.shape[1]), allow_aspects=allow_aspects)
    ids: list[str] = []
    t0 = time.perf_counter()
    for i, (r, e) in enumerate(zip(rows, emb)):
        nf = NewFact(r.text, e, oracle_metadata(r.id, r.path_ids, r.path))
        ids.append(insert_fact(tree, learner, nf, node_id=f"f{i}").fact_id)
    return tree, ids, time.perf_counter() - t0


def parse_max_height(raw: str) -> int | None:
    """``--max-height``: a positive int or ``none``."""
    if raw.strip().lower() == "none":
        return None
    try:
        return check_max_height(int(raw))
    except ValueError:
        raise MembrainError(f"--max-height {raw!r}: expected a positive integer or 'none'") from None


def build_product(rows: list, emb: np.ndarray, *, subject: str = "", teacher: Any = None,
                  max_height: int | None = 4) -> tuple[MembrainTree, list[str], float, float]:
    """Insert every row in order through the product: ``MembrainMemory(teacher=teacher,
    max_height=max_height)`` with its defaults otherwise (the shipped prior, background training), one ``add`` per
    fact, with the ground truth as the fact's metadata (read only by an OracleTeacher);
    returns (tree, fact ids, seconds, teacher questions per insert). Embeddings are
    precomputed (the same vectors; new aspect labels are embedded by MiniLM)."""
    from ..index.embeddings import MiniLMEmbeddings
    from ..memory import MembrainMemory
    from .economy_stream import PrecomputedEmbeddings
    from .oracle import oracle_metadata

    texts = [r.text for r in rows]
    known = dict(zip(texts, emb))
    ns = subject or "subject"
    t0 = time.perf_counter()
    with MembrainMemory(embeddings=PrecomputedEmbeddings(MiniLMEmbeddings(), known), dedupe=False, operations=False,
                        teacher=teacher, max_height=max_height) as mem:
        ids = [mem.add(r.text, namespace=ns, metadata=oracle_metadata(r.id, r.path_ids, r.path)) for r in rows]
        mem.flush()
        tree = mem.tree(ns).copy()
        stats = mem.stats()
    seconds = time.perf_counter() - t0
    return tree, ids, seconds, (stats["teacher_calls"] + stats["naming_calls"]) / max(len(ids), 1)


def _rows(args: argparse.Namespace) -> tuple[list, str]:
    """The labelled facts (``--data``, or sampled from WordNet) and where they came from."""
    from ..tree.evaluation import load_labelled_facts, wordnet_subtree_facts, write_labelled_facts

    if args.wordnet:
        rows = wordnet_subtree_facts(args.wordnet, size=args.size, seed=args.seed, wordnet_dir=args.wordnet_dir)
        source = f"wordnet:{args.wordnet}:size={args.size}:seed={args.seed}"
        if args.save_data:
            write_labelled_facts(rows, args.save_data)
    else:
        rows = load_labelled_facts(args.data)
        source = str(args.data)
    return (rows[: args.limit] if args.limit else rows), source


def _print_table(results: dict[str, dict[str, Any]], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"dendrogram purity: {title}")
    table.add_column("method", no_wrap=True, min_width=17)
    for col in ("purity", "ms/insert", "questions/insert", "aspects", "height", "top share"):
        table.add_column(col, justify="right", no_wrap=True)
    for name, r in results.items():
        p = r["dendrogram_purity"]
        table.add_row(name, "-" if p is None else f"{p:.4f}",
                      "-" if r["insert_ms_mean"] is None else f"{r['insert_ms_mean']:.2f}",
                      f"{r['questions_per_insert']:.3f}" if "questions_per_insert" in r else "-",
                      str(r["aspects"]), str(r["height"]), f"{r['largest_top_aspect_share']:.2f}")
    Console().print(table)


def run(args: argparse.Namespace) -> int:
    from ..tree.evaluation import average_linkage_tree, dendrogram_purity, flat_tree, path_class, tree_shape
    from .oracle import OracleTeacher

    rows, source = _rows(args)
    overrides = _parse_overrides(args.overrides)

    t0 = time.perf_counter()
    emb = embed_cached([r.text for r in rows], args.cache)
    embed_s = time.perf_counter() - t0
    subject = next((r.path[0] for r in rows if r.path), "") or (rows[0].name or "" if rows else "")
    classes_of = [path_class(r.path) for r in rows]
    n_classed = sum(c is not None for c in classes_of)

    results: dict[str, dict[str, Any]] = {}

    def record(name: str, tree: MembrainTree, ids: list[str], seconds: float, online: bool) -> None:
        try:
            purity: float | None = dendrogram_purity(tree, dict(zip(ids, classes_of)))
        except MembrainError:  # no class with two facts: no paths in the file
            purity = None
        results[name] = {
            "dendrogram_purity": purity,
            "build_s": round(seconds, 3),
            "insert_ms_mean": round(1000 * seconds / max(len(ids), 1), 3) if online else None,
            **tree_shape(tree),
        }

    heuristic = HeuristicTeacher(HeuristicConfig(**{**overrides, "aspect_actions": False}))
    tree_h, ids, secs = build_online(rows, emb, heuristic, subject=subject)
    record("heuristic", tree_h, ids, secs, True)

    with_aspects = HeuristicTeacher(HeuristicConfig(**{**overrides, "aspect_actions": True}))
    tree, ids, secs = build_online(rows, emb, with_aspects, allow_aspects=True, subject=subject)
    record("heuristic+aspects", tree, ids, secs, True)

    tree, ids, secs = build_online(rows, emb, MemTreeRuleTeacher(), subject=subject)
    record("memtree", tree, ids, secs, True)

    if args.product:
        oracle = rows and all(r.path_ids is not None for r in rows)
        for name, teacher in (("product", None), *((("product+oracle", OracleTeacher()),) if oracle else ())):
            tree, ids, secs, questions = build_product(rows, emb, subject=subject, teacher=teacher,
                                                       max_height=parse_max_height(args.max_height))
            record(name, tree, ids, secs, True)
            results[name]["questions_per_insert"] = round(questions, 3)

    for name, offline in (("flat", flat_tree), ("average_linkage", average_linkage_tree)):
        t0 = time.perf_counter()
        tree, ids = offline(emb, subject=subject)
        record(name, tree, ids, time.perf_counter() - t0, False)

    if rows and all(r.path_ids is not None for r in rows):
        tree, ids, secs = build_online(rows, emb, OracleTeacher(), subject=subject)
        record("oracle", tree, ids, secs, True)

    _print_table(results, f"{source} ({len(rows)} facts, {n_classed} with a class)")
    from rich.console import Console

    Console().print(f"[dim]embedding {len(rows)} texts: {embed_s:.1f} s; heuristic config: {heuristic.config}[/]")

    out = {
        "data": source,
        "n_facts": len(rows),
        "n_classed": n_classed,
        "class": "tuple(path[:2])",
        "embed_s": round(embed_s, 3),
        "heuristic_config": dict(heuristic.config.__dict__),
        "product_max_height": args.max_height,
        "methods": results,
    }
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(out, indent=2))
    if args.export:
        Path(args.export).parent.mkdir(parents=True, exist_ok=True)
        Path(args.export).write_text(json.dumps(tree_h.to_dict()))
    return 0
