"""modeled: a workload the agent *computes* instead of running, for scale tests (issue 7, DESIGN.md).

No process at all: the agent integrates the task's progress from its CPU share over time, the fluid
model the simulator uses (seed 001 Sec. II-B.1: a task progresses at its yield, share / need, capped at
1). Why no (sleeping) process: a Python process costs ~10 MB resident and a fork, a cgroup costs kernel
objects and a directory per controller; a thousand emulated hosts with a few tasks each would cost tens of
GB and minutes of start-up, and a sleeping process would contribute nothing the model needs. So a modeled
task has no pid, no cgroup, no memory use and ``cpu_measured`` 0: it measures the coordinator, the
agents and the protocol at scale, not CPU enforcement (which dgemm/arraycycle tests).
"""

from __future__ import annotations

NAME = "modeled"


def rate(cpu_share: float, cpu_need: float, work_seconds: float) -> float:
    """Fraction of the task's work done per second at ``cpu_share`` (both fractions of the host)."""
    return min(cpu_share, cpu_need) / cpu_need / work_seconds


def advance(progress: float, cpu_share: float, cpu_need: float, work_seconds: float, dt: float) -> float:
    """Progress after ``dt`` seconds of running at ``cpu_share``; never beyond 1."""
    return min(1.0, progress + max(0.0, dt) * rate(cpu_share, cpu_need, work_seconds))
