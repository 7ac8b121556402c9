"""A job's tasks on an agent stop in one StopTasks call per host as the job ends (one Stop per task made cancelling a
job of 10,000 tasks on 4 hosts take 8.6 s, nearly all of it in the calls). Pinned here: the agent's
:meth:`AgentCore.stop_tasks` answers each stop as Stop alone would, a failure not stopping the others; its servicer
answers one result per request; the live backend sends one StopTasks per host (at most
modeled tasks only: one Stop each for tasks of a workload program), keeps a stop the agent failed as an
orphan and takes NOT_FOUND for a task gone, keeps a host's stops untried after an unanswered call (orphans, stopped
at a later poll), falls back to one Stop per task on an agent without StopTasks, and at its exit only says what it
leaves."""

from __future__ import annotations

import itertools
import logging
import math
import time

import grpc
import pytest

from coordinator.backends import live
from coordinator.model import JobSpec, JobState
from coordinator.plan import Pause, Plan, Start
from node_agent.agent import AgentCore, AgentError, HostSpec, TaskStart
from node_agent.dutycycle import DutyCycleDriver
from vcemu.v1 import agent_pb2
from workloads import modeled

from .scripted_agent import TableAgent, agent_served, backend_on, engine_on

_ids = itertools.count()


def started_core(n: int) -> AgentCore:
    """A real agent's core (hosts h and g) with modeled tasks t0 .. t<n-1> started, alternately on h and g."""
    core = AgentCore(f"pytest-stops-{next(_ids)}", [HostSpec("h", 1.0, 1 << 30), HostSpec("g", 1.0, 1 << 30)],
                     DutyCycleDriver(), {})
    core.start_tasks([TaskStart(f"t{i}", "hg"[i % 2], modeled.NAME, 0.1, 1.0, 3600.0, 10) for i in range(n)])
    return core


def test_the_agents_stop_tasks_stops_each_as_stop_would_and_a_failure_stops_none_of_the_others() -> None:
    """Each id its own result, in order: a view (the task forgotten: its id free again), or the AgentError that Stop
    alone raises (NOT_FOUND for an id unknown, or stopped earlier in the same call)."""
    core = started_core(4)
    try:
        got = core.stop_tasks(["t0", "nope", "t2", "t0", "t3"])
        assert [o.task_id if not isinstance(o, Exception) else o.code for o in got] == [  # type: ignore[union-attr]
            "t0", "NOT_FOUND", "t2", "NOT_FOUND", "t3"]
        assert sorted(core._tasks) == ["t1"]
        with pytest.raises(AgentError) as alone:
            core.stop("nope")
        assert str(got[1]) == str(alone.value)
        assert sum(core.tasks_ended().values()) == 3  # each stop counted once
    finally:
        core.shutdown()


def test_the_real_agent_answers_stoptasks_with_a_result_per_stop() -> None:
    core = started_core(2)
    with agent_served(core) as stub:
        reply = stub.StopTasks(agent_pb2.StopTasksRequest(tasks=[agent_pb2.TaskRef(task_id=t) for t in
                                                                 ("t1", "gone", "t0")]), timeout=5)
        assert [(r.task.task_id, r.error_code) for r in reply.results] == [("t1", ""), ("", "NOT_FOUND"),
                                                                          ("t0", "")]
        assert core._tasks == {}


def spec(tasks: int, workload: str = modeled.NAME) -> JobSpec:
    return JobSpec("a", 0.0, tasks, 0.1, 0.01, 100.0, workload)


def ids(n: int) -> list[str]:
    return [f"a/{i}" + (f".{i}" if i else "") for i in range(n)]


def running(x: TableAgent, backend: live.LiveBackend, hosts: tuple[str, ...], workload: str = modeled.NAME):  # type: ignore[no-untyped-def]
    """An engine on ``backend`` with job a started on ``hosts``; the agent records its stops from now on."""
    engine = engine_on(backend)
    engine.arrive(spec(len(hosts), workload))
    engine.apply(Plan((Start("a", hosts, 0.1),)))
    assert engine.jobs["a"].state is JobState.RUNNING, engine.jobs["a"].message
    x.calls.clear()
    x.record_stops = True
    return engine


