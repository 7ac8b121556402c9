"""Fixtures for integration tests: a real agent on an ephemeral 127.0.0.1 port, with real cgroups.

Everything skips, with the reason, unless the process is root and a cgroup driver can be opened."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator

import grpc
import pytest

from node_agent.agent import HostSpec
from node_agent.cgroups import CgroupUnavailable, open_driver
from node_agent.server import RunningAgent, start_agent
from vcemu.v1 import agent_pb2, agent_pb2_grpc

GIB = 1 << 30


def cgroups_unusable() -> str | None:
    """Why real-cgroup tests cannot run here, or None if they can."""
    if os.geteuid() != 0:
        return "needs root to create cgroups"
    try:
        driver = open_driver(f"pytest-probe-{os.getpid()}")
    except CgroupUnavailable as e:
        return f"cgroups not writable: {e}"
    driver.cleanup(remove_parent=True)
    return None


@pytest.fixture(scope="session")
def cgroups_required() -> None:
    reason = cgroups_unusable()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="module")
def agent(cgroups_required: None) -> Iterator[RunningAgent]:
    """Hosts ``h0`` (1 core, 2 GiB) and ``h1`` (0.5 core, 1 GiB), metrics on an ephemeral port."""
    hosts = [HostSpec("h0", 1.0, 2 * GIB), HostSpec("h1", 0.5, GIB)]
    running = start_agent(hosts, agent_id=f"pytest-{os.getpid()}", port=0, metrics_port=0)
    yield running
    running.stop()


@pytest.fixture
def stub(agent: RunningAgent) -> Iterator[agent_pb2_grpc.AgentStub]:
    with grpc.insecure_channel(agent.address) as channel:
        yield agent_pb2_grpc.AgentStub(channel)


def task_status(stub: agent_pb2_grpc.AgentStub, task_id: str) -> agent_pb2.TaskStatus:
    return next(t for t in stub.Status(agent_pb2.StatusRequest()).tasks if t.task_id == task_id)


def wait_state(stub: agent_pb2_grpc.AgentStub, task_id: str, state: int, timeout: float = 10.0
               ) -> agent_pb2.TaskStatus:
    """Poll Status until the task reaches ``state``; fail with its last status otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        t = task_status(stub, task_id)
        if t.state == state:
            return t
        assert time.monotonic() < deadline, f"task never reached {agent_pb2.TaskState.Name(state)}: {t}"
        time.sleep(0.05)


def wait_until(what: str, cond: Callable[[], object], timeout: float = 20.0) -> None:
    """Poll ``cond`` until it is true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def end_processes(proc: subprocess.Popen, pids: list[int]) -> None:  # type: ignore[type-arg]
    """A test's cleanup: kill ``proc`` (a stand-in agent) if it still runs, and every process of ``pids`` it left."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
