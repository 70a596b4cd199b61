"""Exports of a tree: JSON (round trip), Mermaid (syntax, escaping), HTML (escaping, offline)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from langchain_membrain.tree.export import tree_to_html, tree_to_json, tree_to_mermaid
from langchain_membrain.tree.tree import MembrainTree

NASTY = 'He said "hi" [x] {y} (z) <script>alert("pwned")</script> & #1; a|b `c`'


def vec(i: int, dim: int = 8) -> np.ndarray:
    rng = np.random.default_rng(i)
    v = rng.normal(size=dim).astype(np.float32)
    return v / np.linalg.norm(v)


def sample_tree() -> MembrainTree:
    """root -> food -> (allergies -> 2 facts, 1 fact), travel -> 2 facts, 1 fact at the root."""
    t = MembrainTree("users/maya")
    food = t.add_aspect(t.root_id, "food", embedding=vec(1))
    allergies = t.add_aspect(food, "allergies", embedding=vec(2))
    travel = t.add_aspect(t.root_id, "travel", embedding=vec(3))
    t.add_fact(allergies, "allergic to peanuts", embedding=vec(10), metadata={"value": {"content": "x"}})
    t.add_fact(allergies, NASTY, embedding=vec(11))
    t.add_fact(food, "vegetarian since 2019", embedding=vec(12))
    t.add_fact(travel, "Kyoto in April", embedding=vec(13))
    t.add_fact(travel, "Azores in September", embedding=vec(14))
    t.add_fact(t.root_id, "lives in Lisbon", embedding=vec(15))
    return t


def shape(t: MembrainTree) -> list[tuple]:
    return sorted((n, t.node(n).kind, t.node(n).text, t.parent(n)) for n in t.graph.nodes)


# ---------------------------------------------------------------------- JSON
def test_json_round_trip_through_from_dict():
    t = sample_tree()
    data = json.loads(json.dumps(tree_to_json(t)))  # really JSON-serialisable
    back = MembrainTree.from_dict(data)
    assert shape(back) == shape(t)
    for f in t.facts():
        np.testing.assert_allclose(back.node(f).embedding, t.node(f).embedding)
    assert back.fact_count(back.root_id) == 6
    # sibling order is kept
    assert [back.node(c).text for c in back.children(back.root_id)] == \
        [t.node(c).text for c in t.children(t.root_id)]


def test_json_without_embeddings_is_smaller_and_still_loads():
    t = sample_tree()
    full = json.dumps(tree_to_json(t))
    slim_data = tree_to_json(t, embeddings=False)
    assert all(row["embedding"] is None for row in slim_data["nodes"])
    assert len(json.dumps(slim_data)) < len(full)
    back = MembrainTree.from_dict(slim_data)
    assert shape(back) == shape(t)
    # the export did not touch the tree itself
    assert t.node(t.facts()[0]).embedding is not None


# ------------------------------------------------------------------- Mermaid
EDGE = re.compile(r'^    (n\d+) --> (n\d+|more\d+)(\("[^"]*"\)|\["[^"]*"\]):::(aspect|fact|more)$')


def test_mermaid_is_a_flowchart_with_one_edge_per_node():
    t = sample_tree()
    text = tree_to_mermaid(t)
    lines = text.strip().splitlines()
    assert lines[0] == "flowchart TD"
    assert re.match(r'^    n0\(\["[^"]*"\]\):::root$', lines[1]), lines[1]
    edges = [ln for ln in lines if "-->" in ln]
    assert len(edges) == len(t) - 1
    for ln in edges:
        assert EDGE.match(ln), ln
    targets = [EDGE.match(ln).group(2) for ln in edges]
    assert len(set(targets)) == len(targets)  # every node defined once
    assert all(ln.startswith("    classDef ") for ln in lines if "-->" not in ln and ln not in lines[:2])
    assert "food · 3" in text and "allergies · 2" in text  # aspects carry fact counts


def test_mermaid_escapes_quotes_brackets_and_markup():
    t = MembrainTree("s")
    t.add_fact(t.root_id, NASTY)
    text = tree_to_mermaid(t, max_label=200)
    fact_line = [ln for ln in text.splitlines() if ":::fact" in ln][0]
    label = EDGE.match(fact_line).group(3)[2:-2]
    for raw in '"[]{}()<>|`':
        assert raw not in label, (raw, label)
    assert "#quot;hi#quot;" in label and "#91;x#93;" in label and "#lt;script#gt;" in label
    assert "#35;1;" in label  # a literal '#' cannot start an entity


def test_mermaid_shortens_labels_and_caps_wide_nodes():
    t = MembrainTree("s")
    for i in range(12):
        t.add_fact(t.root_id, f"fact number {i} " + "word " * 30)
    text = tree_to_mermaid(t, max_label=20, max_facts=5)
    facts = [ln for ln in text.splitlines() if ":::fact" in ln]
    assert len(facts) == 5
    assert all(len(EDGE.match(ln).group(3)) - 4 <= 20 for ln in facts)
    assert "… 7 more facts" in text


# ---------------------------------------------------------------------- HTML
def test_html_escapes_fact_text():
    html = tree_to_html(sample_tree(), title="<b>my</b> memory")
    assert "<script>alert(" not in html
    assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in html
    assert "&lt;b&gt;my&lt;/b&gt; memory" in html
    # exactly one script element: ours
    assert len(re.findall(r"<script\b", html)) == 1


def test_html_shows_valid_time_where_known_and_labels_it():
    """Issue 56: a formed fact's valid time (valid_from, and valid_to when set) and an
    updated fact's start are shown as "valid ..."; a fact without one shows "stored ..."."""
    from datetime import datetime, timezone

    from langchain_membrain.tree.kinds import VALID_TIME_KEY

    def day(iso: str) -> float:
        return datetime.fromisoformat(iso).replace(tzinfo=timezone.utc).timestamp()

    t = MembrainTree("u", clock=lambda: 1_700_000_000.5)
    t.add_fact(t.root_id, "went to Kyoto", node_id="f-trip", embedding=vec(1),
               metadata={VALID_TIME_KEY: [day("2023-05-07"), day("2023-05-21")]})
    t.add_fact(t.root_id, "works at Acme", node_id="f-job", embedding=vec(2),
               metadata={VALID_TIME_KEY: [day("2021-03-01"), None]})
    t.add_fact(t.root_id, "likes tea", node_id="f-tea", embedding=vec(3))
    t.add_fact(t.root_id, "lives in Paris", node_id="f-home", embedding=vec(4))
    t.supersede("f-home", "lives in Lisbon", embedding=vec(5), when=1_700_100_000.5)

    def when(key: str) -> str:
        m = re.search(rf'<li class="fact" id="{key}"[^>]*>.*?<span class="when">([^<]*)</span>', tree_to_html(t))
        assert m is not None, key
        return m.group(1)

    assert when("f-trip") == "valid 2023-05-07 – 2023-05-21"
    assert when("f-job") == "valid from 2021-03-01"
    assert when("f-tea").startswith("stored 2023-11-1")  # created_at, labelled as such
    assert when("f-home").startswith("valid from 2023-11-1")  # since its UPDATE


