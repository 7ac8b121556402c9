"""``vcemu replay TRACE [--policy NAME] [--compress K]``: a trace segment on live agents beside its simulation.

The trace (a job file, or an SWF log: ``--segment`` picks a 1-week segment, read by ``workloads.jobfile.load_jobs``) is
cut to ``--max-jobs`` jobs (the first by submission) on ``--hosts`` hosts; jobs wider than the cluster are dropped and
counted (those submitted before the last job replayed), and any other job the engine would refuse is refused before the
cluster starts, naming its line. An in-process coordinator (as ``vcemu demo`` starts it) drives ``--agents`` real agent
processes (cgroup-enforced shares, pause = checkpoint and stop; with ``--ray ADDRESS``, one agent actor per host on the
nodes of that Ray cluster, placed and started as ``vcemu up --ray`` does) with the live backend's time compression K:
its clock runs K times faster than wall time and each task's work is divided by K, so a job of W trace-seconds takes W/K
real seconds and everything is reported in trace seconds. Jobs arrive at their trace submit times (shifted by the
cluster's start-up time) on that clock. The very same jobs also go through the simulator with the same policy, hosts and
penalty, and both runs are scored by the same code (coordinator.metrics, 001 Sec. V's metrics), side by side. Results go
to a new directory under ``--out`` named after the run's start (``YYYYmmdd-HHMMSS-POLICY-kK``, with ``-2``, ``-3``, ...
for further runs started in the same second); its ``config.json`` records the code that ran (``"code"``), and the
trace's absolute path, the hash of the bytes read and, for SWF, what the conversion dropped. An exception in the
coordinator's engine loop (which logs it and goes on, as a service must) ends the replay with an error: a job refused at
its arrival would otherwise be waited for until ``--timeout``.

The simulation runs first, once the cluster is up and before any job arrives (it is deterministic, and takes
seconds for a thousand jobs, with a progress bar of its own): its end, at --compress K, is how long the live run
should take. Past ``--timeout``, or within a fifth of it, a warning says so before the wait, with the --timeout
(and, unless start-ups would then weigh on the jobs, the --compress) that lets it end; the progress bar shows the
live clock in trace time beside the simulation's end. A simulation that fails ends the replay (exit status 1)
before any job arrives, the cluster stopped. The live run's plans are timed (:class:`PlanTimes`), and a warning
says when carrying them out took over :data:`PLANS_WARN` of its wall time (``live_plans`` in metrics.json).

A live run that reaches ``--timeout`` is cut off there: one line on stderr says so, with how many of the segment's jobs
completed (and arrived), and the exit status is 1. The live column then scores the run up to the cut-off: the jobs still
pending, running or paused count as not completed and are taken to end at the cut-off, so the span runs from the first
submission to the cut-off (not to the last completion) and the allocated CPU is integrated over that same span:
utilisation never exceeds 1. ``jobs`` (and the per-job rates) count the whole segment in both columns; the simulated
column is always the simulation of the whole segment. ``jobs.csv`` in the results folder has, per job of the segment,
its live and simulated submit, start, end, wait, run time, stretch and last yield (trace seconds from the segment's
first submission; empty where the job did not get that far); the output and ``metrics.json``'s ``per_job`` give the
median and largest relative difference between a job's live and simulated stretch (jobs.csv's ``rel_diff``, empty for a
job not done both ways), over every job done both ways (:func:`compared`) and over those whose work is at least ten
times the start-up overhead below (:func:`per_job`), and ``stretch.png`` plots each job's pair. Each task's start-up
(0.5-3 s of real time, the agent starting a process) is K times longer in trace seconds: when the live run's overhead
(measured on the jobs that ran at one share from start to end, else estimated as K x 1 s) is over 10% of the jobs'
median work, a warning says so after the run and suggests a smaller ``--compress``.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import math
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from coordinator.metrics import History, JobResult, Transition, trace_span
from coordinator.model import JobSpec, JobState
from coordinator.policy_names import POLICY_HELP, PolicyNameError, canonical_name, thrashing
from node_agent.spares import add_agent_spares
from vcemu.cliargs import Parser, doc_head, doc_text, penalty_seconds, per_host, per_host_values, positive
from vcemu.limits import MAX_AGENT_HOSTS, MAX_COMPRESS, MAX_LOCAL_AGENTS, MIN_COMPRESS
from vcemu.signals import signals_deferred, signals_interrupt

if TYPE_CHECKING:
    from workloads.jobfile import JobFile

#: Real seconds a task takes to start (0.5-3 s measured): K times that in trace seconds at --compress K.
STARTUP_S = 1.0
#: The share of the jobs' median work above which the live run's start-up overhead is warned about.
OVERHEAD_WARN = 0.10
#: The share of the live run's wall time spent carrying out plans above which it is warned about...
PLANS_WARN = 0.20
#: ...if there were at least this many: fewer say nothing of --compress (one Start stuck on an agent that does not
#: answer, say).
PLANS_WARN_MIN = 5

EXIT_STATUS = """exit status: 0 every job of the segment completed live and the results were written; 1 the live run
timed out (--timeout), failed, did not complete every job, or its results could not be written (they are still
printed); 2 bad arguments or trace (nothing started); 130 interrupted (Ctrl-C or SIGTERM)."""


def _week(text: str) -> int:
    """``--segment K``: one week, as a live replay runs (``simulate --segment`` also takes weeks A-B)."""
    try:
        week = int(text)
    except ValueError:
        why = "replay runs one week K (simulate --segment also takes weeks A-B)" if "-" in text.strip()[1:] else \
            "expected a week index K (from 0)"
        raise argparse.ArgumentTypeError(f"{why}, got {text!r}") from None
    if week < 0:
        raise argparse.ArgumentTypeError(f"week indices start at 0, got {text!r}")
    return week


def score(history: History, capacity: float, host_memory_gb: float) -> dict[str, Any]:
    """001 Sec. V's metrics of one run (the same for a simulated and a live run)."""
    from coordinator.metrics import decision_stats, job_results, rescheduling_costs, summarize, utilisation

    results = job_results(history)
    s = summarize(results)
    k = rescheduling_costs(history, host_memory_gb=host_memory_gb, results=results)
    u = utilisation(history, capacity)
    d = decision_stats(history.decision_seconds)
    return {
        "jobs": s.jobs, "completed": s.completed, "max_stretch": s.max_bounded_stretch,
        "mean_stretch": s.mean_bounded_stretch, "max_plain_stretch": s.max_stretch,
        "preemptions": k.preemptions, "migrations": k.migrations, "span_s": k.span_s,
        "pmtn_per_hour": k.pmtn_per_hour, "mig_per_hour": k.mig_per_hour, "pmtn_per_job": k.pmtn_per_job,
        "mig_per_job": k.mig_per_job, "pmtn_gb_s": k.pmtn_gb_s, "mig_gb_s": k.mig_gb_s,
        "utilisation": u.used, "underutilisation": u.under, "decision_p99_ms": d.p99_s * 1e3,
        "decision_max_ms": d.max_s * 1e3,
    }


