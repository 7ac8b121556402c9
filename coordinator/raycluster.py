"""Connecting to a Ray cluster: :func:`connect` validates the address and fails fast with one clear line.

Shared by ``vcemu up --ray`` (emulated hosts as Ray actors, :mod:`coordinator.backends.ray`) and the
experiment sweep, which runs its simulations as Ray tasks on the same cluster.

Why a wrapper and not a bare ``ray.init(address)``: with Ray 2.60, an address where nothing listens
makes ``ray.init`` retry for about 85 s before it raises, and a cluster with token authentication that
the caller has no (or the wrong) token for takes 20 s and ends in a generic ``ConnectionError``. Here an
unreachable address is found by a TCP probe within ``timeout_s``, the GCS wait is bounded by the same
budget, and an authentication failure is named as such.

Ray's messages stay out of this process's output: :func:`connect` passes ``log_to_driver=False`` (no
forwarding of the workers' stdout and stderr), but that does not cover the messages the raylets publish to
every driver (``(raylet) A worker died or was killed ...`` when an agent actor's process dies), which a
thread that ``ray.init`` starts in every driver prints to ``sys.stdout``, between ``vcemu up --ray``'s own
lines. Neither ``logging_level`` (the ``ray`` Python logger) nor the deduplication variables
(``RAY_DEDUP_LOGS*``, which a user may turn off) stop that print; Ray's own switch for it (the one
``ray.util.rpdb`` flips while a debugger holds the terminal) does, and :func:`connect` turns it off while
the driver prints nothing of Ray's. The messages are not lost: each raylet writes them to its node's
session log directory (``<temp dir>/session_latest/logs/events/event_RAYLET.log``, the workers'
``worker-*.err``/``python-core-worker-*.log`` beside it).

Token authentication (Ray >= 2.52): the cluster runs with ``RAY_AUTH_MODE=token``; every process that
joins it, this driver included, needs the cluster's token, given as ``RAY_AUTH_TOKEN`` (the token
itself), ``RAY_AUTH_TOKEN_PATH`` (a file) or ``~/.ray/auth_token``, and ``RAY_AUTH_MODE=token`` in its
environment. Ray reads these itself; :func:`connect` only reports which mode it connected with.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

#: The bounded GCS connect window (seconds) for a remote address, unless the caller set Ray's variable.
GCS_WAIT_ENV = "RAY_gcs_server_port_wait_time_s"
AUTH_HINT = ("if the cluster uses token authentication, set RAY_AUTH_MODE=token and its token in RAY_AUTH_TOKEN "
             "(or RAY_AUTH_TOKEN_PATH)")


class RayUnavailable(RuntimeError):
    """The Ray cluster cannot be used; the message is one line naming the setting (``--ray``)."""


@dataclass(frozen=True)
class RayNode:
    node_id: str
    ip: str
    resources: dict[str, float]
    labels: dict[str, str]

    @property
    def cpus(self) -> float:
        return self.resources.get("CPU", 0.0)


@dataclass
class RayContext:
    """A connected driver. ``address`` is what the caller gave (None: a local Ray started here)."""

    address: str | None
    gcs_address: str
    node_ip: str
    auth_mode: str
    ray_version: str
    _owned: bool = field(default=True, repr=False)
    #: The driver's Ray-message switch before :func:`connect` turned it off (None: not touched), put back on close.
    _messages_before: bool | None = field(default=None, repr=False)

    def nodes(self) -> list[RayNode]:
        """The cluster's alive nodes, in a stable order (by node id)."""
        import ray

        out = [RayNode(n["NodeID"], n["NodeManagerAddress"], dict(n.get("Resources", {})),
                       dict(n.get("Labels") or {}))
               for n in ray.nodes() if n.get("Alive")]
        return sorted(out, key=lambda n: n.node_id)

    def named_actors(self) -> set[str]:
        """The names of the live named actors of this connection's namespace."""
        import ray.util

        return set(ray.util.list_named_actors())

    def close(self) -> None:
        import ray

        try:
            if self._owned and ray.is_initialized():
                ray.shutdown()  # prints what Ray held back for deduplication: still silenced here
        finally:
            if self._messages_before is not None:
                _set_ray_messages(self._messages_before)
                self._messages_before = None

    def __enter__(self) -> RayContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_address(address: str, setting: str = "--ray") -> tuple[str, int]:
    """``host:port`` -> (host, port); RayUnavailable naming ``setting`` otherwise."""
    host, sep, port_text = address.strip().rpartition(":")
    if not sep or not host or "://" in host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise RayUnavailable(f"{setting}: {address!r} is not a Ray address; give the head's GCS address as "
                             "HOST:PORT (e.g. 10.0.0.5:6379)")
    return host.strip("[]"), int(port_text)


