"""The product economy bench (``bench economy``) end to end on a tiny JSON-lines stream."""

from __future__ import annotations

import csv
import json

import pytest

from langchain_membrain.teachers.heuristic import HeuristicTeacher

COLUMNS = {
    "run", "namespace", "window", "first_insert", "last_insert", "inserts", "questions",
    "questions_cumulative", "questions_per_insert", "teacher_calls_per_insert", "naming_calls_per_insert",
    "adds_with_questions_share", "merged", "pending_training", "height", "top_aspects", "aspects",
    "largest_top_aspect_share", "root_fact_share", "facts", "wall_p50_ms", "wall_p95_ms", "cpu_p50_ms",
    "cpu_p95_ms",
}
NON_NEGATIVE = ["inserts", "questions", "questions_cumulative", "questions_per_insert",
                "teacher_calls_per_insert", "naming_calls_per_insert", "adds_with_questions_share", "merged",
                "wall_p50_ms", "wall_p95_ms", "cpu_p50_ms", "cpu_p95_ms"]

TOPICS = ["I adopted a puppy named {}", "My sister {} plays the cello", "We hiked up {} last weekend",
          "I cooked a {} curry for dinner", "I visited the {} office on Monday"]  # no two correct each other
WORDS = ["Rex", "Mila", "Ben Nevis", "pumpkin", "Acme", "Luna", "Jo", "Snowdon", "lentil", "Globex"]


def _stream() -> list[dict]:
    """30 distinct turns: 20 in namespace alice, then 10 in bob."""
    texts = [t.format(w) for w in WORDS for t in TOPICS][:30]
    return [{"text": t, "namespace": "alice" if i < 20 else "bob"} for i, t in enumerate(texts)]


@pytest.mark.usefixtures("one_torch_thread")
def test_economy_bench_end_to_end(tmp_path):
    from langchain_membrain.bench.__main__ import main

    data = tmp_path / "turns.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in _stream()) + "\n")
    out_csv, out_png, out_json = tmp_path / "eco.csv", tmp_path / "eco.png", tmp_path / "eco.json"
    assert main(["economy", "--data", str(data), "--window", "10", "--csv", str(out_csv),
                 "--png", str(out_png), "--json", str(out_json), "--seed", "3"]) == 0

    with out_csv.open() as fh:
        reader = csv.DictReader(fh)
        assert COLUMNS <= set(reader.fieldnames)
        extra = set(reader.fieldnames) - COLUMNS  # per-kind columns, when stats() breaks questions down
        assert all(c.startswith("q_") and c.endswith("_per_insert") for c in extra)
        rows = list(reader)
    # Two runs (the product and the teacher alone); windows of 10 per namespace and over the
    # whole stream: alice 2, bob 1, (all) 3.
    got = sorted((r["run"], r["namespace"], int(r["window"])) for r in rows)
    want = sorted((run, ns, w) for run in ("product", "baseline")
                  for ns, n in (("alice", 2), ("bob", 1), ("(all)", 3)) for w in range(n))
    assert got == want
    for r in rows:
        assert int(r["inserts"]) == 10
        for c in NON_NEGATIVE + sorted(extra):
            assert float(r[c]) >= 0, (c, r)
        if r["namespace"] != "(all)":
            assert int(r["height"]) >= 1 and 0.0 <= float(r["root_fact_share"]) <= 1.0
            assert 0.0 <= float(r["largest_top_aspect_share"]) <= 1.0

    res = json.loads(out_json.read_text())
    assert res["seeds"] == [3]  # which items were audits: a run is reproducible by its seed
    for ns in ("alice", "bob"):
        final = res["runs"]["product"]["final_shapes"][ns]
        assert final["height"] >= 1 and 0.0 <= final["largest_top_aspect_share"] <= 1.0
    for run in ("product", "baseline"):
        stats = res["runs"][run]["final_stats"]
        total = int(stats.get("teacher_calls") or 0) + int(stats.get("naming_calls") or 0)
        mine = [r for r in rows if r["run"] == run]
        per_ns = sum(int(r["questions"]) for r in mine if r["namespace"] != "(all)")
        assert per_ns == total > 0
        last_all = max((r for r in mine if r["namespace"] == "(all)"), key=lambda r: int(r["window"]))
        assert int(last_all["questions_cumulative"]) == total
        assert stats["inserts"] == 30
        summary = res["runs"][run]["summaries"]["(all)"]["all"]
        assert summary["inserts"] == 30 and summary["questions"] == total
        # operation questions count, at most one question per insert with the placement's
        # (the student, from its prior, decides most operations itself: often none is asked)
        ops = stats["operations"]
        operation = int(stats["questions"]["operation"])
        assert 0 <= operation <= int(ops["teacher_questions"])
        assert ops["decisions"] == 30 and ops["student_decided"] + ops["teacher_questions"] == 30
        assert summary["q_operation_per_insert"] == pytest.approx(operation / 30)
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    shadow = res["runs"]["product"]["final_stats"]["shadow_agreement"]
    assert set(shadow) == {"stage1", "stage2"}
    for v in shadow.values():
        assert 0 <= v["agreed"] <= v["decisions"]
    assert "shadow_agreement" not in res["runs"]["baseline"]["final_stats"]  # the teacher alone needs none


