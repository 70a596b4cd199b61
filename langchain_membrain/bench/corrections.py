"""Corrections as people write them in chat, through ``MembrainMemory`` as a user calls it.

``python -m langchain_membrain.bench corrections`` reads ``data/corrections_tune.jsonl`` (the
tuning part) and ``data/corrections_heldout.jsonl`` (held out: written before any rule, whole
kinds of fact and phrasing styles of its own; data/CORRECTIONS.md). Each case gets a
namespace of its own holding ``size`` unrelated facts (10 of its file's fillers, or 200
facts of the topic personas, ``topics.jsonl`` / ``topics_heldout.jsonl``), the case's old
statement among them, then its new statement, all through ``add``. Its question is then
asked through ``search(limit=5)``, as the agent tool asks it, and one question that nothing
in the namespace answers (:data:`UNANSWERABLE`, alternately).

Measures, per set and per kind, style and type of case:

- ``current first``: corrections and retractions whose first hit holds the new statement;
- ``stale first``: those whose first hit is the old statement, still current;
- ``kept``: those whose new statement scores at least ``DEFAULT_MIN_SCORE`` (what the agent
  tool returns);
- ``old first``: related and unstored cases (the new statement corrects nothing) whose first
  hit is still the old statement;
- ``updated``: corrections and retractions stored as an UPDATE of the old fact; ``false
  updates``: related and unstored cases stored as an UPDATE;
- ``rising``: result lists in which a hit scores above one ranked before it;
- ``unanswerable empty``: unanswerable questions with no hit at the threshold.

``--cost`` also times search in 500 facts holding 50 corrections stored beside what they
correct against 500 facts holding none (:func:`search_cost`).

Configurations, in the same run: ``default`` (``MembrainMemory()``) and ``no operations``
(``operations=False``: every statement a new memory, so search alone must put the new one
first).
"""

from __future__ import annotations

import argparse
import json
import random
from importlib import resources
from typing import Any

import numpy as np

TUNE, HELDOUT = "corrections_tune.jsonl", "corrections_heldout.jsonl"
TOPICS = {TUNE: "topics.jsonl", HELDOUT: "topics_heldout.jsonl"}
CORRECTING = ("correction", "retraction")
CONFIGS = ("default", "no operations")
#: The thresholds at which ``kept`` and ``unanswerable empty`` are also reported.
SWEEP = (0.2, 0.3, 0.4, 0.5)
#: Questions that no case or filler answers (the first half for the tuning set, the second
#: for the held-out one).
UNANSWERABLE = (
    "What is my blood type?", "What size shoes do I wear?", "What was the name of my first teacher?",
    "Which airline do I fly with most?", "What's my favourite board game?", "How tall am I?",
    "What's my star sign?", "Which dentist did I see as a child?", "What colour is my front door?",
    "What was my grandfather's job?", "Which chess opening do I prefer?", "What's my locker number?",
    "What is my passport number?", "Which hand do I write with?", "What was my first car's colour?",
    "What's my favourite font?", "How many cousins do I have?", "Which opera did I see last?",
    "What's my Wi-Fi password?", "Which tarot card did I draw?", "What's my eye colour?",
    "Which marathon did my uncle run?", "What's my seat on the commuter train?", "What did I name my first goldfish?",
)


def load(name: str) -> tuple[list[dict[str, Any]], list[str]]:
    """(cases, fillers) of one data file, in file order."""
    text = resources.files("langchain_membrain.data").joinpath(name).read_text(encoding="utf-8")
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [r for r in rows if "id" in r], [r["filler"] for r in rows if "filler" in r]


def _topic_facts(name: str) -> list[str]:
    text = resources.files("langchain_membrain.data").joinpath(TOPICS[name]).read_text(encoding="utf-8")
    return [json.loads(line)["text"] for line in text.splitlines() if line.strip()]


def streams(name: str) -> list[tuple[dict[str, Any], list[str], str]]:
    """(case, the statements added in order, an unanswerable question) of each case of one file:
    its fillers with the old statement at a random place among them, then the new statement."""
    cases, fillers = load(name)
    topics = _topic_facts(name)
    half = len(UNANSWERABLE) // 2
    asked = UNANSWERABLE[:half] if name == TUNE else UNANSWERABLE[half:]
    out = []
    for i, case in enumerate(cases):
        rng = random.Random(case["id"])
        pool = fillers if case["size"] <= len(fillers) else topics
        around = rng.sample(pool, case["size"])
        at = rng.randrange(len(around) + 1)
        out.append((case, around[:at] + [case["old"]] + around[at:] + [case["new"]], asked[i % len(asked)]))
    return out


