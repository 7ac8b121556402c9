"""``vcemu replay TRACE --policy NAME --compress K``: a trace segment on live agents beside its simulation.

The trace (a job file, or an SWF log: ``--segment`` picks a 1-week segment, read by ``workloads.jobfile.load_jobs``)
is cut to ``--max-jobs`` jobs (the first by submission) on ``--hosts`` hosts; jobs wider than the cluster are
dropped and counted (those submitted before the last job replayed), and any other job the engine would refuse is
refused before the cluster starts, naming its line. An in-process coordinator (as ``vcemu demo`` starts it) drives
``--agents`` real agent processes (cgroup-enforced shares, pause = checkpoint and stop) with the live backend's time
compression K: its clock runs K times faster than wall time and each task's work is divided by K, so a job of W
trace-seconds takes W/K real seconds and everything is reported in trace seconds. Jobs arrive at their trace submit
times (shifted by the cluster's start-up time) on that clock. The very same jobs then go through the simulator with
the same policy, hosts and penalty, and both runs are scored by the same code (coordinator.metrics, 001 Sec. V's
metrics), side by side. Results go to a new directory under ``--out`` named after the run's start
(``YYYYmmdd-HHMMSS-POLICY-kK``, with ``-2``, ``-3``, ... for further runs started in the same second); its
``config.json`` records the code that ran (``"code"``), and the trace's absolute path, the hash of the bytes read
and, for SWF, what the conversion dropped. An exception in the coordinator's engine loop (which logs it and goes on,
as a service must) ends the replay with an error: a job refused at its arrival would otherwise be waited for until
``--timeout``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coordinator.metrics import History
from coordinator.model import JobSpec

if TYPE_CHECKING:
    from workloads.jobfile import JobFile


def score(history: History, capacity: float, host_memory_gb: float) -> dict[str, Any]:
    """001 Sec. V's metrics of one run (the same for a simulated and a live run)."""
    from coordinator.metrics import decision_stats, job_results, rescheduling_costs, summarize, utilisation

    s = summarize(job_results(history))
    k = rescheduling_costs(history, host_memory_gb=host_memory_gb)
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
    """``--mem-per-host``: checked here (a bad size would only stop the agents), passed on as written."""
    from node_agent.cli import parse_size

    try:
        parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    from coordinator.cli import POLICY_HELP, _non_negative, _Parser, _positive, doc_text

    p = _Parser(prog="vcemu replay", description=doc_text(__doc__.split("\n\n")[0]))
    p.add_argument("trace", help="job file (JSON lines / CSV) or SWF trace (.swf, .swf.gz)")
    p.add_argument("--policy", default="dynmcb8-asap-per", help=POLICY_HELP)
    p.add_argument("--compress", type=_positive("--compress"), default=60.0, help="time compression factor K (> 0)")
    p.add_argument("--segment", type=int, default=None, help="SWF only: the 1-week segment to replay")
    p.add_argument("--max-jobs", type=_positive("--max-jobs", int), default=20,
                   help="replay only the first N jobs (default 20)")
    p.add_argument("--hosts", type=_positive("--hosts", int), default=4, help="live hosts (default 4)")
    p.add_argument("--agents", type=_positive("--agents", int), default=1,
                   help="agent processes sharing the hosts (at most --hosts)")
    p.add_argument("--cpus-per-host", type=_positive("--cpus-per-host"), default=None,
                   help="cores per host (default: 60%% of the box)")
    p.add_argument("--mem-per-host", type=_mem_size, default="512MiB",
                   help="memory per emulated host (default %(default)s)")
    p.add_argument("--penalty", type=_non_negative, default=0.0,
                   help="rescheduling penalty of the simulation, trace seconds >= 0 (the live run pays real costs)")
    p.add_argument("--host-memory-gb", type=_positive("--host-memory-gb"), default=8.0,
                   help="node memory for the bandwidth metric")
    p.add_argument("--timeout", type=_positive("--timeout"), default=600.0,
                   help="wall seconds (> 0) before the live run is abandoned")
    p.add_argument("--no-cgroups", action="store_true", help="agents use the duty-cycle fallback")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--out", default="results/replay", help="results go to a new directory under OUT")
    a = p.parse_args(list(argv))
    if a.agents > a.hosts:
        p.error(f"argument --agents: must be at most --hosts ({a.hosts}), got {a.agents}")
    return a


