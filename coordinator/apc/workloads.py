"""The job streams and the cluster of 003 Sec. 5, generated from a seed.

* Cluster (Sec. 5.1): 25 nodes, each four 3.9 GHz processors (15,600 MHz) and 16 GB (16,384 MB).
* Experiment One (Table 2): identical jobs, 3,900 MHz max speed, 4,320 MB, 68,640,000 Mcycles
  (17,600 s at full speed), relative goal factor 2.7; exponential inter-arrival times, mean 260 s.
* Experiment Two (Sec. 5.2): goal factor 1.3 / 2.5 / 4 with probability 10 / 30 / 60 %; (minimum
  execution time, max speed) = (9,000 s, 3,900 MHz) / (17,600 s, 1,560 MHz) / (600 s, 2,340 MHz) with
  probability 10 / 40 / 50 %. 003 does not give these jobs' memory; we keep Experiment One's 4,320 MB
  (three jobs per node), so the same memory bottleneck applies.
* Experiment Three (Sec. 5.3): Experiment One's jobs in three phases (a few jobs at t = 0, a burst at a
  short inter-arrival time, then a long one) beside one transactional app whose maximum relative
  performance, 0.66, is reached at 130,000 MHz (:func:`exp3_app`).
"""

from __future__ import annotations

import numpy as np

from coordinator.policies.apc import Node
from coordinator.policies.apc_rpf import Job, ResponseTimeModel, Stage, TransactionalApp

NODES = 25
NODE_CPU = 4 * 3900.0
NODE_MEMORY = 16384.0
EXP1_SPEED, EXP1_MEMORY, EXP1_WORK, EXP1_FACTOR = 3900.0, 4320.0, 68_640_000.0, 2.7
EXP1_MEAN_IAT = 260.0
EXP2_FACTORS = ((1.3, 0.1), (2.5, 0.3), (4.0, 0.6))
EXP2_PROFILES = (((9000.0, 3900.0), 0.1), ((17600.0, 1560.0), 0.4), ((600.0, 2340.0), 0.5))


def cluster(n: int = NODES) -> tuple[Node, ...]:
    return tuple(Node(f"node{i:02d}", NODE_CPU, NODE_MEMORY) for i in range(n))


def _job(name: str, t: float, work: float, speed: float, memory: float, factor: float) -> Job:
    return Job(name, t, t + factor * work / speed, (Stage(work, speed, memory),))


def exp1_jobs(n: int, seed: int, mean_iat: float = EXP1_MEAN_IAT) -> list[Job]:
    rng = np.random.default_rng([seed, 1])
    times = np.cumsum(rng.exponential(mean_iat, n))
    return [_job(f"j{k:04d}", float(t), EXP1_WORK, EXP1_SPEED, EXP1_MEMORY, EXP1_FACTOR) for k, t in enumerate(times)]


def exp2_jobs(n: int, seed: int, mean_iat: float) -> list[Job]:
    """``n`` arrivals (the run stops once enough have completed; generate generously). Each mean inter-arrival time
    has its own stream: a whole number keys it as it always has, any other by its exact ratio (the stream was keyed by
    ``int(mean_iat)``, so 400 and 400.5 drew the same jobs, the one's arrival times the other's scaled)."""
    num, den = float(mean_iat).as_integer_ratio()
    rng = np.random.default_rng([seed, 2, num] if den == 1 else [seed, 2, num, den, 1])
    times = np.cumsum(rng.exponential(mean_iat, n))
    fi = rng.choice(len(EXP2_FACTORS), size=n, p=[p for _, p in EXP2_FACTORS])
    pi = rng.choice(len(EXP2_PROFILES), size=n, p=[p for _, p in EXP2_PROFILES])
    out = []
    for k, (t, f, p) in enumerate(zip(times, fi, pi, strict=True)):
        (ex, speed), _ = EXP2_PROFILES[p]
        out.append(_job(f"j{k:05d}", float(t), ex * speed, speed, EXP1_MEMORY, EXP2_FACTORS[f][0]))
    return out


