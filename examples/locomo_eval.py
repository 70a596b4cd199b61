"""Evaluate a MembrainMemory on LoCoMo-style conversations, with the public API only.

Each conversation goes turn by turn into its own namespace (speaker, session and date as
metadata, which the chat scorers of ``RetrievalConfig.for_chat()`` read); each question is
searched in its conversation's namespace and scored by whether its evidence turns are in the
top k.

    python examples/locomo_eval.py --data ../shared/data/locomo_dev.json --conversations 1

The LoCoMo data (CC BY-NC 4.0) is not shipped with membrain. For every baseline in the
same run, use ``membrain bench locomo`` instead.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict

from langchain_membrain import MembrainMemory, RetrievalConfig

CATEGORIES = {1: "multi_hop", 2: "temporal", 3: "open_domain", 4: "single_hop"}


def turns_of(sample: dict) -> list[dict]:
    """The turns of one conversation, in order, with their session and date."""
    conv, out = sample["conversation"], []
    sessions = sorted(int(k.split("_")[1]) for k in conv if re.fullmatch(r"session_\d+", k))
    for n in sessions:
        for turn in conv[f"session_{n}"]:
            text = f"{turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                text += f" [shares image: {turn['blip_caption']}]"
            out.append({"key": turn["dia_id"], "text": text, "speaker": turn["speaker"],
                        "session": n, "date": conv.get(f"session_{n}_date_time", "")})
    return out


def evidence_of(question: dict, known: set[str]) -> set[str]:
    """LoCoMo's evidence ids, normalised (``D8:6; D9:17``, ``D:11:26``, ``D30:05``)."""
    ids = set()
    for raw in question.get("evidence", []):
        for m in re.finditer(r"D:?(\d+):0*(\d+)", str(raw)):
            ids.add(f"D{int(m.group(1))}:{int(m.group(2))}")
    return ids & known


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="a LoCoMo JSON file (a list of samples)")
    parser.add_argument("--conversations", type=int, default=1)
    parser.add_argument("--questions", type=int, default=None, help="at most this many per conversation")
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args()

    samples = json.load(open(args.data))[: args.conversations]
    hits: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
    with MembrainMemory(retrieval=RetrievalConfig.for_chat()) as memory:
        for sample in samples:
            ns = ("locomo", sample["sample_id"])
            turns = turns_of(sample)
            memory.add_many([t["text"] for t in turns], namespace=ns, keys=[t["key"] for t in turns],
                            metadatas=[{k: t[k] for k in ("speaker", "session", "date")} for t in turns])
            questions = [q for q in sample["qa"] if q.get("category") in CATEGORIES]
            for q in questions[: args.questions]:
                evidence = evidence_of(q, {t["key"] for t in turns})
                if not evidence:
                    continue
                found = {r.key for r in memory.search(q["question"], namespace=ns, limit=args.k)}
                for group in ("overall", CATEGORIES[q["category"]]):
                    hits[group].append((evidence <= found, bool(evidence & found)))
        stats = memory.stats()
    print(f"{'category':<12} {'n':>4} {f'all@{args.k}':>8} {f'any@{args.k}':>8}")
    for group, rows in sorted(hits.items(), key=lambda kv: kv[0] != "overall"):
        n = len(rows)
        print(f"{group:<12} {n:>4} {sum(a for a, _ in rows) / n:>8.3f} {sum(b for _, b in rows) / n:>8.3f}")
    print(f"tree: {stats['facts']} facts, {stats['aspects']} aspects, depth {stats['max_depth']}; "
          f"teacher calls per insert {stats.get('teacher_calls_per_insert', 0):.2f}")


if __name__ == "__main__":
    main()
