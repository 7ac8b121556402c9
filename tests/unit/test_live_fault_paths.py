"""The live backend on its fault paths, where a review found it failing a job for good, running a task twice
or losing progress (each test failed before its fix):

* a task whose non-strict Stop timed out (an orphan, retried at every poll) still held its CPU share on its
  agent, so the agent refused the next StartTask on that host and the engine failed that job for good;
* a strict Stop (before a restart elsewhere) whose agent was cut off meanwhile was taken for done, so a move
  started a second copy of the task while the first may still run;
* a paused-in-place (``pause_mode="freeze"``) task resumed on another host lost its checkpoint when the
  restart there failed, and the requeued job started again from the last poll's older progress;
* moving a finished task recorded it at its new host without writing that to the journal;
* the moves of a plan that an exception (not a BackendError: a listener's store write, say) ended before
  its flush were left without a process until some later plan, and moving one again failed its job; and a
  journal write failing inside the flush dropped the moves not yet started, leaving their jobs RUNNING with
  no process for ever. Such moves are now requeued at the next poll;
* a job requeued because a move's Stop did not get through (the old task an orphan, its Stop retried at every
  poll) was placed again beside that old copy, which ran on until its Stop got through or its agent was
  declared lost. It is now held pending until then (failed if the agent answers but will not stop it);
* a placement an orphan blocks (that held job, or another job on the orphan's host) retried the orphan's
  Stop at every engine turn; now at most once per poll interval;
* a checkpoint-mode pause cut short by a failure did not journal the checkpoints it had taken, so a crash before
  the engine's requeue lost them; and a restarted coordinator that adopts a job half stopped that way now
  requeues it (no poll ever finished or restarted it).

The agents are :class:`~tests.unit.scripted_agent.TableAgent`: gRPC servers on 127.0.0.1 with the real
agent's task-table rules; no processes, no cgroups."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from coordinator.backends import live
from coordinator.backends.base import BackendError, Report
from coordinator.backends.live import RPC_ATTEMPTS, LiveBackend
from coordinator.engine import Engine
from coordinator.metrics import Transition
from coordinator.model import Host, JobSpec, JobState, Snapshot, Stimulus, Submit
from coordinator.plan import Migrate, Pause, Plan, Resume, SetShare, Start
from coordinator.store import StoredTask
from vcemu.v1 import agent_pb2

from .scripted_agent import TableAgent, backend_on, engine_on

ONE_TASK = JobSpec("a", 0.0, 1, 1.0, 0.1, 10.0)
TWO_TASKS = JobSpec("a", 0.0, 2, 1.0, 0.1, 10.0)
OTHER = JobSpec("b", 0.0, 1, 1.0, 0.1, 10.0)


def journal_of(backend: LiveBackend) -> list[tuple[str, list[StoredTask]]]:
    """Every journal write of ``backend`` from now on, (job, tasks) in order."""
    writes: list[tuple[str, list[StoredTask]]] = []
    backend.journal = lambda job, restarts, tasks: writes.append((job, list(tasks)))
    return writes


@contextmanager
def one_checked_host() -> Iterator[tuple[TableAgent, LiveBackend, Engine]]:
    """Agent x with host h0, checking capacity at StartTask as the real agent does; its backend and engine."""
    x = TableAgent("x", ("h0",))
    x.check_capacity = True
    # (no call of these tests is meant to time out: the default deadline, so that a busy machine's slow answer
    # is not taken for a silent agent; at 1 s, 0.33 s an attempt, one failed a unit run beside other tests)
    with backend_on(x) as backend:
        yield x, backend, engine_on(backend)


@pytest.mark.parametrize("stoppable", [True, False], ids=["orphan-stops-now", "orphan-still-stuck"])
def test_a_job_is_not_failed_because_an_orphan_of_ours_holds_its_hosts_cpu(stoppable: bool) -> None:
    with one_checked_host() as (x, backend, engine):
        engine.arrive(ONE_TASK)
        engine.apply(Plan((Start("a", ("h0",), 1.0),)))
        x.refuse_stop = True
        engine.cancel("a")  # its Stop times out: a/0 is an orphan, still running at share 1 on x
        assert "a/0" in x.tasks
        x.refuse_stop = not stoppable
        engine.arrive(OTHER)
        engine.apply(Plan((Start("b", ("h0",), 1.0),)))  # h0 is free in the model, not yet on x
        rec = engine.jobs["b"]
        if stoppable:  # the orphan is stopped at once and b's start tried again
            assert rec.state is JobState.RUNNING, rec.message
            assert list(x.tasks) == ["b/0"]
        else:  # transient: b waits in the queue for the orphan to go
            assert rec.state is JobState.PENDING, rec.message
            assert list(x.tasks) == ["a/0"]
            x.refuse_stop = False
            backend.poll()  # the orphan is stopped at a poll; b's next placement then fits
            engine.apply(Plan((Start("b", ("h0",), 1.0),)))
            assert engine.jobs["b"].state is JobState.RUNNING and list(x.tasks) == ["b/0.1"]


def test_a_task_no_job_owns_is_stopped_when_it_blocks_a_placement_before_the_first_poll() -> None:
    """A task left by a crashed coordinator (or by a cut-off agent's past) holds the host's CPU; the first
    poll's reconciliation would stop it, but a placement before that poll must not fail its job for it."""
    with one_checked_host() as (x, backend, engine):
        x.tasks["stale/0"] = agent_pb2.TaskStatus(task_id="stale/0", host="h0", cpu_share=1.0,
                                                  state=agent_pb2.TASK_STATE_RUNNING)
        engine.arrive(OTHER)
        engine.apply(Plan((Start("b", ("h0",), 1.0),)))
        rec = engine.jobs["b"]
        assert rec.state is JobState.RUNNING, rec.message
        assert list(x.tasks) == ["b/0"]


def test_a_jobs_own_earlier_task_is_not_taken_for_a_leftover_when_a_later_one_is_refused() -> None:
    """Two tasks of b on h0, a stale task holding half of it: b/0 starts, b/1 is refused. The agent's tasks
    are then asked for, and b/0 (not yet in the job's list before) is b's, not a leftover to stop."""
    two = JobSpec("b", 0.0, 2, 0.5, 0.1, 10.0)
    with one_checked_host() as (x, backend, engine):
        x.tasks["stale/0"] = agent_pb2.TaskStatus(task_id="stale/0", host="h0", cpu_share=0.5,
                                                  state=agent_pb2.TASK_STATE_RUNNING)
        engine.arrive(two)
        engine.apply(Plan((Start("b", ("h0", "h0"), 0.5),)))
        assert engine.jobs["b"].state is JobState.RUNNING, engine.jobs["b"].message
        assert sorted(x.tasks) == ["b/0", "b/1.1"]
        assert backend.poll() == []  # nothing vanished


def test_a_refusal_that_no_leftover_explains_still_fails_the_job() -> None:
    with one_checked_host() as (x, backend, engine):
        engine.arrive(OTHER)
        engine.apply(Plan((Start("b", ("h0",), 0.5),)))
        x.tasks["b/0"].cpu_share = 1.0  # the agent's count and the model's part (how is not the point)
        engine.arrive(ONE_TASK)
        engine.apply(Plan((Start("a", ("h0",), 0.5),)))  # fits in the model, not on the agent
        rec = engine.jobs["a"]
        assert rec.state is JobState.FAILED and "FAILED_PRECONDITION" in rec.message, rec.message
        assert "b/0" in x.tasks  # b's own task is not taken for a leftover


def test_an_orphan_whose_agent_answers_and_refuses_its_stop_fails_the_job_instead_of_looping() -> None:
    """Transient means the agent does not answer (it is then declared lost, or answers again). One that
    answers but will not stop the task would have the job offered again at every turn, for ever."""
    with one_checked_host() as (x, backend, engine):
        engine.arrive(ONE_TASK)
        engine.apply(Plan((Start("a", ("h0",), 1.0),)))

        def broken_stop(request: agent_pb2.TaskRef) -> None:
            raise RuntimeError("the agent's Stop is broken")  # gRPC answers UNKNOWN: not a retryable code

        x.on_stop = broken_stop
        engine.cancel("a")  # a/0 is an orphan of an agent that answers
        engine.arrive(OTHER)
        engine.apply(Plan((Start("b", ("h0",), 1.0),)))
        rec = engine.jobs["b"]
        assert rec.state is JobState.FAILED, rec.state
        assert "FAILED_PRECONDITION" in rec.message and "still hold it" in rec.message, rec.message


def test_a_move_whose_stop_meets_a_cut_off_agent_is_requeued_not_run_twice() -> None:
    x, y = TableAgent("x", ("h0",)), TableAgent("y", ("h1",))
    with backend_on(x, y, rpc_timeout=1.0) as backend:
        engine = engine_on(backend)
        engine.arrive(ONE_TASK)
        engine.apply(Plan((Start("a", ("h0",), 1.0),)))
        x.refuse_stop = True  # the Stop does not get through, and meanwhile the watchdog cuts x off
        x.on_stop = lambda request: backend.cut_off("x")
        engine.apply(Plan((Migrate("a", 0, "h1"),)))
        rec = engine.jobs["a"]
        assert rec.state is JobState.PENDING, rec.message
        assert "a/0" in x.tasks and y.tasks == {}  # one copy: the one x may still run


def test_a_frozen_task_resumed_elsewhere_keeps_its_checkpoint_when_the_restart_fails() -> None:
    x, y = TableAgent("x", ("h0",)), TableAgent("y", ("h1",))
    with backend_on(x, y, rpc_timeout=1.0, pause_mode="freeze") as backend:
        writes = journal_of(backend)
        engine = engine_on(backend)
        engine.arrive(ONE_TASK)
        engine.apply(Plan((Start("a", ("h0",), 1.0),)))
        x.set("a/0", 0.3)
        backend.poll()  # the last poll: 0.3
        engine.apply(Plan((Pause("a"),)))
        x.set("a/0", 0.6)  # where it froze, past the last poll
        y.refuse_start_on = {"h1"}
        engine.apply(Plan((Resume("a", ("h1",), 1.0),)))  # checkpointed at 0.6, stopped, not restarted
        rec = engine.jobs["a"]
        assert rec.state is JobState.PENDING, rec.message
        assert rec.vt == pytest.approx(6.0)  # the checkpoint, not the last poll's 3.0
        assert any(t.saved and t.progress == pytest.approx(0.6) for job, tasks in writes for t in tasks)
        engine.apply(Plan((Start("a", ("h0",), 1.0),)))  # placed again: from the checkpoint
        assert x.tasks["a/0.2"].progress == pytest.approx(0.6)


@pytest.mark.parametrize("seen", [True, False], ids=["done-at-last-poll", "done-since"])
def test_moving_a_finished_task_is_journalled(seen: bool) -> None:
    x = TableAgent("x", ("h0", "h1", "h2"))
    with backend_on(x, rpc_timeout=1.0) as backend:
        writes = journal_of(backend)
        backend.start(TWO_TASKS, ["h0", "h1"], 0.5)
        x.finish("a/0")
        if seen:
            backend.poll()
        backend.migrate("a", 0, "h2")
        assert backend.flush() == []
        job, tasks = writes[-1]
        assert job == "a" and (tasks[0].host, tasks[0].state) == ("h2", agent_pb2.TASK_STATE_DONE)


def test_moves_of_a_plan_ended_by_an_exception_are_requeued_at_the_next_poll() -> None:
    """Not started where the plan meant them to go: whether the engine recorded the new hosts depends on
    where the exception came from (a listener after the move, or the move's own journal write). Requeued,
    each job restarts from its checkpoint wherever it is placed next."""
    x, y = TableAgent("x", ("h0",)), TableAgent("y", ("h1", "h2"))
    with backend_on(x, y, rpc_timeout=1.0) as backend:
        engine = engine_on(backend)
        engine.arrive(ONE_TASK)
        engine.arrive(OTHER)
        engine.apply(Plan((Start("a", ("h0",), 1.0),)))
        x.set("a/0", 0.4)

        def store_down(t: Transition) -> None:  # a listener (the store, say) failing on b's start
            if t.job == "b":
                raise OSError("disk full")

        engine.listeners.append(store_down)
        with pytest.raises(OSError):  # a moved, then the plan ends before its flush
            engine.apply(Plan((Migrate("a", 0, "h1"), Start("b", ("h0",), 1.0))))
        engine.listeners.remove(store_down)
        assert backend.poll() == [Report("a", JobState.PENDING, "a plan was interrupted; requeued from its checkpoint")]
        assert not y.tasks and "a/0" not in x.tasks  # no copy anywhere
        engine.requeue("a", "a move was interrupted")  # as the engine does with that report
        assert engine.jobs["a"].state is JobState.PENDING and engine.jobs["a"].vt == pytest.approx(4.0)
        engine.apply(Plan((Start("a", ("h2",), 1.0),)))  # placed again, from its checkpoint
        assert engine.jobs["a"].state is JobState.RUNNING, engine.jobs["a"].message
        assert list(y.tasks) == ["a/0.1"] and y.tasks["a/0.1"].progress == pytest.approx(0.4)


def test_a_journal_failure_in_the_flush_leaves_the_moves_queued_and_the_poll_requeues_them() -> None:
    """The journal write before a moved task's StartTask fails (the store's disk is full): the moves not
    yet started are not dropped, which left their tasks saved and their jobs RUNNING with no process, for
    ever (a poll skips a job with a saved task)."""
    c = JobSpec("c", 0.0, 1, 1.0, 0.1, 10.0)
    x, y = TableAgent("x", ("h0", "h1")), TableAgent("y", ("h2", "h3"))
    with backend_on(x, y, rpc_timeout=1.0) as backend:
        engine = engine_on(backend)
        for spec in (ONE_TASK, c):
            engine.arrive(spec)
        engine.apply(Plan((Start("a", ("h0",), 1.0), Start("c", ("h1",), 1.0))))
        x.set("a/0", 0.3)
        x.set("c/0", 0.6)

        def journal(job: str, restarts: int, tasks: list[StoredTask]) -> None:
            if restarts >= 1:  # the flush's StartTask of a moved task: a new restart count
                raise OSError("disk full")

        backend.journal = journal
        with pytest.raises(OSError):
            engine.apply(Plan((Migrate("a", 0, "h2"), Migrate("c", 0, "h3"))))
        backend.journal = None
        reports = backend.poll()
        assert sorted(r.job for r in reports) == ["a", "c"] and all(r.state is JobState.PENDING for r in reports)
        for r in reports:
            engine.requeue(r.job, r.message)
        assert engine.jobs["a"].vt == pytest.approx(3.0) and engine.jobs["c"].vt == pytest.approx(6.0)


def test_a_later_plans_flush_does_not_start_the_moves_an_interrupted_plan_left() -> None:
    """The move's own journal write fails: the engine never recorded a at h1. A plan before the next poll
    (a larger poll interval, a library caller) must not start a there, where the model thinks h1 is free."""
    x, y = TableAgent("x", ("h0",)), TableAgent("y", ("h1", "h2"))
    with backend_on(x, y, rpc_timeout=1.0) as backend:
        engine = engine_on(backend)
        engine.arrive(ONE_TASK)
        engine.arrive(OTHER)
        engine.apply(Plan((Start("a", ("h0",), 1.0), Start("b", ("h2",), 0.5))))
        x.set("a/0", 0.4)

        def journal(job: str, restarts: int, tasks: list[StoredTask]) -> None:
            if job == "a" and tasks and tasks[0].saved:  # migrate's write, the task checkpointed and stopped
                raise OSError("disk full")

        backend.journal = journal
        with pytest.raises(OSError):
            engine.apply(Plan((Migrate("a", 0, "h1"),)))
        backend.journal = None
        assert engine.jobs["a"].hosts == ("h0",)  # the engine's record: not moved
        engine.apply(Plan((SetShare("b", 1.0),)))  # another plan, before any poll
        assert "a/0.1" not in y.tasks, "the interrupted move was started by a later plan"
        assert backend.poll() == [Report("a", JobState.PENDING, "a plan was interrupted; requeued from its checkpoint")]


def test_a_poll_whose_journal_fails_still_reports_the_interrupted_moves() -> None:
    x, y = TableAgent("x", ("h0",)), TableAgent("y", ("h1",))
    with backend_on(x, y, rpc_timeout=1.0) as backend:
        engine = engine_on(backend)
        engine.arrive(ONE_TASK)
        engine.arrive(OTHER)
        engine.apply(Plan((Start("a", ("h0",), 1.0),)))

        def store_down(t: Transition) -> None:  # fails on b's start, after a's move, before the flush
            if t.job == "b":
                raise OSError("disk full")

        engine.listeners.append(store_down)
        with pytest.raises(OSError):
            engine.apply(Plan((Migrate("a", 0, "h1"), Start("b", ("h0",), 1.0))))
        engine.listeners.remove(store_down)

        def journal(job: str, restarts: int, tasks: list[StoredTask]) -> None:
            raise OSError("disk still full")

        backend.journal, backend._journal_at = journal, 0.0  # the poll's progress journal is due, and fails
        assert [r.job for r in backend.poll()] == ["a"]
        backend.journal = None
        assert [r.job for r in backend.poll()] == ["a"]  # reported until the engine acts on it
        engine.requeue("a", "a plan was interrupted")
        assert backend.poll() == []


def test_an_interrupted_job_is_requeued_while_the_store_still_fails() -> None:
    """A pause whose journal write fails, and the store still failing when the next poll's report makes the
    engine requeue the job: the requeue's Stop wrote the journal and raised, so the engine kept the job RUNNING
    with no task, and the poll had forgotten it: no later poll said anything, for ever. Now the job is pending
    and offered again, and the store failing on its transition too (a listener) does not change that."""
    x = TableAgent("x", ("h0",))
    with backend_on(x, rpc_timeout=1.0) as backend:
        engine = engine_on(backend)
        engine.arrive(ONE_TASK)
        engine.apply(Plan((Start("a", ("h0",), 1.0),)))
        x.set("a/0", 0.4)

        def journal(job: str, restarts: int, tasks: list[StoredTask]) -> None:
            raise OSError("disk full")

        def store_down(t: Transition) -> None:
            raise OSError("disk full")

        backend.journal = journal
        with pytest.raises(OSError):
            engine.apply(Plan((Pause("a"),)))
        assert engine.jobs["a"].state is JobState.RUNNING and x.tasks == {}
        engine.listeners.append(store_down)
        reports = backend.poll()
        assert [(r.job, r.state) for r in reports] == [("a", JobState.PENDING)]
        with pytest.raises(OSError):
            engine.requeue("a", reports[0].message)  # the transition's store write fails, after the requeue
        rec = engine.jobs["a"]
        assert rec.state is JobState.PENDING and rec.vt == pytest.approx(4.0)
        assert any(isinstance(t.payload, Submit) and t.payload.job == "a" for t in engine._timers)
        assert backend.poll() == []


def test_a_start_cut_short_by_a_failure_is_offered_again() -> None:
    """A plan whose Start of a job fails with something other than a BackendError (the closing journal write):
    its tasks are stopped and the job stays pending, and, with a policy that has no period, nothing offered it
    again. Now the engine does, after the backend's retry_after."""
    x = TableAgent("x", ("h0", "h1"))
    with backend_on(x, rpc_timeout=1.0) as backend:
        engine = engine_on(backend)
        engine.arrive(TWO_TASKS)
        engine._timers.clear()  # the arrival's Submit, handled
        failing_last_write(backend, saved=False)
        with pytest.raises(OSError):
            engine.apply(Plan((Start("a", ("h0", "h1"), 0.5),)))
        assert engine.jobs["a"].state is JobState.PENDING and x.tasks == {}
        due = [t.time for t in engine._timers if isinstance(t.payload, Submit) and t.payload.job == "a"]
        assert len(due) == 1 and due[0] >= backend.now() - 1.0


def requeued_beside_its_orphan(x: TableAgent, engine: Engine) -> None:
    """a runs on x's h0; its move to h1 meets a Stop that does not get through, so the engine requeues it and
    a/0, still running on x, is an orphan (its Stop retried at every poll)."""
    engine.arrive(ONE_TASK)
    engine.apply(Plan((Start("a", ("h0",), 1.0),)))
    x.refuse_stop = True
    engine.apply(Plan((Migrate("a", 0, "h1"),)))
    assert engine.jobs["a"].state is JobState.PENDING, engine.jobs["a"].message
    assert "a/0" in x.tasks


@pytest.mark.parametrize("release", ["stop-gets-through", "agent-lost"])
def test_a_job_requeued_after_an_unconfirmed_stop_is_not_started_beside_its_old_copy(
        release: str, caplog: pytest.LogCaptureFixture) -> None:
    x, y = TableAgent("x", ("h0",)), TableAgent("y", ("h1",))
    with backend_on(x, y, rpc_timeout=1.0) as backend:
        engine = engine_on(backend)
        requeued_beside_its_orphan(x, engine)
        engine.apply(Plan((Start("a", ("h1",), 1.0),)))  # placed again while a/0 may still run on x
        rec = engine.jobs["a"]
        assert rec.state is JobState.PENDING, "started beside its old copy"
        assert "may still run" in caplog.text  # refused by the hold, not by anything else
        assert y.tasks == {} and "a/0" in x.tasks
        if release == "stop-gets-through":
            x.refuse_stop = False
            backend.poll()  # the orphan's Stop gets through
            assert x.tasks == {}
        else:  # x is declared lost, as the service's watchdog does it
            backend.cut_off("x")
            engine.lose_hosts(backend.remove_agent("x"), "agent x lost")
        engine.apply(Plan((Start("a", ("h1",), 1.0),)))
        assert engine.jobs["a"].state is JobState.RUNNING, engine.jobs["a"].message
        assert list(y.tasks) == ["a/0.1"]


def test_a_job_whose_old_copys_agent_answers_but_will_not_stop_it_fails_instead_of_waiting_for_ever() -> None:
    x, y = TableAgent("x", ("h0",)), TableAgent("y", ("h1",))
    with backend_on(x, y, rpc_timeout=1.0) as backend:
        engine = engine_on(backend)
        engine.arrive(ONE_TASK)
        engine.apply(Plan((Start("a", ("h0",), 1.0),)))

        def broken_stop(request: agent_pb2.TaskRef) -> None:
            raise RuntimeError("the agent's Stop is broken")  # gRPC answers UNKNOWN: x answers, and refuses

        x.on_stop = broken_stop
        engine.requeue("a", "lost a task")  # as for a task reported vanished: a/0 becomes an orphan
        engine.apply(Plan((Start("a", ("h1",), 1.0),)))
        rec = engine.jobs["a"]
        assert rec.state is JobState.FAILED, rec.state
        assert "a/0" in rec.message and "may still run" in rec.message, rec.message
        assert y.tasks == {}


class PlaceOn:
    """Starts every pending job on ``host`` at each decision, and counts the decisions."""

    period = None

    def __init__(self, host: str) -> None:
        self.name, self.host, self.decisions = "place-on", host, 0

    def decide(self, snap: Snapshot, stim: Stimulus) -> Plan:
        self.decisions += 1
        return Plan(tuple(Start(job, (self.host,) * v.spec.tasks, v.spec.cpu_need)
                          for job, v in snap.jobs.items() if v.state is JobState.PENDING))


def step_for(engine: Engine, seconds: float, min_steps: int = 0) -> tuple[int, float]:
    """Step ``engine`` back to back for ``seconds``, as fast as it goes, and at least ``min_steps`` times (a busy
    machine may take longer: bounds computed from the elapsed time stay right); returns (steps, seconds
    elapsed)."""
    steps, began = 0, time.monotonic()
    while time.monotonic() - began < seconds or steps < min_steps:
        engine.step(until=engine.backend.now() + 0.05)
        steps += 1
    return steps, time.monotonic() - began


def test_a_held_job_is_offered_once_per_poll_interval_and_costs_at_most_one_stop_per_poll_interval(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine offers a held job again one ``retry_after`` (the backend's poll interval) after each refusal,
    one retry at a time, and logs the refusal once. Stepped back to back for a while, as fast as the engine
    goes: no StartTask, decisions bounded by the poll interval, not one or two per step, and Stops of the orphan
    bounded by the poll interval too (the polls' and the placements' retries together), not one per offer."""
    import coordinator.engine

    # Without the engine's per-cause throttle of these lines, which would hide a line per offer: the job's own
    # "logged once per cause" is what is checked below (diff review).
    monkeypatch.setattr(coordinator.engine, "PENDING_SAY_S", 0.0)
    x, y = TableAgent("x", ("h0",)), TableAgent("y", ("h1",))
    with backend_on(x, y, rpc_timeout=1.0) as backend:
        policy = PlaceOn("h1")
        engine = Engine(policy, backend, [Host("h0", 1.0, 1.0), Host("h1", 1.0, 1.0)])
        backend.poll_interval = 0.25  # several engine steps per poll even on a busy machine
        requeued_beside_its_orphan(x, engine)
        starts, stops = [], []
        y.on_start = starts.append
        x.on_stop = stops.append
        # Two Submits of a are due, its arrival's (stale while it ran) and its requeue's: each is offered once
        # in a step, and a refusal pushes the next one.
        offers = sum(isinstance(t.payload, Submit) and t.payload.job == "a" for t in engine._timers)
        assert offers == 2
        policy.decisions = 0
        with caplog.at_level(logging.WARNING, logger="vcemu.engine"):
            began = time.monotonic()
            steps, _ = step_for(engine, 0.6)
            elapsed = time.monotonic() - began
            # A busy machine steps slowly: step on (up to 10 s) until the steps outnumber the bound on decisions
            # below, which grows by one a poll interval while steps come every 0.05 s or so, so that one decision
            # a step (the defect) cannot pass it.
            while steps <= offers + elapsed / backend.poll_interval + 1 and elapsed < 10.0:
                steps += step_for(engine, 0.0, min_steps=1)[0]
                elapsed = time.monotonic() - began
        assert starts == [] and y.tasks == {} and engine.jobs["a"].state is JobState.PENDING
        # The two Submits due at once, then one offer per poll interval (0.6 s or more: two or three, or more), not one
        # per step.
        assert 2 <= policy.decisions <= offers + elapsed / backend.poll_interval + 1 < steps, (policy.decisions, steps)
        assert sum("stays pending" in r.getMessage() for r in caplog.records) == 1, caplog.text
        # A poll's Stop makes up to RPC_ATTEMPTS calls (its agent answered the poll's Status, so it is not taken
        # for silent); the placements' retries, once their agent is silent, one each.
        assert len(stops) <= RPC_ATTEMPTS * (elapsed / backend.poll_interval + 2), (len(stops), steps, elapsed)
        x.refuse_stop = False  # the next poll's Stop gets through, and the next offer starts a
        began = time.monotonic()  # (the bound only ends a hang: the loop ends as soon as a runs)
        while engine.jobs["a"].state is JobState.PENDING and time.monotonic() - began < 30.0:
            engine.step(until=backend.now() + 0.05)
        assert engine.jobs["a"].state is JobState.RUNNING, engine.jobs["a"].message
        assert x.tasks == {} and list(y.tasks) == ["a/0.1"]


def test_a_checkpoint_pause_cut_short_journals_the_checkpoints_it_took() -> None:
    x = TableAgent("x", ("h0", "h1"))
    with backend_on(x, rpc_timeout=1.0) as backend:
        backend.start(TWO_TASKS, ["h0", "h1"], 0.5)
        assert sorted(x.tasks) == ["a/0", "a/1.1"]  # (a task id's suffix counts the job's StartTasks)
        x.set("a/0", 0.4)
        x.set("a/1.1", 0.3)
        writes = journal_of(backend)
        x.on_stop = lambda request: setattr(x, "refuse_stop", request.task_id == "a/1.1")  # a/0 stops, a/1.1 not
        with pytest.raises(BackendError):
            backend.pause("a")
        assert writes, "nothing journalled"  # before the engine requeues the job (a crash may come first)
        job, tasks = writes[-1]
        assert job == "a" and tasks[0].saved and tasks[0].progress == pytest.approx(0.4)
        assert not tasks[1].saved and tasks[1].task_id in x.tasks


@pytest.mark.parametrize("case", ["pause-cut-short", "move-cut-short", "resume-cut-short", "consistent"])
def test_a_restarted_coordinator_requeues_a_job_whose_tasks_contradict_its_state(case: str) -> None:
    """What a journal gives a restarted coordinator after a crash between a call and the engine's record of
    it: a RUNNING job with a task saved (no process; the pause test above, or a one-task job whose move had
    stopped its task and not restarted it), a PAUSED job with a task running (checkpoint mode). No poll
    finished or restarted it; it is requeued from the checkpoints at the first poll, with no other report."""
    x = TableAgent("x", ("h0", "h1"))
    running = StoredTask("a/1.1", "h1", 0.3, agent_pb2.TASK_STATE_RUNNING, False)
    saved = StoredTask("a/0", "h0", 0.4, agent_pb2.TASK_STATE_RUNNING, True)
    spec, tasks, state = {
        "pause-cut-short": (TWO_TASKS, [saved, running], JobState.RUNNING),
        "move-cut-short": (ONE_TASK, [saved], JobState.RUNNING),
        "resume-cut-short": (TWO_TASKS, [saved, running], JobState.PAUSED),
        "consistent": (TWO_TASKS, [saved, StoredTask("a/1.1", "h1", 0.3, agent_pb2.TASK_STATE_RUNNING, True)],
                       JobState.PAUSED),
    }[case]
    with backend_on(x, rpc_timeout=1.0) as backend:
        x.tasks["a/1.1"] = agent_pb2.TaskStatus(task_id="a/1.1", host="h1", progress=0.3,
                                                state=agent_pb2.TASK_STATE_RUNNING)
        backend.adopt(spec, 1, tasks, 0.5, state)
        reports = backend.poll()
        if case == "consistent":  # a paused job, both tasks saved: nothing to say
            assert reports == []
            return
        assert [(r.job, r.state) for r in reports] == [("a", JobState.PENDING)], reports
        assert backend.progress("a") == pytest.approx(0.4 if case == "move-cut-short" else 0.3)


def test_a_placement_an_orphan_blocks_on_its_host_costs_at_most_one_stop_per_poll_interval() -> None:
    """Another job placed on the host an orphan still holds (the capacity refusal path): offered again at every
    engine turn, it retried the orphan's Stop at each one."""
    x = TableAgent("x", ("h0",))
    x.check_capacity = True
    with backend_on(x, rpc_timeout=1.0) as backend:
        engine = Engine(PlaceOn("h0"), backend, [Host("h0", 1.0, 1.0)])
        backend.poll_interval = 0.25  # several engine steps per poll even on a busy machine
        engine.arrive(ONE_TASK)
        engine.step(until=backend.now())  # a starts on h0
        assert engine.jobs["a"].state is JobState.RUNNING, engine.jobs["a"].message
        x.refuse_stop = True
        engine.cancel("a")  # a/0 an orphan, still holding h0's CPU on x
        stops: list[agent_pb2.TaskRef] = []
        x.on_stop = stops.append
        engine.arrive(OTHER)
        # Offered many times: at least ten turns (each waits up to 0.05 s; CI's busy machine once took 9 in 0.6 s).
        steps, elapsed = step_for(engine, 0.6, min_steps=10)
        assert engine.jobs["b"].state is JobState.PENDING and list(x.tasks) == ["a/0"]
        assert len(stops) <= RPC_ATTEMPTS * (elapsed / backend.poll_interval + 2), (len(stops), steps, elapsed)


def two_tasks_running(x: TableAgent, backend: LiveBackend) -> Engine:
    """An engine on ``backend`` with job a's two tasks started on x's h0 and h1, at progress 0.4 and 0.3."""
    engine = engine_on(backend)
    engine.arrive(TWO_TASKS)
    engine.apply(Plan((Start("a", ("h0", "h1"), 0.5),)))
    x.set("a/0", 0.4)
    x.set("a/1.1", 0.3)
    return engine


def failing_last_write(backend: LiveBackend, saved: bool) -> None:
    """From now on the journal write that lists both tasks of a as they end a call, all saved or all running as
    ``saved`` says, fails (the store's disk is full); the earlier writes (a task id reserved before its
    StartTask, say) go through."""
    def journal(job: str, restarts: int, tasks: list[StoredTask]) -> None:
        if job == "a" and len(tasks) == TWO_TASKS.tasks and all(t.saved is saved for t in tasks):
            raise OSError("disk full")

    backend.journal = journal


@pytest.mark.parametrize("call", ["pause", "resume"])
def test_a_pause_or_resume_whose_last_journal_write_fails_is_requeued_at_the_next_poll(call: str) -> None:
    """The write that ends a pause (every task saved) or a resume (every task running again) fails: the engine,
    seeing an exception that is not a BackendError, does not record the change, which left the job RUNNING with
    no process, or PAUSED with its tasks running, for ever. The next poll requeues it from its checkpoints."""
    x = TableAgent("x", ("h0", "h1"))
    with backend_on(x, rpc_timeout=1.0) as backend:
        engine = two_tasks_running(x, backend)
        if call == "resume":
            engine.apply(Plan((Pause("a"),)))
        failing_last_write(backend, saved=call == "pause")
        with pytest.raises(OSError):
            engine.apply(Plan((Pause("a"),) if call == "pause" else (Resume("a", ("h0", "h1"), 0.5),)))
        backend.journal = None
        before = JobState.RUNNING if call == "pause" else JobState.PAUSED
        assert engine.jobs["a"].state is before  # the engine's record: unchanged
        reports = backend.poll()
        assert [(r.job, r.state) for r in reports] == [("a", JobState.PENDING)], reports
        engine.requeue("a", reports[0].message)  # as the engine does with that report
        assert engine.jobs["a"].state is JobState.PENDING
        assert x.tasks == {}  # no process left behind
        assert engine.jobs["a"].vt == pytest.approx(0.3 * TWO_TASKS.work)  # the job's progress, its slowest task's


def test_a_start_whose_last_journal_write_fails_leaves_no_task_running() -> None:
    """The write that ends a start fails: the engine keeps the job pending, so its tasks must not run on."""
    x = TableAgent("x", ("h0", "h1"))
    with backend_on(x, rpc_timeout=1.0) as backend:
        engine = engine_on(backend)
        engine.arrive(TWO_TASKS)
        failing_last_write(backend, saved=False)
        with pytest.raises(OSError):
            engine.apply(Plan((Start("a", ("h0", "h1"), 0.5),)))
        assert engine.jobs["a"].state is JobState.PENDING
        assert x.tasks == {}, "its tasks run while the engine has it pending"


@pytest.mark.parametrize("write", ["reserving the ids", "closing"])
def test_a_resume_cut_short_by_the_journal_is_requeued(write: str) -> None:
    """A journal write of a resume fails: the one that reserves the restarted tasks' ids (nothing started yet) or
    the closing one (both tasks running again). The engine kept the job PAUSED, with tasks running in the second
    case, and every poll skipped it (it has a saved task, or saw it paused), for ever. It is requeued at the next
    poll, and its running tasks stopped."""
    x = TableAgent("x", ("h0", "h1"))
    with backend_on(x, rpc_timeout=1.0) as backend:
        engine = two_tasks_running(x, backend)
        engine.apply(Plan((Pause("a"),)))

        def journal(job: str, restarts: int, tasks: list[StoredTask]) -> None:
            if all(t.saved for t in tasks) == (write == "reserving the ids") and restarts > 1:
                raise OSError("disk full")

        backend.journal = journal
        with pytest.raises(OSError):
            engine.apply(Plan((Resume("a", ("h0", "h1"), 0.5),)))
        backend.journal = None
        assert engine.jobs["a"].state is JobState.PAUSED
        assert len(x.tasks) == (0 if write == "reserving the ids" else 2)
        reports = backend.poll()
        assert [(r.job, r.state) for r in reports] == [("a", JobState.PENDING)], reports
        engine.requeue("a", reports[0].message)
        assert engine.jobs["a"].state is JobState.PENDING and x.tasks == {}


def test_a_starttask_that_got_no_answer_holds_its_job_until_its_stop_gets_through() -> None:
    """The agent started the task but its answer was lost (every attempt UNAVAILABLE): the task may run. The
    job, kept pending, was placed elsewhere at the next offer, beside that copy; now the copy is an orphan."""
    x, y = TableAgent("x", ("h0",)), TableAgent("y", ("h1",))

    def started_then_cut_off(request: agent_pb2.StartTaskRequest) -> None:
        x.tasks[request.task_id] = agent_pb2.TaskStatus(task_id=request.task_id, host=request.host,
                                                        state=agent_pb2.TASK_STATE_RUNNING)
        x.refuse_stop = True

    with backend_on(x, y, rpc_timeout=1.0) as backend:
        engine = engine_on(backend)
        engine.arrive(ONE_TASK)
        x.refuse_start_on, x.on_start = {"h0"}, started_then_cut_off
        engine.apply(Plan((Start("a", ("h0",), 1.0),)))
        assert engine.jobs["a"].state is JobState.PENDING and list(x.tasks) == ["a/0"]
        engine.apply(Plan((Start("a", ("h1",), 1.0),)))
        assert engine.jobs["a"].state is JobState.PENDING and y.tasks == {}, "started beside its unanswered copy"
        x.refuse_stop = False
        backend.poll()  # the orphan's Stop gets through
        assert x.tasks == {}
        engine.apply(Plan((Start("a", ("h1",), 1.0),)))
        assert engine.jobs["a"].state is JobState.RUNNING and list(y.tasks) == ["a/0.1"]


def test_an_orphan_whose_agent_answers_but_never_stops_it_fails_its_job(monkeypatch: pytest.MonkeyPatch) -> None:
    """The orphan's Stop keeps timing out on an agent that answers every Status (a process that will not die):
    the timeout marked the agent silent, so the held job was offered again for ever and the agent never
    declared lost. After UNSTOPPABLE_AFTER_S of answered polls the job fails, naming the cause."""
    monkeypatch.setattr(live, "UNSTOPPABLE_AFTER_S", 0.3)
    x, y = TableAgent("x", ("h0",)), TableAgent("y", ("h1",))
    with backend_on(x, y, rpc_timeout=1.0) as backend:
        engine = engine_on(backend)
        requeued_beside_its_orphan(x, engine)
        engine.apply(Plan((Start("a", ("h1",), 1.0),)))
        assert engine.jobs["a"].state is JobState.PENDING  # held, while that may be a passing silence
        # Answered polls for well over UNSTOPPABLE_AFTER_S: counted from the end of the first (whose refused Stop
        # starts the count), not from before it, which a busy machine may take a few tenths of a second over (the
        # job then stayed pending: 1 failure in 3 runs beside 3 busy loops).
        backend.poll()
        began = time.monotonic()
        while time.monotonic() - began < 1.0:
            time.sleep(0.05)
            backend.poll()
        engine.apply(Plan((Start("a", ("h1",), 1.0),)))
        rec = engine.jobs["a"]
        assert rec.state is JobState.FAILED and "may still run" in rec.message, rec.message
        assert y.tasks == {}


@pytest.mark.parametrize("action", ["setshare", "migrate", "pause"])
def test_a_task_gone_with_its_agents_restart_requeues_its_job(action: str) -> None:
    """An agent that restarted lost its tasks; a decision can come before the poll that would report them
    vanished. The agent's NOT_FOUND for our task (SetShare; the Checkpoint of a Migrate or a checkpoint-mode
    Pause) means the task is lost: the job is requeued from its checkpoint, as the poll would, not failed."""
    x = TableAgent("x", ("h0", "h1"))
    with backend_on(x) as backend:
        engine = engine_on(backend)
        engine.arrive(JobSpec("a", 0.0, 1, 1.0, 0.1, 10.0))
        engine.apply(Plan([Start("a", ("h0",), 1.0)]))
        x.tasks.clear()  # the agent restarted; no poll has seen it yet
        plan = {"setshare": SetShare("a", 0.5), "migrate": Migrate("a", 0, "h1"), "pause": Pause("a")}[action]
        engine.apply(Plan([plan]))
        rec = engine.jobs["a"]
        assert rec.state is JobState.PENDING, (rec.state, rec.message)
