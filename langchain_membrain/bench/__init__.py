"""Benchmarks and evaluations, runnable after ``pip install``:
``python -m langchain_membrain.bench SUBCOMMAND --help`` (also ``membrain bench``).

Each subcommand lives in its own module exposing ``configure(parser)`` and ``run(args)``;
each prints a table and can write JSON with ``--json OUT``.
"""
