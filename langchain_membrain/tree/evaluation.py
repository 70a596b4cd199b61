"""Measures of tree quality, and the labelled data they are computed on.

Pure functions (no model, no embedder): the benchmarks and tests share them.

- :func:`dendrogram_purity`: how well a tree keeps facts of one ground-truth class together.
- :func:`load_labelled_facts`: JSON lines with ``text`` and an optional ground-truth ``path``
  (the WordNet files of ``shared/data``) into :class:`LabelledFact` rows.
- :func:`path_class`: the class of a fact for purity, ``tuple(path[:2])``.
- :func:`flat_tree` and :func:`average_linkage_tree`: the two reference trees the online
  tree is compared with (everything under the root; offline average-linkage clustering).
- :func:`tree_shape`: counts that reveal a degenerate tree (depth, width, catch-all aspects).
- :func:`wordnet_subtree_facts`: a second evaluation domain, sampled from any WordNet noun
  subtree of a local ``data.noun`` (Debian package ``wordnet-base``), in the same row format
  as ``wordnet_animal_facts.jsonl``.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Hashable, Iterable, Mapping, Sequence

import numpy as np

from ..errors import InvalidOperationError, MembrainError
from .tree import MembrainTree

__all__ = [
    "LabelledFact",
    "average_linkage_tree",
    "dendrogram_purity",
    "flat_tree",
    "load_labelled_facts",
    "path_class",
    "ranking_auc",
    "tree_shape",
    "wordnet_subtree_facts",
    "write_labelled_facts",
]


# ---------------------------------------------------------------- purity
def dendrogram_purity(tree: MembrainTree, fact_class: Mapping[str, Hashable]) -> float:
    """Dendrogram purity of ``tree`` (Heller & Ghahramani, 2005).

    Definition. Let ``P`` be the set of unordered pairs of distinct facts ``(i, j)`` with
    ``fact_class[i] == fact_class[j]``. For a pair, let ``v = lca(i, j)`` be their lowest
    common ancestor in the tree and ``leaves(v)`` the facts at or below ``v``; the pair's
    purity is the share of ``leaves(v)`` that belong to the pair's class. Dendrogram purity
    is the mean of the pair purities over ``P``:

        DP = 1/|P| * sum_{(i, j) in P} |{l in leaves(lca(i, j)) : class(l) = class(i)}| / |leaves(lca(i, j))|

    Every fact of the tree is a leaf; facts missing from ``fact_class`` (or mapped to None)
    take part in no pair but still count in ``leaves(v)``, so they dilute the purity of the
    aspects they sit in. A perfect tree scores 1.0.

    Computed in one post-order pass: at node ``v`` the number of class-``c`` pairs whose
    lca is ``v`` is ``C(n_c(v), 2) - sum over children u of C(n_c(u), 2)``, so the cost is
    O(nodes x classes present) rather than O(pairs).

    Raises:
        NodeNotFoundError: a key of ``fact_class`` is not in the tree.
        InvalidOperationError: a key is not a fact, or no class has two facts (no pairs,
            so purity is undefined).
    """
    classes: dict[str, Hashable] = {}
    for fid, cls in fact_class.items():
        if cls is None:
            continue
        if tree.node(fid).kind != "fact":
            raise InvalidOperationError(f"{fid!r} is a {tree.node(fid).kind}; purity classes are for facts")
        classes[fid] = cls
    totals = Counter(classes.values())
    n_pairs = sum(n * (n - 1) // 2 for n in totals.values())
    if n_pairs == 0:
        raise InvalidOperationError("dendrogram purity needs at least two facts of one class")

    # Iterative post-order (trees may be deep: a chain-like linkage tree of thousands of
    # facts would overflow Python's recursion limit).
    counts: dict[str, Counter] = {}
    leaves: dict[str, int] = {}
    weighted = 0.0
    stack: list[tuple[str, bool]] = [(tree.root_id, False)]
    while stack:
        nid, expanded = stack.pop()
        children = tree.children(nid)
        if not expanded and children:
            stack.append((nid, True))
            stack.extend((c, False) for c in children)
            continue
        if not children:  # a fact, or an empty container
            is_fact = tree.node(nid).kind == "fact"
            counts[nid] = Counter({classes[nid]: 1}) if nid in classes else Counter()
            leaves[nid] = 1 if is_fact else 0
            continue
        here: Counter = Counter()
        pairs_below: Counter = Counter()
        n_leaves = 0
        for c in children:
            child_counts = counts.pop(c)
            n_leaves += leaves.pop(c)
            for cls, n in child_counts.items():
                here[cls] += n
                pairs_below[cls] += n * (n - 1) // 2
        for cls, n in here.items():
            lca_pairs = n * (n - 1) // 2 - pairs_below[cls]
            if lca_pairs:
                weighted += lca_pairs * n / n_leaves
        counts[nid], leaves[nid] = here, n_leaves
    return weighted / n_pairs


def ranking_auc(scores: Sequence[float], positive: Sequence[bool]) -> float | None:
    """Area under the ROC curve of ``scores`` for the labels ``positive``: the probability
    that a positive, drawn at random, scores above a negative drawn at random (a tie counts
    one half). 0.5 is chance, 1.0 a perfect ranking; None without both classes.

    Computed from midranks (the Mann-Whitney U statistic): ``(R+ - n+(n+ + 1)/2) / (n+ n-)``
    with ``R+`` the sum of the positives' ranks among all scores."""
    from scipy.stats import rankdata

    x = np.asarray(scores, dtype=float)
    y = np.asarray(positive, dtype=bool)
    if x.shape != y.shape:
        raise InvalidOperationError("scores and labels differ in length")
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    ranks = rankdata(x)  # ties share their mean rank
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def path_class(path: Sequence[str] | None, depth: int = 2) -> tuple[str, ...] | None:
    """The ground-truth class of a fact for purity: ``tuple(path[:depth])``.

    With the default ``depth=2`` that is the ancestor one level below the subject (path[0]
    is the subject itself). Facts with a shorter path (the subject and its direct children)
    have no class: None.
    """
    if path is None or len(path) < depth:
        return None
    return tuple(path[:depth])


