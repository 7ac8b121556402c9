"""APC live: a control loop over a real node agent, using the response times the agent measures.

One node: an emulated host of a node agent (in-process :func:`node_agent.server.start_agent`, or a running
``vcemu agent`` given by address), reached over gRPC like any coordinator reaches it. On it run a
``transactional`` task (a request server in its cgroup and a Poisson load generator outside it, see
:mod:`node_agent.transactional`) and CPU-bound batch jobs (``dgemm`` tasks), each in its own cgroup.
Every ``T`` seconds the driver

1. reads the agent's Status: the transactional task's mean response time and throughput over the last
   window (``TaskStatus.service``, window = ``T``: the request router's measurements of 003 Sec. 3.1) and its
   CPU time, and each job's CPU time (its progress: 1 CPU-second = ``MHZ_PER_CORE`` Mcycles);
2. fits the response-time model through that measurement (:meth:`ResponseTimeModel.fit`) at the
   allocation in force, with the CPU work of a request measured over the cycle (the app's CPU seconds over the
   requests served: 003 Sec. 3.1's work profiler) as a floor to its demand (:func:`app_model`), and builds APC's
   state: the jobs with their goals and progress, the app;
3. runs one APC cycle (:func:`coordinator.policies.apc.apc_place`) and applies its CPU split with the
   agent's SetShare RPC (cuts first, so that the host's shares never exceed its capacity in between).

The transactional RP recorded is eq. 1 at the *measured* response time. Placement changes (suspend,
resume) are not exercised live: the jobs fit in memory; APC only moves CPU. The batch jobs' work is
APC's (``LiveConfig.jobs``); their agent tasks are long enough never to finish during a run.
"""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from coordinator.policies.apc import ApcState, Costs, Node, apc_place
from coordinator.policies.apc_rpf import Job, ResponseTimeModel, Stage, TransactionalApp
from vcemu.auth import with_token
from vcemu.outputs import save_figure, write_json, write_text
from vcemu.v1 import agent_pb2 as pb
from vcemu.v1 import agent_pb2_grpc

MHZ_PER_CORE = 1000.0  # the live node's unit: one core is 1,000 MHz
APP = "web"  # the transactional task's id
#: Smallest share the driver sets (the agent refuses 0; a zero APC allocation becomes this).
MIN_SHARE = 0.01
#: work_seconds of the batch tasks at the agent: longer than any run, so the agent never ends them.
_BATCH_TASK_SECONDS = 1e6


class LiveAgentError(ConnectionError):
    """The agent given by ``--live-agent`` is not usable (unreachable, not an agent, no hosts); the message
    names the flag and the address."""


def _agent_error(address: str, exc: grpc.RpcError) -> LiveAgentError:
    code = exc.code().name if hasattr(exc, "code") else "ERROR"
    details = exc.details() if hasattr(exc, "details") else str(exc)
    hint = " (the agent wants its token: --live-token-file)" if code == "UNAUTHENTICATED" else ""
    return LiveAgentError(f"--live-agent {address}: cannot use the vcemu agent there ({code}: {details}){hint}")


def check_agent(address: str, timeout: float = 5.0, token: str | None = None) -> None:
    """Refuse (LiveAgentError) an address that is not HOST:PORT or where no agent with a host answers
    Describe within ``timeout`` seconds (sent ``token``, if any): before any experiment runs, not after."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise LiveAgentError(f"--live-agent: expected HOST:PORT, got {address!r}")
    with grpc.insecure_channel(address) as channel:
        try:
            info = with_token(agent_pb2_grpc.AgentStub(channel), token).Describe(pb.DescribeRequest(), timeout=timeout)
        except grpc.RpcError as exc:
            raise _agent_error(address, exc) from None
    if not info.hosts:
        raise LiveAgentError(f"--live-agent {address}: the agent there has no hosts")


@dataclass
class LiveConfig:
    cores: float = 1.0  # CPU of the emulated node, in cores of this machine
    T: float = 2.0
    duration: float = 24.0
    work: int = 20_000  # loop iterations per request (about 1-2 ms of one core)
    rates: tuple[tuple[float, float], ...] = ((0.0, 40.0),)  # (from second, requests/s)
    tau: float = 0.02  # response time goal [s]
    jobs: tuple[tuple[float, float], ...] = ((20.0, 600.0),)  # (CPU-seconds of work, relative goal [s])
    initial_app_share: float = 0.15  # fraction of the node the app gets before APC's first cycle
    seed: int = 0
    agent: str | None = None  # address of a running agent (its first host is the node); None: in-process
    token: str | None = None  # the running agent's bearer token (its --token-file), if it wants one
    rows: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Measurement:
    """The transactional task's figures from one Status (see ``vcemu.v1.ServiceStats``)."""

    mean_s: float
    p95_s: float
    throughput_rps: float
    outstanding: int
    cpu_measured: float  # the server's CPU use, fraction of the host


