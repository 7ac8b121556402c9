"""The agent's lease (fencing): an agent that hears nothing from its coordinator for ``lease_s`` seconds freezes
its tasks, before the coordinator can declare it lost and start their jobs elsewhere
(:meth:`node_agent.agent.AgentCore.renew_lease`, :attr:`coordinator.service.CoordinatorServer.lease_s`).

Before it, an agent cut off by the network, alive, ran its copy of a job on while the coordinator ran another
on a second agent, until the network healed and reconciliation stopped the first: two copies of one job taking
the measured cluster's CPU. The partition here is real: the agent's heartbeats and the coordinator's polls go
through TCP proxies that the test cuts."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import psutil
import pytest

from coordinator.backends.live import LiveBackend
from coordinator.model import JobSpec
from coordinator.policies import get_policy
from coordinator.service import CoordinatorServer, lease_for
from node_agent import leaseclock
from node_agent.agent import HostSpec, open_core
from node_agent.register import Registrar
from node_agent.runner import State
from node_agent.server import RunningAgent, start_agent
from tests.integration.conftest import wait_until
from vcemu.v1 import agent_pb2, agent_pb2_grpc
from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc

pytestmark = pytest.mark.integration
GIB = 1 << 30


class Proxy:
    """A TCP proxy on 127.0.0.1 to ``target``; :meth:`cut` closes its connections and refuses new ones (a
    partition, both ways), :meth:`heal` lets them through again. With ``drop_replies`` set, what the target sends
    back is swallowed while requests still reach it (a partition one way)."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._open: list[socket.socket] = []
        self._cut = False
        self.drop_replies = False
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._cut:
                    conn.close()
                    continue
                try:
                    upstream = socket.create_connection(self._target, timeout=5)
                except OSError:
                    conn.close()
                    continue
                self._open += [conn, upstream]
            for a, b, replies in ((conn, upstream, False), (upstream, conn, True)):
                threading.Thread(target=self._pipe, args=(a, b, replies), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, replies: bool) -> None:
        try:
            while data := src.recv(65536):
                if not (replies and self.drop_replies):
                    dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            for s in self._open:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self._open.clear()

    def heal(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self.cut()
        self._listener.close()


def _task(stub: agent_pb2_grpc.AgentStub) -> agent_pb2.TaskStatus | None:
    """The one task of an agent (a Status without a lease: it renews nothing), or None."""
    tasks = stub.Status(agent_pb2.StatusRequest(), timeout=5).tasks
    return tasks[0] if tasks else None


@dataclass
class Placed:
    """An agent of a :class:`Rig`, and the test's own line to it (a Status without a lease renews nothing)."""

    agent: RunningAgent
    stub: agent_pb2_grpc.AgentStub
    to_coordinator: Proxy | None = None  # its heartbeats' way, if proxied
    to_agent: Proxy | None = None  # the coordinator's polls' way, if proxied

    def cut(self) -> None:
        assert self.to_coordinator is not None and self.to_agent is not None
        self.to_coordinator.cut()
        self.to_agent.cut()


class Rig:
    """Agents of one host each, registered with a coordinator (through proxies the test can cut, if asked), all
    stopped at the end: registrars first, then agents, then proxies."""

    def __init__(self) -> None:
        self._closers: list[Callable[[], None]] = []

    def agent(self, host: str, coordinator: str, proxied: bool = False, cgroups: bool = False) -> Placed:
        a = start_agent([HostSpec(host, 1.0, GIB)], agent_id=f"pytest-{host}-{os.getpid()}", no_cgroups=not cgroups)
        self._closers.append(a.stop)
        placed = Placed(a, agent_pb2_grpc.AgentStub(grpc.insecure_channel(a.address)))
        if proxied:
            placed.to_coordinator, placed.to_agent = Proxy(coordinator), Proxy(a.address)
            self._closers += [placed.to_coordinator.close, placed.to_agent.close]
        registrar = Registrar(a, placed.to_coordinator.address if proxied else coordinator,  # type: ignore[union-attr]
                              placed.to_agent.address if proxied else a.address)  # type: ignore[union-attr]
        self._closers.insert(0, registrar.stop)
        assert registrar.registered.wait(10)
        return placed

    def close(self) -> None:
        for close in self._closers:
            with contextlib.suppress(Exception):
                close()


@pytest.fixture
def rig() -> Iterator[Rig]:
    agents = Rig()
    yield agents
    agents.close()


def _submit(coordinator: str, workload: str = "modeled", work: float = 600.0) -> tuple[pb_grpc.CoordinatorStub, str]:
    """One job of one task on a whole host: the coordinator's stub and the job's id."""
    stub = pb_grpc.CoordinatorStub(grpc.insecure_channel(coordinator))
    spec = pb.JobSpec(tasks=1, cpu_need=1.0, memory=0.1, work_seconds=work, workload=workload)
    return stub, stub.Submit(pb.SubmitRequest(spec=spec), timeout=5).job_id


def test_the_lease_ends_a_slack_before_the_loss_and_is_none_when_shorter_than_an_interval() -> None:
    assert lease_for(2.0, 3) == pytest.approx(5.0)  # the defaults: lost after 6 s, fenced after 5 s
    assert lease_for(0.5, 3) == pytest.approx(1.2)  # half an interval is under the 0.3 s slack
    assert lease_for(0.1, 3) == 0.0  # 0.3 - 0.3: no room
    assert lease_for(2.0, 1) == 0.0  # one miss: the lease would run out between two heartbeats


def test_an_agent_never_fenced_without_a_lease_and_fenced_tasks_thaw_only_on_resume() -> None:
    """The lease's rules on the agent alone (modeled tasks, no processes): no lease, no fencing; once it runs out,
    running tasks are frozen and reported fenced, paused ones left as they are; a renewal thaws nothing; a Resume
    thaws, a Pause makes a fenced task an ordinary paused one; a lease of 0 removes it."""
    core = open_core(f"pytest-lease-{os.getpid()}", [HostSpec("l0", 1.0, GIB)], no_cgroups=True)
    try:
        for task_id in ("run", "paused", "other"):
            core.start_task(task_id, "l0", "modeled", 0.3, 1.0, 600.0, 0)
        core.pause("paused")
        time.sleep(0.3)  # monitor rounds without a lease
        assert {t.task_id: t.state for t in core.status()[1]} == {
            "run": State.RUNNING, "paused": State.PAUSED, "other": State.RUNNING}
        core.renew_lease(0.2, leaseclock.now())
        time.sleep(0.05)
        assert not any(t.fenced for t in core.status()[1])  # not yet run out
        wait_until("the lease to run out and the running tasks to be fenced",
                   lambda: {t.task_id for t in core.status()[1] if t.fenced} == {"run", "other"}, timeout=5)
        views = {t.task_id: t for t in core.status()[1]}
        assert views["run"].state is State.PAUSED and "lease ran out" in views["run"].message
        assert views["paused"].state is State.PAUSED and not views["paused"].fenced
        core.renew_lease(60.0, leaseclock.now())  # the coordinator is heard again: nothing thaws by itself
        time.sleep(0.3)
        assert {t.task_id for t in core.status()[1] if t.fenced} == {"run", "other"}
        assert core.resume("run").state is State.RUNNING and not core.task("run").fenced
        paused = core.pause("other")
        assert paused.state is State.PAUSED and not paused.fenced and "lease" not in paused.message
        core.renew_lease(0.0, 0.0)  # no lease: never fenced again, however long the silence
        time.sleep(0.3)
        assert core.task("run").state is State.RUNNING
    finally:
        core.shutdown()


def test_a_modeled_task_of_an_agent_that_did_not_run_makes_no_progress_past_its_lease() -> None:
    """A modeled task has no process for a fencer to freeze, and its progress is share x elapsed time: an agent that
    did not run for a while (its monitor waits for the lock here) credited it, once fenced, with the whole while,
    work a real task's frozen process never did. Its progress now stops when the lease ran out."""
    core = open_core(f"pytest-lease-modeled-{os.getpid()}", [HostSpec("l0", 1.0, GIB)], no_cgroups=True)
    try:
        core.start_task("m", "l0", "modeled", 1.0, 1.0, 10.0, 0)  # 10 s of work at full share: 0.1 a second
        with core._lock:  # the agent's monitor stops here
            started = core._tasks["m"]._t
            core.renew_lease(0.3, started)
            time.sleep(1.5)
        wait_until("the task to be fenced", lambda: core.task("m").fenced, timeout=5)
        view = core.task("m")
        assert view.state is State.PAUSED
        assert view.progress == pytest.approx(0.03, abs=0.005), "progress past the lease's end was credited"
    finally:
        core.shutdown()


def test_a_renewal_does_not_wait_for_the_agents_lock() -> None:
    """Calls hold the agent's lock while they start a program or wait on a freezer (up to seconds); the registrar
    renews the lease after each heartbeat, and must not wait that long, or its next heartbeat would be late and the
    coordinator could declare a live agent lost."""
    core = open_core(f"pytest-lease-lock-{os.getpid()}", [HostSpec("k0", 1.0, GIB)], no_cgroups=True)
    try:
        renewal = threading.Thread(target=core.renew_lease, args=(30.0, leaseclock.now()), daemon=True)
        with core._lock:  # as a StartTask starting its program
            renewal.start()
            renewal.join(1.0)
            assert not renewal.is_alive(), "the renewal waited for the agent's lock"
    finally:
        core.shutdown()


@pytest.fixture
def dgemm_agent(cgroups_required: None) -> Iterator[RunningAgent]:
    agent = start_agent([HostSpec("lease-a0", 1.0, GIB)], agent_id=f"pytest-lease-a-{os.getpid()}")
    yield agent
    agent.stop()


@pytest.mark.timeout(60)
def test_a_poll_of_the_coordinator_resumes_a_task_its_agent_fenced(dgemm_agent: RunningAgent) -> None:
    """A coordinator silent for longer than the lease (its process restarting, say) finds its tasks frozen; its
    next poll resumes them, and they go on from where they were."""
    backend = LiveBackend(lease_s=30.0)
    backend.add_agent(dgemm_agent.address)
    with grpc.insecure_channel(dgemm_agent.address) as ch:
        stub = agent_pb2_grpc.AgentStub(ch)
        try:
            backend.start(JobSpec("j", 0.0, 1, 1.0, 0.1, 120.0, "dgemm"), ["lease-a0"], 1.0)
            wait_until("the task to run", lambda: (t := _task(stub)) is not None and t.cpu_seconds > 0.3)
            dgemm_agent.core.renew_lease(0.1, leaseclock.now())  # a lease that runs out at once, never renewed
            wait_until("the agent to fence the task", lambda: _task(stub).fenced, timeout=5)  # type: ignore[union-attr]
            frozen = _task(stub)
            assert frozen is not None and frozen.state == agent_pb2.TASK_STATE_PAUSED
            time.sleep(1.0)
            assert _task(stub).cpu_seconds == pytest.approx(frozen.cpu_seconds, abs=0.02)  # type: ignore[union-attr]
            # The coordinator's first poll: it has no reply of the agent's yet to renew the lease from, and a task
            # it resumed now would be frozen again at once: left fenced.
            assert backend.poll() == []
            assert _task(stub).fenced  # type: ignore[union-attr]
            assert backend.poll() == []  # the next renews it (from the first's reply) and resumes the task
            resumed = _task(stub)
            assert resumed is not None and resumed.state in (agent_pb2.TASK_STATE_RUNNING,
                                                             agent_pb2.TASK_STATE_STARTING) and not resumed.fenced
            wait_until("the task to compute again",
                       lambda: _task(stub).cpu_seconds > frozen.cpu_seconds + 0.3)  # type: ignore[union-attr]
            time.sleep(0.5)  # the lease the poll renewed (30 s) holds: not fenced again
            assert not _task(stub).fenced  # type: ignore[union-attr]
        finally:
            backend.stop("j")
            backend.close()


@pytest.mark.timeout(120)
def test_a_partitioned_agent_freezes_its_task_before_the_coordinator_starts_the_job_elsewhere(
        cgroups_required: None, rig: Rig) -> None:
    server = CoordinatorServer(get_policy("greedy"), port=0, heartbeat_s=0.5).start()  # lease 1.2 s, lost at 1.5 s
    assert server.lease_s == pytest.approx(1.2)
    try:
        a = rig.agent("part-a0", server.address, proxied=True, cgroups=True)  # heartbeats and polls proxied
        stub, job = _submit(server.address, "dgemm", 8.0)
        wait_until("the job to run on agent a", lambda: (t := _task(a.stub)) is not None and t.cpu_seconds > 0.5)
        b = rig.agent("part-b0", server.address, cgroups=True)

        fenced_at: list[float] = []
        started_on_b: list[float] = []
        a_cpu: list[float] = []  # the CPU seconds of agent a's copy, at each look once fenced
        done = threading.Event()

        def watch() -> None:  # when agent a froze its copy, and when agent b started the second
            while not done.is_set():
                if (t := _task(a.stub)) is not None and t.fenced:
                    fenced_at.append(time.monotonic())
                    a_cpu.append(t.cpu_seconds)
                if not started_on_b and _task(b.stub) is not None:
                    started_on_b.append(time.monotonic())
                time.sleep(0.02)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        cut = time.monotonic()
        a.cut()
        wait_until("the job to be started again on agent b", lambda: bool(started_on_b), timeout=30)
        time.sleep(0.5)
        copy = _task(a.stub)
        assert copy is not None and copy.fenced and copy.state == agent_pb2.TASK_STATE_PAUSED, copy
        assert fenced_at and fenced_at[0] < started_on_b[0], (fenced_at, started_on_b)
        print(f"fenced {fenced_at[0] - cut:.2f} s after the cut; restarted on b {started_on_b[0] - cut:.2f} s after")
        time.sleep(1.0)
        assert _task(a.stub).cpu_seconds == pytest.approx(copy.cpu_seconds, abs=0.02)  # type: ignore[union-attr]

        a.to_coordinator.heal()  # type: ignore[union-attr]
        a.to_agent.heal()  # type: ignore[union-attr]  # agent a comes back: its copy, owned by no job, is stopped
        wait_until("agent a's stale copy to be stopped", lambda: _task(a.stub) is None, timeout=30)
        assert max(a_cpu) == pytest.approx(copy.cpu_seconds, abs=0.02)  # frozen until it was stopped
        wait_until("the job to finish on b", lambda: stub.GetJob(pb.JobRef(job_id=job), timeout=5).state == "done",
                   timeout=60)
        done.set()
        watcher.join(5)
    finally:
        rig.close()
        server.stop()


@pytest.mark.timeout(60)
def test_a_coordinator_exiting_leaves_alone_an_agent_that_no_longer_answers(caplog: pytest.LogCaptureFixture) -> None:
    """At exit, the coordinator stops the jobs it runs; on an agent that no longer answers, a Stop that failed was
    logged "failed; will retry", with nothing left to retry it. It is logged at INFO now (its lease freezes what
    the agent still runs)."""
    server = CoordinatorServer(get_policy("greedy"), port=0, heartbeat_s=30.0).start()  # never declared lost here
    agent = start_agent([HostSpec("gone-a0", 1.0, GIB)], agent_id=f"pytest-gone-{os.getpid()}", no_cgroups=True)
    registrar = Registrar(agent, server.address, agent.address)
    try:
        assert registrar.registered.wait(10)
        stub = pb_grpc.CoordinatorStub(grpc.insecure_channel(server.address))
        spec = pb.JobSpec(tasks=1, cpu_need=1.0, memory=0.1, work_seconds=600, workload="modeled")
        job = stub.Submit(pb.SubmitRequest(spec=spec), timeout=5).job_id
        wait_until("the job to run", lambda: stub.GetJob(pb.JobRef(job_id=job), timeout=5).state == "running")
        registrar.stop()
        agent.server.stop(0).wait()  # the agent no longer answers
        wait_until("the coordinator's poll to go unanswered", lambda: server.backend.agents[agent.core.agent_id].silent)
        caplog.clear()
        server.stop()
        warned = [r.getMessage() for r in caplog.records if r.levelname in ("WARNING", "ERROR")]
        assert not [m for m in warned if "Stop " in m or "will retry" in m], warned
    finally:
        agent.core.shutdown()
        server.stop()


def _looks(a_stub: agent_pb2_grpc.AgentStub, b_stub: agent_pb2_grpc.AgentStub, done: threading.Event,
           log: list[tuple[float, agent_pb2.TaskStatus | None, bool]]) -> None:
    """Every 50 ms: (time, agent a's task, whether agent b has one)."""
    while not done.is_set():
        with contextlib.suppress(grpc.RpcError):
            log.append((time.monotonic(), _task(a_stub), _task(b_stub) is not None))
        time.sleep(0.05)


@pytest.mark.timeout(60)
def test_polls_whose_replies_are_lost_do_not_renew_the_lease(rig: Rig) -> None:
    """A poll whose reply the coordinator never receives is no sign of the agent's life to it, so it must renew
    nothing: the agent renews from the clock of the last reply the coordinator says (by echoing it) it received.
    It renewed from the poll's receipt, and with replies lost (a one-way partition) its copy ran on unfenced
    after the coordinator had restarted the job elsewhere (found by review: 5-6 looks over 0.3 s)."""
    server = CoordinatorServer(get_policy("greedy"), port=0, heartbeat_s=0.5).start()
    try:
        a = rig.agent("ow-a0", server.address, proxied=True)
        _submit(server.address)
        wait_until("the job to run on agent a", lambda: _task(a.stub) is not None)
        b = rig.agent("ow-b0", server.address)
        log: list[tuple[float, agent_pb2.TaskStatus | None, bool]] = []
        done = threading.Event()
        threading.Thread(target=_looks, args=(a.stub, b.stub, done, log), daemon=True).start()
        a.to_coordinator.cut()  # type: ignore[union-attr]  # no heartbeats
        a.to_agent.drop_replies = True  # type: ignore[union-attr]  # polls reach agent a, its replies are lost
        wait_until("the job to be started again on agent b", lambda: _task(b.stub) is not None, timeout=20)
        time.sleep(2.0)
        done.set()
        unfenced = [round(t, 2) for t, ta, on_b in log if on_b and ta is not None and not ta.fenced]
        assert not unfenced, f"agent a's copy ran unfenced while agent b ran the job, at {unfenced}"
        assert any(on_b and ta is not None and ta.fenced for _, ta, on_b in log)
    finally:
        rig.close()
        server.stop()


@pytest.mark.timeout(90)
def test_an_agent_heard_one_way_is_fenced_declared_lost_and_taken_again_once_it_can_be_reached(rig: Rig) -> None:
    """The coordinator's calls to agent a are cut while its heartbeats get through (a one-way partition; or an
    agent whose --advertise address the coordinator cannot reach). Its heartbeats renewed its lease and kept it
    registered: never declared lost, its job showed running, its progress frozen, for as long as the partition
    lasted (gray-failure review, session 44: 68 s and more). Its heartbeats no longer count once the calls have
    gone unanswered as long as the coordinator waits on a silent agent: its lease runs out (its task is frozen),
    it is declared lost naming why, and its job runs on agent b. Its registrations are refused while the
    coordinator cannot reach it (it was taken at once, given tasks that could not start, and lost again); once it
    can, it is taken again, and its stale copy stopped."""
    server = CoordinatorServer(get_policy("greedy"), port=0, heartbeat_s=0.5).start()  # lease 1.2 s, lost at 1.5 s
    try:
        a = rig.agent("ow1-a0", server.address, proxied=True)
        _submit(server.address)
        wait_until("the job to run on agent a", lambda: _task(a.stub) is not None)
        b = rig.agent("ow1-b0", server.address)
        a_id = a.agent.core.agent_id
        log: list[tuple[float, agent_pb2.TaskStatus | None, bool]] = []
        done = threading.Event()
        threading.Thread(target=_looks, args=(a.stub, b.stub, done, log), daemon=True).start()
        a.to_agent.cut()  # type: ignore[union-attr]  # the coordinator's calls to agent a; its heartbeats pass
        wait_until("the job to be started again on agent b", lambda: _task(b.stub) is not None, timeout=30)
        lost = dict(server.lost_agents())
        assert a_id in lost and "unreachable" in lost[a_id].reason and a.to_agent.address in lost[a_id].reason, (  # type: ignore[union-attr]
            lost)
        time.sleep(3.0)  # its registrations meanwhile: refused, the coordinator still cannot reach it
        assert a_id not in server.backend.agents and a_id in server.unreachable
        unfenced = [round(t, 2) for t, ta, on_b in log if on_b and ta is not None and not ta.fenced]
        assert not unfenced, f"agent a's copy ran unfenced while agent b ran the job, at {unfenced}"
        a.to_agent.heal()  # type: ignore[union-attr]
        wait_until("agent a to be taken again", lambda: a_id in server.backend.agents, timeout=15)
        wait_until("agent a's stale copy to be stopped", lambda: _task(a.stub) is None, timeout=15)
        assert a_id not in server.unreachable and _task(b.stub) is not None
        done.set()
    finally:
        rig.close()
        server.stop()


@pytest.mark.timeout(90)
def test_a_coordinator_restarted_with_a_shorter_heartbeat_waits_out_the_lease_granted_before(
        tmp_path: Path, rig: Rig) -> None:
    """A coordinator restarted on its state file declares a silent agent it restored lost after its own
    heartbeats; that agent may still hold the longer lease the earlier coordinator granted, and must have frozen
    its tasks first. The state file records the lease granted to each agent, and each restored agent's grace
    covers its own. Before, with a heartbeat of 4 s then 0.5 s, the job was restarted 2.6 s after the first
    coordinator stopped, beside agent a's copy, running with 7 s of its 10 s lease left (found by review)."""
    state = str(tmp_path / "state.db")
    first = CoordinatorServer(get_policy("greedy"), port=0, heartbeat_s=4.0, state=state).start()
    assert first.lease_s == pytest.approx(10.0)
    second = None
    try:
        a = rig.agent("rs-a0", first.address, proxied=True)
        _submit(first.address)
        wait_until("the job to run on agent a", lambda: _task(a.stub) is not None)
        first.stop()  # with a state file: its tasks are left to be adopted
        a.cut()  # and agent a is cut off from the next coordinator
        second = CoordinatorServer(get_policy("greedy"), port=0, heartbeat_s=0.5, state=state).start()
        b = rig.agent("rs-b0", second.address)
        wait_until("the job to be started again on agent b", lambda: _task(b.stub) is not None, timeout=30)
        copy = _task(a.stub)
        assert copy is not None and copy.fenced, f"agent a's copy runs on, unfenced, beside agent b's: {copy}"
    finally:
        rig.close()
        if second is not None:
            second.stop()


@pytest.mark.timeout(90)
def test_a_coordinator_that_grants_no_lease_resumes_a_task_an_earlier_ones_lease_fenced(tmp_path: Path) -> None:
    """A coordinator restarted on its state file with heartbeat settings that leave no room for a lease adopts a task
    the agent fenced while no coordinator ran. It must resume it: it resumed fenced tasks only while the agent's
    lease held, and an agent holding none (its first heartbeat dropped the old one) never qualified, so the job
    stayed running with no progress for good (found by review)."""
    state = str(tmp_path / "state.db")
    first = CoordinatorServer(get_policy("greedy"), port=0, heartbeat_s=0.5, state=state).start()
    port = first.port
    agent = start_agent([HostSpec("nl-a0", 1.0, GIB)], agent_id=f"pytest-nl-{os.getpid()}", no_cgroups=True)
    registrar = Registrar(agent, first.address, agent.address)
    second = None
    try:
        assert registrar.registered.wait(10)
        stub = pb_grpc.CoordinatorStub(grpc.insecure_channel(first.address))
        spec = pb.JobSpec(tasks=1, cpu_need=1.0, memory=0.1, work_seconds=600.0, workload="modeled")
        stub.Submit(pb.SubmitRequest(spec=spec), timeout=5)
        a_stub = agent_pb2_grpc.AgentStub(grpc.insecure_channel(agent.address))
        wait_until("the job to run", lambda: _task(a_stub) is not None)
        first.stop()  # with a state file: its task is left to be adopted
        wait_until("the agent to fence the task", lambda: _task(a_stub).fenced, timeout=20)  # type: ignore[union-attr]
        second = CoordinatorServer(get_policy("greedy"), port=port, heartbeat_s=2.0, heartbeat_misses=1,
                                   state=state).start()
        assert second.lease_s == 0.0
        wait_until("the new coordinator to resume the task", lambda: not _task(a_stub).fenced,  # type: ignore[union-attr]
                   timeout=20)
        assert _task(a_stub).state == agent_pb2.TASK_STATE_RUNNING  # type: ignore[union-attr]
        assert second.metrics.registry.get_sample_value("vcemu_tasks_unfenced_total") == 1.0
    finally:
        registrar.stop()
        agent.stop()
        if second is not None:
            second.stop()
        with contextlib.suppress(Exception):
            first.stop()


@pytest.mark.timeout(60)
def test_a_coordinator_that_grants_no_lease_drops_the_expired_one_of_an_agent_it_polls() -> None:
    """An agent registered by hand (no registrar, so no heartbeat reply tells it the new coordinator grants no lease)
    still holds an earlier coordinator's lease, run out: the polls must make it drop the lease, and resume the
    task, which the agent's monitor would otherwise freeze again every 0.1 s (found by review)."""
    agent = start_agent([HostSpec("nl-h0", 1.0, GIB)], agent_id=f"pytest-nlh-{os.getpid()}", no_cgroups=True)
    backend = LiveBackend(lease_s=0.0)
    try:
        backend.add_agent(agent.address)
        a_stub = agent_pb2_grpc.AgentStub(grpc.insecure_channel(agent.address))
        backend.start(JobSpec("j", 0.0, 1, 1.0, 0.1, 600.0, "modeled"), ["nl-h0"], 1.0)
        wait_until("the task to run", lambda: _task(a_stub) is not None)
        agent.core.renew_lease(0.2, leaseclock.now())  # an earlier coordinator's lease, to run out
        wait_until("the agent to fence the task", lambda: _task(a_stub).fenced, timeout=5)  # type: ignore[union-attr]
        backend.poll()
        assert agent.core.lease_left() == -1.0
        time.sleep(0.5)  # monitor rounds: not frozen again
        t = _task(a_stub)
        assert t is not None and not t.fenced and t.state == agent_pb2.TASK_STATE_RUNNING, t
    finally:
        with contextlib.suppress(Exception):
            backend.stop("j")
        backend.close()
        agent.stop()


@pytest.mark.timeout(60)
def test_an_agent_that_does_not_run_has_its_tasks_frozen_by_its_fencer_when_its_lease_runs_out(
        cgroups_required: None) -> None:
    """Fault-injection review: an agent SIGSTOPped past its lease could not fence (its monitor thread was stopped
    too), and the coordinator, hearing nothing, started its jobs elsewhere: two copies ran at once, for seconds.
    Its fencer, a process of its own, freezes the task when the lease runs out; the agent, running again, reports
    the task fenced, and only a Resume thaws it. Here the agent "does not run" as the test holds its lock, which
    its monitor waits for (a stopped agent's monitor does nothing either)."""
    core = open_core(f"pytest-fencer-{os.getpid()}", [HostSpec("f0", 1.0, GIB)])
    try:
        core.start_task("t/0", "f0", "dgemm", 0.5, 0.5, 600.0, 16 << 20)
        wait_until("the task to run", lambda: core.task("t/0").state is State.RUNNING)
        cgroup = core._tasks["t/0"].cgroup
        with core._lock:  # the agent stops here: no monitor round, no fence of its own
            core.renew_lease(0.5, leaseclock.now())
            time.sleep(1.2)
            assert core.driver.is_frozen(cgroup), "the fencer did not freeze the task of an agent that did not run"
            assert core._tasks["t/0"].state is State.RUNNING  # as the stopped agent last knew it
            # A renewal gets in before the agent's next monitor round: its lease holds by then, so only the frozen
            # group says what happened.
            core.renew_lease(60.0, leaseclock.now())
        wait_until("the agent to report the task fenced", lambda: core.task("t/0").fenced, timeout=5)
        view = core.task("t/0")
        assert view.state is State.PAUSED and "fencer froze it" in view.message
        time.sleep(0.5)  # the coordinator is heard again: nothing thaws by itself
        assert core.task("t/0").fenced and core.driver.is_frozen(cgroup)
        assert core.resume("t/0").state is State.RUNNING  # the coordinator's Resume
        time.sleep(0.5)
        assert not core.driver.is_frozen(cgroup) and not core.task("t/0").fenced
    finally:
        core.shutdown()
    assert core._fencer is None


@pytest.mark.timeout(60)
def test_without_cgroups_an_agent_that_does_not_run_has_its_tasks_stopped_by_its_fencer() -> None:
    """--no-cgroups (duty cycling) had no fencer, as there is no freezer to share: a task of an agent that did not
    run ran on past the lease, beside its job's restarted copy. The fencer now marks its group and stops its
    process; the agent's throttling thread, which runs here (only the monitor waits for the lock), keeps a marked
    group stopped rather than continue it at its next period. A full share: the duty cycle never stops it itself."""
    core = open_core(f"pytest-dutyfencer-{os.getpid()}", [HostSpec("f0", 1.0, GIB)], no_cgroups=True)
    try:
        core.start_task("t/0", "f0", "dgemm", 1.0, 1.0, 600.0, 16 << 20)
        wait_until("the task to run", lambda: core.task("t/0").state is State.RUNNING)
        cgroup = core._tasks["t/0"].cgroup
        (pid,) = core.driver.pids(cgroup)
        proc = psutil.Process(pid)
        with core._lock:  # the agent's monitor stops here: no fence of its own
            core.renew_lease(0.5, leaseclock.now())
            time.sleep(1.2)
            assert core.driver.is_frozen(cgroup), "the fencer did not mark the task of an agent that did not run"
            cpu = sum(proc.cpu_times()[:2])
            time.sleep(0.5)
            assert proc.status() == psutil.STATUS_STOPPED and sum(proc.cpu_times()[:2]) - cpu < 0.02
            assert core._tasks["t/0"].state is State.RUNNING  # as the stopped agent last knew it
            core.renew_lease(60.0, leaseclock.now())  # a renewal before the monitor's next round
        wait_until("the agent to report the task fenced", lambda: core.task("t/0").fenced, timeout=5)
        assert core.task("t/0").state is State.PAUSED
        time.sleep(0.5)  # the coordinator is heard again: nothing continues it by itself
        assert proc.status() == psutil.STATUS_STOPPED and core.task("t/0").fenced
        assert core.resume("t/0").state is State.RUNNING  # the coordinator's Resume
        cpu = sum(proc.cpu_times()[:2])
        time.sleep(0.5)
        assert not core.driver.is_frozen(cgroup) and sum(proc.cpu_times()[:2]) - cpu > 0.2
    finally:
        core.shutdown()
    assert core._fencer is None
