"""The duty-cycle driver (``--no-cgroups``) never undoes a freeze. Its loop used to take the list of unfrozen
groups under its lock and continue them (SIGCONT) after letting go of it: a Pause landing in between was
undone, and since a frozen group is neither continued nor stopped again, the paused task then ran on at its
whole share until resumed. The interleaving is forced here by running the freeze from inside the loop's
SIGCONT, in another thread, and giving it time to finish first if it can."""

from __future__ import annotations

import signal
import subprocess
import threading
import time

import psutil

from node_agent import dutycycle
from node_agent.dutycycle import DutyCycleDriver


def test_a_freeze_racing_the_periods_sigcont_stays_frozen(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    proc = subprocess.Popen(["sleep", "30"])
    driver = DutyCycleDriver()
    try:
        driver.create("g")
        driver.add_pid("g", proc.pid)
        driver.set_cpu("g", 0.5)
        original, raced = dutycycle._signal, threading.Event()

        def signal_with_a_freeze_first(pids: set[int], sig: signal.Signals) -> None:
            if sig == signal.SIGCONT and threading.current_thread().name == "duty-cycle" and not raced.is_set():
                raced.set()
                freezer = threading.Thread(target=driver.freeze, args=("g",))
                freezer.start()
                freezer.join(0.3)  # done at once unless the loop holds its lock (then it freezes right after)
            original(pids, sig)

        monkeypatch.setattr(dutycycle, "_signal", signal_with_a_freeze_first)
        deadline = time.monotonic() + 5
        while not raced.is_set() or not driver.is_frozen("g"):  # (the freeze waits for the loop's lock)
            assert time.monotonic() < deadline, "the loop never continued the group, or it was never frozen"
            time.sleep(0.01)
        time.sleep(0.5)  # five periods: a continued frozen group is never stopped again
        assert driver._groups["g"].frozen
        assert psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED, "the paused task was left running"
    finally:
        driver.thaw("g")
        driver.close()
        proc.kill()
        proc.wait()


def test_a_group_its_fencer_marked_is_kept_stopped_until_thawed_and_its_processes_are_recorded(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The fencer of a --no-cgroups agent (node_agent.fencer.duty_step) marks a group and stops its processes
    while the agent does not run; the agent's throttling thread, running again, would have continued them at its
    next period. A full share (never stopped by the duty cycle itself) shows that only the mark stops it."""
    from node_agent.fencer import FENCED, _recorded

    proc = subprocess.Popen(["sleep", "30"])
    driver = DutyCycleDriver()
    try:
        driver.attach_workdir(str(tmp_path))
        assert driver.fencer_args() == ["--duty", str(tmp_path / "fence")]
        driver.create("g")
        driver.add_pid("g", proc.pid)
        driver.set_cpu("g", 1.0)
        group = tmp_path / "fence" / "g"
        assert [pid for pid, _start in _recorded(str(group))] == [proc.pid]
        assert not driver.is_frozen("g")
        (group / FENCED).touch()  # the fencer: mark, then stop
        proc.send_signal(signal.SIGSTOP)
        proc.send_signal(signal.SIGCONT)  # and the agent's thread continuing it between its look and the mark
        # The driver's loop stops it again at its next period (a busy machine may run that thread late: waited for,
        # up to 5 s; a loop that continues a fenced group never stops it, as its share is full), and keeps it so.
        deadline = time.monotonic() + 5
        while psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED:
            assert time.monotonic() < deadline, "the fenced group was continued"
            time.sleep(0.01)
        time.sleep(0.3)  # three periods
        assert psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED, "the fenced group was continued"
        assert driver.is_frozen("g")
        driver.thaw("g")  # the coordinator's Resume
        time.sleep(0.3)
        assert not (group / FENCED).exists() and not driver.is_frozen("g")
        assert psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED
        driver.remove("g")
        assert not group.exists()
    finally:
        driver.close()
        proc.kill()
        proc.wait()