@pytest.mark.usefixtures("one_torch_thread")
def test_several_seeds_run_the_product_once_each(tmp_path, capsys):
    """--seed 0,1: one product run per seed on the same stream, every run in the JSON and
    the CSV, and a table of the seeds with their mean."""
    from langchain_membrain.bench.__main__ import main

    data = tmp_path / "turns.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in _stream()[:12]) + "\n")
    out_csv, out_json = tmp_path / "eco.csv", tmp_path / "eco.json"
    assert main(["economy", "--data", str(data), "--window", "6", "--no-baseline", "--no-shadow",
                 "--seed", "0,1", "--csv", str(out_csv), "--json", str(out_json)]) == 0
    res = json.loads(out_json.read_text())
    assert res["seeds"] == [0, 1] and set(res["runs"]) == {"product", "product, seed 1"}
    for run in res["runs"].values():
        assert run["final_stats"]["inserts"] == 12
        assert run["final_shapes"]["alice"]["facts"] >= 1
    with out_csv.open() as fh:
        assert {r["run"] for r in csv.DictReader(fh)} == {"product", "product, seed 1"}
    out = capsys.readouterr().out
    assert "one product run per seed" in out and "mean (range)" in out and "teacher alone:" not in out
    with pytest.raises(SystemExit):
        main(["economy", "--data", str(data), "--seed", "0,0"])



@pytest.mark.usefixtures("one_torch_thread")
def test_a_new_teacher_starts_from_the_prior_weights_only(tmp_path):
    """--teacher new: the product with a teacher the shipped prior was not taught by, so
    the prior's calibration is not trusted (as under an LLM teacher); the default
    teacher's is."""
    from langchain_membrain.bench.__main__ import main

    data = tmp_path / "turns.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in _stream()[:8]) + "\n")
    prior = {}
    for teacher in ("heuristic", "new"):
        out_json = tmp_path / f"{teacher}.json"
        assert main(["economy", "--data", str(data), "--no-baseline", "--no-shadow", "--teacher", teacher,
                     "--json", str(out_json)]) == 0
        res = json.loads(out_json.read_text())
        assert res["teacher"] == teacher
        prior[teacher] = res["runs"]["product"]["final_stats"]["prior"]
    assert prior == {"heuristic": "trusted", "new": "weights only"}

class CountingTeacher(HeuristicTeacher):
    """The offline teacher, counting the questions put to it (here: as a shadow)."""

    asked = 0

    def choose_stage1(self, new_fact, subtree):
        self.asked += 1
        return super().choose_stage1(new_fact, subtree)

    def choose_stage2(self, tree, closure):
        self.asked += 1
        return super().choose_stage2(tree, closure)


@pytest.mark.usefixtures("one_torch_thread")
def test_a_shadow_teacher_checks_the_student_without_being_counted():
    """The shadow is asked about the student's own decisions and reported apart; the teacher
    questions a user pays for are the same with or without it."""
    from langchain_membrain import MembrainMemory

    texts = [r["text"] for r in _stream()]
    runs = {}
    for with_shadow in (False, True):
        shadow = CountingTeacher() if with_shadow else None
        with MembrainMemory(background=False, shadow_teacher=shadow) as mem:
            for t in texts:
                mem.add(t, namespace="alice")
            runs[with_shadow] = (mem.stats(), shadow)
    plain, (checked, shadow) = runs[False][0], runs[True]
    assert "shadow_agreement" not in plain
    assert checked["questions"] == plain["questions"] and checked["teacher_calls"] == plain["teacher_calls"]
    agreement = checked["shadow_agreement"]
    decided = agreement["stage1"]["decisions"] + agreement["stage2"]["decisions"]
    assert decided > 0 and shadow.asked >= decided
    assert agreement["stage1"]["decisions"] <= checked["stage1"]["model_executed"]
    for v in agreement.values():
        assert v["rate"] is None or 0.0 <= v["rate"] <= 1.0
