"""The Lublin–Feitelson model of rigid parallel jobs, as used by seed 001 Sec. IV-C.

Reference: U. Lublin and D. G. Feitelson, "The workload on parallel supercomputers: modeling the
characteristics of rigid jobs", J. Parallel Distrib. Comput. 63(11):1105–1122, 2003 (001's ref. [38]),
and its C implementation ``m_lublin99.c`` distributed with the Parallel Workloads Archive. Seed 001
generates "100 distinct traces of 1,000 jobs using the Lublin model [38] ... [for] a 128-node cluster
and thus contain jobs with between 1 and 128 tasks" (Sec. IV-C); the CPU/memory annotation it adds lives
in :mod:`workloads.annotate`.

The model, per job:

* **Size** (number of nodes). With probability ``serial_prob`` the job is serial (1 node). Otherwise
  ``u = log2(size)`` is drawn from a *two-stage uniform*: with probability ``uprob`` uniform on
  ``[ulow, umed]``, else uniform on ``[umed, uhi]``, where ``uhi = log2(nodes)`` and
  ``umed = uhi - 2.5``. With probability ``pow2_prob`` the size is forced to a power of two,
  ``2**round(u)``; otherwise it is ``round(2**u)`` (which is itself sometimes a power of two, so the
  observed power-of-two share of parallel jobs is a little above ``pow2_prob``; see
  :func:`pow2_fraction_expected`).
* **Run time**. ``ln(run time)`` follows a *hyper-gamma* distribution: with probability
  ``p = pa * size + pb`` (clipped to [0, 1]) it is Gamma(``a1``, ``b1``) (shape, scale), else
  Gamma(``a2``, ``b2``). ``pa < 0``, so bigger jobs tend to run longer.
* **Arrivals**. ``ln(inter-arrival time)`` during the rush hours follows Gamma(``aarr``, ``barr``). The
  daily cycle is a Gamma(``anum``, ``bnum``) density over the 48 half-hour buckets of a day (starting
  at midnight; mass beyond 24 h wraps around to the next day). A bucket's arrival intensity relative
  to the rush hour is its mass divided by the largest bucket's mass, and a rush-hour inter-arrival
  time is stretched through quieter buckets accordingly (a time change: one wall-clock second in
  bucket ``i`` consumes ``w_i / max(w)`` seconds of rush-hour time).

Parameter values (the constants below) are the published *all jobs* defaults of ``m_lublin99.c``
(the model without its batch/interactive split), instantiated for 128 nodes.

What I am unsure of (reproduced from memory, no copy of the paper or code was available):

* The constants are quoted from memory of ``m_lublin99.c``. I am confident of the structure, fairly
  confident of the size and run-time values, less of the arrival values; decimals may differ.
* Whether ``p`` is linear in the node count or in its log2: implemented linear in the node count
  (``p = pa * nodes + pb``), as I recall the code's comment ("a straight line p = pa*nodes + pb").
* The exact bucket walk of the C code's arrival routine, and how its ``ARAR`` constant ("Arrive Rush
  to All Ratio") enters. Here the rush-hour inter-arrival is stretched by the relative bucket
  intensity as described above; ``ARAR`` is kept as a documented constant but not used, because the
  time change already derives the all-day mean from the cycle. The phase of the cycle (bucket 0 =
  midnight) is also my assumption.
* The batch/interactive split of the 2003 paper (separate parameters per class) is not modelled.

Seed 001 reports that the time from the first to the last submission of its 1,000-job traces is "on
the order of 4-6 days". With the arrival process as implemented here it is longer: over seeds 0..99 the
median span is about 16 days (10th-90th percentile 12-21 days) and the natural offered load (see
:func:`workloads.annotate.offered_load`) is about 0.52 (0.37-0.79). The gap is a factor of about 3; the
daily-cycle time change alone accounts for about 1.8 of it (the peak bucket's intensity over the mean
bucket's), so the arrival part (how ``ARAR`` and the bucket walk enter) is where this reconstruction
most likely differs from the C code. It does not affect 001's scaled traces (Table I's first column, Fig. 1,
Table II): 001 multiplies the inter-arrival times to reach each target load
(:func:`workloads.annotate.scale_to_load`), which removes the absolute arrival rate and keeps only the job mix
and the shape of the arrival pattern. It does affect Table I's middle column, the traces "directly from the
Lublin model" (``vcemu sweep --unscaled``): ours run at about a third of the load 001's 4-6-day traces had
(seeds 0-2: spans of 13.7, 16.4 and 18.8 days, offered loads 0.57, 0.46 and 0.51; the same jobs over 5 days
would be about 1.5), so that column is not comparable with 001's (fidelity review); the sweep says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = [
    "A1",
    "A2",
    "AARR",
    "ANUM",
    "ARAR",
    "B1",
    "B2",
    "BARR",
    "BNUM",
    "BUCKETS_PER_DAY",
    "DEFAULT_NODES",
    "PA",
    "PB",
    "POW2_PROB",
    "SERIAL_PROB",
    "ULOW",
    "UMED_BELOW_UHI",
    "UPROB",
    "LublinParams",
    "RigidJob",
    "as_generator",
    "daily_cycle_weights",
    "generate",
    "pow2_fraction_expected",
    "sample_arrivals",
    "sample_runtimes",
    "sample_sizes",
]

# ---- published defaults (m_lublin99.c, Lublin & Feitelson JPDC 2003; values from memory, see above) ----

#: Machine size of 001's synthetic experiments (Sec. IV-C: "a 128-node cluster").
DEFAULT_NODES = 128

# Job size (m_lublin99.c: SERIAL_PROB, POW2_PROB, ULOW, UMED, UHI, UPROB).
#: Probability that a job is serial (1 node).
SERIAL_PROB = 0.24
#: Probability that a parallel job's size is forced to a power of two.
POW2_PROB = 0.75
#: Lower bound of log2(size) for parallel jobs (the code suggests +-0.2 to shift weight on size 2).
ULOW = 0.8
#: ``umed = uhi - 2.5``: the code's advice for machines of up to 2**8 nodes (4.5 for 128 nodes).
UMED_BELOW_UHI = 2.5
#: Probability of the first (``[ulow, umed]``) stage of the two-stage uniform.
UPROB = 0.86

# Run time: ln(run time) ~ hyper-gamma (m_lublin99.c: A1, B1, A2, B2, PA, PB). Gamma(shape, scale).
A1 = 4.2
B1 = 0.94
A2 = 312.0
B2 = 0.03
#: p (probability of the first gamma) = PA * nodes + PB, clipped to [0, 1].
PA = -0.0054
PB = 0.78

# Arrivals (m_lublin99.c: AARR, BARR, ANUM, BNUM, ARAR).
#: ln(rush-hour inter-arrival time in seconds) ~ Gamma(AARR, BARR).
AARR = 10.23
BARR = 0.4871
#: Time of day of arrivals, in half-hour buckets from midnight, ~ Gamma(ANUM, BNUM).
ANUM = 8.1737
BNUM = 3.9631
#: "Arrive Rush to All Ratio" of the C code; documented, not used (see the module docstring).
ARAR = 1.0225

#: The daily cycle's resolution: 48 half-hour buckets.
BUCKETS_PER_DAY = 48
_BUCKET_S = 86400.0 / BUCKETS_PER_DAY


@dataclass(frozen=True)
class LublinParams:
    """The model's parameters; the defaults are the published ones for a 128-node machine."""

    nodes: int = DEFAULT_NODES
    serial_prob: float = SERIAL_PROB
    pow2_prob: float = POW2_PROB
    ulow: float = ULOW
    umed_below_uhi: float = UMED_BELOW_UHI
    uprob: float = UPROB
    a1: float = A1
    b1: float = B1
    a2: float = A2
    b2: float = B2
    pa: float = PA
    pb: float = PB
    aarr: float = AARR
    barr: float = BARR
    anum: float = ANUM
    bnum: float = BNUM

    def __post_init__(self) -> None:
        if not isinstance(self.nodes, int) or self.nodes < 2:
            raise ValueError(f"nodes: must be an integer >= 2, got {self.nodes!r}")
        for name in ("serial_prob", "pow2_prob", "uprob"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name}: must be a probability in [0, 1], got {v!r}")
        if not self.ulow <= self.umed <= self.uhi:
            # umed = log2(nodes) - umed_below_uhi: with the published parameters, fewer than 10 nodes
            least = math.ceil(2 ** (self.ulow + self.umed_below_uhi))
            raise ValueError(
                f"nodes: the model's parallel job sizes need ulow <= umed <= uhi, where umed = log2(nodes) - "
                f"umed_below_uhi; got ulow {self.ulow:g}, umed {self.umed:g}, uhi {self.uhi:g} for {self.nodes} "
                f"nodes (with these parameters nodes must be >= {least})")
        for name in ("a1", "b1", "a2", "b2", "aarr", "barr", "anum", "bnum"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)!r}")

    @property
    def uhi(self) -> float:
        """log2 of the machine size: the largest job spans the whole machine."""
        return math.log2(self.nodes)

    @property
    def umed(self) -> float:
        return self.uhi - self.umed_below_uhi


