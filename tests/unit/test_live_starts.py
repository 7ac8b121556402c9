"""A job's tasks on an agent start in one StartTasks call per host (358dc27: one StartTask per task made a 10,000-task
job on 4 hosts take 57 s until it ran). Pinned here:

* the agent (:meth:`AgentCore.start_tasks`) answers a batch as the same starts made one at a time would, stopping
  at the first failure other than ALREADY_EXISTS, with each host's CPU and memory summed once per batch and kept
  up to date as it goes (made again after a wait for an ending task of a start's id);
* its servicer answers each start tried with its own result, a failure by its status code's name and the message
  a StartTask alone would have had;
* the live backend sends one StartTasks per host (several under :data:`live.BATCH_BYTES`), a start refused there
  again alone by the single call's rules (its message, leftovers stopped), counts ALREADY_EXISTS as started,
  takes every start of an unanswered call for an orphan (stopped at the next polls) and fails the job's start as
  unreachable, falls back to one StartTask per task on an agent without StartTasks, and resumes a checkpointed
  job the same way.

The coordinator-side agents are :class:`~tests.unit.scripted_agent.TableAgent` (gRPC servers on 127.0.0.1 with
the real agent's task-table rules) or the real agent's core behind its servicer; modeled tasks, no processes."""

from __future__ import annotations

import itertools
import math
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import grpc
import pytest

from coordinator.backends import live
from coordinator.backends.base import BackendError
from coordinator.model import JobSpec, JobState
from coordinator.plan import Pause, Plan, Resume, Start
from node_agent.agent import AgentCore, AgentError, HostSpec, TaskStart
from node_agent.dutycycle import DutyCycleDriver
from node_agent.runner import TaskView
from node_agent.server import AgentServicer
from vcemu.v1 import agent_pb2, agent_pb2_grpc
from workloads import modeled

from .scripted_agent import TableAgent, agent_served, backend_on, engine_on

_ids = itertools.count()


def new_core(hosts: Sequence[HostSpec]) -> AgentCore:
    """A real agent's core (modeled tasks only: no processes, no cgroups) under an agent id of its own."""
    return AgentCore(f"pytest-starts-{next(_ids)}", list(hosts), DutyCycleDriver(), {})


@contextmanager
def cores(n: int, hosts: Sequence[HostSpec]) -> Iterator[list[AgentCore]]:
    made = [new_core(hosts) for _ in range(n)]
    try:
        yield made
    finally:
        for core in made:
            core.shutdown()


def ts(task_id: str, host: str, share: float, memory: int = 0, **fields: object) -> TaskStart:
    """A modeled task's start (need 1, an hour of work, from 0) with ``fields`` changed."""
    start = TaskStart(task_id, host, modeled.NAME, share, 1.0, 3600.0, memory)
    return TaskStart(**{**start.__dict__, **fields})  # type: ignore[arg-type]


def one_by_one(core: AgentCore, starts: Sequence[TaskStart]) -> list[TaskView | Exception]:
    """``starts`` made by :meth:`AgentCore.start_task`, one call each, stopping where a batch stops: at the first
    failure other than ALREADY_EXISTS."""
    out: list[TaskView | Exception] = []
    for s in starts:
        try:
            out.append(core.start_task(s.task_id, s.host, s.workload, s.cpu_share, s.cpu_need, s.work_seconds,
                                       s.memory_bytes, s.start_progress, s.transactional))
        except Exception as e:  # noqa: BLE001 (the one-by-one answer, whatever it is)
            out.append(e)
            if getattr(e, "code", None) != "ALREADY_EXISTS":
                break
    return out


def outcome(o: TaskView | Exception, core: AgentCore) -> tuple[object, ...]:
    """A start's result, comparable across two agents (the agent's id taken out of messages)."""
    if isinstance(o, Exception):
        return type(o).__name__, getattr(o, "code", None), str(o).replace(core.agent_id, "<agent>")
    return o.task_id, o.host, o.workload, o.state, o.cpu_share, o.progress, o.message


def table(core: AgentCore) -> list[tuple[object, ...]]:
    """The agent's tasks, with what its capacity checks read (state, share, reserved memory)."""
    return sorted((task_id, t.spec.host, t.state.name, t.cpu_share, t.spec.memory_bytes, t.spec.start_progress)
                  for task_id, t in core._tasks.items())


# ---- the agent: a batch answers as its starts one at a time ----------------------------------------------------

#: Small hosts, so that CPU (shares are fractions of a host) and memory both refuse starts.
SMALL = (HostSpec("h", 1.0, 1000), HostSpec("g", 2.0, 700), HostSpec("k", 0.5, 400))


def random_start(rng: random.Random) -> TaskStart:
    """A start on a random small host (now and then an unknown one), most of them valid, some not."""
    r = rng.random()
    host = "nohost" if r < 0.03 else rng.choice(["h", "h", "g", "g", "k"])
    share = rng.uniform(0.03, 0.45) if rng.random() < 0.93 else rng.choice([0.0, -0.1, 1.5, math.nan])
    memory = rng.randint(0, 300) if rng.random() < 0.94 else rng.choice([-1, 5000])
    fields: dict[str, object] = {"cpu_need": rng.uniform(0.05, 1.0), "start_progress": rng.uniform(0.0, 0.9)}
    r = rng.random()
    if r < 0.02:
        fields["work_seconds"] = 0.0
    elif r < 0.04:
        fields["start_progress"] = 1.0
    elif r < 0.06:
        fields["workload"] = "nope"
    task_id = "" if rng.random() < 0.015 else f"j{rng.randrange(16)}"  # few ids: duplicates, in and across batches
    return ts(task_id, host, share, memory, **fields)


