"""Races between the coordinator's threads (concurrency review), each forced by slowing one side."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable

import grpc
import pytest

from coordinator.engine import JobRecord
from coordinator.model import JobSpec, JobState
from coordinator.plan import Plan, Start
from coordinator.policies import get_policy
from coordinator.service import CoordinatorServer, CoordinatorServicer
from coordinator.store import StoredTask
from node_agent.agent import AgentCore, HostSpec
from node_agent.dutycycle import DutyCycleDriver
from node_agent.server import AgentServicer, describe
from tests.unit.scripted_agent import LocalCall, TableAgent, backend_on, engine_on, serve
from vcemu.v1 import agent_pb2
from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc
from workloads import modeled

_Ctx = LocalCall


def _register(agent: str) -> pb.RegisterAgentRequest:
    d = agent_pb2.DescribeReply(agent_id=agent, mode="cgroup-v1",
                                hosts=[agent_pb2.HostInfo(name=f"{agent}-h0", cpu_cores=1.0, memory_bytes=1 << 30)])
    return pb.RegisterAgentRequest(address="127.0.0.1:1", description=d)


def test_an_agent_that_registers_again_while_another_is_lost_is_not_lost_on_its_old_stamp() -> None:
    """A and B fall silent (C is heard: not every agent is silent); the watch declares A lost, which waits for the
    engine lock (slowed here); B registers again meanwhile. The watch read every heartbeat stamp first, then judged
    B's new handle by its old stamp and declared it lost right after its registration, requeueing its job."""
    s = CoordinatorServer(get_policy("greedy"), port=0, heartbeat_s=0.2, heartbeat_misses=3)  # not started
    svc = CoordinatorServicer(s)
    try:
        for a in ("A", "B", "C"):
            svc.RegisterAgent(_register(a), _Ctx())
            svc.Heartbeat(pb.HeartbeatRequest(agent_id=a), _Ctx())
        spec = JobSpec("job-00001", 0.0, 1, 0.5, 0.1, 100.0)
        s.backend.adopt(spec, 0, [StoredTask("job-00001/0", "B-h0", 0.3, agent_pb2.TASK_STATE_RUNNING, False)], 0.5,
                        JobState.RUNNING)
        s.engine.restore([JobRecord(spec, JobState.RUNNING, ("B-h0",), 0.5, 30.0, 0, 0.0)])
        time.sleep(1.0)  # both silent past 3 x 0.2 s
        svc.Heartbeat(pb.HeartbeatRequest(agent_id="C"), _Ctx())
        s._ran_at = time.monotonic()  # (no stall to excuse: the ticker is not running)
        cut_off = s.backend.cut_off

        def slow_cut_off(agent_id, handle=None):  # type: ignore[no-untyped-def]
            cut_off(agent_id, handle)
            if agent_id == "A":
                time.sleep(0.5)  # A's loss waiting for the engine lock through a turn of the loop

        s.backend.cut_off = slow_cut_off  # type: ignore[method-assign]

        def b_comes_back() -> None:
            time.sleep(0.1)
            svc.RegisterAgent(_register("B"), _Ctx())
            svc.Heartbeat(pb.HeartbeatRequest(agent_id="B"), _Ctx())

        t = threading.Thread(target=b_comes_back)
        t.start()
        s._check_agents()
        t.join()
        assert sorted(s.lost) == ["A"] and sorted(s.backend.agents) == ["B", "C"]
        assert s.engine.jobs["job-00001"].state is JobState.RUNNING
    finally:
        s.stop(grace=0)


