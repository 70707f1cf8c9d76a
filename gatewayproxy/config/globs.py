"""The glob patterns of routes, conditions and ACL rules: exact, `*`, `prefix*`, `*suffix` or `*contains*`."""

from __future__ import annotations

from collections.abc import Callable

Glob = Callable[[str], bool]


def compile_glob(pattern: str) -> Glob:
    """Exact, `*`, `prefix*`, `*suffix` or `*contains*` matching."""
    if pattern == "*":
        return lambda value: True
    starts, ends = pattern.startswith("*"), pattern.endswith("*")
    core = pattern.strip("*")
    if starts and ends:
        return lambda value: core in value
    if ends:
        return lambda value: value.startswith(core)
    if starts:
        return lambda value: value.endswith(core)
    return lambda value: value == pattern
