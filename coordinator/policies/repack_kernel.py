"""DYNMCB8's plan diff on host positions, compiled with numba (issue 4 benchmark, round 3).

Why compiled: after each repacking (seed 001 Sec. III-B) every running job's new hosts are compared with
its current ones, and a job that changed is moved keeping every task whose host is still among its new
hosts (:func:`coordinator.policies.dynmcb._moved_hosts`). That is a loop over every task of every running
job at every period; on host names in Python it was about 7% of a 1,000-job DYNMCB8-ASAP-PER simulation.
Here it runs on host positions (ints); names are looked up only for the jobs that do move.

``moved_positions`` is ``None`` when numba is not installed (the caller then uses the Python function).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["moved_positions"]

moved_positions: Callable[..., np.ndarray] | None

try:  # pragma: no branch - numba is a declared dependency
    from numba import njit
except ImportError:  # pragma: no cover
    moved_positions = None
else:

    @njit(cache=True, nogil=True)
    def _moved_positions(cur: np.ndarray, new: np.ndarray, offsets: np.ndarray, nhosts: int,
                         out: np.ndarray) -> np.ndarray:
        """For each job ``i`` (its tasks at ``offsets[i]:offsets[i + 1]`` of ``cur``, its current host
        positions, and ``new``, the repacking's), :func:`coordinator.policies.dynmcb._moved_hosts` on
        positions: returns one flag per job (1: the job moves, to ``out[offsets[i]:offsets[i + 1]]``).

        As there: the new hosts are counted (a multiset, first-seen order kept); each task whose host is
        still wanted keeps it (in task order), the others take the spare hosts in first-seen order."""
        njobs = offsets.shape[0] - 1
        flags = np.zeros(njobs, dtype=np.int64)
        count = np.zeros(nhosts, dtype=np.int64)
        seen = np.empty(nhosts, dtype=np.int64)  # the new hosts in first-seen order
        moving = np.empty(cur.shape[0], dtype=np.int64)
        for i in range(njobs):
            lo = offsets[i]
            hi = offsets[i + 1]
            same = True
            for k in range(lo, hi):
                if cur[k] != new[k]:
                    same = False
                    break
            if same:
                continue
            ns = 0
            for k in range(lo, hi):
                h = new[k]
                if count[h] == 0:
                    seen[ns] = h
                    ns += 1
                count[h] += 1
            nm = 0
            for k in range(lo, hi):
                h = cur[k]
                out[k] = h
                if count[h] > 0:
                    count[h] -= 1
                else:
                    moving[nm] = k
                    nm += 1
            if nm > 0:
                flags[i] = 1
                q = 0
                for s in range(ns):
                    h = seen[s]
                    while count[h] > 0:
                        out[moving[q]] = h
                        q += 1
                        count[h] -= 1
            else:
                for s in range(ns):
                    count[seen[s]] = 0
        return flags

    moved_positions = _moved_positions