def between_batches(rng: random.Random, agents: Sequence[AgentCore]) -> list[list[tuple[object, ...]]]:
    """The same random stops, pauses and resumes on each of ``agents`` (whose tables are equal): capacity freed,
    a paused task holding memory and no CPU, a resume refused. Their outcomes, per agent."""
    ids = sorted(agents[0]._tasks)
    outcomes: list[list[tuple[object, ...]]] = [[] for _ in agents]
    for _ in range(rng.randint(0, 3)):
        if not ids:
            break
        task_id = rng.choice(ids)
        op = rng.choice(["stop", "stop", "pause", "resume"])
        for core, out in zip(agents, outcomes, strict=True):
            try:
                view = getattr(core, op)(task_id)
                out.append((op, view.task_id, view.state))
            except AgentError as e:
                out.append((op, e.code, e.message.replace(core.agent_id, "<agent>")))
        if op == "stop":
            ids.remove(task_id)
    return outcomes


def random_run(seed: int, batch: AgentCore, single: AgentCore | None = None) -> list[tuple[list[TaskStart], list]]:
    """Seed ``seed``'s batches of starts applied to ``batch`` by :meth:`~AgentCore.start_tasks` (and, given
    ``single``, the same by :func:`one_by_one`, checked equal after each batch). The batches and their results."""
    rng = random.Random(seed)
    agents = [batch] if single is None else [batch, single]
    runs = []
    for b in range(rng.randint(8, 12)):
        starts = [random_start(rng) for _ in range(rng.randint(1, 8))]
        got = batch.start_tasks(starts)
        runs.append((starts, got))
        if single is not None:
            expected = one_by_one(single, starts)
            assert [outcome(o, batch) for o in got] == [outcome(o, single) for o in expected], (seed, b, starts)
            assert table(batch) == table(single), (seed, b)
        assert batch._used is None and batch._memory is None  # no sum left behind: later requests sum afresh
        moves = between_batches(rng, agents)
        assert moves[0] == moves[-1], (seed, b)
    return runs


@pytest.mark.parametrize("seed", range(20))
def test_a_batch_of_starts_answers_and_leaves_the_table_as_the_same_starts_one_by_one(seed: int) -> None:
    """The batch checks each start against its host's CPU and memory in use summed once for the batch and kept up to
    date as it goes (running sums): its answers (views, or error codes and messages) and the task table it leaves are
    those of the same starts made one at a time, stopping where it stops. Random batches on three small hosts: CPU
    and memory refusals, ids already there (ALREADY_EXISTS, from an earlier batch or earlier in the same one), bad
    values, an unknown host; between batches, stops, pauses and resumes. A running sum that missed a start made
    earlier in the batch, or a task stopped or paused since the last batch, would let a start through that one at a
    time is refused (or the other way round)."""
    with cores(2, SMALL) as (batch, single):
        random_run(seed, batch, single)


def test_the_random_batches_meet_every_refusal_the_running_sums_decide() -> None:
    """(Of the equivalence test above.) Its seeds do make the cases it is meant to compare: CPU and memory refusals
    of a start after another start on the same host earlier in the same batch (what the running sums decide),
    ALREADY_EXISTS followed by further starts in its batch, batches cut short, bad values and an unknown host."""
    seen: Counter[str] = Counter()
    for seed in range(20):
        with cores(1, SMALL) as (core,):
            for starts, got in random_run(seed, core):
                if len(got) < len(starts):
                    seen["cut short"] += 1
                for k, o in enumerate(got):
                    if not isinstance(o, AgentError):
                        continue
                    field = o.message.split(":")[0]
                    seen[f"{o.code} {field}"] += 1
                    earlier = {v.host for v in got[:k] if isinstance(v, TaskView)}
                    if o.code == "FAILED_PRECONDITION" and starts[k].host in earlier:
                        seen[f"{field} after a start on its host in the batch"] += 1
                    if o.code == "ALREADY_EXISTS" and k < len(got) - 1:
                        seen["ALREADY_EXISTS then more"] += 1
    for case in ("cpu_share after a start on its host in the batch", "memory_bytes after a start on its host in the "
                 "batch", "ALREADY_EXISTS then more", "cut short", "NOT_FOUND host", "INVALID_ARGUMENT cpu_share",
                 "INVALID_ARGUMENT memory_bytes", "INVALID_ARGUMENT task_id", "INVALID_ARGUMENT work_seconds",
                 "INVALID_ARGUMENT start_progress", "INVALID_ARGUMENT workload"):
        assert seen[case] >= 2, (case, seen)


def test_a_batch_makes_one_pass_over_a_hosts_tasks_for_all_its_starts() -> None:
    """The point of the batch at the agent: a host's CPU and its memory in use are each summed once (a pass over the
    agent's tasks each) for the whole batch, where one start at a time makes both passes per start (a job of n
    tasks: n passes over n tasks). Counted as calls of ``_live``, the list of a host's tasks those sums go over."""
    hosts = (HostSpec("h", 1.0, 1 << 30), HostSpec("g", 1.0, 1 << 30))
    with cores(2, hosts) as (batch, single):
        passes: dict[AgentCore, list[str]] = {batch: [], single: []}
        for core in (batch, single):
            for i in range(6):
                core.start_task(f"old{i}", "hg"[i % 2], modeled.NAME, 0.05, 1.0, 3600.0, 10)
            live_tasks = core._live
            core._live = (lambda host, seen=passes[core], real=live_tasks:  # type: ignore[method-assign]
                          seen.append(host) or real(host))
        starts = [ts(f"new{i}", "hg"[i % 3 == 0], 0.05, 10) for i in range(12)]
        got = batch.start_tasks(starts)
        assert [o.task_id for o in got] == [s.task_id for s in starts]  # type: ignore[union-attr]
        assert sorted(passes[batch]) == ["g", "g", "h", "h"]  # CPU and memory, once a host
        one_by_one(single, starts)
        assert Counter(passes[single]) == {"g": 2 * 4, "h": 2 * 8}  # both, once a start
        assert table(batch) == table(single)


