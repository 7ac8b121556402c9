"""DYNMCB8's repacking builds its jobs' arrays once (dynmcb._Repacking): the priority order it computes on
arrays must be the order of sorting the jobs on (priority, -submit time, id) with
coordinator.metrics.priority (001 Sec. III-A), ties and never-run jobs included, and the arrays must be
the jobs' own values."""

from __future__ import annotations

import numpy as np
import pytest

from coordinator.experiments import homogeneous_hosts, simulate
from coordinator.metrics import priority
from coordinator.model import Host, JobSpec, JobState, JobView, Snapshot
from coordinator.policies import dynmcb
from workloads.annotate import synthetic_trace


def _reference_rank(snap: Snapshot, jobs: list[JobView]) -> list[int]:
    by_priority = sorted(jobs, key=lambda j: (priority(j.flow_time(snap.now), j.vt), -j.spec.submit_time, j.id))
    place = {j.id: r for r, j in enumerate(by_priority)}
    return [place[j.id] for j in jobs]


def _check(snap: Snapshot, rp: dynmcb._Repacking) -> dynmcb._Repacking:
    want = sorted((j for j in snap.jobs.values() if j.state in dynmcb._CONSIDERED),
                  key=lambda j: (j.spec.submit_time, j.id))
    assert rp.jobs == want
    assert rp.rank.dtype == np.int64 and rp.rank.tolist() == _reference_rank(snap, want)
    assert rp.tasks.tolist() == [j.spec.tasks for j in want]
    assert rp.need.tolist() == [j.spec.cpu_need for j in want]
    assert rp.mem.tolist() == [j.spec.mem for j in want]
    assert rp.running.tolist() == [j.state is JobState.RUNNING for j in want]
    for k in (0, 1, len(want)):
        assert rp.kept(k) == [j for j, r in zip(want, rp.rank.tolist(), strict=True) if r >= k]
    return rp


def test_priority_order_on_arrays_is_the_sorted_order_with_ties() -> None:
    """Hand-made ties: equal priorities (equal flow and vt), equal submit times (the id decides), jobs that
    never ran (infinite priority), flow times on both sides of the 30 s bound."""
    def view(i: int, submit: float, vt: float, state: JobState) -> JobView:
        return JobView(JobSpec(f"j{i:02d}", submit, 1 + i % 3, 0.5, 0.1, 100.0), state, vt=vt)

    views = [
        view(0, 0.0, 10.0, JobState.RUNNING), view(1, 0.0, 10.0, JobState.PAUSED),  # equal priority and submit
        view(2, 5.0, 0.0, JobState.PENDING), view(3, 5.0, 0.0, JobState.PENDING),  # never ran: infinite
        view(4, 80.0, 2.0, JobState.RUNNING), view(5, 85.0, 2.0, JobState.RUNNING),  # flow < 30 s: the bound
        view(6, 10.0, 10.0, JobState.RUNNING), view(7, 3.0, 7.0, JobState.DONE),  # a finished job: not placed
    ]
    snap = Snapshot(100.0, (Host("h0", 1.0, 1.0),), {v.id: v for v in views})
    rp = _check(snap, dynmcb._Repacking.of(snap))
    assert [j.id for j in rp.jobs] == ["j00", "j01", "j02", "j03", "j06", "j04", "j05"]


# DYNMCB8-PER leaves new jobs waiting for the period: its repackings meet several never-run jobs (ties).
@pytest.mark.parametrize(("policy", "min_ties"), [("dynmcb8-per", 15), ("dynmcb8-asap-per", 0)])
def test_priority_order_on_arrays_at_every_repacking_of_a_run(
    monkeypatch: pytest.MonkeyPatch, policy: str, min_ties: int
) -> None:
    seen = {"repackings": 0, "with_ties": 0}
    of = dynmcb._Repacking.of.__func__  # type: ignore[attr-defined]

    def checked(cls, snap):  # type: ignore[no-untyped-def]
        rp = _check(snap, of(cls, snap))
        seen["repackings"] += 1
        seen["with_ties"] += sum(j.vt <= 0.0 for j in rp.jobs) >= 2  # equal (infinite) priorities
        return rp

    monkeypatch.setattr(dynmcb._Repacking, "of", classmethod(checked))
    simulate(synthetic_trace(3, 80, hosts=16, load=0.9), policy, homogeneous_hosts(16))
    assert seen["repackings"] > 50 and seen["with_ties"] >= min_ties, seen