def test_a_loop_that_outlives_the_stop_starts_no_task_after_it() -> None:
    """stop() waits 5 s for the engine loop, then stops every running task; a loop still inside a poll (slowed to
    6 s here) then started a pending job's task, left on the agent after the coordinator exited."""
    core = AgentCore("races-e", [HostSpec("h0", 1.0, 1 << 30)], DutyCycleDriver(), {})
    agent_server, agent_address = serve(AgentServicer(core))
    s = CoordinatorServer(get_policy("fcfs"), port=0).start()
    try:
        with grpc.insecure_channel(s.address) as ch:
            stub = pb_grpc.CoordinatorStub(ch)
            stub.RegisterAgent(pb.RegisterAgentRequest(address=agent_address, description=describe(core)), timeout=5)
            spec = {"tasks": 1, "cpu_need": 1.0, "memory": 0.1, "workload": modeled.NAME}
            stub.Submit(pb.SubmitRequest(spec=pb.JobSpec(work_seconds=2.0, **spec)), timeout=5)
            second = stub.Submit(pb.SubmitRequest(spec=pb.JobSpec(work_seconds=600.0, **spec)), timeout=5).job_id
            deadline = time.monotonic() + 10
            while not core._tasks and time.monotonic() < deadline:
                time.sleep(0.05)
        slow = threading.Event()
        status_round = s.backend._status_round

        def slow_round():  # type: ignore[no-untyped-def]
            if slow.is_set():
                slow.clear()
                time.sleep(6.0)  # a poll round that outlives stop()'s 5 s wait (silent agents, 1 s each)
            return status_round()

        s.backend._status_round = slow_round  # type: ignore[method-assign]
        slow.set()
        time.sleep(0.3)  # the loop is inside that poll now; the first job ends meanwhile
        s.stop()
        time.sleep(0.3)
        assert s.engine.jobs[second].state is JobState.PENDING
        assert not any(t.startswith(second) for t in core._tasks), core._tasks
    finally:
        s.stop(grace=0)
        agent_server.stop(0)
        core.shutdown()


def _during_a_long_turn(s: CoordinatorServer, calls: list[Callable[[], object]],
                        meanwhile: Callable[[], None]) -> list[grpc.StatusCode]:
    """Each of ``calls`` on a thread of its own while the loop holds the engine's lock through a 4-s turn, and
    ``meanwhile`` once they are under way: the calls' codes (OK or the refusal's)."""
    held = threading.Event()

    def long_turn() -> None:
        with s.engine.lock:
            held.set()
            time.sleep(4.0)

    threading.Thread(target=long_turn).start()
    held.wait()
    codes: list[grpc.StatusCode] = []

    def one(call: Callable[[], object]) -> None:
        try:
            call()
            codes.append(grpc.StatusCode.OK)
        except grpc.RpcError as exc:
            codes.append(exc.code())

    threads = [threading.Thread(target=one, args=(call,)) for call in calls]
    for t in threads:
        t.start()
    time.sleep(0.5)
    meanwhile()
    for t in threads:
        t.join()
    return codes


def test_cancels_waiting_out_a_long_turn_leave_threads_for_the_heartbeats() -> None:
    """While the loop holds the engine's lock through a long turn, Cancels wait for it on API threads; 16 of them
    took every thread and an agent's heartbeat (which needs no lock) missed its 2 s deadline. Past
    MAX_CANCELS_WAITING they are refused UNAVAILABLE (retry), and an unknown id waits for nothing."""
    from coordinator.service import API_THREADS, MAX_CANCELS_WAITING

    s = CoordinatorServer(get_policy("greedy"), port=0).start()
    try:
        with grpc.insecure_channel(s.address) as ch:
            stub = pb_grpc.CoordinatorStub(ch)
            stub.RegisterAgent(_register("a0"), timeout=5)
            spec = pb.JobSpec(tasks=1, cpu_need=0.1, memory=0.01, work_seconds=100.0)
            jobs = [stub.Submit(pb.SubmitRequest(spec=spec), timeout=5).job_id for _ in range(API_THREADS)]

            def meanwhile() -> None:
                t0 = time.monotonic()
                try:  # an unknown id is answered at once, lock or not
                    stub.Cancel(pb.JobRef(job_id="job-99999"), timeout=2)
                except grpc.RpcError as exc:
                    assert exc.code() == grpc.StatusCode.NOT_FOUND
                stub.Heartbeat(pb.HeartbeatRequest(agent_id="a0"), timeout=2.0)  # DEADLINE_EXCEEDED before
                assert time.monotonic() - t0 < 1.0

            codes = _during_a_long_turn(s, [functools.partial(stub.Cancel, pb.JobRef(job_id=j), timeout=30)
                                            for j in jobs], meanwhile)
        assert codes.count(grpc.StatusCode.UNAVAILABLE) == API_THREADS - MAX_CANCELS_WAITING
        assert codes.count(grpc.StatusCode.OK) == MAX_CANCELS_WAITING
    finally:
        s.stop(grace=0)


