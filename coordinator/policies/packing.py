"""Static placement for VCSCHED: multi-capacity bin packing (MCB1-MCB8) with a binary search on the yield.

Source: Casanova, Schanzenbach, Stillwell, Vivien, *Resource Allocation using Virtual Clusters*
(seed 002). The problem (Sec. 2.3): place every task of every job on one host so that, on each host,
memory fits and the CPU fractions sum to at most the capacity, maximising the *minimum yield*
(allocated CPU / CPU need) over jobs. Parallel jobs (Sec. 5) have ``tasks > 1`` identical tasks that all
receive the same CPU fraction; a job's yield is then that fraction over its per-task need.

Stable API (used by the online DFRS policies)
----------------------------------------------
``PackJob(tasks, cpu_need, mem)``
    One job: ``tasks`` identical tasks, each needing ``cpu_need`` of a reference host's CPU (alpha_i,
    in (0, 1]) and ``mem`` of its memory (m_i, in [0, 1]).
``hosts``
    Either an ``int`` H (H identical unit hosts, the paper's setting) or a sequence of
    ``(cpu_cap, mem_cap)`` pairs for heterogeneous hosts, relative to the reference host.
``mcb_allocate(jobs, hosts, key="MCB8", accuracy=0.01, *, search="fast") -> Allocation | None``
    Sec. 3.4 MCB packing + binary search on the yield, followed by the Sec. 3.5 / Sec. 5 average-yield
    step. ``None`` means the heuristic found no placement (e.g. memory does not fit).
The Sec. 3.3 greedy packers GR, SG, GB, SGB are in :mod:`coordinator.policies.greedy_packing`
(``greedy_allocate``), which builds on this module (it does not import that one).
``allocation_from_placement(jobs, hosts, task_host, algorithm) -> Allocation | None``
    Turn any placement (one host index per task, tasks in job order) into an allocation: the best
    minimum yield the placement supports (vcemu's reading, see "Search" below), then the average-yield step.
    ``None`` if it does not fit.
``lp_bound(jobs, hosts) -> float | None``
    The rational LP bound of Sec. 3.1, ``min(sum(cpu_cap) / sum(need), 1)``, or ``None`` when total
    memory does not fit (the relaxation is infeasible). On identical hosts it is the relaxation's optimum; on
    heterogeneous ones only an upper bound on it (see :func:`lp_bound`).
``PackProblem.build(jobs, hosts)`` / ``mcb_pack(problem, yield_, key="MCB8") -> ndarray | None``
    Lower level: the validated array form of an instance (tasks flattened in job order) and one MCB
    packing pass at a fixed yield (one host index per task, or ``None``); ``mcb_search(problem, ...)`` is
    ``mcb_allocate`` on a prebuilt problem.
``verify_allocation(jobs, hosts, allocation)``
    Raise ``ValueError`` unless the allocation is feasible and its claims hold (used by tests).

``Allocation`` fields: ``min_yield`` (the achieved minimum yield, the minimum of ``yields``: that of the placement,
not the search's Y, see below),
``search_yield`` (the yield value at which the packing succeeded), ``hosts`` (per job, one host index
per task), ``yields`` (per job, after the average-yield step), ``algorithm`` and ``probes`` (packing
passes run). ``Allocation.cpu(i)`` is the CPU fraction each task of job ``i`` gets.

Search (Sec. 3.4): with the yield fixed at Y every task needs ``alpha_i * Y`` CPU and ``m_i`` memory, so
MCB can pack it as a 2-capacity bin-packing problem; the yield lies in ``[0, min(1, sum cpu_cap / sum
alpha)]``, the search starts at half of that bound and bisects until the interval is at most
``accuracy`` wide (absolute). 002 gives no such tolerance ("perform a binary search of possible minimum yield
values"): it is vcemu's. This module's default, 0.01, is seed 001's threshold, kept for the online DFRS policies
(DYNMCB8 and its variants) that call it; ``vcemu vcsched`` passes 0.001 (its ``--accuracy``), since on the large
set (500 tasks, bound ~0.25) 0.01 stopped the search after 5 probes, 3% below the LP bound. ``search="paper"`` is that
bisection. ``search="fast"`` (default) adds two bounds:
it first tries the upper bound itself (if that packs, it is optimal), and after each success it raises
the lower end to the best minimum yield the found placement actually supports. MCB is not monotone in
Y, so the two modes can end on different placements; on 180 generated instances (small and large sets)
"fast" was better on 94, worse on 9 (by at most 0.019), +0.002 minimum yield on average, same failures.
In both modes the reported minimum yield is the one the returned placement supports (>= Y), and the average-yield
step starts from it: vcemu's reading, not 002's, whose Sec. 3.5 starts every job at the search's value Y (the
placement's own minimum yield, the best every job can get on it, is never below Y).

Pure: no I/O, no clocks, no global randomness.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from coordinator.policies.avgyield import raise_average_yield
from coordinator.policies.avgyield_kernel import average_yield_parallel
from coordinator.policies.mcb8_kernel import mcb8_pack, mcb8_search, min_yield

__all__ = [
    "EPS",
    "MCB_KEYS",
    "Allocation",
    "Hosts",
    "PackJob",
    "PackProblem",
    "allocation_from_placement",
    "finish_allocation",
    "lp_bound",
    "mcb_allocate",
    "mcb_pack",
    "mcb8_yields",
    "mcb8_yields_compiled",
    "mcb_search",
    "placement_min_yield",
    "verify_allocation",
]

#: Tolerance on capacity checks (fractions of a host).
EPS = 1e-9

#: Hosts: H identical unit hosts, or one ``(cpu_cap, mem_cap)`` per host.
Hosts = int | Sequence[tuple[float, float]]


@dataclass(frozen=True, slots=True)
class PackJob:
    """A job to place: ``tasks`` identical tasks of CPU need ``cpu_need`` and memory ``mem`` (Sec. 2.3, 5)."""

    tasks: int
    cpu_need: float
    mem: float


@dataclass(frozen=True)
class Allocation:
    """A placement plus CPU fractions (Sec. 2.3): per job, one host per task and one yield."""

    algorithm: str
    min_yield: float
    search_yield: float
    hosts: tuple[tuple[int, ...], ...]
    yields: tuple[float, ...]
    needs: tuple[float, ...] = ()
    probes: int = 0

    @property
    def avg_yield(self) -> float:
        """Average per-job yield (Sec. 3.5; per job for parallel jobs, Sec. 5)."""
        return float(sum(self.yields) / len(self.yields)) if self.yields else 1.0

    def cpu(self, job: int) -> float:
        """The CPU fraction each task of ``job`` receives (need x yield)."""
        return self.needs[job] * self.yields[job]


@dataclass(frozen=True)
class PackProblem:
    """An instance in array form: tasks flattened in job order (task ``k`` belongs to ``task_job[k]``)."""

    jobs: tuple[PackJob, ...]
    need: np.ndarray  # per job alpha_i
    mem: np.ndarray  # per job m_i
    ntasks: np.ndarray  # per job T_i
    task_job: np.ndarray  # per task
    task_need: np.ndarray  # per task alpha
    task_mem: np.ndarray  # per task m
    cpu_cap: np.ndarray  # per host
    mem_cap: np.ndarray  # per host

    @property
    def n_tasks(self) -> int:
        return int(self.task_job.shape[0])

    @property
    def n_hosts(self) -> int:
        return int(self.cpu_cap.shape[0])

    @property
    def identical_hosts(self) -> bool:
        return bool(np.all(self.cpu_cap == self.cpu_cap[0]) and np.all(self.mem_cap == self.mem_cap[0]))

    @classmethod
    def build(cls, jobs: Sequence[PackJob], hosts: Hosts) -> PackProblem:
        """Validate and convert. Raises ``ValueError`` naming the job (or host) and the field."""
        cpu_cap, mem_cap = _host_arrays(hosts)
        jobs_t = tuple(jobs)
        n = len(jobs_t)
        need = np.fromiter((j.cpu_need for j in jobs_t), dtype=float, count=n)
        mem = np.fromiter((j.mem for j in jobs_t), dtype=float, count=n)
        nt = np.fromiter((j.tasks for j in jobs_t), dtype=np.int64, count=n)
        bad = ~(np.isfinite(need) & (need > 0.0) & (need <= 1.0))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"job {i}: cpu_need must be in (0, 1], got {jobs_t[i].cpu_need!r}")
        bad = ~(np.isfinite(mem) & (mem >= 0.0) & (mem <= 1.0))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"job {i}: mem must be in [0, 1], got {jobs_t[i].mem!r}")
        for i, j in enumerate(jobs_t):
            if not isinstance(j.tasks, (int, np.integer)) or isinstance(j.tasks, bool) or j.tasks < 1:
                raise ValueError(f"job {i}: tasks must be a whole number >= 1, got {j.tasks!r}")
        task_job = np.repeat(np.arange(n, dtype=np.int64), nt)
        return cls(
            jobs=jobs_t,
            need=need,
            mem=mem,
            ntasks=nt,
            task_job=task_job,
            task_need=need[task_job],
            task_mem=mem[task_job],
            cpu_cap=cpu_cap,
            mem_cap=mem_cap,
        )

    def yield_upper_bound(self) -> float:
        """``min(1, total CPU capacity / total CPU need)`` (Sec. 3.1, 3.4)."""
        total = float(self.task_need.sum())
        if total <= 0.0:
            return 1.0
        return min(1.0, float(self.cpu_cap.sum()) / total)

    def memory_may_fit(self) -> bool:
        """Cheap necessary conditions for any placement: total memory, and each task fits some host."""
        if self.n_tasks == 0:
            return True
        if float(self.task_mem.sum()) > float(self.mem_cap.sum()) + EPS:
            return False
        return float(self.task_mem.max()) <= float(self.mem_cap.max()) + EPS


def _host_arrays(hosts: Hosts) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(hosts, (int, np.integer)) and not isinstance(hosts, bool):
        if hosts < 1:
            raise ValueError(f"hosts: need at least one host, got {hosts}")
        return np.ones(int(hosts)), np.ones(int(hosts))
    pairs = list(hosts)  # type: ignore[arg-type]
    if not pairs:
        raise ValueError("hosts: need at least one host")
    caps = np.asarray(pairs, dtype=float)
    if caps.ndim != 2 or caps.shape[1] != 2:
        raise ValueError("hosts: expected an int or a sequence of (cpu_cap, mem_cap) pairs")
    bad = ~(np.isfinite(caps).all(axis=1) & (caps > 0.0).all(axis=1))
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise ValueError(f"host {j}: cpu_cap and mem_cap must be > 0, got {pairs[j]!r}")
    return caps[:, 0].copy(), caps[:, 1].copy()


def lp_bound(jobs: Sequence[PackJob], hosts: Hosts) -> float | None:
    """The rational LP optimum of Sec. 3.1 on ``H`` identical hosts: ``min(H / sum alpha, 1)`` when total memory
    fits, else ``None`` (the relaxation is infeasible). Parallel jobs count each task.

    With heterogeneous hosts ``H`` becomes the total CPU capacity, and the value is only an upper bound on the
    relaxation, not its optimum (002 Sec. 3.1 proves the equality for identical hosts only): one job of need 1 and
    memory 1 on hosts (cpu 1, mem 0.01) and (cpu 0.01, mem 1.5) gets 1.0 here, 0.02 from the LP relaxation
    (:func:`coordinator.vcsched.exact.solve_lp_relaxation`) and 0.01 from the MILP.
    """
    prob = PackProblem.build(jobs, hosts)
    if float(prob.task_mem.sum()) > float(prob.mem_cap.sum()) + EPS:
        return None
    return prob.yield_upper_bound()


# ---- MCB sort keys (Sec. 3.4) -------------------------------------------------------------------------


def _k_sum(c: np.ndarray, m: np.ndarray) -> np.ndarray:
    return c + m


def _k_diff(c: np.ndarray, m: np.ndarray) -> np.ndarray:
    return np.abs(c - m)


def _k_ratio(c: np.ndarray, m: np.ndarray) -> np.ndarray:
    hi = np.maximum(c, m)
    lo = np.minimum(c, m)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = np.where(lo > 0.0, hi / np.where(lo > 0.0, lo, 1.0), np.inf)
    return np.where(hi > 0.0, r, 1.0)


def _k_max(c: np.ndarray, m: np.ndarray) -> np.ndarray:
    return np.maximum(c, m)


#: name -> (key function of (cpu requirement, memory requirement), descending?)
MCB_KEYS: dict[str, tuple[Callable[[np.ndarray, np.ndarray], np.ndarray], bool]] = {
    "MCB1": (_k_sum, False),  # memory + CPU, ascending
    "MCB2": (_k_diff, False),  # max - min, ascending
    "MCB3": (_k_ratio, False),  # max / min, ascending
    "MCB4": (_k_max, False),  # max, ascending
    "MCB5": (_k_sum, True),  # memory + CPU, descending (Leinberger et al. [28])
    "MCB6": (_k_diff, True),  # max - min, descending
    "MCB7": (_k_ratio, True),  # max / min, descending
    "MCB8": (_k_max, True),  # max, descending
}


# ---- one MCB packing pass at a fixed yield ------------------------------------------------------------


def mcb_pack(prob: PackProblem, yield_: float, key: str = "MCB8", *, generic: bool = False) -> np.ndarray | None:
    """One Sec. 3.4 packing pass with every task needing ``alpha * yield_`` CPU: task->host, or ``None``.

    Tasks are split into a CPU-heavy list (CPU requirement > memory) and a memory-heavy list, each sorted
    by the ``key`` (stable: ties keep job/task order). Hosts are filled one at a time; each step searches
    first the list that goes against the host's current imbalance (more CPU than memory left: the
    CPU-heavy list), then the other, taking the first task that fits; when neither list has a task that
    fits, the next host is opened. On an empty host (equal CPU and memory left) the memory-heavy list
    is searched first.

    MCB8 runs on a specialised path (bisection on the sorted key plus a skip list of placed tasks); all
    keys also have a generic numpy path (``generic=True``), which gives the same placement.
    """
    if key not in MCB_KEYS:
        raise ValueError(f"key: unknown MCB variant {key!r}; known: {', '.join(MCB_KEYS)}")
    n = prob.n_tasks
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    c = prob.task_need * yield_
    m = prob.task_mem
    if float(c.sum()) > float(prob.cpu_cap.sum()) + EPS * n or not prob.memory_may_fit():
        return None
    if key == "MCB8" and not generic:
        return _pass_mcb8(c, m, prob.cpu_cap, prob.mem_cap)
    return _pass_generic(c, m, prob.cpu_cap, prob.mem_cap, key)


def _probe(prob: PackProblem, yield_: float, key: str, cpu_total: float) -> np.ndarray | None:
    """:func:`mcb_pack` inside a search that has already checked memory and has tasks: the same pass,
    without recomputing what does not depend on the yield (``cpu_total`` is ``prob.cpu_cap.sum()``)."""
    c = prob.task_need * yield_
    if float(c.sum()) > cpu_total + EPS * c.shape[0]:
        return None
    if key == "MCB8":
        return _pass_mcb8(c, prob.task_mem, prob.cpu_cap, prob.mem_cap)
    return _pass_generic(c, prob.task_mem, prob.cpu_cap, prob.mem_cap, key)


def _pass_generic(c: np.ndarray, m: np.ndarray, capc: np.ndarray, capm: np.ndarray, key: str) -> np.ndarray | None:
    fn, desc = MCB_KEYS[key]
    n = c.shape[0]
    k = fn(c, m)
    ar = np.arange(n)
    order = np.lexsort((ar, -k)) if desc else np.lexsort((ar, k))
    heavy = (c > m)[order]
    idx = [order[heavy], order[~heavy]]  # 0: CPU-heavy, 1: memory-heavy
    cs = [c[i] for i in idx]
    ms = [m[i] for i in idx]
    alive = [np.ones(i.shape[0], dtype=bool) for i in idx]
    left = [int(i.shape[0]) for i in idx]
    task_host = np.full(n, -1, dtype=np.int64)
    remaining = n
    for h in range(capc.shape[0]):
        ac = float(capc[h])
        am = float(capm[h])
        ptr = [0, 0]
        while remaining:
            found = False
            for li in (0, 1) if ac > am else (1, 0):
                q = ptr[li]
                if not left[li] or q >= alive[li].shape[0]:
                    continue
                mask = alive[li][q:] & (cs[li][q:] <= ac + EPS) & (ms[li][q:] <= am + EPS)
                p = int(mask.argmax())
                if not mask[p]:
                    ptr[li] = alive[li].shape[0]
                    continue
                p += q
                # Tasks before p do not fit now, and never will on this (only fuller) host.
                ptr[li] = p + 1
                alive[li][p] = False
                left[li] -= 1
                remaining -= 1
                t = int(idx[li][p])
                task_host[t] = h
                ac -= float(cs[li][p])
                am -= float(ms[li][p])
                found = True
                break
            if not found:
                break
        if not remaining:
            return task_host
    return None


class _SortedList:
    """One MCB8 list: tasks sorted by their dominant requirement ``prim`` (descending).

    ``sec`` is the other requirement (``sec <= prim``). ``negp`` holds ``-prim`` ascending for bisection,
    ``nxt`` is a skip list (union-find with path halving) over placed positions, ``band`` a per-host
    pointer: every live position in [first fitting by prim, band) was rejected on ``sec``.
    """

    __slots__ = ("alive", "band", "idx", "negp", "nxt", "placed", "prim", "sec", "sec_np", "size")

    def __init__(self, idx: np.ndarray, prim: np.ndarray, sec: np.ndarray) -> None:
        self.idx = idx.tolist()
        self.prim = prim.tolist()
        self.negp = (-prim).tolist()
        self.sec = sec.tolist()
        self.sec_np = sec
        self.size = len(self.idx)
        self.alive = np.ones(self.size, dtype=bool)
        self.nxt = list(range(self.size + 1))
        self.band = 0
        self.placed = 0


def _find(nxt: list[int], p: int) -> int:
    while nxt[p] != p:
        q = nxt[nxt[p]]
        nxt[p] = q
        p = q
    return p


def _query(lst: _SortedList, ap: float, asec: float) -> int:
    """First live position whose ``prim <= ap`` and ``sec <= asec`` (-1 if none)."""
    negp = lst.negp
    size = lst.size
    s = bisect_left(negp, -ap - EPS)
    if s >= size:
        return -1
    nxt = lst.nxt
    p = _find(nxt, s)
    if p >= size:
        return -1
    if ap <= asec:
        return p  # sec <= prim <= ap <= asec: the first live one fits
    lim = asec + EPS
    s2 = bisect_left(negp, -asec - EPS)  # from s2 on, prim <= asec so sec fits too
    if lst.band > p:
        p = _find(nxt, lst.band)
    sec = lst.sec
    steps = 0
    while p < s2:
        if sec[p] <= lim:
            lst.band = p
            return p
        p = _find(nxt, p + 1)
        steps += 1
        if steps == 12 and p < s2:
            mask = (lst.sec_np[p:s2] <= lim) & lst.alive[p:s2]
            r = int(mask.argmax())
            if mask[r]:
                lst.band = p + r
                return p + r
            p = _find(nxt, s2)
            break
    lst.band = p
    return p if p < size else -1


def _pass_mcb8(c: np.ndarray, m: np.ndarray, capc: np.ndarray, capm: np.ndarray) -> np.ndarray | None:
    """MCB8's pass: the compiled kernel of :mod:`coordinator.policies.mcb8_kernel` when numba is there."""
    if mcb8_pack is not None:
        task_host = np.full(c.shape[0], -1, dtype=np.int64)
        return task_host if mcb8_pack(c, m, capc, capm, task_host) else None
    return _pass_mcb8_py(c, m, capc, capm)


