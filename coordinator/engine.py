"""The engine: the job state machine, the event loop, and the one place plans meet a backend.

It is the same code in simulation and live (DESIGN.md): only the backend's clock differs. For each
stimulus the engine builds an immutable Snapshot, asks the policy for a Plan, checks that the plan keeps
every host within its CPU and memory capacity, applies it to the backend in a safe order (releases
before acquisitions, so a live agent never sees a host over-subscribed) and records every transition.

Threading: the engine loop (``step``/``run``) is one thread, but not the only one to reach the backend. In a
live run the gRPC service calls ``arrive``, ``cancel`` (which stops a job's tasks) and, for a registration,
``add_hosts`` and ``lose_hosts``; the agent watch calls ``lose_hosts``/``requeue`` (progress, and stops); all from
their own threads, each holding :attr:`Engine.lock` (an RLock) for the whole change. The locks, not the thread, keep
a decision and a cancel from interleaving. The read-only calls (GetJob, ListJobs, ClusterStatus) and the metrics do
not take it, as the loop holds it for a whole turn: they read the jobs from a ``coordinator.jobboard.JobBoard``,
which the engine updates at each change (``job_listeners``), and the agents' last reports without the live backend's
lock either (``LiveBackend.host_status``, ``LiveBackend.progress_seen``).
``LiveBackend.cut_off`` marks an agent lost with no lock at all (so that a loop blocked on that agent's call lets
go).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import numpy as np

from coordinator.backends.base import Backend, BackendError, Report
from coordinator.capacity_kernel import first_over
from coordinator.frozen import builder
from coordinator.metrics import History, Transition
from coordinator.model import (
    Complete,
    Host,
    InvalidJob,
    JobSpec,
    JobState,
    JobView,
    Snapshot,
    Stimulus,
    Submit,
    Tick,
)
from coordinator.plan import Action, Defer, Migrate, Move, Pause, Plan, Resume, SetShare, Start
from coordinator.policies.base import EPS, Policy

log = logging.getLogger("vcemu.engine")
#: One "stays pending" line per cause per this many wall seconds, later jobs held for it counted in the next: after
#: a restart on a state file of thousands of jobs, each job placed on a host of an agent not yet heard from logged
#: a line of its own, 4,337 in one restart (torture review).
PENDING_SAY_S = 30.0
#: Doublings, at most, of the wait before a job refused for want of an agent's resources is offered again (``_failed``).
RETRY_DOUBLINGS_MAX = 7
#: Such refusals in a row after which the job fails (about 50 s of waits at a live backend's 0.1 s poll interval): a
#: shortage that lasts must not keep a job pending for good on a host that looks free to the policy (review).
RETRY_BACKOFF_TRIES = 10
#: A host whose agent refused a start for want of its machine's resources is offered to the policy as full (no new task
#: fits there) for ``retry_after * 2**k`` model seconds, k from this many doublings (16 poll intervals, 1.6 s at 0.1 s)
#: up to :data:`RETRY_DOUBLINGS_MAX`, one more per refusal in a row (``Engine._short``).
SHORT_HOST_DOUBLINGS_MIN = 4
#: The wall clock of those lines (a name of its own, for tests to set)
_wall = time.monotonic


def _say_count(jobs: int, message: str) -> None:
    """The line for ``jobs`` held for ``message`` since its cause was last said (``Engine._say_pending``)."""
    log.warning("%d more jobs stay pending for the same cause: %s", jobs, message)


Listener = Callable[[Transition], None]


class PolicyError(RuntimeError):
    """A plan that breaks the model: over-committed host, wrong state, unknown job or host."""


class Stalled(RuntimeError):
    """Unfinished jobs remain but nothing runs and nothing is scheduled to happen."""


@dataclass
class JobRecord:
    """The engine's mutable view of one job; ``view()`` freezes it for a policy."""

    spec: JobSpec
    state: JobState = JobState.PENDING
    hosts: tuple[str, ...] = ()
    cpu: float = 0.0
    vt: float = 0.0
    attempts: int = 0
    first_start: float | None = None
    end: float | None = None
    message: str = ""

    def __setattr__(self, name: str, value: object) -> None:
        # Any change drops the frozen view: a snapshot then rebuilds only the views of jobs that changed,
        # not one per job in the system (10,000 queued jobs made every decision pay for all of them). A record an
        # engine holds says so in the engine's set of changed jobs (``Engine._stale``), which the snapshot visits
        # instead of every live job.
        object.__setattr__(self, name, value)
        d = self.__dict__
        d["_view"] = None
        stale = d.get("_stale")
        if stale is not None:
            stale[d["spec"].id] = None

    def view(self) -> JobView:
        v: JobView | None = self.__dict__.get("_view")
        if v is None:
            v = _job_view(self.spec, self.state, self.hosts, self.cpu, self.vt, self.attempts, self.first_start)
            object.__setattr__(self, "_view", v)
        return v


#: ``Transition(time, job, src, dst, hosts, cpu, reason)`` and ``JobView(spec, state, hosts, cpu, vt, attempts,
#: first_start)`` without the frozen __init__ (coordinator.frozen): a 1,000-job simulation builds 34,000
#: transitions and 120,000 job views.
_transition = builder(Transition)
_job_view = builder(JobView)


# Application order: releases first (pause, smaller shares), then moves, then acquisitions.
_RANK: dict[type, int] = {Pause: 0, Migrate: 2, Move: 2, Start: 3, Resume: 3, Defer: 5}


def _order(action: Action, jobs: dict[str, JobRecord]) -> int:
    if type(action) is SetShare:  # a smaller share is a release, a larger one an acquisition
        rec = jobs.get(action.job)  # an unknown job is refused by _check, not here
        return 1 if rec is None or action.cpu <= rec.cpu else 4
    return _RANK.get(type(action), 5)  # exact types, as _check's tables are keyed


# What a plan's action needs of its job's state, and the state it leaves the job in (Engine._check).
_NEED: dict[type, tuple[JobState, ...]] = {
    Start: (JobState.PENDING,),
    Resume: (JobState.PAUSED,),
    Pause: (JobState.RUNNING,),
    SetShare: (JobState.RUNNING,),
    Migrate: (JobState.RUNNING,),
    Move: (JobState.RUNNING,),
    Defer: (JobState.PENDING,),
}
_FINISHED = frozenset(s for s in JobState if s.finished)
_AFTER: dict[type, JobState] = {
    Start: JobState.RUNNING, Resume: JobState.RUNNING, Pause: JobState.PAUSED,
    SetShare: JobState.RUNNING, Migrate: JobState.RUNNING, Move: JobState.RUNNING, Defer: JobState.PENDING,
}


@dataclass(frozen=True)
class _HostTable:
    """What the capacity check derives from the host list: the hosts by name (the last of a repeated
    name), their positions in that mapping's order, and their capacities in that order."""

    hosts: tuple[Host, ...]
    by_name: dict[str, Host]
    index: dict[str, int]
    cpu: np.ndarray
    mem: np.ndarray

    @classmethod
    def of(cls, hosts: tuple[Host, ...]) -> _HostTable:
        by_name = {h.name: h for h in hosts}
        return cls(
            hosts,
            by_name,
            {name: i for i, name in enumerate(by_name)},
            np.array([h.cpu for h in by_name.values()], dtype=float),
            np.array([h.mem for h in by_name.values()], dtype=float),
        )


