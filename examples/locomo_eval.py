"""Evaluate a MembrainMemory on LoCoMo-style conversations, with the public API only.

Each conversation goes turn by turn into its own namespace (speaker, session and date as
metadata, which the chat scorers of ``RetrievalConfig.for_chat()`` read); each question is
searched in its conversation's namespace and scored by whether its evidence turns are in the
top k.

    python examples/locomo_eval.py --data ../shared/data/locomo_dev.json --conversations 1

The LoCoMo data is not shipped with membrain: it is the LoCoMo dataset (Maharana et al.,
ACL 2024), licensed CC BY-NC 4.0, which you fetch yourself at evaluation time under its
licence (for example ``data/locomo10.json`` of the snap-research/locomo GitHub repository)
and name with ``--data``. For every baseline in the same run, use ``membrain bench locomo``
instead.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

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


WHERE_LOCOMO_COMES_FROM = (
    "LoCoMo is not shipped with membrain. It is the LoCoMo dataset (Maharana et al., ACL 2024), "
    "licensed CC BY-NC 4.0: fetch it yourself, for evaluation, under its licence, e.g. data/locomo10.json "
    "of the snap-research/locomo GitHub repository, and pass its path: "
    "python examples/locomo_eval.py --data PATH/TO/locomo10.json")


def load_samples(path: str) -> list[dict]:
    """The LoCoMo samples in the JSON file ``path`` (a list); exits with a message saying
    where LoCoMo comes from and how to pass it (status 1, no traceback) when it cannot."""
    file = Path(path)
    if not file.is_file():
        sys.exit(f"locomo_eval: no LoCoMo file at {path!r}.\n{WHERE_LOCOMO_COMES_FROM}")
    try:
        samples = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        sys.exit(f"locomo_eval: cannot read {path!r} as LoCoMo JSON ({exc}).\n{WHERE_LOCOMO_COMES_FROM}")
    if not isinstance(samples, list):
        sys.exit(f"locomo_eval: {path!r} is not LoCoMo (a JSON list of samples).\n{WHERE_LOCOMO_COMES_FROM}")
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog=WHERE_LOCOMO_COMES_FROM)
    parser.add_argument("--data", required=True,
                        help="a LoCoMo JSON file (a list of samples), e.g. data/locomo10.json of the "
                             "snap-research/locomo repository (CC BY-NC 4.0; not shipped: fetch it yourself)")
    parser.add_argument("--conversations", type=int, default=1)
    parser.add_argument("--questions", type=int, default=None, help="at most this many per conversation")
    parser.add_argument("--k", type=int, default=10)
    args = parser.parse_args()

    samples = load_samples(args.data)[: args.conversations]
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
