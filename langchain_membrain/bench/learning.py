"""Online imitation learning curve of the stage-1/stage-2 networks.

Ingests the facts of a JSON-lines file in order (``text``, optional ``path`` for purity)
with a :class:`~langchain_membrain.insert.learner.Learner`: teacher forcing for the first half
(``execute="teacher", query="always"``), then ``execute="auto", query="uncertain"``.
Every decision is also put to an evaluation copy of the teacher (the *shadow*: never
counted as a teacher call, never trained on), so agreement is measured on all decisions,
not only on the ones the policy chose to ask about.

    python -m langchain_membrain.bench learning --data FILE.jsonl --json OUT.json \\
        [--teacher heuristic|oracle] [--out-dir DIR]

Reported ("last200": over the last 200 decisions or inserts):

- ``stage1_agreement_last200``: the model's argmax equals the teacher's index;
  ``stage1_trivial_agreement_last200``: the same for the fixed rule "descend into the
  child aspect with the most similar mean embedding"; ``stage1_stop_recall_last200``: of
  the teacher's "attach here" (child aspects existed), the share the model also chose
  (``stage1_stop_precision_last200``: of the model's, the share the teacher chose);
  ``placement_agreement_last200``: inserts whose stage-1 parent is where the teacher,
  descending alone on the same tree, would have attached the fact.
- ``stage2_agreement_last200``: the decoded action series equals the teacher's (as sets;
  Group labels ignored); ``stage2_idle_baseline_last200``: the teacher's series is empty;
  ``stage2_nonidle_recall_last200`` / ``_precision_``: over individual non-Idle actions,
  of the network's proposals (where its gate sent the decision to the teacher too);
  ``stage2_executed_nonidle_recall_last200`` / ``_precision_``: the same of what was
  executed (the teacher's answer where it was asked): what the tree got;
  ``stage2_focal_action_auc_last200``: how well the network's probability that the new fact
  is not left Idle ranks the decisions where the teacher does move it (ROC AUC,
  ``evaluation.ranking_auc``; 0.5: it cannot tell them apart, whatever its gate does).
- ``teacher_calls_per_insert_last200`` (every teacher question; naming a new aspect is
  counted apart in ``naming_calls_per_insert_last200``), ``insert_p50_ms`` /
  ``insert_p95_ms`` (wall clock of the insert's steps: descent, attach, stage 2, apply; over the
  second-half inserts decided by the model alone, i.e. the model path; embedding excluded:
  all texts are embedded in one batch before the timed loop), the same in CPU time
  (``insert_p50_cpu_ms``: the machine may be shared) and over every second-half insert,
  teacher questions included (``insert_all_p50_ms``),
  ``train_step_ms`` (mean time of one optimiser step), ``train_ms_per_insert``,
  ``dendrogram_purity`` (class ``tuple(path[:2])``) of the learned tree, and
  ``teacher_only_purity`` (the same facts inserted by the teacher alone).
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from . import embed_cached, machine_description

WINDOW = 200


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", required=True, help="JSON lines with 'text' and optionally 'path'")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--teacher", choices=("heuristic", "oracle"), default="heuristic")
    parser.add_argument("--out-dir", default=None, help="where the CSV curve and PNG plot go "
                        "(default: next to --json, else the current directory)")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N facts")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: latency)")
    parser.add_argument("--cache", default=None, help="an .npy file caching the embeddings of --data")
    parser.add_argument("--confidence", type=float, default=0.9,
                        help="stage-1 gate: calibrated probability of agreeing with the teacher")
    parser.add_argument("--confidence2", type=float, default=0.9,
                        help="stage-2 gate: calibrated probability that the whole action series agrees")
    parser.add_argument("--audit-rate", type=float, default=0.02)
    parser.add_argument("--stage2-defer", type=int, default=1,
                        help="LearnerConfig.stage2_defer: ask about stage 2 at most once per this many unsure "
                             "decisions under one parent (default 1: every time)")
    parser.add_argument("--idle-margin", type=float, default=0.0,
                        help="decoder: nats by which a stage-2 action must beat Idle")




def _make_teacher(kind: str):
    if kind == "oracle":
        from .oracle import OracleTeacher

        return OracleTeacher()
    from ..teachers.heuristic import HeuristicTeacher

    return HeuristicTeacher()


def _rate(num: int, den: int) -> float | None:
    return num / den if den else None


def _acts_probability(type_logits: np.ndarray, mask: np.ndarray) -> float:
    """The network's probability that a fact is not left Idle (softmax over its possible types)."""
    z = np.where(mask, type_logits, -np.inf)
    p = np.exp(z - z.max())
    return float(1.0 - p[0] / p.sum())


