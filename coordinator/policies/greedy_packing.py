"""Greedy packers of seed 002 Sec. 3.3: GR, SG, GB and SGB.

* **GR** goes through the tasks in the given (job) order; each goes to the least loaded host (load = total
  CPU need already placed there, relative to the host's CPU capacity; ties to the lowest index) on which
  its memory fits.
* **SG** first sorts the tasks by memory, largest first (stable), then proceeds as GR.
* **GB** / **SGB** are GR / SG with depth-first backtracking: when a task fits nowhere, the previous task
  moves to its next candidate host (in the same load order), and so on. The search is bounded by
  ``max_attempts`` task placement attempts (500,000 in the paper); past it the packer fails.
  When GR (SG) succeeds, GB (SGB) returns the very same placement.

CPU is not a constraint while placing: the resulting minimum yield is the best the placement supports,
``min_j min(1, cpu_cap_j / load_j)``, followed by the average-yield step (Sec. 3.5 / Sec. 5). Parallel
jobs (Sec. 5) are placed task by task.

Pure: no I/O, no clocks, no randomness.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Sequence

import numpy as np

from coordinator.policies.packing import EPS, Allocation, Hosts, PackJob, PackProblem, finish_allocation

__all__ = ["GREEDY_VARIANTS", "greedy_allocate", "greedy_pack", "greedy_search"]

GREEDY_VARIANTS = ("GR", "SG", "GB", "SGB")


def _task_order(prob: PackProblem, variant: str) -> list[int]:
    n = prob.n_tasks
    if variant in ("SG", "SGB"):
        return np.lexsort((np.arange(n), -prob.task_mem)).tolist()
    return list(range(n))


def greedy_pack(prob: PackProblem, variant: str = "SG", max_attempts: int = 500_000) -> tuple[np.ndarray | None, int]:
    """Place every task (Sec. 3.3): ``(task_host, attempts)``, with ``task_host`` ``None`` on failure."""
    if variant not in GREEDY_VARIANTS:
        raise ValueError(f"variant: unknown greedy packer {variant!r}; known: {', '.join(GREEDY_VARIANTS)}")
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    order = _task_order(prob, variant)
    if variant in ("GB", "SGB"):
        return _backtrack(prob, order, max_attempts)
    return _plain(prob, order)


def _plain(prob: PackProblem, order: list[int]) -> tuple[np.ndarray | None, int]:
    n = prob.n_tasks
    task_host = np.full(n, -1, dtype=np.int64)
    rel = np.zeros(prob.n_hosts)  # load / cpu_cap
    inv = 1.0 / prob.cpu_cap
    memfree = prob.mem_cap.astype(float).copy()
    need = prob.task_need
    mem = prob.task_mem
    big = np.inf
    for t in order:
        cand = np.where(memfree >= mem[t] - EPS, rel, big)
        h = int(cand.argmin())
        if cand[h] == big:
            return None, 0
        task_host[t] = h
        rel[h] += need[t] * inv[h]
        memfree[h] -= mem[t]
    return task_host, n


def _backtrack(prob: PackProblem, order: list[int], max_attempts: int) -> tuple[np.ndarray | None, int]:
    n = prob.n_tasks
    H = prob.n_hosts
    inv = (1.0 / prob.cpu_cap).tolist()
    memfree = prob.mem_cap.astype(float).tolist()
    need = prob.task_need.tolist()
    mem = prob.task_mem.tolist()
    rel = [0.0] * H
    ranked = [(0.0, j) for j in range(H)]  # hosts sorted by (relative load, index)
    cands: list[list[int] | None] = [None] * n
    ptrs = [0] * n
    host_of = [-1] * n
    attempts = 0
    d = 0
    while 0 <= d < n:
        t = order[d]
        cd = cands[d]
        if cd is None:
            lim = mem[t] - EPS
            cd = [j for (_, j) in ranked if memfree[j] >= lim]
            cands[d] = cd
            ptrs[d] = 0
        if ptrs[d] < len(cd):
            h = cd[ptrs[d]]
            ptrs[d] += 1
            attempts += 1
            if attempts > max_attempts:
                return None, attempts - 1
            old = (rel[h], h)
            del ranked[bisect_left(ranked, old)]
            rel[h] += need[t] * inv[h]
            insort(ranked, (rel[h], h))
            memfree[h] -= mem[t]
            host_of[t] = h
            d += 1
        else:
            cands[d] = None
            d -= 1
            if d >= 0:
                t = order[d]
                h = host_of[t]
                old = (rel[h], h)
                del ranked[bisect_left(ranked, old)]
                rel[h] -= need[t] * inv[h]
                insort(ranked, (rel[h], h))
                memfree[h] += mem[t]
                host_of[t] = -1
    if d < 0:
        return None, attempts
    return np.asarray(host_of, dtype=np.int64), attempts


def greedy_search(
    prob: PackProblem, variant: str = "SG", max_attempts: int = 500_000, *, average: bool = True
) -> Allocation | None:
    """Greedy placement, then best min yield of the placement and the average-yield step."""
    if prob.n_tasks and not prob.memory_may_fit():
        return None
    th, attempts = greedy_pack(prob, variant, max_attempts)
    if th is None:
        return None
    return finish_allocation(prob, th, variant, -1.0, attempts, average)


def greedy_allocate(
    jobs: Sequence[PackJob], hosts: Hosts, variant: str = "SG", max_attempts: int = 500_000
) -> Allocation | None:
    """GR / SG / GB / SGB (Sec. 3.3) with the average-yield step. ``None`` when the packer fails.

    ``Allocation.probes`` holds the number of placement attempts made.
    """
    return greedy_search(PackProblem.build(jobs, hosts), variant, max_attempts)
