"""A plan's share changes reach an agent in one SetShares call per host (issue 5's live runs and every DFRS
policy re-share the jobs of a host at each start there: one SetShare per task made the n-th start on a host
cost n calls, and greedy on 4 hosts started about 17 jobs/s at first and 6/s with 150 jobs a host). The calls
to a host keep the plan's order (the cuts go before the start they make room for), a refusal fails its job
alone with the message it had before, and an agent from before SetShares still gets one SetShare per task."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import grpc
import pytest

from coordinator.backends import live
from coordinator.backends.live import LiveBackend
from coordinator.engine import Engine
from coordinator.model import JobSpec, JobState
from coordinator.plan import Plan, SetShare, Start
from node_agent.agent import AgentCore, AgentError, HostSpec
from node_agent.dutycycle import DutyCycleDriver
from node_agent.server import MAX_MESSAGE_BYTES
from vcemu.v1 import agent_pb2, agent_pb2_grpc
from workloads import modeled

from .scripted_agent import TableAgent, agent_served, backend_on, engine_on


def job(name: str) -> JobSpec:
    return JobSpec(name, 0.0, 1, 1.0, 0.01, 1000.0)


@contextmanager
def three_on_h0(agent: TableAgent) -> Iterator[tuple[LiveBackend, Engine]]:
    """Jobs a, b and c running on h0 at a third of it each (checked for capacity, as the real agent does)."""
    agent.check_capacity = True
    with backend_on(agent, rpc_timeout=1.0) as backend:
        engine = engine_on(backend)
        for name in "abc":
            engine.arrive(job(name))
        engine.apply(Plan(tuple(Start(name, ("h0",), 1 / 3) for name in "abc")))
        agent.calls.clear()
        yield backend, engine


def test_the_cuts_a_start_makes_room_for_go_in_one_call_before_it() -> None:
    agent = TableAgent("x", ("h0", "h1"))
    with three_on_h0(agent) as (_, engine):
        engine.arrive(job("d"))
        engine.apply(Plan((*(SetShare(name, 0.25) for name in "abc"), Start("d", ("h0",), 0.25))))
        assert agent.calls == [("SetShares", ("a/0", "b/0", "c/0")), ("StartTask", ("d/0",))]
        assert {j: engine.jobs[j].state for j in "abcd"} == dict.fromkeys("abcd", JobState.RUNNING)
        assert [agent.tasks[f"{j}/0"].cpu_share for j in "abcd"] == [0.25] * 4


def test_share_changes_before_no_other_call_go_out_at_the_plans_end_one_call_per_host() -> None:
    agent = TableAgent("x", ("h0", "h1", "h2"))
    with backend_on(agent) as backend:
        engine = engine_on(backend)
        places = {"a": "h0", "b": "h0", "c": "h1", "d": "h1", "e": "h2"}
        for name, host in places.items():
            engine.arrive(job(name))
            engine.apply(Plan((Start(name, (host,), 0.25),)))
        agent.calls.clear()
        engine.apply(Plan(tuple(SetShare(name, 0.5) for name in places)))
        # a host with one change gets a SetShare (nothing to batch)
        assert agent.calls == [("SetShares", ("a/0", "b/0")), ("SetShares", ("c/0", "d/0")), ("SetShare", ("e/0",))]
        assert all(agent.tasks[f"{name}/0"].cpu_share == 0.5 for name in places)
        assert backend.flush() == []  # nothing left queued
        assert len(agent.calls) == 3


def test_an_agent_without_setshares_gets_one_setshare_per_task_and_is_not_asked_again() -> None:
    agent = TableAgent("x", ("h0", "h1"))
    agent.unimplemented.add("SetShares")
    with three_on_h0(agent) as (_, engine):
        engine.apply(Plan(tuple(SetShare(name, 0.25) for name in "abc")))
        assert agent.calls == [("SetShares", ("a/0", "b/0", "c/0")),
                               ("SetShare", ("a/0",)), ("SetShare", ("b/0",)), ("SetShare", ("c/0",))]
        agent.calls.clear()
        engine.apply(Plan(tuple(SetShare(name, 0.3) for name in "abc")))
        assert agent.calls == [("SetShare", ("a/0",)), ("SetShare", ("b/0",)), ("SetShare", ("c/0",))]
        assert [agent.tasks[f"{j}/0"].cpu_share for j in "abc"] == [0.3] * 3


def test_a_refused_share_change_fails_its_job_alone_with_the_message_a_setshare_gave() -> None:
    agent = TableAgent("x", ("h0", "h1"))
    agent.refuse_share = {"b/0"}
    with three_on_h0(agent) as (_, engine):
        engine.apply(Plan(tuple(SetShare(name, 0.25) for name in "abc")))
        # the refused one is sent again alone, through the rules of a single call (leftovers, a task gone)
        assert agent.calls == [("SetShares", ("a/0", "b/0", "c/0")), ("SetShare", ("b/0",))]
        b = engine.jobs["b"]
        assert b.state is JobState.FAILED
        assert b.message.startswith("setshare failed: SetShare on h0: FAILED_PRECONDITION"), b.message
        assert [engine.jobs[j].state for j in "ac"] == [JobState.RUNNING] * 2
        assert [engine.jobs[j].cpu for j in "ac"] == [0.25] * 2


def test_share_changes_an_agent_leaves_unanswered_requeue_their_jobs_without_a_call_each() -> None:
    class Partitioned(TableAgent):
        def SetShares(self, request, context):  # noqa: N802
            self.calls.append(("SetShares", tuple(r.task_id for r in request.shares)))
            context.abort(grpc.StatusCode.UNAVAILABLE, "partitioned")

    agent = Partitioned("x", ("h0", "h1"))
    with three_on_h0(agent) as (_, engine):
        engine.apply(Plan(tuple(SetShare(name, 0.25) for name in "abc")))
        assert {name for name, _ in agent.calls} == {"SetShares"}  # its retries, and no SetShare after them
        assert len(agent.calls) == live.RPC_ATTEMPTS
        for name in "abc":  # unreachable: back to the queue with its progress, as for a single SetShare
            rec = engine.jobs[name]
            assert rec.state is JobState.PENDING, (name, rec.state, rec.message)


def test_share_changes_are_split_under_the_agents_request_limit() -> None:
    requests = [agent_pb2.SetShareRequest(task_id=f"job-{i:06d}-with-a-long-name/{i % 7}.{i}", cpu_share=1 / (i + 1))
                for i in range(3000)]
    chunks = list(live._chunks(requests))
    assert len(chunks) > 1
    assert [r for chunk in chunks for r in chunk] == requests
    assert all(agent_pb2.SetSharesRequest(shares=c).ByteSize() <= live.BATCH_BYTES for c in chunks)
    assert live.BATCH_BYTES < MAX_MESSAGE_BYTES


@pytest.fixture()
def real_agent() -> Iterator[tuple[AgentCore, agent_pb2_grpc.AgentStub]]:
    """The real agent's core (modeled tasks, no processes or cgroups) behind its gRPC servicer."""
    core = AgentCore("pytest-shares", [HostSpec("h", 1.0, 1 << 30)], DutyCycleDriver(), {})
    with agent_served(core) as stub:
        yield core, stub


