"""Entry point: ``python -m langchain_membrain.bench {tree,learning,hierarchy,locomo,scale,graph,workers,...}``."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

SUBCOMMANDS = {
    "tree": "tree operations at scale (100k facts, four levels)",
    "learning": "online imitation learning curve of the stage-1/stage-2 models",
    "hierarchy": "dendrogram purity of the online tree against baselines",
    "locomo": "retrieval on LoCoMo against flat baselines",
    "scale": "add/search latency and recall against N",
    "graph": "cost of the compiled insert graph against walking its nodes directly",
    "startup": "cold start of import and of each membrain command, as fresh processes",
    "cold": "cold open to first search of a SQLite memory by size, bulk index load against per fact",
    "economy": "teacher questions per insert through the product, tree shape and insert cost",
    "tenants": "resident memory of many small namespaces in one process, in memory and on SQLite",
    "adds": "add() p50/p95 against the namespace's size (1k to 20k facts), embeddings excluded",
    "workers": "add/search right after another process's write: refresh by change against reload",
    "corrections": "corrections as people write them: current statement first, kept by the cut-off, look-alikes",
    "updates": "memory operations (ADD/UPDATE/DELETE/IGNORE) on persona chains of changes",
    "scores": "calibrated relevance: fit hit.score on data/relevance.json, AUROC, threshold, reliability",
    "labels": "how well aspect labels name their topics, on the bundled personas",
    "topics": "many users through one memory against a teacher that knows topics: economy, purity, topic search",
    "personas": "topic trees of small memories against what clustering their embeddings reaches",
    "pretrain": "train the prior shipped with the package (networks taught by the offline teacher)",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="membrain bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in SUBCOMMANDS.items():
        if importlib.util.find_spec(f"langchain_membrain.bench.{name}") is None:
            continue
        module = importlib.import_module(f"langchain_membrain.bench.{name}")
        p = sub.add_parser(name, help=help_text, description=module.__doc__)
        module.configure(p)
        p.set_defaults(run_bench=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run_bench(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
