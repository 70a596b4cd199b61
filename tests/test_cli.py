"""The ``membrain`` command line, through ``main(argv)`` and (for tracebacks) a subprocess.

Most tests run the CLI against an open MembrainMemory with a tiny deterministic embedder
(``main(argv, memory=...)``), so that they do not depend on persistence; the ones that
reopen a ``--db`` file run against a real SQLite file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings

from langchain_membrain.cli import main, read_records
from langchain_membrain.memory import MembrainMemory
from langchain_membrain.tree.tree import MembrainTree

REPO = Path(__file__).resolve().parents[1]


class WordHashEmbeddings(Embeddings):
    """Deterministic bag-of-words vectors: texts sharing words are similar."""

    dim = 64

    def _one(self, text: str) -> list[float]:
        v = np.zeros(self.dim, dtype=np.float32)
        for word in re.findall(r"[a-z0-9]+", text.lower()):
            h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little")
            v[h % self.dim] += 1.0
        v[0] += 0.01
        return (v / np.linalg.norm(v)).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._one(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._one(text)


@pytest.fixture
def memory():
    with MembrainMemory(embeddings=WordHashEmbeddings()) as mem:
        yield mem


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    path = tmp_path / "notes.jsonl"
    lines = [
        json.dumps({"text": "Maya is allergic to peanuts", "metadata": {"source": "chat"}}),
        json.dumps({"text": "Maya climbs at a bouldering gym on Mondays", "session": 2}),
        "",
        "Tom plays football at school",
        json.dumps({"text": "The PostgreSQL migration went live in April", "key": "pg-migration"}),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run(capsys, argv, memory=None):
    code = main(argv, memory=memory)
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, out: str, err: str, *needles: str) -> None:
    assert code != 0
    assert "Traceback" not in out + err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("membrain: error:")
    for needle in needles:
        assert needle in lines[0], lines[0]


# ------------------------------------------------------------------ commands
def test_import_add_search_show_export_stats(capsys, memory, notes, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")  # rich tables: one row per line
    code, out, err = run(capsys, ["import", str(notes), "--ns", "users/maya", "--batch-size", "2"], memory)
    assert code == 0, err
    assert "imported 4 memories into users/maya" in out
    assert "facts/s" in out
    rec = memory.get("pg-migration", namespace="users/maya")
    assert rec is not None and rec.text.startswith("The PostgreSQL migration")
    hits = memory.search("peanuts", namespace="users/maya", limit=1)
    assert hits[0].value == {"content": "Maya is allergic to peanuts", "source": "chat"}
    assert memory.search("bouldering gym", namespace="users/maya", limit=1)[0].value["session"] == 2

    code, out, err = run(capsys, ["add", "Maya's sister Ines lives in Manchester", "--ns", "users/maya",
                                  "--meta", "source=cli", "--meta", "weight=3", "--key", "ines"], memory)
    assert code == 0, err
    assert "stored ines in users/maya" in out
    assert memory.get("ines", namespace="users/maya").value == {
        "content": "Maya's sister Ines lives in Manchester", "source": "cli", "weight": 3}

    code, out, err = run(capsys, ["search", "allergic to peanuts", "-k", "2"], memory)
    assert code == 0, err
    assert "Maya is allergic to peanuts" in out
    assert re.search(r"\d\.\d{3}", out)  # scores
    assert len(re.findall(r"\d\.\d{3}", out)) == 2

    code, out, err = run(capsys, ["show", "--ns", "users/maya"], memory)
    assert code == 0, err
    assert "users/maya" in out and "5 facts" in out
    assert "Tom plays football at school" in out

    code, out, err = run(capsys, ["show", "--depth", "0", "--facts", "1"], memory)
    assert code == 0, err
    assert "5 facts" in out

    html_path = tmp_path / "out" / "tree.html"
    html_path.parent.mkdir()
    code, out, err = run(capsys, ["export", "--format", "html", "-o", str(html_path)], memory)
    assert code == 0, err
    assert "wrote" in out and "5 facts" in out
    page = html_path.read_text(encoding="utf-8")
    assert "Maya is allergic to peanuts" in page and "https://" not in page

    code, out, err = run(capsys, ["export", "--format", "json", "--ns", "users/maya"], memory)
    assert code == 0, err
    tree = MembrainTree.from_dict(json.loads(out))
    assert tree.fact_count(tree.root_id) == 5

    code, out, err = run(capsys, ["export", "-f", "mermaid", "--ns", "users/maya"], memory)
    assert code == 0, err
    assert out.startswith("flowchart TD\n")

    code, out, err = run(capsys, ["stats"], memory)
    assert code == 0, err
    assert "users/maya" in out and out.count("teacher questions") == 1 and "saved inserts" not in out

    code, out, err = run(capsys, ["stats", "--json"], memory)
    assert code == 0, err
    data = json.loads(out)
    assert data["namespaces"] == [{"namespace": "users/maya", "facts": 5,
                                   "aspects": data["namespaces"][0]["aspects"],
                                   "depth": data["namespaces"][0]["depth"]}]


def test_import_plain_text_into_the_default_namespace(capsys, memory, tmp_path):
    path = tmp_path / "lines.txt"
    path.write_text("first memory\n\nsecond memory <b>bold</b>\n", encoding="utf-8")
    code, out, err = run(capsys, ["import", str(path)], memory)
    assert code == 0, err
    assert "imported 2 memories" in out
    assert sorted(r.text for r in memory.search(namespace="memories", limit=10)) == [
        "first memory", "second memory <b>bold</b>"]


def test_read_records_merges_extra_fields_into_metadata(notes):
    records = read_records(str(notes))
    assert [r["metadata"] for r in records] == [{"source": "chat"}, {"session": 2}, None, None]
    assert [r["key"] for r in records] == [None, None, None, "pg-migration"]


def test_empty_memory_is_friendly(capsys, memory):
    code, out, err = run(capsys, ["show"], memory)
    assert code == 0 and "empty" in out
    code, out, err = run(capsys, ["search", "anything"], memory)
    assert code == 0 and "no memories found" in out
    code, out, err = run(capsys, ["export", "--format", "html"], memory)
    assert_one_line_error(code, out, err, "empty")


def test_export_without_ns_exports_every_namespace_as_show_prints_them(capsys, memory, tmp_path):
    memory.add("one", namespace="a")
    memory.add("two", namespace="b/c")
    memory.add("three", namespace="b/d")
    code, out, err = run(capsys, ["export"], memory)  # used to fail: "choose one with --ns"
    assert code == 0 and err == ""
    spaces = json.loads(out)["namespaces"]
    assert [s["namespace"] for s in spaces] == [["a"], ["b", "c"], ["b", "d"]]
    texts = [[n["text"] for n in MembrainTree.from_dict(s["tree"]).to_dict()["nodes"] if n["kind"] == "fact"]
             for s in spaces]
    assert texts == [["one"], ["two"], ["three"]]
    code, out, err = run(capsys, ["export", "--ns", "b", "--no-embeddings"], memory)  # the two below b
    assert code == 0 and [s["namespace"] for s in json.loads(out)["namespaces"]] == [["b", "c"], ["b", "d"]]
    code, out, err = run(capsys, ["export", "--ns", "b/c"], memory)  # one namespace: its tree, as before
    assert code == 0 and json.loads(out)["nodes"][0]["text"] == "b/c"
    page = tmp_path / "all.html"
    code, out, err = run(capsys, ["export", "--format", "html", "-o", str(page)], memory)
    assert code == 0 and "3 facts from 3 namespaces" in out
    html = page.read_text()
    assert all(f'data-text="{t}"' in html for t in ("one", "two", "three"))
    assert html.count('<details class="root"') == 3 and "3 facts · 0 aspects · 3 namespaces" in html
    code, out, err = run(capsys, ["export", "-f", "mermaid"], memory)
    assert code == 0 and out.startswith("flowchart TD") and out.count(":::root") == 3
    assert all(f'["{t}"]:::fact' in out for t in ("one", "two", "three"))
    code, out, err = run(capsys, ["show"], memory)
    assert all(s in out for s in ("a", "b/c", "b/d"))


# ------------------------------------------------------------------ mistakes
def test_missing_file(capsys, memory, tmp_path):
    code, out, err = run(capsys, ["import", str(tmp_path / "nope.jsonl")], memory)
    assert_one_line_error(code, out, err, "file not found", "nope.jsonl")


def test_bad_json_line_names_the_line(capsys, memory, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "fine"}\n{"text": oops}\n', encoding="utf-8")
    code, out, err = run(capsys, ["import", str(path)], memory)
    assert_one_line_error(code, out, err, "line 2", "not valid JSON")
    path.write_text('{"content": "fine"}\n{"metadata": {}}\n', encoding="utf-8")
    code, out, err = run(capsys, ["import", str(path)], memory)
    assert_one_line_error(code, out, err, "line 2", '"text"')
    assert memory.namespaces() == []  # nothing half-imported


@pytest.mark.parametrize("ns", ["a//b", "/a", "a/"])
def test_bad_namespace(capsys, memory, ns):
    code, out, err = run(capsys, ["add", "hello", "--ns", ns], memory)
    assert_one_line_error(code, out, err, "namespace")


def test_unknown_namespace(capsys, memory):
    memory.add("I like green tea", namespace="users/maya")
    code, out, err = run(capsys, ["show", "--ns", "users/tom"], memory)
    assert_one_line_error(code, out, err, "users/tom", "users/maya")


def test_membrain_error_is_one_line(capsys, memory):
    code, out, err = run(capsys, ["add", "   "], memory)  # MembrainMemory refuses empty text
    assert_one_line_error(code, out, err, "empty")


def test_database_in_a_missing_directory(capsys, tmp_path):
    code, out, err = run(capsys, ["show", "--db", str(tmp_path / "no" / "such" / "dir" / "m.db")])
    assert_one_line_error(code, out, err, "does not exist")
    code, out, err = run(capsys, ["show", "--db", str(tmp_path)])
    assert_one_line_error(code, out, err, "is a directory")


def test_read_commands_do_not_create_a_database(capsys, tmp_path):
    for command in (["search", "x"], ["show"], ["export"], ["stats"]):
        code, out, err = run(capsys, [*command, "--db", str(tmp_path / "none.db")])
        assert_one_line_error(code, out, err, "no memory at")
    assert list(tmp_path.iterdir()) == []


def test_a_failing_write_command_leaves_no_new_database(capsys, tmp_path, monkeypatch):
    """Issue 56: a write command that fails before it stores anything removes the file it
    created; a database that was there already is kept."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    db = tmp_path / "new.db"
    for argv in (["add", "   "], ["add", "I keep bees", "--key", ""]):
        code, out, err = run(capsys, ["--db", str(db), "--offline", *argv])
        assert_one_line_error(code, out, err)
        assert list(tmp_path.iterdir()) == [], argv
    assert run(capsys, ["--db", str(db), "--offline", "add", "I keep bees"])[0] == 0
    code, out, err = run(capsys, ["--db", str(db), "--offline", "add", "   "])
    assert_one_line_error(code, out, err, "empty")
    code, out, err = run(capsys, ["--db", str(db), "search", "bees"])
    assert code == 0 and "I keep bees" in out, err  # the existing database is untouched