def _mem_size(text: str) -> str:
    """``--mem-per-host``: checked here (a bad size would only stop the agents), passed on as written; against this
    machine's memory after parsing, unless the hosts are on Ray nodes (:func:`_parse`)."""
    from vcemu.sizes import host_memory_refusal, parse_size

    try:
        why = host_memory_refusal(parse_size(text), here=False)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if why is not None:
        raise argparse.ArgumentTypeError(why)
    return text


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    p = Parser(prog="vcemu replay", description=doc_text(doc_head(__doc__, paragraph=True)), epilog=EXIT_STATUS)
    p.add_argument("trace", help="job file (JSON lines / CSV; - reads JSON lines from standard input) or SWF trace "
                   "(.swf, .swf.gz)")
    p.add_argument("--policy", default="dynmcb8-asap-per", help=POLICY_HELP)
    p.add_argument("--compress", type=positive("--compress", low=MIN_COMPRESS, high=MAX_COMPRESS), default=60.0,
                   help=f"time compression factor K ({MIN_COMPRESS:g} to {MAX_COMPRESS:g}; default %(default)g: an "
                        "hour of the trace in a minute)")
    p.add_argument("--segment", type=_week, default=None, help="SWF only: the 1-week segment to replay")
    p.add_argument("--max-jobs", type=positive("--max-jobs", int), default=20,
                   help="replay only the first N jobs (default 20)")
    p.add_argument("--hosts", type=positive("--hosts", int, high=MAX_AGENT_HOSTS), default=4,
                   help="live hosts (default 4)")
    p.add_argument("--agents", type=positive("--agents", int, high=MAX_LOCAL_AGENTS), default=1,
                   help="agent processes sharing the hosts (at most --hosts; default %(default)s)")
    p.add_argument("--cpus-per-host", type=per_host_values(positive("--cpus-per-host")), default=None,
                   metavar="CORES[,CORES...]",
                   help="real cores per emulated host, or one value per host, as vcemu up takes them (default: 60%% "
                        "of the machine shared out; with --ray, one value: 60%% of each node's CPUs shared out among "
                        "its hosts, at most 1 core)")
    p.add_argument("--mem-per-host", type=_mem_size, default="512MiB",
                   help="memory per emulated host (default %(default)s)")
    p.add_argument("--penalty", type=penalty_seconds, default=0.0,
                   help="rescheduling penalty of the simulation, trace seconds >= 0 (the live run pays real costs; "
                        "default %(default)g)")
    p.add_argument("--host-memory-gb", type=positive("--host-memory-gb"), default=8.0,
                   help="node memory for the bandwidth metric (default %(default)g)")
    p.add_argument("--timeout", type=positive("--timeout"), default=600.0,
                   help="wall seconds (> 0) before the live run is abandoned (default %(default)g)")
    p.add_argument("--no-cgroups", action="store_true", help="agents use the duty-cycle fallback")
    p.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="replay on the nodes of the Ray cluster at ADDRESS (HOST:PORT of its head), one agent actor "
                        "per host, as vcemu up --ray places them (token auth: set RAY_AUTH_MODE=token and "
                        "RAY_AUTH_TOKEN)")
    p.add_argument("--bind", default=None, help="with --ray: the address the coordinator and agents listen on "
                   "(default: each node's IP as Ray reports it)")
    p.add_argument("--token-file", default=None, help="with --ray: require this bearer token on the coordinator's user "
                   "API and of its agents while the replay runs (it listens on a Ray node's address), as vcemu up "
                   "--token-file does")
    add_agent_spares(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--out", default="results/replay",
                   help="results go to a new directory under OUT (default %(default)s)")
    a = p.parse_args(list(argv))
    if a.ray is not None and a.agents != 1:  # as vcemu up --ray refuses it
        p.error("argument --agents: not with --ray (each emulated host is its own agent actor)")
    if a.agents > a.hosts:
        p.error(f"argument --agents: must be at most --hosts ({a.hosts}), got {a.agents}")
    if a.cpus_per_host is not None:  # one value: a number, as before (config.json); one per host: their texts
        if a.ray is not None and len(a.cpus_per_host) > 1:
            p.error(f"argument --cpus-per-host: with --ray give one value for every host, got {len(a.cpus_per_host)}")
        try:
            per_host("--cpus-per-host", a.cpus_per_host, a.hosts)
        except ValueError as exc:
            p.error(str(exc))
        if len(a.cpus_per_host) == 1:
            a.cpus_per_host = float(a.cpus_per_host[0])
    if a.ray is None:
        from coordinator.servers import hosts_refusal

        if (why := hosts_refusal(a.hosts, a.cpus_per_host)) is not None:
            p.error(f"argument {why}")
    for flag, value in (("--bind", a.bind), ("--token-file", a.token_file)):
        if a.ray is None and value is not None:
            p.error(f"argument {flag}: only with --ray (a local cluster listens on 127.0.0.1)")
    if a.ray is None:  # (a Ray node's memory is not this machine's: the least only, as vcemu up --ray checks it)
        from vcemu.sizes import host_memory_refusal, parse_size

        why = host_memory_refusal(parse_size(a.mem_per_host))
        if why is not None:
            p.error(f"argument --mem-per-host: {why}")
    return a


def load_segment(a: argparse.Namespace) -> tuple[list[Any], int, JobFile]:
    """The jobs to replay, submit times from 0; how many were dropped for being wider than the cluster (of those
    submitted before the last one replayed: the jobs the replay passed over); and the file they came from.

    What is left must be what the live engine accepts (:meth:`JobSpec.validate` on the hosts, and the policy's
    ``refuse`` hook): :class:`workloads.jobfile.JobFileError` naming the line otherwise, as ``simulate`` refuses it,
    since the engine would refuse it only at its arrival, in the middle of the live run."""
    from coordinator.policies import get_policy
    from workloads.jobfile import check_jobs, load_jobs, shown

    source = load_jobs(a.trace, segment=a.segment)
    jobs = sorted(source.jobs, key=lambda j: (j.submit_time, j.id))
    if not jobs:
        raise ValueError(f"no jobs in {shown(a.trace)}" if a.segment is None
                         else f"no jobs in week {a.segment} of {shown(a.trace)}")
    fit: list[JobSpec] = []
    dropped = 0
    for j in jobs:
        if len(fit) == a.max_jobs:
            break
        if j.tasks > a.hosts:
            dropped += 1
        else:
            fit.append(j)
    if not fit:
        raise ValueError(f"{a.trace}: no job fits on {a.hosts} hosts")
    single_core(fit, a.cpus_per_host)
    check_jobs(source, fit, replay_hosts(a.hosts, a.cpus_per_host), getattr(get_policy(a.policy), "refuse", None),
               what="to replay")
    t0 = fit[0].submit_time
    return [replace(j, submit_time=j.submit_time - t0) for j in fit], dropped, source


def replay_hosts(hosts: int, cpus_per_host: float | Sequence[str] | None) -> tuple[Any, ...]:
    """The hosts as the live engine will see them, for the checks before the run: ``hosts`` equal ones, or with one
    value per host each its cores over the largest's (the largest host is "a host", as ``vcemu up`` has it)."""
    from coordinator.experiments import homogeneous_hosts
    from coordinator.model import Host

    if not isinstance(cpus_per_host, list | tuple):
        return tuple(homogeneous_hosts(hosts))
    cores = [float(c) for c in cpus_per_host]
    return tuple(Host(f"h{i}", cpu=c / max(cores)) for i, c in enumerate(cores))


