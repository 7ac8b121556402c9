"""``vcemu replay`` after a user review: a live run cut off by ``--timeout`` says so and is scored up to the cut-off
beside the simulation of the whole segment; jobs.csv; the start-up overhead warning; the ``trace`` argument's errors;
Ctrl-C before the cluster starts; ``--help``. The live runs here have one agent registered at an address that answers
nothing (as in test_replay_inputs): no job makes progress, so every such run is cut off by its ``--timeout``."""

from __future__ import annotations

import csv
import json
import os
import signal
import time
from pathlib import Path

import grpc
import pytest

from coordinator.metrics import History, Transition
from coordinator.model import JobSpec, JobState
from coordinator.replay import _parse, _replay_live, replay_main, score
from tests.unit.test_cli_errors import run

JOB = {"submit_time": 0, "tasks": 1, "cpu_need": 1.0, "memory": 0.1, "work": 60}


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    import coordinator.servers

    def started(*_a, **_k):
        raise AssertionError("the cluster was started")

    monkeypatch.setattr(coordinator.servers, "start_local_cluster", started)


def _live(tmp_path: Path, specs: list[JobSpec], *args: str) -> tuple[int, Path]:
    """(exit status, results folder) of a live replay of ``specs`` on a coordinator whose one agent never
    answers, cut off by ``--timeout``."""
    from coordinator.policies import get_policy
    from coordinator.service import CoordinatorServer
    from tests.unit.test_service import register
    from vcemu.v1 import coordinator_pb2_grpc as pb_grpc

    a = _parse(["t.jsonl", "--policy", "greedy", "--json", "--out", str(tmp_path), *args])
    server = CoordinatorServer(get_policy("greedy"), port=0, compression=a.compress).start()
    d = tmp_path / "run"
    d.mkdir()
    try:
        with grpc.insecure_channel(server.address) as channel:
            register(pb_grpc.CoordinatorStub(channel))
        code = _replay_live(a, specs, 0, server, lambda: None, d, time.monotonic())
    finally:
        server.stop()
    return code, d


