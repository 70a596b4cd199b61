"""Cold start: each command run as a fresh process, several times (median, min, max).

Times ``python -c "import langchain_membrain"``, ``membrain --help``, ``membrain stats``,
``membrain show``, ``membrain search`` and ``membrain add`` on a SQLite store of ``--facts`` facts that it
builds first in a temporary directory (``membrain X`` is run as ``python -m
langchain_membrain.cli X``, which is what the console script does), then ``membrain add``
into a new database each run (a newcomer's first add), plus ``import torch`` alone for
reference. ``--pythonpath DIR`` runs everything (the store's build included)
against another checkout, e.g. a ``git worktree`` of an older commit, for a before/after.

    python -m langchain_membrain.bench startup [--runs 5] [--facts 1000] [--pythonpath DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import machine_description

# Builds the store in a child process (so that --pythonpath builds it with that code):
# FACTS varied facts in a few namespaces, through MembrainMemory with its default embedder
# and teacher, closed so that the model checkpoint is saved.
_BUILD = r"""
import sys
from langchain_membrain.memory import MembrainMemory
db, n = sys.argv[1], int(sys.argv[2])
people = ["Maya", "Tom", "Ines", "Ravi", "Lena", "Omar", "Kai", "Sofia"]
things = [
    "is allergic to peanuts", "plays the piano on Sundays", "climbs at a bouldering gym",
    "is learning Japanese", "works on the database migration", "ran a half marathon in April",
    "prefers tea to coffee", "has a dog called Biscuit", "visited Lisbon last summer",
    "reads science fiction before bed", "had knee surgery in March", "volunteers at the food bank",
    "is vegetarian", "plays chess online", "moved to Manchester", "bakes sourdough bread",
]
details = ["", " with friends", " every week", " since 2019", " for work", " on weekends", " with family"]
facts = [f"{people[i % len(people)]} {things[(i // len(people)) % len(things)]}"
         f"{details[(i // 7) % len(details)]} (note {i})" for i in range(n)]
spaces = ["users/maya", "users/tom", "team/notes"]
with MembrainMemory(db) as memory:
    for k, ns in enumerate(spaces):
        memory.add_many(facts[k::len(spaces)], namespace=ns)
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs", type=int, default=5, help="timed runs per command (default 5)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs first, to warm the file cache")
    parser.add_argument("--facts", type=int, default=1000, help="facts in the store (default 1000)")
    parser.add_argument("--pythonpath", metavar="DIR",
                        help="put DIR first on the children's PYTHONPATH (another checkout of the package)")
    parser.add_argument("--db", help="time against this existing store instead of building one")
    parser.add_argument("--json", help="write the results here")


def _env(pythonpath: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMBRAIN_DB")}
    env["HF_HUB_OFFLINE"] = "1"
    env["COLUMNS"] = "100"
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH")) if p)
    return env


# ``membrain --db <a new directory>/m.db add ...``, as the console script runs it; the new
# directory lies in the working directory (the bench's temporary one, removed after).
_FIRST_ADD = ("import os, runpy, sys, tempfile; "
              "sys.argv = ['membrain', '--db', os.path.join(tempfile.mkdtemp(dir='.'), 'm.db'), 'add', 'I live in Lisbon']; "
              "runpy.run_module('langchain_membrain.cli', run_name='__main__')")


def _time(argv: list[str], env: dict[str, str], cwd: str, runs: int, warmup: int) -> list[float]:
    times = []
    for i in range(warmup + runs):
        start = time.perf_counter()
        proc = subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        took = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[1:])} exited with {proc.returncode}: {proc.stderr.strip()[-2000:]}")
        if i >= warmup:
            times.append(took)
    return times


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    env = _env(args.pythonpath)
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="membrain-startup-") as tmp:
        db = args.db
        build_s = None
        if db is None:
            db = str(Path(tmp) / "bench.db")
            console.print(f"[dim]building a {args.facts}-fact SQLite store in {tmp}…[/]")
            start = time.perf_counter()
            proc = subprocess.run([py, "-c", _BUILD, db, str(args.facts)], env=env, cwd=tmp,
                                  capture_output=True, text=True)
            build_s = time.perf_counter() - start
            if proc.returncode != 0:
                console.print(f"[red]building the store failed ({proc.returncode}):[/]\n{proc.stderr[-3000:]}")
                return 1
        cli = [py, "-m", "langchain_membrain.cli"]
        commands = [
            ("python -c 'import torch' (reference)", [py, "-c", "import torch"]),
            ("python -c 'import langchain_membrain'", [py, "-c", "import langchain_membrain"]),
            ("membrain --help", [*cli, "--help"]),
            ("membrain stats", [*cli, "--db", db, "stats"]),
            ("membrain show", [*cli, "--db", db, "show"]),
            ("membrain search", [*cli, "--db", db, "search", "who is allergic to peanuts?", "-k", "3"]),
            # One more fact per run (the store grows by warm-up + runs facts).
            ("membrain add", [*cli, "--db", db, "add", "Maya adopted a cat named Pixel", "--ns", "users/maya"]),
            # The first add of a newcomer: a new database each run, started from the shipped priors.
            ("membrain add, a new database", [py, "-c", _FIRST_ADD]),
        ]
        results = {}
        for label, argv in commands:
            console.print(f"[dim]timing {label}…[/]")
            try:
                times = _time(argv, env, tmp, max(args.runs, 1), max(args.warmup, 0))
            except RuntimeError as exc:
                console.print(f"[red]{exc}[/]")
                return 1
            results[label] = {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times),
                              "runs": times}
    machine: dict[str, Any] = {
        "description": machine_description(), "cpu_count": os.cpu_count(), "platform": platform.platform(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
    source = args.pythonpath or str(Path(__file__).resolve().parents[2])
    table = Table(title=f"Cold start, fresh process per run ({args.runs} runs after {args.warmup} warm-up; "
                        f"store: {'given' if args.db else f'{args.facts} facts, SQLite'})", title_justify="left")
    for col in ("command", "median s", "min s", "max s"):
        table.add_column(col, justify="left" if col == "command" else "right")
    for label, r in results.items():
        table.add_row(label, f"{r['median_s']:.2f}", f"{r['min_s']:.2f}", f"{r['max_s']:.2f}")
    console.print(table)
    console.print(f"code: {source}")
    console.print(f"machine: {machine['description']}; {platform.platform()}; os.cpu_count()={os.cpu_count()}"
                  + (f"; load average {machine['load_average'][0]:.2f}" if machine["load_average"] else ""))
    if build_s is not None:
        console.print(f"[dim]store built in {build_s:.1f} s[/]")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine, "code": source, "facts": args.facts,
                                               "results": results}, indent=2))
    return 0