def app_model(omega: float, rt: float, throughput: float, profiled: float, saturation: float) -> ResponseTimeModel:
    """The response-time model of the app at allocation ``omega`` (MHz), from its measured mean response time ``rt``
    and ``throughput``, with the CPU work of one request as profiled over the cycle (``profiled``, Mcycles; NaN if
    not measured) as a floor to the demand fitted through ``rt``.

    A CFS quota lets a request run at the core's full speed until the period's quota is spent, so the response time
    stays low until the app nears its quota, then explodes: fitted through such a measurement, the M/M/1 model's
    demand came out about 10 times smaller than the work a request takes, and APC cut the app to the CPU it used,
    found it saturated (RP -11), raised it, and cut it again, every few cycles (README walk-through: RP -2.95 on
    average, against 0.84 with the floor; response time 88.8 ms against 3.2 ms). 003 Sec. 3.1's work profiler is
    what measures a request's demand."""
    model = ResponseTimeModel.fit(omega, rt, throughput, saturation=saturation)
    if math.isfinite(profiled) and profiled > model.demand:
        return ResponseTimeModel(profiled, throughput, saturation=saturation)
    return model


class LiveApc:
    """The agent, its tasks and the gRPC channel of one live run. Use as a context manager."""

    def __init__(self, cfg: LiveConfig) -> None:
        if not 0 < cfg.initial_app_share < 1:
            raise ValueError(f"initial_app_share: must be in (0, 1), got {cfg.initial_app_share}")
        if not cfg.jobs:
            raise ValueError("jobs: at least one batch job is needed")
        self.cfg = cfg
        self._agent: Any = None  # node_agent.server.RunningAgent when in-process
        self._channel: grpc.Channel | None = None
        self.stub: agent_pb2_grpc.AgentStub | None = None
        self.host = "live"
        self.tasks: list[str] = []
        self.shares: dict[str, float] = {}  # share in force, fraction of the host
        self.rate = cfg.rates[0][1]

    def __enter__(self) -> LiveApc:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def app_share(self) -> float:
        return self.shares[APP]

    def _start(self) -> None:
        cfg = self.cfg
        address = cfg.agent
        if address is None:
            from node_agent.agent import HostSpec
            from node_agent.server import start_agent

            self._agent = start_agent([HostSpec(self.host, cfg.cores, 4 << 30)], agent_id=f"apc-{os.getpid()}")
            address = self._agent.address
        self._channel = grpc.insecure_channel(address)
        self.stub = with_token(agent_pb2_grpc.AgentStub(self._channel), cfg.token)
        info = self.stub.Describe(pb.DescribeRequest(), timeout=10)
        if cfg.agent is not None:  # a running agent: its first host is the node
            self.host, cfg.cores = info.hosts[0].name, info.hosts[0].cpu_cores
        need = min(1.0, 1.0 / cfg.cores)  # the programs are single processes: at most one core
        self._start_task(APP, "transactional", cfg.initial_app_share, need, transactional=pb.TransactionalSpec(
            rate_rps=self.rate, work=cfg.work, window_seconds=cfg.T, seed=cfg.seed))
        share = (1 - cfg.initial_app_share) / len(cfg.jobs)
        for k in range(len(cfg.jobs)):
            self._start_task(f"job{k}", "dgemm", share, need, work_seconds=_BATCH_TASK_SECONDS)
        deadline = time.monotonic() + 30
        while True:  # boot phases over (numpy imported, server listening, generator started)
            st = self.status()
            if all(t.state == pb.TASK_STATE_RUNNING for t in st.values()) and st[APP].HasField("service"):
                break
            bad = [t for t in st.values() if t.state not in (pb.TASK_STATE_STARTING, pb.TASK_STATE_RUNNING)]
            if bad or time.monotonic() > deadline:
                raise RuntimeError(f"tasks did not start: {bad or list(st.values())}")
            time.sleep(0.1)

    def _start_task(self, task_id: str, workload: str, share: float, need: float, work_seconds: float = 0.0,
                    transactional: pb.TransactionalSpec | None = None) -> None:
        assert self.stub is not None
        self.stub.StartTask(pb.StartTaskRequest(
            task_id=task_id, host=self.host, workload=workload, cpu_share=share, cpu_need=need,
            work_seconds=work_seconds, memory_bytes=0, transactional=transactional), timeout=30)
        self.tasks.append(task_id)
        self.shares[task_id] = share

    def status(self) -> dict[str, pb.TaskStatus]:
        assert self.stub is not None
        return {t.task_id: t for t in self.stub.Status(pb.StatusRequest(), timeout=10).tasks if t.task_id in self.tasks}

    def measure(self) -> Measurement:
        """The transactional task's figures over the agent's last window (``T`` seconds)."""
        t = self.status()[APP]
        s = t.service
        return Measurement(s.response_time_mean_s, s.response_time_p95_s, s.throughput_rps, s.outstanding,
                           t.cpu_measured)

    def set_shares(self, shares: dict[str, float]) -> None:
        """New shares (fractions of the host) through SetShare: cuts first, then raises, so that the
        agent's capacity check holds at every step; each at least :data:`MIN_SHARE`, scaled to fit."""
        assert self.stub is not None
        new = {k: max(MIN_SHARE, v) for k, v in shares.items()}
        new = {**self.shares, **new}
        total = sum(new.values())
        if total > 1.0:
            new = {k: v / total * (1 - 1e-9) for k, v in new.items()}
        for k in sorted(new, key=lambda k: new[k] - self.shares[k]):  # largest cut first
            if new[k] != self.shares[k]:
                self.stub.SetShare(pb.SetShareRequest(task_id=k, cpu_share=new[k]), timeout=10)
                self.shares[k] = new[k]

    def set_app_share(self, share: float) -> None:
        """The app's share (fraction of the host); the jobs split the rest equally."""
        rest = (1.0 - share) / len(self.cfg.jobs)
        self.set_shares({APP: share, **{f"job{k}": rest for k in range(len(self.cfg.jobs))}})

    def set_rate(self, rate: float) -> None:
        assert self.stub is not None
        self.stub.SetLoad(pb.SetLoadRequest(task_id=APP, rate_rps=rate), timeout=10)
        self.rate = rate

    def close(self) -> None:
        if self.stub is not None:
            for task_id in self.tasks:
                with contextlib.suppress(grpc.RpcError):
                    self.stub.Stop(pb.TaskRef(task_id=task_id), timeout=10)
        if self._channel is not None:
            self._channel.close()
        if self._agent is not None:
            self._agent.stop()
            self._agent = None

    def run(self) -> list[dict[str, Any]]:
        """The control loop (see the module docstring); returns one row per cycle."""
        cfg = self.cfg
        node = Node(self.host, cfg.cores * MHZ_PER_CORE, 1e9)
        t0 = time.monotonic()
        specs = {f"job{k}": (w, g) for k, (w, g) in enumerate(cfg.jobs)}
        rows = self.cfg.rows = []  # (kept as they come: an interrupted run keeps the cycles it measured)
        # the app's CPU seconds at the last cycle, and when: from the start, so that the first cycle is profiled too
        last_cpu_s = self.status()[APP].cpu_seconds
        last_t = time.monotonic() - t0
        for cycle in range(int(cfg.duration / cfg.T)):
            time.sleep(max(0.0, t0 + (cycle + 1) * cfg.T - time.monotonic()))
            now = time.monotonic() - t0
            st = self.status()
            app_status = st[APP].service
            rt, tput = app_status.response_time_mean_s, app_status.throughput_rps
            app_mhz = self.app_share * node.cpu
            jobs = []
            for name, (work_s, goal) in specs.items():
                done = min(st[name].cpu_seconds, work_s * 0.999) * MHZ_PER_CORE
                jobs.append(Job(name, 0.0, goal, (Stage(work_s * MHZ_PER_CORE, MHZ_PER_CORE, 1.0),), done=done))
            row: dict[str, Any] = {"time": round(now, 2), "rate_rps": self.rate, "measured_rt_s": rt,
                                   "measured_p95_s": app_status.response_time_p95_s, "throughput_rps": tput,
                                   "outstanding": app_status.outstanding, "app_cores": self.app_share * cfg.cores,
                                   "app_cpu_measured_cores": st[APP].cpu_measured * cfg.cores}
            cpu_s = st[APP].cpu_seconds
            # The CPU work of one request over the cycle, as 003 Sec. 3.1's work profiler measures it
            profiled = ((cpu_s - last_cpu_s) * MHZ_PER_CORE / (tput * (now - last_t))
                        if tput > 0 and now > last_t else math.nan)
            last_cpu_s, last_t = cpu_s, now
            row["app_demand_profiled_mcycles"] = profiled
            if math.isfinite(rt) and rt > 0 and tput > 0:
                model = app_model(app_mhz, rt, tput, profiled, saturation=node.cpu)
                row["app_demand_model_mcycles"] = model.demand
                app = TransactionalApp(APP, cfg.tau, model, nodes=frozenset({node.id}))
                row["app_rp_measured"] = app.rp_of_time(rt)
                d = apc_place(ApcState(now, (node,), tuple(jobs), {j.id: node.id for j in jobs}, apps=(app,)),
                              cfg.T, Costs.none())
                new = {APP: d.app_cpu(APP) / node.cpu}
                for j in jobs:
                    new[j.id] = d.job_speed.get(j.id, 0.0) / node.cpu
                    row[f"{j.id}_rp_predicted"] = d.rp.get(j.id, math.nan)
                self.set_shares(new)
                for j in jobs:
                    row[f"{j.id}_cores_next"] = self.shares[j.id] * cfg.cores
                row["app_rp_predicted"] = d.rp[APP]
                row["app_cores_next"] = self.app_share * cfg.cores
            rate = [r for start, r in cfg.rates if start <= time.monotonic() - t0][-1]
            if rate != self.rate:
                self.set_rate(rate)
            rows.append(row)
        return rows