def test_registrations_waiting_out_a_long_turn_leave_threads_for_the_heartbeats() -> None:
    """Many agents started at once (64 on a 2-core machine) register while the loop holds the engine's lock through
    its turns: each RegisterAgent waited for it on an API thread, on past its caller's 2 s deadline (the agent then
    registered again, on another thread), until they took every thread and the heartbeats of the agents registered
    already missed their deadline: healthy agents were declared lost as the cluster came up. As Cancels, past
    MAX_REGISTRATIONS_WAITING they are refused UNAVAILABLE (the agent retries), and a heartbeat gets through."""
    from coordinator.service import API_THREADS, MAX_REGISTRATIONS_WAITING

    s = CoordinatorServer(get_policy("greedy"), port=0).start()
    try:
        with grpc.insecure_channel(s.address) as ch:
            stub = pb_grpc.CoordinatorStub(ch)
            stub.RegisterAgent(_register("a0"), timeout=5)

            def meanwhile() -> None:
                t0 = time.monotonic()
                reply = stub.Heartbeat(pb.HeartbeatRequest(agent_id="a0"), timeout=2.0)  # DEADLINE_EXCEEDED before
                assert reply.known and time.monotonic() - t0 < 1.0

            codes = _during_a_long_turn(s, [functools.partial(stub.RegisterAgent, _register(f"r{i}"), timeout=30)
                                            for i in range(API_THREADS)], meanwhile)
        assert codes.count(grpc.StatusCode.UNAVAILABLE) == API_THREADS - MAX_REGISTRATIONS_WAITING
        assert codes.count(grpc.StatusCode.OK) == MAX_REGISTRATIONS_WAITING
    finally:
        s.stop(grace=0)


def test_a_cancel_of_a_job_waiting_for_hosts_says_so() -> None:
    """A job accepted just before the last agent is lost waits in the intake (shown pending); Cancel answered
    NOT_FOUND "no job", and the job ran once hosts returned (concurrency review). It says why, and to retry."""
    s = CoordinatorServer(get_policy("greedy"), port=0)  # not started: the drains here are the only ones
    svc = CoordinatorServicer(s)
    try:
        svc.RegisterAgent(_register("a0"), _Ctx())
        (r,) = s.accept([pb.SubmitRequest(spec=pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.1, work_seconds=10))])
        s.lose_agent("a0", "agent a0 lost (test)")
        assert svc.GetJob(pb.JobRef(job_id=r.job.job_id), _Ctx()).state == "pending"
        try:
            svc.Cancel(pb.JobRef(job_id=r.job.job_id), _Ctx())
            raise AssertionError("cancelled")
        except RuntimeError as exc:
            assert str(exc).startswith("StatusCode.UNAVAILABLE: job_id: job 'job-00001' waits for hosts"), exc
    finally:
        s.stop(grace=0)


