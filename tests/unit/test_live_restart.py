"""Jobs submitted just after a coordinator restart on its ``--state`` (a review found them FAILED without ever
running: ``vcemu up`` killed -9 and started again, then ``vcemu submit`` at once). Each level of that failure has a
test here that failed before its fix:

* a StartTask to an address where nothing listens (the restored agent's old one) was taken for one that may
  have started its task: an orphan, which held the job;
* an orphan held against an agent that then registered anew (a new handle, a new incarnation that removed what
  its predecessor left) failed the job at the next placement: its Stop, rate-limited, was not tried on the new
  agent, which answers polls, so the hold counted as the agent refusing the Stop;
* an agent restored from the store, not heard from since the restart, was given new tasks at its stored address;
* ``vcemu up`` announced its cluster before its own agents had registered, since the restored ones' hosts
  already covered ``--hosts``.

The agents are scripted (:class:`~tests.unit.scripted_agent.TableAgent`); no processes, no cgroups.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from coordinator import servers
from coordinator.backends.live import LiveBackend
from coordinator.model import JobSpec, JobState
from coordinator.plan import Plan, Start
from coordinator.store import Store, StoredTask
from vcemu.v1 import agent_pb2

from .scripted_agent import TableAgent, engine_on, serve

JOB = JobSpec("a", 0.0, 1, 1.0, 0.1, 10.0)


def dead_address() -> str:
    """An address of 127.0.0.1 where nothing listens (a server started, then stopped)."""
    server, address = serve(TableAgent())
    server.stop(0).wait()
    return address


def describe(agent: TableAgent) -> agent_pb2.DescribeReply:
    return agent_pb2.DescribeReply(agent_id=agent.agent_id, mode="cgroup-v1", hosts=[
        agent_pb2.HostInfo(name=h, cpu_cores=1.0, memory_bytes=1 << 30) for h in agent.hosts])


def test_a_start_that_never_left_for_a_dead_address_makes_no_orphan() -> None:
    """Connection refused: no attempt reached an agent, so no task exists and nothing holds the job; once the
    agent is back (registered at a new address) the job starts at the first offer."""
    x = TableAgent("x", ("h0",))
    backend = LiveBackend(rpc_timeout=1.0)
    backend.add_agent(dead_address(), describe(x))  # registered earlier; its process is gone
    engine = engine_on(backend)
    server = None
    try:
        engine.arrive(JOB)
        engine.apply(Plan((Start("a", ("h0",), 1.0),)))
        assert engine.jobs["a"].state is JobState.PENDING
        assert backend._orphans == [], "a StartTask refused by a closed port was taken for a task that may run"
        server, address = serve(x)
        backend.add_agent(address)  # the agent's next incarnation registers
        engine.apply(Plan((Start("a", ("h0",), 1.0),)))
        assert engine.jobs["a"].state is JobState.RUNNING, engine.jobs["a"].message
        assert list(x.tasks) == ["a/0.1"]
    finally:
        backend.close()
        if server is not None:
            server.stop(0)


def test_a_start_that_may_have_reached_the_agent_still_makes_an_orphan() -> None:
    """The other side of the line: an UNAVAILABLE the agent itself answered (the call reached it) may have
    started the task, so its copy is still stopped before the job runs anywhere else."""
    x = TableAgent("x", ("h0",))
    x.refuse_start_on = {"h0"}
    server, address = serve(x)
    backend = LiveBackend(rpc_timeout=1.0)
    try:
        backend.add_agent(address)
        engine = engine_on(backend)
        engine.arrive(JOB)
        engine.apply(Plan((Start("a", ("h0",), 1.0),)))
        assert engine.jobs["a"].state is JobState.PENDING
        assert [t.task_id for t in backend._orphans] == ["a/0"]
    finally:
        backend.close()
        server.stop(0)


def test_an_orphan_on_an_agents_old_incarnation_does_not_fail_its_job_when_the_agent_registers_anew() -> None:
    """The review's sequence: StartTask unanswered (an orphan), its Stop retried at a poll while the agent was
    gone, then the agent registers anew and the job is offered at once, well within the orphan's rate limit.
    The new incarnation does not know the task (NOT_FOUND): the orphan is released and the job starts."""
    old = TableAgent("x", ("h0",))
    old.on_start = lambda request: setattr(old, "mute", True)
    old.refuse_start_on = {"h0"}  # answered UNAVAILABLE: it may have started it
    server, address = serve(old)
    backend = LiveBackend(rpc_timeout=1.0)
    backend.poll_interval = 30.0  # the orphan's Stop, retried by the poll below, is not retried for a placement
    new_server = None
    try:
        backend.add_agent(address)
        engine = engine_on(backend)
        engine.arrive(JOB)
        engine.apply(Plan((Start("a", ("h0",), 1.0),)))
        assert [t.task_id for t in backend._orphans] == ["a/0"]
        server.stop(0).wait()  # the agent process dies
        backend.poll()  # its Status and the orphan's Stop are refused: the orphan stays
        assert [t.task_id for t in backend._orphans] == ["a/0"]
        new = TableAgent("x", ("h0",))  # its next incarnation: it knows no task of its predecessor
        new_server, new_address = serve(new)
        backend.add_agent(new_address)
        engine.apply(Plan((Start("a", ("h0",), 1.0),)))
        rec = engine.jobs["a"]
        assert rec.state is JobState.RUNNING, rec.message
        assert backend._orphans == [] and list(new.tasks) == ["a/0.1"]
    finally:
        backend.close()
        if new_server is not None:
            new_server.stop(0)


class CountingAgent(TableAgent):
    def __init__(self, agent_id: str, hosts: tuple[str, ...]) -> None:
        super().__init__(agent_id, hosts)
        self.starts = 0

    def StartTask(self, request, context):  # noqa: N802
        self.starts += 1
        return super().StartTask(request, context)


def test_no_task_is_started_on_a_restored_agent_before_it_is_heard_from() -> None:
    """An agent restored from the store is at an address from an earlier run, where nothing may listen: a
    placement there is refused at once (no call: a backlog of jobs must not cost a call each under the engine
    lock), the job waits, and it starts once a poll has heard the agent."""
    x = CountingAgent("x", ("h0",))
    server, address = serve(x)
    backend = LiveBackend(rpc_timeout=1.0)
    try:
        backend.add_agent(address, describe(x), restored=True)
        engine = engine_on(backend)
        engine.arrive(JOB)
        engine.apply(Plan((Start("a", ("h0",), 1.0),)))
        rec = engine.jobs["a"]
        assert rec.state is JobState.PENDING and "not been heard from" in engine._retrying["a"][0]
        assert x.starts == 0 and backend._orphans == []
        backend.poll()  # it answers
        engine.apply(Plan((Start("a", ("h0",), 1.0),)))
        assert rec.state is JobState.RUNNING and x.starts == 1
    finally:
        backend.close()
        server.stop(0)


def test_another_agent_answering_at_a_restored_agents_address_is_not_hearing_from_it() -> None:
    """A restored agent's stored address now served by another agent (a replaced node's pod reusing the IP and
    port): its polls were taken as answers, so the restored agent was 'heard', given tasks the other agent refused
    as NOT_FOUND (failing the jobs for good), and never declared lost (review)."""
    ghost = TableAgent("ghost", ("ghost-h0",))
    other = CountingAgent("other", ("other-h0",))
    server, address = serve(other)
    backend = LiveBackend(rpc_timeout=1.0)
    try:
        backend.add_agent(address, describe(ghost), restored=True)
        engine = engine_on(backend)
        engine.arrive(JOB)
        backend.poll()
        handle = backend.agents["ghost"]
        assert not handle.heard and handle.silent  # silent: the watch declares it lost after its misses
        engine.apply(Plan((Start("a", ("ghost-h0",), 1.0),)))
        assert engine.jobs["a"].state is JobState.PENDING, engine.jobs["a"].message  # not FAILED
        assert other.starts == 0
    finally:
        backend.close()
        server.stop(0)


def test_a_restored_agent_heard_from_keeps_its_adopted_tasks() -> None:
    """Adoption is untouched: a restored agent's running tasks are still polled and reported."""
    x = TableAgent("x", ("h0",))
    x.tasks["a/0"] = agent_pb2.TaskStatus(task_id="a/0", host="h0", state=agent_pb2.TASK_STATE_RUNNING)
    server, address = serve(x)
    backend = LiveBackend(rpc_timeout=1.0)
    try:
        backend.add_agent(address, describe(x), restored=True)
        backend.adopt(JOB, 0, [StoredTask("a/0", "h0", 0.2, agent_pb2.TASK_STATE_RUNNING, False)], 1.0,
                      JobState.RUNNING)
        x.finish("a/0")
        reports = backend.poll()
        assert [(r.job, r.state) for r in reports] == [("a", JobState.DONE)]
    finally:
        backend.close()
        server.stop(0)


