"""Random sequences of memory operations keep the tree valid and lose no text; an
interrupted DELETE loses nothing.

The property test drives ``MembrainMemory.add`` with a teacher whose operation answers are
drawn by hypothesis (ADD, IGNORE, UPDATE or DELETE of any candidate, keep or not, and
invalid ones: a target that is no candidate, an unknown operation). After every add: the
tree's invariants hold, and every text ever handed in is the text of a current fact, of an
archived (superseded or deleted) version, or of an entry of the namespace's log.

The crash test runs a DELETE that keeps the retracting item (two commits: the item is
placed, then the old fact retired) in a separate process on SQLite, and kills it with
SIGKILL as the retire begins (a profile hook in that process, not a replaced method): after
reopening, both facts are current (the retraction is
simply not applied yet), the tree is valid and nothing is lost.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, os.path.dirname(__file__))

from helpers import WordEmbeddings  # noqa: E402

from langchain_membrain import MembrainMemory  # noqa: E402
from langchain_membrain.teachers.heuristic import HeuristicTeacher  # noqa: E402
from langchain_membrain.tree.operation_types import Operation  # noqa: E402

WORDS = "cat dog flat job Berlin Paris violin tea bike garden sister boat river cello".split()

answers = st.one_of(
    st.tuples(st.sampled_from(["ADD", "IGNORE"]), st.just(0), st.just(False)),
    st.tuples(st.sampled_from(["UPDATE", "DELETE"]), st.integers(0, 6), st.booleans()),  # 5, 6: no candidate
    st.tuples(st.just("SHRUG"), st.just(0), st.just(False)),  # not an operation: falls back to ADD
)


class Scripted(HeuristicTeacher):
    """Answers each operation question with the next scripted ``(kind, candidate index,
    keep)``; an index past the candidates names a key that is not one."""

    def __init__(self, script):
        super().__init__()
        self.script = list(script)

    def choose_operation(self, question):
        kind, i, keep = self.script.pop(0) if self.script else ("ADD", 0, False)
        if kind in ("UPDATE", "DELETE"):
            target = question.candidates[i].key if i < len(question.candidates) else f"ghost-{i}"
            return Operation(kind, target, keep=keep)
        if kind == "SHRUG":
            return {"operation": "SHRUG"}
        return Operation(kind)


def _texts_kept(mem: MembrainMemory, ns: str) -> list[str]:
    tree = mem.tree(ns)
    return [tree.node(f).text for f in tree.facts()] + [e.text for e in tree.archive.values()]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4), answers),
                      min_size=1, max_size=14))
def test_operations_keep_the_tree_valid_and_lose_no_text(steps) -> None:
    teacher = Scripted([a for _, a in steps])
    handed: list[str] = []
    with MembrainMemory(teacher=teacher, embeddings=WordEmbeddings(), background=False, relabel=False,
                        prior=False, operations="teacher", dedupe=False) as mem:
        for i, (words, _) in enumerate(steps):
            text = f"item {i}: {' '.join(words)}"  # unique, so every text is accounted for
            mem.add(text, namespace="p")
            handed.append(text)
            tree = mem.tree("p")
            tree.check_invariants()
            kept = _texts_kept(mem, "p")
            assert sorted(set(kept)) == sorted(set(handed))  # nothing lost, nothing invented
            assert len(kept) == len(handed)  # each text held once: archived or current
            for f in tree.facts():  # a current fact is searchable
                assert mem.get(f, namespace="p") is not None


WORKER = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {tests!r})
    from helpers import WordEmbeddings
    from langchain_membrain import MembrainMemory
    from langchain_membrain.bench.updates import GroundTruthTeacher

    mem = MembrainMemory({db!r}, teacher=GroundTruthTeacher(), embeddings=WordEmbeddings(),
                         background=False, relabel=False, prior=False, operations="teacher")
    mem.add("We have a cat called Biscuit.", namespace="u", metadata={{"gt_id": "pet", "gt_op": "ADD"}})
    print("ADDED", flush=True)

    def die_at_retire(frame, event, arg):  # the process dies as the retire begins
        if event == "call" and frame.f_code.co_name == "retire" and frame.f_code.co_filename.endswith("tree.py"):
            os.kill(os.getpid(), signal.SIGKILL)

    sys.setprofile(die_at_retire)
    mem.add("Biscuit the cat died in October.", namespace="u",
            metadata={{"gt_id": "pet2", "gt_op": "DELETE", "gt_target": "pet", "gt_keep": True}})
    print("NOT KILLED", flush=True)
""")


def test_a_delete_killed_midway_leaves_the_memory_as_before_it(tmp_path) -> None:
    """A DELETE that keeps its item places the item, then retires the old fact, in one
    commit: killed at the retire, the process leaves the namespace as it was before that add
    (the add never returned), with no half of it stored."""
    db = str(tmp_path / "m.db")
    tests = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run([sys.executable, "-c", WORKER.format(tests=tests, db=db)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr  # killed by SIGKILL
    assert "ADDED" in proc.stdout and "NOT KILLED" not in proc.stdout
    with MembrainMemory(db, embeddings=WordEmbeddings(), background=False, prior=False) as mem:
        texts = sorted(r.text for r in mem.search(None, namespace="u", limit=10))
        assert texts == ["We have a cat called Biscuit."]
        mem.tree("u").check_invariants()
        assert mem.tree("u").archive == {}  # nor was the retire