def probe(address: str, timeout_s: float = 3.0, setting: str = "--ray") -> None:
    """Raise RayUnavailable unless something accepts TCP connections at ``address`` within ``timeout_s``."""
    host, port = parse_address(address, setting)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        why = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise RayUnavailable(f"{setting}: no Ray cluster reachable at {address} ({why})") from None


def _auth_failure(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if type(seen).__name__ == "AuthenticationError" or "InvalidAuthToken" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def connect(address: str | None, timeout_s: float = 5.0, setting: str = "--ray",
            namespace: str = "vcemu", ray_forms: bool = False, **init_kwargs: Any) -> RayContext:
    """Connect this process to the Ray cluster at ``address`` (``HOST:PORT`` of the head's GCS), or start
    a local single-node Ray when ``address`` is None. Raises :class:`RayUnavailable` within about
    ``timeout_s`` (twice it at worst) if the cluster cannot be reached or refuses our credentials.

    ``ray_forms``: also take Ray's own address forms (``auto``, ``ray://HOST:PORT`` of a Ray client server) as
    given, to ``ray.init`` without the fail-fast probe (Ray's own retries and errors then apply): ``vcemu sweep
    --address`` accepts them; ``vcemu up --ray`` does not."""
    import ray

    if ray.is_initialized():
        ctx = ray.get_runtime_context()
        return RayContext(address, ctx.gcs_address, ray.util.get_node_ip_address(), _auth_mode(), ray.__version__,
                          _owned=False)
    kwargs: dict[str, Any] = {"namespace": namespace, "logging_level": "ERROR", "log_to_driver": False}
    kwargs.update(init_kwargs)
    # Before ray.init: its message thread starts inside it. Put back if it fails (or on close).
    before = None if kwargs["log_to_driver"] else _set_ray_messages(False)
    try:
        with _sigterm_kept(ray):
            info = _init(ray, address, timeout_s, setting, kwargs, ray_forms)
        try:
            gcs = getattr(info, "address_info", {}).get("gcs_address") or ray.get_runtime_context().gcs_address
            return RayContext(address, gcs, ray.util.get_node_ip_address(), _auth_mode(), ray.__version__,
                              _messages_before=before)
        except BaseException:
            with contextlib.suppress(Exception):
                ray.shutdown()  # (no context to close it: the caller got none)
            raise
    except BaseException:
        if before is not None:
            _set_ray_messages(before)
        raise


@contextlib.contextmanager
def _sigterm_kept(ray: Any) -> Iterator[None]:
    """Keep the caller's SIGTERM handler across ``ray.init``, which, in the main thread, replaces it with one of
    its own that calls ``sys.exit(SIGTERM)``: a SIGTERM in the second or two of the connect ended ``vcemu replay
    --ray`` with status 15 and no line, where one just before it ended the run as an interruption (status 130,
    its one line). The handler is put back whatever ``ray.init`` did, and a SIGTERM that Ray's handler turned
    into ``SystemExit(15)`` meanwhile is given to it (after ``ray.shutdown``: a local Ray half started is not
    left behind); the default action, too (the process ends by the signal, as it would have a moment before).
    An ignored SIGTERM that Ray made an exit cannot be undone: that exit goes on."""
    import signal
    import threading

    caller = signal.getsignal(signal.SIGTERM)
    # (ray.init sets no handler outside the main thread; None: a handler not set from Python, none to put back)
    if threading.current_thread() is not threading.main_thread() or caller is None:
        yield
        return
    try:
        yield
    except SystemExit as exc:
        if exc.code != signal.SIGTERM or caller is signal.SIG_IGN:
            raise
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM meanwhile is this one (review: it was
        with contextlib.suppress(Exception):           # Ray's handler's, and exit 15 again)
            ray.shutdown()
        signal.signal(signal.SIGTERM, caller)
        if callable(caller):
            caller(signal.SIGTERM, None)  # (raises, as a handler that interrupts does; else the exit goes on)
        else:
            signal.raise_signal(signal.SIGTERM)
        raise
    finally:
        signal.signal(signal.SIGTERM, caller)


def _init(ray: Any, address: str | None, timeout_s: float, setting: str, kwargs: dict[str, Any],
          ray_forms: bool = False) -> Any:
    """``ray.init`` for :func:`connect`: a local Ray, or the cluster at ``address`` within ``timeout_s``."""
    if address is None:
        kwargs.setdefault("include_dashboard", False)
        return ray.init(**kwargs)
    if ray_forms and (address.strip() == "auto" or "://" in address):
        try:
            return ray.init(address=address.strip(), **kwargs)
        except Exception as exc:
            with contextlib.suppress(Exception):
                ray.shutdown()
            detail = str(exc).strip().splitlines()
            raise RayUnavailable(f"{setting}: cannot connect to the Ray cluster at {address} ({type(exc).__name__}"
                                 + (f": {detail[0]}" if detail else "") + ")") from None
    probe(address, timeout_s, setting)
    set_wait = GCS_WAIT_ENV not in os.environ
    if set_wait:
        os.environ[GCS_WAIT_ENV] = str(max(1, int(timeout_s)))
    try:
        with _stderr_kept_unless_failed():
            info = ray.init(address=address.strip(), **kwargs)
    except Exception as exc:
        with contextlib.suppress(Exception):
            ray.shutdown()
        if _auth_failure(exc):
            why = ("RAY_AUTH_MODE=token but no token was found" if "no authentication token" in str(exc)
                   else "it requires token authentication and refused ours (missing or wrong)")
            # Without RAY_AUTH_MODE=token, Ray sends no token at all, whatever RAY_AUTH_TOKEN holds.
            mode = "" if _auth_mode() == "token" else "set RAY_AUTH_MODE=token and "
            raise RayUnavailable(f"{setting}: cannot join the Ray cluster at {address}: {why}; {mode}give the "
                                 "cluster's token in RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH)") from None
        raise RayUnavailable(f"{setting}: cannot connect to the Ray cluster at {address} "
                             f"({type(exc).__name__}); {AUTH_HINT}") from None
    finally:
        if set_wait:
            os.environ.pop(GCS_WAIT_ENV, None)
    return info


def _set_ray_messages(on: bool) -> bool | None:
    """Turn this driver's printing of Ray's published messages (``(raylet) ...`` lines) and forwarded worker
    output on or off; return what it was (None: this Ray has no such switch, nothing changed). See the module
    docstring for why the documented options do not reach these lines."""
    try:
        from ray._private import worker
    except ImportError:  # a Ray that moved it: its messages print as Ray prints them
        return None
    before = getattr(worker, "_worker_logs_enabled", None)
    if before is not None:
        worker._worker_logs_enabled = on
    return before


@contextlib.contextmanager
def _stderr_kept_unless_failed() -> Iterator[None]:
    """Hold what is written to file descriptor 2 in the block (Ray's C++ client writes there directly,
    a line per failed GCS attempt); show it if the block succeeds, drop it if it raises."""
    with tempfile.TemporaryFile() as held:
        saved = os.dup(2)
        ok = False
        try:
            os.dup2(held.fileno(), 2)
            yield
            ok = True
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if ok:
                held.seek(0)
                os.write(2, held.read())


def _auth_mode() -> str:
    """``token`` or ``disabled``: the authentication mode this process runs Ray with."""
    try:
        from ray._raylet import AuthenticationMode, get_authentication_mode

        return "token" if get_authentication_mode() == AuthenticationMode.TOKEN else "disabled"
    except ImportError:  # a Ray without token authentication
        return "disabled"