def test_the_real_agent_applies_setshares_in_order_with_each_refusal_in_its_own_result(
    real_agent: tuple[AgentCore, agent_pb2_grpc.AgentStub],
) -> None:
    core, stub = real_agent
    for task_id, share in (("a", 0.5), ("b", 0.5)):
        core.start_task(task_id, "h", modeled.NAME, cpu_share=share, cpu_need=share, work_seconds=3600.0,
                        memory_bytes=0)
    shares = [("a", 0.2), ("b", 0.7), ("nobody", 0.1), ("a", 0.5), ("b", 0.3)]
    reply = stub.SetShares(agent_pb2.SetSharesRequest(shares=[
        agent_pb2.SetShareRequest(task_id=t, cpu_share=s) for t, s in shares]), timeout=5)
    got = [(r.error_code, r.task.task_id, round(r.task.cpu_share, 6)) for r in reply.results]
    # a's cut makes room for b's raise (in order); a's raise back to 0.5 no longer fits beside b's 0.7
    assert got == [("", "a", 0.2), ("", "b", 0.7), ("NOT_FOUND", "", 0.0), ("FAILED_PRECONDITION", "", 0.0),
                   ("", "b", 0.3)]
    assert "nobody" in reply.results[2].error and "cpu_share" in reply.results[3].error
    assert (core.task("a").cpu_share, core.task("b").cpu_share) == (0.2, 0.3)


