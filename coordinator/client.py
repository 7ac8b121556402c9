"""The client commands of ``vcemu``: ``submit``, ``jobs``, ``cancel`` and ``status``, each one gRPC connection to a
running coordinator (:class:`Connection`), with the errors a user meets there said in one line."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from typing import TYPE_CHECKING, Any

from coordinator.hostlist import compress_hosts
from coordinator.model import JobState
from coordinator.policy_names import PolicyNameError, described
from vcemu.cliargs import clipped, format_table, read_token, refuse, whole_in, yield_text
from vcemu.limits import (
    BUSY,
    KNOWN_METADATA,
    MAX_REPLY_BYTES,
    MAX_REQUEST_ID,
    MAX_TASKS,
    request_bounds,
    target_refusal,
)
from vcemu.limits import shown as quoted

if TYPE_CHECKING:
    import grpc

    from coordinator.model import JobSpec
    from vcemu.tls import TlsFiles


DEFAULT_COORDINATOR = "127.0.0.1:50051"


def _tasks(text: str) -> int:
    """``submit --tasks``: 1 to the coordinator's :data:`~vcemu.limits.MAX_TASKS` (a bigger number does not
    even fit the request's 32-bit field: protobuf's ValueError, with a traceback)."""
    return whole_in(1, MAX_TASKS)(text)


def _coordinator_address(text: str) -> str:
    """``--coordinator`` (or $VCEMU_COORDINATOR), checked in one line (:func:`vcemu.limits.target_refusal`)."""
    why = target_refusal(text)
    if why is not None:
        raise argparse.ArgumentTypeError(f"(or $VCEMU_COORDINATOR): {why}")
    return text


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
    from vcemu.tls import TlsFiles

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
        refuse(f"vcemu {what}: {' and '.join(s for s, _ in given)} given without {' and '.join(missing)}: "
                "mutual TLS needs all three (or none, for a coordinator without TLS)")
    for source, path in given:
        try:
            with open(path, "rb"):
                pass
        except OSError as exc:
            refuse(f"vcemu {what}: {source} {path}: {exc.strerror or exc}")
    return TlsFiles(*(path for _, path in given))


def _stub(channel: grpc.Channel):
    from vcemu.v1 import coordinator_pb2_grpc

    return coordinator_pb2_grpc.CoordinatorStub(channel)


class Connection:
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
                refuse(f"vcemu {what}: {exc}")
            self.channel = grpc.secure_channel(self.address, credentials, options=options)
        self.stub = _stub(self.channel)

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.channel.close()

    def rpc(self, method: str, request, with_call: bool = False, timeout: float = 10.0,  # type: ignore[no-untyped-def]
            unsure: str | None = None, busy_for: float = 0.0):
        """Call ``method`` with a ``timeout``-s deadline; an RPC error ends the command with one line (exit status
        2). ``with_call``: return (reply, call), the call giving the reply's metadata. ``unsure``: a line to add
        when the call may have been carried out though it failed (the connection closed during it, or its deadline
        passed): what a submission's user needs to know then (torture review: a batch the coordinator had saved
        was reported with a hint about a wrong address). ``busy_for``: seconds to go on retrying while the
        coordinator answers that it is busy (UNAVAILABLE ending in :data:`BUSY`: too many cancels waiting)."""
        import grpc

        call = getattr(self.stub, method)
        busy_until = time.monotonic() + busy_for
        pause = 0.2
        metadata = _auth()  # (read once for the call, not again at each retry)
        try:
            while True:
                try:
                    if with_call:
                        return call.with_call(request, timeout=timeout, metadata=metadata)
                    return call(request, timeout=timeout, metadata=metadata)
                except grpc.RpcError as exc:
                    if exc.code() != grpc.StatusCode.UNAVAILABLE or BUSY not in (exc.details() or "") or \
                            time.monotonic() + pause > busy_until:
                        raise
                time.sleep(pause)
                pause = min(2 * pause, 2.0)
        except grpc.RpcError as exc:
            message = f"vcemu {self.what}: {exc.code().name}: {exc.details()}"
            details = exc.details() or ""
            # A connection made, then lost during the call: the coordinator killed ("Stream removed"), or stopping
            # ("Cancelling all calls"); not "failed to connect" (none was made: a TLS mismatch, say)
            dropped = any(x in details for x in ("Stream removed", "Cancelling all calls")) or (
                "Socket closed" in details and "failed to connect" not in details)
            connects = None if dropped or exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED else self._connects()
            late = exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED and (dropped or bool(connects))
            if unsure is not None and (dropped or late):
                message += f"\nvcemu {self.what}: {unsure}"
            if dropped:
                message += (f"\nvcemu {self.what}: the connection to {self.address} closed during the call: did the "
                            "coordinator stop?")
            elif late:
                message += (f"\nvcemu {self.what}: {self.address} did not answer within {timeout:g} s: the "
                            "coordinator is busy, or stopped")
            elif exc.code() == grpc.StatusCode.UNAVAILABLE and "Connection refused" in details:
                message += (f"; nothing listens at {self.address}: is the coordinator running (vcemu up, vcemu "
                            "coordinator)? --coordinator or $VCEMU_COORDINATOR names another address")
            elif exc.code() == grpc.StatusCode.UNAUTHENTICATED:  # a coordinator started with --token-file
                message += ("; this coordinator takes calls with its token only: set $VCEMU_TOKEN_FILE to the file "
                            "it was given as --token-file" if not os.environ.get("VCEMU_TOKEN_FILE") else
                            f"; $VCEMU_TOKEN_FILE ({os.environ['VCEMU_TOKEN_FILE']}) does not hold the token this "
                            "coordinator was given as --token-file")
            elif exc.code() == grpc.StatusCode.UNIMPLEMENTED:  # a gRPC server without this service: an agent's port?
                message += (f"; {self.address} serves gRPC but not the coordinator's API: is it an agent's port? "
                            "--coordinator or $VCEMU_COORDINATOR names the coordinator's address")
            elif exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED and connects is False and \
                    (why := self._no_tcp_connection()) is not None:
                # No TCP connection at all (a host down, a firewall that drops, a partition): it was said to have
                # "taken the connection but never answered" (multi-host review)
                message += (f"; cannot connect to {self.address} ({why}): nothing answered the connection: the machine "
                            "is down or unreachable, or a firewall drops it; --coordinator or $VCEMU_COORDINATOR names "
                            "the coordinator's address")
            elif exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED and connects is False:  # (asked once, above)
                message += (f"; {self.address} took the connection but never answered: is it a gRPC server? "
                            "--coordinator or $VCEMU_COORDINATOR names the coordinator's address (a coordinator out of "
                            "file descriptors, ulimit -n, does this too, and so does a network that stalls the "
                            "connection after it is made)")
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
    """Bearer token metadata from $VCEMU_TOKEN_FILE, if set (for a coordinator started with --token-file); an
    unreadable or empty file is refused (:func:`~vcemu.cliargs.read_token`)."""
    from vcemu.auth import bearer

    token = read_token(os.environ.get("VCEMU_TOKEN_FILE") or None, "$VCEMU_TOKEN_FILE")
    return bearer(token) if token else ()


#: The submit flag of each field :func:`submit_refusal` may name.
SUBMIT_FLAGS = {"tasks": "--tasks", "cpu_need": "--cpu-need", "memory": "--memory", "work_seconds": "--work",
                "workload": "--workload", "request_id": "--request-id"}


def submit_refusal(spec: JobSpec, request_id: str) -> tuple[str, str] | None:
    """Why the coordinator would refuse to submit ``spec`` under ``request_id`` whatever hosts it has, as (field,
    why), or None: :meth:`JobSpec.validate` without hosts (the ranges ``submit --help`` states), then the
    coordinator's own bounds (:func:`~vcemu.limits.request_bounds`). ``submit`` asks this before it connects,
    of the job of its flags as of every job of ``--file``; what depends on the hosts (a memory no host has) only
    the coordinator can say."""
    from coordinator.model import InvalidJob

    # The coordinator's bounds first: a work of 1e12 s was refused as "below 1e+12 s" (the model's bound, for
    # simulations) and one of 5e9 s as "at most 1e+09" (the coordinator's), two bounds for one flag (input review).
    why = request_bounds(request_id, spec.name, spec.tasks, spec.work)
    if why is not None:
        field, _, rule = why.partition(": ")
        return field, f"{rule} (the coordinator's bound)"
    try:
        spec.validate()
    except InvalidJob as exc:
        return exc.field, exc.reason
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
        refuse(f"vcemu submit: {SUBMIT_FLAGS.get(why[0], why[0])}: {why[1]}")
    request = pb.SubmitRequest(
        spec=pb.JobSpec(
            tasks=args.tasks, cpu_need=args.cpu_need, memory=args.memory,
            work_seconds=args.work, workload=args.workload,
        ),
        request_id=args.request_id or "",
    )
    unsure = ("the coordinator may have taken the job before the call failed: submit again with the same "
              "--request-id, which makes no second job" if args.request_id else
              "the coordinator may have taken the job before the call failed (`vcemu jobs` shows it); with "
              "--request-id, submitting again makes no second job")
    with Connection(args, "submit") as client:
        job, call = client.rpc("Submit", request, with_call=True, unsure=unsure)
    print(job.job_id)
    if (KNOWN_METADATA, "true") in (call.trailing_metadata() or ()):
        differs = [f"{SUBMIT_FLAGS[name]} {getattr(job.spec, name):g} (not {getattr(request.spec, name):g})"
                   for name in ("tasks", "cpu_need", "memory", "work_seconds")
                   if getattr(job.spec, name) != getattr(request.spec, name)]
        if job.spec.workload != (request.spec.workload or job.spec.workload):
            differs.append(f"--workload {job.spec.workload} (not {request.spec.workload})")
        also = ("; that job's spec differs from this command's: " + ", ".join(differs)) if differs else ""
        print(f"vcemu submit: request id {args.request_id!r} was seen before: {job.job_id} is the job it made then "
              f"(nothing new was submitted){also}", file=sys.stderr)
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

    import grpc

    from vcemu.v1 import coordinator_pb2 as pb
    from workloads.jobfile import JobFileError, is_swf, load_jobs, shown, unreadable

    RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]

    if is_swf(args.file):  # a trace's point is its submit times, which submit ignores: replay is the command
        refuse(f"vcemu submit: {args.file}: SWF traces are read by simulate and replay only; submit --file takes "
                "a job file (JSON lines or CSV)")
    try:
        source = load_jobs(args.file, timed=False)  # (submit times are ignored, so they may be left out)
    except (OSError, JobFileError) as exc:
        refuse(f"vcemu submit: {unreadable(args.file, exc) if isinstance(exc, OSError) else exc}")
    specs = source.jobs
    if not specs:  # "0 accepted" and exit status 0 read as if the file had been submitted
        refuse(f"vcemu submit: no jobs in {shown(args.file)}")
    request_ids = [f"{args.request_id}:{s.id}" if args.request_id else _job_request_id(s) for s in specs]
    for s, rid in zip(specs, request_ids, strict=True):  # what the coordinator refuses, before connecting (its
        # bounds are below what a simulation of the file takes: more work, say)
        # Without --request-id, the request id is made of the job's id (cut to fit), printable where the id is:
        # the id itself is checked, as the job's name, so that a refusal names the file's field ("id", not
        # "request_id") and quotes its value; the id quoted cut short and escaped (a 100,000-character id filled
        # the terminal, and one with a newline split the line; input review).
        why = submit_refusal(dataclasses.replace(s, name=s.id), rid if args.request_id else "-")
        if why is not None:
            field = "id" if why[0] == "spec.name" else why[0]
            refuse(f"vcemu submit: {args.file}:{source.lines.get(s.id)}: job {quoted(s.id)}: {field}: {why[1]}")
    client, accepted, refused, known, told, left = Connection(args, "submit"), 0, 0, 0, 0, 0
    with client:
        for k in range(0, len(specs), 1000):
            chunk = specs[k:k + 1000]
            requests = [pb.SubmitRequest(spec=pb.JobSpec(tasks=s.tasks, cpu_need=s.cpu_need, memory=s.mem,
                                                         work_seconds=s.work, workload=s.workload, name=s.id),
                                         request_id=rid) for s, rid in zip(chunk, request_ids[k:k + 1000],
                                                                           strict=True)]
            # (a thousand jobs, each committed with fsync, on a busy machine: more than a read's 10 s)
            unsure = (f"the coordinator may have taken jobs {chunk[0].id} to {chunk[-1].id} (lines "
                      f"{source.lines.get(chunk[0].id)} to {source.lines.get(chunk[-1].id)}) before the call failed; "
                      f"{accepted:,} jobs before them were accepted. The same command again submits only the jobs "
                      "the coordinator does not have (each job's request id)")
            reply = client.rpc("SubmitBatch", pb.SubmitBatchRequest(requests=requests), timeout=60.0, unsure=unsure)
            for i, (s, r) in enumerate(zip(chunk, reply.results, strict=True)):
                where = f"vcemu submit: {args.file}:{source.lines.get(s.id)}: job {s.id}"
                if r.code == 0:
                    accepted += 1
                    told += r.HasField("known")
                    known += r.known
                    print(f"{s.id}\t{r.job.job_id}")
                elif r.code == RESOURCE_EXHAUSTED:
                    # The coordinator holds all the jobs it takes (--max-queued): so would it for every job after this
                    # one, each refused on a line of its own. Stopped here, the rest said in one line.
                    left = len(specs) - k - i
                    print(f"{where}: {r.error}; it and the {left - 1:,} jobs after it were not submitted: the same "
                          "command again, once jobs have finished, submits them (and no job twice)", file=sys.stderr)
                    break
                else:
                    refused += 1
                    print(f"{where}: {r.error}", file=sys.stderr)
            if left:
                break
    # A coordinator older than SubmitResult.known does not say which jobs it already had.
    new = f" ({accepted - known} new, {known} already known)" if told == accepted else ""
    rest = f", {left:,} not submitted" if left else ""
    print(f"{accepted} accepted{new}, {refused} refused{rest}", file=sys.stderr)
    return 0 if refused == 0 and not left else 1


def _job_request_id(spec: JobSpec) -> str:
    """A job file's job's request id: a hash of its id and of what the coordinator runs (tasks, CPU need,
    memory, work, workload), then its id. Per job, not per file (as it was), so that appending a job to a file
    submitted before does not make every earlier job new again; and a job whose values changed is not taken
    for the one submitted before under its id."""
    what = json.dumps([spec.id, spec.tasks, spec.cpu_need, spec.mem, spec.work, spec.workload])
    # The id part cut to fit the coordinator's bound (the hash covers the whole id): a job id of 240 to 256
    # characters, a valid name, was refused as "request_id: at most 256 characters" (input review).
    return f"{hashlib.sha256(what.encode()).hexdigest()[:16]}:{spec.id}"[:MAX_REQUEST_ID]


def _job_table(jobs) -> str:
    # STRETCH: flow time over work; B.STRETCH: the same bounded at 30 s (the reply's ``bounded_stretch``), done jobs
    # only. (STRETCH from the times, which a coordinator before the reply's ``stretch`` field sends too.)
    # YIELD: the share now over the need, running jobs only (a job that is not running has none: not 0.00).
    # NAME: the user's name for the job (a job file's id), when some job has one.
    # HOSTS: each host once, with its number of the job's tasks (coordinator.hostlist; --json lists one per task).
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
            f"{j.spec.work_seconds:.0f}", yield_text(getattr(j, "yield")) if j.state == "running" else "-",
            f"{j.virtual_time:.1f}",
            compress_hosts(j.hosts), f"{stretch:.2f}" if done else "-",
            f"{j.bounded_stretch:.2f}" if j.bounded_stretch else "-",
        ))
    return format_table(rows)


#: Jobs per ListJobs reply for ``vcemu jobs`` (about 1.3 MB of replies).
JOBS_PAGE = 10_000


def cmd_jobs(args: argparse.Namespace) -> int:
    from vcemu.v1 import coordinator_pb2 as pb

    jobs, token = [], ""
    with Connection(args, "jobs") as client:
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

    with Connection(args, "cancel") as client:
        # Cancel's reply is the job after the call, the same whether this call cancelled it or one before did (the
        # reply has nothing that tells them apart): the job as it was just before says which.
        before = client.rpc("GetJob", pb.JobRef(job_id=args.job_id))
        job = client.rpc("Cancel", pb.JobRef(job_id=args.job_id), busy_for=60.0)  # (many cancels at once: retried)
    if job.state in ("done", "failed"):  # finished before the call: Cancel leaves such a job as it is
        print(f"{job.job_id} {job.state}: it had finished already, nothing was cancelled")
    elif job.state == "cancelled" and before.state == "cancelled":
        print(f"{job.job_id} cancelled: it had been cancelled already, nothing was cancelled")
    else:
        print(f"{job.job_id} {job.state}")
    return 0


def _policy_line(s: Any) -> str:
    """The policy's name, and for a periodic one its period and next repacking: between two, pending jobs wait
    and freed CPU stays idle, which without this line reads as a stuck cluster."""
    try:
        line = described(s.policy)
    except PolicyNameError:  # a name this vcemu does not know (another version's coordinator): the name alone
        return s.policy
    if line == s.policy:
        return line
    if not s.next_repacking:
        return f"{line}, none due (no job)"
    if s.next_repacking <= s.now:  # its time has come and the coordinator's loop is still busy: not ahead
        return f"{line}, due since t={s.next_repacking:.1f}s"
    return f"{line}, next at t={s.next_repacking:.1f}s"


def cmd_status(args: argparse.Namespace) -> int:
    from vcemu.v1 import coordinator_pb2 as pb

    with Connection(args, "status") as client:
        s = client.rpc("ClusterStatus", pb.ClusterStatusRequest())
    if s.jobs_by_state.get("running", 0):
        yields = f"min yield {yield_text(s.min_yield)}  avg yield {yield_text(s.avg_yield)}"
    else:  # the yields are of running jobs: with none there are none (the reply's 0.0 read as starved jobs)
        yields = "min yield -  avg yield -"
    print(f"policy {_policy_line(s)}  t={s.now:.1f}s  {yields}")
    print("jobs: " + (", ".join(f"{k} {v}" for k, v in sorted(s.jobs_by_state.items()) if v) or "none"))
    if not s.hosts:  # (a header over no rows read as a cluster that had not come up yet, whatever happened)
        print("no hosts: no agent is registered now" + (" (a lost agent's hosts are removed until it registers "
                                                        "again)" if s.lost_agents else ""))
    else:
        rows = [("HOST", "AGENT", "CORES", "CPU ALLOC", "CPU MEASURED", "MEM ALLOC")]
        for h in s.hosts:
            rows.append((h.name, h.agent, cores_text(h.cpu_cores), f"{h.cpu_allocated:.2f}", f"{h.cpu_measured:.2f}",
                         f"{h.memory_allocated:.2f}"))
        print(format_table(rows))
        closed: dict[tuple[str, str], list[str]] = {}  # (one row for an agent's hosts closed together)
        for h in s.hosts:
            if h.closed_for > 0:
                why = clipped(h.closed_reason, CLOSED_WHY_CHARS)
                closed.setdefault((f"{h.closed_for:.1f}s", why), []).append(h.name)
        if closed:  # (gray-failure review: an agent that left the starts unanswered showed in the log alone)
            print()
            print(format_table([("KEPT FROM NEW TASKS", "FOR", "WHY"),
                                *((compress_hosts(names), left, why) for (left, why), names in closed.items())]))
    if s.all_silent_for:
        print()
        print(all_silent_line(s))
    if s.lost_agents:
        print()
        print("\n".join(lost_agent_lines(list(s.lost_agents))))
    return 0


def all_silent_line(s: Any) -> str:
    """What ``vcemu status`` says while every agent is silent and none is declared lost (the coordinator's hold:
    :meth:`coordinator.service.CoordinatorServer._all_silent`), which the heartbeats' growing silence alone hid."""
    agents = len({h.agent for h in s.hosts if h.agent})
    return (f"every agent ({agents}) silent for {s.all_silent_for:.1f} s: none is declared lost before "
            f"{s.all_silent_limit:g} s of silence, a fault of the coordinator's own network being as likely as all of "
            "them failing at once; their leases run out meanwhile, freezing the tasks they still run")