def test_a_job_cancelled_stops_its_tasks_in_one_stoptasks_per_host() -> None:
    """One call per host for the job's tasks there, in their order; a host's only task with Stop."""
    x = TableAgent("x", ("h0", "h1", "h2"))
    with backend_on(x) as backend:
        engine = running(x, backend, ("h0", "h1", "h0", "h1", "h0", "h2"))
        engine.cancel("a")
        a = ids(6)
        assert x.calls == [("StopTasks", (a[0], a[2], a[4])), ("StopTasks", (a[1], a[3])), ("Stop", (a[5],))]
        assert x.tasks == {} and backend._orphans == []


def test_a_workload_programs_tasks_stop_one_call_each() -> None:
    """A process's stop (a kill, and its wait) takes the agent tens of milliseconds, more under load: each has its own
    call and deadline (a batch of 8 outlived one on a loaded machine; live check), as a pause's are."""
    x = TableAgent("x", ("h0",))
    with backend_on(x, pause_mode="checkpoint") as backend:
        engine = running(x, backend, ("h0",) * 3, workload="dgemm")
        engine.apply(Plan((Pause("a"),)))
        a = ids(3)
        assert x.calls == [("Stop", (a[0],)), ("Stop", (a[1],)), ("Stop", (a[2],))] and x.checkpoints == a
        x.calls.clear()
        engine.cancel("a")  # (paused: nothing to stop)
        engine.arrive(JobSpec("b", 0.0, 2, 0.1, 0.01, 100.0, "dgemm"))
        engine.apply(Plan((Start("b", ("h0", "h0"), 0.1),)))
        x.calls.clear()
        engine.cancel("b")
        assert x.calls == [("Stop", ("b/0",)), ("Stop", ("b/1.1",))] and x.tasks == {}


class FailsStops(TableAgent):
    """A TableAgent whose Stop of the ids in ``failing`` fails (INTERNAL: a kill that failed), alone or in a batch."""

    failing: set[str] = set()

    def _stop(self, request, context):  # type: ignore[no-untyped-def]
        if request.task_id in self.failing:
            context.abort(grpc.StatusCode.INTERNAL, "agent failure: the kill timed out")
        return super()._stop(request, context)


def test_a_stop_the_agent_fails_is_kept_to_retry_and_a_task_gone_is_not() -> None:
    """A failed stop in the call's results is an orphan (its Stop retried at the polls), as a Stop alone that failed
    is; NOT_FOUND is a task the agent no longer has, nothing to keep."""
    x = FailsStops("x", ("h0",))
    with backend_on(x) as backend:
        engine = running(x, backend, ("h0",) * 3)
        a = ids(3)
        del x.tasks[a[1]]  # gone already: NOT_FOUND
        x.failing = {a[2]}
        engine.cancel("a")
        assert [t.task_id for t in backend._orphans] == [a[2]]
        assert list(x.tasks) == [a[2]]
        x.failing = set()
        backend.poll()
        assert x.tasks == {} and backend._orphans == []


def test_an_unanswered_stoptasks_keeps_the_hosts_stops_untried_as_orphans() -> None:
    """A call unanswered (every attempt) keeps its stops and the host's stops not sent yet as orphans, with no call
    for the rest (each would cost a deadline); a later poll stops them."""
    x = TableAgent("x", ("h0",))
    with backend_on(x, rpc_timeout=1.0) as backend, pytest.MonkeyPatch.context() as mp:
        mp.setattr(live, "BATCH_BYTES", 40)  # a few tasks a call
        engine = running(x, backend, ("h0",) * 6)
        x.refuse_stop = True
        engine.cancel("a")
        assert {name for name, _ in x.calls} == {"StopTasks"}
        assert len({tuple(call) for _, call in x.calls}) == 1  # one call (its attempts), none for the rest
        assert sorted(t.task_id for t in backend._orphans) == sorted(ids(6))
        x.refuse_stop = False
        backend.poll()
        assert x.tasks == {} and backend._orphans == []


