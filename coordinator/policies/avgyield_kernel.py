"""The parallel-job average-yield greedy of :mod:`coordinator.policies.avgyield`, compiled with numba.

Why compiled: DYNMCB8 (seed 001 Sec. III-B) runs the step after every yield search and GREEDY's
max-min shares (001 Sec. III-A) after every admission; with tens of jobs per call the numpy set-up
(a unique over (job, host) pairs, a lexsort, conversions to lists) and the Python loop cost more than
the greedy itself (issue 4 benchmark). The kernel does the same arithmetic in the same order: the host
loads are summed task by task as ``np.bincount`` does, jobs are taken by (total need, need, index) as
``np.lexsort`` orders them, and every update is the Python loop's, operation for operation, so the
yields are bit-identical (a unit test compares the two). ``average_yield_parallel`` is ``None`` without
numba, and :func:`coordinator.policies.avgyield.raise_average_yield` then runs its Python loop.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["average_yield_parallel"]

average_yield_parallel: Callable[..., None] | None

try:  # pragma: no branch - numba is a declared dependency; the fallback keeps a broken install usable
    from numba import njit
except ImportError:  # pragma: no cover
    average_yield_parallel = None
else:
    from coordinator.policies.mcb8_kernel import _argsort_stable

    @njit(cache=True, nogil=True)
    def _average_yield_parallel(
        task_host: np.ndarray, task_job: np.ndarray, need: np.ndarray, cpu_cap: np.ndarray, yields: np.ndarray
    ) -> None:
        """Raise ``yields`` (one per job, holding the start yields) in place: Sec. 5's per-job greedy."""
        njobs = need.shape[0]
        nhosts = cpu_cap.shape[0]
        ntask = task_host.shape[0]
        load = np.zeros(nhosts)
        ntasks = np.zeros(njobs, dtype=np.int64)
        for k in range(ntask):  # np.bincount(task_host, weights=task_need * task_start): in task order
            j = task_job[k]
            load[task_host[k]] += need[j] * yields[j]
            ntasks[j] += 1
        slack = np.empty(nhosts)
        for h in range(nhosts):
            s = cpu_cap[h] - load[h]
            slack[h] = s if s > 0.0 else 0.0
        # np.lexsort((arange, need, ntasks * need)): stable sorts, least significant key first.
        total = np.empty(njobs)
        for i in range(njobs):
            total[i] = ntasks[i] * need[i]
        by_need = _argsort_stable(need)
        order = by_need[_argsort_stable(total[by_need])]
        # Each job's distinct hosts, ascending, with its task count on each (np.unique of job * H + host).
        keys = task_job * nhosts + task_host
        pair = keys[_argsort_stable(keys)]
        npair = 0
        for k in range(ntask):
            if k == 0 or pair[k] != pair[k - 1]:
                npair += 1
        pair_host = np.empty(npair, dtype=np.int64)
        pair_cnt = np.zeros(npair, dtype=np.int64)
        bounds = np.zeros(njobs + 1, dtype=np.int64)
        q = -1
        for k in range(ntask):
            if k == 0 or pair[k] != pair[k - 1]:
                q += 1
                pair_host[q] = pair[k] % nhosts
                bounds[pair[k] // nhosts + 1] += 1
            pair_cnt[q] += 1
        for i in range(njobs):
            bounds[i + 1] += bounds[i]
        for i in order:
            a = need[i]
            if a <= 0.0:
                yields[i] = 1.0
                continue
            room = 1.0 - yields[i]
            for p in range(bounds[i], bounds[i + 1]):
                r = slack[pair_host[p]] / (pair_cnt[p] * a)
                if r < room:
                    room = r
            if room <= 0.0:
                continue
            y = yields[i] + room
            yields[i] = y if y < 1.0 else 1.0
            for p in range(bounds[i], bounds[i + 1]):
                hj = pair_host[p]
                s = slack[hj] - room * pair_cnt[p] * a
                slack[hj] = s if s > 0.0 else 0.0

    average_yield_parallel = _average_yield_parallel
