"""A job's hosts in a few characters, as Slurm's host lists write them: ``agent0-h[0-3]*2500``.

Why: ``vcemu jobs`` printed a job's hosts one name per task, so a 128-task job's cell was some 1,300
characters and a 10,000-task job's 100,000, and the table's columns after it were pushed off every row's
screen (the column is as wide as its widest cell). A table shows each host once, with the number of the
job's tasks on it; the per-task list stays in ``vcemu jobs --json`` (a task's position is its index).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

__all__ = ["compress_hosts"]

_NUMBERED = re.compile(r"^(.*?)(\d+)$")
#: Longest cell :func:`compress_hosts` returns by default (a long list is cut at a group and says how many hosts)
WIDTH = 60


def _key(name: str) -> tuple[str, int, int]:
    """(prefix, zero-padded width or 0, number) of a name ending in digits; (name, -1, 0) otherwise."""
    m = _NUMBERED.match(name)
    if m is None:
        return name, -1, 0
    prefix, digits = m.groups()
    return prefix, len(digits) if digits.startswith("0") and len(digits) > 1 else 0, int(digits)


def _ranges(numbers: list[int], width: int) -> str:
    """Sorted distinct ``numbers`` as ``0-3,5`` (each zero-padded to ``width``)."""
    parts: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        a, b = f"{start:0{width}d}", f"{prev:0{width}d}"
        parts.append(a if start == prev else f"{a}-{b}")
        if n is not None:
            start = prev = n
    return ",".join(parts)


def compress_hosts(hosts: Sequence[str], width: int = WIDTH) -> str:
    """``hosts`` (one per task) as each distinct host once, numbered hosts of one prefix in ranges, with ``*N`` after
    hosts holding N > 1 of the tasks: ``["h0", "h1", "h0", "h1"]`` is ``h[0-1]*2``. Hosts of one prefix and one task
    count share a group; groups come in the order of their prefixes, then counts (largest first). Longer than
    ``width`` (and of more than one host): cut after the last group that fits, with ``,... (N hosts)``. ``-`` for no
    host."""
    if not hosts:
        return "-"
    counts = Counter(hosts)
    groups: dict[tuple[str, int, int], list[int]] = {}  # (prefix, padding, tasks per host) -> numbers
    plain: list[tuple[str, int]] = []
    for name, n in counts.items():
        prefix, pad, number = _key(name)
        if pad < 0:
            plain.append((name, n))
        else:
            groups.setdefault((prefix, pad, n), []).append(number)
    cells: list[str] = []
    for (prefix, pad, n), numbers in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1], -g[0][2])):
        numbers.sort()
        body = f"{prefix}{numbers[0]:0{pad}d}" if len(numbers) == 1 else f"{prefix}[{_ranges(numbers, pad)}]"
        cells.append(body if n == 1 else f"{body}*{n}")
    cells += [name if n == 1 else f"{name}*{n}" for name, n in sorted(plain)]
    text = ",".join(cells)
    if len(text) <= width or len(counts) == 1:  # (one host: its whole name)
        return text
    tail = f",... ({len(counts)} hosts)"
    kept = ""
    for cell in cells:
        if len(kept) + len(cell) + 1 + len(tail) > width:
            break
        kept = f"{kept},{cell}" if kept else cell
    if not kept:  # the first group alone is too long: cut inside its ranges
        first = cells[0]
        cut = first.rfind(",", 0, max(width - len(tail) - 5, 0))
        kept = f"{first[:cut]},...]" if "[" in first[:cut] else first[:max(width - len(tail), 1)]
    return f"{kept}{tail}"
