"""Teacher economy through the product: questions per insert, tree shape and insert cost.

A stream of chat turns goes through ``MembrainMemory()`` with its default settings, as a
chatbot would send it: one ``mem.add(text, namespace=...)`` per turn. After every add the
cumulative counters of ``mem.stats()`` are read: ``teacher_calls + naming_calls`` is the
number of questions put to the teacher so far, and ``stats()["questions"]`` (a mapping
kind -> cumulative count, when the product reports one) breaks it down by kind
(placement, audit, naming, relabel, ...: whatever kinds appear are printed).

    python -m langchain_membrain.bench economy [--data FILE] [--samples N|ID,ID] \\
        [--window 100] [--pause 0] [--csv OUT.csv] [--png OUT.png] [--json OUT.json] [--no-baseline] \\
        [--no-operations] [--seed N[,N...]]

Memory operations (ADD/UPDATE/DELETE/IGNORE, operations.py) run as in the product: on by
default; ``--no-operations`` stores every turn, to compare. Their questions are counted
as the kind ``operation`` when the insert asked no placement question (one request per
insert, as a one-call LLM answers both).

Data: a LoCoMo JSON file (a list of samples; one namespace ``locomo/<sample_id>`` per
sample, one insert per turn, text ``"Speaker: text"`` as ``bench locomo`` indexes it), or
JSON lines (``text``, optional ``namespace`` or ``persona``; default namespace ``bench``).
Without ``--data``: the bundled sample conversation. Namespaces are streamed one after
the other into ONE memory (the models are shared across namespaces, as in the product).

Attribution. Training and deferred questions (audits, stage 2, renaming) run in the
memory's background thread, so a question is counted a little after the add that caused
it. Questions are attributed to the window in which they were counted (the add after which
the counters had risen). ``flush()`` is called once at the end of each namespace's stream
(so that its pending questions are not counted in the next namespace); what it counts goes
to that namespace's last window. Per-insert attribution is therefore not exact, and the
share of inserts "asked at all" cannot be read from the counters; what is reported instead
is ``adds_with_questions``: the share of adds during which the counters rose (foreground
questions of that insert, plus background ones counted meanwhile). ``pending`` (the CSV's
``pending_training``) says how far the trainer lagged at each window's end: back to back
adds on a small machine can leave it hundreds of inserts behind, so the student trains late
and stays unsure longer than in a chat with time between turns (``--pause SECONDS`` waits
that long after each add, untimed).

Insert cost: wall time (``perf_counter``) and CPU time of the calling thread
(``thread_time``: the background trainer's CPU is not in it; ``cpu_process`` in the CSV has
the whole process's) around each ``mem.add``, with every text embedded beforehand in one
batch: the memory's embedder serves the precomputed vectors (the same MiniLM vectors the
default embedder computes; labels of new aspects are still embedded inside ``add``). Each is
reported for adds during which questions were counted and for the others (the model path).

Seeds (``--seed 0,1,2``): the learner's seed decides which items are drawn as audits, and
with them a run's figures (a conversation's questions per turn move by a few hundredths).
With several seeds the product runs once per seed, on the same stream, one after the other;
the tables above are the first seed's, and a table per namespace gives each seed's headline
figures and their mean and range. The CSV and the JSON hold every run; the PNG the first.

Tree shape at each window's end (``mem.tree(namespace)``): height, top-level aspects,
aspects, the largest top-level aspect's share of the namespace's facts, the share of facts
attached directly to the root.

Agreement (``--shadow``, default on): the product's memory gets a shadow copy of the
teacher (``MembrainMemory(shadow_teacher=...)``), asked about every decision the student
takes alone and never counted, trained on or executed; the share it would have taken too
(stage 1 per level, stage 2 per whole action series) is printed and saved in the JSON
(``final_stats.shadow_agreement``). Economy counts only beside it: a student that decides
alone and wrongly saves questions by silence. The shadow's time is left out of the insert
times.

A new teacher (``--teacher new``): the offline rule with ``crowd=7`` instead of 6, so the
shipped prior (taught by the default rule) is not trusted: the student starts from its
weights with fresh calibration and shut gates, as it does under an LLM teacher, while the
teacher stays offline and fast. The shadow is a copy of the same teacher.

Baseline (``--baseline``, default on), measured in the same run on the same stream: a memory
whose student never decides (``LearnerConfig(stage1=Policy(execute="teacher"),
stage2=Policy(execute="teacher"))``): the teacher alone, and its questions per insert.
"""

