"""Start-up and exit: what ``import langchain_membrain`` and the read-only commands load,
and a process that never calls ``close()`` exiting cleanly with its models saved.

Each check runs in a fresh interpreter (``sys.modules`` of this one already holds torch).
No timings are asserted: ``python -m langchain_membrain.bench startup`` measures them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "sentence_transformers", "transformers", "openai", "langchain_core.language_models")

# A deterministic bag-of-words embedder (no model to load), shared by the scripts below.
EMBEDDER = textwrap.dedent("""
    import hashlib, re
    import numpy as np
    from langchain_core.embeddings import Embeddings

    class WordHash(Embeddings):
        def _one(self, text):
            v = np.zeros(64, dtype=np.float32)
            for w in re.findall(r"[a-z0-9]+", text.lower()):
                v[int.from_bytes(hashlib.blake2b(w.encode(), digest_size=4).digest(), "little") % 64] += 1.0
            v[0] += 0.01
            return (v / np.linalg.norm(v)).tolist()
        def embed_documents(self, texts):
            return [self._one(t) for t in texts]
        def embed_query(self, text):
            return self._one(text)

    TOPICS = ["tea", "coffee", "chess", "hiking", "jazz", "peanuts", "football", "piano"]
    FACTS = [f"Person {i % 7} likes {TOPICS[i % 8]} and lives in city {i % 11} (note {i})" for i in range(40)]