def test_an_agent_without_stoptasks_gets_one_stop_per_task_and_is_not_asked_again() -> None:
    x = TableAgent("x", ("h0", "h1"))
    x.unimplemented.add("StopTasks")
    with backend_on(x) as backend:
        engine = running(x, backend, ("h0",) * 3)
        engine.cancel("a")
        a = ids(3)
        assert x.calls == [("StopTasks", tuple(a)), ("Stop", (a[0],)), ("Stop", (a[1],)), ("Stop", (a[2],))]
        assert x.tasks == {}
        engine.arrive(JobSpec("b", 0.0, 2, 0.1, 0.01, 100.0, modeled.NAME))
        engine.apply(Plan((Start("b", ("h1", "h1"), 0.1),)))
        x.calls.clear()
        engine.cancel("b")
        assert x.calls == [("Stop", ("b/0",)), ("Stop", ("b/1.1",))]


def test_stops_that_fail_at_the_coordinators_exit_are_said_and_left(caplog: pytest.LogCaptureFixture) -> None:
    x = TableAgent("x", ("h0",))
    with backend_on(x, rpc_timeout=1.0) as backend:
        running(x, backend, ("h0",) * 3)
        x.refuse_stop = True
        backend.closing = True
        with caplog.at_level(logging.INFO, logger="vcemu.live"):
            backend.stop("a")
        assert backend._orphans == []
        assert any("Stop 3 tasks (a/0, ...) on h0 failed at exit" in r.getMessage() for r in caplog.records)


class Stuck(TableAgent):
    """A TableAgent whose Stop of the ids in ``stuck`` answers only after the caller's deadline and keeps the task:
    a process that will not die (the agent's kill gives up after KILL_TIMEOUT_S, longer than any deadline)."""

    stuck: set[str] = set()

    def _stop(self, request, context):  # type: ignore[no-untyped-def]
        if request.task_id in self.stuck:
            time.sleep(0.35)  # past the attempt's deadline (rpc_timeout 0.6 / 3 attempts)
            context.abort(grpc.StatusCode.INTERNAL, "agent failure: the kill timed out")
        return super()._stop(request, context)


def test_an_orphan_whose_stop_outlives_its_deadline_does_not_keep_the_others_of_its_agent_from_theirs() -> None:
    """An agent that answers its polls gets every orphan's Stop tried each round: one whose kill outlives the
    deadline (its call unanswered) kept the others of its agent untried at every poll, for ever, and marked them
    refused though never tried (review). Only the orphans tried and still failing count as refused."""
    x = Stuck("x", ("h0",))
    with backend_on(x, rpc_timeout=0.6) as backend:
        engine = running(x, backend, ("h0",) * 5)
        a = ids(5)
        x.stuck = {a[0]}
        engine.cancel("a")  # the StopTasks call outlives its deadline: all five kept as orphans
        assert sorted(t.task_id for t in backend._orphans) == sorted(a)
        backend.poll()
        assert sorted(x.tasks) == [a[0]]
        assert [(t.task_id, t.refused_since < math.inf) for t in backend._orphans] == [(a[0], True)]


def test_an_unanswered_stoptasks_keeps_the_stops_on_the_agents_other_hosts_untried_too() -> None:
    x = TableAgent("x", ("h0", "h1"))
    with backend_on(x, rpc_timeout=1.0) as backend:
        engine = running(x, backend, ("h0", "h0", "h1", "h1"))
        x.refuse_stop = True
        engine.cancel("a")
        a = ids(4)
        assert set(x.calls) == {("StopTasks", (a[0], a[1]))}  # (its attempts) and no call for h1
        assert sorted(t.task_id for t in backend._orphans) == a


def test_a_finished_job_and_a_start_undone_stop_their_tasks_in_one_call_per_host() -> None:
    """The other two paths that stop a job's tasks: a job whose tasks all finished (their resources released on the
    agent), and a start undone because a later host refused its tasks."""
    x = TableAgent("x", ("h0", "h1"))
    with backend_on(x) as backend:
        engine = running(x, backend, ("h0", "h0", "h1", "h1"))
        a = ids(4)
        for task_id in a:
            x.finish(task_id)
        assert [(r.job, r.state) for r in backend.poll()] == [("a", JobState.DONE)]
        assert x.calls == [("StopTasks", (a[0], a[1])), ("StopTasks", (a[2], a[3]))] and x.tasks == {}
        x.calls.clear()
        x.refuse_start_on = {"h1"}
        engine.arrive(JobSpec("b", 0.0, 4, 0.1, 0.01, 100.0, modeled.NAME))
        engine.apply(Plan((Start("b", ("h0", "h0", "h1", "h1"), 0.1),)))
        b = [f"b/{i}" + (f".{i}" if i else "") for i in range(4)]
        assert ("StopTasks", (b[0], b[1])) in x.calls
        assert x.tasks == {} and sorted(t.task_id for t in backend._orphans) == b[2:]  # h1's unconfirmed: orphans


