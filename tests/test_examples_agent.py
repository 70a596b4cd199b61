"""The agent example runs offline on its scripted model and reports what it stored and found."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "agent_with_memory.py"


@pytest.mark.slow
def test_agent_example_runs_offline_and_finds_what_it_saved(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "MEMBRAIN_CHAT_MODEL")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    done = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    lines = done.stdout.splitlines()
    stored = [line for line in lines if line.startswith("stored: ")]
    found = [line for line in lines if line.startswith("found: ")]
    assert len(stored) == 2 and "vegetarian" in stored[0] and "teal" in stored[1]
    assert all("Saved memory " in line for line in stored)
    assert any(line.startswith("searched: ") for line in lines)
    assert found and "vegetarian" in found[0]  # MiniLM ranks the diet memory first
    assert "memories of alice: 2" in lines
    assert lines[-2].startswith("agent: ")
