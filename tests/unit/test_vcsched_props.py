"""Property tests over random small instances, sequential and parallel (seed 002 Sec. 2.3, 3, 5).

Every allocation any algorithm returns fits every host in memory and CPU, puts each task on exactly one
host and gives every job at least the minimum yield it claims; the average-yield step never lowers a
yield; and LP bound >= MILP optimum >= every heuristic on the same instance.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.policies.avgyield import raise_average_yield
from coordinator.policies.greedy_packing import greedy_allocate
from coordinator.policies.packing import (
    MCB_KEYS,
    PackJob,
    PackProblem,
    lp_bound,
    mcb_allocate,
    verify_allocation,
)
from coordinator.vcsched.exact import average_yield_lp, rrnd, rrnz, solve_lp_relaxation, solve_milp

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def instances(draw: st.DrawFn, parallel: bool, max_tasks: int = 9, max_hosts: int = 3) -> tuple[list[PackJob], int]:
    hosts = draw(st.integers(1, max_hosts))
    jobs: list[PackJob] = []
    total = 0
    for _ in range(draw(st.integers(1, 7))):
        t = draw(st.integers(1, 3)) if parallel else 1
        if total + t > max_tasks:
            break
        total += t
        cpu = draw(st.floats(0.01, 1.0))
        mem = draw(st.floats(0.0, 0.75))
        jobs.append(PackJob(t, cpu, mem))
    return jobs, hosts


def _check_all_heuristics(jobs: list[PackJob], hosts: int) -> list[float]:
    got = []
    for key in MCB_KEYS:
        for search in ("fast", "paper"):
            a = mcb_allocate(jobs, hosts, key, search=search)
            if a is None:
                continue
            verify_allocation(jobs, hosts, a)
            assert a.search_yield <= a.min_yield + 1e-9
            flat = mcb_allocate(jobs, hosts, key, search=search, average=False)
            assert flat is not None and flat.hosts == a.hosts
            # The average-yield step never lowers any job's yield.
            assert all(y >= f - 1e-12 for y, f in zip(a.yields, flat.yields, strict=True))
            got.append(a.min_yield)
    for v in ("GR", "SG", "GB", "SGB"):
        a = greedy_allocate(jobs, hosts, v)
        if a is not None:
            verify_allocation(jobs, hosts, a)
            got.append(a.min_yield)
    return got


@SETTINGS
@given(instances(parallel=False))
def test_sequential_allocations_feasible(inst: tuple[list[PackJob], int]) -> None:
    _check_all_heuristics(*inst)


@SETTINGS
@given(instances(parallel=True))
def test_parallel_allocations_feasible(inst: tuple[list[PackJob], int]) -> None:
    _check_all_heuristics(*inst)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances(parallel=False, max_tasks=7), st.booleans())
def test_bound_milp_heuristics_order(inst: tuple[list[PackJob], int], parallel: bool) -> None:
    jobs, hosts = inst
    if parallel:  # turn a few jobs into 2-task jobs
        jobs = [PackJob(2 if i % 3 == 0 else 1, j.cpu_need, j.mem) for i, j in enumerate(jobs)]
    prob = PackProblem.build(jobs, hosts)
    bound = lp_bound(jobs, hosts)
    heur = _check_all_heuristics(jobs, hosts)
    relax = solve_lp_relaxation(prob)
    for fn in (rrnd, rrnz):
        a = fn(prob, np.random.default_rng(0), relax)
        if a is not None:
            verify_allocation(jobs, hosts, a)
            heur.append(a.min_yield)
    r = solve_milp(prob, time_limit=30)
    if r.status == "infeasible":
        assert not heur
        return
    assert r.status == "optimal" and r.allocation is not None
    verify_allocation(jobs, hosts, r.allocation)
    opt = r.allocation.min_yield
    assert bound is not None and bound >= opt - 1e-6
    assert relax.objective is not None and abs(relax.objective - bound) <= 1e-6
    for y in heur:
        assert opt >= y - 1e-6


@SETTINGS
@given(instances(parallel=True, max_tasks=12, max_hosts=4), st.floats(0.0, 1.0), st.randoms(use_true_random=False))
def test_average_step_never_lowers_and_fits(inst: tuple[list[PackJob], int], y0: float, rnd: object) -> None:
    jobs, hosts = inst
    prob = PackProblem.build(jobs, hosts)
    th = np.array([rnd.randrange(hosts) for _ in range(prob.n_tasks)])  # type: ignore[attr-defined]
    load = np.bincount(th, weights=prob.task_need, minlength=hosts)
    ymax = float(min(1.0, (1.0 / load[load > 0]).min())) if (load > 0).any() else 1.0
    base = min(y0, ymax)  # a minimum yield this placement supports
    y = raise_average_yield(th, prob.task_job, prob.need, prob.cpu_cap, base)
    assert (y >= base - 1e-12).all() and (y <= 1.0 + 1e-12).all()
    cpu = np.bincount(th, weights=prob.task_need * y[prob.task_job], minlength=hosts)
    assert (cpu <= prob.cpu_cap + 1e-9).all()
    exact = average_yield_lp(prob, th, base)
    assert exact is not None and y.sum() <= exact.sum() + 1e-7
    if (prob.ntasks == 1).all():  # Sec. 3.5: the greedy is optimal for sequential jobs
        assert abs(y.sum() - exact.sum()) <= 1e-7
