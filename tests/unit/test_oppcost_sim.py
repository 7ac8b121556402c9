"""The seed 004 simulator (fair sharing, thrashing, migrations), the 004 job mix and ``vcemu oppcost``."""

from __future__ import annotations

import csv
import json
import statistics

import pytest

from coordinator.oppcost.experiment import oppcost_main
from coordinator.oppcost.sim import simulate
from coordinator.policies.opportunity_cost import METHODS, PVM, Machine, Mosix, make_method
from workloads.oppcost_mix import CLUSTER, MixConfig, ProcSpec, generate


def spec(pid: int, work: float, mem: float = 1.0, arrival: float = 0.0, origin: int = 0) -> ProcSpec:
    return ProcSpec(pid=pid, job=pid, arrival=arrival, work=work, mem=mem, origin=origin)


def test_fair_sharing_on_a_half_speed_machine() -> None:
    # speed 0.5, two processes from t=0: each gets 0.25 until work 1 is done at t=4; the other then has
    # 2 - 1 = 1 left at 0.5 -> t=6. Slowdowns 4/1 and 6/2.
    res = simulate([spec(0, 1.0), spec(1, 2.0)], (Machine(0.5, 100),), PVM(), seed=0)
    assert res.completions == pytest.approx({0: 4.0, 1: 6.0})
    assert res.slowdowns == pytest.approx([4.0, 3.0])


def test_thrashing_slows_every_process_by_beta() -> None:
    # 6 + 6 MB on a 10 MB machine: effective load 2 * 10 -> each runs at 1/20; work 1 -> both end at t=20.
    res = simulate([spec(0, 1.0, mem=6), spec(1, 1.0, mem=6)], (Machine(1, 10),), PVM(), seed=0)
    assert res.slowdowns == pytest.approx([20.0, 20.0])
    res = simulate([spec(0, 1.0, mem=6), spec(1, 1.0, mem=6)], (Machine(1, 10),), PVM(beta=3), seed=0)
    assert res.slowdowns == pytest.approx([6.0, 6.0])
    # exactly full (5 + 5 MB on 10 MB) already pages (Sec. 2: L = lc only while lm < rm) ...
    res = simulate([spec(0, 1.0, mem=5), spec(1, 1.0, mem=5)], (Machine(1, 10),), PVM(), seed=0)
    assert res.slowdowns == pytest.approx([20.0, 20.0])
    # ... and just below does not: each at 1/2 -> both end at t = 2
    res = simulate([spec(0, 1.0, mem=5), spec(1, 1.0, mem=4.9)], (Machine(1, 10),), PVM(), seed=0)
    assert res.slowdowns == pytest.approx([2.0, 2.0])


def test_mosix_migration_and_its_cost() -> None:
    # Two speed-1 machines, both processes (work 2) start on origin 0 at rate 0.5. At the t=1 interval node 0
    # (relative load 2) sends its oldest process to node 1 (load 1 after): both then run at 1 with 1.5 left.
    ms = (Machine(1, 100), Machine(1, 100))
    stream = [spec(0, 2.0), spec(1, 2.0)]
    res = simulate(stream, ms, Mosix(window=1), seed=3)
    assert res.migrations == 1
    assert res.completions == pytest.approx({0: 2.5, 1: 2.5})
    # a 0.5 s migration: the moved process waits in transit from 1 to 1.5 -> ends at 3.0; the other at 2.5
    res = simulate(stream, ms, Mosix(window=1), seed=3, migration_fixed=0.5)
    assert res.completions == pytest.approx({0: 3.0, 1: 2.5})


def test_simulation_is_reproducible_and_ends_with_every_process_done() -> None:
    stream = generate(7, CLUSTER, MixConfig(duration=600))
    for name in METHODS:
        a = simulate(stream, CLUSTER, make_method(name), seed=7)
        b = simulate(stream, CLUSTER, make_method(name), seed=7)
        assert a.slowdowns == b.slowdowns and a.migrations == b.migrations
        assert len(a.completions) == len(stream)
        assert min(a.slowdowns) >= 1 - 1e-9  # nothing beats running alone on the fastest machine