from __future__ import annotations

import argparse
import csv
import inspect
import json
import os
import platform
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from . import machine_description
from .economy_stream import Insert, PrecomputedEmbeddings, StreamResult, load_stream, read_counts, run_stream
from .economy_stream import Item as Item  # re-exported, as tree_shape: public names of this module
from .economy_stream import tree_shape as tree_shape

LAST = 200
NEW_TEACHER_CROWD = 7  # --teacher new: HeuristicConfig.crowd other than the default (6) that taught the prior
REFERENCE_LINES = (0.2, 0.5)
FIXED_COLUMNS = [
    "run", "namespace", "window", "first_insert", "last_insert", "inserts",
    "questions", "questions_cumulative", "questions_per_insert",
    "teacher_calls_per_insert", "naming_calls_per_insert", "adds_with_questions_share",
    "merged", "pending_training",
    "height", "top_aspects", "aspects", "largest_top_aspect_share", "root_fact_share", "facts",
    "wall_p50_ms", "wall_p95_ms", "cpu_p50_ms", "cpu_p95_ms",
]
ALL = "(all)"


# --------------------------------------------------------------------------- reports
def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def summarize(recs: Sequence[Insert], kinds: Sequence[str]) -> dict[str, Any]:
    """Questions per insert (total, teacher, naming, per kind), the share of adds with
    questions, and insert times (all; adds with questions; the others)."""
    n = len(recs)
    out: dict[str, Any] = {"inserts": n}
    if not n:
        return out
    out["questions"] = sum(r.questions for r in recs)
    out["questions_per_insert"] = out["questions"] / n
    out["teacher_calls_per_insert"] = sum(r.teacher for r in recs) / n
    out["naming_calls_per_insert"] = sum(r.naming for r in recs) / n
    for k in kinds:
        out[f"q_{k}_per_insert"] = sum(r.kinds.get(k, 0) for r in recs) / n
    out["adds_with_questions_share"] = sum(r.asked for r in recs) / n
    out["merged"] = sum(r.merged for r in recs)
    for name, sub in (("", recs), ("asked_", [r for r in recs if r.asked]),
                      ("quiet_", [r for r in recs if not r.asked])):
        out[f"{name}wall_p50_ms"] = _pct([r.wall_ms for r in sub], 50)
        out[f"{name}wall_p95_ms"] = _pct([r.wall_ms for r in sub], 95)
        out[f"{name}cpu_p50_ms"] = _pct([r.cpu_ms for r in sub], 50)
        out[f"{name}cpu_p95_ms"] = _pct([r.cpu_ms for r in sub], 95)
    out["cpu_process_p50_ms"] = _pct([r.cpu_process_ms for r in recs], 50)
    return out


def kinds_of(results: Sequence[StreamResult]) -> list[str]:
    listed = {k for res in results for k in res.kinds}
    return sorted(listed | {k for res in results for r in res.inserts for k in r.kinds})