def single_core(specs: Sequence[JobSpec], cpus_per_host: float | Sequence[str] | None) -> None:
    """ValueError naming ``--cpus-per-host`` and the first job whose need on hosts of that many cores is more than one
    core, for a workload whose task is a single process (all but ``modeled``): the agent refuses such a start, and the
    job fails at its arrival (a replay at ``--cpus-per-host 2`` had two of its three jobs fail so, 1 ms in)."""
    from node_agent.agent import SHARE_EPS
    from workloads import modeled

    if isinstance(cpus_per_host, list | tuple):  # one per host: a task may be placed on the largest
        cpus_per_host = max(float(c) for c in cpus_per_host)
    if cpus_per_host is None or cpus_per_host <= 1.0:
        return
    over = [s for s in specs if s.workload != modeled.NAME and s.cpu_need * cpus_per_host > 1.0 + SHARE_EPS]
    if over:
        s = over[0]
        others = f" ({len(over)} jobs in all)" if len(over) > 1 else ""
        most = 1 / max(x.cpu_need for x in over)
        raise ValueError(f"--cpus-per-host: job {s.id}'s CPU need {s.cpu_need:g} is {s.cpu_need * cpus_per_host:.6g} "
                         f"cores on hosts of {cpus_per_host:g}, but its workload ({s.workload}) is a single process, "
                         f"which uses at most 1 core{others}: give --cpus-per-host {_num(_down(most))} or less")


def replay_main(argv: Sequence[str]) -> int:
    """``vcemu replay``. Ctrl-C or SIGTERM at any point, from the first import on (numpy/numba load while the
    policy is looked up, then the trace is read), ends it with one line and exit status 130: the cluster, once
    started, is stopped first (by start_local_cluster, or the finally around the live run)."""
    from coordinator.servers import interrupted

    stage: dict[str, bool] = {"cluster": False}
    try:
        a = _parse(argv)
        with signals_interrupt():
            return _replay(a, stage)
    except KeyboardInterrupt:
        return interrupted("vcemu replay: interrupted", cluster=stage["cluster"])


def _trace_error(a: argparse.Namespace, exc: OSError) -> str:
    """A trace that cannot be read, named as the ``trace`` argument (as argparse names a bad option)."""
    from workloads.jobfile import unreadable

    return f"vcemu replay: error: trace: {unreadable(a.trace, exc)}"


def _replay(a: argparse.Namespace, stage: dict[str, bool]) -> int:
    """The replay; ``stage["cluster"]`` is set once its cluster begins to start (for the interrupted line)."""
    from coordinator.servers import coordinator_log, start_local_cluster, stop_agents
    from workloads.jobfile import JobFileError

    try:
        a.policy = canonical_name(a.policy)  # an unknown name is refused before anything starts; the one name
        if (why := thrashing(a.policy, a.penalty)) is not None:  # (the simulation's penalty; the live run's costs)
            print(f"vcemu replay: warning: the simulation beside the live run: {why}", file=sys.stderr)
        try:
            specs, dropped, source = load_segment(a)
        except OSError as exc:
            print(_trace_error(a, exc), file=sys.stderr)
            return 2
    except (PolicyNameError, JobFileError, OSError, ValueError) as exc:
        print(f"vcemu replay: {exc}", file=sys.stderr)
        return 2
    if a.ray is not None:
        return _replay_on_ray(a, specs, dropped, source, stage)
    try:  # last: a bad trace leaves no folder; before the live run: its results must have somewhere to go
        d, agent_log, wall0 = _run_dir(a, source)
    except (OSError, ValueError) as exc:  # (--out not writable)
        print(f"vcemu replay: {exc}", file=sys.stderr)
        return 2
    with agent_log, coordinator_log(d):
        stage["cluster"] = True
        try:
            server, procs = start_local_cluster(
                a.policy, a.hosts, a.agents, a.cpus_per_host, a.mem_per_host, 0, None, a.no_cgroups,
                agent_prefix="replay", agent_log=agent_log, compression=a.compress, agent_spares=a.agent_spares,
                turn_budget_s=None)  # (every stimulus on time: the run is compared with its simulation)
        except SystemExit as exc:  # the agents did not come up: the reason, with their log's last lines
            print(f"vcemu replay: {exc}", file=sys.stderr)
            return 1
        return _replay_live(a, specs, dropped, server, lambda: stop_agents(procs), d, wall0, source.provenance())


def _run_dir(a: argparse.Namespace, source: JobFile) -> tuple[Path, IO[bytes], float]:
    """The run's folder and its open agents.log (:func:`coordinator.servers.live_run_dir`), and the run's start
    (``time.monotonic()``); the SWF conversion's drops said (config.json records them)."""
    from coordinator.servers import live_run_dir

    wall0, started = time.monotonic(), time.time()
    d, agent_log = live_run_dir(a.out, f"{a.policy}-k{a.compress:g}", started)
    note = source.drop_note()
    if note is not None:
        print(f"vcemu replay: {a.trace}: {note}", file=sys.stderr)
    return d, agent_log, wall0


def _replay_on_ray(a: argparse.Namespace, specs: list[JobSpec], dropped: int, source: JobFile,
                   stage: dict[str, bool]) -> int:
    """The replay with its agents as actors on the Ray cluster at ``--ray`` (``vcemu up --ray``'s placement and
    start-up, :func:`coordinator.backends.ray.cluster.start_on_ray`), the coordinator in this process. Connected
    before the run's folder is made: an address that does not answer leaves none."""
    from coordinator.backends.ray.cluster import RayStartError, placement_table, start_on_ray
    from coordinator.raycluster import RayUnavailable, connect
    from coordinator.servers import coordinator_log
    from vcemu.cliargs import read_token
    from vcemu.sizes import parse_size

    # (the token read before Ray: a bad file ends it; no turn budget: every stimulus on time, as in its simulation)
    options = {"compression": a.compress, "token": read_token(a.token_file), "turn_budget_s": None}
    try:  # (connect keeps replay_main's SIGTERM handler, which unwinds through the cleanup, across ray.init)
        ctx = connect(a.ray)
    except RayUnavailable as exc:
        print(f"vcemu replay: {exc}", file=sys.stderr)
        return 2
    with ctx:
        try:
            d, agent_log, wall0 = _run_dir(a, source)
        except (OSError, ValueError) as exc:  # (--out not writable)
            print(f"vcemu replay: {exc}", file=sys.stderr)
            return 2
        with agent_log:
            agent_log.write(b"vcemu replay: the agents run as Ray actors, which log on their own nodes (Ray's session "
                            b"directory, /tmp/ray/session_latest/logs/ by default)\n")
        stage["cluster"] = True
        with coordinator_log(d):
            try:
                server, agents, infos = start_on_ray(
                    ctx, a.policy, a.hosts, a.cpus_per_host, parse_size(a.mem_per_host), bind=a.bind,
                    no_cgroups=a.no_cgroups, options=options, tag="replay",
                    spares=a.agent_spares or 0, note=lambda line: print(f"vcemu replay: {line}", file=sys.stderr))
            except RayStartError as exc:
                print(f"vcemu replay: {exc}", file=sys.stderr)
                if exc.status == 2:  # a bad setting: nothing started, and no folder is left (as for a bad trace)
                    shutil.rmtree(d, ignore_errors=True)
                return exc.status
            try:
                nodes = len({p.node.node_id for p in agents.placements})
                token = ", it takes the --token-file token only" if a.token_file else ""
                follow = (f"VCEMU_TOKEN_FILE={a.token_file} " if a.token_file else "") + \
                    f"vcemu jobs --coordinator {server.address}"
                placed = (f"vcemu replay: {a.hosts} hosts on {nodes} Ray nodes (Ray {ctx.ray_version}, auth "
                          f"{ctx.auth_mode}):\n{placement_table(infos, agents.placements)}\n"
                          f"vcemu replay: coordinator on {server.address}{token} ({follow} follows the run)")
                print(placed, file=sys.stderr, flush=True)
                with open(d / "agents.log", "a", encoding="utf-8") as log:  # where the run was, with its results
                    log.write(placed + "\n")
            except BaseException:  # (Ctrl-C, a closed stderr): _replay_live stops the cluster from its first line on
                _stop_cluster(server, agents.stop)
                raise
            return _replay_live(a, specs, dropped, server, agents.stop, d, wall0, source.provenance())