def _pass_mcb8_py(c: np.ndarray, m: np.ndarray, capc: np.ndarray, capm: np.ndarray) -> np.ndarray | None:
    """The pure-Python MCB8 pass (used without numba; tests check the kernel against it)."""
    n = c.shape[0]
    heavy = c > m
    prim = np.where(heavy, c, m)
    sec = np.where(heavy, m, c)
    order = np.lexsort((np.arange(n), -prim))
    hv = heavy[order]
    return _pass_mcb8_lists(n, prim, sec, order[hv], order[~hv], capc, capm)


def _pass_mcb8_lists(
    n: int, prim: np.ndarray, sec: np.ndarray, ci: np.ndarray, mi: np.ndarray, capc: np.ndarray, capm: np.ndarray
) -> np.ndarray | None:
    lc = _SortedList(ci, prim[ci], sec[ci])  # CPU-heavy: prim = cpu, sec = mem
    lm = _SortedList(mi, prim[mi], sec[mi])  # memory-heavy: prim = mem, sec = cpu
    task_host = np.full(n, -1, dtype=np.int64)
    th = task_host  # local alias
    remaining = n
    capc_l = capc.tolist()
    capm_l = capm.tolist()
    for h in range(len(capc_l)):
        ac = capc_l[h]
        am = capm_l[h]
        lc.band = 0
        lm.band = 0
        # A list with no fitting task stays so for the rest of this host (it only gets fuller).
        open_c = lc.size > lc.placed
        open_m = lm.size > lm.placed
        while open_c or open_m:
            p = -1
            lst = lc
            if ac > am:
                if open_c:
                    p = _query(lc, ac, am)
                    open_c = p >= 0
                if p < 0 and open_m:
                    p = _query(lm, am, ac)
                    open_m = p >= 0
                    lst = lm
            else:
                if open_m:
                    p = _query(lm, am, ac)
                    open_m = p >= 0
                    lst = lm
                if p < 0 and open_c:
                    p = _query(lc, ac, am)
                    open_c = p >= 0
                    lst = lc
            if p < 0:
                break
            lst.nxt[p] = p + 1
            lst.alive[p] = False
            lst.placed += 1
            th[lst.idx[p]] = h
            if lst is lc:
                ac -= lst.prim[p]
                am -= lst.sec[p]
                if lst.placed == lst.size:
                    open_c = False
            else:
                am -= lst.prim[p]
                ac -= lst.sec[p]
                if lst.placed == lst.size:
                    open_m = False
            remaining -= 1
            if not remaining:
                return task_host
    return None


