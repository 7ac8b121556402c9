"""The job board: the jobs as the read-only calls and the metrics show them, without the engine's lock.

A burst of share changes held the engine's lock for up to 17.7 s, and ``vcemu status``, ``vcemu jobs`` and the
Prometheus scrape, which took it, waited that long or ran out of time (scale review). They now read the board."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
from prometheus_client import generate_latest

from coordinator.backends.sim import SimBackend
from coordinator.engine import Engine, JobRecord
from coordinator.exporter import CoordinatorMetrics, _MoveCounter
from coordinator.jobboard import JobBoard, JobRow
from coordinator.metrics import Transition
from coordinator.model import Host, JobSpec, JobState
from coordinator.policies import get_policy
from coordinator.service import CoordinatorServicer
from tests.unit.test_exporter import sample
from vcemu.v1 import coordinator_pb2 as pb

T = TypeVar("T")


def spec(job: str, submit: float = 0.0, tasks: int = 1, mem: float = 0.3, work: float = 60.0) -> JobSpec:
    return JobSpec(job, submit, tasks, 1.0, mem, work)


def test_rows_counts_and_running_jobs_follow_each_put() -> None:
    board = JobBoard()
    a, b = JobRecord(spec("a")), JobRecord(spec("b"))
    board.put_all([a, b])
    a.state, a.hosts, a.cpu = JobState.RUNNING, ("h0",), 0.5
    board.put(a)
    assert board.get("a") == JobRow(a.spec, JobState.RUNNING, ("h0",), 0.5, 0.0, None, None, "")
    counts, running = board.counts_and_running()
    assert [r.spec.id for r in running] == ["a"]
    assert (counts[JobState.RUNNING], counts[JobState.PENDING], counts[JobState.DONE]) == (1, 1, 0)
    a.state, a.end = JobState.DONE, 60.0
    board.put(a)
    counts, running = board.counts_and_running()
    assert running == [] and counts[JobState.DONE] == 1 and sum(counts.values()) == 2
    assert board.get("nope") is None


def test_pages_scan_in_submission_order_and_refuse_a_token_of_another_list() -> None:
    board = JobBoard()
    recs = [JobRecord(spec(f"j{i}")) for i in range(5)]
    board.put_all(recs)
    recs[3].state = JobState.RUNNING
    board.put(recs[3])  # a change keeps the job's place
    rows, end, last, more = board.page(0, "", 2)
    assert ([r.spec.id for r in rows], end, last, more) == (["j0", "j1"], 2, "j1", True)
    rows, end, last, more = board.page(end, last, 1, JobState.RUNNING)  # j2 scanned, j3 kept
    assert ([r.spec.id for r in rows], end, last, more) == (["j3"], 4, "j3", True)
    rows, end, last, more = board.page(2, "j1", 2, JobState.RUNNING)  # the limit counts the jobs kept
    assert ([r.spec.id for r in rows], end, last, more) == (["j3"], 5, "j4", False)
    rows, end, last, more = board.page(0, "", None)
    assert ([r.spec.id for r in rows], more) == ([f"j{i}" for i in range(5)], False)
    with pytest.raises(ValueError, match="is not 'j0'"):
        board.page(2, "j0", 2)
    with pytest.raises(ValueError, match="no position 9"):
        board.page(9, "j8", 2)


@pytest.mark.parametrize("policy", ["greedy-pmtn-migr", "dynmcb8", "easy"])
def test_the_board_is_the_engines_records_after_every_step(policy: str) -> None:
    """Every change a reader shows reaches the board: after each step of a run with pauses, resumes, moves, share
    changes and completions, each job's row is its record (the virtual time of a running job aside: readers take
    that from the backend's progress, as the engine's snapshots do)."""
    engine = Engine(get_policy(policy), SimBackend())
    engine.add_hosts([Host(f"h{i}", 1.0, 1.0) for i in range(3)])
    board = JobBoard.of(engine)
    jobs = [spec("a", 0.0, 2), spec("b", 1.0, 1, 0.6), spec("c", 2.0, 3, 0.5, 30.0), spec("d", 3.0, 1, 0.8, 5.0),
            spec("e", 4.0, 2, 0.2, 90.0)]
    engine.schedule_arrivals(jobs)
    steps = 0
    while engine.step():
        steps += 1
        for job, rec in engine.jobs.items():
            row = board.get(job)
            assert row is not None, job
            expected = JobRow.of(rec)
            if rec.state is JobState.RUNNING:
                row, expected = (JobRow(*(getattr(r, f) for f in ("spec", "state", "hosts", "cpu")), 0.0,
                                        r.first_start, r.end, r.message) for r in (row, expected))
            assert row == expected, (steps, job)
        assert len(board) == len(engine.jobs)
    assert steps > 5 and board.counts_and_running()[0][JobState.DONE] == len(jobs)


@contextlib.contextmanager
def held_elsewhere(lock: contextlib.AbstractContextManager) -> Iterator[None]:
    """``lock`` held by another thread for the block's length: an engine loop's turn, a poll under way."""
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            release.wait(30)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    try:
        assert held.wait(5)
        yield
    finally:
        release.set()
        thread.join(5)


def call_within(seconds: float, fn: Callable[[], T]) -> T:
    """``fn()`` on another thread; fails if it has not returned within ``seconds``."""
    out: list[T] = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"no answer within {seconds} s"
    return out[0]


def test_read_only_calls_and_the_scrape_answer_while_the_engine_loop_holds_its_lock(unstarted) -> None:
    """The engine loop holds its lock for a whole turn (here: another thread holds it for the test's length). The
    read-only calls answer at once, with every job accepted so far, and as of its last change."""
    s = unstarted
    api = CoordinatorServicer(s)
    job = pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.1, work_seconds=5, workload="modeled")
    assert all(r.code == 0 for r in s.accept([pb.SubmitRequest(spec=job) for _ in range(3)]))
    s.drain()  # two of them taken in by the engine, one still in its intake
    assert s.accept([pb.SubmitRequest(spec=job)])[0].code == 0
    with held_elsewhere(s.engine.lock):
        status = call_within(2, lambda: api.ClusterStatus(pb.ClusterStatusRequest(), None))
        assert status.jobs_by_state["pending"] == 4 and [h.name for h in status.hosts] == ["a0-h0"]
        listed = call_within(2, lambda: api.ListJobs(pb.ListJobsRequest(), None))
        assert [j.job_id for j in listed.jobs] == ["job-00001", "job-00002", "job-00003", "job-00004"]
        got = call_within(2, lambda: api.GetJob(pb.JobRef(job_id="job-00004"), None))
        assert (got.job_id, got.state) == ("job-00004", "pending")
        scraped = call_within(2, lambda: generate_latest(s.metrics.registry))
        assert b'vcemu_jobs{policy="fcfs",state="pending"} 4.0' in scraped


def test_a_pause_counts_as_a_preemption_once_its_plan_is_done_unless_it_was_a_migration() -> None:
    """The scrape no longer takes the engine's lock to see a plan whole: a pause that the same plan turns into a
    migration (its resume elsewhere) must never show as a preemption taken back, which a counter cannot do."""
    c = _MoveCounter("greedy-pmtn-migr")

    def counts() -> tuple[float, float]:
        pre, mig = (next(iter(f.samples)).value for f in c.collect())
        return pre, mig

    c.observe(Transition(1.0, "a", JobState.RUNNING, JobState.PAUSED, ("h0",), 0.0, "pause"))
    c.observe(Transition(1.0, "b", JobState.RUNNING, JobState.PAUSED, ("h1",), 0.0, "pause"))
    assert counts() == (0, 0)  # mid-plan: either pause may yet be a migration
    c.observe(Transition(1.0, "a", JobState.PAUSED, JobState.RUNNING, ("h1",), 1.0, "move"))
    assert counts() == (0, 1)
    c.plan_done()
    assert counts() == (1, 1)  # b stayed paused: a preemption
    c.observe(Transition(2.0, "b", JobState.PAUSED, JobState.RUNNING, ("h2",), 1.0, "resume"))  # a later decision
    c.plan_done()
    assert counts() == (1, 1)


def test_the_engine_tells_the_counter_when_a_plan_is_done() -> None:
    engine = Engine(get_policy("greedy-pmtn"), SimBackend())
    engine.add_hosts([Host("h0", 1.0, 1.0), Host("h1", 1.0, 1.0)])
    m = CoordinatorMetrics(engine, "greedy-pmtn")
    engine.run([spec("a", 0.0, 1, 0.3, 60.0), spec("b", 2.0, 1, 0.3, 3.0), spec("c", 3.0, 1, 0.8, 30.0)])
    assert sample(m, "vcemu_preemptions_total", policy="greedy-pmtn") == 1