def test_the_real_agent_takes_a_cut_without_a_pass_over_its_hosts_tasks(
    real_agent: tuple[AgentCore, agent_pb2_grpc.AgentStub],
) -> None:
    """A cut releases CPU, so it is not checked against the host's capacity (a pass over its tasks): a job started
    on a host of n re-shares the other n - 1 downward, which made each SetShares n passes over n tasks."""
    core, _ = real_agent
    for task_id in "ab":
        core.start_task(task_id, "h", modeled.NAME, cpu_share=0.5, cpu_need=1.0, work_seconds=3600.0,
                        memory_bytes=0)
    passes: list[str] = []
    live_tasks = core._live
    core._live = lambda host: passes.append(host) or live_tasks(host)  # type: ignore[method-assign]
    core.set_share("a", 0.2)
    core.set_share("a", 0.2)  # (no change: no claim either)
    assert passes == []
    core.set_share("b", 0.8)  # a raise is checked
    assert passes == ["h"]
    assert (core.task("a").cpu_share, core.task("b").cpu_share) == (0.2, 0.8)


def test_a_refused_cut_stops_its_job_before_the_start_it_made_room_for() -> None:
    """The plan's cuts are sent, and a refused one's job failed (its task stopped), before the start: that job's
    CPU is free for it, as when each SetShare was refused at once. (Sending the cuts before the StartTask and
    failing the job only at the plan's end left its task at its old share, and the start was refused too.)"""
    agent = TableAgent("x", ("h0", "h1"))
    agent.refuse_share = {"a/0"}
    with three_on_h0(agent) as (_, engine):
        engine.arrive(job("d"))
        engine.apply(Plan((*(SetShare(name, 0.25) for name in "abc"), Start("d", ("h0",), 0.25))))
        assert engine.jobs["a"].state is JobState.FAILED, engine.jobs["a"].message
        assert {j: engine.jobs[j].state for j in "bcd"} == dict.fromkeys("bcd", JobState.RUNNING), \
            engine.jobs["d"].message
        assert agent.calls[:2] == [("SetShares", ("a/0", "b/0", "c/0")), ("SetShare", ("a/0",))]
        assert agent.calls[-1] == ("StartTask", ("d/0",)) and "a/0" not in agent.tasks


def test_a_share_change_is_recorded_once_its_agent_took_it() -> None:
    """The engine's record of a share (its history, the state file) follows the agent's SetShares, as it followed
    each SetShare: a crash between the two leaves the record behind the agent, never ahead of it."""
    agent = TableAgent("x", ("h0", "h1"))
    with three_on_h0(agent) as (_, engine):
        seen: list[tuple[str, float]] = []
        engine.listeners.append(lambda t: seen.append((t.job, agent.tasks[f"{t.job}/0"].cpu_share)))
        engine.apply(Plan(tuple(SetShare(name, 0.25) for name in "abc")))
        assert seen == [("a", 0.25), ("b", 0.25), ("c", 0.25)]


def test_share_changes_queued_when_an_exception_ends_the_plan_are_dropped() -> None:
    """Not sent, so not recorded: the engine keeps the shares it has for those jobs, and so does the agent."""
    agent = TableAgent("x", ("h0", "h1"))
    with three_on_h0(agent) as (backend, engine):
        backend.set_share("a", 0.25)
        backend.abandon_moves()  # (what the engine calls when a plan ends in an exception)
        assert backend.send_shares() == [] and agent.calls == []
        assert agent.tasks["a/0"].cpu_share == pytest.approx(1 / 3)
        assert engine.jobs["a"].cpu == pytest.approx(1 / 3)


def _core(name: str) -> AgentCore:
    core = AgentCore(name, [HostSpec("h", 1.0, 1 << 30), HostSpec("g", 1.0, 1 << 30)], DutyCycleDriver(), {})
    for i in range(8):
        core.start_task(f"t{i}", "hg"[i % 2], modeled.NAME, cpu_share=0.1, cpu_need=1.0, work_seconds=3600.0,
                        memory_bytes=0)
    core.pause("t6")  # a paused task claims no CPU until resumed
    return core