# ---- the yield search (Sec. 3.4) and finishing (Sec. 3.5) ----------------------------------------------


def placement_min_yield(prob: PackProblem, task_host: np.ndarray) -> float:
    """The best minimum yield a placement supports: ``min_j min(1, cpu_cap_j / load_j)``, or -1 if memory
    is exceeded on some host. Reporting it (rather than the search's Y) is vcemu's reading of 002 Sec. 3.4-3.5."""
    H = prob.n_hosts
    memload = np.bincount(task_host, weights=prob.task_mem, minlength=H)
    if bool((memload > prob.mem_cap + 1e-7).any()):
        return -1.0
    load = np.bincount(task_host, weights=prob.task_need, minlength=H)
    with np.errstate(divide="ignore"):
        r = np.where(load > 0.0, prob.cpu_cap / np.where(load > 0.0, load, 1.0), np.inf)
    return float(min(1.0, float(r.min()) if r.size else 1.0))


def finish_allocation(
    prob: PackProblem, task_host: np.ndarray, algorithm: str, search_yield: float, probes: int, average: bool,
    y: float | None = None,
) -> Allocation | None:
    """The allocation of a placement (one host per task), found by ``algorithm`` with ``probes`` packing passes at
    ``search_yield`` (negative: none, the placement's own minimum yield is given), raised by the average-yield step
    (Sec. 3.5) when ``average``; None if it does not fit. ``y`` is its :func:`placement_min_yield` if the caller
    has it. Every packer's last step: the MCB search here, the greedy packers and the benchmark's baseline."""
    if y is None:
        y = placement_min_yield(prob, task_host)
    if y < 0.0:
        return None
    if average:
        yields = raise_average_yield(task_host, prob.task_job, prob.need, prob.cpu_cap, y)
    else:
        yields = np.full(len(prob.jobs), y)
    bounds = np.concatenate(([0], np.cumsum(prob.ntasks))).tolist()
    th = task_host.tolist()
    per_job = tuple(tuple(th[bounds[i] : bounds[i + 1]]) for i in range(len(prob.jobs)))
    ylist = yields.tolist()
    return Allocation(
        algorithm=algorithm,
        min_yield=float(min(ylist)) if ylist else 1.0,
        search_yield=float(search_yield) if search_yield >= 0.0 else y,
        hosts=per_job,
        yields=tuple(ylist),
        needs=tuple(prob.need.tolist()),
        probes=probes,
    )


