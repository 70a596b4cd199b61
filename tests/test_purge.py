"""Purging the archive: ``MembrainMemory.purge_history`` and ``membrain history --purge``.

Each test runs in memory, on SQLite and on PostgreSQL (``$MEMBRAIN_TEST_POSTGRES_URL``, see
conftest.py; it skips without a server). The teacher is the bench's GroundTruthTeacher (the
operations are the data's labels), the embeddings the instant bag-of-words ones of helpers.py.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
import uuid
from datetime import datetime

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from helpers import NO_POSTGRES, StrictClock, WordEmbeddings  # noqa: E402

from langchain_membrain import MembrainMemory  # noqa: E402
from langchain_membrain.bench.updates import GroundTruthTeacher, gt_value  # noqa: E402
from langchain_membrain.cli import main as cli_main  # noqa: E402
from langchain_membrain.errors import InvalidOperationError, StorageError  # noqa: E402

PG_URL = os.environ.get("MEMBRAIN_TEST_POSTGRES_URL")
NS = ("u", "maya")


def ranking_scores(mem: MembrainMemory, query: str) -> dict[str, float | None]:
    """The scores ``query``'s hits are ranked by (reads.rank's: a hit's reported score is a
    calibrated probability, which the other hits move too)."""
    from langchain_membrain.retrieval import reads

    return dict(reads.rank(mem._forest, NS, mem.tree(NS), query, None, 5, {}, embed=mem._embed,
                           mode=mem.search_mode))


class Place:
    """Where one test's memories live: how to open a memory on it, and raw SQL on it."""

    def __init__(self, kind: str, tmp_path):
        self.kind, self.path = kind, str(tmp_path / "m.db")
        self.schema = f"membrain_test_{uuid.uuid4().hex[:12]}"
        self.clock = StrictClock()  # every memory opened here stamps with it

    def open(self, **kw) -> MembrainMemory:
        storage = None
        if self.kind == "sqlite":
            storage = self.path
        elif self.kind == "postgres":
            from langchain_membrain.storage import open_storage

            storage = open_storage(PG_URL, schema=self.schema)
        return MembrainMemory(storage, teacher=GroundTruthTeacher(), embeddings=WordEmbeddings(), background=False,
                              relabel=False, prior=False, operations="teacher", clock=self.clock, **kw)

    def sql(self, statement: str) -> None:
        if self.kind == "sqlite":
            with sqlite3.connect(self.path) as conn:
                conn.execute(statement)
        else:
            import psycopg

            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f'SET search_path TO "{self.schema}"')
                conn.execute(statement)

    def refuse_deleting(self, node_id: str) -> None:
        """A trigger that fails any transaction deleting row ``node_id``: a write that dies
        part of the way through."""
        if self.kind == "sqlite":
            self.sql(f"CREATE TRIGGER refuse BEFORE DELETE ON membrain_nodes WHEN old.id = '{node_id}' "
                     "BEGIN SELECT RAISE(ABORT, 'refused'); END")
        else:
            self.sql("CREATE FUNCTION refuse() RETURNS trigger AS $$ BEGIN IF OLD.id = "
                     f"'{node_id}' THEN RAISE EXCEPTION 'refused'; END IF; RETURN OLD; END $$ LANGUAGE plpgsql")
            self.sql("CREATE TRIGGER refuse BEFORE DELETE ON membrain_nodes FOR EACH ROW EXECUTE FUNCTION refuse()")

    def allow_deleting(self) -> None:
        self.sql("DROP TRIGGER refuse" if self.kind == "sqlite" else "DROP TRIGGER refuse ON membrain_nodes")


def _place(kind: str, tmp_path):
    if kind == "postgres" and not PG_URL:
        pytest.skip(NO_POSTGRES)
    where = Place(kind, tmp_path)
    yield where
    if kind == "postgres":
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{where.schema}" CASCADE')


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def place(request, tmp_path):
    yield from _place(request.param, tmp_path)


@pytest.fixture(params=["sqlite", "postgres"])
def stored_place(request, tmp_path):
    """A place whose writes are transactions that can fail: the two storage backends."""
    yield from _place(request.param, tmp_path)


def add(mem: MembrainMemory, ev_id: str, text: str, op: str = "ADD", target: str | None = None,
        keep: bool | None = None) -> str:
    ev = {"id": ev_id, "op": op, "text": text, **({"target": target} if target else {}),
          **({"keep": keep} if keep is not None else {})}
    return mem.add(text, namespace=NS, metadata=gt_value(ev))


