"""Launch the agent actors on a Ray cluster, wait until their hosts are registered, and stop them.

:func:`run_up` is ``vcemu up --ray ADDRESS``: a coordinator in this process (the driver) and one agent
actor per emulated host, spread over the Ray nodes, until SIGINT/SIGTERM; :func:`start_on_ray` starts them, for it
and for ``vcemu replay --ray``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from coordinator.backends.ray.placement import HostPlacement, actor_name, free_placements, place_hosts
from coordinator.policy_names import described
from coordinator.raycluster import RayContext, RayUnavailable, connect
from coordinator.restarts import DEFAULT_RESTARTS
from vcemu.cliargs import format_table
from vcemu.signals import signals_deferred

log = logging.getLogger("vcemu.ray")

#: How often Ray may restart a crashed agent actor (each restart cleans up and registers again): as often as
#: ``vcemu up`` restarts a local agent process by default.
MAX_RESTARTS = DEFAULT_RESTARTS
#: How many times the agent actors are started under fresh names when another run takes the names meanwhile.
NAME_ATTEMPTS = 3
#: Seconds between checks that every agent actor answers.
HEALTH_INTERVAL_S = 5.0


class RayAgents:
    """The agent actors of one run. ``coordinator``: the address they register with."""

    def __init__(self, ctx: RayContext, placements: list[HostPlacement], coordinator: str,
                 bind: str | None = None, no_cgroups: bool = False, spares: int = 0, token: str | None = None) -> None:
        import ray

        from node_agent.ray_actor import remote_class

        self.ctx = ctx
        self.placements = placements
        self.coordinator = coordinator
        actor_cls = remote_class()
        self.actors: list[Any] = []
        try:
            for p in placements:
                self.actors.append(actor_cls.options(
                    name=actor_name(p.agent_id), label_selector=p.label_selector, max_restarts=MAX_RESTARTS,
                ).remote(p.agent_id, list(p.hosts), coordinator, bind, no_cgroups, spares, token))
        except BaseException:  # (a name taken since it was looked up, Ctrl-C): the caller gets no object to stop
            with signals_deferred():
                for a in self.actors:
                    with contextlib.suppress(Exception):
                        ray.kill(a, no_restart=True)
            raise
        self._ray = ray
        self.infos: list[dict[str, Any]] = []
        #: Agent ids of the actors dead for good (restarts used up, or killed): reported once, then not asked.
        self.dead: set[str] = set()

    def wait_started(self, timeout_s: float = 120.0) -> list[dict[str, Any]]:
        """Each actor's :class:`~node_agent.ray_actor.ActorInfo` once its agent serves. Raises
        RuntimeError with the actor's own error if one failed to start (e.g. cgroups not writable)."""
        ray = self._ray
        refs = [a.info.remote() for a in self.actors]
        try:
            self.infos = ray.get(refs, timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise RuntimeError(f"--ray: the agent actors did not start within {timeout_s:.0f} s "
                               "(is every node alive, with memory for a Python worker?)") from None
        except ray.exceptions.RayActorError as exc:
            cause = exc.__cause__ or exc
            raise RuntimeError(f"--ray: an agent actor failed to start: {_last_line(cause)}") from None
        return self.infos

    def unhealthy(self, timeout_s: float = 5.0) -> list[tuple[str, str]]:
        """(agent id, why) of the actors that do not answer within ``timeout_s``. An actor found dead for good
        is added to :attr:`dead` and not asked again."""
        ray = self._ray
        refs = {a.registered.remote(): p.agent_id for a, p in zip(self.actors, self.placements, strict=True)
                if p.agent_id not in self.dead}
        if not refs:
            return []
        ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=timeout_s)
        out = [(refs[r], "no reply in time") for r in pending]
        for r in ready:
            try:
                if not ray.get(r):
                    out.append((refs[r], "not registered with the coordinator"))
            except Exception as exc:
                if isinstance(exc, ray.exceptions.ActorDiedError):  # not restarting: it will not come back
                    self.dead.add(refs[r])
                out.append((refs[r], _last_line(exc)))
        return out

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop every agent (its tasks killed, its cgroups removed), then the actors themselves."""
        ray = self._ray
        # Each actor's reply on its own: one already dead (its error is ready at once) must not cut short the
        # others' shutdown, which the kills below would otherwise interrupt (their cgroups left behind).
        refs = [a.shutdown.remote() for a, p in zip(self.actors, self.placements, strict=True)
                if p.agent_id not in self.dead]  # a dead one has nothing left to stop
        ready, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout_s) if refs else ([], [])
        for ref in ready:
            try:
                ray.get(ref)
            except Exception as exc:  # an actor already dead has nothing left to stop; it is killed below
                log.warning("stopping agent actors: %s", _last_line(exc))
        if pending:
            log.warning("stopping agent actors: %d did not stop within %.0f s", len(pending), timeout_s)
        for a in self.actors:
            try:
                ray.kill(a, no_restart=True)
            except Exception as exc:
                log.warning("killing an agent actor: %s", _last_line(exc))


def _last_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[-1] if lines else type(exc).__name__


def placement_table(infos: list[dict[str, Any]], placements: list[HostPlacement]) -> str:
    rows = [("HOST", "CORES", "AGENT", "AGENT ADDRESS", "RAY NODE")]
    for info, p in zip(infos, placements, strict=True):
        for h in p.hosts:
            rows.append((h["name"], f"{h['cpu_cores']:g}", info["agent_id"], info["address"], info["node_id"]))
    return format_table(rows)


class RayStartError(Exception):
    """Why :func:`start_on_ray` did not start a cluster, in a line naming the setting; ``status``: the exit status
    (2, a bad setting; 1, a start-up that failed)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def start_on_ray(ctx: RayContext, policy: str, hosts: int, cpus_per_host: float | None, memory: int, *,
                 port: int = 0, bind: str | None = None, metrics_port: int | None = None, no_cgroups: bool = False,
                 options: dict[str, Any] | None = None, tag: str = "ray", spares: int = 0, rename: bool = True,
                 note: Callable[[str], None] | None = None) -> tuple[Any, RayAgents, list[dict[str, Any]]]:
    """A coordinator in this process, on ``bind`` (default: this Ray node's address), and ``hosts`` agent actors
    placed over the Ray nodes of ``ctx`` (:func:`~coordinator.backends.ray.placement.place_hosts`), once every one of
    them has registered: (the started CoordinatorServer, the actors, each actor's info). ``options``: more
    CoordinatorServer arguments (``--state``, ``--heartbeat``, ``--token-file``; ``compression`` for ``vcemu
    replay``). The hosts are named ``{tag}{k}-h{i}`` (k: the node's place, i: the host's on it); where another run's
    actors hold those names, with another tag (:func:`~coordinator.backends.ray.placement.free_placements`), which
    ``note`` is told, if ``rename``, else :class:`RayStartError` (a coordinator restarted on a ``--state`` file needs
    its hosts' names back). ``spares``: each agent's ``--spares`` (none by default on Ray:
    :class:`~node_agent.ray_actor.HostAgentActor`). :class:`RayStartError` otherwise, with what was started stopped
    (under :func:`~vcemu.signals.signals_deferred`); so on any exception (Ctrl-C)."""
    from coordinator.policies import get_policy
    from coordinator.service import CoordinatorServer, wait_registered
    from coordinator.store import StoreError
    from vcemu.ports import dial_address, ports_refusal
    from vcemu.v1 import agent_pb2

    nodes = ctx.nodes()  # once: a retry's hosts have the same capacities (the coordinator's reference holds)

    def place(status: int = 2) -> list[HostPlacement]:
        try:
            wanted = place_hosts(nodes, hosts, cpus_per_host, memory, tag)
        except ValueError as exc:
            raise RayStartError(str(exc), status) from None
        taken = ctx.named_actors()
        held = sorted(p.hosts[0]["name"] for p in wanted if actor_name(p.agent_id) in taken)
        if not held:
            return wanted
        if not rename:
            raise RayStartError(f"--ray: the agent actors of hosts {', '.join(held)} are alive on this Ray "
                                "cluster (another vcemu up or replay --ray, or one just stopped whose actors Ray "
                                "has not removed yet); a coordinator on a --state file needs its hosts' names "
                                "back: stop that run, or wait", 1)
        placements = free_placements(nodes, hosts, cpus_per_host, memory, tag, taken)  # (the same nodes: no error)
        if note is not None:
            note(f"another run's agent actors hold the hosts {', '.join(held)} on this Ray cluster: this run's "
                 f"hosts are {placements[0].hosts[0]['name']}, ...")
        return placements

    placements = place()
    where = bind or ctx.node_ip
    refusal = ports_refusal(where, port, metrics_port)  # before the state file is opened
    if refusal is not None:
        raise RayStartError(f"error: {refusal}", 2)
    try:
        server = CoordinatorServer(get_policy(policy), port=port, bind=where, metrics_port=metrics_port,
                                   **(options or {})).start()
    except (OSError, StoreError) as exc:  # its message names the flag already, as a local vcemu up says it
        raise RayStartError(f"error: {exc}", 2) from None
    agents = None
    try:
        # A wildcard --bind (0.0.0.0) listens everywhere; the agents on other nodes dial this node's address.
        coordinator = dial_address(where, server.port, ctx.node_ip)
        server.backend.choose_reference([agent_pb2.HostInfo(**h) for p in placements for h in p.hosts])
        from ray.exceptions import ActorAlreadyExistsError

        for attempt in range(1, NAME_ATTEMPTS + 1):
            try:
                agents = RayAgents(ctx, placements, coordinator, bind=bind, no_cgroups=no_cgroups, spares=spares,
                                   token=(options or {}).get("token"))  # (the agents send the coordinator's token)
                break
            except ActorAlreadyExistsError as exc:  # a name taken since it was looked up: a run started meanwhile
                if not rename or attempt == NAME_ATTEMPTS:
                    then = "stop that run, or wait" if not rename else "run it again"
                    raise RayStartError(f"--ray: another run took this run's agent actor names as it started them "
                                        f"({_last_line(exc).split(' Please ')[0]}): {then}", 1) from None
                placements = place(status=1)  # (the same nodes: the same capacities)
            except ValueError as exc:  # (another refusal of Ray's)
                raise RayStartError(f"--ray: {_last_line(exc)}", 1) from None
        try:
            infos = agents.wait_started()
            why = wait_registered(server, [p.agent_id for p in placements], timeout_s=30.0)
            if why is not None:
                raise RuntimeError(f"--ray: {why} with the coordinator at {server.address} "
                                   "(can the Ray nodes reach it? see --bind)")
        except RuntimeError as exc:
            raise RayStartError(str(exc), 1) from None
    except BaseException:
        with signals_deferred():  # a second Ctrl-C must not cut the stopping short (actors left with cgroups)
            try:
                server.stop()
            finally:
                if agents is not None:
                    agents.stop()
        raise
    return server, agents, infos