def load_segment(a: argparse.Namespace) -> tuple[list[Any], int, JobFile]:
    """The jobs to replay, submit times from 0; how many were dropped for being wider than the cluster (of those
    submitted before the last one replayed: the jobs the replay passed over); and the file they came from.

    What is left must be what the live engine accepts (:meth:`JobSpec.validate` on the hosts, and the policy's
    ``refuse`` hook): :class:`workloads.jobfile.JobFileError` naming the line otherwise, as ``simulate`` refuses it,
    since the engine would refuse it only at its arrival, in the middle of the live run."""
    from coordinator.experiments import homogeneous_hosts
    from coordinator.policies import get_policy
    from workloads.jobfile import check_jobs, load_jobs

    source = load_jobs(a.trace, segment=a.segment)
    jobs = sorted(source.jobs, key=lambda j: (j.submit_time, j.id))
    if not jobs:
        raise ValueError(f"no jobs in {a.trace}" if a.segment is None else f"no jobs in week {a.segment} of {a.trace}")
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
    check_jobs(source, fit, tuple(homogeneous_hosts(a.hosts)), getattr(get_policy(a.policy), "refuse", None),
               what="to replay")
    t0 = fit[0].submit_time
    return [replace(j, submit_time=j.submit_time - t0) for j in fit], dropped, source


def replay_main(argv: Sequence[str]) -> int:
    from coordinator.cli import interrupted, live_run_dir, signals_interrupt, start_local_cluster
    from coordinator.policies import UnknownPolicy, get_policy
    from workloads.jobfile import JobFileError

    a = _parse(argv)
    try:
        get_policy(a.policy)  # an unknown name is refused before anything starts
        specs, dropped, source = load_segment(a)
        # last: a bad trace leaves no folder; before the live run: its results must have somewhere to go
        wall0, started = time.monotonic(), time.time()
        d, agent_log = live_run_dir(a.out, f"{a.policy}-k{a.compress:g}", started)
    except (UnknownPolicy, JobFileError, OSError, ValueError) as exc:
        print(f"vcemu replay: {exc}", file=sys.stderr)
        return 2
    note = source.drop_note()
    if note is not None:  # the SWF conversion's rules removed records: said, and recorded in config.json
        print(f"vcemu replay: {a.trace}: {note}", file=sys.stderr)
    # Ctrl-C or SIGTERM: the cluster is stopped (by start_local_cluster, or the finally around the live run),
    # then one line and exit status 130, as vcemu demo and up end.
    with agent_log, signals_interrupt():
        try:
            try:
                server, procs = start_local_cluster(
                    a.policy, a.hosts, a.agents, a.cpus_per_host, a.mem_per_host, 0, None, a.no_cgroups,
                    agent_prefix="replay", agent_log=agent_log, compression=a.compress)
            except SystemExit as exc:  # the agents did not come up: the reason, with their log's last lines
                print(f"vcemu replay: {exc}", file=sys.stderr)
                return 1
            return _replay_live(a, specs, dropped, server, procs, d, wall0, source.provenance())
        except KeyboardInterrupt:
            return interrupted("vcemu replay: interrupted")