""")


def python(code: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    env.setdefault("OMP_NUM_THREADS", "1")
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMBRAIN_DB"):
        env.pop(var, None)
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=600, env=env, cwd=cwd)


def loaded_heavy(proc: subprocess.CompletedProcess) -> list[str]:
    """The HEAVY modules a script reported (its last stdout line) as loaded."""
    return json.loads(proc.stdout.strip().splitlines()[-1])


REPORT = f"import json, sys; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"


# --------------------------------------------------------------------- start-up
def test_import_loads_no_torch_no_embedder_no_llm_sdk(tmp_path):
    proc = python(f"import langchain_membrain\n{REPORT}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert loaded_heavy(proc) == []


def test_light_modules_load_no_torch(tmp_path):
    code = ("import langchain_membrain.tree, langchain_membrain.students.features, langchain_membrain.teachers.base, "
            f"langchain_membrain.tree.export, langchain_membrain.storage, langchain_membrain.cli\n{REPORT}")
    proc = python(code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert loaded_heavy(proc) == []


def test_public_names_still_import():
    import langchain_membrain
    import langchain_membrain.teachers as teachers

    for module in (langchain_membrain, teachers):
        for name in module.__all__:
            assert getattr(module, name) is not None, name
        assert set(module.__all__) <= set(dir(module))
    from langchain_membrain import Learner, MembrainMemory, OpenAITeacher, Policy  # noqa: F401

    with pytest.raises(AttributeError):
        langchain_membrain.no_such_name  # noqa: B018
    with pytest.raises(ImportError):
        from langchain_membrain import no_such_name  # noqa: F401


def test_cli_checkpoint_name_matches_memory():
    from langchain_membrain import cli
    from langchain_membrain.insert import background

    assert cli.CHECKPOINT_NAME == background.CHECKPOINT_NAME


def test_stored_view_reports_what_a_fresh_memory_reports(tmp_path):
    """``membrain stats`` reads the database without MembrainMemory (StoredMemory): its
    figures are those of MembrainMemory.stats() in a process that has not inserted, less the
    per-process counters (zero, None or False there)."""
    from helpers import WordEmbeddings

    from langchain_membrain.cli import StoredMemory
    from langchain_membrain.memory import MembrainMemory

    db = str(tmp_path / "m.db")
    with MembrainMemory(db, embeddings=WordEmbeddings(), checkpoint_every=5) as m:
        m.add_many(["Maya is allergic to peanuts", "Maya plays the piano", "Tom plays football",
                    "Tom climbs on Mondays", "Maya is learning Japanese", "Tom has a dog"], namespace="users/x")
    with MembrainMemory(db, embeddings=WordEmbeddings()) as fresh:
        cold = fresh.stats()
    with StoredMemory(db) as view:
        seen = view.stats()
        assert view.namespaces() == [("users", "x")]
        assert view.tree("users/x").fact_count(view.tree("users/x").root_id) == 6
    assert seen["saved_inserts"] == 6 and "stage1" in seen
    # The teacher's and the operations' counters are this process's: {} in the view, which has
    # neither (every key exists in both, stats()["teacher"] no longer raises KeyError there).
    assert seen["teacher"] == seen["operations"] == seen["formation"] == {} and cold["operations"]["decisions"] == 0
    assert cold["formation"]["decisions"] == 0  # the formation student's counters are this process's too
    for key, value in seen.items():
        if key not in ("teacher", "operations", "formation"):
            assert cold[key] == value, key
    for key in set(cold) - set(seen) - {"teacher", "loaded_namespaces"}:  # stats() loads what it counts
        value = cold[key]["decisions"] if key == "operations" else cold[key]  # per-process operation counters
        assert value in (0, None, False, {}, []), (key, cold[key])


def test_read_commands_load_no_torch(tmp_path):
    db = tmp_path / "m.db"
    build = EMBEDDER + textwrap.dedent(f"""
        from langchain_membrain import MembrainMemory
        with MembrainMemory({str(db)!r}, embeddings=WordHash(), checkpoint_every=10) as m:
            m.add_many(FACTS[:20], namespace="users/maya")
    """)
    proc = python(build, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for argv in (["--help"], ["show"], ["stats"], ["stats", "--json"], ["export", "-f", "mermaid"],
                 ["export", "--no-embeddings"]):
        code = textwrap.dedent(f"""
            import contextlib, io
            from langchain_membrain.cli import main
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                try:
                    code = main({["--db", str(db), *argv]!r})
                except SystemExit as exc:  # --help
                    code = exc.code
            assert code == 0, out.getvalue()
        """) + REPORT
        proc = python(code, cwd=tmp_path)
        assert proc.returncode == 0, (argv, proc.stdout, proc.stderr)
        assert loaded_heavy(proc) == [], argv
    stats = python("from langchain_membrain.cli import main; main(['--db', %r, 'stats', '--json'])" % str(db),
                   cwd=tmp_path)
    data = json.loads(stats.stdout)
    assert data["namespaces"][0]["facts"] == 20
    assert data["stats"]["saved_inserts"] == 20  # the saved checkpoint's counters, no model loaded
    assert data["stats"]["stage1"]["decisions"] > 0


def test_add_and_search_load_no_torch_and_add_saves_what_it_learned(tmp_path):
    """``membrain add`` and ``search`` on a memory with saved models: the bundled MiniLM runs
    in numpy, the networks run in numpy from the checkpoint, and the checkpoints are written
    back without torch, at a clean exit, holding what the add counted; torch reads them."""
    db = tmp_path / "m.db"
    build = textwrap.dedent(f"""
        from langchain_membrain import MembrainMemory
        facts = ["Maya is allergic to peanuts", "Maya plays the piano on Sundays", "Tom climbs at a gym",
                 "Tom is learning Japanese", "Maya has a dog called Biscuit", "Tom prefers tea to coffee",
                 "Maya visited Lisbon last summer", "Tom bakes sourdough bread"]
        with MembrainMemory({str(db)!r}) as m:  # the default embedder, teacher and prior
            m.add_many(facts, namespace="users/maya")
    """)
    proc = python(build, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    counters = ("from langchain_membrain.storage import open_storage\n"
                f"with open_storage({str(db)!r}) as s:\n"
                "    found = {n: s.load_checkpoint(n) for n in ('models', 'operations')}\n")
    before = python(counters + "print(found['models'][1]['inserts'], found['models'][1]['supervised'])",
                    cwd=tmp_path)
    assert before.returncode == 0, before.stderr
    inserts, supervised = map(int, before.stdout.split())
    for argv in (["add", "Maya adopted a cat named Pixel", "--ns", "users/maya"],
                 ["search", "who has a pet?", "-k", "2"]):
        code = textwrap.dedent(f"""
            from langchain_membrain.cli import main
            assert main({["--db", str(db), *argv]!r}) == 0
        """) + REPORT
        proc = python(code, cwd=tmp_path)
        assert proc.returncode == 0, (argv, proc.stderr)
        assert proc.stderr == "", argv
        assert [m for m in loaded_heavy(proc) if m in ("torch", "sentence_transformers", "transformers")] == [], argv
        assert ("stored" if argv[0] == "add" else "Pixel") in proc.stdout, argv
    after = python(counters + textwrap.dedent("""
        import io, torch
        for n, (data, _) in found.items():
            torch.load(io.BytesIO(data), weights_only=True)  # what torch wrote, torch reads
        print(found['models'][1]['inserts'], found['models'][1]['supervised'])
    """), cwd=tmp_path)
    assert after.returncode == 0, after.stderr
    assert after.stdout.split() == [str(inserts + 1), str(supervised + 1)]  # the add, placed and supervised


def test_the_first_add_of_a_new_memory_loads_no_torch_and_its_checkpoints_load_in_torch(tmp_path):
    """``membrain add`` in a new directory starts from the shipped priors and saves its
    checkpoints without torch (the optimisers, never built, saved as fresh ones); the next
    process loads them, builds them in torch, and writes and reads them with torch."""
    db = tmp_path / "m.db"
    first = textwrap.dedent(f"""
        from langchain_membrain.cli import main
        assert main({["--db", str(db), "add", "I live in Lisbon"]!r}) == 0
    """) + REPORT
    proc = python(first, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [m for m in loaded_heavy(proc) if m == "torch"] == []
    trained = textwrap.dedent(f"""
        import io
        from langchain_membrain import MembrainMemory
        with MembrainMemory({str(db)!r}) as m:
            m.add("I moved from Lisbon to Porto")
            m.flush()
            trainer = m._bg.current.trainer  # loaded from the first add's checkpoint, in numpy
            assert not trainer.networks.built and m.stats()["checkpoint_error"] is None
            trainer.networks.torch()  # the networks in torch, with fresh optimisers
            trainer.load(io.BytesIO(trainer.state_bytes()))  # written by torch, read back
            print(trainer.networks.built, m.stats()["supervised"])
    """)
    proc = python(trained, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-2:] == ["True", "1"]

# ------------------------------------------------------------------------- exit
@pytest.mark.parametrize("where", ["memory", "sqlite"])
def test_exit_without_close_is_clean_and_saves(tmp_path, where):
    db = str(tmp_path / "m.db") if where == "sqlite" else None
    script = EMBEDDER + textwrap.dedent(f"""
        from langchain_membrain import MembrainMemory
        m = MembrainMemory({db!r}, embeddings=WordHash())
        m.add_many(FACTS)
        print("added", flush=True)
        # no close(): the background trainer is usually still busy here
    """)
    proc = python(script, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert proc.stdout.strip() == "added"
    if db is None:
        return
    assert not list(tmp_path.glob("*.trainer-*.lock"))
    check = EMBEDDER + textwrap.dedent(f"""
        import json
        from langchain_membrain import MembrainMemory
        from langchain_membrain.storage import open_storage
        with open_storage({db!r}) as storage:
            counters = storage.load_checkpoint("models")[1]
        with MembrainMemory({db!r}, embeddings=WordHash()) as m:
            tree = m.tree()
            stats = m.stats()
            hits = m.search("Person 3 likes chess", limit=3)
        print(json.dumps({{"facts": tree.fact_count(tree.root_id), "saved": stats.get("saved_inserts"),
                          "supervised": counters["supervised"], "hits": len(hits)}}))
    """)
    proc = python(check, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen == {"facts": 40, "saved": 40, "supervised": 40, "hits": 3}


def test_exit_hook_holds_no_memory_alive():
    import gc
    import weakref

    from helpers import WordEmbeddings

    from langchain_membrain.insert import shutdown
    from langchain_membrain.memory import MembrainMemory

    m = MembrainMemory(embeddings=WordEmbeddings())
    assert m in shutdown._LIVE
    ref = weakref.ref(m)
    del m
    gc.collect()
    assert ref() is None
    with MembrainMemory(embeddings=WordEmbeddings()) as m:
        pass
    assert m not in shutdown._LIVE  # closed: forgotten


# ------------------------------------------------------------------ lock files
def test_no_trainer_lock_file_after_close(tmp_path):
    from helpers import WordEmbeddings

    from langchain_membrain.memory import MembrainMemory

    db = tmp_path / "m.db"
    with MembrainMemory(str(db), embeddings=WordEmbeddings(), background=False) as m:
        m.add_many(["Maya is allergic to peanuts", "Maya plays the piano", "Tom plays football"])
        assert list(tmp_path.glob("*.trainer-*.lock"))  # held while open
    assert not list(tmp_path.glob("*.trainer-*.lock"))


def test_a_held_trainer_lock_file_is_not_removed(tmp_path):
    from langchain_membrain.storage import SQLiteStorage

    db = str(tmp_path / "m.db")
    holder, other = SQLiteStorage(db), SQLiteStorage(db)
    assert holder.try_acquire_trainer("models")
    assert not other.try_acquire_trainer("models")
    other.close()  # never held it: leaves it alone
    assert len(list(tmp_path.glob("*.trainer-*.lock"))) == 1
    third = SQLiteStorage(db)
    assert not third.try_acquire_trainer("models")
    holder.close()  # the holder removes it as it releases it
    assert not list(tmp_path.glob("*.trainer-*.lock"))
    assert third.try_acquire_trainer("models")  # a new lock file, locked again
    assert len(list(tmp_path.glob("*.trainer-*.lock"))) == 1
    assert not SQLiteStorage(db).try_acquire_trainer("models")
    third.close()
    assert not list(tmp_path.glob("*.trainer-*.lock"))


def test_a_lock_on_a_removed_lock_file_is_taken_again(tmp_path):
    """One process opened the lock file, then its holder removed it: taking the lock on the
    removed file would exclude nobody, so try_acquire_trainer locks the file now there."""
    import fcntl

    from langchain_membrain.storage import SQLiteStorage

    db = str(tmp_path / "m.db")
    holder = SQLiteStorage(db)
    assert holder.try_acquire_trainer("models")
    path = holder._trainer_path("models")
    stale = os.open(path, os.O_RDWR)  # opened before the holder lets go
    holder.close()
    fcntl.flock(stale, fcntl.LOCK_EX | fcntl.LOCK_NB)  # succeeds, on the removed file
    late = SQLiteStorage(db)
    assert late.try_acquire_trainer("models")
    assert os.path.exists(path) and os.fstat(stale).st_ino != os.stat(path).st_ino
    assert not SQLiteStorage(db).try_acquire_trainer("models")
    os.close(stale)
    late.close()
