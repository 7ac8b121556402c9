"""Exact and relaxation-based solutions of VCSCHED with HiGHS (``scipy.optimize.milp``).

* :func:`solve_milp` — the mixed-integer linear program of seed 002 Sec. 2.5 (Eqs. 3-11), extended to
  parallel jobs as in Sec. 5 (Eqs. 12-21: one binary ``e_kj`` per task and host, and equal CPU
  allocations for all tasks of a job), under a time limit;
* :func:`solve_lp_relaxation` — the same program with every variable rational (Sec. 3.1); on identical
  hosts (002's setting, and ``vcemu vcsched``'s) its value is the bound ``min(H / sum alpha, 1)`` of
  :func:`coordinator.policies.packing.lp_bound` whenever total memory fits. On heterogeneous hosts that bound
  (with ``H`` the total CPU capacity) is only an upper bound, possibly far above: one job of need 1 and memory 1
  on hosts (cpu 1, mem 0.01) and (cpu 0.01, mem 1.5) has ``lp_bound`` 1.0, the relaxation 0.02, the MILP 0.01.
  Its ``e`` matrix seeds the rounding heuristics;
* :func:`rrnd` / :func:`rrnz` — randomized rounding of the relaxed ``e_kj`` (Sec. 3.2); RRNZ replaces
  zero probabilities by ``eps = 0.01``;
* :func:`adapt_milp` — the Sec. 6.1 adaptation program: given the current placement, the total memory
  (or number of tasks) migrated may not exceed a budget ``B`` (Eq. 31); new jobs move for free;
* :func:`average_yield_lp` — the exact average-yield LP with the placement fixed (Sec. 3.5 / Sec. 5),
  used to check the greedy of :mod:`coordinator.policies.avgyield`.

Every heuristic allocation ends with the same average-yield step (Sec. 3.5 / Sec. 5).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, linprog, milp

from coordinator.policies.packing import (
    EPS,
    Allocation,
    PackProblem,
    allocation_from_placement,
)

__all__ = [
    "ExactResult",
    "LPRelaxation",
    "adapt_milp",
    "average_yield_lp",
    "rrnd",
    "rrnz",
    "solve_lp_relaxation",
    "solve_milp",
]


@dataclass(frozen=True)
class ExactResult:
    """Outcome of a MILP solve. ``objective`` is the solver's Y; ``allocation`` is built from its ``e``."""

    status: str  # "optimal" | "time_limit" | "infeasible" | "error"
    objective: float | None
    allocation: Allocation | None
    seconds: float
    dual_bound: float | None = None
    migrated: float | None = None


@dataclass(frozen=True)
class LPRelaxation:
    """Rational relaxation of the Sec. 2.5 program: optimum ``objective`` and the ``e`` matrix (tasks x hosts)."""

    status: str
    objective: float | None
    e: np.ndarray | None
    seconds: float


def _status(res: object) -> str:
    st = getattr(res, "status", 4)
    if st == 0:
        return "optimal"
    if st == 1:
        return "time_limit"
    if st == 2:
        return "infeasible"
    return "error"


