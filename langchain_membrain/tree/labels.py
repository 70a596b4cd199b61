"""Aspect labels that follow their facts.

An aspect is named once, from the few facts it is created with; then facts keep arriving
and the label can stop describing them ("knee" over a subtree about running). Definitions:

- The **labelled size** of an aspect is the number of facts below it when its label was
  last set, kept in its metadata under :data:`LABELLED_FACTS`. Aspects without it (named
  at creation, by Group) count as labelled at :data:`CREATED_SIZE` facts.
- An aspect is **stale** when the facts below it have reached ``growth`` (2) times its
  labelled size, and at least ``min_facts`` (4). Renaming only when an aspect has doubled
  keeps the cost at O(log n) namings per aspect over its life; aspects of 3 facts or fewer
  keep the name they were created with. Doubling rather than growing fourfold (the rule
  until 2026-12) makes the labels users see name their aspect's topic more often
  (``bench labels``, the personas' product trees: 0.57 to 0.71 of aspects on the held-out
  set), at one or two more renaming questions per LoCoMo conversation when the teacher
  names (at most one per ``naming_interval`` inserts).
- The **typical facts** of an aspect are the ``k`` facts below it whose embeddings are
  nearest its mean embedding: what a new label is made from.
- A **label candidate** of some texts is a phrase of 1 to ``max_words`` consecutive words
  of one sentence-like segment of one text, that neither starts nor ends with a stopword
  and is not made of numbers only (:func:`label_candidates`).
- The **offline label** of some texts is their candidate nearest (cosine) their mean
  embedding, with a bonus for the share of texts it occurs in and a mild preference for
  short phrases, never one of the labels to avoid (:func:`offline_label`). It costs one
  ``embed`` call, and no LLM.
- The **aspect label** of some texts (:func:`aspect_label`, what the offline default names
  aspects with) is the topic of a vocabulary that fits them (vocabulary.py), where one does,
  else their offline label.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..errors import NodeNotFoundError
from .actions import Action, Group
from .tree import MembrainTree
from .vocabulary import TopicVocabulary

LABELLED_FACTS = "labelled_facts"
CREATED_SIZE = 2  # a Group makes an aspect from two or more facts


def labelled_size(tree: MembrainTree, aspect_id: str) -> int:
    """Facts below ``aspect_id`` when its label was set (see the module docstring)."""
    return int(tree.node(aspect_id).metadata.get(LABELLED_FACTS, CREATED_SIZE))


def stale_aspects(tree: MembrainTree, fact_id: str, *, growth: float = 2.0, min_facts: int = 4) -> list[str]:
    """The aspects on the path from the root to ``fact_id`` whose fact count has reached
    ``growth`` times their labelled size and ``min_facts``, top first. O(depth)."""
    return [a for a in tree.path(fact_id)[1:-1]
            if tree.node(a).kind == "aspect"
            and tree.fact_count(a) >= max(growth * labelled_size(tree, a), min_facts)]


def typical_facts(tree: MembrainTree, aspect_id: str, k: int = 12) -> list[str]:
    """Texts of the ``k`` facts below ``aspect_id`` nearest its mean embedding, nearest
    first (facts without an embedding come last, in tree order). O(facts below)."""
    facts = tree.facts_below(aspect_id)
    mean = tree.mean_embedding(aspect_id)
    if mean is None:
        return [tree.node(f).text for f in facts[:k]]
    embs = [tree.node(f).embedding for f in facts]
    sims = np.array([-np.inf if e is None else float(np.dot(e, mean)) for e in embs])
    order = np.argsort(-sims, kind="stable")[:k]
    return [tree.node(facts[i]).text for i in order]


# ---------------------------------------------------------------------------------------
# Offline labels: candidate phrases drawn from the facts, ranked by embedding.

# Label stopwords (:data:`LABEL_STOPWORDS`) never begin or end a label: function words
# (English, plus a few German, French, Spanish and Portuguese articles and prepositions),
# chat filler, light verbs and relative dates ("yesterday"), which name no topic.
# Function words and chat filler are not even a fallback label.
_FUNCTION_WORDS = frozenset(
    """a about above across actually after again against ago all almost already also
    although always am among an and another any anybody anyone anything anyway anyways
    are aren't around as at away back be became because become been before being below
    beside besides between both but by can can't cannot could couldn't did didn't do
    does doesn't doing don't done down during each either else enough etc even ever every
    everybody everyone everything few for from further had hadn't has hasn't have haven't
    having he he'd he'll he's her here here's hers herself him himself his how however i
    i'd i'll i'm i've if in indeed into is isn't it it'd it'll it's its itself just least
    less let let's many may maybe me might mine more most much must my myself near neither
    never no nobody none nor not nothing now of off often on once one ones only onto or
    other others otherwise our ours ourselves out over own per perhaps quite rather same
    shall she she'd she'll she's should shouldn't since so some somebody someone something
    sometimes somewhat soon still such than that that's the their theirs them themselves
    then there there's therefore these they they'd they'll they're they've this those
    though through thus till to too toward towards under unless until up upon us very via
    was wasn't we we'd we'll we're we've were weren't what what's whatever when whenever
    where whether which while who who's whoever whole whom whose why will with within
    without won't would wouldn't yet you you'd you'll you're you've your yours yourself
    yourselves yeah yes yep yup nope nah ok okay oh hey hi hello bye please thank thanks
    lol lmao haha hahaha hmm um uh wow omg btw gonna wanna gotta kinda sorta
    der die das dass den dem des ein eine einen einem einer eines mein meine meinen meiner
    dein deine sein seine ihr ihre und oder mit von zum zur im vom ist sind war nicht auch auf für
    le la les un une du et est dans sur pour avec au aux ce cette mon ma mes
    el los las una unos unas del y es con por para al lo mi mis
    os um uma dos das ao na nas nos em com para pelo pela meu minha""".split()
)
# Function words a label may hold inside ("job at the bank"); any other stopword inside a
# phrase ("Tom has football practice") makes it a clause rather than a name.
_CONNECTORS = frozenset(
    """a an the of in on at for with and or to from by about near after before over under
    into around between without per via & de da do di du des del la le van von""".split()
)
# Light verbs, vague words and relative dates: words, but no topic.
_WEAK_WORDS = frozenset(
    """cool awesome nice glad totally definitely basically literally honestly seriously really
    pretty sure good great best better like likes liked know knew think thought guess
    mean means feel feels felt lot lots stuff bit kind sort thing things way look looks
    looking come comes came coming get gets getting got gotten go goes going gone went
    give gives given take taken make makes making made put keep kept say says said
    saying tell tells told talk talked talking see seen seem seems need needs want wants
    wanted time times day days love loves loved hate hates hated lives lived try tried
    trying week weeks today yesterday tomorrow tonight recently lately last next earlier
    later currently monday tuesday wednesday thursday friday saturday sunday""".split()
)
LABEL_STOPWORDS = _FUNCTION_WORDS | _WEAK_WORDS

# A leading "Name:" (up to three words, maybe after a "[timestamp]"), then a space.
_SPEAKER = re.compile(
    r"^\s*(?:\[[^\]]*\]\s*)?[^\W\d_][\w'’.\-]*(?:\s+[^\W\d_][\w'’.\-]*){0,2}\s*:\s+")
_SEGMENT = re.compile(r"[.,;:!?()\[\]{}\"“”«»|/\\…–—]+|\s-\s|\n")
_TOKEN = re.compile(r"[^\W_]+(?:['’\-][^\W_]+)*")
_NUMBER = re.compile(r"\d+(?:[.,:\-]\d+)*(?:st|nd|rd|th|s|k|km|am|pm|h|m)?")  # dates (2024-09-02) too

FALLBACK_LABEL = "topic"
#: Texts to vectors, one per text (e.g. ``MiniLMEmbeddings().embed_documents``).
Embed = Callable[[list[str]], Sequence[Sequence[float]] | np.ndarray]


def _key(word: str) -> str:
    return word.casefold().replace("’", "'")


def _weak(word: str) -> bool:
    """A word a label may not start or end with."""
    k = _key(word)
    return k in LABEL_STOPWORDS or len(k) < 2 or bool(_NUMBER.fullmatch(k))


def _unpossessive(word: str) -> str:
    """``word`` without a trailing possessive "'s" ("Lisbon's" -> "Lisbon")."""
    if len(word) > 3 and word[-2] in "'’" and word[-1] in "sS":
        return word[:-2]
    return word


def _speaker(text: str) -> tuple[str, str]:
    """``text`` split into its leading speaker prefix (``"Caroline: "``, maybe empty) and
    the rest, in NFC form."""
    text = unicodedata.normalize("NFC", text)
    m = _SPEAKER.match(text)
    return (m.group(0), text[m.end():]) if m else ("", text)


def _segments(text: str) -> list[list[str]]:
    """The word lists of the sentence-like segments of ``text``, speaker prefix dropped."""
    text = _speaker(text)[1]
    return [toks for seg in _SEGMENT.split(text) if (toks := _TOKEN.findall(seg))]


class _Candidates:
    """Candidate phrases of some texts, by casefolded key: surface forms, counts, and the
    number of texts each occurs in (document frequency)."""

    def __init__(self, texts: Sequence[str], max_words: int):
        if max_words < 1:
            raise ValueError("max_words must be at least 1")
        self.n_texts = len(texts)
        self.df: Counter[str] = Counter()
        self.count: Counter[str] = Counter()
        self.surfaces: dict[str, Counter[str]] = {}
        self.first: dict[str, int] = {}
        self.words: Counter[str] = Counter()  # words that are not function words, by key
        self.word_surfaces: dict[str, Counter[str]] = {}
        self.speakers: set[str] = set()  # words of speaker prefixes ("caroline")
        self.bodies: list[str] = []  # the texts without their speaker prefix
        for text in texts:
            prefix, body = _speaker(text)
            self.bodies.append(body)
            self.speakers.update(_key(w) for w in _TOKEN.findall(prefix) if not _weak(w))
            seen: set[str] = set()
            for toks in _segments(text):
                for w in toks:
                    kw = _key(w)
                    if kw not in _FUNCTION_WORDS and len(kw) > 1 and not _NUMBER.fullmatch(kw):
                        self.words[kw] += 1
                        self.word_surfaces.setdefault(kw, Counter())[w] += 1
                weak = [_weak(w) for w in toks]
                for i in range(len(toks)):
                    if weak[i]:
                        continue
                    for j in range(i, min(i + max_words, len(toks))):
                        if j > i and weak[j - 1] and _key(toks[j - 1]) not in _CONNECTORS:
                            break  # a clause, not a name
                        if weak[j]:
                            continue
                        phrase = " ".join(toks[i:j] + [_unpossessive(toks[j])])
                        k = _key(phrase)
                        self.first.setdefault(k, len(self.first))
                        self.count[k] += 1
                        self.surfaces.setdefault(k, Counter())[phrase] += 1
                        if k not in seen:
                            seen.add(k)
                            self.df[k] += 1

    def surface(self, k: str) -> str:
        """The most frequent surface form of ``k`` (the first seen among equals)."""
        forms = self.surfaces[k]
        return max(forms, key=lambda f: forms[f])  # max keeps the first seen of equals

    def ranked(self) -> list[str]:
        """Keys, best first without embeddings: more texts, then (among phrases found in
        two texts or more) more words, since a longer phrase as frequent as its words is
        more specific; then more occurrences, longer words, first seen."""
        def rank(k: str):
            n = k.count(" ") + 1
            df = self.df[k]
            return (-df, -n if df >= 2 else n, -self.count[k], -len(k), self.first[k])
        return sorted(self.df, key=rank)


def label_candidates(texts: list[str], *, max_words: int = 4) -> list[str]:
    """Candidate label phrases drawn from ``texts``, best first by document frequency.

    A candidate is a run of 1 to ``max_words`` consecutive words of one segment of one text
    (segments are split at sentence punctuation; words are runs of Unicode letters and
    digits, with inner apostrophes and hyphens) that neither starts nor ends with a
    stopword (:data:`LABEL_STOPWORDS`: function words, chat filler, light verbs, relative
    dates), a one-letter word or a number, holds no stopword inside but articles,
    prepositions and "and"/"or" ("job at the bank", not "Tom has football practice"), and
    is not made of numbers only. A trailing possessive "'s" is dropped ("Lisbon's" ->
    "Lisbon"), and so is a leading speaker prefix such as ``"Caroline:"``. Phrases are compared casefolded; each is returned in
    its most frequent surface form, accents and casing kept.

    Order: more texts containing the phrase first; among phrases found in two texts or
    more, longer phrases first; then more occurrences, longer, first seen. Deterministic.

    Parameters
    ----------
    texts : list of str
    max_words : int, at least 1

    Returns
    -------
    list of str, without casefolded duplicates; empty when no text has a content word.
    """
    c = _Candidates(texts, max_words)
    return [c.surface(k) for k in c.ranked()]


def _content(label: str) -> frozenset[str]:
    return frozenset(_key(w) for toks in _segments(label) for w in toks if not _weak(w))


def offline_label(
    texts: list[str],
    embed: Embed | None,
    *,
    mean: np.ndarray | None = None,
    avoid: Iterable[str] = (),
    max_words: int = 4,
    max_candidates: int = 64,
) -> str:
    """A short label for ``texts``, made of their own words, without an LLM.

    The label is the :func:`label_candidate <label_candidates>` ``c`` of ``texts`` that
    maximises

        cos(embed(c), m) + 0.15 * df(c) / len(texts) - 0.03 * (words(c) - 1)
        - 0.05 * (content words of c found in an avoided label)

    where ``m`` is ``mean`` if given, else the mean embedding of ``texts`` (speaker prefixes
    dropped), and ``df(c)`` is the number of texts containing ``c``. Only the
    ``max_candidates`` first candidates (by document frequency, see
    :func:`label_candidates`) are embedded, together with the texts when ``mean`` is not
    given: one ``embed`` call per label. With ``embed=None`` the label is the first
    candidate in that order.

    A candidate is never used when it equals (casefolded) a label of ``avoid`` (the parent's
    and the siblings' labels), nor when its content words (its words that are not stopwords)
    are all words of one avoided label: "knee" is not a label under "knee injury". Nor is a
    speaker's name (the words of a ``"Melanie:"`` prefix) unless every text mentions it.
    Fallbacks, in order: the most frequent word not avoided that is neither a function word
    nor a number (such as "today"), then ``"topic"``, ``"topic 2"``, ... The label is never
    empty, has at most ``max_words`` words (the fallbacks: one or two), and is deterministic
    for a deterministic ``embed``.

    Parameters
    ----------
    texts : list of str
        The facts to label (typically :func:`typical_facts`).
    embed : callable or None
        Texts to vectors, e.g. ``MiniLMEmbeddings().embed_documents``.
    mean : array, optional
        The aspect's mean embedding (e.g. ``tree.mean_embedding(aspect)``).
    avoid : iterable of str
        Labels the result must differ from.
    max_words : int
    max_candidates : int

    Returns
    -------
    str
    """
    avoid = [unicodedata.normalize("NFC", a) for a in avoid]
    avoided = {_key(" ".join(a.split())) for a in avoid}
    avoided_content = [ac for a in avoid if (ac := _content(a))]
    avoided_words = frozenset().union(*avoided_content) if avoided_content else frozenset()

    c = _Candidates(texts, max_words)

    def allowed(k: str) -> bool:
        if k in avoided:
            return False
        words = _content(k)
        if any(words <= ac for ac in avoided_content):
            return False
        # A speaker's name names the chat, not the topic, unless every fact mentions it.
        return not (words <= c.speakers and c.df[k] < c.n_texts)

    keys = [k for k in c.ranked() if allowed(k)][:max(1, max_candidates)]
    if keys:
        return _best_candidate(c, keys, embed, mean, avoided_words)
    return _fallback_label(c, avoided, avoided_content)


def aspect_label(texts: list[str], embed: Embed | None, *, vocabulary: TopicVocabulary | None = None,
                 mean: np.ndarray | None = None, context: np.ndarray | None = None, avoid: Iterable[str] = (),
                 max_words: int = 4, max_candidates: int = 32) -> str:
    """The name of an aspect holding ``texts``: the topic of ``vocabulary`` that fits them
    (vocabulary.py: its cosine to their mean embedding reaches the bar, within surroundings
    of mean ``context``), else their :func:`offline_label`; never a label of ``avoid``.
    ``mean``: their mean embedding (None: that of the texts without their speaker prefix)."""
    avoid = list(avoid)
    if vocabulary is not None and embed is not None and texts:
        if mean is None:
            mean = np.asarray(embed([_speaker(t)[1] for t in texts]), dtype=np.float64).mean(axis=0)
        topic = vocabulary.topic(mean, context=context, avoid=avoid)
        if topic is not None:
            return topic
    return offline_label(texts, embed, mean=mean, avoid=avoid, max_words=max_words, max_candidates=max_candidates)


def _best_candidate(c: _Candidates, keys: list[str], embed: Embed | None, mean: np.ndarray | None,
                    avoided_words: frozenset[str]) -> str:
    """The surface form of the key of ``keys`` with the best :func:`offline_label` score
    (the first key without ``embed`` or when it is the only one; the first among equals)."""
    if embed is None or len(keys) == 1:
        return c.surface(keys[0])
    phrases = [c.surface(k) for k in keys]
    own_mean = mean is None
    vecs = np.asarray(embed(phrases + (c.bodies if own_mean else [])), dtype=np.float64)
    cand = vecs[:len(phrases)]
    m = vecs[len(phrases):].mean(axis=0) if own_mean else np.asarray(mean, dtype=np.float64)
    m_norm = float(np.linalg.norm(m))
    norms = np.linalg.norm(cand, axis=1)
    denom = norms * m_norm
    cos = np.divide(cand @ m, denom, out=np.zeros(len(keys)), where=denom > 0)
    n = max(1, c.n_texts)
    scores = [float(cos[i]) + 0.15 * c.df[k] / n - 0.03 * k.count(" ")
              - 0.05 * len(_content(k) & avoided_words) for i, k in enumerate(keys)]
    best = max(range(len(keys)), key=lambda i: (scores[i], -i))
    return phrases[best]


def _fallback_label(c: _Candidates, avoided: set[str], avoided_content: list[frozenset[str]]) -> str:
    """:func:`offline_label` when no candidate is allowed: the most frequent weak word
    ("today") that is not avoided, else the first of ``"topic"``, ``"topic 2"``, ... not
    avoided."""
    # Every content word is a candidate: what is left are weak words ("today"), if any.
    for kw, _ in sorted(c.words.items(), key=lambda kv: -kv[1]):  # stable: first seen among equals
        if kw not in avoided and not any({kw} <= ac for ac in avoided_content):
            forms = c.word_surfaces[kw]
            return max(forms, key=lambda f: forms[f])
    label, i = FALLBACK_LABEL, 1
    while _key(label) in avoided:
        i += 1
        label = f"{FALLBACK_LABEL} {i}"
    return label


# ------------------------------------------------------------------ labels of new and renamed aspects
_LABEL_WORD = re.compile(r"[^\W\d_][\w'-]+")


def fallback_label(texts: list[str], avoid: list[str] | tuple[str, ...] = (), mean: Any = None) -> str:
    """A label when nothing better is at hand: the two most frequent longer words (not a
    label of ``avoid``, compared casefolded, when another choice exists)."""
    words = Counter(w.lower() for t in texts for w in _LABEL_WORD.findall(t) if len(w) > 3)
    taken = {a.casefold() for a in avoid}
    ranked = [w for w, _ in words.most_common()]
    for label in (" ".join(ranked[:2]), *ranked, " ".join(ranked[:3])):
        if label and label.casefold() not in taken:
            return label
    return " ".join(ranked[:2]) or "group"


def nearby_labels(tree: MembrainTree, parent_id: str) -> list[str]:
    """The labels a new aspect under ``parent_id`` must differ from: those of the parent's
    child aspects and of every aspect on the path from the root to the parent, so that no
    path reads "encouragement › heartwarming › encouragement"."""
    out = [tree.node(a).text for a in tree.child_aspects(parent_id)]
    out += [tree.node(a).text for a in tree.path(parent_id) if tree.node(a).kind == "aspect"]
    return out


def parent_of(tree: MembrainTree, node_id: str) -> str:
    """``tree.parent(node_id)``; the root has none, and for it this raises the
    NodeNotFoundError that looking up its (absent) parent would."""
    parent = tree.parent(node_id)
    if parent is None:
        raise NodeNotFoundError(f"no node {parent!r} in the tree")  # as tree.node(None) says
    return parent


def relabel_avoid(tree: MembrainTree, aspect_id: str) -> list[str]:
    """The labels a renamed aspect must differ from: its ancestors' and siblings' (its own
    current label aside) and its child aspects'."""
    own = tree.node(aspect_id).text
    return ([t for t in nearby_labels(tree, parent_of(tree, aspect_id)) if t != own]
            + [tree.node(c).text for c in tree.child_aspects(aspect_id)])


def name_groups(tree: MembrainTree, actions: list[Action], label_aspect: Callable[..., str]) -> list[Action]:
    """``actions`` with every Group named: its own label when it has one that differs
    (casefolded) from its ancestors' and its future siblings' (``nearby_labels``), else
    one by ``label_aspect(texts, avoid, mean)`` that does (``mean``: the members' mean
    embedding, or None)."""
    out: list[Action] = []
    made: dict[str, list[str]] = {}
    for a in actions:
        if isinstance(a, Group) and a.node_ids and a.node_ids[0] in tree:
            parent = parent_of(tree, a.node_ids[0])
            avoid = nearby_labels(tree, parent) + made.setdefault(parent, [])
            if a.label and a.label.casefold() not in {x.casefold() for x in avoid}:
                made[parent].append(a.label)
                out.append(a)
                continue  # a teacher's label that differs from its neighbours' is kept
            members = [i for i in a.node_ids if i in tree]
            embs = [e for e in (tree.node(i).embedding for i in members) if e is not None]
            mean = np.mean(embs, axis=0) if embs else None
            label = label_aspect([tree.node(i).text for i in members], avoid, mean)
            a = Group(a.node_ids, label, a.metadata, a.aspect_id)
            made[parent].append(label)
        out.append(a)
    return out
