"""Bundled persona memories: original facts written for this project (MIT, like the package).

Two sets live under ``langchain_membrain/data``: ``personas.jsonl`` (the tune set) and
``personas_heldout.jsonl`` (the held-out set, written apart: other people, topic mixes and
phrasing styles). Each line is ``{"persona": ..., "topic": ..., "text": ...}``; see
``data/PERSONAS.md``.
"""

from __future__ import annotations

import json
from importlib import resources

PERSONA_FILES = {"tune": "data/personas.jsonl", "heldout": "data/personas_heldout.jsonl"}


def load_personas(which: str = "tune") -> dict[str, list[dict]]:
    """Persona id -> its rows (dicts with ``persona``, ``topic``, ``text``) in file order.

    ``which`` is ``"tune"`` or ``"heldout"``; anything else raises :class:`ValueError`.
    """
    if which not in PERSONA_FILES:
        raise ValueError(f"unknown persona set {which!r}: expected one of {sorted(PERSONA_FILES)}")
    raw = resources.files("langchain_membrain").joinpath(PERSONA_FILES[which]).read_text("utf-8")
    out: dict[str, list[dict]] = {}
    for line in raw.splitlines():
        if line.strip():
            row = json.loads(line)
            out.setdefault(row["persona"], []).append(row)
    return out