# ---- a checkpoint-mode pause: one StopTasks per host, each task saved at its Stop's progress -------------------

def paused_on(x: TableAgent, backend: live.LiveBackend, hosts: tuple[str, ...], progress: tuple[float, ...]):  # type: ignore[no-untyped-def]
    """Job a started on ``hosts`` at ``progress`` each (on the agent), the agent recording its stops."""
    engine = running(x, backend, hosts)
    for task_id, p in zip(ids(len(hosts)), progress, strict=True):
        x.set(task_id, p)
    return engine


def test_a_pause_stops_a_jobs_tasks_in_one_stoptasks_per_host_saving_each_at_its_stops_progress() -> None:
    """A Checkpoint and a Stop per task made pausing a job of n tasks 2n calls: now one StopTasks per host, each
    task saved at the progress its Stop answered with (read as the agent stops it), a task that answers done
    recorded done (nothing to resume); the journal lists them saved."""
    x = TableAgent("x", ("h0", "h1"))
    with backend_on(x, pause_mode="checkpoint") as backend:
        engine = paused_on(x, backend, ("h0", "h0", "h1", "h1", "h0"), (0.1, 0.2, 0.3, 0.4, 0.5))
        a = ids(5)
        x.finish(a[4])
        writes: list[list[tuple[str, float, bool, bool]]] = []
        backend.journal = lambda job, restarts, tasks: writes.append(
            [(t.task_id, round(t.progress, 6), t.saved, t.state == agent_pb2.TASK_STATE_DONE) for t in tasks])
        engine.apply(Plan((Pause("a"),)))
        assert engine.jobs["a"].state is JobState.PAUSED, engine.jobs["a"].message
        assert x.calls == [("StopTasks", (a[0], a[1], a[4])), ("StopTasks", (a[2], a[3]))]
        assert x.checkpoints == [] and x.tasks == {}
        assert writes == [[(a[0], 0.1, True, False), (a[1], 0.2, True, False), (a[2], 0.3, True, False),
                           (a[3], 0.4, True, False), (a[4], 1.0, False, True)]]


@pytest.mark.parametrize("fault", ["not found", "failed", "unanswered"])
def test_a_pause_cut_short_raises_as_a_stop_alone_would_once_the_calls_answers_are_recorded(fault: str) -> None:
    """A task gone from the agent (NOT_FOUND: it restarted) is lost: the job is requeued; a task found failed fails
    the job, as a Stop alone said; an unanswered call requeues it (which of its stops were made is not known: the
    requeue's stop goes over them again). The tasks whose Stop answered are saved first, at their progress."""
    x = FailsStops("x", ("h0",))
    with backend_on(x, pause_mode="checkpoint", rpc_timeout=1.0) as backend:
        paused_on(x, backend, ("h0",) * 3, (0.1, 0.2, 0.3))
        a = ids(3)
        if fault == "not found":
            del x.tasks[a[1]]
        elif fault == "failed":
            x.set(a[1], 0.2, agent_pb2.TASK_STATE_FAILED, "segfault")
        else:
            x.refuse_stop = True
        with pytest.raises(live.BackendError) as raised:
            backend.pause("a")
        tasks = backend._tasks["a"]
        if fault == "unanswered":
            assert raised.value.unreachable and not any(t.saved for t in tasks)
            assert str(raised.value) == "StopTasks on h0: UNAVAILABLE: partitioned"
            return
        assert raised.value.unreachable is (fault == "not found")
        assert str(raised.value) == {"not found": f"Stop {a[1]}: NOT_FOUND: task_id: no task {a[1]!r} on agent x",
                                     "failed": f"task {a[1]} failed on h0: segfault"}[fault]
        assert [(t.saved, round(t.progress, 6)) for t in (tasks[0], tasks[2])] == [(True, 0.1), (True, 0.3)]
        assert not tasks[1].saved


