"""The live backend's idea of each task against its agent's task table, where the two used to part (found by a
review of the live backend; each test failed before its fix):

* a poll applied the last Status of an agent that did not answer this round, so a finished task that a
  repacking had moved since came back RUNNING at its old progress, a saved task lost its checkpoint, and the
  next action on the job failed it;
* a task that failed on its agent since the last poll was stopped (forgotten) and restarted by a move;
* the journal deleted a job's restart count whenever the job had no task (before its first StartTask,
  after a requeue), so a restarted coordinator could give a new task the id of one still on an agent;
* the engine recorded a "migrate" for a job that a failed move had just requeued.

The agents are :class:`~tests.unit.scripted_agent.TableAgent`: gRPC servers on 127.0.0.1 with the real
agent's task-table rules; no processes, no cgroups."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from coordinator.backends import live
from coordinator.backends.base import BackendError
from coordinator.backends.live import LiveBackend
from coordinator.engine import Engine
from coordinator.model import JobSpec, JobState
from coordinator.plan import Migrate, Move, Pause, Plan, SetShare, Start
from coordinator.store import Store
from vcemu.v1 import agent_pb2

from .scripted_agent import TableAgent, backend_on, engine_on

TWO_TASKS = JobSpec("a", 0.0, 2, 1.0, 0.1, 10.0)
ONE_TASK = JobSpec("a", 0.0, 1, 1.0, 0.1, 10.0)


def moved_after_finishing(x: TableAgent, backend: LiveBackend, engine: Engine) -> str:
    """Start job a on h0 and h1 (agent x), let x report it once, finish task 0, and have a repacking move it
    to h2 (agent y); x then misses one Status round. Returns task 0's id."""
    engine.arrive(TWO_TASKS)
    engine.apply(Plan((Start("a", ("h0", "h1"), 0.5),)))
    first = backend._tasks["a"][0].task_id
    assert backend.poll() == []  # x's last Status: task 0 RUNNING at 0.0
    x.finish(first)
    engine.apply(Plan((Migrate("a", 0, "h2"),)))  # stopped on x (which forgets it), recorded at h2
    assert first not in x.tasks
    x.mute = True
    assert backend.poll() == []
    return first


def test_a_silent_agents_last_status_does_not_bring_back_a_finished_task_moved_away() -> None:
    x, y = TableAgent("x", ("h0", "h1")), TableAgent("y", ("h2",))
    with backend_on(x, y, rpc_timeout=2.0) as backend:
        engine = engine_on(backend)
        moved_after_finishing(x, backend, engine)
        t = backend._tasks["a"][0]
        assert (t.host, t.state, t.progress) == ("h2", agent_pb2.TASK_STATE_DONE, 1.0)
        engine.apply(Plan((SetShare("a", 0.4),)))  # the next decision: sent to task 1 only
        assert engine.jobs["a"].state is JobState.RUNNING, engine.jobs["a"].message
        x.mute = False
        time.sleep(live.SILENT_POLL_S)  # (x is asked again once the wait after its unanswered poll has passed)
        assert backend.poll() == []  # and nothing vanished when x answers again: task 1 runs on h1
        x.finish(backend._tasks["a"][1].task_id)
        assert [(r.job, r.state) for r in backend.poll()] == [("a", JobState.DONE)]


def test_a_silent_agents_last_status_does_not_roll_back_a_saved_progress() -> None:
    x = TableAgent("x", ("h0",))
    with backend_on(x, rpc_timeout=2.0) as backend:
        backend.start(ONE_TASK, ["h0"], 1.0)
        tid = backend._tasks["a"][0].task_id
        x.set(tid, 0.3)
        backend.poll()  # x's last Status: 0.3
        x.set(tid, 0.6)
        backend.pause("a")  # checkpointed at 0.6 and stopped
        x.mute = True
        backend.poll()
        assert backend.progress("a") == pytest.approx(0.6)


@pytest.mark.parametrize("how", ["migrate", "move", "pause"])
def test_a_task_that_failed_since_the_last_poll_fails_its_job_when_moved_or_paused(how: str) -> None:
    x = TableAgent("x", ("h0", "h1"))
    with backend_on(x, rpc_timeout=2.0) as backend:
        engine = engine_on(backend)
        engine.arrive(ONE_TASK)
        engine.apply(Plan((Start("a", ("h0",), 1.0),)))
        backend.poll()
        x.set("a/0", 0.4, agent_pb2.TASK_STATE_FAILED, "killed at its memory limit")
        action = {"migrate": Migrate("a", 0, "h1"), "move": Move("a", ("h1",)), "pause": Pause("a")}[how]
        engine.apply(Plan((action,)))
        rec = engine.jobs["a"]
        assert rec.state is JobState.FAILED
        assert "task a/0 failed on h0: killed at its memory limit" in rec.message
        assert x.tasks == {}  # not restarted anywhere


def test_a_strict_stop_of_a_failed_task_raises_for_the_backend_caller() -> None:
    x = TableAgent("x", ("h0", "h1"))
    with backend_on(x, rpc_timeout=2.0) as backend:
        backend.start(ONE_TASK, ["h0"], 1.0)
        x.set("a/0", 0.4, agent_pb2.TASK_STATE_FAILED, "oom")
        with pytest.raises(BackendError, match="task a/0 failed on h0: oom") as exc:
            backend.migrate("a", 0, "h1")
        assert not exc.value.unreachable  # a refusal: the engine fails the job rather than requeue it
        assert backend.flush() == []


