"""``membrain demo``: an offline tour on the bundled sample conversation."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Mapping
from importlib import resources
from itertools import groupby
from typing import Any

from rich.console import Console
from rich.markup import escape

from .opening import namespace_str, open_memory, parse_namespace, stats_of
from .writing import warm_up

DEMO_NAMESPACE = "demo/maya"


def load_sample_conversation() -> list[dict[str, Any]]:
    """The bundled sample conversation: dicts with ``text``, ``speaker``, ``session``, ``date``."""
    raw = resources.files("langchain_membrain").joinpath("data/sample_conversation.jsonl").read_text("utf-8")
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


DEMO_QUERIES = (
    "Any food allergies?",
    "How is the knee injury?",
    "Which trips has the family taken?",
    "What is the database migration at work?",
    "Which instrument does she play?",
)


def cmd_demo(args: argparse.Namespace, console: Console) -> int:
    """``membrain demo``: ingest the sample conversation session by session, show the tree
    growing and the teacher being asked less, then search it."""
    from ..tree.export import tree_to_rich

    ns = parse_namespace(args.ns) or parse_namespace(DEMO_NAMESPACE)
    assert ns is not None  # DEMO_NAMESPACE is a namespace
    turns = [t for t in load_sample_conversation() if t["speaker"] == "user"]
    sessions = [(s, list(g)) for s, g in groupby(turns, key=lambda t: t["session"])]
    console.rule("[bold]membrain demo")
    console.print(f"Maya told her assistant {len(turns)} things over {len(sessions)} sessions. "
                  f"membrain files each one into a tree for [bold]{escape(namespace_str(ns))}[/].")
    args.offline = True  # the demo never calls an LLM: it shows the offline models learning
    from ..index.config import RetrievalConfig

    # The sample is a chat: its turns' speaker, session and date are for the chat scorers.
    with open_memory(args, default_db=None, retrieval=RetrievalConfig.for_chat()) as memory:
        console.print(f"[dim]{escape(args.teacher_label)}; loading the embedder…[/]")
        warm_up(memory)
        rates: list[tuple[int, float | None]] = []
        start = time.perf_counter()
        for idx, (session, group) in enumerate(sessions):
            before = stats_of(memory)
            memory.add_many([t["text"] for t in group], namespace=ns,
                            metadatas=[{"speaker": t["speaker"], "session": t["session"], "date": t["date"]}
                                       for t in group])
            memory.flush()
            rate = _teacher_rate(before, stats_of(memory), len(group))
            rates.append((session, rate))
            tree = memory.tree(ns)
            n_aspects = len(tree.aspects())
            asked = "" if rate is None else f" · teacher asked [bold]{rate:.2f}[/] per fact"
            console.print(f"\n[bold]session {session}[/] [dim]({group[0]['date']})[/] +{len(group)} → "
                          f"{tree.fact_count(tree.root_id)} facts, {n_aspects} aspect{'s' if n_aspects != 1 else ''}, "
                          f"depth {tree.height()}{asked}", overflow="ellipsis", no_wrap=True)
            if idx in (0, len(sessions) // 2):
                console.print(tree_to_rich(tree, depth=2, max_facts=2, width=60, title=namespace_str(ns)))
        took = time.perf_counter() - start
        console.print()
        console.rule(f"[bold]the tree after {len(turns)} facts[/] [dim]({took:.1f} s)")
        console.print(tree_to_rich(memory.tree(ns), depth=None, max_facts=3, width=64, title=namespace_str(ns)))
        console.print()
        _print_teacher_rates(console, rates, stats_of(memory))
        console.rule("[bold]searches")
        for query in DEMO_QUERIES:
            hits = memory.search(query, namespace=ns, limit=2)
            console.print(f"\n[bold]? {escape(query)}[/]")
            for r in hits:
                path = " › ".join(r.path) or "(top level)"
                console.print(f"  [green]{r.score:.2f}[/] {escape(r.text)}", overflow="ellipsis", no_wrap=True)
                console.print(f"       [cyan]↳ {escape(path)}[/]", overflow="ellipsis", no_wrap=True)
    console.print()
    console.rule()
    console.print("Next: [bold]membrain import FILE[/], [bold]membrain show[/], "
                  "[bold]membrain export --format html -o memory.html[/]")
    return 0


def _teacher_rate(before: Mapping[str, Any], after: Mapping[str, Any], facts: int) -> float | None:
    """Teacher questions per new fact between two ``stats()`` (a memory reports nothing
    before its first insert: that counts as zero)."""
    now = teacher_calls(after)
    if now is None:
        return None
    return (now - (teacher_calls(before) or 0)) / max(facts, 1)


def _print_teacher_rates(console: Console, rates: list[tuple[int, float | None]], stats: Mapping[str, Any]) -> None:
    known = [(session, rate) for session, rate in rates if rate is not None]
    if not known or len(known) < len(rates):
        console.print("[dim]teacher questions: not reported by this build's MembrainMemory.stats()[/]")
        return
    console.print("[bold]teacher questions per new fact[/], session by session")
    peak = max((rate for _, rate in known), default=0.0) or 1.0
    for session, rate in known:
        bar = "█" * int(round(30 * rate / peak))
        console.print(f"  session {session}  [magenta]{bar:<30}[/] {rate:4.2f}")
    agree = _fmt_agreements(stats)
    if agree:
        console.print(f"  the models agree with the teacher: [bold]{escape(agree)}[/]")
    console.print()


def teacher_calls(stats: Mapping[str, Any]) -> int | None:
    """Teacher questions reported by ``stats()``: joint questions plus naming questions
    (None before anything was counted)."""
    if not isinstance(stats.get("teacher_calls"), (int, float)):
        return None
    return int(stats["teacher_calls"]) + int(stats.get("naming_calls") or 0)


def agreements(stats: Mapping[str, Any]) -> dict[str, tuple[float, int]]:
    """(prequential agreement, labelled decisions) per stage that has labels."""
    out = {}
    for stage in ("stage1", "stage2"):
        entry = stats.get(stage)
        if isinstance(entry, dict) and entry.get("labelled"):
            out[stage] = (float(entry["agreement"]), int(entry["labelled"]))
    return out


def _fmt_agreements(stats: Mapping[str, Any]) -> str | None:
    found = agreements(stats)
    if not found:
        return None
    return ", ".join(f"{stage.replace('stage', 'stage ')} {a:.0%} of {n}" for stage, (a, n) in found.items())
