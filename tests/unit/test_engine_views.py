"""The engine keeps each live job's view as the job changes (``Engine._views``, ``_stale``, ``_moving``) rather than
rebuilding every view at each decision: every snapshot must still show each live job exactly as its record is, in
arrival order, under every policy."""
from __future__ import annotations

import random

import pytest

from coordinator.backends.sim import SimBackend
from coordinator.engine import Engine
from coordinator.model import Host, JobSpec, JobState, JobView, Snapshot
from coordinator.policies import get_policy

POLICIES = ("fcfs", "easy", "greedy", "greedy-pmtn", "greedy-pmtn-migr", "dynmcb8", "dynmcb8-per-60",
            "dynmcb8-asap-per-60", "dynmcb8-stretch-per-60")


def _jobs(n: int, seed: int) -> list[JobSpec]:
    rng = random.Random(seed)
    return [JobSpec(f"j{i:03d}", round(rng.uniform(0, 400), 3), rng.choice([1, 1, 2, 3]), rng.choice([0.25, 0.5, 1.0]),
                    rng.choice([0.1, 0.3, 0.6]), round(rng.uniform(5, 200), 3)) for i in range(n)]


class _Checked(Engine):
    """An engine whose every snapshot is compared with one built from scratch out of its records."""

    snapshots = 0

    def _snapshot(self) -> tuple[Snapshot, dict]:  # type: ignore[type-arg]
        snap, running = super()._snapshot()
        fresh = {job: JobView(r.spec, r.state, r.hosts, r.cpu, r.vt, r.attempts, r.first_start)
                 for job, r in self._live.items()}
        assert list(snap.jobs) == list(fresh), "the views are not in arrival order, or not the live jobs"
        for job, view in fresh.items():
            assert snap.jobs[job] == view, (job, snap.jobs[job], view)
        assert set(running) == {j for j, r in self._live.items() if r.state is JobState.RUNNING}
        assert snap.running == Snapshot(snap.now, snap.hosts, snap.jobs).running  # (known_running, and without it)
        assert all(running[j] is self._live[j] for j in running)
        self.snapshots += 1
        return snap, running


@pytest.mark.parametrize("paused_fixed", [True, False], ids=["sim", "paused-progress-read"])
@pytest.mark.parametrize("policy", POLICIES)
def test_every_snapshot_shows_each_live_job_as_its_record_is(policy: str, paused_fixed: bool) -> None:
    backend = SimBackend(penalty=20.0)
    backend.paused_progress_fixed = paused_fixed  # type: ignore[misc]  # (False: as a live backend, read each time)
    engine = _Checked(get_policy(policy), backend, [Host(f"h{i}", 1.0, 1.0) for i in range(4)])
    engine.run(_jobs(120, seed=3))
    assert engine.snapshots > 100
    assert all(r.state is JobState.DONE for r in engine.jobs.values())
    assert engine._views == {} and engine._moving == {}  # (nothing kept of the jobs that ended)