def test_a_pause_on_an_agent_without_stoptasks_checkpoints_and_stops_each_task() -> None:
    x = TableAgent("x", ("h0",))
    x.unimplemented.add("StopTasks")
    with backend_on(x, pause_mode="checkpoint") as backend:
        engine = paused_on(x, backend, ("h0",) * 3, (0.1, 0.2, 0.3))
        engine.apply(Plan((Pause("a"),)))
        a = ids(3)
        assert x.calls == [("StopTasks", tuple(a)), ("Stop", (a[0],)), ("Stop", (a[1],)), ("Stop", (a[2],))]
        assert x.checkpoints == a
        assert [(t.saved, round(t.progress, 6)) for t in backend._tasks["a"]] == [(True, 0.1), (True, 0.2), (True, 0.3)]


class LateOnce(TableAgent):
    """A TableAgent whose next StopTasks makes its stops and answers past the caller's deadline (0.8 s): a reply
    late under load, the call retried."""

    late = False

    def StopTasks(self, request, context):  # noqa: N802
        reply = super().StopTasks(request, context)
        if self.late:
            self.late = False
            time.sleep(0.8)
        return reply


def test_a_pause_whose_stoptasks_was_answered_late_saves_the_tasks_its_first_attempt_stopped() -> None:
    """The first attempt stopped the tasks but its answer came after the deadline; the retry finds them gone
    (NOT_FOUND). They were stopped by that attempt, not lost: saved at their last poll's progress, the job paused,
    where the retry's NOT_FOUND requeued it as lost (review)."""
    x = LateOnce("x", ("h0",))
    with backend_on(x, pause_mode="checkpoint", rpc_timeout=1.5) as backend:  # 0.5 s an attempt
        engine = paused_on(x, backend, ("h0",) * 3, (0.5, 0.6, 0.7))
        backend.poll()  # (the progress the coordinator last saw)
        x.late = True
        engine.apply(Plan((Pause("a"),)))
        assert engine.jobs["a"].state is JobState.PAUSED, engine.jobs["a"].message
        assert len(x.calls) >= 2 and x.tasks == {}
        assert [(t.saved, round(t.progress, 6)) for t in backend._tasks["a"]] == [(True, 0.5), (True, 0.6), (True, 0.7)]


def test_a_workload_programs_stops_on_an_agent_that_stops_answering_keep_the_rest_untried() -> None:
    """One Stop per task of a process job; once one goes unanswered, the agent's other stops are kept as orphans
    untried (each would cost a deadline under the engine's lock: 64 tasks about a minute; review), stopped at a later
    poll."""
    x = TableAgent("x", ("h0",))
    with backend_on(x, rpc_timeout=0.6) as backend:
        running(x, backend, ("h0",) * 6, workload="dgemm")
        x.refuse_stop = True
        backend.stop("a")
        assert [name for name, _ in x.calls] == ["Stop"] * live.RPC_ATTEMPTS  # one task's attempts
        assert sorted(t.task_id for t in backend._orphans) == sorted(ids(6))
        x.refuse_stop = False
        backend.poll()
        assert x.tasks == {} and backend._orphans == []


def test_a_batch_calls_deadline_grows_with_its_requests_up_to_a_bound_and_not_for_a_silent_agent() -> None:
    x = TableAgent("x", ("h0",))
    with backend_on(x) as backend:
        timeouts: list[float] = []

        class Answer:
            def result(self) -> str:
                return "answer"

        class Call:  # a gRPC method: called, or (to an agent's host) made a future of; records each deadline
            def __call__(self, request, timeout):  # type: ignore[no-untyped-def]
                timeouts.append(timeout)
                return "answer"

            def future(self, request, timeout):  # type: ignore[no-untyped-def]
                timeouts.append(timeout)
                return Answer()

        call = Call()

        attempt = backend.rpc_timeout / live.RPC_ATTEMPTS
        for items in (1, 100, 101, 250, 100_000):
            backend._retry(call, None, items=items)
        assert timeouts == pytest.approx([attempt, attempt, 2 * attempt, 3 * attempt,
                                          live.BATCH_DEADLINES_MAX * attempt])
        timeouts.clear()
        backend.agents["x"].silent = True
        backend._retry(call, None, host="h0", items=1000)
        assert timeouts == [pytest.approx(min(attempt, live.FAST_TIMEOUT_S))]


