"""A coordinator's ``--state`` across process deaths, with real processes (a review of a live cluster):

* ``vcemu up --state S`` killed -9 and started again on S, then jobs submitted at once: they failed for good
  without running (StartTask to the dead agents' addresses taken for orphans, then the orphans taken for
  refusals once the new agents registered). They must run.
* a second ``vcemu coordinator`` on a state file another one has open is refused, naming ``--state`` and the
  holder's pid; once the holder is killed -9, the kernel has dropped its lock and a new one starts."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from tests.integration.test_up_agent_death import ROOT, children, wait_for
from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def start_up(state: Path, log: Path) -> subprocess.Popen:
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, "-m", "coordinator.cli", "up", "--hosts", "2", "--agents", "2",
                                 "--no-cgroups", "--port", "0", "--heartbeat", "0.5", "--state", str(state)],
                                cwd=ROOT, env=ENV, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def kill_all(procs: list[int]) -> None:
    for pid in procs:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def test_jobs_submitted_right_after_up_restarts_on_its_state_run(tmp_path: Path) -> None:
    state, log = tmp_path / "s.db", tmp_path / "up.log"
    spec = pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.1, work_seconds=2, workload="modeled")
    started: list[int] = []
    up = start_up(state, log)
    try:
        first = wait_for("vcemu up never came up", lambda: re.findall(r"coordinator on (\S+) ", log.read_text()), 90,
                         log)
        agents = children(up.pid)
        started += agents
        with grpc.insecure_channel(first[-1]) as ch:  # type: ignore[index]
            pb_grpc.CoordinatorStub(ch).Submit(pb.SubmitRequest(spec=spec), timeout=10)
        up.kill()  # kill -9: its agents (--parent-pid) follow it
        up.wait()
        wait_for("the first run's agents did not exit", lambda: not any(Path(f"/proc/{p}").exists() for p in agents),
                 30)
        up = start_up(state, log)
        second = wait_for("vcemu up did not come up again",
                          lambda: (m := re.findall(r"coordinator on (\S+) ", log.read_text()))[1:] and m, 90, log)
        started += children(up.pid)
        with grpc.insecure_channel(second[-1]) as ch:  # type: ignore[index]
            stub = pb_grpc.CoordinatorStub(ch)
            jobs = [stub.Submit(pb.SubmitRequest(spec=spec), timeout=10).job_id for _ in range(2)]  # at once

            def states() -> dict[str, str]:
                return {j: stub.GetJob(pb.JobRef(job_id=j), timeout=5).state for j in jobs}

            wait_for("the jobs submitted after the restart did not finish",
                     lambda: all(s in ("done", "failed") for s in states().values()), 60, log)
            got = {j: stub.GetJob(pb.JobRef(job_id=j), timeout=5) for j in jobs}
        assert all(j.state == "done" for j in got.values()), {j: (x.state, x.message) for j, x in got.items()}
        assert "may still run" not in log.read_text()
    finally:
        with contextlib.suppress(OSError):
            os.killpg(up.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            up.wait(20)
        if up.poll() is None:
            up.kill()
            up.wait()
        kill_all([p for p in started if Path(f"/proc/{p}").exists()])


def test_a_second_coordinator_on_one_state_is_refused_until_the_first_dies(tmp_path: Path) -> None:
    state = tmp_path / "s.db"
    argv = [sys.executable, "-m", "coordinator.cli", "coordinator", "--port", "0", "--state", str(state)]
    first = subprocess.Popen(argv, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    third = None
    try:
        assert "listening on" in first.stdout.readline()  # type: ignore[union-attr]
        second = subprocess.run(argv, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=60)
        assert second.returncode == 2, second.stderr
        assert second.stderr.strip() == (f"vcemu coordinator: error: --state {state}: in use by another coordinator "
                                         f"(pid {first.pid}); stop it first, or give another --state"), second.stderr
        first.kill()  # kill -9: the kernel drops its lock
        first.wait()
        third = subprocess.Popen(argv, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert "listening on" in third.stdout.readline()  # type: ignore[union-attr]
    finally:
        for p in (first, third):
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait(20)
