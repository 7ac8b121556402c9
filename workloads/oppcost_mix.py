"""The job mix and cluster of seed 004 Sec. 5 (opportunity-cost simulations), reproducible from a seed.

Jobs (Sec. 5, "all random distributions were uniform"):

* a job needs ``2 / r`` CPU seconds on the fastest machine and ``1 / m`` percent of the largest machine's
  memory, ``r`` and ``m`` independent uniform draws in (0, 1];
* 5% of jobs instead need ``20 / r`` CPU seconds and are "divided into one to 20 parallel components" (uniform
  count). We divide the job, i.e. both its CPU seconds and its memory ``m(j)``, equally between the components
  (a data-parallel array-cycling job of Sec. 5.2 splits its array). ``MixConfig(split_memory=False)`` gives
  every component the whole memory draw instead; with that reading one parallel job can ask for 20 times the
  largest machine's memory (see the report of ``vcemu oppcost`` for what that does). Each component is a *job*
  of the model of Sec. 2 (the unit that is assigned, moves and has a slowdown);
* arrivals "about one per ten seconds for ten thousand simulated seconds, distributed randomly": inter-arrival
  times uniform in [0, 20) s, arrivals up to 10,000 s;
* each job has an *origin* node drawn uniformly: where a user launches it, which Mosix starts it on.

The distributions are heavy-tailed on purpose (``P(cpu > x) = 2 / x``, ``P(mem% > x) = 1 / x``): one job in a
hundred asks for more memory than the largest machine has and thrashes wherever it runs. We keep that as the
paper states it rather than truncating.

The cluster: 004's Table 1 is not in our text, only its description ("six Pentium machines"; Pentium 133,
Pentium Pro 200 and Pentium II machines "with different memory capacity", Sec. 1 and 5). We use six machines of
those kinds, speed proportional to clock rate relative to the fastest, memory in MB:

=====  ====================  ======  ======
name   CPU                   speed   memory
=====  ====================  ======  ======
p2a    Pentium II 300 MHz    1.000   128
p2b    Pentium II 233 MHz    0.777   128
ppa    Pentium Pro 200 MHz   0.667    64
ppb    Pentium Pro 200 MHz   0.667    64
p1a    Pentium 133 MHz       0.443    32
p1b    Pentium 133 MHz       0.443    32
=====  ====================  ======  ======
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from coordinator.policies.opportunity_cost import Machine

CLUSTER_NAMES = ("p2a", "p2b", "ppa", "ppb", "p1a", "p1b")
CLUSTER = (
    Machine(speed=1.0, mem=128.0),
    Machine(speed=233 / 300, mem=128.0),
    Machine(speed=200 / 300, mem=64.0),
    Machine(speed=200 / 300, mem=64.0),
    Machine(speed=133 / 300, mem=32.0),
    Machine(speed=133 / 300, mem=32.0),
)


@dataclass(frozen=True)
class ProcSpec:
    """One process of the stream: a job, or a component of a parallel job."""

    pid: int
    job: int
    arrival: float
    work: float  # CPU seconds on the fastest machine
    mem: float  # MB
    origin: int


@dataclass(frozen=True)
class MixConfig:
    duration: float = 10_000.0
    mean_interarrival: float = 10.0
    parallel_fraction: float = 0.05
    max_components: int = 20
    small_cpu: float = 2.0
    large_cpu: float = 20.0
    split_memory: bool = True

    def __post_init__(self) -> None:
        for name in ("duration", "mean_interarrival", "small_cpu", "large_cpu"):
            if not getattr(self, name) > 0:
                raise ValueError(f"MixConfig.{name} must be > 0, got {getattr(self, name)}")
        if not 0 <= self.parallel_fraction <= 1:
            raise ValueError(f"MixConfig.parallel_fraction must be in [0, 1], got {self.parallel_fraction}")
        if self.max_components < 1:
            raise ValueError(f"MixConfig.max_components must be >= 1, got {self.max_components}")


def _unit(rng: random.Random) -> float:
    """Uniform in (0, 1]: 1 - random() never is 0, so 2 / r and 1 / m stay finite."""
    return 1.0 - rng.random()


def generate(seed: int, machines: tuple[Machine, ...] = CLUSTER, cfg: MixConfig | None = None) -> list[ProcSpec]:
    """The processes of one execution, in arrival order. Same seed, same stream."""
    cfg = cfg or MixConfig()
    rng = random.Random(seed)
    largest_mem = max(m.mem for m in machines)
    out: list[ProcSpec] = []
    t, job = 0.0, 0
    while True:
        t += rng.uniform(0.0, 2.0 * cfg.mean_interarrival)
        if t > cfg.duration:
            return out
        r, m = _unit(rng), _unit(rng)
        mem = largest_mem * (1.0 / m) / 100.0
        origin = rng.randrange(len(machines))
        if rng.random() < cfg.parallel_fraction:
            parts = rng.randint(1, cfg.max_components)
            work = cfg.large_cpu / r / parts
            if cfg.split_memory:
                mem /= parts
        else:
            parts, work = 1, cfg.small_cpu / r
        for _ in range(parts):
            out.append(ProcSpec(pid=len(out), job=job, arrival=t, work=work, mem=mem, origin=origin))
        job += 1
