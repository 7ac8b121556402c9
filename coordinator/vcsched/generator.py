"""Synthetic VCSCHED instances (seed 002 Sec. 4.1) and parallel job sizes (Sec. 5).

Sec. 4.1: per-task CPU and memory requirements are drawn from normal distributions with a given mean and
coefficient of variation, "truncated so that values are between 0 and 1"; vcemu truncates to (0, 1] by
resampling (002 does not say how). The mean CPU need is 0.5; the mean memory requirement is ``H * (1 - slack) / N``
for ``H`` hosts and ``N`` tasks. 002 defines only that mean, before truncation: ``slack`` is the fraction of total
memory left free only where truncation leaves the distribution as it is (CV 0.25). Resampling drops the values
<= 0 (and > 1) and so shifts the mean, and narrows the spread. Measured on generated instances (fraction of total
memory left free, ``1 - sum m_i / H``, averaged): at CV 0.75 nominal slack 0.1 gives -0.02 (64 hosts, 500 tasks;
4 hosts, 12 tasks: memory over-committed on average), 0.5 gives 0.43, 0.9 gives 0.89; with 4 hosts and 6 tasks,
where the mean is 0.6, the cut at 1 dominates and slack 0.1 gives 0.19. At CV 0.25 the nominal slack is met
(within 0.005). The effective CV at a nominal 0.75 is 0.50-0.57 (memory and CPU alike); at 0.25 it is 0.25.

Sec. 5: the number of tasks of a parallel job follows the Lublin-Feitelson model [30]: with probability
``serial_prob`` a job is serial; otherwise ``log2(size)`` is drawn from a two-stage uniform distribution
(``U(ulow, umed)`` with probability ``uprob``, else ``U(umed, uhi)``, ``uhi = log2(max_tasks)``,
``umed = uhi - 2.5``) and, with probability ``pow2_prob``, rounded to an integer (a power of two).
Jobs are drawn until the requested total number of tasks is reached (the last job is cut to fit); all
tasks of a job share one CPU need and one memory requirement.

Everything is seeded: pass a ``numpy.random.Generator``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from coordinator.policies.packing import PackJob
from coordinator.vcsched.instance import Instance
from workloads.lublin import POW2_PROB, SERIAL_PROB, ULOW, UMED_BELOW_UHI, UPROB

__all__ = ["InstanceSpec", "LublinSizes", "generate", "lublin_job_sizes", "truncated_normal"]


@dataclass(frozen=True)
class InstanceSpec:
    """One problem specification of Sec. 4.1."""

    hosts: int
    tasks: int
    slack: float
    cv_mem: float
    cv_cpu: float
    mean_cpu: float = 0.5
    parallel: bool = False
    max_job_tasks: int = 64

    def __post_init__(self) -> None:
        if self.hosts < 1 or self.tasks < 1:
            raise ValueError(f"hosts and tasks must be >= 1, got {self.hosts}, {self.tasks}")
        if not 0.0 <= self.slack < 1.0:
            raise ValueError(f"slack must be in [0, 1), got {self.slack}")
        if self.cv_mem < 0 or self.cv_cpu < 0:
            raise ValueError("coefficients of variation must be >= 0")
        if not 0.0 < self.mean_cpu <= 1.0:
            raise ValueError(f"mean_cpu must be in (0, 1], got {self.mean_cpu}")

    @property
    def mean_mem(self) -> float:
        return self.hosts * (1.0 - self.slack) / self.tasks


@dataclass(frozen=True)
class LublinSizes:
    """Parameters of the Lublin-Feitelson job-size model; defaults are the project's
    (:mod:`workloads.lublin`, from the model's reference code), so Sec. 5 instances and the DFRS
    workloads draw sizes alike."""

    serial_prob: float = SERIAL_PROB
    pow2_prob: float = POW2_PROB
    ulow: float = ULOW
    umed_below_uhi: float = UMED_BELOW_UHI
    uprob: float = UPROB


def truncated_normal(rng: np.random.Generator, mean: float, cv: float, size: int) -> np.ndarray:
    """Normal(mean, cv * mean) samples truncated to (0, 1] by resampling (Sec. 4.1; the resampling is vcemu's
    reading): the samples' mean and CV are not ``mean`` and ``cv`` once truncation bites (see the module's
    docstring)."""
    if not 0.0 < mean <= 1.0:
        # Resampling would never end (or barely): a mean outside (0, 1] cannot be matched anyway.
        raise ValueError(f"mean must be in (0, 1], got {mean}")
    sd = cv * mean
    out = rng.normal(mean, sd, size) if sd > 0 else np.full(size, float(mean))
    for _ in range(10_000):
        bad = (out <= 0.0) | (out > 1.0)
        k = int(bad.sum())
        if not k:
            return out
        out[bad] = rng.normal(mean, sd, k)
    raise RuntimeError("truncated_normal: resampling did not converge")


def lublin_job_sizes(
    rng: np.random.Generator, total_tasks: int, max_tasks: int = 64, params: LublinSizes | None = None
) -> list[int]:
    """Job sizes (tasks per job) summing to ``total_tasks``, each in ``[1, max_tasks]`` (Sec. 5, [30])."""
    p = params or LublinSizes()
    uhi = math.log2(max_tasks)
    umed = max(uhi - p.umed_below_uhi, p.ulow)
    sizes: list[int] = []
    left = total_tasks
    while left > 0:
        if rng.random() < p.serial_prob:
            size = 1
        else:
            par = rng.uniform(p.ulow, umed) if rng.random() < p.uprob else rng.uniform(umed, uhi)
            if rng.random() < p.pow2_prob:
                par = float(int(par + 0.5))
            size = int(2.0**par + 0.5)
        size = max(1, min(size, max_tasks, left))
        sizes.append(size)
        left -= size
    return sizes


def generate(spec: InstanceSpec, rng: np.random.Generator, name: str = "") -> Instance:
    """One instance of ``spec`` (Sec. 4.1; Sec. 5 when ``spec.parallel``)."""
    sizes = lublin_job_sizes(rng, spec.tasks, spec.max_job_tasks) if spec.parallel else [1] * spec.tasks
    n = len(sizes)
    cpu = truncated_normal(rng, spec.mean_cpu, spec.cv_cpu, n)
    mean_mem = spec.mean_mem
    if mean_mem > 1.0:
        raise ValueError(f"mean memory {mean_mem:.3f} > 1: too few tasks for {spec.hosts} hosts at slack {spec.slack}")
    mem = truncated_normal(rng, mean_mem, spec.cv_mem, n)
    jobs = tuple(PackJob(tasks=s, cpu_need=float(c), mem=float(m)) for s, c, m in zip(sizes, cpu, mem, strict=True))
    meta = asdict(spec)
    if name:
        meta["name"] = name
    return Instance(jobs=jobs, hosts=((1.0, 1.0),) * spec.hosts, meta=meta)
