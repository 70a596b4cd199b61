"""Topic trees of small memories: the bundled personas through the product, beside what
clustering their embeddings can reach at all.

Every fact of a persona (``data/PERSONAS.md``) was written about one named topic, so a tree
can be scored against the topics a person had in mind. Each persona is one memory of 40 to
50 facts about five topics. Definitions (``purity``: dendrogram purity, evaluation.py, with
a fact's class its topic):

- **product**: ``MembrainMemory().add`` per fact, one namespace per persona, the default
  settings (shipped prior, offline teacher, background training), flushed at the end;
- **teacher alone**: the same memory with both stages executing the offline teacher's
  decisions (what the student imitates);
- **flat**: every fact under the root (the floor);
- **k-means, k topics**: the facts' embeddings cut into as many clusters as the persona has
  topics, one aspect each (best of 10 seeded starts, scipy): an offline clustering told
  the number of topics, which the product is not;
- **average linkage**: offline UPGMA over all facts at once (cosine), a binary tree.

The last two are not trees the product could build (they see every fact at once); they say
how far the embedding itself separates the topics, so a goal above them asks for a better
embedder, not a better tree builder. Per row: mean purity over the personas (and its range),
top-level aspects, the share of facts loose under the root, and how many personas have at
least three top-level aspects.

Usage::

    python -m langchain_membrain.bench personas [--set tune,heldout] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ..tree.tree import MembrainTree

#: A tree built through a memory: texts -> (tree, the ids of the facts it stored).
Builder = Callable[[list[str]], tuple[MembrainTree, list[str]]]


@dataclass
class PersonaTree:
    """One persona's tree by one builder."""

    persona: str
    builder: str
    facts: int
    purity: float
    top_aspects: int  # aspects directly under the root
    root_share: float  # share of the facts attached directly to the root


def kmeans_tree(embeddings: np.ndarray, k: int, *, restarts: int = 10) -> tuple[MembrainTree, list[str]]:
    """The facts cut into ``k`` k-means clusters of their unit embeddings (the lowest
    distortion of ``restarts`` seeded k-means++ starts), one aspect per cluster under the
    root. Fact ``i`` has id ``f{i}``."""
    from scipy.cluster.vq import kmeans2

    x = np.asarray(embeddings, dtype=np.float64)
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    k = max(1, min(int(k), len(x)))
    runs = [kmeans2(x, k, minit="++", seed=seed) for seed in range(max(1, restarts))]
    best = min(runs, key=lambda run: float(((x - run[0][run[1]]) ** 2).sum()))[1]
    tree = MembrainTree()
    aspect: dict[int, str] = {}
    ids = []
    for i, (label, e) in enumerate(zip(best, x)):
        if int(label) not in aspect:
            aspect[int(label)] = tree.add_aspect(tree.root_id, f"cluster {int(label)}")
        ids.append(tree.add_fact(aspect[int(label)], f"fact {i}", embedding=e, node_id=f"f{i}"))
    return tree, ids


def score_tree(persona: str, builder: str, tree: MembrainTree, ids: Sequence[str],
               topics: Sequence[str]) -> PersonaTree:
    from ..tree.evaluation import dendrogram_purity

    loose = len(tree.child_facts(tree.root_id))
    return PersonaTree(persona, builder, len(ids), dendrogram_purity(tree, dict(zip(ids, topics))),
                       len(tree.child_aspects(tree.root_id)), loose / max(len(ids), 1))


def memory_builder(make_memory: Callable[[], Any]) -> Builder:
    """A builder that adds each fact through a fresh memory, one ``add`` per fact."""
    def build(texts: list[str]) -> tuple[MembrainTree, list[str]]:
        with make_memory() as mem:
            keys = [mem.add(t, namespace="persona") for t in texts]
            mem.flush()
            tree = mem.tree("persona").copy()
        # An IGNORE or a merged duplicate stores no fact of its own: score what was stored.
        return tree, [k for k in keys if k in tree]
    return build


def offline_builders() -> dict[str, Callable[[np.ndarray, int], tuple[MembrainTree, list[str]]]]:
    """The references built from all embeddings at once and the number of topics ``k``."""
    from ..tree.evaluation import average_linkage_tree, flat_tree

    return {
        "flat": lambda emb, k: flat_tree(emb),
        "k-means, k topics": kmeans_tree,
        "average linkage": lambda emb, k: average_linkage_tree(emb),
    }


