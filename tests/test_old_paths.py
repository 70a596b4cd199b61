"""Import paths of 0.1 keep working for one release, with a DeprecationWarning.

``old_paths_0_1.json`` lists, for every module that moved into a subpackage, the public names
it had in 0.1 (its ``__all__``, or its public functions and classes).
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

OLD = json.loads((Path(__file__).parent / "old_paths_0_1.json").read_text())


@pytest.mark.parametrize("old", sorted(OLD))
def test_every_public_name_of_a_moved_module_is_found_at_its_old_path(old):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        module = importlib.import_module(f"langchain_membrain.{old}")
        missing = [name for name in OLD[old] if not hasattr(module, name)]
    assert missing == []


def test_an_old_path_warns_and_gives_the_same_objects():
    code = """
import warnings
warnings.simplefilter("error", DeprecationWarning)
from langchain_membrain.insert.config import LearnerConfig as new
try:
    from langchain_membrain.pipeline import LearnerConfig
except DeprecationWarning as w:
    print("warned:", w)
warnings.simplefilter("ignore", DeprecationWarning)
from langchain_membrain.pipeline import LearnerConfig
from langchain_membrain.retrieval import RetrievalConfig
from langchain_membrain.index.facts import RetrievalConfig as new_retrieval
print(LearnerConfig is new, RetrievalConfig is new_retrieval)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "warned: langchain_membrain.pipeline moved to langchain_membrain.insert.pipeline" in out
    assert out.strip().endswith("True True")


def test_a_name_no_module_had_is_still_an_attribute_error():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pipeline = importlib.import_module("langchain_membrain.pipeline")
        with pytest.raises(AttributeError):
            pipeline.no_such_name  # noqa: B018
        with pytest.raises(ImportError):
            importlib.import_module("langchain_membrain.no_such_module")