def test_a_batch_stops_at_its_first_failure_other_than_already_exists() -> None:
    """One result per start tried, in order; a start refused ends the batch (the starts after it are not tried: their
    job's start has failed), ALREADY_EXISTS does not (an earlier attempt of the same batch made that task). The
    refused start leaves nothing in the table, and the sums are gone after the batch."""
    with cores(1, (HostSpec("h", 1.0, 1000), HostSpec("g", 1.0, 1000))) as (core,):
        core.start_task("there", "g", modeled.NAME, 0.5, 1.0, 3600.0, 0)
        got = core.start_tasks([ts("a", "h", 0.4), ts("there", "g", 0.1), ts("b", "h", 0.4), ts("a", "h", 0.1),
                                ts("c", "g", 0.6), ts("d", "h", 0.1), ts("e", "g", 0.1)])
        assert [getattr(o, "code", getattr(o, "task_id", None)) for o in got] == [
            "a", "ALREADY_EXISTS", "b", "ALREADY_EXISTS", "FAILED_PRECONDITION"]
        assert str(got[-1]).startswith("cpu_share: host g has 0.5 of its CPU unallocated")
        assert sorted(core._tasks) == ["a", "b", "there"]  # c refused, d and e not tried
        assert core._used is None and core._memory is None
        for first in (ts("", "h", 0.1), ts("x", "nohost", 0.1), ts("x", "h", 0.1, memory_bytes=1001)):
            got = core.start_tasks([first, ts("y", "h", 0.1)])
            assert len(got) == 1 and isinstance(got[0], AgentError), got  # refused at once: y not tried
        assert sorted(core._tasks) == ["a", "b", "there"]
        # memory: h holds none yet; 600 fits, 600 more does not
        got = core.start_tasks([ts("m1", "h", 0.05, 600), ts("m2", "h", 0.05, 600), ts("m3", "h", 0.05, 1)])
        assert [getattr(o, "code", "") for o in got] == ["", "FAILED_PRECONDITION"]
        assert str(got[1]) == "memory_bytes: host h has 400 bytes free, the task needs 600"


def test_a_start_waiting_for_its_ids_stop_sums_its_host_again_after_the_wait() -> None:
    """A start whose id belongs to a task being stopped (its processes killed outside the lock) waits for that stop,
    the lock let go meanwhile; the host's sums are then made again: the stopped task no longer holds its share. Kept
    from before the wait, the running sum would still count it and refuse the start that one at a time is taken."""
    with cores(1, (HostSpec("h", 1.0, 1000),)) as (core,):
        core.start_task("x", "h", modeled.NAME, 0.5, 1.0, 3600.0, 0)
        task = core._tasks["x"]
        stopping, release = threading.Event(), threading.Event()
        real_stop = task.stop

        def slow_stop() -> None:  # (the kill of a process that takes its time)
            stopping.set()
            release.wait(10)
            real_stop()

        task.stop = slow_stop  # type: ignore[method-assign]
        stopper = threading.Thread(target=core.stop, args=("x",), daemon=True)
        stopper.start()
        assert stopping.wait(10)
        done = core._ending["x"].done
        waiting, real_wait = threading.Event(), done.wait
        done.wait = lambda timeout=None: waiting.set() or real_wait(timeout)  # type: ignore[method-assign]
        got: list[TaskView | Exception] = []
        batch = threading.Thread(target=lambda: got.extend(core.start_tasks(
            [ts("y", "h", 0.5), ts("x", "h", 0.5), ts("z", "h", 0.5)])), daemon=True)
        batch.start()
        assert waiting.wait(10), "the batch did not wait for x's stop"
        assert "y" in core._tasks and not got  # y started (beside the old x: 1.0), x waits
        release.set()
        batch.join(10)
        stopper.join(10)
        assert [getattr(o, "code", getattr(o, "task_id", None)) for o in got] == ["y", "x", "FAILED_PRECONDITION"]
        assert {task_id: t.cpu_share for task_id, t in core._tasks.items()} == {"y": 0.5, "x": 0.5}
        assert core._tasks["x"] is not task


# ---- the agent's servicer --------------------------------------------------------------------------------------


class Counting(AgentServicer):
    """The real agent's servicer, recording its start calls as TableAgent does: ("StartTask" | "StartTasks", ids)."""

    def __init__(self, core: AgentCore) -> None:
        super().__init__(core)
        self.calls: list[tuple[str, tuple[str, ...]]] = []

    def StartTask(self, r, context):  # noqa: N802
        self.calls.append(("StartTask", (r.task_id,)))
        return super().StartTask(r, context)

    def StartTasks(self, r, context):  # noqa: N802
        self.calls.append(("StartTasks", tuple(t.task_id for t in r.tasks)))
        return super().StartTasks(r, context)


@pytest.fixture()
def served() -> Iterator[tuple[AgentCore, agent_pb2_grpc.AgentStub]]:
    """A real agent's core (hosts h and g: 1 core, 1000 bytes each) behind its servicer on 127.0.0.1."""
    core = new_core((HostSpec("h", 1.0, 1000), HostSpec("g", 1.0, 1000)))
    with agent_served(core) as stub:
        yield core, stub


