"""The offline default teacher: embedding-similarity rules, no network, no LLM.

Notation. Every fact carries an embedding ``e`` (assumed unit-norm, as all-MiniLM-L6-v2's
are). For a set of facts ``X`` with mean embedding ``m(X)``, the **affinity** of a fact to
``X`` is ``a(f, X) = e_f . m(X)``, which for unit vectors equals the mean cosine similarity
of ``f`` to the members of ``X`` (average linkage). Unlike the cosine to the mean, it falls
as ``X`` spreads out, so a large, mixed aspect does not look attractive: a catch-all's mean
drifts toward the domain mean, whose *direction* is close to every fact but whose *length*
is short. A node's affinity is to the facts below it; when ``f`` itself is below, it is left
out (leave-one-out).

Stage 1 (where does a new fact go), MemTree's rule made size-aware: at the current node
``c`` of depth ``d`` (the root: 0), score each candidate child aspect; descend into the best,
``A``, if its score reaches its **bar**, else attach here (index 0). With
``size_aware=False`` the score is MemTree's cosine to the aspect's mean embedding and the bar
is MemTree's threshold alone,

    theta(d) = theta0 * exp(rate * d / D)

with theta0 = 0.4, rate = 0.5, D = 10 (:meth:`HeuristicConfig.memtree`). With
``size_aware=True`` (default) the score is the affinity ``a(f, A)`` and the bar is

    bar(c, A) = max(theta(d),  a(f, c minus A) + b * n(A) / n(c minus A))

with ``n`` counting facts and ``b = balance_margin``. The second term, the **balance bar**,
asks ``f`` to fit ``A`` better than it fits the rest of ``c`` (A's siblings and c's own
facts), by a margin that grows with the odds ``n(A) / n(c minus A)``: nothing for a small
aspect, 20 b for one that already holds 95% of ``c``. A catch-all, whose facts are no closer
to each other than to the rest, thus stops being fed, and the facts that fit no aspect stay
at ``c`` to form new sibling groups (when ``c minus A`` is empty the balance bar does not
apply). Affinities are lower than cosines, hence the lower default theta0 = 0.1; the
default rate = 5 makes theta rise by e^0.5 per level (0.10, 0.16, 0.27, 0.45, 0.74 at depths
0 to 4). The bar costs O(1) per candidate (sums of embeddings are kept on every node).

Stage 2 (tidy the closure of the new fact ``f`` under parent ``P``, grandparent ``G``) asks
stage 1's own rule about facts that are already attached, so that the two stages never
disagree: stage 1 ran on a tree without ``f``, so each question below is asked with the fact
in question left out of every statistic (leave-one-out). It looks at f's sibling facts or,
past ``max_neighbourhood`` of them, at the most similar ones, so the clustering costs
O(max_neighbourhood^2) at worst (the rest is linear in P's width). For ``f`` and, with
``tidy_siblings`` (off by default), each of those siblings ``x``:

- Promote(x) when ``a(x, P minus x) + promote_margin < bar(G, P)``: stage 1 at G would not
  send ``x`` into P, by a margin (this contains the plain "closer to the rest of G than to P"
  rule, and, for an over-full P, its balance bar);
- else Demote(x, S) into the aspect ``S`` that stage 1 at P would descend into (its best
  candidate, if it reaches ``bar(P, S)``); for a sibling ``x`` (already placed) only when
  also ``a(x, S) > a(x, P minus x) + demote_margin``. The new fact is demoted exactly where
  stage 1 would put it (among the same top-K candidates), never elsewhere: teacher-forced,
  stage 1 stopped at P, so stage 2 never moves the new fact; it does move a fact that a
  student placed where the teacher would not have.

Sibling tidying is off by default because it makes stage 2 hard to imitate: it re-asks every
sibling's place at every insert, and a student has to predict all of those moves at once to
agree with the series. Off, the moves concern the new fact alone (the Groups below still
cover the whole neighbourhood), and on long chats the student decides stage 2 alone more
often, at a higher agreement.

Then Group, when ``P`` is crowded (at least ``crowd`` fact children left) and large enough
to split (at least ``split_min`` facts below it): its fact children are clustered by
average linkage on cosine similarity, two clusters merging while the mean similarity
between their members is at least

    cut = max(group_threshold, coherence + group_margin, theta(depth(P)))

with ``coherence`` the mean pairwise cosine of those fact children: a group must be tighter
than its parent's facts, and never looser than the bar by which stage 1 would enter it from
P. The root, which has nowhere else to put its facts, also groups before it holds
``split_min`` facts, but then only clusters at least ``young_threshold`` tight (near
duplicates), so that the first top-level topics are drawn from a sample of ``split_min``
facts and not from the first few. Each cluster of at least ``min_group`` facts (and not all
of P's children) becomes a Group, unless ``P`` is **over-full**, holding more than
``overfull`` of G's facts: then the cluster's facts are promoted instead (but not a cluster
that holds the new fact, which stage 1 has just placed in P), so that an over-full aspect is
split sideways, into new groups beside it under G, rather than growing one level deeper.
A P with no room for a new aspect below it (the tree's ``max_height``) is split sideways
in the same way; at a root without room, nothing is grouped.

With ``aspect_actions=True`` whole aspects move too (each with its subtree); for an aspect
``A`` among the children of a container ``C`` (P's child aspects, and P itself among its
siblings under G):

- Promote(A) when ``m(A) . m(up minus C) > m(A) . m(C minus A) + aspect_margin`` (``up``: C's
  parent, i.e. A's grandparent; only for P's child aspects, whose grandparent is in the
  closure);
- else nest A and its most similar sibling aspect B (by ``m(A) . m(B)``, the average-linkage
  similarity of their facts) when each is the other's best match and ``m(A) . m(B)`` exceeds
  both ``m(A) . m(C minus A)`` and coherence(C) by ``aspect_margin``: the smaller of the two
  is demoted under the larger. This is the average-linkage merge step, stopped at the
  container's own coherence.

Aspect labels: with an ``embed`` function (what ``MembrainMemory`` gives its default teacher),
each Group carries its name (labels.aspect_label): the topic of the shipped vocabulary that
fits its facts within the parent's facts (vocabulary.py: "food", "relatives", "travel"),
where one fits, else the offline labeller's phrase of their own words (the 1 to 4 word
phrase nearest their mean embedding); never an ancestor's or a sibling's label.
:meth:`HeuristicTeacher.name_aspect` names the same way from texts alone. Without
``embed``: the 1 to 4 words of the grouped texts with the highest tf-idf, where document
frequencies are counted over every fact text the teacher has seen (state kept inside the
teacher).
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable, cast

import numpy as np

from ..errors import InvalidOperationError
from ..tree.actions import Action, Demote, Group, Promote
from ..tree.labels import aspect_label, name_groups
from ..tree.placement import NewFact, Subtree, stage1_candidates
from ..tree.tree import Closure, MembrainTree
from ..tree.vocabulary import TopicVocabulary
from .base import BaseTeacher

__all__ = ["HeuristicConfig", "HeuristicTeacher", "STOPWORDS"]


@dataclass(frozen=True)
class HeuristicConfig:
    """Every threshold of :class:`HeuristicTeacher` (similarities are cosines in [-1, 1]).

    Stage 1: ``theta0``, ``rate``, ``depth_scale`` (D) give theta(d); ``size_aware`` picks
    the affinity score and the balance bar (True) or MemTree's cosine to the mean (False);
    ``balance_margin`` (b) scales the balance bar by the candidate's odds.
    Stage 2: ``promote_margin``, ``demote_margin`` (hysteresis of the fact moves),
    ``tidy_siblings`` (apply them to the new fact's sibling facts too); ``crowd`` (fact
    children that make a parent crowded), ``split_min`` (facts an aspect must hold before it
    is split into groups) and ``young_threshold`` (the lowest mean similarity of a group made
    at a root that holds fewer), ``overfull`` (the share of its parent's facts
    above which an aspect is over-full: its clusters are promoted, not grouped; 1.0 turns
    this off), ``group_threshold`` (lowest mean similarity inside a group), ``group_margin``
    (how much tighter than its parent a group must be), ``min_group`` (its smallest size);
    ``max_neighbourhood`` (the most sibling facts, nearest first, that stage 2 looks at);
    ``aspect_actions`` and ``aspect_margin`` for moving whole aspects; ``stage2=False`` turns
    stage 2 off (stage-1 only baselines). Naming: ``max_label_words`` (1 to 4), ``topic_names``
    (with an ``embed`` function, a Group is named by the topic of the shipped vocabulary that
    fits its facts, vocabulary.py, where one does).

    The defaults were chosen on three kinds of data at once, never on one file: the mean
    dendrogram purity over the eleven 500-fact WordNet samples of ``bench hierarchy``, the
    shape of the trees of the five LoCoMo dev conversations (largest top-level share,
    height; one fact per turn) and a 50-fact persona check (five topics); see the module
    docstring for what each rule is for and ``bench/hierarchy.py`` for how to reproduce the
    WordNet numbers. Lower ``crowd``, ``split_min`` and ``group_margin`` give a person's few
    dozen facts sub-topics and a higher dendrogram purity, at two to three times the teacher
    questions on chat (``bench personas``, ``bench economy``).
    """

    theta0: float = 0.1
    rate: float = 5.0
    depth_scale: float = 10.0
    size_aware: bool = True
    balance_margin: float = 0.05
    promote_margin: float = 0.05
    demote_margin: float = 0.05
    crowd: int = 6
    split_min: int = 20
    young_threshold: float = 0.7
    overfull: float = 1 / 3
    group_threshold: float = 0.25
    group_margin: float = 0.15
    min_group: int = 2
    aspect_actions: bool = False
    aspect_margin: float = 0.0
    tidy_siblings: bool = False
    max_neighbourhood: int = 64
    stage2: bool = True
    max_label_words: int = 4
    topic_names: bool = True

    def __post_init__(self) -> None:
        if self.depth_scale <= 0:
            raise InvalidOperationError("depth_scale (D) must be positive")
        if self.crowd < 2 or self.min_group < 2:
            raise InvalidOperationError("crowd and min_group must be at least 2")
        if self.max_neighbourhood < self.crowd:
            raise InvalidOperationError("max_neighbourhood must be at least crowd")
        if self.balance_margin < 0 or self.split_min < 0:
            raise InvalidOperationError("balance_margin and split_min must not be negative")
        if not 0.0 < self.overfull <= 1.0:
            raise InvalidOperationError("overfull must be in (0, 1]")
        if not 1 <= self.max_label_words <= 4:
            raise InvalidOperationError("max_label_words must be between 1 and 4")

    @classmethod
    def memtree(cls, **overrides) -> "HeuristicConfig":
        """MemTree's rule alone: cosine to the mean, theta0 = 0.4, rate = 0.5, D = 10, no
        size awareness (no balance bar) and no stage 2."""
        return cls(**{"theta0": 0.4, "rate": 0.5, "depth_scale": 10.0, "size_aware": False,
                      "stage2": False, **overrides})

    def theta(self, depth: int) -> float:
        """The stage-1 descent threshold at a node of depth ``depth`` (root: 0)."""
        return self.theta0 * math.exp(self.rate * depth / self.depth_scale)


# A small English stopword list, plus words that carry no topic in dictionary glosses.
STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been
    before being below between both but by can could did do does doing down during each
    either etc even ever every few for from further had has have having he her here hers him
    his how i if in into is it its itself just least less like many may might more most much
    must my neither no nor not now of off often on once one only or other others our out over
    own per same she should since so some such than that the their them then there these
    they this those through thus to too two under until up upon us usually very via was we
    were what when where whether which while who whom whose why will with within without
    would yet you your especially esp various several used use using kind kinds type types
    sort form forms something someone especially made make makes usually often typically
    called known having small large found""".split()
)
_WORD = re.compile(r"[a-z][a-z'-]*[a-z]")