def measure(personas: dict[str, list[dict]], embed: Callable[[list[str]], np.ndarray],
            online: dict[str, Builder]) -> list[PersonaTree]:
    """Every persona's tree by every builder: the ``online`` ones (through a memory, in
    order) and the offline references."""
    out = []
    for persona, rows in personas.items():
        texts = [r["text"] for r in rows]
        topic_of = dict(zip(texts, (r["topic"] for r in rows)))
        emb = np.asarray(embed(texts), dtype=np.float32)
        k = len(set(topic_of.values()))
        for name, build in online.items():
            tree, ids = build(texts)
            out.append(score_tree(persona, name, tree, ids, [topic_of[tree.node(i).text] for i in ids]))
        for name, build_offline in offline_builders().items():
            tree, ids = build_offline(emb, k)
            out.append(score_tree(persona, name, tree, ids, [topic_of[t] for t in texts]))
    return out


def summarize(rows: Sequence[PersonaTree]) -> dict[str, Any]:
    p = [r.purity for r in rows]
    return {"personas": len(rows), "purity": round(float(np.mean(p)), 3), "purity_min": round(min(p), 3),
            "purity_max": round(max(p), 3), "top_aspects": round(float(np.mean([r.top_aspects for r in rows])), 1),
            "root_share": round(float(np.mean([r.root_share for r in rows])), 2),
            "three_topics": sum(r.top_aspects >= 3 for r in rows)}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", default="tune,heldout", help="persona sets, comma-separated (tune, heldout)")
    parser.add_argument("--json", help="write every persona's row and the summaries here")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from ..index.embeddings import MiniLMEmbeddings, embed_texts
    from ..insert.config import LearnerConfig
    from ..memory import MembrainMemory
    from ..students.training_config import Policy
    from . import machine_description
    from .economy_stream import PrecomputedEmbeddings
    from .persona_sets import PERSONA_FILES, load_personas

    sets = [s.strip() for s in args.set.split(",") if s.strip()]
    unknown = [s for s in sets if s not in PERSONA_FILES]
    if not sets or unknown:
        raise SystemExit(f"--set takes {', '.join(sorted(PERSONA_FILES))} (comma-separated), not {args.set!r}")
    embedder = MiniLMEmbeddings()
    personas = {which: load_personas(which) for which in sets}
    texts = list(dict.fromkeys(r["text"] for p in personas.values() for rows in p.values() for r in rows))
    # Each fact is embedded once, here; the memories and the references read these vectors.
    served = PrecomputedEmbeddings(embedder, dict(zip(texts, embed_texts(embedder, texts))))
    teacher_only = LearnerConfig(stage1=Policy(execute="teacher"), stage2=Policy(execute="teacher"))
    online = {"product": memory_builder(lambda: MembrainMemory(embeddings=served)),
              "teacher alone": memory_builder(lambda: MembrainMemory(embeddings=served, learner=teacher_only))}
    console = Console(width=max(Console().width, 100))
    table = Table(title="persona trees: dendrogram purity against the topics the facts were written about")
    for col in ("set", "tree", "n", "purity", "range", "top aspects", "loose", ">= 3 top"):
        table.add_column(col, justify="right", no_wrap=True)
    report: dict[str, Any] = {}
    for which in sets:
        rows = measure(personas[which], served.embed_array, online)
        by: dict[str, list[PersonaTree]] = {}
        for r in rows:
            by.setdefault(r.builder, []).append(r)
        report[which] = {"rows": [asdict(r) for r in rows], "summary": {b: summarize(rs) for b, rs in by.items()}}
        for builder, rs in by.items():
            s = summarize(rs)
            table.add_row(which, builder, str(s["personas"]),
                          f"{s['purity']:.3f}", f"{s['purity_min']:.2f}-{s['purity_max']:.2f}",
                          f"{s['top_aspects']:.1f}", f"{s['root_share']:.0%}", f"{s['three_topics']} of {s['personas']}")
    console.print(table)
    console.print("[dim]k-means and average linkage see every fact at once (offline references: how far "
                  f"the embedding separates the topics). {machine_description()}[/]")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=1)
    return 0