@pytest.mark.parametrize("seed", range(20))
def test_the_real_agents_set_shares_answers_as_its_set_share_one_by_one(seed: int) -> None:
    """The batch keeps each host's CPU in use as a running sum (summed once): its answers and the shares it
    leaves are those of the same requests made one at a time, refusals, a paused task and bad values included."""
    import random

    rng = random.Random(seed)
    ids = [f"t{i}" for i in range(8)] + ["nobody"]
    requests = [(rng.choice(ids), rng.choice([rng.uniform(0.0, 0.45), 0.0, 1.0, -0.1, float("nan")]))
                for _ in range(40)]
    batch, single = _core(f"pytest-batch-{seed}"), _core(f"pytest-single-{seed}")
    try:
        got = batch.set_shares(requests)
        expected: list[object] = []
        for task_id, share in requests:
            try:
                expected.append(single.set_share(task_id, share))
            except Exception as e:  # noqa: BLE001 (the one-by-one answer, whatever it is)
                expected.append(e)

        def outcome(o: object) -> object:
            return (type(o).__name__, getattr(o, "code", None)) if isinstance(o, Exception) else o.cpu_share

        assert [outcome(o) for o in got] == [outcome(o) for o in expected]
        assert [batch.task(t).cpu_share for t in ids[:-1]] == [single.task(t).cpu_share for t in ids[:-1]]
    finally:
        batch.shutdown()
        single.shutdown()


def test_the_real_agents_set_shares_sums_a_host_once_for_all_its_raises() -> None:
    core = _core("pytest-sums")
    try:
        passes: list[str] = []
        live_tasks = core._live
        core._live = lambda host: passes.append(host) or live_tasks(host)  # type: ignore[method-assign]
        out = core.set_shares([("t0", 0.2), ("t2", 0.2), ("t4", 0.2), ("t1", 0.3), ("t3", 0.3)])
        assert [o.cpu_share for o in out] == [0.2, 0.2, 0.2, 0.3, 0.3]  # type: ignore[union-attr]
        assert sorted(passes) == ["g", "h"]  # one pass a host, not one a raise
    finally:
        core.shutdown()


def test_set_shares_sums_a_host_again_after_a_state_change_or_a_failure_and_leaves_no_sum_behind() -> None:
    """A task that ends during its change (a modeled task finishing as its progress is brought up to date) no
    longer holds CPU; a change that fails half made (a cgroup write) may have moved the sum: either way the host is
    summed again at its next check. And the batch's sum is gone after it: later requests sum afresh."""
    from node_agent.cgroups import CgroupError
    from node_agent.runner import State

    core = AgentCore("pytest-resum", [HostSpec("h", 1.0, 1 << 30)], DutyCycleDriver(), {})
    try:
        for task_id, share in (("ends", 0.5), ("breaks", 0.25), ("x", 0.2)):
            core.start_task(task_id, "h", modeled.NAME, cpu_share=share, cpu_need=1.0, work_seconds=3600.0,
                            memory_bytes=0)
        ends, breaks = core._tasks["ends"], core._tasks["breaks"]

        def finish(share: float) -> None:  # its last progress comes in as it is re-shared: done
            ends.cpu_share, ends.state = share, State.DONE

        def half_made(share: float) -> None:
            breaks.cpu_share = 0.0  # (written before the failure)
            raise CgroupError("simulated: cpu.cfs_quota_us: write failed")

        ends.set_share, breaks.set_share = finish, half_made  # type: ignore[method-assign]
        out = core.set_shares([("x", 0.25), ("ends", 0.4), ("x", 0.75), ("breaks", 0.2), ("x", 0.95)])
        # "ends" done: x may take its half; "breaks" holds nothing after its failed write: x may take 0.95
        assert [getattr(o, "cpu_share", type(o).__name__) for o in out] == [0.25, 0.4, 0.75, "CgroupError", 0.95]
        assert core._used is None
        with pytest.raises(AgentError, match="FAILED_PRECONDITION|unallocated"):
            core.start_task("y", "h", modeled.NAME, cpu_share=0.1, cpu_need=1.0, work_seconds=1.0, memory_bytes=0)
    finally:
        core.shutdown()