def _model(
    prob: PackProblem,
    *,
    symmetry: bool,
    previous: np.ndarray | None = None,
    budget: float | None = None,
    weights: np.ndarray | None = None,
) -> tuple[np.ndarray, list[LinearConstraint], Bounds]:
    """Objective, constraints and bounds over x = (e_kj, a_kj, Y), row-major by task (Eqs. 3-11, 12-21, 31)."""
    n, H = prob.n_tasks, prob.n_hosts
    nH = n * H
    N = 2 * nH + 1
    kk = np.repeat(np.arange(n), H)
    jj = np.tile(np.arange(H), n)
    e_idx = kk * H + jj
    a_idx = nH + e_idx
    yv = 2 * nH
    alpha = prob.task_need
    mem = prob.task_mem
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    lbs: list[np.ndarray] = []
    ubs: list[np.ndarray] = []
    r0 = 0

    def add(r: np.ndarray, c: np.ndarray, v: np.ndarray, nrows: int, lb: np.ndarray, ub: np.ndarray) -> None:
        nonlocal r0
        rows.append(r + r0)
        cols.append(c)
        vals.append(v)
        lbs.append(lb)
        ubs.append(ub)
        r0 += nrows

    inf = np.inf
    # (6) a_kj - e_kj <= 0
    r = np.arange(nH)
    add(
        np.concatenate([r, r]),
        np.concatenate([a_idx, e_idx]),
        np.concatenate([np.ones(nH), -np.ones(nH)]),
        nH,
        np.full(nH, -inf),
        np.zeros(nH),
    )
    # (7) sum_j e_kj = 1
    add(kk, e_idx, np.ones(nH), n, np.ones(n), np.ones(n))
    # (8) sum_k a_kj <= cpu_cap_j
    add(jj, a_idx, np.ones(nH), H, np.full(H, -inf), prob.cpu_cap)
    # (9) sum_k m_k e_kj <= mem_cap_j
    add(jj, e_idx, mem[kk], H, np.full(H, -inf), prob.mem_cap)
    # (10) sum_j a_kj <= alpha_k
    add(kk, a_idx, np.ones(nH), n, np.full(n, -inf), alpha)
    # (11) sum_j a_kj - alpha_k Y >= 0
    add(
        np.concatenate([kk, np.arange(n)]),
        np.concatenate([a_idx, np.full(n, yv)]),
        np.concatenate([np.ones(nH), -alpha]),
        n,
        np.zeros(n),
        np.full(n, inf),
    )
    # (20) equal CPU for consecutive tasks of a parallel job
    same = np.flatnonzero(prob.task_job[1:] == prob.task_job[:-1])
    if same.size:
        s = same.size
        kr = np.repeat(np.arange(s), H)
        k1 = np.repeat(same, H)
        jt = np.tile(np.arange(H), s)
        add(
            np.concatenate([kr, kr]),
            np.concatenate([nH + k1 * H + jt, nH + (k1 + 1) * H + jt]),
            np.concatenate([np.ones(s * H), -np.ones(s * H)]),
            s,
            np.zeros(s),
            np.zeros(s),
        )
        if symmetry and previous is None:
            # Tasks of a job are interchangeable: order them by host index (valid together with the
            # host relabelling below, see the module tests).
            hw = np.tile(np.arange(H, dtype=float), s)
            add(
                np.concatenate([kr, kr]),
                np.concatenate([k1 * H + jt, (k1 + 1) * H + jt]),
                np.concatenate([hw, -hw]),
                s,
                np.full(s, -inf),
                np.zeros(s),
            )
    # (31) migration budget: tasks already placed pay weight_k when they leave their host
    if previous is not None and budget is not None:
        w = weights if weights is not None else mem
        old = previous >= 0
        sel = old[kk] & (jj != np.where(old, previous, -1)[kk])
        cnt = int(sel.sum())
        add(np.zeros(cnt, dtype=np.int64), e_idx[sel], w[kk[sel]], 1, np.array([-inf]), np.array([float(budget)]))
    A = sparse.coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(r0, N)).tocsr()
    cons = [LinearConstraint(A, np.concatenate(lbs), np.concatenate(ubs))]
    lb = np.zeros(N)
    ub = np.concatenate([np.ones(nH), np.repeat(prob.cpu_cap[None, :], n, axis=0).ravel(), [1.0]])
    if symmetry and previous is None and prob.identical_hosts:
        # Identical hosts: some optimum has task k on one of hosts 0..k (relabel hosts by first task).
        for k in range(min(n, H)):
            ub[k * H + k + 1 : (k + 1) * H] = 0.0
    c = np.zeros(N)
    c[yv] = -1.0
    return c, cons, Bounds(lb, ub)


def _placement(prob: PackProblem, x: np.ndarray) -> np.ndarray:
    n, H = prob.n_tasks, prob.n_hosts
    return np.asarray(x[: n * H].reshape(n, H).argmax(axis=1), dtype=np.int64)


