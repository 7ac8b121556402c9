"""``vcemu agent``: run a node agent emulating one or more hosts (:func:`agent_main`)."""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import re
import signal
import socket
import sys
import threading
from collections.abc import Callable

from node_agent.spares import DEFAULT_SPARES, MAX_SPARES
from vcemu.cliargs import LOG_TIME, dash_hint, whole_in
from vcemu.limits import MAX_AGENT_HOSTS, MAX_NAME, address_refusal, name_refusal, shown, target_refusal
from vcemu.signals import set_on_signals
from vcemu.sizes import host_memory_refusal, parse_size

_AGENT_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")



def _list_of(conv, what: str):  # type: ignore[no-untyped-def]
    def parse(text: str) -> list:  # type: ignore[type-arg]
        try:
            values = [conv(x) for x in text.split(",")]
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e) if "parse" in str(e) else f"not a number: {text!r}") from None
        if any(not v > 0 for v in values):
            raise argparse.ArgumentTypeError(f"{what} must be > 0, got {text!r}")
        return values

    return parse


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        """One clear line (no usage block), exit status 2."""
        self.exit(2, f"{self.prog}: error: {dash_hint(message)}\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="vcemu agent", description="Run a node agent: emulated hosts whose tasks are real "
                "processes with cgroup-enforced CPU shares.")
    p.add_argument("--hosts", type=int, default=1, help="number of emulated hosts (default 1)")
    p.add_argument("--cpus-per-host", type=_list_of(float, "cpus"), default=[1.0], metavar="CORES[,CORES...]",
                   help="CPU capacity of each host in real cores, or one value per host (default 1)")
    p.add_argument("--mem-per-host", type=_list_of(parse_size, "memory"), default=[1 << 30],
                   metavar="SIZE[,SIZE...]", help="memory of each host, e.g. 2GiB (default 1GiB)")
    p.add_argument("--port", type=int, default=0, help="gRPC port; 0 picks a free one (default)")
    p.add_argument("--bind", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--agent-id", default=None, help="agent id (default: <hostname>-<pid>); a fixed id lets "
                   "a restarted agent remove the processes and files its crashed predecessor left (the cgroups a "
                   "dead agent left are removed by any agent that starts on this machine)")
    p.add_argument("--host-prefix", default=None, help="host names are <prefix>-h<i> (default: agent id)")
    p.add_argument("--progress-by", choices=("cpu-time", "units"), default="cpu-time",
                   help="a task is done when it has had its CPU-seconds (default: the model's unit of work, immune "
                        "to this machine's drifting speed) or when the program has done its calibrated units")
    p.add_argument("--spares", type=whole_in(0, MAX_SPARES), default=DEFAULT_SPARES, metavar="N",
                   help=f"programs of each workload started ahead, numpy loaded, so that a task's start or resume "
                        f"does not wait for them (0: none; default {DEFAULT_SPARES})")
    p.add_argument("--rates-file", default=None, metavar="FILE",
                   help="with --progress-by units, the workloads' calibration: read from FILE if an earlier agent "
                        "wrote it there (trusted as long as it is there: give a file of this run's), else measured "
                        "(about 4 s) and written there, so that an agent started again registers at once (under "
                        "cpu-time progress nothing is calibrated)")
    p.add_argument("--no-cgroups", action="store_true",
                   help="throttle with SIGSTOP/SIGCONT duty cycling instead of cgroups")
    p.add_argument("--metrics-port", type=int, default=None,
                   help="serve Prometheus metrics on this port, at the --bind address (loopback by default: give "
                        "--bind for a Prometheus on another machine)")
    p.add_argument("--coordinator", default=None, metavar="ADDR", help="register with this coordinator")
    p.add_argument("--advertise", default=None, metavar="ADDR",
                   help="address the coordinator should dial (default: the --bind address; with --bind 0.0.0.0 or "
                        "::, this machine's address on the way to the coordinator)")
    p.add_argument("--token-file", default=None, metavar="FILE",
                   help="the bearer token of a coordinator started with --token-file: this agent's own API wants "
                        "it (the coordinator sends it), and with --coordinator it is sent with RegisterAgent and "
                        "Heartbeat (vcemu up gives the agents it starts the coordinator's)")
    p.add_argument("--tls-cert", default=None, help="PEM certificate for mutual TLS (with --tls-key, --tls-ca)")
    p.add_argument("--tls-key", default=None, help="PEM private key for mutual TLS")
    p.add_argument("--tls-ca", default=None, help="PEM CA certificate that signed the cluster's certificates")
    p.add_argument("--parent-pid", type=int, default=None, metavar="PID",
                   help="stop, as on SIGTERM, once process PID is no longer this agent's parent (it exited); "
                        "vcemu up, demo and replay pass their own pid")
    return p


