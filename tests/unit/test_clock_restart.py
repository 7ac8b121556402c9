"""A coordinator restarted on its ``--state`` on a wall clock behind the earlier run's (an NTP step back, a VM
resumed, a pod moved to a node whose clock is behind): its clock, ``time.time() - epoch``, started before the
times its state holds. A clock-review run (``vcemu coordinator --state`` restarted under ``faketime -3600s``) showed
``t=-3564.0s``, jobs that ended before they started (stretch -88.98, shown as ``-`` by ``vcemu jobs`` since its end
time was negative, bounded stretch 0.75 for a job that had waited), and FCFS starting a job submitted after the
restart before one submitted earlier (its submit time was an hour "earlier"). The clock now carries on from the
latest time the state recorded, never from before it; wall clocks are patched here, no process is started.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from coordinator.backends.live import LiveBackend
from coordinator.metrics import Transition
from coordinator.model import Host, JobSpec, JobState
from coordinator.policies import get_policy
from coordinator.service import CoordinatorServer
from coordinator.store import Store
from vcemu.v1 import coordinator_pb2 as pb

T0 = 1_800_000_000.0  # the earlier run's epoch (its wall clock at time 0)


def wall(monkeypatch: pytest.MonkeyPatch, at: float) -> None:
    monkeypatch.setattr(time, "time", lambda: at)


def earlier_run(path: str, monkeypatch: pytest.MonkeyPatch, journalled: bool = True) -> None:
    """A run begun at T0 that accepted job-00001 at t=290 s and was left at t=300 s (its clock journalled then, if
    ``journalled``)."""
    wall(monkeypatch, T0)
    store = Store(path)
    assert store.epoch() == T0
    spec = JobSpec("job-00001", 290.0, 1, 1.0, 0.1, 10.0)
    store.put_job(spec, JobState.PENDING, (), 0.0, 0.0, 0, None, None, "")
    store.add_transition(Transition(290.0, spec.id, None, JobState.PENDING, reason="submitted"))
    if journalled:
        store.put_clock(300.0)
    store.close()


def test_the_state_file_keeps_the_latest_time_of_the_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "s.db")
    earlier_run(path, monkeypatch)
    assert Store(path).load(transitions=False).clock == 300.0
    # a file written before the clock was journalled: its last transition and its jobs' times
    old = str(tmp_path / "old.db")
    store = Store(old)
    store.epoch()
    spec = JobSpec("job-00001", 5.0, 1, 1.0, 0.1, 10.0)
    store.put_job(spec, JobState.DONE, ("h0",), 0.0, 10.0, 0, 6.0, 17.5, "")
    store.add_transition(Transition(12.0, spec.id, JobState.PENDING, JobState.RUNNING, ("h0",), 1.0, "started"))
    store.close()
    assert Store(old).load(transitions=False).clock == 17.5


def test_a_backend_on_a_wall_clock_behind_carries_on_from_the_time_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    wall(monkeypatch, T0 + 310.0 - 3600.0)  # 10 s later, on a clock an hour behind
    backend = LiveBackend(epoch=T0, clock=300.0)
    try:
        assert 300.0 <= backend.now() < 301.0, backend.now()
        assert backend.clock_behind == pytest.approx(3590.0)
    finally:
        backend.close()
    wall(monkeypatch, T0 + 310.0)  # the clocks agree: the 10 s down count
    backend = LiveBackend(epoch=T0, clock=300.0)
    try:
        assert 310.0 <= backend.now() < 311.0, backend.now()
        assert backend.restart_gap == pytest.approx(10.0) and backend.clock_behind == 0.0
    finally:
        backend.close()


def test_the_progress_journal_records_the_clock_while_tasks_run() -> None:
    """With the tasks' progress, about once a second; not while no task is there (an idle coordinator wrote its
    state file every second: the last transition is as late as anything it could record then)."""
    from coordinator.backends.live import _Task

    backend = LiveBackend(epoch=time.time() - 50.0)
    seen: list[float] = []
    try:
        backend.journal = lambda *a: None
        backend.clock_journal = seen.append
        backend._journal_progress()
        assert seen == []
        backend._tasks["job-00001"] = [_Task("job-00001.0.0", "h0", 0.5)]
        backend._journal_progress()
        assert len(seen) == 1 and 50.0 <= seen[0] < 60.0
    finally:
        backend.close()


def test_a_coordinator_restarted_on_a_clock_an_hour_behind_keeps_its_times_in_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(tmp_path / "state.db")
    earlier_run(path, monkeypatch, journalled=False)  # (what main's store holds: its transitions' times)
    wall(monkeypatch, T0 + 310.0 - 3600.0)
    server = CoordinatorServer(get_policy("fcfs"), port=0, state=path)  # not started: no engine loop
    try:
        assert server.backend.now() >= 290.0, f"the clock went back to t={server.backend.now():.1f} s"
        assert "behind" in (server.restored_note or "")
        server.engine.add_hosts([Host("h0", 1.0, 1.0)])
        spec = pb.JobSpec(tasks=1, cpu_need=1.0, memory=0.1, work_seconds=10.0, workload="dgemm")
        (result,) = server.accept([pb.SubmitRequest(spec=spec)])
        assert result.job.submit_time > 290.0, "a job submitted after the restart is dated before an earlier one"
        server.drain()
        # the order every policy takes jobs in (Snapshot.in_state): the earlier submission first
        order = sorted(server.engine.jobs.values(), key=lambda r: (r.spec.submit_time, r.spec.id))
        assert [r.spec.id for r in order] == ["job-00001", result.job.job_id], "FCFS order inverted"
    finally:
        server.stop()
    # Back on a clock that is right, 100 s after the earlier run's 300: no jump forward by the hour behind.
    wall(monkeypatch, T0 + 400.0)
    again = CoordinatorServer(get_policy("fcfs"), port=0, state=path)
    try:
        assert 399.0 <= again.backend.now() < 401.0, again.backend.now()
    finally:
        again.stop()


def test_the_progress_journal_says_written_again_only_once_it_wrote(caplog: pytest.LogCaptureFixture) -> None:
    """Storage-fault review: on a state file that stayed full (or read-only), the journal's failure was followed,
    once the last job had ended, by "journal of the tasks' progress written again": with no task, nothing had been
    written, and the disk was as full as before."""
    import logging
    import sqlite3

    from coordinator.backends.live import _Task

    backend = LiveBackend(epoch=time.time())
    full = [True]

    def journal(*args: object) -> None:
        if full[0]:
            raise sqlite3.OperationalError("database or disk is full")

    try:
        backend.journal = journal
        backend._tasks["job-00001"] = [_Task("job-00001.0.0", "h0", 0.5)]
        with caplog.at_level(logging.WARNING, logger="coordinator"):
            backend._journal_progress()
            del backend._tasks["job-00001"]  # (its job ended; the disk is still full)
            backend._journal_progress()
            assert [r.getMessage() for r in caplog.records if "progress" in r.getMessage()] == [
                "journal of the tasks' progress failed (OperationalError: database or disk is full); tried again "
                "every 1 s"]
            full[0] = False
            backend._tasks["job-00002"] = [_Task("job-00002.0.0", "h0", 0.5)]
            backend._journal_progress()
            assert caplog.records[-1].getMessage() == "journal of the tasks' progress written again"
    finally:
        backend.close()
