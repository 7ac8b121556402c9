"""Upgrade review: a state file of a vcemu before 2026-11-23 records no reference host (meta 'reference').

Its jobs' needs were fractions of the first host that registered in its run; a restart takes the first host of the
agents table instead, which is another host when that agent registered again later (its row moved to the end): two
agents of 0.2 and 0.5 cores, the smaller first and registered again, and a job of need 0.4 (0.08 cores when
submitted) was given 0.2 cores after the upgrade, without a word. The restart says which host it takes, and how to
name the right one."""

from __future__ import annotations

from pathlib import Path

from coordinator.model import JobSpec, JobState
from coordinator.policies import get_policy
from coordinator.service import CoordinatorServer
from coordinator.store import Store
from vcemu.v1 import agent_pb2


def _describe(agent: str, cores: float) -> bytes:
    return agent_pb2.DescribeReply(agent_id=agent, mode="duty-cycle", hosts=[
        agent_pb2.HostInfo(name=f"{agent}-h0", cpu_cores=cores, memory_bytes=1 << 30)]).SerializeToString()


def test_a_restart_on_a_state_file_without_a_reference_host_says_which_it_takes(tmp_path: Path) -> None:
    state = tmp_path / "old.db"
    store = Store(str(state))
    store.put_agent("b", "127.0.0.1:1", _describe("b", 0.5))
    store.put_agent("a", "127.0.0.1:2", _describe("a", 0.2))  # registered first, then again: its row is last
    store.put_job(JobSpec("job-00001", 0.0, 1, 0.4, 0.1, 1000.0), JobState.PENDING, (), 0.0, 0.0, 0, None, None, "")
    store.close()
    server = CoordinatorServer(get_policy("fcfs"), port=0, state=str(state))
    try:
        note = server.restored_note or ""
        assert note.startswith(f"restored 1 job (1 unfinished) and 2 agents from {state}; it records no reference host")
        assert "fractions of b-h0 (0.5 cores, 1024 MiB)" in note and "--reference-host CORES,SIZE" in note
    finally:
        server.stop(0)


def test_a_state_file_with_its_reference_host_says_nothing_more(tmp_path: Path) -> None:
    state = tmp_path / "new.db"
    store = Store(str(state))
    store.put_agent("a", "127.0.0.1:2", _describe("a", 0.2))
    store.keep_reference(agent_pb2.HostInfo(name="a-h0", cpu_cores=0.2, memory_bytes=1 << 30).SerializeToString())
    store.put_job(JobSpec("job-00001", 0.0, 1, 0.4, 0.1, 1000.0), JobState.PENDING, (), 0.0, 0.0, 0, None, None, "")
    store.close()
    server = CoordinatorServer(get_policy("fcfs"), port=0, state=str(state))
    try:
        assert server.restored_note == f"restored 1 job (1 unfinished) and 1 agent from {state}"
    finally:
        server.stop(0)