def test_004_mix_follows_the_paper() -> None:
    stream = generate(11)
    assert generate(11) == stream and generate(12) != stream
    jobs: dict[int, list[ProcSpec]] = {}
    for p in stream:
        jobs.setdefault(p.job, []).append(p)
    # ~1 arrival / 10 s for 10,000 s (uniform inter-arrival in [0, 20)): 1000 +- a few sd (sd ~ 18)
    assert 900 < len(jobs) < 1100
    assert max(p.arrival for p in stream) <= 10_000
    parallel = [ps for ps in jobs.values() if len(ps) > 1]
    assert 0.02 < len(parallel) / len(jobs) < 0.08  # 5% x 19/20 (a 1-component parallel job looks serial)
    assert max(len(ps) for ps in jobs.values()) <= 20
    small = [ps[0] for ps in jobs.values() if len(ps) == 1]
    assert min(p.work for p in small) >= 2.0  # 2 / r, r in (0, 1]
    assert 3.0 < statistics.median(p.work for p in small) < 5.5  # median of 2/r is 4
    # memory: (1/m) % of the largest machine (128 MB): at least 1.28 MB, median 2.56 MB
    assert min(p.mem for p in small) >= 1.28 - 1e-9
    assert 2.0 < statistics.median(p.mem for p in small) < 3.2
    with pytest.raises(ValueError, match="MixConfig.duration"):
        MixConfig(duration=0)


def test_oppcost_cli_writes_table_figures_and_config(tmp_path, capsys) -> None:
    out = tmp_path / "oc"
    assert oppcost_main(["--executions", "2", "--jobs", "1", "--duration", "800", "--out", str(out)]) == 0
    rows = list(csv.DictReader((out / "executions.csv").read_text().splitlines()))
    assert [r["seed"] for r in rows] == ["1", "2"]
    table = {r["method"]: r for r in csv.DictReader((out / "table2.csv").read_text().splitlines())}
    assert set(table) == set(METHODS)
    summary = json.loads((out / "summary.json").read_text())
    by_job = summary["table2"]["pvm"]["by_job"]
    jobs = sum(int(r["jobs"]) for r in rows)
    assert by_job == pytest.approx(sum(float(r["pvm_sum"]) for r in rows) / jobs)
    means = sorted(float(r["e-mosix_mean"]) for r in rows)
    assert summary["table2"]["e-mosix"]["median_by_execution"] == pytest.approx(sum(means) / 2)
    assert summary["wins"]["e-mosix<mosix"] == sum(float(r["e-mosix_mean"]) < float(r["mosix_mean"]) for r in rows)
    assert set(summary["wins"]) == {"e-pvm<pvm", "e-mosix<mosix", "e-pvm<mosix", "e-mosix<e-pvm"}
    assert json.loads((out / "config.json").read_text())["executions"] == 2
    assert sorted(p.name for p in out.glob("fig*.png")) == [
        "fig3_pvm_vs_e-pvm.png", "fig4_mosix_vs_e-mosix.png", "fig5_mosix_vs_e-pvm.png", "fig6_e-pvm_vs_e-mosix.png"]
    assert oppcost_main(["--executions", "0", "--out", str(out)]) == 2
    assert "--executions" in capsys.readouterr().err


def test_oppcost_explain_reports_each_method_on_one_stream(capsys) -> None:
    assert oppcost_main(["--explain", "3", "--duration", "600"]) == 0
    out = capsys.readouterr().out.splitlines()
    n = len(generate(3, CLUSTER, MixConfig(duration=600)))
    assert out[0].startswith(f"seed 3: {n} processes")
    rows = {line.split()[0]: line for line in out if line.split()[0] in METHODS}
    assert set(rows) == set(METHODS)
    for line in rows.values():  # every arrival is counted once in the out-of-memory histogram
        hist = json.loads(line[line.index("["):])
        assert len(hist) == len(CLUSTER) + 1 and sum(hist) == n


