"""``vcemu replay``'s per-job comparison: each job's live stretch against its simulated one, over every job that
finished both ways and over the jobs long enough that the live run's start-ups hardly touch them."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.metrics import JobResult
from coordinator.model import JobSpec, JobState
from coordinator.replay import per_job, per_job_line, stretch_plot


def _spec(job: str, work: float) -> JobSpec:
    return JobSpec(job, 0.0, 1, 1.0, 0.1, work)


def _done(job: str, work: float, flow: float) -> JobResult:
    return JobResult(job, 0.0, 0.0, flow, work, JobState.DONE, 1.0, 0, 0)


def _case() -> tuple[list[JobSpec], dict[str, JobResult], dict[str, JobResult]]:
    # work, live flow, simulated flow: stretches 1.1/1.0, 2.0/2.0, 0.9/1.0 (long), 20/2 (short), and two jobs not
    # compared: one still running live, one that failed live (it has an end and a stretch, but was not done).
    rows = {"a": (1000.0, 1100.0, 1000.0), "b": (500.0, 1000.0, 1000.0), "c": (2000.0, 1800.0, 2000.0),
            "d": (3.0, 60.0, 6.0)}
    specs = [_spec(j, w) for j, (w, _, _) in rows.items()] + [_spec("e", 700.0), _spec("f", 700.0)]
    live = {j: _done(j, w, lf) for j, (w, lf, _) in rows.items()}
    live["e"] = JobResult("e", 0.0, 0.0, None, 700.0, JobState.RUNNING, 1.0, 0, 0)
    live["f"] = JobResult("f", 0.0, 0.0, 1400.0, 700.0, JobState.FAILED, 1.0, 0, 0)
    sim = {j: _done(j, w, sf) for j, (w, _, sf) in rows.items()} | {j: _done(j, 700.0, 700.0) for j in "ef"}
    return specs, live, sim


def test_per_job_compares_the_jobs_finished_both_ways_and_the_long_ones_apart() -> None:
    specs, live, sim = _case()
    got = per_job(specs, live, sim, overhead=40.0)  # long: work >= 400 trace s
    assert got["jobs"] == 4  # e did not finish live, f failed
    # relative differences 0.1, 0, 0.1, 9: median 0.1, max 9
    assert got["median_rel_diff"] == pytest.approx(0.1) and got["max_rel_diff"] == pytest.approx(9.0)
    assert got["long_work_s"] == pytest.approx(400.0) and got["long_jobs"] == 3
    assert got["long_median_rel_diff"] == pytest.approx(0.1) and got["long_max_rel_diff"] == pytest.approx(0.1)
    line = per_job_line(got)
    assert line == ("per job, live against simulated stretch: a median relative difference of 10.0% (max 900.0%) "
                    "over 4 jobs; 10.0% (max 10.0%) over the 3 jobs of work >= 400 trace s (10x the start-up overhead)")


def test_per_job_says_when_every_job_or_none_is_long() -> None:
    specs, live, sim = _case()
    every = per_job(specs, live, sim, overhead=0.0)
    assert every["long_jobs"] == every["jobs"] == 4 and every["long_median_rel_diff"] == every["median_rel_diff"]
    assert per_job_line(every).endswith("over 4 jobs, each of work >= 0 trace s (10x the start-up overhead)")
    none = per_job(specs, live, sim, overhead=1000.0)
    assert none["long_jobs"] == 0 and none["long_median_rel_diff"] is None and none["long_max_rel_diff"] is None
    assert per_job_line(none).endswith("over 4 jobs; none has a work of 10x the start-up overhead "
                                       "(10,000 trace s) or more")
    nothing = per_job(specs, {}, sim, overhead=10.0)
    assert nothing["jobs"] == 0 and nothing["median_rel_diff"] is None and nothing["max_rel_diff"] is None
    assert per_job_line(nothing) == "per job: no job was done both live and in the simulation"
    one = per_job(specs[:1], live, sim, overhead=0.0)
    assert per_job_line(one) == ("per job, live against simulated stretch: a median relative difference of 10.0% "
                                 "(max 10.0%) over 1 job, each of work >= 0 trace s (10x the start-up overhead)")


def test_jobs_csv_gives_a_relative_difference_only_to_jobs_done_both_ways() -> None:
    import csv
    import io

    from coordinator.replay import jobs_csv

    specs, live, sim = _case()
    rows = {r["job"]: r for r in csv.DictReader(io.StringIO(jobs_csv(specs, live, sim)))}
    assert float(rows["a"]["rel_diff"]) == pytest.approx(0.1)
    assert rows["e"]["rel_diff"] == rows["f"]["rel_diff"] == ""
    assert rows["f"]["live_state"] == "failed" and float(rows["f"]["live_stretch"]) == 2.0


def test_the_stretch_plot_is_drawn_only_when_a_job_is_compared(tmp_path: Path) -> None:
    specs, live, sim = _case()
    path = tmp_path / "stretch.png"
    stretch_plot(specs, live, sim, per_job(specs, live, sim, 40.0), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    empty = tmp_path / "none.png"
    stretch_plot(specs, {}, sim, per_job(specs, {}, sim, 40.0), empty)
    assert not empty.exists()
    # one job, or every point the same: linear axes, the diagonal still drawn (a slope, not two equal points)
    same = tmp_path / "same.png"
    stretch_plot(specs[1:2], live, sim, per_job(specs[1:2], live, sim, 40.0), same)
    assert same.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_jobs_that_failed_live_are_named_with_their_reasons() -> None:
    from coordinator.metrics import History, Transition
    from coordinator.replay import failed_line, failed_live

    t = [Transition(0.0, "a", None, JobState.PENDING), Transition(1.0, "a", JobState.PENDING, JobState.FAILED,
                                                                   reason="start failed: INVALID_ARGUMENT: cpu_need"),
         Transition(2.0, "b", None, JobState.PENDING), Transition(3.0, "b", JobState.PENDING, JobState.DONE)]
    t += [Transition(4.0 + i, f"c{i}", JobState.RUNNING, JobState.FAILED, reason="") for i in range(3)]
    failed = failed_live(History({}, t, []))
    assert failed == {"a": "start failed: INVALID_ARGUMENT: cpu_need", "c0": "", "c1": "", "c2": ""}
    assert failed_line(failed) == ("vcemu replay: 4 jobs failed in the live run: a: start failed: INVALID_ARGUMENT: "
                                   "cpu_need; c0: no reason recorded; c1: no reason recorded; and 1 more "
                                   "(metrics.json's failed_live)")
    assert failed_line({"a": "x"}) == "vcemu replay: 1 job failed in the live run: a: x"


def test_a_replay_refuses_hosts_of_more_than_a_core_a_single_process_job_would_need_more_of() -> None:
    """At --cpus-per-host 2 a job of need 1 is 2 cores, which a dgemm task (one process) cannot use: the agent refused
    each such start, and the jobs failed at their arrival, 1 ms in, without a word."""
    from dataclasses import replace

    from coordinator.replay import single_core

    specs = [_spec("a", 10.0), replace(_spec("b", 10.0), cpu_need=0.7), replace(_spec("m", 10.0), workload="modeled")]
    single_core(specs, None)
    single_core(specs, 1.0)
    single_core(specs[2:], 4.0)  # a modeled task is no process
    single_core([replace(_spec("t", 10.0), cpu_need=0.3333334)], 3.0)  # 1.0000002 cores: within the agent's 1e-6
    with pytest.raises(ValueError) as err:
        single_core(specs, 1.2)
    assert str(err.value) == ("--cpus-per-host: job a's CPU need 1 is 1.2 cores on hosts of 1.2, but its workload "
                              "(dgemm) is a single process, which uses at most 1 core: give --cpus-per-host 1 or less")
    with pytest.raises(ValueError) as err:
        single_core(specs[1:], 2.0)
    assert str(err.value).endswith("uses at most 1 core: give --cpus-per-host 1.4 or less")  # 1 / 0.7, rounded down


def test_per_job_gives_the_signed_median_too() -> None:
    """The absolute medians say how far live is from simulated, not which way; the signed medians (live - simulated)
    / simulated tell a bias (every job slower live: start-ups, CPU noise) from noise either way."""
    specs, live, sim = _case()
    got = per_job(specs, live, sim, overhead=40.0)
    # signed differences +0.1 (a), 0 (b), -0.1 (c), +9 (d): median +0.05; the long ones a, b, c: 0
    assert got["median_signed_rel_diff"] == pytest.approx(0.05)
    assert got["long_median_signed_rel_diff"] == pytest.approx(0.0)
    slower = {j: _done(j, r.work, 1.2 * r.end) for j, r in sim.items() if r.end is not None}
    faster = {j: _done(j, r.work, 0.8 * r.end) for j, r in sim.items() if r.end is not None}
    for runs, sign in ((slower, 1.0), (faster, -1.0)):
        got = per_job(specs, runs, sim, overhead=0.0)
        assert got["median_rel_diff"] == pytest.approx(0.2)  # the same either way...
        assert got["median_signed_rel_diff"] == pytest.approx(sign * 0.2)  # ...but not the signed one
    assert per_job(specs, {}, sim, overhead=10.0)["median_signed_rel_diff"] is None
