"""APC live: a control loop over real processes in real cgroups, using measured response times.

One node (this machine, or ``cores`` of it): a transactional server (:mod:`workloads.transactional`) in
one cgroup, driven by a Poisson load generator on loopback, and CPU-bound batch jobs, each its own
process in its own cgroup. Every ``T`` seconds the driver

1. measures the server's mean response time and throughput over the last cycle (the request router's
   measurements of 003 Sec. 3.1) and each job's CPU time (its progress: 1 CPU-second = ``MHZ_PER_CORE``
   Mcycles);
2. fits the response-time model through that measurement (:meth:`ResponseTimeModel.fit`) at the
   allocation in force, and builds APC's state: the jobs with their goals and progress, the app;
3. runs one APC cycle (:func:`coordinator.policies.apc.apc_place`) and applies its CPU split to the
   cgroups' CFS quotas (the SetShare of the live backend, done here directly on the cgroups).

The transactional RP recorded is eq. 1 at the *measured* response time. Placement changes (suspend,
resume) are not exercised live: the jobs fit in memory; APC only moves CPU.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator.policies.apc import ApcState, Costs, Node, apc_place
from coordinator.policies.apc_rpf import Job, ResponseTimeModel, Stage, TransactionalApp
from workloads.registry import child_env
from workloads.transactional import LoadGenerator

MHZ_PER_CORE = 1000.0  # the live node's unit: one core is 1,000 MHz
_BATCH_CODE = ("import sys, time\nend = time.monotonic() + float(sys.argv[1])\nx = 0\n"
               "while time.monotonic() < end:\n    for i in range(200000):\n        x = (x * 31 + i) & 0xFFFFFFFF\n")


@dataclass
class LiveConfig:
    cores: float = 1.0  # CPU of the emulated node, in cores of this machine
    T: float = 2.0
    duration: float = 24.0
    work: int = 20_000  # loop iterations per request (about 2 ms of one core)
    rates: tuple[tuple[float, float], ...] = ((0.0, 40.0),)  # (from second, requests/s)
    tau: float = 0.02  # response time goal [s]
    jobs: tuple[tuple[float, float], ...] = ((20.0, 600.0),)  # (CPU-seconds of work, relative goal [s])
    initial_app_share: float = 0.15  # fraction of the node the app gets before APC's first cycle
    seed: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)


class LiveApc:
    """The processes, cgroups and load generator of one live run. Use as a context manager."""

    def __init__(self, cfg: LiveConfig) -> None:
        from node_agent.cgroups import open_driver

        self.cfg = cfg
        self.driver = open_driver(f"vcemu-apc-{os.getpid()}", cfg.cores)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.load: LoadGenerator | None = None
        self.port = 0
        self.app_share = cfg.initial_app_share
        self.job_cores: dict[str, float] = {}

    def __enter__(self) -> LiveApc:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _spawn(self, name: str, argv: list[str], cores: float) -> subprocess.Popen[bytes]:
        self.driver.create(name)
        self.driver.set_cpu(name, cores)
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             env=child_env(), start_new_session=True)
        self.driver.add_pid(name, p.pid)
        self.procs[name] = p
        return p

    def _start(self) -> None:
        cfg = self.cfg
        web = self._spawn("web", [sys.executable, "-m", "workloads.transactional", "serve", "--work", str(cfg.work)],
                          cfg.cores * self.app_share)
        assert web.stdout is not None
        self.port = int(json.loads(web.stdout.readline())["port"])
        share = max(0.05, 1 - self.app_share) / max(1, len(cfg.jobs))
        for k, _ in enumerate(cfg.jobs):
            name = f"job{k}"
            self._spawn(name, [sys.executable, "-c", _BATCH_CODE, str(cfg.duration * 3 + 30)], cfg.cores * share)
            self.job_cores[name] = cfg.cores * share
        self.load = LoadGenerator(self.port, cfg.rates[0][1], 2 * cfg.duration + 60, seed=cfg.seed).start()

    def set_app_share(self, cores: float) -> None:
        self.driver.set_cpu("web", max(0.01, cores))
        self.app_share = cores / self.cfg.cores

    def close(self) -> None:
        if self.load is not None:
            self.load.stop()
        for name, p in self.procs.items():
            with contextlib.suppress(Exception):
                self.driver.kill_all(name)
            with contextlib.suppress(Exception):
                p.kill()
                p.wait(timeout=5)
            with contextlib.suppress(Exception):
                self.driver.remove(name)
        with contextlib.suppress(Exception):
            self.driver.cleanup(remove_parent=True)

    def measure(self, seconds: float) -> tuple[float, float]:
        """(mean response time [s], throughput [1/s]) of the server over the last ``seconds``."""
        assert self.load is not None
        w = self.load.window(seconds)
        return w.mean_response_s, w.throughput_rps

    def run(self) -> list[dict[str, Any]]:
        """The control loop (see the module docstring); returns one row per cycle."""
        cfg = self.cfg
        assert self.load is not None
        node = Node("live", cfg.cores * MHZ_PER_CORE, 1e9)
        t0 = time.monotonic()
        specs = {f"job{k}": (w, g) for k, (w, g) in enumerate(cfg.jobs)}
        rows: list[dict[str, Any]] = []
        for cycle in range(int(cfg.duration / cfg.T)):
            time.sleep(max(0.0, t0 + (cycle + 1) * cfg.T - time.monotonic()))
            now = time.monotonic() - t0
            rate = [r for start, r in cfg.rates if start <= now][-1]
            if rate != self.load.rate:
                self.load.set_rate(rate)
            rt, tput = self.measure(cfg.T)
            app_mhz = self.app_share * node.cpu
            jobs = []
            for name, (work_s, goal) in specs.items():
                done = min(self.driver.cpu_usage_s(name), work_s * 0.999) * MHZ_PER_CORE
                jobs.append(Job(name, 0.0, goal, (Stage(work_s * MHZ_PER_CORE, MHZ_PER_CORE, 1.0),), done=done))
            row: dict[str, Any] = {"time": round(now, 2), "rate_rps": rate, "measured_rt_s": rt,
                                   "throughput_rps": tput, "app_cores": self.app_share * cfg.cores}
            if math.isfinite(rt) and rt > 0 and tput > 0:
                model = ResponseTimeModel.fit(app_mhz, rt, tput, saturation=node.cpu)
                app = TransactionalApp("web", cfg.tau, model, nodes=frozenset({"live"}))
                row["app_rp_measured"] = app.rp_of_time(rt)
                d = apc_place(ApcState(now, (node,), tuple(jobs), {j.id: "live" for j in jobs}, apps=(app,)),
                              cfg.T, Costs.none())
                new_app = d.app_cpu("web") / MHZ_PER_CORE
                self.set_app_share(new_app)
                for j in jobs:
                    cores = d.job_speed.get(j.id, 0.0) / MHZ_PER_CORE
                    self.driver.set_cpu(j.id, max(0.01, cores))
                    self.job_cores[j.id] = cores
                    row[f"{j.id}_rp_predicted"] = d.rp.get(j.id, math.nan)
                row["app_rp_predicted"] = d.rp["web"]
                row["app_cores_next"] = new_app
            rows.append(row)
        self.cfg.rows = rows
        return rows


def live_experiment_three(out: Path, seconds: float = 40.0, cores: float = 1.0) -> dict[str, Any]:
    """A shortened Experiment Three: the request rate rises then falls while two batch jobs run."""
    from node_agent.cgroups import CgroupUnavailable

    out.mkdir(parents=True, exist_ok=True)
    cfg = LiveConfig(cores=cores, duration=seconds, rates=((0.0, 20.0), (seconds / 3, 60.0), (2 * seconds / 3, 20.0)),
                     jobs=((seconds, 4 * seconds), (seconds, 8 * seconds)), initial_app_share=0.5)
    try:
        with LiveApc(cfg) as live:
            rows = live.run()
    except (CgroupUnavailable, PermissionError) as e:
        print(f"vcemu apc --live: skipped: {e}", file=sys.stderr)
        return {"skipped": str(e)}
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with (out / "live_cycles.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    ts = [r["time"] for r in rows]
    a1.plot(ts, [r.get("app_rp_measured", math.nan) for r in rows], label="transactional (measured)")
    a1.plot(ts, [r.get("job0_rp_predicted", math.nan) for r in rows], label="job0 (hypothetical)")
    a1.plot(ts, [r.get("job1_rp_predicted", math.nan) for r in rows], label="job1 (hypothetical)")
    a1.set_ylabel("relative performance")
    a1.set_ylim(-1.5, 1.05)
    a1.legend(fontsize=8)
    a2.plot(ts, [r["app_cores"] for r in rows], label="transactional cores")
    a2b = a2.twinx()
    a2b.plot(ts, [r["rate_rps"] for r in rows], c="grey", ls="--", label="request rate")
    a2.set_ylabel("CPU [cores]")
    a2b.set_ylabel("requests/s")
    a2.set_xlabel("time [s]")
    a2.legend(loc="upper left", fontsize=8)
    fig.suptitle("Live Experiment Three (shortened): APC over real cgroups")
    fig.tight_layout()
    fig.savefig(out / "fig_live.png", dpi=120)
    plt.close(fig)
    (out / "config.json").write_text(json.dumps({k: v for k, v in cfg.__dict__.items() if k != "rows"},
                                                indent=1) + "\n")
    return {"cycles": len(rows), "rows": rows}