def _words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if len(w) > 2 and w not in STOPWORDS]


def _unit(v: np.ndarray | None) -> np.ndarray | None:
    if v is None:
        return None
    n = float(np.linalg.norm(v))
    return None if n == 0.0 else v / n


class HeuristicTeacher(BaseTeacher):
    """The offline default teacher (module docstring: the rules and their definitions).

    Stateless for stage 1 and stage 2 apart from the word statistics used for naming, which
    it accumulates from the fact texts it is shown. Thread-safe.
    """

    name = "heuristic"
    fast = True
    names_topics = False  # its labels are keyword clusters of the embeddings (teachers.base)

    def __init__(self, config: HeuristicConfig | None = None, *, embed: Callable[[list[str]], Any] | None = None,
                 **overrides):
        base = config or HeuristicConfig()
        if overrides:
            base = HeuristicConfig(**{**base.__dict__, **overrides})
        self.config = base
        self.embed = embed  # texts -> vectors: names aspects with the offline labeller (labels.py)
        self.vocabulary = TopicVocabulary(embed) if embed is not None and base.topic_names else None
        self._df: Counter[str] = Counter()  # documents (fact texts) containing each word
        self._n_docs = 0
        self._seen: set[int] = set()  # hashes of texts already counted
        self._lock = threading.Lock()

    # --------------------------------------------------------------- helpers
    @staticmethod
    def _sum_count(tree: MembrainTree, node_id: str) -> tuple[np.ndarray | None, int]:
        n = tree.node(node_id)
        return n.emb_sum, n.emb_count

    @staticmethod
    def _mean(total: np.ndarray | None, count: int) -> np.ndarray | None:
        if total is None or count <= 0:
            return None
        return total / count

    def _affinity(self, e: np.ndarray, mean: np.ndarray | None) -> float | None:
        return None if mean is None else float(np.dot(e, mean))

    def _score(self, e: np.ndarray, mean: np.ndarray | None) -> float:
        """Stage-1 score of a candidate aspect with mean embedding ``mean``: the affinity
        ``e . mean`` (size-aware) or MemTree's cosine to the mean."""
        if mean is None:
            return -math.inf
        if self.config.size_aware:
            return float(np.dot(e, mean))
        u = _unit(mean)
        return -math.inf if u is None else float(np.dot(e, u))

    def _observe(self, texts: Iterable[str]) -> None:
        with self._lock:
            for t in texts:
                h = hash(t)
                if h in self._seen:
                    continue
                self._seen.add(h)
                self._n_docs += 1
                self._df.update(set(_words(t)))

    # --------------------------------------------------------------- stage 1
    def choose_stage1(self, new_fact: NewFact, subtree: Subtree) -> int:
        """Index 0 (attach at ``subtree.node_id``) or the index of the child aspect to descend
        into: the best-scoring one, if its score reaches its bar (theta of the current node's
        depth and, size-aware, the balance bar; module docstring)."""
        self._observe([new_fact.text])
        e = _unit(np.asarray(new_fact.embedding, dtype=np.float64))
        if e is None or len(subtree.candidates) < 2:
            return 0
        best = self._descent(subtree.tree, e, subtree.node_id, subtree.candidates[1:])
        return 0 if best is None else subtree.candidates.index(best)

    def _descent(self, tree: MembrainTree, e: np.ndarray, node: str, candidates: Iterable[str],
                 exclude: str | None = None) -> str | None:
        """The stage-1 rule at ``node``: the best-scoring candidate aspect if its score reaches
        its bar, else None. ``exclude`` is a fact already attached below ``node`` that is left
        out of every statistic, so that stage 2 asks exactly stage 1's question about it."""
        best, best_s = None, -math.inf
        for cand in candidates:
            if cand == exclude or tree.node(cand).kind != "aspect":
                continue
            s = self._score(e, tree.mean_embedding(cand))
            if s > best_s:
                best, best_s = cand, s
        if best is None or best_s < self._bar(tree, e, node, best, exclude):
            return None
        return best

    def _bar(self, tree: MembrainTree, e: np.ndarray, node: str, cand: str,
             exclude: str | None = None) -> float:
        """The score child aspect ``cand`` of ``node`` must reach for stage 1 to descend into
        it: ``theta(depth(node))`` and, size-aware, the balance bar
        ``a(f, node minus cand) + balance_margin * n(cand) / n(node minus cand)``.
        O(depth) with ``exclude`` (its ancestors are looked up), O(1) without."""
        cfg = self.config
        bar = cfg.theta(tree.depth(node))
        if not cfg.size_aware:
            return bar
        n_sum, n_cnt = self._sum_count(tree, node)
        c_sum, c_cnt = self._sum_count(tree, cand)
        if n_sum is None or c_sum is None:
            return bar
        if exclude is not None:
            x = tree.node(exclude)
            if x.emb_sum is not None:
                n_sum, n_cnt = n_sum - x.emb_sum, n_cnt - x.emb_count
                if cand in tree.path(exclude):
                    c_sum, c_cnt = c_sum - x.emb_sum, c_cnt - x.emb_count
        rest = n_cnt - c_cnt
        if c_cnt <= 0 or rest <= 0:  # nothing beside cand to weigh it against
            return bar
        a_rest = float(np.dot(e, (n_sum - c_sum) / rest))
        return max(bar, a_rest + cfg.balance_margin * c_cnt / rest)

    # --------------------------------------------------------------- stage 2
    def choose_stage2(self, tree: MembrainTree, closure: Closure) -> list[Action]:
        """The action series for the closure of the new fact (module docstring: the rules).

        At most one action per node; every action is valid on ``tree`` as given, and the
        series applies in order (no action moves a node that another one targets).
        """
        fid = closure.fact_id
        self._observe([tree.node(fid).text])
        if not self.config.stage2:
            return []
        cfg = self.config
        parent, grand = closure.parent_id, closure.grandparent_id
        sibling_aspects = tree.child_aspects(parent)
        actions: list[Action] = []
        moved: set[str] = set()
        targets: set[str] = set()

        # The new fact's neighbourhood: its sibling facts, cut to the ``max_neighbourhood``
        # most similar to it so that a very wide parent keeps the cost per insert bounded.
        neighbourhood = self._neighbourhood(tree, fid, parent)

        # Promote or Demote the new fact (and, with tidy_siblings, each sibling fact).
        movers = [fid] + ([c for c in neighbourhood if c != fid] if cfg.tidy_siblings else [])
        for x in movers:
            act = self._fact_move(tree, x, parent, grand, sibling_aspects, new=(x == fid))
            if act is not None:
                actions.append(act)
                moved.add(x)
                if isinstance(act, Demote):
                    targets.add(act.target_id)

        # Move whole sibling aspects (optional).
        if cfg.aspect_actions:
            actions += self._aspect_moves(tree, parent, grand, sibling_aspects, moved, targets)

        # Group tight clusters of a crowded parent's facts (never all of P's children: that
        # would only add a level) once P holds split_min facts; a younger root groups only
        # near-duplicates. An over-full P is split sideways instead: its clusters (but the
        # new fact's, which stage 1 has just placed here) are promoted, to be grouped beside P.
        facts = [c for c in neighbourhood if c not in moved and tree.node(c).embedding is not None]
        p_facts = tree.fact_count(parent)
        young = p_facts < cfg.split_min  # the root only: a young aspect is not split at all
        room = tree.has_room(parent, 2)  # for a new aspect under P (the tree's max_height)
        if len(facts) >= cfg.crowd and (grand is None or not young) and (room or grand is not None):
            # Without room below P, P is split sideways as if it were over-full.
            overfull = grand is not None and (p_facts > cfg.overfull * tree.fact_count(grand) or not room)
            n_children = len([c for c in tree.children(parent) if c not in moved])
            floor = cfg.young_threshold if young else -1.0
            for members in self._clusters(tree, facts, tree.depth(parent), floor):
                if len(members) < cfg.min_group or len(members) >= n_children:
                    continue
                if not overfull:
                    actions.append(Group(tuple(members)))
                elif fid not in members:
                    actions.extend(Promote(m) for m in members)
        return self._named(tree, actions, parent)

    def _named(self, tree: MembrainTree, actions: list[Action], parent: str) -> list[Action]:
        """``actions`` with each Group (all under ``parent``) named, with ``topic_names``, by
        the topic of the vocabulary that fits its facts within the parent's facts, else by
        their own words (labels.aspect_label), never an ancestor's or a sibling's label
        (labels.name_groups); unchanged without a vocabulary (:meth:`name_aspect` names them
        then)."""
        if self.vocabulary is None:
            return actions
        context = tree.node(parent).mean_embedding
        return name_groups(tree, actions, lambda texts, avoid, mean: aspect_label(
            texts, self.embed, vocabulary=self.vocabulary, mean=mean, context=context, avoid=avoid,
            max_words=self.config.max_label_words))

    def _neighbourhood(self, tree: MembrainTree, fid: str, parent: str) -> list[str]:
        """``fid`` and its sibling facts; beyond ``max_neighbourhood`` of them, ``fid`` and the
        ``max_neighbourhood - 1`` siblings of highest cosine to it."""
        facts = tree.child_facts(parent)
        cap = self.config.max_neighbourhood
        e = _unit(tree.node(fid).embedding)
        if len(facts) <= cap or e is None:
            return facts
        others = [c for c in facts if c != fid and tree.node(c).embedding is not None]
        x = np.stack([cast(np.ndarray, tree.node(c).embedding) for c in others]).astype(np.float64)
        sims = x @ e / np.maximum(np.linalg.norm(x, axis=1), 1e-12)
        keep = {others[i] for i in np.argsort(-sims)[: cap - 1]}
        return [c for c in facts if c == fid or c in keep]

    def _fact_move(self, tree: MembrainTree, fid: str, parent: str, grand: str | None,
                   sibling_aspects: list[str], new: bool = False) -> Action | None:
        """Promote(fid), Demote(fid, S) or None: stage 1's own rule asked about a fact that is
        already attached (module docstring). ``new``: fid is the inserted fact, whose Demote is
        exactly stage 1's decision at P (no hysteresis margin)."""
        cfg = self.config
        f = tree.node(fid)
        e = _unit(None if f.embedding is None else f.embedding.astype(np.float64))
        p_sum, p_cnt = self._sum_count(tree, parent)
        if e is None or p_sum is None:
            return None
        a_parent = self._affinity(e, self._mean(p_sum - f.emb_sum, p_cnt - 1))
        if a_parent is None:
            return None
        if grand is not None and a_parent + cfg.promote_margin < self._bar(tree, e, grand, parent, fid):
            return Promote(fid)
        cands = stage1_candidates(tree, parent, f.embedding)[1:] if new else sibling_aspects
        target = self._descent(tree, e, parent, cands, exclude=fid)
        if target is None:
            return None
        if not new:
            a_target = self._affinity(e, tree.mean_embedding(target))
            assert a_target is not None  # _descent never picks an aspect without a mean (score -inf)
            if a_target <= a_parent + cfg.demote_margin:
                return None
        return Demote(fid, target)

    def _aspect_moves(self, tree: MembrainTree, parent: str, grand: str | None, aspects: list[str],
                      moved: set[str], targets: set[str]) -> list[Action]:
        """Promote/Demote of whole aspects: P's child aspects among themselves (or up to G),
        then P itself among its siblings (the closure's uncles)."""
        out = self._move_aspects(tree, parent, grand, aspects, aspects, moved, targets)
        if grand is not None:
            out += self._move_aspects(tree, grand, None, tree.child_aspects(grand), [parent], moved, targets)
        return out

    def _move_aspects(self, tree: MembrainTree, container: str, up: str | None, aspects: list[str],
                      focus: list[str], moved: set[str], targets: set[str]) -> list[Action]:
        """For each aspect A of ``focus`` (children of ``container``): Promote(A) to ``up``
        when A is closer to the rest of ``up`` than to the rest of ``container``, else nest A
        and its most similar sibling B when they are mutual best matches and A u B is tighter
        than ``container`` as a whole (the average-linkage merge criterion, stopped at the
        container's coherence); the smaller of the two goes under the larger."""
        cfg = self.config
        c_sum, c_cnt = self._sum_count(tree, container)
        if c_sum is None:
            return []
        out: list[Action] = []
        means = {a: tree.mean_embedding(a) for a in aspects}
        coherence = self._coherence(c_sum, c_cnt)
        for a in focus:
            mean_a = means[a]
            if a in targets or a in moved or mean_a is None:
                continue
            a_sum, a_cnt = self._sum_count(tree, a)
            rest = self._mean(c_sum - a_sum, c_cnt - a_cnt) if c_cnt > a_cnt else None
            if rest is None:
                continue
            m_a = mean_a.astype(np.float64)
            here = float(np.dot(m_a, rest))
            if up is not None:
                u_sum, u_cnt = self._sum_count(tree, up)
                u_out = self._mean(u_sum - c_sum, u_cnt - c_cnt) if u_cnt > c_cnt else None
                if u_out is not None and float(np.dot(m_a, u_out)) > here + cfg.aspect_margin:
                    out.append(Promote(a))
                    moved.add(a)
                    continue
            best = self._best_sibling(a, aspects, means, moved)
            if best is None or self._best_sibling(best, aspects, means, moved) != a:
                continue
            mean_best = means[best]
            assert mean_best is not None  # _best_sibling skips aspects without a mean
            sim = float(np.dot(m_a, mean_best))
            if sim > max(here, coherence) + cfg.aspect_margin:
                small, big = (a, best) if tree.fact_count(a) <= tree.fact_count(best) else (best, a)
                if small in targets or small in moved or big in moved:
                    continue
                out.append(Demote(small, big))
                moved.add(small)
                targets.add(big)
        return out

    @staticmethod
    def _best_sibling(a: str, aspects: list[str], means: dict, moved: set[str]) -> str | None:
        best, best_s = None, -math.inf
        for b in aspects:
            if b == a or b in moved or means[b] is None:
                continue
            s = float(np.dot(means[a], means[b]))
            if s > best_s:
                best, best_s = b, s
        return best

    @staticmethod
    def _coherence(total: np.ndarray | None, count: int) -> float:
        """Mean pairwise cosine of ``count`` unit vectors summing to ``total`` (self-pairs
        excluded): (|total|^2 - count) / (count * (count - 1))."""
        if total is None or count < 2:
            return 1.0
        return (float(np.dot(total, total)) - count) / (count * (count - 1))

    def _clusters(self, tree: MembrainTree, facts: list[str], depth: int = 0,
                  floor: float = -1.0) -> list[list[str]]:
        """Clusters of two or more of ``facts`` (the children of a node of depth ``depth``):
        average linkage on cosine similarity, two clusters merging while the mean similarity
        between their members is at least ``max(group_threshold, coherence + group_margin,
        theta(depth), floor)``, with ``coherence`` the mean pairwise cosine of all of
        ``facts``."""
        from scipy.cluster.hierarchy import fcluster, linkage

        cfg = self.config
        x = np.stack([cast(np.ndarray, tree.node(c).embedding) for c in facts]).astype(np.float64)
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        x = x / np.where(norms == 0.0, 1.0, norms)
        cut = max(cfg.group_threshold, self._coherence(x.sum(axis=0), len(x)) + cfg.group_margin,
                  cfg.theta(depth), floor)
        labels = fcluster(linkage(x, method="average", metric="cosine"), t=1.0 - cut, criterion="distance")
        by_label: dict[int, list[str]] = {}
        for fid, lab in zip(facts, labels):
            by_label.setdefault(int(lab), []).append(fid)
        return [m for m in by_label.values() if len(m) >= 2]

    # ----------------------------------------------------------------- naming
    def name_aspect(self, fact_texts: list[str]) -> str:
        """A 1 to ``max_label_words`` word label for ``fact_texts``. With ``embed``: the topic
        of the vocabulary that fits them, else the offline labeller's phrase
        (labels.aspect_label). Without: the most distinctive words, as follows.

        Each word is scored by tf-idf: the number of the texts that contain it times
        ``log((1 + N) / (1 + df))``, with N and df counted over every fact text this teacher
        has seen (these texts included). Words scoring at least half the best are kept, at
        most ``max_label_words``, best first. Never empty: without any content word the
        first word of the first text (or ``"group"``) is the label.
        """
        texts = [t for t in fact_texts if isinstance(t, str)]
        if self.embed is not None and texts:
            return aspect_label(texts, self.embed, vocabulary=self.vocabulary, max_words=self.config.max_label_words)
        self._observe(texts)
        tf: Counter[str] = Counter()
        first_seen: dict[str, int] = {}
        for t in texts:
            for w in set(_words(t)):
                tf[w] += 1
            for w in _words(t):
                first_seen.setdefault(w, len(first_seen))
        if not tf:
            raw = [w for t in texts for w in re.findall(r"\w+", t)]
            return raw[0].lower() if raw else "group"
        with self._lock:
            n, df = self._n_docs, dict(self._df)
        scores = {w: c * math.log((1 + n) / (1 + df.get(w, 0))) + 1e-9 * c for w, c in tf.items()}
        ranked = sorted(scores, key=lambda w: (-scores[w], first_seen[w]))
        top = scores[ranked[0]]
        keep = [w for w in ranked[: self.config.max_label_words] if scores[w] >= 0.5 * top]
        return " ".join(keep)
