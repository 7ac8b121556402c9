"""The ``vcemu`` command line.

Subcommands: ``up`` (a local cluster: coordinator + agents on 127.0.0.1), ``coordinator`` and ``agent``
(one process each, for real testbeds), ``submit``/``jobs``/``cancel``/``status`` (clients of a running
coordinator), ``simulate`` (a job file through a policy in virtual time), ``demo`` (the README's main
command), ``replay`` (a trace on live agents beside its simulation), ``sweep`` (seed 001's experiments on Ray),
``vcsched``, ``apc`` and ``oppcost`` (seeds 002, 003 and 004's experiments) and ``bench``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, NoReturn

from coordinator.limits import KNOWN_METADATA, MAX_REPLY_BYTES, MAX_TASKS, request_bounds
from coordinator.model import JobState
from coordinator.policy_names import POLICY_NAMES
from node_agent.processes import stop_processes

if TYPE_CHECKING:
    import grpc

    from coordinator.model import JobSpec
    from coordinator.service import CoordinatorServer
    from node_agent.tls import TlsFiles
    from vcemu.v1 import agent_pb2

DEFAULT_COORDINATOR = "127.0.0.1:50051"


def _fraction(name: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        if not 0.0 < value <= 1.0:
            raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
        return value

    return parse


def _positive(name: str, kind=float):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return parse


def _non_negative(text: str) -> float:
    """A finite number >= 0 (a penalty, a delay): float() alone would take -10, nan and inf."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def usable_out_dir(path: str | os.PathLike[str], flag: str = "--out") -> Path:
    """Create the output directory ``path`` now and check that a file can be written in it, so that a long run
    never ends by failing to write its results. ValueError naming ``flag`` otherwise."""
    out = Path(path)
    if out.exists() and not out.is_dir():  # (mkdir's "File exists" reads as if the directory were there)
        raise ValueError(f"{flag} {path}: cannot write results there: it is a file, not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".vcemu-write-check-"):
            pass
    except OSError as exc:
        raise ValueError(f"{flag} {path}: cannot write results there: {exc.strerror or exc}") from None
    return out


_ROLE = re.compile(r":[\w:.-]+:`~?([^`<]*?)\s*(?:<[^`>]*>)?`")


def doc_text(doc: str | None) -> str:
    """A docstring as plain text for ``--help``: reST markup (````x````, ``:mod:`x```) removed."""
    return _ROLE.sub(r"\1", doc or "").replace("``", "")


def version() -> str:
    from coordinator.provenance import package_version

    return package_version() or "unknown (not installed)"


def _port(text: str) -> int:
    """A TCP port, 0 meaning "pick a free one"; gRPC would silently wrap 99999 round to 34463."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be in 0..65535, got {value}")
    return value


def _first_port(text: str) -> int:
    """The first of a range of ports (``up --agent-metrics-port``): 1..65535, not 0, which would give every agent
    a free port of its own choosing that ``up`` could not name."""
    value = _port(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be in 1..65535 (agent i serves on BASE + i), got 0")
    return value


def _tasks(text: str) -> int:
    """``submit --tasks``: 1 to the coordinator's :data:`~coordinator.limits.MAX_TASKS` (a bigger number does not
    even fit the request's 32-bit field: protobuf's ValueError, with a traceback)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if not 1 <= value <= MAX_TASKS:
        raise argparse.ArgumentTypeError(f"must be in 1..{MAX_TASKS}, got {value}")
    return value