def test_up_waits_for_its_own_agents_not_for_those_restored_from_the_state(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """The store holds an earlier run's agent0 with both hosts: that alone made ``up`` report its cluster
    ready, before the agent it had just spawned registered. Here the spawned agent never registers (a stand-in
    process), so ``up`` must give up after its wait instead."""
    state = str(tmp_path / "s.db")
    store = Store(state)
    agent = "lrtest0"  # (not agent0: a live cluster on this machine may hold that id, and this one would get another)
    desc = agent_pb2.DescribeReply(agent_id=agent, mode="cgroup-v1", hosts=[
        agent_pb2.HostInfo(name=f"{agent}-h{i}", cpu_cores=0.5, memory_bytes=1 << 30) for i in range(2)])
    store.put_agent(agent, dead_address(), desc.SerializeToString())
    store.keep_reference(desc.hosts[0].SerializeToString())
    store.close()
    spawned: list[subprocess.Popen] = []

    def stand_in(*args: object, **kwargs: object) -> subprocess.Popen:
        spawned.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]))
        return spawned[-1]

    monkeypatch.setattr(servers, "spawn_agent", stand_in)
    with pytest.raises(SystemExit, match="did not come up"):
        servers.start_local_cluster("fcfs", 2, 1, None, "1GiB", 0, None, True, wait_s=1.0, state=state,
                                    agent_prefix="lrtest")
    assert spawned and all(p.poll() is not None for p in spawned)  # stopped on the way out