def test_an_agents_shutdown_says_how_many_unfinished_tasks_it_stopped(caplog: pytest.LogCaptureFixture) -> None:
    """Operator review: a ``vcemu agent`` stopped by SIGTERM with 3 tasks running said nothing of them."""
    import logging

    core = started_core(3)
    core.stop_tasks(["t0"])
    with caplog.at_level(logging.INFO, logger="vcemu.agent"):
        core.shutdown()
    said = [r.getMessage() for r in caplog.records if r.name == "vcemu.agent" and "shut down" in r.getMessage()]
    assert said == ["shut down: 2 unfinished tasks stopped, work directory removed"], caplog.text


def test_an_agents_refusal_quotes_a_long_task_id_cut_short() -> None:
    """A 60,000-character task id quoted whole made the NOT_FOUND message exceed gRPC's 16 KiB of metadata: the
    client got RESOURCE_EXHAUSTED "Stream removed" (API review); the coordinator's messages were cut already."""
    from node_agent.agent import AgentCore, AgentError, HostSpec
    from node_agent.dutycycle import DutyCycleDriver

    core = AgentCore("quote-test", [HostSpec("h0", 1.0, 1 << 30)], DutyCycleDriver(), {})
    try:
        with pytest.raises(AgentError) as info:
            core.pause("x" * 60_000)
        assert len(str(info.value)) < 1_000 and "(60,000 characters)" in str(info.value)
    finally:
        core.shutdown()


def test_a_start_whose_caller_gave_up_while_it_waited_is_not_made() -> None:
    """A StartTask that waited out the agent's lock past its caller's deadline made its task anyway, after the
    coordinator had stopped that id (NOT_FOUND) and started the job elsewhere: two copies (concurrency review)."""
    import time

    from node_agent.agent import AgentCore, AgentError, HostSpec
    from node_agent.dutycycle import DutyCycleDriver
    from workloads import modeled

    core = AgentCore("deadline-test", [HostSpec("h0", 1.0, 1 << 30)], DutyCycleDriver(), {})
    try:
        with pytest.raises(AgentError) as info:
            core.start_task("j/0", "h0", modeled.NAME, 0.5, 0.5, 10.0, 0, expires_at=time.monotonic() - 0.1)
        assert info.value.code == "DEADLINE_EXCEEDED" and not core._tasks
        core.start_task("j/0", "h0", modeled.NAME, 0.5, 0.5, 10.0, 0, expires_at=time.monotonic() + 30)
        assert list(core._tasks) == ["j/0"]
    finally:
        core.shutdown()


def test_a_stop_that_keeps_failing_is_warned_of_once(caplog: pytest.LogCaptureFixture) -> None:
    """A soak test: an orphan's Stop is retried at every poll while its agent is away, and each failure was warned of
    again (106 warnings for 16 tasks in the few seconds an agent was down); once per task now, the retries at DEBUG."""
    x = FailsStops("x", ("h0",))
    with backend_on(x) as backend:
        engine = running(x, backend, ("h0",) * 2)
        a = ids(2)
        x.failing = set(a)
        with caplog.at_level("DEBUG", logger="vcemu.live"):
            engine.cancel("a")
            for _ in range(3):
                backend.poll()
        warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "Stop " in r.getMessage()]
        again = [r for r in caplog.records if r.levelname == "DEBUG" and "failed again" in r.getMessage()]
        assert sorted(m.split()[1] for m in warned) == sorted(a), warned  # one each
        assert len(again) == 3 * 2 and sorted(t.task_id for t in backend._orphans) == sorted(a)
        x.failing = set()
        backend.poll()
        assert backend._orphans == [] and x.tasks == {}