def solve_milp(
    prob: PackProblem, time_limit: float = 60.0, *, symmetry: bool = True, mip_rel_gap: float = 1e-6
) -> ExactResult:
    """Solve the Sec. 2.5 (Sec. 5 for parallel jobs) MILP with HiGHS, maximising the minimum yield."""
    t0 = time.perf_counter()
    if prob.n_tasks == 0:
        alloc = allocation_from_placement(prob, None, np.zeros(0, dtype=np.int64), "MILP")
        return ExactResult("optimal", 1.0, alloc, 0.0)
    if not prob.memory_may_fit():
        return ExactResult("infeasible", None, None, time.perf_counter() - t0)
    c, cons, bounds = _model(prob, symmetry=symmetry)
    res = _run_milp(prob, c, cons, bounds, time_limit, mip_rel_gap)
    return _result(prob, res, t0, "MILP")


def _run_milp(prob: PackProblem, c: np.ndarray, cons: object, bounds: object, time_limit: float,
              mip_rel_gap: float) -> object:
    """HiGHS on a placement model: the e_ij (first n_tasks x n_hosts variables) are binary."""
    integrality = np.zeros(c.shape[0])
    integrality[: prob.n_tasks * prob.n_hosts] = 1
    return milp(
        c,
        constraints=cons,
        integrality=integrality,
        bounds=bounds,
        options={"time_limit": float(time_limit), "disp": False, "mip_rel_gap": mip_rel_gap},
    )


def _result(prob: PackProblem, res: object, t0: float, name: str, migrated: float | None = None) -> ExactResult:
    status = _status(res)
    x = getattr(res, "x", None)
    dual = getattr(res, "mip_dual_bound", None)
    dual_bound = -float(dual) if dual is not None and np.isfinite(dual) else None
    if x is None:
        return ExactResult(status, None, None, time.perf_counter() - t0, dual_bound)
    th = _placement(prob, x)
    alloc = allocation_from_placement(prob, None, th, name, search_yield=float(x[-1]))
    return ExactResult(status, float(x[-1]), alloc, time.perf_counter() - t0, dual_bound, migrated)


def solve_lp_relaxation(prob: PackProblem, time_limit: float = 600.0) -> LPRelaxation:
    """The Sec. 2.5 program with rational ``e_kj`` (Sec. 3.1), solved by HiGHS."""
    t0 = time.perf_counter()
    if float(prob.task_mem.sum()) > float(prob.mem_cap.sum()) + EPS:
        return LPRelaxation("infeasible", None, None, time.perf_counter() - t0)
    c, cons, bounds = _model(prob, symmetry=False)
    res = milp(c, constraints=cons, bounds=bounds, options={"time_limit": float(time_limit), "disp": False})
    status = _status(res)
    if res.x is None:
        return LPRelaxation(status, None, None, time.perf_counter() - t0)
    n, H = prob.n_tasks, prob.n_hosts
    e = np.clip(res.x[: n * H].reshape(n, H), 0.0, 1.0)
    return LPRelaxation(status, float(res.x[-1]), e, time.perf_counter() - t0)


def _round(prob: PackProblem, rng: np.random.Generator, e: np.ndarray, eps: float, name: str) -> Allocation | None:
    n, H = prob.n_tasks, prob.n_hosts
    memfree = prob.mem_cap.astype(float).copy()
    th = np.empty(n, dtype=np.int64)
    for k in range(n):
        p = e[k].copy()
        if eps > 0.0:
            p[p <= 1e-9] = eps
        # A host the task does not fit on gets probability 0 and the rest are renormalised (Sec. 3.2):
        # drawing directly from the fitting hosts has the same distribution as retrying.
        p[memfree < prob.task_mem[k] - EPS] = 0.0
        s = float(p.sum())
        if s <= 0.0:
            return None
        j = int(rng.choice(H, p=p / s))
        th[k] = j
        memfree[j] -= prob.task_mem[k]
    return allocation_from_placement(prob, None, th, name)


