"""DYNMCB8's plan diff on host positions, compiled with numba (issue 4 benchmark, round 3).

Why compiled: after each repacking (seed 001 Sec. III-B) every running job's new hosts are compared with
its current ones, and a job that changed is moved keeping every task whose host is still among its new
hosts (:func:`coordinator.policies.dynmcb._moved_hosts`). That is a loop over every task of every running
job at every period; on host names in Python it was about 7% of a 1,000-job DYNMCB8-ASAP-PER simulation.
Here it runs on host positions (ints); names are looked up only for the jobs that do move.

Also here: DYNMCB8-ASAP-PER's admission between periods (:meth:`coordinator.policies.dynmcb.DynMcb8._start_now`),
GREEDY's mapping of the new job on per-host loads, 1,000 times per 1,000-job run (``greedy_admission``).

Both are ``None`` when numba is not installed (the callers then use their Python code).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

EPS = 1e-9  # as coordinator.policies.base.EPS

__all__ = ["greedy_admission", "host_sums", "moved_positions"]

host_sums: Callable[..., tuple[np.ndarray, np.ndarray]] | None
moved_positions: Callable[..., np.ndarray] | None
greedy_admission: Callable[..., tuple[bool, float]] | None

try:  # pragma: no branch - numba is a declared dependency
    from numba import njit
except ImportError:  # pragma: no cover
    host_sums = moved_positions = greedy_admission = None
else:

    @njit(cache=True, nogil=True)
    def _host_sums(at: np.ndarray, cpus: np.ndarray, mems: np.ndarray, counts: np.ndarray,
                   n: int) -> tuple[np.ndarray, np.ndarray]:
        """Per host of ``n``, the CPU and memory of the tasks on it: job ``j`` has ``counts[j]`` tasks, on hosts
        ``at`` (jobs in order), each with CPU ``cpus[j]`` and memory ``mems[j]``. Added task by task from 0.0,
        the order ``np.bincount(at, weights=np.repeat(cpus, counts))`` adds in, so each sum is the same float."""
        cpu = np.zeros(n)
        mem = np.zeros(n)
        k = 0
        for j in range(counts.shape[0]):
            c = cpus[j]
            m = mems[j]
            for _ in range(counts[j]):
                h = at[k]
                cpu[h] += c
                mem[h] += m
                k += 1
        return cpu, mem

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

    @njit(cache=True, nogil=True)
    def _greedy_admission(at: np.ndarray, needs: np.ndarray, mems: np.ndarray, counts: np.ndarray, tasks: int,
                          need: float, mem: float, capc: np.ndarray, capm: np.ndarray,
                          placed: np.ndarray) -> tuple[bool, float]:
        """GREEDY's mapping (001 Sec. III-A) of a new job of ``tasks`` tasks (CPU ``need``, memory ``mem``)
        on hosts loaded by the running jobs (job ``j``: ``counts[j]`` tasks on hosts ``at``, each needing
        ``needs[j]`` CPU and ``mems[j]`` memory), as ``dynmcb._greedy_hosts`` computes it on the loads
        ``np.bincount`` sums (the same additions, in the same order): among hosts with memory for one more
        task, the lowest (load + need) / capacity, then load / capacity, then the first host (what popping a heap
        of (key, key2, host) gives).
        Writes the hosts to ``placed``; returns (mapped, the largest load / capacity with the new job: Λ)."""
        n = capc.shape[0]
        load, used = _host_sums(at, needs, mems, counts, n)
        free = np.empty(n)
        ok = np.empty(n, dtype=np.bool_)
        for i in range(n):
            free[i] = capm[i] - used[i]
            ok[i] = free[i] + EPS >= mem
        for t in range(tasks):
            best = -1
            key = 0.0
            key2 = 0.0
            for i in range(n):
                if ok[i]:
                    q = (load[i] + need) / capc[i]
                    q2 = load[i] / capc[i]
                    if best < 0 or q < key or (q == key and q2 < key2):
                        best = i
                        key = q
                        key2 = q2
            if best < 0:
                return False, 0.0
            placed[t] = best
            load[best] += need
            free[best] -= mem
            if not free[best] + EPS >= mem:
                ok[best] = False
        lam = load[0] / capc[0]
        for i in range(1, n):
            q = load[i] / capc[i]
            if q > lam:
                lam = q
        return True, lam

    host_sums = _host_sums
    moved_positions = _moved_positions
    greedy_admission = _greedy_admission
