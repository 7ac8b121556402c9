"""A serving coordinator (``vcemu up``, ``vcemu coordinator``) keeps no history in memory: nothing it serves reads it
(its store has the transitions, its listeners, event streams and metrics see each as it happens), and it grew with
every transition for the coordinator's life and was loaded whole at every restart (100,000 finished jobs and
500,000 transitions: 9.6-11.4 s to a listening coordinator and 708 MB resident). ``replay`` and ``demo`` make their
results from it and keep it."""

from __future__ import annotations

import argparse
import sqlite3
from pathlib import Path

import pytest

from coordinator.backends.sim import SimBackend
from coordinator.engine import Engine
from coordinator.experiments import homogeneous_hosts
from coordinator.metrics import Transition
from coordinator.model import JobSpec, JobState
from coordinator.policies import get_policy
from coordinator.service import CoordinatorServer
from coordinator.store import Store, StoreError


def jobs(n: int) -> list[JobSpec]:
    return [JobSpec(f"job-{i:05d}", float(i), 2, 0.5, 0.1, 10.0) for i in range(1, n + 1)]


def test_an_engine_without_history_runs_the_same_and_tells_its_listeners_every_transition() -> None:
    kept = Engine(get_policy("greedy"), SimBackend(), homogeneous_hosts(2))
    lean = Engine(get_policy("greedy"), SimBackend(), homogeneous_hosts(2), keep_history=False)
    heard: list[Transition] = []
    lean.listeners.append(heard.append)
    decided: list[float] = []
    lean.decision_listeners.append(decided.append)
    kept.run(jobs(6))
    lean.run(jobs(6))
    assert lean.history.transitions == [] and lean.history.decision_seconds == []
    assert heard == kept.history.transitions and len(decided) == len(kept.history.decision_seconds) > 0
    assert {j: (r.state, r.end) for j, r in lean.jobs.items()} == {j: (r.state, r.end) for j, r in kept.jobs.items()}


def test_the_store_loads_the_jobs_without_the_transitions_when_asked(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    store = Store(path)
    for spec in jobs(3):
        store.put_job(spec, JobState.DONE, ("h0", "h1"), 0.0, 10.0, 1, 0.0, 10.0, "completed")
        store.add_transition(Transition(10.0, spec.id, JobState.RUNNING, JobState.DONE, ("h0", "h1"), 0.5, "completed"))
    store.close()
    full, lean = Store(path).load(), Store(path).load(transitions=False)
    assert len(full.transitions) == 3 and lean.transitions == []
    assert [j.spec for j in lean.jobs] == [j.spec for j in full.jobs] == jobs(3)


def test_a_serving_coordinator_restarts_without_loading_its_history_and_a_replays_keeps_it(tmp_path: Path) -> None:
    from coordinator.servers import _server_options

    args = argparse.Namespace(state=str(tmp_path / "run.db"), heartbeat=2.0, token_file=None, tls_cert=None,
                              tls_key=None, tls_ca=None, max_queued=0)
    options = _server_options(args)
    assert options["keep_history"] is False  # what ``vcemu up`` and ``vcemu coordinator`` pass
    store = Store(args.state)
    for spec in jobs(2):
        store.put_job(spec, JobState.DONE, ("h0", "h1"), 0.0, 10.0, 1, 0.0, 10.0, "completed")
        store.add_transition(Transition(10.0, spec.id, JobState.RUNNING, JobState.DONE, ("h0", "h1"), 0.5, "completed"))
    store.close()
    for keep in (False, True):
        server = CoordinatorServer(get_policy("greedy"), port=0, state=args.state, keep_history=keep)
        try:
            assert sorted(server.engine.jobs) == ["job-00001", "job-00002"]
            assert len(server.engine.history.transitions) == (2 if keep else 0)
            assert server.engine.keep_history is keep
        finally:
            server.stop()


@pytest.mark.parametrize("keep", [True, False])
def test_a_damaged_transitions_table_is_refused_at_start_though_not_read(tmp_path: Path, keep: bool) -> None:
    """Its root page zeroed: refused in one line at start, as when every transition was read, not found by the
    first transition written, every write failing after (review)."""
    path = tmp_path / "run.db"
    store = Store(str(path))
    for spec in jobs(40):
        store.put_job(spec, JobState.DONE, ("h0", "h1"), 0.0, 10.0, 1, 0.0, 10.0, "completed")
        store.add_transition(Transition(10.0, spec.id, JobState.RUNNING, JobState.DONE, ("h0", "h1"), 0.5, "completed"))
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (root,) = db.execute("SELECT rootpage FROM sqlite_master WHERE name='transitions'").fetchone()
    good = path.read_bytes()
    path.write_bytes(good[:(root - 1) * 4096] + bytes(4096) + good[root * 4096:])
    with pytest.raises(StoreError, match="run.db"):
        CoordinatorServer(get_policy("greedy"), port=0, state=str(path), keep_history=keep)