def mcb_search(
    prob: PackProblem,
    key: str = "MCB8",
    accuracy: float = 0.01,
    *,
    search: str = "fast",
    average: bool = True,
) -> Allocation | None:
    """Binary search on the yield around :func:`mcb_pack` (Sec. 3.4), then the average-yield step."""
    if not accuracy > 0.0:
        raise ValueError(f"accuracy must be > 0, got {accuracy!r}")
    if search not in ("fast", "paper"):
        raise ValueError(f"search must be 'fast' or 'paper', got {search!r}")
    if key not in MCB_KEYS:
        raise ValueError(f"key: unknown MCB variant {key!r}; known: {', '.join(MCB_KEYS)}")
    if prob.n_tasks == 0:
        return finish_allocation(prob, np.zeros(0, dtype=np.int64), key, 1.0, 0, average)
    if not prob.memory_may_fit():
        return None
    fast = search == "fast"
    ub = prob.yield_upper_bound()
    cpu_total = float(prob.cpu_cap.sum())
    if fast and key == "MCB8" and mcb8_search is not None and min_yield is not None:
        got = _mcb8_compiled(prob, ub, cpu_total, accuracy)
        if got is None:
            return None
        best_th, sy, probes, y = got
        return finish_allocation(prob, best_th, key, sy, probes, average, y)
    probes = 0
    if fast:
        probes += 1
        th = _probe(prob, ub, key, cpu_total)
        if th is not None:
            return finish_allocation(prob, th, key, ub, probes, average)
    lo, hi = 0.0, ub
    best: np.ndarray | None = None
    best_y = 0.0
    best_sy = 0.0
    y = ub / 2.0
    while True:
        probes += 1
        th = _probe(prob, y, key, cpu_total)
        if th is not None:
            got = placement_min_yield(prob, th) if fast else y
            if best is None or got > best_y:
                best, best_y, best_sy = th, got, y
            lo = max(lo, got)
        else:
            hi = y
        if hi - lo <= accuracy:
            break
        y = (lo + hi) / 2.0
    if best is None:
        return None
    return finish_allocation(prob, best, key, best_sy, probes, average)


