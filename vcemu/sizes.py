"""Memory sizes as people write them (``2GiB``, ``512Mi``, ``1.5G``), and the bounds of an emulated host's memory.

Shared by the agent's command line (``vcemu agent --mem-per-host``) and the coordinator's commands that start or
describe agents (``up``, ``demo``, ``replay``, ``oppcost --memory``): one parser, so that a size means the same in
each.
"""

from __future__ import annotations

import os
import re

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*$")
#: Kubernetes quantity conventions: K/M/G/T (and KB...) are powers of 1000, Ki/Mi/... (KiB...) of 1024.
_UNITS = {"": 1, "b": 1}
for _i, _p in enumerate("kmgtp", start=1):
    _UNITS[_p] = _UNITS[_p + "b"] = 1000**_i
    _UNITS[_p + "i"] = _UNITS[_p + "ib"] = 1024**_i


def parse_size(text: str) -> int:
    """Bytes in ``text``: ``2GiB``, ``512Mi``, ``1.5G``, ``1000000``. ValueError if unparseable or < 0."""
    m = _SIZE_RE.match(text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"cannot parse memory size {text!r} (examples: 2GiB, 512MiB, 1.5G, 1000000)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


#: Least memory of an emulated host: a task's process takes more than a few bytes (a host of 1 byte was taken).
MIN_HOST_MEMORY = 1 << 20


def host_memory_refusal(nbytes: int, here: bool = True) -> str | None:
    """Why an emulated host cannot have ``nbytes`` of memory, or None: at least 1 MiB, and at most this machine's
    physical memory, since a task's arrays are real (100 TiB was taken: jobs given a tenth of it then failed to
    allocate). Not the sum over hosts: emulated hosts share the machine, as their cores do. ``here`` False: a host
    on another machine (``up --ray``), whose memory this one cannot tell: the least only."""
    machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if nbytes < MIN_HOST_MEMORY:
        return f"less than 1MiB ({nbytes:,} B)"
    if here and nbytes > machine:
        return f"{nbytes / 2**30:,.1f} GiB is more than this machine's memory ({machine / 2**30:,.1f} GiB)"
    return None