@dataclass(frozen=True)
class RigidJob:
    """A rigid job of the model: submit time (s, first job at 0), size (nodes) and run time (s)."""

    submit_time: float
    size: int
    run_time: float


def as_generator(rng: np.random.Generator | int | None) -> np.random.Generator:
    """A numpy Generator from a Generator or a seed (``None`` means fresh OS entropy)."""
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def sample_sizes(n: int, rng: np.random.Generator, params: LublinParams = LublinParams()) -> np.ndarray:
    """``n`` job sizes in ``1..params.nodes`` (serial, two-stage uniform log2 size, power-of-two)."""
    serial = rng.random(n) < params.serial_prob
    first_stage = rng.random(n) < params.uprob
    u = np.where(
        first_stage,
        rng.uniform(params.ulow, params.umed, n),
        rng.uniform(params.umed, params.uhi, n),
    )
    pow2 = rng.random(n) < params.pow2_prob
    # m_lublin99.c rounds with (int)(x + 0.5); np.floor(x + 0.5) is the same for x >= 0.
    size = np.where(pow2, 2.0 ** np.floor(u + 0.5), np.floor(2.0**u + 0.5))
    size = np.where(serial, 1.0, size)
    return np.clip(size, 1, params.nodes).astype(np.int64)


def sample_runtimes(sizes: np.ndarray, rng: np.random.Generator, params: LublinParams = LublinParams()) -> np.ndarray:
    """Run times (s) for jobs of the given sizes: ``exp`` of a hyper-gamma with size-dependent ``p``."""
    sizes = np.asarray(sizes, dtype=float)
    p = np.clip(params.pa * sizes + params.pb, 0.0, 1.0)
    first = rng.random(sizes.shape) < p
    g = np.where(
        first,
        rng.gamma(params.a1, params.b1, sizes.shape),
        rng.gamma(params.a2, params.b2, sizes.shape),
    )
    return np.exp(g)