def _mcb8_compiled(
    prob: PackProblem, ub: float, cpu_total: float, accuracy: float
) -> tuple[np.ndarray, float, int, float] | None:
    """The "fast" MCB8 search of :func:`mcb_search`, compiled (probe for probe the loop there), on a problem
    with tasks whose memory may fit: (placement, yield of the probe that found it, probes, the placement's
    :func:`placement_min_yield`), or None if no probe packed."""
    assert mcb8_search is not None and min_yield is not None
    best_th = np.empty(prob.n_tasks, dtype=np.int64)
    found, sy, probes = mcb8_search(
        prob.task_need, prob.task_mem, prob.cpu_cap, prob.mem_cap, ub, cpu_total, float(accuracy), best_th
    )
    if not found:
        return None
    # placement_min_yield, compiled (the same sums in the same order, tested equal), on the kernel's
    # own placement: every index is a host
    y = min_yield(best_th, prob.task_need, prob.task_mem, prob.cpu_cap, prob.mem_cap)
    return best_th, sy, probes, y


def mcb8_yields(prob: PackProblem, accuracy: float = 0.01) -> tuple[np.ndarray, np.ndarray] | None:
    """``mcb_search(prob, "MCB8", accuracy)`` (fast search, average-yield step) as arrays: the host of every
    task (tasks in job order) and every job's yield, or None. The same computation without building the
    Allocation's per-job tuples, which DYNMCB8's repacking would only flatten again (issue 4 benchmark)."""
    if mcb8_search is None or min_yield is None or prob.n_tasks == 0 or not accuracy > 0.0:
        alloc = mcb_search(prob, "MCB8", accuracy)
        if alloc is None:
            return None
        th = np.fromiter((h for hs in alloc.hosts for h in hs), dtype=np.int64, count=prob.n_tasks)
        return th, np.array(alloc.yields, dtype=float)
    return mcb8_yields_compiled(prob.need, prob.task_job, prob.task_need, prob.task_mem, prob.cpu_cap, prob.mem_cap,
                                accuracy)


