"""``bench adds``: each path runs in its own process on its own copy of the store, and every
timed add is reported."""

from __future__ import annotations

import json

from langchain_membrain.bench.__main__ import main


def test_adds_bench_times_every_add_of_each_path(tmp_path):
    out = tmp_path / "adds.json"
    assert main(["adds", "--facts", "200", "400", "--adds", "4", "--warmup", "1",
                 "--paths", "product", "waits for the trainer", "--json", str(out)]) == 0
    results = json.loads(out.read_text())["results"]
    assert sorted(results) == ["200", "400"]
    for by_path in results.values():
        assert sorted(by_path) == ["product", "waits for the trainer"]
        for row in by_path.values():
            assert len(row["wall"]) == len(row["cpu"]) == 4
            assert 0 < row["wall_p50_ms"] <= row["wall_p95_ms"]
            assert all(w > 0 for w in row["wall"])


def test_adds_bench_pairs_the_product_with_inmemorystore_on_minilm(tmp_path):
    out = tmp_path / "adds.json"
    assert main(["adds", "--facts", "300", "--adds", "3", "--warmup", "1", "--searches", "3",
                 "--paths", "minilm", "inmemorystore", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["hog"] is False
    by_path = data["results"]["300"]
    assert sorted(by_path) == ["inmemorystore", "minilm"]
    for row in by_path.values():
        assert len(row["wall"]) == 3 and len(row["search"]) == 3
        assert 0 < row["wall_p50_ms"] <= row["wall_p95_ms"] and 0 < row["search_p50_ms"] <= row["search_p95_ms"]