def metrics_of(results: list, window: int = WINDOW) -> dict[str, float | None]:
    """The agreement metrics over the last ``window`` decisions/inserts of ``results``
    (InsertResults of a Learner that had a shadow teacher)."""
    from ..students.decoding import action_key, encode_actions
    from ..tree.actions import IDLE
    from ..tree.evaluation import ranking_auc

    s1 = [s for r in results for s in r.record.steps if s.shadow_choice is not None][-window:]
    stops = [s for s in s1 if s.shadow_choice == 0]
    placed = [r for r in results if r.record.shadow_parent is not None][-window:]
    s2 = [r.record.stage2 for r in results
          if r.record.stage2 is not None and r.record.stage2.shadow_actions is not None][-window:]
    agree2 = idle2 = hit = n_teacher = n_model = 0
    done_hit = n_done = 0  # the same against what was executed (the teacher's answer where it was asked)
    acts_score: list[float] = []  # the model's P(not Idle) for the new fact ...
    acts_label: list[bool] = []  # ... and whether the teacher acted on it
    by_type = {t: [0, 0, 0] for t in ("promote", "demote", "group")}  # hits, teacher, model
    for d in s2:
        mine = {action_key(a) for a in d.model_actions}
        theirs = {action_key(a) for a in d.shadow_actions}
        agree2 += mine == theirs
        idle2 += not theirs
        hit += len(mine & theirs)
        n_teacher += len(theirs)
        n_model += len(mine)
        done = {action_key(a) for a in d.executed}
        done_hit += len(done & theirs)
        n_done += len(done)
        for k in mine & theirs:
            by_type[k[0]][0] += 1
        for k in theirs:
            by_type[k[0]][1] += 1
        for k in mine:
            by_type[k[0]][2] += 1
        mask = d.feats.type_mask()
        if len(mask) and mask[0, 1:].any():
            acts_score.append(_acts_probability(d.type_logits[0], mask[0]))
            acts_label.append(bool(encode_actions(d.feats, d.shadow_actions).types[0] != IDLE))
    last = results[-window:]
    return {
        "stage1_agreement_last200": _rate(sum(s.model_choice == s.shadow_choice for s in s1), len(s1)),
        "stage1_trivial_agreement_last200": _rate(sum(s.trivial_choice == s.shadow_choice for s in s1), len(s1)),
        "stage1_stop_recall_last200": _rate(sum(s.model_choice == 0 for s in stops), len(stops)),
        "stage1_stop_precision_last200": _rate(sum(s.shadow_choice == 0 for s in s1 if s.model_choice == 0),
                                               sum(s.model_choice == 0 for s in s1)),
        "placement_agreement_last200": _rate(sum(r.placed_under == r.record.shadow_parent for r in placed),
                                             len(placed)),
        "stage2_agreement_last200": _rate(agree2, len(s2)),
        "stage2_idle_baseline_last200": _rate(idle2, len(s2)),
        "stage2_nonidle_recall_last200": _rate(hit, n_teacher),
        "stage2_nonidle_precision_last200": _rate(hit, n_model),
        "stage2_executed_nonidle_recall_last200": _rate(done_hit, n_teacher),
        "stage2_executed_nonidle_precision_last200": _rate(done_hit, n_done),
        "stage2_focal_action_auc_last200": ranking_auc(acts_score, acts_label),
        **{f"stage2_{t}_recall_last200": _rate(v[0], v[1]) for t, v in by_type.items()},
        **{f"stage2_{t}_precision_last200": _rate(v[0], v[2]) for t, v in by_type.items()},
        "teacher_calls_per_insert_last200": _rate(sum(r.teacher_calls for r in last), len(last)),
        "asked_now_per_insert_last200": _rate(sum(r.record.asked for r in last), len(last)),
        "audit_calls_per_insert_last200": _rate(sum(r.supervision.teacher_calls for r in last), len(last)),
        "stage1_decisions_last200": len(s1),
        "stage1_teacher_stops_last200": len(stops),
        "stage2_decisions_last200": len(s2),
        "stage2_teacher_nonidle_actions_last200": n_teacher,
    }


