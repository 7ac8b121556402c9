"""A pending job that the hosts now registered could never run says so (its message, one warning), and stops
saying so once hosts that can hold it are back (live review: restarted on its state file with fewer hosts, a
restored job stayed pending for the whole session with no word, while submitting it again was refused)."""

from __future__ import annotations

import logging

import pytest

from coordinator.backends.sim import SimBackend
from coordinator.engine import Engine
from coordinator.model import Host, JobSpec, JobState
from coordinator.policies import get_policy

HOSTS = [Host(f"h{i}") for i in range(4)]
WIDE = JobSpec(id="wide", submit_time=0.0, tasks=4, cpu_need=1.0, mem=0.7, work=10.0)


def test_a_pending_job_the_hosts_cannot_hold_says_so_until_they_can(caplog: pytest.LogCaptureFixture) -> None:
    engine = Engine(get_policy("greedy"), SimBackend(), HOSTS)
    engine.arrive(WIDE)  # accepted on 4 hosts; not started yet (no step)
    with caplog.at_level(logging.WARNING, logger="vcemu.engine"):
        engine.lose_hosts(["h2", "h3"], "agent lost")
        engine.lose_hosts(["h1"], "agent lost")  # judged again: same reason with one host less, said again
    rec = engine.jobs["wide"]
    assert rec.state is JobState.PENDING
    assert rec.message == ("waits for hosts that can hold it: tasks: 4 tasks of memory 0.7 can never fit: the "
                           "cluster holds at most 1")
    said = "wide waits for hosts that can hold it: tasks: 4 tasks of memory 0.7 can never fit: the cluster holds at"
    assert caplog.messages == [f"{said} most 2", f"{said} most 1"]
    assert engine.waiting_for_hosts() == [("wide", "tasks: 4 tasks of memory 0.7 can never fit: the cluster holds at "
                                                   "most 1")]
    engine.add_hosts(HOSTS[1:])
    assert rec.message == "" and engine.waiting_for_hosts() == []
    engine.run()
    assert rec.state is JobState.DONE


def test_the_policys_own_refusal_counts_too() -> None:
    """FCFS runs one task per whole node: 4 tasks on 3 hosts never run, memory or not."""
    narrow = JobSpec(id="n", submit_time=0.0, tasks=4, cpu_need=1.0, mem=0.1, work=10.0)
    engine = Engine(get_policy("fcfs"), SimBackend(), HOSTS)
    engine.arrive(narrow)
    engine.lose_hosts(["h3"], "agent lost")
    assert engine.jobs["n"].message == ("waits for hosts that can hold it: tasks: 4 tasks need 4 whole nodes; the "
                                        "cluster has 3")


def test_registrations_set_the_note_without_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """A restart on the state file: the jobs are restored before any agent registers, and agents register one
    after another, so a job may wait only for the next one: noted, not logged (``vcemu up`` says what still waits
    once all have registered, from :meth:`Engine.waiting_for_hosts`)."""
    from coordinator.engine import JobRecord

    engine = Engine(get_policy("greedy"), SimBackend(), [])
    engine.restore([JobRecord(WIDE)])
    with caplog.at_level(logging.WARNING, logger="vcemu.engine"):
        engine.add_hosts(HOSTS[:2])
        assert engine.waiting_for_hosts() == [("wide", "tasks: 4 tasks of memory 0.7 can never fit: the cluster "
                                                       "holds at most 2")]
        engine.add_hosts(HOSTS[2:])
    assert caplog.messages == []
    assert engine.waiting_for_hosts() == []


def test_jobs_restored_after_the_hosts_are_judged_and_a_re_registration_says_nothing_in_between(
        caplog: pytest.LogCaptureFixture) -> None:
    """Diff review: the coordinator adds the restored agents' hosts before it restores the jobs (so add_hosts never
    judged them), and an agent re-registering with resized hosts loses them and adds them back (so the loss warned
    of jobs that the bigger hosts hold)."""
    from coordinator.engine import JobRecord

    small = [Host(f"h{i}", 1.0, 0.5) for i in range(4)]
    engine = Engine(get_policy("greedy"), SimBackend(), small)
    with caplog.at_level(logging.WARNING, logger="vcemu.engine"):
        engine.restore([JobRecord(WIDE)])
        assert engine.waiting_for_hosts() == [("wide", "memory: 0.7 per task is more than any host has (0.5)")]
        engine.lose_hosts([h.name for h in small], "agent came back with hosts resized", judge=False)
        engine.add_hosts([Host(f"h{i}") for i in range(4)])
    assert caplog.messages == []
    assert engine.waiting_for_hosts() == []