def _replay_live(a: argparse.Namespace, specs: list[JobSpec], dropped: int, server, procs, d: Path,
                 wall0: float, source: dict[str, Any] | None = None) -> int:
    """The live replay on the started cluster, its simulation, and the results in ``d`` (``source``: what
    config.json records of the trace, :meth:`workloads.jobfile.JobFile.provenance`)."""
    from tqdm import tqdm

    from coordinator.cli import signals_deferred, stop_processes
    from coordinator.experiments import follow_jobs, simulate

    seen = server.loop_error_count  # (the exceptions the engine loop survived; see the module docstring)
    hosts = list(server.engine.hosts)  # the simulation's cluster: the live one as it started (an agent lost
    # during the run takes its hosts out of the engine's list)
    try:
        mode = next(iter(server.backend.agents.values())).mode
        origin = server.backend.now() + 1.0 * a.compress  # a second of real time for the first arrival
        arrivals = [replace(j, submit_time=j.submit_time + origin) for j in specs]
        server.engine.schedule_arrivals(arrivals)
        server.backend.wake()
        bar = tqdm(total=len(arrivals), desc="replay", unit="job", file=sys.stderr, disable=a.json or None)
        done = follow_jobs(server.engine, bar,
                           lambda finished: finished == len(arrivals) or server.loop_error_count > seen,
                           time.monotonic() + a.timeout)
        timed_out = done < len(arrivals)
    finally:
        with signals_deferred():  # a second Ctrl-C must not cut the stopping of the agents short
            server.stop()
            stop_processes(procs)
    if server.loop_error_count > seen:
        new = server.loop_error_count - seen
        errors = list(server.loop_errors)
        first = errors[max(0, len(errors) - new)]  # the first of this run's that is still kept
        also = f" (and {new - 1} more)" if new > 1 else ""
        print(f"vcemu replay: the live run failed: engine step failed: {first}{also}; the "
              f"cluster is stopped, and the run's folder {d} keeps the agents' log", file=sys.stderr)
        return 1
    live = server.engine.history
    capacity = sum(h.cpu for h in hosts)
    sim = simulate(list(live.specs.values()) or arrivals, a.policy, hosts, a.penalty)
    live_m, sim_m = score(live, capacity, a.host_memory_gb), score(sim, capacity, a.host_memory_gb)
    out = {
        "trace": a.trace, "segment": a.segment, "policy": a.policy, "compress": a.compress, "hosts": a.hosts,
        "jobs": len(specs), "dropped_too_wide": dropped, "mode": mode, "timed_out": timed_out,
        "wall_s": round(time.monotonic() - wall0, 1), "live": live_m, "sim": sim_m,
    }
    try:
        path: Path | str = _write(a, out, d, source)
    except OSError as exc:  # e.g. --out removed during the run: the results are still printed below
        print(f"vcemu replay: --out {a.out}: cannot write results: {exc.strerror or exc}", file=sys.stderr)
        path, write_failed = "not written", True
    else:
        write_failed = False
    if a.json:
        print(json.dumps(out))
    else:
        print(f"vcemu replay: {len(specs)} jobs of {a.trace} on {a.hosts} hosts ({mode}), {a.policy}, "
              f"compressed {a.compress:g}x, {out['wall_s']} s wall; {dropped} jobs dropped (wider than the cluster)")
        print(f"{'metric':<20}{'live':>14}{'simulated':>14}")
        for k in live_m:
            lv, sv = live_m[k], sim_m[k]
            print(f"{k:<20}{_f(lv):>14}{_f(sv):>14}")
        print(f"results: {path}")
    return 1 if timed_out or write_failed or live_m["completed"] < len(specs) else 0


def _f(x: Any) -> str:
    if isinstance(x, float):
        return "-" if math.isnan(x) else f"{x:.3f}"
    return str(x)


def _write(a: argparse.Namespace, out: dict[str, Any], d: Path | None = None,
           source: dict[str, Any] | None = None) -> Path:
    """The run's results in its folder ``d`` (made at the run's start), or else in a new directory under ``--out``
    named after now (:func:`coordinator.outputs.new_run_dir`). ``source``: what config.json records of the trace
    read (its absolute path, the hash of its bytes, the SWF conversion's drops)."""
    from coordinator.outputs import json_safe, new_run_dir, write_json, write_text
    from coordinator.provenance import code_version

    if d is None:
        d = new_run_dir(a.out, f"{a.policy}-k{a.compress:g}")
    write_json(d / "config.json", {**vars(a), **(source or {}), "code": code_version()}, sort_keys=False)
    # Each file whole or not at all (written atomically), and strict JSON (NaN as null).
    write_json(d / "metrics.json", json_safe(out), sort_keys=False)
    write_text(d / "metrics.csv", "metric,live,sim\n" + "".join(
        f"{k},{out['live'][k]},{out['sim'][k]}\n" for k in out["live"]))
    return d