def run_case(memory: Any, ns: tuple[str, ...], case: dict[str, Any], texts: list[str], unanswerable: str,
             threshold: float) -> dict[str, Any]:
    """Add one case's statements to ``ns`` and ask its questions; what the measures read."""
    memory.add_many(texts[:-1], namespace=ns)
    old_key = next((h.key for h in memory.search(case["old"], namespace=ns, limit=1)), None)
    memory.add(texts[-1], namespace=ns)
    decision = memory.last_operation
    hits = memory.search(case["question"], namespace=ns, limit=5)
    asked = memory.search(unanswerable, namespace=ns, limit=5)
    scores = [h.score for h in hits if h.score is not None]
    new_score = max((h.score for h in hits if h.text == case["new"] and h.score is not None), default=0.0)
    top_unanswerable = max((h.score for h in asked if h.score is not None), default=0.0)
    first = hits[0].text if hits else None
    return {"id": case["id"], "kind": case["kind"], "style": case["style"], "type": case["type"],
            "current_first": first == case["new"], "stale_first": first == case["old"],
            "kept": new_score >= threshold, "new_score": new_score,
            "old_first": first == case["old"],
            "updated": decision is not None and decision.operation.kind == "UPDATE"
            and decision.operation.target == old_key,
            "rising": any(b > a + 1e-12 for a, b in zip(scores, scores[1:])),
            "unanswerable_empty": top_unanswerable < threshold, "top_unanswerable": top_unanswerable,
            "hits": [(h.text, None if h.score is None else round(h.score, 3)) for h in hits]}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The measures (module docstring) over ``rows``, with their counts."""
    fix = [r for r in rows if r["type"] in CORRECTING]
    keep = [r for r in rows if r["type"] not in CORRECTING]

    def share(part: list[dict[str, Any]], key: str) -> float | None:
        return round(sum(r[key] for r in part) / len(part), 3) if part else None

    def at(part: list[dict[str, Any]], key: str, below: bool) -> dict[str, float]:
        return {f"{t:.1f}": round(sum((r[key] < t) == below for r in part) / len(part), 3)
                for t in SWEEP} if part else {}

    return {"corrections": len(fix), "related": len(keep), "current_first": share(fix, "current_first"),
            "kept_at": at(fix, "new_score", False), "unanswerable_empty_at": at(rows, "top_unanswerable", True),
            "stale_first": share(fix, "stale_first"), "kept": share(fix, "kept"), "old_first": share(keep, "old_first"),
            "updated": share(fix, "updated"), "false_updates": share(keep, "updated"),
            "rising": share(rows, "rising"), "unanswerable_empty": share(rows, "unanswerable_empty")}


def run_config(config: str, sets: dict[str, list], embeddings: Any, threshold: float) -> dict[str, Any]:
    """Every case of every set through one fresh memory of ``config``."""
    from ..memory import MembrainMemory

    rows: dict[str, list[dict[str, Any]]] = {}
    with MembrainMemory(embeddings=embeddings, background=False, operations=config != "no operations") as memory:
        for name, cases in sets.items():
            rows[name] = [run_case(memory, ("corrections", name, case["id"]), case, texts, unanswerable, threshold)
                          for case, texts, unanswerable in cases]
    out: dict[str, Any] = {"config": config, "sets": {name: summarize(r) for name, r in rows.items()}}
    for field in ("kind", "style", "type"):
        out[f"by_{field}"] = {name: {value: summarize([r for r in part if r[field] == value])
                                     for value in sorted({r[field] for r in part})} for name, part in rows.items()}
    out["failures"] = {name: [r for r in part if (r["type"] in CORRECTING and not (r["current_first"] and r["kept"]))
                              or (r["type"] not in CORRECTING and not r["old_first"]) or r["rising"]]
                       for name, part in rows.items()}
    return out


def search_cost(embeddings: Any, repeats: int = 3) -> dict[str, Any]:
    """Search p50/p95 (ms) in a namespace of 500 facts holding 50 corrections stored beside
    what they correct (``operations=False``: an older database, or an LLM that answered ADD),
    so that search places them, against 500 facts without them; the same questions, in the
    same process, alternated."""
    import time

    from ..memory import MembrainMemory

    cases = [c for c in load(TUNE)[0] if c["type"] in CORRECTING][:50]
    facts = _topic_facts(TUNE)
    rng = random.Random(0)
    plain = rng.sample(facts, 500)
    paired = rng.sample(facts, 400) + [t for c in cases for t in (c["old"], c["new"])]
    questions = [c["question"] for c in cases]
    with MembrainMemory(embeddings=embeddings, background=False, operations=False) as memory:
        memory.add_many(plain, namespace=("cost", "plain"))
        memory.add_many(paired, namespace=("cost", "paired"))
        times: dict[str, list[float]] = {"plain": [], "paired": []}
        for _ in range(repeats):
            for q in questions:
                for name in times:
                    t0 = time.perf_counter()
                    memory.search(q, namespace=("cost", name), limit=5)
                    times[name].append(1000 * (time.perf_counter() - t0))
    out: dict[str, Any] = {name: {"p50": round(float(np.percentile(v, 50)), 2),
                                  "p95": round(float(np.percentile(v, 95)), 2)} for name, v in times.items()}
    out["ratio_p50"] = round(out["paired"]["p50"] / out["plain"]["p50"], 2)
    return out


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--configs", nargs="*", default=list(CONFIGS), choices=CONFIGS)
    parser.add_argument("--sets", nargs="*", default=["tune", "heldout"], choices=["tune", "heldout"])
    parser.add_argument("--cost", action="store_true",
                        help="also time search with 50 stored corrections among 500 facts against none")
    parser.add_argument("--json", help="write the results (every failure included) as JSON to this path")


def run(args: argparse.Namespace) -> int:
    from ..index.embeddings import MiniLMEmbeddings
    from ..retrieval.scores import DEFAULT_MIN_SCORE
    from . import machine_description
    from .economy_stream import PrecomputedEmbeddings

    sets = {name: streams(file) for name, file in (("tune", TUNE), ("heldout", HELDOUT)) if name in args.sets}
    texts = sorted({t for cases in sets.values() for case, added, q in cases for t in (*added, case["question"], q)})
    base = MiniLMEmbeddings()
    known = dict(zip(texts, np.asarray(base.embed_documents(texts), np.float32)))
    results = [run_config(c, sets, PrecomputedEmbeddings(base, known), DEFAULT_MIN_SCORE) for c in args.configs]
    print(f"bench corrections: {', '.join(f'{n} {len(c)} cases' for n, c in sets.items())}; "
          f"threshold {DEFAULT_MIN_SCORE}; {machine_description()}")
    cols = ("current_first", "stale_first", "kept", "old_first", "updated", "false_updates", "rising",
            "unanswerable_empty")
    print("| config | set | corrections / related | " + " | ".join(c.replace("_", " ") for c in cols) + " |")
    for r in results:
        for name, m in r["sets"].items():
            print(f"| {r['config']} | {name} | {m['corrections']} / {m['related']} | "
                  + " | ".join("-" if m[c] is None else f"{m[c]:.2f}" for c in cols) + " |")
    print("\nby threshold: kept / unanswerable empty")
    for r in results:
        for name, m in r["sets"].items():
            print(f"  {r['config']}, {name}: " + ", ".join(
                f"{t} {m['kept_at'][t]:.2f} / {m['unanswerable_empty_at'][t]:.2f}" for t in m["kept_at"]))
    for r in results[:1]:
        for field in ("type", "style", "kind"):
            for name, groups in r[f"by_{field}"].items():
                print(f"\n{r['config']}, {name}, by {field}: value (corrections / related): current first, kept, "
                      "old first")
                for value, m in groups.items():
                    print(f"  {value} ({m['corrections']} / {m['related']}): " + ", ".join(
                        "-" if m[c] is None else f"{m[c]:.2f}" for c in ("current_first", "kept", "old_first")))
    cost = None
    if args.cost:
        cost = search_cost(PrecomputedEmbeddings(base, known))
        print("\nsearch (ms, query embeddings precomputed) | p50 | p95")
        for name in ("plain", "paired"):
            print(f"  500 facts, {'50 stored corrections' if name == 'paired' else 'none'} | "
                  f"{cost[name]['p50']} | {cost[name]['p95']}")
        print(f"  ratio p50: {cost['ratio_p50']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"machine": machine_description(), "results": results, "cost": cost}, fh, indent=2)
    return 0
