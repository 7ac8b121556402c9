"""The main loop shared by the workload programs.

A program is a ``setup`` function that allocates the task's memory and returns a ``step`` callable doing
a fixed amount of work and returning how many units it did. This module handles everything else the
agent relies on:

* ``--wait-go``: block on stdin until the agent has put this process in its cgroup, *before* numpy is
  imported (unless it is a spare: below), so the import, the allocation and all computation are charged to the
  task's cgroup; then,
  once set up and reported ready, block again until the agent has replaced the boot-phase quota by the
  task's share, so that not one multiplication runs outside it. EOF instead of a byte means the agent
  gave up; exit 3.
* single-threaded BLAS: the thread-count variables are set before numpy is imported, because a
  task's CPU share is a quota and extra BLAS threads would only contend for it.
* progress: published through :mod:`workloads.progress` about every 20 ms; exit 0 at ``--units``.
* orphan check: if the agent dies (parent pid changes), exit 4 instead of burning CPU forever.
* ``--calibrate SECONDS``: run unthrottled and print one JSON line with units per CPU-second, which the
  agent uses to turn a task's ``work_seconds`` into units.
* ``--spare NAME``: a process the agent starts before it has a task for it (:mod:`node_agent.spares`): it imports
  numpy and runs one unit of work now, writes ``R`` on stdout (ready; stdout then goes to /dev/null), then reads
  its task's arguments as one JSON line on stdin (EOF: the agent no longer needs it; exit 3) and runs as a
  program started with them would, from the first ``--wait-go`` byte on. The interpreter's start and numpy's
  import (about 0.18 s of CPU here) are then out of the task's start: under cgroups they ran, and were charged, in
  the agent's group (without cgroups, where a task's CPU is its process's, they count in its ``cpu_seconds``, not
  in its progress, which is measured from its boot's end).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable

from workloads.progress import ProgressWriter

Step = Callable[[], int]
Setup = Callable[[int], Step]

PUBLISH_INTERVAL_S = 0.02
_BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
#: What a spare writes on its stdout once it is ready (``--spare``; :mod:`node_agent.spares` waits for it).
SPARE_READY = b"R"


def _parse(name: str, argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=f"python -m workloads.{name}", description=f"{name} workload program")
    p.add_argument("--units", type=int, default=0, help="work units to do, then exit 0 (0 = forever)")
    p.add_argument("--progress", help="progress channel file created by the agent")
    p.add_argument("--memory-bytes", type=int, default=0, help="memory the program allocates and uses")
    p.add_argument("--wait-go", action="store_true", help="wait for one byte on stdin before starting")
    p.add_argument("--calibrate", type=float, default=0.0, metavar="SECONDS",
                   help="measure units per CPU-second for SECONDS, print JSON, exit")
    p.add_argument("--spare", metavar="NAME", default=None,
                   help="import numpy now, then read the task's arguments as a JSON list on one line of stdin; NAME: "
                        "a path in the agent's work directory, by which a restarted agent finds what a dead one left")
    return p.parse_args(argv)


def main(name: str, setup: Setup, argv: list[str] | None = None) -> int:
    """Run a workload program; returns the process exit code."""
    args = _parse(name, sys.argv[1:] if argv is None else argv)
    ppid = os.getppid()
    for var in _BLAS_THREAD_VARS:  # before numpy is imported (by a spare now, else after the go byte)
        os.environ[var] = "1"
    if args.spare:
        setup(0)()  # numpy's import, and what its first use loads lazily (numpy.random, BLAS's first call)
        # Ready: said on stdout (the agent's pool waits for it), which goes where a task's goes, nowhere, first:
        # once the pool has read the byte, fd 1 is /dev/null.
        said = os.dup(1)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
        os.write(said, SPARE_READY)
        os.close(said)
        line = sys.stdin.buffer.readline()
        if not line.endswith(b"\n"):
            return 3  # EOF: not needed after all (the agent stopped, or had no task for it)
        task_args = json.loads(line)
        if not (isinstance(task_args, list) and all(isinstance(a, str) for a in task_args)):
            print(f"{name}: a spare's arguments must be a JSON list of strings, got {line[:200]!r}", file=sys.stderr)
            return 2
        args = _parse(name, task_args)
        if args.spare or args.calibrate:
            print(f"{name}: a spare's task cannot be --spare or --calibrate", file=sys.stderr)
            return 2
    if args.wait_go and not sys.stdin.buffer.read(1):
        return 3
    step = setup(max(0, args.memory_bytes))
    if args.calibrate > 0:
        return _calibrate(step, args.calibrate)
    writer = ProgressWriter(args.progress, args.units) if args.progress else None
    done = 0
    if writer:
        writer.publish(0, ready=True)
    if args.wait_go and not sys.stdin.buffer.read(1):  # the agent applies the task's share, then says run
        return 3
    next_publish = time.monotonic() + PUBLISH_INTERVAL_S
    while args.units <= 0 or done < args.units:
        done += step()
        now = time.monotonic()
        if now >= next_publish:
            next_publish = now + PUBLISH_INTERVAL_S
            if writer:
                writer.publish(done)
            if os.getppid() != ppid:
                return 4
    if writer:
        writer.publish(done)
    return 0


def _calibrate(step: Step, seconds: float, windows: int = 5) -> int:
    """Warm up (caches, lazy BLAS init), then count units against this process's CPU time, so that a
    busy machine only lengthens the measurement instead of biasing it. The rate is the median over
    ``windows`` equal windows: on a virtual machine the speed per CPU-second jumps by 10-40% from one
    fraction of a second to the next, and one unlucky window would skew every task of the agent."""
    end = time.monotonic() + min(0.2, seconds / 3)
    while time.monotonic() < end:
        step()
    rates, total_units, total_cpu = [], 0, 0.0
    for _ in range(windows):
        units = 0
        c0 = time.process_time()
        end = time.monotonic() + seconds / windows
        while time.monotonic() < end:
            units += step()
        cpu = time.process_time() - c0
        rates.append(units / cpu)
        total_units, total_cpu = total_units + units, total_cpu + cpu
    rates.sort()
    print(json.dumps({"units": total_units, "cpu_seconds": total_cpu, "units_per_cpu_second": rates[len(rates) // 2],
                      "window_rates": rates}), flush=True)
    return 0