def test_the_default_memory_table_given_explicitly_is_no_other_setting(tmp_path, capsys) -> None:
    """Reproducibility review: ``--memory 128,128,64,64,32,32`` (the default table) on a rerun of a finished run
    without it was refused as "other settings (--memory)", though both draw the same; so is an older config that
    stored the default table. Another table is still refused."""
    out = tmp_path / "oc"
    argv = ["--executions", "1", "--jobs", "1", "--duration", "400", "--out", str(out)]
    default = ",".join(f"{m.mem:g}" for m in CLUSTER)
    assert oppcost_main(argv) == 0
    capsys.readouterr()
    assert oppcost_main([*argv, "--memory", default]) == 0
    assert "other settings" not in capsys.readouterr().err
    conf = json.loads((out / "config.json").read_text())
    assert conf["memory"] is None
    (out / "config.json").write_text(json.dumps({**conf, "memory": [m.mem for m in CLUSTER]}))
    assert oppcost_main(argv) == 0
    assert "other settings" not in capsys.readouterr().err
    assert oppcost_main([*argv, "--memory", "64,64,64,64,64,64"]) == 2
    assert "--memory" in capsys.readouterr().err
    # another table's own rerun is its own settings (code review: the table as_now gave, a tuple, never equalled the
    # stored list, and every run of another table was refused on its rerun)
    other = tmp_path / "oc64"
    argv64 = ["--executions", "1", "--jobs", "1", "--duration", "400", "--memory", "64,64,64,64,64,64",
              "--out", str(other)]
    assert oppcost_main(argv64) == 0
    assert oppcost_main(argv64) == 0
    assert "other settings" not in capsys.readouterr().err


def test_oppcost_memory_table_replaces_the_guess_and_is_recorded(tmp_path, capsys) -> None:
    """``--memory`` sets Table 1's memories (speeds kept) for the study and ``--explain``; bad values name the
    machine or the count."""
    out = tmp_path / "oc"
    argv = ["--executions", "1", "--jobs", "1", "--duration", "400", "--out", str(out)]
    assert oppcost_main([*argv, "--memory", "256,128,128,64,64,32"]) == 0
    cluster = json.loads((out / "config.json").read_text())["cluster"]
    assert [m["mem_mb"] for m in cluster] == [256, 128, 128, 64, 64, 32]
    assert [m["speed"] for m in cluster] == [m.speed for m in CLUSTER]
    capsys.readouterr()
    assert oppcost_main(["--explain", "3", "--duration", "300", "--memory", "64,64,64,64,64,64"]) == 0
    assert "cluster memory 384 MB (64, 64, 64, 64, 64, 64)" in capsys.readouterr().out
    for value, why in (("128,128", "needs 6 values"), ("128,128,64,64,32,x", "p1b: 'x' is not a number"),
                       ("128,128,64,0,32,32", "ppb: memory must be a positive number")):
        with pytest.raises(SystemExit) as exc:
            oppcost_main([*argv, "--memory", value])
        assert exc.value.code == 2
        assert why in capsys.readouterr().err


def test_a_finished_process_gives_its_memory_back() -> None:
    """004 Sec. 2: lm is the memory of the processes on the machine now, so one leaving can end the paging."""
    # 10 MB machine. p0 (6 MB, work 1) and p1 (3 MB, work 3) share it at 1/2 (lm 9 < 10): p0 ends at t=2, p1 has
    # 2 left. p2 (3 MB, work 1) arrives at t=2: lm = 6 < 10, so both run at 1/2: p2 ends at 4, p1 (1 left) at 5.
    # (Were p0's 6 MB kept, lm = 12 and both would crawl at 1/20.)
    stream = [spec(0, 1.0, mem=6), spec(1, 3.0, mem=3), spec(2, 1.0, mem=3, arrival=2.0)]
    res = simulate(stream, (Machine(1, 10),), PVM(), seed=0)
    assert res.completions == pytest.approx({0: 2.0, 1: 5.0, 2: 4.0})
    assert res.slowdowns == pytest.approx([2.0, 5 / 3, 2.0])


def test_a_completion_is_reached_at_its_exact_time_not_approached() -> None:
    """004 Sec. 2: a process alone on a machine of speed s runs at s, so work w ends exactly at w / s."""
    # speed 1/2, work 1: v = 0.5 * 2 = 1.0 exactly at t = 2 (stepping by the work left instead of the time left
    # only creeps up on it: t = 1, 1.5, 1.75, ... and stops 1e-9 short)
    res = simulate([spec(0, 1.0)], (Machine(0.5, 100),), PVM(), seed=0)
    assert res.completions[0] == 2.0 and res.makespan == 2.0
    # thrashing (beta 10, one process filling the machine): rate 1/10, work 1 -> exactly t = 10
    res = simulate([spec(0, 1.0, mem=10)], (Machine(1, 10),), PVM(), seed=0)
    assert res.completions[0] == 10.0