def test_html_is_self_contained():
    html = tree_to_html(sample_tree())
    assert html.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    assert "http://" not in html and "https://" not in html
    assert "@import" not in html and "url(" not in html
    assert "<style>" in html and "<script>" in html


def test_html_has_collapsible_aspects_with_counts_and_a_search_box():
    t = sample_tree()
    html = tree_to_html(t)
    assert html.count("<details") == 1 + len(t.aspects())  # root + one per aspect
    assert html.count('class="fact"') == 6
    for a in t.aspects():
        label, count = t.node(a).text, t.fact_count(a)
        assert re.search(rf'<span class="label">{label}</span><span class="count"[^>]*>{count}</span>', html)
    assert 'id="q" type="search"' in html
    assert 'data-text="allergic to peanuts"' in html


def test_html_of_a_few_thousand_facts_is_whole_and_compact():
    """Every fact is in the page and the page stays small. How long it takes is not
    asserted: a wall-clock bound only measures how loaded the machine is."""
    t = MembrainTree("big")
    aspects = [t.add_aspect(t.root_id, f"topic {i}") for i in range(40)]
    subs = [t.add_aspect(a, f"sub {j}") for a in aspects for j in range(3)]
    for i in range(3000):
        t.add_fact(subs[i % len(subs)], f"fact {i}: something worth remembering about item {i}")
    html = tree_to_html(t)
    assert html.count('class="fact"') == 3000
    assert len(html) < 2_000_000


@pytest.mark.parametrize("fn", [tree_to_json, tree_to_mermaid, tree_to_html])
def test_exports_of_an_empty_tree(fn):
    t = MembrainTree("empty")
    out = fn(t)
    assert out  # renders something valid rather than failing
