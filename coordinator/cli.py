"""The ``vcemu`` command line.

Subcommands: ``up`` (a local cluster: coordinator + agents on 127.0.0.1), ``coordinator`` and ``agent``
(one process each, for real testbeds), ``submit``/``jobs``/``cancel``/``status`` (clients of a running
coordinator), ``simulate`` (a job file through a policy in virtual time), ``demo`` (the README's main
command), ``replay`` (a trace on live agents beside its simulation), ``sweep`` (seed 001's experiments on Ray),
``vcsched``, ``apc`` and ``oppcost`` (seeds 002, 003 and 004's experiments) and ``bench``.

This module holds the parser and the dispatch to each command's module: :mod:`coordinator.servers` (``up``,
``coordinator``, the local cluster), :mod:`coordinator.client` (the client commands), :mod:`vcemu.cliargs` (the
argument types every command shares); the others parse their own arguments in their modules (:func:`_main`).
Nothing imports this module: it is the entry point only (an import-linter contract keeps it so).
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import signal
import sys
from collections.abc import Sequence

from coordinator import client, servers
from coordinator.policy_names import POLICY_HELP, policy_name
from node_agent.spares import add_agent_spares
from vcemu.cliargs import Parser, doc_head, doc_text, penalty_seconds, positive, version
from vcemu.limits import MAX_AGENT_HOSTS, MAX_SIM_HOSTS


def cmd_simulate(args: argparse.Namespace) -> int:
    from coordinator.experiments import simulate_file
    from workloads.annotate import HPC2N_NODES
    from workloads.jobfile import is_swf

    # An SWF trace's jobs are converted for HPC2N's 120 nodes (001 Sec. IV-C): on the 4 of a job file's default,
    # most of a week did not fit ("118 of the 830 jobs do not fit on the given 4 hosts"; scale review).
    hosts = args.hosts if args.hosts is not None else HPC2N_NODES if is_swf(args.jobs_file) else 4
    return simulate_file(args.jobs_file, args.policy, hosts, args.penalty, args.json, args.segment, args.out)


def _segment(text: str) -> int | tuple[int, int]:
    from workloads.jobfile import parse_segment

    try:
        return parse_segment(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def cmd_demo(args: argparse.Namespace) -> int:
    from coordinator.demo import run_demo

    return run_demo(args)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="vcemu", description=doc_text(doc_head(__doc__)))
    p.add_argument("--version", action="version", version=f"vcemu {version()}")
    sub = p.add_subparsers(dest="command", required=True)

    servers.add_parsers(sub)
    sub.add_parser("agent", help="run a node agent (see vcemu agent --help)", add_help=False)

    client.add_parsers(sub)

    sp = sub.add_parser("simulate", help="run a job file through a policy in virtual time")
    sp.add_argument("jobs_file", help="JSON lines or CSV (.gz too), or an SWF trace (.swf, .swf.gz; see --segment); "
                    "- reads JSON lines from standard input")
    sp.add_argument("--policy", type=policy_name, required=True,
                    help=POLICY_HELP.replace(" (default %(default)s)", ""))
    sp.add_argument("--hosts", type=positive("--hosts", int, high=MAX_SIM_HOSTS), default=None,
                    help=f"identical hosts (at most {MAX_SIM_HOSTS:,}; default 4, and 120 for an SWF trace, the HPC2N "
                    "nodes seed 001 converts traces for)")
    sp.add_argument("--penalty", type=penalty_seconds, default=0.0,
                    help="rescheduling penalty, seconds (>= 0; default 0; seed 001's is 300)")
    sp.add_argument("--segment", type=_segment, default=None, metavar="K|A-B",
                    help="for an SWF trace: simulate only week K, counted from the trace's start at 0, or the weeks A "
                    "to B in one run, a backlog carried from each to the next (default: the whole trace)")
    sp.add_argument("--json", action="store_true",
                    help="print the summary as one JSON object instead of the table (each job's results: --out)")
    sp.add_argument("--out", default=None, metavar="DIR", help="also write the results (config.json, jobs.csv, "
                    "summary.json) to a new folder under DIR (default: print only)")
    sp.set_defaults(func=cmd_simulate)

    sp = sub.add_parser("demo", help="the main demo: a live 4-host run beside its simulation")
    sp.add_argument("--policy", type=policy_name, default="greedy", help=POLICY_HELP)
    sp.add_argument("--seed", type=int, default=1, help="seed of the job mix (default %(default)s)")
    sp.add_argument("--jobs", type=positive("--jobs", int), default=12, help="jobs in the mix (default %(default)s)")
    sp.add_argument("--hosts", type=positive("--hosts", int, high=MAX_AGENT_HOSTS), default=4,
                    help="emulated hosts (default %(default)s)")
    sp.add_argument("--span", type=positive("--span"), default=60.0,
                    help="seconds over which jobs arrive (default %(default)s)")
    sp.add_argument("--cpus-per-host", type=positive("--cpus-per-host"), default=None,
                    help="real cores per emulated host (default: 60%% of the machine shared out)")
    sp.add_argument("--no-cgroups", action="store_true",
                    help="agents throttle by SIGSTOP/SIGCONT duty cycles instead of cgroups (less exact)")
    add_agent_spares(sp)
    sp.add_argument("--out", default="results/demo",
                    help="each run's results go to a new folder here (default %(default)s)")
    sp.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    sp.set_defaults(func=cmd_demo)

    sub.add_parser("vcsched", help="seed 002 static placement experiments (see vcemu vcsched --help)",
                   add_help=False)
    sub.add_parser("oppcost", help="seed 004 opportunity-cost simulations (see vcemu oppcost --help)",
                   add_help=False)
    sub.add_parser("apc", help="seed 003 APC experiments One-Three (see vcemu apc --help)", add_help=False)
    sub.add_parser("sweep", help="seed 001 Sec. V experiments on Ray (see vcemu sweep --help)", add_help=False)
    sub.add_parser("replay", help="replay a trace segment on live agents beside its simulation", add_help=False)
    sp = sub.add_parser("bench", help="benchmarks: cpu-share, load, scale, starts, boot (live); packing, dfrs "
                        "(simulation only)",
                        description=BENCH_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    sp.add_argument("name", choices=list(BENCH_PARSERS),
                    help="the benchmark (see above); vcemu bench NAME --help gives its flags")
    return p


#: ``vcemu bench --help``: each benchmark, and what it needs of the machine.
BENCH_HELP = """\
Benchmarks, each with its own flags (vcemu bench NAME --help).

