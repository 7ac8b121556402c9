"""Is a TCP port free to listen on? Asked before a gRPC server binds it (coordinator and agent).

gRPC refuses a port in use by itself, but first logs its own C++ error line on stderr, which Python cannot
intercept: the user would get two lines for one refusal. Checking first lets the caller refuse with its one
line naming the flag; a port taken between this check and gRPC's bind still fails, with gRPC's line too.
"""

from __future__ import annotations

import errno
import ipaddress
import re
import socket
import urllib.parse
from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")

#: Bind addresses that listen on every interface, which no one can dial from another machine.
WILDCARDS = ("0.0.0.0", "::", "[::]", "")


def bind_host(bind: str) -> str:
    """The host of a ``--bind`` address as a socket takes it: an IPv6 one without brackets (``[::1]`` is ``::1``)."""
    return bind[1:-1] if bind.startswith("[") and bind.endswith("]") else bind


def listen_address(bind: str, port: int) -> str:
    """``HOST:PORT`` of ``bind`` and ``port`` as gRPC's ``add_*_port`` takes it and as a message shows it: an IPv6
    host in brackets. ``--bind ::1`` was given to gRPC as ``::1:PORT``, which it reads as a host with no port (it
    failed "Misformatted domain name"), and ``--bind [::1]`` to the metrics server, which cannot resolve ``[::1]``
    (IPv6 review: no spelling of an IPv6 address served both)."""
    host = bind_host(bind)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def metrics_host(bind: str) -> str:
    """The address the metrics server of a process bound to ``bind`` listens on: ``bind``, but for ``0.0.0.0`` (or
    "") ``::`` where an IPv6 socket takes IPv4 too (the system's default, ``net.ipv6.bindv6only=0``). gRPC listens on
    both families for a wildcard ``0.0.0.0``, the metrics server (an IPv4 socket) did not: on an IPv6 network (an IPv6
    Kubernetes cluster, whose manifests bind 0.0.0.0) the agents registered and ran jobs, and no Prometheus could
    scrape them (IPv6 review)."""
    bind = bind_host(bind)
    if bind not in ("0.0.0.0", ""):
        return bind
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            if s.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 0:
                return "::"
    except OSError:  # (no IPv6 in this kernel)
        pass
    return bind


def serve_metrics(bind: str, serve: Callable[[str], _T]) -> _T:
    """``serve(host)`` on :func:`metrics_host`, and for a wildcard bind whose ``::`` cannot be listened on, on
    ``bind`` itself (IPv4 alone), as gRPC falls back for its wildcard. ``::`` takes the port on both families, and
    one held on IPv6 alone (``[::1]:PORT``, another program's) failed the start where ``0.0.0.0`` had served, past
    :func:`ports_refusal`, which checks ``bind`` (review h214)."""
    host = metrics_host(bind)
    try:
        return serve(host)
    except OSError:
        if host == bind_host(bind):
            raise
    return serve(bind_host(bind))


def dial_address(bind: str, port: int, node_ip: str) -> str:
    """The ``HOST:PORT`` others dial for a server bound to ``bind``: this node's IP (``node_ip``) for a wildcard bind,
    and an IPv6 host in brackets."""
    return listen_address(node_ip if bind in WILDCARDS else bind, port)


def bracketed(address: str) -> str:
    """``address`` (HOST:PORT) with an IPv6 host put in brackets if it has none (``fd00::5:50052`` is
    ``[fd00::5]:50052``), else as given. For an address that must have a port (``vcemu agent --advertise``): the
    Kubernetes DaemonSet's ``--advertise=$(POD_IP):50052`` gave a pod IPv6 address so, which gRPC cannot dial."""
    host, sep, port = address.rpartition(":")
    ip = _ip(host) if sep and port.isascii() and port.isdigit() and not host.startswith("[") else None
    return f"[{host}]:{port}" if ip is not None and ip.version == 6 else address


