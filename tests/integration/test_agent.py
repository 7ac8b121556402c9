"""The node agent for real: gRPC on 127.0.0.1, workload processes, cgroup v1 quotas and freezer."""

from __future__ import annotations

import contextlib
import math
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import psutil
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from node_agent.cgroups import open_driver
from node_agent.server import RunningAgent
from tests.integration.conftest import task_status, wait_state
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


def test_quarter_share_measures_a_quarter(stub, agent: RunningAgent, task_ids) -> None:
    """A task at 0.25 of a 1-core host is charged 0.25 of a core, +-0.02, over 3 s (30 CFS periods), measured from
    its cgroup with this process's clock (:func:`measured_share`: again, then skipped, if the machine held it
    back)."""
    task_ids.append(tid := start(stub, 0.25))
    wait_state(stub, tid, S.TASK_STATE_RUNNING)
    dirs = agent.core.cgroup_dirs(tid)
    measured_share(lambda: cpu_window(dirs, 3.0), share=0.25, host_cores=1.0, tolerance=0.02)


@dataclass(frozen=True)
class CpuReading:
    t: float  # time.monotonic() of the reading of ``cpu_s``, within 2 ms
    cpu_s: float  # CPU time the kernel charged the task's cgroup
    periods: int  # CFS periods the group has been active in
    throttled: int  # ... at whose end its quota was used up


def _cpu_reading(dirs: list[str]) -> CpuReading:
    """A task's CPU time, read from its cgroup (v1 ``cpuacct.usage`` or v2 ``cpu.stat``) between two clock
    readings at most 2 ms apart (a busy machine can deschedule this thread between them: then read again),
    and its CFS period counts (``cpu.stat``)."""
    usage = next((Path(d, "cpuacct.usage") for d in dirs if Path(d, "cpuacct.usage").exists()), None)
    stat = next((Path(d, "cpu.stat") for d in dirs
                 if Path(d, "cpu.stat").exists() and "nr_throttled" in Path(d, "cpu.stat").read_text()), None)
    assert stat is not None, f"no cpu.stat in {dirs}"
    for _ in range(1000):
        t0 = time.monotonic()
        if usage is not None:
            cpu_s = int(usage.read_text()) / 1e9
        else:
            cpu_s = int(dict(line.split() for line in stat.read_text().splitlines())["usage_usec"]) / 1e6
        t1 = time.monotonic()
        if t1 - t0 < 0.002:
            break
    fields = dict(line.split() for line in stat.read_text().splitlines())
    return CpuReading((t0 + t1) / 2, cpu_s, int(fields["nr_periods"]), int(fields["nr_throttled"]))


#: The CFS period the cgroup drivers set (a quota is ``share x host cores x CFS_PERIOD_S`` per period), and the
#: CPU time CFS may leave unused in a period on another CPU (its bandwidth slice).
CFS_PERIOD_S, CFS_SLICE_S = 0.1, 0.005


@dataclass(frozen=True)
class CpuWindow:
    """What the kernel charged a task's cgroup between two readings of this process's clock."""

    r0: CpuReading
    r1: CpuReading
    late: float | None = None  # how long after it was due the window began (None: due when it began)

    @property
    def cpu_s(self) -> float:
        return self.r1.cpu_s - self.r0.cpu_s

    @property
    def span(self) -> float:
        return self.r1.t - self.r0.t

    @property
    def periods(self) -> int:
        return self.r1.periods - self.r0.periods

    @property
    def throttled(self) -> int:
        return self.r1.throttled - self.r0.throttled

    def __str__(self) -> str:
        return (f"{self.cpu_s / self.span:.3f} of a core over {self.span:.2f} s, throttled at {self.throttled} of "
                f"{self.periods} period ends" + ("" if self.late is None else f", window {self.late:.3f} s late"))


def cpu_window(dirs: list[str], length: float, due: float | None = None) -> CpuWindow:
    """Measure a task's cgroup over ``length`` seconds, from ``due`` (a time.monotonic(); now if None)."""
    if due is not None:
        time.sleep(max(0.0, due - time.monotonic()))
    r0 = _cpu_reading(dirs)
    time.sleep(max(0.0, r0.t + length - time.monotonic()))
    return CpuWindow(r0, _cpu_reading(dirs), None if due is None else r0.t - due)


