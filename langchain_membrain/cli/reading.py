"""The commands that read the memory: ``membrain search``, ``show``, ``export`` and ``stats``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.table import Table

from ..insert.stats import MemoryStats
from .opening import (
    UserError,
    namespace_str,
    open_memory,
    open_stored,
    parse_namespace,
    pick_namespaces,
    stats_of,
)

EXPORT_FORMATS = ("json", "mermaid", "html")


def cmd_search(args: argparse.Namespace, console: Console) -> int:
    """``membrain search QUERY``: the best matches with their paths in the tree."""
    ns = parse_namespace(args.ns)
    if args.k < 1:
        raise UserError("-k must be at least 1")
    with open_memory(args, must_exist=True, teacher=False) as memory:
        if ns is not None:
            pick_namespaces(memory, ns)  # an unknown namespace is a mistake, not "no results"
        hits = memory.search(args.query, namespace=ns if ns is not None else (), limit=args.k)  # (): all
        if not hits:
            console.print("[yellow]no memories found[/] (add some with [bold]membrain add TEXT[/])")
            return 0
        table = Table(title=f"search: {args.query}", title_justify="left", show_lines=False)
        table.add_column("score", justify="right", style="green", no_wrap=True)
        table.add_column("memory")
        table.add_column("path", style="cyan")
        show_ns = len({r.namespace for r in hits}) > 1 or ns is None
        if show_ns:
            table.add_column("namespace", style="dim")
        for r in hits:
            row = [f"{r.score:.3f}" if r.score is not None else "", escape(r.text),
                   escape(" › ".join(r.path) or "·")]
            if show_ns:
                row.append(escape(namespace_str(r.namespace)))
            table.add_row(*row)
        console.print(table)
    return 0


def cmd_show(args: argparse.Namespace, console: Console) -> int:
    """``membrain show``: the tree of each namespace as a rich tree."""
    from ..tree.export import tree_to_rich  # the tree module (numpy, networkx): not for --help

    ns = parse_namespace(args.ns)
    if args.depth is not None and args.depth < 0:
        raise UserError("--depth must be 0 or more")
    with open_stored(args) as memory:
        spaces = pick_namespaces(memory, ns)
        if not spaces:
            console.print("[yellow]the memory is empty[/]: add something with [bold]membrain add TEXT[/]")
            return 0
        for s in spaces:
            tree = memory.tree(s)
            console.print(tree_to_rich(tree, depth=args.depth, max_facts=None if args.facts < 0 else args.facts,
                                    width=args.width, title=namespace_str(s)))
    return 0


def cmd_export(args: argparse.Namespace, console: Console) -> int:
    """``membrain export``: the tree of ``--ns`` (or, when it names none itself, of every
    namespace below it; without ``--ns``, of every namespace, as ``show`` prints them) as
    JSON, Mermaid or HTML. One namespace: its tree (JSON: the tree's own format). Several:
    one document holding each (JSON ``{"namespaces": [{"namespace": [...], "tree": ...}]}``,
    one Mermaid flowchart, one HTML page)."""
    from ..tree.export import (
        forest_to_html,
        forest_to_json,
        forest_to_mermaid,
        tree_to_html,
        tree_to_json,
        tree_to_mermaid,
    )

    ns = parse_namespace(args.ns)
    if args.output and Path(args.output).parent != Path("") and not Path(args.output).parent.is_dir():
        raise UserError(f"directory {str(Path(args.output).parent)!r} does not exist")
    with open_stored(args) as memory:
        chosen = pick_namespaces(memory, ns)
        if ns is not None and ns in chosen:
            chosen = [ns]  # the namespace named, not those below it
        if not chosen:
            raise UserError("the memory is empty: add something first (membrain add TEXT)")
        trees = [memory.tree(s) for s in chosen]
        embeddings = not args.no_embeddings
        if len(trees) == 1:
            tree = trees[0]
            if args.format == "json":
                text = json.dumps(tree_to_json(tree, embeddings=embeddings), ensure_ascii=False) + "\n"
            elif args.format == "mermaid":
                text = tree_to_mermaid(tree, args.max_label)
            else:
                text = tree_to_html(tree, title=args.title or f"membrain: {namespace_str(chosen[0])}")
        elif args.format == "json":
            text = json.dumps(forest_to_json(list(zip(chosen, trees)), embeddings=embeddings),
                              ensure_ascii=False) + "\n"
        elif args.format == "mermaid":
            text = forest_to_mermaid(trees, args.max_label)
        else:
            text = forest_to_html(trees, title=args.title or f"membrain: {namespace_str(ns) if ns else 'every namespace'}")
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        n = sum(t.fact_count(t.root_id) for t in trees)
        where = namespace_str(chosen[0]) if len(chosen) == 1 else f"{len(chosen)} namespaces"
        console.print(f"[green]✓[/] wrote {escape(args.output)} ({args.format}, {n} facts from {escape(where)})")
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0


def cmd_stats(args: argparse.Namespace, console: Console) -> int:
    """``membrain stats``: facts, aspects and depth per namespace, and the memory's counters."""
    ns = parse_namespace(args.ns)
    with open_stored(args, teacher=True) as memory:
        spaces = pick_namespaces(memory, ns)
        per_ns = []
        for s in spaces:
            t = memory.tree(s)
            per_ns.append({"namespace": namespace_str(s), "facts": t.fact_count(t.root_id),
                           "aspects": len(t.aspects()), "depth": t.height()})
        stats = stats_of(memory)
        if args.json:
            print(json.dumps({"namespaces": per_ns, "stats": dict(stats), "teacher": args.teacher_label},
                             default=str, indent=2))
            return 0
        if per_ns:
            table = Table(title="trees", title_justify="left")
            columns: tuple[tuple[str, JustifyMethod], ...] = (
                ("namespace", "left"), ("facts", "right"), ("aspects", "right"), ("depth", "right"))
            for col, justify in columns:
                table.add_column(col, justify=justify)
            for row in per_ns:
                table.add_row(escape(row["namespace"]), str(row["facts"]), str(row["aspects"]), str(row["depth"]))
            console.print(table)
        else:
            console.print("[yellow]the memory is empty[/]")
        kv = Table(title="memory", title_justify="left", show_header=False)
        kv.add_column("what", style="bold")
        kv.add_column("value", justify="right")
        kv.add_row("teacher", escape(args.teacher_label))
        rows = stats_rows(stats) if isinstance(stats, MemoryStats) else [("counters", "not reported")]
        for what, value in rows:
            kv.add_row(escape(what), escape(value))
        console.print(kv)
    return 0


def stats_rows(stats: MemoryStats) -> list[tuple[str, str]]:
    """``membrain stats``'s report, one (what, value) row per field that says something.
    Counters are lifetime ones (every process's, as stored, plus this one's); this
    process's count follows in brackets where it has counted any."""
    rows: list[tuple[str, str]] = []
    learning, ops = stats.learning, stats.operations or {}
    if learning is None:
        rows.append(("teacher questions", "none yet (no model checkpoint)"))
    else:
        rows.append(("teacher questions", f"{learning.teacher_questions} ({learning.teacher_calls} joint, "
                                          f"{learning.naming_calls} naming)"))
        if stats.teacher_calls_per_insert is not None:
            rows.append(("joint questions per insert", f"{stats.teacher_calls_per_insert:.3g}"))
        for stage, s in learning.stages.items():
            agreed = "no labelled decision yet" if not s.labelled or s.agreement is None else (
                f"{s.agreement:.0%} of {s.labelled} labelled decisions")
            rows.append((f"{stage.replace('stage', 'stage ')} agreement with the teacher", agreed))
        if learning.teacher_failures:
            skipped = f" ({learning.teacher_skipped} not sent: teacher down or budget spent)" \
                if learning.teacher_skipped else ""
            rows.append(("teacher failures", f"{learning.teacher_failures}{skipped}"))
    lifetime, process = stats.lifetime, stats.process
    for name, total in lifetime.as_dict().items():
        mine = getattr(process, name)
        if total or name in ("inserts", "merged"):
            rows.append((name.replace("_", " "), f"{total} ({mine} in this process)" if mine else str(total)))
    if ops.get("decisions"):
        kinds = ", ".join(f"{k} {n}" for k, n in (ops.get("by_kind") or {}).items() if n)
        student = ops.get("student") or {}
        rows.append(("memory operations", f"{ops['decisions']} decided ({kinds}): {ops.get('student_decided', 0)} by "
                                          f"the student, {ops.get('teacher_questions', 0)} asked"
                                          + (f"; its prior: {student['prior']}" if student.get("prior") else "")))
    for what, value in (("pending training", stats.pending_training), ("inserts in flight", stats.inserts_in_flight),
                        ("last worker error", stats.last_worker_error), ("checkpoint error", stats.checkpoint_error),
                        ("prior", stats.prior)):
        if value:
            rows.append((what, str(value)))
    return rows
