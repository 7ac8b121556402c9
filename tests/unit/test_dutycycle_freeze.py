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
        while not raced.is_set():
            assert time.monotonic() < deadline, "the loop never continued the group"
            time.sleep(0.01)
        time.sleep(0.5)  # five periods: a continued frozen group is never stopped again
        assert driver._groups["g"].frozen
        assert psutil.Process(proc.pid).status() == psutil.STATUS_STOPPED, "the paused task was left running"
    finally:
        driver.thaw("g")
        driver.close()
        proc.kill()
        proc.wait()
