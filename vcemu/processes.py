"""Stopping child processes: SIGTERM, a wait, then SIGKILL for what is left.

Shared by the agent (its fencer, :mod:`node_agent.fencer`) and the command line (the agents ``vcemu up``, ``demo``,
``replay`` and the benchmarks spawn); here, below both, so that the agent need not import the command line.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Sequence

__all__ = ["stop_processes"]


def stop_processes(procs: Sequence[subprocess.Popen], timeout: float = 10.0) -> None:  # type: ignore[type-arg]
    """SIGTERM each of ``procs`` still running, then wait for all of them against one deadline ``timeout`` from
    now, SIGKILLing (and reaping) each one that outlives it."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
