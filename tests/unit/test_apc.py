"""APC (seed 003): RPFs, hypothetical relative performance, the placement loop, baselines, simulator."""

from __future__ import annotations

import math

import numpy as np
import pytest

from coordinator.apc.sim import SimConfig, simulate
from coordinator.apc.workloads import cluster, exp1_jobs, exp3_app
from coordinator.policies.apc import (
    ApcState,
    Costs,
    Node,
    _context,
    _node_loop,
    apc_place,
    better,
    change_delays,
    edf_place,
    evaluate,
    fcfs_place,
)
from coordinator.policies.apc_rpf import (
    DEFAULT_SAMPLES,
    Hypothetical,
    Job,
    ResponseTimeModel,
    Stage,
    TransactionalApp,
)

# --------------------------------------------------------------------------- Sec. 4.3 worked example

NODE = (Node("n1", 1000.0, 2000.0),)


def _cycle2(goal_j2: float):
    """Table 1: J1 runs alone in cycle 1 (t = 0..1); J2 arrives at t = 1. Returns (state, decision)."""
    j1 = Job("J1", 0.0, 20.0, (Stage(4000.0, 1000.0, 750.0),))
    d1 = apc_place(ApcState(0.0, NODE, (j1,)), T=1.0)
    assert d1.placement == {"J1": "n1"} and d1.job_speed["J1"] == pytest.approx(1000.0)
    j1, _ = j1.advanced(d1.job_speed["J1"], 1.0)
    j2 = Job("J2", 1.0, goal_j2, (Stage(2000.0, 500.0, 750.0),))
    state = ApcState(1.0, NODE, (j1, j2), placement=d1.placement)
    return state, apc_place(state, T=1.0)


def test_worked_example_s1_keeps_placement_without_changes():
    state, d = _cycle2(17.0)  # S1: relative goal factor 4, goal 17
    assert d.placement == {"J1": "n1"}  # P2: J2 not placed, J1 at full speed
    assert d.changes.total == 0
    assert sorted(round(v, 1) for v in d.rp.values()) == [0.7, 0.7]
    ctx = _context(state, 1.0, Costs.none(), 0.01, DEFAULT_SAMPLES)
    p1 = evaluate(ctx, {"J1": "n1", "J2": "n1"}, {})
    assert p1 is not None and [round(v, 1) for v in p1.vector] == [0.7, 0.7]  # the alternative is as good


def test_worked_example_s2_equalises():
    state, d = _cycle2(13.0)  # S2: relative goal factor 3, goal 13
    assert d.placement == {"J1": "n1", "J2": "n1"}  # P1: both run
    assert d.changes.starts == 1 and d.changes.job_changes == 0
    assert d.job_speed["J1"] + d.job_speed["J2"] == pytest.approx(1000.0)
    assert d.vector == pytest.approx((0.65, 0.65), abs=0.015)
    ctx = _context(state, 1.0, Costs.none(), 0.01, DEFAULT_SAMPLES)
    p2 = evaluate(ctx, {"J1": "n1"}, {})
    assert p2 is not None and p2.vector == pytest.approx((0.6, 0.7), abs=0.02)
    assert better(d.vector, p2.vector, 0.01)


# --------------------------------------------------------------------------- RPFs


def test_job_rpf_and_multistage_progress():
    j = Job("a", 10.0, 110.0, (Stage(100.0, 10.0, 5.0), Stage(300.0, 30.0, 50.0, min_speed=5.0)))
    assert j.relative_goal == 100.0 and j.work == 400.0
    assert j.min_remaining_time() == pytest.approx(20.0)
    assert j.rp(60.0) == pytest.approx(0.5)  # eq. 2
    assert j.max_rp(10.0) == pytest.approx(0.8)
    j2, off = j.advanced(100.0, 5.0)  # stage 1 capped at 10 MHz
    assert off is None and j2.done == pytest.approx(50.0) and j2.stage().memory == 5.0
    j3, off = j2.advanced(100.0, 100.0)  # 5 s to finish stage 1, then 10 s at 30 MHz
    assert off == pytest.approx(15.0) and j3.finished
    with pytest.raises(ValueError, match="goal"):
        Job("b", 10.0, 5.0, (Stage(1.0, 1.0, 1.0),))
    with pytest.raises(ValueError, match="min_speed"):
        Stage(1.0, 1.0, 1.0, min_speed=2.0)