def test_balancing_intervals_stay_on_the_grid_after_an_idle_stretch() -> None:
    """004 Sec. 4/5: Mosix balances every interval (1 s), at t = 1, 2, ...: waking up at t = 1.5 keeps t = 2."""
    # Two speed-1 machines. p0 (work 4) alone on node 0: the t=1 interval moves nothing (relative load 1 vs 1
    # after), the simulator sleeps. p1 (work 2) arrives at t=1.5 on node 0: both at 1/2. At t=2 p0 has
    # 4 - 1.5 - 0.25 = 2.25 left, p1 1.75; node 0 (load 2) sends its oldest (p0) to node 1: ends 4.25, p1 3.75.
    # (A tick at 1.5 + 1 = 2.5 would give 4.5 and 4.0.)
    ms = (Machine(1, 100), Machine(1, 100))
    res = simulate([spec(0, 4.0), spec(1, 2.0, arrival=1.5)], ms, Mosix(window=1), seed=0)
    assert res.migrations == 1
    assert res.completions == pytest.approx({0: 4.25, 1: 3.75})


def test_balancing_intervals_follow_each_other_every_interval() -> None:
    """004 Sec. 4/5: after an interval that moved a process, the next one comes one interval later."""
    # Three speed-1 machines, three work-3 processes from node 0 (rate 1/3). t=1: node 0 (load 3) sends p0 to
    # node 1 (each has 8/3 left). t=2: node 0 (p1, p2 at 1/2: 13/6 left each) sends p1 to node 2.
    # p0 ends at 1 + 8/3 = 11/3, p1 and p2 at 2 + 13/6 = 25/6. (A second interval at t=3 would give 14/3.)
    ms = (Machine(1, 100), Machine(1, 100), Machine(1, 100))
    res = simulate([spec(0, 3.0), spec(1, 3.0), spec(2, 3.0)], ms, Mosix(window=2), seed=0)
    assert res.migrations == 2
    assert res.completions == pytest.approx({0: 11 / 3, 1: 25 / 6, 2: 25 / 6})


def test_migration_time_grows_with_the_processs_memory() -> None:
    """Sec. 5 (004 ignores migration cost; our extension): transit = migration_fixed + migration_per_mb * mem."""
    # As test_mosix_migration_and_its_cost, with 4 MB processes and 0.25 s/MB: p0 moves at t=1 with 1.5 left,
    # is in transit 1 s, ends at 2 + 1.5 = 3.5; p1, alone from t=1 with 1.5 left, at 2.5.
    ms = (Machine(1, 100), Machine(1, 100))
    res = simulate([spec(0, 2.0, mem=4), spec(1, 2.0, mem=4)], ms, Mosix(window=1), seed=3, migration_per_mb=0.25)
    assert res.migrations == 1
    assert res.completions == pytest.approx({0: 3.5, 1: 2.5})


def test_an_interval_whose_window_missed_the_idle_node_is_followed_by_another() -> None:
    """004 Sec. 4: Mosix nodes see a random window each interval; a miss must not end the balancing."""
    # Three speed-1 machines: p0, p1 (work 2) on node 0, p2 (work 100) on node 1, node 2 idle. With window 1 and
    # seed 0, node 0 sees the busy node 1 at t=1 (no move) and node 2 at t=2: p0 moves with 1 left, p1 has 1 left,
    # both end at 3. (Sleeping after t=1 as if no window could ever move anything: no move, both end at 4.)
    ms = (Machine(1, 100), Machine(1, 100), Machine(1, 100))
    res = simulate([spec(0, 2.0), spec(1, 2.0), spec(2, 100.0, origin=1)], ms, Mosix(window=1), seed=0)
    assert res.migrations == 1
    assert res.completions == pytest.approx({0: 3.0, 1: 3.0, 2: 100.0})