# ------------------------------------------------------------------ data
@dataclass
class LabelledFact:
    """One evaluation row: the fact text and, when known, its ground-truth place.

    ``path`` are the ancestor names from the subject down to the fact's parent and
    ``path_ids`` the same ancestors' ids (empty for the subject itself); ``id`` and
    ``name`` identify the fact's own ground-truth node (WordNet: ``wn30:n:<offset>`` and the
    first lemma).
    """

    text: str
    path: list[str] | None = None
    path_ids: list[str] | None = None
    id: str | None = None
    name: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _str_list(value: Any, what: str, lineno: int) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise MembrainError(f"line {lineno}: {what} must be a list of strings")
    return list(value)


def load_labelled_facts(path: str | Path, *, limit: int | None = None) -> list[LabelledFact]:
    """Read JSON lines with ``text`` (required) and optional ``path``, ``path_ids``, ``id``
    into rows, in file order. ``name`` is the text before the first ``": "`` (the WordNet
    files' ``"<lemma>: <definition>"``). Blank lines are skipped.

    Raises:
        MembrainError: the file is missing, a line is not a JSON object, or a field has
            the wrong type (the message names the line).
    """
    p = Path(path)
    if not p.is_file():
        raise MembrainError(f"no data file {str(p)!r}")
    rows: list[LabelledFact] = []
    with p.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise MembrainError(f"line {lineno}: not JSON ({exc.msg})") from None
            if not isinstance(obj, dict) or not isinstance(obj.get("text"), str) or not obj["text"].strip():
                raise MembrainError(f"line {lineno}: expected an object with a non-empty 'text'")
            text = obj["text"]
            path_names = _str_list(obj.get("path"), "path", lineno)
            path_ids = _str_list(obj.get("path_ids"), "path_ids", lineno)
            if path_names is not None and path_ids is not None and len(path_names) != len(path_ids):
                raise MembrainError(f"line {lineno}: path and path_ids differ in length")
            rid = obj.get("id")
            name = text.split(": ", 1)[0] if ": " in text else None
            extra = {k: v for k, v in obj.items() if k not in {"text", "path", "path_ids", "id"}}
            rows.append(LabelledFact(text, path_names, path_ids, None if rid is None else str(rid), name, extra))
            if limit is not None and len(rows) >= limit:
                break
    return rows


def write_labelled_facts(rows: Iterable[LabelledFact], path: str | Path) -> None:
    """Write rows as JSON lines that :func:`load_labelled_facts` reads back."""
    with Path(path).open("w", encoding="utf-8") as fh:
        for r in rows:
            obj: dict[str, Any] = {"id": r.id, "text": r.text, "path": r.path, "path_ids": r.path_ids}
            obj.update(r.extra)
            fh.write(json.dumps(obj) + "\n")


