"""Many users through one memory, against a teacher that knows topics.

Each persona of a topic-labelled file is one namespace of ONE ``MembrainMemory`` (the
networks are shared across namespaces, as in a deployment); personas come one after the
other, one ``add`` per fact. The teacher is the evaluation-only :class:`TopicTeacher`
(``--teacher topics``: it reads each fact's topic and subtopic, as an LLM that knows topics
would decide) or the product's offline default (``--teacher default``); a shadow copy of the
same teacher checks every decision the student takes alone (never counted or executed).

Reported per third of the stream (by inserts; a persona's trees and queries count in the
third its last fact fell in):

- **questions per insert**: every counted teacher question (placement, audit, operation,
  naming) over the third's inserts, and by kind;
- **prompt tokens**: characters / 4 of the question an LLM teacher would be sent for the
  tree as it stands at each insert that asked: the batch question about the persona's last
  ``LearnerConfig.batch`` facts when the teacher answers batches (``place_batch_messages``),
  else the joint question (``place_messages``); the largest and the mean;
- **student share**: stage-1 and stage-2 decisions the student took alone;
- **shadow agreement**: the share of those the shadow teacher would have taken too
  (stage 1 per level and stage 2 per action series, pooled);
- **purity**: dendrogram purity of each persona's final tree against its topics;
- **labels**: the share of top-level aspects whose label names their topic: of the file's
  topic names, the one nearest the label (MiniLM cosine) is the topic most facts below the
  aspect were written about;
- **R-precision** of topic queries: for each of a persona's topics with R current facts,
  the share of the topic's facts among the first R hits of ``mem.search`` (membrain) and of
  plain cosine over the same facts (flat), asked as ``"my <topic>"`` and as the file's own
  question about that topic.

Data: JSON lines ``{"persona", "topic", "subtopic"?, "text"}``; rows with
``"kind": "query"`` hold a natural question about that persona's topic. Default: the bundled
held-out set ``data/topics_heldout.jsonl`` (``data/TOPICS.md``).

Usage::

    python -m langchain_membrain.bench topics [--data FILE.jsonl] [--teacher topics|default]
        [--topic-match auto|on|off] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

BUNDLED = "data/topics_heldout.jsonl"


@dataclass
class TopicData:
    """A topic file: each persona's facts and natural queries, in file order."""

    facts: dict[str, list[dict[str, Any]]]
    queries: dict[str, dict[str, str]]  # persona -> topic -> question
    teacher_paths: dict[str, list[str]] | None = None  # WordNet: the oracle's classes, cut

    @property
    def paths(self) -> dict[str, list[str]]:
        """Fact text -> [topic, subtopic] (the TopicTeacher's input)."""
        if self.teacher_paths is not None:
            return self.teacher_paths
        return {r["text"]: [r["topic"]] + ([r["subtopic"]] if r.get("subtopic") else [])
                for rows in self.facts.values() for r in rows}


def wordnet_topics(rows: list[dict[str, Any]], *, levels: int = 3) -> TopicData:
    """A WordNet file (``bench hierarchy``'s rows: ``text``, ``path``) as one persona: a
    fact's topic is its class one level below the file's top node, as ``bench hierarchy``
    scores it, and the teacher's paths are the oracle's classes cut to ``levels``."""
    from .topic_teacher import TopicTeacher

    teacher = TopicTeacher.from_oracle_rows(rows, levels=levels)
    facts = [{"persona": "wordnet", "topic": (r.get("path") or [None, None])[1] if len(r.get("path") or []) >= 2
              else None, "text": r["text"]} for r in rows]
    return TopicData({"wordnet": facts}, {}, {str(r["text"]): list(teacher.path_of(str(r["text"]))) for r in rows})


def load_topics(path: str | Path | None = None) -> TopicData:
    """Read a topic file (module docstring); the bundled held-out set by default."""
    if path is None:
        from importlib import resources

        text = resources.files("langchain_membrain").joinpath(BUNDLED).read_text("utf-8")
    else:
        text = Path(path).read_text("utf-8")
    facts: dict[str, list[dict[str, Any]]] = {}
    queries: dict[str, dict[str, str]] = {}
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    if rows and all("path" in r and "persona" not in r for r in rows):
        return wordnet_topics(rows)
    for n, row in enumerate(rows, start=1):
        if not isinstance(row, dict) or not {"persona", "topic", "text"} <= row.keys():
            raise SystemExit(f"line {n}: a row has persona, topic and text")
        if row.get("kind") == "query":
            queries.setdefault(row["persona"], {})[row["topic"]] = row["text"]
        else:
            facts.setdefault(row["persona"], []).append(row)
    return TopicData(facts, queries)


