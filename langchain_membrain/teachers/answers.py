"""What an LLM teacher's answer must be, and how a failed one is named.

An answer is untrusted input. Definitions:

- a **failure kind** (:data:`FAILURE_KINDS`) names why one attempt gave no usable answer;
  the kinds in :data:`FEEDBACK_KINDS` are retried with the rejected answer and the reason
  quoted back to the model, the others (transport failures) are asked again as they were;
- a **valid** answer names only numbers it was shown (a candidate, a node of the outline
  or of the closure), and its actions hold on the tree as the new fact will leave it
  (:func:`resolve_actions`: Promote needs a grandparent, Demote a sibling aspect, a Group
  two or more facts of one parent, no node twice); a label is 1 to 4 words
  (:func:`clean_label`).
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import MembrainError, TeacherError
from ..tree.actions import Action, Demote, Group, Promote, past_height, validate_action
from ..tree.placement import NEW_FACT
from ..tree.tree import MembrainTree
from . import prompts

# Failure kinds, as counted in the stats.
FAILURE_KINDS = ("invalid", "malformed", "refusal", "truncated", "timeout", "budget", "rate_limit",
                 "http_error", "connection", "error")
FEEDBACK_KINDS = {"invalid", "malformed", "refusal", "truncated"}  # retried with the error quoted


class TeacherCallError(TeacherError):
    """One failed attempt (or the last one, when raised by ``try_*``).

    ``kind`` is one of :data:`FAILURE_KINDS`; ``answer`` is the rejected answer's text.
    """

    def __init__(self, kind: str, message: str, *, answer: str | None = None, retry_after: float | None = None):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.detail = message
        self.answer = answer
        self.retry_after = retry_after


class TeacherUnavailable(TeacherCallError):
    """A question that was not sent: the circuit breaker is open (the teacher keeps failing,
    or answers slower than the insert's budget), the deadline has passed, or every request
    slot is taken until it does. Not a request: nothing reached the teacher's server."""

    def __init__(self, reason: str, message: str):
        super().__init__("unavailable", message)
        self.reason = reason  # "down", "slow", "budget", "busy" or "closing" (a cutoff passed)


@dataclass
class RawAnswer:
    """What one request returned, before validation."""

    parsed: BaseModel | dict | None
    text: str | None = None  # the answer as the model wrote it (content or tool arguments)
    finish_reason: str | None = None
    refusal: str | None = None
    parse_error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


class AttachedView:
    """A read-only view of ``tree`` as it will be once the new fact is attached under
    ``parent``: just what :func:`~langchain_membrain.tree.actions.validate_action` reads."""

    @dataclass
    class _Fact:
        kind: str = "fact"

    def __init__(self, tree: MembrainTree, parent: str):
        self.tree, self._parent = tree, parent

    def node(self, node_id: str) -> Any:
        return self._Fact() if node_id == NEW_FACT else self.tree.node(node_id)

    def parent(self, node_id: str) -> str | None:
        return self._parent if node_id == NEW_FACT else self.tree.parent(node_id)

    def has_room(self, parent_id: str, levels: int) -> bool:
        return self.tree.has_room(parent_id, levels)

    def levels_below(self, node_id: str) -> int:
        return 1 if node_id == NEW_FACT else self.tree.levels_below(node_id)


def neighbourhood(tree: MembrainTree, parent: str, fact_id: str) -> set[str]:
    """What a placement's actions may touch: the new fact, its parent and the parent's
    children, the grandparent and its children (the fact's closure once attached)."""
    allowed = {fact_id, parent, *tree.children(parent)}
    grand = tree.parent(parent)
    if grand is not None:
        allowed.update([grand, *tree.children(grand)])
    return allowed


def clean_label(text: Any) -> str:
    """A label trimmed of quotes and punctuation; TeacherCallError unless 1 to 4 words."""
    s = " ".join(str(text).split()).strip(" \"'`.,;:!?")
    words = s.split()
    if not words:
        raise TeacherCallError("invalid", "the label is empty")
    if len(words) > 4 or len(s) > 60:
        raise TeacherCallError("invalid", f"the label {s!r} is too long: use 1 to 4 words")
    return s


def validate_stage1(answer: prompts.Stage1Answer, n_candidates: int) -> int:
    c = answer.choice
    if not 0 <= c < n_candidates:
        raise TeacherCallError("invalid", f"choice {c} is not one of the numbers shown (0 to {n_candidates - 1})")
    return c


def resolve_actions(specs: list[prompts.ActionSpec], ids: list[str], view: Any, *,
                    allowed: set[str] | None = None, allow_aspects: bool = False) -> list[Action]:
    """Turn numbered action specs into actions on node ids and check them.

    ``ids[k]`` is the node numbered ``k`` ("" for none); ``view`` is the tree (or an
    :class:`AttachedView`) the actions will be applied to; ``allowed`` limits the nodes an
    action may touch (the closure). Raises TeacherCallError("invalid", ...) on the first
    problem, naming the action. A group the tree has no room for (its ``max_height``) is
    left out, not an error: the teacher is not told the bound, and the rest of its answer
    stands.
    """
    def node(num: Any, what: str, k: int) -> str:
        if not isinstance(num, int) or not 0 <= num < len(ids) or not ids[num]:
            raise TeacherCallError("invalid", f"action {k}: {what} {num!r} is not a node number shown")
        nid = ids[num]
        if allowed is not None and nid not in allowed:
            raise TeacherCallError("invalid", f"action {k}: node {num} is not in the new fact's neighbourhood")
        return nid

    actions: list[Action] = []
    used: set[str] = set()
    targets: set[str] = set()
    action: Action  # each branch's assignment narrows it
    for k, spec in enumerate(specs, start=1):
        try:
            if spec.type == "promote":
                action = Promote(node(spec.node, "node", k))
                moved = [action.node_id]
            elif spec.type == "demote":
                action = Demote(node(spec.node, "node", k), node(spec.target, "target", k))
                moved = [action.node_id]
                targets.add(action.target_id)
            else:
                members = spec.members or []
                if len(members) < 2:
                    raise TeacherCallError("invalid", f"action {k}: a group needs two or more facts")
                label = None
                if spec.label:
                    try:
                        label = clean_label(spec.label)
                    except TeacherCallError:
                        label = None  # named later by name_aspect
                action = Group(tuple(node(m, "member", k) for m in members), label)
                moved = list(action.node_ids)
                if past_height(view, action):
                    continue  # the tree's height bound: this group is dropped, the rest of the answer stands
            validate_action(view, action, allow_aspects=allow_aspects)
        except TeacherCallError:
            raise
        except MembrainError as exc:
            raise TeacherCallError("invalid", f"action {k} ({spec.type}) breaks the tree's rules: {exc}") from None
        if used.intersection(moved):
            raise TeacherCallError("invalid", f"action {k}: a node may take part in one action only")
        used.update(moved)
        actions.append(action)
    if used & targets:
        raise TeacherCallError("invalid", "a demote target is moved by another action")
    return actions


def classify_failure(exc: BaseException) -> TeacherCallError:
    """Map whatever a request raised to a counted failure kind."""
    if isinstance(exc, TeacherCallError):
        return exc
    name = type(exc).__name__
    if "LengthFinishReason" in name:  # the openai SDK's parse() on finish_reason "length"
        return TeacherCallError("truncated", "the answer was cut off (too long); answer with the JSON object only")
    if "ContentFilter" in name:
        return TeacherCallError("refusal", f"the answer was filtered ({name})")
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError, FutureTimeout)) or "Timeout" in name:
        return TeacherCallError("timeout", f"no answer in time ({name})")
    status = getattr(exc, "status_code", None)
    if status is not None:
        retry_after = None
        headers = getattr(getattr(exc, "response", None), "headers", None) or {}
        try:
            value = headers.get("retry-after")
            retry_after = float(value) if value is not None else None
        except (TypeError, ValueError):
            retry_after = None
        kind = "rate_limit" if status == 429 else "http_error"
        return TeacherCallError(kind, f"HTTP {status} ({name})", retry_after=retry_after)
    if "Connection" in name:
        return TeacherCallError("connection", f"cannot reach the model ({name})")
    if isinstance(exc, (ValidationError, json.JSONDecodeError)) or "OutputParser" in name:
        return TeacherCallError("malformed", f"the answer does not match the schema: {str(exc)[:300]}")
    return TeacherCallError("error", f"{name}: {str(exc)[:300]}")


