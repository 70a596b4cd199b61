"""The students: the small networks that learn online to decide as the teacher does.

Owns the features (what a network sees of a closure or a descent), the networks (torch for
training, numpy for inference without torch), their training (cross-entropy on the teacher's
labels, replay, calibration of their confidence), decoding of their outputs into actions,
the shadow record of student against teacher, the shipped prior and the checkpoint format.

May import: ``errors``, ``tree``, ``index``, ``teachers``.

Until 0.1 this name was the module of the linear stage-1 students, now :mod:`.linear`; its
names are still found here for one release, with a DeprecationWarning.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)
    linear = importlib.import_module(".linear", __name__)
    if not hasattr(linear, name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"langchain_membrain.students.{name} moved to langchain_membrain.students.linear.{name}; "
                  "the old path goes in the next release", DeprecationWarning, stacklevel=2)
    return getattr(linear, name)
