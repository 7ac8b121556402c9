"""The engine's capacity check summed by a compiled loop (issue 4 benchmark, round 3).

Why compiled: the engine checks every plan (DESIGN.md: a plan never over-commits a host) by adding every
placed task's CPU share and memory to its host. With numpy that took a dozen array calls per plan
(``np.repeat`` of the per-job values, two ``np.bincount``, the comparisons), about as long as the sums
themselves for the ~10-job plans of a DYNMCB8 simulation. The loop (``repack_kernel.host_sums``, shared
with the ASAP admission) adds the same values in the same
order as ``np.bincount`` does (task by task, from 0.0), so every host's sum is the same float.

``first_over`` is ``None`` when numba is not installed (the engine then uses numpy).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["first_over"]

first_over: Callable[..., tuple[int, float, float]] | None

try:  # pragma: no branch - numba is a declared dependency
    from numba import njit

    from coordinator.policies.repack_kernel import host_sums  # the one loop that sums tasks per host
except ImportError:  # pragma: no cover
    first_over = None
else:

    @njit(cache=True, nogil=True)
    def _first_over(at: np.ndarray, cpus: np.ndarray, mems: np.ndarray, counts: np.ndarray, capc: np.ndarray,
                    capm: np.ndarray) -> tuple[int, float, float]:
        """Job ``j`` has ``counts[j]`` tasks, on hosts ``at`` (jobs in order), each with CPU ``cpus[j]`` and
        memory ``mems[j]``. The first host whose CPU or memory sum exceeds its capacity + 1e-6, with its two
        sums, or (-1, 0.0, 0.0)."""
        n = capc.shape[0]
        cpu, mem = host_sums(at, cpus, mems, counts, n)
        for h in range(n):
            if cpu[h] > capc[h] + 1e-6 or mem[h] > capm[h] + 1e-6:
                return h, cpu[h], mem[h]
        return -1, 0.0, 0.0

    first_over = _first_over
