"""Registration with a coordinator (``--coordinator``): RegisterAgent once it is reachable, then a
Heartbeat at the interval the coordinator asks for (RegisterAgentReply.heartbeat_interval_s, default
2 s); re-register when the coordinator forgets the agent (it declared it lost, or lost its state) or
becomes unreachable. Each answered RegisterAgent and known Heartbeat renews the agent's lease, counted from
when it was sent (:meth:`node_agent.agent.AgentCore.renew_lease`), but for a Heartbeat the coordinator answers
saying it cannot reach the agent (HeartbeatReply.unreachable: heard one way only). Every call has a deadline;
failures back off exponentially with full jitter, capped at the heartbeat interval, so that a restarted
coordinator hears from its agents within one interval (issue 7) and a hundred agents do not reconnect in
lockstep."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

import grpc

from node_agent import leaseclock
from node_agent.server import RunningAgent, describe
from vcemu.auth import bearer
from vcemu.v1 import coordinator_pb2, coordinator_pb2_grpc

log = logging.getLogger(__name__)
HEARTBEAT_S = 2.0
RPC_TIMEOUT_S = 5.0
MIN_BACKOFF_S = 0.1
#: Calls in a row that went unanswered (DEADLINE_EXCEEDED) after which the registrar connects again (a new channel).
DEADLINES_BEFORE_NEW_CHANNEL = 2
#: A refusal of the same code as the one last said, in other words, is said again no sooner than this after it: the
#: text of one that names a failed call varies from one attempt to the next (a coordinator that cannot reach this
#: agent says why its Describe failed, and gRPC's "last error" for one refused connection alternates between two
#: wordings), and every retry's was said: an ERROR line every 1-2 s for as long as a one-way partition lasted.
REFUSAL_REPEAT_S = 60.0
#: gRPC's own reconnection back-off, capped: by default it grows to 120 s (1 s x 1.6 per failed attempt), and a call
#: made meanwhile fails at once without trying, so after a coordinator was down for 90 s its agents registered 12 to
#: 28 s after it came back, not within a heartbeat, and after longer outages up to 2 minutes (multi-host review).
#: (Not grpc.min_reconnect_backoff_ms: gRPC's core takes it as the shortest a connection attempt may take, 20 s by
#: default, and at 0.5 s a slow link's or a loaded machine's TLS handshake would never finish.)
RECONNECT_OPTIONS = (("grpc.initial_reconnect_backoff_ms", 500),
                     ("grpc.max_reconnect_backoff_ms", int(HEARTBEAT_S * 1000)))
#: How often an agent not yet registered says again that it cannot reach its coordinator, and why.
UNREACHED_REPEAT_S = 30.0


def _insecure(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=RECONNECT_OPTIONS)


class Registrar:
    """Background thread keeping an agent registered; :meth:`stop` ends it."""

    def __init__(self, agent: RunningAgent, coordinator: str, advertise: str,
                 channel_factory: Callable[[str], grpc.Channel] | None = None, token: str | None = None) -> None:
        """``token``: the bearer token the coordinator requires (its ``--token-file``), sent with every call."""
        self._agent, self._coordinator, self._advertise = agent, coordinator, advertise
        self._metadata = bearer(token) if token else ()
        self._token_sent = bool(token)
        self._channel_factory = channel_factory or _insecure
        self._stop = threading.Event()
        self.registered = threading.Event()
        self.interval = HEARTBEAT_S
        self._thread = threading.Thread(target=self._run, name="registrar", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        first = self._connect()  # (its factory can fail as a later channel's can: see _connect)
        if first is None:  # stopping
            return
        with first:
            channel = first
            stub = coordinator_pb2_grpc.CoordinatorStub(channel)
            unanswered = 0  # calls in a row that waited out their deadline
            backoff = MIN_BACKOFF_S
            refused: str | None = None  # the coordinator's last refusal of this agent, said once
            refused_code: grpc.StatusCode | None = None  # its code, and when it was said (REFUSAL_REPEAT_S)
            refused_at = 0.0
            unreachable = False  # the coordinator says it cannot reach this agent (said once, until it can again)
            said_at = 0.0  # when a failed call was last said (UNREACHED_REPEAT_S)
            while not self._stop.is_set():
                timeout = min(RPC_TIMEOUT_S, max(0.5, self.interval))
                try:
                    if not self.registered.is_set():
                        sent = leaseclock.now()
                        reply = stub.RegisterAgent(coordinator_pb2.RegisterAgentRequest(
                            address=self._advertise, description=describe(self._agent.core, self._agent.wants_token)),
                            timeout=timeout, metadata=self._metadata)
                        if reply.heartbeat_interval_s > 0:
                            self.interval = reply.heartbeat_interval_s
                        self._agent.core.renew_lease(reply.lease_s, sent)
                        self.registered.set()
                        log.info("registered with coordinator %s as %s", self._coordinator, self._advertise)
                    sent = leaseclock.now()
                    hb = stub.Heartbeat(coordinator_pb2.HeartbeatRequest(
                        agent_id=self._agent.core.agent_id), timeout=timeout, metadata=self._metadata)
                    if not hb.known:
                        self.registered.clear()
                        continue
                    if hb.unreachable:
                        # Our heartbeats get there, its calls do not get here: it renews no lease, and declares this
                        # agent lost as if silent, once the lease has frozen our tasks (coordinator.service.
                        # CoordinatorServer.heard_one_way). The lease is left to run out.
                        if not unreachable:
                            log.error("coordinator %s cannot reach this agent: %s", self._coordinator, hb.unreachable)
                        unreachable = True
                    else:
                        if unreachable:
                            log.warning("coordinator %s reaches this agent again", self._coordinator)
                        unreachable = False
                        self._agent.core.renew_lease(hb.lease_s, sent)
                    backoff, wait, refused = MIN_BACKOFF_S, self.interval, None  # (a later refusal is said again)
                    refused_code = None
                    unanswered = 0
                except grpc.RpcError as e:
                    if e.code() in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.ALREADY_EXISTS,
                                    grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.FAILED_PRECONDITION,
                                    grpc.StatusCode.RESOURCE_EXHAUSTED):  # (a coordinator out of descriptors says so)
                        # The coordinator refuses this agent's description: say why, once per reason (the bare code
                        # was all it said, at every retry; diff review). Retried: a host name taken may come free.
                        if e.details() != refused and (e.code() != refused_code
                                                       or time.monotonic() - refused_at >= REFUSAL_REPEAT_S):
                            refused, refused_code, refused_at = e.details(), e.code(), time.monotonic()
                            hint = "" if e.code() != grpc.StatusCode.UNAUTHENTICATED else (
                                " (this agent's token is not the coordinator's: give it the coordinator's "
                                "--token-file)" if self._token_sent else
                                " (give this agent the coordinator's token: --token-file)")
                            log.error("coordinator %s refuses this agent: %s: %s%s; retrying", self._coordinator,
                                      e.code().name, refused, hint)
                    elif self.registered.is_set() or backoff == MIN_BACKOFF_S or \
                            time.monotonic() - said_at >= UNREACHED_REPEAT_S:
                        # With why (gRPC's details: "Connection refused", a name that does not resolve, a TLS
                        # failure), and again every 30 s while it lasts: one bare "UNAVAILABLE; retrying" was all an
                        # agent said, however long its coordinator stayed out of reach (multi-host review).
                        said_at = time.monotonic()
                        log.warning("coordinator %s: %s: %s; retrying", self._coordinator, e.code().name,
                                    e.details())
                    if e.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                        self.registered.clear()
                    unanswered = unanswered + 1 if e.code() == grpc.StatusCode.DEADLINE_EXCEEDED else 0
                    if unanswered >= DEADLINES_BEFORE_NEW_CHANNEL:
                        # A connection left half-open by the network (a NAT or firewall that dropped its state, a
                        # link that stalls) is never dropped by gRPC without keepalives: every later call on it
                        # waited out its deadline, for good, while a new connection got through (gray-failure review).
                        log.warning("coordinator %s: %d calls in a row unanswered; connecting again",
                                    self._coordinator, unanswered)
                        channel.close()  # (first: closed again on exit, which does nothing) before a new one, which
                        fresh = self._connect()  # would else share its connection
                        if fresh is None:  # stopping
                            break
                        channel, unanswered = fresh, 0
                        stub = coordinator_pb2_grpc.CoordinatorStub(channel)
                    wait = random.uniform(0, backoff)
                    backoff = min(self.interval, backoff * 2)
                self._stop.wait(wait)
            if channel is not first:
                channel.close()

    def _connect(self) -> grpc.Channel | None:
        """A channel to the coordinator, the first one too, tried again each heartbeat interval until it can be made
        (None once stopping): with TLS the factory reads the certificate, key and CA files again, and one that cannot
        be read at that moment (being rotated) raised out of the thread, which ended: the agent served and never
        heartbeat again, or, for the first channel, never registered (coverage review)."""
        while not self._stop.is_set():
            try:
                return self._channel_factory(self._coordinator)
            except Exception as exc:
                log.error("coordinator %s: cannot connect: %s; retrying", self._coordinator, exc)
            self._stop.wait(self.interval)
        return None
