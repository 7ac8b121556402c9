"""Operational benchmarks (issue 7): ``vcemu bench load`` and ``vcemu bench scale``.

load: how many submissions per second the coordinator's gRPC API accepts *durably* (each committed to
its SQLite store before the reply), from several client threads, and whether any acknowledged job is
missing from the store afterwards (``lost``, must be 0). A real agent (in-process, ``modeled`` jobs)
provides the hosts, and the engine loop schedules the jobs while they arrive.

scale: 1,000 emulated hosts across a few real agent processes (``modeled`` workload, no processes per
task), one job per two hosts, under DYNMCB8-PER; reports the control cycle (the periodic Tick: policy
decision plus applying its plan) p50/p99, and the agents' resident memory per emulated host. Once the jobs are
placed nothing arrives or ends, so the measured cycles' plans are empty (``actions_per_cycle``): the decision and
the cycle's own cost at scale; ``starts`` times plans that move, pause and resume every job.

starts: how fast jobs start when every start re-shares its host: N one-task modeled jobs submitted at once
to a coordinator (greedy by default) with one agent process of a few hosts; reports the seconds until all run,
and the jobs running at each quarter of that time. A plan's share changes go to a host in one SetShares call,
where one SetShare per task made the n-th start on a host cost n calls (and an agent's check of each a pass over
its tasks). ``--tasks`` gives each job that many tasks: one job of 10,000 measures a large job's start (one
StartTasks call per host, where one StartTask per task made it 10,000 calls and passes). Once all run, every job is
cancelled: the seconds until the agent holds none of their tasks (a job's tasks stop in one StopTasks call per
host).

All three write JSON (and the config that produced it) under ``--out``; ``--json`` prints the JSON line. Ctrl-C or
SIGTERM stops everything a bench started (coordinator, agents, their tasks and work directories, the load's
client processes) and ends it with one line and exit status 130, as ``vcemu up`` does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import grpc
from tqdm import tqdm

from coordinator.policy_names import MIN_PERIOD_S, POLICY_HELP, policy_name
from coordinator.servers import interrupted, spawn_agent, stop_agents
from vcemu.bench_results import check_out, output_flags, write_results
from vcemu.cliargs import Parser, number_in, positive
from vcemu.limits import MAX_LOCAL_AGENTS
from vcemu.signals import signals_deferred, signals_interrupt
from vcemu.v1 import agent_pb2, agent_pb2_grpc
from vcemu.v1 import coordinator_pb2 as pb
from vcemu.v1 import coordinator_pb2_grpc as pb_grpc

GIB = 1 << 30
#: How long ``bench load`` waits for its clients to connect before giving up.
READY_TIMEOUT_S = 120.0
#: How often ``bench starts`` counts the jobs running: the resolution of its seconds_to_all_running.
STARTS_POLL_S = 0.01
#: Fewest jobs for ``bench starts``' job-start figures (starts_per_s, running_at_quarters): a job runs once all its
#: tasks do, one event, so with one job of 10,000 tasks the "rate" was 1 / seconds_to_all_running (2.5 starts/s)
#: and every quarter counted 0 jobs. With fewer jobs than quarters they say nothing the seconds do not.
STARTS_RATE_MIN_JOBS = 4


def _int_at_least(low: int, high: int | None = None):  # type: ignore[no-untyped-def]
    """An argparse type: a whole number >= ``low`` (argparse then says "argument --hosts: must be >= 1, got 0"),
    and where given, at most ``high``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {text}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}, got {text}")
        return value

    return parse


def _bar_off(args: argparse.Namespace) -> bool:
    """No progress bar with ``--json``, nor when stderr is not a terminal (a log, a pipe: no bar's redraws there)."""
    return bool(args.json) or not sys.stderr.isatty()


def _register(server_address: str, agent_address: str) -> None:
    with grpc.insecure_channel(agent_address) as ch:
        desc = agent_pb2_grpc.AgentStub(ch).Describe(agent_pb2.DescribeRequest(), timeout=10)
    with grpc.insecure_channel(server_address) as ch:
        pb_grpc.CoordinatorStub(ch).RegisterAgent(pb.RegisterAgentRequest(address=agent_address, description=desc),
                                                  timeout=10)