def cores_text(cores: float) -> str:
    """A host's cores in ``vcemu status``: two decimals where they say it all (0.50, 1.00), else up to four
    significant digits. Two decimals alone showed the hosts of a many-host cluster on a small machine as others
    than they are, or as none: 0.0125 cores read 0.01, 0.025 read 0.03, and the 0.001 of ``up --hosts 1200`` on 2
    cores read 0.00 (scale review). (The other columns are fractions of the host: two decimals suit them.)"""
    return f"{cores:.2f}" if round(cores, 2) == cores else f"{cores:.4g}"


#: The characters of why a host is kept from new tasks that ``vcemu status`` shows (the failure's message can be long).
CLOSED_WHY_CHARS = 100


#: Lost agents ``vcemu status`` lists (the latest); a count says how many more the coordinator keeps.
LOST_SHOWN = 10


def lost_agent_lines(lost: list[Any]) -> list[str]:
    """``vcemu status``'s table of the agents declared lost that have not registered again (``LostAgentView``s,
    the latest first): an operator whose agent died saw its hosts vanish from the table, and only the coordinator's
    log said which agent had gone, when and why (operator review, session 36)."""
    rows = [("LOST AGENT", "LOST", "HOSTS REMOVED", "JOBS REQUEUED", "WHY")]
    for a in lost[:LOST_SHOWN]:
        why = a.reason.removeprefix(f"agent {a.agent} lost: ")
        rows.append((a.agent, f"{_ago(a.seconds_ago)} ago", compress_hosts(a.hosts), str(a.jobs_requeued), why))
    lines = format_table(rows).splitlines()
    if len(lost) > LOST_SHOWN:
        more = len(lost) - LOST_SHOWN
        lines.append(f"and {more} more lost agent{'' if more == 1 else 's'}")
    return lines


