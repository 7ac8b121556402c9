"""``vcemu sweep``: one cell, the per-cell guard, 001's aggregation (Table I, Fig. 1, Table II), config errors."""

from __future__ import annotations

import math

import pytest

from coordinator.metrics import MOVE_COUNTING
from coordinator.model import JobSpec
from coordinator.sweep import _parse_args, config_from_args, run_cell
from coordinator.sweep_report import fig1, table1, table2, with_degradation

# Two jobs on one host: b (need 1.0, 60% memory) cannot share with a (60% memory) and waits.
JOBS = [JobSpec("a", 0.0, 1, 1.0, 0.6, 100.0), JobSpec("b", 10.0, 1, 1.0, 0.6, 50.0)]


def test_a_cell_is_scored_with_the_trace_metrics():
    r = run_cell(JOBS, "fcfs", 0.0, 1)
    assert r["status"] == "ok" and r["completed"] == 2
    assert r["max_stretch"] == pytest.approx((150 - 10) / 50)  # b waits 90 s, runs 50 s
    assert r["preemptions"] == r["migrations"] == 0
    assert r["utilisation"] == pytest.approx(150 / 150)  # the host is never idle from 0 to 150
    assert r["decisions"] >= 2


def test_the_per_cell_guard_turns_a_slow_cell_into_a_timeout():
    r = run_cell(JOBS, "dynmcb8-asap-per", 300.0, 1, timeout_s=0.0)
    assert r["status"] == "timeout" and math.isnan(r["max_stretch"]) and "exceeded" in r["error"]


def _row(trace, group, load, alg, ms, **kw):
    base = {"trace": trace, "group": group, "load": load, "algorithm": alg, "penalty": 300.0, "max_stretch": ms,
            "status": "ok" if not math.isnan(ms) else "timeout", "counting": MOVE_COUNTING}
    return {**base, **{f: 0.0 for f in ("pmtn_gb_s", "mig_gb_s", "pmtn_per_hour", "mig_per_hour",
                                          "pmtn_per_job", "mig_per_job")}, **kw}


def test_aggregation_follows_001_section_v():
    rows = with_degradation([
        _row("t1", "scaled", 0.7, "easy", 40.0), _row("t1", "scaled", 0.7, "greedy-pmtn", 4.0, pmtn_per_hour=10.0),
        _row("t2", "scaled", 0.7, "easy", 9.0), _row("t2", "scaled", 0.7, "greedy-pmtn", 3.0, pmtn_per_hour=30.0),
        _row("t3", "scaled", 0.1, "easy", 2.0), _row("t3", "scaled", 0.1, "greedy-pmtn", math.nan),
        _row("w1", "hpc2n", 0.5, "easy", 5.0), _row("w1", "hpc2n", 0.5, "greedy-pmtn", 5.0),
    ])
    deg = {(r["trace"], r["algorithm"]): r["degradation"] for r in rows}
    assert deg[("t1", "easy")] == 10.0 and deg[("t1", "greedy-pmtn")] == 1.0
    assert deg[("t2", "easy")] == 3.0 and deg[("t3", "easy")] == 1.0 and math.isnan(deg[("t3", "greedy-pmtn")])
    t1 = {r["algorithm"]: r for r in table1(rows, ["easy", "greedy-pmtn"], 300.0)}
    assert t1["easy"]["scaled_avg"] == pytest.approx(14 / 3) and t1["easy"]["scaled_max"] == 10.0
    assert t1["easy"]["scaled_std"] == pytest.approx(math.sqrt(((10 - 14 / 3) ** 2 + (3 - 14 / 3) ** 2
                                                                + (1 - 14 / 3) ** 2) / 3))
    assert t1["greedy-pmtn"]["scaled_avg"] == 1.0 and t1["greedy-pmtn"]["scaled_failed"] == 1
    assert t1["easy"]["hpc2n_avg"] == 1.0 and t1["easy"]["hpc2n_n"] == 1
    f = {d["load"]: d for d in fig1(rows, ["easy", "greedy-pmtn"], 300.0, [0.1, 0.7])}
    assert f[0.7]["easy"] == 6.5 and f[0.1]["easy"] == 1.0 and math.isnan(f[0.1]["greedy-pmtn"])
    t2 = table2(rows, ["easy", "greedy-pmtn"], 300.0)
    assert [r["algorithm"] for r in t2] == ["greedy-pmtn"]  # batch algorithms neither preempt nor migrate
    assert t2[0]["n"] == 2 and t2[0]["pmtn_per_hour_avg"] == 20.0 and t2[0]["pmtn_per_hour_max"] == 30.0
    # a cell stored by an older vcemu, which counted moves another way, is left out of Table II and counted
    old = {**_row("t4", "scaled", 0.8, "greedy-pmtn", 2.0, pmtn_per_hour=99.0), "counting": None}
    (t2,) = table2([*rows, old], ["greedy-pmtn"], 300.0)
    assert (t2["n"], t2["other_counting"], t2["pmtn_per_hour_max"]) == (2, 1, 30.0)


@pytest.mark.parametrize(("argv", "message"), [
    (["--algorithms", "fcfs,nope"], "unknown 'nope'"),
    (["--loads", "0.5,x"], "--loads"),
    (["--penalties", "-1"], "--penalties"),
    (["--hpc2n-weeks", "a-b"], "--hpc2n-weeks"),
    (["--job-scale", "0"], "--job-scale"),
    (["--hosts", "8"], r"--hosts: nodes: .* nodes must be >= 10"),
])
def test_bad_settings_are_refused_by_name(argv, message):
    with pytest.raises(SystemExit, match=message):
        config_from_args(_parse_args(argv))


def test_table1_beside_the_paper_ranks_both_columns():
    from coordinator.sweep_report import PAPER_TABLE1_P300, table1_vs_paper

    t1 = []
    for alg, avg in (("fcfs", 200.0), ("greedy-pmtn", 1.5), ("dynmcb8-asap-per", 2.0)):
        row = {"algorithm": alg}
        for g in ("scaled", "unscaled", "hpc2n"):
            row.update({f"{g}_n": 1 if g == "scaled" else 0, f"{g}_avg": avg if g == "scaled" else float("nan"),
                        f"{g}_max": 2 * avg if g == "scaled" else float("nan")})
        t1.append(row)
    out = {r["algorithm"]: r for r in table1_vs_paper(t1)}
    assert out["fcfs"]["scaled_paper_avg"] == PAPER_TABLE1_P300["fcfs"]["scaled"][0] == 435.32
    assert [out[a]["scaled_avg_rank"] for a in ("greedy-pmtn", "dynmcb8-asap-per", "fcfs")] == [1, 2, 3]
    # the paper: ASAP-PER 2.62 < GREEDY-PMTN 9.45 < FCFS 435.32
    assert [out[a]["scaled_paper_avg_rank"] for a in ("dynmcb8-asap-per", "greedy-pmtn", "fcfs")] == [1, 2, 3]
    assert "unscaled_avg_rank" not in out["fcfs"]  # no traces in the group: no rank
