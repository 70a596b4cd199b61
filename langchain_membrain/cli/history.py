"""``membrain history``: the versions of a memory (superseded, deleted, current), the log
of ignored items, and ``--purge``."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .opening import UserError, namespace_str, open_memory, open_stored, parse_namespace


def cmd_history(args: argparse.Namespace, console: Console) -> int:
    """``membrain history [KEY]``: the versions of a memory (superseded, deleted, current),
    or every superseded and deleted memory of the namespace(s); ``--ignored``: the log of
    items that were not memories."""
    from ..tree.archive import HISTORY_KEY
    from ..tree.tree import VALID_FROM_KEY

    ns = parse_namespace(args.ns)
    if args.purge or args.before is not None:
        return _purge_history(args, ns, console)
    with open_stored(args) as memory:
        # Every namespace, also those whose facts are all superseded, deleted or ignored.
        spaces = [tuple(s) for s in memory.namespaces() if ns is None or tuple(s)[: len(ns)] == ns]
        shown = 0
        for s in spaces:
            tree = memory.tree(s)
            if args.ignored:
                rows = [("ignored", e) for e in tree.archived("ignored")]
            else:
                rows = _versions(tree, args.key)
            if not rows:
                continue
            table = Table(title=f"{'ignored' if args.ignored else 'history'}: {namespace_str(s)}", title_justify="left")
            for col, style in (("status", "bold"), ("memory", None), ("valid from", "dim"), ("valid to", "dim"),
                               ("superseded by", "cyan"), ("key", "dim")):
                table.add_column(col, style=style)
            from ..tree.export import format_time

            for status, node in rows:
                h = node.metadata.get(HISTORY_KEY, {})
                start = h.get("valid_from", node.metadata.get(VALID_FROM_KEY, node.created_at))
                text = escape(node.text) if status == "current" else f"[strike]{escape(node.text)}[/]"
                if status == "ignored":
                    text = escape(node.text)
                table.add_row(status, text, format_time(start), format_time(h.get("valid_to")),
                              escape(str(h.get("superseded_by") or "")), escape(node.id))
            console.print(table)
            shown += len(rows)
        if not shown:
            what = "no ignored items" if args.ignored else (
                f"no memory {args.key!r}" if args.key else "no superseded or deleted memories")
            console.print(f"[yellow]{escape(what)}[/]")
            return 1 if args.key and not args.ignored else 0
    return 0


def _versions(tree: Any, key: str | None) -> list[tuple[str, Any]]:
    """(status, node) of the archived versions of ``key`` (every archived fact when None),
    oldest first, then the current fact ``key`` when it is in the tree."""
    from ..tree.archive import HISTORY_KEY

    if key is not None and key in tree.archive:  # an archived entry's own id: its fact's key
        key = tree.archive[key].metadata.get(HISTORY_KEY, {}).get("key", key)
    entries = tree.history(key) if key is not None else tree.archived("history")
    out = [("superseded" if e.metadata.get(HISTORY_KEY, {}).get("operation") == "update" else "deleted", e)
           for e in entries]
    if key is not None and key in tree and tree.node(key).kind == "fact":
        out.append(("current", tree.node(key)))
    return out


def _purge_history(args: argparse.Namespace, ns: tuple[str, ...] | None, console: Console) -> int:
    """``membrain history --purge [--before DATE] [--ignored]``: forget the superseded and
    deleted versions (``--ignored``: the log) of every namespace under ``--ns``, archived
    before DATE (default: all), one transaction per namespace (MembrainMemory.purge_history)."""
    from datetime import datetime

    if not args.purge:
        raise UserError("--before only selects what --purge removes")
    if args.key is not None:
        raise UserError("--purge takes no KEY: it removes every archived entry of the namespaces (see --before)")
    before = None
    if args.before is not None:
        try:
            before = datetime.fromisoformat(args.before)
        except ValueError:
            raise UserError(f"--before expects an ISO date or time (2024-05-01, 2024-05-01T12:00), "
                            f"got {args.before!r}") from None
    kind = "ignored" if args.ignored else "history"
    with open_memory(args, must_exist=True, teacher=False) as memory:
        spaces = [tuple(s) for s in memory.namespaces() if ns is None or tuple(s)[: len(ns)] == ns]
        removed = sum(memory.purge_history(s, before=before, kind=kind) for s in spaces)
    what = "ignored items" if args.ignored else "superseded or deleted versions"
    when = f" archived before {before.isoformat(sep=' ')}" if before is not None else ""
    console.print(f"[green]✓[/] purged {removed} {what}{when} from {len(spaces)} namespace(s); current memories "
                  f"are untouched")
    return 0