def test_hypothetical_interpolation_matches_exact_equalisation():
    rng = np.random.default_rng(3)
    jobs = [Job(f"j{i}", 0.0, float(rng.uniform(500, 3000)), (Stage(float(rng.uniform(1e4, 1e5)), 100.0, 1.0),),
                done=0.0) for i in range(12)]
    h = Hypothetical.build(jobs, now=0.0)
    prev = -math.inf
    for omega_g in (50.0, 200.0, 500.0, 900.0, 1500.0):
        omega, u = h.at(omega_g)
        assert omega.sum() == pytest.approx(min(omega_g, h.full.sum()), rel=1e-6)
        # exact: the common level L with sum_m min(full_m, rem_m / (t_m(L) - now)) = omega_g
        lo, hi = -50.0, 1.0
        for _ in range(100):
            mid = (lo + hi) / 2
            need = sum(min(j.remaining / j.min_remaining_time(), j.remaining / (j.goal - mid * j.relative_goal))
                       if mid < j.max_rp(0.0) else j.remaining / j.min_remaining_time() for j in jobs)
            lo, hi = (mid, hi) if need <= omega_g else (lo, mid)
        exact = np.minimum(lo, h.umax)
        assert u == pytest.approx(exact, abs=0.03)
        assert u.min() >= prev - 1e-9
        prev = u.min()


def test_transactional_rpf_and_model():
    app = exp3_app()
    assert app.rp(130_000.0) == pytest.approx(0.66)  # the paper's maximum, at 130,000 MHz
    assert app.rp(500_000.0) == pytest.approx(0.66)  # saturation: more CPU does not help
    assert app.rp(6 * 15_600.0) == pytest.approx(0.29, abs=0.01)
    for u in (-8.0, -1.0, 0.0, 0.3, 0.6):
        assert app.rp(app.speed_for(u)) == pytest.approx(u, abs=1e-6)
    assert app.speed_for(0.7) == math.inf
    assert app.rp(10_000.0) < app.rp(50_000.0) < -4.0  # unstable: floored, still increasing
    m = ResponseTimeModel.fit(omega=2000.0, response_time=0.05, throughput=20.0)
    assert m.response_time(2000.0) == pytest.approx(0.05)
    assert m.response_time(1000.0) > 0.05
    with pytest.raises(ValueError, match="tau"):
        TransactionalApp("x", 0.0, m)


# --------------------------------------------------------------------------- placement


def test_apc_gives_cpu_to_transactional_app_when_it_falls_below_the_jobs():
    node = (Node("n", 4000.0, 4000.0),)
    job = Job("j", 0.0, 1e6, (Stage(1e6, 4000.0, 1000.0),))  # enormous slack: RP near 1 at any speed
    app = TransactionalApp("web", 1.0, ResponseTimeModel(demand=1000.0, rate=1.0), memory=100.0,
                           nodes=frozenset({"n"}))
    d = apc_place(ApcState(0.0, node, (job,), {"j": "n"}, apps=(app,)), T=10.0)
    assert d.app_cpu("web") > 1000.0 + 1000.0  # well past the load: its RP is positive
    assert d.rp["web"] > 0.4
    tight = Job("j", 0.0, 300.0, (Stage(1e6, 4000.0, 1000.0),))  # needs the whole node for 250 s
    d2 = apc_place(ApcState(0.0, node, (tight,), {"j": "n"}, apps=(app,)), T=10.0)
    assert d2.app_cpu("web") < d.app_cpu("web")
    assert abs(d2.rp["web"] - d2.rp["j"]) < 0.05  # equalised


def test_better_uses_tolerance_then_sum():
    assert not better((0.695, 0.696), (0.6875, 0.70), 0.01)
    assert better((0.65, 0.65), (0.58, 0.70), 0.01)
    assert better((0.600, 0.601, 0.62), (0.600, 0.601, 0.60), 0.01)
    assert not better((-math.inf,), (-math.inf,), 0.01)


