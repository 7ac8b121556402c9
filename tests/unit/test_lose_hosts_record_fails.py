"""Engine.lose_hosts when recording a requeue fails (a store listener on a full disk): every job on the lost hosts is
requeued all the same (pending, offered again, its task stopped), none left placed on a host that is gone. The
except branch of lose_hosts runs in no unit test."""

from __future__ import annotations

from coordinator.model import JobSpec, JobState
from coordinator.plan import Plan, Start

from .scripted_agent import TableAgent, backend_on, engine_on


def test_every_job_on_a_lost_host_is_requeued_though_recording_fails() -> None:
    agent = TableAgent()
    with backend_on(agent) as backend:
        engine = engine_on(backend)
        for job, host in (("a", "h0"), ("b", "h0"), ("c", "h1")):
            engine.arrive(JobSpec(job, 0.0, 1, 0.3, 0.1, 10.0))
            engine.apply(Plan([Start(job, (host,), 0.3)]))

        def full_disk(t) -> None:  # type: ignore[no-untyped-def]
            if t.dst is JobState.PENDING and t.src is not None:
                raise OSError(28, "No space left on device")

        engine.listeners.append(full_disk)
        hit = engine.lose_hosts(["h0"], "agent lost")
        assert sorted(hit) == ["a", "b"]
        assert [engine.jobs[j].state for j in "abc"] == [JobState.PENDING, JobState.PENDING, JobState.RUNNING]
        assert "h0" not in {h.name for h in engine.hosts}
        assert not [t for t in agent.tasks.values() if t.host == "h0"], "a lost host's task was left running"
        due = [t.payload.job for t in engine._timers if t.kind == "stim" and getattr(t.payload, "job", None)]
        assert {"a", "b"} <= set(due), due  # each offered to the policy again
