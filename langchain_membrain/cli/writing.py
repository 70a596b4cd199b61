"""The commands that store memories: ``membrain add`` and ``membrain import``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from .opening import UserError, namespace_str, open_memory, parse_namespace


def cmd_add(args: argparse.Namespace, console: Console) -> int:
    """``membrain add TEXT``: store one memory and say where it went."""
    ns = parse_namespace(args.ns)
    meta = _parse_meta(args.meta)
    with open_memory(args) as memory:
        before = _without_teacher(memory)
        key = memory.add(args.text, namespace=ns, metadata=meta, key=args.key)
        untaught = before is not None and (_without_teacher(memory) or 0) > before
        memory.flush()
        record = memory.get(key, namespace=ns)
        if record is None:  # not stored as a memory (judged not one: IGNORE)
            decision = memory.last_operation
            kind = decision.operation.kind if decision is not None else "IGNORE"
            console.print(f"[yellow]not stored[/]: judged not a memory ({escape(kind)}); it is logged "
                          "under 'membrain history --ignored'")
            return 0
        path = " › ".join(record.path) if record.path else "(top level)"
        console.print(f"[green]✓[/] stored [bold]{escape(key)}[/] in [bold]{escape(namespace_str(record.namespace))}[/]"
                      f" under {escape(path)}")
        if untaught:
            console.print(f"[yellow]stored without the teacher[/] ({escape(args.teacher_label)}): it gave no "
                          f"usable answer (failing, unreachable, or slower than {_budget(memory)}), so the "
                          "student or the offline rule decided; the teacher is asked again in the background")
    return 0


def _without_teacher(memory: Any) -> int | None:
    """This process's count of adds decided without the teacher's answer (None: not reported)."""
    process = getattr(memory.stats(), "process", None)
    count = getattr(process, "without_teacher", None)
    return count if isinstance(count, int) else None


def _budget(memory: Any) -> str:
    budget = getattr(memory, "teacher_budget", None)
    return f"the {budget:g} s budget" if isinstance(budget, (int, float)) else "its timeout"


def _parse_meta(items: list[str] | None) -> dict[str, Any] | None:
    if not items:
        return None
    meta: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise UserError(f"--meta expects KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        try:
            meta[k] = json.loads(v)
        except json.JSONDecodeError:
            meta[k] = v
    return meta


def cmd_import(args: argparse.Namespace, console: Console) -> int:
    """``membrain import FILE``: bulk-load JSON lines or text lines, with a progress bar."""
    ns = parse_namespace(args.ns)
    records = read_records(args.file)
    if not records:
        console.print(f"[yellow]{escape(args.file)} holds no memories; nothing imported[/]")
        return 0
    batch = max(1, args.batch_size)
    with open_memory(args) as memory:
        console.print(f"[dim]{escape(args.teacher_label)}; loading the embedder…[/]")
        warm_up(memory)
        columns = (TextColumn("[bold]importing[/]"), BarColumn(), MofNCompleteColumn(), _RateColumn(),
                   TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn())
        with Progress(*columns, console=console, transient=False) as progress:
            task = progress.add_task("import", total=len(records))
            for i in range(0, len(records), batch):
                chunk = records[i: i + batch]
                memory.add_many([r["text"] for r in chunk], namespace=ns,
                                metadatas=[r["metadata"] for r in chunk], keys=[r["key"] for r in chunk])
                progress.advance(task, len(chunk))
            took = import_seconds(progress.tasks[0]) or 0.0
        start = time.perf_counter()
        memory.flush()  # the background trainer catches up: after the facts are stored and searchable
        training = time.perf_counter() - start
        target = namespace_str(ns) if ns else "memories"
        rate = facts_per_second(len(records), took)
        console.print(f"[green]✓[/] imported {len(records)} memories into [bold]{escape(target)}[/] "
                      f"in {took:.1f} s ({'?' if rate is None else f'{rate:.1f}'} facts/s)")
        console.print(f"[dim]the background training caught up {training:.1f} s later[/]")
    return 0


def read_records(path: str) -> list[dict[str, Any]]:
    """Records to import from a file (``-`` is standard input).

    Each non-blank line is either a JSON object with ``text`` (or ``content``) and optional
    ``metadata`` (a dict) and ``key``; other fields join the metadata. A line that is not
    JSON is a memory of its own. Raises UserError naming the line of a bad record.
    """
    if path == "-":
        lines = sys.stdin.read().splitlines()
    else:
        p = Path(path)
        if not p.exists():
            raise UserError(f"file not found: {path}")
        if p.is_dir():
            raise UserError(f"{path} is a directory, not a file")
        try:
            lines = p.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError:
            raise UserError(f"{path} is not UTF-8 text") from None
    records = []
    for i, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        if not line.startswith("{"):
            records.append({"text": line, "metadata": None, "key": None})
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"line {i} of {path} is not valid JSON: {exc.msg}") from None
        text = obj.get("text", obj.get("content"))
        if not isinstance(text, str) or not text.strip():
            raise UserError(f"line {i} of {path} has no \"text\" string")
        meta = obj.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise UserError(f"line {i} of {path}: \"metadata\" must be an object")
        extra = {k: v for k, v in obj.items() if k not in ("text", "content", "metadata", "key")}
        meta = {**extra, **(meta or {})} or None
        key = obj.get("key")
        if key is not None and not isinstance(key, str):
            raise UserError(f"line {i} of {path}: \"key\" must be a string")
        records.append({"text": text, "metadata": meta, "key": key})
    return records


def warm_up(memory: Any) -> None:
    """Load the embedder now, so that progress rates and timings measure inserts only."""
    embeddings = getattr(memory, "embeddings", None)
    if embeddings is not None and hasattr(embeddings, "embed_query"):
        embeddings.embed_query("warm up")


def import_seconds(task: Any) -> float | None:
    """Seconds an import's progress task has run: until its last fact was stored once it
    is finished, else until now."""
    return task.finished_time if task.finished else task.elapsed


def facts_per_second(done: float, seconds: float | None) -> float | None:
    """The import's rate: facts stored over the seconds they took, since the start. The bar
    and the summary both show this figure (rich's own speed is an average over the last
    few updates only, which disagreed with the summary)."""
    return done / seconds if done and seconds else None


class _RateColumn(ProgressColumn):
    """Facts per second since the import started (:func:`facts_per_second`)."""

    def render(self, task: Any) -> Text:
        speed = facts_per_second(task.completed, import_seconds(task))
        return Text("     ? facts/s" if speed is None else f"{speed:8.1f} facts/s", style="green")