def test_edf_preempts_and_fcfs_does_not():
    node = (Node("n", 1000.0, 1000.0),)
    late = Job("late", 0.0, 1000.0, (Stage(1000.0, 1000.0, 600.0),))
    urgent = Job("urgent", 5.0, 10.0, (Stage(1000.0, 1000.0, 600.0),))
    st = ApcState(5.0, node, (late, urgent), {"late": "n"})
    e = edf_place(st)
    assert e.placement == {"urgent": "n"} and e.changes.suspends == 1
    f = fcfs_place(st)
    assert f.placement == {"late": "n"} and f.changes.total == 0


def test_change_delays_include_costs_and_suspension_wait():
    node = (Node("n", 1000.0, 1000.0),)
    a = Job("a", 0.0, 1e4, (Stage(1e4, 1000.0, 600.0),))
    b = Job("b", 0.0, 1e4, (Stage(1e4, 1000.0, 500.0),))
    st = ApcState(0.0, node, (a, b), {"a": "n"}, suspended=frozenset({"b"}))
    delays = change_delays(st, {"b": "n"}, Costs())
    assert delays == {"b": pytest.approx(500 * 0.0333 + 600 * 0.0353)}
    assert change_delays(ApcState(0.0, node, (a,)), {"a": "n"}, Costs()) == {"a": pytest.approx(3.6)}


def test_apc_rejects_bad_cycle():
    with pytest.raises(ValueError, match="T"):
        apc_place(ApcState(0.0, NODE, ()), T=0.0)


# --------------------------------------------------------------------------- simulator


def test_experiment_one_short_run_reaches_max_rp_without_changes():
    res = simulate(SimConfig(cluster(3), "apc", 600.0, Costs(), stop_after_completed=20),
                   exp1_jobs(20, seed=1, mean_iat=1500.0))
    assert len(res.jobs) == 20
    best = 1 - 1 / 2.7  # 0.63; a job waits up to one cycle (600 s of its 47,520 s relative goal) to start
    assert best - 600 / 47520 <= max(j["rp"] for j in res.jobs) <= best
    assert res.job_changes == 0
    assert res.changes["start"] == 20


def test_simulator_validates_config():
    with pytest.raises(ValueError, match="policy"):
        SimConfig(cluster(1), "sjf", horizon=10.0)
    with pytest.raises(ValueError, match="static_app_nodes"):
        SimConfig(cluster(1), "fcfs", horizon=10.0, static_app_nodes=("nope",))


def test_edf_keeps_running_jobs_in_place_unless_repacking():
    nodes = (Node("a", 1000.0, 1000.0), Node("b", 1000.0, 1000.0))
    running = Job("run", 0.0, 1000.0, (Stage(1e5, 1000.0, 600.0),))
    new = Job("new", 5.0, 100.0, (Stage(1000.0, 1000.0, 600.0),))
    st = ApcState(5.0, nodes, (running, new), {"run": "a"})
    sticky = edf_place(st)
    assert sticky.placement == {"run": "a", "new": "b"} and sticky.changes.job_changes == 0
    repack = edf_place(st, sticky=False)
    assert repack.placement == {"new": "a", "run": "b"} and repack.changes.migrations == 1


def test_room_elsewhere_is_used_before_a_job_is_moved_to_make_room():
    """Two nodes with one free slot each (2 jobs of 750 MB per 2,000 MB node), two waiting jobs with tight
    goals. A single pass with removals, visiting node a first, sets R aside to put both newcomers on a
    and then places R on b: a migration for the same vector. The additions-only first pass puts one
    newcomer on each node and moves nothing."""
    nodes = (Node("a", 1000.0, 2000.0), Node("b", 1000.0, 2000.0))

    def job(name: str, goal: float) -> Job:
        return Job(name, 0.0, goal, (Stage(5000.0, 500.0, 750.0),))

    st = ApcState(0.0, nodes, (job("R", 1000.0), job("Q", 1000.0), job("W1", 14.0), job("W2", 15.0)),
                  {"R": "a", "Q": "b"})
    d = apc_place(st, T=5.0)
    assert d.placement == {"R": "a", "Q": "b", "W1": "a", "W2": "b"}
    assert d.changes.starts == 2 and d.changes.job_changes == 0
    ctx = _context(st, 5.0, Costs.none(), 0.01, DEFAULT_SAMPLES)
    incumbent = evaluate(ctx, dict(st.placement), {})
    assert incumbent is not None
    one_pass = _node_loop(ctx, st, incumbent, {}, lambda j: ctx.jobs[j].max_rp(0.0), 0.01, removals=True)
    assert one_pass.placement == {"Q": "b", "W1": "a", "W2": "a", "R": "b"} and one_pass.changes.migrations == 1
    assert one_pass.vector == pytest.approx(d.vector)  # the migration bought nothing