def rrnd(prob: PackProblem, rng: np.random.Generator, relax: LPRelaxation | None = None) -> Allocation | None:
    """Randomized rounding (Sec. 3.2): each task goes to host j with probability e_kj among hosts it fits."""
    relax = relax or solve_lp_relaxation(prob)
    if relax.e is None:
        return None
    return _round(prob, rng, relax.e, 0.0, "RRND")


def rrnz(
    prob: PackProblem, rng: np.random.Generator, relax: LPRelaxation | None = None, eps: float = 0.01
) -> Allocation | None:
    """RRND with zero probabilities replaced by ``eps`` (Sec. 3.2, eps = 0.01)."""
    relax = relax or solve_lp_relaxation(prob)
    if relax.e is None:
        return None
    return _round(prob, rng, relax.e, eps, "RRNZ")


def adapt_milp(
    prob: PackProblem,
    previous: Sequence[Sequence[int] | None],
    budget: float,
    time_limit: float = 60.0,
    *,
    count: str = "memory",
    mip_rel_gap: float = 1e-6,
) -> ExactResult:
    """The Sec. 6.1 adaptation MILP: maximise the minimum yield moving at most ``budget`` of memory.

    ``previous[i]`` is the current host of each task of job ``i``, or ``None`` for a newly arrived job
    (which may go anywhere for free, e-bar = 1 on every host). ``count="memory"`` charges a moved task its
    memory m_i (Eq. 31); ``count="migrations"`` charges 1, so ``budget`` bounds the number of migrations.
    ``ExactResult.migrated`` is the amount actually spent.
    """
    if count not in ("memory", "migrations"):
        raise ValueError(f"count must be 'memory' or 'migrations', got {count!r}")
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if len(previous) != len(prob.jobs):
        raise ValueError(f"previous: expected one entry per job ({len(prob.jobs)}), got {len(previous)}")
    prev = np.full(prob.n_tasks, -1, dtype=np.int64)
    k = 0
    for i, (job, hs) in enumerate(zip(prob.jobs, previous, strict=True)):
        if hs is not None:
            if len(hs) != job.tasks:
                raise ValueError(f"previous[{i}]: {len(hs)} hosts for {job.tasks} tasks")
            for h in hs:
                if not 0 <= int(h) < prob.n_hosts:
                    raise ValueError(f"previous[{i}]: host index {h} out of range")
            prev[k : k + job.tasks] = np.asarray(hs, dtype=np.int64)
        k += job.tasks
    t0 = time.perf_counter()
    if not prob.memory_may_fit():
        return ExactResult("infeasible", None, None, time.perf_counter() - t0)
    weights = prob.task_mem if count == "memory" else np.ones(prob.n_tasks)
    c, cons, bounds = _model(prob, symmetry=False, previous=prev, budget=budget, weights=weights)
    res = _run_milp(prob, c, cons, bounds, time_limit, mip_rel_gap)
    migrated = None
    if res.x is not None:
        th = _placement(prob, res.x)
        moved = (prev >= 0) & (th != prev)
        migrated = float(weights[moved].sum())
    return _result(prob, res, t0, "ADAPT", migrated)


def average_yield_lp(prob: PackProblem, task_host: np.ndarray, min_yield: float) -> np.ndarray | None:
    """Exact per-job average-yield optimum with tasks fixed (Sec. 3.5 LP; per-job metric of Sec. 5)."""
    nj = len(prob.jobs)
    if nj == 0:
        return np.zeros(0)
    th = np.asarray(task_host, dtype=np.int64)
    A = sparse.coo_matrix((prob.task_need, (th, prob.task_job)), shape=(prob.n_hosts, nj)).tocsr()
    lo = min(max(min_yield, 0.0), 1.0)
    res = linprog(-np.ones(nj), A_ub=A, b_ub=prob.cpu_cap, bounds=[(lo, 1.0)] * nj, method="highs")
    return None if res.x is None else np.asarray(res.x)
