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
