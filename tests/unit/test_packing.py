"""Hand-worked instances for MCB (seed 002 Sec. 3.4), the greedy packers (Sec. 3.3) and the
average-yield step (Sec. 3.5 / Sec. 5)."""

from __future__ import annotations

import numpy as np
import pytest

from coordinator.policies.avgyield import raise_average_yield
from coordinator.policies.greedy_packing import greedy_allocate
from coordinator.policies.packing import (
    MCB_KEYS,
    PackJob,
    PackProblem,
    allocation_from_placement,
    lp_bound,
    mcb_allocate,
    mcb_pack,
    verify_allocation,
)

# Sec. 2.3's example: 3 tasks of need 0.6 on 2 hosts; without migration the best minimum yield is 0.5/0.6.
THREE = [PackJob(1, 0.6, 0.5)] * 3
# A CPU-heavy / memory-heavy mix where MCB8's list alternation packs everything at yield 1.
MIX = [PackJob(1, 0.8, 0.2), PackJob(1, 0.2, 0.7), PackJob(1, 0.5, 0.3), PackJob(1, 0.3, 0.6)]


@pytest.mark.parametrize("search", ["fast", "paper"])
def test_mcb8_three_tasks_two_hosts(search: str) -> None:
    a = mcb_allocate(THREE, 2, "MCB8", search=search)
    assert a is not None
    assert a.hosts == ((0,), (0,), (1,))
    assert a.min_yield == pytest.approx(0.5 / 0.6)
    # The lone task on host 1 is raised to yield 1 by the average-yield step.
    assert a.yields == pytest.approx((0.5 / 0.6, 0.5 / 0.6, 1.0))
    assert a.avg_yield == pytest.approx((2 * 0.5 / 0.6 + 1.0) / 3)
    assert a.cpu(0) == pytest.approx(0.5)
    verify_allocation(THREE, 2, a)


def test_mcb8_list_alternation_packs_at_yield_one() -> None:
    # Y = 1 (the LP bound, min(1, 2/1.8)) is tried first. Host 0 is empty, so the memory-heavy list is
    # searched first: B (0.2, 0.7); then more CPU than memory is left, so the CPU-heavy list: A (0.8, 0.2).
    # Nothing else fits; host 1 takes D (memory-heavy first) and then C (CPU-heavy, against the imbalance).
    a = mcb_allocate(MIX, 2, "MCB8")
    assert a is not None
    assert a.hosts == ((0,), (0,), (1,), (1,))
    assert a.min_yield == pytest.approx(1.0)
    assert a.probes == 1
    prob = PackProblem.build(MIX, 2)
    assert mcb_pack(prob, 1.0, "MCB8").tolist() == [0, 0, 1, 1]


def test_gr_and_sg_by_hand() -> None:
    gr = greedy_allocate(THREE, 2, "GR")
    assert gr is not None and gr.hosts == ((0,), (1,), (0,))
    assert gr.yields == pytest.approx((0.5 / 0.6, 1.0, 0.5 / 0.6))
    # GR on MIX: A->h0, B->h1, C->h1 (less loaded, memory exactly full), D->h0 (h1 has no memory left).
    gr = greedy_allocate(MIX, 2, "GR")
    assert gr is not None and gr.hosts == ((0,), (1,), (1,), (0,))
    assert gr.min_yield == pytest.approx(1 / 1.1)
    assert gr.yields == pytest.approx((1 / 1.1, 1.0, 1.0, 1 / 1.1))
    # SG sorts by memory: B->h0, D->h1, C->h0 (load .2 < .3), A->h1 (load .3 < .7).
    sg = greedy_allocate(MIX, 2, "SG")
    assert sg is not None and sg.hosts == ((1,), (0,), (0,), (1,))
    assert sg.min_yield == pytest.approx(1 / 1.1)
    for v in ("GB", "SGB"):  # when the plain greedy succeeds, backtracking returns the same placement
        b = greedy_allocate(MIX, 2, v)
        plain = gr if v == "GB" else sg
        assert b is not None and b.hosts == plain.hosts


def test_backtracking_finds_what_greedy_misses() -> None:
    # (cpu, mem): t0 (.1,.4) -> h0; t1 (.5,.4) -> h1; t2 (.1,.2) -> h0 (less loaded); t3 (.1,.7) fits
    # nowhere, so GR fails. GB: t2 -> h1 (attempt 4), t3 still nowhere; t2 exhausted, t1 -> h0 (5),
    # t2 -> h1 (6), t3 -> h1 (7).
    jobs = [PackJob(1, 0.1, 0.4), PackJob(1, 0.5, 0.4), PackJob(1, 0.1, 0.2), PackJob(1, 0.1, 0.7)]
    assert greedy_allocate(jobs, 2, "GR") is None
    gb = greedy_allocate(jobs, 2, "GB")
    assert gb is not None and gb.hosts == ((0,), (0,), (1,), (1,)) and gb.probes == 7
    verify_allocation(jobs, 2, gb)
    assert greedy_allocate(jobs, 2, "GB", max_attempts=6) is None  # the bound is honoured


def test_memory_infeasible_is_none() -> None:
    jobs = [PackJob(1, 0.5, 0.7)] * 3
    assert lp_bound(jobs, 2) is None
    for key in MCB_KEYS:
        assert mcb_allocate(jobs, 2, key) is None
    for v in ("GR", "SG", "GB", "SGB"):
        assert greedy_allocate(jobs, 2, v) is None


def test_lp_bound_formula() -> None:
    assert lp_bound(THREE, 2) == pytest.approx(1.0)
    assert lp_bound([PackJob(1, 0.9, 0.1)] * 5, 2) == pytest.approx(2 / 4.5)
    assert lp_bound([PackJob(4, 0.5, 0.1)], [(1.0, 1.0), (0.5, 1.0)]) == pytest.approx(1.5 / 2.0)


def test_parallel_job_tasks_share_one_yield() -> None:
    jobs = [PackJob(3, 0.6, 0.3), PackJob(1, 0.6, 0.3)]
    a = mcb_allocate(jobs, 2)
    assert a is not None and len(a.hosts[0]) == 3 and len(a.yields) == 2
    verify_allocation(jobs, 2, a)
    # 4 tasks of 0.6 on 2 hosts: two per host, best min yield 0.5/0.6.
    assert a.min_yield == pytest.approx(0.5 / 0.6)


def test_average_yield_sequential_matches_paper_rule() -> None:
    # One host, needs 0.2, 0.5, 0.4 at Y = 0.5: base 0.1 + 0.25 + 0.2 = 0.55, 0.45 left. Smallest first:
    # 0.2 -> full (+0.1), then 0.4 -> full (+0.2), then 0.5 gets the last 0.15 -> yield 0.8.
    y = raise_average_yield(np.array([0, 0, 0]), np.array([0, 1, 2]), np.array([0.2, 0.5, 0.4]), np.ones(1), 0.5)
    assert y.tolist() == pytest.approx([1.0, 0.8, 1.0])


def test_average_yield_parallel_per_job() -> None:
    # Job 0 (2 tasks of 0.3) spans hosts 0 and 1; job 1 (0.4) is alone on host 1. At Y = 0.5 host 1 has
    # 1 - 0.15 - 0.2 = 0.65 free, host 0 has 0.85. Cheapest total need first: job 1 (0.4 < 0.6) -> 1,
    # leaving 0.45 on host 1; job 0 then rises to 1 as well (needs 0.15 per host).
    a = allocation_from_placement([PackJob(2, 0.3, 0.1), PackJob(1, 0.4, 0.1)], 2, [0, 1, 1], "x")
    assert a is not None and a.yields == pytest.approx((1.0, 1.0))
    y = raise_average_yield(np.array([0, 1, 1]), np.array([0, 0, 1]), np.array([0.6, 0.6]), np.ones(2), 0.5)
    # host 1: base 0.3 + 0.3 = 0.6, 0.4 left; the jobs tie on total need 1.2 vs 0.6 -> job 1 first: +0.3.
    # Job 0 then gets min(0.2 on host 0 / 0.6, 0.1 on host 1 / 0.6) = 1/6 more.
    assert y.tolist() == pytest.approx([0.5 + 0.1 / 0.6, 1.0])


def test_bad_jobs_rejected() -> None:
    with pytest.raises(ValueError, match="job 1: cpu_need"):
        mcb_allocate([PackJob(1, 0.5, 0.1), PackJob(1, -0.1, 0.1)], 2)
    with pytest.raises(ValueError, match="job 0: mem"):
        mcb_allocate([PackJob(1, 0.5, 1.5)], 2)
    with pytest.raises(ValueError, match="job 0: tasks"):
        mcb_allocate([PackJob(0, 0.5, 0.1)], 2)
    with pytest.raises(ValueError, match="key"):
        mcb_allocate(THREE, 2, "MCB9")


def test_empty_and_heterogeneous() -> None:
    a = mcb_allocate([], 3)
    assert a is not None and a.hosts == () and a.min_yield == 1.0
    hosts = [(0.5, 1.0), (1.0, 0.5)]
    jobs = [PackJob(1, 0.5, 0.6), PackJob(1, 0.5, 0.3)]
    a = mcb_allocate(jobs, hosts)
    assert a is not None
    verify_allocation(jobs, hosts, a)
    assert a.hosts == ((0,), (1,)) and a.min_yield == pytest.approx(1.0)


@pytest.mark.parametrize("key", list(MCB_KEYS))
def test_mcb8_fast_path_equals_generic(key: str) -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        n = int(rng.integers(5, 40))
        jobs = [
            PackJob(1, float(c), float(m)) for c, m in zip(rng.uniform(0.05, 1, n), rng.uniform(0, 0.5, n), strict=True)
        ]
        prob = PackProblem.build(jobs, 6)
        for y in (0.3, 0.6, 0.9):
            a = mcb_pack(prob, y, key)
            b = mcb_pack(prob, y, key, generic=True)
            assert (a is None) == (b is None)
            if a is not None:
                assert a.tolist() == b.tolist()


# ---- added by the second mutation review ----------------------------------------------------------------------------


def test_mcb8_python_pass_puts_a_task_of_equal_cpu_and_memory_where_the_kernel_does() -> None:
    """002 Sec. 3.4 splits tasks into "higher CPU than memory" and "higher memory than CPU" lists; a task with equal
    requirements goes to the memory list in both passes. Random instances full of such ties: the compiled pass and
    the Python pass place every task alike (the existing agreement test draws no ties)."""
    from coordinator.policies import mcb8_kernel
    from coordinator.policies.packing import _pass_mcb8, _pass_mcb8_py

    if mcb8_kernel.mcb8_pack is None:
        pytest.skip("numba is not installed: only the Python pass exists")
    rng = np.random.default_rng(31)
    tied = 0
    for _ in range(300):
        n, h = int(rng.integers(2, 40)), int(rng.integers(1, 12))
        c = rng.choice([0.125, 0.25, 0.375, 0.5], n)
        m = np.where(rng.random(n) < 0.5, c, rng.choice([0.125, 0.25, 0.375, 0.5], n))
        capc = rng.choice([0.5, 1.0], h).astype(float)
        capm = rng.choice([0.5, 1.0], h).astype(float)
        a, b = _pass_mcb8(c, m, capc, capm), _pass_mcb8_py(c, m, capc, capm)
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_array_equal(a, b)
            tied += bool((c == m).any())
    assert tied > 50