def _purity(tree, fact_ids: list[str], rows) -> float | None:
    from ..tree.evaluation import dendrogram_purity, path_class

    classes = {fid: path_class(r.path) for fid, r in zip(fact_ids, rows) if r.path is not None}
    if sum(c is not None for c in classes.values()) < 2:
        return None
    try:
        return float(dendrogram_purity(tree, classes))
    except ValueError:
        return None


def run(args: argparse.Namespace) -> int:
    import torch

    from ..insert.learner import teacher_forcing
    from ..tree.evaluation import load_labelled_facts
    from ..tree.placement import NewFact
    from ..tree.tree import MembrainTree
    from .bare_tree import insert_fact

    torch.set_num_threads(max(1, args.threads))
    rows = load_labelled_facts(args.data, limit=args.limit)
    texts = [r.text for r in rows]
    t0 = time.perf_counter()
    emb = embed_cached(texts, args.cache)
    embed_s = time.perf_counter() - t0
    facts = [NewFact(r.text, emb[i], {"path": r.path, "path_ids": r.path_ids, "id": r.id})
             for i, r in enumerate(rows)]
    dim = int(emb.shape[1])

    learner = _learner(args, dim)
    subject = rows[0].path[0] if rows and rows[0].path else "memories"
    tree = MembrainTree(subject, dim=dim)

    half = len(facts) // 2
    t_start = time.perf_counter()
    results, curve = _stream(tree, learner, facts, half, args)
    total_s = time.perf_counter() - t_start
    learner.trainer.flush()

    # Reference: the same facts inserted by the teacher alone (no model).
    ref_tree = MembrainTree(subject, dim=dim)
    ref_teacher = _make_teacher(args.teacher)
    ref_learner = teacher_forcing(ref_teacher, dim)
    ref_ids = [insert_fact(ref_tree, ref_learner, nf).fact_id for nf in facts]

    c1, c2 = learner.counters["stage1"], learner.counters["stage2"]
    steps = c1.steps + c2.steps
    auto_phase = results[half:]
    last = results[-WINDOW:]
    out: dict = {
        **{k: v for k, v in metrics_of(results).items()},
        "naming_calls_per_insert_last200": sum(r.naming_calls for r in last) / len(last),
        **_insert_times(auto_phase),
        "train_step_ms": (c1.train_ms + c2.train_ms) / steps if steps else None,
        "train_ms_per_insert": (c1.train_ms + c2.train_ms) / len(facts),
        "dendrogram_purity": _purity(tree, [r.fact_id for r in results], rows),
        "teacher_only_purity": _purity(ref_tree, ref_ids, rows),
        "teacher_failures": sum(learner.ledger.failures.values()),
        "teacher_calls_total": learner.ledger.teacher_calls,
        "stage1_prequential_agreement": c1.agreement,
        "stage2_prequential_agreement": c2.agreement,
        "stage1_temperature": learner.trainer.calib["stage1"].temperature,
        "stage2_decision_fit": list(learner.trainer.decision_calib.w),
        "optimiser_steps": steps,
        "facts": len(facts),
        "teacher": args.teacher,
        "confidence_gates": [args.confidence, args.confidence2],
        "audit_rate": args.audit_rate,
        "idle_margin": args.idle_margin,
        "stage2_defer": args.stage2_defer,
        "embed_s": embed_s,
        "ingest_s": total_s,
        "device": str(learner.trainer.device),
        "machine": machine_description(),
        "torch_threads": torch.get_num_threads(),
    }
    out["naming_calls_total"] = learner.ledger.naming_calls

    out["curve_csv"], out["curve_png"] = _write_curve(curve, half, args)

    _print_table(out, len(facts), args)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


def _learner(args: argparse.Namespace, dim: int) -> Any:
    """The learner under test, with a shadow of the same teacher; teacher forcing at first."""
    from ..decoding import DecodeConfig
    from ..insert.config import LearnerConfig
    from ..insert.learner import Learner
    from ..nets import ModelConfig
    from ..students.training_config import Policy
    from ..training import TrainingConfig

    cfg = LearnerConfig(seed=args.seed, decode=DecodeConfig(idle_margin=args.idle_margin),
                        stage2_defer=args.stage2_defer, model=ModelConfig(dim=dim),
                        training=TrainingConfig(seed=args.seed), stage1=Policy(execute="teacher", query="always"),
                        stage2=Policy(execute="teacher", query="always"))
    return Learner(_make_teacher(args.teacher), cfg, shadow=_make_teacher(args.teacher))


