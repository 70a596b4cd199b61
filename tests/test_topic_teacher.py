"""TopicTeacher: the evaluation teacher that knows each fact's topic, and bench topics."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import WordEmbeddings

from langchain_membrain import MembrainMemory
from langchain_membrain.bench.topic_teacher import TopicTeacher
from langchain_membrain.bench.topics import headline, load_topics, r_precision, run_topics
from langchain_membrain.insert.config import LearnerConfig
from langchain_membrain.students.training_config import Policy
from langchain_membrain.tree.evaluation import dendrogram_purity
from langchain_membrain.tree.tree import MembrainTree

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# Two topics, the first with two subtopics of three facts each (so it grows past
# split_after=4 and gets sub-aspects); shared words make the bag-of-words embedder group them.
FACTS = [
    ("health", "teeth", "dentist cleaned my teeth on monday"),
    ("money", "savings", "savings account pays three percent"),
    ("health", "teeth", "dentist said my teeth need a filling"),
    ("health", "sleep", "sleep badly after late coffee"),
    ("money", "savings", "savings goal is a new bike"),
    ("health", "sleep", "sleep tracker says six hours"),
    ("health", "teeth", "teeth whitening at the dentist is pricey"),
    ("health", "sleep", "sleep better with the window open"),
]
PATHS = {text: [topic, sub] for topic, sub, text in FACTS}
TEACHER_ONLY = LearnerConfig(stage1=Policy(execute="teacher"), stage2=Policy(execute="teacher"))


def teacher_tree(teacher: TopicTeacher) -> MembrainTree:
    with MembrainMemory(embeddings=WordEmbeddings(), teacher=teacher, learner=TEACHER_ONLY, operations=False,
                        relabel=False, prior=False, background=False) as mem:
        for _, _, text in FACTS:
            mem.add(text, namespace="ana")
        mem.flush()  # the inserts still waiting for a batch question are placed
        return mem.tree("ana").copy()


def labels_of(tree: MembrainTree, node: str) -> set[str]:
    return {tree.node(a).text for a in tree.child_aspects(node)}


def test_facts_go_under_their_topic_named_as_the_topic_with_subtopics_once_it_grew():
    tree = teacher_tree(TopicTeacher(PATHS))
    tree.check_invariants()
    assert labels_of(tree, tree.root_id) == {"health", "money"}
    health = next(a for a in tree.child_aspects(tree.root_id) if tree.node(a).text == "health")
    assert labels_of(tree, health) == {"teeth", "sleep"}  # six facts: past split_after
    money = next(a for a in tree.child_aspects(tree.root_id) if tree.node(a).text == "money")
    assert tree.child_aspects(money) == []  # two facts: no sub-aspects yet
    topic = {f: PATHS[tree.node(f).text][0] for f in tree.facts()}
    assert dendrogram_purity(tree, topic) == pytest.approx(1.0)


def test_without_subtopic_splits_a_topic_stays_one_aspect():
    tree = teacher_tree(TopicTeacher(PATHS, split_after=100))
    health = next(a for a in tree.child_aspects(tree.root_id) if tree.node(a).text == "health")
    assert tree.child_aspects(health) == [] and len(tree.child_facts(health)) == 6


def test_an_aspect_stands_for_its_majority_at_its_own_level():
    teacher = TopicTeacher(PATHS)
    tree = MembrainTree("ana", dim=2)
    mixed = tree.add_aspect(tree.root_id, "stuff")
    for text in (FACTS[0][2], FACTS[2][2], FACTS[3][2]):  # health: teeth, teeth, sleep
        tree.add_fact(mixed, text, embedding=np.array([1.0, 0.0]))
    assert teacher.stands(tree, mixed) == ("health",)  # depth 1: the topic, not its subtopic
    tree.add_fact(mixed, FACTS[1][2], embedding=np.array([0.0, 1.0]))  # money
    tree.add_fact(mixed, FACTS[4][2], embedding=np.array([0.0, 1.0]))
    assert teacher.stands(tree, mixed) == ("health",)  # 3 of 5
    tree.add_fact(mixed, "a fact the teacher does not know", embedding=np.array([0.0, 1.0]))
    assert teacher.stands(tree, mixed) == ()  # 3 of 6 is no strict majority
    assert teacher.name_aspect([FACTS[0][2], FACTS[2][2]]) == "teeth"
    assert teacher.name_aspect([FACTS[0][2], FACTS[3][2]]) == "health"
    assert teacher.name_aspect([FACTS[0][2], FACTS[1][2]]) == "group"


def test_wordnet_classes_are_cut_to_the_levels_below_the_top_node():
    rows = [{"text": "dog: a canine", "path": ["animal", "mammal", "carnivore", "canine", "dog family"]},
            {"text": "animal: a living thing", "path": []}]
    teacher = TopicTeacher.from_oracle_rows(rows, levels=3)
    assert teacher.path_of("dog: a canine") == ("mammal", "carnivore", "canine")
    assert teacher.path_of("animal: a living thing") == ()


def test_paths_are_label_sequences():
    with pytest.raises(TypeError):
        TopicTeacher({"a fact": "health"})


def test_r_precision_counts_the_topic_among_the_first_r_hits():
    assert r_precision(["a", "x", "b", "c"], {"a", "b"}) == 0.5
    assert r_precision(["a", "b"], {"a", "b"}) == 1.0
    assert r_precision([], set()) == 0.0


def test_the_topic_bench_streams_users_through_one_memory(tmp_path):
    rows = [{"persona": p, "topic": t, "subtopic": s, "text": f"{p} {x}"} for p in ("ana", "bo") for t, s, x in FACTS]
    rows += [{"kind": "query", "persona": p, "topic": "health", "text": "how do I sleep and how are my teeth"}
             for p in ("ana", "bo")]
    path = tmp_path / "topics.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    data = load_topics(path)
    assert list(data.facts) == ["ana", "bo"] and data.queries["bo"]["health"].startswith("how")
    emb = WordEmbeddings()

    def make_memory():
        return MembrainMemory(embeddings=emb, teacher=TopicTeacher(data.paths), shadow_teacher=TopicTeacher(data.paths),
                              prior=False, background=False)

    thirds, final, per_insert = run_topics(data, make_memory, lambda t: np.asarray(emb.embed_documents(t)))
    assert sum(t.inserts for t in thirds) == len(per_insert) == 16
    questions = sum(sum(t.questions.values()) for t in thirds)
    assert questions == sum(per_insert) == sum(final["questions"].values())
    head = headline(thirds)
    assert head["purity"] == pytest.approx(1.0)  # the teacher decided while the student was warming up
    assert head["label_agreement"] == pytest.approx(1.0)  # each topic's aspect is named by its topic
    assert 0.0 <= head["rprec_membrain"] <= 1.0 and 0.0 <= head["rprec_flat_questions"] <= 1.0
    assert head["max_prompt_tokens"] > 0


def test_the_bundled_topic_sets_have_users_sharing_topics():
    for name in ("data/topics.jsonl", "data/topics_heldout.jsonl"):
        from importlib import resources

        data = load_topics(resources.files("langchain_membrain").joinpath(name))
        assert len(data.facts) >= 8
        users_per_topic: dict[str, int] = {}
        for persona, rows in data.facts.items():
            topics = {r["topic"] for r in rows}
            assert len(topics) == 8 and set(data.queries[persona]) == topics
            for t in topics:
                users_per_topic[t] = users_per_topic.get(t, 0) + 1
        assert min(users_per_topic.values()) >= 4


def test_the_tree_joins_search_when_the_teacher_names_topics():
    """"health" is no word of the health facts: flat cosine finds the dentist's facts and
    not the sleep ones; the aspect the topic teacher named "health" holds both
    (RetrievalConfig.tree_topic_weight "auto")."""
    from langchain_membrain.index.config import RetrievalConfig

    health = {text for topic, _, text in FACTS if topic == "health"}

    def top(retrieval: RetrievalConfig | None) -> tuple[float | None, set[str]]:
        with MembrainMemory(embeddings=WordEmbeddings(), teacher=TopicTeacher(PATHS), learner=TEACHER_ONLY,
                            operations=False, relabel=False, prior=False, background=False,
                            retrieval=retrieval) as mem:
            for _, _, text in FACTS:
                mem.add(text, namespace="ana")
            mem.flush()  # the inserts still waiting for a batch question are placed
            hits = mem.search("health dentist", namespace="ana", limit=len(health))
            return mem.retrieval.tree_topic_weight, {h.text for h in hits}

    weight, found = top(None)
    assert weight and weight > 0 and found == health
    weight, found = top(RetrievalConfig(tree_topic_weight=0.0))  # an explicit weight is kept
    assert weight == 0.0 and found != health
    with MembrainMemory(embeddings=WordEmbeddings(), prior=False, background=False) as mem:
        assert mem.retrieval.tree_topic_weight == 0.0  # the offline rule's keyword clusters: not topics


def test_whether_a_teacher_names_topics_is_its_own_word_not_its_class():
    """The topic match and offline renaming follow the teacher's ``names_topics``
    (teachers.base.names_topics), whatever its class: a third-party teacher that says
    nothing names topics; one that says False is treated as the offline rule is; a subclass
    of the offline rule that says True is not."""
    from langchain_membrain.teachers import HeuristicTeacher

    class Plain:  # a third-party teacher: the Teacher protocol and nothing else
        def choose_stage1(self, new_fact, subtree):
            return 0

        def choose_stage2(self, tree, closure):
            return []

        def name_aspect(self, fact_texts):
            return "group"

        async def achoose_stage1(self, new_fact, subtree):
            return 0

        async def achoose_stage2(self, tree, closure):
            return []

        async def aname_aspect(self, fact_texts):
            return "group"

    class Keywords(Plain):
        names_topics = False

    class NamingRule(HeuristicTeacher):
        names_topics = True

    for teacher, names in ((Plain(), True), (Keywords(), False), (NamingRule(), True), (None, False)):
        with MembrainMemory(embeddings=WordEmbeddings(), teacher=teacher, prior=False, background=False) as mem:
            assert (mem.retrieval.tree_topic_weight > 0) is names, teacher
            assert mem._bg.offline_names is not names, teacher
