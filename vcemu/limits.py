"""The coordinator API's message limits and metadata keys, in a module of their own so that the client commands
can import them without the server (importing :mod:`coordinator.service` takes about 1.4 s; a whole client
command 0.3 s)."""

from __future__ import annotations

import math
import re

__all__ = ["BUSY", "KNOWN_METADATA", "MAX_AGENT_HOSTS", "MAX_COMPRESS", "MAX_LOCAL_AGENTS", "MAX_MESSAGE_BYTES",
           "MAX_NAME", "MAX_PENALTY_S", "MAX_QUEUED", "MAX_REPLY_BYTES", "MAX_REQUEST_ID", "MAX_SIM_HOSTS", "MAX_TASKS",
           "MAX_WORK_S", "MIN_COMPRESS", "address_refusal", "name_refusal", "request_bounds", "shown", "target_refusal"]

#: Largest request the coordinator accepts (``grpc.max_receive_message_length``).
MAX_MESSAGE_BYTES = 1 << 20
#: Largest reply it sends (ListJobs of a long run), and so what a client's channel must be able to receive: with
#: gRPC's default of 4 MiB, ``vcemu jobs`` failed for good (RESOURCE_EXHAUSTED) once a run held about 34,000 jobs.
MAX_REPLY_BYTES = 64 * MAX_MESSAGE_BYTES

#: The trailing metadata key by which Submit says whether its request id was seen before ("true": the reply is
#: the job that request made then; "false": a new job). Job has no field for it; SubmitResult.known does.
KNOWN_METADATA = "vcemu-known"
#: How an UNAVAILABLE refusal that is only the coordinator being busy ends (too many cancels waiting for the engine's
#: turn): ``vcemu cancel`` retries such a refusal, and no other.
BUSY = "retry in a moment"

#: Jobs not finished (pending, running or paused) a coordinator holds at most by default (``--max-queued``): a
#: submission past it is refused RESOURCE_EXHAUSTED. Unbounded, a job file of millions (or a client in a loop) had
#: every job taken, about 2 KB of the coordinator's memory each, and each decision of the policy weighs the waiting
#: jobs: the coordinator slowed to a crawl, or was killed for memory (43,500 jobs under a 160 MB limit: exhaustion
#: review). ``vcemu submit --file`` stops at the first such refusal; the same command later submits the rest.
MAX_QUEUED = 100_000

#: Bounds on a submitted job spec beyond the model's own checks (a request must not make the coordinator allocate or
#: loop without limit). The client commands check them before connecting (``vcemu submit --tasks``, ``--file``).
#: Most tasks one job may have.
MAX_TASKS = 10_000
#: Most work one job may have, in seconds (a simulation takes up to :data:`coordinator.model.MAX_SECONDS`).
MAX_WORK_S = 1e9
#: Most hosts one agent may register (``vcemu agent --hosts``, RegisterAgent); also the most ``up`` (local or
#: ``--ray``), ``demo`` and ``replay`` emulate.
MAX_AGENT_HOSTS = 10_000
#: Most agent processes a local cluster starts (``--agents``): each is a Python process of about 50 MB with a gRPC
#: server of its own; nothing bounded it, and a few hundred started that many on 2 cores (input review).
MAX_LOCAL_AGENTS = 64
#: Most hosts of a simulation (``simulate --hosts``): 10,000,000 ended in a MemoryError, and 1,000,000 took 31 s and
#: 850 MB for 6 jobs (input review); seed 001's clusters have 128 hosts, HPC2N's 120.
MAX_SIM_HOSTS = 100_000
#: Longest rescheduling penalty, in seconds (``--penalty``): a job's longest work (:data:`MAX_WORK_S`). At 1e308 a
#: preempted job's blocked_until overflowed to inf and the simulation never ended (input review).
MAX_PENALTY_S = MAX_WORK_S
#: Bounds of ``replay --compress`` (trace seconds per wall second): at 1e308 the live clock became inf within 2 s,
#: and 1e-300 was taken (input review). A week of trace in 10 minutes is about 1,000.
MIN_COMPRESS, MAX_COMPRESS = 1e-3, 1e6
#: Longest job name (a job file's job id) and request id; also the longest agent id and host name.
MAX_NAME = 256
MAX_REQUEST_ID = 256


#: The most characters of a value an error message quotes (:func:`shown`).
SHOWN = 60


def shown(text: str) -> str:
    """``text`` quoted for an error message, cut to its first :data:`SHOWN` characters when longer (with its length).
    gRPC sends a refusal's message as metadata, which a client takes up to 8 KiB and a server 16 KiB: a message that
    quoted a 100,000-character job id in full came back as RESOURCE_EXHAUSTED "Stream removed" (input review)."""
    if len(text) <= SHOWN:
        return repr(text)
    return f"{text[:SHOWN]!r}... ({len(text):,} characters)"


