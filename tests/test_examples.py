"""The examples run offline (no API key, HF_HUB_OFFLINE=1) in a subprocess, with a timeout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TIMEOUT = 300


def run_example(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMBRAIN_TEACHER_MODEL", "MEMBRAIN_CHAT_MODEL")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", COLUMNS="120")
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    return proc


def test_quickstart(tmp_path):
    out = run_example("quickstart.py", cwd=tmp_path).stdout
    lines = out.splitlines()
    assert "allergic to peanuts" in lines[0] or "vegetarian" in lines[0]  # the best hit first
    assert "users/maya" in out and "24 facts" in out
    assert "├──" in out  # a tree with aspects, not a flat list


FIRST_VISIT = ("# first visit\nHi, I'm Maya and I live in Lisbon.\nI am allergic to peanuts.\n"
               "/tree\nCan you suggest a snack without peanuts?\n")


def chat(tmp_path: Path, turns: str, name: str) -> str:
    script = tmp_path / name
    script.write_text(turns, encoding="utf-8")
    return run_example("chatbot.py", "--db", "chat.db", "--user", "maya", "--script", str(script),
                       cwd=tmp_path).stdout


def test_chatbot_script_recalls_earlier_turns(tmp_path):
    out = chat(tmp_path, FIRST_VISIT, "turns.txt")
    assert "offline" in out
    assert "0 memories of maya from earlier conversations" in out
    assert "2 facts" in out  # /tree after two turns
    assert "recalled" in out and "I am allergic to peanuts." in out.split("snack")[-1]
    # The question is not a memory (IGNORE): it is in the namespace's log, not the tree.
    assert "2 memories of maya kept in chat.db" in out


def test_chatbot_remembers_across_runs(tmp_path):
    """The chatbot keeps what it learned in SQLite: a second run recalls the first."""
    chat(tmp_path, FIRST_VISIT, "turns.txt")
    out = chat(tmp_path, "What should I avoid eating?\n", "again.txt")
    assert "2 memories of maya from earlier conversations" in out  # the question was ignored
    assert "recalled" in out and "peanuts" in out


def test_langgraph_subgraph(tmp_path):
    """The insert graph composed into a user's graph."""
    out = run_example("langgraph_subgraph.py", cwd=tmp_path).stdout
    assert "membrain: embed" in out and "membrain: train" in out  # the subgraph's own steps
    assert "note taker: confirm" in out
    assert out.count("Noted under") == 4
    assert "From my notes:\n- My passport expires in March 2027" in out
    assert "notes/me" in out and "4 facts" in out


LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo_dev.json"


def test_locomo_eval_without_locomo_says_where_it_comes_from(tmp_path):
    """Issue 56: a missing LoCoMo file is one clear message and a nonzero status, no traceback."""
    proc = subprocess.run([sys.executable, str(EXAMPLES / "locomo_eval.py"), "--data", str(tmp_path / "none.json")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=TIMEOUT,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    for needle in ("no LoCoMo file", "Maharana et al., ACL 2024", "CC BY-NC 4.0", "snap-research/locomo",
                   "data/locomo10.json", "--data"):
        assert needle in proc.stderr, proc.stderr


@pytest.mark.skipif(not LOCOMO.exists(), reason="LoCoMo data (../shared/data) is not beside this checkout")
def test_locomo_eval(tmp_path):
    out = run_example("locomo_eval.py", "--data", str(LOCOMO), "--conversations", "1", "--questions", "30",
                      cwd=tmp_path).stdout
    overall = next(line for line in out.splitlines() if line.startswith("overall"))
    n, all_k, any_k = overall.split()[1:]
    assert int(n) == 30 and 0.0 <= float(all_k) <= float(any_k) <= 1.0
    assert float(any_k) > 0.5  # the retrieval pipeline finds most evidence on the first conversation
    assert "419 facts" in out