#: Experiment Three's arrivals: jobs at t = 0, then (duration s, mean inter-arrival s) per phase.
EXP3_INITIAL = 6
EXP3_PHASES = ((60000.0, 180.0), (40000.0, 900.0))
#: Experiment Three's app (:func:`exp3_app`): goal, offered load and saturation (MHz), response time there (s).
EXP3_TAU, EXP3_OFFERED_MHZ, EXP3_SATURATION_MHZ, EXP3_T_AT_SATURATION = 1.0, 60_000.0, 130_000.0, 0.34


def exp3_jobs(seed: int, initial: int = EXP3_INITIAL,
              phases: tuple[tuple[float, float], ...] = EXP3_PHASES) -> list[Job]:
    """``initial`` jobs at t = 0, then per phase (duration, mean inter-arrival) exponential arrivals."""
    rng = np.random.default_rng([seed, 3])
    times = [0.0] * initial
    start = 0.0
    for duration, iat in phases:
        t = start
        while True:
            t += float(rng.exponential(iat))
            if t >= start + duration:
                break
            times.append(t)
        start += duration
    return [_job(f"j{k:04d}", t, EXP1_WORK, EXP1_SPEED, EXP1_MEMORY, EXP1_FACTOR) for k, t in enumerate(times)]


def shortest_relative_goal() -> float:
    """The shortest relative goal (goal factor times minimum execution time) of the experiments' jobs: 780 s, an
    Experiment Two job of 600 s at goal factor 1.3 (Experiment One's and Three's are all 2.7 x 17,600 s)."""
    return min(EXP1_FACTOR * EXP1_WORK / EXP1_SPEED,
               min(f for f, _ in EXP2_FACTORS) * min(ex for (ex, _), _ in EXP2_PROFILES))


def exp3_app(memory: float = 512.0) -> TransactionalApp:
    """One transactional app: goal tau = 1 s; M/M/1-PS model with 60,000 MHz of offered load
    (2.52 requests/s of 23,800 Mcycles) saturating at 130,000 MHz, where t = 0.34 s and u = 0.66, the
    paper's maximum; u = 0 at 83,800 MHz (5.4 nodes), so 6 nodes give u = 0.29 and 9 nodes u = 0.66.
    An instance's 512 MB fits beside three 4,320 MB jobs (Sec. 5.3)."""
    demand = EXP3_T_AT_SATURATION * (EXP3_SATURATION_MHZ - EXP3_OFFERED_MHZ)
    return TransactionalApp("web", tau=EXP3_TAU, model=ResponseTimeModel(demand, EXP3_OFFERED_MHZ / demand,
                                                                         EXP3_SATURATION_MHZ), memory=memory)


def describe() -> dict[str, object]:
    """The workloads' parameters, for a run's ``config.json``: what the command line does not set (the cluster, each
    experiment's jobs, Experiment Three's phases and app), so that a reader of the results need not read this
    module (APC review)."""
    app = exp3_app()
    job = {"max_speed_mhz": EXP1_SPEED, "memory_mb": EXP1_MEMORY, "work_mcycles": EXP1_WORK,
           "goal_factor": EXP1_FACTOR}
    return {
        "cluster": {"nodes": NODES, "node_cpu_mhz": NODE_CPU, "node_memory_mb": NODE_MEMORY},
        "exp1": {"job": job, "mean_interarrival_s": EXP1_MEAN_IAT},
        "exp2": {"goal_factors": [{"factor": f, "p": p} for f, p in EXP2_FACTORS],
                 "profiles": [{"min_execution_s": ex, "max_speed_mhz": v, "p": p} for (ex, v), p in EXP2_PROFILES],
                 "memory_mb": EXP1_MEMORY},
        "exp3": {"job": job, "initial_jobs": EXP3_INITIAL,
                 "phases": [{"duration_s": d, "mean_interarrival_s": iat} for d, iat in EXP3_PHASES],
                 "app": {"name": app.id, "tau_s": app.tau, "offered_mhz": EXP3_OFFERED_MHZ,
                         "saturation_mhz": EXP3_SATURATION_MHZ, "response_at_saturation_s": EXP3_T_AT_SATURATION,
                         "memory_mb": app.memory, "model": "M/M/1-PS (coordinator/policies/apc_rpf.py)"}},
    }
