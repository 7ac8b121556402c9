"""Relative performance functions (RPFs) of seed 003: long-running jobs and transactional applications.

An RPF measures the relative distance of an application's performance from its goal: 0 when the goal is
met exactly, above 0 when it is exceeded, below 0 when it is violated (003 Sec. 3.2). APC compares
placements by the sorted vector of these values, so the two workload types become comparable.

Units follow the paper: CPU speed in MHz, work in Mcycles, memory in MB, time in seconds.

* Jobs (003 Sec. 4.1, eq. 2): ``u = (tau - t) / (tau - tau_start)`` for completion time ``t``. A job is a
  sequence of stages, each with work ``alpha``, maximum and minimum speed and a memory requirement.
* Hypothetical relative performance (003 Sec. 4.2, eqs. 3-6): the relative performance every job in
  the system would reach if an aggregate CPU power ``omega_g`` were shared among all of them (fluid,
  ignoring memory). Built from sampled matrices ``W`` (speeds) and ``V`` (values) and interpolated.
* Transactional applications (003 Sec. 3.3, eq. 1): ``u = (tau - t) / tau`` for mean response time ``t``.
  003 defers the response-time model to its middleware ([21]); ours is documented in
  :class:`ResponseTimeModel`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

#: Sampling points u_2..u_R of Sec. 4.2 (u_1 = -inf is implicit). Dense near the usual operating range
#: [0, 1] where the paper's values live; coarse below, where interpolation is refined by the exact
#: inverse of eq. 3 (see :meth:`Hypothetical.at`).
DEFAULT_SAMPLES: tuple[float, ...] = (
    -20.0, -10.0, -5.0, -3.0, -2.0, -1.5, -1.0, -0.75, -0.5, -0.25, *[i / 40 for i in range(41)])


@dataclass(frozen=True)
class Stage:
    """One stage of a job's resource usage profile (003 Sec. 4.1)."""

    work: float  # alpha_k, Mcycles
    max_speed: float  # omega_max_k, MHz
    memory: float  # gamma_k, MB
    min_speed: float = 0.0  # omega_min_k, MHz: whenever the stage runs it runs at least this fast

    def __post_init__(self) -> None:
        if self.work <= 0:
            raise ValueError(f"stage work must be > 0 Mcycles, got {self.work}")
        if self.max_speed <= 0:
            raise ValueError(f"stage max_speed must be > 0 MHz, got {self.max_speed}")
        if not 0 <= self.min_speed <= self.max_speed:
            raise ValueError(f"stage min_speed must be in [0, max_speed], got {self.min_speed}")
        if self.memory < 0:
            raise ValueError(f"stage memory must be >= 0 MB, got {self.memory}")


@dataclass(frozen=True)
class Job:
    """A long-running job: profile, goal and runtime state (``done`` is alpha*, Mcycles consumed so far).

    ``goal`` is the completion time goal tau (absolute seconds) and ``start`` the desired start time
    tau_start (defaults to the submission time); ``goal - start`` is the relative goal."""

    id: str
    submit: float
    goal: float
    stages: tuple[Stage, ...]
    done: float = 0.0
    start: float | None = None

    def __post_init__(self) -> None:
        if not self.stages:
            raise ValueError(f"job {self.id}: needs at least one stage")
        if self.goal <= self.tau_start:
            raise ValueError(f"job {self.id}: goal {self.goal} must be after its desired start {self.tau_start}")

    @property
    def tau_start(self) -> float:
        return self.submit if self.start is None else self.start

    @property
    def relative_goal(self) -> float:
        return self.goal - self.tau_start

    @property
    def work(self) -> float:
        return sum(s.work for s in self.stages)

    @property
    def remaining(self) -> float:
        return max(0.0, self.work - self.done)

    @property
    def finished(self) -> bool:
        return self.remaining <= 1e-9

    def stage(self) -> Stage:
        """The stage the job is in (the last one once finished)."""
        acc = 0.0
        for s in self.stages:
            acc += s.work
            if self.done < acc - 1e-9:
                return s
        return self.stages[-1]

    def min_remaining_time(self) -> float:
        """Seconds to finish if every remaining stage runs at its maximum speed."""
        acc, t = 0.0, 0.0
        for s in self.stages:
            left = min(s.work, max(0.0, acc + s.work - self.done))
            t += left / s.max_speed
            acc += s.work
        return t

    def rp(self, completion: float) -> float:
        """Eq. 2: relative performance of completing at ``completion``."""
        return (self.goal - completion) / self.relative_goal

    def max_rp(self, now: float) -> float:
        """u_max at ``now``: the RP of running every remaining stage at full speed from now on."""
        return self.rp(now + self.min_remaining_time())

    def advanced(self, speed: float, seconds: float) -> tuple[Job, float | None]:
        """The job after running ``seconds`` with ``speed`` MHz (each stage capped at its max speed), and the
        offset in seconds at which it completed (None if it did not)."""
        done, t = self.done, 0.0
        acc = 0.0
        for s in self.stages:
            end = acc + s.work
            if done < end - 1e-9 and t < seconds:
                v = min(speed, s.max_speed)
                if v <= 0:
                    break
                dt = min(seconds - t, (end - done) / v)
                done += v * dt
                t += dt
                if done >= end - 1e-9:
                    done = end
            acc = end
        job = replace(self, done=min(done, self.work))
        return job, (t if job.finished else None)