def _hosts(args: argparse.Namespace, parser: argparse.ArgumentParser):  # type: ignore[no-untyped-def]
    from node_agent.agent import HostSpec

    if args.hosts < 1:
        parser.error(f"argument --hosts: must be >= 1, got {args.hosts}")
    cpus, mems = args.cpus_per_host, args.mem_per_host
    for flag, values in (("--cpus-per-host", cpus), ("--mem-per-host", mems)):
        if len(values) not in (1, args.hosts):
            parser.error(f"argument {flag}: give one value or {args.hosts} (one per host), got {len(values)}")
    machine = os.cpu_count() or 1
    if max(cpus) > machine:
        parser.error(f"argument --cpus-per-host: {max(cpus)} cores is more than this machine's {machine}")
    for why in filter(None, map(host_memory_refusal, mems)):
        parser.error(f"argument --mem-per-host: {why}")
    prefix = args.host_prefix or args.agent_id
    # The coordinator's rule for host names, checked here: refused there, the agent retried its registration for
    # ever with one word, INVALID_ARGUMENT (diff review)
    flag, longest = ("--host-prefix" if args.host_prefix else "--agent-id"), f"{prefix}-h{args.hosts - 1}"
    why = name_refusal(flag, prefix)
    if why is None and len(longest) > MAX_NAME:
        why = f"{flag}: too long for host names of at most {MAX_NAME} characters ({len(longest)}: {shown(longest)})"
    if why is not None:
        parser.error(f"argument {why}")
    if args.hosts > MAX_AGENT_HOSTS:
        parser.error(f"argument --hosts: at most {MAX_AGENT_HOSTS:,} per agent, got {args.hosts}")
    return [HostSpec(name=f"{prefix}-h{i}", cpu_cores=cpus[i % len(cpus)], memory_bytes=mems[i % len(mems)])
            for i in range(args.hosts)]


def _rates_file_refusal(path: str) -> str | None:
    """Why ``--rates-file`` cannot be a calibration's file, or None: before the agent calibrates, not after (a
    folder, or one that does not exist, was warned about only once the calibration was made)."""
    if not path:
        return "no file's path (an empty one)"
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return f"{path} is a folder"
    if not os.path.isdir(folder):
        return f"{path}: no folder {folder}"
    if not os.access(folder, os.W_OK | os.X_OK) and not os.path.isfile(path):
        return f"{path}: cannot write in {folder}"
    return None


