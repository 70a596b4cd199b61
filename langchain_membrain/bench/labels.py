"""How well aspect labels name their topics, on the bundled personas.

Every fact of a persona (``data/PERSONAS.md``) was written about one named topic ("health",
"garden", "commute"), so a label can be compared with the name a person gave the topic.
Definitions, with ``cos`` the cosine of two MiniLM embeddings:

- The **score** of a label for a topic ``t`` among a persona's topics ``T`` is
  ``cos(label, t)``; the label **names its topic** when ``t`` is the topic of ``T``
  nearest the label.
- **Topics**: the facts of each topic are labelled on their own (``--labeller``: the
  product's offline name, ``labels.aspect_label``, by default; ``phrase``: the phrase of
  their own words alone, ``labels.offline_label``, as the product named aspects before it
  had a topic vocabulary; ``vocabulary``: the best-fitting topic of
  ``data/topic_vocabulary.txt`` alone): what a labeller can do with a clean cluster.
- **Tree**: every aspect of each persona's tree, built through ``MembrainMemory().add``
  (one namespace per persona, the default settings), against the *majority topic* of the
  facts below it, with the label the product gave it (``current``) and with the labeller
  run again on its typical facts (``relabelled``, as its relabel does). The aspects' mean
  majority share says how mixed they are: a label cannot name one topic for an aspect
  that holds three. ``--without-set-topics`` drops the set's own topic names from the
  vocabulary.

Usage::

    python -m langchain_membrain.bench labels [--set tune,heldout] [--json OUT]

Measured: bench/RESULTS.md, labels.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence, cast

import numpy as np

Embed = Callable[[list[str]], Sequence[Sequence[float]] | np.ndarray]
#: (texts, their mean embedding, avoid, the mean embedding of what surrounds them) -> label
Labeller = Callable[[list[str], np.ndarray, list[str], np.ndarray], str]


@dataclass
class LabelScore:
    """One label against the topic it should name."""

    persona: str
    topic: str
    label: str
    score: float  # cos(label, topic)
    names_topic: bool  # the topic is the persona's topic nearest the label
    facts: int = 0
    majority_share: float = 1.0  # of the facts below, the share about ``topic``


def score_label(label: str, topic: str, topics: Sequence[str], embed: Embed) -> tuple[float, bool]:
    """(``cos(label, topic)``, whether ``topic`` is the one of ``topics`` nearest ``label``)."""
    from ..tree.placement import cosine

    vecs = np.asarray(embed([label, *topics]))
    sims = [cosine(vecs[0], v) for v in vecs[1:]]
    i = list(topics).index(topic)
    return sims[i], int(np.argmax(sims)) == i


def phrase_labeller(embed: Embed) -> Labeller:
    """The offline labeller's phrase of the facts' own words (``labels.offline_label``), as
    the product named every aspect before it had a topic vocabulary."""
    from ..tree.labels import offline_label

    return lambda texts, mean, avoid, context: offline_label(texts, embed, mean=mean, avoid=avoid, max_candidates=32)


def product_labeller(embed: Embed, topics: Sequence[str] | None = None) -> Labeller:
    """The product's offline name (``labels.aspect_label``): the topic of the vocabulary
    that fits the group, where one reaches the bar, else its phrase. ``topics``: the
    vocabulary (None: the shipped one)."""
    from ..tree.labels import aspect_label
    from ..tree.vocabulary import TopicVocabulary

    vocabulary = TopicVocabulary(embed, topics)  # type: ignore[arg-type]
    return lambda texts, mean, avoid, context: aspect_label(texts, embed, vocabulary=vocabulary, mean=mean,
                                                            context=context, avoid=avoid)


def load_vocabulary(exclude: Sequence[str] = ()) -> list[str]:
    """The shipped topics (``data/topic_vocabulary.txt``), without those of ``exclude``."""
    from ..tree.vocabulary import shipped_topics

    dropped = {t.casefold() for t in exclude}
    return [t for t in shipped_topics() if t.casefold() not in dropped]


def vocabulary_labeller(embed: Embed, vocabulary: Sequence[str]) -> Labeller:
    """The topic of ``vocabulary`` of best fit (vocabulary.py), however weak: what the
    vocabulary alone says, without the bar or the phrase behind it. The topics ``avoid``
    names are skipped."""
    from ..tree.vocabulary import TopicVocabulary

    topics = TopicVocabulary(embed, vocabulary, bar=-1.0)  # type: ignore[arg-type]
    return lambda texts, mean, avoid, context: topics.topic(mean, context=context, avoid=avoid) or topics.topics[0]


def topic_labels(personas: dict[str, list[dict]], labeller: Labeller, embed: Embed) -> list[LabelScore]:
    """Each topic of each persona labelled from its own facts alone."""
    out = []
    for persona, rows in personas.items():
        topics = sorted({r["topic"] for r in rows})
        context = np.mean(np.asarray(embed([r["text"] for r in rows])), axis=0)
        for topic in topics:
            texts = [r["text"] for r in rows if r["topic"] == topic]
            label = labeller(texts, np.mean(np.asarray(embed(texts)), axis=0), [], context)
            out.append(LabelScore(persona, topic, label, *score_label(label, topic, topics, embed), facts=len(texts)))
    return out


def tree_labels(personas: dict[str, list[dict]], embed: Embed, make_memory: Callable[[], Any],
                labeller: Labeller | None = None) -> dict[str, list[LabelScore]]:
    """Every aspect of each persona's product tree against its majority topic: ``current``
    (the label it has) and, with ``labeller``, ``relabelled`` (as a relabel does: from its
    typical facts and its mean embedding, avoiding its neighbours' labels; the parent's mean
    embedding is the context)."""
    from ..tree.labels import relabel_avoid, typical_facts

    out: dict[str, list[LabelScore]] = {"current": [], "relabelled": []}
    with make_memory() as mem:
        for persona, rows in personas.items():
            for r in rows:
                mem.add(r["text"], namespace=persona)
            mem.flush()
            tree = mem.tree(persona)
            topic_of = {r["text"]: r["topic"] for r in rows}
            topics = sorted(set(topic_of.values()))
            for a in tree.aspects():
                below = [topic_of.get(tree.node(f).text) for f in tree.facts_below(a)]
                if not below:
                    continue
                topic, n = Counter(t for t in below if t).most_common(1)[0]
                kw: dict[str, Any] = {"facts": len(below), "majority_share": n / len(below)}
                label = tree.node(a).text
                out["current"].append(LabelScore(persona, topic, label, *score_label(label, topic, topics, embed), **kw))
                if labeller is not None:
                    label = labeller(typical_facts(tree, a), tree.mean_embedding(a), relabel_avoid(tree, a),
                                     tree.mean_embedding(cast(str, tree.parent(a))))
                    out["relabelled"].append(LabelScore(persona, topic, label, *score_label(label, topic, topics, embed),
                                                     **kw))
    return out


def summarize(scores: Sequence[LabelScore]) -> dict[str, Any]:
    if not scores:
        return {"labels": 0}
    return {"labels": len(scores), "score": round(float(np.mean([s.score for s in scores])), 3),
            "names_topic": round(float(np.mean([s.names_topic for s in scores])), 2),
            "majority_share": round(float(np.mean([s.majority_share for s in scores])), 2)}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", default="tune,heldout", help="persona sets, comma-separated (tune, heldout)")
    parser.add_argument("--no-tree", action="store_true", help="only the topics measure (no product trees)")
    parser.add_argument("--labeller", choices=("product", "phrase", "vocabulary"), default="product",
                        help="who relabels: the product's offline name (a topic of data/topic_vocabulary.txt where one "
                             "fits, else a phrase), the phrase alone, or the best-fitting topic alone")
    parser.add_argument("--without-set-topics", action="store_true",
                        help="drop the set's own topic names from the vocabulary")
    parser.add_argument("--show", action="store_true", help="print every label")
    parser.add_argument("--json", help="write every label and the summaries here")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from ..index.embeddings import EmbeddingCache, MiniLMEmbeddings, embed_texts
    from ..memory import MembrainMemory
    from . import machine_description
    from .persona_sets import load_personas

    embedder = MiniLMEmbeddings()
    embed = EmbeddingCache(lambda texts: embed_texts(embedder, texts))  # topic names and labels recur
    console = Console()
    table = Table(title="aspect labels against the personas' topic names (cos by MiniLM)")
    for col in ("set", "measure", "labels", "score", "names its topic", "majority share"):
        table.add_column(col, justify="right")
    report: dict[str, Any] = {}
    for which in [s.strip() for s in args.set.split(",") if s.strip()]:
        personas = load_personas(which)
        names = {r["topic"] for rows in personas.values() for r in rows} if args.without_set_topics else ()
        vocabulary = load_vocabulary(exclude=sorted(names))
        labeller = {"product": lambda: product_labeller(embed, vocabulary), "phrase": lambda: phrase_labeller(embed),
                    "vocabulary": lambda: vocabulary_labeller(embed, vocabulary)}[args.labeller]()
        runs = {"topics": topic_labels(personas, labeller, embed)}
        if not args.no_tree:
            trees = tree_labels(personas, embed, lambda: MembrainMemory(embeddings=embedder), labeller)
            runs.update({f"tree, {k}": v for k, v in trees.items()})
        for name, scores in runs.items():
            s = summarize(scores)
            report.setdefault(which, {})[name] = {"summary": s, "labels": [asdict(x) for x in scores]}
            table.add_row(which, name, str(s["labels"]), f"{s.get('score', 0):.3f}", f"{s.get('names_topic', 0):.2f}",
                          f"{s.get('majority_share', 0):.2f}")
            if args.show:
                for x in scores:
                    console.print(f"  {which} {name}: {x.persona} {x.topic} ({x.majority_share:.2f} of {x.facts}) "
                                  f"-> {x.label!r} {x.score:.2f}{'' if x.names_topic else ' (another topic)'}")
    console.print(table)
    console.print(f"[dim]{machine_description()}[/]")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=1)
    return 0
