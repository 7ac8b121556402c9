"""GREEDY-PMTN tries to resume only the paused jobs whose task fits in the most memory free on one host
(``memory_room``): the others fit nowhere in that decision. The plans must be exactly those of trying every one."""
from __future__ import annotations

import math
import random

import pytest

from coordinator.backends.sim import SimBackend
from coordinator.engine import Engine
from coordinator.model import Host, JobSpec, Snapshot, Stimulus
from coordinator.plan import Plan
from coordinator.policies import base, dfrs, get_policy
from coordinator.policies.base import EPS, HostUse, greedy_placement, memory_room


class _Both:
    """Decides each stimulus with the room test and without it (every candidate tried), and checks they agree."""

    def __init__(self, policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
        self.inner = get_policy(policy)
        self.name = self.inner.name
        self.period = self.inner.period
        self.monkeypatch = monkeypatch
        self.decisions = 0
        self.resumes = 0

    def decide(self, snap: Snapshot, stim: Stimulus) -> Plan:
        plan = self.inner.decide(snap, stim)
        with self.monkeypatch.context() as m:
            m.setattr(dfrs, "memory_room", lambda hosts, use: math.inf)
            every = self.inner.decide(snap, stim)
        assert plan == every, (snap.now, stim)
        self.decisions += 1
        self.resumes += sum(type(a).__name__ == "Resume" for a in plan.actions)
        return plan


@pytest.mark.parametrize("policy", ["greedy-pmtn", "greedy-pmtn-migr"])
@pytest.mark.parametrize("seed", [1, 2])
def test_the_room_test_changes_no_plan(policy: str, seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    # Unequal hosts and memories that sum to a host's exactly (0.3 + 0.3 + 0.4): the EPS boundary is reached.
    hosts = [Host(f"h{i}", rng.choice([0.5, 1.0, 2.0]), rng.choice([0.7, 1.0])) for i in range(5)]
    jobs = [JobSpec(f"j{i:03d}", round(rng.uniform(0, 300), 3), rng.choice([1, 1, 2, 3]), rng.choice([0.25, 0.5, 1.0]),
                    rng.choice([0.1, 0.3, 0.4, 0.6, 0.7]), round(rng.uniform(5, 200), 3)) for i in range(150)]
    policy_ = _Both(policy, monkeypatch)
    Engine(policy_, SimBackend(penalty=5.0), hosts).run(jobs)
    assert policy_.decisions > 250 and policy_.resumes > 20  # (the backlog was there, and jobs were resumed)


def test_a_task_larger_than_the_room_fits_nowhere() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        hosts = [Host(f"h{i}", 1.0, rng.choice([0.5, 1.0])) for i in range(rng.randint(0, 4))]
        use = {h.name: HostUse(0.0, rng.choice([0.0, 0.1, 0.2, 0.3, 0.6, 0.7, 0.1 + 0.2])) for h in hosts}
        spec = JobSpec("j", 0.0, rng.randint(1, 3), 0.5, rng.choice([0.1, 0.2, 0.3, 0.4, 0.7, 0.9]), 1.0)
        room = memory_room(hosts, use)
        placed = greedy_placement(spec, hosts, use)
        if room + EPS < spec.mem:
            assert placed is None
        elif spec.tasks == 1:
            assert placed is not None  # (exactly the test: one task fits where the room is)
    assert memory_room([], {}) == -math.inf and base.memory_room is memory_room
