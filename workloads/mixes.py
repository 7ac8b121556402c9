"""Seeded job mixes for demos and live/simulated comparisons.

The demo mix follows seed 001 Sec. IV-C's annotation in spirit (one-task jobs are sequential and need
a quarter of a host's CPU, parallel ones all of it; most tasks need 10% of a host's memory, the rest
20–30%) but is sized for a one-minute live run on a small machine. Memory is kept low enough that
GREEDY rarely has to postpone a job: its exponential backoff turns a fraction of a second's difference
between a live run and its simulation into tens of seconds of waiting, which would hide how closely the
live cluster follows the model.
"""

from __future__ import annotations

import random

from coordinator.model import JobSpec


def demo_mix(seed: int, n: int = 12, span: float = 60.0, work: tuple[float, float] = (6.0, 22.0),
             workload: str = "dgemm") -> list[JobSpec]:
    """``n`` jobs arriving over ``span`` seconds (the first at 0), reproducible from ``seed``."""
    rng = random.Random(seed)
    times = sorted([0.0] + [rng.uniform(0.0, span) for _ in range(n - 1)])
    jobs = []
    for i, t in enumerate(times):
        tasks = rng.choice((1, 1, 1, 2, 2, 3))
        need = 0.25 if tasks == 1 else 1.0
        mem = 0.1 if rng.random() < 0.55 else 0.1 * rng.randint(2, 3)
        jobs.append(JobSpec(f"d{i:02d}", round(t, 3), tasks, need, round(mem, 3),
                            round(rng.uniform(*work), 1), workload))
    return jobs
