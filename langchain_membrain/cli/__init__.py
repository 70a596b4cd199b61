"""The ``membrain`` command line.

::

    membrain demo                        # offline tour on a bundled sample conversation
    membrain add "I am allergic to peanuts" --ns users/maya
    membrain import notes.jsonl          # JSON lines ({"text": ..., "metadata": {...}}) or plain text
    membrain search "what can't I eat?" -k 3
    membrain show --depth 2
    membrain export --format html -o memory.html
    membrain stats
    membrain bench tree ...              # the benchmarks (python -m langchain_membrain.bench)

Every command takes ``--db PATH_OR_URL`` (default ``$MEMBRAIN_DB`` or ``./membrain.db``;
``:memory:`` keeps nothing), ``--ns a/b`` and ``--index-dir DIR`` (default
``$MEMBRAIN_INDEX_DIR``: ``MembrainMemory(index_dir=...)``). The teacher comes from the environment
(``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` / ``MEMBRAIN_TEACHER_MODEL``), else the offline
heuristic teacher is used; ``--offline`` forces the latter. A mistake (a missing file, a bad
namespace, a database that cannot be opened) prints one red line and exits with status 1;
``--debug`` shows the traceback instead.

Start-up: this module imports nothing heavy. ``show``, ``export`` and ``stats`` read the
database through :class:`StoredMemory` (no torch, no embedder, no LLM SDK unless ``stats``
reports an LLM teacher the environment configures); ``search`` loads the embedder (and so
torch) but not an LLM teacher; ``add``, ``import`` and ``demo`` open a full MembrainMemory.

The commands, by module: :mod:`.writing` (``add``, ``import``), :mod:`.reading` (``search``,
``show``, ``export``, ``stats``), :mod:`.history` and :mod:`.demo`; :mod:`.opening` opens
what ``--db`` names, :mod:`.stored` reads a database without a MembrainMemory. This module
parses the arguments and runs the command (:func:`main`).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Sequence

from rich.console import Console
from rich.markup import escape

from ..errors import MembrainError
from .demo import DEMO_NAMESPACE, DEMO_QUERIES, agreements, cmd_demo, load_sample_conversation, teacher_calls
from .history import cmd_history
from .opening import DEFAULT_DB, IN_MEMORY, UserError, open_memory, open_stored, redact, teacher_from_env
from .reading import EXPORT_FORMATS, cmd_export, cmd_search, cmd_show, cmd_stats, stats_rows
from .stored import CHECKPOINT_NAME, StoredMemory
from .writing import cmd_add, cmd_import, facts_per_second, import_seconds, read_records

# What ``langchain_membrain.cli`` offers: its own names and those of its modules.
__all__ = [
    "CHECKPOINT_NAME", "COMMANDS", "DEFAULT_DB", "DEMO_NAMESPACE", "DEMO_QUERIES", "EXPORT_FORMATS", "IN_MEMORY",
    "StoredMemory", "UserError", "agreements", "build_parser", "cmd_add", "cmd_bench", "cmd_demo", "cmd_export",
    "cmd_history", "cmd_import", "cmd_search", "cmd_show", "cmd_stats", "facts_per_second", "import_seconds",
    "load_sample_conversation", "main", "open_memory", "open_stored", "read_records", "redact", "stats_rows",
    "teacher_calls", "teacher_from_env",
]


def cmd_bench(argv: list[str]) -> int:
    """``membrain bench ...``: the benchmark dispatcher."""
    from ..bench.__main__ import main as bench_main

    return bench_main(argv)


def _common(parser: argparse.ArgumentParser, suppress: bool) -> None:
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument("--db", metavar="PATH_OR_URL", default=default,
                        help=f"SQLite file or postgresql:// URL (default $MEMBRAIN_DB or {DEFAULT_DB}; "
                             f"'{IN_MEMORY}' keeps nothing; demo: in memory)")
    parser.add_argument("--ns", metavar="A/B", default=default, help="namespace, e.g. users/maya")
    parser.add_argument("--index-dir", metavar="DIR", default=default,
                        help="where large namespaces' search indexes and trees are saved for the next run "
                             "(default $MEMBRAIN_INDEX_DIR; else beside a SQLite file, none for PostgreSQL)")
    parser.add_argument("--offline", action="store_true", default=argparse.SUPPRESS if suppress else False,
                        help="use the offline heuristic teacher even if OPENAI_* is set")
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS if suppress else False,
                        help="show tracebacks")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``membrain`` (options may come before or after the command)."""
    parser = argparse.ArgumentParser(prog="membrain", description="Tree-shaped long-term memory for agents.",
                                     epilog="Run 'membrain demo' for a one-minute offline tour.")
    _common(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        _common(p, suppress=True)
        return p

    add("demo", "offline tour: ingest a sample conversation, watch the tree grow, search it")
    p = add("add", "store one memory")
    p.add_argument("text")
    p.add_argument("--meta", action="append", metavar="KEY=VALUE", help="metadata (repeatable; JSON values)")
    p.add_argument("--key", help="key of the memory (default: generated)")
    p = add("import", "bulk-load a file of JSON lines ({\"text\": ..., \"metadata\": {...}}) or text lines")
    p.add_argument("file", help="the file ('-' for standard input)")
    p.add_argument("--batch-size", type=int, default=64, help="memories per add_many call (default 64)")
    p = add("search", "find memories by meaning")
    p.add_argument("query")
    p.add_argument("-k", type=int, default=5, help="number of results (default 5)")
    p = add("show", "print the tree: aspects with fact counts, facts shortened")
    p.add_argument("--depth", type=int, default=None, help="aspect levels to show (default all)")
    p.add_argument("--facts", type=int, default=5, help="facts shown per aspect (default 5, -1 for all)")
    p.add_argument("--width", type=int, default=72, help="characters per fact (default 72)")
    p = add("export", "write the trees of --ns (default: every namespace) as JSON, Mermaid or a self-contained "
                      "HTML page")
    p.add_argument("--format", "-f", choices=EXPORT_FORMATS, default="json")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE (default standard output)")
    p.add_argument("--title", help="HTML page title")
    p.add_argument("--max-label", type=int, default=40, help="Mermaid label length (default 40)")
    p.add_argument("--no-embeddings", action="store_true", help="JSON without the embedding vectors")
    p = add("history", "versions of a memory: superseded and deleted ones (memory operations)")
    p.add_argument("key", nargs="?", help="the memory's key (default: every superseded or deleted memory)")
    p.add_argument("--ignored", action="store_true", help="the log of items judged not to be memories")
    p.add_argument("--purge", action="store_true",
                   help="forget those entries for good (the versions, or with --ignored the log), never current "
                        "memories")
    p.add_argument("--before", metavar="DATE", help="with --purge: only entries archived before DATE (ISO, local time)")
    p = add("stats", "facts, aspects, depth, teacher calls and agreement")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    sub.add_parser("bench", help="benchmarks (membrain bench --help)", add_help=False)
    return parser


COMMANDS = {"demo": cmd_demo, "add": cmd_add, "import": cmd_import, "search": cmd_search,
            "show": cmd_show, "export": cmd_export, "stats": cmd_stats, "history": cmd_history}


def _bench_args(argv: list[str]) -> list[str] | None:
    """The arguments after ``bench`` when it is the command, else None."""
    takes_value = {"--db", "--ns", "--index-dir"}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "bench":
            return argv[i + 1:]
        if a in takes_value:
            i += 2
            continue
        if not a.startswith("-"):
            return None
        i += 1
    return None


def main(argv: Sequence[str] | None = None, *, memory: Any = None) -> int:
    """Run ``membrain`` with ``argv`` (default ``sys.argv[1:]``); returns the exit status.

    ``memory``: an open MembrainMemory to run against instead of opening ``--db`` (for
    programs that embed the CLI, and tests); it is flushed but not closed.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    # The embedder's loading bars would break the rich output; real errors still show.
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    bench = _bench_args(argv)
    if bench is not None:
        return cmd_bench(bench)
    args = build_parser().parse_args(argv)
    args.memory = memory
    console = Console(highlight=False)
    errors = Console(stderr=True, highlight=False)
    try:
        return COMMANDS[args.command](args, console)
    except KeyboardInterrupt:
        errors.print("[red]membrain: interrupted[/]", soft_wrap=True)
        return 130
    except (UserError, MembrainError, OSError) as exc:
        if args.debug:
            raise
        message = str(exc) if not isinstance(exc, OSError) or not exc.filename else \
            f"{exc.strerror or exc}: {exc.filename}"
        errors.print(f"[bold red]membrain: error:[/] [red]{escape(' '.join(message.split()))}[/]", soft_wrap=True)
        return 1
