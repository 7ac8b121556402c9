"""The average-yield step of seed 002 Sec. 3.5, with the per-job variant of Sec. 5.

Once a placement achieving a minimum yield ``Y`` is fixed, every task first gets exactly ``alpha_i * Y``
(its need times ``Y``). Spare CPU on each host is then handed out greedily *without moving any task*:

* sequential jobs (one task each, Sec. 3.5): on every host, the job with the smallest need ``alpha_i`` is
  raised first, until it is fully served (yield 1) or the host has no CPU left, then the next smallest,
  and so on. This is optimal for the linear program "maximise the average yield with the e_ij fixed"
  (exchange argument, Sec. 3.5);
* parallel jobs (Sec. 5): all tasks of a job must get the same CPU fraction, and the objective is the
  average *per-job* yield (so that splitting a job into many small tasks does not pay). 002 Sec. 5 names the
  per-job metric but no algorithm for this step; the one here is vcemu's reading: jobs are raised
  one at a time, cheapest total need ``T_i * alpha_i`` first, each as far as the tightest of its hosts
  allows. For one-task jobs this is exactly the Sec. 3.5 rule; for multi-host jobs it is a greedy that is
  not always optimal (002 proves the greedy optimal for sequential jobs only, Sec. 3.5): the exact optimum is
  a small LP (:func:`coordinator.vcsched.exact.average_yield_lp`), which on 64 hosts and 250 tasks of
  Lublin-sized parallel jobs beats it by 0.0019 average yield on average, by up to 0.0189.

The step never lowers a yield: every job ends with ``Y <= yield <= 1``.

Pure: no I/O, no clocks, no randomness.
"""

from __future__ import annotations

import numpy as np

from coordinator.policies.avgyield_kernel import average_yield_parallel

__all__ = ["raise_average_yield"]


def raise_average_yield(
    task_host: np.ndarray,
    task_job: np.ndarray,
    need: np.ndarray,
    cpu_cap: np.ndarray,
    min_yield: float | np.ndarray,
) -> np.ndarray:
    """Per-job yields after the Sec. 3.5 / Sec. 5 greedy, starting from ``min_yield`` for every job
    (or, given one value per job, from those: DYNMCB8-STRETCH-PER starts jobs at different yields).

    This is also the average-yield heuristic of seed 001 Sec. III-A, which every online policy uses:
    among jobs whose hosts all have spare CPU, raise the one with the lowest total need as far as its
    hosts allow, and repeat.

    ``task_host[k]`` is the host of task ``k``, ``task_job[k]`` its job (tasks of a job are contiguous or
    not, either works), ``need[i]`` the CPU need ``alpha_i`` of one task of job ``i`` and ``cpu_cap[j]``
    host ``j``'s CPU capacity. Returns an array of one yield per job, each in ``[min_yield, 1]``.
    """
    task_host = np.asarray(task_host, dtype=np.int64)
    task_job = np.asarray(task_job, dtype=np.int64)
    need = np.asarray(need, dtype=float)
    cpu_cap = np.asarray(cpu_cap, dtype=float)
    njobs = need.shape[0]
    if isinstance(min_yield, float) and min_yield >= 1.0:  # every job starts (clipped) at 1: nothing to raise
        return np.ones(njobs)
    if (
        average_yield_parallel is not None
        and isinstance(min_yield, float)
        and 0.0 < min_yield < 1.0
        and task_job.shape[0] != njobs
    ):  # one start yield (clipping leaves it as it is) and parallel jobs: straight to the compiled loop
        yields = np.full(njobs, min_yield)
        average_yield_parallel(task_host, task_job, need, cpu_cap, yields)
        return yields
    start = np.clip(np.broadcast_to(np.asarray(min_yield, dtype=float), (njobs,)), 0.0, 1.0)
    yields = start.copy()
    if njobs == 0 or bool(np.all(start >= 1.0)):
        return yields
    ntasks = np.bincount(task_job, minlength=njobs)
    sequential = task_job.shape[0] == njobs and bool(np.all(ntasks == 1))
    if not sequential and average_yield_parallel is not None:
        average_yield_parallel(task_host, task_job, need, cpu_cap, yields)  # the loop below, compiled
        return yields
    task_need = need[task_job]
    task_start = start[task_job]
    load = np.bincount(task_host, weights=task_need * task_start, minlength=cpu_cap.shape[0])
    slack = np.maximum(cpu_cap - load, 0.0)

    if sequential:
        # Sequential jobs: per host, smallest need first (Sec. 3.5), vectorised with grouped cumsums.
        extra = task_need * (1.0 - task_start)
        order = np.lexsort((np.arange(task_host.shape[0]), task_need, task_host))
        h = task_host[order]
        ex = extra[order]
        cum = np.cumsum(ex)
        starts = np.searchsorted(h, h, side="left")
        before = cum - ex - np.where(starts > 0, cum[starts - 1], 0.0)
        give = np.clip(slack[h] - before, 0.0, ex)
        y = np.empty_like(give)
        y[order] = task_start[order] + give / np.where(task_need[order] > 0, task_need[order], 1.0)
        yields[task_job] = np.minimum(y, 1.0)
        return yields

    # Parallel jobs: one yield per job; cheapest total need first (Sec. 5 per-job metric).
    order = np.lexsort((np.arange(njobs), need, ntasks * need))
    # Each job's distinct hosts (ascending) and its task count on each, for all jobs in one sort.
    nhosts = cpu_cap.shape[0]
    pair, counts = np.unique(task_job * nhosts + task_host, return_counts=True)
    pair_job = pair // nhosts
    pair_host = (pair % nhosts).tolist()
    pair_cnt = counts.tolist()
    bounds = np.searchsorted(pair_job, np.arange(njobs + 1)).tolist()
    slack_l = slack.tolist()
    for i in order.tolist():
        a = float(need[i])
        if a <= 0.0:
            yields[i] = 1.0
            continue
        hs_l = pair_host[bounds[i] : bounds[i + 1]]
        cnt_l = pair_cnt[bounds[i] : bounds[i + 1]]
        room = 1.0 - float(yields[i])
        for hj, n in zip(hs_l, cnt_l, strict=True):
            r = slack_l[hj] / (n * a)
            if r < room:
                room = r
        if room <= 0.0:
            continue
        yields[i] = min(float(yields[i]) + room, 1.0)
        for hj, n in zip(hs_l, cnt_l, strict=True):
            slack_l[hj] = max(slack_l[hj] - room * n * a, 0.0)
    return yields