def name_refusal(field: str, name: str) -> str | None:
    """Why ``name`` cannot name an agent or a host (``field: why``), or None: required, at most :data:`MAX_NAME`
    characters, printable, no whitespace. Host names label jobs, logs, tables and metrics. What the coordinator's
    RegisterAgent refuses and ``vcemu agent`` checks before it registers."""
    if not name:
        return f"{field}: required"
    if len(name) > MAX_NAME:
        return f"{field}: at most {MAX_NAME} characters, got {len(name):,}"
    if not name.isprintable() or any(c.isspace() for c in name):
        return f"{field}: must be printable, with no space or control character, got {shown(name)}"
    return None


def address_refusal(field: str, address: str) -> str | None:
    """Why ``address`` cannot be an agent's address for the coordinator to dial (``field: why``), or None: HOST:PORT
    with a port in 1..65535, at most :data:`MAX_NAME` characters. What RegisterAgent refuses and ``vcemu agent
    --advertise`` checks before it registers (an address with no port was taken and retried for ever)."""
    host, _, port = address.rpartition(":")
    if not (host and port.isascii() and port.isdigit() and 0 < int(port) < 65536) or len(address) > MAX_NAME:
        return f"{field}: must be HOST:PORT with a port in 1..65535, got {shown(address)}"
    bare = re.sub(r"^(dns:(//[^/]*/)?|ipv[46]:)", "", host)
    if ":" in bare and not (bare.startswith("[") and bare.endswith("]")):
        # (IPv6 review: ``::1:52062`` was taken, and gRPC dials it as the host ``::1:52062`` on port 443)
        return (f"{field}: must be HOST:PORT with an IPv6 address in brackets, got {shown(address)}"
                f"{_bracketed_hint(bare, port)}")
    return None


def _bracketed_hint(host: str, port: str) -> str:
    """``" ([HOST]:PORT?)"`` when ``host`` is an IPv6 address without brackets, else ""."""
    import ipaddress

    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        return ""
    return f" ([{host}]:{port}?)"


def target_refusal(text: str) -> str | None:
    """Why ``text`` is not a coordinator's gRPC address, or None. Taken: HOST:PORT, [IPV6]:PORT, or a target gRPC
    supports as such: ``dns:[//AUTHORITY/]HOST:PORT``, ``ipv4:``/``ipv6:`` addresses, ``unix:PATH``. Checked before
    connecting, by the client commands' and ``vcemu agent``'s ``--coordinator``: gRPC takes a port above 65535
    modulo 65536 (its error then names another address), a URL (``http://...``) fails with a hint about TLS that has
    nothing to do with it, and an agent given a name with no port retried its registration for ever."""
    if text.startswith(("unix:", "unix-abstract:")):
        return None if text.partition(":")[2].removeprefix("//") else f"no socket path in {text!r}"
    rest = re.sub(r"^dns:(//[^/]*/)?", "", text)
    rest = re.sub(r"^ipv[46]:", "", rest)
    bare, _, last = rest.rpartition(":")
    if last.isascii() and last.isdigit() and (hint := _bracketed_hint(bare, last)):
        # (IPv6 review: "fd00::1:50051" was refused as "without a scheme", its "fd00:" read as one)
        return f"give HOST:PORT with an IPv6 address in brackets, got {text!r}{hint}"
    if "://" in rest or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:(?!\d*$)", rest) and not rest.startswith("["):
        return f"give HOST:PORT, without a scheme, got {text!r}"
    port: str | None
    if rest.startswith("["):  # [IPv6]:port
        host, _, after = rest[1:].partition("]")
        port = after.removeprefix(":") if after.startswith(":") else None
    else:
        host, sep, port = rest.rpartition(":")
        if not sep or ":" in host:  # no port, or an IPv6 address without brackets
            port = None
    if not host or port is None or not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        return f"give HOST:PORT with a port in 1..65535, got {text!r}"
    return None


def request_bounds(request_id: str, name: str, tasks: int, work_s: float) -> str | None:
    """The first of these bounds a submission breaks, as ``field: why``, or None: what the coordinator refuses
    (``service.check_spec``) and what ``vcemu submit --file`` checks before connecting. Names are printable: a
    newline in one split its row of ``vcemu jobs`` and of ``submit --file``'s tab-separated output."""
    if len(request_id) > MAX_REQUEST_ID:
        return f"request_id: at most {MAX_REQUEST_ID} characters, got {len(request_id)}"
    if not request_id.isprintable():  # (no newline, tab, NUL or other control character; any letter)
        return f"request_id: must be printable (no newline, tab or other control character), got {shown(request_id)}"
    if len(name) > MAX_NAME:
        return f"spec.name: at most {MAX_NAME} characters, got {len(name)}"
    if not name.isprintable():
        return f"spec.name: must be printable (no newline, tab or other control character), got {shown(name)}"
    if tasks > MAX_TASKS:
        return f"tasks: at most {MAX_TASKS}, got {tasks}"
    if math.isfinite(work_s) and work_s > MAX_WORK_S:
        return f"work_seconds: at most {MAX_WORK_S:g}, got {work_s:g}"
    return None