def r_precision(ranked: Sequence[str], relevant: set[str]) -> float:
    """The share of ``relevant`` among the first ``len(relevant)`` of ``ranked``."""
    r = len(relevant)
    return sum(1 for t in ranked[:r] if t in relevant) / r if r else 0.0


def prompt_tokens(mem: Any, namespace: Sequence[str], texts: Sequence[str]) -> int:
    """Characters / 4 of the question an LLM teacher would get now: the joint question about
    one text, the batch question about several."""
    from ..teachers.outline import place_batch_messages, place_messages

    tree = mem.tree(namespace)
    messages = place_messages(texts[0], tree)[0] if len(texts) == 1 else place_batch_messages(texts, tree)[0]
    return sum(len(m["content"]) for m in messages) // 4


@dataclass
class Third:
    """Counters over one third of the stream."""

    inserts: int = 0
    questions: dict[str, int] = field(default_factory=dict)
    prompts: list[int] = field(default_factory=list)
    decisions: int = 0
    alone: int = 0
    shadow: list[int] = field(default_factory=lambda: [0, 0])  # agreed, checked
    purity: list[float] = field(default_factory=list)
    rprec: dict[str, list[float]] = field(default_factory=dict)  # "membrain my", "flat my", ...
    labels: list[float] = field(default_factory=list)  # per top-level aspect: its label names its topic

    def summary(self) -> dict[str, Any]:
        def mean(v: Sequence[float]) -> float | None:
            return round(float(np.mean(v)), 3) if v else None

        n = max(self.inserts, 1)
        return {"inserts": self.inserts,
                "questions_per_insert": round(sum(self.questions.values()) / n, 3),
                "by_kind": {k: round(v / n, 3) for k, v in sorted(self.questions.items()) if v},
                "max_prompt_tokens": max(self.prompts, default=0), "mean_prompt_tokens": mean(self.prompts),
                "student_share": round(self.alone / self.decisions, 3) if self.decisions else None,
                "shadow_agreement": round(self.shadow[0] / self.shadow[1], 3) if self.shadow[1] else None,
                "shadow_checked": self.shadow[1], "purity": mean(self.purity), "label_agreement": mean(self.labels),
                **{f"rprec_{k}": mean(v) for k, v in sorted(self.rprec.items())}}


def _snapshot(stats: Mapping[str, Any]) -> tuple[dict[str, int], int, int, tuple[int, int]]:
    from .economy_stream import read_counts

    _, _, kinds = read_counts(stats)
    decisions = sum(int((stats.get(s) or {}).get("decisions") or 0) for s in ("stage1", "stage2"))
    alone = sum(int((stats.get(s) or {}).get("model_executed") or 0) for s in ("stage1", "stage2"))
    sh = stats.get("shadow_agreement") or {}
    agreed = sum(int((sh.get(s) or {}).get("agreed") or 0) for s in ("stage1", "stage2"))
    checked = sum(int((sh.get(s) or {}).get("decisions") or 0) for s in ("stage1", "stage2"))
    return kinds, decisions, alone, (agreed, checked)


def score_persona(mem: Any, ns: Sequence[str], topic_of: Mapping[str, str], embed: Any,
                  questions: Mapping[str, str], topics: Sequence[str] = ()) -> tuple[float, dict[str, list[float]], list[float]]:
    """Purity of the persona's tree, the R-precision of its topic queries and, per top-level
    aspect, whether its label names its topic: the name of ``topics`` (the file's) nearest
    the label (MiniLM cosine) is the topic most of the facts below it were written about."""
    from ..tree.evaluation import dendrogram_purity

    tree = mem.tree(ns).copy()
    facts = [f for f in tree.facts() if tree.node(f).text in topic_of]
    purity = dendrogram_purity(tree, {f: topic_of[tree.node(f).text] for f in facts})
    texts = [tree.node(f).text for f in facts]
    vecs = np.asarray(embed(texts), dtype=np.float32)
    out: dict[str, list[float]] = {}
    for topic in sorted({topic_of[t] for t in texts} - {None}):
        relevant = {t for t in texts if topic_of[t] == topic}
        asks = {"my": f"my {topic.replace('_', ' ')}"}
        if topic in questions:
            asks["questions"] = questions[topic]
        for how, query in asks.items():
            hits = mem.search(query, namespace=ns, exact_namespace=True, limit=len(relevant))
            out.setdefault(f"membrain_{how}", []).append(r_precision([h.text for h in hits], relevant))
            q = np.asarray(embed([query]), dtype=np.float32)[0]
            flat = [texts[i] for i in np.argsort(-(vecs @ q), kind="stable")]
            out.setdefault(f"flat_{how}", []).append(r_precision(flat, relevant))
    from .labels import score_label

    names = [t.replace("_", " ") for t in topics]
    labels = []
    for a in tree.child_aspects(tree.root_id) if names else ():
        below = [topic_of[tree.node(f).text] for f in tree.facts_below(a) if tree.node(f).text in topic_of]
        if below:
            majority = Counter(below).most_common(1)[0][0].replace("_", " ")
            labels.append(float(score_label(tree.node(a).text, majority, names, embed)[1]))
    return purity, out, labels


