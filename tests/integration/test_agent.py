"""The node agent for real: gRPC on 127.0.0.1, workload processes, cgroup v1 quotas and freezer."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid

import grpc
import psutil
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from node_agent.cgroups import open_driver
from node_agent.server import RunningAgent
from tests.integration.conftest import cpu_fraction, task_status, wait_state
from vcemu.v1 import agent_pb2 as pb
from vcemu.v1 import agent_pb2_grpc

pytestmark = pytest.mark.integration
S = pb.TaskState
LONG = 3600.0  # work_seconds of tasks that must not finish during a test


def start(stub: agent_pb2_grpc.AgentStub, share: float, host: str = "h0", need: float | None = None,
          work: float = LONG, memory: int = 64 << 20, workload: str = "dgemm", start_progress: float = 0.0,
          task_id: str | None = None) -> str:
    task_id = task_id or f"job-{uuid.uuid4().hex[:6]}/0"
    stub.StartTask(pb.StartTaskRequest(
        task_id=task_id, host=host, workload=workload, cpu_share=share, cpu_need=need or share,
        work_seconds=work, memory_bytes=memory, start_progress=start_progress))
    return task_id


@pytest.fixture
def task_ids(stub: agent_pb2_grpc.AgentStub):  # type: ignore[no-untyped-def]
    """Task ids started by a test; stopped afterwards whatever happened."""
    ids: list[str] = []
    yield ids
    for task_id in ids:
        with contextlib.suppress(grpc.RpcError):
            stub.Stop(pb.TaskRef(task_id=task_id))


def test_quarter_share_measures_a_quarter(stub, task_ids) -> None:
    task_ids.append(tid := start(stub, 0.25))
    wait_state(stub, tid, S.TASK_STATE_RUNNING)
    assert cpu_fraction(stub, tid, 3.0, host_cores=1.0) == pytest.approx(0.25, abs=0.02)


def test_share_change_takes_effect_within_half_a_second(stub, task_ids) -> None:
    task_ids.append(tid := start(stub, 0.25))
    wait_state(stub, tid, S.TASK_STATE_RUNNING)
    reply = stub.SetShare(pb.SetShareRequest(task_id=tid, cpu_share=0.75))
    assert reply.task.cpu_share == 0.75
    time.sleep(0.5)
    assert cpu_fraction(stub, tid, 1.5, host_cores=1.0) == pytest.approx(0.75, abs=0.03)


def test_pause_stops_cpu_and_resume_restores_it(stub, task_ids) -> None:
    task_ids.append(tid := start(stub, 0.5))
    wait_state(stub, tid, S.TASK_STATE_RUNNING)
    assert stub.Pause(pb.TaskRef(task_id=tid)).task.state == S.TASK_STATE_PAUSED
    frozen_progress = task_status(stub, tid).progress
    assert cpu_fraction(stub, tid, 1.0, host_cores=1.0) <= 0.01
    assert task_status(stub, tid).progress == frozen_progress
    # A paused task holds no CPU: its share is free for others, and reclaimed (checked) on Resume.
    status = stub.Status(pb.StatusRequest())
    assert next(h for h in status.hosts if h.name == "h0").cpu_allocated == 0.0
    assert stub.Resume(pb.TaskRef(task_id=tid)).task.state == S.TASK_STATE_RUNNING
    time.sleep(0.2)
    assert cpu_fraction(stub, tid, 1.0, host_cores=1.0) == pytest.approx(0.5, abs=0.03)
    assert task_status(stub, tid).progress > frozen_progress


def test_job_completes_when_its_work_is_done(stub, agent: RunningAgent, task_ids) -> None:
    # Half done elsewhere; 2 s of work at full speed (need 1 of the 0.5-core host h1): 0.5 CPU-s left.
    task_ids.append(tid := start(stub, 1.0, host="h1", need=1.0, work=2.0, start_progress=0.5))
    dirs = agent.core.cgroup_dirs(tid)
    assert all(os.path.isdir(d) for d in dirs)
    assert task_status(stub, tid).progress >= 0.5
    done = wait_state(stub, tid, S.TASK_STATE_DONE, timeout=20.0)
    assert done.progress == 1.0 and done.exit_code == 0
    assert done.cpu_seconds >= 0.9 * 0.5  # the work was really computed
    # cpu-time progress (the default): done after 0.5 CPU-s past the boot phase, whose start-up (interpreter,
    # numpy) costs well under half a CPU-second, so the task was not left running long past its work.
    assert done.cpu_seconds <= 0.5 + 0.5
    assert stub.Checkpoint(pb.TaskRef(task_id=tid)).progress == 1.0
    assert not any(os.path.exists(d) for d in dirs), "a finished task's cgroup is removed"


def test_units_mode_completes_when_the_program_has_done_its_units(stub, agent: RunningAgent, task_ids) -> None:
    agent.core.progress_by = "units"  # tasks read the mode when they start
    try:
        task_ids.append(tid := start(stub, 1.0, host="h1", need=1.0, work=1.0))
    finally:
        agent.core.progress_by = "cpu-time"
    task = agent.core._tasks[tid]
    assert task.progress_by == "units" and task.target > 0
    done = wait_state(stub, tid, S.TASK_STATE_DONE, timeout=20.0)
    assert done.progress == 1.0 and done.exit_code == 0
    assert task.view().units_done >= task.target  # the program exited by itself at its calibrated units


def test_paused_task_can_be_stopped(stub, agent: RunningAgent, task_ids) -> None:
    tid = start(stub, 0.3, workload="arraycycle", memory=32 << 20)
    wait_state(stub, tid, S.TASK_STATE_RUNNING)
    stub.Pause(pb.TaskRef(task_id=tid))
    pid, dirs = agent.core.task(tid).pid, agent.core.cgroup_dirs(tid)
    assert psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    reply = stub.Stop(pb.TaskRef(task_id=tid))
    assert reply.task.state == S.TASK_STATE_STOPPED
    assert not psutil.pid_exists(pid)
    assert not any(os.path.exists(d) for d in dirs)
    assert tid not in [t.task_id for t in stub.Status(pb.StatusRequest()).tasks]
    with pytest.raises(grpc.RpcError) as err:
        stub.Stop(pb.TaskRef(task_id=tid))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "task_id" in err.value.details()


@pytest.mark.parametrize(("change", "code", "field"), [
    ({"workload": "/bin/sh"}, grpc.StatusCode.INVALID_ARGUMENT, "workload"),
    ({"cpu_share": 0.0}, grpc.StatusCode.INVALID_ARGUMENT, "cpu_share"),
    ({"cpu_share": 1.5}, grpc.StatusCode.INVALID_ARGUMENT, "cpu_share"),
    ({"host": "nowhere"}, grpc.StatusCode.NOT_FOUND, "host"),
    ({"memory_bytes": 3 << 30}, grpc.StatusCode.INVALID_ARGUMENT, "memory_bytes"),
    ({"cpu_need": 1.0, "host": "h0", "work_seconds": 0.0}, grpc.StatusCode.INVALID_ARGUMENT, "work_seconds"),
])
def test_invalid_start_is_refused_naming_the_field(stub, change, code, field) -> None:
    request = {"task_id": "bad/0", "host": "h0", "workload": "dgemm", "cpu_share": 0.2, "cpu_need": 0.2,
               "work_seconds": 10.0, "memory_bytes": 1 << 20, **change}
    with pytest.raises(grpc.RpcError) as err:
        stub.StartTask(pb.StartTaskRequest(**request))
    assert err.value.code() == code
    assert err.value.details().startswith(field + ":")
    assert "bad/0" not in [t.task_id for t in stub.Status(pb.StatusRequest()).tasks]


def test_overcommitted_host_and_unknown_task_are_refused(stub, task_ids) -> None:
    task_ids.append(start(stub, 0.6))
    with pytest.raises(grpc.RpcError) as err:
        start(stub, 0.6)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "cpu_share" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        stub.SetShare(pb.SetShareRequest(task_id="no/such", cpu_share=0.1))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND and "task_id" in err.value.details()


def test_health_and_metrics(stub, agent: RunningAgent, task_ids) -> None:
    with grpc.insecure_channel(agent.address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="vcemu.v1.Agent"))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    task_ids.append(tid := start(stub, 0.2, host="h1"))
    wait_state(stub, tid, S.TASK_STATE_RUNNING)
    time.sleep(1.3)  # past the 1 s measurement window, so the boot phase (at host capacity) is out of it
    text = urllib.request.urlopen(f"http://127.0.0.1:{agent.metrics_port}/metrics", timeout=5).read().decode()
    metrics = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
               for line in text.splitlines() if line.startswith("vcemu_agent_")}
    assert metrics['vcemu_agent_cgroup_mode_info{mode="cgroup-v1"}'] == 1.0
    assert metrics['vcemu_agent_tasks{state="running"}'] >= 1.0
    assert metrics['vcemu_agent_host_cpu_allocated_ratio{host="h1"}'] == pytest.approx(0.2)
    assert metrics['vcemu_agent_host_cpu_measured_ratio{host="h1"}'] == pytest.approx(0.2, abs=0.05)
    assert metrics['vcemu_agent_host_memory_used_bytes{host="h1"}'] > 64 << 20


def test_sigterm_kills_tasks_and_removes_cgroups_and_startup_removes_leftovers(cgroups_required) -> None:
    agent_id = f"pytest-term-{os.getpid()}"
    # A leftover of a "crashed" earlier agent with this id: a frozen process in a task cgroup.
    crashed = open_driver(agent_id, 1.0)
    crashed.create("leftover")
    sleeper = subprocess.Popen(["sleep", "600"])
    crashed.add_pid("leftover", sleeper.pid)
    crashed.freeze("leftover")
    leftover_dirs, parent_dirs = crashed.dirs("leftover"), crashed.dirs()

    agent = subprocess.Popen([sys.executable, "-m", "node_agent", "--hosts", "1", "--cpus-per-host", "0.5",
                              "--mem-per-host", "1GiB", "--port", "0", "--agent-id", agent_id],
                             stdout=subprocess.PIPE, text=True)
    try:
        line = agent.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("vcemu agent listening on 127.0.0.1:"), line
        assert sleeper.wait(timeout=5) == -signal.SIGKILL
        assert not any(os.path.exists(d) for d in leftover_dirs)
        with grpc.insecure_channel(line.split()[-1]) as channel:
            stub = agent_pb2_grpc.AgentStub(channel)
            a, b = start(stub, 0.4, host=f"{agent_id}-h0"), start(stub, 0.4, host=f"{agent_id}-h0")
            wait_state(stub, a, S.TASK_STATE_RUNNING)
            stub.Pause(pb.TaskRef(task_id=b))
        children = psutil.Process(agent.pid).children()
        assert len(children) == 2
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=15) == 0
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        sleeper.kill()
    assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children)
    assert not any(os.path.exists(d) for d in parent_dirs)