def windows_of(res: StreamResult, window: int, kinds: Sequence[str]) -> list[dict[str, Any]]:
    """CSV rows: per namespace, one per window of ``window`` inserts; with several
    namespaces, also windows of the whole stream (namespace ``(all)``, no tree shape)."""
    rows = []
    groups: dict[str, list[Insert]] = {}
    for r in res.inserts:
        groups.setdefault(r.namespace, []).append(r)
    if len(groups) > 1:
        groups[ALL] = list(res.inserts)
    for ns, recs in groups.items():
        cum = 0
        for w in range(0, len(recs), window):
            chunk = recs[w: w + window]
            s = summarize(chunk, kinds)
            cum += s["questions"]
            key = (ns, w // window)
            row = {"run": res.run, "namespace": ns, "window": w // window, "first_insert": w + 1,
                   "last_insert": w + len(chunk), "questions_cumulative": cum,
                   "pending_training": res.pending.get(key),
                   **{k: s.get(k) for k in FIXED_COLUMNS if k in s},
                   **res.shapes.get(key, {}),
                   **{f"q_{k}_per_insert": s[f"q_{k}_per_insert"] for k in kinds}}
            rows.append(row)
    return rows


def _f(v: Any, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _console():
    from rich.console import Console

    c = Console()
    return c if c.is_terminal else Console(width=200)


def print_namespace_table(console: Any, ns: str, rows: list[dict], summaries: dict[str, dict],
                          kinds: Sequence[str], window: int) -> None:
    from rich.table import Table

    t = Table(title=f"economy: {ns} (windows of {window} inserts; questions per insert)")
    cols = ["inserts", "total", "teacher_calls", "naming_calls", *kinds, "adds w/ q", "pending", "height",
            "top asp.", "aspects", "largest top", "root share", "wall p50 ms", "cpu p50 ms"]
    for c in cols:
        t.add_column(c, justify="right")
    for r in rows:
        t.add_row(f"{r['first_insert']}-{r['last_insert']}", _f(r.get("questions_per_insert")),
                  _f(r.get("teacher_calls_per_insert")), _f(r.get("naming_calls_per_insert")),
                  *[_f(r.get(f"q_{k}_per_insert")) for k in kinds], _f(r.get("adds_with_questions_share")),
                  _f(r.get("pending_training")), _f(r.get("height")), _f(r.get("top_aspects")), _f(r.get("aspects")),
                  _f(r.get("largest_top_aspect_share")), _f(r.get("root_fact_share")),
                  _f(r.get("wall_p50_ms"), 1), _f(r.get("cpu_p50_ms"), 1))
    for label, s in summaries.items():
        t.add_row(label, _f(s.get("questions_per_insert")), _f(s.get("teacher_calls_per_insert")),
                  _f(s.get("naming_calls_per_insert")), *[_f(s.get(f"q_{k}_per_insert")) for k in kinds],
                  _f(s.get("adds_with_questions_share")), "", "", "", "", "", "",
                  _f(s.get("wall_p50_ms"), 1), _f(s.get("cpu_p50_ms"), 1), style="bold")
    console.print(t)


def print_overall_table(console: Any, product: dict[str, dict], baseline: dict[str, dict] | None,
                        shapes: dict[str, dict]) -> None:
    from rich.table import Table

    t = Table(title="economy: questions per insert, product vs the teacher alone (same run); "
                    "insert times p50/p95 for adds with and without questions counted")
    cols = ["namespace", "inserts", "product", f"last {LAST}", "naming_calls", "adds w/ q"]
    if baseline is not None:
        cols += ["teacher alone", f"alone last {LAST}"]
    cols += ["height", "top asp.", "largest top", "root share",
             "wall ms, q", "wall ms, no q", "cpu ms, q", "cpu ms, no q"]
    t.add_column(cols[0], no_wrap=True)
    for c in cols[1:]:
        t.add_column(c, justify="right")
    for ns, s in product.items():
        whole, last = s["all"], s["last"]
        row = [ns, _f(whole.get("inserts")), _f(whole.get("questions_per_insert")),
               _f(last.get("questions_per_insert")), _f(whole.get("naming_calls_per_insert")),
               _f(whole.get("adds_with_questions_share"))]
        if baseline is not None:
            b = baseline.get(ns, {})
            row += [_f(b.get("all", {}).get("questions_per_insert")), _f(b.get("last", {}).get("questions_per_insert"))]
        sh = shapes.get(ns, {})
        row += [_f(sh.get("height")), _f(sh.get("top_aspects")), _f(sh.get("largest_top_aspect_share")),
                _f(sh.get("root_fact_share"))]
        for kind in ("wall", "cpu"):
            for who in ("asked_", "quiet_"):
                row.append(f"{_f(whole.get(f'{who}{kind}_p50_ms'), 1)}/{_f(whole.get(f'{who}{kind}_p95_ms'), 1)}")
        t.add_row(*row, style="bold" if ns == ALL else None)
    console.print(t)


def plot(rows: list[dict], path: str | Path, window: int) -> None:
    """Questions per insert per window: one line per namespace, the whole stream (total),
    the teacher alone (dashed), reference lines at 0.2 and 0.5; the first seed's run only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5))
    series: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        series.setdefault((r["run"], r["namespace"]), []).append(r)
    names = {ns for run, ns in series if run == "product"}
    total_ns = ALL if ALL in names else next(iter(names), None)
    for (run, ns), rs in series.items():
        x = [r["last_insert"] for r in rs]
        y = [r["questions_per_insert"] for r in rs]
        if run == "product":
            if ns == total_ns:
                ax.plot(x, y, "k-", lw=2.2, marker="o", ms=3, label="total (product)")
            else:
                ax.plot(x, y, lw=1, alpha=0.8, label=ns)
        elif run == "baseline" and ns == total_ns:
            ax.plot(x, y, "k--", lw=1.5, label="teacher alone (baseline)")
    for ref in REFERENCE_LINES:
        ax.axhline(ref, color="grey", lw=0.8, ls=":")
        ax.text(ax.get_xlim()[0], ref, f" {ref}", va="bottom", fontsize=7, color="grey")
    ax.set_xlabel(f"inserts in the namespace (window end; windows of {window})")
    ax.set_ylabel("teacher questions per insert")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --------------------------------------------------------------------------- CLI
def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", default=None,
                        help="LoCoMo JSON (list of samples) or JSON lines ('text', optional 'namespace'/'persona'); "
                             "default: the bundled sample conversation")
    parser.add_argument("--samples", default=None,
                        help="LoCoMo: N (the first N samples) or comma-separated sample ids (default: all)")
    parser.add_argument("--window", type=int, default=100, help="inserts per window (default 100)")
    parser.add_argument("--teacher", choices=("heuristic", "new"), default="heuristic",
                        help="heuristic: the product's default offline teacher, which taught the shipped "
                             "prior (trusted); new: the offline rule with other settings (crowd=7), a teacher "
                             "the prior did not learn from, so its calibration starts afresh and its gates "
                             "shut, as with an LLM (the oracle teacher reads WordNet ground truth, which chat "
                             "turns do not have)")
    parser.add_argument("--baseline", action=argparse.BooleanOptionalAction, default=True,
                        help="also run the teacher alone on the same stream (default on)")
    parser.add_argument("--shadow", action=argparse.BooleanOptionalAction, default=True,
                        help="check the student's own decisions against a shadow copy of the teacher "
                             "(its time is left out of the insert times)")
    parser.add_argument("--background", action=argparse.BooleanOptionalAction, default=True,
                        help="train behind add() (the default), or inside it (--no-background: deterministic)")
    parser.add_argument("--csv", default=None, help="one row per window per namespace (and run)")
    parser.add_argument("--png", default=None, help="questions per insert per window")
    parser.add_argument("--json", default=None, help="summaries and final stats")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads of the process (default: torch's own, one per core, as in a "
                             "user's process; the memory runs its networks on one thread either way)")
    parser.add_argument("--operations", action=argparse.BooleanOptionalAction, default=True,
                        help="memory operations (ADD/UPDATE/DELETE/IGNORE) on, the product default; "
                             "--no-operations stores every turn (the behaviour before them)")
    parser.add_argument("--pause", type=float, default=0.0,
                        help="seconds to wait after each add, untimed (a chat's time between turns, in "
                             "which the background trainer catches up; default 0: back to back)")
    parser.add_argument("--seed", type=_seeds, default=[0],
                        help="the learner's seed (LearnerConfig.seed: which items are drawn as audits), or "
                             "several, comma-separated (0,1,2): one product run per seed and a table of the "
                             "seeds; a run is one sample (default 0)")


def _seeds(text: str) -> list[int]:
    try:
        seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--seed takes integers separated by commas, not {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"--seed takes distinct integers separated by commas, not {text!r}")
    return seeds


def final_shapes_of(res: StreamResult) -> dict[str, dict]:
    """Each namespace's tree shape at the end of the run (its last window's)."""
    last: dict[str, tuple[int, dict]] = {}
    for (ns, w), sh in res.shapes.items():
        if ns not in last or w >= last[ns][0]:
            last[ns] = (w, sh)
    return {ns: sh for ns, (_, sh) in last.items()}


def seed_row(res: StreamResult, summary: dict[str, dict], shape: dict[str, Any]) -> dict[str, Any]:
    """One run's headline figures for a namespace: the seeds table's row."""
    agreement = res.final_stats.get("shadow_agreement") or {}
    return {"questions_per_insert": summary["all"].get("questions_per_insert"),
            f"last_{LAST}": summary["last"].get("questions_per_insert"),
            **{f"shadow_{k}": (agreement.get(k) or {}).get("rate") for k in ("stage1", "stage2")},
            "height": shape.get("height"), "largest_top_aspect_share": shape.get("largest_top_aspect_share"),
            "quiet_cpu_p50_ms": summary["all"].get("quiet_cpu_p50_ms")}


def print_seeds_table(console: Any, ns: str, rows: dict[int, dict[str, Any]]) -> None:
    """Per seed, and their mean (min to max): how much one run of a conversation says."""
    from rich.table import Table

    cols = ["questions_per_insert", f"last_{LAST}", "shadow_stage1", "shadow_stage2", "height",
            "largest_top_aspect_share", "quiet_cpu_p50_ms"]
    t = Table(title=f"economy: {ns}, one product run per seed")
    t.add_column("seed")
    for c in ("product", f"last {LAST}", "shadow s1", "shadow s2", "height", "largest top", "cpu ms, no q"):
        t.add_column(c, justify="right")
    digits = {c: 1 if c.endswith("_ms") or c == "height" else 2 for c in cols}
    for seed, r in rows.items():
        t.add_row(str(seed), *[_f(r.get(c), digits[c]) for c in cols])  # a height (int) prints as is

    def spread(c: str) -> str:
        vals = [float(r[c]) for r in rows.values() if r.get(c) is not None]
        if not vals:
            return "-"
        d = digits[c]
        return f"{np.mean(vals):.{d}f} ({min(vals):.{d}f} to {max(vals):.{d}f})"

    t.add_row("mean (range)", *[spread(c) for c in cols], style="bold")
    console.print(t)


class _Memories:
    """The memories ``bench economy`` streams into, from its options: the product (one
    per seed) and the teacher alone, their embedder serving the precomputed vectors."""

    def __init__(self, args: argparse.Namespace, base: Any, known: Mapping[str, np.ndarray]):
        self.args, self.base, self.known = args, base, known

    def teacher(self) -> Any:
        """None: the memory's default teacher (the offline rule, naming with its embedder)."""
        from ..index.embeddings import embed_texts
        from ..teachers.heuristic import HeuristicConfig, HeuristicTeacher

        if self.args.teacher != "new":
            return None
        served = PrecomputedEmbeddings(self.base, self.known)
        return HeuristicTeacher(HeuristicConfig(crowd=NEW_TEACHER_CROWD), embed=lambda texts: embed_texts(served, texts))

    def shadow(self) -> Any:
        from ..teachers.heuristic import HeuristicTeacher

        return (self.teacher() or HeuristicTeacher()) if self.args.shadow else None

    def product(self, seed: int) -> Callable[[], Any]:
        from ..insert.config import LearnerConfig
        from ..memory import MembrainMemory

        return lambda: MembrainMemory(embeddings=PrecomputedEmbeddings(self.base, self.known),
                                      operations=self.args.operations, teacher=self.teacher(),
                                      shadow_teacher=self.shadow(), learner=LearnerConfig(seed=seed),
                                      background=self.args.background)

    def teacher_alone(self) -> Any:
        from ..insert.config import LearnerConfig
        from ..memory import MembrainMemory
        from ..students.training_config import Policy

        cfg = LearnerConfig(stage1=Policy(execute="teacher"), stage2=Policy(execute="teacher"), seed=self.args.seed[0])
        return MembrainMemory(embeddings=PrecomputedEmbeddings(self.base, self.known), learner=cfg,
                              teacher=self.teacher(), operations=self.args.operations)


def per_namespace(res: StreamResult, kinds: Sequence[str]) -> dict[str, dict]:
    """Each namespace's summaries (``all``: the whole stream, ``last``: its last inserts),
    and with several namespaces the whole run's (``(all)``)."""
    groups: dict[str, list[Insert]] = {}
    for r in res.inserts:
        groups.setdefault(r.namespace, []).append(r)
    if len(groups) > 1:
        groups[ALL] = list(res.inserts)
    return {ns: {"all": summarize(recs, kinds), "last": summarize(recs[-LAST:], kinds)}
            for ns, recs in groups.items()}


def run(args: argparse.Namespace) -> int:
    import torch

    from ..index.embeddings import MiniLMEmbeddings, embed_texts
    from ..memory import MembrainMemory

    if args.window < 1:
        raise SystemExit("--window must be at least 1")
    if args.threads is not None:
        torch.set_num_threads(max(1, args.threads))
    console = _console()
    items = load_stream(args.data, args.samples)
    if not items:
        raise SystemExit("no inserts in the data")
    base = MiniLMEmbeddings()
    t0 = time.perf_counter()
    unique = list(dict.fromkeys(it.text for it in items))
    uvecs = embed_texts(base, unique)
    embed_s = time.perf_counter() - t0
    known = dict(zip(unique, uvecs))
    vecs = np.stack([known[it.text] for it in items])
    pass_embedding = "embedding" in inspect.signature(MembrainMemory.add).parameters
    namespaces = list(dict.fromkeys(it.namespace for it in items))
    console.print(f"economy: {len(items)} inserts in {len(namespaces)} namespace(s), "
                  f"teacher={args.teacher}, seed {','.join(map(str, args.seed))}, pause {args.pause:g}s between adds, embedded in {embed_s:.1f}s beforehand "
                  f"({'passed as embedding=' if pass_embedding else 'served by the embedder'})")
    memories = _Memories(args, base, known)

    # The first seed's run is "product" (the tables below); any further seeds run after it.
    names = {seed: "product" if i == 0 else f"product, seed {seed}" for i, seed in enumerate(args.seed)}
    results = [run_stream(items, memories.product(seed), vecs, window=args.window, run=name,
                          pass_embedding=pass_embedding, pause=args.pause, log=console.print)
               for seed, name in names.items()]
    if args.baseline:
        results.append(run_stream(items, memories.teacher_alone, vecs, window=args.window, run="baseline",
                                  pass_embedding=pass_embedding, pause=args.pause, log=console.print))
    kinds = kinds_of(results)
    rows = [row for res in results for row in windows_of(res, args.window, kinds)]
    summaries = {res.run: per_namespace(res, kinds) for res in results}
    shapes = {res.run: final_shapes_of(res) for res in results}
    print_tables(console, args, namespaces, names, results, rows, summaries, shapes, kinds)
    print_totals(console, results)
    write_outputs(console, args, results, rows, summaries, shapes, kinds)
    return 0


def print_tables(console: Any, args: argparse.Namespace, namespaces: list[str], names: dict[int, str],
                 results: list[StreamResult], rows: list[dict[str, Any]], summaries: dict[str, dict[str, dict]],
                 shapes: dict[str, dict[str, dict]], kinds: Sequence[str]) -> None:
    """The product's windows per namespace (and the whole run's), the overall table, and
    with several seeds a table of the seeds per namespace."""
    for ns in [*namespaces, *([ALL] if len(namespaces) > 1 else [])]:
        prod_rows = [r for r in rows if r["run"] == "product" and r["namespace"] == ns]
        labels = {"whole stream": summaries["product"][ns]["all"],
                  f"last {LAST}": summaries["product"][ns]["last"]}
        if "baseline" in summaries:
            labels["teacher alone"] = summaries["baseline"][ns]["all"]
            labels[f"alone, last {LAST}"] = summaries["baseline"][ns]["last"]
        print_namespace_table(console, ns, prod_rows, labels, kinds, args.window)
    print_overall_table(console, summaries["product"], summaries.get("baseline"), shapes["product"])
    if len(args.seed) > 1:
        by_run = {res.run: res for res in results}
        for ns in namespaces:
            print_seeds_table(console, ns, {seed: seed_row(by_run[name], summaries[name][ns], shapes[name].get(ns, {}))
                                            for seed, name in names.items()})


def print_totals(console: Any, results: list[StreamResult]) -> None:
    """The product's and the teacher alone's question counts, how to read the tables, the
    shadow's agreement and the machine."""
    import torch

    prod = results[0]
    t, nm, kd = read_counts(prod.final_stats)
    console.print(f"product totals: {t + nm} questions = {t} teacher_calls + {nm} naming_calls"
                  + (f"; by kind {kd}" if kd else "; (stats() has no 'questions' breakdown)")
                  + f"; {prod.final_stats.get('inserts')} inserts, {prod.final_stats.get('merged', 0)} merged"
                  + f"; {prod.seconds:.1f}s; labels embedded inside add: {prod.embed_misses}")
    alone = next((res for res in results if res.run == "baseline"), None)
    if alone is not None:
        bt, bn, bk = read_counts(alone.final_stats)
        console.print(f"teacher alone: {bt + bn} questions = {bt} teacher_calls + {bn} naming_calls"
                      + (f"; by kind {bk}" if bk else "") + f"; {alone.seconds:.1f}s")
    console.print("questions are attributed to the window in which they were counted (training and "
                  "deferred questions run in a background thread; flush() once at the end of each "
                  "namespace; 'pending': inserts the trainer had not supervised yet at the window's end). "
                  "'adds w/ q': share of adds during which the counters rose. Times: one "
                  "mem.add, embeddings precomputed; cpu = the calling thread's CPU time.")
    agreement = prod.final_stats.get("shadow_agreement")
    if isinstance(agreement, Mapping):
        console.print("the student's own decisions, checked by a shadow copy of the teacher (never counted): "
                      + "; ".join(f"{k} {_f(v.get('rate'))} of {v.get('decisions')}" for k, v in agreement.items()))
    per_class = prod.final_stats.get("shadow_per_class")
    if isinstance(per_class, Mapping):  # a rare class the student never takes stays visible
        console.print("... per class, recall / precision (the shadow's, the student's count): " + "; ".join(
            f"{stage} {cls} {_f(v.get('recall'))} / {_f(v.get('precision'))} ({v.get('shadow')}, {v.get('student')})"
            for stage, classes in per_class.items() for cls, v in classes.items()))
    console.print(f"machine: {platform.platform()}, {os.cpu_count()} CPUs ({machine_description()}), "
                  f"torch device {prod.device}, torch threads {torch.get_num_threads()}")


def write_outputs(console: Any, args: argparse.Namespace, results: list[StreamResult], rows: list[dict[str, Any]],
                  summaries: dict[str, dict[str, dict]], shapes: dict[str, dict[str, dict]],
                  kinds: Sequence[str]) -> None:
    """``--csv`` (every window of every run), ``--png`` and ``--json`` (every run's
    summaries, final stats and shapes), where asked."""
    if args.csv:
        cols = FIXED_COLUMNS + [f"q_{k}_per_insert" for k in kinds]
        Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
        with open(args.csv, "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
            w.writeheader()
            w.writerows({k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()} for r in rows)
        console.print(f"wrote {args.csv}")
    if args.png:
        Path(args.png).parent.mkdir(parents=True, exist_ok=True)
        plot(rows, args.png, args.window)
        console.print(f"wrote {args.png}")
    if args.json:
        payload = {
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                        "description": machine_description(), "torch_device": results[0].device},
            "window": args.window, "teacher": args.teacher, "seeds": args.seed, "kinds": list(kinds),
            "runs": {res.run: {"summaries": summaries[res.run], "seconds": res.seconds,
                               "final_stats": _jsonable(res.final_stats),
                               "final_shapes": shapes[res.run]} for res in results},
        }
        Path(args.json).write_text(json.dumps(payload, indent=2))
        console.print(f"wrote {args.json}")


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