def fill(mem: MembrainMemory, clock: StrictClock) -> tuple[dict[str, str], float]:
    """Two chains of versions, a retraction, an ignored greeting; returns the keys and a
    time between the first archived version and the others."""
    keys = {"home": add(mem, "home1", "I live in a flat in Leeds."),
            "job": add(mem, "job1", "I work nights as a ward nurse.")}
    add(mem, "home2", "We bought a house in Headingley.", "UPDATE", "home1")
    between = clock()  # after every stamp so far, before every later one
    add(mem, "job2", "I am a practice nurse at a GP surgery now.", "UPDATE", "job1")
    keys["gym"] = add(mem, "gym1", "I joined the climbing gym on Kirkstall Road.")
    add(mem, "gym1x", "Forget what I said about the climbing gym.", "DELETE", "gym1", keep=False)
    add(mem, "hi", "Hello there!", "IGNORE")
    return keys, between


def current(mem: MembrainMemory) -> list[tuple[str, str, dict]]:
    return sorted((r.key, r.text, r.value) for r in mem.search(None, namespace=NS, limit=100))


def test_purge_forgets_archived_entries_and_never_a_current_fact(place) -> None:
    with place.open() as mem:
        keys, between = fill(mem, place.clock)
        facts = current(mem)
        reader = None
        if place.kind != "memory":
            reader = place.open(refresh_interval=0)
            assert reader.search("Leeds flat nurse", namespace=NS, limit=5)  # loaded before the purges
        leeds = ranking_scores(mem, "Leeds flat")
        assert [v.status for v in mem.history(keys["home"], namespace=NS)] == ["superseded", "current"]
        assert mem.purge_history(NS, before=datetime.fromtimestamp(between), kind="history") == 1
        assert [v.status for v in mem.history(keys["home"], namespace=NS)] == ["current"]
        assert [v.status for v in mem.history(keys["job"], namespace=NS)] == ["superseded", "current"]
        assert len(mem.ignored(namespace=NS)) == 2  # the log is another kind
        # the purged version no longer lends its words ("Leeds") to the fact that replaced it
        after = ranking_scores(mem, "Leeds flat")
        assert after[keys["home"]] < leeds[keys["home"]]
        assert mem.purge_history(NS, kind="ignored") == 2
        assert mem.ignored(namespace=NS) == []
        assert current(mem) == facts
        kept = [r.text for r in mem.search(None, namespace=NS, include_history=True, limit=100)
                if r.status != "current"]
        assert sorted(kept) == ["I joined the climbing gym on Kirkstall Road.", "I work nights as a ward nurse."]
        assert mem.purge_history(NS) == 2 and mem.purge_history(NS) == 0
        assert current(mem) == facts and mem.history(keys["gym"], namespace=NS) == []
        scores = [(r.key, r.score) for r in mem.search("Leeds flat nurse", namespace=NS, limit=5)]
        mem.tree(NS).check_invariants()
        if reader is not None:  # a process that catches up on the purges scores alike
            assert [(r.key, r.score) for r in reader.search("Leeds flat nurse", namespace=NS, limit=5)] == scores
            reader.close()
    if place.kind != "memory":
        with place.open() as mem:  # what was stored is what the writer saw
            assert current(mem) == facts
            assert mem.search(None, namespace=NS, include_history=True, limit=100) == \
                mem.search(None, namespace=NS, limit=100)
            assert mem.ignored(namespace=NS) == []
            assert [(r.key, r.score) for r in mem.search("Leeds flat nurse", namespace=NS, limit=5)] == scores


def test_a_namespace_with_nothing_left_is_gone_and_others_are_untouched(place) -> None:
    with place.open() as mem:
        mem.add("Thanks!", namespace="log-only", metadata=gt_value({"id": "t", "op": "IGNORE"}))
        fill(mem, place.clock)
        assert mem.purge_history("log-only") == 1
        assert ("log-only",) not in mem.namespaces() and NS in mem.namespaces()
        assert len(mem.ignored(namespace=NS)) == 2
        assert mem.purge_history("never-written") == 0