def mcb8_yields_compiled(
    need: np.ndarray, task_job: np.ndarray, task_need: np.ndarray, task_mem: np.ndarray, cpu_cap: np.ndarray,
    mem_cap: np.ndarray, accuracy: float,
) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`mcb8_yields` on a :class:`PackProblem`'s arrays (at least one task, ``accuracy`` > 0, the
    compiled kernels present), for a caller that need not build the problem's PackJob objects."""
    assert mcb8_search is not None and min_yield is not None
    n = task_need.shape[0]
    # PackProblem.memory_may_fit and yield_upper_bound, on the arrays
    if float(task_mem.sum()) > float(mem_cap.sum()) + EPS or not float(task_mem.max()) <= float(mem_cap.max()) + EPS:
        return None
    cpu_total = float(cpu_cap.sum())
    total = float(task_need.sum())
    ub = 1.0 if total <= 0.0 else min(1.0, cpu_total / total)
    best_th = np.empty(n, dtype=np.int64)
    found, _, _ = mcb8_search(task_need, task_mem, cpu_cap, mem_cap, ub, cpu_total, float(accuracy), best_th)
    if not found:
        return None
    y = min_yield(best_th, task_need, task_mem, cpu_cap, mem_cap)
    if y < 0.0:  # as finish_allocation
        return None
    njobs = need.shape[0]
    if y >= 1.0:  # raise_average_yield's own shortcuts, without its argument conversions
        return best_th, np.ones(njobs)
    if average_yield_parallel is not None and y > 0.0 and n != njobs:
        yields = np.full(njobs, y)
        average_yield_parallel(best_th, task_job, need, cpu_cap, yields)
        return best_th, yields
    return best_th, raise_average_yield(best_th, task_job, need, cpu_cap, y)