def test_vcemu_apc_cli(tmp_path, capsys):
    from coordinator.apc.experiment import apc_main

    assert apc_main(["--experiments", "four"]) == 2
    assert "--experiments" in capsys.readouterr().err
    assert apc_main(["--exp2-algorithms", "sjf"]) == 2
    assert apc_main(["--experiments", "one", "--exp1-jobs", "6", "--out", str(tmp_path)]) == 0
    for name in ("config.json", "summary.json", "exp1_jobs.csv", "exp1_cycles.csv", "fig2_exp1.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert "Experiment One: 6 jobs" in capsys.readouterr().out


def _live_row(t: float, rate: float, rt: float, app_cores: float) -> dict:
    """One cycle row as coordinator.apc.live.LiveApc.run writes it (a fabricated measurement)."""
    return {"time": t, "rate_rps": rate, "measured_rt_s": rt, "measured_p95_s": 2 * rt, "throughput_rps": rate,
            "outstanding": 0, "app_cores": app_cores, "app_cpu_measured_cores": 0.1, "app_rp_measured": 0.5,
            "job0_rp_predicted": 0.4, "job1_rp_predicted": 0.3, "job0_cores_next": 0.5, "job1_cores_next": 0.25,
            "app_rp_predicted": 0.45, "app_cores_next": 0.25}


def test_vcemu_apc_live_prints_a_summary_of_the_live_run(tmp_path, monkeypatch, capsys):
    """``--live`` says what its live part did (it printed nothing of it), here on a fabricated live result."""
    import coordinator.apc.live
    from coordinator.apc.experiment import apc_main

    rows = [_live_row(2, 20, 0.010, 0.5), _live_row(4, 60, 0.030, 0.3), _live_row(6, 20, 0.010, 0.2)]
    live = {"cycles": 3, "seconds": 6.0, "cycle_s": 2.0, "goal_s": 0.02, "host": "live", "cores": 1.0, "rows": rows}
    monkeypatch.setattr(coordinator.apc.live, "live_experiment_three", lambda *a, **k: live)
    argv = ["--experiments", "three", "--exp3-horizon", "600", "--live", "--live-seconds", "6", "--out", str(tmp_path)]
    assert apc_main(argv) == 0
    out = capsys.readouterr().out
    assert "Live Experiment Three (shortened) on agent host live (1 core): 3 control cycles of 2 s in 6 s, " \
           "request rate 20 -> 60 -> 20 req/s" in out
    # the mean over requests: (20 x 10 + 60 x 30 + 20 x 10) / 100 = 22 ms; the worst p95 is 2 x 30 ms
    assert "response time 22.0 ms mean (goal 20.0 ms), worst cycle's p95 60.0 ms, RP 0.50 mean (min 0.50)" in out
    assert "given 0.20-0.50 cores by APC, used 0.10 on average" in out
    assert "job0 RP 0.40 (predicted) on 0.50 cores, job1 RP 0.30 (predicted) on 0.25 cores" in out


def test_apc_live_summary_of_a_skipped_or_empty_run():
    from coordinator.apc.experiment import live_summary

    assert live_summary({"skipped": "no cgroups"}) == ["Live Experiment Three: skipped (no cgroups)"]
    assert live_summary({"cycles": 0, "rows": []}) == ["Live Experiment Three: no control cycle completed"]
    no_requests = {**_live_row(2, 0, math.nan, 0.5), "throughput_rps": 0.0}
    del no_requests["app_rp_measured"]
    lines = live_summary({"seconds": 2.0, "cycle_s": 2.0, "goal_s": 0.02, "host": "h", "cores": 0.5,
                          "rows": [no_requests]})
    assert "(0.5 cores)" in lines[0] and "response time n/a mean" in lines[1] and "RP n/a mean" in lines[1]