def _ago(seconds: float) -> str:
    """A time since, for a person: "42 s", "3 min", "5 h 12 min"."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"


def _connection_flags(sp: argparse.ArgumentParser) -> None:
    """The flags every client command takes: where the coordinator is, and its TLS files."""
    sp.add_argument("--coordinator", type=_coordinator_address,
                    default=os.environ.get("VCEMU_COORDINATOR", DEFAULT_COORDINATOR),
                    help="coordinator address (default $VCEMU_COORDINATOR or %(default)s)")
    for _, flag, env in CLIENT_TLS:  # read when the command runs, so an error can say which one was used
        sp.add_argument(flag, default=None, metavar="PEM", help=f"{_TLS_HELP[flag]} (default ${env})")


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """The client commands' parsers, in ``vcemu --help``'s order."""
    sp = sub.add_parser("submit", help="submit a job to a running coordinator")
    _connection_flags(sp)
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
                    help="submit every job of a job file (.jsonl or .csv, see README; - reads JSON lines from standard "
                    "input) in batches, all at once: its "
                    "submit times are ignored, as are the other job flags")
    sp.set_defaults(func=cmd_submit)

    sp = sub.add_parser("jobs", help="list jobs")
    _connection_flags(sp)
    sp.add_argument("--state", default=None,
                    help=f"only jobs in this state ({', '.join(s.value for s in JobState)})")
    sp.add_argument("--json", action="store_true", help="print JSON instead of a table")
    sp.set_defaults(func=cmd_jobs)

    sp = sub.add_parser("cancel", help="cancel a job", description=(
        "Cancel a job: prints the job and its state. A job that had finished or had been cancelled already is left "
        "as it is, and the line says that nothing was cancelled (exit status 0 all the same)."))
    _connection_flags(sp)
    sp.add_argument("job_id")
    sp.set_defaults(func=cmd_cancel)

    sp = sub.add_parser("status", help="cluster status", description=(
        "Cluster status: the policy, the yields of the running jobs, the jobs by state (every accepted job), "
        "each host's CPU and memory, and the agents declared lost that have not registered again (when, their "
        "hosts, the jobs requeued, why)."))
    _connection_flags(sp)
    sp.set_defaults(func=cmd_status)
