"""The commands that run servers: ``vcemu up`` (a coordinator in this process and agent processes on 127.0.0.1,
or agent actors on a Ray cluster) and ``vcemu coordinator`` (the coordinator alone, for a real testbed); and the
local cluster that ``demo``, ``replay`` and the live benchmarks start and stop the same way
(:func:`start_local_cluster`, :func:`stop_agents`)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

from coordinator.policy_names import POLICY_HELP, described, policy_name
from coordinator.restarts import DEFAULT_RESTARTS, MOST_RESTARTS, STEADY_S, Restarts
from node_agent.spares import DEFAULT_SPARES, add_agent_spares
from vcemu.cliargs import (
    AGENT_TOKEN_ENV,
    LOG_TIME,
    MAX_HEARTBEAT_S,
    first_port,
    heartbeat_interval,
    memory_size,
    per_host,
    per_host_values,
    positive,
    read_token,
    refuse,
    state_path,
    tcp_port,
    whole_in,
)
from vcemu.limits import MAX_AGENT_HOSTS, MAX_LOCAL_AGENTS, MAX_QUEUED
from vcemu.processes import stop_processes
from vcemu.signals import INTERRUPTED, set_on_signals, signals_interrupt

if TYPE_CHECKING:
    from coordinator.service import CoordinatorServer
    from vcemu.v1 import agent_pb2



def _reference_host(text: str) -> agent_pb2.HostInfo:
    """``--reference-host CORES[,SIZE]``: a host of CORES cores and SIZE of memory (default 1GiB, an agent's)."""
    from vcemu.sizes import parse_size
    from vcemu.v1 import agent_pb2

    cores_text, _, size_text = text.partition(",")
    try:
        cores = float(cores_text)
        memory = parse_size(size_text) if size_text else 1 << 30
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc) if "parse" in str(exc) else f"not a number of cores: {cores_text!r}"
                                         ) from None
    if not (math.isfinite(cores) and cores > 0) or memory <= 0:
        raise argparse.ArgumentTypeError(f"cores and memory must be > 0, got {text!r}")
    return agent_pb2.HostInfo(name="reference", cpu_cores=cores, memory_bytes=memory)


def _server_options(args: argparse.Namespace) -> dict:
    """Reliability and security options shared by ``up`` and ``coordinator`` (issue 7)."""
    from vcemu.tls import from_args

    try:
        tls = from_args(args.tls_cert, args.tls_key, args.tls_ca)
    except ValueError as exc:
        refuse(f"vcemu: {exc}")
    # No history kept in memory: a serving coordinator reads none of it (replay and demo keep theirs for results).
    return {"state": args.state, "heartbeat_s": args.heartbeat, "token": read_token(args.token_file), "tls": tls,
            "keep_history": False, "max_queued": args.max_queued}


def spawn_agent(coordinator: str, hosts: int, cpus_per_host: float | str, mem_per_host: str, agent_id: str,
                extra: Sequence[str] = (), log: IO[bytes] | None = None, token: str | None = None) -> subprocess.Popen:
    """Start one ``vcemu agent`` process that registers with ``coordinator``. The per-host values may be
    comma-separated lists, one value per host of this agent. Its log (stderr) goes to ``log`` if given, else to
    this process's stderr."""
    cmd = [
        sys.executable, "-m", "coordinator.cli", "agent", "--hosts", str(hosts),
        "--cpus-per-host", str(cpus_per_host), "--mem-per-host", mem_per_host, "--port", "0",
        "--agent-id", agent_id, "--coordinator", coordinator, "--parent-pid", str(os.getpid()), *extra,
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True, env=_agent_env(token))
    proc.vcemu_token = token  # type: ignore[attr-defined]  # (for respawn_agent)
    return proc


def _agent_env(token: str | None) -> dict[str, str]:
    """An agent process's environment: this one's, with the coordinator's token in :data:`AGENT_TOKEN_ENV` (the token
    the coordinator read, not its file again: a pipe given as --token-file is read once, and a file moved meanwhile
    would stop an agent started again; not in argv, which every user sees) and none inherited."""
    env = {k: v for k, v in os.environ.items() if k != AGENT_TOKEN_ENV}
    if token:
        env[AGENT_TOKEN_ENV] = token
    return env


#: The agents' log in a live run's results folder (demo, replay).
AGENT_LOG = "agents.log"
#: The coordinator's log there (:func:`coordinator_log`).
COORDINATOR_LOG = "coordinator.log"


