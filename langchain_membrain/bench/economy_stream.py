"""One stream of chat turns through a memory, one ``add`` at a time, with the memory's
counters read after each: what ``bench economy`` measures (its docstring says how questions
are attributed to inserts and how inserts are timed).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from langchain_core.embeddings import Embeddings


# ----------------------------------------------------------------------------- data
@dataclass
class Item:
    namespace: str
    text: str


def load_stream(path: str | Path | None = None, samples: str | None = None) -> list[Item]:
    """The inserts, in order. ``path`` None: the bundled sample conversation. ``samples``
    (LoCoMo): ``"N"`` keeps the first N samples, ``"id,id"`` those sample ids."""
    if path is None:
        text = resources.files("langchain_membrain.data").joinpath("sample_conversation.jsonl").read_text("utf-8")
        return _jsonl(text)
    raw = Path(path).read_text("utf-8")
    if raw.lstrip().startswith("["):
        return _locomo(path, samples)
    return _jsonl(raw)


def _jsonl(text: str) -> list[Item]:
    out = []
    for line in text.splitlines():
        if line.strip():
            obj = json.loads(line)
            out.append(Item(str(obj.get("namespace") or obj.get("persona") or "bench"), str(obj["text"])))
    return out


def _locomo(path: str | Path, samples: str | None) -> list[Item]:
    from .locomo import load_locomo

    convs = load_locomo(path)
    if samples:
        if samples.strip().isdigit():
            convs = convs[: int(samples)]
        else:
            wanted = [s.strip() for s in samples.split(",") if s.strip()]
            by_id = {c.sample_id: c for c in convs}
            missing = [s for s in wanted if s not in by_id]
            if missing:
                raise SystemExit(f"no LoCoMo sample {missing}; there are {sorted(by_id)}")
            convs = [by_id[s] for s in wanted]
    return [Item(f"locomo/{c.sample_id}", t.text) for c in convs for t in c.turns]


class PrecomputedEmbeddings(Embeddings):
    """Serves vectors embedded beforehand in one batch; embeds anything else (aspect labels)
    with ``base``. ``misses`` counts the texts embedded on demand."""

    def __init__(self, base: Any, known: Mapping[str, np.ndarray]):
        self.base, self.known, self.misses = base, dict(known), 0

    def embed_array(self, texts: list[str]) -> np.ndarray:
        from ..index.embeddings import embed_texts

        if not texts:
            dim = len(next(iter(self.known.values()))) if self.known else 0
            return np.zeros((0, dim), np.float32)
        todo = [t for t in texts if t not in self.known]
        if todo:
            self.misses += len(todo)
            got = {t: v for t, v in zip(todo, embed_texts(self.base, todo))}
        rows = [self.known[t] if t in self.known else got[t] for t in texts]
        return np.asarray(rows, dtype=np.float32).reshape(len(texts), -1)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self.embed_array(list(texts)).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed_array([text])[0].tolist()


# -------------------------------------------------------------------------- counters
def read_counts(stats: Mapping[str, Any]) -> tuple[int, int, dict[str, int]]:
    """(teacher_calls, naming_calls, {kind: count}) from ``mem.stats()``; every key optional."""
    teacher = int(stats.get("teacher_calls") or 0)
    naming = int(stats.get("naming_calls") or 0)
    q = stats.get("questions")
    kinds: dict[str, int] = {}
    if isinstance(q, Mapping):
        for k, v in q.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and str(k) != "total":
                kinds[str(k)] = int(v)
    return teacher, naming, kinds


def tree_shape(mem: Any, namespace: str) -> dict[str, Any]:
    """Shape of a namespace's live tree; retried when the background trainer writes it
    while it is read."""
    for _ in range(20):
        try:
            tree = mem.tree(namespace)
            root = tree.root_id
            facts = tree.fact_count(root)
            top = [tree.fact_count(a) for a in tree.child_aspects(root)]
            root_facts = sum(1 for c in tree.children(root) if tree.node(c).kind == "fact")
            return {"height": tree.height(), "top_aspects": len(top), "aspects": len(tree.aspects()),
                    "largest_top_aspect_share": max(top) / facts if top and facts else 0.0,
                    "root_fact_share": root_facts / facts if facts else 0.0, "facts": facts}
        except RuntimeError:  # "dictionary changed size during iteration"
            time.sleep(0.01)
        except Exception:  # noqa: BLE001 - a node removed meanwhile; an empty namespace
            time.sleep(0.01)
    return {}


@dataclass
class Insert:
    namespace: str
    n: int  # 1-based index within its namespace
    wall_ms: float
    cpu_ms: float  # calling thread
    cpu_process_ms: float
    teacher: int = 0  # counted during this add (and, for a namespace's last add, its flush)
    naming: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    merged: int = 0
    asked: bool = False  # counters rose during the add itself

    @property
    def questions(self) -> int:
        return self.teacher + self.naming


@dataclass
class StreamResult:
    run: str
    inserts: list[Insert]
    shapes: dict[tuple[str, int], dict[str, Any]]  # (namespace, window index) -> shape at its end
    pending: dict[tuple[str, int], int]
    final_stats: dict[str, Any]
    device: str
    seconds: float
    embed_misses: int
    kinds: set[str] = field(default_factory=set)  # every kind stats()["questions"] listed


def run_stream(items: Sequence[Item], make_memory: Callable[[], Any], vecs: np.ndarray, *, window: int,
               run: str, pass_embedding: bool, pause: float = 0.0,
               log: Callable[[str], None] = print) -> StreamResult:
    """Insert ``items`` one ``add`` at a time into a fresh memory; see the module docstring."""
    mem = make_memory()
    last_of = {it.namespace: i for i, it in enumerate(items)}
    seen: dict[str, int] = {}
    inserts: list[Insert] = []
    shapes: dict[tuple[str, int], dict[str, Any]] = {}
    pending: dict[tuple[str, int], int] = {}
    prev = read_counts(mem.stats())
    prev_merged, shadow_s = 0, 0.0
    t_start = time.perf_counter()
    try:
        for i, (it, vec) in enumerate(zip(items, vecs)):
            kwargs: dict[str, Any] = {"namespace": it.namespace}
            if pass_embedding:
                kwargs["embedding"] = vec
            w0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
            mem.add(it.text, **kwargs)
            w1, c1, p1 = time.perf_counter(), time.thread_time(), time.process_time()
            stats = mem.stats()
            cur = read_counts(stats)
            n = seen[it.namespace] = seen.get(it.namespace, 0) + 1
            # The shadow teacher's time (evaluation only) is not the insert's.
            sh = float(stats.get("shadow_seconds") or 0.0)
            spent, shadow_s = sh - shadow_s, sh
            rec = Insert(it.namespace, n, 1e3 * max(w1 - w0 - spent, 0.0), 1e3 * max(c1 - c0 - spent, 0.0),
                         1e3 * max(p1 - p0 - spent, 0.0))
            _charge(rec, prev, cur)
            rec.asked = rec.questions > 0
            merged = int(stats.get("merged") or 0)
            rec.merged, prev_merged = merged - prev_merged, merged
            prev = cur
            inserts.append(rec)
            final = i == last_of[it.namespace]
            if final:
                mem.flush()
                stats = mem.stats()
                cur = read_counts(stats)
                _charge(rec, prev, cur)
                prev = cur
            if final or n % window == 0:
                key = (it.namespace, (n - 1) // window)
                shapes[key] = tree_shape(mem, it.namespace)
                pending[key] = int(stats.get("pending_training") or 0)
            if pause > 0:
                time.sleep(pause)
            if (i + 1) % 100 == 0:
                log(f"  {run}: {i + 1}/{len(items)} inserts")
        mem.flush()
        cur = read_counts(mem.stats())
        if inserts:
            _charge(inserts[-1], prev, cur)
        final_stats = dict(mem.stats())
        kinds = set(read_counts(final_stats)[2])
        learner = getattr(mem, "_learner", None)
        device = str(getattr(getattr(learner, "trainer", None), "device", "")) or _torch_device()
        misses = int(getattr(mem.embeddings, "misses", 0))
    finally:
        mem.close()
    return StreamResult(run, inserts, shapes, pending, final_stats, device, time.perf_counter() - t_start, misses,
                        kinds)


def _charge(rec: Insert, before: tuple, after: tuple) -> None:
    rec.teacher += after[0] - before[0]
    rec.naming += after[1] - before[1]
    for k in set(before[2]) | set(after[2]):
        d = after[2].get(k, 0) - before[2].get(k, 0)
        if d:
            rec.kinds[k] = rec.kinds.get(k, 0) + d


def _torch_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:  # pragma: no cover
        return "cpu"