def run_topics(data: TopicData, make_memory: Any, embed: Any, *, prompts: bool = True, batch: int = 1,
               log: Any = None) -> tuple[list[Third], dict[str, Any], list[int]]:
    """Stream every persona through one memory: the per-third counters, the final stats and
    the questions counted at each insert (a persona's flush counts at its last insert)."""
    total = sum(len(rows) for rows in data.facts.values())
    from ..index.embeddings import EmbeddingCache

    embed = EmbeddingCache(embed)  # topic names and labels are embedded again for every persona
    thirds = [Third() for _ in range(3)]
    topics = sorted({r["topic"] for rows in data.facts.values() for r in rows})
    per_insert: list[int] = []
    done = 0
    with make_memory() as mem:
        prev = _snapshot(mem.stats())
        for persona, rows in data.facts.items():
            ns = ("topics", persona)
            topic_of = {r["text"]: r["topic"] for r in rows}
            for i, row in enumerate(rows):
                third = thirds[min(3 * done // max(total, 1), 2)]
                mem.add(row["text"], namespace=ns)
                done += 1
                now = _snapshot(mem.stats())
                asked = {k: v - prev[0].get(k, 0) for k, v in now[0].items()}
                for k, v in asked.items():
                    third.questions[k] = third.questions.get(k, 0) + v
                per_insert.append(sum(asked.values()))
                third.inserts += 1
                third.decisions += now[1] - prev[1]
                third.alone += now[2] - prev[2]
                third.shadow[0] += now[3][0] - prev[3][0]
                third.shadow[1] += now[3][1] - prev[3][1]
                if prompts and sum(asked.values()) != 0:
                    # a batch question is about the inserts that waited: at most ``batch`` of them
                    third.prompts.append(prompt_tokens(mem, ns, [r["text"] for r in rows[max(0, i + 1 - batch): i + 1]]))
                prev = now
            mem.flush()
            now = _snapshot(mem.stats())
            for k, v in now[0].items():  # what the flush asked counts where the persona ended
                third.questions[k] = third.questions.get(k, 0) + v - prev[0].get(k, 0)
                per_insert[-1] += v - prev[0].get(k, 0)
            prev = now
            purity, rprec, labels = score_persona(mem, ns, topic_of, embed, data.queries.get(persona, {}), topics)
            third.purity.append(purity)
            third.labels += labels
            for k, sims in rprec.items():
                third.rprec.setdefault(k, []).extend(sims)
            if log is not None:
                log(f"{persona}: purity {purity:.2f}, R-prec my {np.mean(rprec['membrain_my']):.2f} "
                    f"(flat {np.mean(rprec['flat_my']):.2f}), {done}/{total} facts")
        final = mem.stats().as_dict()
    return thirds, final, per_insert


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", help=f"topic file (JSON lines); default: the bundled {BUNDLED}")
    parser.add_argument("--teacher", choices=("topics", "default"), default="topics",
                        help="the TopicTeacher (reads the labels) or the offline default teacher")
    parser.add_argument("--personas", type=int, default=None, help="only the first N personas")
    parser.add_argument("--last", type=int, default=200, help="also report questions per insert over the last N")
    parser.add_argument("--json", help="write the per-third report and the headline keys here")
    parser.add_argument("--topic-match", choices=("auto", "on", "off"), default="auto",
                        help="search through the tree's aspect labels (RetrievalConfig.tree_topic_weight): as the "
                             "memory decides (on when its teacher names topics), at weight 1.0, or off")
    parser.add_argument("--background", action=argparse.BooleanOptionalAction, default=True,
                        help="train behind add() (the default), or inside it (--no-background: deterministic)")


def headline(thirds: Sequence[Third]) -> dict[str, Any]:
    """The keys ``--json`` always writes: the last third's economy, the whole run's quality."""
    every = Third()
    for t in thirds:
        every.purity += t.purity
        every.labels += t.labels
        every.shadow = [every.shadow[0] + t.shadow[0], every.shadow[1] + t.shadow[1]]
        every.prompts += t.prompts
        for k, v in t.rprec.items():
            every.rprec.setdefault(k, []).extend(v)
    s = every.summary()
    return {"questions_per_insert_last_third": thirds[-1].summary()["questions_per_insert"],
            "shadow_agreement": s["shadow_agreement"], "purity": s["purity"], "label_agreement": s["label_agreement"],
            "rprec_membrain": s.get("rprec_membrain_my"), "rprec_flat": s.get("rprec_flat_my"),
            "rprec_membrain_questions": s.get("rprec_membrain_questions"),
            "rprec_flat_questions": s.get("rprec_flat_questions"),
            "max_prompt_tokens": s["max_prompt_tokens"], "mean_prompt_tokens": s["mean_prompt_tokens"]}


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from ..index.config import TOPIC_WEIGHT, RetrievalConfig
    from ..index.embeddings import MiniLMEmbeddings, embed_texts
    from ..insert.config import DEFAULT_BATCH
    from ..memory import MembrainMemory
    from . import machine_description
    from .economy_stream import PrecomputedEmbeddings
    from .topic_teacher import TopicTeacher

    data = load_topics(args.data)
    if args.personas is not None:
        keep = list(data.facts)[: args.personas]
        data = TopicData({p: data.facts[p] for p in keep}, {p: data.queries.get(p, {}) for p in keep})
    embedder = MiniLMEmbeddings()
    texts = list(dict.fromkeys([r["text"] for rows in data.facts.values() for r in rows]
                               + [q for qs in data.queries.values() for q in qs.values()]))
    served = PrecomputedEmbeddings(embedder, dict(zip(texts, embed_texts(embedder, texts))))
    paths = data.paths

    def teacher() -> Any:
        return TopicTeacher(paths) if args.teacher == "topics" else None

    def make_memory() -> Any:
        from ..teachers.heuristic import HeuristicTeacher

        weight = {"auto": None, "on": TOPIC_WEIGHT, "off": 0.0}[args.topic_match]
        return MembrainMemory(embeddings=served, teacher=teacher(), shadow_teacher=teacher() or HeuristicTeacher(),
                              background=args.background, retrieval=RetrievalConfig(tree_topic_weight=weight))

    console = Console(width=max(Console().width, 120))
    t0 = time.perf_counter()
    batch = DEFAULT_BATCH if args.teacher == "topics" else 1  # the offline rule answers no batches
    thirds, final, per_insert = run_topics(data, make_memory, served.embed_array, batch=batch,
                                           log=lambda s: console.print(f"[dim]{s}[/]"))
    seconds = time.perf_counter() - t0
    rows = [t.summary() for t in thirds]
    table = Table(title=f"{len(data.facts)} personas through one memory, teacher: {args.teacher}")
    cols = ["third", "inserts", "q/insert", "by kind", "prompt tok max/mean", "student share", "shadow agr",
            "purity", "labels", "R-prec my: membrain / flat", "R-prec question: membrain / flat"]
    for c in cols:
        table.add_column(c, justify="right")

    def f(v: Any) -> str:
        return "-" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)

    for i, r in enumerate(rows, start=1):
        kinds = " ".join(f"{k} {v:.2f}" for k, v in r["by_kind"].items())
        table.add_row(str(i), str(r["inserts"]), f(r["questions_per_insert"]), kinds,
                      f"{r['max_prompt_tokens']} / {f(r['mean_prompt_tokens'])}", f(r["student_share"]),
                      f(r["shadow_agreement"]), f(r["purity"]), f(r["label_agreement"]),
                      f"{f(r.get('rprec_membrain_my'))} / {f(r.get('rprec_flat_my'))}",
                      f"{f(r.get('rprec_membrain_questions'))} / {f(r.get('rprec_flat_questions'))}")
    console.print(table)
    head = headline(thirds)
    last = per_insert[-args.last:]
    head[f"questions_per_insert_last_{args.last}"] = round(sum(last) / max(len(last), 1), 3)
    console.print("whole run: " + ", ".join(f"{k} {f(v)}" for k, v in head.items()))
    console.print(f"[dim]{seconds:.0f} s; {machine_description()}[/]")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({**head, "thirds": rows, "teacher": args.teacher, "seconds": round(seconds, 1),
                       "machine": machine_description(),
                       "final_stats": json.loads(json.dumps(final, default=str))}, fh, indent=1)
    return 0