def request(task_id: str, host: str, share: float, memory: int = 0, **fields: object) -> agent_pb2.StartTaskRequest:
    return agent_pb2.StartTaskRequest(task_id=task_id, host=host, workload=modeled.NAME, cpu_share=share,
                                      cpu_need=1.0, work_seconds=3600.0, memory_bytes=memory, **fields)


def test_the_real_agent_answers_starttasks_with_a_result_per_start_tried_as_starttask_would(
    served: tuple[AgentCore, agent_pb2_grpc.AgentStub],
) -> None:
    """Over gRPC: each start tried has its result, in order, a started task's status or the failure's status code
    name and the message StartTask alone answers with (so that the coordinator can treat it as the single call's);
    ALREADY_EXISTS in the middle, the batch cut at the refusal, the starts after it not made."""
    core, stub = served
    batch = [request("a", "h", 0.4, 100, start_progress=0.25), request("b", "g", 0.5, 900), request("a", "h", 0.4),
             request("c", "h", 0.5, 100), request("d", "h", 0.2), request("e", "g", 0.1)]
    reply = stub.StartTasks(agent_pb2.StartTasksRequest(tasks=batch), timeout=5)
    got = [(r.error_code, r.task.task_id, r.task.host, round(r.task.cpu_share, 6), round(r.task.progress, 6))
           for r in reply.results]
    assert got == [("", "a", "h", 0.4, 0.25), ("", "b", "g", 0.5, 0.0), ("ALREADY_EXISTS", "", "", 0.0, 0.0),
                   ("", "c", "h", 0.5, 0.0), ("FAILED_PRECONDITION", "", "", 0.0, 0.0)]
    assert all(r.task.state == agent_pb2.TASK_STATE_RUNNING for r in reply.results if not r.error_code)
    assert reply.results[2].error == "task_id: task 'a' already exists on this agent"
    with pytest.raises(grpc.RpcError) as alone:
        stub.StartTask(batch[4], timeout=5)
    assert alone.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert reply.results[4].error == alone.value.details()
    assert sorted(core._tasks) == ["a", "b", "c"]  # d refused, e not tried

    # memory (g holds 900 of its 1000 bytes), an unknown host, a bad value: each ends its batch at once
    for bad, code, message in (
        (request("f", "g", 0.1, 200), "FAILED_PRECONDITION", "memory_bytes: host g has 100 bytes free"),
        (request("f", "nohost", 0.1), "NOT_FOUND", "host: no host 'nohost' on agent"),
        (request("f", "h", float("nan")), "INVALID_ARGUMENT", "cpu_share:"),
    ):
        reply = stub.StartTasks(agent_pb2.StartTasksRequest(tasks=[bad, request("z", "h", 0.01)]), timeout=5)
        assert [(r.error_code, r.error[:len(message)]) for r in reply.results] == [(code, message)]
    assert sorted(core._tasks) == ["a", "b", "c"]