def _stop_cluster(server: Any, stop: Callable[[], None]) -> None:
    """Stop the coordinator, then the agents (``stop``) even if that raised; a second Ctrl-C must not cut the
    stopping of the agents short (their tasks and cgroups would be left)."""
    with signals_deferred():
        try:
            server.stop()
        finally:
            stop()


def _snapshot(history: History) -> History:
    """A copy of a live run's history (taken under the engine's lock: the coordinator goes on until stopped)."""
    return History(dict(history.specs), list(history.transitions), list(history.decision_seconds))


def close_at(history: History, cutoff: float) -> History:
    """The history of a live run cut off at ``cutoff`` (live clock), as scored: what happened after it dropped,
    and every job not finished by then cancelled at it. The span (:func:`coordinator.metrics.trace_span`) then
    ends at the cut-off, and the CPU still allocated is integrated up to it and no further: utilisation <= 1. (The
    span used to end at the last completion while the jobs still running added used time after it: 1.157.) The
    jobs cancelled here do not count as completed."""
    kept = [t for t in history.transitions if t.time <= cutoff]
    cutoff = max([cutoff, *(t.time for t in kept)])
    last: dict[str, Transition] = {}
    for t in kept:
        last[t.job] = t
    ends = [Transition(cutoff, job, t.dst, JobState.CANCELLED, t.hosts, 0.0, "cut off")
            for job, t in last.items() if not t.dst.finished]
    return History(dict(history.specs), kept + ends, list(history.decision_seconds))


def failed_live(history: History) -> dict[str, str]:
    """The jobs that failed in the live run, each with the reason the engine recorded (a start refused by its agent,
    a task that exited with an error, ...), in the order they failed: not compared with the simulation
    (:func:`compared`), and said, where the table's ``completed`` alone gave no reason."""
    return {t.job: t.reason for t in history.transitions if t.dst is JobState.FAILED}


#: How many failed jobs :func:`failed_line` names (metrics.json's ``failed_live`` has them all).
FAILED_SHOWN = 3


def failed_line(failed: dict[str, str]) -> str:
    shown = "; ".join(f"{job}: {reason or 'no reason recorded'}" for job, reason in list(failed.items())[:FAILED_SHOWN])
    more = f"; and {len(failed) - FAILED_SHOWN} more (metrics.json's failed_live)" if len(failed) > FAILED_SHOWN else ""
    return f"vcemu replay: {_jobs(len(failed))} failed in the live run: {shown}{more}"


def live_overhead(history: History, compress: float) -> tuple[float, str]:
    """The live run's start-up overhead per job in trace seconds, and how it was found: the median, over the jobs
    that ran at one share from start to end (one start, then done: no pause, move or new share), of their run time
    less the time their work takes at that share (work / yield); else (no such job) K x :data:`STARTUP_S`, an
    estimate."""
    runs: dict[str, list[Transition]] = {}
    for t in history.transitions:
        runs.setdefault(t.job, []).append(t)
    extra = []
    for job, ts in runs.items():
        running = [t for t in ts if t.dst is JobState.RUNNING]
        end = next((t for t in ts if t.dst.finished), None)
        spec = history.specs.get(job)
        if spec is None or end is None or end.dst is not JobState.DONE or len(running) != 1 or running[0].cpu <= 0:
            continue
        extra.append(end.time - running[0].time - spec.work * spec.cpu_need / running[0].cpu)
    if extra:
        return max(0.0, statistics.median(extra)), f"measured on {len(extra)} jobs"
    return compress * STARTUP_S, f"estimated as {compress:g} x {STARTUP_S:g} s"


#: The median pace (:func:`live_pace`) above which the live run is warned to have run slower than its shares say.
PACE_WARN = 1.10


@dataclass
class _Running:
    """What the done jobs of a history ran (:func:`_ran`): the work each one's recorded shares were worth (the
    integral of its yield, share / need, over the time it was running, in the transitions' trace seconds), its yield
    at its first start, the sum of its yields at its restarts (a resume, or a move to other hosts: its tasks'
    processes started again from their checkpoint), and the number of restarts of every job."""

    done: list[str]
    worth: dict[str, float]
    at_start: dict[str, float]
    at_restarts: dict[str, float]
    restarts: int


def _ran(history: History) -> _Running:
    current: dict[str, tuple[float, float]] = {}  # job -> (since, yield) while running
    ran = _Running([], {}, {}, {}, 0)
    hosts: dict[str, tuple[str, ...]] = {}
    for t in history.transitions:
        spec = history.specs.get(t.job)
        if spec is None or spec.work <= 0:
            continue
        was = current.pop(t.job, None)
        if was is not None:
            ran.worth[t.job] = ran.worth.get(t.job, 0.0) + was[1] * (t.time - was[0])
        if t.dst is JobState.RUNNING:
            y = t.cpu / spec.cpu_need
            current[t.job] = (t.time, y)
            if t.src is JobState.PENDING and t.job not in ran.at_start:
                ran.at_start[t.job] = y
            elif t.src is JobState.PAUSED or (t.src is JobState.RUNNING and t.hosts != hosts.get(t.job)):
                ran.at_restarts[t.job] = ran.at_restarts.get(t.job, 0.0) + y
                ran.restarts += 1
            hosts[t.job] = t.hosts
        elif t.dst is JobState.DONE:
            ran.done.append(t.job)
    return ran


def live_pace(history: History) -> dict[str, Any]:
    """How fast the live run's jobs ran next to what their shares say: for each job done, the work its recorded
    shares were worth (:func:`_ran`) over its work. The model's own runs give 1 (the simulator credits exactly that,
    with no penalty); above 1 the job's tasks got less CPU than their shares or lost time the model does not have
    (start-ups and the restarts of pauses and moves, which the model makes free; a machine too busy to give the
    agents' cgroups their quotas). ``jobs``, ``median`` and ``max`` over the jobs done (None where none is). It needs
    nothing but the history, so it covers the jobs :func:`live_overhead` cannot (a job whose share changed): in a
    review's replays of 24 jobs at --compress 20 on this project's 2-core VM the median was 1.03-1.05 under FCFS and
    EASY (load 2-3) and 1.48 under DYNMCB8 (load 12, another user's tests beside it), whose live span was then 46%
    longer than the simulation's."""
    ran = _ran(history)
    ratios = [ran.worth.get(job, 0.0) / history.specs[job].work for job in ran.done]
    if not ratios:
        return {"jobs": 0, "median": None, "max": None}
    return {"jobs": len(ratios), "median": statistics.median(ratios), "max": max(ratios)}


