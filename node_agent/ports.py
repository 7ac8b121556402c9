"""Is a TCP port free to listen on? Asked before a gRPC server binds it (coordinator and agent).

gRPC refuses a port in use by itself, but first logs its own C++ error line on stderr, which Python cannot
intercept: the user would get two lines for one refusal. Checking first lets the caller refuse with its one
line naming the flag; a port taken between this check and gRPC's bind still fails, with gRPC's line too.
"""

from __future__ import annotations

import errno
import socket


def port_in_use(bind: str, port: int) -> bool:
    """True if something listens on ``bind:port`` already (every address ``bind`` resolves to, as gRPC
    fails only when it can bind none of them). Port 0 (any free port) is never in use; other errors
    (an unknown host, an address not of this machine) are left for gRPC to report."""
    if port == 0:
        return False
    try:
        addresses = socket.getaddrinfo(bind.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError):
        return False
    taken = 0
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC does: TIME_WAIT is no obstacle
            try:
                s.bind(address)
            except OSError as exc:
                taken += exc.errno == errno.EADDRINUSE
    return bool(addresses) and taken == len(addresses)


def cannot_listen(bind: str, port: int, flag: str = "--port") -> str:
    """The one refusal of a port in use, the same from the coordinator and the agent."""
    return f"{flag}: cannot listen on {bind}:{port} (in use by another process?)"


def ports_refusal(bind: str, port: int, metrics_port: int | None) -> str | None:
    """Why ``--port`` or ``--metrics-port`` cannot be listened on (one line naming the flag), or None.

    Asked before anything slow or lasting starts (a state file opened, cgroups cleaned, workloads
    calibrated), so a refused run has done nothing: the metrics server is otherwise bound last of all.
    """
    if port_in_use(bind, port):
        return cannot_listen(bind, port)
    if metrics_port is None:
        return None
    if metrics_port != 0 and metrics_port == port:
        return f"--metrics-port: cannot listen on {bind}:{metrics_port} (the same port as --port)"
    if port_in_use(bind, metrics_port):
        return cannot_listen(bind, metrics_port, "--metrics-port")
    return None
