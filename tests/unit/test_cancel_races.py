"""A cancel against a poll that sees its job end, and what a cancel answers when the state file cannot take it
(code review of session 42's fixes)."""
from __future__ import annotations

import sqlite3
import threading

from coordinator.model import JobSpec, JobState
from coordinator.plan import Plan, Start
from coordinator.policies import get_policy
from coordinator.service import CoordinatorServer, CoordinatorServicer
from tests.unit.scripted_agent import TableAgent, backend_on, engine_on
from tests.unit.test_service_races import _Ctx, _register
from vcemu.v1 import coordinator_pb2 as pb
from workloads import modeled


def test_a_poll_that_runs_as_the_cancel_stops_the_job_does_not_lose_its_completion() -> None:
    """Engine.cancel looked at the last poll's reports (backend lock taken, let go), then backend.stop() (taken
    again). The loop's poll needs only the backend's lock: run in between, it saw the job's tasks done, forgot them
    and reported DONE; the cancel then recorded the finished job CANCELLED and the loop dropped the DONE report.
    Forced here: the task ends and a poll runs (its own thread) as the cancel enters stop()."""
    x = TableAgent("x", ("h0",))
    with backend_on(x) as backend:
        engine = engine_on(backend)
        engine.arrive(JobSpec("a", 0.0, 1, 0.1, 0.01, 100.0, modeled.NAME))
        engine.apply(Plan((Start("a", ("h0",), 0.1),)))
        stop, polled, polls = backend.stop, [], []

        def a_poll_then_stop(job: str) -> None:
            x.finish("a/0")
            t = threading.Thread(target=lambda: polled.extend(backend.poll()), daemon=True)
            polls.append(t)
            t.start()
            t.join(0.5)  # (blocks if the cancel holds the backend's lock: the poll comes after the stop then)
            stop(job)

        backend.stop = a_poll_then_stop  # type: ignore[method-assign]
        rec = engine.cancel("a")
        backend.stop = stop  # type: ignore[method-assign]
        polls[0].join(5)
        assert not polls[0].is_alive()
        # The poll came after the stop, which took the job's tasks: it reports nothing of the job, cancelled first.
        assert rec.state is JobState.CANCELLED and [r for r in polled if r.job == "a"] == []


def test_a_cancel_of_a_job_done_but_not_yet_written_is_not_answered_cancelled(tmp_path, monkeypatch) -> None:
    """A job done while the state file cannot take it (a full disk): `vcemu cancel` of it (which changes
    nothing) was refused UNAVAILABLE "job ... is cancelled, but the state file cannot record it now"; it is done.
    (Refused as done is right: "cancel again to know" must try the write again.)"""
    s = CoordinatorServer(get_policy("greedy"), port=0, state=str(tmp_path / "s.db"))  # (not started)
    svc = CoordinatorServicer(s)
    try:
        svc.RegisterAgent(_register("A"), _Ctx())
        (res,) = s.accept([pb.SubmitRequest(spec=pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.1, work_seconds=10))])
        job = res.job.job_id
        s.drain()

        def full(*_a, **_k):  # type: ignore[no-untyped-def]
            raise sqlite3.OperationalError("database or disk is full")

        monkeypatch.setattr(s.store, "put_job", full)
        with s.engine.lock:
            s.engine._finish(s.engine.jobs[job], JobState.DONE, "completed")
        assert job in s.unsaved
        try:
            answer = svc.Cancel(pb.JobRef(job_id=job), _Ctx()).state
        except RuntimeError as exc:
            answer = str(exc)
        assert "is cancelled" not in answer, "a done job is said cancelled"
        assert answer == "done" or "is done, but the state file" in answer
    finally:
        s.stop(grace=0)
