"""Opening what ``--db`` names, for a command: a MembrainMemory with the environment's
teacher (:func:`open_memory`) or, for the commands that only read, a :class:`~.stored.StoredMemory`
(:func:`open_stored`); ``--ns`` checked early; a mistake of the person at the keyboard
(:class:`UserError`) reported in one line."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from ..errors import MembrainError
from .stored import StoredMemory

DEFAULT_DB = "./membrain.db"
IN_MEMORY = ":memory:"


class UserError(Exception):
    """A mistake of the person at the keyboard: reported in one line, no traceback."""


def parse_namespace(ns: str | None) -> tuple[str, ...] | None:
    """Validate ``--ns`` early, so a bad one fails before any model is loaded."""
    if ns is None:
        return None
    from ..tree.inputs import as_namespace  # not via .memory, which imports torch

    return as_namespace(ns)


def namespace_str(ns: Sequence[str]) -> str:
    """A namespace as the commands print it: ``users/maya``."""
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
    from ..teachers.resolve import describe_teacher, env_wants_llm

    if offline or not env_wants_llm(os.environ):
        return None, "offline heuristic teacher"
    if importlib.util.find_spec("langchain_membrain.teachers.openai_teacher") is None:
        return None, "offline heuristic teacher (this build has no OpenAI teacher)"
    from ..errors import TeacherError
    from ..teachers.resolve import resolve_teacher

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
    ``RetrievalConfig`` (None: the default). A command that fails leaves no new database
    file: one this command created is removed when it holds no memory."""
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
    from ..memory import MembrainMemory  # torch and the insert pipeline: only for these commands

    index_dir = getattr(args, "index_dir", None) or os.environ.get("MEMBRAIN_INDEX_DIR") or None
    created = _new_file(storage)
    discard = False
    try:
        with _opening(args, db):
            discard = created is not None
            memory = MembrainMemory(storage, teacher=chosen, retrieval=retrieval, index_dir=index_dir)
        with memory:
            try:
                yield memory
            except BaseException:
                discard = discard and _holds_nothing(memory)
                raise
            discard = False
    finally:
        if discard and created is not None:
            _remove_database(created)


def _new_file(storage: str | None) -> Path | None:
    """The SQLite file ``storage`` names when it does not exist yet (so this command would
    create it), else None (in memory, a URL, or a file already there)."""
    if storage is None or "://" in storage:
        return None
    path = Path(storage).expanduser()
    return None if path.exists() else path


def _holds_nothing(memory: Any) -> bool:
    """Whether ``memory`` holds no namespace (False when that cannot be told: the file is kept)."""
    try:
        return not list(memory.namespaces())
    except Exception:  # noqa: BLE001 - unsure: keep the file
        return False


def _remove_database(path: Path) -> None:
    """Remove a SQLite file a failed command created, with its journal files."""
    for name in (path.name, f"{path.name}-wal", f"{path.name}-shm", f"{path.name}-journal"):
        path.with_name(name).unlink(missing_ok=True)


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


def stats_of(memory: Any) -> Mapping[str, Any]:
    """``memory.stats()``, or an empty mapping where it fails or is not a mapping."""
    try:
        stats = memory.stats()
    except Exception:  # stats are informative only
        return {}
    return stats if isinstance(stats, Mapping) else {}


def pick_namespaces(memory: Any, ns: tuple[str, ...] | None) -> list[tuple[str, ...]]:
    """The namespaces a read command covers: ``--ns`` and those below it, or all of them."""
    spaces = [tuple(s) for s in memory.namespaces()]
    spaces = [s for s in spaces if memory.tree(s).fact_count(memory.tree(s).root_id) > 0]
    if ns is None:
        return spaces
    chosen = [s for s in spaces if s[: len(ns)] == ns]
    if not chosen:
        known = ", ".join(namespace_str(s) for s in spaces) or "none yet"
        raise UserError(f"no memories in namespace {namespace_str(ns)!r} (namespaces: {known})")
    return chosen