@dataclass(frozen=True)
class Hypothetical:
    """The hypothetical RPF of Sec. 4.2 for a set of jobs at time ``now``.

    ``W[i, m]`` is the average speed job m needs from ``now`` to reach ``u_i`` (eq. 3, capped at its
    u_max: eq. 4) and ``V[i, m]`` the value reached (eq. 5). Row 0 is u_1 = -inf (speed 0).
    """

    now: float
    ids: tuple[str, ...]
    samples: np.ndarray  # u_1..u_R, u_1 = -inf
    W: np.ndarray  # R x M
    V: np.ndarray  # R x M
    remaining: np.ndarray
    goal: np.ndarray
    rel: np.ndarray
    umax: np.ndarray
    full: np.ndarray  # remaining / min_remaining_time: the speed that reaches u_max
    sums: np.ndarray  # sum_m W[i, m] per sampling point (the brackets of eq. 6)

    @staticmethod
    def build(jobs: list[Job] | tuple[Job, ...], now: float,
              samples: tuple[float, ...] = DEFAULT_SAMPLES) -> Hypothetical:
        live = [j for j in jobs if not j.finished]
        return Hypothetical.from_arrays(
            tuple(j.id for j in live), np.array([j.remaining for j in live], dtype=float),
            np.array([j.goal for j in live], dtype=float), np.array([j.relative_goal for j in live], dtype=float),
            np.array([j.min_remaining_time() for j in live], dtype=float), now, samples)

    @staticmethod
    def from_arrays(ids: tuple[str, ...], rem: np.ndarray, goal: np.ndarray, rel: np.ndarray, minrem: np.ndarray,
                    now: float, samples: tuple[float, ...] = DEFAULT_SAMPLES) -> Hypothetical:
        """As :meth:`build`, from per-job arrays (remaining work, goal, relative goal, min remaining time)."""
        umax = (goal - now - minrem) / rel
        full = rem / np.maximum(minrem, 1e-12)
        u = np.array([-math.inf, *samples], dtype=float)
        horizon = goal[None, :] - u[1:, None] * rel[None, :] - now  # t_m(u) - t_now
        reach = u[1:, None] < umax[None, :]
        w = np.where(reach, rem[None, :] / np.where(reach, horizon, 1.0), full[None, :])
        W = np.vstack([np.zeros((1, len(ids))), w])
        V = np.vstack([np.full((1, len(ids)), -math.inf), np.minimum(u[1:, None], umax[None, :])])
        return Hypothetical(now, ids, u, W, V, rem, goal, rel, umax, full, W.sum(axis=1))

    def at(self, omega_g: float) -> tuple[np.ndarray, np.ndarray]:
        """(omega_m, u_m) per job when ``omega_g`` MHz is shared among all jobs (eq. 6).

        Speeds are interpolated linearly between the rows k, k+1 that bracket ``omega_g`` (the
        approximation Sec. 4.2 uses instead of solving the linear system); each u_m is then derived from
        its omega_m with the exact inverse of eq. 3, capped at u_max."""
        if not self.ids:
            return np.zeros(0), np.zeros(0)
        sums = self.sums
        if omega_g >= sums[-1]:
            omega = self.W[-1].copy()
        elif omega_g <= 0:
            omega = np.zeros(len(self.ids))
        else:
            k = int(np.searchsorted(sums, omega_g, side="right")) - 1
            k = min(max(k, 0), len(sums) - 2)
            span = sums[k + 1] - sums[k]
            theta = 0.0 if span <= 0 else (omega_g - sums[k]) / span
            omega = self.W[k] + theta * (self.W[k + 1] - self.W[k])
        return omega, self.rp_of_speed(omega)

    def rp_of_speed(self, omega: np.ndarray) -> np.ndarray:
        """Inverse of eq. 3: the RP each job reaches running at ``omega`` on average from now."""
        with np.errstate(divide="ignore", invalid="ignore"):
            t_done = self.now + self.remaining / omega
            u = (self.goal - t_done) / self.rel
        u = np.where(omega <= 0, -math.inf, u)
        return np.where(omega >= self.full * (1 - 1e-9), self.umax, np.minimum(u, self.umax))

    def level(self, omega_g: float) -> float:
        """The common RP level of the jobs that are not capped at their u_max (the highest u_m)."""
        if not self.ids:
            return math.inf
        return float(np.max(self.at(omega_g)[1]))


