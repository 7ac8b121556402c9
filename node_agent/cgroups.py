"""Cgroup drivers: one interface, a cgroup v1 and a cgroup v2 implementation, chosen by probing.

Every task gets its own cgroup, named by the agent, under a per-agent parent ``vcemu-<agent_id>``. The
parent is created *inside the agent's own cgroup* of each hierarchy (read from /proc/self/cgroup), not
at the hierarchy root: whatever limits the agent was started under (a container, a slice, a sandbox)
then also bound its tasks, and nothing outside the agent's own subtree is touched. The parent is flat
(no shared ``vcemu`` level) so that its CPU weight can be set per agent (see :data:`WEIGHT_PER_CORE`)
and so that agents never race over a shared directory.

Each parent also holds an empty group named after the process that made it (:class:`Owner`: its pid, its
start time, and its pid namespace), since cgroupfs takes no other files. An agent killed with SIGKILL
leaves its subtree behind, frozen tasks and all; at start-up every agent removes the subtrees beside its
own whose owner is dead (:func:`agent_parents`, :func:`remove_groups`; the locking is the agent's, see
:func:`node_agent.agent.open_core`), and leaves those of live agents alone.

CPU shares are CFS bandwidth quotas (:func:`cfs_period_quota_us`); pause is the freezer; memory is a
hard limit. A v1 frozen task ignores SIGKILL until thawed, so everything that kills thaws as well.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import math
import os
import signal
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

DEFAULT_PERIOD_US = 100_000
MIN_QUOTA_US = 1_000  # the kernel refuses smaller quotas
MAX_PERIOD_US = 1_000_000  # the kernel refuses longer periods

#: v1 ``cpu.shares`` of a task's group per core of its share (an ordinary process weighs 1024).
#: Quotas cap the tasks at their shares; this weight makes the CFS scheduler also *give* them their
#: quota when the real machine is busy with other processes, i.e. an emulated host's CPU is reserved,
#: like a VM's. Without it, ten busy neighbours would leave a 0.9-core task with ~0.2 core. The agent's
#: parent group weighs about the sum of its task groups' weights (:class:`CpuWeights`).
WEIGHT_PER_CORE = 65536
#: One ordinary process's weight (v1 ``cpu.shares`` 1024, v2 ``cpu.weight`` 100) in cores of
#: :data:`WEIGHT_PER_CORE`: what all of an agent's booting tasks weigh together (:class:`CpuWeights`).
ORDINARY_CORES = 1024 / WEIGHT_PER_CORE

V1_CONTROLLERS = ("cpu", "cpuacct", "freezer", "memory")


class CgroupError(RuntimeError):
    """A cgroup operation failed; the message names the file."""


def cfs_period_quota_us(cores: float) -> tuple[int, int]:
    """CFS ``(period, quota)`` in microseconds for a limit of ``cores`` CPUs.

    The period is 100 ms, so a quota change shows within 100 ms; for tiny limits (< 0.01 core) the
    period grows, up to the kernel's 1 s maximum, so the quota stays >= 1 ms (the kernel minimum).
    Below 0.001 core the quota is clamped to 1 ms per 1 s: the smallest limit CFS can express.
    """
    if not cores > 0:
        raise ValueError(f"cpu limit must be > 0 cores, got {cores}")
    period = DEFAULT_PERIOD_US
    if cores * period < MIN_QUOTA_US:
        period = min(MAX_PERIOD_US, math.ceil(MIN_QUOTA_US / cores))
    return period, max(MIN_QUOTA_US, round(cores * period))


def cpu_weight_v1(cores: float) -> int:
    """v1 ``cpu.shares`` for a limit of ``cores``: proportional, so that if the agent's parent ever gets
    less CPU than the sum of its quotas, tasks lose speed in proportion to their shares."""
    return max(2, min(262_144, round(WEIGHT_PER_CORE * cores)))


def cpu_weight_v2(cores: float) -> int:
    """v2 ``cpu.weight`` (1..10000, default 100) with the same proportionality as :func:`cpu_weight_v1`."""
    return max(1, min(10_000, round(100 * WEIGHT_PER_CORE / 1024 * cores)))


def safe_name(task_id: str) -> str:
    """A cgroup directory name for a task id (task ids look like ``job/3``; ``/`` cannot be in a name).
    A hash suffix keeps distinct ids distinct after the replacement."""
    cleaned = "".join(c if c.isalnum() or c in "-_." else "_" for c in task_id)[:64].lstrip(".")
    return f"{cleaned or 'task'}-{hashlib.sha1(task_id.encode()).hexdigest()[:8]}"


# --------------------------------------------------------------------------------------- discovery
@dataclass(frozen=True)
class Mount:
    point: str
    root: str  # the mount's root inside the hierarchy (not "/" in some containers)
    fstype: str  # "cgroup" or "cgroup2"
    controllers: frozenset[str]  # v1 only


def parse_mountinfo(text: str) -> list[Mount]:
    """The cgroup mounts of /proc/self/mountinfo."""
    mounts = []
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        ctrls = frozenset(o for o in tail[2].split(",") if o not in ("rw", "ro") and "=" not in o)
        mounts.append(Mount(point=fields[4], root=fields[3], fstype=tail[0], controllers=ctrls))
    return mounts


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """Controller -> cgroup path of a process, from /proc/<pid>/cgroup; the v2 path is under key ""."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for ctrl in parts[1].split(",") if parts[1] else [""]:
            paths[ctrl] = parts[2]
    return paths