def _print_table(out: dict, facts: int, args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"learning: {facts} facts, teacher={args.teacher} (last {WINDOW})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k, v in out.items():
        if isinstance(v, float):
            table.add_row(k, f"{v:.3f}")
        elif v is None or isinstance(v, (int, str)):
            table.add_row(k, str(v))
    Console().print(table)


def _stream(tree: Any, learner: Any, facts: list, half: int, args: argparse.Namespace) -> tuple[list, list[dict]]:
    """Insert ``facts`` in order through the insert graph: teacher forcing for the first
    ``half``, the gated policies after; the inserts' results and the learning curve (every
    10 inserts, over the last 50)."""
    from ..students.training_config import Policy
    from .bare_tree import insert_fact

    results: list = []
    curve: list[dict] = []
    for i, nf in enumerate(facts):
        if i == half:
            auto = dict(execute="auto", query="uncertain", audit_rate=args.audit_rate)
            learner.config = replace(learner.config, stage1=Policy(confidence=args.confidence, **auto),
                                     stage2=Policy(confidence=args.confidence2, **auto))
        results.append(insert_fact(tree, learner, nf))
        if (i + 1) % 10 == 0 or i + 1 == len(facts):
            m = metrics_of(results, window=50)
            curve.append({"inserts": i + 1, "phase": "teacher" if i < half else "auto",
                          **{k.replace("_last200", "_last50"): v for k, v in m.items()},
                          "place_ms_last50": float(np.median([r.record.place_ms for r in results[-50:]]))})
    return results, curve


def _insert_times(auto_phase: list) -> dict[str, float]:
    """Insert times of the gated phase: of the inserts the model decided alone (all of them
    when none did), and of every insert."""
    alone = [r.record for r in auto_phase if r.record.teacher_calls == 0]
    model_path = alone or [r.record for r in auto_phase]
    wall = np.array([r.place_ms for r in model_path])
    cpu = np.array([r.place_cpu_ms for r in model_path])
    every = np.array([r.record.place_ms for r in auto_phase])
    return {"insert_p50_ms": float(np.percentile(wall, 50)), "insert_p95_ms": float(np.percentile(wall, 95)),
            "insert_p50_cpu_ms": float(np.percentile(cpu, 50)), "insert_p95_cpu_ms": float(np.percentile(cpu, 95)),
            "insert_model_path_share": len(alone) / max(len(auto_phase), 1),
            "insert_all_p50_ms": float(np.percentile(every, 50)),
            "insert_all_p95_ms": float(np.percentile(every, 95))}


def _write_curve(curve: list[dict], half: int, args: argparse.Namespace) -> tuple[str, str]:
    """The learning curve as a CSV and a PNG in ``--out-dir`` (else beside ``--json``)."""
    out_dir = Path(args.out_dir) if args.out_dir else (Path(args.json).parent if args.json else Path("."))
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / "learning_curve.csv"
    with csv_path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(curve[0].keys()))
        w.writeheader()
        w.writerows(curve)
    png_path = out_dir / "learning_curve.png"
    _plot(curve, half, png_path)
    return str(csv_path), str(png_path)


def _plot(curve: list[dict], half: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [c["inserts"] for c in curve]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for key, label in [("stage1_agreement_last50", "stage 1 agreement"),
                       ("stage1_trivial_agreement_last50", "stage 1 trivial rule"),
                       ("stage1_stop_recall_last50", "stage 1 stop recall"),
                       ("stage2_agreement_last50", "stage 2 agreement"),
                       ("stage2_nonidle_recall_last50", "stage 2 non-Idle recall")]:
        ax.plot(x, [c[key] if c[key] is not None else np.nan for c in curve], label=label)
    ax2 = ax.twinx()
    ax2.plot(x, [c["teacher_calls_per_insert_last50"] for c in curve], "k--", label="teacher calls / insert")
    ax2.set_ylabel("teacher calls per insert")
    ax.axvline(half, color="grey", lw=0.8)
    ax.set_xlabel("inserts")
    ax.set_ylabel("rate (last 50)")
    ax.set_ylim(0, 1.05)
    ax.legend(loc="lower left", fontsize=7)
    ax2.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
