"""The ``vcemu`` command line.

Subcommands: ``up`` (a local cluster: coordinator + agents on 127.0.0.1), ``coordinator`` and ``agent``
(one process each, for real testbeds), ``submit``/``jobs``/``cancel``/``status`` (clients of a running
coordinator), ``simulate`` (a job file through a policy in virtual time), ``demo`` (the README's main
command), ``vcsched`` (seed 002's static placement experiments) and ``bench``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

DEFAULT_COORDINATOR = "127.0.0.1:50051"


def _fraction(name: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not 0.0 < value <= 1.0:
            raise argparse.ArgumentTypeError(f"{name} must be in (0, 1], got {text}")
        return value

    return parse


def _positive(name: str, kind=float):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a {kind.__name__}, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{name} must be > 0, got {text}")
        return value

    return parse


def _policy_name(text: str) -> str:
    from coordinator.policies import POLICIES

    if text.lower() not in POLICIES:
        raise argparse.ArgumentTypeError(f"unknown policy {text!r}; known: {', '.join(sorted(POLICIES))}")
    return text.lower()


# ---- clients --------------------------------------------------------------------------------------


def _stub(address: str):
    import grpc

    from vcemu.v1 import coordinator_pb2_grpc

    return coordinator_pb2_grpc.CoordinatorStub(grpc.insecure_channel(address))


def _rpc(call, request, what: str):
    import grpc

    try:
        return call(request, timeout=10)
    except grpc.RpcError as exc:
        print(f"vcemu {what}: {exc.code().name}: {exc.details()}", file=sys.stderr)
        raise SystemExit(2) from None


def cmd_submit(args: argparse.Namespace) -> int:
    from vcemu.v1 import coordinator_pb2 as pb

    request = pb.SubmitRequest(
        spec=pb.JobSpec(
            tasks=args.tasks, cpu_need=args.cpu_need, memory=args.memory,
            work_seconds=args.work, workload=args.workload,
        ),
        request_id=args.request_id or "",
    )
    job = _rpc(_stub(args.coordinator).Submit, request, "submit")
    print(job.job_id)
    return 0


def _job_table(jobs) -> str:
    rows = [("JOB", "STATE", "TASKS", "NEED", "MEM", "WORK", "YIELD", "VT", "HOSTS", "STRETCH")]
    for j in jobs:
        rows.append((
            j.job_id, j.state, str(j.spec.tasks), f"{j.spec.cpu_need:.2f}", f"{j.spec.memory:.2f}",
            f"{j.spec.work_seconds:.0f}", f"{getattr(j, 'yield'):.2f}", f"{j.virtual_time:.1f}",
            ",".join(j.hosts) or "-", f"{j.stretch:.2f}" if j.stretch else "-",
        ))
    return format_table(rows)


def format_table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def cmd_jobs(args: argparse.Namespace) -> int:
    from vcemu.v1 import coordinator_pb2 as pb

    reply = _rpc(_stub(args.coordinator).ListJobs, pb.ListJobsRequest(state=args.state or ""), "jobs")
    if args.json:
        from google.protobuf.json_format import MessageToDict

        print(json.dumps([MessageToDict(j) for j in reply.jobs]))
    else:
        print(_job_table(reply.jobs) if reply.jobs else "no jobs")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from vcemu.v1 import coordinator_pb2 as pb

    job = _rpc(_stub(args.coordinator).Cancel, pb.JobRef(job_id=args.job_id), "cancel")
    print(f"{job.job_id} {job.state}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from vcemu.v1 import coordinator_pb2 as pb

    s = _rpc(_stub(args.coordinator).ClusterStatus, pb.ClusterStatusRequest(), "status")
    print(f"policy {s.policy}  t={s.now:.1f}s  min yield {s.min_yield:.2f}  avg yield {s.avg_yield:.2f}")
    print("jobs: " + ", ".join(f"{k} {v}" for k, v in sorted(s.jobs_by_state.items()) if v))
    rows = [("HOST", "AGENT", "CORES", "CPU ALLOC", "CPU MEASURED", "MEM ALLOC")]
    for h in s.hosts:
        rows.append((h.name, h.agent, f"{h.cpu_cores:.2f}", f"{h.cpu_allocated:.2f}", f"{h.cpu_measured:.2f}",
                     f"{h.memory_allocated:.2f}"))
    print(format_table(rows))
    return 0


# ---- servers --------------------------------------------------------------------------------------


def spawn_agent(coordinator: str, hosts: int, cpus_per_host: float, mem_per_host: str, agent_id: str,
                extra: Sequence[str] = ()) -> subprocess.Popen:
    """Start one ``vcemu agent`` process that registers with ``coordinator``."""
    cmd = [
        sys.executable, "-m", "coordinator.cli", "agent", "--hosts", str(hosts),
        "--cpus-per-host", str(cpus_per_host), "--mem-per-host", mem_per_host, "--port", "0",
        "--agent-id", agent_id, "--coordinator", coordinator, *extra,
    ]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, start_new_session=True)


def stop_processes(procs: Sequence[subprocess.Popen], timeout: float = 10.0) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def default_cpus_per_host(hosts: int) -> float:
    """Give the emulated hosts 60% of the machine's cores.

    The rest is for the coordinator and agents (status polling is Python), and headroom matters: CFS
    quotas are caps, not guarantees, and on a saturated machine tasks fall below their shares and run
    slower per CPU-second than the agent's calibration (cores share caches and memory bandwidth).
    """
    return round(min(1.0, 0.6 * (os.cpu_count() or 1) / hosts), 3)


def start_local_cluster(policy_name: str, hosts: int, agents: int, cpus_per_host: float | None,
                        mem_per_host: str, port: int, metrics_port: int | None, no_cgroups: bool,
                        wait_s: float = 90.0):
    """A coordinator in this process and ``agents`` agent processes sharing ``hosts`` hosts."""
    from coordinator.policies import get_policy
    from coordinator.service import CoordinatorServer

    server = CoordinatorServer(get_policy(policy_name), port=port, metrics_port=metrics_port).start()
    cpus = cpus_per_host if cpus_per_host is not None else default_cpus_per_host(hosts)
    split = [hosts // agents + (1 if i < hosts % agents else 0) for i in range(agents)]
    procs = [
        spawn_agent(server.address, n, cpus, mem_per_host, f"agent{i}", ["--no-cgroups"] if no_cgroups else [])
        for i, n in enumerate(split) if n
    ]
    deadline = time.monotonic() + wait_s
    while len(server.engine.hosts) < hosts:
        dead = [p for p in procs if p.poll() is not None]
        if dead or time.monotonic() > deadline:
            stop_processes(procs)
            server.stop()
            why = f"agent exited with code {dead[0].returncode}" if dead else f"not all {hosts} hosts registered"
            raise SystemExit(f"vcemu: the local cluster did not come up: {why}")
        time.sleep(0.1)
    return server, procs


def cmd_up(args: argparse.Namespace) -> int:
    server, procs = start_local_cluster(
        args.policy, args.hosts, args.agents, args.cpus_per_host, args.mem_per_host, args.port,
        args.metrics_port, args.no_cgroups,
    )
    metrics = f", metrics on http://127.0.0.1:{server.metrics_port}/metrics" if server.metrics_port else ""
    print(f"vcemu up: coordinator on {server.address} ({args.policy}), {args.hosts} hosts{metrics}. Ctrl-C stops.",
          flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.is_set() and all(p.poll() is None for p in procs):
        stop.wait(0.5)
    print("vcemu up: stopping", flush=True)
    server.stop()
    stop_processes(procs)
    return 0


def cmd_coordinator(args: argparse.Namespace) -> int:
    from coordinator.policies import get_policy
    from coordinator.service import CoordinatorServer

    server = CoordinatorServer(get_policy(args.policy), port=args.port, bind=args.bind,
                               metrics_port=args.metrics_port).start()
    print(f"vcemu coordinator listening on {server.address}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop()
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from coordinator.experiments import simulate_file

    return simulate_file(args.jobs_file, args.policy, args.hosts, args.penalty, args.json, args.segment)


def cmd_demo(args: argparse.Namespace) -> int:
    from coordinator.demo import run_demo

    return run_demo(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vcemu", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    def client(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--coordinator", default=os.environ.get("VCEMU_COORDINATOR", DEFAULT_COORDINATOR),
                        help="coordinator address (default $VCEMU_COORDINATOR or %(default)s)")

    sp = sub.add_parser("up", help="run a local cluster: coordinator and agents on 127.0.0.1")
    sp.add_argument("--hosts", type=_positive("--hosts", int), default=4)
    sp.add_argument("--agents", type=_positive("--agents", int), default=1, help="agent processes sharing the hosts")
    sp.add_argument("--cpus-per-host", type=_positive("--cpus-per-host"), default=None,
                    help="real cores per emulated host (default: 80%% of the machine shared out)")
    sp.add_argument("--mem-per-host", default="1GiB")
    sp.add_argument("--policy", type=_policy_name, default="greedy")
    sp.add_argument("--port", type=int, default=50051)
    sp.add_argument("--metrics-port", type=int, default=None)
    sp.add_argument("--no-cgroups", action="store_true")
    sp.set_defaults(func=cmd_up)

    sp = sub.add_parser("coordinator", help="run the coordinator alone (agents register with it)")
    sp.add_argument("--policy", type=_policy_name, default="greedy")
    sp.add_argument("--port", type=int, default=50051)
    sp.add_argument("--bind", default="127.0.0.1")
    sp.add_argument("--metrics-port", type=int, default=None)
    sp.set_defaults(func=cmd_coordinator)

    sub.add_parser("agent", help="run a node agent (see vcemu agent --help)", add_help=False)

    sp = sub.add_parser("submit", help="submit a job to a running coordinator")
    client(sp)
    sp.add_argument("--tasks", type=int, default=1)
    sp.add_argument("--cpu-need", type=float, default=1.0, help="per task, fraction of a host, (0, 1]")
    sp.add_argument("--memory", type=float, default=0.1, help="per task, fraction of a host's memory, (0, 1]")
    sp.add_argument("--work", type=float, default=30.0, help="seconds at full speed")
    sp.add_argument("--workload", default="dgemm")
    sp.add_argument("--request-id", default=None)
    sp.set_defaults(func=cmd_submit)

    sp = sub.add_parser("jobs", help="list jobs")
    client(sp)
    sp.add_argument("--state", default=None)
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_jobs)

    sp = sub.add_parser("cancel", help="cancel a job")
    client(sp)
    sp.add_argument("job_id")
    sp.set_defaults(func=cmd_cancel)

    sp = sub.add_parser("status", help="cluster status")
    client(sp)
    sp.set_defaults(func=cmd_status)

    sp = sub.add_parser("simulate", help="run a job file through a policy in virtual time")
    sp.add_argument("jobs_file")
    sp.add_argument("--policy", type=_policy_name, required=True)
    sp.add_argument("--hosts", type=_positive("--hosts", int), default=4)
    sp.add_argument("--penalty", type=float, default=0.0, help="rescheduling penalty, seconds")
    sp.add_argument("--segment", type=int, default=None, help="for an SWF trace: simulate only week K")
    sp.add_argument("--json", action="store_true")
    sp.set_defaults(func=cmd_simulate)

    sp = sub.add_parser("demo", help="the main demo: a live 4-host run beside its simulation")
    sp.add_argument("--policy", type=_policy_name, default="greedy")
    sp.add_argument("--seed", type=int, default=1)
    sp.add_argument("--jobs", type=_positive("--jobs", int), default=12)
    sp.add_argument("--hosts", type=_positive("--hosts", int), default=4)
    sp.add_argument("--span", type=_positive("--span"), default=60.0, help="seconds over which jobs arrive")
    sp.add_argument("--cpus-per-host", type=_positive("--cpus-per-host"), default=None)
    sp.add_argument("--no-cgroups", action="store_true")
    sp.add_argument("--out", default="results/demo")
    sp.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    sp.set_defaults(func=cmd_demo)

    sub.add_parser("vcsched", help="seed 002 static placement experiments (see vcemu vcsched --help)",
                   add_help=False)
    sub.add_parser("sweep", help="seed 001 Sec. V experiments on Ray (see vcemu sweep --help)", add_help=False)
    sub.add_parser("replay", help="replay a trace segment on live agents beside its simulation", add_help=False)
    sp = sub.add_parser("bench", help="benchmarks: cpu-share, packing, dfrs")
    sp.add_argument("name", choices=["cpu-share", "packing", "dfrs"])
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Subcommands implemented by other packages parse their own arguments.
    if argv and argv[0] == "agent":
        from node_agent.cli import agent_main

        return agent_main(argv[1:])
    if argv and argv[0] == "vcsched":
        from coordinator.vcsched.experiment import vcsched_main

        return vcsched_main(argv[1:])
    if argv and argv[0] == "sweep":
        from coordinator.sweep import sweep_main

        return sweep_main(argv[1:])
    if argv and argv[0] == "replay":
        from coordinator.replay import replay_main

        return replay_main(argv[1:])
    if len(argv) >= 2 and argv[0] == "bench":
        if argv[1] == "cpu-share":
            from node_agent.bench import cpu_share_main

            return cpu_share_main(argv[2:])
        if argv[1] == "packing":
            from coordinator.vcsched.bench import bench_packing_main

            return bench_packing_main(argv[2:])
        if argv[1] == "dfrs":
            from coordinator.bench_dfrs import bench_dfrs_main

            return bench_dfrs_main(argv[2:])
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