def own_dir(mount: Mount, path: str) -> str:
    """The directory of this process's own cgroup inside ``mount``."""
    rel = os.path.relpath(path, mount.root) if path.startswith(mount.root) else "."
    return os.path.normpath(os.path.join(mount.point, rel if not rel.startswith("..") else "."))


#: The leaf group of cgroup v2 that an agent moves the processes of its own cgroup to when that cgroup holds processes
#: (a systemd service's or login session's cgroup, unlike the root): v2's "no internal processes" rule lets no
#: non-root group with processes enable controllers for its children (EBUSY), and the agent's parent groups need
#: ``cpu`` and ``memory``. The agent's parent groups go beside the leaf, in the cgroup the processes were in: an
#: agent (or a sweep) started from inside the leaf looks there too (:func:`v2_base`). No ``vcemu-`` prefix: no
#: agent's parent.
V2_LEAF = "vcemu.procs"


def v2_base(mount: Mount, path: str) -> str:
    """Where an agent's cgroup v2 parent groups go: its own cgroup, or the one above if that is :data:`V2_LEAF`."""
    d = own_dir(mount, path)
    return os.path.dirname(d) if os.path.basename(d) == V2_LEAF else d


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError as e:
        raise CgroupError(f"cannot read {path}: {e.strerror}") from e