def test_the_restart_count_is_in_the_journal_before_every_start_task(tmp_path: Path) -> None:
    x = TableAgent("x", ("h0",))
    path = str(tmp_path / "state.db")
    at_start: list[int] = []  # the restart count a coordinator restarted at that moment would load
    x.on_start = lambda request: at_start.append(Store(path).load().tasks.get("a", (-1, []))[0])
    with backend_on(x, rpc_timeout=2.0) as backend:
        backend.journal = Store(path).put_tasks
        backend.start(ONE_TASK, ["h0"], 1.0)  # a/0
        backend.stop("a")  # requeued
        backend.start(ONE_TASK, ["h0"], 1.0)  # a/0.1
    assert at_start == [0, 1]


def test_a_jobs_tasks_start_with_two_journal_writes_whatever_their_number(tmp_path: Path) -> None:
    """A job's restart counts are reserved for all its tasks in one journal write before the first StartTask (the
    tasks listed under their ids, saved: no process yet), and its task list written once after the last: a write
    per task rewrote the whole list each time (4,000 tasks took 121 s to start under --state, the coordinator's API
    blocked for 49 s; scale review). The ids are the ones a count per task gave, and a restart count of every id
    is durable before its start."""
    x = TableAgent("x", ("h0", "h1"))
    store = Store(str(tmp_path / "state.db"))
    writes: list[tuple[int, int, int]] = []  # (restart count, tasks listed, of them saved) of each journal write
    durable: list[int] = []  # the count a coordinator restarted at each start would load
    x.on_start = lambda request: durable.append(Store(str(tmp_path / "state.db")).load().tasks["a"][0])

    def journal(job, restarts, tasks) -> None:
        writes.append((restarts, len(tasks), sum(t.saved for t in tasks)))
        store.put_tasks(job, restarts, tasks)

    spec = JobSpec("a", 0.0, 40, 0.01, 0.001, 10.0, "modeled")  # (modeled: a StartTasks call per host)
    with backend_on(x, rpc_timeout=2.0) as backend:
        backend.journal = journal
        backend.start(spec, ["h0", "h1"] * 20, 0.01)
        assert [t.task_id for t in backend._tasks["a"][:3]] == ["a/0", "a/1.1", "a/2.2"]
        assert backend._tasks["a"][-1].task_id == "a/39.39"
        assert writes == [(39, 40, 40), (39, 40, 0)]
        assert durable == [39] * 40
        assert x.calls == [("StartTasks", tuple(f"a/{i}.{i}" if i else "a/0" for i in range(h, 40, 2)))
                           for h in (0, 1)]  # one call per host
        backend.stop("a")  # requeued: the next start's ids go on from 40
        writes.clear()
        backend.start(spec, ["h0", "h1"] * 20, 0.01)
        assert backend._tasks["a"][0].task_id == "a/0.40" and writes[0] == (79, 40, 40)


def test_a_restarted_coordinator_does_not_reuse_the_id_of_a_task_left_on_an_agent(tmp_path: Path) -> None:
    x = TableAgent("x", ("h0", "h1"))
    path = str(tmp_path / "state.db")
    with backend_on(x, rpc_timeout=2.0) as backend:
        backend.journal = Store(path).put_tasks
        backend.start(ONE_TASK, ["h1"], 1.0)
        x.set("a/0", 0.9)
        x.refuse_stop = True
        backend.stop("a")  # requeued; its Stop does not get through (an orphan, known to this process only)
    x.refuse_stop = False
    restarts = Store(path).load().tasks["a"][0]
    with backend_on(x, rpc_timeout=2.0) as again:  # the restarted coordinator
        again.reserve_restarts("a", restarts)
        again.start(ONE_TASK, ["h0"], 1.0)
        assert again._tasks["a"][0].task_id == "a/0.1"
        assert x.tasks["a/0.1"].host == "h0" and x.tasks["a/0"].progress == 0.9  # two tasks, two ids


def test_a_job_requeued_by_its_failed_move_has_no_migrate_transition() -> None:
    x, y = TableAgent("x", ("h0",)), TableAgent("y", ("h1",))
    with backend_on(x, y, rpc_timeout=2.0) as backend:
        engine = engine_on(backend)
        engine.arrive(ONE_TASK)
        engine.apply(Plan((Start("a", ("h0",), 1.0),)))
        y.refuse_start_on = {"h1"}  # the destination's agent does not answer the restart
        engine.apply(Plan((Migrate("a", 0, "h1"),)))
        assert engine.jobs["a"].state is JobState.PENDING
        reasons = [t.reason for t in engine.history.transitions if t.job == "a"]
        assert "migrate" not in reasons and reasons[-1].endswith("requeued"), reasons


def test_a_polls_progress_journal_is_one_commit_for_every_job(tmp_path: Path) -> None:
    """The store fsyncs every commit (synchronous=FULL): the progress journal, written about once a second
    for every running job, must be one commit, not one per job (a sync each, under the backend's lock)."""
    x = TableAgent("x", ("h0", "h1", "h2"))
    store = Store(str(tmp_path / "state.db"))
    specs = [JobSpec(j, 0.0, 1, 1.0, 0.1, 10.0) for j in ("a", "b", "c")]
    with backend_on(x, rpc_timeout=2.0) as backend:
        backend.journal, backend.journal_batch = store.put_tasks, store.transaction
        for spec, host in zip(specs, ("h0", "h1", "h2"), strict=True):
            backend.start(spec, [host], 1.0)
            x.set(f"{spec.id}/0", 0.5)
        statements: list[str] = []
        store._db.set_trace_callback(statements.append)
        backend._journal_at = 0.0  # the periodic write is due
        assert backend.poll() == []
        store._db.set_trace_callback(None)
    assert [s for s in statements if s.strip().upper() == "COMMIT"] == ["COMMIT"]
    assert {job: tasks[0].progress for job, (_, tasks) in store.load().tasks.items()} == {"a": 0.5, "b": 0.5, "c": 0.5}
