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
``:memory:`` keeps nothing) and ``--ns a/b``. The teacher comes from the environment
(``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` / ``MEMBRAIN_TEACHER_MODEL``), else the offline
heuristic teacher is used; ``--offline`` forces the latter. A mistake (a missing file, a bad
namespace, a database that cannot be opened) prints one red line and exits with status 1;
``--debug`` shows the traceback instead.

Start-up: this module imports nothing heavy. ``show``, ``export`` and ``stats`` read the
database through :class:`StoredMemory` (no torch, no embedder, no LLM SDK unless ``stats``
reports an LLM teacher the environment configures); ``search`` loads the embedder (and so
torch) but not an LLM teacher; ``add``, ``import`` and ``demo`` open a full MembrainMemory.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import sys
import time
from collections.abc import Mapping
from contextlib import contextmanager
from importlib import resources
from itertools import groupby
from pathlib import Path
from typing import Any, Iterator, Sequence

from rich.console import Console, JustifyMethod
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
from rich.table import Table
from rich.text import Text

from .errors import InvalidOperationError, MembrainError
from .stats import Counters, ForestStats, MemoryStats, read_stored

DEFAULT_DB = "./membrain.db"
IN_MEMORY = ":memory:"
DEMO_NAMESPACE = "demo/maya"
EXPORT_FORMATS = ("json", "mermaid", "html")


class UserError(Exception):
    """A mistake of the person at the keyboard: reported in one line, no traceback."""


# --------------------------------------------------------------------- helpers
def _namespace(ns: str | None) -> tuple[str, ...] | None:
    """Validate ``--ns`` early, so a bad one fails before any model is loaded."""
    if ns is None:
        return None
    from .inputs import as_namespace  # not via .memory, which imports torch

    return as_namespace(ns)


def _ns_str(ns: Sequence[str]) -> str:
    return "/".join(ns)


def _storage(db: str | None) -> str | None:
    """``--db`` as MembrainMemory's ``storage`` argument (None: in memory only)."""
    if db is None or db == IN_MEMORY:
        return None
    if "://" not in db:
        parent = Path(db).expanduser().resolve().parent
        if not parent.is_dir():
            raise UserError(f"cannot create the database {db!r}: directory {str(parent)!r} does not exist")
        if Path(db).is_dir():
            raise UserError(f"--db {db!r} is a directory; give a file name such as {db.rstrip('/')}/membrain.db")
    return db


def redact(db: str) -> str:
    """``db`` with any password in a URL replaced by ``***`` (safe to print)."""
    return re.sub(r"(://[^:/@]+):[^@/]*@", r"\1:***@", db)


def teacher_from_env(offline: bool = False) -> tuple[Any, str]:
    """The teacher the environment asks for, and a one-line description of it.

    ``teachers.resolve.resolve_teacher(env=os.environ)``, the resolver MembrainMemory uses
    too: with ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set (and the OpenAI teacher
    available), an :class:`~langchain_membrain.teachers.openai_teacher.OpenAITeacher` on that
    endpoint; otherwise ``None``, which MembrainMemory reads as its offline default.
    """
    from .teachers.resolve import describe_teacher, env_wants_llm

    if offline or not env_wants_llm(os.environ):
        return None, "offline heuristic teacher"
    if importlib.util.find_spec("langchain_membrain.teachers.openai_teacher") is None:
        return None, "offline heuristic teacher (this build has no OpenAI teacher)"
    from .errors import TeacherError
    from .teachers.resolve import resolve_teacher

    try:
        teacher = resolve_teacher(None, env=os.environ)
    except TeacherError as exc:
        raise UserError(f"{exc} (or pass --offline to use the heuristic teacher)") from None
    return teacher, describe_teacher(teacher, os.environ)


def _database(args: argparse.Namespace, default_db: str | None, must_exist: bool) -> tuple[str | None, str | None]:
    """(``--db`` as given or defaulted, the storage argument it names)."""
    db = args.db if args.db is not None else (os.environ.get("MEMBRAIN_DB") or default_db)
    storage = _storage(db)
    if must_exist and storage is not None and "://" not in storage and not Path(storage).exists():
        raise UserError(f"no memory at {storage} yet: add some with 'membrain add TEXT' or "
                        "'membrain import FILE', or pass --db")
    return db, storage


@contextmanager
def _opening(args: argparse.Namespace, db: str | None) -> Iterator[None]:
    """A driver's own error (sqlite3, psycopg...) while opening the user's database: one line."""
    try:
        yield
    except (MembrainError, OSError):
        raise
    except Exception as exc:
        if args.debug:
            raise
        raise UserError(f"cannot open the memory at {redact(str(db))}: {type(exc).__name__}: "
                        f"{redact(str(exc))}") from None


def _given(args: argparse.Namespace) -> Any:
    """``main(argv, memory=...)``: the open memory the caller owns, or None."""
    given = getattr(args, "memory", None)
    if given is not None:
        teacher = getattr(given, "teacher", None)
        args.teacher_label = "offline heuristic teacher" if teacher is None else type(teacher).__name__
    return given


@contextmanager
def open_memory(args: argparse.Namespace, *, default_db: str | None = DEFAULT_DB,
                must_exist: bool = False, teacher: bool = True, retrieval: Any = None) -> Iterator[Any]:
    """Open the MembrainMemory that ``--db`` names, with the environment's teacher.

    ``must_exist``: a read command; a database file that is not there is a mistake (and
    is not created empty). ``teacher=False``: a command that never asks the teacher
    (search): the offline default is used, and no LLM SDK is loaded. ``retrieval``: its
    ``RetrievalConfig`` (None: the default)."""
    given = _given(args)
    if given is not None:  # main(argv, memory=...): an open memory the caller owns
        yield given
        given.flush()
        return
    db, storage = _database(args, default_db, must_exist)
    if teacher:
        chosen, args.teacher_label = teacher_from_env(args.offline)
    else:
        chosen, args.teacher_label = None, "none (not asked by this command)"
    from .memory import MembrainMemory  # torch and the insert pipeline: only for these commands

    with _opening(args, db):
        memory = MembrainMemory(storage, teacher=chosen, retrieval=retrieval)
    with memory:
        yield memory


# As in memory.py (a test checks both); not imported from there, which loads torch.
CHECKPOINT_NAME = "models"
class StoredMemory:
    """A database read without a MembrainMemory: its namespaces, their trees, and the
    counters of the last saved model checkpoint. Loads no model, no embedder, no torch:
    what ``membrain show``, ``export`` and ``stats`` need, at a fraction of the start-up.

    ``stats()`` reports what ``MembrainMemory.stats()`` reports in a process that has not
    inserted yet: the forest's counts and the saved checkpoint's counters (teacher calls,
    agreement per stage, stored counters), this process's counters all zero."""

    def __init__(self, storage: str | None):
        from .storage import open_storage

        self._storage = open_storage(storage) if storage is not None else None
        self._trees: dict[tuple[str, ...], Any] = {}

    def namespaces(self) -> list[tuple[str, ...]]:
        return sorted(tuple(ns) for ns in self._storage.list_namespaces()) if self._storage is not None else []

    def tree(self, namespace: Any = None) -> Any:
        from .inputs import as_namespace

        ns = as_namespace(namespace)
        if ns not in self._trees:
            loaded = self._storage.load_tree(ns) if self._storage is not None else None
            if loaded is None:
                raise InvalidOperationError(f"no memories in namespace {ns!r}")
            self._trees[ns] = loaded[0]
        return self._trees[ns]

    def stats(self) -> MemoryStats:
        names = self.namespaces()
        trees = []
        for ns in names:
            try:
                trees.append(self.tree(ns))
            except InvalidOperationError:  # deleted since it was listed
                continue
        stored, learning = read_stored(self._storage, CHECKPOINT_NAME) if self._storage is not None else (None, None)
        return MemoryStats(ForestStats.of(trees, namespaces=len(names)), process=Counters(), stored=stored,
                           learning=learning, loaded_namespaces=len(self._trees))

    def flush(self) -> None:
        """Nothing to write: the view only reads."""

    def close(self) -> None:
        if self._storage is not None:
            self._storage.close()

    def __enter__(self) -> "StoredMemory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def open_stored(args: argparse.Namespace, *, teacher: bool = False) -> Iterator[Any]:
    """The database ``--db`` names, for a command that only reads trees and counters
    (:class:`StoredMemory`; the given memory under ``main(argv, memory=...)``). It must exist.
    ``teacher``: describe the environment's teacher in ``args.teacher_label`` (stats)."""
    given = _given(args)
    if given is not None:
        yield given
        given.flush()
        return
    db, storage = _database(args, DEFAULT_DB, must_exist=True)
    if teacher:
        args.teacher_label = teacher_from_env(args.offline)[1]
    with _opening(args, db):
        stored = StoredMemory(storage)
    with stored:
        yield stored


def _stats(memory: Any) -> Mapping[str, Any]:
    try:
        stats = memory.stats()
    except Exception:  # stats are informative only
        return {}
    return stats if isinstance(stats, Mapping) else {}


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


def _pick_namespaces(memory: Any, ns: tuple[str, ...] | None) -> list[tuple[str, ...]]:
    """The namespaces a read command covers: ``--ns`` and those below it, or all of them."""
    spaces = [tuple(s) for s in memory.namespaces()]
    spaces = [s for s in spaces if memory.tree(s).fact_count(memory.tree(s).root_id) > 0]
    if ns is None:
        return spaces
    chosen = [s for s in spaces if s[: len(ns)] == ns]
    if not chosen:
        known = ", ".join(_ns_str(s) for s in spaces) or "none yet"
        raise UserError(f"no memories in namespace {_ns_str(ns)!r} (namespaces: {known})")
    return chosen


# ---------------------------------------------------------------- read files
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


def _warm_up(memory: Any) -> None:
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


# ------------------------------------------------------------------ commands
def cmd_add(args: argparse.Namespace, console: Console) -> int:
    """``membrain add TEXT``: store one memory and say where it went."""
    ns = _namespace(args.ns)
    meta = _parse_meta(args.meta)
    with open_memory(args) as memory:
        before = _without_teacher(memory)
        key = memory.add(args.text, namespace=ns, metadata=meta, key=args.key)
        untaught = before is not None and (_without_teacher(memory) or 0) > before
        memory.flush()
        record = memory.get(key, namespace=ns)
        path = " › ".join(record.path) if record is not None and record.path else "(top level)"
        console.print(f"[green]✓[/] stored [bold]{escape(key)}[/] in [bold]{escape(_ns_str(record.namespace))}[/]"
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
    ns = _namespace(args.ns)
    records = read_records(args.file)
    if not records:
        console.print(f"[yellow]{escape(args.file)} holds no memories; nothing imported[/]")
        return 0
    batch = max(1, args.batch_size)
    with open_memory(args) as memory:
        console.print(f"[dim]{escape(args.teacher_label)}; loading the embedder…[/]")
        _warm_up(memory)
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
        target = _ns_str(ns) if ns else "memories"
        rate = facts_per_second(len(records), took)
        console.print(f"[green]✓[/] imported {len(records)} memories into [bold]{escape(target)}[/] "
                      f"in {took:.1f} s ({'?' if rate is None else f'{rate:.1f}'} facts/s)")
        console.print(f"[dim]the background training caught up {training:.1f} s later[/]")
    return 0


def cmd_search(args: argparse.Namespace, console: Console) -> int:
    """``membrain search QUERY``: the best matches with their paths in the tree."""
    ns = _namespace(args.ns)
    if args.k < 1:
        raise UserError("-k must be at least 1")
    with open_memory(args, must_exist=True, teacher=False) as memory:
        if ns is not None:
            _pick_namespaces(memory, ns)  # an unknown namespace is a mistake, not "no results"
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
                row.append(escape(_ns_str(r.namespace)))
            table.add_row(*row)
        console.print(table)
    return 0


def cmd_show(args: argparse.Namespace, console: Console) -> int:
    """``membrain show``: the tree of each namespace as a rich tree."""
    from .export import tree_to_rich  # the tree module (numpy, networkx): not for --help

    ns = _namespace(args.ns)
    if args.depth is not None and args.depth < 0:
        raise UserError("--depth must be 0 or more")
    with open_stored(args) as memory:
        spaces = _pick_namespaces(memory, ns)
        if not spaces:
            console.print("[yellow]the memory is empty[/]: add something with [bold]membrain add TEXT[/]")
            return 0
        for s in spaces:
            tree = memory.tree(s)
            console.print(tree_to_rich(tree, depth=args.depth, max_facts=None if args.facts < 0 else args.facts,
                                    width=args.width, title=_ns_str(s)))
    return 0


def cmd_export(args: argparse.Namespace, console: Console) -> int:
    """``membrain export``: the tree of ``--ns`` (or, when it names none itself, of every
    namespace below it; without ``--ns``, of every namespace, as ``show`` prints them) as
    JSON, Mermaid or HTML. One namespace: its tree (JSON: the tree's own format). Several:
    one document holding each (JSON ``{"namespaces": [{"namespace": [...], "tree": ...}]}``,
    one Mermaid flowchart, one HTML page)."""
    from .export import (forest_to_html, forest_to_json, forest_to_mermaid, tree_to_html, tree_to_json,
                         tree_to_mermaid)

    ns = _namespace(args.ns)
    if args.output and Path(args.output).parent != Path("") and not Path(args.output).parent.is_dir():
        raise UserError(f"directory {str(Path(args.output).parent)!r} does not exist")
    with open_stored(args) as memory:
        chosen = _pick_namespaces(memory, ns)
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
                text = tree_to_html(tree, title=args.title or f"membrain: {_ns_str(chosen[0])}")
        elif args.format == "json":
            text = json.dumps(forest_to_json(list(zip(chosen, trees)), embeddings=embeddings),
                              ensure_ascii=False) + "\n"
        elif args.format == "mermaid":
            text = forest_to_mermaid(trees, args.max_label)
        else:
            text = forest_to_html(trees, title=args.title or f"membrain: {_ns_str(ns) if ns else 'every namespace'}")
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        n = sum(t.fact_count(t.root_id) for t in trees)
        where = _ns_str(chosen[0]) if len(chosen) == 1 else f"{len(chosen)} namespaces"
        console.print(f"[green]✓[/] wrote {escape(args.output)} ({args.format}, {n} facts from {escape(where)})")
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0


def _versions(tree: Any, key: str | None) -> list[tuple[str, Any]]:
    """(status, node) of the archived versions of ``key`` (every archived fact when None),
    oldest first, then the current fact ``key`` when it is in the tree."""
    from .tree import HISTORY_KEY

    if key is not None and key in tree.archive:  # an archived entry's own id: its fact's key
        key = tree.archive[key].metadata.get(HISTORY_KEY, {}).get("key", key)
    entries = tree.history(key) if key is not None else tree.archived("history")
    out = [("superseded" if e.metadata.get(HISTORY_KEY, {}).get("operation") == "update" else "deleted", e)
           for e in entries]
    if key is not None and key in tree and tree.node(key).kind == "fact":
        out.append(("current", tree.node(key)))
    return out


def cmd_history(args: argparse.Namespace, console: Console) -> int:
    """``membrain history [KEY]``: the versions of a memory (superseded, deleted, current),
    or every superseded and deleted memory of the namespace(s); ``--ignored``: the log of
    items that were not memories."""
    from .tree import HISTORY_KEY, VALID_FROM_KEY

    ns = _namespace(args.ns)
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
            table = Table(title=f"{'ignored' if args.ignored else 'history'}: {_ns_str(s)}", title_justify="left")
            for col, style in (("status", "bold"), ("memory", None), ("valid from", "dim"), ("valid to", "dim"),
                               ("superseded by", "cyan"), ("key", "dim")):
                table.add_column(col, style=style)
            from .export import _fmt_time

            for status, node in rows:
                h = node.metadata.get(HISTORY_KEY, {})
                start = h.get("valid_from", node.metadata.get(VALID_FROM_KEY, node.created_at))
                text = escape(node.text) if status == "current" else f"[strike]{escape(node.text)}[/]"
                if status == "ignored":
                    text = escape(node.text)
                table.add_row(status, text, _fmt_time(start), _fmt_time(h.get("valid_to")),
                              escape(str(h.get("superseded_by") or "")), escape(node.id))
            console.print(table)
            shown += len(rows)
        if not shown:
            what = "no ignored items" if args.ignored else (
                f"no memory {args.key!r}" if args.key else "no superseded or deleted memories")
            console.print(f"[yellow]{escape(what)}[/]")
            return 1 if args.key and not args.ignored else 0
    return 0


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


def cmd_stats(args: argparse.Namespace, console: Console) -> int:
    """``membrain stats``: facts, aspects and depth per namespace, and the memory's counters."""
    ns = _namespace(args.ns)
    with open_stored(args, teacher=True) as memory:
        spaces = _pick_namespaces(memory, ns)
        per_ns = []
        for s in spaces:
            t = memory.tree(s)
            per_ns.append({"namespace": _ns_str(s), "facts": t.fact_count(t.root_id),
                           "aspects": len(t.aspects()), "depth": t.height()})
        stats = _stats(memory)
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


def cmd_bench(argv: list[str]) -> int:
    """``membrain bench ...``: the benchmark dispatcher."""
    from .bench.__main__ import main as bench_main

    return bench_main(argv)


# ---------------------------------------------------------------------- demo
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
    from .export import tree_to_rich

    ns = _namespace(args.ns) or _namespace(DEMO_NAMESPACE)
    assert ns is not None  # DEMO_NAMESPACE is a namespace
    turns = [t for t in load_sample_conversation() if t["speaker"] == "user"]
    sessions = [(s, list(g)) for s, g in groupby(turns, key=lambda t: t["session"])]
    console.rule("[bold]membrain demo")
    console.print(f"Maya told her assistant {len(turns)} things over {len(sessions)} sessions. "
                  f"membrain files each one into a tree for [bold]{escape(_ns_str(ns))}[/].")
    args.offline = True  # the demo never calls an LLM: it shows the offline models learning
    from .retrieval import RetrievalConfig

    # The sample is a chat: its turns' speaker, session and date are for the chat scorers.
    with open_memory(args, default_db=None, retrieval=RetrievalConfig.for_chat()) as memory:
        console.print(f"[dim]{escape(args.teacher_label)}; loading the embedder…[/]")
        _warm_up(memory)
        rates: list[tuple[int, float | None]] = []
        start = time.perf_counter()
        for idx, (session, group) in enumerate(sessions):
            before = _stats(memory)
            memory.add_many([t["text"] for t in group], namespace=ns,
                            metadatas=[{"speaker": t["speaker"], "session": t["session"], "date": t["date"]}
                                       for t in group])
            memory.flush()
            rate = _teacher_rate(before, _stats(memory), len(group))
            rates.append((session, rate))
            tree = memory.tree(ns)
            n_aspects = len(tree.aspects())
            asked = "" if rate is None else f" · teacher asked [bold]{rate:.2f}[/] per fact"
            console.print(f"\n[bold]session {session}[/] [dim]({group[0]['date']})[/] +{len(group)} → "
                          f"{tree.fact_count(tree.root_id)} facts, {n_aspects} aspect{'s' if n_aspects != 1 else ''}, "
                          f"depth {tree.height()}{asked}", overflow="ellipsis", no_wrap=True)
            if idx in (0, len(sessions) // 2):
                console.print(tree_to_rich(tree, depth=2, max_facts=2, width=60, title=_ns_str(ns)))
        took = time.perf_counter() - start
        console.print()
        console.rule(f"[bold]the tree after {len(turns)} facts[/] [dim]({took:.1f} s)")
        console.print(tree_to_rich(memory.tree(ns), depth=None, max_facts=3, width=64, title=_ns_str(ns)))
        console.print()
        _print_teacher_rates(console, rates, _stats(memory))
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


# -------------------------------------------------------------------- parser
def _common(parser: argparse.ArgumentParser, suppress: bool) -> None:
    default = argparse.SUPPRESS if suppress else None
    parser.add_argument("--db", metavar="PATH_OR_URL", default=default,
                        help=f"SQLite file or postgresql:// URL (default $MEMBRAIN_DB or {DEFAULT_DB}; "
                             f"'{IN_MEMORY}' keeps nothing; demo: in memory)")
    parser.add_argument("--ns", metavar="A/B", default=default, help="namespace, e.g. users/maya")
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
    takes_value = {"--db", "--ns"}
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


if __name__ == "__main__":
    sys.exit(main())