def daily_cycle_weights(params: LublinParams = LublinParams()) -> np.ndarray:
    """The share of a day's arrivals in each half-hour bucket (sums to 1; bucket 0 starts at midnight).

    Bucket ``i`` gets the Gamma(anum, bnum) mass of ``[i + 48k, i + 48k + 1)`` summed over days ``k``.
    """
    days = 1 + int(math.ceil(stats.gamma.ppf(1 - 1e-15, params.anum, scale=params.bnum) / BUCKETS_PER_DAY))
    edges = np.arange(days * BUCKETS_PER_DAY + 1, dtype=float)
    cdf = stats.gamma.cdf(edges, params.anum, scale=params.bnum)
    mass = np.diff(cdf).reshape(days, BUCKETS_PER_DAY).sum(axis=0)
    return mass / mass.sum()


def sample_arrivals(n: int, rng: np.random.Generator, params: LublinParams = LublinParams()) -> np.ndarray:
    """``n`` arrival times (s), non-decreasing, the first at 0, following the daily cycle.

    The clock starts at midnight; each inter-arrival ``exp(Gamma(aarr, barr))`` is rush-hour time, and
    a wall-clock second in bucket ``i`` consumes ``w_i / max(w)`` rush-hour seconds.
    """
    if n <= 0:
        return np.zeros(0)
    w = daily_cycle_weights(params)
    rate = np.maximum(w / w.max(), 1e-12)  # rush-hour seconds consumed per wall-clock second
    per_bucket = rate * _BUCKET_S
    cum = np.concatenate(([0.0], np.cumsum(per_bucket)))  # rush-hour time at each bucket start
    per_day = cum[-1]
    gaps = np.exp(rng.gamma(params.aarr, params.barr, n))
    big = np.cumsum(gaps)  # rush-hour time of each arrival (the first arrival after one gap)
    days, rem = np.divmod(big, per_day)
    idx = np.clip(np.searchsorted(cum, rem, side="right") - 1, 0, BUCKETS_PER_DAY - 1)
    wall = days * 86400.0 + idx * _BUCKET_S + (rem - cum[idx]) / rate[idx]
    wall = np.maximum.accumulate(wall)  # guard against rounding at bucket edges
    return wall - wall[0]


def generate(
    n_jobs: int,
    rng: np.random.Generator | int | None = None,
    params: LublinParams = LublinParams(),
) -> list[RigidJob]:
    """``n_jobs`` rigid jobs of the Lublin–Feitelson model, in submission order, the first at time 0.

    ``rng`` is a numpy Generator or a seed; the same seed gives the same jobs.
    """
    if n_jobs < 0:
        raise ValueError(f"n_jobs: must be >= 0, got {n_jobs}")
    gen = as_generator(rng)
    sizes = sample_sizes(n_jobs, gen, params)
    runtimes = sample_runtimes(sizes, gen, params)
    arrivals = sample_arrivals(n_jobs, gen, params)
    return [
        RigidJob(submit_time=float(t), size=int(s), run_time=float(r))
        for t, s, r in zip(arrivals, sizes, runtimes, strict=True)
    ]


def pow2_fraction_expected(params: LublinParams = LublinParams()) -> float:
    """The expected share of parallel jobs whose size is a power of two.

    ``pow2_prob`` plus the chance that the un-forced ``round(2**u)`` lands on a power of two anyway.
    """

    def stage_prob(lo: float, hi: float) -> float:
        if hi <= lo:
            return 0.0
        total = 0.0
        for k in range(1, int(math.floor(params.uhi)) + 1):
            # round(2**u) == 2**k  <=>  2**k - 0.5 <= 2**u < 2**k + 0.5
            a, b = math.log2(2**k - 0.5), math.log2(2**k + 0.5)
            total += max(0.0, min(b, hi) - max(a, lo))
        return total / (hi - lo)

    q = params.uprob * stage_prob(params.ulow, params.umed) + (1 - params.uprob) * stage_prob(params.umed, params.uhi)
    return params.pow2_prob + (1 - params.pow2_prob) * q