# -------------------------------------------------------- reference trees
def flat_tree(embeddings: np.ndarray, *, subject: str = "") -> tuple[MembrainTree, list[str]]:
    """Every fact directly under the root. Returns the tree and the fact ids, in input order
    (fact ``i`` has id ``f{i}``)."""
    tree = MembrainTree(subject)
    ids = [tree.add_fact(tree.root_id, f"fact {i}", embedding=e, node_id=f"f{i}") for i, e in enumerate(embeddings)]
    return tree, ids


def average_linkage_tree(embeddings: np.ndarray, *, subject: str = "") -> tuple[MembrainTree, list[str]]:
    """The offline baseline: UPGMA (average-linkage agglomerative clustering on cosine
    distance, scipy) over all facts at once, as a binary tree of aspects. Fact ``i`` has id
    ``f{i}``; the dendrogram's top merge is the root. Needs scipy (the ``bench`` extra)."""
    from scipy.cluster.hierarchy import linkage

    x = np.asarray(embeddings, dtype=np.float64)
    n = len(x)
    tree = MembrainTree(subject)
    if n < 2:
        return tree, [tree.add_fact(tree.root_id, "fact 0", embedding=e, node_id="f0") for e in x]
    z = linkage(x, method="average", metric="cosine")
    # Cluster k (k >= n) is row k - n of z; build top-down so each node's parent exists.
    node_of: dict[int, str] = {2 * n - 2: tree.root_id}
    ids: list[str | None] = [None] * n
    for k in range(2 * n - 2, n - 1, -1):
        parent = node_of[k]
        for child in (int(z[k - n, 0]), int(z[k - n, 1])):
            if child < n:
                ids[child] = tree.add_fact(parent, f"fact {child}", embedding=x[child], node_id=f"f{child}")
            else:
                node_of[child] = tree.add_aspect(parent, f"cluster {child}", node_id=f"c{child}")
    return tree, [i for i in ids if i is not None]


def tree_shape(tree: MembrainTree) -> dict[str, Any]:
    """Counts that reveal a degenerate tree: facts, aspects, height, the largest number of
    children of one node, facts directly under the root, and the largest share of all facts
    held by one child of the root (near 1.0: a catch-all aspect)."""
    n_facts = tree.fact_count(tree.root_id)
    top = [tree.fact_count(c) for c in tree.child_aspects(tree.root_id)]
    return {
        "facts": n_facts,
        "aspects": len(tree.aspects()),
        "height": tree.height(),
        "max_children": max((tree.graph.out_degree(n) for n in tree.graph), default=0),
        "root_facts": len(tree.child_facts(tree.root_id)),
        "largest_top_aspect_share": (max(top) / n_facts) if top and n_facts else 0.0,
    }


# ------------------------------------------------------------- WordNet
_SENSE = re.compile(r"^(?P<lemma>.+)\.n\.(?P<num>\d+)$")


def _parse_data_noun(data_noun: Path) -> dict[str, tuple[list[str], list[str], str]]:
    """offset -> (lemmas, hyponym offsets, definition) from WordNet's ``data.noun``."""
    synsets: dict[str, tuple[list[str], list[str], str]] = {}
    with data_noun.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.startswith(" "):  # the license header
                continue
            body, _, gloss = line.partition(" | ")
            f = body.split()
            offset, w_cnt = f[0], int(f[3], 16)
            lemmas = [f[4 + 2 * i].replace("_", " ") for i in range(w_cnt)]
            i = 4 + 2 * w_cnt
            p_cnt = int(f[i])
            hyponyms = []
            for j in range(p_cnt):
                sym, target, pos = f[i + 1 + 4 * j], f[i + 2 + 4 * j], f[i + 3 + 4 * j]
                if sym in ("~", "~i") and pos == "n":
                    hyponyms.append(target)
            definition = gloss.split('; "', 1)[0].strip().rstrip(";").strip()
            synsets[offset] = (lemmas, hyponyms, definition)
    return synsets