def mcb_allocate(
    jobs: Sequence[PackJob],
    hosts: Hosts,
    key: str = "MCB8",
    accuracy: float = 0.01,
    *,
    search: str = "fast",
    average: bool = True,
) -> Allocation | None:
    """MCB<key> with the Sec. 3.4 yield search and the Sec. 3.5 average-yield step (stable API).

    Returns ``None`` when no placement was found. ``jobs`` may mix sequential (``tasks == 1``) and
    parallel jobs; the hosts of job ``i`` are ``allocation.hosts[i]`` (one per task).
    """
    return mcb_search(PackProblem.build(jobs, hosts), key, accuracy, search=search, average=average)


def allocation_from_placement(
    jobs: Sequence[PackJob] | PackProblem,
    hosts: Hosts | None,
    task_host: Sequence[int] | np.ndarray,
    algorithm: str,
    *,
    average: bool = True,
    search_yield: float | None = None,
) -> Allocation | None:
    """An allocation for a given placement (tasks flattened in job order): best min yield, then Sec. 3.5."""
    if isinstance(jobs, PackProblem):
        prob = jobs
    else:
        if hosts is None:
            raise ValueError("hosts: required when jobs is not a PackProblem")
        prob = PackProblem.build(jobs, hosts)
    th = np.asarray(task_host, dtype=np.int64)
    if th.shape != (prob.n_tasks,):
        raise ValueError(f"task_host: expected {prob.n_tasks} host indices, got shape {th.shape}")
    if prob.n_tasks and (th.min() < 0 or th.max() >= prob.n_hosts):
        raise ValueError("task_host: host index out of range")
    y = placement_min_yield(prob, th)
    if y < 0.0:
        return None
    return finish_allocation(prob, th, algorithm, y if search_yield is None else search_yield, 0, average)