def restart_cost(history: History) -> dict[str, Any]:
    """The live run's cost of a start and of a restart (a resume, or a move to other hosts: a task's process started
    again there from its checkpoint), in trace seconds at the job's share, fitted to what its done jobs lost: each
    one's work minus what its recorded shares were worth (:func:`_ran`), taken as ``startup`` x its yield at
    its start plus ``penalty`` x the sum of its yields at its restarts (least squares, neither below 0). The
    simulation's ``--penalty`` is the second, charged at every resume and migration (001 Sec. IV-A), and 0 by
    default: a review's DYNMCB8 replays, whose jobs were paused and moved about five times each, were 45-83% from
    their simulation per job at penalty 0, against a noise floor of 6-10%, and 8-13% at the penalty such a fit gives.
    ``restarts``: how many there were; ``penalty`` None where there was none (nothing to fit it to). A machine too
    busy to give the tasks their shares shows as a dearer start and restart too: the fit takes all of what the jobs
    lost."""
    ran = _ran(history)
    rows = [(ran.at_start.get(j, 0.0), ran.at_restarts.get(j, 0.0), ran.worth.get(j, 0.0) - history.specs[j].work)
            for j in ran.done]
    ss = sum(a * a for a, _, _ in rows)
    rr = sum(r * r for _, r, _ in rows)
    sr = sum(a * r for a, r, _ in rows)
    sl = sum(a * lost for a, _, lost in rows)
    rl = sum(r * lost for _, r, lost in rows)
    startup: float | None = None
    penalty: float | None = None
    det = ss * rr - sr * sr
    if ss > 0 and rr > 0 and det > 1e-9 * ss * rr:
        startup, penalty = (sl * rr - rl * sr) / det, (rl * ss - sl * sr) / det
        if penalty < 0:  # (each clamped at 0, the other fitted alone)
            startup, penalty = max(0.0, sl / ss), 0.0
        elif startup < 0:
            startup, penalty = 0.0, max(0.0, rl / rr)
    elif rr > 0:  # (every job's start and restarts in one proportion: the restarts alone)
        penalty = max(0.0, rl / rr)
    elif ss > 0:
        startup = max(0.0, sl / ss)
    return {"jobs": len(rows), "restarts": ran.restarts, "startup_s": startup, "penalty_s": penalty}


def at_live_costs(specs: Sequence[JobSpec], policy: str, hosts: Sequence[Any], live: History,
                  live_r: dict[str, JobResult], overhead: float) -> dict[str, Any]:
    """:func:`restart_cost` of the live run and, where it had restarts, the segment simulated again at that penalty
    and compared with the live run job by job (:func:`per_job`, under ``per_job``): the policy under the costs the
    live run paid, beside the simulation at ``--penalty``. A live run far from its simulation but close to this one
    differs by what its restarts cost, not by its decisions."""
    from coordinator.experiments import simulate
    from coordinator.metrics import job_results

    costs = restart_cost(live)
    if not costs["restarts"] or costs["penalty_s"] is None:
        return costs
    try:
        again = simulate(specs, policy, hosts, costs["penalty_s"])
    except Exception as exc:  # (it ran at --penalty already: a failure here is told, not fatal)
        costs["failed"] = f"{type(exc).__name__}: {exc}"
        return costs
    costs["per_job"] = per_job(specs, live_r, {r.job: r for r in job_results(again)}, overhead)
    return costs


def pace_warning(pace: dict[str, Any]) -> str | None:
    """The warning that the live run's jobs ran slower than their shares say (:func:`live_pace`'s median over
    :data:`PACE_WARN`); None if not."""
    if pace["median"] is None or pace["median"] <= PACE_WARN:
        return None
    return (f"vcemu replay: warning: the live jobs took a median of {pace['median']:.2f} times the time their shares "
            f"give (max {pace['max']:.2f}; the simulation: 1.00): their tasks got less CPU than their shares, or "
            "lost it to start-ups and the restarts of pauses and moves, which the simulation does not charge "
            "(--penalty does); the live column is slowed by that, not only by the policy (metrics.json has the "
            "machine's load at the start and the end, and the simulation at the live run's fitted restart cost)")


def expected_wall(sim_end: float, compress: float) -> float:
    """The live run's expected wall seconds: the simulated end at ``compress``, after the first arrival's second of
    real time (start-ups and the live run's other costs make it somewhat longer)."""
    return 1.0 + sim_end / compress


def timeout_note(sim_end: float, compress: float, timeout: float, median_work: float) -> str | None:
    """The warning, before the live run starts, that its simulation ends past ``--timeout`` at ``--compress``, or
    within a fifth of it (the live run adds start-ups and its other costs: it may then be cut off), with the
    --timeout that would let it end, and the --compress too unless its start-ups would then weigh more than
    :data:`OVERHEAD_WARN` of the jobs' median work (``median_work``; estimated as K x :data:`STARTUP_S`, as
    :func:`overhead_warning` does with no measurement); both with a quarter's margin. None if it fits with that
    margin. A cut-off run still scores what it ran (the module docstring): this says so before the wait, not after
    it (an HPC2N week's first 20 jobs span 114 trace hours: at the default 60x, nearly 2 hours)."""
    wall = expected_wall(sim_end, compress)
    if wall <= 0.8 * timeout:
        return None
    room = 0.8 * timeout - 1.0
    k = _up(sim_end / room) if room > 0 else None
    if k is not None and k * STARTUP_S > OVERHEAD_WARN * median_work:
        k = None  # the live column would measure start-ups, not the policy
    t = _up(1.25 * wall)
    either = f"--compress {_num(k)} or " if k is not None else ""
    where = ("past --timeout {} s, where it will be cut off" if wall > timeout
             else "close to --timeout {} s: it may be cut off").format(_num(timeout))
    return (f"vcemu replay: warning: the simulated run ends at {sim_end:,.0f} trace s ({_span(sim_end)}): about "
            f"{_span(wall)} of live run at --compress {_num(compress)}, {where}; {either}--timeout {_num(t)} lets "
            "it end")


def _num(x: float) -> str:
    """An option's value as typed: whole from 100 up (``%g`` would print 1e+06), else ``%g``."""
    return f"{x:.0f}" if x >= 100 else f"{x:g}"


def _up(x: float) -> float:
    """``x`` rounded up to two significant digits (a suggested option value)."""
    return x if x <= 0 else _two_digits(x, math.ceil)


def _two_digits(x: float, rounding: Callable[[float], int]) -> float:
    """``x`` (> 0) rounded to two significant digits by ``rounding`` (math.ceil or math.floor), with 1e-9 of slack on
    ``x / step`` (10 to 100), so that a float error such as 860.00000000001 stays 860."""
    step = 10.0 ** (math.floor(math.log10(x)) - 1)
    slack = -1e-9 if rounding is math.ceil else 1e-9
    return rounding(x / step + slack) * step


def _span(s: float) -> str:
    """A duration for a person: seconds, minutes or hours."""
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