def test_add_says_when_the_text_is_not_stored(capsys, memory):
    code, out, err = run(capsys, ["add", "hello"], memory)  # judged not a memory (IGNORE)
    assert code == 0 and "not stored" in out and "--ignored" in out, out + err


def test_no_traceback_in_a_real_process(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-m", "langchain_membrain.cli", "--db", str(tmp_path / "m.db"),
                           "import", str(tmp_path / "missing.txt")],
                          capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"membrain: error: file not found: {tmp_path / 'missing.txt'}"]
    assert proc.stdout == ""


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["export", "--format", "pdf"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_bench_delegates(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--help"])
    assert exc.value.code == 0
    assert "membrain bench" in capsys.readouterr().out


# ---------------------------------------------------------------------- demo
def test_demo_runs_offline_and_leaves_no_files(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMBRAIN_DB"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    code, out, err = run(capsys, ["demo"])
    assert code == 0, err
    assert "Traceback" not in out + err
    for session in range(1, 7):
        assert f"session {session}" in out
    assert "60 facts" in out
    assert "teacher asked" in out and "teacher questions per new fact" in out  # from stats()
    assert "the models agree with the teacher" in out
    assert "allergic to peanuts" in out  # a search found it
    assert list(tmp_path.iterdir()) == []  # in memory unless --db is given


# --------------------------------------------------------------- persistence
def test_reopen_a_db_between_commands(capsys, tmp_path, notes):
    """add/import in one command, search/show/export in the next, through one --db file."""
    db = str(tmp_path / "m.db")
    assert run(capsys, ["--db", db, "--offline", "import", str(notes), "--ns", "users/maya"])[0] == 0
    code, out, err = run(capsys, ["search", "peanuts", "--db", db, "--ns", "users/maya", "-k", "1"])
    assert code == 0 and "allergic to peanuts" in out, err
    code, out, err = run(capsys, ["show", "--db", db])
    assert code == 0 and "4 facts" in out, err
    code, out, err = run(capsys, ["show", "--db", "postgresql://nobody@127.0.0.1:1/none"])
    assert_one_line_error(code, out, err)


def test_an_empty_search_query_says_so(capsys, tmp_path):
    db = str(tmp_path / "m.db")
    assert run(capsys, ["--db", db, "--offline", "add", "I keep bees"])[0] == 0
    code, out, err = run(capsys, ["--db", db, "search", "  "])
    assert code == 1 and "search query is empty" in out + err
    assert "memory text" not in out + err


def test_the_import_bar_and_its_summary_give_one_rate(capsys, memory, tmp_path):
    """Both show facts stored per second since the start; the background training that
    goes on after the last fact is stored is reported apart (it was counted in the
    summary's rate only, which then disagreed with the bar's)."""
    path = tmp_path / "notes.txt"
    path.write_text("\n".join(f"note {i} about topic {i % 7}" for i in range(30)) + "\n", encoding="utf-8")
    code, out, err = run(capsys, ["import", str(path), "--batch-size", "3"], memory)
    assert code == 0, err
    text = " ".join(out.split())
    bar = re.search(r"30/30 +([0-9.]+) facts/s", text)
    summary = re.search(r"imported 30 memories into memories in ([0-9.]+) s \(([0-9.]+) facts/s\)", text)
    assert bar and summary, out
    assert bar.group(1) == summary.group(2)
    assert "training caught up" in text


def test_index_dir_keeps_the_saved_index_and_tree_there(capsys, tmp_path, notes, monkeypatch):
    """``--index-dir`` (or ``$MEMBRAIN_INDEX_DIR``) is ``MembrainMemory(index_dir=...)``: a
    command's close saves large namespaces' files under it, not beside the SQLite file."""
    from langchain_membrain.storage import index_cache

    monkeypatch.setattr(index_cache, "MIN_ENTRIES", 1)  # these few facts count as large
    db, saved = str(tmp_path / "m.db"), tmp_path / "saved"
    args = ["--db", db, "--offline", "--index-dir", str(saved)]
    assert run(capsys, [*args, "import", str(notes), "--ns", "users/maya"])[0] == 0
    (folder,) = list(saved.iterdir())
    assert sorted(p.suffix for p in folder.iterdir()) == [".idx", ".tree"]
    assert not os.path.exists(db + ".index")
    shutil.rmtree(saved)  # the next command indexes the rows, and saves at its close...
    monkeypatch.setenv("MEMBRAIN_INDEX_DIR", str(saved))
    code, out, err = run(capsys, ["search", "peanuts", "--db", db, "--ns", "users/maya", "-k", "1"])
    assert code == 0 and "allergic to peanuts" in out, err
    (folder,) = list(saved.iterdir())  # ...under the environment's directory, not beside the file
    assert sorted(p.suffix for p in folder.iterdir()) == [".idx", ".tree"]
    assert not os.path.exists(db + ".index")