@contextlib.contextmanager
def coordinator_log(folder: Path) -> Iterator[None]:
    """While it lasts, the coordinator's log (the ``vcemu`` loggers, from INFO up, with times) goes to
    :data:`COORDINATOR_LOG` in a live run's results folder (demo, replay), beside the agents' log: their terminal
    is for the progress bar, and the log is where a run's agent losses, requeues and failed stops are told (Python
    printed the warnings over the bar, and dropped the rest). Written as the run goes: whole as far as it got if
    the run dies."""
    handler = logging.FileHandler(folder / COORDINATOR_LOG, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger = logging.getLogger("vcemu")
    level = logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        handler.close()


def live_run_dir(parent: str, name: str, started: float, flag: str = "--out") -> tuple[Path, IO[bytes]]:
    """A live run's results folder, made at its start (:func:`vcemu.outputs.new_run_dir`), and its agents'
    log opened there (:data:`AGENT_LOG`): the log is written as the run goes (the terminal keeps the progress
    bar) and stays, whole as far as it got, if the run dies. Making both is the check that the run's results
    will have somewhere to go (what :func:`~vcemu.cliargs.usable_out_dir` checks for other commands):
    ValueError naming ``flag`` otherwise, before the cluster starts."""
    from vcemu.outputs import new_run_dir

    try:
        out = new_run_dir(parent, name, started)
        return out, (out / AGENT_LOG).open("ab")
    except OSError as exc:
        raise ValueError(f"{flag} {parent}: cannot write results there: {exc.strerror or exc}") from None


def _log_tail(path: str, lines: int = 5) -> str:
    """The last ``lines`` lines of the agents' log at ``path``, for an error message that names it."""
    try:
        tail = Path(path).read_text(errors="replace").splitlines()[-lines:]
    except OSError as exc:
        return f" (agents' log {path}: {exc.strerror or exc})"
    return f"; agents' log {path}" + ("".join(f"\n  {line}" for line in tail) if tail else " (empty)")


#: The smallest CPU limit a host can have: CFS's smallest quota, 1 ms per 1 s period (node_agent.cgroups).
MIN_HOST_CORES = 0.001


def default_cpus_per_host(hosts: int) -> float:
    """Give the emulated hosts 60% of the machine's cores, to three significant digits.

    The rest is for the coordinator and agents (status polling is Python), and headroom matters: CFS
    quotas are caps, not guarantees, and on a saturated machine tasks fall below their shares and run
    slower per CPU-second than they do alone (cores share caches and memory bandwidth).
    (Three decimals gave 0.0 cores to each of 12,000 hosts, which the agents refused with a list of 12,000
    zeros, and 0.001 to each of 1,700, 40% more than the machine has: input review.)
    """
    return float(f"{min(1.0, 0.6 * (os.cpu_count() or 1) / hosts):.3g}")


def local_cluster_record(args: argparse.Namespace) -> dict[str, object]:
    """What a live run's config.json records of the local cluster it ran on beyond its flags: the cores each host
    got (:func:`host_cores`, as :func:`start_local_cluster` gives them) and the machine's CPU count. Its flags record
    ``cpus_per_host: null`` for the default, which is 60% of *this* machine's cores: the run could not be set up again
    elsewhere from its folder (reproducibility review). Nothing for a run on Ray (``--ray``: its agents.log has the
    placement) or without ``hosts``."""
    hosts = getattr(args, "hosts", None)
    if getattr(args, "ray", None) or not isinstance(hosts, int) or hosts < 1:
        return {}
    cores = host_cores(hosts, getattr(args, "cpus_per_host", None))
    return {"cpus_per_host_used": [float(c) for c in cores], "machine_cpus": os.cpu_count()}


def host_cores(hosts: int, cpus_per_host: float | list[str] | None) -> list[str]:
    """The cores of each of ``hosts`` hosts of a local cluster, as texts the agents take: ``--cpus-per-host`` (one
    value, or one per host; ValueError otherwise), else :func:`default_cpus_per_host` of this machine."""
    return per_host("--cpus-per-host", cpus_per_host if cpus_per_host is not None else default_cpus_per_host(hosts),
                    hosts)


def hosts_refusal(hosts: int, cpus_per_host: float | list[str] | None) -> str | None:
    """Why a local cluster cannot emulate ``hosts`` hosts of this machine's default share (``cpus_per_host``
    None), or None: each would get less than :data:`MIN_HOST_CORES`, which a CPU quota cannot enforce."""
    if cpus_per_host is not None or (cores := default_cpus_per_host(hosts)) >= MIN_HOST_CORES:
        return None
    return (f"--hosts {hosts}: each host would get {cores:g} cores (60% of this machine's {os.cpu_count()} cores "
            f"shared out), below the {MIN_HOST_CORES:g} a CPU quota can enforce; give at most "
            f"{int(0.6 * (os.cpu_count() or 1) / MIN_HOST_CORES):,} hosts, or --cpus-per-host")


def signals_set(stop: threading.Event) -> None:
    """From now on SIGINT and SIGTERM set ``stop`` (a running coordinator's clean shutdown), except one the caller
    ignores, which stays ignored (see :func:`~vcemu.signals.signals_interrupt`); a second signal cannot hang
    it (:func:`~vcemu.signals.set_on_signals`)."""
    set_on_signals(stop, keep_ignored=True)


def interrupted(what: str, cluster: bool = True) -> int:
    """The one line of a command stopped by Ctrl-C or SIGTERM (``what``: "vcemu up: interrupted while starting")
    once it has stopped its cluster (``cluster``: it had begun to start one), in place of a traceback; returns
    :data:`INTERRUPTED`."""
    done = "the coordinator and the agents it started are stopped" if cluster else "no agent was started"
    print(f"{what}; {done}", file=sys.stderr, flush=True)
    return INTERRUPTED


def agent_metrics_refusal(base: int, count: int, port: int, metrics_port: int | None) -> str | None:
    """Why the agents' metrics ports ``base`` .. ``base + count - 1`` (agent i on ``base + i``) cannot be listened
    on 127.0.0.1, one line naming ``--agent-metrics-port``, or None. Asked before anything starts, as
    :func:`~vcemu.ports.ports_refusal` is: otherwise an agent would exit on it, and ``up`` could only say that
    its cluster did not come up."""
    from vcemu.ports import cannot_listen, denied, port_denied, port_in_use

    flag = "--agent-metrics-port"
    if base + count - 1 > 65535:
        return (f"{flag}: {base} puts agent {count - 1} on port {base + count - 1}, above 65535 (agent i serves "
                f"on {base} + i); give at most {65536 - count}")
    for p in range(base, base + count):
        for other, taken in (("--port", port), ("--metrics-port", metrics_port)):
            if p == taken:
                return f"{flag}: port {p} (agent {p - base}'s) is also the coordinator's {other}"
        if port_in_use("127.0.0.1", p):
            return cannot_listen("127.0.0.1", p, flag)
        if port_denied("127.0.0.1", p):
            return denied("127.0.0.1", p, flag)
    return None


def start_local_cluster(policy_name: str, hosts: int, agents: int, cpus_per_host: float | list[str] | None,
                        mem_per_host: str | list[str], port: int, metrics_port: int | None, no_cgroups: bool,
                        wait_s: float = 90.0, agent_prefix: str = "agent", agent_log: IO[bytes] | None = None,
                        agent_metrics_port: int | None = None, agent_spares: int | None = None, **options):
    """A coordinator in this process and ``agents`` agent processes sharing ``hosts`` hosts. ``cpus_per_host``
    and ``mem_per_host`` are one value for every host or a list of one value per host (ValueError otherwise).
    The agents take the first free ids ``agent_prefix0``, ``agent_prefix1``, ..., reserved for this process
    until :func:`stop_agents` stops the returned processes (which callers must do); their logs go to ``agent_log``
    (an open binary file) if given, else to this process's stderr: a run that draws a progress bar (demo,
    replay) keeps its terminal for that, and its results folder keeps the agents' log. With
    ``agent_metrics_port``, agent i serves its metrics on that port + i (``vcemu agent --metrics-port``; OSError
    if one cannot be listened on). ``agent_spares``: each agent's ``--spares`` (None: the agent's default, passed
    explicitly). The agents send ``options``' token, if any, on their calls (:func:`spawn_agent`).
    ``options``: more CoordinatorServer arguments (state, heartbeat_s, token, tls,
    compression)."""
    from coordinator.policies import get_policy
    from coordinator.service import CoordinatorServer, wait_registered
    from node_agent.agent import release_agent_ids, reserve_agent_id
    from vcemu.ports import ports_refusal
    from vcemu.sizes import parse_size
    from vcemu.v1 import agent_pb2

    cpus = host_cores(hosts, cpus_per_host)
    mems = per_host("--mem-per-host", mem_per_host, hosts)
    split = [hosts // agents + (1 if i < hosts % agents else 0) for i in range(agents)]
    refusal = ports_refusal("127.0.0.1", port, metrics_port)  # before the coordinator opens its state file
    if refusal is None and agent_metrics_port is not None:
        refusal = agent_metrics_refusal(agent_metrics_port, sum(1 for n in split if n), port, metrics_port)
    if refusal is not None:
        raise OSError(refusal)
    server = CoordinatorServer(get_policy(policy_name), port=port, metrics_port=metrics_port, **options).start()
    tls = options.get("tls")
    tls_flags = ["--tls-cert", tls.cert, "--tls-key", tls.key, "--tls-ca", tls.ca] if tls else []
    first = [sum(split[:i]) for i in range(agents)]
    procs: list[subprocess.Popen] = []
    agent_of: dict[int, str] = {}  # position -> its agent's id, reserved (released on the way out if it fails)
    stopped = False

    try:  # the agents are in sessions of their own: a Ctrl-C here must take them down, or they outlive us
        for i, n in enumerate(split):
            if n:
                agent_of[i] = reserve_agent_id(f"{agent_prefix}{i}")
        ids = list(agent_of.values())
        server.backend.choose_reference([
            agent_pb2.HostInfo(name=f"{agent_id}-h{k - first[i]}", cpu_cores=float(cpus[k]),
                               memory_bytes=parse_size(mems[k]))
            for i, agent_id in agent_of.items() for k in range(first[i], first[i] + split[i])])
        for i, agent_id in agent_of.items():
            n = split[i]
            metrics = [] if agent_metrics_port is None else ["--metrics-port", str(agent_metrics_port + i)]
            spares = ["--spares", str(DEFAULT_SPARES if agent_spares is None else agent_spares)]
            procs.append(spawn_agent(server.address, n, ",".join(cpus[first[i]:first[i] + n]),
                                     ",".join(mems[first[i]:first[i] + n]), agent_id,
                                     (["--no-cgroups"] if no_cgroups else []) + tls_flags + metrics + spares,
                                     agent_log, token=options.get("token")))

        def exited() -> str | None:
            dead = [p for p in procs if p.poll() is not None]
            return f"agent exited with code {dead[0].returncode}" if dead else None

        why = wait_registered(server, ids, wait_s, hosts=hosts, failed=exited)
        if why is not None:
            stop_agents(procs)
            release_agent_ids(agent_of.values())
            server.stop()
            stopped = True
            if agent_log is not None:  # the agents' own words are in their log, not on the terminal
                why += _log_tail(agent_log.name)
            raise SystemExit(f"vcemu: the local cluster did not come up: {why}")
    except BaseException:  # Ctrl-C (or SIGTERM made KeyboardInterrupt) while starting, a failed spawn
        if not stopped:
            stop_agents(procs)
            release_agent_ids(agent_of.values())
            server.stop()
        raise
    return server, procs


def log_to_stderr(command: str) -> None:
    """Show the coordinator's log on stderr, each line after ``command``, its time and level (``vcemu up:
    2026-11-29T06:12:01 WARNING agent agent0 lost: ...``), as ``vcemu agent`` shows its own: from INFO up, so that
    an operator sees each agent register and what a restart took back. Without it, Python printed the warnings
    alone and bare, and the INFO lines not at all. Only the ``vcemu`` loggers (not a library's), and only where
    nothing configured logging before (a test's capture, an embedding program)."""
    logger = logging.getLogger("vcemu")
    if logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(f"{command}: %(asctime)s %(levelname)s %(message)s", LOG_TIME))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


def _raise_descriptor_limit() -> None:
    """Raise the soft limit of open files to the hard one, as servers do: a coordinator holds two descriptors per
    agent, and at a soft limit of 1,024 (a common default) some 480 agents left the clients none (exhaustion review;
    RegisterAgent now refuses the agent that would, :func:`coordinator.service.descriptors_short`)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def cmd_up(args: argparse.Namespace) -> int:
    from vcemu.sizes import host_memory_refusal, parse_size

    log_to_stderr("vcemu up")
    _raise_descriptor_limit()
    options = _server_options(args)
    here = args.ray is None  # (a Ray node's memory is not this machine's: the least only)
    for why in filter(None, (host_memory_refusal(parse_size(m), here) for m in args.mem_per_host or ())):
        print(f"vcemu up: --mem-per-host: {why}", file=sys.stderr)
        return 2
    if args.ray is not None:
        from coordinator.backends.ray import run_up

        if options["tls"] is not None:  # the actors get no certificates: they could not talk to a TLS coordinator
            print("vcemu up: --tls-cert/--tls-key/--tls-ca: not with --ray (the Ray agent actors have no TLS)",
                  file=sys.stderr)
            return 2
        if args.agent_metrics_port is not None:
            print("vcemu up: --agent-metrics-port: not with --ray (the Ray agent actors serve no metrics)",
                  file=sys.stderr)
            return 2
        if args.restart_agents is not None:  # (Ray's max_restarts restarts an actor, as this flag a process)
            print("vcemu up: --restart-agents: not with --ray (Ray restarts a crashed agent actor itself, up to "
                  f"{DEFAULT_RESTARTS} times)", file=sys.stderr)
            return 2
        if args.agents != 1:  # each host is an agent actor of its own
            print("vcemu up: --agents: not with --ray (each emulated host is its own agent actor)", file=sys.stderr)
            return 2
        return run_up(args, options)
    if args.bind is not None:
        print("vcemu up: --bind: only with --ray (a local cluster listens on 127.0.0.1)", file=sys.stderr)
        return 2
    if args.agents > args.hosts:  # (as replay and bench refuse it: it ran one agent per host, without a word)
        print(f"vcemu up: --agents: at most --hosts ({args.hosts}), got {args.agents}", file=sys.stderr)
        return 2
    if (why := hosts_refusal(args.hosts, args.cpus_per_host)) is not None:
        print(f"vcemu up: {why}", file=sys.stderr)
        return 2
    machine = os.cpu_count() or 1  # (the agents refuse it too, but only once the coordinator is up: say it first)
    if args.cpus_per_host is not None and (most := max(float(c) for c in args.cpus_per_host)) > machine:
        print(f"vcemu up: --cpus-per-host: {most:g} cores is more than this machine's {machine}", file=sys.stderr)
        return 2
    with signals_interrupt():
        return _run_local_up(args, options)


def _run_local_up(args: argparse.Namespace, options: dict) -> int:
    """``vcemu up`` without ``--ray``: start the local cluster, then wait for Ctrl-C or SIGTERM (a clean stop,
    exit status 0) or for every agent process to have exited for good (status 1). An agent that dies in failure is
    started again as :class:`~coordinator.restarts.Restarts` says (``--restart-agents``). Called within
    :func:`~vcemu.signals.signals_interrupt`: while starting, Ctrl-C and SIGTERM stop at once, and
    start_local_cluster takes down what it started."""
    from coordinator.store import StoreError

    restarts = Restarts(DEFAULT_RESTARTS if args.restart_agents is None else args.restart_agents)
    stop = threading.Event()
    try:
        server, procs = start_local_cluster(
            args.policy, args.hosts, args.agents, args.cpus_per_host, args.mem_per_host, args.port,
            args.metrics_port, args.no_cgroups, agent_metrics_port=args.agent_metrics_port,
            agent_spares=args.agent_spares, **options,
        )
        signals_set(stop)
    except KeyboardInterrupt:
        return interrupted("vcemu up: interrupted while starting")
    except (ValueError, OSError, StoreError) as e:
        print(f"vcemu up: error: {e}", file=sys.stderr)
        return 2
    try:  # whatever happens here (a print to a pipe whose reader is gone: `vcemu up | tee` at Ctrl-C), stop all
        for p in procs:
            if (port := _agent_arg(p, "--metrics-port")) is not None:
                print(f"vcemu up: agent {_agent_arg(p, '--agent-id')}: metrics on http://127.0.0.1:{port}/metrics",
                      flush=True)
        metrics = f", metrics on http://127.0.0.1:{server.metrics_port}/metrics" if server.metrics_port else ""
        print(f"vcemu up: coordinator on {server.address} ({described(args.policy)}), {args.hosts} hosts{metrics}. "
              "Ctrl-C stops.", flush=True)
        say_waiting(server)
        watch = AgentWatch(server, procs, restarts)
        while not stop.is_set():
            if watch.check(time.monotonic()):
                # No agent is left to take a Stop for the tasks it ran (they ended with it): each would only fail,
                # after its retries' backoff, and be logged at exit (LiveBackend.closing).
                server.stop_tasks_on_exit = False
                print("vcemu up: every agent process has exited; stopping the coordinator", file=sys.stderr,
                      flush=True)
                return 1
            stop.wait(0.5)
        print("vcemu up: stopping", flush=True)
        return 0
    finally:
        server.stop()
        stop_agents(procs)


def waiting_lines(server: CoordinatorServer, at_most: int = 10) -> list[str]:
    """``vcemu up``'s lines, once its agents have registered, for the jobs of its state file that these hosts can
    never hold (:meth:`~coordinator.engine.Engine.waiting_for_hosts`): at most ``at_most``, then a count."""
    waiting = server.engine.waiting_for_hosts()
    lines = [f"vcemu up: {job} stays pending: these hosts can never hold it ({why}); `vcemu cancel {job}` drops it"
             for job, why in waiting[:at_most]]
    if len(waiting) > at_most:
        lines.append(f"vcemu up: and {len(waiting) - at_most} more jobs of the state file these hosts can never hold")
    return lines


def say_waiting(server: CoordinatorServer) -> None:
    """After ``up``'s "coordinator on" line (local and ``--ray``): what a restart took back from its state file on
    stdout, as ``vcemu coordinator`` says it, then :func:`waiting_lines` on stderr."""
    if server.restored_note is not None:
        print(f"vcemu up: {server.restored_note}", flush=True)
    for line in waiting_lines(server):
        print(line, file=sys.stderr, flush=True)


class AgentWatch:
    """``vcemu up``'s agent processes, looked at twice a second: one that has exited is named in one line
    (:func:`agent_exit_line`) and started again after the delay :class:`~coordinator.restarts.Restarts` gives, if
    it gives one. ``procs`` is updated in place, so that whoever stops the agents stops the new processes."""

    def __init__(self, server: CoordinatorServer, procs: list[subprocess.Popen], restarts: Restarts) -> None:
        self.server = server
        self.procs = procs
        self.restarts = restarts
        self.gone: set[int] = set()  # positions in procs of the agents that exited and will not be started again
        self.due: dict[int, float] = {}  # position -> when (monotonic) its agent, which exited, is started again
        self.started: dict[int, float] = {}  # position -> when (monotonic) its agent was last started again

    def check(self, now: float) -> bool:
        """Say what exited, start again what is due; True once every agent has exited for good."""
        for i, p in enumerate(self.procs):
            if i in self.gone:
                continue
            agent = _agent_arg(p, "--agent-id") or "?"
            if i in self.due:
                if now >= self.due[i]:
                    del self.due[i]
                    self._start_again(i, agent, now)
                continue
            if p.poll() is None:
                continue
            # (how long it ran matters only after a restart: before one, its count is 0 anyway)
            delay = self.restarts.after_exit(agent, p.returncode, ran_s=now - self.started.get(i, now))
            if delay is None:
                self.gone.add(i)
                line = agent_exit_line(self.server, p, last=len(self.gone) == len(self.procs) and not self.due)
                if self.restarts.failed(p.returncode) and self.restarts.limit:  # (its restarts are used up)
                    n = self.restarts.count(agent)
                    line += (f" (not started again: restarted {n} time{'' if n == 1 else 's'} in a row, each time "
                             f"within {self.restarts.steady_s / 60:g} minutes of its start, --restart-agents "
                             f"{self.restarts.limit})")
            else:
                self.due[i] = now + delay
                line = agent_exit_line(self.server, p, restart=(delay, self.restarts.count(agent), self.restarts.limit))
            print(line, file=sys.stderr, flush=True)
        return len(self.gone) == len(self.procs)

    def _start_again(self, i: int, agent: str, now: float) -> None:
        self.started[i] = now
        try:
            self.procs[i] = respawn_agent(self.procs[i])
        except OSError as exc:  # (out of processes or memory): as if its restarts were used up
            self.gone.add(i)
            print(f"vcemu up: agent {agent} could not be started again: {exc.strerror or exc}", file=sys.stderr,
                  flush=True)
        else:
            print(f"vcemu up: agent {agent} started again (pid {self.procs[i].pid})", file=sys.stderr, flush=True)


def agent_exit_line(server: CoordinatorServer, proc: subprocess.Popen, last: bool = False,
                    restart: tuple[float, int, int] | None = None) -> str:
    """One line for ``vcemu up`` when one of its agent processes has exited (a crash, the OOM killer, an
    operator testing fault tolerance). The run goes on: the coordinator declares the agent's hosts lost when its
    heartbeats stop and requeues their jobs on the other agents, as a testbed's coordinator would. For the
    ``last`` agent there is nothing to requeue on, and ``up`` stops. ``restart``: (delay s, the restart's number,
    the limit) of an agent that is to be started again, whose jobs go back to the queue (the new process has none
    of its predecessor's tasks) and may run on it again."""
    agent = _agent_arg(proc, "--agent-id") or "?"
    code = proc.returncode
    if code is not None and code < 0:
        try:
            how = f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with code {code}"
    if last:
        return f"vcemu up: agent {agent} (pid {proc.pid}) {how}"
    silence = server.heartbeat_misses * server.heartbeat_s
    if restart is not None:
        # As a real cluster's coordinator would, it learns of the crash from the agent itself (the new process's
        # registration, whose tasks the old one's jobs do not find) or from its silence, whichever comes first.
        delay, number, limit = restart
        return (f"vcemu up: agent {agent} (pid {proc.pid}) {how}; starting it again in {delay:g} s (restart {number} "
                f"of {limit}): the jobs it ran are requeued with their last progress once it has registered again, "
                f"or once its hosts are declared lost after {silence:g} s without heartbeats")
    with server.engine.lock:
        hosts = sorted(h for h, a in server.backend.host_agent.items() if a == agent)
    return (f"vcemu up: agent {agent} (pid {proc.pid}) {how}; its hosts{' ' + ', '.join(hosts) if hosts else ''} "
            f"will be declared lost after {silence:g} s without heartbeats, and their jobs requeued on the other "
            "agents")


def respawn_agent(proc: subprocess.Popen) -> subprocess.Popen:
    """The agent process :func:`spawn_agent` started as ``proc``, which has exited, started again with the same
    command line (its agent id: the new one removes what the old one left, and registers the same hosts). Its log
    goes to this process's stderr, as ``vcemu up``'s agents' does."""
    token = getattr(proc, "vcemu_token", None)
    again = subprocess.Popen(proc.args, stdout=subprocess.DEVNULL, start_new_session=True, env=_agent_env(token))
    again.vcemu_token = token  # type: ignore[attr-defined]
    return again


def stop_agents(procs: Sequence[subprocess.Popen], timeout: float = 10.0) -> None:
    """Stop the agent processes :func:`spawn_agent` started (:func:`stop_processes`), then remove what any of them
    left because it had been killed (its tasks' cgroups and work directory): ``vcemu up``'s Ctrl-C after an
    agent's kill -9 left them until the next agent of that id started (live review); then give up their ids'
    reservations (:func:`~node_agent.agent.reserve_agent_id`). Never raises: a failure is logged, and the next
    agent of that id removes what is left."""
    stop_processes(procs, timeout)
    ids = [a for p in procs if (a := _agent_arg(p, "--agent-id")) is not None]
    if not ids:
        return
    from node_agent.agent import release_agent_ids, remove_dead_agents_leftovers

    try:
        remove_dead_agents_leftovers(ids)
    except Exception:
        logging.getLogger("vcemu").exception("removing what the stopped agents left failed")
    release_agent_ids(ids)  # (after the removal: another cluster's agent of these ids would remove them too)


def _agent_arg(proc: subprocess.Popen, flag: str) -> str | None:
    """The value of ``flag`` on the command line :func:`spawn_agent` gave an agent process, or None."""
    argv = [str(a) for a in proc.args] if isinstance(proc.args, list | tuple) else []
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else None


def cmd_coordinator(args: argparse.Namespace) -> int:
    from coordinator.policies import get_policy
    from coordinator.service import CoordinatorServer
    from coordinator.store import StoreError
    from vcemu.ports import listen_address, ports_refusal

    log_to_stderr("vcemu coordinator")
    _raise_descriptor_limit()
    refusal = ports_refusal(args.bind, args.port, args.metrics_port)  # before the state file is opened
    if refusal is not None:
        print(f"vcemu coordinator: error: {refusal}", file=sys.stderr)
        return 2
    try:
        server = CoordinatorServer(get_policy(args.policy), port=args.port, bind=args.bind,
                                   metrics_port=args.metrics_port, reference=args.reference_host,
                                   **_server_options(args)).start()
    except (ValueError, OSError, StoreError) as e:
        print(f"vcemu coordinator: error: {e}", file=sys.stderr)
        return 2
    metrics = f", metrics on http://{listen_address(args.bind, server.metrics_port)}/metrics" \
        if server.metrics_port else ""
    print(f"vcemu coordinator listening on {server.address} ({described(args.policy)}){metrics}", flush=True)
    if server.restored_note is not None:
        print(f"vcemu coordinator: {server.restored_note}", flush=True)
    stop = threading.Event()
    signals_set(stop)
    stop.wait()
    server.stop()
    return 0


def _reliability_flags(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--state", type=state_path, default=None, metavar="DB",
                    help="SQLite file for durable state: a restart with the same file carries on the run")
    sp.add_argument("--heartbeat", type=heartbeat_interval, default=2.0, metavar="S",
                    help=f"agent heartbeat interval, at most {MAX_HEARTBEAT_S:g} s; an agent silent for 3 intervals "
                    "is lost (default 2)")
    sp.add_argument("--token-file", default=None, help="require this bearer token on the user API (clients: set "
                    "$VCEMU_TOKEN_FILE) and, without TLS, of the agents (vcemu agent --token-file; the agents vcemu "
                    "up starts get it); it is sent to the agents that want it on their own API")
    sp.add_argument("--max-queued", type=whole_in(0, 10**9), default=MAX_QUEUED, metavar="N",
                    help="the most jobs not finished (pending, running or paused) the coordinator holds: a submission "
                    "past it is refused, RESOURCE_EXHAUSTED (default %(default)s; 0: no bound)")
    sp.add_argument("--tls-cert", default=None, help="PEM certificate for mutual TLS with the agents")
    sp.add_argument("--tls-key", default=None, help="PEM private key for mutual TLS")
    sp.add_argument("--tls-ca", default=None, help="PEM CA certificate of the cluster")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """``up``'s and ``coordinator``'s parsers."""
    sp = sub.add_parser("up", help="run a local cluster: coordinator and agents on 127.0.0.1")
    sp.add_argument("--hosts", type=positive("--hosts", int, high=MAX_AGENT_HOSTS), default=4,
                    help="emulated hosts (default 4)")
    sp.add_argument("--agents", type=positive("--agents", int, high=MAX_LOCAL_AGENTS), default=1,
                    help=f"agent processes sharing the hosts (at most {MAX_LOCAL_AGENTS})")
    sp.add_argument("--cpus-per-host", type=per_host_values(float), default=None,
                    metavar="CORES[,CORES...]", help="real cores per emulated host, or one value per host "
                    "(default: 60%% of the machine shared out)")
    sp.add_argument("--mem-per-host", type=per_host_values(memory_size), default=["1GiB"],
                    metavar="SIZE[,SIZE...]", help="memory per emulated host, or one value per host (default 1GiB)")
    sp.add_argument("--policy", type=policy_name, default="greedy", help=POLICY_HELP)
    sp.add_argument("--port", type=tcp_port, default=50051, help="the coordinator's gRPC port (default %(default)s)")
    sp.add_argument("--metrics-port", type=tcp_port, default=None,
                    help="serve Prometheus metrics on this port (0 picks a free one; default: none)")
    sp.add_argument("--agent-metrics-port", type=first_port, default=None, metavar="BASE",
                    help="agent i serves its own Prometheus metrics on port BASE+i (default: none)")
    add_agent_spares(sp)
    sp.add_argument("--restart-agents", type=whole_in(0, MOST_RESTARTS), default=None, metavar="N",
                    help="start an agent process that dies in failure (a signal, an exit status other than 0 or 2) "
                    f"again, up to N times in a row (an agent that ran {STEADY_S / 60:g} minutes before it died counts "
                    "afresh), after 1, 2, 4, ... s; its jobs go back to the queue with their progress (default "
                    f"{DEFAULT_RESTARTS}, as Ray restarts an agent actor; 0: never)")
    sp.add_argument("--no-cgroups", action="store_true",
                    help="agents throttle by SIGSTOP/SIGCONT duty cycles instead of cgroups (less exact)")
    sp.add_argument("--ray", metavar="ADDRESS", default=None,
                    help="place the hosts on the nodes of the Ray cluster at ADDRESS (HOST:PORT of its head), "
                    "one agent actor per host; token auth: set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN")
    sp.add_argument("--bind", default=None, help="with --ray: the address the coordinator and agents listen on "
                    "(default: each node's IP as Ray reports it)")
    _reliability_flags(sp)
    sp.set_defaults(func=cmd_up)

    sp = sub.add_parser("coordinator", help="run the coordinator alone (agents register with it)")
    sp.add_argument("--policy", type=policy_name, default="greedy", help=POLICY_HELP)
    sp.add_argument("--port", type=tcp_port, default=50051, help="gRPC port (default %(default)s)")
    sp.add_argument("--bind", default="127.0.0.1", help="address to listen on (default %(default)s)")
    sp.add_argument("--metrics-port", type=tcp_port, default=None,
                    help="serve Prometheus metrics on this port (0 picks a free one; default: none)")
    sp.add_argument("--reference-host", type=_reference_host, metavar="CORES[,SIZE]", default=None,
                    help="the host a job's needs are fractions of: a need of 1 is CORES cores, a memory of 0.5 is "
                    "half of SIZE (default 1GiB). Default: the first host to register, which with agents of "
                    "unequal hosts makes a need another amount of CPU from one run to the next")
    _reliability_flags(sp)
    sp.set_defaults(func=cmd_coordinator)