@pytest.mark.timeout(60)
def test_a_timed_out_replay_says_so_and_simulates_the_whole_segment(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Review: a replay cut off by --timeout printed its table as if finished (exit 1, empty stderr), and the
    simulated column had only the jobs that had arrived live ("jobs 6 6" of 8)."""
    specs = [JobSpec("a", 0.0, 1, 1.0, 0.1, 600.0), JobSpec("b", 5000.0, 1, 1.0, 0.1, 600.0)]
    code, d = _live(tmp_path, specs, "--compress", "10", "--timeout", "2")
    cap = capsys.readouterr()
    assert code == 1
    assert ("vcemu replay: the live run timed out after 2 s (--timeout): 0 of 2 jobs completed (1 arrived)"
            in cap.err), cap.err
    out = json.loads(cap.out.strip().splitlines()[-1])
    assert out["timed_out"] is True and out["jobs"] == 2 and out["arrived"] == 1
    assert out["sim"]["jobs"] == out["sim"]["completed"] == 2  # the whole segment
    assert out["live"]["jobs"] == 2 and out["live"]["completed"] == 0
    assert 0.0 <= out["live"]["utilisation"] <= 1.0
    metrics = json.loads((d / "metrics.json").read_text())
    assert metrics["sim"]["jobs"] == 2
    rows = list(csv.DictReader((d / "jobs.csv").open()))
    assert [r["job"] for r in rows] == ["a", "b"]
    assert rows[1]["live_state"] == "not arrived" and rows[1]["live_end"] == ""
    assert rows[0]["live_end"] == "" and float(rows[0]["live_submit"]) == pytest.approx(0.0, abs=1e-6)
    assert rows[1]["sim_state"] == "done" and float(rows[1]["sim_submit"]) == 5000.0
    assert float(rows[1]["sim_end"]) == pytest.approx(5600.0)
    # Said before the wait (the simulation runs first): 5,600 trace s at 10x is 561 s of live run.
    note = ("vcemu replay: warning: the simulated run ends at 5,600 trace s (93 min): about 9 min of live run at "
            "--compress 10, past --timeout 2 s, where it will be cut off; --timeout 710 lets it end")
    assert note in cap.err and cap.err.index(note) < cap.err.index("the live run timed out"), cap.err
    assert out["sim_end_s"] == pytest.approx(5600.0) and out["expected_wall_s"] == pytest.approx(561.0)
    # a's start was a plan carried out (refused by the agent that never answers), timed from its decision
    assert out["live_plans"]["count"] >= 1 and out["live_plans"]["median_s"] > 0.0, out["live_plans"]
    assert metrics["live_plans"] == out["live_plans"]
    # No job finished live: none is compared, and there is no per-job plot.
    assert out["per_job"]["jobs"] == 0 and out["per_job"]["median_rel_diff"] is None
    assert not (d / "stretch.png").exists()


def test_a_replay_past_its_timeout_is_told_what_lets_it_end() -> None:
    """An HPC2N week's first 20 jobs end at 410,527 trace s in simulation: at the default 60x and 600 s the live run
    ran 10 minutes to be cut off with none of them done, and said so only then."""
    from coordinator.replay import timeout_note

    note = timeout_note(410527.3, 60.0, 600.0, median_work=20000.0)
    assert note == ("vcemu replay: warning: the simulated run ends at 410,527 trace s (114.0 h): about 114 min of live "
                    "run at --compress 60, past --timeout 600 s, where it will be cut off; --compress 860 or "
                    "--timeout 8600 lets it end")
    # 860 x 1 s of start-up per job against 20,000 s of median work: 4%, under the overhead warning's 10%. Jobs of
    # 5,000 s would pay 17%: --compress is then not suggested.
    assert "--compress 860" not in (timeout_note(410527.3, 60.0, 600.0, median_work=5000.0) or "")
    assert timeout_note(410527.3, 60.0, 600.0, median_work=5000.0) is not None
    assert timeout_note(410527.3, 860.0, 600.0, median_work=20000.0) is None  # 478 s: within 80% of --timeout
    # 584 s of 600: the live run's start-ups and other costs may well take it past (review).
    assert timeout_note(35000.0, 60.0, 600.0, median_work=1.0) == (
        "vcemu replay: warning: the simulated run ends at 35,000 trace s (9.7 h): about 10 min of live run at "
        "--compress 60, close to --timeout 600 s: it may be cut off; --timeout 740 lets it end")
    assert timeout_note(28740.0, 60.0, 600.0, median_work=1.0) is None  # 480 s
    assert "past --timeout 600 s" in (timeout_note(36000.0, 60.0, 600.0, median_work=1.0) or "")  # 601 s
    # Large values as typed, not 1.3e+06.
    assert "--timeout 1300000 lets it end" in (timeout_note(6e7, 60.0, 600.0, median_work=1.0) or "")


def test_the_suggested_values_are_rounded_up_to_two_digits() -> None:
    from coordinator.replay import _span, _up

    assert [_up(x) for x in (855.3, 8553.0, 100.0, 0.51, 7.0)] == [860.0, 8600.0, 100.0, 0.51, 7.0]
    assert [_span(x) for x in (59.4, 600.0, 7200.0, 410527.0)] == ["59 s", "10 min", "2.0 h", "114.0 h"]


@pytest.mark.timeout(60)
def test_a_large_start_up_overhead_is_warned_about(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review: at a high --compress the live run was up to 15x off its simulation without a word: each task's
    start-up (about a second of real time) costs K seconds of the trace. With no job to measure it on (none
    finished here) it is estimated as K x 1 s: 30 s of 60 s jobs."""
    specs = [JobSpec("a", 0.0, 1, 1.0, 0.1, 60.0), JobSpec("b", 90000.0, 1, 1.0, 0.1, 60.0)]
    code, _ = _live(tmp_path, specs, "--compress", "30", "--timeout", "1.5")
    err = capsys.readouterr().err
    assert code == 1
    warning = [line for line in err.splitlines() if "start-up overhead" in line]
    assert len(warning) == 1, err
    assert "30 trace s per job (estimated as 30 x 1 s" in warning[0] and "50% of the jobs' median work" in warning[0]
    assert "--compress 6 or less" in warning[0], warning[0]


def test_no_overhead_warning_when_start_up_is_small_next_to_the_work() -> None:
    from coordinator.replay import overhead_warning

    specs = [JobSpec("a", 0.0, 1, 1.0, 0.1, 3600.0)]
    assert overhead_warning(60.0, "estimated", specs, 60.0) is None
    assert overhead_warning(600.0, "estimated", specs, 60.0) is not None


def test_the_live_score_is_cut_off_with_its_span_and_utilisation_at_most_1() -> None:
    """The review's utilisation 1.157: the span ended at the last completion while the jobs still running at the
    cut-off added used time after it. Scored up to the cut-off, used time and span cover the same interval."""
    from coordinator.replay import close_at

    specs = {s.id: s for s in (JobSpec("a", 0.0, 1, 1.0, 0.1, 10.0), JobSpec("b", 20.0, 1, 1.0, 0.1, 1000.0),
                               JobSpec("c", 60.0, 1, 1.0, 0.1, 1000.0))}
    r = JobState.RUNNING
    history = History(specs, [
        Transition(0.0, "a", None, JobState.PENDING), Transition(0.0, "a", JobState.PENDING, r, ("h0",), 1.0),
        Transition(10.0, "a", r, JobState.DONE, ("h0",), 1.0),
        Transition(20.0, "b", None, JobState.PENDING), Transition(20.0, "b", JobState.PENDING, r, ("h0",), 1.0),
        Transition(60.0, "c", None, JobState.PENDING), Transition(60.0, "b", r, r, ("h0",), 0.5),
        Transition(60.0, "c", JobState.PENDING, r, ("h0",), 0.5),
    ])
    m = score(close_at(history, 100.0), 1.0, 8.0)
    assert m["span_s"] == 100.0 and m["completed"] == 1 and m["jobs"] == 3
    assert m["utilisation"] == pytest.approx((10 + 40 + 40) / 100)  # idle 10..20
    # uncut, the span ends at a's completion (10 s), and metrics.utilisation integrates no further than that
    assert score(history, 1.0, 8.0)["utilisation"] == pytest.approx(1.0)


def test_a_missing_trace_is_named_as_the_trace_argument(tmp_path: Path, no_cluster: None,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Review: "[Errno 2] No such file or directory: 'missing.jsonl'" did not name the argument."""
    missing = tmp_path / "missing.jsonl"
    code, _, err = run([str(missing), "--policy", "greedy", "--out", str(tmp_path / "out")], capsys, replay_main)
    assert code == 2 and err == f"vcemu replay: error: trace: {missing}: no such file\n", err
    code, _, err = run([str(tmp_path), "--policy", "greedy", "--out", str(tmp_path / "out")], capsys, replay_main)
    assert code == 2 and err == f"vcemu replay: error: trace: {tmp_path}: a directory, not a job file or trace\n", err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv", [["simulate", "--policy", "greedy"], ["submit", "--file"]])
def test_simulate_and_submit_name_a_missing_job_file_in_a_few_words(argv: list[str], tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Docs review: they printed "[Errno 2] No such file or directory: 'x'", where replay named the file and why."""
    from coordinator.cli import main

    missing = tmp_path / "missing.jsonl"
    for path, why in ((missing, "no such file"), (tmp_path, "a directory, not a job file or trace")):
        try:
            code = main([*argv, str(path)])
        except SystemExit as exit_:  # (submit refuses by exiting, simulate returns its status)
            code = exit_.code  # type: ignore[assignment]
        err = capsys.readouterr().err
        assert code == 2 and err == f"vcemu {argv[0]}: {path}: {why}\n", err


def test_ctrl_c_while_the_trace_is_read_is_one_line(tmp_path: Path, no_cluster: None,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Review: Ctrl-C in the first seconds (numpy/numba importing, the trace being read) printed a KeyboardInterrupt
    traceback, not the one "interrupted" line (exit 130) it prints once the cluster is up."""
    import coordinator.replay

    def interrupted(_a):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)
        raise AssertionError("SIGINT did not interrupt")

    monkeypatch.setattr(coordinator.replay, "load_segment", interrupted)
    trace = tmp_path / "t.jsonl"
    trace.write_text(json.dumps({**JOB, "id": "a"}) + "\n")
    try:
        code = replay_main([str(trace), "--policy", "greedy", "--out", str(tmp_path / "out")])
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped replay_main (a traceback)")
    err = capsys.readouterr().err
    assert code == 130
    assert err == "vcemu replay: interrupted; no agent was started\n", err  # (it said they "are stopped")


def test_help_says_what_the_default_cpus_per_host_is_and_the_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    """Review: "default: 60% of the box" -- it is 60% of the machine shared out across the hosts, as up says."""
    code, out, _ = run(["--help"], capsys, replay_main)
    text = " ".join(out.split())
    assert code == 0
    assert "60% of the machine shared out" in text and "of the box" not in text
    assert "exit status: 0 every job" in text and "1 the live run timed out" in text and "130 interrupted" in text


def test_the_progress_bar_shows_the_note_at_every_poll() -> None:
    """``follow_jobs``' note (replay's trace clock against the simulation's end) is set on the bar at each poll,
    before its count moves."""
    import threading

    from coordinator.experiments import follow_jobs

    class Bar:
        def __init__(self) -> None:
            self.calls: list[tuple[str, object]] = []

        def set_postfix_str(self, text: str) -> None:
            self.calls.append(("note", text))

        def update(self, n: int) -> None:
            self.calls.append(("update", n))

        def close(self) -> None:
            self.calls.append(("close", None))

    class Engine:
        lock = threading.Lock()
        jobs: dict[str, object] = {}  # no record: nothing finished
    ticks = iter(range(100))
    polls = iter(range(100))
    bar = Bar()
    done = follow_jobs(Engine(), bar, lambda finished: next(polls) >= 2, time.monotonic() + 60.0,  # type: ignore[arg-type]
                       poll_s=0.0, note=lambda: f"trace {next(ticks)} s")
    assert done == 0
    assert bar.calls == [("note", "trace 0 s"), ("update", 0), ("note", "trace 1 s"), ("update", 0),
                         ("note", "trace 2 s"), ("update", 0), ("close", None)]

    def interrupted(finished: int) -> bool:  # Ctrl-C during a poll: the bar is closed before the line that says so
        raise KeyboardInterrupt

    bar = Bar()
    with pytest.raises(KeyboardInterrupt):
        follow_jobs(Engine(), bar, interrupted, time.monotonic() + 60.0, poll_s=0.0)  # type: ignore[arg-type]
    assert bar.calls == [("update", 0), ("close", None)]


@pytest.mark.timeout(60)
def test_a_simulation_that_fails_ends_the_replay_before_any_job_arrives(tmp_path: Path, monkeypatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """The simulation now runs before the live run: one that fails (a policy's or the engine's error; the trace's
    checks passed) ends the replay at once with one line and exit status 1, not a traceback after the live run
    (review)."""
    import coordinator.experiments
    from coordinator.warmup import warm_kernels

    def broken(*_a, **_k):  # type: ignore[no-untyped-def]
        raise ValueError("the policy broke")

    warm_kernels()  # (the coordinator warms them with simulate too, once per process: not with the broken one)
    monkeypatch.setattr(coordinator.experiments, "simulate", broken)
    specs = [JobSpec("a", 0.0, 1, 1.0, 0.1, 600.0)]
    t0 = time.monotonic()
    code, d = _live(tmp_path, specs, "--compress", "10", "--timeout", "30")
    err = capsys.readouterr().err
    assert code == 1
    assert (f"vcemu replay: the simulation failed: ValueError: the policy broke; nothing was replayed, and the run's "
            f"folder {d} keeps the agents' and the coordinator's logs") in err, err
    assert time.monotonic() - t0 < 15, "it waited for the live run"


def test_plan_times_pair_each_plan_with_the_decision_before_it() -> None:
    """A plan's time runs from the end of its decision to the end of its application; a decision with no action
    (no plan carried out, so no plan listener call) is replaced by the next one, and a plan listener call with no
    decision mark is not counted."""
    from coordinator.replay import PlanTimes

    clock = iter([10.0, 10.5, 20.0, 30.0, 33.0])
    times = PlanTimes(clock=lambda: next(clock))
    times.decided(0.001)  # 10.0
    times.applied()  # 10.5: 0.5 s
    times.applied()  # no decision mark: not counted
    times.decided(0.001)  # 20.0, an empty plan: no applied() follows
    times.decided(0.001)  # 30.0
    times.applied()  # 33.0: 3 s
    assert times.seconds == [0.5, 3.0]
    assert times.summary(wall=10.0) == {"count": 2, "median_s": 1.75, "p99_s": pytest.approx(2.975), "wall_share": 0.35}
    assert PlanTimes().summary(wall=10.0) == {"count": 0, "median_s": None, "p99_s": None, "wall_share": 0.0}
    hundred = PlanTimes()
    hundred.seconds = [float(i) for i in range(1, 101)]
    assert hundred.summary(wall=1e4)["p99_s"] == pytest.approx(99.01)  # as decision_p99's: not the largest, 100


def test_plan_times_on_an_engine_time_only_the_plans_it_carries_out() -> None:
    """Wired to an engine's listeners as replay wires them: two jobs under greedy are four decisions (two arrivals,
    two ends) and two plans (the starts); the ends change nothing, so they are not timed."""
    from coordinator.backends.sim import SimBackend
    from coordinator.engine import Engine
    from coordinator.experiments import homogeneous_hosts
    from coordinator.policies import get_policy
    from coordinator.replay import PlanTimes

    engine = Engine(get_policy("greedy"), SimBackend(), homogeneous_hosts(1))
    times = PlanTimes()
    decisions: list[float] = []
    engine.decision_listeners += [times.decided, decisions.append]
    engine.plan_listeners.append(times.applied)
    engine.run([JobSpec("a", 0.0, 1, 1.0, 0.1, 10.0), JobSpec("b", 100.0, 1, 1.0, 0.1, 10.0)])
    assert len(decisions) == 4 and len(times.seconds) == 2 and all(s >= 0.0 for s in times.seconds)


def test_plans_that_take_much_of_the_live_run_are_warned_about() -> None:
    """At --compress 600 a DYNMCB8-ASAP-PER replay of an HPC2N week's first 20 jobs spent 34% of its wall time
    carrying out plans (341 plans, median 0.76 s, up to 3 s, on 4 hosts of a 2-core VM; the policy's 600-s period is
    1 s of wall time): it had 394 preemptions and a mean stretch of 16.2 against the simulation's 126 and 3.5, and
    said nothing (a run before the warning: 449 and 20.2). The figures here are illustrative."""
    from coordinator.replay import plans_warning

    plans = {"count": 58, "median_s": 1.2, "p99_s": 2.9, "wall_share": 0.62}
    assert plans_warning(plans, 600.0, sim_end=20000.0, timeout=600.0) == (
        "vcemu replay: warning: carrying out the policy's 58 plans took 62% of the live run's wall time (median "
        "1.20 s, 720 trace s at --compress 600), while the jobs they stop and start do not progress: the live column "
        "measures the agents' process stops and starts as much as the policy; --compress 96 or less brings it near "
        "10%")
    # At 96x the HPC2N run's 410,527 trace s are 71 min: past the default --timeout, so that is said too (review).
    assert plans_warning(plans, 600.0, sim_end=410527.0, timeout=600.0).endswith(  # type: ignore[union-attr]
        "--compress 96 or less brings it near 10% (with --timeout 5400: about 71 min)")
    assert plans_warning({**plans, "wall_share": 0.2}, 600.0, 20000.0, 600.0) is None
    assert plans_warning({**plans, "count": 4}, 600.0, 20000.0, 600.0) is None  # a stuck start says nothing of K
    assert plans_warning({"count": 0, "median_s": None, "p99_s": None, "wall_share": 0.0}, 600.0, 0.0, 600.0) is None