def _load_client(address: str, ids: list[int], batch: int, ready, go, out) -> None:  # type: ignore[no-untyped-def]
    """One client process (its own GIL), one channel, 4 calls in flight: unary Submits (``batch`` 1) or
    SubmitBatch calls of ``batch`` submissions each (every submission still answered on its own). Says it is
    ``ready`` once connected, then waits for ``go``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C reaches us too: the bench stops us
    spec = pb.JobSpec(tasks=1, cpu_need=0.1, memory=0.01, work_seconds=2.0, workload="modeled")
    acked: list[str] = []
    errors: list[str] = []
    with grpc.insecure_channel(address) as ch:
        stub = pb_grpc.CoordinatorStub(ch)
        grpc.channel_ready_future(ch).result(timeout=30)
        ready.put(os.getpid())
        go.wait()
        window: list = []
        for k in range(0, len(ids), batch):
            reqs = [pb.SubmitRequest(spec=spec, request_id=f"load-{i}") for i in ids[k:k + batch]]
            if batch == 1:
                window.append(stub.Submit.future(reqs[0], timeout=60))
            else:
                window.append(stub.SubmitBatch.future(pb.SubmitBatchRequest(requests=reqs), timeout=60))
            if len(window) >= 4:
                _collect(window.pop(0), acked, errors)
        for f in window:
            _collect(f, acked, errors)
    out.put((acked, errors))


_CODE_NAMES = {c.value[0]: c.name for c in grpc.StatusCode}


def _collect(future, acked: list, errors: list) -> None:  # type: ignore[no-untyped-def]
    try:
        reply = future.result()
    except grpc.RpcError as exc:
        errors.append(f"{exc.code().name}: {exc.details()}")
        return
    if isinstance(reply, pb.Job):
        acked.append(reply.job_id)
        return
    for r in reply.results:
        if r.code == 0:
            acked.append(r.job.job_id)
        else:
            errors.append(f"{_CODE_NAMES.get(r.code, r.code)}: {r.error}")


def _wait_ready(ready, procs: list) -> None:  # type: ignore[no-untyped-def]
    """Until every client process has said it is connected; SystemExit naming how many did not, should one exit
    first or :data:`READY_TIMEOUT_S` pass."""
    waiting, deadline = len(procs), time.monotonic() + READY_TIMEOUT_S
    while waiting:
        try:
            ready.get(timeout=0.5)
            waiting -= 1
        except queue.Empty:
            if time.monotonic() > deadline or any(not pr.is_alive() for pr in procs):
                raise SystemExit(f"vcemu bench load: error: {waiting} of {len(procs)} clients did not connect to the "
                                 "coordinator") from None


def _load_round(args: argparse.Namespace, batch: int) -> dict:
    """One measured round on a fresh coordinator (with its own SQLite store) and agent."""
    from coordinator.policies import get_policy
    from coordinator.service import CoordinatorServer
    from coordinator.store import Store
    from node_agent.agent import HostSpec
    from node_agent.server import start_agent

    tmp = tempfile.mkdtemp(prefix="vcemu-bench-load-")
    db = os.path.join(tmp, "state.db")
    acked: list[str] = []
    errors: list[str] = []
    ctx = multiprocessing.get_context("spawn")
    ready, go, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    agent = server = None
    procs: list = []
    try:  # whatever stops the round (Ctrl-C, SIGTERM, a failure), the agent, server and clients go with it
        agent = start_agent([HostSpec(f"load-h{i}", 1.0, GIB) for i in range(args.hosts)],
                            agent_id=f"bench-load-{os.getpid()}-{batch}", no_cgroups=True)
        server = CoordinatorServer(get_policy(args.policy), port=0, state=db, heartbeat_s=3600,
                                   max_queued=0)  # (a throughput measure: --jobs may be any number)
        assert server.store is not None
        server.store._db.execute(f"PRAGMA synchronous={args.synchronous.upper()}")
        server.start()
        _register(server.address, agent.address)
        procs = [ctx.Process(target=_load_client, args=(server.address, list(range(k, args.jobs, args.clients)),
                                                          batch, ready, go, out), daemon=True)
                 for k in range(args.clients)]
        for pr in procs:
            pr.start()
        # The clock starts once every client has imported and connected (a fixed 3 s was too short for 32 clients
        # on 2 cores: their start-up, 5.8 s, was measured as submission time; review).
        _wait_ready(ready, procs)
        t0 = time.perf_counter()
        go.set()
        label = "submit" if batch == 1 else f"submit (batches of {batch})"
        with tqdm(total=args.jobs, desc=label, unit="job", disable=_bar_off(args), file=sys.stderr) as bar:
            for _ in procs:
                a, e = out.get(timeout=600)
                acked.extend(a)
                errors.extend(e)
                bar.update(len(a) + len(e))
        elapsed = time.perf_counter() - t0
        for pr in procs:
            pr.join(10)
    finally:
        failed = sys.exc_info()[0] is not None
        with signals_deferred():  # a second Ctrl-C must not stop the cleanup half way
            for pr in procs:
                if pr.is_alive():
                    pr.terminate()
            for pr in procs:
                pr.join(10)
            if server is not None:
                server.stop()
            if agent is not None:
                agent.stop()
            if failed:  # no result to read: the store goes too
                shutil.rmtree(tmp, ignore_errors=True)
    stored = {j.spec.id for j in Store(db).load().jobs}
    with contextlib.suppress(OSError):
        for f in os.listdir(tmp):
            os.unlink(os.path.join(tmp, f))
        os.rmdir(tmp)
    return {"submit_per_s": round(len(acked) / elapsed, 1), "acknowledged": len(acked), "refused": len(errors),
            "lost": len(set(acked) - stored), "duplicates": len(acked) - len(set(acked)),
            "seconds": round(elapsed, 3), "first_error": errors[0] if errors else ""}


def bench_load_main(argv: list[str]) -> int:
    """Submissions per second the coordinator accepts durably over gRPC: one round with SubmitBatch calls
    (``--batch`` submissions each, the bulk path a trace or sweep uses) and one with unary Submit calls,
    each on a fresh coordinator; ``lost`` counts acknowledged jobs missing from the store, over both."""
    from coordinator.store import DEFAULT_SYNCHRONOUS, SYNCHRONOUS

    p = Parser(prog="vcemu bench load", description=bench_load_main.__doc__)
    p.add_argument("--jobs", type=_int_at_least(1), default=10_000,
                   help="submissions per round, one-task modeled jobs (default %(default)s)")
    p.add_argument("--clients", type=_int_at_least(1), default=4,
                   help="client processes, one channel and 4 calls in flight each (default %(default)s)")
    p.add_argument("--batch", type=int, default=100,
                   help="submissions per SubmitBatch call, 1..1000 (1: unary Submit only; default %(default)s)")
    p.add_argument("--hosts", type=_int_at_least(1), default=16,
                   help="modeled hosts of the coordinator's one agent (default %(default)s)")
    p.add_argument("--policy", type=policy_name, default="fcfs", help=POLICY_HELP)
    p.add_argument("--synchronous", choices=SYNCHRONOUS, type=str.upper, default=DEFAULT_SYNCHRONOUS,
                   help="SQLite synchronous mode of the store (default %(default)s, the coordinator's)")
    output_flags(p, "load")
    args = p.parse_args(argv)
    if not 1 <= args.batch <= 1000:
        p.error(f"--batch: must be 1..1000, got {args.batch}")
    check_out(p, args)
    with signals_interrupt():
        try:
            rounds = {"batch": _load_round(args, args.batch)} if args.batch > 1 else {}
            rounds["unary"] = _load_round(args, 1)
        except KeyboardInterrupt:
            return interrupted("vcemu bench load: interrupted")
    head = rounds.get("batch", rounds["unary"])
    result = {"submit_per_s": head["submit_per_s"], "unary_submit_per_s": rounds["unary"]["submit_per_s"],
              "batch": args.batch, "jobs": args.jobs, "lost": sum(r["lost"] for r in rounds.values()),
              "duplicates": sum(r["duplicates"] for r in rounds.values()),
              "refused": sum(r["refused"] for r in rounds.values()), "clients": args.clients,
              "policy": args.policy, "synchronous": args.synchronous.upper(), "rounds": rounds}
    saved = write_results(args.out, "load", result, vars(args))
    if args.json:
        print(json.dumps(result))
    else:  # (each round on a line of its own: it was printed as a Python dict)
        print("\n".join([*(f"{k:>18}  {v}" for k, v in result.items() if k != "rounds"),
                         *(f"{name + ' round':>18}  " + ", ".join(f"{k} {v}" for k, v in r.items() if v != "")
                           for name, r in rounds.items())]))
    return 0 if result["lost"] == 0 and saved else 1


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def cycle_stats(cycles: list[float], decide: list[list[float]]) -> dict:
    """bench scale's figures from each control cycle's seconds and its decisions' seconds (one list per cycle):
    the first cycle (it places the jobs) alone, then the cycle and decision percentiles over the same cycles,
    every one after the first (a decision is part of its cycle, so decide_p99_s <= cycle_p99_s)."""
    steady, steady_decide = cycles[1:], [d for ds in decide[1:] for d in ds]
    return {"cycle_p99_s": round(_p99(steady), 4) if steady else None,
            "cycle_p50_s": round(statistics.median(steady), 4) if steady else None,
            "first_cycle_s": round(cycles[0], 4) if cycles else None,
            "decide_p99_s": round(_p99(steady_decide), 4) if steady_decide else None,
            "cycles_measured": len(steady)}


#: The longest --period of ``bench scale``.
SCALE_MAX_PERIOD_S = 60.0


def bench_scale_main(argv: list[str]) -> int:
    """The control cycle of DYNMCB8-PER at scale: emulated hosts on a few agent processes, one job per two hosts.
    The first cycle places the jobs and is reported alone (first_cycle_s); cycle_p50_s, cycle_p99_s and
    decide_p99_s (the policy's decision alone) are over the same --cycles cycles after it. No job arrives or ends
    meanwhile, so those cycles repack to the allocation they find and apply no action (actions_per_cycle): they time
    the decision and the cycle at scale, not a plan's application (bench starts times those)."""
    p = Parser(prog="vcemu bench scale", description=bench_scale_main.__doc__)
    p.add_argument("--hosts", type=_int_at_least(1), default=1000,
                   help="emulated hosts, modeled (default %(default)s)")
    # (bounded as up's and replay's --agents: each is a Python process with a gRPC server of its own, and
    # `bench scale --hosts 1000 --agents 1000` started a thousand of them on 2 cores)
    p.add_argument("--agents", type=_int_at_least(1, MAX_LOCAL_AGENTS), default=4,
                   help=f"agent processes sharing the hosts (at most --hosts and {MAX_LOCAL_AGENTS}; "
                   "default %(default)s)")
    p.add_argument("--jobs", type=_int_at_least(1), default=None,
                   help="jobs to place, >= 1 (default: one per two hosts, at least one): with none, no cycle runs")
    # (up to 60 s: the bench times cycles, and waits --cycles + 2 periods; 1e5 was accepted, a week's wait)
    p.add_argument("--period", type=number_in(MIN_PERIOD_S, SCALE_MAX_PERIOD_S), default=5.0,
                   help=f"DYNMCB8-PER period, seconds, {MIN_PERIOD_S:g} to {SCALE_MAX_PERIOD_S:g}: the bench waits "
                   "--cycles + 2 periods (default %(default)g)")
    p.add_argument("--cycles", type=_int_at_least(1), default=5,
                   help="control cycles to measure after the first (placement) cycle (default %(default)s)")
    output_flags(p, "scale")
    args = p.parse_args(argv)
    if args.agents > args.hosts:
        p.error(f"argument --agents: must be <= --hosts ({args.hosts}), got {args.agents}")
    check_out(p, args)
    return _interruptible("scale", _bench_scale, args)


def _interruptible(name: str, run, args: argparse.Namespace) -> int:  # type: ignore[no-untyped-def]
    """``run(args)``, ended by Ctrl-C or SIGTERM with one line and exit status 130 (its own ``finally`` stops what
    it started)."""
    with signals_interrupt():
        try:
            return run(args)
        except KeyboardInterrupt:
            return interrupted(f"vcemu bench {name}: interrupted")


def _spawn_agents(server, hosts: list[int], name: str) -> list[subprocess.Popen]:  # type: ignore[no-untyped-def]
    """One agent process (no cgroups, 1-core 1 GiB hosts) per entry of ``hosts`` (its host count), registered with
    ``server``; returns once all their hosts are, or exits naming how many did after 120 s. Each is a session of its
    own with ``--parent-pid``: the caller's ``finally`` stops them (:func:`stop_agents`), and so does its death."""
    procs: list[subprocess.Popen] = []
    try:  # (interrupted or failing half way, the ones started are stopped here: the caller has none of them yet)
        with open(os.devnull, "wb") as devnull:
            for i, n in enumerate(hosts):
                procs.append(spawn_agent(server.address, n, "1", "1GiB", f"bench-{name}-{os.getpid()}-{i}",
                                         ["--no-cgroups"], devnull))
        deadline = time.monotonic() + 120
        while len(server.backend.host_agent) < sum(hosts):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise SystemExit(f"vcemu bench {name}: only {len(server.backend.host_agent)} hosts registered")
            time.sleep(0.2)
    except BaseException:
        stop_agents(procs, timeout=20)
        raise
    return procs


def scale_jobs(hosts: int, jobs: int | None) -> int:
    """``--jobs``, or one job per two hosts and at least one: with none, no control cycle would ever run."""
    return jobs if jobs is not None else max(1, hosts // 2)


def _bench_scale(args: argparse.Namespace) -> int:
    import psutil

    from coordinator.model import Tick
    from coordinator.policies.dynmcb import dynmcb8_per
    from coordinator.service import CoordinatorServer

    jobs = scale_jobs(args.hosts, args.jobs)
    server = CoordinatorServer(dynmcb8_per(args.period), port=0, heartbeat_s=30).start()
    engine = server.engine
    cycles: list[float] = []
    decide: list[list[float]] = []  # the decisions' seconds of each cycle, as cycles
    actions: list[int] = []  # the actions each cycle's plan applied (review: the timed cycles may apply none)
    handle = engine.handle

    def timed(stim):  # type: ignore[no-untyped-def]
        t0 = time.perf_counter()
        n = len(engine.history.decision_seconds)
        plan = handle(stim)
        if isinstance(stim, Tick) and stim.job is None:
            cycles.append(time.perf_counter() - t0)
            decide.append(list(engine.history.decision_seconds[n:]))
            actions.append(len(plan.actions))
        return plan

    engine.handle = timed  # type: ignore[method-assign]
    split = [args.hosts // args.agents + (1 if i < args.hosts % args.agents else 0) for i in range(args.agents)]
    procs: list[subprocess.Popen] = []
    try:  # the agents go with us whatever stops the bench
        procs = _spawn_agents(server, split, "scale")
        spec = pb.JobSpec(tasks=1, cpu_need=0.5, memory=0.3, work_seconds=1e6, workload="modeled")
        with grpc.insecure_channel(server.address) as ch:
            stub = pb_grpc.CoordinatorStub(ch)
            for i in tqdm(range(jobs), desc="submit", disable=_bar_off(args), file=sys.stderr):
                stub.Submit(pb.SubmitRequest(spec=spec, request_id=f"scale-{i}"), timeout=30)
        bar = tqdm(total=args.cycles, desc="cycles", disable=_bar_off(args), file=sys.stderr)
        deadline = time.monotonic() + (args.cycles + 2) * args.period + 600
        seen = 0
        while len(cycles) < args.cycles + 1 and time.monotonic() < deadline:  # the first cycle places the jobs
            time.sleep(0.2)
            bar.update(max(0, len(cycles) - 1 - seen))
            seen = max(seen, len(cycles) - 1)
        bar.close()
        with engine.lock:
            running = sum(1 for r in engine.jobs.values() if r.state.value == "running")
        rss = sum(psutil.Process(p.pid).memory_info().rss for p in procs)
    finally:
        server.stop()
        stop_agents(procs, timeout=20)
    result = {"hosts": args.hosts, "agents": args.agents, "jobs": jobs, "running": running,
              **cycle_stats(cycles[:args.cycles + 1], decide[:args.cycles + 1]),
              # each measured cycle's plan size: with no arrival or completion between them, DYNMCB8-PER repacks to
              # the same allocation, and the cycles time its decision and an empty plan
              "actions_per_cycle": actions[1:args.cycles + 1],
              "agent_rss_mb_per_host": round(rss / args.hosts / 2**20, 3)}
    if not result["cycles_measured"]:
        print(f"vcemu bench scale: error: no control cycle after the first within "
              f"{(args.cycles + 2) * args.period + 600:.0f} s", file=sys.stderr)
        return 1
    saved = write_results(args.out, "scale", result, vars(args))
    print(json.dumps(result) if args.json else "\n".join(f"{k:>22}  {v}" for k, v in result.items()))
    return 0 if saved else 1


def bench_starts_main(argv: list[str]) -> int:
    """Seconds from submitting --jobs modeled jobs of --tasks tasks at once until all run, on --hosts hosts of one
    agent process (no cgroups): under greedy each start re-shares every job on its host; a job of many tasks
    starts in one StartTasks call per host. Then the seconds to pause them all in one plan, resume them, move every
    task to the next host, and cancel them all."""
    p = Parser(prog="vcemu bench starts", description=bench_starts_main.__doc__, epilog=STARTS_FIGURES)
    p.add_argument("--jobs", type=_int_at_least(1), default=1000,
                   help="jobs submitted at once, modeled (default %(default)s)")
    p.add_argument("--tasks", type=_int_at_least(1), default=1,
                   help="tasks of each job (default %(default)s): one job of many tasks measures a large job's start")
    p.add_argument("--hosts", type=_int_at_least(1), default=4, help="hosts of the one agent (default %(default)s)")
    p.add_argument("--policy", type=policy_name, default="greedy", help=POLICY_HELP)
    p.add_argument("--cpu-need", type=positive("--cpu-need"), default=0.25,
                   help="each job's CPU need, a fraction of a host, at most 1 (default %(default)g)")
    p.add_argument("--timeout", type=positive("--timeout"), default=600.0,
                   help="give up after this many seconds (default %(default)g)")
    output_flags(p, "starts")
    args = p.parse_args(argv)
    if args.cpu_need > 1:
        p.error(f"argument --cpu-need: must be at most 1, got {args.cpu_need:g}")
    check_out(p, args)
    return _interruptible("starts", _bench_starts, args)


STARTS_FIGURES = (
    "Figures: running, the jobs running at the end (all of them, or those by --timeout); seconds_to_all_running, "
    f"from the submission until every job runs, counted every poll_s ({STARTS_POLL_S:g}) s; starts_per_s, jobs "
    "started per second (running / those seconds); task_starts_per_s, tasks started per second (running x --tasks "
    "/ those seconds): the figure of a large job's start; running_at_quarters, the jobs running at 1/4, 1/2 and 3/4 "
    "of those seconds (a rate that falls as hosts fill shows there). A job runs once all its tasks do, so with "
    f"fewer than {STARTS_RATE_MIN_JOBS} jobs starts_per_s and running_at_quarters are null, and notes says why. "
    "seconds_to_pause_all, _resume_all and _move_all: one plan each, after all run (_move_all null with one host); "
    "seconds_to_cancel_all: every job cancelled, until the agent holds none of their tasks.")


def starts_figures(samples: list[tuple[float, int]], jobs: int, tasks: int) -> dict:
    """``bench starts``' rates from its ``samples`` (seconds since the submission, jobs running), the last at the end
    of the wait: starts_per_s, task_starts_per_s, running_at_quarters, and ``notes`` naming a figure left null (and
    why). With fewer than :data:`STARTS_RATE_MIN_JOBS` jobs the job figures are null: one job's start is one event
    at the end, so its "rate" is 1 / the seconds and each quarter counts 0 jobs (task_starts_per_s is the figure)."""
    seconds, running = samples[-1]
    out: dict = {"starts_per_s": round(running / seconds, 1),
                 "task_starts_per_s": round(running * tasks / seconds, 1),
                 # jobs running at each quarter of the time: a rate that falls as hosts fill shows here
                 "running_at_quarters": [next(n for t, n in samples if t >= seconds * q / 4) for q in (1, 2, 3)],
                 "notes": {}}
    if jobs < STARTS_RATE_MIN_JOBS:
        why = (f"null: {jobs} job{'s' if jobs > 1 else ''}, fewer than {STARTS_RATE_MIN_JOBS}; a job runs once all "
               "its tasks do, one event per job (see task_starts_per_s and seconds_to_all_running)")
        out["starts_per_s"] = out["running_at_quarters"] = None
        out["notes"] = {"starts_per_s": why, "running_at_quarters": why}
    return out


def _cancel_all(stub: pb_grpc.CoordinatorStub, job_ids: list[str], server, timeout: float) -> float | None:  # type: ignore[no-untyped-def]
    """Cancel every job (one Cancel each) and return the seconds until the agent holds none of their tasks (asked
    with Status), or None after ``timeout``: a job ending stops its tasks, one StopTasks call per host."""
    t0 = time.perf_counter()
    for job_id in job_ids:
        stub.Cancel(pb.JobRef(job_id=job_id), timeout=timeout)
    (handle,) = server.backend.agents.values()  # (the bench's one agent)
    while True:  # (asked at least once, however long the cancels took)
        with contextlib.suppress(grpc.RpcError):  # (a slow answer: asked again)
            if not handle.stub.Status(agent_pb2.StatusRequest(), timeout=10).tasks:
                return time.perf_counter() - t0
        if time.perf_counter() - t0 > timeout:
            return None
        time.sleep(0.05)


def _apply_timed(server, job_ids: list[str]) -> tuple[dict[str, float | None], str | None]:  # type: ignore[no-untyped-def]
    """Three plans applied through the engine as a policy's are, each timed: every job paused (checkpoint mode: its
    tasks stopped, each saved at its progress), every job resumed where it was, then every job's tasks moved to the
    next host in name order (as a repacking moves them: all leave before any arrives). The plans are the bench's
    own, on jobs that neither end nor arrive meanwhile, so the policy makes none. Returns the seconds of each
    (``move`` None with one host: nowhere to go) and what went wrong, if a job was not in the state a plan leaves."""
    from coordinator.model import JobState
    from coordinator.plan import Move, Pause, Plan, Resume

    engine = server.engine
    hosts = sorted(server.backend.host_agent)
    after = {h: hosts[(i + 1) % len(hosts)] for i, h in enumerate(hosts)}
    with engine.lock:
        placed = {j: (engine.jobs[j].hosts, engine.jobs[j].cpu) for j in job_ids}
    plans = [("pause", Plan(tuple(Pause(j) for j in job_ids)), JobState.PAUSED),
             ("resume", Plan(tuple(Resume(j, h, cpu) for j, (h, cpu) in placed.items())), JobState.RUNNING)]
    if len(hosts) > 1:
        plans.append(("move", Plan(tuple(Move(j, tuple(after[x] for x in h)) for j, (h, _) in placed.items())),
                      JobState.RUNNING))
    seconds: dict[str, float | None] = {"pause": None, "resume": None, "move": None}
    for name, plan, state in plans:
        t0 = time.perf_counter()
        engine.apply(plan)
        seconds[name] = time.perf_counter() - t0
        with engine.lock:
            wrong = next((r for r in map(engine.jobs.__getitem__, job_ids) if r.state is not state), None)
        if wrong is not None:
            return seconds, f"{wrong.spec.id} is {wrong.state.value} after the {name} plan: {wrong.message}"
    return seconds, None


def _bench_starts(args: argparse.Namespace) -> int:
    from coordinator.model import JobState
    from coordinator.policies import get_policy
    from coordinator.service import CoordinatorServer

    server = CoordinatorServer(get_policy(args.policy), port=0, heartbeat_s=30).start()
    procs: list[subprocess.Popen] = []
    samples: list[tuple[float, int]] = []  # (seconds since the submission, jobs running)
    cancel: float | None = None
    plans: dict[str, float | None] = {"pause": None, "resume": None, "move": None}
    try:  # the agent goes with us whatever stops the bench
        procs = _spawn_agents(server, [args.hosts], "starts")
        # (memory: all the tasks on one host would take half of it, so memory never keeps a job waiting)
        spec = pb.JobSpec(tasks=args.tasks, cpu_need=args.cpu_need, memory=0.5 / (args.jobs * args.tasks),
                          work_seconds=1e6, workload="modeled")
        requests = [pb.SubmitRequest(spec=spec, request_id=f"starts-{i}") for i in range(args.jobs)]
        board = server.board  # (read as ``vcemu status`` reads it: a turn that starts many jobs holds the engine)
        with grpc.insecure_channel(server.address) as ch, \
                tqdm(total=args.jobs, desc="running", unit="job", disable=_bar_off(args), file=sys.stderr) as bar:
            stub = pb_grpc.CoordinatorStub(ch)
            t0 = time.perf_counter()
            job_ids: list[str] = []
            for k in range(0, args.jobs, 1000):
                reply = stub.SubmitBatch(pb.SubmitBatchRequest(requests=requests[k:k + 1000]), timeout=60)
                refused = next((r.error for r in reply.results if r.code), None)
                if refused is not None:  # (not waited for until --timeout: it would never run)
                    print(f"vcemu bench starts: error: a job was refused: {refused}", file=sys.stderr)
                    return 1
                job_ids += [r.job.job_id for r in reply.results]
            while not samples or (samples[-1][1] < args.jobs and samples[-1][0] < args.timeout):
                time.sleep(STARTS_POLL_S)
                running = board.counts_and_running()[0].get(JobState.RUNNING, 0)
                samples.append((time.perf_counter() - t0, running))
                bar.update(running - bar.n)
            if samples[-1][1] == args.jobs:
                plans, wrong = _apply_timed(server, job_ids)
                if wrong is not None:
                    print(f"vcemu bench starts: error: {wrong}", file=sys.stderr)
                    return 1
                cancel = _cancel_all(stub, job_ids, server, args.timeout)
    finally:
        server.stop()
        stop_agents(procs, timeout=20)
    seconds, running = samples[-1]
    result = {"jobs": args.jobs, "tasks": args.tasks, "hosts": args.hosts, "policy": args.policy, "running": running,
              "seconds_to_all_running": round(seconds, 3) if running == args.jobs else None,
              "poll_s": STARTS_POLL_S,  # (the resolution of the seconds above: it was 0.1 s, and 20 jobs took 0.1 s)
              **starts_figures(samples, args.jobs, args.tasks),
              # then one plan pausing every job, one resuming them, one moving every task to the next host
              **{f"seconds_to_{k}_all": None if v is None else round(v, 2) for k, v in plans.items()},
              # then every job cancelled: seconds until the agent has none of their tasks left
              "seconds_to_cancel_all": None if cancel is None else round(cancel, 2)}
    result["notes"] = result.pop("notes")  # (last, after the figures they explain)
    saved = write_results(args.out, "starts", result, vars(args))
    print(json.dumps(result) if args.json else _starts_text(result))
    if running < args.jobs:
        print(f"vcemu bench starts: error: {running} of {args.jobs} jobs running after {args.timeout:g} s",
              file=sys.stderr)
        return 1
    if cancel is None:
        print(f"vcemu bench starts: error: tasks of the cancelled jobs still on the agent after {args.timeout:g} s",
              file=sys.stderr)
        return 1
    return 0 if saved else 1


def _starts_text(result: dict) -> str:
    """``bench starts``' result without --json: a line per figure, then a line per note (a null figure's reason)."""
    lines = [f"{k:>22}  {v}" for k, v in result.items() if k != "notes"]
    return "\n".join(lines + [f"{k}: {why}" for k, why in result["notes"].items()])
