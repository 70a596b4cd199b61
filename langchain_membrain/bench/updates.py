"""Memories that change: ADD, UPDATE, DELETE and IGNORE on persona streams.

``python -m langchain_membrain.bench updates`` streams the persona chains of
``data/updates.jsonl`` (the set the rules were tuned on) then ``data/updates_heldout.jsonl``
(written apart) through ``MembrainMemory.add``, one namespace per persona, and asks each
persona's questions about the current state and about the past. Both files were written for
this project (data/UPDATES.md). Configurations, measured in the same run:

- ``no operations``: every item stored as a new memory (``operations=False``: the behaviour
  before memory operations);
- ``offline teacher``: the heuristic teacher's conservative rule decides every operation;
- ``offline + student``: the default memory (the student learns the rule and decides alone
  once its gate opens);
- ``ground truth``: :class:`GroundTruthTeacher` (the data set's answers, as an LLM that
  never errs would give them) decides every operation;
- ``student (ground truth)``: the student learns from the ground-truth teacher and decides
  alone once its gate opens.

Metrics (per configuration):

- ``current@1``: share of current-state questions whose first hit is the current version
  and whose top 5 holds no superseded or deleted version (all, then the tuning and the
  held-out personas apart);
- ``current first``: share of those questions whose first hit is the current version, and
  ``superseded not first``: share whose first hit is no superseded or deleted version (the
  goals of issue 47), by set;
- ``history@5``: share of questions about the past whose old version is in the top 5 of
  ``search(..., include_history=True)``;
- ``kept``: share of superseded versions that are reachable (through ``history`` or a
  search with history; for ``no operations``, still stored);
- ``IGNORE P/R``: precision and recall of IGNORE against the data set's labels;
- ``UPDATE P``: share of UPDATEs that name the right old fact;
- ``old shown``: share of the items labelled UPDATE or DELETE whose right old fact was among
  the candidates shown with the question (the ``k`` nearest current facts): no teacher can
  name an old fact it is not shown, so this bounds UPDATE and DELETE recall;
- ``student``: share of operations the student decided alone (second half of the stream,
  and on the held-out personas), with its precision on UPDATE and IGNORE there.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from importlib import resources
from typing import Any, cast

import numpy as np

from ..teachers.heuristic import HeuristicTeacher
from ..tree.operation_types import ADD, IGNORE, Operation, OperationQuestion

TUNE = "updates.jsonl"
HELDOUT = "updates_heldout.jsonl"


def load(name: str) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """persona -> {"events": [...], "questions": [...]} of one data file, in file order."""
    out: dict[str, dict[str, list]] = {}
    text = resources.files("langchain_membrain.data").joinpath(name).read_text(encoding="utf-8")
    for line in text.splitlines():
        if line.strip():
            row = json.loads(line)
            part = out.setdefault(row["persona"], {"events": [], "questions": []})
            part["questions" if "question" in row else "events"].append(row)
    return out


def gt_value(event: dict[str, Any]) -> dict[str, Any]:
    """The metadata an item is added with: its ground truth, read by GroundTruthTeacher."""
    out = {"gt_id": event["id"], "gt_op": event["op"]}
    if "target" in event:
        out["gt_target"] = event["target"]
    if "keep" in event:
        out["gt_keep"] = bool(event["keep"])
    return out


class GroundTruthTeacher(HeuristicTeacher):
    """Evaluation only: answers the operation question from the data set's labels (the
    ``gt_*`` fields of the item's value), like :class:`~.oracle.OracleTeacher` answers
    placements; placement questions get the heuristic teacher's answers. The old fact is
    named only if it is among the question's candidates (as an LLM would see it); if not,
    the answer is ADD."""

    name = "ground truth"

    def choose_operation(self, question: OperationQuestion) -> Operation:
        value = question.value
        op = value.get("gt_op")
        if op == "IGNORE":
            return IGNORE
        if op not in ("UPDATE", "DELETE"):
            return ADD
        for c in question.candidates:
            if c.value.get("gt_id") == value.get("gt_target"):
                return Operation(op, c.key, keep=bool(value.get("gt_keep")))
        return ADD


CONFIGS = ("no operations", "offline teacher", "offline + student", "ground truth", "student (ground truth)")


def run_config(config: str, sets: list[tuple[str, dict]], embeddings: Any) -> dict[str, Any]:
    from ..memory import MembrainMemory

    truth = config in ("ground truth", "student (ground truth)")
    operations: bool | str = False if config == "no operations" else (
        True if "student" in config else "teacher")
    mem = MembrainMemory(teacher=GroundTruthTeacher() if truth else None, embeddings=embeddings,
                         background=False, relabel=False, operations=operations)
    decisions: list[dict[str, Any]] = []  # one per item: set, gt op, decided op, by whom
    current = past = current_hits = past_hits = 0
    # set -> [current@1 hits, questions, current first, no superseded first]
    by_set: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    superseded = kept = 0
    with mem:
        for set_name, personas in sets:
            for persona, part in personas.items():
                ns = ("updates", set_name, persona)
                key_of: dict[str, str] = {}
                for ev in part["events"]:
                    before = mem.last_operation
                    # the right old fact's key before the add (an UPDATE reuses it)
                    old_key = key_of.get(ev.get("target", ""))
                    key = mem.add(ev["text"], namespace=ns, metadata=gt_value(ev))
                    key_of[ev["id"]] = key
                    last = mem.last_operation
                    if last is before:  # no operation ran for this add (e.g. an exact duplicate)
                        last = None
                    shown = last.candidates if last is not None else ()
                    op, by = (last.operation, last.by) if last is not None else (ADD, "none")
                    right_target = None
                    if op.kind in ("UPDATE", "DELETE") and ev["op"] == op.kind:
                        hist = mem.history(cast(str, op.target), namespace=ns)  # validated: has a target
                        right_target = any(r.value.get("gt_id") == ev.get("target") for r in hist)
                    decisions.append({"set": set_name, "gt": ev["op"], "op": op.kind, "by": by,
                                      "right_target": right_target,
                                      "old_shown": (old_key in shown) if ev["op"] in ("UPDATE", "DELETE")
                                      and last is not None else None})
                gone = {ev["target"] for ev in part["events"] if ev["op"] in ("UPDATE", "DELETE")}
                everything = mem.search(None, namespace=ns, include_history=True, limit=100000)
                found = {r.value.get("gt_id") for r in everything}
                superseded += len(gone)
                kept += len(gone & found)
                for q in part["questions"]:
                    if q["kind"] == "current":
                        hits = mem.search(q["question"], namespace=ns, limit=5)
                        ids = [h.value.get("gt_id") for h in hits]
                        hit = bool(ids) and ids[0] == q["answer"] and not (set(ids) & gone)
                        current += 1
                        current_hits += hit
                        tally = by_set["heldout" if set_name == "heldout" else "tune"]
                        tally[0] += hit
                        tally[1] += 1
                        tally[2] += bool(ids) and ids[0] == q["answer"]
                        tally[3] += not (ids and ids[0] in gone)
                    else:
                        hits = mem.search(q["question"], namespace=ns, limit=5, include_history=True)
                        past += 1
                        past_hits += q["answer"] in {h.value.get("gt_id") for h in hits}
        stats = mem.stats()["operations"]
    return {"config": config, "current_at_1": current_hits / max(current, 1),
            "current_at_1_by_set": {s: t[0] / t[1] for s, t in by_set.items()},
            "current_first_by_set": {s: t[2] / t[1] for s, t in by_set.items()},
            "superseded_not_first_by_set": {s: t[3] / t[1] for s, t in by_set.items()},
            "history_at_5": past_hits / max(past, 1), "kept": kept / max(superseded, 1),
            **decision_metrics(decisions), "operations": stats}


def _precision(decisions: list[dict], kind: str, *, by: str | None = None) -> tuple[float | None, int]:
    chosen = [d for d in decisions if d["op"] == kind and (by is None or d["by"] == by)]
    if not chosen:
        return None, 0
    if kind in ("UPDATE", "DELETE"):
        right = sum(d["gt"] == kind and bool(d["right_target"]) for d in chosen)
    else:
        right = sum(d["gt"] == kind for d in chosen)
    return right / len(chosen), len(chosen)


def decision_metrics(decisions: list[dict[str, Any]]) -> dict[str, Any]:
    """IGNORE precision/recall, UPDATE precision, and the student's share and precision."""
    ign_p, n_ign = _precision(decisions, "IGNORE")
    gt_ign = sum(d["gt"] == "IGNORE" for d in decisions)
    ign_r = sum(d["gt"] == "IGNORE" and d["op"] == "IGNORE" for d in decisions) / max(gt_ign, 1)
    upd_p, n_upd = _precision(decisions, "UPDATE")
    shown = [d["old_shown"] for d in decisions if d.get("old_shown") is not None]
    half = decisions[len(decisions) // 2:]
    held = [d for d in decisions if d["set"] == "heldout"]
    quarters = [decisions[i * len(decisions) // 4:(i + 1) * len(decisions) // 4] for i in range(4)]
    out = {"ignore_precision": ign_p, "ignore_recall": ign_r, "ignored": n_ign,
           "update_precision": upd_p, "updates": n_upd,
           "old_shown": sum(shown) / len(shown) if shown else None, "old_shown_n": len(shown),
           "student_share_by_quarter": [sum(d["by"] == "student" for d in q) / max(len(q), 1) for q in quarters],
           "student_share_second_half": sum(d["by"] == "student" for d in half) / max(len(half), 1),
           "student_share_heldout": sum(d["by"] == "student" for d in held) / max(len(held), 1)}
    for kind in ("UPDATE", "IGNORE"):
        p, n = _precision(held, kind, by="student")
        out[f"student_{kind.lower()}_precision_heldout"] = p
        out[f"student_{kind.lower()}s_heldout"] = n
    counts: dict[str, int] = defaultdict(int)
    for d in decisions:
        counts[f"{d['gt']}->{d['op']}"] += 1
    out["confusion"] = dict(sorted(counts.items()))
    return out


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--configs", nargs="*", default=list(CONFIGS), choices=CONFIGS)
    parser.add_argument("--passes", type=int, default=1,
                        help="times the tuning personas are streamed (each pass in fresh namespaces) "
                             "before the held-out ones")
    parser.add_argument("--json", help="write the results as JSON to this path")


def _fmt(x: Any) -> str:
    return "-" if x is None else f"{x:.2f}"


def run(args: argparse.Namespace) -> int:
    from ..index.embeddings import MiniLMEmbeddings
    from . import machine_description
    from .economy_stream import PrecomputedEmbeddings

    tune, held = load(TUNE), load(HELDOUT)
    sets = [(f"tune{i}" if args.passes > 1 else "tune", tune) for i in range(args.passes)] + [("heldout", held)]
    texts = sorted({r["text"] for d in (tune, held) for p in d.values() for r in p["events"]}
                   | {r["question"] for d in (tune, held) for p in d.values() for r in p["questions"]})
    base = MiniLMEmbeddings()
    known = dict(zip(texts, np.asarray(base.embed_documents(texts), np.float32)))
    results = [run_config(c, sets, PrecomputedEmbeddings(base, known)) for c in args.configs]
    n_items = sum(len(p["events"]) for _, d in sets for p in d.values())
    print(f"bench updates: {len(tune)} tuning personas x {args.passes} pass(es) + {len(held)} held-out, "
          f"{n_items} items; {machine_description()}")
    head = ("config", "current@1 (tune / held-out)", "history@5", "kept", "IGNORE P", "IGNORE R", "UPDATE P (n)", "old shown (n)",
            "student 2nd half", "student held-out", "student P upd/ign held-out",
            "current first (tune / held-out)", "superseded not first (tune / held-out)")
    print(" | ".join(head))
    for r in results:
        print(" | ".join([
            r["config"], f"{_fmt(r['current_at_1'])} ({_fmt(r['current_at_1_by_set'].get('tune'))} / "
                         f"{_fmt(r['current_at_1_by_set'].get('heldout'))})",
            _fmt(r["history_at_5"]), _fmt(r["kept"]),
            _fmt(r["ignore_precision"]), _fmt(r["ignore_recall"]),
            f"{_fmt(r['update_precision'])} ({r['updates']})", f"{_fmt(r['old_shown'])} ({r['old_shown_n']})",
            _fmt(r["student_share_second_half"]), _fmt(r["student_share_heldout"]),
            f"{_fmt(r['student_update_precision_heldout'])} ({r['student_updates_heldout']}) / "
            f"{_fmt(r['student_ignore_precision_heldout'])} ({r['student_ignores_heldout']})",
            *(f"{_fmt(r[col].get('tune'))} / {_fmt(r[col].get('heldout'))}"
              for col in ("current_first_by_set", "superseded_not_first_by_set"))]))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"machine": machine_description(), "passes": args.passes, "results": results}, fh, indent=2)
    return 0
