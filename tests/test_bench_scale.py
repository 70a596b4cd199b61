"""``bench scale``: the options a large run relies on (exact mode and brute force on a few
queries above ``--baseline-max``) and the saved index's round trip it reports."""

from __future__ import annotations

import json

from langchain_membrain.bench.__main__ import main


def test_scale_bench_limits_exact_above_baseline_max_and_reloads_the_saved_index(tmp_path):
    out = tmp_path / "scale.json"
    assert main(["scale", "--sizes", "300,2500", "--queries", "12", "--store-max", "0",
                 "--baseline-max", "1000", "--exact-queries", "4", "--add-sample", "500", "--plot", "",
                 "--json", str(out)]) == 0
    small, large = json.loads(out.read_text())
    assert (small["n"], small["exact_queries"], large["n"], large["exact_queries"]) == (300, 12, 2500, 4)
    for row in (small, large):
        # fast equals exact below ann_min_facts; above it, clustered data keeps recall high
        assert row["recall@10_fast_vs_exact"] >= 0.9
        assert row["recall@10_dense_nearest"] >= 0.9
        assert row["cold_load_s"] > 0 and row["cold_file_mb"] > row["n"] * 384 * 4 / 2**20
        assert "inmemorystore_search" not in row
    assert small["recall@10_fast_vs_exact"] == 1.0
    # the large size: built in bulk but for the last 500 facts, added (and timed) one by one
    assert (small["single_adds"], large["single_adds"]) == (300, 500) and "bulk_build_s" in large