def measured_share(attempt: Callable[[], CpuWindow], share: float, host_cores: float, tolerance: float,
                   timely_s: float = math.inf) -> CpuWindow:
    """Measure that a task is charged ``share`` of its host, +-``tolerance`` (of the host), with windows from
    ``attempt`` (from the task's cgroup, with this process's clock: not from Status, whose ``cpu_seconds`` is
    read by the agent, so the time its reply takes to reach the client, hundreds of milliseconds when the
    machine is busy, with the agent in this process, skews a window timed on the client).

    A busy machine does two more things. It holds the task back below its share: then the task is not throttled
    at the end of every period, and the window says nothing of the share beyond the bounds that hold under any
    load, asserted on every window (at most the quota per period, and the full quota charged in each period
    whose end found it throttled: a task at a larger share fails the first, one at a smaller share the
    second). And it deschedules this thread, so a window begins late (more than ``timely_s`` after it was
    due) and proves only that the share was in force by then (a figure off the share still fails). Such a
    window is not enough, and ``attempt`` is called again, at most 4 times; if no window is timely and
    throttled throughout, the test is skipped, saying so: the machine was too busy to tell. Returns the first
    window that is."""
    quota = share * host_cores * CFS_PERIOD_S  # CPU-s per period
    attempts = []
    for _ in range(4):
        w = attempt()
        attempts.append(str(w))
        print(attempts[-1])  # shown with -s, or on a failure
        assert w.cpu_s <= (w.span / CFS_PERIOD_S + 1) * quota + 0.01, f"more than the share allows: {w}"
        assert w.cpu_s >= (w.throttled - 1) * (quota - CFS_SLICE_S), f"less than the share in throttled periods: {w}"
        # The share, not the machine, held it back. (A task that did not run at all, frozen, had no active
        # period: it counts as held, and fails the figure, as it must.)
        if w.throttled >= w.periods - 1:
            assert w.cpu_s / w.span / host_cores == pytest.approx(share, abs=tolerance), f"{w} (share {share} of " \
                f"a {host_cores:g}-core host)"
            if w.late is None or w.late <= timely_s:
                return w
    pytest.skip(f"the machine was too busy to measure a share of {share} (no window both timely and throttled "
                "at every period's end): " + "; ".join(attempts))


#: The measurement window of a share change: from this long after SetShare is sent, for 15 CFS periods.
SHARE_WINDOW = (0.4, 1.5)


def test_share_change_takes_effect_within_half_a_second(stub, agent: RunningAgent, task_ids) -> None:
    """A task at 0.25 is given 0.75: over the 1.5 s (15 CFS periods) from 0.4 s after the request, the kernel
    charges it 0.75 of a core, +-0.03. A share in force only at time x > 0.4 s leaves the window x - 0.4 s at
    0.25, which costs (x - 0.4) / 3: the test fails if the share is not in force by about 0.5 s (0.033).

    Measured by :func:`measured_share`, each attempt with a new task (the window must follow the change), and
    timely if it begins at most 50 ms late."""
    begin, length = SHARE_WINDOW

    def attempt() -> CpuWindow:
        task_ids.append(tid := start(stub, 0.25))
        wait_state(stub, tid, S.TASK_STATE_RUNNING)
        dirs = agent.core.cgroup_dirs(tid)
        sent = time.monotonic()
        reply = stub.SetShare(pb.SetShareRequest(task_id=tid, cpu_share=0.75))
        assert reply.task.cpu_share == 0.75
        window = cpu_window(dirs, length, due=sent + begin)
        stub.Stop(pb.TaskRef(task_id=tid))  # frees the host for another attempt
        return window

    measured_share(attempt, share=0.75, host_cores=1.0, tolerance=0.03, timely_s=0.05)


def test_pause_stops_cpu_and_resume_restores_it(stub, agent: RunningAgent, task_ids) -> None:
    """A paused task is charged no CPU at all over 1 s (its cgroup frozen), and makes no progress; resumed, it is
    charged its share again, 0.5 +-0.03 over 1 s (:func:`measured_share`) from 0.2 s after the Resume."""
    task_ids.append(tid := start(stub, 0.5))
    wait_state(stub, tid, S.TASK_STATE_RUNNING)
    dirs = agent.core.cgroup_dirs(tid)
    assert stub.Pause(pb.TaskRef(task_id=tid)).task.state == S.TASK_STATE_PAUSED
    frozen_progress = task_status(stub, tid).progress
    paused = cpu_window(dirs, 1.0)
    assert paused.cpu_s == 0.0, f"a paused task was charged CPU: {paused}"
    assert task_status(stub, tid).progress == frozen_progress
    # A paused task holds no CPU: its share is free for others, and reclaimed (checked) on Resume.
    status = stub.Status(pb.StatusRequest())
    assert next(h for h in status.hosts if h.name == "h0").cpu_allocated == 0.0
    assert stub.Resume(pb.TaskRef(task_id=tid)).task.state == S.TASK_STATE_RUNNING
    time.sleep(0.2)
    measured_share(lambda: cpu_window(dirs, 1.0), share=0.5, host_cores=1.0, tolerance=0.03)
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
    # Its process is killed and its cgroup removed outside the agent's lock, just after it is reported DONE.
    deadline = time.monotonic() + 5.0
    while any(os.path.exists(d) for d in dirs):
        assert time.monotonic() < deadline, "a finished task's cgroup is removed"
        time.sleep(0.02)