def _write(path: str, value: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(value)
    except OSError as e:
        raise CgroupError(f"cannot write {value!r} to {path}: {e.strerror}") from e


def _counter(path: str, key: str) -> int | None:
    """The value of ``key`` in a flat-keyed cgroup file (``key value`` lines), None if absent or unreadable."""
    try:
        text = _read(path)
    except CgroupError:
        return None
    for line in text.splitlines():
        k, _, value = line.partition(" ")
        if k == key:
            return int(value)
    return None


def _pids_in(cg_dir: str) -> list[int]:
    try:
        return [int(x) for x in _read(os.path.join(cg_dir, "cgroup.procs")).split()]
    except CgroupError:
        return []


def _rmdir(path: str, timeout: float = 2.0) -> None:
    """Remove a cgroup directory; a just-killed process may hold it busy for a few milliseconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if time.monotonic() > deadline:
                raise CgroupError(f"cannot remove {path}: {e.strerror}") from e
            time.sleep(0.01)


# --------------------------------------------------------------------------------------- ownership
#: Prefix of the owner marker, an empty group in each of an agent's parent groups. Task groups never start
#: with a dot (:func:`safe_name`), so the two cannot be confused.
OWNER_PREFIX = ".owner-"
#: Prefix of an agent's parent group, followed by its agent id.
PARENT_PREFIX = "vcemu-"
#: How long :func:`kill_groups` keeps killing (and thawing) a group's processes before it gives up.
KILL_TIMEOUT_S = 10.0
#: How long :meth:`CgroupDriver.cleanup` (the agent's shutdown, once its tasks' own kills have ended) keeps killing
#: what is left before it gives up. Those kills each had :data:`KILL_TIMEOUT_S` already, together: what outlived them
#: would not die in a second full timeout either (the shutdown would only take twice as long), while a short grace
#: still catches a process thawed meanwhile or one whose task's stop failed before killing it.
LEFTOVER_KILL_TIMEOUT_S = 0.5


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """``(state, start time in clock ticks after boot)`` of a process, from /proc/<pid>/stat; None if there
    is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "; comm may hold spaces and parentheses
    return fields[0], int(fields[19])  # fields 3 (state) and 22 (starttime) of proc(5)


def _pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


@dataclass(frozen=True)
class Owner:
    """The process that made an agent's parent groups. The start time tells a reused pid from the owner; the
    pid namespace says whether the pid means anything here (an agent in another container is not judged)."""

    pidns: int
    pid: int
    start: int

    @classmethod
    def me(cls) -> Owner:
        stat = _proc_stat(os.getpid())
        return cls(_pid_namespace(), os.getpid(), stat[1] if stat else 0)

    @property
    def marker(self) -> str:
        return f"{OWNER_PREFIX}{self.pidns}-{self.pid}-{self.start}"

    @classmethod
    def parse(cls, marker: str) -> Owner | None:
        parts = marker.removeprefix(OWNER_PREFIX).split("-")
        if not marker.startswith(OWNER_PREFIX) or len(parts) != 3 or not all(p.isdigit() for p in parts):
            return None
        return cls(int(parts[0]), int(parts[1]), int(parts[2]))

    def alive(self) -> bool | None:
        """True while the owner runs (a zombie has ended), False once it has ended, None if it is not in this
        process's pid namespace (its pid cannot be looked up here)."""
        if self.pidns != _pid_namespace():
            return None
        stat = _proc_stat(self.pid)
        return stat is not None and stat[1] == self.start and stat[0] not in ("Z", "X")


def owners(parents: Iterable[str]) -> set[Owner]:
    """The owners recorded in an agent's parent groups (empty if none is: made by an older agent, or in
    the instant between the parent and its marker)."""
    found = set()
    for d in parents:
        with contextlib.suppress(OSError):
            found |= {o for n in os.listdir(d) if (o := Owner.parse(n)) is not None}
    return found


def pids_room(mountinfo: str = "/proc/self/mountinfo", proc_cgroup: str = "/proc/self/cgroup",
              ) -> tuple[str, int, int] | None:
    """(cgroup directory, pids.current, pids.max) of this process's own cgroup in the hierarchy with the pids
    controller (v1's, or cgroup2 where it holds ``pids.max``), or None where there is no limit there or it cannot
    be read (the agent's check before a start: :func:`node_agent.agent._check_pids_room`)."""
    try:
        mounts = parse_mountinfo(_read(mountinfo))
        own = parse_proc_cgroup(_read(proc_cgroup))
    except CgroupError:
        return None
    for m in mounts:
        if m.fstype == "cgroup2":
            where = own_dir(m, own.get("", "/"))
        elif "pids" in m.controllers:
            where = own_dir(m, own.get("pids", "/"))
        else:
            continue
        try:
            limit = _read(os.path.join(where, "pids.max")).strip()
            current = int(_read(os.path.join(where, "pids.current")))
        except (CgroupError, ValueError):
            continue
        if limit != "max":
            return where, current, int(limit)
    return None


def agent_parents(mountinfo: str = "/proc/self/mountinfo", proc_cgroup: str = "/proc/self/cgroup",
                  ) -> dict[str, list[str]]:
    """Agent id -> its parent groups, for every agent whose parent is beside where this process's own would be
    (in its own cgroup of each hierarchy with a controller an agent uses, v1 or v2). Empty if cgroupfs cannot
    be read."""
    try:
        mounts = parse_mountinfo(_read(mountinfo))
        own = parse_proc_cgroup(_read(proc_cgroup))
    except CgroupError:
        return {}
    bases = []
    for m in mounts:
        if m.fstype == "cgroup2":
            bases.append(v2_base(m, own.get("", "/")))
        elif ctrls := [c for c in V1_CONTROLLERS if c in m.controllers]:
            bases.append(own_dir(m, own.get(ctrls[0], "/")))
    found: dict[str, list[str]] = {}
    for base in dict.fromkeys(bases):
        with contextlib.suppress(OSError):
            for name in sorted(os.listdir(base)):
                if name.startswith(PARENT_PREFIX) and os.path.isdir(os.path.join(base, name)):
                    found.setdefault(name.removeprefix(PARENT_PREFIX), []).append(os.path.join(base, name))
    return found


#: What lifts a group's CPU limit: v1's ``cpu.cfs_quota_us`` and v2's ``cpu.max`` (its period is left as it is).
_UNLIMITED_CPU = (("cpu.cfs_quota_us", "-1"), ("cpu.max", "max"))


def _kill_and_thaw(dirs: Iterable[str]) -> list[int]:
    """One round: SIGKILL every process of the groups ``dirs`` (one group's directories in each hierarchy), lift
    their CPU limit, then thaw them (v1 ``freezer.state``, v2 ``cgroup.freeze``) without waiting, so that a frozen
    process takes the signal. Returns the pids signalled.

    Why the limit is lifted: a process's exit runs in its own context, charged to its group's CFS quota. A task at a
    small share has usually spent its quota for the period when it is killed, and it then dies only when the next
    period refills it: a Stop of a 64 MB dgemm task at 0.045 cores took the agent 49 ms (median of 48), 11.6 ms with
    the limit lifted (one 10-ms round of :meth:`node_agent.runner.Task._kill`'s wait) and 5 ms with its rounds from
    1 ms; a live DFRS plan pauses and moves tasks one Stop after another."""
    dirs = list(dirs)
    pids = sorted({p for d in dirs for p in _pids_in(d)})
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for d in dirs:
        for f, unlimited in _UNLIMITED_CPU:
            if pids and os.path.exists(os.path.join(d, f)):
                with contextlib.suppress(CgroupError):
                    _write(os.path.join(d, f), unlimited)
        for f, thawed in (("freezer.state", "THAWED"), ("cgroup.freeze", "0")):
            if os.path.exists(os.path.join(d, f)):
                with contextlib.suppress(CgroupError):
                    _write(os.path.join(d, f), thawed)
    return pids


def kill_groups(groups: Mapping[str, Sequence[str]], timeout: float | None = None) -> dict[str, list[int]]:
    """Kill every process of the groups ``groups`` (name -> that group's directories, one per hierarchy), thawing
    them each round, until none has any or ``timeout`` (default :data:`KILL_TIMEOUT_S`) has passed; returns the
    survivors of each group that still has some (empty if every process died).

    The groups are killed together, each round over all that still have processes, against one deadline: one group
    after another, each with the full timeout, N groups that cannot die (frozen under a freezer that will not thaw)
    would take N timeouts. Nothing is raised here, so that the caller can still remove the groups that emptied."""
    limit = KILL_TIMEOUT_S if timeout is None else timeout
    deadline = time.monotonic() + limit
    pending = {name: list(dirs) for name, dirs in groups.items()}
    while True:
        survivors = {name: pids for name, dirs in pending.items() if (pids := _kill_and_thaw(dirs))}
        if not survivors or time.monotonic() > deadline:
            return survivors
        pending = {name: pending[name] for name in survivors}
        time.sleep(0.01)


def remove_groups(parents: list[str], remove_parent: bool, timeout: float | None = None) -> list[str]:
    """Kill the processes of every group under an agent's parent groups ``parents`` (one per hierarchy) and
    remove the groups, and if ``remove_parent`` the owner markers and the parents too; returns the task
    groups' names. What an agent does with its own at shutdown, with its own id's leftovers at start-up,
    and with the subtree of an agent that died without doing it.

    The kills share one deadline, ``timeout`` from now (default :data:`KILL_TIMEOUT_S`), see :func:`kill_groups`.
    A group whose processes outlive it, or that cannot be removed, does not stop the others: every group that
    emptied is removed, then one CgroupError names every failure (and what was removed). The owner markers and
    the parents are then kept: the markers tell the next agent to start whose leftovers these are (a subtree
    without one is left alone, see :func:`node_agent.agent.open_core`), and a parent that still holds a group
    cannot be removed anyway."""
    names = sorted({n for d in parents if os.path.isdir(d) for n in os.listdir(d) if os.path.isdir(os.path.join(d, n))})
    tasks = [n for n in names if not n.startswith(OWNER_PREFIX)]
    limit = KILL_TIMEOUT_S if timeout is None else timeout
    survivors = kill_groups({name: [os.path.join(d, name) for d in parents] for name in tasks}, limit)
    failures = [f"processes {', '.join(map(str, pids))} of {os.path.join(parents[0], name)} did not die within "
                f"{limit:g} s of SIGKILL" for name, pids in survivors.items()]
    removed = []
    for name in (n for n in tasks if n not in survivors):
        try:
            for d in parents:
                _rmdir(os.path.join(d, name))
        except CgroupError as e:
            failures.append(str(e))
        else:
            removed.append(name)
    if failures:
        raise CgroupError(f"{'; '.join(failures)} (removed {len(removed)} of {len(tasks)} task groups"
                          f"{': ' + ', '.join(removed) if removed else ''})")
    if remove_parent:
        for d in parents:
            for marker in (n for n in names if n.startswith(OWNER_PREFIX)):
                _rmdir(os.path.join(d, marker))
            _rmdir(d)
    return tasks


def _mark_owner(parents: Iterable[str]) -> None:
    """Record this process as the owner of the agent's parent groups (see :class:`Owner`)."""
    marker = Owner.me().marker
    for d in parents:
        try:
            os.makedirs(os.path.join(d, marker), exist_ok=True)
        except OSError as e:
            raise CgroupError(f"cannot create {os.path.join(d, marker)}: {e.strerror}") from e


def freeze_control(group: str, v2: bool) -> tuple[str, str, str]:
    """The freezer of cgroup directory ``group``: the file that freezes it, what to write there, and the file that
    reads ``1`` while the group itself (not an ancestor: a paused container) is frozen or freezing. v1:
    ``freezer.state``/``FROZEN`` and ``freezer.self_freezing``; v2: ``cgroup.freeze``/``1`` for both."""
    if v2:
        return os.path.join(group, "cgroup.freeze"), "1", os.path.join(group, "cgroup.freeze")
    return os.path.join(group, "freezer.state"), "FROZEN", os.path.join(group, "freezer.self_freezing")


def self_frozen(group: str, v2: bool) -> bool:
    """Whether cgroup directory ``group`` is itself frozen (see :func:`freeze_control`); False if unreadable."""
    try:
        return _read(freeze_control(group, v2)[2]).strip() == "1"
    except CgroupError:
        return False


class CpuWeights:
    """The CPU weights of an agent's task groups and of its parent group: a running task weighs its share's
    reservation, all booting tasks together one ordinary process, and the parent about the sum.

    Why. A group's weight counts only among its siblings (in both cgroup versions): the agent's parent group
    competes with the processes beside it (in v1, those in the agent's own cgroup: the coordinator and the agent
    under ``vcemu up``, a user's shell) with its own weight, and its task groups share what it gets by theirs.
    A running task's reservation (:data:`WEIGHT_PER_CORE` per core of its share, capped by its quota) lets it
    have its share on a busy machine, like a VM's CPU. A booting task is capped only at its host's capacity
    (:mod:`node_agent.runner`: start-up is outside the model) and must not take that priority: with the parent
    at a fixed weight of all its hosts' cores, as before, a burst of start-ups took the whole machine and ``vcemu
    status`` took up to 8.3 s to answer while 68 tasks started on ``vcemu up --hosts 8`` on this project's 2-core
    VM. Each booting task at an ordinary process's weight was no better (up to 11.2 s: 68 processes against one
    command), and at the least weight each (2), 0.27 to 0.57 s, but a start-up could then wait for as long as
    any busy process on the machine ran (review). So an agent's booting tasks share one ordinary process's weight
    (each ``ORDINARY_CORES / n``, at least the least weight; per agent: ``--agents k`` or ``--ray``'s agent per
    host make k such processes): its start-ups together get at least what any other process gets, and about one
    process's due beside the control plane (``vcemu status``: 0.34 to 0.75 s in the same burst, two runs).

    The parent weighs the sum of its groups' weights, frozen groups left out (they do not run; a group the fencer
    froze counts until the agent adopts the fence, within a monitor round), so that what it takes from its
    neighbours is what its tasks are meant to have. The kernel divides a group's weight among its runnable
    children by their recent load, so this holds on average, not at every instant: a running task that has spent
    its quota for the period, or sleeps, leaves its part to its runnable siblings meanwhile, booting ones included,
    which then weigh more than one process. The weights clamp at each version's bounds (v1: 2 to 262,144, a
    reservation of 4 cores; v2: 1 to 10,000, of 1.56 cores), and each is rounded on its own (in v2 many booting
    groups weigh 1 each). A burst of n starts rewrites the booting groups' weights about n^2/2 times (68 starts:
    about 2,300 writes of a few microseconds).

    ``write(name, weight)`` writes a weight to a task group, or to the parent for ``name`` None; ``weight(cores)``
    turns cores of :data:`WEIGHT_PER_CORE` into the version's weight. A weight is written only when it changes,
    under a lock (so the writes are in order); a failed write is not raised, and is tried again at the next
    change of any weight: a weight is an improvement, not a requirement (the quotas bound the tasks in any
    case)."""

    def __init__(self, write: Callable[[str | None, int], None], weight: Callable[[float], int]) -> None:
        self._write, self._weight = write, weight
        self._lock = threading.Lock()
        self._running: dict[str, float] = {}  # group -> its share, in cores
        self._booting: set[str] = set()
        self._frozen: set[str] = set()
        self._written: dict[str | None, int] = {}
        self._failed: set[str | None] = set()  # the groups (None: the parent) whose last write failed
        with self._lock:
            self._update(())

    def set(self, name: str, cores: float, booting: bool = False) -> None:
        """Group ``name`` runs at a share of ``cores``, or boots (its quota is the caller's)."""
        with self._lock:
            was_booting = name in self._booting
            if booting:
                self._booting.add(name)
                self._running.pop(name, None)
            else:
                self._running[name] = cores
                self._booting.discard(name)
            self._update((name,), rebalance=booting or was_booting)

    def remove(self, name: str) -> None:
        """Group ``name`` is gone."""
        with self._lock:
            was_booting = name in self._booting
            self._running.pop(name, None)
            self._booting.discard(name)
            self._frozen.discard(name)
            self._written.pop(name, None)
            self._failed.discard(name)
            self._update((), rebalance=was_booting)

    def freeze(self, name: str, frozen: bool) -> None:
        """Group ``name`` is frozen (paused) or thawed: a frozen group's weight is left out of the parent's."""
        with self._lock:
            if frozen == (name in self._frozen):
                return
            if frozen:
                self._frozen.add(name)
            else:
                self._frozen.discard(name)
            self._update((), rebalance=name in self._booting)

    def weights(self) -> dict[str | None, int]:
        """What was last written: each group's weight, and the parent's under None."""
        with self._lock:
            return dict(self._written)

    def _boot_cores(self) -> float:
        n = len(self._booting - self._frozen)
        return ORDINARY_CORES / n if n else 0.0

    def _update(self, names: Iterable[str], rebalance: bool = False) -> None:
        boot = self._boot_cores()
        retry = [n for n in self._failed if n is not None]
        for name in dict.fromkeys((*names, *retry, *(self._booting if rebalance else ()))):
            self._put(name, self._weight(boot if name in self._booting else self._running[name]))
        running = math.fsum(c for n, c in self._running.items() if n not in self._frozen)
        self._put(None, self._weight(running + (ORDINARY_CORES if boot else 0.0)))

    def _put(self, name: str | None, weight: int) -> None:
        if self._written.get(name) == weight:
            return
        try:
            self._write(name, weight)
        except CgroupError:
            self._failed.add(name)  # (the next change of any weight writes it again)
            self._written.pop(name, None)
            return
        self._failed.discard(name)
        self._written[name] = weight


# --------------------------------------------------------------------------------------- interface
class CgroupDriver(ABC):
    """What the runner needs from a cgroup implementation. ``name`` is a task's cgroup name."""

    mode: str

    @abstractmethod
    def create(self, name: str) -> None: ...

    @abstractmethod
    def add_pid(self, name: str, pid: int) -> None: ...

    @abstractmethod
    def set_cpu(self, name: str, cores: float, reserved: bool = True) -> None:
        """Limit the group to ``cores`` CPUs (may be fractional). ``reserved``: the group weighs its ``cores``
        (:data:`WEIGHT_PER_CORE`), so that the machine's other processes can hardly take them from it (while the
        parent is under its version's cap, :class:`CpuWeights`); else it boots
        (a task's start-up, capped at its host's capacity, :mod:`node_agent.runner`), and all booting groups
        weigh one ordinary process together (:class:`CpuWeights`)."""

    @abstractmethod
    def set_memory_limit(self, name: str, limit_bytes: int) -> None: ...

    @abstractmethod
    def freeze(self, name: str) -> None: ...

    @abstractmethod
    def thaw(self, name: str) -> None: ...

    @abstractmethod
    def cpu_usage_s(self, name: str) -> float:
        """Total CPU time used by the group's processes, in seconds."""

    @abstractmethod
    def pids(self, name: str) -> list[int]: ...

    @abstractmethod
    def remove(self, name: str) -> None:
        """Remove the (empty) group."""

    @abstractmethod
    def dirs(self, name: str | None = None) -> list[str]:
        """The directories of a task's group, or of the agent's parent group if ``name`` is None."""

    @abstractmethod
    def close(self) -> None:
        """Release the driver's own resources (threads); cgroups are removed by :meth:`cleanup`."""

    def attach_workdir(self, workdir: str) -> None:
        """The agent's work directory, where a driver without a freezer of the kernel's keeps what its fencer needs
        (:mod:`node_agent.dutycycle`); the cgroup drivers need nothing there."""
        return None

    def fencer_args(self) -> list[str] | None:
        """The flags that tell :mod:`node_agent.fencer` where this driver's freezer is; None without one."""
        return None

    def is_frozen(self, name: str) -> bool:
        """Whether the group itself is frozen (or freezing), not through an ancestor: by the agent, or by its
        fencer (:mod:`node_agent.fencer`)."""
        return False

    def oom_kills(self, name: str) -> int | None:
        """How many of the group's processes the kernel's OOM killer has killed at its memory limit, or
        None where that is not known (no memory controller). Read before :meth:`remove`: a task killed by
        SIGKILL is told apart from one killed from outside by this count."""
        return None

    def kill_all(self, name: str) -> None:
        """One round of killing: SIGKILL every process of the group and thaw it (a frozen v1 task ignores
        SIGKILL until thawed), without waiting for them to end; the caller checks and repeats."""
        for pid in self.pids(name):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(CgroupError):
            self.thaw(name)

    def cleanup(self, remove_parent: bool) -> list[str]:
        """Kill the processes of and remove every task group under the agent's parent (everything, at
        shutdown, after the tasks' own kills), and the parent too if ``remove_parent``; returns the names
        removed. The kills get :data:`LEFTOVER_KILL_TIMEOUT_S` between them, not :data:`KILL_TIMEOUT_S`: what the
        tasks' kills left has outlived one already, and the shutdown should take about one, however many tasks
        cannot die. Every group that can be removed is; the failures are raised together (:func:`remove_groups`),
        and what is left is removed by the next agent to start."""
        return remove_groups(self.dirs(), remove_parent, LEFTOVER_KILL_TIMEOUT_S)


class _WeighedDriver(CgroupDriver):
    """What the two cgroup versions' drivers share around their groups' CPU weights (:class:`CpuWeights`): the
    ledger follows each freeze, thaw, kill and removal, also when the kernel's side of it failed or timed out."""

    weights: CpuWeights

    @contextlib.contextmanager
    def _weighed_freeze(self, name: str, frozen: bool) -> Iterator[None]:
        """Around a freeze (``frozen``) or a thaw of group ``name``: a freeze whose wait timed out may still
        complete (the caller thaws it then), and a thaw was written even when its wait timed out."""
        done = False
        try:
            yield
            done = True
        finally:
            self.weights.freeze(name, frozen and (done or self.is_frozen(name)))

    @contextlib.contextmanager
    def _weighed_removal(self, name: str, cpu_dir: str) -> Iterator[None]:
        """Around the removal of group ``name`` (``cpu_dir``: its cpu controller's directory): a group that could
        not be removed keeps its weight while its processes may still run."""
        try:
            yield
        finally:
            if not os.path.isdir(cpu_dir) or not self.pids(name):
                self.weights.remove(name)

    def kill_all(self, name: str) -> None:
        _kill_and_thaw(self.dirs(name))  # the thaw is not waited for (the caller repeats)
        self.weights.freeze(name, False)


# --------------------------------------------------------------------------------------- cgroup v1
class CgroupV1Driver(_WeighedDriver):
    """cgroup v1: ``cpu`` (CFS quota), ``cpuacct`` (usage), ``freezer`` and ``memory`` hierarchies,
    which may be mounted separately (as here) or together."""

    mode = "cgroup-v1"

    def __init__(self, parents: dict[str, str]) -> None:
        """``parents``: controller -> the agent's parent directory in that controller's hierarchy."""
        self._parents = parents
        for d in self.dirs():
            os.makedirs(d, exist_ok=True)
        _mark_owner(self.dirs())
        cpu = parents["cpu"]
        self.weights = CpuWeights(
            lambda name, w: _write(os.path.join(cpu, "cpu.shares") if name is None
                                   else os.path.join(cpu, name, "cpu.shares"), str(w)), cpu_weight_v1)

    def close(self) -> None:
        pass

    def _dir(self, ctrl: str, name: str) -> str:
        return os.path.join(self._parents[ctrl], name)

    def dirs(self, name: str | None = None) -> list[str]:
        unique = dict.fromkeys(self._parents[c] for c in V1_CONTROLLERS)
        return [d if name is None else os.path.join(d, name) for d in unique]

    def create(self, name: str) -> None:
        for d in self.dirs(name):
            try:
                os.mkdir(d)
            except FileExistsError:
                pass
            except OSError as e:
                raise CgroupError(f"cannot create cgroup {d}: {e.strerror}") from e

    def add_pid(self, name: str, pid: int) -> None:
        for d in self.dirs(name):
            _write(os.path.join(d, "cgroup.procs"), str(pid))

    def set_cpu(self, name: str, cores: float, reserved: bool = True) -> None:
        period, quota = cfs_period_quota_us(cores)
        d = self._dir("cpu", name)
        if int(_read(os.path.join(d, "cpu.cfs_period_us"))) != period:
            _write(os.path.join(d, "cpu.cfs_period_us"), str(period))
        _write(os.path.join(d, "cpu.cfs_quota_us"), str(quota))
        self.weights.set(name, cores, booting=not reserved)

    def set_memory_limit(self, name: str, limit_bytes: int) -> None:
        _write(os.path.join(self._dir("memory", name), "memory.limit_in_bytes"), str(limit_bytes))

    def _freezer(self, name: str, state: str) -> None:
        path = os.path.join(self._dir("freezer", name), "freezer.state")
        _write(path, state)
        deadline = time.monotonic() + 2.0
        while _read(path).strip() != state:
            if time.monotonic() > deadline:
                raise CgroupError(f"{path} did not reach {state}")
            time.sleep(0.002)

    def freeze(self, name: str) -> None:
        with self._weighed_freeze(name, True):
            self._freezer(name, "FROZEN")

    def fencer_args(self) -> list[str] | None:
        return ["--v1-freezer", self._parents["freezer"]]

    def is_frozen(self, name: str) -> bool:
        return self_frozen(self._dir("freezer", name), v2=False)

    def thaw(self, name: str) -> None:
        with self._weighed_freeze(name, False):
            if os.path.isdir(self._dir("freezer", name)):
                self._freezer(name, "THAWED")

    def cpu_usage_s(self, name: str) -> float:
        return int(_read(os.path.join(self._dir("cpuacct", name), "cpuacct.usage"))) / 1e9

    def oom_kills(self, name: str) -> int | None:
        return _counter(os.path.join(self._dir("memory", name), "memory.oom_control"), "oom_kill")

    def pids(self, name: str) -> list[int]:
        return sorted({p for d in self.dirs(name) for p in _pids_in(d)})

    def remove(self, name: str) -> None:
        with self._weighed_removal(name, self._dir("cpu", name)):
            for d in self.dirs(name):
                _rmdir(d)


# --------------------------------------------------------------------------------------- cgroup v2
class CgroupV2Driver(_WeighedDriver):
    """cgroup v2 (unified): ``cpu.max``, ``cgroup.freeze``, ``memory.max`` in a delegated subtree."""

    mode = "cgroup-v2"

    def __init__(self, parent: str) -> None:
        self._parent = parent
        os.makedirs(parent, exist_ok=True)
        _mark_owner([parent])
        _write(os.path.join(parent, "cgroup.subtree_control"), "+cpu +memory")
        self.weights = CpuWeights(
            lambda name, w: _write(os.path.join(parent, "cpu.weight") if name is None
                                   else os.path.join(parent, name, "cpu.weight"), str(w)), cpu_weight_v2)

    def close(self) -> None:
        pass

    def dirs(self, name: str | None = None) -> list[str]:
        return [self._parent if name is None else os.path.join(self._parent, name)]

    def _file(self, name: str, f: str) -> str:
        return os.path.join(self._parent, name, f)

    def create(self, name: str) -> None:
        try:
            os.makedirs(os.path.join(self._parent, name), exist_ok=True)
        except OSError as e:
            raise CgroupError(f"cannot create cgroup {self._parent}/{name}: {e.strerror}") from e

    def add_pid(self, name: str, pid: int) -> None:
        _write(self._file(name, "cgroup.procs"), str(pid))

    def set_cpu(self, name: str, cores: float, reserved: bool = True) -> None:
        period, quota = cfs_period_quota_us(cores)
        _write(self._file(name, "cpu.max"), f"{quota} {period}")
        self.weights.set(name, cores, booting=not reserved)

    def set_memory_limit(self, name: str, limit_bytes: int) -> None:
        _write(self._file(name, "memory.max"), str(limit_bytes))

    def _freeze(self, name: str, frozen: bool) -> None:
        _write(self._file(name, "cgroup.freeze"), "1" if frozen else "0")
        events, want = self._file(name, "cgroup.events"), f"frozen {int(frozen)}"
        deadline = time.monotonic() + 2.0
        while os.path.exists(events) and want not in _read(events).splitlines():
            if time.monotonic() > deadline:
                raise CgroupError(f"{events} did not reach {want!r}")
            time.sleep(0.002)

    def freeze(self, name: str) -> None:
        with self._weighed_freeze(name, True):
            self._freeze(name, True)

    def fencer_args(self) -> list[str] | None:
        return ["--v2", self._parent]

    def is_frozen(self, name: str) -> bool:
        return self_frozen(os.path.join(self._parent, name), v2=True)

    def thaw(self, name: str) -> None:
        with self._weighed_freeze(name, False):
            if os.path.isdir(os.path.join(self._parent, name)):
                self._freeze(name, False)

    def cpu_usage_s(self, name: str) -> float:
        for line in _read(self._file(name, "cpu.stat")).splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        raise CgroupError(f"no usage_usec in {self._file(name, 'cpu.stat')}")

    def oom_kills(self, name: str) -> int | None:
        return _counter(self._file(name, "memory.events"), "oom_kill")

    def pids(self, name: str) -> list[int]:
        return _pids_in(os.path.join(self._parent, name))

    def remove(self, name: str) -> None:
        with self._weighed_removal(name, os.path.join(self._parent, name)):
            _rmdir(os.path.join(self._parent, name))


# --------------------------------------------------------------------------------------- probing
def _enable_v2_controllers(base: str) -> None:
    """Enable ``cpu`` and ``memory`` for the children of cgroup v2 directory ``base`` (the agent's parent groups).
    A non-root group that holds processes cannot (v2's "no internal processes" rule: EBUSY), so its processes,
    this one among them, are first moved to the leaf :data:`V2_LEAF` inside it, as systemd asks of a delegated
    unit's processes. Only on EBUSY, and never in the root cgroup (exempt from the rule; it has no
    ``cgroup.type``): another refusal (EINVAL: a realtime process outside the root keeps ``cpu`` off; EACCES) is
    not helped by a move, which would leave the unit's processes in the leaf for nothing (review)."""
    control = os.path.join(base, "cgroup.subtree_control")
    if {"cpu", "memory"} <= set(_read(control).split()):
        return
    try:
        _write(control, "+cpu +memory")
        return
    except CgroupError as exc:
        busy = getattr(exc.__cause__, "errno", None) == errno.EBUSY
        if not busy or not os.path.exists(os.path.join(base, "cgroup.type")) or not _pids_in(base):
            raise
    leaf = os.path.join(base, V2_LEAF)
    os.makedirs(leaf, exist_ok=True)
    stuck: dict[int, str] = {}
    for _ in range(10):  # a process may fork while the others are moved
        pids = _pids_in(base)
        if not pids:
            break
        stuck = {}
        for pid in pids:
            if pid == 0:  # (a process of another pid namespace reads as 0; writing 0 would move this one)
                stuck[pid] = "in another pid namespace"
                continue
            try:
                _write(os.path.join(leaf, "cgroup.procs"), str(pid))
            except CgroupError as exc:  # (ended meanwhile, or not movable: said below if it stays)
                stuck[pid] = getattr(exc.__cause__, "strerror", None) or str(exc)
    try:
        _write(control, "+cpu +memory")
    except CgroupError as exc:
        left = [p for p in _pids_in(base) if p in stuck or p == 0]
        if left:
            said = ", ".join(f"{p} ({stuck.get(p, '?')})" for p in left[:5]) + (", ..." if len(left) > 5 else "")
            raise CgroupError(f"{exc}: {base} still holds processes that could not be moved to {V2_LEAF}: {said} "
                              f"(start the agent where it may move them: its own unit with Delegate=yes)") from exc
        raise


class CgroupUnavailable(RuntimeError):
    """Neither cgroup version can be used; the message says why for each."""


def _try_v2(mounts: list[Mount], own: dict[str, str], agent_id: str) -> CgroupDriver:
    v2 = next((m for m in mounts if m.fstype == "cgroup2"), None)
    if v2 is None:
        raise CgroupError("cgroup2 is not mounted")
    base = v2_base(v2, own.get("", "/"))
    available = _read(os.path.join(base, "cgroup.controllers")).split()
    missing = [c for c in ("cpu", "memory") if c not in available]
    if missing:
        raise CgroupError(f"cgroup2 at {base} has no {' or '.join(missing)} controller (under systemd, run the agent "
                          "in a unit with Delegate=yes, e.g. systemd-run -p Delegate=yes --scope ...)")
    try:
        _enable_v2_controllers(base)
    except OSError as e:
        raise CgroupError(f"cannot create {e.filename}: {e.strerror}") from e
    try:
        return CgroupV2Driver(os.path.join(base, f"{PARENT_PREFIX}{agent_id}"))
    except OSError as e:  # a reason to try the next version, as for v1, not a crash of the agent
        raise CgroupError(f"cannot create {e.filename}: {e.strerror}") from e


def _try_v1(mounts: list[Mount], own: dict[str, str], agent_id: str) -> CgroupDriver:
    parents = {}
    for ctrl in V1_CONTROLLERS:
        m = next((m for m in mounts if m.fstype == "cgroup" and ctrl in m.controllers), None)
        if m is None:
            raise CgroupError(f"no cgroup v1 hierarchy with the {ctrl} controller")
        parents[ctrl] = os.path.join(own_dir(m, own.get(ctrl, "/")), f"{PARENT_PREFIX}{agent_id}")
    try:
        return CgroupV1Driver(parents)
    except OSError as e:
        raise CgroupError(f"cannot create {e.filename}: {e.strerror}") from e


def open_driver(agent_id: str, prefer: Iterable[str] = ("cgroup-v2", "cgroup-v1"),
                mountinfo: str = "/proc/self/mountinfo", proc_cgroup: str = "/proc/self/cgroup") -> CgroupDriver:
    """Probe for a writable cgroup version (v2 first: it needs a CPU controller, which this machine's
    v2 mount lacks) and return its driver; raise :class:`CgroupUnavailable` with each reason."""
    try:
        mounts = parse_mountinfo(_read(mountinfo))
        own = parse_proc_cgroup(_read(proc_cgroup))
    except CgroupError as e:
        raise CgroupUnavailable(str(e)) from e
    tries = {"cgroup-v2": _try_v2, "cgroup-v1": _try_v1}
    reasons = []
    for mode in prefer:
        try:
            return tries[mode](mounts, own, agent_id)
        except CgroupError as e:
            reasons.append(f"{mode}: {e}")
    raise CgroupUnavailable("; ".join(reasons))
