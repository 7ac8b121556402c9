"""The progress channel between a workload process and the node agent.

A small file (one page) that both sides ``mmap``. The program publishes how many work units it has done
and when (CLOCK_MONOTONIC, which is shared by all processes), about every 20 ms; the agent reads it as
often as it likes without a system call. A sequence counter (a seqlock: odd while a write is in
progress) lets the reader get units and timestamp as one consistent pair, which the benchmark needs to
compute rates without the 20 ms write interval showing up as noise.

Layout, little-endian unsigned 64-bit words: ``seq, units, t_ns, ready, target``. ``ready`` is 1 once
the program has allocated its memory and is about to compute (the agent's STARTING -> RUNNING).
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from dataclasses import dataclass

SIZE = 4096
_WORD = struct.Struct("<Q")
_PAIR = struct.Struct("<QQ")
_SEQ, _UNITS, _READY, _TARGET = 0, 8, 24, 32


@dataclass(frozen=True)
class Sample:
    """One consistent reading: ``units`` done as of ``t`` (seconds, ``time.monotonic()`` clock)."""

    units: int
    t: float
    ready: bool


def create(path: str) -> None:
    """Create a zeroed channel file (the agent does this before starting the program)."""
    with open(path, "wb") as f:
        f.write(b"\0" * SIZE)


class ProgressWriter:
    """The program's side: :meth:`publish` is cheap enough to call every ~20 ms."""

    def __init__(self, path: str, target: int) -> None:
        fd = os.open(path, os.O_RDWR)
        try:
            self._mm = mmap.mmap(fd, SIZE)
        finally:
            os.close(fd)
        self._seq = _WORD.unpack_from(self._mm, _SEQ)[0] & ~1
        _WORD.pack_into(self._mm, _TARGET, target)

    def publish(self, units: int, ready: bool = True) -> None:
        self._seq += 1
        _WORD.pack_into(self._mm, _SEQ, self._seq)  # odd: write in progress
        _PAIR.pack_into(self._mm, _UNITS, units, time.monotonic_ns())
        _WORD.pack_into(self._mm, _READY, 1 if ready else 0)
        self._seq += 1
        _WORD.pack_into(self._mm, _SEQ, self._seq)


class ProgressReader:
    """The agent's side. Readers never block the writer; a torn read is simply retried."""

    def __init__(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            self._mm = mmap.mmap(fd, SIZE, prot=mmap.PROT_READ)
        finally:
            os.close(fd)
        self._last = Sample(units=0, t=0.0, ready=False)

    def read(self) -> Sample:
        """The latest consistent sample; if the writer stopped mid-write (frozen or killed between the
        two sequence updates), the previous consistent sample."""
        for _ in range(100):
            seq1 = _WORD.unpack_from(self._mm, _SEQ)[0]
            units, t_ns = _PAIR.unpack_from(self._mm, _UNITS)
            ready = _WORD.unpack_from(self._mm, _READY)[0]
            seq2 = _WORD.unpack_from(self._mm, _SEQ)[0]
            if seq1 == seq2 and not seq1 & 1:
                self._last = Sample(units=units, t=t_ns / 1e9, ready=bool(ready))
                return self._last
        return self._last

    def close(self) -> None:
        self._mm.close()
