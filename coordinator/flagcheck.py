"""Refusing a command's settings in one line, before any work (the commands' shared rule for bad flags)."""

from __future__ import annotations

from collections.abc import Iterable

#: (flag, value given, whether it is acceptable, the rule it breaks otherwise)
Check = tuple[str, object, bool, str]


def first_refusal(command: str, checks: Iterable[Check]) -> str | None:
    """``"{command}: {flag}: {rule}, got {value}"`` for the first check that fails, or None: one line naming the
    flag and what was given, which the command prints before exiting with status 2."""
    for flag, value, ok, rule in checks:
        if not ok:
            return f"{command}: {flag}: {rule}, got {value}"
    return None
