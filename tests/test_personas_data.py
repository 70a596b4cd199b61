"""The bundled persona memories parse and stay within their stated bounds."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from importlib import resources

import pytest

from langchain_membrain.bench.persona_sets import PERSONA_FILES, load_personas

PERSONAS_PER_SET = {"tune": 8, "heldout": 6}


@pytest.fixture(scope="module")
def sets() -> dict[str, dict[str, list[dict]]]:
    return {which: load_personas(which) for which in PERSONAS_PER_SET}


@pytest.mark.parametrize("which", sorted(PERSONA_FILES))
def test_every_line_is_one_json_object_with_exactly_the_three_keys(which):
    raw = resources.files("langchain_membrain").joinpath(PERSONA_FILES[which]).read_text("utf-8")
    lines = raw.splitlines()
    assert lines and all(line.strip() for line in lines)
    for line in lines:
        row = json.loads(line)
        assert set(row) == {"persona", "topic", "text"}
        assert all(isinstance(v, str) for v in row.values())


@pytest.mark.parametrize("which", sorted(PERSONAS_PER_SET))
def test_persona_topic_and_fact_counts_are_within_bounds(sets, which):
    personas = sets[which]
    assert len(personas) == PERSONAS_PER_SET[which]
    for pid, rows in personas.items():
        assert all(r["persona"] == pid for r in rows)
        assert 40 <= len(rows) <= 60, pid
        per_topic = Counter(r["topic"] for r in rows)
        assert len(per_topic) == 5, (pid, per_topic)
        assert all(8 <= n <= 12 for n in per_topic.values()), (pid, per_topic)


@pytest.mark.parametrize("which", sorted(PERSONAS_PER_SET))
def test_topics_are_interleaved_not_in_blocks(sets, which):
    for pid, rows in sets[which].items():
        longest = max(len(list(run)) for _, run in itertools.groupby(r["topic"] for r in rows))
        assert longest <= 3, pid


def test_texts_are_non_empty_short_and_unique_within_and_across_sets(sets):
    texts = [r["text"] for personas in sets.values() for rows in personas.values() for r in rows]
    assert all(t.strip() and len(t) <= 300 for t in texts)
    assert len(texts) == len(set(texts))
    tune = {r["text"].casefold() for rows in sets["tune"].values() for r in rows}
    heldout = {r["text"].casefold() for rows in sets["heldout"].values() for r in rows}
    assert not tune & heldout


def test_persona_ids_are_disjoint_across_sets(sets):
    assert not set(sets["tune"]) & set(sets["heldout"])


def test_rows_come_back_in_file_order():
    raw = resources.files("langchain_membrain").joinpath(PERSONA_FILES["tune"]).read_text("utf-8")
    first = json.loads(raw.splitlines()[0])
    assert load_personas()[first["persona"]][0] == first


def test_an_unknown_set_is_refused():
    with pytest.raises(ValueError, match="unknown persona set"):
        load_personas("train")
