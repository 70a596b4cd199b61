"""Benchmarks and evaluations, runnable after ``pip install``:
``python -m langchain_membrain.bench SUBCOMMAND --help`` (also ``membrain bench``).

Each subcommand lives in its own module exposing ``configure(parser)`` and ``run(args)``;
each prints a table and can write JSON with ``--json OUT``. The evaluation teachers live
beside them: :class:`~.topic_teacher.TopicTeacher`, :class:`~.locomo.LoCoMoFormationTeacher`.
"""

import os
import platform

__all__ = ["machine_description", "embed_cached"]


def machine_description() -> str:
    """CPU model, core count and Python version, for benchmark reports."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}"


def embed_cached(texts: list[str], cache: str | None):
    """MiniLM embeddings of ``texts``, read from the ``.npy`` file ``cache`` when it holds
    as many rows, else computed (and saved there when a path is given)."""
    from pathlib import Path

    import numpy as np

    if cache and Path(cache).is_file():
        arr = np.load(cache)
        if arr.shape[0] == len(texts):
            return arr.astype(np.float32)
    from ..index.embeddings import MiniLMEmbeddings

    arr = MiniLMEmbeddings().embed_array(texts)
    if cache:
        np.save(cache, arr)
    return arr