@dataclass(frozen=True)
class ResponseTimeModel:
    """Mean response time of a transactional application as a function of its CPU allocation.

    003 Sec. 3.3 takes this from its middleware's queueing model ([21]); we use the simplest model with
    the two properties the paper relies on: an M/M/1 processor-sharing server whose capacity is the
    allocated CPU, ``t(omega) = demand / (min(omega, saturation) - rate * demand)`` seconds, where
    ``demand`` is the CPU work of one request (Mcycles) and ``rate`` the request arrival rate (1/s).
    Below ``rate * demand`` the server is unstable and ``t`` is infinite; above ``saturation`` more CPU
    no longer helps (Sec. 5.3: allocating CPU power in excess of 130,000MHz "will not further increase its
    satisfaction: that is, it will not decrease the response time"). ``demand`` and ``rate`` are what a request
    router and work profiler measure (Sec. 3.1); the live driver fits ``demand`` from a measured response time,
    with the work of a request its CPU time shows as a floor (:func:`coordinator.apc.live.app_model`).
    """

    demand: float  # Mcycles per request
    rate: float  # requests per second
    saturation: float = math.inf  # MHz beyond which response time stops improving

    def __post_init__(self) -> None:
        if self.demand <= 0:
            raise ValueError(f"demand (Mcycles per request) must be > 0, got {self.demand}")
        if self.rate < 0:
            raise ValueError(f"rate (requests/s) must be >= 0, got {self.rate}")

    @property
    def load(self) -> float:
        """MHz the arrivals consume on average: the stability threshold."""
        return self.rate * self.demand

    def response_time(self, omega: float) -> float:
        eff = min(omega, self.saturation) - self.load
        return math.inf if eff <= 0 else self.demand / eff

    def speed_for(self, t: float) -> float:
        """The allocation that gives mean response time ``t`` (inverse of :meth:`response_time`)."""
        return math.inf if t <= 0 else self.load + self.demand / t

    @staticmethod
    def fit(omega: float, response_time: float, throughput: float, saturation: float = math.inf) -> ResponseTimeModel:
        """The model through one measurement: ``t = d / (omega - lambda d)`` solved for ``d``."""
        if omega <= 0 or response_time <= 0:
            raise ValueError(f"need omega > 0 and response_time > 0, got {omega}, {response_time}")
        demand = response_time * omega / (1.0 + response_time * throughput)
        return ResponseTimeModel(demand=demand, rate=throughput, saturation=saturation)


#: Relative performance of a transactional app whose allocation just reaches its offered load (see
#: :meth:`TransactionalApp.overload_rp`): below any value a stable server has in our experiments.
OVERLOAD_FLOOR = -5.0


@dataclass(frozen=True)
class TransactionalApp:
    """A transactional application (003 Sec. 3.3): response-time goal ``tau`` and a model t(omega).

    Instances are placed on nodes (at most one per node), each using ``memory`` MB; its allocation is
    the sum over its instances (``omega_m = sum_n L_{m,n}``)."""

    id: str
    tau: float  # response time goal, s
    model: ResponseTimeModel
    memory: float = 0.0  # MB per instance
    max_instances: int = 1 << 30
    nodes: frozenset[str] = field(default_factory=frozenset)  # where instances run now

    def __post_init__(self) -> None:
        if self.tau <= 0:
            raise ValueError(f"app {self.id}: response time goal tau must be > 0, got {self.tau}")

    def rp_of_time(self, t: float) -> float:
        """Eq. 1."""
        return -math.inf if math.isinf(t) else (self.tau - t) / self.tau

    def rp(self, omega: float) -> float:
        """Eq. 1 at the modelled response time, floored by :meth:`overload_rp` (so it increases with omega
        even where the server is unstable and eq. 1 is -inf)."""
        return max(self.rp_of_time(self.model.response_time(omega)), self.overload_rp(omega))

    def overload_rp(self, omega: float) -> float:
        """A floor in [OVERLOAD_FLOOR - 5, OVERLOAD_FLOOR], rising linearly with omega up to the offered load.
        Without it every allocation below the load is equally -inf, and the placement loop would see no
        point in adding the first instances of an app that needs several nodes to be stable."""
        load = self.model.load
        frac = 1.0 if load <= 0 else min(1.0, max(0.0, omega) / load)
        return OVERLOAD_FLOOR - 5.0 * (1.0 - frac)

    def speed_for(self, u: float) -> float:
        """omega_m(u): CPU needed to reach relative performance ``u`` (inf if unreachable); the inverse of
        :meth:`rp`."""
        if u >= 1:
            return math.inf
        floor = self.model.load * (1.0 + (u - OVERLOAD_FLOOR) / 5.0) if u <= OVERLOAD_FLOOR else math.inf
        if u <= OVERLOAD_FLOOR - 5.0:
            return 0.0
        need = min(self.model.speed_for(self.tau * (1 - u)), floor)
        return need if need <= self.model.saturation else math.inf

    @property
    def max_rp(self) -> float:
        return self.rp(self.model.saturation) if math.isfinite(self.model.saturation) else 1.0
