"""Memory operations: ADD, UPDATE, DELETE and IGNORE, history, the log, and the student.

The teachers here are real Teacher implementations (the offline HeuristicTeacher, the
bench's GroundTruthTeacher, and small ones that answer a fixed way, as a misbehaving LLM
would); embeddings are the instant bag-of-words ones of helpers.py.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from importlib import resources

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))

from helpers import NO_POSTGRES, WordEmbeddings  # noqa: E402

from langchain_membrain import MembrainMemory, RetrievalConfig  # noqa: E402
from langchain_membrain.bench.updates import GroundTruthTeacher, gt_value, load  # noqa: E402
from langchain_membrain.cli import main as cli_main  # noqa: E402
from langchain_membrain.index.chat import SessionContext  # noqa: E402
from langchain_membrain.integrations.store import MembrainStore  # noqa: E402
from langchain_membrain.students.operation import OperationStudent
from langchain_membrain.teachers.heuristic import HeuristicTeacher  # noqa: E402
from langchain_membrain.teachers.operation_rule import (
    conservative_operation,
    is_question,
    states_something,
    utterance,
)
from langchain_membrain.tree.export import tree_to_html  # noqa: E402
from langchain_membrain.tree.operation_types import (
    ADD,
    IGNORE,
    Candidate,
    Operation,
    OperationQuestion,
    validate_operation,
)
from langchain_membrain.tree.tree import MembrainTree  # noqa: E402

PG_URL = os.environ.get("MEMBRAIN_TEST_POSTGRES_URL")


def memory(teacher=None, storage=None, **kw) -> MembrainMemory:
    kw.setdefault("operations", "teacher")
    return MembrainMemory(storage, teacher=teacher, embeddings=WordEmbeddings(), background=False,
                          relabel=False, prior=False, **kw)


def add_event(mem: MembrainMemory, ns, ev_id: str, text: str, op: str = "ADD", target: str | None = None,
              keep: bool | None = None) -> str:
    ev = {"id": ev_id, "op": op, "text": text}
    if target:
        ev["target"] = target
    if keep is not None:
        ev["keep"] = keep
    return mem.add(text, namespace=ns, metadata=gt_value(ev))


class Answers(HeuristicTeacher):
    """Answers every operation question with ``answer(question)`` (placements: heuristic)."""

    def __init__(self, answer):
        super().__init__()
        self.answer = answer

    def choose_operation(self, question):
        return self.answer(question)


# ------------------------------------------------------------------ the offline rule
@pytest.mark.parametrize("text", ["Hi!", "good morning :)", "Thanks a lot!", "thank you so much", "ok cool",
                                  "What is my daughter learning?", "Can you remind me when my flight is",
                                  "where do I live", "Melanie: Thanks!", "Caroline: Wow! Did you see that band?",
                                  "Hey Joanna, what's been up? How's it going?", "Thanks! 🙂", "Хорошо?"])
def test_greetings_thanks_and_questions_are_ignored(text: str) -> None:
    assert conservative_operation(OperationQuestion(text, None, ())) == IGNORE


@pytest.mark.parametrize("text", ["Thanks, I moved to Berlin last week.", "I'm allergic to peanuts.",
                                  "Have a look at my new bike: it's a Brompton.", "Is it true? I got the job!",
                                  "My daughter is learning the violin.",
                                  # a question beside a statement: the statement is a memory
                                  "I found an awesome trail in my hometown yesterday! Do you know any?",
                                  "Joanna: Wow, that looks great! Is that your third one?",
                                  "Nate: Sure thing! I can give it to you tomorrow, how does that sound?",
                                  "Я живу в Москве.", "Note: I'm allergic to peanuts", "42"])
def test_texts_with_a_memory_are_added(text: str) -> None:
    if text.endswith("job!"):
        assert is_question("Is it true?") and not is_question(text)
    assert conservative_operation(OperationQuestion(text, None, ())) == ADD


def test_an_ignored_question_still_leads_search_to_its_answer(tmp_path) -> None:
    """The question is not a memory, but its words find the facts said around it (the ignored
    item stands in its session, FactIndex.add_context, with the session scorer on), also
    after a reload; once purged, its words count no more."""
    db = tmp_path / "m.db"
    sessions = RetrievalConfig(chat=(SessionContext(),))
    turns = [("I collect jerseys from every club.", 1), ("Who is your favourite basketball player?", 1),
             ("LeBron is the man, I love his leadership.", 1), ("We painted the kitchen yellow.", 2),
             ("The tram to work was late again.", 2), ("My sister moved to Porto.", 2)]
    around = {turns[0][0], turns[2][0]}

    def top2(mem: MembrainMemory) -> tuple[set[str], float]:
        hits = mem.search("favourite basketball player", namespace="chat", limit=2)
        return {h.text for h in hits}, min(h.score for h in hits)

    with memory(storage=db, retrieval=sessions) as mem:
        for text, session in turns:
            mem.add(text, namespace="chat", metadata={"session": session})
        assert [r.text for r in mem.ignored(namespace="chat")] == [turns[1][0]]
        found, _ = top2(mem)
        assert found == around
    with memory(storage=db) as mem:  # the default reads no session: the question lends nothing
        assert top2(mem)[0] != around
    with memory(storage=db, retrieval=sessions) as mem:
        found, _ = top2(mem)
        assert found == around
        mem.purge_history(namespace="chat")
        assert mem.ignored(namespace="chat") == []
        assert top2(mem)[0] != around


def test_the_rule_reads_what_was_said_after_a_speaker_label() -> None:
    assert utterance("Melanie: Thanks!") == "Thanks!"
    assert utterance("Mary Ann Lee: hi") == "hi"
    assert utterance("Thanks: it helped") == "it helped"  # one capitalised word: read as a label
    assert utterance("I said: thanks") == "I said: thanks"  # not at the start of a sentence of words
    assert states_something("I said: thanks")


def _cand(key: str, sim: float) -> Candidate:
    return Candidate(key, key, sim)


def test_the_rule_updates_the_nearest_fact_a_change_supersedes() -> None:
    home, job = Candidate("home", "I live in Leeds", 0.7), Candidate("job", "I teach maths", 0.2)
    q = OperationQuestion("I moved to Berlin now.", None, (home, job))
    assert conservative_operation(q) == Operation("UPDATE", "home")
    assert conservative_operation(OperationQuestion("I live in Berlin.", None, q.candidates)) == ADD  # no change said
    # sharing no word and under NEAR, a fact is superseded only when clearly the nearest
    alone = Candidate("home", "I rent a flat above a bakery", 0.4)
    assert conservative_operation(OperationQuestion("I moved to Berlin now.", None, (alone, job))) == Operation(
        "UPDATE", "home")
    rival = Candidate("office", "My office is above a bakery", 0.38)
    # ... unless the two name one attribute held one value at a time: the home
    assert conservative_operation(OperationQuestion("I moved to Berlin now.", None, (alone, rival))) == Operation(
        "UPDATE", "home")
    side, boots = Candidate("side", "I play for a Sunday league side", 0.4), Candidate("boots", "My boots are worn", 0.38)
    assert conservative_operation(OperationQuestion("I switched to a club in Berlin now.", None, (side, boots))) == ADD


def test_offline_ignore_precision_on_the_data_sets() -> None:
    """The offline rule never ignores an item the data sets label as a memory."""
    for name in ("updates.jsonl", "updates_heldout.jsonl"):
        for part in load(name).values():
            for ev in part["events"]:
                if conservative_operation(OperationQuestion(ev["text"], None, ())) == IGNORE:
                    assert ev["op"] == "IGNORE", ev


def test_the_data_sets_are_consistent() -> None:
    for name in ("updates.jsonl", "updates_heldout.jsonl"):
        text = resources.files("langchain_membrain.data").joinpath(name).read_text(encoding="utf-8")
        seen: set[str] = set()
        current: set[str] = set()
        for line in text.splitlines():
            row = json.loads(line)
            if "question" in row:
                assert row["answer"] in seen
                assert (row["answer"] in current) == (row["kind"] == "current"), row
                continue
            assert row["id"] not in seen
            seen.add(row["id"])
            if row["op"] in ("UPDATE", "DELETE"):
                assert row["target"] in current, row  # only a current fact can be changed
                current.discard(row["target"])
            if row["op"] in ("ADD", "UPDATE") or row.get("keep"):
                current.add(row["id"])


# ------------------------------------------------------------------ validation
def test_bad_answers_fall_back_to_add() -> None:
    q = OperationQuestion("x", None, (_cand("a", 0.9),))
    assert validate_operation(Operation("UPDATE", "zzz"), q)[0] == ADD
    assert validate_operation(Operation("DELETE"), q)[0] == ADD
    assert validate_operation({"operation": "MERGE"}, q)[0] == ADD
    assert validate_operation("UPDATE a", q)[0] == ADD
    assert validate_operation({"operation": "update", "target": "a"}, q) == (Operation("UPDATE", "a"), None)
    assert validate_operation(Operation("IGNORE", "a"), q) == (IGNORE, None)


@pytest.mark.parametrize("answer", [
    lambda q: Operation("UPDATE", "not-a-candidate"),
    lambda q: {"operation": "DELETE", "target": None},
    lambda q: "{not json",
    lambda q: 1 / 0,
])
def test_a_bad_teacher_answer_loses_nothing(answer) -> None:
    with memory(Answers(answer)) as mem:
        k1 = mem.add("I live in Paris.", namespace="u")
        k2 = mem.add("I live in Berlin now.", namespace="u")
        assert {r.key for r in mem.search("live", namespace="u")} == {k1, k2}
        ops = mem.stats()["operations"]
        assert ops["teacher_failures"] == 2 and ops["by_kind"]["ADD"] == 2


def test_an_update_cannot_reach_another_namespace() -> None:
    other: dict[str, str] = {}
    with memory(Answers(lambda q: Operation("UPDATE", other.get("key", "")))) as mem:
        other["key"] = mem.add("I live in Paris.", namespace="a")
        k = mem.add("I live in Paris.", namespace="b")  # its only candidate lives in "a"
        assert mem.get(other["key"], namespace="a").text == "I live in Paris."
        assert mem.get(k, namespace="b") is not None


# ------------------------------------------------------------------ through the memory
def test_update_keeps_the_old_version_as_history() -> None:
    with memory(GroundTruthTeacher()) as mem:
        ns = ("u", "maya")
        home = add_event(mem, ns, "home1", "I live in a flat in Leeds.")
        add_event(mem, ns, "job1", "I work as a nurse.")
        again = add_event(mem, ns, "home2", "We moved to a house in Headingley.", "UPDATE", "home1")
        assert again == home  # the new version takes the old one's place: same key
        record = mem.get(home, namespace=ns)
        assert record.text == "We moved to a house in Headingley." and record.status == "current"
        assert MembrainStore(mem).get(ns, home).value["content"] == "We moved to a house in Headingley."
        texts = [r.text for r in mem.search("flat house Leeds Headingley", namespace=ns, limit=10)]
        assert "I live in a flat in Leeds." not in texts
        both = mem.search("flat in Leeds", namespace=ns, limit=10, include_history=True)
        old = next(r for r in both if r.text == "I live in a flat in Leeds.")
        assert old.status == "superseded" and old.superseded_by == home and old.valid_to is not None
        versions = mem.history(home, namespace=ns)
        assert [v.status for v in versions] == ["superseded", "current"]
        assert versions[0].valid_to <= versions[1].valid_from
        assert mem.history(versions[0].key, namespace=ns) == versions  # an archived id works too
        mem.tree(ns).check_invariants()


def test_delete_retracts_and_keeps_the_item_only_if_it_is_a_memory() -> None:
    with memory(GroundTruthTeacher()) as mem:
        ns = "u"
        cat = add_event(mem, ns, "pet1", "We have a cat called Biscuit.")
        gym = add_event(mem, ns, "gym1", "I joined the gym on Main Street.")
        died = add_event(mem, ns, "pet1x", "Biscuit the cat died in October.", "DELETE", "pet1", keep=True)
        scratch = add_event(mem, ns, "gym1x", "Forget what I said about the gym on Main Street.", "DELETE",
                            "gym1", keep=False)
        assert mem.get(cat, namespace=ns) is None and mem.get(gym, namespace=ns) is None
        assert mem.get(died, namespace=ns).text == "Biscuit the cat died in October."
        assert mem.get(scratch, namespace=ns) is None
        assert [r.text for r in mem.ignored(namespace=ns)] == ["Forget what I said about the gym on Main Street."]
        (gone,) = mem.history(cat, namespace=ns)
        assert gone.status == "deleted" and gone.superseded_by == died
        assert mem.history(gym, namespace=ns)[0].superseded_by == scratch


def test_ignored_items_go_to_the_log_not_the_tree() -> None:
    with memory() as mem:  # the offline teacher
        fact = mem.add("My daughter is learning the violin.", namespace="u")
        q = mem.add("What instrument is my daughter learning?", namespace="u")
        hi = mem.add("Hello!", namespace="u")
        assert [r.key for r in mem.search("daughter instrument", namespace="u")] == [fact]
        assert [r.key for r in mem.ignored(namespace="u")] == [hi, q]
        assert mem.get(q, namespace="u") is None
        assert mem.stats()["operations"]["by_kind"]["IGNORE"] == 2


def test_last_operation_says_what_the_latest_add_became() -> None:
    with memory() as mem:
        assert mem.last_operation is None
        violin = mem.add("My daughter is learning the violin.", namespace="u")
        added = mem.last_operation
        assert added is not None and added.operation.kind == "ADD" and added.by in ("student", "teacher")
        mem.add("Hello!", namespace="u")
        ignored = mem.last_operation
        assert ignored is not None and ignored.operation.kind == "IGNORE"
        assert violin in ignored.candidates  # the namespace's nearest facts were shown
        mem.put("u", "k", {"content": "Our cat is called Miso."})  # put runs no operation
        assert mem.last_operation is ignored


def test_put_always_stores() -> None:
    with memory() as mem:
        mem.put("u", "k", {"content": "What instrument is my daughter learning?"})
        assert MembrainStore(mem).get(("u",), "k").value["content"] == "What instrument is my daughter learning?"
        assert mem.ignored(namespace="u") == []


def test_operations_off_stores_everything() -> None:
    with memory(operations=False) as mem:
        mem.add("Hello!", namespace="u")
        assert len(mem.search(None, namespace="u")) == 1


def test_a_namespace_with_only_ignored_items_keeps_its_log(tmp_path) -> None:
    with memory(storage=str(tmp_path / "m.db")) as mem:
        key = mem.add("Thanks!", namespace="u")
    with memory(storage=str(tmp_path / "m.db")) as mem:
        assert [r.key for r in mem.ignored(namespace="u")] == [key]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_history_persists_on_both_backends(backend: str, tmp_path) -> None:
    if backend == "postgres" and not PG_URL:
        pytest.skip(NO_POSTGRES)
    from langchain_membrain.storage import open_storage

    schema = f"membrain_test_{uuid.uuid4().hex[:12]}"

    def open_():
        return str(tmp_path / "ops.db") if backend == "sqlite" else open_storage(PG_URL, schema=schema)

    try:
        with memory(GroundTruthTeacher(), storage=open_()) as mem:
            home = add_event(mem, "u", "home1", "I live in a flat in Leeds.")
            add_event(mem, "u", "home2", "We moved to a house in Headingley.", "UPDATE", "home1")
            add_event(mem, "u", "hi", "Hello there!", "IGNORE")
        with memory(GroundTruthTeacher(), storage=open_()) as mem:
            assert [v.text for v in mem.history(home, namespace="u")] == [
                "I live in a flat in Leeds.", "We moved to a house in Headingley."]
            assert [r.text for r in mem.search("Leeds flat", namespace="u")] == ["We moved to a house in Headingley."]
            assert [r.text for r in mem.ignored(namespace="u")] == ["Hello there!"]
            mem.tree("u").check_invariants()
    finally:
        if backend == "postgres":
            import psycopg

            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_search_credits_the_current_version_with_the_versions_it_replaced(tmp_path) -> None:
    """After an UPDATE the current version is found by what only its old version said
    ("Leeds"), in the writing process, in one that caught up with the write, and after a
    reload: the three indexes score alike."""
    db = str(tmp_path / "m.db")
    with memory(GroundTruthTeacher(), storage=db) as mem, \
            memory(GroundTruthTeacher(), storage=db, refresh_interval=0) as reader:
        home = add_event(mem, "u", "home1", "I live in a flat in Leeds.")
        add_event(mem, "u", "pet1", "Our ferret Pickle lives aboard the boat.")
        assert reader.search("Leeds", namespace="u")[0].key == home
        add_event(mem, "u", "home2", "We bought a house in Headingley.", "UPDATE", "home1")
        written = [(r.key, r.score) for r in mem.search("Leeds, where I live", namespace="u")]
        assert written[0][0] == home and len(written) == 2
        assert [(r.key, r.score) for r in reader.search("Leeds, where I live", namespace="u")] == written
    with memory(GroundTruthTeacher(), storage=db) as mem:
        assert [(r.key, r.score) for r in mem.search("Leeds, where I live", namespace="u")] == written


# ------------------------------------------------------------------ the tree
def test_archive_round_trips_and_keeps_invariants() -> None:
    tree = MembrainTree("s", dim=3)
    a = tree.add_aspect(tree.root_id, "home", embedding=[1, 0, 0])
    f = tree.add_fact(a, "Paris", embedding=[1, 0, 0], node_id="k")
    tree.supersede(f, "Berlin", embedding=[0.9, 0.1, 0])
    g = tree.add_fact(a, "cat", embedding=[0, 1, 0])
    tree.retire(g)
    tree.log_ignored(None, "hi")
    tree.check_invariants()
    assert [n.text for n in tree.history("k")] == ["Paris"]
    assert tree.node("k").text == "Berlin" and g not in tree
    again = MembrainTree.from_dict(tree.to_dict())
    again.check_invariants()
    assert {k: n.text for k, n in again.archive.items()} == {k: n.text for k, n in tree.archive.items()}
    assert np.allclose(again.mean_embedding(a), [0.9, 0.1, 0])
    copy = tree.copy()
    copy.log_ignored(None, "bye")
    assert len(copy.archive) == len(tree.archive) + 1
    rows, removed = tree.drain_changes()
    assert {r["kind"] for r in rows} >= {"history", "ignored"} and g not in {r["id"] for r in rows}


# ------------------------------------------------------------------ views
def test_cli_history_and_html_export(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich tables: one row per line
    db = str(tmp_path / "m.db")
    with memory(GroundTruthTeacher(), storage=db) as mem:
        home = add_event(mem, "u", "home1", "I live in a flat in Leeds.")
        add_event(mem, "u", "home2", "We moved to a house in Headingley.", "UPDATE", "home1")
        html = tree_to_html(mem.tree("u"))
    assert 'class="past superseded"' in html and "<s>I live in a flat in Leeds.</s>" in html
    assert 'id="history"' in html and "li.past { display: none;" in html
    assert cli_main(["--db", db, "history", home, "--ns", "u"]) == 0
    out = capsys.readouterr().out
    assert "superseded" in out and "current" in out and "Leeds" in out and "Headingley" in out
    assert cli_main(["--db", db, "history", "nope", "--ns", "u"]) == 1


# ------------------------------------------------------------------ the student
def test_the_student_learns_the_rule_and_opens_its_gate(one_torch_thread) -> None:
    """Taught by the offline rule on a stream of items, the student agrees with it and
    starts deciding alone; before its warm-up it never does (no shipped prior)."""
    rng = np.random.default_rng(0)
    student = OperationStudent(seed=0)
    items = ["Hello!", "Thanks a lot!", "What time is it?", "I like green tea.", "My sister lives in Rome.",
             "Where is my passport?", "I play the piano.", "ok cool", "I work at a bakery.", "good night"]
    assert student.propose(OperationQuestion("Hello!", rng.normal(size=16).astype(np.float32), ()))[1] is False
    vecs = {t: rng.normal(size=16).astype(np.float32) for t in items}
    for i in range(300):
        text = items[i % len(items)]
        q = OperationQuestion(text, vecs[text], ())
        proposed, _ = student.propose(q)
        student.learn(q, conservative_operation(q), proposed)
    assert student.gate_open()
    for text in items:
        op, trusted = student.propose(OperationQuestion(text, vecs[text], ()))
        assert op == conservative_operation(OperationQuestion(text, None, ()))
    assert student.stats()["recent_agreement"] >= 0.9
    # Decisions run through a trace made before any training: it reads the trained weights.
    row = student.encode(OperationQuestion(items[3], vecs[items[3]], ()))
    assert student.net._traced is not None
    np.testing.assert_allclose(student.net.infer(row), student.net.logits([row]).detach().numpy()[0], rtol=1e-5)


def test_labels_asked_because_the_student_was_unsure_do_not_shut_its_gate(one_torch_thread) -> None:
    """Only labels asked whatever the student's confidence (audits, a closed gate) measure
    its agreement: a run of hard items it was unsure of, and got wrong, still trains it but
    leaves its gate and calibration as they were; the same run as audits shuts the gate."""
    rng = np.random.default_rng(0)
    items = ["Hello!", "Thanks a lot!", "I like green tea.", "My sister lives in Rome.", "I play the piano."]
    vecs = {t: rng.normal(size=16).astype(np.float32) for t in items}

    def taught() -> OperationStudent:
        student = OperationStudent(seed=0)
        for i in range(200):
            q = OperationQuestion(items[i % len(items)], vecs[items[i % len(items)]], ())
            student.learn(q, conservative_operation(q), student.propose(q)[0])
        assert student.gate_open()
        return student

    hard = [OperationQuestion(f"I might move to city number {i}.", rng.normal(size=16).astype(np.float32), ())
            for i in range(40)]
    for unbiased in (False, True):
        student = taught()
        temperature, labelled = student.calibrator.temperature, student.labelled
        for q in hard:
            proposed = student.propose(q)[0]
            student.learn(q, IGNORE if proposed == ADD else ADD, proposed, unbiased=unbiased)
        assert student.labelled == labelled + len(hard)  # every label trains
        assert student.gate_open() is not unbiased
        if not unbiased:
            assert student.calibrator.temperature == temperature


def test_the_student_is_saved_with_the_models(tmp_path, one_torch_thread) -> None:
    """The operation student's weights and counters are checkpointed beside the models and
    restored by the next process, which proposes the same operations."""
    db = str(tmp_path / "m.db")
    texts = ["Hello!", "I like green tea.", "What time is it?", "My sister lives in Rome.", "Thanks a lot!"]
    with memory(storage=db, operations=True) as mem:
        for i in range(12):
            mem.add(f"{texts[i % len(texts)]}", namespace=f"u{i}")
        before = mem._operations.student
        probe = OperationQuestion("Good morning!", mem._embed(["Good morning!"])[0], ())
        proposed, labelled = before.propose(probe)[0], before.labelled
    assert labelled > 0
    with memory(storage=db, operations=True) as mem:
        after = mem._operations.student
        assert after.labelled == labelled and after.propose(probe)[0] == proposed
        assert mem.stats()["operations"]["student"]["labelled"] == labelled


def test_an_unreadable_student_checkpoint_starts_afresh(tmp_path) -> None:
    from langchain_membrain.storage import open_storage

    db = str(tmp_path / "m.db")
    with open_storage(db) as storage:
        storage.save_checkpoint("operations", b"not a checkpoint", {})
    with memory(storage=db, operations=True) as mem:
        assert mem._operations.student.labelled == 0
        assert "operation-student" in mem.stats()["checkpoint_error"]
        mem.add("I like green tea.", namespace="u")


def test_a_student_checkpoint_whose_optimiser_does_not_fit_is_refused(one_torch_thread) -> None:
    """The optimiser state is checked as the placement trainer's is (nets.check_optimiser_state):
    moments of another shape are refused when loaded, not at the first training step."""
    from langchain_membrain.errors import CheckpointError
    from langchain_membrain.students import torchfile

    student = OperationStudent(batch=2, steps=1)
    e = np.ones(8, np.float32) / np.sqrt(8)
    for text in ["I like tea.", "Hello!"] * 2:
        q = OperationQuestion(text, e, ())
        student.learn(q, conservative_operation(q), student.propose(q)[0])
    state = torchfile.load(student.state_bytes())
    fresh = OperationStudent(batch=2, steps=1)
    fresh.load_bytes(torchfile.save(state))
    assert fresh.optimiser_steps == student.optimiser_steps
    state["optimiser"]["state"][0]["exp_avg"] = np.zeros(3, np.float32)
    with pytest.raises(CheckpointError, match="optimiser state"):
        OperationStudent(batch=2, steps=1).load_bytes(torchfile.save(state))


def test_an_audited_item_is_one_question() -> None:
    """One audit draw per item serves its memory operation and its placement: with every
    item drawn (audit_rate 1), each costs exactly one question, the operation's (in one-call
    mode it answers the placement too); the placement's deferred audits are counted as
    shared, not again."""
    from langchain_membrain.index.embeddings import MiniLMEmbeddings
    from langchain_membrain.insert.config import LearnerConfig
    from langchain_membrain.students.training_config import Policy

    texts = [f"My {thing} is {colour}." for thing in ("car", "bike", "door", "kettle", "scarf")
             for colour in ("red", "blue", "green", "yellow")]
    learner = LearnerConfig(stage1=Policy(audit_rate=1.0), stage2=Policy(audit_rate=1.0))
    with MembrainMemory(embeddings=MiniLMEmbeddings(), background=False, relabel=False, dedupe=False,
                        learner=learner) as mem:
        for t in texts:
            mem.add(t, namespace="u")
        s = mem.stats()
        assert s["operations"]["student"]["prior"] == "trusted"
        assert s["teacher_calls"] == len(texts) == s["operations"]["teacher_questions"]
        assert s["audits_shared"] > 0 and s["questions"]["audit"] == 0
