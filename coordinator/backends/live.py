"""The live backend: real node agents over gRPC, real processes, real cgroups, real time.

Each job task becomes one agent task ``<job>/<index>`` on the agent that emulates its host. The clock
is wall time since the backend started, multiplied by ``compression`` (K); work is divided by K when a
task starts, so a job of W trace-seconds takes W/K real seconds and W seconds on this clock (time
compression for replays of long traces).

A migration is done the way seed 001 Sec. IV-A assumes: checkpoint (read progress), stop, and start
again on the new host from that progress. A pause, by default, does the same without the restart: the
job is saved (its progress kept here) and its processes and memory are released, as 001's model has it
("pausing instances by saving them to local or network-attached storage", Sec. II-B.1), so the memory
a policy frees by pausing is really free on the agent. With ``pause_mode="freeze"`` a pause freezes the
processes in place (cgroup freezer) instead: instant, but a frozen process keeps its memory, so only
policies that never reuse a paused job's memory should run that way.

``advance`` polls every agent's Status; a job is done when all its tasks are.

A plan's share changes (``set_share``) are queued, and :meth:`LiveBackend.send_shares` sends them in one SetShares
call per host: the engine calls it after a run of a plan's SetShare actions, before the plan's next other action
(so an agent sees a plan's calls in their order: the cuts before the start they make room for, and a refused
cut's job failed, and stopped, before that start), and records each change only once its agent has taken it. A
job started on a host of n jobs re-shares all n, which one SetShare per task made n calls. A change the agent
refuses is sent again alone (SetShare, with :meth:`LiveBackend._call`'s rules), so its job fails or is requeued as
before. An agent without SetShares gets one SetShare per task.

Faults (issue 7): every RPC has a deadline (``rpc_timeout``); idempotent calls are retried with exponential
backoff and full jitter (a StartTask retry that meets ALREADY_EXISTS found its first attempt done, since
task ids are never reused). Each poll also reconciles: a task an agent runs that no job here owns (left by a
crashed coordinator, or by an agent that was cut off and given up) is stopped; a task a job owns that its
agent no longer reports (the agent restarted) is reported lost, and the engine requeues the job from its
last checkpoint. A task whose Stop does not get through is an orphan, stopped again at every poll, and at
once when its host's agent refuses a call for want of the capacity it still holds, as is a task of no job
here that the agent then reports on that host (a job is not failed for a leftover; if the orphan stays
because its agent does not answer, the call counts as unreachable). A Stop before a restart elsewhere that
cannot be confirmed requeues the job instead of restarting the task within the plan.

No task of a job is started (placed, resumed, or moved) while an unfinished orphan of that job, a copy that
may still run, is left: its Stop is tried once more, and if that does not get through either, the start is
refused, as unreachable while the orphan's agent does not answer (the engine keeps the job pending, or
requeues it, and offers it again one poll interval later), and as a failure of the job if that agent answers
but will not stop it (a Stop refused, or one that keeps timing out while the agent answers polls for
``UNSTOPPABLE_AFTER_S``). A StartTask that got no answer may have started its task: it is an orphan too; not one
that never left (gRPC found nothing listening at the address: no task was made). An agent that registers again
has its orphans' Stops tried at once on its new handle: a NOT_FOUND releases them (a new incarnation removed its
predecessor's tasks at start-up). No task is started on an agent restored from the store until it has answered
(``AgentHandle.heard``): its stored address may be a dead run's.
The job is placeable again once a Stop of the orphan gets through (a poll's, or a placement's) or its agent
is removed (declared lost). A placement that orphans block retries each one's Stop
at most once per poll interval, however often the engine offers it. So no copy of a job is started beside
another that, as far as this backend knows, may still run, but for a copy on an agent declared lost. That
one is frozen: each poll renews the agent's lease (``lease_s``), and an agent that heard from its coordinator
neither so nor by its heartbeats for that long has frozen its tasks (fencing,
:meth:`node_agent.agent.AgentCore.renew_lease`) before it can be declared lost. It is stopped by
reconciliation if that agent comes back; a fenced task that a job here still owns (the coordinator was the one
silent) is resumed by a poll once the agent's lease holds again: the second poll after a restart, since a poll
renews the lease from the agent's previous reply (:meth:`_unfence`). An agent process that is itself stopped is
fenced by its fencer (:mod:`node_agent.fencer`): frozen with cgroups, stopped (SIGSTOP) without them.

With a ``journal`` (the coordinator's store) every change of where a job's tasks run is written, and a new
task's id is reserved *before* its StartTask, so that a restarted coordinator can :meth:`adopt` the tasks
that kept running and never reuses a task id. A pause or a move cut short by a failure journals the
checkpoints it took at once. A pause, resume or move cut short by something other than a BackendError (a
journal write: the engine then records nothing) is requeued from its checkpoints at the next poll, reported
until the engine acts on it; so is a job a restarted coordinator adopts whose tasks contradict its state.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import grpc

from coordinator.backends.base import BackendError, Report
from coordinator.model import Host, JobSpec, JobState
from coordinator.store import StoredTask
from vcemu.auth import with_token
from vcemu.limits import shown
from vcemu.v1 import agent_pb2, agent_pb2_grpc
from workloads import modeled

log = logging.getLogger("vcemu.live")

RPC_TIMEOUT_S = 5.0
#: A restarted coordinator's wall clock behind the latest time its state recorded by at least this much (s) is said
#: (its clock carries on from that time whatever the gap).
CLOCK_BEHIND_SAID_S = 1.0
#: Attempts of an idempotent call, and the first backoff (doubled each time, full jitter).
RPC_ATTEMPTS = 3
#: Seconds between writes of every task's progress to the journal (a lost task restarts from there).
JOURNAL_PROGRESS_S = 1.0
RPC_BACKOFF_S = 0.05
_RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
#: Deadline of the Status poll, and of the single attempt made on an agent that has not answered one for
#: :data:`SILENT_AFTER_S`: a stopped or partitioned agent must not hold the engine (and with it the user
#: API) for attempts x RPC_TIMEOUT_S per action before its heartbeats run out and it is declared lost.
FAST_TIMEOUT_S = 1.0
SILENT_AFTER_S = 2.0
#: An agent whose Status poll went unanswered is asked again no sooner than this after it, doubled with each poll in
#: a row it leaves unanswered, up to :data:`SILENT_POLL_MAX_S`: each such poll holds the round, and the engine's lock
#: with it, for :data:`FAST_TIMEOUT_S`, and an agent whose heartbeats get through while the coordinator's calls do not
#: (a one-way partition) is declared lost only after a while: asked at every round (every 0.1 s), it held the lock
#: 10 s in 11 (gray-failure review). Its heartbeats renew its lease meanwhile, until its calls have gone unanswered
#: over as long as the coordinator waits on a silent agent (:meth:`coordinator.service.CoordinatorServer.
#: heard_one_way`); an answer ends the wait.
SILENT_POLL_S = 0.5
SILENT_POLL_MAX_S = 4.0
#: An agent that runs nothing (no task of a job, no orphan on its hosts, none in its last Status) is asked for its
#: Status no more often than this (and than a quarter of the lease): every round (every 0.1 s) asked every agent,
#: busy or idle, and 64 idle agents cost the coordinator a third of a core and themselves about one more, on 2 cores
#: (scale review: healthy agents were declared lost, their heartbeats unanswered by a starved coordinator). A task
#: started on one of its hosts makes it asked at every round again.
IDLE_POLL_S = 1.0
#: Polls in a row an agent leaves unanswered after which its channel is made anew (and again at each such number): a
#: connection left half-open by the network (nothing answered, nothing closed) was never replaced, gRPC keeping it
#: until TCP gave up, while the agent's heartbeats kept it registered: its jobs showed running, their progress frozen,
#: for as long as that lasted (3 min 16 s in a test; gray-failure review). As the agent does its own (node_agent.
#: register).
RECONNECT_AFTER_MISSES = 2
#: Polls in a row left unanswered before an agent's unanswered calls count against it as heard one way only
#: (:meth:`LiveBackend.unanswered_for`): one past the reconnection, so that a poll on a new channel has had its chance
#: (at the shortest heartbeat intervals, 3 intervals were spanned by 2 polls, the second 1 s after the first).
ONE_WAY_POLLS = RECONNECT_AFTER_MISSES + 1
#: Largest SetShares, StartTasks or StopTasks request sent, serialized (bytes): under an agent's request limit (64 KiB,
#: node_agent.server.MAX_MESSAGE_BYTES); more share changes, starts or stops for a host go in several calls.
BATCH_BYTES = 32 << 10
M = TypeVar("M", agent_pb2.SetShareRequest, agent_pb2.StartTaskRequest, agent_pb2.TaskRef)
#: Requests a batch call carries per deadline of one attempt: a call of more gets that deadline again for each
#: such number (an agent under load took more than one attempt's 1.67 s for a StartTasks of 420 modeled starts).
BATCH_ITEMS_PER_DEADLINE = 100
#: At most this many attempts' deadlines for one attempt of a batch call (the engine waits under its lock).
BATCH_DEADLINES_MAX = 4
#: Seconds an agent answers polls while an orphan's Stop there still fails, before that counts as the agent
#: refusing it (:meth:`LiveBackend._unanswered`): longer than any kill takes.
UNSTOPPABLE_AFTER_S = 30.0

Journal = Callable[[str, int, "list[StoredTask]"], None]  # Store.put_tasks: a job's restart count and tasks


@dataclass
class AgentHandle:
    agent_id: str
    address: str
    channel: grpc.Channel
    stub: agent_pb2_grpc.AgentStub
    mode: str
    hosts: list[str] = field(default_factory=list)
    last_status: agent_pb2.StatusReply | None = None
    last_seen: float = 0.0  # time.monotonic() of its last answered Status: a sign of life like a heartbeat
    #: The agent's clock in its last Status reply received, echoed in the next poll (StatusRequest.lease_since).
    clock: float = 0.0
    silent: bool = False  # its last Status poll (or a call) went unanswered: calls get one short attempt
    #: time.monotonic() of the first and the latest of its polls and calls unanswered in a row (while ``silent``).
    unanswered_since: float = 0.0
    unanswered_last: float = 0.0
    misses: int = 0  # its Status polls in a row that went unanswered
    #: Its Status polls in a row that went unanswered, or that another agent answered at its address: the one-way
    #: measure (:meth:`LiveBackend.unanswered_for`) needs :data:`ONE_WAY_POLLS` of them.
    polls_unanswered: int = 0
    next_poll: float = 0.0  # time.monotonic() before which it is not polled (:data:`SILENT_POLL_S`)
    #: time.monotonic() before which it is not polled while it runs nothing and answers (:data:`IDLE_POLL_S`)
    idle_until: float = 0.0
    lost: bool = False  # being declared lost (:meth:`LiveBackend.cut_off`): calls to it fail at once
    #: It has answered since this coordinator started: registered with it, or answered a Status poll. An agent
    #: restored from the store is not, until then: it may be long gone (a restarted ``vcemu up`` takes its
    #: agents' old addresses from the store), and no task is started on it meanwhile (:meth:`LiveBackend.
    #: _check_heard`), so a burst of jobs cannot each cost a call to a dead address under the engine lock.
    heard: bool = True
    #: time.monotonic() of its last heartbeat received while it is heard one way only (not a sign of its life, but
    #: of the coordinator's network: :meth:`coordinator.service.CoordinatorServer._all_silent`)
    received: float = -math.inf
    wants_token: bool = False  # its API wants the coordinator's token: its stub sends it
    calls: set[grpc.Future] = field(default_factory=set)  # its calls in flight, cancelled by cut_off
    #: The batch calls it answered UNIMPLEMENTED ("SetShares", "StartTasks", "StopTasks": an older agent), not asked
    #: again: one SetShare, StartTask or Stop per task instead.
    unbatched: set[str] = field(default_factory=set)

    def unanswered(self, poll: bool = False) -> None:
        """Its poll (``poll``) or call went unanswered (or another agent answered its poll at its address): silent
        from now, if it was not already, until a poll is answered. (Its times first: the Heartbeat's look at them
        takes no lock, and must not find it silent with the span of an earlier time it was.)"""
        if poll:
            self.polls_unanswered += 1
        now = time.monotonic()
        if not self.silent:
            self.unanswered_since = now
        self.unanswered_last = now
        self.silent = True


@dataclass
class _Task:
    task_id: str
    host: str
    progress: float = 0.0
    state: int = agent_pb2.TASK_STATE_STARTING
    message: str = ""
    saved: bool = False  # checkpointed and stopped by a pause: no process until resumed
    #: An orphan: time.monotonic() of the last retry of its Stop (at a poll, or for a placement it blocks),
    #: and of the first poll its agent answered (Status) while its Stop, retried then, still failed.
    retried: float = -math.inf
    refused_since: float = math.inf
    stop_warned: bool = False  # a failed Stop of it was warned of: its retries' failures are not (soak test)


class LiveBackend:
    def __init__(self, compression: float = 1.0, poll_interval: float = 0.1, pause_mode: str = "checkpoint",
                 epoch: float | None = None, rpc_timeout: float = RPC_TIMEOUT_S,
                 channel_factory: Callable[[str], grpc.Channel] | None = None, lease_s: float = 0.0,
                 token: str | None = None, clock: float = 0.0) -> None:
        """``token``: the coordinator's bearer token, sent to the agents whose API wants one (their description's
        ``wants_token``) and to no other (code review: under TLS an agent registered without the token was sent
        it). ``epoch`` (the wall-clock time of time 0) and ``clock`` (the latest time an earlier run recorded, on
        this clock): a restarted coordinator's clock carries on from ``time.time() - epoch``, and from no earlier
        than ``clock`` (a wall clock behind the earlier run's: the time it was down is then not counted; the epoch
        is kept, so a later restart on a clock that is right again counts from it, with no jump forward)."""
        if compression <= 0:
            raise ValueError(f"compression: must be > 0, got {compression}")
        if pause_mode not in ("checkpoint", "freeze"):
            raise ValueError(f"pause_mode: must be 'checkpoint' or 'freeze', got {pause_mode!r}")
        self.pause_mode = pause_mode
        self.compression = compression
        self.poll_interval = poll_interval
        # ``epoch``: wall-clock time of time 0, so a restarted coordinator's clock carries on; never back from where
        # the earlier run left it (its times, in the store and in its jobs, would come after this run's: negative
        # flow times and stretches, jobs ending before they started, later submissions ordered first).
        #: At a restart: how far this clock starts past the latest time the earlier run recorded (the time the
        #: coordinator was down, as the wall clocks tell it); None without an epoch.
        self.restart_gap: float | None = None
        #: At a restart: how far this machine's wall clock was behind the earlier run's (0: it was not).
        self.clock_behind = 0.0
        if epoch is None:
            self._t0 = time.monotonic()
        else:
            wall, mono = time.time(), time.monotonic()
            elapsed, floor = wall - epoch, max(0.0, clock) / compression
            behind = floor - elapsed if math.isfinite(elapsed) else math.inf
            if not elapsed >= floor:  # (and a NaN epoch)
                elapsed = floor
            if behind >= CLOCK_BEHIND_SAID_S:  # (less: a small step, or the clock read as the last journal was written)
                self.clock_behind = behind
                log.warning("this machine's wall clock is %.1f s behind the time this coordinator's state last "
                            "recorded (a clock set back, or a host whose clock is behind the earlier one's): its "
                            "clock carries on from t=%.1f s, counting none of the time it was down", self.clock_behind,
                            floor * compression)
            self.restart_gap = (elapsed - floor) * compression
            log.info("the clock carries on at t=%.1f s, %.1f s after the latest time the state recorded",
                     elapsed * compression, self.restart_gap)
            self._t0 = mono - elapsed
        #: Called with :meth:`now` with every journal of the tasks' progress (the store's ``put_clock``): the
        #: clock's latest time, so that a restart does not start it earlier.
        self.clock_journal: Callable[[float], None] | None = None
        self.rpc_timeout = rpc_timeout
        self.channel_factory = channel_factory or grpc.insecure_channel
        self.token = token
        #: The lease each Status poll renews on its agent (the coordinator's :attr:`~coordinator.service.
        #: CoordinatorServer.lease_s`; 0: none).
        self.lease_s = lease_s
        #: The coordinator is exiting: a Stop that fails is not retried (nothing would retry it), only logged, and no
        #: task is started (:meth:`_check_heard`), or one would run after the exit's stop of every task.
        self.closing = False
        #: Called with each task resumed after its agent fenced it (:meth:`_unfence`): the coordinator counts them.
        self.unfence_listeners: list[Callable[[str], None]] = []
        self.journal: Journal | None = None
        #: Groups the journal writes of one poll into one commit (the store's ``transaction``): with an
        #: fsync per commit, a write per running job every second would cost a sync each.
        self.journal_batch: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext
        self._journal_failing = False  # the last journal of the tasks' progress failed (said once, see poll)
        self._journal_at = 0.0
        self._wake = threading.Event()
        self._polled = -math.inf  # monotonic time of the last Status round
        #: time.monotonic() of the last Status poll any agent answered (:meth:`coordinator.service.CoordinatorServer.
        #: heard_one_way`: when none answers, the fault is as likely the coordinator's own).
        self.answered_at = -math.inf
        self._lock = threading.RLock()
        self.agents: dict[str, AgentHandle] = {}
        self.host_agent: dict[str, str] = {}
        self.host_info: dict[str, agent_pb2.HostInfo] = {}
        self._reference: agent_pb2.HostInfo | None = None
        self._specs: dict[str, JobSpec] = {}
        self._tasks: dict[str, list[_Task]] = {}
        self._restarts: dict[str, int] = {}
        self._cpu: dict[str, float] = {}
        self._orphans: list[_Task] = []  # tasks whose Stop failed, retried at every poll
        #: per job, in the order moved, its tasks moved out to start at their new host (:meth:`flush`)
        self._arrivals: dict[str, list[int]] = {}
        #: jobs whose moves, pause or resume a plan's exception cut short: requeued at a poll
        self._interrupted: list[str] = []
        #: A plan's share changes not sent yet (:meth:`set_share`): per host, a request per task in the order made;
        #: and each job's new share, taken as the job's once sent (:meth:`send_shares`).
        self._shares: dict[str, dict[str, agent_pb2.SetShareRequest]] = {}
        self._share_cpu: dict[str, float] = {}
        self._share_failures: list[tuple[str, BackendError]] = []  # (job, error) of the changes being sent
        #: The last poll's reports of jobs that ended (done or failed), by job: :meth:`stop_unless_ended`.
        self._ended: dict[str, Report] = {}

    # ---- cluster membership -----------------------------------------------------------------------

    def add_agent(self, address: str, description: agent_pb2.DescribeReply | None = None,
                  restored: bool = False) -> list[Host]:
        """Connect to an agent (asking it to Describe itself if needed); return its hosts for the model.
        ``restored``: taken from the store, not heard from yet (:attr:`AgentHandle.heard`).

        Host capacities in the model are relative to the first host ever registered (the reference
        host): a host with twice its cores has cpu 2.0, one with half its memory has mem 0.5.

        An agent that registers again (under its id) gets a new handle: the orphans held on its hosts are
        retried at the next poll or placement, not after the rate limit their last Stop (to the old handle)
        set (their refusals since still count). A Stop it answers with NOT_FOUND releases them: a
        new incarnation of the agent has removed what its predecessor left (its cgroups, its work
        directories' processes, at start-up: :func:`node_agent.agent.open_core`; and a workload process exits
        when its agent dies), and the same incarnation does not run a task it does not know.
        """
        channel = self.channel_factory(address)
        plain = agent_pb2_grpc.AgentStub(channel)
        if description is None:
            try:
                try:
                    description = self._retry(plain.Describe, agent_pb2.DescribeRequest())
                except grpc.RpcError as exc:  # (an agent restored or added by address: it may want the token)
                    if exc.code() != grpc.StatusCode.UNAUTHENTICATED or not self.token:
                        raise
                    description = self._retry(with_token(plain, self.token).Describe, agent_pb2.DescribeRequest())
            except grpc.RpcError as exc:
                channel.close()
                raise BackendError(f"agent at {address} did not answer Describe: {_rpc_text(exc)}") from None
        stub = self._agent_stub(channel, description.wants_token, plain)
        with self._lock:
            old = self.agents.get(description.agent_id)
            if old is not None:
                old.channel.close()
                # A host the agent no longer has (it came back with fewer): the service loses it in the engine.
                now_has = {info.name for info in description.hosts}
                for name in old.hosts:
                    if name not in now_has and self.host_agent.get(name) == description.agent_id:
                        del self.host_agent[name]
                        self.host_info.pop(name, None)
            handle = AgentHandle(description.agent_id, address, channel, stub, description.mode, heard=not restored,
                                 wants_token=description.wants_token)
            hosts = []
            for info in description.hosts:
                if self._reference is None:
                    self._reference = info
                handle.hosts.append(info.name)
                self.host_agent[info.name] = description.agent_id
                self.host_info[info.name] = info
                hosts.append(
                    Host(
                        info.name,
                        cpu=info.cpu_cores / self._reference.cpu_cores,
                        mem=info.memory_bytes / self._reference.memory_bytes,
                    )
                )
            self.agents[description.agent_id] = handle
            if old is not None:
                for t in self._orphans:  # (their refusals still count toward UNSTOPPABLE_AFTER_S: an agent that
                    # re-registers often, over a flaky network, must not hold a job "will retry" for ever)
                    if self.host_agent.get(t.host) == description.agent_id:
                        t.retried = -math.inf
            return hosts

    def _agent_stub(self, channel: grpc.Channel, wants_token: bool, plain: agent_pb2_grpc.AgentStub | None = None):  # type: ignore[no-untyped-def]
        """The agent API's stub on ``channel`` (``plain``, if made already), sending the token to an agent that wants
        it."""
        return with_token(plain or agent_pb2_grpc.AgentStub(channel), self.token if wants_token else None)

    def unanswered_for(self, agent_id: str) -> float:
        """Seconds over which the coordinator's calls to the agent have gone unanswered, in a row: from the first of
        them to the latest (until a poll is answered); 0 while it answers, and for an agent not registered. Not to
        now: an engine loop held up (a long decision) asks nothing, and what it did not ask says nothing of the
        agent. Its heartbeats count for nothing here: an agent heard one way only (its heartbeats arrive, our calls
        do not) is the case this measures (:meth:`coordinator.service.CoordinatorServer.heard_one_way`)."""
        handle = self.agents.get(agent_id)
        if handle is None or not handle.silent or handle.polls_unanswered < ONE_WAY_POLLS:
            return 0.0
        return handle.unanswered_last - handle.unanswered_since

    def excuse_unanswered(self) -> None:
        """This process did not run for a while (:meth:`coordinator.service.CoordinatorServer._note_running`): a call
        whose deadline passed meanwhile says nothing of its agent, so every agent's unanswered calls are counted
        afresh, from now (:meth:`unanswered_for`)."""
        now = time.monotonic()
        for handle in list(self.agents.values()):
            handle.unanswered_since = handle.unanswered_last = now
            handle.polls_unanswered = 0

    def probe(self, address: str, agent_id: str, wants_token: bool, timeout: float = FAST_TIMEOUT_S) -> str | None:
        """Ask the agent at ``address`` to Describe itself, one short attempt: None if agent ``agent_id`` answers, else
        why not. For an agent heard one way only that registers again: its registration comes over its own link, which
        says nothing of ours to it (a one-way partition, an address we cannot reach)."""
        channel = self.channel_factory(address)
        try:
            reply = self._agent_stub(channel, wants_token).Describe(agent_pb2.DescribeRequest(),
                                                                    timeout=min(timeout, FAST_TIMEOUT_S))
        except grpc.RpcError as exc:
            return f"its Describe at {address} failed: {_rpc_text(exc)}"
        finally:
            channel.close()
        if reply.agent_id != agent_id:
            return f"agent {shown(reply.agent_id)} answers at {address}"  # (whatever listens there: bounded)
        return None

    def _reconnect(self, handle: AgentHandle) -> None:
        """Give ``handle`` a new channel to its agent (:data:`RECONNECT_AFTER_MISSES`), the old one closed first
        (else gRPC hands the new one the same connection); the old one kept if no new one can be made (a TLS file
        being rotated), and tried again at the next such miss. Called under the lock."""
        try:
            channel = self.channel_factory(handle.address)
        except Exception as exc:
            log.warning("agent %s: cannot connect to %s again: %s", handle.agent_id, handle.address, exc)
            return
        handle.channel.close()
        handle.channel, handle.stub = channel, self._agent_stub(channel, handle.wants_token)
        log.info("agent %s: %d polls in a row unanswered; connecting to %s again", handle.agent_id, handle.misses,
                 handle.address)

    @property
    def reference(self) -> agent_pb2.HostInfo | None:
        """The reference host, whose capacity the model's host capacities and job needs are fractions of
        (:meth:`add_agent`): the one :meth:`choose_reference` or :meth:`restore_reference` set, else the first
        ever registered."""
        return self._reference

    def choose_reference(self, hosts: Sequence[agent_pb2.HostInfo]) -> None:
        """Take the largest of ``hosts`` (most cores, then most memory; the first such) as the reference, before
        their agents register, unless a reference is set (restored from the store): ``vcemu up`` knows every host
        it starts, and with unequal hosts the one that registered first would make a job's need mean another
        amount of CPU from one run to the next. So a need of 1 is the largest host, and no host's CPU is above 1
        (its memory may be: the largest in cores is taken, not in memory; a reference restored from the store may
        be smaller than a host added since). Agents started by hand (``vcemu coordinator``) make the first
        host to register the reference, unless ``--reference-host`` names one."""
        if not hosts:
            return
        largest = max(hosts, key=lambda h: (h.cpu_cores, h.memory_bytes))
        kept = self._reference
        if kept is not None and (kept.cpu_cores, kept.memory_bytes) != (largest.cpu_cores, largest.memory_bytes):
            # (live review: restarted with other host sizes, a need-1 job got part of its host, unexplained)
            log.warning("the reference host restored from the state (%g cores, %d MiB) is kept, not this run's "
                        "largest host (%g cores, %d MiB): a job's needs stay fractions of the kept one, so that the "
                        "jobs the state holds keep their meaning", kept.cpu_cores, kept.memory_bytes >> 20,
                        largest.cpu_cores, largest.memory_bytes >> 20)
        self.restore_reference(largest)

    def restore_reference(self, info: agent_pb2.HostInfo) -> None:
        """Take the reference host an earlier run of the coordinator used (its store), before any agent is
        added: the agents may come back in another order, and another reference would change what every stored
        job's needs mean."""
        with self._lock:
            if self._reference is None:
                self._reference = info

    def cut_off(self, agent_id: str, handle: AgentHandle | None = None) -> None:
        """Stop talking to an agent that is being declared lost: calls to it fail at once from now on
        (unreachable), and its calls in flight are cancelled. Takes no lock: the engine loop may be
        holding the engine's and this backend's locks through a call to that very agent (a stopped agent
        lets a call run to its deadline, attempts x :data:`RPC_TIMEOUT_S`), and the watchdog must not wait
        that long to requeue its jobs. :meth:`remove_agent` follows, under the engine lock. ``handle``: the
        agent's handle that was found silent, cut off whether or not the agent has registered again since
        (default: its handle now)."""
        if handle is None:
            handle = self.agents.get(agent_id)
        if handle is not None:
            handle.lost = True
            for call in list(handle.calls):
                call.cancel()

    def remove_agent(self, agent_id: str) -> list[str]:
        """Forget an agent (declared lost); returns its hosts. Its tasks stay with their jobs until the
        engine requeues them; if it comes back, its stale tasks are stopped by reconciliation."""
        with self._lock:
            handle = self.agents.pop(agent_id, None)
            if handle is None:
                return []
            handle.channel.close()
            for h in handle.hosts:
                if self.host_agent.get(h) == agent_id:
                    del self.host_agent[h]
            # Its orphans: nothing can be stopped there any more (a poll would drop them too), and the jobs
            # they hold (:meth:`_hold`) are placeable again now.
            self._orphans = [t for t in self._orphans if self.host_agent.get(t.host) is not None]
            return list(handle.hosts)

    def adopt(self, spec: JobSpec, restarts: int, tasks: Sequence[StoredTask], cpu: float,
              state: JobState | None = None) -> None:
        """Take over the tasks of a placed job from an earlier run of the coordinator (its store). ``state``,
        the job's state in that store: if its tasks contradict it, the earlier run crashed between a call
        and the engine's record of it, or a pause or move was cut short by a failure and the engine had not
        requeued the job yet (a RUNNING job with an unfinished task saved, no process left for it; a PAUSED
        job with a task running, in checkpoint mode). No poll would ever finish or restart it: it is
        requeued from its checkpoints at the first poll."""
        with self._lock:
            self._specs[spec.id] = spec
            self._restarts[spec.id] = max(self._restarts.get(spec.id, -1), restarts)
            adopted = [_Task(t.task_id, t.host, t.progress, t.state, saved=t.saved) for t in tasks]
            self._tasks[spec.id] = adopted
            self._cpu[spec.id] = cpu
            unfinished = [t for t in adopted if t.state != agent_pb2.TASK_STATE_DONE]
            if (state is JobState.RUNNING and any(t.saved for t in unfinished)) or (
                    state is JobState.PAUSED and self.pause_mode != "freeze" and not all(t.saved for t in unfinished)):
                self._interrupted.append(spec.id)

    def reserve_restarts(self, job: str, restarts: int) -> None:
        """Never reuse the task ids an earlier run of the coordinator may have given this job."""
        with self._lock:
            self._restarts[job] = max(self._restarts.get(job, -1), restarts)

    def _persist(self, job: str) -> None:
        """Journal the job's tasks with its restart count. A job with no tasks (not started yet, requeued,
        done) is journalled with an empty list, not deleted: its count must stay, so that a restarted
        coordinator never gives a new task an id that a task left on an agent may still have."""
        if self.journal is not None:
            tasks = self._tasks.get(job, [])
            stored = [StoredTask(t.task_id, t.host, t.progress, t.state, t.saved) for t in tasks]
            self.journal(job, self._restarts.get(job, -1), stored)

    def close(self) -> None:
        with self._lock:
            for handle in self.agents.values():
                handle.channel.close()

    # ---- the clock --------------------------------------------------------------------------------

    def now(self) -> float:
        return (time.monotonic() - self._t0) * self.compression

    def wake(self) -> None:
        self._wake.set()

    @property
    def retry_after(self) -> float:
        """Model seconds before the engine offers again a job whose Start was refused as unreachable: one
        poll interval, the soonest a silent agent's answer or an orphan's confirmed Stop can change that."""
        return self.poll_interval * self.compression

    # ---- actions ----------------------------------------------------------------------------------

    def answering_elsewhere(self, handle: AgentHandle | None, address: str, timeout: float = FAST_TIMEOUT_S
                            ) -> str | None:
        """The address of agent ``handle`` (as registered), if that is not ``address`` and the agent there still
        answers Describe as that agent within ``timeout``; else None (no handle, the same address, or its
        predecessor gone: a restart elsewhere, which takes its place)."""
        if handle is None or handle.address == address or handle.lost:
            return None
        # A channel of its own: the handle's may be closed meanwhile by a registration or a loss (the caller holds
        # no lock), and a call on a closed channel raises (code review: 4,722 UNKNOWN answers in 20 s of racing
        # registrations; with a channel interceptor, a crash).
        with self.channel_factory(handle.address) as channel:
            stub = with_token(agent_pb2_grpc.AgentStub(channel), self.token if handle.wants_token else None)
            try:
                described = stub.Describe(agent_pb2.DescribeRequest(), timeout=timeout)
            except grpc.RpcError:
                return None
        return handle.address if described.agent_id == handle.agent_id else None

    def _stub(self, host: str) -> agent_pb2_grpc.AgentStub:
        handle = self.agents.get(self.host_agent.get(host, ""))
        if handle is None:
            raise BackendError(f"no agent emulates host {host!r}", unreachable=True)
        if handle.lost:
            raise BackendError(f"agent {handle.agent_id} of host {host!r} is lost", unreachable=True)
        return handle.stub

    def _retry(self, fn: Callable, request: object, attempts: int = RPC_ATTEMPTS,  # type: ignore[type-arg]
               host: str | None = None, errors: list[grpc.RpcError] | None = None, items: int = 1):
        """Call an idempotent RPC with a deadline; retry UNAVAILABLE/DEADLINE_EXCEEDED with exponential
        backoff and full jitter (so agents coming back are not hit by every client at once). To the agent
        of ``host`` when it has been silent for :data:`SILENT_AFTER_S`: one attempt, short deadline. A
        call to an agent that is cut off meanwhile ends at once with an unreachable BackendError.
        ``errors``: each failed attempt's error is appended (did any of them reach the agent?). ``items``: the
        requests a batch call carries, each :data:`BATCH_ITEMS_PER_DEADLINE` of them given an attempt's deadline (at
        most :data:`BATCH_DEADLINES_MAX`; a silent agent's one short attempt is not lengthened)."""
        timeout = self.rpc_timeout / attempts  # the attempts share one deadline
        handle = self.agents.get(self.host_agent.get(host, "")) if host is not None else None
        # (one that answered running nothing is asked only every IDLE_POLL_S: its last answer is that much older)
        if handle is not None and (handle.silent or (handle.last_seen and time.monotonic() - handle.last_seen
                                                     > SILENT_AFTER_S + (IDLE_POLL_S if handle.idle_until else 0.0))):
            attempts, timeout = 1, min(timeout, FAST_TIMEOUT_S)  # (a batch too: the agent has not been answering)
        else:
            timeout *= min(BATCH_DEADLINES_MAX, 1 + (items - 1) // BATCH_ITEMS_PER_DEADLINE)
        for attempt in range(attempts):
            try:
                return fn(request, timeout=timeout) if handle is None else _cancellable(fn, request, timeout, handle)
            except grpc.RpcError as exc:
                if errors is not None:
                    errors.append(exc)
                if exc.code() not in _RETRYABLE:
                    raise
                if handle is not None:
                    handle.unanswered()  # the next calls get one short attempt, until a poll answers
                if attempt == attempts - 1:
                    raise
                time.sleep(random.uniform(0, RPC_BACKOFF_S * 2**attempt))
        raise AssertionError("unreachable")

    def _batch_call(self, handle: AgentHandle, method: str, request: object, host: str, items: int,
                    errors: list[grpc.RpcError] | None = None):  # type: ignore[no-untyped-def]
        """A batch call (SetShares, StartTasks, StopTasks) of ``items`` requests through :meth:`_retry`; None if the
        agent answers UNIMPLEMENTED (an older agent: not asked again, :attr:`AgentHandle.unbatched`; the caller
        sends one single call per task instead). Other failures raise, as :meth:`_retry`'s do."""
        try:
            return self._retry(getattr(handle.stub, method), request, host=host, errors=errors, items=items)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise
        handle.unbatched.add(method)
        single = {"SetShares": "SetShare", "StartTasks": "StartTask", "StopTasks": "Stop"}[method]
        log.info("agent %s has no %s (an older agent): one %s per task", handle.agent_id, method, single)
        return None

    def _call(self, host: str, method: str, request: object) -> agent_pb2.TaskReply:
        attempts: list[grpc.RpcError] = []
        try:
            return self._retry(getattr(self._stub(host), method), request, host=host, errors=attempts)
        except grpc.RpcError as exc:
            if method == "StartTask" and exc.code() == grpc.StatusCode.ALREADY_EXISTS:
                return agent_pb2.TaskReply()  # an earlier attempt of this call started it (ids are unique)
            if exc.code() == grpc.StatusCode.FAILED_PRECONDITION and self._leftovers_on(host):
                return self._call_past_orphans(host, method, request, exc)
            if method != "StartTask" and exc.code() == grpc.StatusCode.NOT_FOUND:
                # The agent answered without our task: it vanished (the agent restarted), as a poll would report
                # it. Lost, not refused: the engine requeues the job from its checkpoint instead of failing it
                # (a decision can come before the poll that would have seen it, e.g. when a restarted agent
                # re-registers with its hosts changed and the requeued jobs are placed beside it).
                raise BackendError(f"{method} on {host}: {_rpc_text(exc)}: the task is gone",
                                   unreachable=True) from None
            if method == "StartTask" and exc.code() in _RETRYABLE and not all(map(_never_sent, attempts)):
                # Unanswered: the agent may have started it. Stopped like an orphan, which holds its job
                # (:meth:`_hold`) until that Stop gets through or the agent is declared lost. Not when no
                # attempt left this side (nothing listened at the address, the name did not resolve): then
                # no task was made, and nothing holds the job.
                self._orphans.append(_Task(request.task_id, host))  # type: ignore[attr-defined]
            # RESOURCE_EXHAUSTED: the agent answered that it ran out of space, descriptors or processes (node_agent.
            # server._resource_shortage): no task was made, and nothing against the job, which waits (exhaustion review)
            exhausted = exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            error = BackendError(f"{method} on {host}: {_rpc_text(exc)}", exc.code() in _RETRYABLE or exhausted,
                                 backoff=exhausted)
            if exhausted or exc.code() in _RETRYABLE:
                # The machine's shortage, or an agent that does not answer (a one-way partition: it heartbeats, so
                # it is never declared lost): all of its agent's hosts, kept from new tasks a while. Else the policy,
                # seeing them free, sent every new job there again at every retry while other hosts stood idle
                # (gray-failure review: 8 jobs pending 68 s beside 4 idle hosts).
                error.short = self._hosts_of_agent(host)
            raise error from None

    def _hosts_of_agent(self, host: str) -> tuple[str, ...]:
        """All the hosts of ``host``'s agent (``host`` alone if it has none)."""
        agent = self.host_agent.get(host)
        return tuple(h for h, a in self.host_agent.items() if a == agent) if agent else (host,)

    def _call_past_orphans(self, host: str, method: str, request: object,
                           refusal: grpc.RpcError) -> agent_pb2.TaskReply:
        """A call the agent refused for want of capacity (FAILED_PRECONDITION) on a host where tasks of
        ours wait to be stopped: an orphan still holds its share and memory on the agent, while the model
        has freed them, so the refusal says nothing against this job. Stop them now (each at most once per
        poll interval, :meth:`_stop_orphans`) and call once more. If one still cannot be stopped, the
        refusal is transient (unreachable): the engine requeues the job, or leaves it pending, instead of
        failing it for good."""
        tried = time.monotonic()
        if not self._stop_orphans(lambda t: t.host == host, placement=True):
            # Transient only while the agent does not answer (it is then declared lost, which ends its
            # orphans, or answers again): an agent that answers and refuses the Stop would have the job
            # offered again at every turn for ever, so then the refusal fails it, naming the cause. A Stop
            # not tried now (the rate limit) refused nothing yet.
            silent = all(self._may_get_through(t, tried) for t in self._orphans if t.host == host)
            raise BackendError(f"{method} on {host}: {_rpc_text(refusal)}; tasks stopped on {host} earlier still "
                               "hold it (their Stop did not get through)" + (", will retry" if silent else ""),
                               unreachable=silent)
        return self._call(host, method, request)

    def _leftovers_on(self, host: str) -> bool:
        """Asked when ``host``'s agent refuses a call for want of capacity, which the model says it has:
        are tasks of ours, or of no job here, left on it? Our orphans, and the tasks its agent runs there
        that no job owns (a crashed coordinator's, or a cut-off agent's from before it came back: the next
        poll's reconciliation would stop them, but this call would fail its job first). The agent is asked
        now (one Status); those tasks become orphans, to be stopped at once."""
        handle = self.agents.get(self.host_agent.get(host, ""))
        if handle is not None and not handle.lost:
            try:
                status = handle.stub.Status(agent_pb2.StatusRequest(), timeout=min(self.rpc_timeout, FAST_TIMEOUT_S))
            except grpc.RpcError:
                status = None
            if status is not None:
                owned = self._owned()
                self._orphans.extend(_Task(ts.task_id, host) for ts in status.tasks
                                     if ts.host == host and ts.task_id not in owned)
        return any(t.host == host for t in self._orphans)

    def _stop_orphans(self, which: Callable[[_Task], bool] = lambda t: True, placement: bool = False,
                      asked: Collection[str] = ()) -> bool:
        """Try again to stop the orphans ``which`` selects (all of them: a poll's round); True if none of
        them is left. ``placement``: for a placement they block, which the engine offers again at every
        turn while they stay: one retried less than a poll interval ago (by a poll, or such a placement) is
        not tried again, so each costs at most one Stop per poll interval, not one per turn. On an agent that did
        not answer its last poll or call (``silent``), once a Stop goes unanswered its other orphans wait, untried,
        and go first at the next round (all of them while its next poll is not due, unless it was ``asked`` in the
        round this call follows): each would cost a deadline (an
        unanswered StartTasks leaves an orphan per start it carried; 20 made a poll take 20 s, review). An agent
        that answers has each orphan tried (one whose kill outlives the deadline must not keep the others from
        theirs)."""
        now = time.monotonic()
        retry = [t for t in self._orphans if which(t) and not (placement and now - t.retried < self.poll_interval)]
        tried = {id(t) for t in retry}
        self._orphans = [t for t in self._orphans if id(t) not in tried]
        silent = {agent_id for agent_id, handle in self.agents.items() if handle.silent}
        # A silent agent not due for a poll yet (SILENT_POLL_S) is not tried either, unless this round asked it: each
        # of its rounds' Stops cost the engine's lock a deadline, as its polls did (gray-failure review: healthy hosts
        # idle beside waiting jobs).
        unanswered = {agent_id for agent_id, handle in self.agents.items()
                      if handle.silent and handle.next_poll > now and agent_id not in asked}
        skipped: list[_Task] = []
        for t in retry:
            agent = self.host_agent.get(t.host, "")
            if agent in unanswered:
                skipped.append(t)
                continue
            t.retried = now
            if self._stop_task(t) and agent in silent:  # (a failure puts it back in the orphans)
                unanswered.add(agent)
        self._orphans = skipped + self._orphans
        return not any(which(t) for t in self._orphans)

    def _unanswered(self, orphan: _Task) -> bool:
        """May ``orphan``'s Stop still get through, its agent being gone, cut off or not answering? Not once
        that agent has answered polls for :data:`UNSTOPPABLE_AFTER_S` while the orphan's Stop, retried at
        each, still failed: a Stop that times out on an agent that answers Status (a process that will not
        die) marks the agent silent too, and would otherwise hold a job, or refuse a host, for ever."""
        handle = self.agents.get(self.host_agent.get(orphan.host, ""))
        return handle is None or handle.lost or (
            handle.silent and time.monotonic() - orphan.refused_since < UNSTOPPABLE_AFTER_S)

    def _may_get_through(self, orphan: _Task, tried: float) -> bool:
        """Is a refusal that ``orphan`` causes transient (the caller's BackendError ``unreachable``)? While its
        agent does not answer (:meth:`_unanswered`), and for a Stop not tried at ``tried`` (tried less than a
        poll interval before, see :meth:`_stop_orphans`) that no poll has seen fail on an agent that answered."""
        return self._unanswered(orphan) or (orphan.retried < tried and orphan.refused_since == math.inf)

    def _hold(self, job: str) -> None:
        """Refuse to start a task of ``job`` while an earlier copy of it may still run: an orphan of the job
        (a task whose Stop did not get through, as when a move's Stop failed and the job was requeued; or a
        task with the job's id prefix that no job owned) that has not finished. Its Stop is tried once more
        (at most once per poll interval, see :meth:`_stop_orphans`). If it stays while its agent does not
        answer, the refusal is transient (unreachable): the engine keeps the job pending, or requeues a
        placed one, and offers it again at a later turn; the orphan goes when a poll's Stop gets through, or
        with its agent (:meth:`remove_agent`). An agent that answers and still does not stop it would hold
        the job for ever: then the job is failed, naming the cause, as :meth:`_call_past_orphans` does."""
        def copy(t: _Task) -> bool:
            return t.state != agent_pb2.TASK_STATE_DONE and _job_of(t.task_id) == job

        tried = time.monotonic()
        if not any(copy(t) for t in self._orphans) or self._stop_orphans(copy, placement=True):
            return
        t = next(t for t in self._orphans if copy(t))
        silent = self._may_get_through(t, tried)
        raise BackendError(f"job {job} not started again: its task {t.task_id} on {t.host}, stopped earlier, may "
                           "still run (its Stop did not get through)" + (", will retry" if silent else ""),
                           unreachable=silent)

    def _share(self, host: str, cpu: float) -> float:
        """Model CPU fraction (of the reference host) -> fraction of this host's own capacity."""
        assert self._reference is not None
        return min(1.0, cpu * self._reference.cpu_cores / self.host_info[host].cpu_cores)

    def _check_heard(self, hosts: Sequence[str]) -> None:
        """Refuse, as unreachable and with no call, to start a task on a host whose agent was restored from the
        store and has not answered since (:attr:`AgentHandle.heard`): the engine keeps the job pending and
        offers it again a poll interval later, by when the agent has answered a poll, registered anew (a new
        handle), or is being declared lost. Every start, resume and move asks this first: none once the coordinator
        is stopping either (concurrency review: a loop outliving stop()'s wait started tasks after its stop-all)."""
        if self.closing:
            raise BackendError("the coordinator is stopping: no task is started", unreachable=True)
        for host in hosts:
            handle = self.agents.get(self.host_agent.get(host, ""))
            if handle is not None and not handle.heard:
                raise BackendError(f"agent {handle.agent_id} of host {host!r}, restored from the state file, has "
                                   "not been heard from since this coordinator started; will retry",
                                   unreachable=True)

    def _start_request(self, spec: JobSpec, index: int, host: str, cpu: float, progress: float,
                       count: int) -> agent_pb2.StartTaskRequest:
        """The StartTask request of task ``index`` of ``spec`` on ``host``, its id taking restart count ``count``."""
        assert self._reference is not None
        # The agent takes the need as a fraction of its own host, at most the whole host, and a task's work as
        # seconds at full speed there: its CPU work is work_seconds x need x the host's cores. A need the host
        # cannot meet (a host smaller than the reference host) runs at the whole host and takes longer in
        # proportion, so that the task does the same CPU work on any host, as the model has it (its yield there
        # is at most host/need): capping the need alone had such a task done after host/need of its work.
        need = spec.cpu_need * self._reference.cpu_cores / self.host_info[host].cpu_cores
        return agent_pb2.StartTaskRequest(
            task_id=f"{spec.id}/{index}" + (f".{count}" if count else ""),
            host=host,
            workload=spec.workload,
            cpu_share=self._share(host, cpu),
            cpu_need=min(1.0, need),
            work_seconds=spec.work / self.compression * max(1.0, need),
            memory_bytes=int(spec.mem * self._reference.memory_bytes),
            start_progress=progress,
        )

    def _start_task(self, spec: JobSpec, index: int, host: str, cpu: float, progress: float) -> _Task:
        """Start one task of ``spec`` (a move's). Its id takes the job's next restart count, made durable
        (journalled) first."""
        self._check_heard((host,))
        self._hold(spec.id)  # never beside a copy of it that may still run
        count = self._restarts[spec.id] = self._restarts.get(spec.id, -1) + 1
        request = self._start_request(spec, index, host, cpu, progress, count)
        self._persist(spec.id)  # the new restart count is durable before the task can exist
        self._call(host, "StartTask", request)
        return _Task(request.task_id, host, progress)

    def _start_tasks(self, spec: JobSpec, starts: Sequence[tuple[int, str]], cpu: float) -> None:
        """Start the tasks ``starts`` (index, host) of ``spec``, each from the progress of its entry in the job's
        task list. Their restart counts are reserved first, each entry saved (no process) under its new id, and
        all of it journalled in one write before any can exist (a write per task rewrote the job's whole task
        list each time: starting 4,000 tasks took 121 s under ``--state``, the API blocked for 49 s; scale
        review). Then one StartTasks call per host (:meth:`_send_starts`); each entry becomes its task as its
        agent confirms the start, so the list holds every task that may run when a later start fails (the caller
        stops them)."""
        hosts = [host for _, host in starts]
        self._check_heard(hosts)
        self._hold(spec.id)  # never beside a copy of it that may still run
        tasks = self._tasks[spec.id]
        first = self._restarts.get(spec.id, -1) + 1
        self._restarts[spec.id] = first + len(starts) - 1
        by_host: dict[str, list[tuple[int, agent_pb2.StartTaskRequest]]] = {}
        for k, (i, host) in enumerate(starts):
            request = self._start_request(spec, i, host, cpu, tasks[i].progress, first + k)
            tasks[i] = _Task(request.task_id, host, request.start_progress, saved=True)
            by_host.setdefault(host, []).append((i, request))
        self._persist(spec.id)  # the new restart counts are durable before the tasks can exist
        for host, items in by_host.items():
            self._send_starts(host, items, tasks)

    def _send_starts(self, host: str, items: list[tuple[int, agent_pb2.StartTaskRequest]], tasks: list[_Task]) -> None:
        """Start ``items`` (index in ``tasks``, request) on ``host`` in StartTasks calls of at most
        :data:`BATCH_BYTES` (modeled tasks only: :meth:`_batched`); each start confirmed replaces its entry in
        ``tasks``. A start the agent refused is sent again alone through :meth:`_call`, whose rules (orphans holding
        the capacity, its message) make of a refusal the job's BackendError, and the starts after it go in a new
        call. Unanswered, the call's starts become orphans (the agent may have made them: stopped at the next polls)
        and the job's start fails as unreachable, as a StartTask's would. One StartTask each for a workload
        program's tasks, for a host's only task, or to an agent without StartTasks (UNIMPLEMENTED: not asked
        again)."""
        handle = self.agents.get(self.host_agent.get(host, ""))
        pending = items
        while pending:
            if not (self._batched(_job_of(pending[0][1].task_id)) and _batches(handle, "StartTasks", len(pending))):
                for i, request in pending:
                    self._call(host, "StartTask", request)
                    tasks[i] = _Task(request.task_id, host, request.start_progress)
                return
            chunk = next(_chunks([request for _, request in pending]))
            attempts: list[grpc.RpcError] = []
            try:
                reply = self._batch_call(handle, "StartTasks", agent_pb2.StartTasksRequest(tasks=chunk), host,
                                         len(chunk), attempts)
            except grpc.RpcError as exc:
                if exc.code() in _RETRYABLE and not all(map(_never_sent, attempts)):
                    self._orphans += [_Task(request.task_id, host) for request in chunk]
                error = BackendError(f"StartTasks on {host}: {_rpc_text(exc)}", exc.code() in _RETRYABLE)
                if exc.code() in _RETRYABLE:  # (as a StartTask's: see _call)
                    error.short = self._hosts_of_agent(host)
                raise error from None
            if reply is None:  # an older agent: one StartTask each
                continue
            done = 0
            for result in reply.results[:len(chunk)]:
                if result.error_code and result.error_code != "ALREADY_EXISTS":
                    break  # refused: sent alone below
                i, request = pending[done]
                tasks[i] = _Task(request.task_id, host, request.start_progress)
                done += 1
            if done < len(chunk) and (done < len(reply.results) or done == 0):
                # Refused (or, with no result at all, no answer to this request): alone, by the single call's rules.
                i, request = pending[done]
                self._call(host, "StartTask", request)
                tasks[i] = _Task(request.task_id, host, request.start_progress)
                done += 1
            pending = pending[done:]

    def start(self, spec: JobSpec, hosts: Sequence[str], cpu: float, progress: float = 0.0) -> None:
        with self._lock:
            # A job held by its orphans is refused before anything changes (its first _start_task would
            # refuse it too, after a journal write): the engine offers it again at every turn meanwhile.
            self._check_heard(hosts)
            self._hold(spec.id)
            self._specs[spec.id] = spec
            # The job's tasks, each saved (no process) until it starts: a capacity refusal of a later one must not
            # take the earlier ones for leftovers of no job (:meth:`_leftovers_on`), and the journal lists them.
            tasks = self._tasks[spec.id] = [_Task("", host, progress, saved=True) for host in hosts]
            try:
                self._start_tasks(spec, list(enumerate(hosts)), cpu)
                self._persist(spec.id)  # failing, its tasks are stopped: the engine has not recorded the start
            except BaseException:
                self._stop_tasks([t for t in tasks if not t.saved], self._batched(spec.id))
                del self._tasks[spec.id]
                with contextlib.suppress(Exception):  # best effort: the journal may be what failed
                    self._persist(spec.id)
                raise
            self._cpu[spec.id] = cpu

    def set_share(self, job: str, cpu: float) -> None:
        """Queue the new share of each of the job's tasks for :meth:`send_shares`, which the engine calls before
        the plan's next other action (a job with no task to re-share, all of them moving or done, takes the share
        then too: its moved tasks start with it)."""
        with self._lock:
            self._share_cpu[job] = cpu
            for t in self._tasks[job]:
                if not t.saved and t.state != agent_pb2.TASK_STATE_DONE:  # a moving task starts with it
                    queued = self._shares.setdefault(t.host, {})
                    queued.pop(t.task_id, None)  # (a later change goes where it was made)
                    queued[t.task_id] = self._share_request(t, cpu)

    def _share_request(self, t: _Task, cpu: float) -> agent_pb2.SetShareRequest:
        return agent_pb2.SetShareRequest(task_id=t.task_id, cpu_share=self._share(t.host, cpu))

    def _set_share(self, t: _Task, cpu: float) -> None:
        self._call(t.host, "SetShare", self._share_request(t, cpu))

    def send_shares(self) -> list[tuple[str, BackendError]]:
        """Send the queued share changes, one SetShares call per host (:meth:`_send_shares`); returns the (job,
        error) of the jobs a change of which failed, one per job. The others' shares are theirs now."""
        with self._lock:
            for host in list(self._shares):
                self._send_shares(host)
            failed: dict[str, BackendError] = {}
            for job, exc in self._share_failures:
                failed.setdefault(job, exc)
            for job, cpu in self._share_cpu.items():
                if job not in failed:
                    self._cpu[job] = cpu
            self._share_failures, self._share_cpu = [], {}
            return list(failed.items())

    def _send_shares(self, host: str) -> None:
        """Send ``host``'s queued share changes in one SetShares call (more above :data:`BATCH_BYTES`).
        Each change the agent refused, and all of them if the call failed otherwise than unanswered or the agent
        has no SetShares, is sent again alone through :meth:`_call`, whose rules (orphans holding the capacity, a
        task gone) make of a refusal its job's BackendError. Unanswered, each change gets the unreachable error,
        as its own SetShare would (the agent has its single short attempts already: no n more). The errors go to
        ``_share_failures``."""
        queued = self._shares.pop(host, None)
        if not queued:
            return
        requests = list(queued.values())
        handle = self.agents.get(self.host_agent.get(host, ""))
        again = requests
        if _batches(handle, "SetShares", len(requests)):
            again = []
            for chunk in _chunks(requests):
                try:
                    reply = self._batch_call(handle, "SetShares", agent_pb2.SetSharesRequest(shares=chunk), host,
                                             len(chunk))
                except BackendError as error:  # cut off meanwhile (:func:`_cancellable`)
                    self._share_failures += [(_job_of(r.task_id), error) for r in chunk]
                    continue
                except grpc.RpcError as exc:
                    if exc.code() in _RETRYABLE:
                        error = BackendError(f"SetShares on {host}: {_rpc_text(exc)}", True)
                        self._share_failures += [(_job_of(r.task_id), error) for r in chunk]
                        continue
                    again += chunk
                    continue
                if reply is None:  # an older agent: one SetShare each
                    again += chunk
                    continue
                results = list(reply.results)
                if len(results) != len(chunk):  # not an answer to this request: each is sent alone
                    again += chunk
                    continue
                again += [r for r, result in zip(chunk, results, strict=True) if result.error_code]
        for request in again:
            try:
                self._call(host, "SetShare", request)
            except BackendError as exc:
                self._share_failures.append((_job_of(request.task_id), exc))

    def pause(self, job: str) -> None:
        with self._lock, self._requeued_if_cut_short(job):
            try:
                running = [t for t in self._tasks[job] if not t.saved and t.state != agent_pb2.TASK_STATE_DONE]
                if self.pause_mode == "freeze":
                    for t in running:
                        self._call(t.host, "Pause", agent_pb2.TaskRef(task_id=t.task_id))
                else:
                    self._save_tasks(running, self._batched(job))
            except BackendError:
                # Cut short: the tasks checkpointed and stopped so far are journalled now, as a move's are
                # (the engine requeues or fails the job next, and a crash before that must not lose them).
                # Best effort: the BackendError is what the engine must see.
                self._persist_quietly(job)
                raise
            self._persist(job)

    def resume(self, job: str, hosts: Sequence[str], cpu: float) -> None:
        with self._lock, self._requeued_if_cut_short(job):
            tasks = self._tasks[job]
            self._cpu[job] = cpu
            saved = {i: host for i, (t, host) in enumerate(zip(tasks, hosts, strict=True))
                     if t.saved and t.state != agent_pb2.TASK_STATE_DONE}
            if saved:  # checkpointed by the pause: started again, in one call per host
                self._start_tasks(self._specs[job], list(saved.items()), cpu)
            for i, (t, host) in enumerate(zip(tasks, hosts, strict=True)):
                if t.state == agent_pb2.TASK_STATE_DONE or i in saved:
                    continue  # finished before the pause, or started above
                if t.host == host:
                    self._set_share(t, cpu)
                    self._call(host, "Resume", agent_pb2.TaskRef(task_id=t.task_id))
                else:
                    tasks[i] = self._move(self._specs[job], i, t, host, cpu)
            self._persist(job)

    def _save_tasks(self, tasks: list[_Task], batched: bool) -> None:
        """Checkpoint and stop ``tasks`` (a pause), strictly: if ``batched`` (:meth:`_batched`), one StopTasks call
        per host (more above :data:`BATCH_BYTES`), each task saved at the progress its Stop answers with (the agent
        reads it as it stops the task: no earlier than a Checkpoint before the Stop would). A Checkpoint and a Stop
        per task made pausing a job of 10,000 tasks take 16.6 and 21.8 s (two runs; 0.73 and 0.82 s so). The first
        failure raises, as a Stop alone would (NOT_FOUND: the agent restarted, lost; a task found failed: its job
        fails), once the call's other answers are recorded: each task stopped is saved, and the engine's requeue or
        failure of the job stops the rest. Not batched, to an agent without StopTasks, and for a host's only task:
        a Checkpoint and a Stop each (:meth:`_save_task`)."""
        for host, pending in _by_host(tasks).items():
            handle = self.agents.get(self.host_agent.get(host, ""))
            while pending:
                if not (batched and _batches(handle, "StopTasks", len(pending))):
                    for t in pending:
                        self._save_task(t)
                    break
                refs = next(_chunks([agent_pb2.TaskRef(task_id=t.task_id) for t in pending]))
                chunk = pending[:len(refs)]
                attempts: list[grpc.RpcError] = []
                try:
                    reply = self._batch_call(handle, "StopTasks", agent_pb2.StopTasksRequest(tasks=refs), host,
                                             len(refs), attempts)
                except grpc.RpcError as exc:
                    raise BackendError(f"StopTasks on {host}: {_rpc_text(exc)}", exc.code() in _RETRYABLE) from None
                if reply is None:  # an older agent: a Checkpoint and a Stop each
                    continue
                # An attempt before the one answered may have reached the agent and stopped them: a task it then
                # answers NOT_FOUND for was stopped so, not lost (saved at its last poll's progress; review).
                earlier = not all(map(_never_sent, attempts))
                results = list(reply.results)
                if len(results) != len(chunk):  # not an answer to this request: which stopped is not known
                    raise BackendError(f"StopTasks on {host}: {len(results)} answers to {len(chunk)} stops", True)
                failure: BackendError | None = None
                for t, result in zip(chunk, results, strict=True):
                    if result.error_code == "NOT_FOUND" and earlier:
                        self._saved(t, t.progress, t.state)
                    elif result.error_code:
                        failure = failure or BackendError(f"Stop {t.task_id}: {result.error_code}: {result.error}",
                                                          result.error_code == "NOT_FOUND")
                    elif result.task.state == agent_pb2.TASK_STATE_FAILED:
                        # It failed since the last poll, which would have failed its job (as in :meth:`_stop_task`).
                        failure = failure or BackendError(f"task {t.task_id} failed on {host}: {result.task.message}")
                    else:
                        self._saved(t, result.task.progress, result.task.state)
                if failure is not None:
                    raise failure
                pending = pending[len(chunk):]

    def _save_task(self, t: _Task) -> None:
        """Checkpoint and stop one task (a pause), strictly, and save it at the checkpoint."""
        progress = self._checkpoint(t)
        self._stop_task(t, strict=True)
        self._saved(t, progress, t.state)

    @staticmethod
    def _saved(t: _Task, progress: float, state: int) -> None:
        """``t`` stopped at ``progress``: saved to resume from it, or done if nothing is left."""
        if progress >= 1.0 or state == agent_pb2.TASK_STATE_DONE:
            t.progress, t.state = 1.0, agent_pb2.TASK_STATE_DONE  # nothing left to resume
        else:
            t.progress, t.saved = progress, True

    @contextlib.contextmanager
    def _requeued_if_cut_short(self, job: str) -> Iterator[None]:
        """Around a pause or a resume: a failure other than a BackendError (a journal write, the one before a
        StartTask or the closing one) is not the engine's to handle, so it does not record the change. Its job
        would stay RUNNING with tasks saved (no process), or PAUSED with tasks running, for ever: it is
        requeued from its checkpoints at the next poll (:meth:`abandon_moves`' route), and the exception goes on
        to the engine. A BackendError fails or requeues the job at once (:meth:`Engine._failed`)."""
        try:
            yield
        except BackendError:
            raise
        except BaseException:
            self._interrupted.append(job)
            raise

    def migrate(self, job: str, task: int, dst: str) -> None:
        """First half of one task's move (:meth:`move` of that task alone); :meth:`flush` starts it at ``dst``."""
        self.move(job, [(task, dst)])

    def move(self, job: str, changes: Sequence[tuple[int, str]]) -> None:
        """First half of a Move: :meth:`migrate` for each of ``changes`` (task index, new host), all at once. The
        moving tasks are checkpointed and stopped now (:meth:`_save_tasks`: one StopTasks call per host, each task
        saved at the progress its Stop answered with, for modeled tasks; a Checkpoint and a Stop each otherwise), a
        finished one stopped if still there, and the job journalled once; :meth:`flush` starts them at their new
        hosts. A Checkpoint, a Stop and a StartTask per task made moving 2,000 tasks of a job take 6.2 s.

        A plan's moves may cross (A: h1->h2 while B: h2->h1): were each restarted at once, the first would find its
        destination still full. Only the plan's final state is checked to fit, so every task leaves before any
        arrives.

        A failure raises once the stops made are recorded: each task stopped is saved at its new host and started
        there by :meth:`flush` unless the engine requeues or fails the job first (it does: the error's ``hosts``
        say where the job's tasks are now, those not reached still at their old host, running)."""
        with self._lock:
            tasks = self._tasks[job]
            done = agent_pb2.TASK_STATE_DONE
            leaving = [(i, dst) for i, dst in changes if tasks[i].state != done]
            was_saved = [tasks[i].saved for i, _ in leaving]
            batched = self._batched(job)
            try:
                self._check_heard([dst for _, dst in leaving])  # before any process is stopped
                # A finished task of an unfinished job has nothing to move, and its agent may no longer hold it
                # (stopped by an earlier move: Stop forgets a task), so no Checkpoint: it is stopped if still there
                # and recorded at its new host, as the policy placed it.
                finished = [(i, dst) for i, dst in changes if tasks[i].state == done]
                self._stop_tasks([tasks[i] for i, _ in finished], batched)
                for i, dst in finished:
                    tasks[i] = _Task(tasks[i].task_id, dst, 1.0, done)

                def moved() -> None:  # each task stopped now is at its new host, saved to start there
                    for (i, dst), before in zip(leaving, was_saved, strict=True):
                        t = tasks[i]
                        if t.state == done:  # its Stop found it finished: nothing to start
                            tasks[i] = _Task(t.task_id, dst, 1.0, done)
                        elif t.saved and not before:
                            tasks[i] = _Task(t.task_id, dst, t.progress, saved=True)
                            self._arrivals.setdefault(job, []).append(i)

                try:
                    self._save_tasks([tasks[i] for i, _ in leaving], batched)
                except BaseException:
                    moved()
                    # Best effort, as a pause's: the failure is what the engine must see (a journal write failing
                    # over a task found failed had the job requeued and run again; review).
                    self._persist_quietly(job)
                    raise
                moved()
                self._persist(job)  # where its tasks are
            except BackendError as exc:
                exc.hosts = tuple(t.host for t in tasks)
                raise

    def flush(self) -> list[tuple[str, BackendError]]:
        """Second half of the plan's moves: start every moved task at its new host, a job's in one
        :meth:`_start_tasks` (one StartTasks call per host for modeled tasks). Returns the (job, error) of the jobs
        whose tasks could not all be started."""
        failed: list[tuple[str, BackendError]] = []
        with self._lock:
            while self._arrivals:
                # A job at a time, its moves left queued until they are started: should anything but a BackendError
                # escape (the journal's store failing), the moves not yet started are still queued for the
                # engine's :meth:`abandon_moves`.
                job, moved = next(iter(self._arrivals.items()))
                tasks = self._tasks.get(job)
                starts = [] if tasks is None else sorted({i for i in moved if tasks[i].saved})
                if starts:
                    try:
                        self._start_tasks(self._specs[job], [(i, tasks[i].host) for i in starts], self._cpu[job])
                    except BackendError as exc:
                        failed.append((job, exc))
                    self._persist(job)
                del self._arrivals[job]
        return failed

    def abandon_moves(self) -> None:
        """The plan under way ended in an exception (not a BackendError: a failed journal write, say) before
        its moves were all started. Called by the engine. Their tasks are saved, with no process, and whether
        the engine recorded their new hosts depends on where the exception came from, so they are neither
        started by a later plan's :meth:`flush` nor here: the next poll requeues their jobs, which restart
        from the checkpoints wherever they are placed next. Share changes not sent yet are dropped: the engine
        records a change once sent (:meth:`send_shares`), so their jobs keep the shares it has for them."""
        with self._lock:
            self._interrupted += list(self._arrivals)
            self._arrivals = {}
            self._shares, self._share_cpu = {}, {}

    def _checkpoint(self, task: _Task) -> float:
        try:
            reply = self._retry(self._stub(task.host).Checkpoint, agent_pb2.TaskRef(task_id=task.task_id),
                                host=task.host)
        except grpc.RpcError as exc:
            # NOT_FOUND: the agent answered without the task (it restarted): lost, as in :meth:`_call`.
            lost = exc.code() in _RETRYABLE or exc.code() == grpc.StatusCode.NOT_FOUND
            raise BackendError(f"Checkpoint {task.task_id}: {_rpc_text(exc)}", lost) from None
        return reply.progress

    def _move(self, spec: JobSpec, index: int, task: _Task, dst: str, cpu: float) -> _Task:
        """Checkpoint, stop, restart on ``dst`` from the checkpointed progress. Once stopped, ``task``
        (still in its job's list) is marked saved with that progress, which :meth:`_start_task` journals:
        if the restart fails, the engine requeues the job from the checkpoint, not the last poll. A job held
        by an orphan (:meth:`_hold`) is refused first, its task left as it is."""
        self._check_heard((dst,))
        self._hold(spec.id)
        progress = self._checkpoint(task)
        self._stop_task(task, strict=True)
        if progress >= 1.0 or task.state == agent_pb2.TASK_STATE_DONE:
            return _Task(task.task_id, dst, 1.0, agent_pb2.TASK_STATE_DONE)  # done: nothing to move
        task.progress, task.saved = progress, True
        return self._start_task(spec, index, dst, cpu, progress)

    def _stop_task(self, task: _Task, strict: bool = False) -> bool:
        """Stop a task's process on its agent. ``strict``: raise if that fails (before a restart
        elsewhere, which must not run twice); otherwise keep it to retry at every poll, so a slow or
        unreachable agent never costs the caller the job reports it is carrying. True if it was kept so."""
        try:
            reply = self._retry(self._stub(task.host).Stop, agent_pb2.TaskRef(task_id=task.task_id), host=task.host)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return False
            if strict:
                raise BackendError(f"Stop {task.task_id}: {_rpc_text(exc)}", exc.code() in _RETRYABLE) from None
            return self._stops_failed(task.host, [task], _rpc_text(exc))
        except BackendError as exc:  # its agent is cut off or gone (unreachable)
            if strict:  # it may still run there: not restarted elsewhere, the engine requeues the job
                raise
            # Nothing we can stop there any more, and nothing to alarm anyone: the agent's lease has frozen (or
            # will freeze) the copy, and reconciliation stops it if that agent comes back.
            log.info("Stop %s: %s; %s", task.task_id, exc, self._left_there())
            return False
        if strict and reply.task.state == agent_pb2.TASK_STATE_FAILED:
            # It failed since the last poll, which would have failed its job; the Stop made the agent forget
            # it, so say it here rather than restart it elsewhere (a move) or save it (a pause).
            raise BackendError(f"task {task.task_id} failed on {task.host}: {reply.task.message}")
        return False

    def _stops_failed(self, host: str, tasks: list[_Task], why: str) -> bool:
        """Stops of ``tasks`` on ``host`` failed (``why``), and not strictly: kept, to retry at every poll (at the
        coordinator's exit: said, and left there). True if kept."""
        def which(tasks: list[_Task]) -> str:
            return tasks[0].task_id if len(tasks) == 1 else f"{len(tasks)} tasks ({tasks[0].task_id}, ...)"

        if self.closing:
            log.info("Stop %s on %s failed at exit (%s); %s", which(tasks), host, why, self._left_there())
            return False
        # Once per task: its Stop is retried at every poll while its agent is away, and each failure was warned of
        # again (a soak test: 106 warnings for 16 tasks in the seconds an agent was down)
        fresh = [t for t in tasks if not t.stop_warned]
        if fresh:
            log.warning("Stop %s on %s failed (%s); will retry", which(fresh), host, why)
        else:
            log.debug("Stop %s on %s failed again (%s); will retry", which(tasks), host, why)
        for t in tasks:
            t.stop_warned = True
        self._orphans += tasks
        return True

    def _stop_tasks(self, tasks: list[_Task], batched: bool) -> None:
        """:meth:`_stop_task` (not strict) for each of ``tasks``: if ``batched`` (:meth:`_batched`), in one StopTasks
        call per host (more above :data:`BATCH_BYTES`). A Stop the agent failed is kept to retry, as alone;
        NOT_FOUND is a task gone already. A call unanswered keeps its agent's stops not made yet too, untried (each
        call would cost a deadline). One Stop each if not batched, for a host's only task, or to an agent without
        StopTasks (UNIMPLEMENTED: not asked again)."""
        unanswered: set[str] = set()  # agents a call got no answer from: their other hosts' stops are kept too
        for host, pending in _by_host(tasks).items():
            agent = self.host_agent.get(host, "")
            handle = self.agents.get(agent)
            if agent in unanswered:
                self._stops_failed(host, pending, "its agent did not answer a Stop just now")
                continue
            while pending:
                if not (batched and _batches(handle, "StopTasks", len(pending))):
                    for k, t in enumerate(pending):
                        if self._stop_task(t) and handle is not None and handle.silent:
                            if pending[k + 1:]:  # (unanswered: the rest would cost a deadline each)
                                self._stops_failed(host, pending[k + 1:], "its agent did not answer a Stop just now")
                            unanswered.add(agent)
                            break
                    break
                refs = next(_chunks([agent_pb2.TaskRef(task_id=t.task_id) for t in pending]))
                chunk, pending = pending[:len(refs)], pending[len(refs):]
                try:
                    reply = self._batch_call(handle, "StopTasks", agent_pb2.StopTasksRequest(tasks=refs), host,
                                             len(refs))
                except BackendError as exc:  # cut off meanwhile: as :meth:`_stop_task` says it
                    log.info("Stop %d tasks (%s, ...): %s; %s", len(chunk) + len(pending), chunk[0].task_id, exc,
                             self._left_there())
                    break
                except grpc.RpcError as exc:
                    if exc.code() in _RETRYABLE:
                        self._stops_failed(host, chunk + pending, _rpc_text(exc))
                        unanswered.add(agent)
                        break
                    self._stops_failed(host, chunk, _rpc_text(exc))
                    continue
                if reply is None:  # an older agent: one Stop each
                    pending = chunk + pending
                    continue
                results = list(reply.results)
                if len(results) != len(chunk):  # not an answer to this request: each alone
                    for t in chunk:
                        self._stop_task(t)
                    continue
                for t, result in zip(chunk, results, strict=True):
                    if result.error_code and result.error_code != "NOT_FOUND":
                        self._stops_failed(host, [t], f"{result.error_code}: {result.error}")

    def _batched(self, job: str) -> bool:
        """Do ``job``'s tasks start and stop in batch calls? Modeled tasks do (microseconds each at the agent); tasks
        of a workload program (a process each) do not: a start takes the agent 20 ms to over 100 ms under load, so a
        batch of 8 outlived one attempt's deadline (1.67 s) on a loaded 2-core machine, its job undone and retried
        for over a minute (live check); alone, each has a deadline of its own, and the call's cost is small beside
        the process's. A stop now takes 5 to 25 ms (a kill lifts the task's CPU limit), but one whose processes
        will not die (a freezer that will not thaw) holds its call up to ``KILL_TIMEOUT_S`` (10 s): in a batch, the
        others' answers with it."""
        spec = self._specs.get(job)
        return spec is not None and spec.workload == modeled.NAME

    def _left_there(self) -> str:
        """What becomes of a task left on an agent that cannot be told to stop it."""
        if self.lease_s > 0:
            return "a copy left there is frozen by the agent's lease, and stopped if the agent comes back"
        return "a copy left there runs on until the agent comes back and is reconciled (no lease is granted)"

    def stop(self, job: str) -> None:
        with self._lock:
            self._cpu.pop(job, None)
            self._interrupted = [j for j in self._interrupted if j != job]  # the engine requeued it, or gave up
            # Its moves not started yet go too: a plan cut short after this (a listener failing as the requeue is
            # recorded) would otherwise have abandon_moves mark it interrupted, and requeue it for nothing once it
            # runs again (review).
            self._arrivals.pop(job, None)
            # (a failure is retried at the next polls)
            self._stop_tasks([t for t in self._tasks.pop(job, []) if not t.saved], self._batched(job))
            # Best effort: the engine's requeue (or failure) of the job must not fail on it; the restart count,
            # all a journal of no tasks adds, was written before the job's last StartTask.
            self._persist_quietly(job)

    def progress(self, job: str) -> float:
        with self._lock:
            return self.progress_seen(job).get(job, 0.0)

    def progresses(self) -> dict[str, float]:
        with self._lock:
            return self.progress_seen()

    # ---- observing --------------------------------------------------------------------------------

    def poll(self) -> list[Report]:
        """One Status round over all agents; returns jobs that finished since the last round (and jobs to
        requeue: a task vanished, or a plan's move was interrupted). In four steps, under the lock: the round
        itself (:meth:`_status_round`), the orphans' stops and the reconciliation of what the agents hold with
        what the jobs own, each job's report (:meth:`_job_reports`), and, every :data:`JOURNAL_PROGRESS_S`, the
        tasks' progress written to the journal (:meth:`_journal_progress`)."""
        with self._lock:
            # Jobs a plan's exception cut short (:meth:`abandon_moves`, :meth:`_requeued_if_cut_short`, an
            # adopted job that contradicts its state): requeued. Reported at every poll until the engine
            # acts on the report (its requeue calls :meth:`stop`), so that neither a poll cut short nor a
            # requeue that fails (the store still failing) loses them.
            interrupted = dict.fromkeys(self._interrupted)
            reports = [Report(job, JobState.PENDING, "a plan was interrupted; requeued from its checkpoint")
                       for job in interrupted]
            answered, resumable, seen, asked = self._status_round()
            round_start = time.monotonic()
            self._stop_orphans(asked=asked)
            for t in self._orphans:  # its agent answered this poll, and its Stop, tried now, still failed
                if t.host in answered and t.retried >= round_start:
                    t.refused_since = min(t.refused_since, time.monotonic())
            self._reconcile(seen, answered)
            reports += self._job_reports(seen, answered, resumable, interrupted)
            self._ended = {r.job: r for r in reports if r.state in (JobState.DONE, JobState.FAILED)}
            if self.journal is not None and time.monotonic() >= self._journal_at:
                self._journal_at = time.monotonic() + JOURNAL_PROGRESS_S
                self._journal_progress()
            return reports

    def stop_unless_ended(self, job: str) -> Report | None:
        """(A cancel.) The last poll's report that ``job`` ended (done or failed), if it made one; else :meth:`stop`
        it, in the same hold of the lock, so that no poll can see it end in between. The engine's loop acts on a poll's
        reports once it holds the engine's lock; a cancel that takes that lock first must not record a job whose
        tasks all finished cancelled (concurrency review). The next poll forgets them: by then the loop has acted
        on them."""
        with self._lock:
            report = self._ended.get(job)
            if report is None:
                self.stop(job)
            return report

    def _status_round(self) -> tuple[set[str], set[str], dict[str, agent_pb2.TaskStatus], set[str]]:
        """Ask every agent not being removed, and not silent with its next poll not due (:data:`SILENT_POLL_S`), for
        its Status (renewing its lease): (the hosts whose agent answered, those of them whose agent holds a lease that
        has not run out or none at all, this round's task statuses by task id, and the agents asked). Only this
        round's answers: an agent that did not answer may have been told to stop or move a task since its last Status,
        which would otherwise bring that task back as it was. An agent that does not answer is marked silent, and left
        to its heartbeats. Called under the lock."""
        answered: set[str] = set()
        resumable: set[str] = set()
        seen: dict[str, agent_pb2.TaskStatus] = {}
        # Every agent asked at once, then each answer taken in turn, so that a round waits for its slowest agent, not
        # for the sum of the slow ones: a round holds the engine's lock, and with it every start, end and decision on
        # the other agents (gray-failure review: with one agent of three 1 s away, a job's start on a healthy agent
        # took 1.1-1.9 s rather than 0.0-0.02 s; that one slow agent still costs a round its delay, up to the poll's
        # deadline).
        now = time.monotonic()
        busy = {t.host for tasks in self._tasks.values() for t in tasks} | {t.host for t in self._orphans}
        calls = [(handle, handle.stub.Status.future(
            agent_pb2.StatusRequest(lease_s=self.lease_s if self.lease_s > 0 else -1.0, lease_since=handle.clock),
            timeout=min(self.rpc_timeout, FAST_TIMEOUT_S))) for handle in list(self.agents.values())
            if not handle.lost and handle.next_poll <= now
            and (handle.silent or handle.idle_until <= now or not busy.isdisjoint(handle.hosts))]
        idle_s = min(IDLE_POLL_S, self.lease_s / 4) if self.lease_s > 0 else IDLE_POLL_S
        for handle, call in calls:  # (one being removed is not asked, nor its answer taken)
            try:
                reply = call.result()
            except grpc.RpcError:
                handle.unanswered(poll=True)
                handle.misses += 1
                # (the doubling capped: past 1,024 misses in a row, about 68 min at 4 s, 2 ** n overflowed a float)
                handle.next_poll = time.monotonic() + min(SILENT_POLL_MAX_S,
                                                          SILENT_POLL_S * 2.0 ** min(handle.misses - 1, 64))
                if handle.misses % RECONNECT_AFTER_MISSES == 0:
                    self._reconnect(handle)
                continue  # an unreachable agent is declared lost by the service's watch, not here
            if handle.lost:  # (removed while its answer came)
                continue
            if reply.agent_id and reply.agent_id != handle.agent_id:
                # Another agent now listens at this one's address (a restored agent's stored address, reused
                # by a pod on a replaced node, say): this one did not answer, and is to be declared lost, not
                # given tasks its successor at the address refuses as NOT_FOUND.
                if not handle.silent:
                    log.warning("agent %s: %s now answers as agent %s; %s is silent", handle.agent_id,
                                handle.address, reply.agent_id, handle.agent_id)
                handle.unanswered(poll=True)
                continue
            handle.last_status = reply
            handle.last_seen, handle.silent, handle.heard = time.monotonic(), False, True
            self.answered_at = handle.last_seen
            handle.misses, handle.next_poll, handle.polls_unanswered = 0, 0.0, 0
            # (one that runs nothing is asked again after idle_s, unless a task is started on it meanwhile: above)
            handle.idle_until = 0.0 if reply.tasks or not busy.isdisjoint(handle.hosts) else handle.last_seen + idle_s
            handle.clock = reply.clock
            answered.update(handle.hosts)
            if reply.lease_left != 0:
                resumable.update(handle.hosts)
            for ts in reply.tasks:
                seen[ts.task_id] = ts
        return answered, resumable, seen, {handle.agent_id for handle, _ in calls}

    def _job_reports(self, seen: dict[str, agent_pb2.TaskStatus], answered: set[str], resumable: set[str],
                     interrupted: dict[str, None]) -> list[Report]:
        """Take this round's statuses (:meth:`_status_round`) into each job's tasks, and report the jobs to
        requeue (a task vanished from an agent that answered: it restarted; or a fenced task could not be
        thawed), those done (their tasks are stopped and the job forgotten) and those failed. A job in
        ``interrupted`` is reported already. Called under the lock."""
        reports: list[Report] = []
        for job, tasks in list(self._tasks.items()):
            if job in interrupted:  # requeued: no second report
                continue
            requeue = ""
            for t in tasks:
                ts = seen.get(t.task_id)
                # A saved task's progress is its checkpoint, and a finished one is finished: no agent
                # speaks for them (a finished task moved by a repacking keeps its id on a new host).
                if ts is not None and ts.host == t.host and not t.saved and t.state != agent_pb2.TASK_STATE_DONE:
                    t.progress, t.state, t.message = ts.progress, ts.state, ts.message
                    if ts.fenced and t.host in resumable:
                        requeue = requeue or self._unfence(t)
                elif not t.saved and t.host in answered and t.state != agent_pb2.TASK_STATE_DONE:
                    # its agent answered without it: the agent restarted
                    requeue = requeue or f"task {t.task_id} vanished from {t.host}"
            if requeue:
                log.info("job %s requeued from its last progress: %s", job, requeue)
                reports.append(Report(job, JobState.PENDING, requeue))
                continue
            if all(t.state == agent_pb2.TASK_STATE_DONE for t in tasks):
                for t in tasks:
                    t.progress = 1.0
                self._stop_tasks(tasks, self._batched(job))
                del self._tasks[job]
                self._persist_quietly(job)
                reports.append(Report(job, JobState.DONE))
            elif any(t.saved for t in tasks):
                continue
            else:
                failed = [t for t in tasks if t.state == agent_pb2.TASK_STATE_FAILED]
                if failed:
                    reports.append(Report(job, JobState.FAILED, f"task {failed[0].task_id}: {failed[0].message}"))
        return reports

    def _journal_progress(self) -> None:
        """Write every job's tasks and their progress (its checkpoints) to the journal. A failure is said once
        until it works again (a full disk logged a 12-line traceback every second): they are written again
        :data:`JOURNAL_PROGRESS_S` later, and the poll's reports still go out. Called under the lock."""
        try:
            with self.journal_batch():
                for job in self._tasks:
                    self._persist(job)
                if self.clock_journal is not None and self._tasks:  # (idle: no write; its last transition is as late)
                    self.clock_journal(self.now())
        except Exception as exc:
            if not self._journal_failing:
                log.warning("journal of the tasks' progress failed (%s: %s); tried again every %g s",
                            type(exc).__name__, exc, JOURNAL_PROGRESS_S)
            self._journal_failing = True
        else:
            # Only a journal that wrote something says the state file takes writes again: with no task there,
            # nothing was written, and "written again" was logged a second after the last job ended on a disk
            # still full or read-only (storage-fault review).
            if self._tasks:
                if self._journal_failing:
                    log.warning("journal of the tasks' progress written again")
                self._journal_failing = False

    def _unfence(self, t: _Task) -> str:
        """Thaw a task of ours that its agent froze when its lease ran out (it heard nothing from us for a while:
        :meth:`node_agent.agent.AgentCore.renew_lease`). The agent freezes only tasks that run, and a Pause makes a
        fenced task an ordinary paused one, so a task reported fenced is one its job runs. Called only once the
        agent says its lease holds again, or that it holds none (a coordinator that grants none tells it to drop
        the one it had): until then it would freeze the task again at once. Every renewal counts from a moment
        before a sign of the agent's life that we recorded (a poll's, from the agent's clock when it made the
        previous reply we received; a heartbeat's, from its sending), so a lease that holds means we heard from
        the agent less than a lease ago, too recently for it to be declared lost meanwhile. A Resume that goes
        unanswered is tried again at the next poll; one the agent refuses returns why the job must be requeued from
        its checkpoint (else "")."""
        try:
            reply = self._call(t.host, "Resume", agent_pb2.TaskRef(task_id=t.task_id))
        except BackendError as exc:
            if not exc.unreachable:
                return f"task {t.task_id} was fenced by its agent, which refused to resume it: {exc}"
            log.warning("task %s on %s was fenced by its agent, and resuming it failed: %s; will retry", t.task_id,
                        t.host, exc)
            return ""
        t.state, t.message = reply.task.state, reply.task.message
        log.info("task %s on %s resumed: its agent had fenced it (its lease ran out)", t.task_id, t.host)
        for listener in self.unfence_listeners:
            listener(t.task_id)
        return ""

    def _persist_quietly(self, job: str) -> None:
        """:meth:`_persist` where a failure must not cost the poll its reports (a finished job's last write:
        its restart count is journalled already); logged."""
        try:
            self._persist(job)
        except Exception:
            log.warning("journal of job %s failed", job, exc_info=True)

    def _owned(self) -> set[str]:
        """Ids of the tasks that are ours on an agent: our jobs' (a saved task has no process) and orphans."""
        return {t.task_id for tasks in self._tasks.values() for t in tasks if not t.saved} | {
            t.task_id for t in self._orphans}

    def _reconcile(self, seen: dict[str, agent_pb2.TaskStatus], answered: set[str]) -> None:
        """Stop every task an agent runs that no job here owns (fencing stale work)."""
        owned = self._owned()
        for task_id, ts in seen.items():
            if task_id not in owned and ts.host in answered and ts.host in self.host_agent:
                log.warning("stopping task %s on %s: no job owns it", task_id, ts.host)
                self._stop_task(_Task(task_id, ts.host))

    def advance(self, until: float) -> list[Report]:
        """Wait for a completion, ``until``, or a wake-up. Agents are polled at most every ``poll_interval``:
        a burst of submissions wakes the loop for each one, and must not cost a Status round per job."""
        while True:
            if time.monotonic() - self._polled >= self.poll_interval:
                self._polled = time.monotonic()
                reports = self.poll()
                if reports:
                    return reports
            remaining = (until - self.now()) / self.compression
            if remaining <= 0:
                return []
            next_poll = self._polled + self.poll_interval - time.monotonic()
            if self._wake.wait(max(0.0, min(next_poll, remaining))):
                self._wake.clear()
                return []

    def host_status(self, answering: bool = False) -> dict[str, agent_pb2.HostStatus]:
        """The latest status of every host, as its agent reported it; with ``answering``, only of agents whose
        last poll was answered (the metrics: a stopped agent's last figures, exported on, read as current until it
        was declared lost). Not an age: a poll that is late because the engine loop is busy says nothing against
        the agent.

        Without the backend's lock, which the engine loop holds across a whole poll and a plan's moves, agent RPCs
        included (ClusterStatus and the scrape waited 2 s behind a 2 s poll; diff review): a poll replaces an
        agent's ``last_status`` whole and never changes it, and ``list()`` copies the agents in one step (no Python
        code runs in it, so no other thread can change the mapping in between)."""
        out: dict[str, agent_pb2.HostStatus] = {}
        for handle in list(self.agents.values()):
            status = handle.last_status
            if (answering and (handle.silent or handle.lost)) or status is None:
                continue
            for hs in status.hosts:
                out[hs.name] = hs
        return out

    def progress_seen(self, job: str | None = None) -> dict[str, float]:
        """:meth:`progresses` (of ``job`` alone, if given) without the backend's lock, for the read-only calls (see
        :meth:`host_status`): each task's progress as last reported, a job's the least of its tasks'. A job whose
        tasks are being started or moved shows those it has; the engine's own reads take the lock."""
        tasks_of = [(job, self._tasks.get(job))] if job is not None else list(self._tasks.items())
        return {j: min(t.progress for t in tasks) for j, tasks in tasks_of if tasks}


def _cancellable(fn: Callable, request: object, timeout: float, handle: AgentHandle):  # type: ignore[type-arg,no-untyped-def]
    """``fn(request, timeout=timeout)`` as a call that :meth:`LiveBackend.cut_off` can cancel."""
    call = fn.future(request, timeout=timeout)
    handle.calls.add(call)  # before the check: cut_off sets ``lost`` before it cancels the calls it finds
    try:
        if handle.lost:
            call.cancel()
        return call.result()
    except grpc.FutureCancelledError:
        raise BackendError(f"agent {handle.agent_id} lost", unreachable=True) from None
    finally:
        handle.calls.discard(call)


def _never_sent(exc: grpc.RpcError) -> bool:
    """Whether a failed call never left this side: gRPC found no connection to make it on (nothing listens at
    the address, or the name does not resolve). Such a call cannot have reached the agent; an UNAVAILABLE from a
    connection that broke, or a deadline, may have."""
    details = (exc.details() if hasattr(exc, "details") else "") or ""
    return exc.code() == grpc.StatusCode.UNAVAILABLE and (
        details.startswith("failed to connect to all addresses") or details.startswith("errors resolving"))


def _batches(handle: AgentHandle | None, method: str, n: int) -> bool:
    """Do ``n`` requests to ``handle``'s agent go in a batch call ``method`` (SetShares, StartTasks, StopTasks)? Not
    one alone, nor to an agent gone, being declared lost, or without that call (:attr:`AgentHandle.unbatched`)."""
    return handle is not None and not handle.lost and method not in handle.unbatched and n > 1


def _by_host(tasks: list[_Task]) -> dict[str, list[_Task]]:
    """``tasks`` by host, each host's in their order."""
    grouped: dict[str, list[_Task]] = {}
    for t in tasks:
        grouped.setdefault(t.host, []).append(t)
    return grouped


def _chunks(requests: list[M]) -> Iterator[list[M]]:
    """``requests`` in order, in lists of at most :data:`BATCH_BYTES` serialized (each at least one)."""
    chunk: list[M] = []
    size = 0
    for r in requests:
        n = r.ByteSize() + 4  # (the repeated field's tag and length)
        if chunk and size + n > BATCH_BYTES:
            yield chunk
            chunk, size = [], 0
        chunk.append(r)
        size += n
    if chunk:
        yield chunk


def _job_of(task_id: str) -> str:
    """The job of an agent task id ``<job>/<index>[.<restart>]``."""
    return task_id.rpartition("/")[0]


def _rpc_text(exc: grpc.RpcError) -> str:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return f"{code.name if code else 'error'}: {details}"