def test_an_agent_registering_again_is_never_judged_by_its_old_stamp() -> None:
    """RegisterAgent put the new handle in and stamped the agent's heartbeat only after adding its hosts: a look of
    the watch in between judged the new handle by the old stamp and declared the agent lost (review of the fix)."""
    s = CoordinatorServer(get_policy("greedy"), port=0, heartbeat_s=0.2, heartbeat_misses=3)  # not started
    svc = CoordinatorServicer(s)
    try:
        svc.RegisterAgent(_register("B"), _Ctx())
        svc.Heartbeat(pb.HeartbeatRequest(agent_id="B"), _Ctx())
        spec = JobSpec("job-00001", 0.0, 1, 0.5, 0.1, 100.0)
        s.backend.adopt(spec, 0, [StoredTask("job-00001/0", "B-h0", 0.3, agent_pb2.TASK_STATE_RUNNING, False)], 0.5,
                        JobState.RUNNING)
        s.engine.restore([JobRecord(spec, JobState.RUNNING, ("B-h0",), 0.5, 30.0, 0, 0.0)])
        time.sleep(1.0)  # B silent past 3 x 0.2 s (restarting, say), not yet declared lost
        s._ran_at = time.monotonic()
        add_hosts = s.engine.add_hosts

        def slow_add_hosts(hosts):  # type: ignore[no-untyped-def]
            time.sleep(0.3)  # between the new handle and the end of the registration
            return add_hosts(hosts)

        s.engine.add_hosts = slow_add_hosts  # type: ignore[method-assign]
        t = threading.Thread(target=lambda: svc.RegisterAgent(_register("B"), _Ctx()))
        t.start()
        time.sleep(0.1)  # B's new handle is in
        s._check_agents()
        t.join()
        assert not s.lost and sorted(s.backend.agents) == ["B"]
        assert s.engine.jobs["job-00001"].state is JobState.RUNNING
    finally:
        s.stop(grace=0)


# ---- a cancel racing a poll that saw the job end ----------------------------------------------------------------

@pytest.mark.parametrize(("end", "state", "message"), [("finish", JobState.DONE, "completed"),
                                                       ("fail", JobState.FAILED, "task a/0: out of memory")])
def test_a_cancel_between_a_poll_that_saw_the_job_end_and_the_loops_turn_leaves_it_as_it_ended(
        end: str, state: JobState, message: str) -> None:
    """The engine's loop polls the agents outside the engine's lock and acts on the poll's reports once it holds
    it; a Cancel that took the lock in between made a job whose tasks had all finished (or failed) CANCELLED, its
    completion lost (concurrency review, session 40). Forced here: the cancel runs in another thread while the
    loop's poll has returned. The job ends as the poll saw it, once: the loop's own turn then changes nothing."""
    x = TableAgent("x", ("h0",))
    with backend_on(x) as backend:
        engine = engine_on(backend)
        engine.arrive(JobSpec("a", 0.0, 1, 0.1, 0.01, 100.0, modeled.NAME))
        engine.apply(Plan((Start("a", ("h0",), 0.1),)))
        if end == "finish":
            x.finish("a/0")
        else:
            x.set("a/0", 0.4, agent_pb2.TASK_STATE_FAILED, "out of memory")
        cancelled: list[JobRecord] = []
        advance = backend.advance

        def advance_then_cancel(until: float) -> list:  # type: ignore[type-arg]
            reports = advance(until)
            t = threading.Thread(target=lambda: cancelled.append(engine.cancel("a")))
            t.start()
            t.join(5)
            return reports

        backend.advance = advance_then_cancel  # type: ignore[method-assign]
        engine.step()
        rec = engine.jobs["a"]
        assert cancelled == [rec] and (rec.state, rec.message) == (state, message)
        assert [(t.src, t.dst) for t in engine.history.transitions if t.job == "a"][-1] == (JobState.RUNNING, state)
        assert [t.dst for t in engine.history.transitions].count(state) == 1
        assert JobState.CANCELLED not in [t.dst for t in engine.history.transitions]
        backend.advance = advance  # type: ignore[method-assign]
        assert backend._ended.get("a") is not None
        backend.poll()
        assert backend._ended.get("a") is None  # the next poll forgets the reports the loop has acted on


def test_a_cancel_after_a_poll_that_saw_the_job_run_still_cancels_it() -> None:
    x = TableAgent("x", ("h0",))
    with backend_on(x) as backend:
        engine = engine_on(backend)
        engine.arrive(JobSpec("a", 0.0, 1, 0.1, 0.01, 100.0, modeled.NAME))
        engine.apply(Plan((Start("a", ("h0",), 0.1),)))
        x.set("a/0", 0.5)
        assert backend.poll() == [] and backend._ended.get("a") is None
        assert engine.cancel("a").state is JobState.CANCELLED


# ---- a heartbeat racing its agent's loss ------------------------------------------------------------------------

