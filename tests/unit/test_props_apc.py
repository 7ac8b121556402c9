"""Property-based tests of seed 003's placement controller (``apc_place``) and its baselines: random small clusters
of nodes of unequal CPU and memory, multi-stage jobs, some running or suspended, and at most one transactional app.
Derandomized, so a failure is reproducible."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.policies.apc import (
    ApcState,
    Costs,
    Decision,
    Node,
    _context,
    apc_place,
    better,
    edf_place,
    evaluate,
    fcfs_place,
)
from coordinator.policies.apc_rpf import DEFAULT_SAMPLES, Job, ResponseTimeModel, Stage, TransactionalApp

PROPS = settings(derandomize=True, deadline=None, max_examples=50, suppress_health_check=[HealthCheck.too_slow])
T = 600.0
TOLERANCE = 0.01


@st.composite
def stages(draw: st.DrawFn) -> Stage:
    top = draw(st.sampled_from([200.0, 1000.0, 2000.0, 3000.0]))
    return Stage(work=draw(st.floats(1e3, 5e6)), max_speed=top,
                 memory=draw(st.sampled_from([100.0, 500.0, 1000.0, 2000.0, 4320.0])),
                 min_speed=draw(st.sampled_from([0.0, 0.0, top / 4, top])))


@st.composite
def states(draw: st.DrawFn, apps: bool = True, at_max: bool = False) -> ApcState:
    """A cycle's start: 1-4 nodes, 0-8 jobs (some already part done, goals tight or loose), the running ones placed
    within memory and their minimum speeds (``at_max``: their maximum speeds, as the baselines place them), the
    others queued or suspended."""
    now = draw(st.sampled_from([0.0, 600.0, 3000.0]))
    nodes = tuple(Node(f"n{i}", draw(st.sampled_from([1000.0, 3000.0, 6000.0])),
                       draw(st.sampled_from([1000.0, 4000.0, 8000.0]))) for i in range(draw(st.integers(1, 4))))
    jobs = []
    for k in range(draw(st.integers(0, 8))):
        prof = tuple(draw(st.lists(stages(), min_size=1, max_size=2)))
        work = sum(s.work for s in prof)
        submit = now - draw(st.sampled_from([0.0, 100.0, 1000.0]))
        fastest = sum(s.work / s.max_speed for s in prof)
        goal = submit + max(1.0, fastest * draw(st.sampled_from([0.5, 1.0, 1.5, 3.0])))
        jobs.append(Job(f"j{k}", submit, goal, prof, done=work * draw(st.sampled_from([0.0, 0.0, 0.3, 0.9]))))
    free_mem = {n.id: n.memory for n in nodes}
    free_min = {n.id: n.cpu for n in nodes}
    placement: dict[str, str] = {}
    suspended = set()
    for j in jobs:
        where = draw(st.sampled_from(["queued", "suspended", *(n.id for n in nodes)]))
        s = j.stage()
        if where == "suspended":
            suspended.add(j.id)
        elif where != "queued" and free_mem[where] >= s.memory and free_min[where] >= (s.max_speed if at_max else
                                                                                        s.min_speed):
            placement[j.id] = where
            free_mem[where] -= s.memory
            free_min[where] -= s.max_speed if at_max else s.min_speed
    app_list: tuple[TransactionalApp, ...] = ()
    if apps and draw(st.booleans()):
        on = frozenset(n.id for n in nodes if free_mem[n.id] >= 200.0 and draw(st.booleans()))
        app_list = (TransactionalApp("web", 1.0, ResponseTimeModel(draw(st.sampled_from([10.0, 100.0])),
                                                                   draw(st.sampled_from([1.0, 20.0]))),
                                     memory=200.0, nodes=on),)
    return ApcState(now, nodes, tuple(jobs), placement, frozenset(suspended), app_list)


def _check_fits(state: ApcState, d: Decision) -> None:
    """No node holds more memory or CPU than it has; each job runs within its stage's speeds."""
    jobs = {j.id: j for j in state.jobs}
    apps = {a.id: a for a in state.apps}
    for n in state.nodes:
        mem = sum(jobs[j].stage().memory for j, on in d.placement.items() if on == n.id)
        mem += sum(apps[a].memory for a, ns in d.app_nodes.items() if n.id in ns)
        cpu = sum(d.job_speed.get(j, 0.0) for j, on in d.placement.items() if on == n.id)
        cpu += sum(per.get(n.id, 0.0) for per in d.app_speed.values())
        assert mem <= n.memory + 1e-6, (n, mem)
        assert cpu <= n.cpu * (1 + 1e-9) + 1e-6, (n, cpu)
    for j, v in d.job_speed.items():
        s = jobs[j].stage()
        assert s.min_speed - 1e-6 <= v <= s.max_speed + 1e-6, (j, v, s)
        assert j in d.placement