def test_up_says_each_waiting_job_then_a_count() -> None:
    """What ``vcemu up`` (local and ``--ray``) prints once its agents have registered."""
    from types import SimpleNamespace

    from coordinator.engine import JobRecord
    from coordinator.servers import waiting_lines

    engine = Engine(get_policy("greedy"), SimBackend(), HOSTS[:2])
    engine.restore([JobRecord(JobSpec(id=f"w{i}", submit_time=0.0, tasks=4, cpu_need=1.0, mem=0.7, work=1.0))
                    for i in range(3)])
    lines = waiting_lines(SimpleNamespace(engine=engine), at_most=2)  # type: ignore[arg-type]
    assert lines == [
        "vcemu up: w0 stays pending: these hosts can never hold it (tasks: 4 tasks of memory 0.7 can never fit: the "
        "cluster holds at most 2); `vcemu cancel w0` drops it",
        "vcemu up: w1 stays pending: these hosts can never hold it (tasks: 4 tasks of memory 0.7 can never fit: the "
        "cluster holds at most 2); `vcemu cancel w1` drops it",
        "vcemu up: and 1 more jobs of the state file these hosts can never hold",
    ]


def test_up_says_what_a_restart_took_back_on_stdout_as_vcemu_coordinator_does(
        capsys: pytest.CaptureFixture[str]) -> None:
    """Torture review: the restore line was logged at INFO only; then (diff review) `up` said it on stderr."""
    from types import SimpleNamespace

    from coordinator.servers import say_waiting

    engine = Engine(get_policy("greedy"), SimBackend(), HOSTS)
    say_waiting(SimpleNamespace(engine=engine, restored_note="restored 3 jobs (1 unfinished) and 2 agents from "
                                                             "run.db"))  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    assert out == "vcemu up: restored 3 jobs (1 unfinished) and 2 agents from run.db\n" and err == ""
    say_waiting(SimpleNamespace(engine=engine, restored_note=None))  # type: ignore[arg-type]
    assert capsys.readouterr() == ("", "")


class _Unheard(SimBackend):
    """A backend whose every Start is refused as an agent not heard from yet (a restart's restored agents)."""

    retry_after = 1.0

    def start(self, spec: JobSpec, hosts, cpu: float, progress: float = 0.0) -> None:  # type: ignore[no-untyped-def]
        from coordinator.backends.base import BackendError

        raise BackendError(f"agent x of host {hosts[0]!r} has not been heard from; will retry",
                           unreachable=True)


def test_jobs_held_for_one_cause_log_one_line_per_interval_with_a_count(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Torture review: after a restart on a state file of thousands of jobs, each job placed on a host of an agent
    not heard from yet logged a line of its own (4,337 in one restart). The first job of a cause is logged; the
    others within PENDING_SAY_S are counted, and the count is said once that has passed, at a later step."""
    import coordinator.engine as engine_module

    clock = [1000.0]
    monkeypatch.setattr(engine_module, "_wall", lambda: clock[0])
    engine = Engine(get_policy("greedy"), _Unheard(), [Host("h0")])
    cause = "start failed: agent x of host 'h0' has not been heard from; will retry"
    with caplog.at_level(logging.WARNING, logger="vcemu.engine"):
        for k in range(50):
            engine.arrive(JobSpec(id=f"j{k}", submit_time=0.0, tasks=1, cpu_need=0.1, mem=0.01, work=10.0))
        engine.step(until=0.0)
        assert [j.state for j in engine.jobs.values()] == [JobState.PENDING] * 50
        assert caplog.messages == [f"j0 {cause}; it stays pending"]
        clock[0] += engine_module.PENDING_SAY_S - 1
        engine.step(until=0.0)  # (within the interval: nothing more said)
        assert len(caplog.messages) == 1
        clock[0] += 1
        engine.step(until=0.0)  # the interval has passed: the count, once
        engine.step(until=0.0)
        assert caplog.messages[1:] == [f"49 more jobs stay pending for the same cause: {cause}"]
        clock[0] += engine_module.PENDING_SAY_S
        engine.step(until=0.0)  # nothing more held since: the cause is forgotten, and a new job is said at once
        engine.arrive(JobSpec(id="late", submit_time=0.0, tasks=1, cpu_need=0.1, mem=0.01, work=10.0))
        engine.step(until=0.0)
    assert caplog.messages[2:] == [f"late {cause}; it stays pending"]