def test_the_real_agent_answers_a_starts_internal_failure_in_its_result_and_stops_there(
    served: tuple[AgentCore, agent_pb2_grpc.AgentStub], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A start failing with something other than an AgentError (making its cgroup, say) is that start's result,
    INTERNAL with the message StartTask answers it with, and ends the batch; the starts before it are made."""
    core, stub = served
    real = core._new_task

    def new_task(start: TaskStart):  # type: ignore[no-untyped-def]
        if start.task_id == "broken":
            raise OSError(13, "Permission denied")  # (ENOSPC and the like: RESOURCE_EXHAUSTED, test_agent_exhaustion)
        return real(start)

    monkeypatch.setattr(core, "_new_task", new_task)
    reply = stub.StartTasks(agent_pb2.StartTasksRequest(tasks=[
        request("ok", "h", 0.1), request("broken", "h", 0.1), request("after", "h", 0.1)]), timeout=5)
    assert [(r.error_code, r.task.task_id) for r in reply.results] == [("", "ok"), ("INTERNAL", "")]
    assert reply.results[1].error == "agent failure: [Errno 13] Permission denied"
    assert sorted(core._tasks) == ["ok"] and core._used is None


def test_a_starts_unexpected_failure_is_answered_in_starttasks_as_starttask_answers_it(
    served: tuple[AgentCore, agent_pb2_grpc.AgentStub], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The proto's contract for a batch's result, for any failure of a start: the status code name and message the
    StartTask of the same request gets (the coordinator treats a refusal in a batch as that single call's)."""
    core, stub = served

    def new_task(start: TaskStart):  # type: ignore[no-untyped-def]
        raise RuntimeError("an unexpected failure")

    monkeypatch.setattr(core, "_new_task", new_task)
    start = request("x", "h", 0.1)
    with pytest.raises(grpc.RpcError) as alone:
        stub.StartTask(start, timeout=5)
    reply = stub.StartTasks(agent_pb2.StartTasksRequest(tasks=[start]), timeout=5)
    assert [(r.error_code, r.error) for r in reply.results] == [(alone.value.code().name, alone.value.details())]


# ---- the live backend ------------------------------------------------------------------------------------------


def spec(tasks: int, cpu: float = 0.1, job: str = "a", workload: str = modeled.NAME) -> JobSpec:
    return JobSpec(job, 0.0, tasks, cpu, 0.01, 100.0, workload)


def ids(job: str, first: int, n: int) -> list[str]:
    """The task ids of ``n`` tasks of ``job`` started with restart counts from ``first`` (a/0, a/1.1, ...)."""
    return [f"{job}/{i}" + (f".{first + i}" if first + i else "") for i in range(n)]


class RepliesLost(TableAgent):
    """A TableAgent that makes the starts of a StartTasks call with a host in ``lose_on`` and then loses its answer
    (UNAVAILABLE), for the next ``lose`` such calls: a connection that broke after the agent took the call."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lose_on: set[str] = set()
        self.lose = 1 << 30

    def StartTasks(self, request, context):  # noqa: N802
        reply = super().StartTasks(request, context)
        if self.lose > 0 and any(r.host in self.lose_on for r in request.tasks):
            self.lose -= 1
            context.abort(grpc.StatusCode.UNAVAILABLE, "connection reset by peer")
        return reply


def test_a_jobs_tasks_start_in_one_starttasks_per_host_in_task_order() -> None:
    """One call per host for all of the job's tasks there, in the order of its tasks, hosts in the order of their
    first task; a host's only task with StartTask (nothing to batch). The ids are those a restart count per task
    gives, each task recorded on its host once started."""
    x = TableAgent("x", ("h0", "h1", "h2"))
    with backend_on(x) as backend:
        engine = engine_on(backend)
        engine.arrive(spec(6))
        engine.apply(Plan((Start("a", ("h1", "h0", "h1", "h0", "h0", "h2"), 0.1),)))
        assert engine.jobs["a"].state is JobState.RUNNING, engine.jobs["a"].message
        a = ids("a", 0, 6)
        assert x.calls == [("StartTasks", (a[0], a[2])), ("StartTasks", (a[1], a[3], a[4])), ("StartTask", (a[5],))]
        assert [(t.task_id, t.host, t.saved) for t in backend._tasks["a"]] == [
            (a[0], "h1", False), (a[1], "h0", False), (a[2], "h1", False), (a[3], "h0", False), (a[4], "h0", False),
            (a[5], "h2", False)]
        assert {task_id: s.host for task_id, s in x.tasks.items()} == {
            a[0]: "h1", a[1]: "h0", a[2]: "h1", a[3]: "h0", a[4]: "h0", a[5]: "h2"}
        assert [r.task_id for r in x.started] == [a[0], a[2], a[1], a[3], a[4], a[5]]


def test_a_start_refused_in_a_batch_is_sent_alone_and_still_refused_fails_the_job_with_its_message() -> None:
    """h0's agent holds more CPU for job b than the model does, so the third of a's starts there is refused within
    the StartTasks. It is sent again alone (a StartTask), by the single call's rules: the agent's tasks are looked
    at for leftovers to stop, and the two tasks of a started before it in that call must count as a's (recorded as
    started before that look), not as leftovers. Still refused: a fails with the StartTask's message, and every task
    of a already started (on both hosts) is stopped; b runs on."""
    x = TableAgent("x", ("h0", "h1"))
    x.check_capacity = True
    with backend_on(x) as backend:
        engine = engine_on(backend)
        engine.arrive(spec(1, 0.5, job="b"))
        engine.apply(Plan((Start("b", ("h0",), 0.5),)))
        x.tasks["b/0"].cpu_share = 0.75  # (the agent's count and the model's part; how is not the point)
        x.calls.clear()
        at_alone: list[list[tuple[str, bool]]] = []  # a's task list when its refused start is sent alone

        def seen(r: agent_pb2.StartTaskRequest) -> None:
            if x.calls[-1][0] == "StartTask":
                at_alone.append([(t.task_id, t.saved) for t in backend._tasks["a"]])

        x.on_start = seen
        engine.arrive(spec(5, 0.125))
        engine.apply(Plan((Start("a", ("h1", "h1", "h0", "h0", "h0"), 0.125),)))
        a = ids("a", 0, 5)
        assert x.calls == [("StartTasks", (a[0], a[1])), ("StartTasks", (a[2], a[3], a[4])), ("StartTask", (a[4],))]
        assert at_alone == [[(a[0], False), (a[1], False), (a[2], False), (a[3], False), (a[4], True)]]
        rec = engine.jobs["a"]
        assert rec.state is JobState.FAILED
        assert rec.message == ("start failed: StartTask on h0: FAILED_PRECONDITION: cpu_share: host h0 has 0 of its "
                               "CPU unallocated, the request needs 0.125"), rec.message
        assert list(x.tasks) == ["b/0"]  # a's four started tasks stopped
        assert engine.jobs["b"].state is JobState.RUNNING and "a" not in backend._tasks


def test_a_start_refused_in_a_batch_that_goes_through_alone_lets_the_rest_go_on_in_a_new_call() -> None:
    """A task no job owns holds half of h0 (a crashed coordinator's, say): the fifth of a's starts is refused within
    the StartTasks. Sent alone, the refusal has the leftover stopped and the start made; the starts after it go in a
    new StartTasks, and the job runs with every task on the agent."""
    x = TableAgent("x", ("h0",))
    x.check_capacity = True
    x.tasks["stale/0"] = agent_pb2.TaskStatus(task_id="stale/0", host="h0", cpu_share=0.5,
                                              state=agent_pb2.TASK_STATE_RUNNING)
    with backend_on(x) as backend:
        engine = engine_on(backend)
        engine.arrive(spec(8, 0.125))
        engine.apply(Plan((Start("a", ("h0",) * 8, 0.125),)))
        rec = engine.jobs["a"]
        assert rec.state is JobState.RUNNING, rec.message
        a = ids("a", 0, 8)
        # the lone StartTask refused, the leftover stopped, the StartTask again: taken
        assert x.calls == [("StartTasks", tuple(a)), ("StartTask", (a[4],)), ("StartTask", (a[4],)),
                           ("StartTasks", tuple(a[5:]))]
        assert sorted(x.tasks) == sorted(a)
        assert [(t.task_id, t.saved) for t in backend._tasks["a"]] == [(i, False) for i in a]
        assert backend.poll() == []  # nothing vanished


def test_an_unanswered_starttasks_makes_its_starts_orphans_and_the_jobs_start_unreachable() -> None:
    """The agent took the call and made the tasks, but no answer came back (every attempt): any of them may run. Each
    becomes an orphan, the start fails as unreachable (the engine keeps the job pending, to offer it again), the
    tasks started on the other host are stopped, and the orphans' Stops go through at the next poll. The job
    then starts under new ids."""
    x = RepliesLost("x", ("h0", "h1"))
    x.lose_on = {"h1"}
    errors: list[BackendError] = []
    with backend_on(x) as backend:
        real_start = backend.start

        def start(*args: object) -> None:
            try:
                real_start(*args)  # type: ignore[arg-type]
            except BackendError as e:
                errors.append(e)
                raise

        backend.start = start  # type: ignore[method-assign]
        engine = engine_on(backend)
        engine.arrive(spec(4, 0.25))
        engine.apply(Plan((Start("a", ("h0", "h0", "h1", "h1"), 0.25),)))
        a = ids("a", 0, 4)
        assert x.calls == [("StartTasks", (a[0], a[1]))] + [("StartTasks", (a[2], a[3]))] * live.RPC_ATTEMPTS
        assert [(str(e), e.unreachable) for e in errors] == [
            ("StartTasks on h1: UNAVAILABLE: connection reset by peer", True)]
        assert engine.jobs["a"].state is JobState.PENDING, engine.jobs["a"].message
        assert sorted(t.task_id for t in backend._orphans) == [a[2], a[3]]
        assert sorted(x.tasks) == [a[2], a[3]]  # h0's stopped; h1's made, unconfirmed
        backend.poll()
        assert x.tasks == {} and backend._orphans == []
        x.lose_on.clear()
        engine.apply(Plan((Start("a", ("h0", "h0", "h1", "h1"), 0.25),)))
        assert engine.jobs["a"].state is JobState.RUNNING, engine.jobs["a"].message
        assert sorted(x.tasks) == sorted(ids("a", 4, 4))


def test_starts_an_agent_answers_already_exists_count_as_started() -> None:
    """ALREADY_EXISTS is what a retried StartTasks meets when the first attempt's answer was lost after the agent
    made the tasks (ids are never reused): those starts are confirmed, not refused; no StartTask is sent for them,
    nothing is an orphan. Also in the middle of a call (one task there already): the starts after it are made."""
    x = RepliesLost("x", ("h0", "h1"))
    x.lose_on, x.lose = {"h0"}, 1
    with backend_on(x) as backend:
        engine = engine_on(backend)
        engine.arrive(spec(3))
        engine.apply(Plan((Start("a", ("h0",) * 3, 0.1),)))
        a = ids("a", 0, 3)
        assert engine.jobs["a"].state is JobState.RUNNING, engine.jobs["a"].message
        assert x.calls == [("StartTasks", tuple(a))] * 2  # the second attempt: ALREADY_EXISTS each
        assert backend._orphans == [] and sorted(x.tasks) == a
        assert [(t.task_id, t.saved) for t in backend._tasks["a"]] == [(i, False) for i in a]

        b = ids("b", 0, 3)
        x.tasks[b[1]] = agent_pb2.TaskStatus(task_id=b[1], host="h1", state=agent_pb2.TASK_STATE_RUNNING)
        x.calls.clear()
        engine.arrive(spec(3, job="b"))
        engine.apply(Plan((Start("b", ("h1",) * 3, 0.1),)))
        assert engine.jobs["b"].state is JobState.RUNNING, engine.jobs["b"].message
        assert x.calls == [("StartTasks", tuple(b))]
        assert [(t.task_id, t.saved) for t in backend._tasks["b"]] == [(i, False) for i in b]
        assert backend.poll() == []  # nothing vanished


def test_an_agent_without_starttasks_gets_one_starttask_per_task_and_is_not_asked_again() -> None:
    """An agent from before StartTasks answers UNIMPLEMENTED: the call's starts, and every later one to that agent,
    go as one StartTask per task; another agent still gets StartTasks."""
    x, y = TableAgent("x", ("h0", "h1")), TableAgent("y", ("h2",))
    x.unimplemented.add("StartTasks")
    with backend_on(x, y) as backend:
        engine = engine_on(backend)
        engine.arrive(spec(6))
        engine.apply(Plan((Start("a", ("h0", "h0", "h1", "h1", "h2", "h2"), 0.1),)))
        assert engine.jobs["a"].state is JobState.RUNNING, engine.jobs["a"].message
        a = ids("a", 0, 6)
        assert x.calls == [("StartTasks", (a[0], a[1])), *(("StartTask", (i,)) for i in a[:4])]
        assert y.calls == [("StartTasks", (a[4], a[5]))]
        assert sorted(x.tasks) == a[:4] and sorted(y.tasks) == a[4:]
        x.calls.clear()
        y.calls.clear()
        engine.arrive(spec(4, job="b"))
        engine.apply(Plan((Start("b", ("h1", "h1", "h2", "h2"), 0.1),)))
        b = ids("b", 0, 4)
        assert x.calls == [("StartTask", (b[0],)), ("StartTask", (b[1],))]
        assert y.calls == [("StartTasks", (b[2], b[3]))]
        assert engine.jobs["b"].state is JobState.RUNNING, engine.jobs["b"].message


def test_a_hosts_starts_over_the_batch_limit_go_in_several_calls_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above :data:`live.BATCH_BYTES` (under the agent's request limit) a host's starts go in several StartTasks,
    each within the limit, together every start once, in the job's order and under its ids."""
    monkeypatch.setattr(live, "BATCH_BYTES", 200)
    x = TableAgent("x", ("h0", "h1"))
    with backend_on(x) as backend:
        engine = engine_on(backend)
        engine.arrive(spec(14, 0.05))
        engine.apply(Plan((Start("a", ("h0",) * 12 + ("h1",) * 2, 0.05),)))
        assert engine.jobs["a"].state is JobState.RUNNING, engine.jobs["a"].message
        a = ids("a", 0, 14)
        h0 = x.calls[:-1]
        assert x.calls[-1] == ("StartTasks", tuple(a[12:]))
        assert len(h0) >= 3 and {name for name, _ in h0} == {"StartTasks"}, h0
        assert [i for _, batch in h0 for i in batch] == a[:12]
        sent = iter(x.started)
        for _, batch in h0:
            requests = [next(sent) for _ in batch]
            assert [r.task_id for r in requests] == list(batch)
            assert agent_pb2.StartTasksRequest(tasks=requests).ByteSize() <= live.BATCH_BYTES
        assert sorted(x.tasks) == sorted(a)


def test_a_checkpointed_jobs_resume_starts_its_tasks_in_one_starttasks_per_host_with_ids_reserved_at_once() -> None:
    """A checkpoint-mode pause stops a job's tasks; its resume starts them again as a start does: new ids (restart
    counts from the job's next), all of them reserved in one journal write before any start (each listed saved,
    with its checkpoint), one StartTasks per host (the resume's hosts, not the old ones), each from its checkpoint,
    and one closing write with every task running."""
    x = TableAgent("x", ("h0", "h1"))
    with backend_on(x, pause_mode="checkpoint") as backend:
        engine = engine_on(backend)
        engine.arrive(spec(4, 0.25))
        engine.apply(Plan((Start("a", ("h0", "h0", "h1", "h1"), 0.25),)))
        old = ids("a", 0, 4)
        for task_id, progress in zip(old, (0.1, 0.2, 0.3, 0.4), strict=True):
            x.set(task_id, progress)
        engine.apply(Plan((Pause("a"),)))
        assert x.tasks == {} and x.checkpoints == []  # (each progress from its Stop's answer)
        writes: list[tuple[int, list[tuple[str, str, float, bool]]]] = []
        backend.journal = lambda job, restarts, tasks: writes.append(
            (restarts, [(t.task_id, t.host, round(t.progress, 6), t.saved) for t in tasks]))
        x.on_start = lambda r: writes.append((-1, []))  # (a start, in the order of the writes)
        x.calls.clear()
        engine.apply(Plan((Resume("a", ("h1", "h0", "h1", "h0"), 0.25),)))
        assert engine.jobs["a"].state is JobState.RUNNING, engine.jobs["a"].message
        new = ids("a", 4, 4)
        assert new == ["a/0.4", "a/1.5", "a/2.6", "a/3.7"]
        assert x.calls == [("StartTasks", (new[0], new[2])), ("StartTasks", (new[1], new[3]))]
        hosts, progress = ("h1", "h0", "h1", "h0"), (0.1, 0.2, 0.3, 0.4)
        assert writes == [
            (7, [(i, h, p, True) for i, h, p in zip(new, hosts, progress, strict=True)]),
            *[(-1, [])] * 4,
            (7, [(i, h, p, False) for i, h, p in zip(new, hosts, progress, strict=True)]),
        ]
        assert {i: (s.host, round(s.progress, 6)) for i, s in x.tasks.items()} == {
            i: (h, p) for i, h, p in zip(new, hosts, progress, strict=True)}


def test_the_backend_over_the_real_agent_starts_a_job_per_host_and_undoes_a_refused_one() -> None:
    """The coordinator's StartTasks against the real agent's servicer: a job of four modeled tasks on two hosts starts
    in one call per host; a job whose third start the agent refuses (more CPU than the host has: the backend asked
    directly, past the engine's check) fails with the StartTask's refusal, its two started tasks stopped."""
    core = new_core((HostSpec("h", 1.0, 1 << 30), HostSpec("g", 1.0, 1 << 30)))
    servicer = Counting(core)
    try:
        with backend_on(servicer) as backend:
            backend.start(spec(4, 0.25, workload=modeled.NAME), ["h", "g", "h", "g"], 0.25)
            a = ids("a", 0, 4)
            assert servicer.calls == [("StartTasks", (a[0], a[2])), ("StartTasks", (a[1], a[3]))]
            assert {i: (v.host, v.cpu_share) for i, v in ((t, core.task(t)) for t in a)} == {
                a[0]: ("h", 0.25), a[1]: ("g", 0.25), a[2]: ("h", 0.25), a[3]: ("g", 0.25)}
            servicer.calls.clear()
            with pytest.raises(BackendError) as refused:
                backend.start(spec(3, 0.5, job="b", workload=modeled.NAME), ["g", "g", "g"], 0.5)
            b = ids("b", 0, 3)
            assert not refused.value.unreachable
            assert str(refused.value) == ("StartTask on g: FAILED_PRECONDITION: cpu_share: host g has 0 of its CPU "
                                          "unallocated, the request needs 0.5")
            assert servicer.calls == [("StartTasks", tuple(b)), ("StartTask", (b[1],))]
            assert sorted(core._tasks) == sorted(a)  # b's started task stopped, and a's left alone
            assert "b" not in backend._tasks
    finally:
        core.shutdown()


# ---- review fixes: process starts, unanswered orphans, a transactional start's progress -------------------------

def test_the_agent_lets_go_of_its_lock_after_each_process_start_and_sums_again() -> None:
    """A process start takes tens of milliseconds: a batch of them under one hold of the lock made the agent's
    Status, metrics and monitor wait for all of them, and a call of hundreds outlived the coordinator's deadline
    (review). After each process start the lock is let go, so each start sums its host again (both passes), as
    one at a time does; modeled starts share one sum per batch (above)."""
    core = AgentCore(f"pytest-starts-{next(_ids)}", [HostSpec("h", 1.0, 1 << 30)], DutyCycleDriver(),
                     {"dgemm": 1000.0})
    try:
        passes: list[str] = []
        live_tasks = core._live
        core._live = lambda host: passes.append(host) or live_tasks(host)  # type: ignore[method-assign]
        got = core.start_tasks([ts(f"p{i}", "h", 0.1, 1 << 20, workload="dgemm", cpu_need=0.1) for i in range(3)])
        assert [getattr(o, "task_id", o) for o in got] == ["p0", "p1", "p2"]
        assert passes == ["h"] * 6  # CPU and memory for each start
        assert core._used is None and core._memory is None
    finally:
        core.shutdown()


def test_a_workload_programs_tasks_start_one_call_each_and_modeled_ones_in_batches_with_deadlines_to_match() -> None:
    """A task of a workload program (a process) starts with a StartTask of its own: a process start takes the agent
    20 ms to over 100 ms under load, and a batch of 8 outlived one attempt's deadline on a loaded machine, its job
    undone and retried for over a minute (live check). Modeled tasks go in batches, each call given an attempt's
    deadline per :data:`live.BATCH_ITEMS_PER_DEADLINE` starts it carries (420 outlived one under load)."""
    n = 3
    x = TableAgent("x", ("h0",))
    with backend_on(x) as backend:
        timeouts: list[float] = []
        real_stub = backend.agents["x"].stub

        class Stub:  # the deadline each StartTasks attempt is given
            def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
                return getattr(real_stub, name)

            @property
            def StartTasks(self):  # type: ignore[no-untyped-def]  # noqa: N802
                method = real_stub.StartTasks

                class Timed:
                    def future(self, request, timeout):  # type: ignore[no-untyped-def]
                        timeouts.append(timeout)
                        return method.future(request, timeout=timeout)

                return Timed()

        backend.agents["x"].stub = Stub()  # type: ignore[assignment]
        engine = engine_on(backend)
        engine.arrive(spec(n, 0.01, workload="dgemm"))
        big = live.BATCH_ITEMS_PER_DEADLINE + 1
        engine.arrive(JobSpec("m", 0.0, big, 0.001, 0.001, 100.0, modeled.NAME))
        engine.apply(Plan((Start("a", ("h0",) * n, 0.01), Start("m", ("h0",) * big, 0.001))))
        assert engine.jobs["a"].state is engine.jobs["m"].state is JobState.RUNNING
        a, m = ids("a", 0, n), ids("m", 0, big)
        assert x.calls == [("StartTask", (a[0],)), ("StartTask", (a[1],)), ("StartTask", (a[2],)),
                           ("StartTasks", tuple(m))]
        assert timeouts == [pytest.approx(2 * backend.rpc_timeout / live.RPC_ATTEMPTS)]  # two attempts' deadlines


def test_a_poll_tries_one_stop_of_an_agent_that_does_not_answer_and_leaves_its_other_orphans_for_later() -> None:
    """An unanswered StartTasks leaves an orphan per start it carried; while their agent does not answer, each Stop
    costs a deadline, and a poll that tried them all took one per orphan (20 orphans: 20 s; review). On an agent
    that did not answer the poll, once one Stop goes unanswered its other orphans wait, untried, and go first at
    the next round its poll is due (each gets its turn; not in the rounds between, which do not ask it either:
    SILENT_POLL_S); when it answers again they all go."""
    x = RepliesLost("x", ("h0",))
    x.lose_on = {"h0"}
    stops: list[str] = []
    x.on_stop = lambda ref: stops.append(ref.task_id)
    with backend_on(x, rpc_timeout=1.0) as backend:
        engine = engine_on(backend)
        engine.arrive(spec(5, 0.1))
        engine.apply(Plan((Start("a", ("h0",) * 5, 0.1),)))
        assert engine.jobs["a"].state is JobState.PENDING and len(backend._orphans) == 5
        x.mute = x.refuse_stop = True  # the agent answers nothing
        backend.poll()
        a = ids("a", 0, 5)
        assert stops == [a[0]] and len(backend._orphans) == 5  # one orphan tried (one short attempt: silent)
        backend.poll()
        assert stops == [a[0]]  # its next poll not due: neither asked nor its orphans tried
        time.sleep(live.SILENT_POLL_S)
        backend.poll()
        assert stops == [a[0], a[1]]  # the ones left untried go first
        assert all(t.refused_since == math.inf for t in backend._orphans)  # (no answer: nothing refused)
        x.mute = x.refuse_stop = False
        stops.clear()
        time.sleep(2 * live.SILENT_POLL_S)  # (its second unanswered poll doubled the wait)
        backend.poll()
        # (each twice: the poll's reconciliation stops what its Status saw and no job owns, here gone already)
        assert sorted(set(stops)) == a and backend._orphans == [] and x.tasks == {}


def test_a_transactional_starts_progress_is_checked_too() -> None:
    """``start_progress`` outside [0, 1) is refused for every workload, a transactional one included (the batch's
    checks returned before it for that workload; review: 2.0 was taken, NaN failed as INTERNAL)."""
    with cores(1, (HostSpec("h", 1.0, 1 << 30),)) as (core,):
        for bad in (2.0, -1.0, math.nan):
            with pytest.raises(AgentError) as refused:
                core.start_task("t", "h", "transactional", 0.5, 0.5, 1.0, 1 << 20, start_progress=bad)
            assert refused.value.code == "INVALID_ARGUMENT" and "start_progress" in refused.value.message
        assert core._tasks == {}
