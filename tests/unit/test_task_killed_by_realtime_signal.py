"""A task's program killed by a signal that Python's signal.Signals does not name (a real-time signal between
SIGRTMIN and SIGRTMAX, 35..63 on Linux) fails with a message naming the signal: the poll must not raise
ValueError from signal.Signals(n) (which failed the task as "agent error while polling the task")."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from node_agent.dutycycle import DutyCycleDriver
from node_agent.runner import State, Task, TaskSpec


def test_a_task_killed_by_a_realtime_signal_fails_naming_it(tmp_path) -> None:  # type: ignore[no-untyped-def]
    driver = DutyCycleDriver()
    proc = subprocess.Popen(["sleep", "30"], stdin=subprocess.PIPE)
    try:
        spec = TaskSpec(task_id="t/0", host="h", host_cores=1.0, workload="dgemm", cpu_share=0.5, cpu_need=0.5,
                        work_seconds=1.0, memory_bytes=0)
        task = Task(spec, driver, units_per_core_second=1000.0, workdir=str(tmp_path))
        driver.create(task.cgroup)
        task._proc, task.state = proc, State.RUNNING
        sig = signal.SIGRTMIN + 6  # 40: no member of signal.Signals
        os.kill(proc.pid, sig)
        proc.wait(5)
        time.sleep(0.05)
        task.poll()  # raised ValueError: 40 is not a valid Signals
        assert task.state is State.FAILED
        assert f"signal {int(sig)}" in task.message or "SIGRTMIN+6" in task.message, task.message
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        driver.close()