def live_experiment_three(out: Path, seconds: float = 40.0, cores: float = 1.0, agent: str | None = None,
                          token: str | None = None) -> dict[str, Any]:
    """A shortened Experiment Three: the request rate rises then falls while two batch jobs run."""
    from node_agent.cgroups import CgroupUnavailable

    out.mkdir(parents=True, exist_ok=True)
    cfg = LiveConfig(cores=cores, duration=seconds, rates=((0.0, 20.0), (seconds / 3, 60.0), (2 * seconds / 3, 20.0)),
                     jobs=((seconds, 4 * seconds), (seconds, 8 * seconds)), initial_app_share=0.5, agent=agent,
                     token=token)
    interrupted = False
    try:
        with LiveApc(cfg) as live:
            try:
                rows = live.run()
            except KeyboardInterrupt:  # (Ctrl-C or SIGTERM: the agent and its tasks are stopped as the with ends)
                rows, interrupted = cfg.rows, True
            host = live.host
    except (CgroupUnavailable, PermissionError) as e:
        print(f"vcemu apc --live: skipped: {e}", file=sys.stderr)
        return {"skipped": str(e)}
    except grpc.RpcError as e:
        if agent is None:  # the in-process agent: not the user's input
            raise
        raise _agent_error(agent, e) from None
    if not rows:
        return {"cycles": 0, "seconds": seconds, "cycle_s": cfg.T, "goal_s": cfg.tau, "host": host,
                "cores": cfg.cores, "rows": rows, "interrupted": interrupted}
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=keys)
    w.writeheader()
    w.writerows(rows)
    write_text(out / "live_cycles.csv", buf.getvalue())
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    ts = [r["time"] for r in rows]
    a1.plot(ts, [r.get("app_rp_measured", math.nan) for r in rows], label="transactional (measured)")
    # (wider and dashed under job1: the two jobs often have one RP, and job0's line was hidden)
    a1.plot(ts, [r.get("job0_rp_predicted", math.nan) for r in rows], lw=3, ls="--", label="job0 (hypothetical)")
    a1.plot(ts, [r.get("job1_rp_predicted", math.nan) for r in rows], label="job1 (hypothetical)")
    a1.set_ylabel("relative performance")
    floor = -1.5
    a1.set_ylim(floor, 1.05)
    # A measured RP below the axis (a saturated app: -19.5 in one run) is marked at its foot, not cut off silently
    low = [(t, r["app_rp_measured"]) for t, r in zip(ts, rows, strict=True) if r.get("app_rp_measured", 0.0) < floor]
    if low:
        a1.plot([t for t, _ in low], [floor + 0.05] * len(low), "v", c="tab:blue", ms=7,
                label=f"transactional below {floor:g} (lowest {min(v for _, v in low):.1f})")
    # beside the panel: inside, it covered the lines' start (README walk-through)
    a1.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    a2.plot(ts, [r["app_cores"] for r in rows], label="transactional cores")
    a2b = a2.twinx()
    a2b.plot(ts, [r["rate_rps"] for r in rows], c="grey", ls="--", label="request rate")
    a2.set_ylabel("CPU [cores]")
    a2b.set_ylabel("requests/s")
    a2.set_xlabel("time [s]")
    handles = a2.get_legend_handles_labels()[0] + a2b.get_legend_handles_labels()[0]  # (the rate is on the twin)
    a2.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.12, 1.0), borderaxespad=0, fontsize=8)
    fig.suptitle("Live Experiment Three (shortened): APC over a node agent")
    fig.tight_layout()
    save_figure(fig, out / "fig_live.png", dpi=120)
    plt.close(fig)
    from vcemu.provenance import code_version

    # (not the token: code review, it was written here in clear)
    write_json(out / "config.json", {**{k: v for k, v in cfg.__dict__.items() if k not in ("rows", "token")},
                                     "code": code_version()},
               indent=1, sort_keys=False)
    return {"cycles": len(rows), "seconds": seconds, "cycle_s": cfg.T, "goal_s": cfg.tau, "host": host,
            "cores": cfg.cores, "rows": rows, "interrupted": interrupted}
