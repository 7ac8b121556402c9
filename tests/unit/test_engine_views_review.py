"""Review of the engine's kept views (``Engine._views``, ``_stale``, ``_moving``): every snapshot shows each live
job as its record is also when jobs are cancelled, requeued, and hosts lost and added back between decisions; and
the running jobs handed to the capacity check come in the same order in every run (not PYTHONHASHSEED's)."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

from coordinator.backends.sim import SimBackend
from coordinator.model import Host, JobState
from coordinator.policies import get_policy
from tests.unit.test_engine_views import POLICIES, _Checked, _jobs


@pytest.mark.parametrize("policy", POLICIES)
def test_views_hold_through_cancels_requeues_and_hosts_lost_and_added(policy: str) -> None:
    rng = random.Random(7)
    backend = SimBackend(penalty=5.0)
    backend.paused_progress_fixed = False  # type: ignore[misc]
    engine = _Checked(get_policy(policy), backend, [Host(f"h{i}", 1.0, 1.0) for i in range(4)])
    engine.schedule_arrivals(_jobs(60, seed=5))
    lost: list[Host] = []
    for _ in range(3000):
        if not engine.step():
            break
        r, live = rng.random(), list(engine._live)
        if r < 0.03 and live:
            engine.cancel(rng.choice(live))
        elif r < 0.06:
            placed = [j for j, x in engine._live.items() if x.state in (JobState.RUNNING, JobState.PAUSED)]
            if placed:
                engine.requeue(rng.choice(placed), "review")
        elif r < 0.07 and not lost:
            lost.append(rng.choice(engine.hosts))
            engine.lose_hosts([lost[-1].name], "review")
        elif r < 0.09 and lost:
            engine.add_hosts(lost)
            lost.clear()
    assert engine.snapshots > 50
    engine._snapshot()
    assert engine._views.keys() == engine._live.keys()
    assert engine._moving.keys() <= engine._live.keys()


_ORDERS = """
import hashlib, sys
from coordinator.backends.sim import SimBackend
from coordinator.engine import Engine
from coordinator.model import Host
from coordinator.policies import get_policy
from tests.unit.test_engine_views import _jobs
h = hashlib.sha256()
class E(Engine):
    def _snapshot(self):
        snap, running = super()._snapshot()
        h.update(repr(list(running)).encode())
        return snap, running
E(get_policy(sys.argv[1]), SimBackend(penalty=20.0), [Host(f"h{i}", 1.0, 1.0) for i in range(4)]).run(_jobs(80, 3))
print(h.hexdigest())
"""


@pytest.mark.parametrize("policy", ["greedy-pmtn", "dynmcb8"])
def test_the_running_jobs_come_in_the_same_order_in_every_run(policy: str) -> None:
    digests = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", _ORDERS, policy], env=env, capture_output=True, text=True,
                             check=True, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
        digests.add(out.stdout.strip())
    assert len(digests) == 1, json.dumps(sorted(digests))