class PlanTimes:
    """Wall seconds each of the live run's plans took to carry out: from the end of its decision (the engine's
    decision listeners) to the end of its application (its plan listeners), both in the engine's loop, under its
    lock. The agents' process stops and starts are in it: a DYNMCB8 repacking that pauses, moves and resumes a few
    multi-task jobs took up to 3 s on 4 hosts of this project's 2-core VM (a median of 0.76 s over 341 plans at
    --compress 600), while the live clock ran on (the jobs it stops do not progress meanwhile, and at --compress K
    each second is K trace seconds). A decision with no action has no plan to carry out and is not counted (its
    mark is replaced by the next decision's). (``Engine.apply``, a plan from outside the loop that ``replay`` does
    not make, would be timed from the last decision.)"""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self.seconds: list[float] = []
        self._clock = clock
        self._t0: float | None = None

    def decided(self, _elapsed: float) -> None:
        self._t0 = self._clock()

    def applied(self) -> None:
        if self._t0 is not None:
            self.seconds.append(self._clock() - self._t0)
            self._t0 = None

    def summary(self, wall: float) -> dict[str, Any]:
        """Count, median and 99th percentile (wall seconds; :func:`coordinator.metrics.percentile`, as the decision
        times beside them), and their sum's share of the run's ``wall`` seconds."""
        from coordinator.metrics import percentile

        xs = self.seconds
        if not xs:
            return {"count": 0, "median_s": None, "p99_s": None, "wall_share": 0.0}
        return {"count": len(xs), "median_s": percentile(xs, 50), "p99_s": percentile(xs, 99),
                "wall_share": sum(xs) / wall if wall > 0 else 0.0}


def plans_warning(plans: dict[str, Any], compress: float, sim_end: float, timeout: float) -> str | None:
    """The warning that carrying out the live run's plans took over :data:`PLANS_WARN` of its wall time (of at
    least :data:`PLANS_WARN_MIN` plans), with the --compress that would bring it near a tenth (the plans per wall
    second, and so the share, scale with K), and the --timeout that run would need when the simulation's end
    (``sim_end``) at that K is not well within ``timeout`` (as :func:`timeout_note` reckons it); None if not."""
    share = plans["wall_share"]
    if share <= PLANS_WARN or plans["count"] < PLANS_WARN_MIN:
        return None
    better = _down(compress * 0.1 / share)
    wall = expected_wall(sim_end, better)
    longer = f" (with --timeout {_num(_up(1.25 * wall))}: about {_span(wall)})" if wall > 0.8 * timeout else ""
    return (f"vcemu replay: warning: carrying out the policy's {plans['count']} plans took {100 * share:.0f}% of the "
            f"live run's wall time (median {plans['median_s']:.2f} s, {plans['median_s'] * compress:,.0f} trace s at "
            f"--compress {_num(compress)}), while the jobs they stop and start do not progress: the live column "
            f"measures the agents' process stops and starts as much as the policy; --compress {_num(better)} or less "
            f"brings it near 10%{longer}")


def _down(x: float) -> float:
    """``x`` rounded down to two significant digits (a suggested option value)."""
    return x if x <= 0 else _two_digits(x, math.floor)


def overhead_warning(overhead: float, how: str, specs: Sequence[JobSpec], compress: float) -> str | None:
    """The warning that the live run's start-up overhead (trace seconds per job) is large next to the jobs' median
    work (over :data:`OVERHEAD_WARN`), with the --compress that would keep it under that; None if it is not."""
    work = statistics.median(s.work for s in specs)
    if work <= 0 or overhead <= OVERHEAD_WARN * work:
        return None
    real = overhead / compress  # real seconds: the same at any K
    better = _down(OVERHEAD_WARN * work / real) if real > 0 else compress
    return (f"vcemu replay: warning: the live run's start-up overhead is {overhead:.0f} trace s per job ({how}; "
            f"{real:.2f} s real x --compress {compress:g}), {100 * overhead / work:.0f}% of the jobs' median work "
            f"({work:.0f} s): the live column is slowed by it next to the simulation; --compress {_num(better)} or "
            f"less keeps it under {100 * OVERHEAD_WARN:.0f}%")