@PROPS
@given(state=states())
def test_apc_placement_fits_and_is_no_worse_than_keeping(state: ApcState) -> None:
    """003 Sec. 3.2: APC's placement fits every node's memory and CPU, and its sorted relative-performance vector is
    never worse (in :func:`better`'s order, the one APC maximises) than the current placement's, which is the
    incumbent it starts from."""
    d = apc_place(state, T)
    _check_fits(state, d)
    ctx = _context(state, T, Costs.none(), TOLERANCE, DEFAULT_SAMPLES)
    keep = evaluate(ctx, dict(state.placement), {a.id: a.nodes for a in state.apps})
    if keep is not None:
        assert not better(keep.vector, d.vector, TOLERANCE), (keep.vector, d.vector)
    assert d.vector == tuple(sorted(d.rp.values()))
    assert set(d.rp) == {j.id for j in state.jobs if not j.finished} | {a.id for a in state.apps}


@PROPS
@given(state=states())
def test_relative_performance_in_range(state: ApcState) -> None:
    """apc_rpf: a job's RP (eq. 2) is at most 1 (completing at its desired start) and at most its u_max, the RP of
    running every remaining stage at full speed from now; an app's is at most 1 (eq. 1) and at least its overload
    floor (OVERLOAD_FLOOR - 5)."""
    d = apc_place(state, T)
    for j in state.jobs:
        if j.id in d.rp:
            assert d.rp[j.id] <= 1.0 + 1e-9
            assert d.rp[j.id] <= j.max_rp(state.now) + 1e-6, (j, d.rp[j.id], j.max_rp(state.now))
    for a in state.apps:
        assert -10.0 - 1e-9 <= d.rp[a.id] <= 1.0, d.rp[a.id]
        assert math.isfinite(d.rp[a.id])


@PROPS
@given(state=states(apps=False, at_max=True), sticky=st.booleans())
def test_baselines_fit(state: ApcState, sticky: bool) -> None:
    """The baselines of 003 Sec. 5.2 (EDF, FCFS) place within memory and give each job its stage's maximum speed
    within the node's CPU; FCFS never moves a running job (it suspends one only when its stage fits nowhere now).

    Found here: ``fcfs_place`` raised KeyError for a running job whose stage fit no node any more (REPORT.md)."""
    for d in (edf_place(state, sticky), fcfs_place(state)):
        _check_fits(state, d)
    f = fcfs_place(state)
    running = {j for j in state.placement if not next(x for x in state.jobs if x.id == j).finished}
    assert all(f.placement.get(j) in (state.placement[j], None) for j in running)


def test_fcfs_survives_a_stage_that_fits_nowhere() -> None:
    """Shrunk from test_baselines_fit with stages that change (003 Sec. 4.1): ``a`` enters a stage of 800 MHz beside
    ``b`` at 500 on a 1,000-MHz node; ``fcfs_place`` raised KeyError for the job it could not place again."""
    a = Job("a", 0.0, 100.0, (Stage(1000.0, 500.0, 100.0), Stage(1000.0, 800.0, 100.0)), done=1000.0)
    b = Job("b", 0.0, 5000.0, (Stage(1e6, 500.0, 100.0),))
    state = ApcState(10.0, (Node("n0", 1000.0, 1000.0),), (a, b), {"a": "n0", "b": "n0"})
    d = fcfs_place(state)
    _check_fits(state, d)
    assert d.placement == {"a": "n0"} and d.changes.suspends == 1


def test_apc_share_respects_minimum_speeds() -> None:
    """Shrunk from test_apc_placement_fits_and_is_no_worse_than_keeping: two jobs on a 1,000-MHz node, one of
    maximum speed 200, one whose minimum speed is 1,000; ``_share`` fixed the first at its maximum, then raised the
    second to its minimum, and gave them 1,200 MHz."""
    state = ApcState(0.0, (Node("n0", 1000.0, 1000.0),), (
        Job("j0", 0.0, 2.5, (Stage(1000.0, 200.0, 100.0, 0.0),)),
        Job("j1", 0.0, 1.0, (Stage(1000.0, 1000.0, 100.0, 1000.0),))))
    _check_fits(state, apc_place(state, T))
