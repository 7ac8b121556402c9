"""The fencer: a process of its own that freezes an agent's tasks once the agent's lease has run out.

The agent freezes its running tasks itself when its lease runs out (:meth:`node_agent.agent.AgentCore.renew_lease`),
from its monitor thread. An agent process that does not run (SIGSTOP, a debugger, a swapped-out process) cannot:
its tasks ran on while the coordinator, hearing nothing, declared the agent lost and started them elsewhere, so two
copies of a task ran at once, and one stale copy finished its whole task (fault-injection review, 2 of 2 tries).

So the agent also writes its lease's deadline (``leaseclock.now()``, the system-wide CLOCK_BOOTTIME) to a file at
each renewal (:func:`write_lease`), and this process, started by the agent, reads it every :data:`INTERVAL_S` and
freezes every task group under the agent's freezer parent that is not frozen, at every look while the deadline
has passed: from the same moment the agent's own monitor would, with the same margin before the coordinator may
declare the agent lost, and again should anything thaw one meanwhile (a Resume that reached a slow agent). It never
thaws anything while the agent lives. The agent, once it runs again, takes a task it finds frozen while it believes
the task runs as fenced (:meth:`~node_agent.agent.AgentCore._adopt_fences`), and only the coordinator's Resume
thaws it, as for a fence of its own. A kill in progress thaws as it goes and wins: its SIGKILL is delivered the
moment the group is thawed, and it thaws every 10 ms.

It exits when asked (SIGTERM, at the agent's shutdown), or when the agent's process is gone (its pid, with the start
time it had, as :class:`node_agent.cgroups.Owner` checks). Then it kills the processes of every group it froze or
that is frozen then (adopted by the agent as fenced after a renewal, or paused) and thaws them so that the kill
lands: a task frozen there would never run its own check of its parent, and would hold its memory until another
agent's start-up swept it.

Without cgroups (``--no-cgroups``, duty cycling: :mod:`node_agent.dutycycle`) there is no freezer to share, so the
driver keeps a stand-in for one in the agent's work directory (``--duty DIR``): a directory per task group holding
its processes (:data:`PIDS`: pid and start time, so a reused pid is never signalled), where this process, while the
lease has run out, first marks the group (:data:`FENCED`), then stops its processes with SIGSTOP, at every look.
The mark is the group's frozen state: the driver's throttling thread keeps a marked group stopped (it would
otherwise continue it at its next period), the agent takes a running task whose group is marked as fenced, and
only a thaw (the coordinator's Resume) removes the mark. Once the agent is gone, the processes of every group are
killed (SIGKILL ends a stopped process; one stopped by a fence, a pause or the duty cycle never checks its parent).

    python -m node_agent.fencer --lease FILE --agent-pid PID (--v1-freezer DIR | --v2 DIR | --duty DIR)
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import select
import signal
import sys
import time
from collections.abc import Callable
from functools import partial

from node_agent import leaseclock
from node_agent.cgroups import OWNER_PREFIX, _kill_and_thaw, _proc_stat, freeze_control, self_frozen

#: Seconds between two looks at the lease: the agent's monitor's own interval.
INTERVAL_S = 0.1
#: In a duty-cycle group's directory: its processes, a "pid start-time" line each (written by the driver).
PIDS = "pids"
#: In a duty-cycle group's directory: present while the group is fenced (made here, removed by the driver's thaw).
FENCED = "fenced"


def write_lease(path: str, until: float | None) -> None:
    """Record the lease's deadline for the fencer (None: no lease, nothing to fence), atomically: the fencer must
    never read half a number."""
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w") as f:
            f.write("none" if until is None else repr(until))
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_lease(path: str) -> float:
    """The deadline in ``path``: ``inf`` for no lease (or no file yet: the agent holds none until its first
    renewal); a file that cannot be read or parsed also reads as no lease (never a reason to freeze)."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return math.inf
    try:
        return math.inf if text == "none" else float(text)
    except ValueError:
        return math.inf


def task_groups(parent: str) -> list[str]:
    """The task groups under an agent's freezer parent (its owner markers are not tasks)."""
    with contextlib.suppress(OSError):
        return sorted(n for n in os.listdir(parent)
                      if not n.startswith(OWNER_PREFIX) and os.path.isdir(os.path.join(parent, n)))
    return []


def step(lease: str, parent: str, v2: bool, frozen: set[str], now: float) -> set[str]:
    """One look: while the lease has run out, freeze every task group that is not frozen itself; returns the
    groups frozen since the lease ran out (empty while it holds), for :func:`release` should the agent die."""
    if now <= read_lease(lease):
        return set()
    done = set(frozen)
    for name in task_groups(parent):
        group = os.path.join(parent, name)
        if self_frozen(group, v2):
            done.add(name)
            continue
        path, value, _ = freeze_control(group, v2)
        try:
            with open(path, "w") as f:
                f.write(value)
        except OSError:
            continue  # gone meanwhile (stopped), or not yet populated: tried again at the next look
        done.add(name)
    return done


def write_pids(group: str, pids: dict[int, int]) -> None:
    """Record a duty-cycle group's processes (pid -> start time) for the fencer, atomically."""
    tmp = os.path.join(group, f".{PIDS}.tmp")
    with open(tmp, "w") as f:
        f.write("".join(f"{pid} {start}\n" for pid, start in sorted(pids.items())))
    os.replace(tmp, os.path.join(group, PIDS))