def _replay_live(a: argparse.Namespace, specs: list[JobSpec], dropped: int, server, stop: Callable[[], None],
                 d: Path, wall0: float, source: dict[str, Any] | None = None) -> int:
    """The live replay on the started cluster, its simulation, and the results in ``d`` (``source``: what
    config.json records of the trace, :meth:`workloads.jobfile.JobFile.provenance`); ``stop`` stops the cluster's
    agents, after the coordinator (from here on, whatever happens: a Ctrl-C in the imports too)."""
    try:
        from tqdm import tqdm

        from coordinator.experiments import busy_machine_note, follow_jobs, simulate
        from coordinator.metrics import job_results

        # Where the run's coordinator listens, for `vcemu jobs` or `status` while it runs (it was said nowhere).
        logging.getLogger("vcemu.replay").info("coordinator on %s (%s)", server.address, a.policy)
        seen = server.loop_error_count  # (the exceptions the engine loop survived; see the module docstring)
        # The machine's load beside the run (review: replays of the same decisions were 36% and 63% from their
        # simulation at loads of 1-5 and 12-13, other users' work on the same cores taking the tasks' CPU).
        load = [os.getloadavg()[0]]
        hosts = list(server.engine.hosts)  # the simulation's cluster: the live one as it started (an agent lost
        # during the run takes its hosts out of the engine's list)
        mode = next(iter(server.backend.agents.values())).mode
        # The simulation first (deterministic; seconds for a thousand jobs, with a bar of its own): its end says how
        # long the live run should take, which is told before it starts (and close to or past --timeout, what
        # would let it end) and shown as it goes.
        sim_bar = tqdm(total=len(specs), desc="simulation", unit="job", file=sys.stderr, disable=a.json or None)
        try:
            sim = simulate(specs, a.policy, hosts, a.penalty,  # always the whole segment, trace seconds from 0
                           on_finish=lambda: sim_bar.update(1))
        except Exception as exc:  # (the trace's checks passed: a policy's or the engine's failure)
            print(f"vcemu replay: the simulation failed: {type(exc).__name__}: {exc}; nothing was replayed, and "
                  f"the run's folder {d} keeps the agents' and the coordinator's logs", file=sys.stderr)
            return 1
        finally:
            sim_bar.close()
        sim_end = trace_span(sim)  # its end: the segment's first submission is at 0
        note = timeout_note(sim_end, a.compress, a.timeout, statistics.median(s.work for s in specs))
        if note is not None:
            print(note, file=sys.stderr)
        plan_times = PlanTimes()
        with server.engine.lock:  # (the engine's loop reads its listener lists)
            server.engine.decision_listeners.append(plan_times.decided)
            server.engine.plan_listeners.append(plan_times.applied)
        origin = server.backend.now() + 1.0 * a.compress  # a second of real time for the first arrival
        arrivals = [replace(j, submit_time=j.submit_time + origin) for j in specs]
        server.engine.schedule_arrivals(arrivals)
        server.backend.wake()
        bar = tqdm(total=len(arrivals), desc="replay", unit="job", file=sys.stderr, disable=a.json or None)
        done = follow_jobs(server.engine, bar,
                           lambda finished: finished == len(arrivals) or server.loop_error_count > seen,
                           time.monotonic() + a.timeout,
                           note=lambda: f"trace {_span(max(0.0, server.backend.now() - origin))} of "
                                        f"~{_span(sim_end)}")
        with server.engine.lock:  # the run as it was at the cut-off (stopping it records more)
            cutoff = server.backend.now()
            live = _snapshot(server.engine.history)
            plans = plan_times.summary((cutoff - origin) / a.compress)  # wall seconds from the first arrival
        timed_out = done < len(arrivals)
        load.append(os.getloadavg()[0])
    finally:
        _stop_cluster(server, stop)
    if server.loop_error_count > seen:
        new = server.loop_error_count - seen
        errors = list(server.loop_errors)
        first = errors[max(0, len(errors) - new)]  # the first of this run's that is still kept
        also = f" (and {new - 1} more)" if new > 1 else ""
        print(f"vcemu replay: the live run failed: engine step failed: {first}{also}; the "
              f"cluster is stopped, and the run's folder {d} keeps the agents' and the coordinator's logs",
              file=sys.stderr)
        return 1
    capacity = sum(h.cpu for h in hosts)
    live_m, sim_m = score(close_at(live, cutoff), capacity, a.host_memory_gb), score(sim, capacity, a.host_memory_gb)
    # Both columns count the segment's jobs (a cut-off live run has not seen those not yet arrived).
    live_m["jobs"] = len(specs)
    live_m["pmtn_per_job"] = live_m["preemptions"] / len(specs)
    live_m["mig_per_job"] = live_m["migrations"] / len(specs)
    live_r = {r.job: _shifted(r, origin) for r in job_results(live)}
    sim_r = {r.job: r for r in job_results(sim)}
    if timed_out:
        print(f"vcemu replay: the live run timed out after {a.timeout:g} s (--timeout): {live_m['completed']} of "
              f"{len(specs)} jobs completed ({len(live.specs)} arrived); the live column covers the run up to the "
              f"cut-off, the simulated one the whole segment", file=sys.stderr)
    failed = failed_live(live)
    if failed:
        print(failed_line(failed), file=sys.stderr)
    overhead, how = live_overhead(live, a.compress)
    pace = live_pace(live)
    costs = at_live_costs(specs, a.policy, hosts, live, live_r, overhead)
    busy = busy_machine_note(load)
    for warning in (overhead_warning(overhead, how, specs, a.compress),
                    plans_warning(plans, a.compress, sim_end, a.timeout), pace_warning(pace),
                    busy and f"vcemu replay: warning: {busy}"):
        if warning is not None:
            print(warning, file=sys.stderr)
    out = {
        "trace": a.trace, "segment": a.segment, "policy": a.policy, "compress": a.compress, "hosts": a.hosts,
        "jobs": len(specs), "dropped_too_wide": dropped, "mode": mode, "timed_out": timed_out,
        "arrived": len(live.specs), "startup_overhead_s": overhead, "startup_overhead_from": how,
        "live_pace": pace, "sim_at_live_restart_cost": costs, "load_1m_start_end": load,
        "sim_end_s": sim_end, "expected_wall_s": expected_wall(sim_end, a.compress), "live_plans": plans,
        "wall_s": round(time.monotonic() - wall0, 1), "live": live_m, "sim": sim_m,
        "per_job": per_job(specs, live_r, sim_r, overhead), "failed_live": failed,
    }
    try:
        path: Path | str = _write(a, out, d, source, jobs_csv(specs, live_r, sim_r),
                                  lambda f: stretch_plot(specs, live_r, sim_r, out["per_job"], f))
    except OSError as exc:  # e.g. --out removed during the run: the results are still printed below
        print(f"vcemu replay: --out {a.out}: cannot write results: {exc.strerror or exc}", file=sys.stderr)
        path, write_failed = "not written", True
    else:
        write_failed = False
    if a.json:
        print(json.dumps(out))
    else:
        cut = f"; TIMED OUT after {a.timeout:g} s, live: {live_m['completed']} completed" if timed_out else ""
        where = f" of the Ray cluster at {a.ray}" if a.ray is not None else ""
        print(f"vcemu replay: {len(specs)} jobs of {a.trace} on {a.hosts} hosts{where} ({mode}), {a.policy}, "
              f"compressed {a.compress:g}x, {out['wall_s']} s wall; {dropped} jobs dropped (wider than the cluster)"
              f"{cut}")
        print(f"{'metric':<20}{'live':>14}{'simulated':>14}")
        for k in live_m:
            lv, sv = live_m[k], sim_m[k]
            print(f"{k:<20}{_f(lv):>14}{_f(sv):>14}")
        print(per_job_line(out["per_job"]))
        if costs.get("per_job", {}).get("jobs"):
            print(f"simulated again at the live run's restart cost ({costs['penalty_s']:.1f} trace s a resume or move, "
                  f"fitted to {costs['restarts']} restarts; --penalty {a.penalty:g} above): "
                  + per_job_line(costs["per_job"]).removeprefix("per job, live against simulated stretch: "))
        print(f"results: {path}")
    return 1 if timed_out or write_failed or live_m["completed"] < len(specs) else 0


def compared(specs: Sequence[JobSpec], live: dict[str, JobResult], sim: dict[str, JobResult]
             ) -> Iterator[tuple[JobSpec, JobResult, JobResult, float]]:
    """The jobs of ``specs`` done both live and in the simulation (a failed or cancelled one is not compared), in
    order, each with its two results and the relative difference of its live stretch from its simulated one
    (:func:`coordinator.metrics.stretch_difference`): jobs.csv's ``rel_diff``, :func:`per_job`'s figures and
    :func:`stretch_plot`'s points."""
    from coordinator.metrics import stretch_difference

    for s in specs:
        lr, sr = live.get(s.id), sim.get(s.id)
        if (diff := stretch_difference(lr, sr)) is not None:
            assert lr is not None and sr is not None
            yield s, lr, sr, diff


def per_job(specs: Sequence[JobSpec], live: dict[str, JobResult], sim: dict[str, JobResult],
            overhead: float) -> dict[str, Any]:
    """How far each job's live stretch is from its simulated one (:func:`coordinator.metrics.relative_difference`, as
    jobs.csv's ``rel_diff`` and ``vcemu demo``'s figure), over the jobs done both ways (:func:`compared`): how many,
    the median and the largest; and the same over the "long" ones among them, whose work is at least
    ``long_work_s``, 1 / :data:`OVERHEAD_WARN` times the live run's start-up overhead per job (``overhead``, trace
    seconds: :func:`live_overhead`). At --compress K a start-up of a fraction of a real second is K times that in
    trace seconds, the model has none, and a job whose work is a few times that is measured mostly by it: on an
    HPC2N week's first 12 jobs at --compress 100, a job of 3 s of work had a stretch of 21.9 live against 2.5
    simulated, while the 9 jobs of over 20,000 s were within 2.5% of their simulation. The medians are None where no
    job is counted."""
    long_work = overhead / OVERHEAD_WARN
    diffs: list[float] = []
    long: list[float] = []
    signed: list[float] = []  # (live - simulated) / simulated: > 0 where the live job was slower
    long_signed: list[float] = []
    for s, lr, sr, diff in compared(specs, live, sim):
        diffs.append(diff)
        bias = diff if lr.stretch >= sr.stretch else -diff  # (lr.stretch, sr.stretch: done both ways)
        signed.append(bias)
        if s.work >= long_work:
            long.append(diff)
            long_signed.append(bias)

    def median(xs: list[float]) -> float | None:
        return statistics.median(xs) if xs else None

    # The medians of the absolute differences say how far, not which way: a live run whose every job is 10% slower
    # than its simulation (its start-ups, the machine's CPU noise) and one whose jobs are 10% off either way at
    # random read alike. The signed medians tell them apart (review: FCFS and EASY were +10% and +9% on every
    # compared job, a bias, not noise).
    return {"jobs": len(diffs), "median_rel_diff": median(diffs), "max_rel_diff": max(diffs, default=None),
            "median_signed_rel_diff": median(signed),
            "long_work_s": long_work, "long_jobs": len(long), "long_median_rel_diff": median(long),
            "long_max_rel_diff": max(long, default=None), "long_median_signed_rel_diff": median(long_signed)}