def agent_main(argv: list[str]) -> int:
    """Run an agent until SIGTERM/SIGINT; returns the exit status (0 after a clean shutdown, 2 for bad
    flags, a port in use included, 1 if the agent cannot start, e.g. cgroups not writable without
    ``--no-cgroups``)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.agent_id is None:
            args.agent_id = f"{socket.gethostname().split('.')[0]}-{os.getpid()}"
        if not _AGENT_ID_RE.match(args.agent_id):
            parser.error(f"argument --agent-id: {args.agent_id!r} must be letters, digits, '_', '.' or '-'")
        for flag in ("port", "metrics_port"):
            v = getattr(args, flag)
            if v is not None and not 0 <= v <= 65535:
                parser.error(f"argument --{flag.replace('_', '-')}: must be a port in [0, 65535], got {v}")
        if args.parent_pid is not None and args.parent_pid != os.getppid():
            # A wrong pid, or a process between (sudo, timeout, a shell that forks): watched, it would stop the
            # agent at once, claiming its parent had exited.
            parser.error(f"argument --parent-pid: process {args.parent_pid} is not this agent's parent (that is "
                         f"{os.getppid()})")
        hosts = _hosts(args, parser)
        if args.rates_file is not None and args.progress_by != "units":
            parser.error("argument --rates-file: only --progress-by units calibrates the workloads (under "
                         f"{args.progress_by} progress a task is done when charged its CPU-seconds)")
        if args.rates_file is not None and (why := _rates_file_refusal(args.rates_file)) is not None:
            parser.error(f"argument --rates-file: {why}")
        # Checked before anything starts: the registrar retried a name with no port, or an address the coordinator
        # refuses, for ever (input review).
        if args.coordinator is not None and (why := target_refusal(args.coordinator)) is not None:
            parser.error(f"argument --coordinator: {why}")
        if args.advertise is not None:
            if args.coordinator is None:
                parser.error("argument --advertise: only with --coordinator (it is the address given there)")
            from vcemu.ports import bracketed

            args.advertise = bracketed(args.advertise)
            if (why := address_refusal("--advertise", args.advertise)) is not None:
                parser.error(f"argument {why}")
        from vcemu.cliargs import AGENT_TOKEN_ENV, read_token
        from vcemu.tls import from_args

        try:
            args.tls = from_args(args.tls_cert, args.tls_key, args.tls_ca)
        except ValueError as e:
            parser.error(str(e))
        # (an unreadable or empty file: refused, exit status 2; an agent vcemu up starts gets the token itself)
        args.token = read_token(args.token_file) or os.environ.get(AGENT_TOKEN_ENV, "").strip() or None
        # Not handed on: every process the agent starts (fencer, tasks, spares) copies its environment (security
        # review: the token was in each task's /proc/PID/environ).
        os.environ.pop(AGENT_TOKEN_ENV, None)
    except SystemExit as e:
        return int(e.code or 0)
    if sum(h.cpu_cores for h in hosts) > (os.cpu_count() or 1):
        print(f"vcemu agent: warning: hosts total {sum(h.cpu_cores for h in hosts):g} cores on a machine with "
              f"{os.cpu_count()}; shares are capped but not guaranteed", file=sys.stderr)
    if not logging.getLogger().handlers:
        # (with the time: a long run's log could not be matched to its metrics, a soak test)
        logging.basicConfig(level=logging.INFO, format="vcemu agent: %(asctime)s %(levelname)s %(message)s",
                            datefmt=LOG_TIME)
    return _run(args, hosts)


def _run(args: argparse.Namespace, hosts: list) -> int:  # type: ignore[type-arg]
    from node_agent.agent import AgentIdInUse
    from node_agent.cgroups import CgroupUnavailable
    from node_agent.register import RECONNECT_OPTIONS, Registrar
    from node_agent.server import PortUnavailable, start_agent
    from vcemu.ports import dial_address

    _exit_when_serving_dies()
    stop = threading.Event()
    if args.parent_pid is not None:
        threading.Thread(target=_stop_when_orphaned, args=(args.parent_pid, stop), name="parent-watch",
                         daemon=True).start()
    with _signals_set(stop):
        try:
            agent = start_agent(hosts, args.agent_id, port=args.port, bind=args.bind,
                                no_cgroups=args.no_cgroups, metrics_port=args.metrics_port, tls=args.tls,
                                progress_by=args.progress_by, spares=args.spares, rates_file=args.rates_file,
                                token=args.token)
        except CgroupUnavailable as e:
            print(f"vcemu agent: error: cannot use cgroups ({e}); run as root on a machine with writable "
                  "cgroups, or pass --no-cgroups to throttle with SIGSTOP/SIGCONT", file=sys.stderr)
            return 1
        except PortUnavailable as e:  # a bad setting, as a bad flag: exit status 2, as the coordinator's
            print(f"vcemu agent: error: {e}", file=sys.stderr)
            return 2
        except (AgentIdInUse, RuntimeError, ValueError) as e:
            print(f"vcemu agent: error: {e}", file=sys.stderr)
            return 1
        advertise = args.advertise or (_advertised(args.bind, agent.port, args.coordinator, agent.address)
                                       if args.coordinator else agent.address)
        registrar = Registrar(agent, args.coordinator, advertise,
                              functools.partial(args.tls.client_channel, options=RECONNECT_OPTIONS) if args.tls
                              else None, token=args.token) \
            if args.coordinator else None
        # (where, as the coordinator says it: ":9101" read as every interface, while it was --bind's, loopback by
        # default, and a Prometheus on another machine found nothing there: multi-host review)
        metrics = f", metrics on http://{dial_address(args.bind, agent.metrics_port, args.bind)}/metrics" \
            if agent.metrics_port is not None else ""
        print(f"vcemu agent: {agent.core.mode}, hosts {', '.join(h.name for h in hosts)}{metrics}", file=sys.stderr)
        print(f"vcemu agent listening on {agent.address}", flush=True)
        stop.wait()
        if registrar:
            registrar.stop()
        agent.stop()
    return 0


def _advertised(bind: str, port: int, coordinator: str, bound: str) -> str:
    """The address to register under when no --advertise is given. Bound to every interface (0.0.0.0, ::), the
    agent registered as "0.0.0.0:PORT", which a coordinator on another machine dials as itself: the address its
    packets to the coordinator leave from instead. Bound to loopback with a coordinator elsewhere: said (multi-host
    review: the agent registered as 127.0.0.1:PORT, and its hosts took jobs that never started)."""
    from vcemu.ports import WILDCARDS, coordinator_elsewhere, dial_address, is_loopback, source_ip_toward

    source = source_ip_toward(coordinator)
    if source is None:
        return bound
    if bind in WILDCARDS:
        return dial_address(bind, port, source)
    if is_loopback(bind) and coordinator_elsewhere(coordinator, source):
        print(f"vcemu agent: warning: listening on {bind} only, while the coordinator {coordinator} is on another "
              f"machine, which cannot reach this agent there: give --bind {source} (this machine's address on the "
              "way to the coordinator) or --bind 0.0.0.0", file=sys.stderr)
    return bound


#: Exit status of an agent whose gRPC server thread died (:func:`_exit_when_serving_dies`).
SERVING_DIED = 70


def _exit_when_serving_dies() -> None:
    """Exit at once if grpc's request-dispatching thread (``Thread-N (_serve)``) dies, as it does when no thread can be
    started for a call (a pids limit reached: "can't start new thread"). The agent then answered no call any more,
    while its registrar's heartbeats kept it alive for the coordinator: its jobs waited on it for good, and SIGTERM
    did not stop it (exhaustion review). Gone, it is declared lost, its tasks are fenced, and it can be started again
    with the same --agent-id."""
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        name = getattr(args.thread, "name", "") or ""
        with contextlib.suppress(Exception):  # (a hook that fails, its stderr gone say, must not keep the agent up)
            previous(args)
        if name.endswith("(_serve)"):
            logging.getLogger("vcemu.agent").critical(
                "the agent's gRPC server thread died (%s: %s): it can answer no call; exiting (status %d) so that "
                "the coordinator declares it lost; start it again with the same --agent-id",
                getattr(args.exc_type, "__name__", args.exc_type), args.exc_value, SERVING_DIED)
            os._exit(SERVING_DIED)

    threading.excepthook = hook


#: How often an agent started with ``--parent-pid`` looks whether its parent is still there.
PARENT_CHECK_S = 0.25


def _stop_when_orphaned(parent: int, stop: threading.Event) -> None:
    """Set ``stop`` once ``parent`` is no longer this process's parent. Why: ``vcemu up``, ``demo`` and ``replay``
    start their agents in sessions of their own (a Ctrl-C at the terminal must reach the command, which stops
    them in order, not every agent at once); so if the command dies without stopping them (SIGKILL, a signal
    in a window no handler covers, a crash), nothing else would: they would run on, retrying a dead coordinator.
    Polling the parent pid, not ``PR_SET_PDEATHSIG``: that signal follows the thread that forked, not the
    process, and it arrives mid-start-up as readily as later; the poll sets the same event SIGTERM does, so the
    agent shuts down cleanly (its tasks killed, its cgroups removed) in either case."""
    while os.getppid() == parent:
        if stop.wait(PARENT_CHECK_S):
            return
    stop.set()  # first: the parent's stderr may be a pipe whose reader is gone too (`vcemu up | tee`, Ctrl-C)
    with contextlib.suppress(OSError):
        print(f"vcemu agent: its parent (pid {parent}) has exited; stopping", file=sys.stderr, flush=True)


class _signals_set:
    """SIGTERM and SIGINT set ``stop`` (only possible from the main thread; elsewhere the caller must
    arrange shutdown itself), through :func:`vcemu.signals.set_on_signals`: safe against a second signal."""

    def __init__(self, stop: threading.Event) -> None:
        self._stop = stop
        self._restore: Callable[[], None] | None = None

    def __enter__(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self._restore = set_on_signals(self._stop, (signal.SIGTERM, signal.SIGINT))

    def __exit__(self, *exc: object) -> None:
        if self._restore is not None:
            self._restore()