def _recorded(group: str) -> list[tuple[int, int]]:
    """The processes recorded for a duty-cycle group: (pid, start time) rows."""
    try:
        with open(os.path.join(group, PIDS)) as f:
            rows = [line.split() for line in f]
    except OSError:
        return []
    return [(int(row[0]), int(row[1])) for row in rows if len(row) == 2]


def _signal_recorded(group: str, sig: signal.Signals) -> None:
    """Signal each process recorded for a duty-cycle group that is still the one recorded, through a pidfd opened
    before its start time is checked: a pid freed and reused after the check (once the agent is gone, nothing holds
    its children's pids as zombies) is never signalled, as the pidfd still refers to the process checked."""
    for pid, start in _recorded(group):
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue  # gone
        except OSError:  # no pidfds here (a kernel before 5.3: ENOSYS; a seccomp profile: EPERM): by pid
            with contextlib.suppress(ProcessLookupError):
                if _same_process(pid, start):
                    os.kill(pid, sig)
            continue
        try:
            if _same_process(pid, start):
                signal.pidfd_send_signal(fd, sig)
        except OSError:
            pass  # ended meanwhile
        finally:
            os.close(fd)


def duty_step(lease: str, parent: str, frozen: set[str], now: float) -> set[str]:
    """:func:`step` for duty-cycle groups (see the module docstring): while the lease has run out, mark every
    group fenced, then SIGSTOP its processes, at every look (the agent's throttling thread may have continued one
    between its look at the mark and the mark); returns the groups marked since the lease ran out."""
    if now <= read_lease(lease):
        return set()
    done = set(frozen)
    for name in task_groups(parent):
        group = os.path.join(parent, name)
        try:
            with open(os.path.join(group, FENCED), "a"):
                pass
        except OSError:
            continue  # removed meanwhile (its task stopped)
        _signal_recorded(group, signal.SIGSTOP)
        done.add(name)
    return done


def duty_release(parent: str) -> None:
    """The agent is gone: kill the processes of every duty-cycle group it had. A task stopped then (fenced, by this
    fencer or adopted by the agent after a renewal; paused; or stopped by the duty cycle between two periods) never
    runs its own check of its parent; the others would end by it, a little later."""
    for name in task_groups(parent):
        _signal_recorded(os.path.join(parent, name), signal.SIGKILL)


def release(parent: str, v2: bool, frozen: set[str]) -> None:
    """The agent is gone: kill the processes of the groups this fencer froze and of every group frozen now (one the
    agent adopted as fenced after a renewal, or paused), thawing them so that the kill lands: a frozen task never
    runs its own check of its parent. The groups themselves are left for the next agent's start-up to remove."""
    names = frozen | {n for n in task_groups(parent) if self_frozen(os.path.join(parent, n), v2)}
    dirs = [os.path.join(parent, n) for n in names if os.path.isdir(os.path.join(parent, n))]
    for _ in range(100):  # (each round SIGKILLs what is left and thaws; a second at most)
        if not _kill_and_thaw(dirs):
            return
        time.sleep(0.01)


def _agent_gone(pid: int) -> Callable[[], bool]:
    """A check of whether the agent's process has ended: its pidfd turns readable then (checked against its start
    time once, when opened). Without pidfds, its /proc entry with its start time; a read that fails for another
    reason than the process being gone (ENFILE, say) does not count: once the agent is gone, its tasks are killed."""
    stat = _proc_stat(pid)
    start = stat[1] if stat is not None else None
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return lambda: True
    except OSError:
        def by_proc() -> bool:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    f.read()
            except (FileNotFoundError, ProcessLookupError):
                return True
            except OSError:
                return False  # unreadable now: looked at again next time
            return not _same_process(pid, start)
        return by_proc
    if not _same_process(pid, start):  # ended (or another process) before the pidfd was opened
        os.close(fd)
        return lambda: True
    return lambda: bool(select.select([fd], [], [], 0)[0])


def _same_process(pid: int, start: int | None) -> bool:
    """Whether ``pid`` is still the process that started at ``start`` (its /proc start time), not a zombie."""
    stat = _proc_stat(pid)
    return stat is not None and stat[1] == start and stat[0] not in ("Z", "X")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m node_agent.fencer")
    p.add_argument("--lease", required=True)
    p.add_argument("--agent-pid", type=int, required=True)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--v1-freezer")
    where.add_argument("--v2")
    where.add_argument("--duty")
    args = p.parse_args(argv)
    if args.duty:
        look = partial(duty_step, args.lease, args.duty)

        def end(_frozen: set[str]) -> None:  # (every group, not only those marked: see duty_release)
            duty_release(args.duty)
    else:
        parent, v2 = (args.v2, True) if args.v2 else (args.v1_freezer, False)
        look, end = partial(step, args.lease, parent, v2), partial(release, parent, v2)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (a terminal's Ctrl-C is the agent's to handle)
    gone = _agent_gone(args.agent_pid)
    frozen: set[str] = set()
    while not gone():
        frozen = look(frozen, leaseclock.now())
        time.sleep(INTERVAL_S)
    end(frozen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
