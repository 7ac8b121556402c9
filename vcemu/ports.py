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
from collections.abc import Callable

#: Bind addresses that listen on every interface, which no one can dial from another machine.
WILDCARDS = ("0.0.0.0", "::", "[::]", "")


def dial_address(bind: str, port: int, node_ip: str) -> str:
    """The ``HOST:PORT`` others dial for a server bound to ``bind``: this node's IP (``node_ip``) for a wildcard bind,
    and an IPv6 host in brackets."""
    host = node_ip if bind in WILDCARDS else bind
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


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


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an IP, maybe in brackets) is this machine's loopback: ``localhost``, 127.0.0.0/8
    (Debian maps the machine's own name to 127.0.1.1), ``::1``."""
    ip = _ip(host)
    return host.lower() == "localhost" if ip is None else ip.is_loopback


def is_local_ip(host: str) -> bool:
    """Whether ``host`` (an IP) is an address of this machine: loopback, or one a socket can bind."""
    ip = _ip(host)
    if ip is None:
        return False
    if ip.is_loopback:
        return True
    try:
        with socket.socket(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((str(ip), 0))
    except OSError:
        return False
    return True


def peer_ip(peer: str) -> str | None:
    """The IP of a gRPC peer string (``ipv4:10.0.0.5:41234``, ``ipv6:[fd00::5]:41234``), else None."""
    m = re.match(r"^ipv4:([\d.]+):\d+$", peer) or re.match(r"^ipv6:\[([0-9a-fA-F:.%]+)\]:\d+$", peer)
    return m.group(1) if m else None


def unreachable_advertise(address: str, peer: str, is_local: Callable[[str], bool] = is_local_ip) -> str | None:
    """Why an agent that registered from ``peer`` (gRPC's peer string) with ``address`` (HOST:PORT) cannot be dialled
    at that address by this coordinator, or None. A loopback or wildcard host names the machine that dials it: right
    only when the agent runs on the coordinator's machine. An agent on another machine with the defaults (``--bind
    127.0.0.1``, or ``--bind 0.0.0.0`` without ``--advertise``) was taken, and every call to it then failed or
    reached this machine instead (multi-host review)."""
    ip = _ip(split_target(address)[0])
    if ip is None or not (ip.is_loopback or ip.is_unspecified):
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
    return f"{flag}: cannot listen on {bind}:{port} (permission denied: ports below 1024 need root)"


def not_local(bind: str) -> bool:
    """True if ``bind`` is no address of this machine (binding it fails with EADDRNOTAVAIL everywhere)."""
    errors = _bind_errors(bind, 0)
    return errors is not None and all(e == errno.EADDRNOTAVAIL for e in errors)


def cannot_listen(bind: str, port: int, flag: str = "--port") -> str:
    """The one refusal of a port in use, the same from the coordinator and the agent."""
    return f"{flag}: cannot listen on {bind}:{port} (in use by another process?)"


def cannot_bind(bind: str, port: int) -> str:
    """gRPC could not listen on a port :func:`port_in_use` found free: the address is the likelier cause."""
    return (f"--bind: cannot listen on {bind}:{port} (not an address of this machine? "
            "or the port was taken just now)")


def ports_refusal(bind: str, port: int, metrics_port: int | None) -> str | None:
    """Why ``--port`` or ``--metrics-port`` cannot be listened on (one line naming the flag), or None.

    Asked before anything slow or lasting starts (a state file opened, cgroups cleaned, workloads
    calibrated), so a refused run has done nothing: the metrics server is otherwise bound last of all.
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
        return f"--metrics-port: cannot listen on {bind}:{metrics_port} (the same port as --port)"
    if port_in_use(bind, metrics_port):
        return cannot_listen(bind, metrics_port, "--metrics-port")
    if port_denied(bind, metrics_port):
        return denied(bind, metrics_port, "--metrics-port")
    return None
