"""The pretrained prior shipped with the package: both networks, so a memory is competent
from its first insert.

A new memory without a stored checkpoint starts from the prior (``MembrainMemory(prior=True)``,
the default) and fine-tunes it online on its own teacher. The prior was taught by one teacher,
named in its manifest (:func:`teacher_identity`): with that same teacher the prior's
calibration is kept and its labels count toward warm-up, so the student decides alone from
the start where it is confident; with any other teacher (an LLM) only the networks' weights
are kept, and the gates stay closed until that teacher's own answers have calibrated them.

The prior is rebuilt by ``python -m langchain_membrain.bench pretrain`` (bench/pretrain.py)
from data the package ships under its own licence (the manifest lists each file with its
SHA-256); never from LoCoMo or from the evaluation data.
"""

from __future__ import annotations

import dataclasses
import json
from importlib import resources
from typing import Any

PRIOR_FILE = "data/prior.pt"
MANIFEST_FILE = "data/prior.json"
#: The operation student's prior (operation_student.py), built by ``bench pretrain --part operations``.
OPERATIONS_PRIOR_FILE = "data/operations_prior.pt"
OPERATIONS_MANIFEST_FILE = "data/operations_prior.json"


def teacher_identity(teacher: Any) -> str:
    """Who a teacher is, for deciding whether a prior was taught by it: its class name and,
    when it has a dataclass ``config`` (the heuristic teacher), every setting of it."""
    name = type(teacher).__name__
    config = getattr(teacher, "config", None)
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return f"{name}{json.dumps(dataclasses.asdict(config), sort_keys=True)}"
    return name


def _read(prior_file: str, manifest_file: str) -> tuple[bytes, dict[str, Any]]:
    """A shipped prior's bytes and its manifest (any error: the caller starts from scratch)."""
    root = resources.files("langchain_membrain")
    return (root.joinpath(prior_file).read_bytes(),
            json.loads(root.joinpath(manifest_file).read_text(encoding="utf-8")))


def load_prior() -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(the networks' state for ``OnlineTrainer.load_prior``, the manifest), or None when
    the package ships no prior (or it cannot be read). Read without torch (torchfile.py:
    its tensors are numpy arrays); a file torchfile does not understand is read by torch."""
    from . import torchfile

    try:
        data, manifest = _read(PRIOR_FILE, MANIFEST_FILE)
        state = torchfile.read_checkpoint(data)
    except Exception:  # a missing or damaged prior: start from scratch, as before priors
        return None
    return state, manifest


def operation_teacher_identity(teacher: Any) -> str:
    """Who answers a memory's operation questions: a teacher with ``choose_operation`` (an
    LLM, an evaluation teacher) is itself (:func:`teacher_identity`); any other is answered
    by the offline rule (operation_rule.py), whatever its class, so it is the rule."""
    from ..teachers.base import OperationTeacher, capable

    if capable(teacher, OperationTeacher):
        return teacher_identity(teacher)
    from ..teachers.operation_rule import rule_identity

    return rule_identity()


def load_operation_prior(teacher: Any) -> tuple[bytes, bool] | None:
    """(the operation student's prior state, whether ``teacher`` taught it), or None when
    the package ships none (or it cannot be read)."""
    try:
        data, manifest = _read(OPERATIONS_PRIOR_FILE, OPERATIONS_MANIFEST_FILE)
    except Exception:  # a missing or damaged prior: start from scratch, as before priors
        return None
    return data, manifest.get("teacher") == operation_teacher_identity(teacher)


__all__ = ["MANIFEST_FILE", "OPERATIONS_MANIFEST_FILE", "OPERATIONS_PRIOR_FILE", "PRIOR_FILE", "load_operation_prior",
           "load_prior", "operation_teacher_identity", "teacher_identity"]
