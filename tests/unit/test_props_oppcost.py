"""Property-based tests of seed 004's opportunity-cost family: the cost functions, E-PVM's and E-Mosix's decisions,
and the per-process simulator under the four methods, on random small heterogeneous clusters. Derandomized, so a
failure is reproducible."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.oppcost.sim import simulate
from coordinator.policies.opportunity_cost import (
    EPVM,
    METHODS,
    EMosix,
    LoadScale,
    Machine,
    Proc,
    View,
    machine_cost,
    make_method,
    marginal_cost,
)
from workloads.oppcost_mix import ProcSpec

PROPS = settings(derandomize=True, deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])

_speed = st.sampled_from([1.0, 0.8, 0.5, 0.25])
_mem = st.sampled_from([64.0, 128.0, 256.0, 512.0])
_proc_mem = st.one_of(st.sampled_from([1.0, 16.0, 64.0, 128.0, 600.0]), st.floats(0.5, 300.0))


@st.composite
def machines(draw: st.DrawFn) -> tuple[Machine, ...]:
    """1-6 machines, speeds relative to the fastest (1.0, which the first one is: 004 Sec. 2's unit)."""
    n = draw(st.integers(1, 6))
    return (Machine(1.0, draw(_mem)), *(Machine(draw(_speed), draw(_mem)) for _ in range(n - 1)))


@st.composite
def views(draw: st.DrawFn) -> View:
    ms = draw(machines())
    pid = 0
    procs: list[list[Proc]] = []
    for _ in ms:
        here = []
        for _ in range(draw(st.integers(0, 6))):
            here.append(Proc(pid, draw(_proc_mem), float(pid)))
            pid += 1
        procs.append(here)
    return View(ms, procs)


@PROPS
@given(m=st.tuples(_speed, _mem).map(lambda t: Machine(*t)), n=st.integers(1, 8), lc=st.integers(0, 12),
       lm=st.floats(0.0, 2000.0), mem=_proc_mem, extra=_proc_mem, L=st.sampled_from([1.0, 2.0, 16.0, 1024.0]))
def test_marginal_cost_is_nonnegative_and_grows_with_load(m: Machine, n: int, lc: int, lm: float, mem: float,
                                                          extra: float, L: float) -> None:  # noqa: N803
    """004 Sec. 3.3/4: the cost of a machine is a sum of exponentials of its loads, so a job's marginal cost there is
    never negative and never falls as the machine's CPU or memory load grows (ASSIGN-U's argument rests on it;
    the default cost load, process count per unit of speed)."""
    c = marginal_cost(n, m, lc, lm, mem, L)
    assert c >= 0.0
    assert marginal_cost(n, m, lc + 1, lm, mem, L) >= c * (1 - 1e-12)
    assert marginal_cost(n, m, lc, lm + extra, mem, L) >= c * (1 - 1e-12)
    assert math.isfinite(c)


@PROPS
@given(view=views(), mem=_proc_mem)
def test_epvm_assigns_to_a_machine_of_least_marginal_cost(view: View, mem: float) -> None:
    """004 Sec. 4 item 2: E-PVM "assigns each job to the machine where its marginal cost is minimal", with L as the
    method sees it after observing the snapshot; ties go to the lowest index (the module's reading)."""
    method = EPVM()
    dst = method.assign(view, mem, 0, random.Random(0))
    n, L = len(view.machines), method.scale.L  # noqa: N806
    costs = [marginal_cost(n, m, view.lc(i), view.lm(i), mem, L) for i, m in enumerate(view.machines)]
    assert costs[dst] <= min(costs) + 1e-12
    assert all(c > costs[dst] - 1e-12 for c in costs[:dst])


@PROPS
@given(view=views(), seed=st.integers(0, 100))
def test_emosix_moves_each_lower_the_total_cost(view: View, seed: int) -> None:
    """004 Sec. 4 item 4: E-Mosix "reassigns jobs to minimize the sum of the costs of all of the machines": applied
    in the order made (each decision sees the moves before it), every move of an interval lowers the cluster's total
    cost at the method's L, and no node sends more than one process."""
    method = EMosix()
    moves = method.rebalance(view, random.Random(seed))
    n, L = len(view.machines), method.scale.L  # noqa: N806
    work = view.copy()

    def total() -> float:
        return sum(machine_cost(n, m, work.lc(i), work.lm(i), L) for i, m in enumerate(work.machines))

    assert len({mv.src for mv in moves}) == len(moves)
    for mv in moves:
        before = total()
        p = next(p for p in work.procs[mv.src] if p.pid == mv.pid)
        work.procs[mv.src].remove(p)
        work.procs[mv.dst].append(p)
        assert total() < before, (mv, before, total())


@PROPS
@given(view=views(), seed=st.integers(0, 100))
def test_mosix_moves_only_where_the_process_fits(view: View, seed: int) -> None:
    """The module's reading of Mosix (004 Sec. 4 item 3): a node sends at most one process per interval, and only to a
    node whose memory load stays below its memory after the move (each move seeing those made before it)."""
    moves = make_method("mosix").rebalance(view, random.Random(seed))
    work = view.copy()
    assert len({mv.src for mv in moves}) == len(moves)
    for mv in moves:
        p = next(p for p in work.procs[mv.src] if p.pid == mv.pid)
        assert p.mem < work.free(mv.dst), (mv, p, work.free(mv.dst))
        work.procs[mv.src].remove(p)
        work.procs[mv.dst].append(p)


@st.composite
def streams(draw: st.DrawFn, n: int) -> list[ProcSpec]:
    """1-25 processes: arrivals with ties, work from a millisecond to an hour, memory up to past a machine's."""
    out = []
    for pid in range(draw(st.integers(1, 25))):
        out.append(ProcSpec(pid, pid, draw(st.one_of(st.just(0.0), st.integers(0, 200).map(float))),
                            draw(st.one_of(st.just(1e-3), st.floats(1.0, 3600.0))), draw(_proc_mem),
                            draw(st.integers(0, n - 1))))
    return out


@pytest.mark.parametrize("name", METHODS)
@settings(PROPS, max_examples=25)
@given(data=st.data(), seed=st.integers(0, 10))
def test_simulation_completes_with_slowdowns_at_least_one(name: str, data: st.DataObject, seed: int) -> None:
    """oppcost.sim: every process completes once, no sooner than its work on the fastest machine allows (slowdown
    >= 1: 004 Sec. 5 measures slowdown against a dedicated fastest machine), after its arrival; the same seed gives
    the same result."""
    ms = data.draw(machines())
    stream = data.draw(streams(len(ms)))
    a = simulate(stream, ms, make_method(name), seed, max_time=1e8)
    b = simulate(stream, ms, make_method(name), seed, max_time=1e8)
    assert a == b
    assert sorted(a.completions) == sorted(s.pid for s in stream)
    for s, slow in zip(sorted(stream, key=lambda s: s.pid), a.slowdowns, strict=True):
        assert slow >= 1.0 - 1e-9, (s, slow)
        assert a.completions[s.pid] >= s.arrival
    if name in ("pvm", "e-pvm"):
        assert a.migrations == 0


@PROPS
@given(view=views())
def test_load_scale_is_a_power_of_two_above_every_load_seen(view: View) -> None:
    """004 Sec. 4: L is "the smallest integer power of two greater than the largest load we have seen"."""
    scale = LoadScale()
    scale.observe(view)
    loads = [view.lc(i) / m.speed for i, m in enumerate(view.machines)]
    L = scale.L  # noqa: N806
    assert max(loads) < L and (L == 1.0 or max(loads) >= L / 2)
    assert math.log2(L).is_integer()


@pytest.mark.xfail(strict=True, reason="REPORT.md: oppcost.sim's completion tolerance grows with the machine's clock")
def test_tiny_process_late_in_a_run_is_not_finished_early() -> None:
    """Shrunk by hand from test_simulation_completes_with_slowdowns_at_least_one: oppcost.sim finishes every process
    whose threshold is within 1e-9 * v of a machine's virtual work v. At v = 10^6 s that is 10^-3 s of work: a
    process of 10^-3 s arriving 10^-4 s before another ends is finished with it, at a fifth of its work."""
    stream = [ProcSpec(0, 0, 0.0, 1e6, 10.0, 0), ProcSpec(1, 1, 1e6 - 1e-4, 1e-3, 10.0, 0)]
    result = simulate(stream, (Machine(1.0, 512.0),), make_method("pvm"), 0)
    assert min(result.slowdowns) >= 1.0 - 1e-6, result.slowdowns  # (rounding of times near 1e6 s: ~1e-7)