def run_up(args: argparse.Namespace, options: dict[str, Any] | None = None) -> int:
    """``vcemu up --ray ADDRESS``: see the module docstring. ``options``: more CoordinatorServer arguments
    (``--state``, ``--heartbeat``, ``--token-file``), as a local ``vcemu up`` passes them. Bad settings end
    it with one line naming the setting and exit status 2."""
    from coordinator.servers import say_waiting
    from vcemu.ports import listen_address
    from vcemu.sizes import parse_size

    # ``vcemu up`` parses these as lists (one value, or one per host); Ray places hosts itself.
    cpus, mems = args.cpus_per_host, args.mem_per_host
    for flag, value in (("--cpus-per-host", cpus), ("--mem-per-host", mems)):
        if isinstance(value, list) and len(value) > 1:
            print(f"vcemu up: {flag}: with --ray give one value for every host, got {len(value)}", file=sys.stderr)
            return 2
    args.cpus_per_host = float(cpus[0]) if isinstance(cpus, list) else cpus
    try:
        memory = parse_size(mems[0] if isinstance(mems, list) else mems)
    except ValueError as exc:
        print(f"vcemu up: --mem-per-host: {exc}", file=sys.stderr)
        return 2
    try:
        ctx = connect(args.ray)
    except RayUnavailable as exc:
        print(f"vcemu up: {exc}", file=sys.stderr)
        return 2
    # From here SIGTERM unwinds through the cleanup below, even during start-up (until here it ends the process
    # at once, as it does when it comes during ray.init: connect keeps the handler the process had across it).
    signal.signal(signal.SIGTERM, _interrupt)
    server = agents = None
    try:
        try:
            server, agents, infos = start_on_ray(
                ctx, args.policy, args.hosts, args.cpus_per_host, memory, port=args.port, bind=args.bind,
                metrics_port=args.metrics_port, no_cgroups=args.no_cgroups, options=options,
                spares=args.agent_spares or 0, rename=(options or {}).get("state") is None,
                note=lambda line: print(f"vcemu up: {line}", file=sys.stderr, flush=True))
        except RayStartError as exc:
            print(f"vcemu up: {exc}", file=sys.stderr)
            return exc.status
        placements, bind, coordinator = agents.placements, args.bind or ctx.node_ip, agents.coordinator
        metrics = f", metrics on http://{listen_address(bind, server.metrics_port)}/metrics" \
            if server.metrics_port else ""
        nodes = len({p.node.node_id for p in placements})  # one placement per host, several on a node
        print(f"vcemu up: coordinator on {coordinator} ({described(args.policy)}), {args.hosts} hosts on "
              f"{nodes} Ray nodes (Ray {ctx.ray_version}, auth {ctx.auth_mode}){metrics}. Ctrl-C stops.")
        print(placement_table(infos, placements), flush=True)
        say_waiting(server)
        said: dict[str, str] = {}  # why each actor that does not answer was last said not to
        while True:
            time.sleep(HEALTH_INTERVAL_S)
            for line in health_lines(said, agents.unhealthy(), agents.dead):
                print(f"vcemu up: {line}", file=sys.stderr, flush=True)
            if len(agents.dead) == len(agents.actors):  # as a local vcemu up does when its last agent exits
                print("vcemu up: every agent actor is dead; stopping the coordinator", file=sys.stderr, flush=True)
                return 1
    except KeyboardInterrupt:  # SIGINT, or SIGTERM (below): stop everything this run started
        print("vcemu up: stopping", flush=True)
        return 0
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the cleanup short
        if server is not None:
            server.stop()
        if agents is not None:
            agents.stop()
        ctx.close()


def health_lines(said: dict[str, str], unhealthy: list[tuple[str, str]], dead: set[str]) -> list[str]:
    """What ``up --ray`` says of its actors after a health check (:meth:`RayAgents.unhealthy`); ``said`` (updated)
    holds why each actor that does not answer was last said not to. A dead one is said once (its hosts are lost
    when its heartbeats stop); one that does not answer, once per cause, and again when it answers: a loaded
    node's slow actor was otherwise reported every 5 s as if it had crashed."""
    now = dict(unhealthy)
    lines = []
    for agent_id in [a for a in said if a not in now]:
        del said[agent_id]
        lines.append(f"agent actor {agent_id} answers again")
    for agent_id, why in now.items():
        if agent_id in dead:
            lines.append(f"agent actor {agent_id} is dead ({why}); its hosts will be declared lost and their jobs "
                         "requeued on the other agents")
            said.pop(agent_id, None)
        elif said.get(agent_id) != why:
            said[agent_id] = why
            lines.append(f"agent actor {agent_id} does not answer ({why}): slow, or crashed (Ray restarts a crashed "
                         f"actor up to {MAX_RESTARTS} times)")
    return lines


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt
