"""The Sec. 2.5 MILP, its LP relaxation, RRND/RRNZ (Sec. 3.2) and the Sec. 6.1 adaptation MILP."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from coordinator.policies.packing import PackJob, PackProblem, lp_bound, mcb_allocate, verify_allocation
from coordinator.vcsched.exact import (
    adapt_milp,
    average_yield_lp,
    rrnd,
    rrnz,
    solve_lp_relaxation,
    solve_milp,
)
from coordinator.vcsched.generator import InstanceSpec, generate


def test_milp_three_tasks_two_hosts() -> None:
    jobs = [PackJob(1, 0.6, 0.5)] * 3
    r = solve_milp(PackProblem.build(jobs, 2))
    assert r.status == "optimal" and r.objective == pytest.approx(0.5 / 0.6)
    assert r.allocation is not None
    verify_allocation(jobs, 2, r.allocation)
    assert sorted(h for (h,) in r.allocation.hosts) in ([0, 0, 1], [0, 1, 1])


def test_milp_infeasible_and_time_limit() -> None:
    r = solve_milp(PackProblem.build([PackJob(1, 0.5, 0.7)] * 3, 2))
    assert r.status == "infeasible" and r.allocation is None
    # Memory fits in total but not in any packing: 3 x 0.6 on 2 hosts.
    r = solve_milp(PackProblem.build([PackJob(1, 0.5, 0.6)] * 3, 2))
    assert r.status == "infeasible"


def test_lp_relaxation_equals_closed_form() -> None:
    rng = np.random.default_rng(4)
    for slack in (0.2, 0.5, 0.8):
        inst = generate(InstanceSpec(4, 10, slack, 0.75, 0.75), rng)
        relax = solve_lp_relaxation(inst.problem())
        assert relax.objective == pytest.approx(lp_bound(inst.jobs, 4), abs=1e-6)
        assert relax.e is not None and relax.e.sum(axis=1) == pytest.approx(np.ones(10), abs=1e-6)


def test_rounding_heuristics_are_feasible_and_seeded() -> None:
    inst = generate(InstanceSpec(4, 12, 0.6, 0.25, 0.25), np.random.default_rng(9))
    prob = inst.problem()
    relax = solve_lp_relaxation(prob)
    for fn in (rrnd, rrnz):
        a = fn(prob, np.random.default_rng(1), relax)
        b = fn(prob, np.random.default_rng(1), relax)
        if a is not None:
            verify_allocation(inst.jobs, 4, a)
            assert b is not None and a.hosts == b.hosts
    # RRNZ never has a zero-probability dead end when some host has room.
    assert rrnz(prob, np.random.default_rng(2), relax) is not None


def test_parallel_milp_gives_tasks_equal_cpu() -> None:
    jobs = [PackJob(3, 0.6, 0.3), PackJob(1, 0.6, 0.3)]
    r = solve_milp(PackProblem.build(jobs, 2))
    assert r.status == "optimal" and r.objective == pytest.approx(0.5 / 0.6)
    assert r.allocation is not None and len(r.allocation.yields) == 2
    verify_allocation(jobs, 2, r.allocation)


def test_adaptation_budget() -> None:
    # A poor current placement: the two heavy tasks share host 0, the light ones are on host 1.
    jobs = [PackJob(1, 0.9, 0.3), PackJob(1, 0.9, 0.3), PackJob(1, 0.1, 0.3), PackJob(1, 0.1, 0.2)]
    prob = PackProblem.build(jobs, 2)
    prev = [(0,), (0,), (1,), (1,)]
    stay = adapt_milp(prob, prev, budget=0.0)
    assert stay.status == "optimal" and stay.migrated == 0.0
    assert stay.allocation is not None and stay.allocation.hosts == tuple(prev)
    assert stay.objective == pytest.approx(1 / 1.8)
    free = adapt_milp(prob, prev, budget=10.0)
    best = solve_milp(prob)
    assert free.objective == pytest.approx(best.objective)
    assert free.objective == pytest.approx(1.0)
    # Budget 0.3 of memory: one heavy task (m = 0.3) may move, but then host 1 carries 1.1 of need.
    one = adapt_milp(prob, prev, budget=0.3)
    assert one.objective == pytest.approx(1 / 1.1) and one.migrated <= 0.3 + 1e-9
    # Budget 0.5: the heavy task and the 0.2 light one move, and every job gets its full need.
    two = adapt_milp(prob, prev, budget=0.5)
    assert two.objective == pytest.approx(1.0) and two.migrated == pytest.approx(0.5)
    # Budget 0.25: only the 0.2 light task may move, which does not help host 0.
    assert adapt_milp(prob, prev, budget=0.25).objective == pytest.approx(1 / 1.8)
    # Counting migrations instead of bytes, and a new job (None) that moves for free.
    cnt = adapt_milp(prob, [(0,), (0,), (1,), None], budget=1, count="migrations")
    assert cnt.objective == pytest.approx(1.0) and cnt.migrated <= 1


def test_average_yield_lp_agrees_with_greedy_for_sequential() -> None:
    inst = generate(InstanceSpec(4, 12, 0.5, 0.75, 0.75), np.random.default_rng(5))
    a = mcb_allocate(inst.jobs, 4)
    assert a is not None
    prob = inst.problem()
    th = np.array([h for hs in a.hosts for h in hs])
    y = average_yield_lp(prob, th, a.min_yield)
    assert y is not None and y.sum() == pytest.approx(sum(a.yields), abs=1e-6)


def test_experiment_runner_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from coordinator.vcsched.experiment import vcsched_main

    argv = ["--set", "small", "--instances", "1", "--slacks", "0.3,0.7", "--jobs", "1", "--milp-time-limit", "1"]
    argv += ["--algorithms", "MCB5,MCB8,SG,GB,RRNZ,MILP", "--out", str(tmp_path)]
    assert vcsched_main(argv) == 0
    out = capsys.readouterr().out
    assert "% degradation from best" in out
    for f in ("results.csv", "summary.csv", "degradation.csv", "mcb_min_yield.png", "all_runtime.png"):
        assert (tmp_path / "small" / f).stat().st_size > 0
    conf = json.loads((tmp_path / "config.json").read_text())
    assert conf["instances"] == 1 and conf["slacks"] == [0.3, 0.7]
    rows = (tmp_path / "small" / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + 4 * 2 * 4 * 7  # header + tasks x slacks x cv pairs x (LP + 6 algorithms)
    assert vcsched_main(["--algorithms", "MCB9"]) == 2
