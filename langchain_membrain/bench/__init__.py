"""Benchmarks and evaluations, runnable after ``pip install``:
``python -m langchain_membrain.bench SUBCOMMAND --help`` (also ``membrain bench``).

Each subcommand lives in its own module exposing ``configure(parser)`` and ``run(args)``;
each prints a table and can write JSON with ``--json OUT``.
"""

import os
import platform


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