def test_delete_keeps_a_tombstone_in_history_until_purged(place) -> None:
    """``delete(k)`` takes the memory out of ``get`` and ``search`` but keeps its last
    version in ``history(k)`` (status "deleted", its text and value, ``valid_to`` the time
    of the deletion), stored in the same write; ``MembrainStore.delete`` goes the same way
    (its namespace listing then skips a namespace of tombstones only); ``purge_history``
    forgets the tombstones for good."""
    from langchain_membrain import MembrainStore

    bees = {"content": "I keep bees on the allotment.", "hive": 2}
    with place.open() as mem:
        mem.put(NS, "bees", bees)
        mem.put(NS, "van", {"content": "I drive a red van."})
        mem.put(NS, "raw", {"note": "unindexed"}, index=False)
        before = time.time()
        assert mem.delete("bees", namespace=NS)
        after = time.time()
        assert not mem.delete("bees", namespace=NS)  # gone: a second delete finds nothing
        assert mem.get("bees", namespace=NS) is None
        assert "bees" not in [r.key for r in mem.search("bees on the allotment", namespace=NS, limit=10)]
        assert "bees" not in [r.key for r in mem.search(None, namespace=NS, limit=10)]
        (tomb,) = mem.history("bees", namespace=NS)
        assert (tomb.status, tomb.text, tomb.value) == ("deleted", bees["content"], bees)
        assert before <= tomb.valid_to <= after and tomb.superseded_by is None
        assert [r.key for r in mem.search(None, namespace=NS, include_history=True, limit=10)
                if r.status == "deleted"] == [tomb.key]
        store = MembrainStore(mem)
        assert store.list_namespaces() == [NS]  # two current items left
        store.delete(NS, "van")
        store.delete(NS, "raw")
        assert store.get(NS, "van") is None and store.search(NS) == []
        assert [v.status for v in mem.history("van", namespace=NS)] == ["deleted"]
        assert [v.value for v in mem.history("raw", namespace=NS)] == [{"note": "unindexed"}]
        assert store.list_namespaces() == [] and mem.namespaces() == [NS]  # tombstones only
        mem.tree(NS).check_invariants()
        if place.kind == "memory":
            mem.put(NS, "bees", {"content": "I keep three hives now."})  # the key again: a new version
            assert [v.status for v in mem.history("bees", namespace=NS)] == ["deleted", "current"]
            assert mem.delete("bees", namespace=NS)
            assert mem.purge_history(NS) == 4 and mem.history("bees", namespace=NS) == []
            assert mem.namespaces() == []  # nothing left: the namespace is gone
    if place.kind != "memory":
        with place.open() as mem:  # stored: a new process sees the same history
            assert [(v.status, v.value, v.valid_to) for v in mem.history("bees", namespace=NS)] == \
                [("deleted", bees, tomb.valid_to)]
            mem.put(NS, "bees", {"content": "I keep three hives now."})  # the key again: a new version
            assert [v.status for v in mem.history("bees", namespace=NS)] == ["deleted", "current"]
            assert mem.delete("bees", namespace=NS)
            assert mem.purge_history(NS) == 4 and mem.history("bees", namespace=NS) == []
            assert mem.namespaces() == []
        with place.open() as mem:
            assert mem.namespaces() == [] and mem.history("bees", namespace=NS) == []


def test_a_purge_that_fails_part_way_stores_none_of_it(stored_place) -> None:
    place = stored_place
    with place.open() as mem:
        keys, _ = fill(mem, place.clock)
        archived = sorted(e.id for e in mem.tree(NS).archive.values())
        place.refuse_deleting(archived[-1])  # the last row the purge deletes
        with pytest.raises(StorageError, match="refused"):
            mem.purge_history(NS)
        # the memory reloads what is stored: nothing was purged
        assert sorted(e.id for e in mem.tree(NS).archive.values()) == archived
        assert [v.status for v in mem.history(keys["home"], namespace=NS)] == ["superseded", "current"]
        place.allow_deleting()
    with place.open() as mem:
        assert sorted(e.id for e in mem.tree(NS).archive.values()) == archived
        assert mem.purge_history(NS) == len(archived)


@pytest.mark.parametrize("kw", [{"before": "yesterday"}, {"before": True}, {"before": float("nan")},
                                {"kind": "all"}, {"kind": "current"}])
def test_bad_purge_arguments_are_refused(kw) -> None:
    with MembrainMemory(embeddings=WordEmbeddings(), background=False, relabel=False, prior=False) as mem:
        mem.add("Hello there!", namespace=NS)
        with pytest.raises(InvalidOperationError):
            mem.purge_history(NS, **kw)
        assert len(mem.ignored(namespace=NS)) == 1


def test_cli_history_purge(place, capsys) -> None:
    with place.open() as mem:
        keys, _ = fill(mem, place.clock)
        argv = ["history", "--ns", "u"]
        assert cli_main([*argv, "--purge", "--before", "2000-01-01"], memory=mem) == 0
        assert "purged 0 superseded or deleted versions archived before 2000-01-01" in capsys.readouterr().out
        assert cli_main([*argv, "--purge", "--before", "soon"], memory=mem) == 1
        assert "--before expects an ISO date" in capsys.readouterr().err
        assert cli_main([*argv, "--before", "2000-01-01"], memory=mem) == 1
        assert cli_main([*argv, keys["home"], "--purge"], memory=mem) == 1
        assert len(mem.history(keys["home"], namespace=NS)) == 2
        assert cli_main([*argv, "--purge", "--ignored"], memory=mem) == 0
        assert "purged 2 ignored items from 1 namespace(s)" in capsys.readouterr().out
        assert mem.ignored(namespace=NS) == [] and len(mem.history(keys["home"], namespace=NS)) == 2
        assert cli_main([*argv, "--purge"], memory=mem) == 0
        assert "purged 3 superseded or deleted versions" in capsys.readouterr().out
        assert [v.status for v in mem.history(keys["home"], namespace=NS)] == ["current"]