def check_raw(raw: RawAnswer, schema: type[BaseModel]) -> BaseModel:
    """The parsed answer, or TeacherCallError for a refusal, a truncation or bad JSON."""
    if raw.refusal:
        raise TeacherCallError("refusal", f"the model refused: {raw.refusal[:200]}", answer=raw.text)
    if raw.finish_reason == "length":
        raise TeacherCallError("truncated", "the answer was cut off (too long); answer with the JSON object only",
                               answer=raw.text)
    parsed = raw.parsed
    if isinstance(parsed, dict):
        try:
            parsed = schema.model_validate(parsed)
        except ValidationError as exc:
            raise TeacherCallError("malformed", f"the answer does not match the schema: {exc}", answer=raw.text)
    if parsed is None and raw.text:
        try:
            parsed = schema.model_validate_json(raw.text)
        except ValidationError as exc:
            raise TeacherCallError("malformed", f"the answer is not valid JSON for the schema: {str(exc)[:300]}",
                                   answer=raw.text) from None
    if not isinstance(parsed, schema):
        detail = raw.parse_error or "no structured answer"
        raise TeacherCallError("malformed", f"the answer does not match the schema: {detail[:300]}", answer=raw.text)
    return parsed


__all__ = ["FAILURE_KINDS", "FEEDBACK_KINDS", "AttachedView", "RawAnswer", "TeacherCallError", "TeacherUnavailable",
           "check_raw", "classify_failure", "clean_label", "neighbourhood", "resolve_actions", "validate_stage1"]