def _coordinator_address(text: str) -> str:
    """``--coordinator`` (or $VCEMU_COORDINATOR): HOST:PORT, [IPV6]:PORT, or a gRPC target the client supports
    as such: ``dns:[//AUTHORITY/]HOST:PORT``, ``ipv4:``/``ipv6:`` addresses, ``unix:PATH``. Checked here, in one
    line: gRPC takes a port above 65535 modulo 65536 (its error then names another address), and a URL
    (``http://...``) fails with a hint about TLS that has nothing to do with it."""
    where = "(or $VCEMU_COORDINATOR)"
    if text.startswith(("unix:", "unix-abstract:")):
        if not text.partition(":")[2].removeprefix("//"):
            raise argparse.ArgumentTypeError(f"{where}: no socket path in {text!r}")
        return text
    rest = re.sub(r"^dns:(//[^/]*/)?", "", text)
    rest = re.sub(r"^ipv[46]:", "", rest)
    if "://" in rest or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:(?!\d*$)", rest) and not rest.startswith("["):
        raise argparse.ArgumentTypeError(f"{where}: give HOST:PORT, without a scheme, got {text!r}")
    if rest.startswith("["):  # [IPv6]:port
        host, _, port = rest[1:].partition("]")
        port = port.removeprefix(":") if port.startswith(":") else None  # type: ignore[assignment]
    else:
        host, sep, port = rest.rpartition(":")
        if not sep or ":" in host:  # no port, or an IPv6 address without brackets
            port = None  # type: ignore[assignment]
    if not host or port is None or not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{where}: give HOST:PORT with a port in 1..65535, got {text!r}")
    return text


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        """Bad configuration stops start-up with one clear line naming the setting (exit status 2)."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _size(text: str) -> int:
    from node_agent.cli import parse_size

    return parse_size(text)


def _per_host(conv):  # type: ignore[no-untyped-def]
    """``--x VALUE`` or ``--x V1,V2,...`` (one per host): a list of the comma-separated texts, each checked by
    ``conv`` (which must return a number > 0). The count is checked against ``--hosts`` by :func:`per_host`.
    A refusal does not name the flag: argparse puts "argument --x: " before it."""

    def parse(text: str) -> list[str]:
        parts = [x.strip() for x in text.split(",")]
        where = f" in {text!r}" if len(parts) > 1 else ""  # which of the values, when there are several
        for x in parts:
            try:
                value = conv(x)
            except ValueError:
                raise argparse.ArgumentTypeError(f"cannot parse {x!r}{where}") from None
            if not value > 0:
                raise argparse.ArgumentTypeError(f"must be > 0, got {x!r}{where}")
        return parts

    return parse


def per_host(flag: str, values: str | float | Sequence[str | float], hosts: int) -> list[str]:
    """One value per host from one value (every host) or a list of exactly ``hosts`` values; ValueError naming
    ``flag`` otherwise."""
    items = [str(v) for v in values] if isinstance(values, list | tuple) else [str(values)]
    if len(items) == 1:
        return items * hosts
    if len(items) != hosts:
        raise ValueError(f"argument {flag}: give one value or {hosts} (one per host), got {len(items)}")
    return items


def _policy_name(text: str) -> str:
    if text.lower() not in POLICY_NAMES:
        raise argparse.ArgumentTypeError(f"unknown policy {text!r}; known: {', '.join(sorted(POLICY_NAMES))}")
    return text.lower()


#: ``--policy``'s help: the names without importing the policies (numba, scipy), which ``--help`` need not wait for.
POLICY_HELP = f"scheduling policy: {', '.join(POLICY_NAMES)} (default %(default)s)"


# ---- clients --------------------------------------------------------------------------------------



#: The client commands' TLS settings: argparse attribute, flag, and the environment variable it defaults from.
CLIENT_TLS = (("tls_cert", "--tls-cert", "VCEMU_TLS_CERT"), ("tls_key", "--tls-key", "VCEMU_TLS_KEY"),
              ("tls_ca", "--tls-ca", "VCEMU_TLS_CA"))
_TLS_HELP = {"--tls-cert": "PEM certificate of the cluster, for a coordinator started with --tls-*",
             "--tls-key": "PEM private key of that certificate", "--tls-ca": "PEM CA certificate of the cluster"}


def client_tls(args: argparse.Namespace, what: str) -> TlsFiles | None:
    """The client's TLS files from ``--tls-cert/--tls-key/--tls-ca``, each defaulting from its environment
    variable (a flag wins over its variable), or None for a plaintext channel. A coordinator started with
    ``--tls-*`` requires a client certificate on every call, so a user reaches it only with all three; a
    partial set or an unreadable file is refused here, naming where it came from (flag or variable), rather
    than turning into an UNAVAILABLE from a handshake that cannot succeed."""
    from node_agent.tls import TlsFiles

    given: list[tuple[str, str]] = []  # (where it came from, path)
    missing: list[str] = []
    for attr, flag, env in CLIENT_TLS:
        if getattr(args, attr, None):
            given.append((flag, getattr(args, attr)))
        elif os.environ.get(env):
            given.append((f"${env}", os.environ[env]))
        else:
            missing.append(f"{flag} (or ${env})")
    if not given:
        return None
    if missing:
        _refuse(f"vcemu {what}: {' and '.join(s for s, _ in given)} given without {' and '.join(missing)}: "
                "mutual TLS needs all three (or none, for a coordinator without TLS)")
    for source, path in given:
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            _refuse(f"vcemu {what}: {source} {path}: {exc.strerror or exc}")
    return TlsFiles(*(path for _, path in given))


def _stub(channel: grpc.Channel):
    from vcemu.v1 import coordinator_pb2_grpc

    return coordinator_pb2_grpc.CoordinatorStub(channel)


class _Client:
    """One client command's connection to the coordinator at ``--coordinator``: over mutual TLS when TLS files
    are given (:func:`client_tls`), accepting replies up to :data:`MAX_REPLY_BYTES`, with the bearer token of
    ``$VCEMU_TOKEN_FILE``. A context manager: the channel is closed when the command is done."""

    def __init__(self, args: argparse.Namespace, what: str) -> None:
        import grpc

        self.what, self.address = what, args.coordinator
        self.tls = client_tls(args, what)
        options = [("grpc.max_receive_message_length", MAX_REPLY_BYTES)]
        if self.tls is None:
            self.channel = grpc.insecure_channel(self.address, options=options)
        else:
            try:
                credentials = self.tls.channel_credentials()
            except ValueError as exc:  # the file went away since client_tls looked
                _refuse(f"vcemu {what}: {exc}")
            self.channel = grpc.secure_channel(self.address, credentials, options=options)
        self.stub = _stub(self.channel)

    def __enter__(self) -> _Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.channel.close()

    def rpc(self, method: str, request, with_call: bool = False):  # type: ignore[no-untyped-def]
        """Call ``method`` with a 10-s deadline; an RPC error ends the command with one line (exit status 2).
        ``with_call``: return (reply, call), the call giving the reply's metadata."""
        import grpc

        call = getattr(self.stub, method)
        try:
            if with_call:
                return call.with_call(request, timeout=10, metadata=_auth())
            return call(request, timeout=10, metadata=_auth())
        except grpc.RpcError as exc:
            message = f"vcemu {self.what}: {exc.code().name}: {exc.details()}"
            if exc.code() == grpc.StatusCode.UNAVAILABLE and "Connection refused" in (exc.details() or ""):
                message += (f"; nothing listens at {self.address}: is the coordinator running (vcemu up, vcemu "
                            "coordinator)? --coordinator or $VCEMU_COORDINATOR names another address")
            elif exc.code() == grpc.StatusCode.UNAVAILABLE and not self._connects():
                # TLS explains a failure only on a connection that was made: not a name that does not resolve
                why = self._no_tcp_connection()
                http = self._http1_answer() if why is None else None
                if http is not None:  # a web server (the metrics port?): neither gRPC nor TLS
                    message += (f"; {self.address} answers plain HTTP ({http!r}), not gRPC: is it a metrics port "
                                "(--metrics-port)? --coordinator or $VCEMU_COORDINATOR names the coordinator's gRPC "
                                "address")
                else:
                    message += "; " + (self._unreachable_hint() if why is None else
                                       f"cannot connect to {self.address} ({why}): --coordinator or "
                                       "$VCEMU_COORDINATOR names the coordinator's address")
            print(message, file=sys.stderr)
            raise SystemExit(2) from None

    def _connects(self) -> bool:
        """Whether the channel reaches the coordinator (READY within a second). The coordinator answers
        UNAVAILABLE itself too (no hosts registered yet): only when no connection could be made is a hint
        about TLS to the point."""
        import grpc

        try:
            grpc.channel_ready_future(self.channel).result(timeout=1.0)
        except grpc.FutureTimeoutError:
            return False
        return True

    def _http1_answer(self) -> str | None:
        """The status line with which the coordinator's address answers a plain HTTP/1.0 request, if it does (a
        Prometheus metrics port, a web server); None if it does not (a gRPC server answers with HTTP/2 frames, a
        TLS one with an alert), or if the address is not a TCP one this can try."""
        import socket

        target = self._tcp_target()
        if target is None:
            return None
        try:
            with socket.create_connection(target, timeout=1.0) as sock:
                sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
                first = sock.recv(64)
        except (OSError, ValueError, OverflowError):
            return None
        if not first.startswith(b"HTTP/1."):
            return None
        return first.split(b"\r\n", 1)[0].decode("latin-1")

    def _tcp_target(self) -> tuple[str, int] | None:
        """(host, port) of the coordinator's address when it is a TCP one (HOST:PORT, [IPV6]:PORT, ``dns:``);
        None for a ``unix:`` target or another scheme."""
        target = re.sub(r"^dns:(//[^/]*/)?", "", self.address)
        if target.startswith("unix:") or re.match(r"^[a-z][a-z0-9+.-]*:(?!\d+$)", target):
            return None
        if target.startswith("["):
            host, _, port = target[1:].partition("]")
            port = port.removeprefix(":")
        elif target.count(":") == 1:
            host, port = target.split(":")
        else:
            host, port = target, ""
        try:
            return host, int(port or 443)
        except ValueError:
            return None

    def _no_tcp_connection(self) -> str | None:
        """Why no TCP connection can be made to the coordinator's address (its name does not resolve, no route to
        it, ...), or None if one can, or if the address is not one this can try (a ``unix:`` target, another
        scheme). A hint about TLS is to the point only when a connection is made and its handshake then fails."""
        import socket

        target = re.sub(r"^dns:(//[^/]*/)?", "", self.address)  # dns:HOST:PORT, dns:///HOST:PORT, dns://AUTH/...
        if target.startswith("unix:"):  # unix:PATH or unix:///ABSOLUTE-PATH
            with socket.socket(socket.AF_UNIX) as sock:
                try:
                    sock.connect(target.removeprefix("unix:").removeprefix("//"))
                except OSError as exc:
                    return exc.strerror or str(exc)
            return None
        if re.match(r"^[a-z][a-z0-9+.-]*:(?!\d+$)", target):  # ipv4:..., another scheme, but not host:port
            return None
        if target.startswith("["):  # [IPv6]:port
            host, _, port = target[1:].partition("]")
            port = port.removeprefix(":")
        elif target.count(":") == 1:
            host, port = target.split(":")
        else:  # a name or an IPv6 address alone: gRPC's default port
            host, port = target, ""
        try:
            socket.create_connection((host, int(port or 443)), timeout=1.0).close()
        except (ValueError, OverflowError):  # not a port number, or out of range
            return None
        except OSError as exc:
            return exc.strerror or str(exc) or type(exc).__name__
        return None

    def _unreachable_hint(self) -> str:
        if self.tls is None:
            return (f"if the coordinator at {self.address} was started with --tls-cert/--tls-key/--tls-ca, it "
                    "requires TLS: give the client the cluster's --tls-cert, --tls-key and --tls-ca (or "
                    "$VCEMU_TLS_CERT, $VCEMU_TLS_KEY, $VCEMU_TLS_CA)")
        return (f"with TLS: check that the coordinator at {self.address} was started with --tls-* and that its "
                f"certificate is signed by {self.tls.ca} and names {self.address.rsplit(':', 1)[0]}")


def _auth() -> tuple[tuple[str, str], ...]:
    """Bearer token metadata from $VCEMU_TOKEN_FILE, if set (for a coordinator started with --token-file)."""
    path = os.environ.get("VCEMU_TOKEN_FILE")
    if not path:
        return ()
    try:
        with open(path) as f:
            return (("authorization", f"Bearer {f.read().strip()}"),)
    except OSError as exc:
        _refuse(f"vcemu: $VCEMU_TOKEN_FILE {path}: {exc.strerror or exc}")


def read_token(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        with open(path) as f:
            token = f.read().strip()
    except OSError as exc:
        _refuse(f"vcemu: --token-file {path}: {exc.strerror}")
    if not token:
        _refuse(f"vcemu: --token-file {path}: the file is empty")
    return token


def _refuse(message: str) -> NoReturn:
    """A refused setting: one line on stderr, exit status 2 (as argparse's own refusals)."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def _reference_host(text: str) -> agent_pb2.HostInfo:
    """``--reference-host CORES[,SIZE]``: a host of CORES cores and SIZE of memory (default 1GiB, an agent's)."""
    from node_agent.cli import parse_size
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
    from node_agent.tls import from_args

    try:
        tls = from_args(args.tls_cert, args.tls_key, args.tls_ca)
    except ValueError as exc:
        _refuse(f"vcemu: {exc}")
    return {"state": args.state, "heartbeat_s": args.heartbeat, "token": read_token(args.token_file), "tls": tls}


#: The submit flag of each field :func:`submit_refusal` may name.
SUBMIT_FLAGS = {"tasks": "--tasks", "cpu_need": "--cpu-need", "memory": "--memory", "work_seconds": "--work",
                "workload": "--workload", "request_id": "--request-id"}


def submit_refusal(spec: JobSpec, request_id: str) -> tuple[str, str] | None:
    """Why the coordinator would refuse to submit ``spec`` under ``request_id`` whatever hosts it has, as (field,
    why), or None: :meth:`JobSpec.validate` without hosts (the ranges ``submit --help`` states), then the
    coordinator's own bounds (:func:`~coordinator.limits.request_bounds`). ``submit`` asks this before it connects,
    of the job of its flags as of every job of ``--file``; what depends on the hosts (a memory no host has) only
    the coordinator can say."""
    from coordinator.model import InvalidJob

    try:
        spec.validate()
    except InvalidJob as exc:
        return exc.field, exc.reason
    why = request_bounds(request_id, spec.name, spec.tasks, spec.work)
    if why is not None:
        field, _, rule = why.partition(": ")
        return field, f"{rule} (the coordinator's bound)"
    return None


def cmd_submit(args: argparse.Namespace) -> int:
    from coordinator.model import JobSpec
    from vcemu.v1 import coordinator_pb2 as pb

    if args.file:
        return _submit_file(args)
    # every job flag checked here, before connecting (as --tasks is by argparse and --file's jobs are): an
    # unreachable coordinator's "is the coordinator running" hid a --cpu-need 2 the coordinator would refuse
    # (an empty --workload is the coordinator's default, dgemm, as the service reads it)
    why = submit_refusal(JobSpec("", 0.0, args.tasks, args.cpu_need, args.memory, args.work, args.workload or "dgemm"),
                         args.request_id or "")
    if why is not None:
        _refuse(f"vcemu submit: {SUBMIT_FLAGS.get(why[0], why[0])}: {why[1]}")
    request = pb.SubmitRequest(
        spec=pb.JobSpec(
            tasks=args.tasks, cpu_need=args.cpu_need, memory=args.memory,
            work_seconds=args.work, workload=args.workload,
        ),
        request_id=args.request_id or "",
    )
    with _Client(args, "submit") as client:
        job, call = client.rpc("Submit", request, with_call=True)
    print(job.job_id)
    if (KNOWN_METADATA, "true") in (call.trailing_metadata() or ()):
        print(f"vcemu submit: request id {args.request_id!r} was seen before: {job.job_id} is the job it made then "
              "(nothing new was submitted)", file=sys.stderr)
    return 0


def _submit_file(args: argparse.Namespace) -> int:
    """Submit every job of a job file (JSON lines or CSV) now, through SubmitBatch calls of up to
    1,000. Each job's request id is a hash of that job (:func:`_job_request_id`: its id and everything the
    coordinator runs of it), so submitting the file again (after a crash, a timeout, or with jobs added to it)
    creates only the jobs it did not have, and the summary says how many jobs were new (a resubmission's
    "accepted" alone would read as if it had created them again). A job whose line changed is a new job.
    ``--request-id P`` makes each job's request id ``P:<id>`` instead. Submit times in the file are ignored. A
    file that cannot be read, has a bad line or no job is refused before connecting (exit status 2, as simulate
    refuses it)."""
    import dataclasses

    from vcemu.v1 import coordinator_pb2 as pb
    from workloads.jobfile import JobFileError, is_swf, load_jobs

    if is_swf(args.file):  # a trace's point is its submit times, which submit ignores: replay is the command
        _refuse(f"vcemu submit: {args.file}: SWF traces are read by simulate and replay only; submit --file takes "
                "a job file (JSON lines or CSV)")
    try:
        source = load_jobs(args.file)
    except (OSError, JobFileError) as exc:
        _refuse(f"vcemu submit: {exc}")
    specs = source.jobs
    if not specs:  # "0 accepted" and exit status 0 read as if the file had been submitted
        _refuse(f"vcemu submit: no jobs in {args.file}")
    request_ids = [f"{args.request_id}:{s.id}" if args.request_id else _job_request_id(s) for s in specs]
    for s, rid in zip(specs, request_ids, strict=True):  # what the coordinator refuses, before connecting (its
        # bounds are below what a simulation of the file takes: more work, say)
        why = submit_refusal(dataclasses.replace(s, name=s.id), rid)
        if why is not None:
            _refuse(f"vcemu submit: {args.file}:{source.lines.get(s.id)}: job {s.id}: {why[0]}: {why[1]}")
    client, accepted, refused, known, told = _Client(args, "submit"), 0, 0, 0, 0
    with client:
        for k in range(0, len(specs), 1000):
            chunk = specs[k:k + 1000]
            requests = [pb.SubmitRequest(spec=pb.JobSpec(tasks=s.tasks, cpu_need=s.cpu_need, memory=s.mem,
                                                         work_seconds=s.work, workload=s.workload, name=s.id),
                                         request_id=rid) for s, rid in zip(chunk, request_ids[k:k + 1000],
                                                                           strict=True)]
            reply = client.rpc("SubmitBatch", pb.SubmitBatchRequest(requests=requests))
            for s, r in zip(chunk, reply.results, strict=True):
                if r.code == 0:
                    accepted += 1
                    told += r.HasField("known")
                    known += r.known
                    print(f"{s.id}\t{r.job.job_id}")
                else:
                    refused += 1
                    print(f"vcemu submit: {args.file}: job {s.id}: {r.error}", file=sys.stderr)
    # A coordinator older than SubmitResult.known does not say which jobs it already had.
    new = f" ({accepted - known} new, {known} already known)" if told == accepted else ""
    print(f"{accepted} accepted{new}, {refused} refused", file=sys.stderr)
    return 0 if refused == 0 else 1


def _job_request_id(spec: JobSpec) -> str:
    """A job file's job's request id: a hash of its id and of what the coordinator runs (tasks, CPU need,
    memory, work, workload), then its id. Per job, not per file (as it was), so that appending a job to a file
    submitted before does not make every earlier job new again; and a job whose values changed is not taken
    for the one submitted before under its id."""
    what = json.dumps([spec.id, spec.tasks, spec.cpu_need, spec.mem, spec.work, spec.workload])
    return f"{hashlib.sha256(what.encode()).hexdigest()[:16]}:{spec.id}"


def _job_table(jobs) -> str:
    # STRETCH: flow time over work; B.STRETCH: the same bounded at 30 s (the reply's ``bounded_stretch``), done jobs
    # only. (STRETCH from the times, which a coordinator before the reply's ``stretch`` field sends too.)
    # YIELD: the share now over the need, running jobs only (a job that is not running has none: not 0.00).
    # NAME: the user's name for the job (a job file's id), when some job has one.
    jobs = list(jobs)
    named = any(j.spec.name and j.spec.name != j.job_id for j in jobs)
    rows = [("JOB", *(("NAME",) if named else ()), "STATE", "TASKS", "NEED", "MEM", "WORK", "YIELD", "VT", "HOSTS",
             "STRETCH", "B.STRETCH")]
    for j in jobs:
        done = j.state == "done" and j.end_time >= 0 and j.spec.work_seconds > 0
        stretch = (j.end_time - j.submit_time) / j.spec.work_seconds if done else 0.0
        name = (j.spec.name if j.spec.name and j.spec.name != j.job_id else "-",) if named else ()
        rows.append((
            j.job_id, *name, j.state, str(j.spec.tasks), f"{j.spec.cpu_need:.2f}", f"{j.spec.memory:.2f}",
            f"{j.spec.work_seconds:.0f}", f"{getattr(j, 'yield'):.2f}" if j.state == "running" else "-",
            f"{j.virtual_time:.1f}",
            ",".join(j.hosts) or "-", f"{stretch:.2f}" if done else "-",
            f"{j.bounded_stretch:.2f}" if j.bounded_stretch else "-",
        ))
    return format_table(rows)


def format_table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


#: Jobs per ListJobs reply for ``vcemu jobs`` (about 1.3 MB of replies).
JOBS_PAGE = 10_000


def cmd_jobs(args: argparse.Namespace) -> int:
    from vcemu.v1 import coordinator_pb2 as pb

    jobs, token = [], ""
    with _Client(args, "jobs") as client:
        while True:  # page by page, so that no reply nears the message limit however many jobs there are
            reply = client.rpc("ListJobs", pb.ListJobsRequest(state=args.state or "", page_size=JOBS_PAGE,
                                                              page_token=token))
            jobs.extend(reply.jobs)
            token = reply.next_page_token
            if not token:
                break
    if args.json:
        from google.protobuf.json_format import MessageToDict

        # Every field, zeros included (a running job at virtual time 0 had no virtualTime; live review).
        out = [MessageToDict(j, always_print_fields_with_no_presence=True) for j in jobs]
        for d, j in zip(out, jobs, strict=True):  # a coordinator before the reply's stretch field sends 0 for it
            if j.bounded_stretch and not j.stretch and j.spec.work_seconds > 0:
                d["stretch"] = (j.end_time - j.submit_time) / j.spec.work_seconds
        print(json.dumps(out))
    else:
        print(_job_table(jobs) if jobs else "no jobs")
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    from vcemu.v1 import coordinator_pb2 as pb

    with _Client(args, "cancel") as client:
        # Cancel's reply is the job after the call, the same whether this call cancelled it or one before did (the
        # reply has nothing that tells them apart): the job as it was just before says which.
        before = client.rpc("GetJob", pb.JobRef(job_id=args.job_id))
        job = client.rpc("Cancel", pb.JobRef(job_id=args.job_id))
    if job.state in ("done", "failed"):  # finished before the call: Cancel leaves such a job as it is
        print(f"{job.job_id} {job.state}: it had finished already, nothing was cancelled")
    elif job.state == "cancelled" and before.state == "cancelled":
        print(f"{job.job_id} cancelled: it had been cancelled already, nothing was cancelled")
    else:
        print(f"{job.job_id} {job.state}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from vcemu.v1 import coordinator_pb2 as pb

    with _Client(args, "status") as client:
        s = client.rpc("ClusterStatus", pb.ClusterStatusRequest())
    if s.jobs_by_state.get("running", 0):
        yields = f"min yield {s.min_yield:.2f}  avg yield {s.avg_yield:.2f}"
    else:  # the yields are of running jobs: with none there are none (the reply's 0.0 read as starved jobs)
        yields = "min yield -  avg yield -"
    print(f"policy {s.policy}  t={s.now:.1f}s  {yields}")
    print("jobs: " + (", ".join(f"{k} {v}" for k, v in sorted(s.jobs_by_state.items()) if v) or "none"))
    rows = [("HOST", "AGENT", "CORES", "CPU ALLOC", "CPU MEASURED", "MEM ALLOC")]
    for h in s.hosts:
        rows.append((h.name, h.agent, f"{h.cpu_cores:.2f}", f"{h.cpu_allocated:.2f}", f"{h.cpu_measured:.2f}",
                     f"{h.memory_allocated:.2f}"))
    print(format_table(rows))
    return 0


# ---- servers --------------------------------------------------------------------------------------


def spawn_agent(coordinator: str, hosts: int, cpus_per_host: float | str, mem_per_host: str, agent_id: str,
                extra: Sequence[str] = (), log: IO[bytes] | None = None) -> subprocess.Popen:
    """Start one ``vcemu agent`` process that registers with ``coordinator``. The per-host values may be
    comma-separated lists, one value per host of this agent. Its log (stderr) goes to ``log`` if given, else to
    this process's stderr."""
    cmd = [
        sys.executable, "-m", "coordinator.cli", "agent", "--hosts", str(hosts),
        "--cpus-per-host", str(cpus_per_host), "--mem-per-host", mem_per_host, "--port", "0",
        "--agent-id", agent_id, "--coordinator", coordinator, "--parent-pid", str(os.getpid()), *extra,
    ]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)


#: The agents' log in a live run's results folder (demo, replay).
AGENT_LOG = "agents.log"


def live_run_dir(parent: str, name: str, started: float, flag: str = "--out") -> tuple[Path, IO[bytes]]:
    """A live run's results folder, made at its start (:func:`coordinator.outputs.new_run_dir`), and its agents'
    log opened there (:data:`AGENT_LOG`): the log is written as the run goes (the terminal keeps the progress
    bar) and stays, whole as far as it got, if the run dies. Making both is the check that the run's results
    will have somewhere to go (what :func:`usable_out_dir` checks for other commands): ValueError naming
    ``flag`` otherwise, before the cluster starts."""
    from coordinator.outputs import new_run_dir

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


def default_cpus_per_host(hosts: int) -> float:
    """Give the emulated hosts 60% of the machine's cores.

    The rest is for the coordinator and agents (status polling is Python), and headroom matters: CFS
    quotas are caps, not guarantees, and on a saturated machine tasks fall below their shares and run
    slower per CPU-second than the agent's calibration (cores share caches and memory bandwidth).
    """
    return round(min(1.0, 0.6 * (os.cpu_count() or 1) / hosts), 3)


#: The exit status of a command stopped by Ctrl-C or SIGTERM (the shell's 128 + SIGINT, for either signal).
INTERRUPTED = 130


@contextlib.contextmanager
def signals_interrupt() -> Iterator[None]:
    """Within: SIGINT and SIGTERM raise KeyboardInterrupt in the main thread, and the handlers are given back
    after (for a caller in this process, such as a test). A command that spawns agents needs SIGTERM as well as
    Ctrl-C to unwind through its ``finally`` blocks: the agents run in sessions of their own, so the default
    SIGTERM, ending the process at once, would leave them retrying a dead coordinator for ever. (They also stop
    on their own once this process is gone: ``vcemu agent --parent-pid``.) A signal the caller ignores stays
    ignored: a shell starts a background job (``vcemu up &``) with SIGINT ignored, so that a Ctrl-C meant for the
    command in the foreground does not reach it.

    Only in this process: a process forked from it (a pool's worker, before its initializer has set its own
    handlers) that gets one of these signals exits at once (status 128 + the signal) instead. Raised there, the
    KeyboardInterrupt could unwind out of multiprocessing's child code into this command's own, and the worker
    would run the rest of the command as a second copy of it."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    owner = os.getpid()

    def interrupt(signum: int, _frame: object) -> None:
        if os.getpid() != owner:
            os._exit(128 + signum)
        raise KeyboardInterrupt

    for sig, handler in handlers.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, interrupt)
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Within: SIGINT and SIGTERM are held, then raised as KeyboardInterrupt on the way out, for work that must
    finish once begun (stopping the agents: a user's second Ctrl-C would otherwise leave them running). A signal
    the caller ignores stays ignored, as in :func:`signals_interrupt`."""
    caught: list[int] = []
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig, handler in handlers.items():
        if handler is not signal.SIG_IGN:
            signal.signal(sig, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    if caught:
        raise KeyboardInterrupt


def signals_set(stop: threading.Event) -> None:
    """From now on SIGINT and SIGTERM set ``stop`` (a running coordinator's clean shutdown), except one the caller
    ignores, which stays ignored (see :func:`signals_interrupt`)."""
    from node_agent.signals import set_on_signals  # a second signal cannot hang it (see there)

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
    :func:`~node_agent.ports.ports_refusal` is: otherwise an agent would exit on it, and ``up`` could only say that
    its cluster did not come up."""
    from node_agent.ports import cannot_listen, denied, port_denied, port_in_use

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
                        agent_metrics_port: int | None = None, **options):
    """A coordinator in this process and ``agents`` agent processes sharing ``hosts`` hosts. ``cpus_per_host``
    and ``mem_per_host`` are one value for every host or a list of one value per host (ValueError otherwise).
    The agents take the first free ids ``agent_prefix0``, ``agent_prefix1``, ...; their logs go to ``agent_log``
    (an open binary file) if given, else to this process's stderr: a run that draws a progress bar (demo,
    replay) keeps its terminal for that, and its results folder keeps the agents' log. With
    ``agent_metrics_port``, agent i serves its metrics on that port + i (``vcemu agent --metrics-port``; OSError
    if one cannot be listened on). ``options``: more CoordinatorServer arguments (state, heartbeat_s, token, tls,
    compression)."""
    from coordinator.policies import get_policy
    from coordinator.service import CoordinatorServer, wait_registered
    from node_agent.agent import free_agent_id
    from node_agent.cli import parse_size
    from node_agent.ports import ports_refusal
    from vcemu.v1 import agent_pb2

    cpus = per_host("--cpus-per-host", cpus_per_host if cpus_per_host is not None
                    else default_cpus_per_host(hosts), hosts)
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
    ids: list[str] = []
    stopped = False

    try:  # the agents are in sessions of their own: a Ctrl-C here must take them down, or they outlive us
        agent_of = {i: free_agent_id(f"{agent_prefix}{i}") for i, n in enumerate(split) if n}
        ids += agent_of.values()
        server.backend.choose_reference([
            agent_pb2.HostInfo(name=f"{agent_id}-h{k - first[i]}", cpu_cores=float(cpus[k]),
                               memory_bytes=parse_size(mems[k]))
            for i, agent_id in agent_of.items() for k in range(first[i], first[i] + split[i])])
        for i, agent_id in agent_of.items():
            n = split[i]
            metrics = [] if agent_metrics_port is None else ["--metrics-port", str(agent_metrics_port + i)]
            procs.append(spawn_agent(server.address, n, ",".join(cpus[first[i]:first[i] + n]),
                                     ",".join(mems[first[i]:first[i] + n]), agent_id,
                                     (["--no-cgroups"] if no_cgroups else []) + tls_flags + metrics, agent_log))

        def exited() -> str | None:
            dead = [p for p in procs if p.poll() is not None]
            return f"agent exited with code {dead[0].returncode}" if dead else None

        why = wait_registered(server, ids, wait_s, hosts=hosts, failed=exited)
        if why is not None:
            stop_agents(procs)
            server.stop()
            stopped = True
            if agent_log is not None:  # the agents' own words are in their log, not on the terminal
                why += _log_tail(agent_log.name)
            raise SystemExit(f"vcemu: the local cluster did not come up: {why}")
    except BaseException:  # Ctrl-C (or SIGTERM made KeyboardInterrupt) while starting, a failed spawn
        if not stopped:
            stop_agents(procs)
            server.stop()
        raise
    return server, procs


def cmd_up(args: argparse.Namespace) -> int:
    options = _server_options(args)
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
        if args.agents != 1:  # each host is an agent actor of its own
            print("vcemu up: --agents: not with --ray (each emulated host is its own agent actor)", file=sys.stderr)
            return 2
        return run_up(args, options)
    if args.bind is not None:
        print("vcemu up: --bind: only with --ray (a local cluster listens on 127.0.0.1)", file=sys.stderr)
        return 2
    with signals_interrupt():
        return _run_local_up(args, options)


def _run_local_up(args: argparse.Namespace, options: dict) -> int:
    """``vcemu up`` without ``--ray``: start the local cluster, then wait for Ctrl-C or SIGTERM (a clean stop,
    exit status 0) or for every agent process to have exited (status 1). Called within :func:`signals_interrupt`:
    while starting, Ctrl-C and SIGTERM stop at once, and start_local_cluster takes down what it started."""
    from coordinator.store import StoreError

    stop = threading.Event()
    try:
        server, procs = start_local_cluster(
            args.policy, args.hosts, args.agents, args.cpus_per_host, args.mem_per_host, args.port,
            args.metrics_port, args.no_cgroups, agent_metrics_port=args.agent_metrics_port, **options,
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
        print(f"vcemu up: coordinator on {server.address} ({args.policy}), {args.hosts} hosts{metrics}. "
              "Ctrl-C stops.", flush=True)
        say_waiting(server)
        exited: set[int] = set()
        while not stop.is_set():
            for p in procs:
                if p.pid not in exited and p.poll() is not None:
                    exited.add(p.pid)
                    print(agent_exit_line(server, p, last=len(exited) == len(procs)), file=sys.stderr, flush=True)
            if len(exited) == len(procs):
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
    """Print :func:`waiting_lines` on stderr (local ``up`` and ``up --ray``)."""
    for line in waiting_lines(server):
        print(line, file=sys.stderr, flush=True)


def agent_exit_line(server: CoordinatorServer, proc: subprocess.Popen, last: bool = False) -> str:
    """One line for ``vcemu up`` when one of its agent processes has exited (a crash, the OOM killer, an
    operator testing fault tolerance). The run goes on: the coordinator declares the agent's hosts lost when its
    heartbeats stop and requeues their jobs on the other agents, as a testbed's coordinator would. For the
    ``last`` agent there is nothing to requeue on, and ``up`` stops."""
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
    with server.engine.lock:
        hosts = sorted(h for h, a in server.backend.host_agent.items() if a == agent)
    silence = server.heartbeat_misses * server.heartbeat_s
    return (f"vcemu up: agent {agent} (pid {proc.pid}) {how}; its hosts{' ' + ', '.join(hosts) if hosts else ''} "
            f"will be declared lost after {silence:g} s without heartbeats, and their jobs requeued on the other "
            "agents")


def stop_agents(procs: Sequence[subprocess.Popen], timeout: float = 10.0) -> None:
    """Stop the agent processes :func:`spawn_agent` started (:func:`stop_processes`), then remove what any of them
    left because it had been killed (its tasks' cgroups and work directory): ``vcemu up``'s Ctrl-C after an
    agent's kill -9 left them until the next agent of that id started (live review). Never raises: a failure is
    logged, and the next agent of that id removes what is left."""
    stop_processes(procs, timeout)
    ids = [a for p in procs if (a := _agent_arg(p, "--agent-id")) is not None]
    if not ids:
        return
    try:
        from node_agent.agent import remove_dead_agents_leftovers

        remove_dead_agents_leftovers(ids)
    except Exception:
        logging.getLogger("vcemu").exception("removing what the stopped agents left failed")


def _agent_arg(proc: subprocess.Popen, flag: str) -> str | None:
    """The value of ``flag`` on the command line :func:`spawn_agent` gave an agent process, or None."""
    argv = [str(a) for a in proc.args] if isinstance(proc.args, list | tuple) else []
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else None


def cmd_coordinator(args: argparse.Namespace) -> int:
    from coordinator.policies import get_policy
    from coordinator.service import CoordinatorServer
    from coordinator.store import StoreError
    from node_agent.ports import ports_refusal

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
    metrics = f", metrics on http://{args.bind}:{server.metrics_port}/metrics" if server.metrics_port else ""
    print(f"vcemu coordinator listening on {server.address}{metrics}", flush=True)
    stop = threading.Event()
    signals_set(stop)
    stop.wait()
    server.stop()
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from coordinator.experiments import simulate_file

    return simulate_file(args.jobs_file, args.policy, args.hosts, args.penalty, args.json, args.segment, args.out)


def cmd_demo(args: argparse.Namespace) -> int:
    from coordinator.demo import run_demo

    return run_demo(args)


def _reliability_flags(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--state", default=None, metavar="DB",
                    help="SQLite file for durable state: a restart with the same file carries on the run")
    sp.add_argument("--heartbeat", type=_positive("--heartbeat"), default=2.0, metavar="S",
                    help="agent heartbeat interval; an agent silent for 3 intervals is lost (default 2)")
    sp.add_argument("--token-file", default=None, help="require this bearer token on the user API "
                    "(clients: set $VCEMU_TOKEN_FILE)")
    sp.add_argument("--tls-cert", default=None, help="PEM certificate for mutual TLS with the agents")
    sp.add_argument("--tls-key", default=None, help="PEM private key for mutual TLS")
    sp.add_argument("--tls-ca", default=None, help="PEM CA certificate of the cluster")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="vcemu", description=doc_text(__doc__.splitlines()[0]))
    p.add_argument("--version", action="version", version=f"vcemu {version()}")
    sub = p.add_subparsers(dest="command", required=True)

    def client(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--coordinator", type=_coordinator_address,
                        default=os.environ.get("VCEMU_COORDINATOR", DEFAULT_COORDINATOR),
                        help="coordinator address (default $VCEMU_COORDINATOR or %(default)s)")
        for _, flag, env in CLIENT_TLS:  # read when the command runs, so an error can say which one was used
            sp.add_argument(flag, default=None, metavar="PEM", help=f"{_TLS_HELP[flag]} (default ${env})")

    sp = sub.add_parser("up", help="run a local cluster: coordinator and agents on 127.0.0.1")
    sp.add_argument("--hosts", type=_positive("--hosts", int), default=4, help="emulated hosts (default 4)")
    sp.add_argument("--agents", type=_positive("--agents", int), default=1, help="agent processes sharing the hosts")
    sp.add_argument("--cpus-per-host", type=_per_host(float), default=None,
                    metavar="CORES[,CORES...]", help="real cores per emulated host, or one value per host "
                    "(default: 60%% of the machine shared out)")
    sp.add_argument("--mem-per-host", type=_per_host(_size), default=["1GiB"],
                    metavar="SIZE[,SIZE...]", help="memory per emulated host, or one value per host (default 1GiB)")
    sp.add_argument("--policy", type=_policy_name, default="greedy", help=POLICY_HELP)
    sp.add_argument("--port", type=_port, default=50051, help="the coordinator's gRPC port (default %(default)s)")
    sp.add_argument("--metrics-port", type=_port, default=None,
                    help="serve Prometheus metrics on this port (0 picks a free one; default: none)")
    sp.add_argument("--agent-metrics-port", type=_first_port, default=None, metavar="BASE",
                    help="agent i serves its own Prometheus metrics on port BASE+i (default: none)")
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
    sp.add_argument("--policy", type=_policy_name, default="greedy", help=POLICY_HELP)
    sp.add_argument("--port", type=_port, default=50051, help="gRPC port (default %(default)s)")
    sp.add_argument("--bind", default="127.0.0.1", help="address to listen on (default %(default)s)")
    sp.add_argument("--metrics-port", type=_port, default=None,
                    help="serve Prometheus metrics on this port (0 picks a free one; default: none)")
    sp.add_argument("--reference-host", type=_reference_host, metavar="CORES[,SIZE]", default=None,
                    help="the host a job's needs are fractions of: a need of 1 is CORES cores, a memory of 0.5 is "
                    "half of SIZE (default 1GiB). Default: the first host to register, which with agents of "
                    "unequal hosts makes a need another amount of CPU from one run to the next")
    _reliability_flags(sp)
    sp.set_defaults(func=cmd_coordinator)

    sub.add_parser("agent", help="run a node agent (see vcemu agent --help)", add_help=False)

    sp = sub.add_parser("submit", help="submit a job to a running coordinator")
    client(sp)
    sp.add_argument("--tasks", type=_tasks, default=1,
                    help=f"parallel tasks, 1..{MAX_TASKS}, each needing --cpu-need and --memory of the host the "
                    "policy puts it on; tasks of one job may share a host (default 1)")
    sp.add_argument("--cpu-need", type=float, default=1.0, help="per task, fraction of a host, (0, 1] (default 1.0)")
    sp.add_argument("--memory", type=float, default=0.1,
                    help="per task, fraction of a host's memory, (0, 1] (default 0.1)")
    sp.add_argument("--work", type=float, default=30.0, help="seconds at full speed, > 0 (default 30)")
    sp.add_argument("--workload", default="dgemm",
                    help="what each task runs: dgemm (default), arraycycle or modeled")
    sp.add_argument("--request-id", default=None,
                    help="makes the submit idempotent; with --file, the prefix of every job's request id")
    sp.add_argument("--file", default=None, metavar="JOBS",
                    help="submit every job of a job file (.jsonl or .csv, see README) in batches, all at once: its "
                    "submit times are ignored, as are the other job flags")
    sp.set_defaults(func=cmd_submit)

    sp = sub.add_parser("jobs", help="list jobs")
    client(sp)
    sp.add_argument("--state", default=None,
                    help=f"only jobs in this state ({', '.join(s.value for s in JobState)})")
    sp.add_argument("--json", action="store_true", help="print JSON instead of a table")
    sp.set_defaults(func=cmd_jobs)

    sp = sub.add_parser("cancel", help="cancel a job", description=(
        "Cancel a job: prints the job and its state. A job that had finished or had been cancelled already is left "
        "as it is, and the line says that nothing was cancelled (exit status 0 all the same)."))
    client(sp)
    sp.add_argument("job_id")
    sp.set_defaults(func=cmd_cancel)

    sp = sub.add_parser("status", help="cluster status", description=(
        "Cluster status: the policy, the yields of the running jobs, the jobs by state (every accepted job) and "
        "each host's CPU and memory."))
    client(sp)
    sp.set_defaults(func=cmd_status)

    sp = sub.add_parser("simulate", help="run a job file through a policy in virtual time")
    sp.add_argument("jobs_file")
    sp.add_argument("--policy", type=_policy_name, required=True,
                    help=POLICY_HELP.replace(" (default %(default)s)", ""))
    sp.add_argument("--hosts", type=_positive("--hosts", int), default=4, help="identical hosts (default 4)")
    sp.add_argument("--penalty", type=_non_negative, default=0.0, help="rescheduling penalty, seconds (>= 0)")
    sp.add_argument("--segment", type=int, default=None, help="for an SWF trace: simulate only week K")
    sp.add_argument("--json", action="store_true", help="print JSON instead of a table")
    sp.add_argument("--out", default=None, metavar="DIR", help="also write the results (config.json, jobs.csv, "
                    "summary.json) to a new folder under DIR (default: print only)")
    sp.set_defaults(func=cmd_simulate)

    sp = sub.add_parser("demo", help="the main demo: a live 4-host run beside its simulation")
    sp.add_argument("--policy", type=_policy_name, default="greedy", help=POLICY_HELP)
    sp.add_argument("--seed", type=int, default=1, help="seed of the job mix (default %(default)s)")
    sp.add_argument("--jobs", type=_positive("--jobs", int), default=12, help="jobs in the mix (default %(default)s)")
    sp.add_argument("--hosts", type=_positive("--hosts", int), default=4, help="emulated hosts (default %(default)s)")
    sp.add_argument("--span", type=_positive("--span"), default=60.0,
                    help="seconds over which jobs arrive (default %(default)s)")
    sp.add_argument("--cpus-per-host", type=_positive("--cpus-per-host"), default=None,
                    help="real cores per emulated host (default: 60%% of the machine shared out)")
    sp.add_argument("--no-cgroups", action="store_true",
                    help="agents throttle by SIGSTOP/SIGCONT duty cycles instead of cgroups (less exact)")
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
    sp = sub.add_parser("bench", help="benchmarks: cpu-share, load, scale (live); packing, dfrs (simulation only)",
                        description=BENCH_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    sp.add_argument("name", choices=["cpu-share", "packing", "dfrs", "load", "scale"],
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

Simulation only: no agent, no cgroups.
  packing    MCB8's packing speed on generated instances (seed 002)
  dfrs       DFRS simulation speed and decision p99 (seed 001); its sweep speedup part
             starts a local Ray of 1, then 2 CPUs (--no-sweep skips it)
"""


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
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


def _main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Subcommands implemented by other packages parse their own arguments.
    if argv and argv[0] == "agent":
        from node_agent.cli import agent_main

        return agent_main(argv[1:])
    if argv and argv[0] == "vcsched":
        from coordinator.vcsched.experiment import vcsched_main

        return vcsched_main(argv[1:])
    if argv and argv[0] == "oppcost":
        from coordinator.oppcost.experiment import oppcost_main

        return oppcost_main(argv[1:])
    if argv and argv[0] == "apc":
        from coordinator.apc.experiment import apc_main

        return apc_main(argv[1:])
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
        if argv[1] in ("load", "scale"):
            from coordinator import bench_ops

            return (bench_ops.bench_load_main if argv[1] == "load" else bench_ops.bench_scale_main)(argv[2:])
        if argv[1] == "dfrs":
            from coordinator.bench_dfrs import bench_dfrs_main

            return bench_dfrs_main(argv[2:])
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
