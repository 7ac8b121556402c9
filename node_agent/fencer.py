"""The fencer: a process of its own that freezes an agent's tasks once the agent's lease has run out.

The agent freezes its running tasks itself when its lease runs out (:meth:`node_agent.agent.AgentCore.renew_lease`),
from its monitor thread. An agent process that does not run (SIGSTOP, a debugger, a swapped-out process) cannot:
its tasks ran on while the coordinator, hearing nothing, declared the agent lost and started them elsewhere, so two
copies of a task ran at once, and one stale copy finished its whole task (fault-injection review, 2 of 2 tries).

So the agent also writes its lease's deadline (``time.monotonic()``, the system-wide CLOCK_MONOTONIC) to a file at
each renewal (:func:`write_lease`), and this process, started by the agent, reads it every :data:`INTERVAL_S` and
freezes every task group under the agent's freezer parent once the deadline has passed: the same moment the
agent's own monitor would, with the same margin before the coordinator may declare the agent lost. It never thaws
anything. The agent, once it runs again, takes a task it finds frozen while it believes the task runs as fenced
(:meth:`~node_agent.agent.AgentCore._adopt_fences`), and only the coordinator's Resume thaws it, as for a fence
of its own. Each group is frozen once per expiry, so that a kill in progress (which thaws as it goes) is not fought.

It exits when the agent's process is gone (its tasks end with it), or when asked (SIGTERM, at the agent's shutdown).
Cgroup modes only: without cgroups (duty cycling) the agent's own throttling thread owns the tasks' stop signals.

    python -m node_agent.fencer --lease FILE --agent-pid PID (--v1-freezer DIR | --v2 DIR)
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import time

from node_agent.cgroups import OWNER_PREFIX

#: Seconds between two looks at the lease: the agent's monitor's own interval.
INTERVAL_S = 0.1


def write_lease(path: str, until: float | None) -> None:
    """Record the lease's deadline for the fencer (None: no lease, nothing to fence), atomically: the fencer must
    never read half a number."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write("none" if until is None else repr(until))
    os.replace(tmp, path)


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


def freeze_file(parent: str, name: str, v2: bool) -> tuple[str, str]:
    """The file that freezes group ``name``, and what to write to it."""
    return (os.path.join(parent, name, "cgroup.freeze"), "1") if v2 else (
        os.path.join(parent, name, "freezer.state"), "FROZEN")


def step(lease: str, parent: str, v2: bool, frozen: set[str], now: float) -> set[str]:
    """One look: freeze, once, every task group not yet frozen since the lease ran out; returns the groups frozen
    in this expiry so far (empty while the lease holds: a later expiry freezes them again)."""
    if now <= read_lease(lease):
        return set()
    done = set(frozen)
    for name in task_groups(parent):
        if name in done:
            continue
        path, value = freeze_file(parent, name, v2)
        try:
            with open(path, "w") as f:
                f.write(value)
        except OSError:
            continue  # gone meanwhile (stopped), or not yet populated: tried again at the next look
        done.add(name)
    return done


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m node_agent.fencer")
    p.add_argument("--lease", required=True)
    p.add_argument("--agent-pid", type=int, required=True)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--v1-freezer")
    where.add_argument("--v2")
    args = p.parse_args(argv)
    parent, v2 = (args.v2, True) if args.v2 else (args.v1_freezer, False)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (a terminal's Ctrl-C is the agent's to handle)
    frozen: set[str] = set()
    while _alive(args.agent_pid):
        frozen = step(args.lease, parent, v2, frozen, time.monotonic())
        time.sleep(INTERVAL_S)
    return 0


if __name__ == "__main__":
    sys.exit(main())
