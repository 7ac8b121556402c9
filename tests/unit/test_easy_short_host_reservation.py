"""EASY's reservation counts the nodes that hold the head by their memory (f3d341d). A host the engine keeps from
new tasks (an agent's refusal: ``Engine._mark_short``) was shown to a policy that keeps placements with the memory its
running tasks hold as its whole memory: EASY then did not count that node, reserved the head too late and backfilled
a job that delayed it (review of helper 203)."""

from __future__ import annotations

from coordinator.backends.sim import SimBackend
from coordinator.engine import Engine
from coordinator.model import Host, JobSpec, JobState, Submit
from coordinator.policies.batch import Easy


def _starts(short: bool) -> tuple[list[object], dict[str, float]]:
    e = Engine(Easy(), SimBackend(), [Host(f"h{i}") for i in range(3)])
    e.arrive(JobSpec("A", 0.0, 1, 1.0, 0.3, 100.0))  # on h0, ends at 100
    e.arrive(JobSpec("D", 0.0, 1, 1.0, 0.3, 300.0))  # on h1, ends at 300
    e.handle(Submit("D"))
    if short:  # h0's agent refused a start a moment ago; the mark lapses at 50, long before A ends
        e._short["h0"] = (50.0, 1, "X: refused")
    e.arrive(JobSpec("E", 0.0, 2, 1.0, 0.5, 50.0))  # the head: h0 and h2 at 100
    e.arrive(JobSpec("F", 0.0, 1, 1.0, 0.3, 200.0))  # would hold h2 until 200
    plan = e.handle(Submit("F"))
    history = e.run()
    return list(plan.actions), {t.job: t.time for t in history.transitions if t.dst is JobState.RUNNING}


def test_a_short_host_running_a_task_still_counts_in_easys_reservation() -> None:
    assert _starts(short=False) == ([], {"A": 0.0, "D": 0.0, "E": 100.0, "F": 150.0})
    assert _starts(short=True) == ([], {"A": 0.0, "D": 0.0, "E": 100.0, "F": 150.0})