def per_job_line(cmp: dict[str, Any]) -> str:
    """:func:`per_job`'s figures in one line for the text output."""
    if not cmp["jobs"]:
        return "per job: no job was done both live and in the simulation"

    def pct(x: float) -> str:
        return f"{100 * x:.1f}%"

    line = (f"per job, live against simulated stretch: a median relative difference of {pct(cmp['median_rel_diff'])} "
            f"(max {pct(cmp['max_rel_diff'])}) over {_jobs(cmp['jobs'])}")
    times = f"{1 / OVERHEAD_WARN:g}x the start-up overhead"
    if cmp["long_jobs"] == cmp["jobs"]:
        return line + f", each of work >= {cmp['long_work_s']:,.0f} trace s ({times})"
    if not cmp["long_jobs"]:
        return line + f"; none has a work of {times} ({cmp['long_work_s']:,.0f} trace s) or more"
    return line + (f"; {pct(cmp['long_median_rel_diff'])} (max {pct(cmp['long_max_rel_diff'])}) over the "
                   f"{_jobs(cmp['long_jobs'])} of work >= {cmp['long_work_s']:,.0f} trace s ({times})")


def _jobs(n: int) -> str:
    return f"{n} job" if n == 1 else f"{n} jobs"


def stretch_plot(specs: Sequence[JobSpec], live: dict[str, JobResult], sim: dict[str, JobResult],
                 cmp: dict[str, Any], path: Path) -> None:
    """``stretch.png``: each job's live stretch against its simulated one (log-log over a range wider than tenfold),
    the diagonal where they agree, the long jobs of :func:`per_job` apart from those whose work is under
    ``long_work_s``; nothing when no job was done both ways (:func:`compared`). A scatter, not ``vcemu demo``'s bars:
    a segment may have hundreds of jobs."""
    from vcemu.outputs import save_figure

    pts = [(sr.stretch, lr.stretch, s.work >= cmp["long_work_s"]) for s, lr, sr, _ in compared(specs, live, sim)]
    if not pts:
        return
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 5))
    try:
        for long, style in ((True, {"marker": "o", "color": "tab:blue"}),
                            (False, {"marker": "o", "facecolors": "none", "edgecolors": "tab:orange"})):
            xs = [p[0] for p in pts if p[2] is long]
            ys = [p[1] for p in pts if p[2] is long]
            if xs:
                what = ">=" if long else "<"
                ax.scatter(xs, ys, label=f"work {what} {cmp['long_work_s']:,.0f} trace s ({_jobs(len(xs))})", **style)
        lo = min(min(p[0], p[1]) for p in pts)
        hi = max(max(p[0], p[1]) for p in pts)
        # (a slope is for linear axes only; two points draw it on log ones, and the slope when every point is one)
        ax.axline((lo, lo), *([(hi, hi)] if hi > lo else []), slope=None if hi > lo else 1.0, color="grey",
                  linewidth=0.8, label="live = simulated")
        if hi > 10 * lo:  # a log scale over a wide range (plain numbers on it); a narrow one reads better linear
            from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

            ax.set_xscale("log")
            ax.set_yscale("log")
            for axis in (ax.xaxis, ax.yaxis):  # 1, 2, 5, 10, 20, ...
                axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
                axis.set_major_formatter(FormatStrFormatter("%g"))
                axis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("simulated stretch (flow time / work)")
        ax.set_ylabel("live stretch")
        title = f"median relative difference {100 * cmp['median_rel_diff']:.1f}%"
        if 0 < cmp["long_jobs"] < cmp["jobs"]:
            title += f", {100 * cmp['long_median_rel_diff']:.1f}% for work >= {cmp['long_work_s']:,.0f} s"
        ax.set_title(f"Live vs simulated stretch per job\n({title})", fontsize="medium")
        ax.legend(fontsize="small")
        fig.tight_layout()
        save_figure(fig, path, dpi=100)
    finally:
        plt.close(fig)


def _shifted(r: JobResult, origin: float) -> JobResult:
    """A live job's result with its times in trace seconds from the segment's first submission."""
    return replace(r, submit=r.submit - origin, start=None if r.start is None else r.start - origin,
                   end=None if r.end is None else r.end - origin)


def jobs_csv(specs: Sequence[JobSpec], live: dict[str, JobResult], sim: dict[str, JobResult]) -> str:
    """``jobs.csv``: per job of the segment, its live and simulated outcome side by side (the columns of ``vcemu
    demo``'s jobs.csv, with the submit, start, end and state of each run), times in trace seconds from the
    segment's first submission; an empty cell where the job did not get that far (a live run cut off), and a
    ``rel_diff`` only for a job done both ways (:func:`compared`)."""
    diffs = {s.id: diff for s, _lr, _sr, diff in compared(specs, live, sim)}

    def g(r: JobResult | None, attr: str) -> Any:
        v = None if r is None else getattr(r, attr)
        return "" if v is None else v

    per_run = ("state", "submit", "start", "end", "wait", "run_time", "stretch", "final_yield")
    with io.StringIO(newline="") as f:
        w = csv.writer(f)
        w.writerow(["job", "tasks", "cpu_need", "memory", "work", *(f"live_{c}" for c in per_run),
                    *(f"sim_{c}" for c in per_run), "rel_diff"])
        for s in specs:
            lr, sr = live.get(s.id), sim.get(s.id)
            w.writerow([s.id, s.tasks, s.cpu_need, s.mem, s.work,
                        "not arrived" if lr is None else lr.state.value, *(g(lr, c) for c in per_run[1:]),
                        "" if sr is None else sr.state.value, *(g(sr, c) for c in per_run[1:]), diffs.get(s.id, "")])
        return f.getvalue()


def _f(x: Any) -> str:
    if isinstance(x, float):
        return "-" if math.isnan(x) else f"{x:.3f}"
    return str(x)


def _write(a: argparse.Namespace, out: dict[str, Any], d: Path | None = None,
           source: dict[str, Any] | None = None, jobs: str | None = None,
           plot: Callable[[Path], None] | None = None) -> Path:
    """The run's results in its folder ``d`` (made at the run's start), or else in a new directory under ``--out``
    named after now (:func:`vcemu.outputs.new_run_dir`). ``source``: what config.json records of the trace
    read (its absolute path, the hash of its bytes, the SWF conversion's drops); ``jobs``: the text of jobs.csv
    (:func:`jobs_csv`); ``plot``: draws ``stretch.png`` at the path given (:func:`stretch_plot`), last."""
    from vcemu.outputs import json_safe, new_run_dir, write_json, write_text
    from vcemu.provenance import code_version

    if d is None:
        d = new_run_dir(a.out, f"{a.policy}-k{a.compress:g}")
    from coordinator.servers import local_cluster_record

    write_json(d / "config.json", {**vars(a), **local_cluster_record(a), **(source or {}), "code": code_version()},
               sort_keys=False)
    # Each file whole or not at all (written atomically), and strict JSON (NaN as null).
    write_json(d / "metrics.json", json_safe(out), sort_keys=False)
    write_text(d / "metrics.csv", "metric,live,sim\n" + "".join(
        f"{k},{out['live'][k]},{out['sim'][k]}\n" for k in out["live"]))
    if jobs is not None:
        write_text(d / "jobs.csv", jobs)
    if plot is not None:  # last, and not at the cost of the results: a plot that fails is said and left out
        try:
            plot(d / "stretch.png")
        except Exception as exc:
            print(f"vcemu replay: stretch.png not drawn: {type(exc).__name__}: {exc}", file=sys.stderr)
    return d