def _resolve_synset(name: str, index_noun: Path) -> str:
    """``lemma.n.NN`` (NLTK style) or an 8-digit offset -> the offset."""
    if re.fullmatch(r"\d{8}", name):
        return name
    m = _SENSE.match(name)
    if not m:
        raise MembrainError(f"synset {name!r}: expected 'lemma.n.NN' or an 8-digit offset")
    lemma, num = m["lemma"].lower(), int(m["num"])
    with index_noun.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if line.startswith(lemma + " "):
                f = line.split()
                offsets = [t for t in f if re.fullmatch(r"\d{8}", t)]
                if 1 <= num <= len(offsets):
                    return offsets[num - 1]
                break
    raise MembrainError(f"synset {name!r} is not in {index_noun}")


def _hyponym_tree(synsets: dict[str, tuple[list[str], list[str], str]], top: str) -> tuple[dict[str, str | None], list[str]]:
    """The hyponym subtree of ``top``, breadth-first: each synset's parent (its first-found
    hypernym on a path from ``top``; ``top``'s is None) and the synsets in visiting order."""
    parent: dict[str, str | None] = {top: None}
    order = [top]
    queue = deque([top])
    while queue:
        head = queue.popleft()
        for child in synsets[head][1]:
            if child not in parent:
                parent[child] = head
                order.append(child)
                queue.append(child)
    return parent, order


def _parent_closed_sample(parent: dict[str, str | None], order: list[str], size: int, seed: int) -> set[str]:
    """``order[0]`` and random others (``random.Random(seed)``), each with its whole
    ancestor chain, while the chain fits in ``size`` synsets."""
    rng = random.Random(seed)
    chosen: set[str] = {order[0]}
    pool = order[1:]
    rng.shuffle(pool)
    for off in pool:
        if len(chosen) >= size:
            break
        chain = []
        cur: str | None = off
        while cur is not None and cur not in chosen:
            chain.append(cur)
            cur = parent[cur]
        if len(chosen) + len(chain) <= size:
            chosen.update(chain)
    return chosen


def wordnet_subtree_facts(
    root: str,
    *,
    size: int = 500,
    seed: int = 0,
    wordnet_dir: str | Path = "/usr/share/wordnet",
) -> list[LabelledFact]:
    """Sample a parent-closed set of ``size`` synsets from the hyponym subtree of ``root``.

    The same recipe as ``shared/data/wordnet_animal_facts.jsonl``: random subtree nodes
    (``random.Random(seed)``) are added together with their whole ancestor chain until
    ``size`` synsets are held; rows come out in breadth-first order (parents first). A
    synset's ancestors are its first-found breadth-first path from ``root`` (WordNet has a
    few synsets with two hypernyms; the other one is ignored). Each row: ``text`` =
    ``"<first lemma>: <definition>"``, ``path``/``path_ids`` from ``root`` down to the parent,
    ``id`` = ``wn30:n:<offset>``.

    Args:
        root: ``"food.n.02"`` style name (sense numbers as in NLTK) or an 8-digit offset.
        wordnet_dir: a folder with WordNet 3.0 ``data.noun`` and ``index.noun``
            (``apt-get install wordnet-base`` puts them in ``/usr/share/wordnet``).

    Raises:
        MembrainError: the WordNet files are missing or ``root`` is unknown.
    """
    d = Path(wordnet_dir)
    data_noun, index_noun = d / "data.noun", d / "index.noun"
    if not data_noun.is_file() or not index_noun.is_file():
        raise MembrainError(f"no WordNet data.noun/index.noun in {str(d)!r} (apt-get install wordnet-base)")
    synsets = _parse_data_noun(data_noun)
    top = _resolve_synset(root, index_noun)
    if top not in synsets:
        raise MembrainError(f"synset {root!r} ({top}) is not in data.noun")

    parent, order = _hyponym_tree(synsets, top)
    chosen = _parent_closed_sample(parent, order, size, seed)

    def name(off: str) -> str:
        return synsets[off][0][0]

    rows: list[LabelledFact] = []
    for off in order:  # breadth-first: parents come before their children
        if off not in chosen:
            continue
        anc: list[str] = []
        cur = parent[off]
        while cur is not None:
            anc.append(cur)
            cur = parent[cur]
        anc.reverse()
        rows.append(LabelledFact(
            text=f"{name(off)}: {synsets[off][2]}",
            path=[name(a) for a in anc],
            path_ids=[f"wn30:n:{a}" for a in anc],
            id=f"wn30:n:{off}",
            name=name(off),
            extra={"depth": len(anc)},
        ))
    return rows
