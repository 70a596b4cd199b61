"""LangGraph-style value filters, as pure functions.

A filter is a dict ``{path: condition}``; every entry must hold (AND). A path is a key of
the value, or a dotted path into nested dicts (``"a.b"``). A condition is either a plain
value (exact match; a dict condition without operators matches a nested dict that holds
at least those entries, as LangGraph's stores do) or a dict of operators ``{"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"}``, all of which must hold.
A missing field matches only ``$ne``. Comparing values of incomparable types is False.
"""

from __future__ import annotations

import operator
from typing import Any, Callable

from ..errors import InvalidOperationError

_MISSING = object()
OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "$eq": operator.eq,
    "$ne": operator.ne,
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}


def _lookup(value: Any, path: str) -> Any:
    if isinstance(value, dict) and path in value:
        return value[path]
    cur = value
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return _MISSING
        cur = cur[part]
    return cur


def _is_operator_dict(cond: Any) -> bool:
    return isinstance(cond, dict) and bool(cond) and all(isinstance(k, str) and k.startswith("$") for k in cond)


def check_filter(filter: dict[str, Any] | None) -> None:
    """Raise InvalidOperationError for a malformed filter (unknown operator, non-str key)."""
    if filter is None:
        return
    if not isinstance(filter, dict):
        raise InvalidOperationError(f"a filter is a dict, got {type(filter).__name__}")
    for key, cond in filter.items():
        if not isinstance(key, str):
            raise InvalidOperationError(f"filter keys are strings, got {key!r}")
        if _is_operator_dict(cond):
            unknown = set(cond) - set(OPERATORS)
            if unknown:
                raise InvalidOperationError(f"unknown filter operator(s) {sorted(unknown)}")


def matches(value: dict[str, Any], filter: dict[str, Any] | None) -> bool:
    """True when ``value`` satisfies every condition of ``filter`` (None matches all)."""
    if not filter:
        return True
    for path, cond in filter.items():
        actual = _lookup(value, path)
        if _is_operator_dict(cond):
            for op, expected in cond.items():
                if actual is _MISSING:
                    if op != "$ne":
                        return False
                    continue
                try:
                    if not OPERATORS[op](actual, expected):
                        return False
                except TypeError:
                    return False
        elif actual is _MISSING or not _contains(actual, cond):
            return False
    return True


def _contains(actual: Any, expected: Any) -> bool:
    """``expected`` is equal to ``actual``, or (dicts) a recursive subset of it."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        return all(k in actual and _contains(actual[k], v) for k, v in expected.items())
    return actual == expected