@dataclass(order=True)
class _Timer:
    time: float
    seq: int
    kind: str = field(compare=False)  # "arrive" | "stim"
    payload: JobSpec | Stimulus = field(compare=False)


class Engine:
    def __init__(
        self,
        policy: Policy,
        backend: Backend,
        hosts: Sequence[Host] = (),
        history: History | None = None,
        keep_history: bool = True,
    ) -> None:
        """``keep_history``: keep every transition and decision time in :attr:`history` (a run's results are made
        from them). A coordinator serving for days does not read them (its store keeps the transitions, its
        listeners and metrics see each as it happens): without them its memory grows by the jobs alone."""
        self.policy = policy
        self.backend = backend
        self.hosts: list[Host] = list(hosts)
        self.history = history if history is not None else History()
        self.keep_history = keep_history
        self.jobs: dict[str, JobRecord] = {}
        # The unfinished jobs, kept as they change: a snapshot, the capacity check and the progress sync
        # then cost O(jobs in the system), not O(jobs ever submitted) per event.
        self._live: dict[str, JobRecord] = {}
        #: Each live job's view, in ``_live`` order (inserted with the job, replaced as it changes, removed when it
        #: ends): a snapshot copies it (:meth:`_snapshot`). Rebuilt from every live job at each decision, it was
        #: O(backlog) Python work per decision: under GREEDY, whose backoff offers each waiting job again ~40 times,
        #: 2,000 jobs arriving at once took over a minute to simulate.
        self._views: dict[str, JobView] = {}
        #: Live jobs whose record changed since the last snapshot (``JobRecord.__setattr__``, and the writes through
        #: a record's ``__dict__``, which add them themselves).
        self._stale: dict[str, None] = {}  # (a dict, not a set: visited in the order the jobs changed, the same in
        # every run; a set's order of strings follows PYTHONHASHSEED, and ``_moving``'s, so ``_check``'s sums, with it)
        #: The live jobs whose progress a snapshot reads: running ones, and paused ones unless the backend's paused
        #: jobs cannot progress (``_paused_fixed``); kept from ``_stale`` at each snapshot.
        self._moving: dict[str, JobRecord] = {}
        #: The hosts of each job paused by the plan being applied (:meth:`_apply_checked`): its resume elsewhere in the
        #: same plan is a move (a ``"move"`` transition), one in a later decision a resume after a preemption.
        self._paused_in_plan: dict[str, tuple[str, ...]] = {}
        self.listeners: list[Listener] = []
        self.decision_listeners: list[Callable[[float], None]] = []
        #: Called with a job's record, under :attr:`lock`, whenever it changes in a way a reader of the job shows:
        #: each of its transitions (after the transition listeners have run), a pending job's note
        #: (:meth:`_judge_pending`), a restore, a move of its tasks. What ``coordinator.jobboard.JobBoard`` copies,
        #: so that the service's read-only calls never wait for the loop's turn. Empty in a simulation.
        self.job_listeners: list[Callable[[JobRecord], None]] = []
        #: Called, under :attr:`lock`, once a plan with actions has been carried out (or cut short by an error).
        self.plan_listeners: list[Callable[[], None]] = []
        self.lock = threading.RLock()
        self._timers: list[_Timer] = []
        self._seq = itertools.count()
        #: When a periodic policy's next repacking is due (backend time), None while none is: what ``vcemu status``
        #: says, so that a job pending between repackings is not read as stuck. Written under :attr:`lock` (the loop,
        #: or a requeue from a gRPC thread); read without it (one attribute: the last value written, or the one
        #: before). After the last job ends, the repacking already due still shows until it comes.
        self.next_tick: float | None = None
        #: The time the first periodic repacking was armed from: the others keep to its grid (``_ensure_tick``).
        self._tick_origin: float | None = None
        #: While a plan is applied, the time every transition it causes is stamped with: one decision is one
        #: instant, also on a live backend whose clock moves between actions (so a pause and a resume
        #: elsewhere in one plan read as the migration they are, see ``metrics.job_results``).
        self._stamp: float | None = None
        self._host_table: _HostTable | None = None  # the capacity check's, for the current host list
        #: the backend's paused jobs make no progress (``Backend.paused_progress_fixed``, the simulator)
        self._paused_fixed = bool(getattr(backend, "paused_progress_fixed", False))
        #: jobs whose Start the backend refused as unreachable: the message last logged, and when the Submit
        #: that offers the job again is due (``_failed``)
        self._retrying: dict[str, tuple[str, float, int]] = {}  # (and how many in a row asked for a backoff)
        #: per cause of those refusals: when a job was last logged for it, and how many have not been since
        self._pending_said: dict[str, tuple[float, int]] = {}
        #: Hosts whose agent refused a start for want of its machine's resources, or left a call unanswered
        #: (``BackendError.short``): until when the policy sees each as full (:meth:`_visible_hosts`), its refusals
        #: since a start last got through there, and what marked it last (the job and the failure, for ``vcemu
        #: status``: :meth:`closed`). Without it the job went back to the refusing host, which still looked free, at
        #: every retry, until it failed, while another host stood idle (exhaustion review).
        self._short: dict[str, tuple[float, int, str]] = {}

    # ---- inputs -----------------------------------------------------------------------------------

    def add_hosts(self, hosts: Iterable[Host]) -> None:
        """Add hosts (an agent registered, or came back). If any is new and a job is unfinished, a decision is
        queued now: a policy with no period decides only at a submission, a completion or a job's own timer,
        and would otherwise leave new capacity idle until one of those (a pending job under FCFS waits for a
        running one to end). A ``Tick()``, the stimulus every policy takes as "decide on the state as it is":
        FCFS and EASY start what now fits, GREEDY-PMTN(-MIGR) resume paused jobs where there is room, GREEDY
        starts the pending jobs that now fit (the others keep their backoff), DYNMCB8 without a period repacks.
        Not a Tick for a policy with a period: its periodic Ticks are its schedule, and it sees the hosts at the
        next one. A policy that admits jobs between periods (``admits_on_submit``: DYNMCB8-ASAP-PER) is offered
        each pending job again instead (a ``Submit``), as if it arrived now, and starts at once the ones that fit:
        the jobs requeued while no host was left (every agent lost) waited for the next period, up to 600 s, on
        idle hosts (fault-injection review)."""
        with self.lock:
            known = {h.name for h in self.hosts}
            added = [h for h in hosts if h.name not in known]
            # An agent that registers again starts afresh: its hosts, kept from new tasks after it refused or left
            # unanswered a start (:meth:`_mark_short`), are offered again at once (it answers now).
            afresh = [h.name for h in hosts if self._short.pop(h.name, None) is not None]
            # A new list, never the old one extended: readers that do not take the lock (ClusterStatus, the
            # metrics) read ``self.hosts`` once, and the list they get is never changed under them.
            self.hosts = [*self.hosts, *added]
            if added or afresh:
                self._offer_hosts_at(self.backend.now())
            if added:  # more hosts hold more: only the jobs noted as waiting can change (all, if there were none)
                self._judge_pending(say=False, recs=None if not known else [
                    r for r in self._live.values() if r.state is JobState.PENDING and r.message.startswith(self.WAITS)])
        if added or afresh:
            self.backend.wake()

    #: The start of a pending job's message while the hosts registered cannot hold it (:meth:`_judge_pending`).
    WAITS = "waits for hosts that can hold it: "

    def waiting_for_hosts(self) -> list[tuple[str, str]]:
        """(job, why) of each pending job the hosts registered cannot hold (:meth:`_judge_pending`)."""
        with self.lock:
            return [(job, rec.message.removeprefix(self.WAITS)) for job, rec in self._live.items()
                    if rec.state is JobState.PENDING and rec.message.startswith(self.WAITS)]

    def judge_pending(self) -> None:
        """:meth:`_judge_pending` of every pending job, said: for the coordinator, once an agent's resized hosts
        are back (a host may now hold less)."""
        with self.lock:
            self._judge_pending()

    def _judge_pending(self, say: bool = True, recs: Iterable[JobRecord] | None = None) -> None:
        """Say, in its message and once in the log, of each pending job that the hosts now registered could never
        run (too wide, too much memory: what a submission would be refused for), and clear that when they can.
        Such a job was accepted on other hosts (a restart on the state file with fewer or smaller hosts, an agent
        lost): it is kept, as more hosts may register, but it no longer waits in silence (live review: a restored
        job that no longer fit stayed pending for the whole session with no word, while submitting it again was
        refused). Live runs only: the simulator's hosts never change. ``say``: log the change (not while agents
        register one after another, when a job may wait only for the next one: ``vcemu up`` says what still waits
        once all have, :meth:`waiting_for_hosts`). ``recs``: only these jobs (default: every pending one). Jobs of
        one shape (tasks, need, memory) are judged once per call: a restart may hold thousands of pending jobs."""
        hosts = tuple(self.hosts)
        if not hosts:
            return  # (every agent lost: nothing can be judged, and everything waits)
        refuse = getattr(self.policy, "refuse", None)
        seen: dict[tuple[int, float, float], str | None] = {}
        for rec in self._live.values() if recs is None else recs:
            if rec.state is not JobState.PENDING:
                continue
            job, spec = rec.spec.id, rec.spec
            shape = (spec.tasks, spec.cpu_need, spec.mem)  # (the rest of a spec was validated at its submission)
            if shape not in seen:
                why = None
                try:
                    spec.validate(hosts)
                except InvalidJob as exc:
                    why = str(exc)
                if why is None and refuse is not None and (r := refuse(spec, hosts)) is not None:
                    why = f"{r[0]}: {r[1]}"
                seen[shape] = why
            why = seen[shape]
            if why is not None:
                note = self.WAITS + why
                if rec.message != note:
                    rec.message = note
                    self._changed(rec)
                    if say:
                        log.warning("%s %s", job, note)
            elif rec.message.startswith(self.WAITS):
                rec.message = ""
                self._changed(rec)

    def schedule_arrivals(self, specs: Iterable[JobSpec]) -> None:
        """Jobs that arrive at their ``submit_time`` (a trace replay)."""
        with self.lock:
            for spec in specs:
                self._push(spec.submit_time, "arrive", spec)

    def arrive(self, spec: JobSpec) -> None:
        """Accept a job now (its submit_time is taken as given). Validates; raises InvalidJob."""
        with self.lock:
            spec.validate(tuple(self.hosts))
            refuse = getattr(self.policy, "refuse", None)
            why = refuse(spec, tuple(self.hosts)) if refuse is not None else None
            if why is not None:
                raise InvalidJob(*why)
            if spec.id in self.jobs:
                raise ValueError(f"job id {spec.id!r} already exists")
            rec = JobRecord(spec)
            self.jobs[spec.id] = rec
            self._take(rec)
            self.history.specs[spec.id] = spec
            self._record(spec.id, None, JobState.PENDING, reason="submitted")
            self._push(self.backend.now(), "stim", Submit(spec.id))
            self._ensure_tick()
        self.backend.wake()

    def cancel(self, job: str) -> JobRecord:
        """Cancel ``job``, unless it has finished: then its record as it is. A job the backend saw end in a poll
        whose reports the loop has not taken yet ends as reported (the backend's ``stop_unless_ended``), not
        cancelled."""
        with self.lock:
            rec = self.jobs[job]
            if rec.state.finished:
                return rec
            if rec.state in (JobState.RUNNING, JobState.PAUSED):  # (a pending job has no task to have ended)
                self._keep_progress(rec)
                # The look at the last poll's reports and the stop in one hold of the backend's lock: a poll between
                # the two (it needs no engine lock) saw the tasks done, forgot them and reported the job, and the
                # cancel then recorded the finished job cancelled (review).
                settle = getattr(self.backend, "stop_unless_ended", None)
                report = None
                with contextlib.suppress(BackendError):  # an unreachable agent's tasks are fenced later
                    if settle is not None:
                        report = settle(job)
                    else:
                        self.backend.stop(job)
                if report is not None:
                    if self._on_report(report):
                        self._push(self.backend.now(), "stim", Complete(job))
                    self.backend.wake()
                    return rec
            self._finish(rec, JobState.CANCELLED, "cancelled")
            self._push(self.backend.now(), "stim", Complete(job))
        self.backend.wake()
        return rec

    # ---- recovery (issue 7): a restarted coordinator, a lost agent ---------------------------------

    def restore(self, records: Iterable[JobRecord], transitions: Iterable[Transition] = ()) -> None:
        """Take back the jobs of an earlier run of this coordinator (from its store). Pending jobs are
        offered to the policy again; placed ones are expected to have been adopted by the backend."""
        with self.lock:
            pending = []
            for rec in records:
                self.jobs[rec.spec.id] = rec
                self._changed(rec)
                self.history.specs[rec.spec.id] = rec.spec
                if not rec.state.finished:
                    self._take(rec)
                if rec.state is JobState.PENDING:
                    self._push(self.backend.now(), "stim", Submit(rec.spec.id))
                    pending.append(rec)
            if self.keep_history:
                self.history.transitions.extend(transitions)
            self._ensure_tick()
            # (the coordinator adds the restored agents' hosts before it restores the jobs: judged here too)
            self._judge_pending(say=False, recs=pending)
        self.backend.wake()

    def _take(self, rec: JobRecord) -> None:
        """Hold ``rec`` as a live job: its view goes in :attr:`_views` now (in arrival order), and its changes from
        now on are noted in :attr:`_stale`."""
        job = rec.spec.id
        self._live[job] = rec
        rec.__dict__["_stale"] = self._stale
        self._views[job] = rec.view()
        self._stale[job] = None  # (placed: its progress is read from the next snapshot on)

    def requeue(self, job: str, reason: str) -> None:
        """Put a placed job back to pending, keeping the work it has done (its last checkpoint): it
        restarts from there when the policy places it again. For tasks lost with their host."""
        with self.lock:
            rec = self.jobs.get(job)
            if rec is None or rec.state not in (JobState.RUNNING, JobState.PAUSED):
                return
            self._keep_progress(rec)
            with contextlib.suppress(BackendError):
                self.backend.stop(job)
            # The record is the job's state after the transition (a listener persists it); the transition
            # says where the job was.
            src, hosts = rec.state, rec.hosts
            rec.state, rec.cpu, rec.hosts = JobState.PENDING, 0.0, ()
            # Offered again before the transition is recorded: a listener that fails (the store) must not
            # leave the job pending with nothing to offer it.
            self._push(self.backend.now(), "stim", Submit(job))
            self._ensure_tick()
            self._record(job, src, JobState.PENDING, hosts, 0.0, reason)
        self.backend.wake()

    def lose_hosts(self, names: Iterable[str], reason: str, judge: bool = True) -> list[str]:
        """Remove hosts (their agent is gone) and requeue every job with a task on one; returns those jobs.
        ``judge``: say which pending jobs the hosts left can never hold (:meth:`_judge_pending`); not for hosts
        that are added back at once (an agent re-registering with resized hosts), which the caller judges after.

        Every such job is requeued even if recording one fails (a listener's store write on a full disk): that
        failure is logged, and the others go on, so that no job is left placed on a host that is gone. The
        job's state in memory is what the engine acts on; a store records it again at the job's next
        transition."""
        with self.lock:
            gone = set(names)
            self.hosts = [h for h in self.hosts if h.name not in gone]
            for name in gone.intersection(self._short):  # (an agent that comes back starts afresh)
                del self._short[name]
            hit = [j for j, r in self.jobs.items()
                   if r.state in (JobState.RUNNING, JobState.PAUSED) and gone.intersection(r.hosts)]
            for job in hit:
                try:
                    self.requeue(job, reason)  # its state changes, and its Submit is due, before it is recorded
                except Exception:
                    log.exception("%s requeued (%s), but recording that failed", job, reason)
            if judge:
                self._judge_pending()
            return hit

    # ---- the loop ---------------------------------------------------------------------------------

    def next_timer(self) -> float:
        with self.lock:
            return self._timers[0].time if self._timers else math.inf

    @property
    def unfinished(self) -> int:
        return len(self._live)

    def step(self, until: float = math.inf, budget_s: float | None = None) -> bool:
        """Advance the backend to the next completion or timer (or ``until``) and react. False if idle.

        ``budget_s``: stop taking the timers due once this much wall time has gone in them, and leave the rest to
        the next step (every report is still handled). For a live coordinator, whose API threads need the lock
        between two steps: a restart on 20,000 pending jobs (a Submit due for each, each decided on a snapshot of
        all) held it for 241 s, and agents could not register again meanwhile, their tasks frozen (exhaustion
        review). A simulation takes no budget: its steps are those of the paper's model."""
        horizon = min(until, self.next_timer())
        reports = self.backend.advance(horizon)
        with self.lock:
            if self._pending_said:
                self._say_held()
            # Every finished job leaves the state before the policy hears of any: two jobs may end at
            # the same instant, and a plan for the first must not act on the second.
            # Each report is handled whatever another's recording raises (a listener's store write): the backend
            # has forgotten the jobs it reports, so a report dropped here would leave its job running for good.
            # The first error is raised once every completion has been handled.
            completed: list[str] = []
            errors: list[Exception] = []
            for r in reports:
                try:
                    if self._on_report(r):
                        completed.append(r.job)
                except Exception as exc:
                    errors.append(exc)
                    rec = self.jobs.get(r.job)
                    if rec is not None and rec.state.finished:  # recorded in memory, only its listeners failed
                        completed.append(r.job)
            for job in completed:
                try:
                    self.handle(Complete(job))
                except Exception as exc:  # (its plan's journal write, say: the next completion is still told)
                    errors.append(exc)
            if errors:
                raise errors[0]
            now = self.backend.now()
            started = time.monotonic()  # (the timers' time only: at least one is taken, however long the poll was)
            while self._timers and self._timers[0].time <= now + 1e-9:
                if budget_s is not None and time.monotonic() - started > budget_s:
                    break
                timer = heapq.heappop(self._timers)
                if timer.kind == "arrive":
                    assert isinstance(timer.payload, JobSpec)
                    self.arrive(timer.payload)
                else:
                    assert not isinstance(timer.payload, JobSpec)
                    if self._merged(timer.payload, now):
                        continue
                    if isinstance(timer.payload, Tick) and timer.payload.job is None:
                        self.next_tick = None
                        self._ensure_tick(ticked=True)
                    self.handle(timer.payload)
            return bool(reports) or bool(self._timers) or self.unfinished > 0

    @property
    def _on_state(self) -> bool:
        return bool(getattr(self.policy, "decides_on_state", False))

    def _merged(self, stim: Stimulus, now: float) -> bool:
        """True if this Submit's decision can be left to the next one, due now too. Only for a policy that
        declares ``decides_on_state``: its plan depends on the snapshot alone, not on which job the Submit
        names, and deciding twice in a row changes nothing, so a burst of submissions (a trace's jobs with
        one submit time; the service's intake of many jobs in one loop turn) costs one decision, not one
        per job over an ever longer queue. Like Slurm's ``defer``/``batch_sched_delay`` for high-throughput
        submission, with no delay added."""
        if not isinstance(stim, Submit) or not self._on_state:
            return False
        nxt = self._timers[0] if self._timers else None
        return nxt is not None and nxt.time <= now + 1e-9 and isinstance(nxt.payload, Submit)

    def run(self, arrivals: Iterable[JobSpec] = (), until: float = math.inf) -> History:
        """Replay ``arrivals`` and run until every job is finished (or ``until``)."""
        self.schedule_arrivals(arrivals)
        while self.backend.now() < until:
            with self.lock:
                # (the scan for a running job only when no timer is due: a periodic policy always has one)
                if not self._timers and not any(r.state is JobState.RUNNING for r in self._live.values()):
                    if self._live:
                        stuck = sorted(self._live)
                        raise Stalled(f"{len(stuck)} jobs can never progress: {', '.join(stuck[:10])}")
                    break
            self.step(until)
        return self.history

    # ---- reacting ---------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        return self._snapshot()[0]

    def _snapshot(self) -> tuple[Snapshot, dict[str, JobRecord]]:
        """The snapshot, and the running jobs' records, in the order they last began to move (``_moving``): what
        :meth:`_check` starts from (:meth:`handle` passes them on, the state being the snapshot's until its plan is
        applied)."""
        with self.lock:
            # The views of the jobs that changed since the last snapshot, then the progress of the moving ones (a
            # job's view depends on its own record only); a copy of the kept views wrapped read-only, which
            # Snapshot does not copy again. A paused job's progress is read too, as a live agent may report it
            # late; not from a backend that declares it cannot move (the simulator: four of five placed jobs in the
            # 1,000-job DYNMCB8 run are paused, and their vt was read when they were paused, by _apply_one).
            progress = self.backend.progresses()
            running = JobState.RUNNING
            paused = None if self._paused_fixed else JobState.PAUSED
            views, moving, live = self._views, self._moving, self._live
            if self._stale:  # the jobs that changed since the last snapshot: their views, and whether they move
                for job in self._stale:
                    rec = live.get(job)
                    if rec is None:  # (ended)
                        views.pop(job, None)
                        moving.pop(job, None)
                        continue
                    views[job] = rec.view()
                    state = rec.state
                    if state is running or state is paused:
                        moving[job] = rec
                    else:
                        moving.pop(job, None)
                self._stale.clear()
            running_jobs: dict[str, JobRecord] = {}
            for job, rec in moving.items():
                d = rec.__dict__
                if d["state"] is running:
                    running_jobs[job] = rec
                vt = progress.get(job, 0.0) * rec.spec.work
                if vt != d["vt"]:  # an unchanged job (paused, or blocked by a penalty) keeps its view
                    d["vt"] = vt  # rec.vt = vt, which drops its view, without __setattr__'s calls
                    d["_view"] = None
                    views[job] = rec.view()
            now = self.backend.now()
            running_views = tuple([views[job] for job in running_jobs])
            hosts = tuple(self.hosts) if not self._short else self._visible_hosts(now, running_views)
            return Snapshot(now, hosts, MappingProxyType(dict(views)), running_views), running_jobs

    def _visible_hosts(self, now: float, running: Iterable[JobView]) -> tuple[Host, ...]:
        """The hosts as the policy is to see them: one whose agent refused a start for want of its machine's
        resources less than its wait ago (:meth:`_mark_short`) is left out if no task of ours runs there; otherwise,
        to a policy that never pauses or moves a running job (``keeps_placements``), shown with the memory its
        running tasks hold as its whole memory, so that no new task fits there while what runs there keeps its
        place, and to the others as it is. The engine's own checks use the hosts as they are."""
        short = {h for h, (until, *_) in self._short.items() if until > now}
        if not short:
            return tuple(self.hosts)
        held, shrink = self._held(short, running)
        # A policy that never places a task on a node where one runs (``exclusive_nodes``: FCFS, EASY) needs no
        # shrinking to keep new tasks off such a host, and EASY's reservation reads the memory of the nodes its
        # running jobs will release: shrunk, a node that holds the head was not counted and a backfill delayed it.
        if shrink and getattr(self.policy, "exclusive_nodes", False):
            shrink = False
        return tuple(h if h.name not in short else replace(h, mem=held[h.name]) if shrink else h
                     for h in self.hosts if h.name not in short or held[h.name] > 0)

    def _held(self, short: Iterable[str], running: Iterable[JobView | JobRecord]) -> tuple[dict[str, float], bool]:
        """The memory the ``running`` jobs hold on each of the ``short`` hosts, and whether the policy sees such a
        host where they hold some shrunk to it (kept from new tasks) rather than as it is (:meth:`_visible_hosts`)."""
        held = dict.fromkeys(short, 0.0)
        for v in running:  # (the running jobs only, not a pass over the backlog; a paused job's memory is free to the
            for h in v.hosts:  # policies and to _check: not held)
                if h in held:
                    held[h] += v.spec.mem
        # Shrunk only for a policy that never pauses or moves a running job: one that does (GREEDY-PMTN's victims,
        # DYNMCB8's repacking) would make room on the shrunk host by pausing or moving what runs there, and start
        # the new job on the very host that refused it. To those, a short host with tasks is shown as it is.
        return held, bool(getattr(self.policy, "keeps_placements", False))

    def closed(self, running: Iterable[JobView | JobRecord]) -> dict[str, tuple[float, str]]:
        """The hosts the policy is kept from now (:meth:`_mark_short`, :meth:`_visible_hosts`), given the
        ``running`` jobs: until when (the backend's clock) and why (the job whose call there was refused or not
        answered, and the failure). Read without the lock (``vcemu status``): a copy of the marks, made whole under
        the GIL."""
        now, short = self.backend.now(), dict(self._short)
        marked = {h: (until, why) for h, (until, _, why) in short.items() if until > now}
        if not marked:
            return {}
        held, shrink = self._held(marked, running)
        return {h: mark for h, mark in marked.items() if shrink or held[h] == 0}

    def _mark_short(self, hosts: Iterable[str], job: str, message: str) -> None:
        """Keep ``hosts`` from new tasks for a while (:meth:`_visible_hosts`): their agent refused ``job``'s start,
        resume or move for want of its machine's resources, or left an action of ``job`` unanswered (an agent that
        heartbeats but whose calls get no answer, a one-way partition, is never declared lost: the policy, seeing its
        hosts free, sent every new job there at every retry while other hosts stood idle; gray-failure review; any
        call: its start, share change, pause, resume or move). Other failures before
        the wait has passed: the same cause, neither said nor counted again. The wait doubles with each failure in a
        row there (from :data:`SHORT_HOST_DOUBLINGS_MIN` doublings of the backend's ``retry_after``); a start that
        gets through there, or the agent's new registration (:meth:`add_hosts`), ends the run. Once it has passed,
        the policy is asked again, as when hosts are added."""
        now = self.backend.now()
        step = getattr(self.backend, "retry_after", 0.0)
        latest, known, marked = now, {h.name for h in self.hosts}, []
        for name in hosts:
            was, tries, _ = self._short.get(name, (-math.inf, 0, ""))
            if name not in known or was > now:  # (a refusal from a plan made before the mark: one says it)
                continue
            until = now + step * 2 ** min(SHORT_HOST_DOUBLINGS_MIN + tries, RETRY_DOUBLINGS_MAX)
            self._short[name] = (until, tries + 1, f"{job}: {message}")
            latest = max(latest, until)
            marked.append(name)
        if marked:  # (one line per mark, however many hosts the agent emulates)
            shown = ", ".join(marked[:4]) + (f" and {len(marked) - 4} more" if len(marked) > 4 else "")
            log.warning("host%s %s offered to no new task for up to %.3g s: %s was refused or not answered there (%s)",
                        "s" if len(marked) > 1 else "", shown, latest - now, job, message)
        if latest > now:  # (a backend with no retry_after: no wait, and no Tick due at once again and again)
            self._offer_hosts_at(latest)

    def _offer_hosts_at(self, at: float) -> None:
        """Have the policy look at the hosts again at ``at`` (hosts added, or shown again): a ``Tick()`` for a
        policy with no period (it decides otherwise only at a submission, a completion or a job's own timer); each
        pending job offered again for one that admits jobs between its periods; nothing for a periodic one, which
        sees the hosts at its next period (:meth:`add_hosts`)."""
        if self._live and not self.policy.period:
            self._push(at, "stim", Tick())
        elif getattr(self.policy, "admits_on_submit", False):
            for job, rec in self._live.items():
                if rec.state is JobState.PENDING:
                    self._push(at, "stim", Submit(job))

    def handle(self, stim: Stimulus) -> Plan:
        with self.lock:
            if isinstance(stim, (Submit, Tick)) and stim.job is not None and not self._on_state:
                rec = self.jobs.get(stim.job)
                if rec is None or rec.state is not JobState.PENDING:
                    return Plan()  # a stale timer: the job was cancelled, or started, meanwhile
            snap, running_jobs = self._snapshot()
            t0 = time.perf_counter()
            plan = self.policy.decide(snap, stim)
            elapsed = time.perf_counter() - t0
            if self.keep_history:
                self.history.decision_seconds.append(elapsed)
            for listener in self.decision_listeners:
                listener(elapsed)
            self._apply(plan, running_jobs)
            return plan

    def apply(self, plan: Plan) -> None:
        """Check and carry out a plan; a backend failure fails that job only."""
        self._apply(plan)

    def _apply(self, plan: Plan, running_jobs: dict[str, JobRecord] | None = None) -> None:
        """:meth:`apply`, given the running jobs' records (_snapshot's) if the caller has them."""
        with self.lock:
            if not plan.actions:  # nothing changes: the state was checked when it was made
                return
            ordered = self._ordered(plan)  # the check follows the order the actions are applied in
            self._check(plan, ordered, running_jobs)
            self._stamp = self.backend.now()
            try:
                self._apply_checked(plan, ordered)
            except BaseException:
                # Not a BackendError (those fail or requeue one job): a listener's store write, say. A backend
                # that defers moves to its flush is told, so that it never starts them with a later plan. A job
                # the plan was to start and did not is offered again (after the backend's retry_after, as for
                # a Start refused as unreachable): nothing else might, under a policy with no period.
                abandon = getattr(self.backend, "abandon_moves", None)
                if abandon is not None:
                    abandon()
                due = self.backend.now() + getattr(self.backend, "retry_after", 0.0)
                for a in plan.actions:
                    if type(a) is Start and self.jobs[a.job].state is JobState.PENDING:
                        self._push(due, "stim", Submit(a.job))
                raise
            finally:
                self._stamp = None
                for done in self.plan_listeners:
                    done()

    def _ordered(self, plan: Plan) -> list[Action]:
        jobs = self.jobs
        return sorted(plan.actions, key=lambda a: _order(a, jobs))

    def _apply_checked(self, plan: Plan, ordered: list[Action] | None = None) -> None:
        moved: dict[str, JobRecord] = {}
        jobs = self.jobs
        self._paused_in_plan.clear()
        dropped: set[str] = set()  # jobs failed or requeued earlier in this plan: their other actions lapse
        # A backend that sends share changes in batches (live: one call per host) queues each SetShare; the run of
        # them is sent before the plan's next other action, and each recorded once sent (:meth:`_shares_sent`).
        send = getattr(self.backend, "send_shares", None)
        held: list[tuple[JobRecord, float]] = []
        for action in self._ordered(plan) if ordered is None else ordered:
            rec = jobs[action.job]
            if rec.state in _FINISHED or action.job in dropped:
                continue
            if send is not None:
                if type(action) is SetShare:
                    self.backend.set_share(action.job, action.cpu)
                    held.append((rec, action.cpu))
                    continue
                if held:
                    self._shares_sent(send(), held, dropped)
                    if action.job in dropped:  # its own share change, sent just now, failed: requeued or failed
                        continue
            if type(action) is Move:
                if self._move(rec, action.hosts, dropped):
                    moved[rec.spec.id] = rec
                continue
            try:
                self._apply_one(action, rec)
            except BackendError as exc:
                self._failed(rec, f"{type(action).__name__.lower()} failed: {exc}", exc, dropped)
                continue
            if isinstance(action, Migrate):
                moved[rec.spec.id] = rec
        if held:
            self._shares_sent(send(), held, dropped)  # type: ignore[misc]
        flush = getattr(self.backend, "flush", None)  # a live backend restarts moved tasks now
        for job, error in flush() if flush is not None else []:
            self._failed(self.jobs[job], f"migrate failed: {error}", error, dropped)
        for job, rec in moved.items():  # one migration per job and event, however many tasks moved
            if rec.state is JobState.RUNNING:  # not requeued or failed by a later move or flush
                self._record(job, JobState.RUNNING, JobState.RUNNING, rec.hosts, rec.cpu, "migrate")

    def _move(self, rec: JobRecord, new: tuple[str, ...], dropped: set[str]) -> bool:
        """Carry out a checked Move: the backend moves each task whose host changes, in task order, as it
        would for one Migrate per task (or all of them in one ``move`` call, if it has one). True if the job moved;
        on a backend failure the job is failed or requeued (see :meth:`_failed`) with the hosts its tasks had
        reached (and False)."""
        old = rec.hosts
        if old == new:
            return False
        job = rec.spec.id
        move = getattr(self.backend, "move", None)
        if move is not None:  # all of the job's moving tasks in one call (live: one call per host, not per task)
            try:
                move(job, [(i, dst) for i, (was, dst) in enumerate(zip(old, new, strict=True)) if was != dst])
            except BackendError as exc:
                rec.hosts = old if exc.hosts is None else exc.hosts
                self._failed(rec, f"move failed: {exc}", exc, dropped)
                return False
        else:
            migrate = self.backend.migrate
            for i, (was, dst) in enumerate(zip(old, new, strict=True)):
                if was != dst:
                    try:
                        migrate(job, i, dst)
                    except BackendError as exc:
                        rec.hosts = (*new[:i], *old[i:])
                        self._failed(rec, f"move failed: {exc}", exc, dropped)
                        return False
        rec.hosts = new
        self._changed(rec)  # (its "migrate" transition comes once the plan's moves are flushed: the board now)
        return True

    def _apply_one(self, action: Action, rec: JobRecord) -> None:
        # Dispatch on exact types (plans hold exact action types; _check refuses any other), commonest
        # first. The record is written through its __dict__ (each write dropping its frozen view, as
        # JobRecord.__setattr__ does): a 1,000-job simulation applies 30,000 actions.
        kind = type(action)
        d = rec.__dict__
        job = rec.spec.id
        running = JobState.RUNNING
        if kind is SetShare:
            self.backend.set_share(job, action.cpu)
            self._share_recorded(rec, action.cpu)
            return
        if kind is Pause:
            self.backend.pause(job)
            # Its work stops here: the vt it is paused with, which a snapshot of a backend whose paused jobs
            # cannot progress (Engine._snapshot) does not read again.
            d["vt"] = self.backend.progress(job) * rec.spec.work
            d["state"] = JobState.PAUSED
            d["cpu"] = 0.0
            d["_view"] = None
            self._stale[job] = None
            self._paused_in_plan[job] = rec.hosts
            self._record(job, running, JobState.PAUSED, rec.hosts, 0.0, "pause")
            return
        if kind is Resume:
            hosts, cpu = action.hosts, action.cpu
            self.backend.resume(job, hosts, cpu)
            d["state"] = running
            d["hosts"] = hosts
            d["cpu"] = cpu
            d["_view"] = None
            self._stale[job] = None
            # Paused by this plan and resumed on other hosts: a move (001 Sec. III-A, GREEDY-PMTN-MIGR: "this amounts
            # to a job migration"), told from a resume elsewhere by a later decision at the same instant, which follows
            # a preemption (simultaneous submissions: property review; :class:`coordinator.metrics.JobOutcomes`).
            was = self._paused_in_plan.pop(job, None)
            moved_here = was is not None and sorted(was) != sorted(hosts)
            self._record(job, JobState.PAUSED, running, hosts, cpu, "move" if moved_here else "resume")
            return
        if kind is Migrate:
            self.backend.migrate(job, action.task, action.dst)
            moved = list(rec.hosts)
            moved[action.task] = action.dst
            rec.hosts = tuple(moved)
            self._changed(rec)
            return
        now = self.backend.now() if self._stamp is None else self._stamp
        if kind is Start:
            progress = min(rec.vt / rec.spec.work, 1.0) if rec.vt > 0 else 0.0  # > 0: requeued after a loss
            self.backend.start(rec.spec, action.hosts, action.cpu, progress)
            rec.state, rec.hosts, rec.cpu = running, action.hosts, action.cpu
            rec.first_start = now if rec.first_start is None else rec.first_start
            if rec.message:  # (a pending job's note that it waits for hosts: it no longer does)
                rec.message = ""
            if self._retrying:  # it started: a later refusal is a new one, logged again
                self._retrying.pop(job, None)
            if self._short:  # it started there: the host's refusals in a row end
                for h in action.hosts:
                    self._short.pop(h, None)
            self._record(job, JobState.PENDING, running, rec.hosts, rec.cpu, "start")
        elif kind is Defer:
            rec.attempts += 1
            self._push(action.until, "stim", Tick(action.job))

    def _shares_sent(self, failures: list[tuple[str, BackendError]], held: list[tuple[JobRecord, float]],
                     dropped: set[str]) -> None:
        """The held SetShare actions were sent (``send_shares``): record each job's new share as :meth:`_apply_one`
        does, after its agent took it, or fail or requeue the job whose change failed, as a SetShare refused at once
        would (before the plan's next action: a refused cut's job is stopped before the start it made room for)."""
        failed = dict(failures)
        for rec, cpu in held:
            job = rec.spec.id
            exc = failed.get(job)
            if exc is not None:
                self._failed(rec, f"setshare failed: {exc}", exc, dropped)
            else:
                self._share_recorded(rec, cpu)
        held.clear()

    def _share_recorded(self, rec: JobRecord, cpu: float) -> None:
        """A running job's new share, taken by its backend: set and recorded (written through the record's
        ``__dict__``, dropping its frozen view as JobRecord.__setattr__ does: a simulation re-shares thousands)."""
        d = rec.__dict__
        d["cpu"] = cpu
        d["_view"] = None
        self._stale[rec.spec.id] = None
        self._record(rec.spec.id, JobState.RUNNING, JobState.RUNNING, rec.hosts, cpu, "share")

    def _check(self, plan: Plan, ordered: list[Action] | None = None,
               running_jobs: dict[str, JobRecord] | None = None) -> None:
        """Refuse a plan that is inconsistent with the state or over-commits a host. ``running_jobs``: the
        running jobs' records (``_snapshot``'s), if the caller has them."""
        table = self._host_table
        if table is None or table.hosts != tuple(self.hosts):  # compares the same Host objects: quick
            table = self._host_table = _HostTable.of(tuple(self.hosts))
        hosts = table.by_name
        running = JobState.RUNNING
        if running_jobs is None:
            running_jobs = {j: r for j, r in self._live.items() if r.state is running}
        placed = {j: (r.hosts, r.cpu, r.spec) for j, r in running_jobs.items()}
        need, after = _NEED, _AFTER
        state: dict[str, JobState] = {}  # states as the plan moves them, in the order it is applied
        moved: dict[str, list[str]] = {}
        jobs = self.jobs
        for a in self._ordered(plan) if ordered is None else ordered:
            job = a.job
            rec = jobs.get(job)
            current = state.get(job, rec.state if rec else None)
            kind = type(a)
            if rec is None or current not in need[kind]:
                shown = current.value if current else "unknown"
                raise PolicyError(f"{self.policy.name}: {a} on job in state {shown}")
            state[job] = after[kind]
            # (Migrate: one task of a job. No policy here emits it, DYNMCB8 emits Move; need[kind] admits only the
            # seven action types.)
            if kind is Migrate:
                h, c, s = placed[job]
                if a.dst not in hosts or not 0 <= a.task < len(h):
                    raise PolicyError(f"{self.policy.name}: {a} names an unknown task or host")
                if job not in moved:  # copy a job's hosts once, then move its tasks in place
                    h = moved[job] = list(h)
                    placed[job] = (h, c, s)
                h[a.task] = a.dst
            elif kind is Move:
                h, c, s = placed[job]
                if len(a.hosts) != len(h) or not hosts.keys() >= set(a.hosts):
                    raise PolicyError(f"{self.policy.name}: {a} needs {len(h)} known hosts")
                placed[job] = (a.hosts, c, s)
                moved.pop(job, None)  # a later Migrate of this job copies the moved hosts again
            elif isinstance(a, (Start, Resume)):
                if len(a.hosts) != rec.spec.tasks or not hosts.keys() >= set(a.hosts):
                    raise PolicyError(f"{self.policy.name}: {a} needs {rec.spec.tasks} known hosts")
                placed[job] = (a.hosts, a.cpu, rec.spec)
            elif isinstance(a, Pause):
                placed.pop(job, None)
            elif isinstance(a, SetShare):
                h, _, s = placed[job]
                placed[job] = (h, a.cpu, s)
        # Each host's CPU and memory: every placed task's share added in placement order, as a loop over
        # the tasks would add them (np.bincount sums its weights in the order given; so does first_over).
        # The tasks' host positions are looked up in one pass over them all (~300 in the 1,000-job run):
        # half of a plan's actions give a job new hosts (Move, Resume, Start), and one lookup call per
        # such job, with per-job arrays kept for the others, cost more than this pass.
        index = table.index
        names: list[str] = []  # every placed task's host, jobs in placement order
        cpus: list[float] = []  # per job; np.repeat gives each of its tasks the job's value
        mems: list[float] = []
        counts: list[int] = []
        for job, (hs, c, spec) in placed.items():
            if c <= 0 or c > spec.cpu_need + EPS:
                raise PolicyError(f"{self.policy.name}: job {job} given cpu {c} outside (0, need={spec.cpu_need}]")
            names += hs
            cpus.append(c)
            mems.append(spec.mem)
            counts.append(len(hs))
        n = len(index)
        at_a = np.fromiter(map(index.__getitem__, names), dtype=np.int64, count=len(names))
        if first_over is not None:
            i, cpu_i, mem_i = first_over(at_a, np.array(cpus, dtype=float), np.array(mems, dtype=float),
                                         np.array(counts, dtype=np.int64), table.cpu, table.mem)
        else:
            cpu = np.bincount(at_a, weights=np.repeat(np.asarray(cpus, dtype=float), counts), minlength=n)
            mem = np.bincount(at_a, weights=np.repeat(np.asarray(mems, dtype=float), counts), minlength=n)
            over = np.flatnonzero((cpu > table.cpu + 1e-6) | (mem > table.mem + 1e-6))
            i = int(over[0]) if over.size else -1
            cpu_i, mem_i = (float(cpu[i]), float(mem[i])) if over.size else (0.0, 0.0)
        if i >= 0:
            host = list(hosts.values())[i]
            raise PolicyError(
                f"{self.policy.name}: host {host.name} over capacity (cpu {cpu_i:.4f}/{host.cpu}, "
                f"memory {mem_i:.4f}/{host.mem})"
            )

    def _on_report(self, report: Report) -> bool:
        """Record a finished job; True if the policy is to be told (it completed or failed now)."""
        rec = self.jobs.get(report.job)
        if rec is None or rec.state.finished:
            return False
        if report.state is JobState.PENDING:  # the backend lost a task: back to the queue (issue 7)
            self.requeue(report.job, report.message or "task lost")
            return False
        if report.state is JobState.DONE:
            rec.vt = rec.spec.work
            self._finish(rec, JobState.DONE, "completed")
        else:
            self._fail(rec, report.message or "failed")
        return True

    def _failed(self, rec: JobRecord, message: str, exc: BackendError, dropped: set[str]) -> None:
        """An action of a plan could not be carried out. If its agent did not answer (issue 7: stopped,
        partitioned, being declared lost), that is no fault of the job's: it goes back to the queue with
        its progress, as when its host is lost, and is placed again at a later decision (by then the
        heartbeat watchdog has removed a dead agent's hosts). A refusal fails the job."""
        dropped.add(rec.spec.id)
        if getattr(exc, "short", ()):  # (a start, resume or move refused so, or unanswered)
            self._mark_short(exc.short, rec.spec.id, message)
        if not exc.unreachable:
            self._fail(rec, message)
        elif rec.state is JobState.PENDING:  # its Start failed: offered to the policy again
            # After the backend's ``retry_after`` (a live backend's poll interval): its cause (a silent agent,
            # a copy of the job whose Stop has not got through) changes no sooner, and a Submit due now would
            # have the service's loop decide and log again at every turn. Logged once per cause.
            # One retry is scheduled at a time (a requeued job has two Submits due: its arrival's and its
            # requeue's, and each refusal would otherwise start a chain of its own).
            # A refusal for want of the machine's resources (``exc.backoff``: an agent out of space, descriptors or
            # processes) may last: each one in a row doubles the wait, up to 2**RETRY_DOUBLINGS_MAX times the backend's
            # (it was a StartTask, a journal write and a log line every poll interval, for good: review).
            job, now = rec.spec.id, self.backend.now()
            logged, due, tries = self._retrying.get(job, ("", -math.inf, 0))
            if getattr(exc, "backoff", False) and tries >= RETRY_BACKOFF_TRIES:
                self._retrying.pop(job, None)
                self._fail(rec, f"{message} (refused so {tries + 1} times in a row: given up)")
                return
            if logged != message:
                self._say_pending(job, message)
            if due <= now:
                wait = getattr(self.backend, "retry_after", 0.0)
                if getattr(exc, "backoff", False):
                    wait *= 2 ** min(tries, RETRY_DOUBLINGS_MAX)
                    tries += 1
                else:  # ("in a row": a refusal of another kind, a silent agent say, starts the doubling again)
                    tries = 0
                due = now + wait
                self._push(due, "stim", Submit(job))
            self._retrying[job] = (message, due, tries)
            self._ensure_tick()
        else:
            self.requeue(rec.spec.id, f"{message}; requeued")

    def _say_pending(self, job: str, message: str) -> None:
        """Log that ``job`` stays pending for ``message``: the first job of a cause at once; the others within
        :data:`PENDING_SAY_S` of that line are counted, and said in one line once it has passed (:meth:`_say_held`,
        at a later step)."""
        now = _wall()
        last, quiet = self._pending_said.get(message, (-math.inf, 0))
        if now - last < PENDING_SAY_S:
            self._pending_said[message] = (last, quiet + 1)
            return
        if quiet:  # (counted, and no step has said them since)
            _say_count(quiet, message)
        log.warning("%s %s; it stays pending", job, message)
        if len(self._pending_said) >= 1000:  # (causes name hosts and agents: bounded, the oldest dropped)
            del self._pending_said[next(iter(self._pending_said))]
        self._pending_said[message] = (now, 0)

    def _say_held(self) -> None:
        """The counts :meth:`_say_pending` kept, each in one line once :data:`PENDING_SAY_S` has passed since its
        cause's last line; a cause with nothing to say is forgotten then."""
        now = _wall()
        for message, (last, quiet) in list(self._pending_said.items()):
            if now - last < PENDING_SAY_S:
                continue
            if quiet:
                _say_count(quiet, message)
                self._pending_said[message] = (now, 0)
            else:
                del self._pending_said[message]

    def _fail(self, rec: JobRecord, message: str) -> None:
        if rec.state in (JobState.RUNNING, JobState.PAUSED):
            self._keep_progress(rec)
            with contextlib.suppress(BackendError):
                self.backend.stop(rec.spec.id)
        self._finish(rec, JobState.FAILED, message)

    def _keep_progress(self, rec: JobRecord) -> None:
        """A placed job whose tasks are about to stop (requeued, failed, cancelled) keeps the virtual time it had
        reached, read first: its record's is that of its last decision (a job that ran 7 s under greedy, which decides
        only at submissions and completions, read 0). Never lowered (a paused job's was read when it was paused);
        a failed read leaves it as it was, since the stop must still be sent."""
        with contextlib.suppress(BackendError, KeyError):
            rec.vt = max(rec.vt, self.backend.progress(rec.spec.id) * rec.spec.work)

    def _finish(self, rec: JobRecord, state: JobState, reason: str) -> None:
        src, cpu = rec.state, rec.cpu
        rec.state, rec.end, rec.message, rec.cpu = state, self.backend.now(), reason, 0.0
        self._live.pop(rec.spec.id, None)
        self._retrying.pop(rec.spec.id, None)
        self._record(rec.spec.id, src, state, rec.hosts, cpu, reason)  # the transition keeps the share it ran with

    def _record(
        self,
        job: str,
        src: JobState | None,
        dst: JobState,
        hosts: tuple[str, ...] = (),
        cpu: float = 0.0,
        reason: str = "",
    ) -> None:
        t = _transition(self.backend.now() if self._stamp is None else self._stamp, job, src, dst, hosts, cpu, reason)
        if self.keep_history:
            self.history.transitions.append(t)
        try:
            for listener in self.listeners:
                listener(t)
        finally:
            # After the listeners (the store's commit among them), as the event stream's: a reader of the job board
            # never sees a change a crash could take back. In a finally: a listener's failure does not hide it.
            if self.job_listeners:
                self._changed(self.jobs[job])

    def _changed(self, rec: JobRecord) -> None:
        for listener in self.job_listeners:
            listener(rec)

    def _push(self, at: float, kind: str, payload: JobSpec | Stimulus) -> None:
        heapq.heappush(self._timers, _Timer(at, next(self._seq), kind, payload))

    def _ensure_tick(self, *, ticked: bool = False) -> None:
        """Arm a periodic policy's next repacking, if none is due and a job is unfinished. 001 Sec. III-B's
        DYNMCB8-PER "invokes [MCB8] periodically, every T seconds", whether or not jobs are there to pack: the
        repackings keep to one grid, ``origin + k T`` from the first one armed, and a job arriving while the cluster
        is idle waits for the grid's next point (at most T, as it would under a scheduler that never stopped), not a
        whole T from its arrival (fidelity review: at load 0.1 the mean wait was 345-365 s instead of 301-304 s).
        A point the clock is on counts when no tick was just handled (the arrival that re-arms is in that
        repacking, as it would be on a live grid); ``ticked``, after the tick at ``now``, takes the next one. The
        grid also keeps a live run's ticks from drifting by each tick's lateness."""
        period = self.policy.period
        if period and self.next_tick is None and self.unfinished:
            now = self.backend.now()
            if self._tick_origin is None:
                self._tick_origin = now
            origin = self._tick_origin
            eps = 1e-9 * max(1.0, abs(now))  # (relative: the floats' spacing near a week's 6e5 s is 1e-10, at 1e8 1e-8)
            k = max(1, math.ceil((now - origin - eps) / period))
            if ticked and origin + k * period <= now + eps:
                k += 1
            self.next_tick = origin + k * period
            self._push(self.next_tick, "stim", Tick())