def test_units_mode_completes_when_the_program_has_done_its_units(stub, agent: RunningAgent, task_ids) -> None:
    from node_agent.runner import calibrate

    # The fixture's agent progresses by CPU time and calibrated nothing (its rates are 0): measure dgemm's here, or
    # the task's target was 1 unit and this test passed at the program's first multiplication (review h214).
    agent.core.rates["dgemm"] = calibrate("dgemm")
    agent.core.progress_by = "units"  # tasks read the mode when they start
    try:
        task_ids.append(tid := start(stub, 1.0, host="h1", need=1.0, work=1.0))
    finally:
        agent.core.progress_by = "cpu-time"
    task = agent.core._tasks[tid]
    assert task.progress_by == "units" and task.target > 1000  # (1 s of work at a calibrated rate)
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
    """Health, and the metrics of a task at 0.2 of host h1. Its measured CPU (the metrics' host figure, and
    Status's) is checked against the task's cgroup, not a client clock: against a 2 s window of
    :func:`measured_share` (0.2 +-0.03) that holds the agent's 1 s measurement window, +-0.04 (each window is
    off by up to a 10 ms quota or so: CFS charges a group its quota per 100 ms period in 4 ms ticks), and
    against the share, +-0.05. Status's ``cpu_seconds`` lies between two readings of the cgroup around the
    call."""
    with grpc.insecure_channel(agent.address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service="vcemu.v1.Agent"))
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    task_ids.append(tid := start(stub, 0.2, host="h1"))
    wait_state(stub, tid, S.TASK_STATE_RUNNING)
    dirs = agent.core.cgroup_dirs(tid)
    seen: dict[str, object] = {}

    def attempt() -> CpuWindow:
        r0 = _cpu_reading(dirs)
        # 2 s (20 periods of a 10 ms quota), which holds the agent's 1 s window (the boot phase, at host
        # capacity, is out of both)
        time.sleep(max(0.0, r0.t + 2.0 - time.monotonic()))
        seen["before"] = _cpu_reading(dirs)
        seen["task"] = task_status(stub, tid)
        seen["after"] = _cpu_reading(dirs)
        seen["metrics"] = urllib.request.urlopen(f"http://127.0.0.1:{agent.metrics_port}/metrics",
                                                 timeout=5).read().decode()
        return CpuWindow(r0, _cpu_reading(dirs))

    window = measured_share(attempt, share=0.2, host_cores=0.5, tolerance=0.03)
    cgroup = window.cpu_s / window.span / 0.5
    before, task, after = seen["before"], seen["task"], seen["after"]
    assert isinstance(before, CpuReading) and isinstance(after, CpuReading) and isinstance(task, pb.TaskStatus)
    assert before.cpu_s <= task.cpu_seconds <= after.cpu_s
    assert task.cpu_measured == pytest.approx(cgroup, abs=0.04), f"Status: {task.cpu_measured:.3f}, cgroup: {window}"
    metrics = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
               for line in str(seen["metrics"]).splitlines() if line.startswith("vcemu_agent_")}
    assert metrics['vcemu_agent_cgroup_mode_info{mode="cgroup-v1"}'] == 1.0
    assert metrics['vcemu_agent_tasks{state="running"}'] >= 1.0
    assert metrics['vcemu_agent_host_cpu_allocated_ratio{host="h1"}'] == pytest.approx(0.2)
    measured = metrics['vcemu_agent_host_cpu_measured_ratio{host="h1"}']
    assert measured == pytest.approx(cgroup, abs=0.04), f"metrics: {measured:.3f}, cgroup: {window}"
    assert measured == pytest.approx(0.2, abs=0.05)
    assert metrics['vcemu_agent_host_memory_used_bytes{host="h1"}'] > 64 << 20


def test_sigterm_kills_tasks_and_removes_cgroups_and_startup_removes_leftovers(cgroups_required) -> None:
    agent_id = f"pytest-term-{os.getpid()}"
    # A leftover of a "crashed" earlier agent with this id: a frozen process in a task cgroup.
    crashed = open_driver(agent_id)
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
        fencers = [c for c in children if "node_agent.fencer" in " ".join(c.cmdline())]
        # The tasks' programs, and any spares started ahead of other tasks (node_agent.spares; one being started may
        # still show the agent's command line): all to go with it.
        programs = [c for c in children if any(a.startswith("workloads.") for a in c.cmdline())]
        assert len(fencers) == 1 and len(programs) >= 2
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=15) == 0
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        sleeper.kill()
    assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children)
    assert not any(os.path.exists(d) for d in parent_dirs)
