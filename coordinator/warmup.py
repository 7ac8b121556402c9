"""Compile the policies' numba kernels before a live coordinator needs them.

Why: the first call of a numba kernel in a fresh checkout compiles it (about 10 s for the MCB8 and
average-yield kernels on a 2-core machine; later processes load numba's on-disk cache in about a second).
In the simulator that is a one-off delay, but in a live coordinator the first DYNMCB8 decision would
hold the engine loop for those seconds: no status polls, no actions, a stalled run. So a coordinator
warms the kernels before it serves, and ``make install`` warms the disk cache once
(``python -m coordinator.warmup``).

The warm-up is a real, tiny simulation: a seeded 40-job Lublin trace at offered load 0.9 on 16 hosts,
dense enough that DYNMCB8 must remove jobs (the removal kernel) and GREEDY-PMTN-MIGR runs the
average-yield step, so every kernel is compiled for the argument types the policies really pass.
"""

from __future__ import annotations

import sys
import threading
import time

WARM_POLICIES = ("dynmcb8-asap-per", "dynmcb8", "greedy-pmtn-migr")

_lock = threading.Lock()
_done = False


def warm_kernels() -> float:
    """Compile (or load) every kernel once per process; returns the seconds it took (0.0 after the first)."""
    global _done
    with _lock:
        if _done:
            return 0.0
        from coordinator.experiments import homogeneous_hosts, simulate
        from workloads.annotate import synthetic_trace

        start = time.perf_counter()
        specs = synthetic_trace(7, 40, hosts=16, load=0.9)
        for policy in WARM_POLICIES:
            simulate(specs, policy, homogeneous_hosts(16))
        _done = True
        return time.perf_counter() - start


def main() -> int:
    took = warm_kernels()
    print(f"vcemu: policy kernels compiled and cached in {took:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