def split_target(target: str) -> tuple[str, str]:
    """(host, port) of a gRPC address: HOST:PORT, [IPV6]:PORT, ``dns:[//AUTHORITY/]HOST:PORT``, ``ipv4:``/``ipv6:``
    ones; the host without brackets, each part "" if missing."""
    rest = re.sub(r"^(dns:(//[^/]*/)?|ipv[46]:)", "", target)
    host, sep, port = rest.rpartition(":")
    return (host.strip("[]"), port) if sep else (rest.strip("[]"), "")


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


#: Names of the loopback: ``localhost`` (and, RFC 6761, any name under it), and Debian's names of ``::1``.
LOOPBACK_NAMES = ("localhost", "ip6-localhost", "ip6-loopback")


def _loopback_ip(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """``ip.is_loopback``, an IPv4-mapped IPv6 loopback (``::ffff:127.0.0.1``) too, which Python 3.11 says is not."""
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def _unspecified_ip(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_unspecified or (mapped is not None and mapped.is_unspecified)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an IP, maybe in brackets) is this machine's loopback: ``localhost``, 127.0.0.0/8
    (Debian maps the machine's own name to 127.0.1.1), ``::1``, ``::ffff:127.0.0.1``."""
    ip = _ip(host)
    if ip is not None:
        return _loopback_ip(ip)
    name = host.strip("[]").lower().rstrip(".")
    return name in LOOPBACK_NAMES or name.endswith(".localhost")


def is_local_ip(host: str) -> bool:
    """Whether ``host`` (an IP) is an address of this machine: loopback, or one a socket can bind."""
    ip = _ip(host)
    if ip is None:
        return False
    if _loopback_ip(ip):
        return True
    try:
        with socket.socket(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((str(ip), 0))
    except OSError:
        return False
    return True


def peer_ip(peer: str) -> str | None:
    """The IP of a gRPC peer string (``ipv4:10.0.0.5:41234``, ``ipv6:%5Bfd00::5%5D:41234``), else None. gRPC gives an
    IPv6 peer as a URI, its brackets (and a zone's ``%``) percent-encoded: read as ``ipv6:[fd00::5]:41234`` only, no
    IPv6 peer had an IP, and an agent on another machine that registered over IPv6 under ``[::1]`` was taken (IPv6
    review)."""
    peer = urllib.parse.unquote(peer)
    m = re.match(r"^ipv4:([\d.]+):\d+$", peer) or re.match(r"^ipv6:\[([0-9a-fA-F:.]+(?:%[^\]]+)?)\]:\d+$", peer)
    return m.group(1) if m else None


def unreachable_advertise(address: str, peer: str, is_local: Callable[[str], bool] = is_local_ip) -> str | None:
    """Why an agent that registered from ``peer`` (gRPC's peer string) with ``address`` (HOST:PORT) cannot be dialled
    at that address by this coordinator, or None. A loopback or wildcard host names the machine that dials it: right
    only when the agent runs on the coordinator's machine. An agent on another machine with the defaults (``--bind
    127.0.0.1``, or ``--bind 0.0.0.0`` without ``--advertise``) was taken, and every call to it then failed or
    reached this machine instead (multi-host review)."""
    host = split_target(address)[0]
    ip = _ip(host)
    # (IPv6 review: a name of the loopback, ``localhost:PORT``, and ``[::ffff:127.0.0.1]:PORT`` were taken)
    if not (is_loopback(host) or (ip is not None and _unspecified_ip(ip))):
        return None
    source = peer_ip(peer)
    if source is None or is_local(source):
        return None
    return (f"address: {address} names the coordinator's own machine, but the agent registered from {source}: "
            f"start it with --bind set to an address of its machine that the coordinator can reach, or --bind "
            f"0.0.0.0 (it then registers under its address on the way here), or --advertise "
            f"{f'[{source}]' if ':' in source else source}:PORT")


def source_ip_toward(target: str) -> str | None:
    """The address of this machine that packets to ``target`` (a coordinator's HOST:PORT) leave from, as the routing
    table picks it (a UDP socket's connect sends nothing), or None if it cannot be told."""
    host, port = split_target(target)
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, int(port), type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, kind, proto) as s:
            s.connect(address)
            return str(s.getsockname()[0])
    except (OSError, ValueError, IndexError, UnicodeError):
        return None


def coordinator_elsewhere(target: str, source: str) -> bool:
    """Whether the coordinator at ``target`` is on another machine, given ``source``, this machine's address on the
    way there (:func:`source_ip_toward`): packets to an address of this machine leave from that very address, or
    from loopback."""
    src = _ip(source.split("%")[0])
    if src is None or src.is_loopback:
        return False
    try:
        dest = {a[4][0] for a in socket.getaddrinfo(split_target(target)[0], None, type=socket.SOCK_DGRAM)}
    except (OSError, UnicodeError):
        return False
    return source not in dest and not any(is_local_ip(d) for d in dest)


def _bind_errors(bind: str, port: int) -> list[int] | None:
    """The errno of binding ``bind:port`` at each address ``bind`` resolves to (0: it binds), or None if
    it resolves to none (an unknown host: left for gRPC to report)."""
    try:
        addresses = socket.getaddrinfo(bind.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError):
        return None
    errors = []
    for family, kind, proto, _, address in addresses:
        try:  # creating the socket can fail too (no IPv6 in this kernel: EAFNOSUPPORT)
            with socket.socket(family, kind, proto) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC does: TIME_WAIT is no obstacle
                s.bind(address)
                errors.append(0)
        except OSError as exc:
            errors.append(exc.errno or -1)
    return errors or None


def port_in_use(bind: str, port: int) -> bool:
    """True if something listens on ``bind:port`` already (every address ``bind`` resolves to, as gRPC
    fails only when it can bind none of them). Port 0 (any free port) is never in use."""
    errors = _bind_errors(bind, port) if port != 0 else None
    return errors is not None and all(e == errno.EADDRINUSE for e in errors)


def port_denied(bind: str, port: int) -> bool:
    """True if this process may not listen on ``port`` (below 1024 without the privilege: EACCES)."""
    errors = _bind_errors(bind, port) if port != 0 else None
    return errors is not None and all(e == errno.EACCES for e in errors)


def denied(bind: str, port: int, flag: str = "--port") -> str:
    return f"{flag}: cannot listen on {listen_address(bind, port)} (permission denied: ports below 1024 need root)"


def not_local(bind: str) -> bool:
    """True if ``bind`` is no address of this machine (binding it fails with EADDRNOTAVAIL everywhere)."""
    errors = _bind_errors(bind, 0)
    return errors is not None and all(e == errno.EADDRNOTAVAIL for e in errors)


def cannot_listen(bind: str, port: int, flag: str = "--port") -> str:
    """The one refusal of a port in use, the same from the coordinator and the agent."""
    return f"{flag}: cannot listen on {listen_address(bind, port)} (in use by another process?)"


def cannot_bind(bind: str, port: int) -> str:
    """gRPC could not listen on a port :func:`port_in_use` found free: the address is the likelier cause."""
    return (f"--bind: cannot listen on {listen_address(bind, port)} (not an address of this machine? "
            "or the port was taken just now)")


def ports_refusal(bind: str, port: int, metrics_port: int | None) -> str | None:
    """Why ``--port`` or ``--metrics-port`` cannot be listened on (one line naming the flag), or None.

    Asked before anything slow or lasting starts (a state file opened, cgroups cleaned, workloads
    calibrated under units progress), so a refused run has done nothing: the metrics server is otherwise bound
    last of all.
    """
    if not_local(bind):
        return f"--bind: {bind} is not an address of this machine"
    if port_in_use(bind, port):
        return cannot_listen(bind, port)
    if port_denied(bind, port):
        return denied(bind, port)
    if metrics_port is None:
        return None
    if metrics_port != 0 and metrics_port == port:
        return f"--metrics-port: cannot listen on {listen_address(bind, metrics_port)} (the same port as --port)"
    if port_in_use(bind, metrics_port):
        return cannot_listen(bind, metrics_port, "--metrics-port")
    if port_denied(bind, metrics_port):
        return denied(bind, metrics_port, "--metrics-port")
    return None