def test_a_heartbeat_received_as_its_agent_is_declared_lost_leaves_nothing_of_it_behind(tmp_path) -> None:
    """A Heartbeat looked its agent up, then the loss removed it (its stamp, `beating` entry, lease), then the
    heartbeat wrote them all back, the lease in the state file too, and told the gone agent it was known: it
    registered again one interval late, and an agent that never came back stayed in the stamps for good
    (concurrency review, session 40). Forced here: the heartbeat is slowed inside, and the loss runs meanwhile."""
    s = CoordinatorServer(get_policy("greedy"), port=0, state=str(tmp_path / "state.db"))  # not started
    svc = CoordinatorServicer(s)
    try:
        svc.RegisterAgent(_register("A"), _Ctx())
        inside, beat = threading.Event(), s.beat

        def slow_beat(agent_id: str) -> None:
            inside.set()
            time.sleep(0.3)  # the heartbeat between its look-up and its bookkeeping
            beat(agent_id)

        s.beat = slow_beat  # type: ignore[method-assign]
        s.granted.clear()  # (so that the heartbeat writes its lease to the store, as a first heartbeat does)
        replies: list[pb.HeartbeatReply] = []
        t = threading.Thread(target=lambda: replies.append(svc.Heartbeat(pb.HeartbeatRequest(agent_id="A"), _Ctx())))
        t.start()
        assert inside.wait(5)
        s.lose_agent("A", "agent A lost: test")
        t.join(5)
        assert replies[0].known  # received before the loss took the agent out: answered as known, then removed
        assert "A" not in s.heartbeats and "A" not in s.beating and "A" not in s.granted
        assert "A" not in s.store.load(transitions=False).leases
        assert svc.Heartbeat(pb.HeartbeatRequest(agent_id="A"), _Ctx()).known is False
    finally:
        s.stop(grace=0)


def test_a_heartbeat_from_an_agent_being_cut_off_is_told_it_is_not_known() -> None:
    """So that it registers again at once (waiting for the loss to end), rather than one interval later."""
    s = CoordinatorServer(get_policy("greedy"), port=0)  # not started
    svc = CoordinatorServicer(s)
    try:
        svc.RegisterAgent(_register("A"), _Ctx())
        assert svc.Heartbeat(pb.HeartbeatRequest(agent_id="A"), _Ctx()).known
        s.backend.cut_off("A")
        s.heartbeats.pop("A")
        assert svc.Heartbeat(pb.HeartbeatRequest(agent_id="A"), _Ctx()).known is False
        assert "A" not in s.heartbeats
    finally:
        s.stop(grace=0)


def test_a_heartbeat_does_not_wait_for_a_poll_behind_another_agents_loss() -> None:
    """The engine loop holds the backend's lock across a whole poll (agent RPCs included, up to rpc_timeout); a loss
    (the watch) takes the engine lock, then membership, then waits in remove_agent for the backend's lock. Every
    agent's Heartbeat then waits on membership until the poll ends."""
    s = CoordinatorServer(get_policy("greedy"), port=0)  # not started
    svc = CoordinatorServicer(s)
    try:
        for a in ("A", "B"):
            svc.RegisterAgent(_register(a), _Ctx())
            svc.Heartbeat(pb.HeartbeatRequest(agent_id=a), _Ctx())
        polling, done = threading.Event(), threading.Event()

        def poll() -> None:  # a poll round that takes 2 s (a slow agent), as advance() runs it: no engine lock
            with s.backend._lock:
                polling.set()
                done.wait(2.0)

        p = threading.Thread(target=poll)
        p.start()
        assert polling.wait(5)
        loss = threading.Thread(target=lambda: s.lose_agent("A", "agent A lost: test"))
        loss.start()
        time.sleep(0.2)  # the loss is in remove_agent, under membership
        t0 = time.monotonic()
        assert svc.Heartbeat(pb.HeartbeatRequest(agent_id="B"), _Ctx()).known
        took = time.monotonic() - t0
        done.set()
        p.join()
        loss.join()
        assert took < 0.5, f"B's heartbeat waited {took:.2f} s for a poll, behind A's loss"
    finally:
        s.stop(grace=0)
