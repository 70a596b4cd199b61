"""A separate process that uses a membrain storage the way MembrainMemory does.

Modes (``python worker.py MODE --target T [--schema S] ...``):

- ``write``: build a tree in one namespace with random adds, groups, moves, promotions and
  (with ``--removes``) removals; every write runs under ``namespace_lock`` and first
  brings the tree up to date when another process wrote: by applying the logged changes
  (``changes_since``), or by reloading when the log does not reach back. With
  ``--verify`` each caught-up tree is compared with a reload (exits 3 on a difference).
  With ``--go FILE`` it prints ``READY`` once open and starts writing when FILE exists.
  Ends with ``DONE applied=<catch-ups by change> reloaded=<whole reloads>``. After each write has returned it prints ``ACK <fact id>`` for the fact
  it added, followed by `` DEL <fact id>`` when that write also removed a fact, as one
  flushed line, so a parent that kills it knows exactly what was acknowledged; before a
  write that removes a fact it prints ``TRY <fact id> DEL <removed id>``. With
  ``--pause-at K`` it prints ``PAUSED <fact id>`` and sleeps inside the K-th write's
  transaction, after the write call, before the commit.
- ``read``: print one JSON line: the namespace's fact ids, node count, version.
- ``hold-trainer``: take the trainer lock ``--name``, print ``HELD`` (or ``BUSY``), sleep.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

from langchain_membrain.errors import InvalidOperationError
from langchain_membrain.storage import STORE_VALUE_KEY, open_storage
from langchain_membrain.tree.tree import MembrainTree

DIM = 4


def _open(args: argparse.Namespace):
    options = {"schema": args.schema} if args.schema else {}
    return open_storage(args.target, **options)


def _random_op(tree: MembrainTree, rng: np.random.Generator, own_facts: list[str], removes: bool) -> str | None:
    """One random restructuring of the tree; returns the id of a fact it removed, if any."""
    r = rng.random()
    facts = tree.facts()
    containers = [tree.root_id, *tree.aspects()]
    if r < 0.2:
        for parent in rng.permutation(containers):
            kids = tree.child_facts(str(parent))
            if len(kids) >= 2:
                picked = [str(k) for k in rng.choice(kids, size=2, replace=False)]
                tree.group(picked, f"group {rng.integers(1 << 30)}", embedding=rng.random(DIM))
                break
    elif r < 0.35 and facts:
        target = str(rng.choice(containers))
        tree.move(str(rng.choice(facts)), target)
    elif r < 0.45 and facts:
        try:
            tree.promote(str(rng.choice(facts)))
        except InvalidOperationError:
            pass  # no grandparent: nothing to do
    elif r < 0.55 and removes and own_facts:
        victim = own_facts.pop(int(rng.integers(len(own_facts))))
        tree.remove(victim)
        return victim
    return None


def write(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(args.seed)
    ns = tuple(args.ns.split("/"))
    tree: MembrainTree | None = None
    synced = -1  # the stored version our in-memory tree corresponds to
    own: list[str] = []
    applied = reloaded = 0
    with _open(args) as storage:
        if args.go:  # start together with other writers: when the parent creates this file
            print("READY", flush=True)
            while not os.path.exists(args.go):
                time.sleep(0.005)
        for i in range(args.count):
            fid = f"{args.prefix}-{i}"
            removed = None
            with storage.namespace_lock(ns):
                version = storage.namespace_version(ns)
                if tree is None or version != synced:  # another process wrote: catch up
                    changes = storage.changes_since(ns, synced) if tree is not None and synced > 0 else None
                    if changes is not None:
                        tree.apply_rows(changes[0], changes[1])
                        synced = changes[2]
                        applied += 1
                    else:
                        reloaded += tree is not None
                        loaded = storage.load_tree(ns)
                        tree, synced = loaded if loaded is not None else (MembrainTree("subject", dim=DIM), 0)
                    if args.verify and synced:
                        tree.check_invariants()
                        if tree.to_dict() != storage.load_tree(ns)[0].to_dict():
                            print(f"DIFFERS after catching up to version {synced}", flush=True)
                            sys.exit(3)
                containers = [tree.root_id, *tree.aspects()]
                tree.add_fact(str(rng.choice(containers)), f"fact {fid}", embedding=rng.random(DIM), node_id=fid,
                              metadata={STORE_VALUE_KEY: {"i": i, "by": args.prefix}})
                removed = _random_op(tree, rng, own, args.removes)
                # Announce the removal first: a kill can land after the commit reached the
                # database but before we hear back, so this write may be applied unacknowledged.
                if removed is not None:
                    print(f"TRY {fid} DEL {removed}", flush=True)
                rows, gone = tree.drain_changes()
                synced = storage.write(ns, rows, gone, expected_version=version)
                if i == args.pause_at:  # written but not committed: the parent kills us here
                    print(f"PAUSED {fid}", flush=True)
                    time.sleep(600)
            # The lock block has exited: the transaction is committed.
            own.append(fid)
            # One line per write (one write(2) call), so a kill cannot split what it reports.
            print(f"ACK {fid}" + ("" if removed is None else f" DEL {removed}"), flush=True)
            if args.delay:
                time.sleep(args.delay)
    print(f"DONE applied={applied} reloaded={reloaded}", flush=True)


def read(args: argparse.Namespace) -> None:
    with _open(args) as storage:
        loaded = storage.load_tree(tuple(args.ns.split("/")))
    if loaded is None:
        print(json.dumps({"facts": [], "nodes": 0, "version": 0}))
        return
    tree, version = loaded
    tree.check_invariants()
    print(json.dumps({"facts": sorted(tree.facts()), "nodes": len(tree), "version": version}), flush=True)


def hold_trainer(args: argparse.Namespace) -> None:
    storage = _open(args)
    print("HELD" if storage.try_acquire_trainer(args.name) else "BUSY", flush=True)
    time.sleep(600)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["write", "read", "hold-trainer"])
    p.add_argument("--target", required=True)
    p.add_argument("--schema", default=None)
    p.add_argument("--ns", default="user/facts")
    p.add_argument("--count", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prefix", default="f")
    p.add_argument("--removes", action="store_true")
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--pause-at", type=int, default=-1, help="sleep inside the transaction of this write")
    p.add_argument("--name", default="stage1")
    p.add_argument("--go", default=None, help="print READY, then wait for this file to exist")
    p.add_argument("--verify", action="store_true", help="compare each caught-up tree with a reload")
    args = p.parse_args()
    {"write": write, "read": read, "hold-trainer": hold_trainer}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