def verify_allocation(jobs: Sequence[PackJob], hosts: Hosts, alloc: Allocation, tol: float = 1e-7) -> None:
    """Raise ``ValueError`` unless ``alloc`` is a feasible allocation whose claims hold (Sec. 2.3, 5).

    Checks: one host per task, host indices valid, memory and CPU fit on every host, each job's yield in
    ``[min_yield, 1]``, and ``min_yield`` is the minimum of the yields.
    """
    prob = PackProblem.build(jobs, hosts)
    if len(alloc.hosts) != len(prob.jobs) or len(alloc.yields) != len(prob.jobs):
        raise ValueError("allocation does not cover every job exactly once")
    memload = np.zeros(prob.n_hosts)
    cpuload = np.zeros(prob.n_hosts)
    for i, (job, hs) in enumerate(zip(prob.jobs, alloc.hosts, strict=True)):
        if len(hs) != job.tasks:
            raise ValueError(f"job {i}: {len(hs)} hosts for {job.tasks} tasks")
        y = alloc.yields[i]
        if not (alloc.min_yield - tol <= y <= 1.0 + tol):
            raise ValueError(f"job {i}: yield {y} outside [min_yield={alloc.min_yield}, 1]")
        for h in hs:
            if not 0 <= h < prob.n_hosts:
                raise ValueError(f"job {i}: host index {h} out of range")
            memload[h] += job.mem
            cpuload[h] += job.cpu_need * y
    if alloc.yields and not math.isclose(alloc.min_yield, min(alloc.yields), abs_tol=tol):
        raise ValueError(f"min_yield {alloc.min_yield} is not the minimum job yield {min(alloc.yields)}")
    over = np.flatnonzero(memload > prob.mem_cap + tol)
    if over.size:
        raise ValueError(f"host {int(over[0])}: memory {memload[over[0]]} > {prob.mem_cap[over[0]]}")
    over = np.flatnonzero(cpuload > prob.cpu_cap + tol)
    if over.size:
        raise ValueError(f"host {int(over[0])}: CPU {cpuload[over[0]]} > {prob.cpu_cap[over[0]]}")