Live: they run agents on this machine (load and scale, a coordinator too).
  cpu-share  seed 002 Sec. 7's CPU-cap accuracy: dgemm tasks under CPU quotas in an
             in-process agent. Needs cgroups (a cgroup v2 or v1 CPU controller the user
             may write to, usually root)
  load       submissions per second the coordinator accepts durably over gRPC, with an
             in-process agent running modeled jobs (no cgroups needed)
  scale      DYNMCB8-PER's control cycle on 1,000 emulated hosts spread over agent
             processes, modeled jobs, agents run with --no-cgroups (no cgroups needed)
  starts     seconds until 1,000 jobs submitted at once all run on 4 hosts of one agent
             process (greedy re-shares a host at each start; --tasks N: N tasks a job; no cgroups needed)
  boot       milliseconds from a task's start to its program running its work, in an in-process
             agent with spares, without, and without the boot polls (~80 s; cgroups unless --no-cgroups)

Simulation only: no agent, no cgroups.
  packing    MCB8's packing speed on generated instances (seed 002)
  dfrs       DFRS simulation speed and decision p99 (seed 001); its sweep speedup part
             starts a local Ray of 1, then 2 CPUs (--no-sweep skips it)
"""


#: The commands that take up a run where an interrupted one left its results (their ``--out``'s journal).
RESUMABLE = ("oppcost", "apc", "sweep", "vcsched")

#: errno of a write that failed for want of room or of a writable disk: said in one line by :func:`main`.
_NO_ROOM = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
            errno.EROFS: "read-only file system"}


def main(argv: Sequence[str] | None = None) -> int:
    try:
        code = _main(argv)
        # Flush here, not in Python's own flush at exit: stdout to a pipe is block-buffered (unless PYTHONUNBUFFERED
        # is set), so a short output (`vcemu simulate ... | head -1`) is first written, and its broken pipe first
        # seen, after main returns, where it printed "Exception ignored ... BrokenPipeError" and exited 120.
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        # The reader of our output went away (``vcemu jobs | head``): as a Unix filter does, stop quietly. Python
        # flushes stdout once more at exit, which would fail and print a traceback: point it at /dev/null first.
        # Only for our own stdout or stderr: a broken pipe of anything else is an error to report.
        gone = [fd for fd in (_fd(sys.stdout), _fd(sys.stderr)) if fd is not None and _pipe_gone(fd)]
        if not gone:
            raise
        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in gone:
            os.dup2(devnull, fd)
        return 128 + signal.SIGPIPE
    except OSError as exc:
        # A full disk under a results folder (simulate says so itself; oppcost, apc and the others ended in a raw
        # traceback, three chained for a journal: exhaustion review). What they finished is in their journal, which a
        # rerun of the same command continues from (a line cut short is dropped then).
        why = _NO_ROOM.get(getattr(exc, "errno", None))
        if why is None:
            raise
        args = list(sys.argv[1:] if argv is None else argv)
        command = " ".join(args[:2] if args[:1] == ["bench"] else args[:1]) or "vcemu"
        where = f" {exc.filename}" if exc.filename else ""
        again = (" (it continues from what it finished)" if args[:1] and args[0] in RESUMABLE else "")
        fix = "make it writable" if exc.errno == errno.EROFS else "make room"
        print(f"vcemu {command}: cannot write{where}: {why}; {fix} and run it again{again}", file=sys.stderr)
        return 1


def _fd(stream: object) -> int | None:
    try:
        return stream.fileno()  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):  # no stream, or one with no descriptor (a test's StringIO)
        return None


def _pipe_gone(fd: int) -> bool:
    """Whether ``fd`` is a pipe or socket whose reader has gone (poll says POLLERR or POLLHUP for writing)."""
    import select

    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))


#: Commands that parse their own arguments, each in its own module (loaded only when run): name -> (module,
#: function taking the arguments after the name). ``bench`` has one per benchmark.
OWN_PARSERS: dict[str, tuple[str, str]] = {
    "agent": ("node_agent.cli", "agent_main"),
    "vcsched": ("coordinator.vcsched.experiment", "vcsched_main"),
    "oppcost": ("coordinator.oppcost.experiment", "oppcost_main"),
    "apc": ("coordinator.apc.experiment", "apc_main"),
    "sweep": ("coordinator.sweep", "sweep_main"),
    "replay": ("coordinator.replay", "replay_main"),
}
BENCH_PARSERS: dict[str, tuple[str, str]] = {
    "cpu-share": ("node_agent.bench", "cpu_share_main"),
    "packing": ("coordinator.vcsched.bench", "bench_packing_main"),
    "dfrs": ("coordinator.bench_dfrs", "bench_dfrs_main"),
    "load": ("coordinator.bench_ops", "bench_load_main"),
    "scale": ("coordinator.bench_ops", "bench_scale_main"),
    "starts": ("coordinator.bench_ops", "bench_starts_main"),
    "boot": ("node_agent.bench_boot", "boot_main"),
}


def _main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    own = (OWN_PARSERS.get(argv[0]) if argv else None) or (
        BENCH_PARSERS.get(argv[1]) if len(argv) >= 2 and argv[0] == "bench" else None)
    if own is not None:
        module, function = own
        rest = argv[1:] if argv[0] in OWN_PARSERS else argv[2:]
        return int(getattr(importlib.import_module(module), function)(rest))
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # named by the command they were given to, as its other refusals are (it was "vcemu: error: ...")
        before = [a for a in argv[:argv.index(args.command)] if a in extra]  # vcemu's own (`vcemu --x jobs`)
        if before:
            parser.error(f"unrecognized arguments: {' '.join(before)}")
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        commands.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
