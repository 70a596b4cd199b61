"""The settings of a namespace's search index: :class:`RetrievalConfig`, its switches and
weights (index/facts.py defines what each part scores), and how the topic match's "auto"
weight is decided."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .chat import CHAT_SCORERS, ChatScorer, check_chat


@dataclass(frozen=True)
class RetrievalConfig:
    """Switches and weights of the pipeline. Defaults: the strong flat pipeline without the
    chat scorers; the tree parts are off because none measured as a gain on LoCoMo (see the
    bench). Setting a weight to 0 turns its part off."""

    stem: bool = True
    k1: float = 1.5
    b: float = 0.3
    dense_weight: float = 0.2  # fused = bm25 / max(bm25) + dense_weight * z(cos)
    # The chat scorers on (chat.py: SpeakerBoost, SessionContext, DateTerms), each at most
    # once; none by default: they read speaker, session and date metadata as chat turns carry
    # them, and other data need not mean that by those keys. for_chat() turns on all three.
    chat: tuple[ChatScorer, ...] = ()
    # Fast mode.
    ann_min_facts: int = 2000
    ann_candidates: int = 200
    common_df: float = 0.05  # fast mode: posting lists longer than this share of N are not walked
    hnsw_m: int = 32
    hnsw_ef_construction: int = 100
    hnsw_ef_search: int = 200
    # Tree (used only when search() gets a tree).
    tree_aspect_prior: float = 0.0  # + w * best score among the facts of the fact's aspect
    # Topic match (FactIndex docstring, "Topic match"): facts below the aspects that match
    # the query best get + tree_topic_weight * dense_weight * the aspect's z-scored cosine.
    # None ("auto"): MembrainMemory turns it on (TOPIC_WEIGHT) when its teacher names topics
    # (an LLM, an endpoint, an evaluation teacher) and off under the offline rule, whose
    # aspects are keyword clusters of the embeddings: boosting them lowered LoCoMo's
    # single-hop recall. A FactIndex used alone reads None as off.
    tree_topic_weight: float | None = None
    tree_topic_margin: float = 0.05  # aspects within this cosine of the best one match too
    tree_topic_min_facts: int = 3  # smaller aspects say too little about a topic
    tree_topic_min_z: float = 2.0  # the best aspect must stand this far above the facts
    # Former versions of a fact (those it superseded, :meth:`FactIndex.set_former`): their
    # terms join its lexical field with this weight (0: off), and with ``former_dense`` its
    # cosine is the best over its own embedding and theirs.
    former_weight: float = 1.0
    former_dense: bool = True
    # Memory kinds (reads._ranked): the best formed facts a second step searches with (0: one
    # step) and its score's weight; the weight of the sessions' prior from their working memories.
    second_step: int = 5
    second_step_weight: float = 0.25
    session_prior: float = 0.0
    # A search places each current fact that supersedes or restates a fact it returns just
    # before it (retrieval/supersession.py); False: off.
    supersession: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "chat", check_chat(self.chat))  # a list is kept as a tuple

    @classmethod
    def for_chat(cls, **changes: Any) -> RetrievalConfig:
        """Every chat scorer on (``SpeakerBoost()``, ``SessionContext()``, ``DateTerms()``):
        for facts that are conversation turns with speaker, session and date metadata (the
        configuration of ``bench locomo``). ``changes``: other fields."""
        return cls(**{"chat": CHAT_SCORERS, **changes})


TOPIC_WEIGHT = 1.0  # the topic match's weight when "auto" turns it on


def topic_weight(config: RetrievalConfig) -> float:
    """The topic match's weight in effect: ``tree_topic_weight``, None (auto, unresolved) as 0."""
    return float(config.tree_topic_weight or 0.0)


def resolve_topic_weight(config: RetrievalConfig, *, teacher_names_topics: bool) -> RetrievalConfig:
    """``config`` with an "auto" topic weight decided: :data:`TOPIC_WEIGHT` when the teacher
    names topics, else 0; an explicit weight is kept."""
    if config.tree_topic_weight is not None:
        return config
    return replace(config, tree_topic_weight=TOPIC_WEIGHT if teacher_names_topics else 0.0)
