"""Durable coordinator state: SQLite in WAL mode.

Why: a live experiment runs for hours, and a coordinator crash must not cost the user a run (issue 7).
Everything the coordinator has acknowledged is in this file before the acknowledgement leaves:

* ``jobs``: every accepted job, its spec, its client request id and its engine state (one row, updated
  in place at every transition);
* ``transitions``: the engine's history, every transition of every job (a record for analysis: a coordinator
  reads none of it back, ``load(transitions=False)``; a run's own results come from its engine's history; a resume
  elsewhere in the plan that paused its job is reason ``"move"`` since session 46, ``"resume"`` in older files);
* ``tasks``: per job, the number of task ids it has used, written *before* each StartTask RPC so that a
  restarted coordinator never gives a new task an id an agent may still hold (a job without tasks keeps
  its row, with none); and where each of its tasks runs (task id, host, last known progress), written
  once its StartTask has returned, so that a restarted coordinator can adopt the tasks that kept running;
* ``agents``: each registered agent's address and description, so a restarted coordinator can talk to
  its agents at once, before they re-register;
* ``meta``: the epoch (wall clock of time 0), so the coordinator's clock continues across restarts, and the
  latest time that clock was recorded at (``clock``), so that it never goes back at a restart whose wall clock
  is behind the one before (an NTP step, a pod moved to a node whose clock is behind); the reference host; and
  the lease last granted to each agent, which a restarted coordinator waits out.

Durability: WAL with ``synchronous=FULL`` by default: every commit is fsynced before it returns, so what
the coordinator acknowledged survives a power cut or a kernel crash too; with ``NORMAL`` (fsync only at
checkpoints) it survives only a crash of the coordinator process (``kill -9``). "Nothing acknowledged is
lost" is the store's promise, and its price is small at a coordinator's write rate (a commit per
transition, a progress journal about once a second, one per submitted batch). Measured on this project's
2-core VM (ext4 on a virtio disk): a small commit took a median 0.30 ms with FULL against 0.09 ms with
NORMAL (3 x 5,000 commits); ``vcemu bench load`` accepted 506-600 unary submissions per second against
620-650, and 3,575-3,792 in batches against 3,613-4,025 (two runs each; its ``--synchronous`` compares).

Writes nest: :meth:`transaction` groups several writes (a Submit's job row, its first transition and
its request id) into one commit; a write outside any transaction commits at once.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import math
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from coordinator.locks import Held, claim
from coordinator.metrics import Transition
from coordinator.model import JobSpec, JobState

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, seq INTEGER NOT NULL, request_id TEXT UNIQUE, spec TEXT NOT NULL,
    state TEXT NOT NULL, hosts TEXT NOT NULL, cpu REAL NOT NULL, vt REAL NOT NULL, attempts INTEGER NOT NULL,
    first_start REAL, end_time REAL, message TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS transitions (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, job TEXT NOT NULL, src TEXT, dst TEXT NOT NULL,
    hosts TEXT NOT NULL, cpu REAL NOT NULL, reason TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tasks (
    job TEXT PRIMARY KEY, restarts INTEGER NOT NULL, tasks TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS agents (agent_id TEXT PRIMARY KEY, address TEXT NOT NULL, description BLOB NOT NULL);
"""
SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")


def _columns(db: sqlite3.Connection) -> dict[str, tuple[str, ...]]:
    """The tables of ``db`` (SQLite's own left out) with their column names."""
    names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]
    return {n: tuple(r[1] for r in db.execute(f"PRAGMA table_info('{n}')")) for n in names}


def _schema_columns() -> dict[str, tuple[str, ...]]:
    mem = sqlite3.connect(":memory:")
    try:
        mem.executescript(SCHEMA)
        return _columns(mem)
    finally:
        mem.close()


#: ``PRAGMA application_id`` of a vcemu state file ("vcem"): set on every file the store opens, so that another
#: program's SQLite file is told apart whatever tables it has.
APPLICATION_ID = 0x7663656D
#: ``PRAGMA user_version`` of a state file: the format this code writes and reads. A file of a higher format (a newer
#: vcemu's) is refused before anything is written to it, naming both (upgrade review: without it, an older vcemu given
#: a newer one's file failed with a traceback, or could misread it). A file of a lower format (0: before this mark)
#: is read as it is and marked with this one. Raise it with any change an older reader would misread or fail on.
STATE_FORMAT = 1
#: The tables a state file written before :data:`APPLICATION_ID` must have, with these very columns, to be taken
#: for one (jobs alone has twelve columns that no other program's table will match).
_LEGACY_TABLES = ("meta", "jobs", "transitions")


def _foreign_tables(db: sqlite3.Connection) -> str:
    """Why ``db`` is not a vcemu state file, as the tables in question; empty for a new file or a vcemu state
    file. One is: a file with no tables; a file marked with :data:`APPLICATION_ID` whose tables named as
    :data:`SCHEMA`'s have its columns; or an unmarked one (written before the mark) that has the tables of
    :data:`_LEGACY_TABLES` with their columns. Tables of its own beside ours are the user's business."""
    ours, theirs = _schema_columns(), _columns(db)
    if not theirs:
        return ""
    clash = [n for n, cols in theirs.items() if n in ours and ours[n] != cols]
    marked = db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    if clash or (not marked and any(n not in theirs for n in _LEGACY_TABLES)):
        return ", ".join(clash or theirs)
    return ""


def _missing_tables(db: sqlite3.Connection) -> str:
    """The first of :data:`_LEGACY_TABLES` (which every vcemu state file has had) missing from a vcemu state file
    that has tables, or "" (a new file). It was created anew, empty, and a coordinator started on a file whose
    ``jobs`` table was gone with no job and no word (input review)."""
    theirs = _columns(db)
    if not theirs or db.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
        return ""
    return next((n for n in _LEGACY_TABLES if n not in theirs), "")


#: See the module docstring (durability).
DEFAULT_SYNCHRONOUS = "FULL"
#: WAL pages after which a commit checkpoints them into the state file (SQLite's default is 1,000, 4 MB): the
#: progress journal writes about 7 KB a second, and with the default the WAL grew to 4 MB before its first
#: checkpoint, the state file itself staying one page: on a disk with less than that free, the coordinator filled
#: it with its own WAL and could then never commit again, nor checkpoint (exhaustion review).
WAL_AUTOCHECKPOINT_PAGES = 128
#: Bytes the WAL is truncated to after a checkpoint (SQLite keeps it at its largest by default).
WAL_SIZE_LIMIT = 1 << 20


#: Seconds a coordinator watches a state file with jobs that no lock file claimed for another writer
#: (:meth:`Store._no_other_writer`): longer than an older coordinator's progress journal period (about 1 s).
UNLOCKED_WATCH_S = 2.5


class StoreError(RuntimeError):
    """The state file cannot be opened or is not a vcemu state file; the message names the path."""


class RefusedSpec(ValueError):
    """An unfinished job's stored spec that this version's checks refuse (:meth:`JobSpec.validate`): a file an older
    vcemu wrote may hold one it accepted (a need below 1e-9 of a host, a work of 1e12 s or more, before 2026-11-27)."""

    def __init__(self, job: str, state: str, reason: str) -> None:
        super().__init__(f"jobs row of {job!r}: spec.{reason}")
        self.job, self.state, self.reason = job, state, reason


class StateFileGone(sqlite3.OperationalError):
    """The path of the state file no longer names the file this store opened (deleted, moved away, or replaced by
    another file): SQLite would go on writing to the open, unlinked file, and everything written from then on,
    acknowledged, would be lost at the next start (exhaustion review). A sqlite3.OperationalError, so that every
    writer's handling of a state file that cannot be written (Submit's UNAVAILABLE, the kept unsaved changes)
    applies as it is."""


def lock_path(path: str) -> str:
    """The lock file beside a state file (:func:`lock_state`)."""
    return f"{os.path.realpath(path)}.lock"  # (one lock whatever path, or symlink, names the file)


def _check_place(path: str) -> None:
    """Refuse a ``--state`` that cannot be a file, naming the actual problem: a directory, or a file in a directory
    that does not exist (where SQLite says "unable to open database file" and the lock "No such file")."""
    if os.path.isdir(path):
        raise StoreError(f"--state {path}: is a directory; give a file path (a new file is created)")
    parent = os.path.dirname(os.path.realpath(path))
    if not os.path.isdir(parent):
        what = "is not a directory" if os.path.lexists(parent) else "does not exist"
        raise StoreError(f"--state {path}: directory {parent} {what}")


#: errno of a lock file that cannot be made or opened for writing through no fault of the state file's.
_NOT_WRITABLE_HERE = (errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.EACCES)


def lock_state(path: str) -> int:
    """Claim the state file ``path`` for this process: an exclusive ``flock`` on :func:`lock_path`, held until
    the returned descriptor is closed, or the process ends (the kernel drops the lock of a killed process, so a
    coordinator restarted after ``kill -9`` gets it at once). Two coordinators on one state would hand out the
    same job ids and fight over the agents; the second is refused (StoreError naming ``--state`` and the
    holder's pid, which the holder writes into the lock file). Another program that opens the SQLite file
    directly (a reader) is not concerned."""
    where = lock_path(path)
    try:
        return claim(where)
    except Held as held:
        who = f" (pid {held.pid})" if held.pid else ""
        raise StoreError(f"--state {path}: in use by another coordinator{who}; stop it first, or give another "
                         "--state") from None
    except OSError as exc:  # a file system without locks too: SQLite's own locking needs them as well
        # The machine's fault (a read-only or full file system: the lock file cannot be made or opened for writing)
        # is said as such, as _cannot says SQLite's: "not a usable vcemu state file" blamed a sound file, which a user
        # might then throw away, every job in it with it (storage-fault review).
        # (EPERM from open itself, which names the file: an immutable directory or lock file, chattr +i; claim's own
        # EPERM, a lock file that is not a plain file of its own, names none and is the file's fault)
        here = exc.errno in _NOT_WRITABLE_HERE or (exc.errno == errno.EPERM and exc.filename is not None)
        what = "cannot be written here" if here else "not a usable vcemu state file"
        raise StoreError(f"--state {path}: {what}: cannot lock {where}: {exc.strerror or exc}") from None


@dataclass
class StoredJob:
    spec: JobSpec
    request_id: str | None
    state: JobState
    hosts: tuple[str, ...]
    cpu: float
    vt: float
    attempts: int
    first_start: float | None
    end: float | None
    message: str


@dataclass(frozen=True)
class StoredTask:
    """One task of a placed job as the live backend last knew it."""

    task_id: str
    host: str
    progress: float
    state: int
    saved: bool


#: A time in a state file at or past this (about 3,000 years) is damage, not the clock's: a restart on it started its
#: clock there, where the float spacing (16 s at 1e17) left it standing still, and every timer with it (review).
CLOCK_MAX = 1e11


@dataclass
class Loaded:
    epoch: float
    #: The latest time of the coordinator's clock the state records (its ``clock`` key, the last transition, the
    #: jobs' starts and ends): a restarted coordinator's clock carries on from no earlier (0.0: a new file).
    clock: float = 0.0
    jobs: list[StoredJob] = field(default_factory=list)
    transitions: list[Transition] = field(default_factory=list)
    tasks: dict[str, tuple[int, list[StoredTask]]] = field(default_factory=dict)
    agents: list[tuple[str, str, bytes]] = field(default_factory=list)
    #: The reference host (a serialized agent HostInfo) that job needs are fractions of; None if never set.
    reference: bytes | None = None
    #: The lease a coordinator of this state last granted each agent (seconds), by agent id; none: no lease.
    leases: dict[str, float] = field(default_factory=dict)


#: ``meta`` key prefix of the lease last granted to an agent (:meth:`Store.put_lease`).
_LEASE = "lease/"


def _spec_json(spec: JobSpec) -> str:
    fields = {"id": spec.id, "submit_time": spec.submit_time, "tasks": spec.tasks, "cpu_need": spec.cpu_need,
              "mem": spec.mem, "work": spec.work, "workload": spec.workload, "estimate": spec.estimate}
    if spec.name:  # (a store written before names were kept has none: JobSpec's default)
        fields["name"] = spec.name
    return json.dumps(fields)


def _file_identity(path: str) -> tuple[int, int] | None:
    """(st_dev, st_ino) of ``path``, or None if there is nothing there."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _cannot(exc: sqlite3.DatabaseError) -> str:
    """Why a state file cannot be used, from SQLite's error: the file's fault (damaged, not SQLite) or the
    machine's (a full disk or a read-only file system, where "not a usable vcemu state file" blamed the file)."""
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and any(
            why in text for why in ("disk is full", "readonly", "read-only", "disk I/O error", "unable to open")):
        return f"cannot be written here: {text}"
    return f"not a usable vcemu state file: {text}"


def _number(value: object, column: str, low: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= low):
        raise ValueError(f"{column}: must be a finite number >= {low:g}, got {value!r}")
    return float(value)


def _stored_job(row: tuple) -> StoredJob:
    """A ``jobs`` row as a StoredJob, each column checked as a submission is (:meth:`JobSpec.validate`): a row edited
    by hand or damaged (a spec of -3 tasks or a NaN need, a cpu of 'abc') was loaded, and the engine loop then failed
    at every turn, or ``vcemu jobs`` answered UNKNOWN (input review). ValueError naming the job and the column."""
    job, spec_text, request_id, state, hosts_text, cpu, vt, attempts, first_start, end, message = row
    try:
        spec = JobSpec(**json.loads(spec_text))
        state = JobState(state)
        try:  # an unfinished job's only: a finished one runs no more, and an older vcemu took specs a newer refuses
            if not state.finished:
                spec.validate()
        except ValueError as exc:
            raise RefusedSpec(job, state.value, str(exc)) from None
        if spec.id != job:
            raise ValueError(f"spec.id: {spec.id!r}, not the row's id")
        hosts = json.loads(hosts_text)
        if not (isinstance(hosts, list) and all(isinstance(h, str) for h in hosts)):
            raise ValueError(f"hosts: must be a list of host names, got {hosts_text!r}")
        if state in (JobState.RUNNING, JobState.PAUSED) and len(hosts) != spec.tasks:
            raise ValueError(f"hosts: a {state.value} job has one per task ({spec.tasks}), got {len(hosts)}")
        if _number(cpu, "cpu") > spec.cpu_need + 1e-9:
            raise ValueError(f"cpu: at most the job's need ({spec.cpu_need:g}), got {cpu!r}")
        _number(vt, "vt")
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
            raise ValueError(f"attempts: must be a whole number >= 0, got {attempts!r}")
        for value, column in ((first_start, "first_start"), (end, "end_time")):
            if value is not None:
                _number(value, column, -math.inf)
        if not isinstance(message, str):
            raise ValueError(f"message: must be text, got {message!r}")
    except RefusedSpec:
        raise
    except (ValueError, TypeError) as exc:  # (json.JSONDecodeError is a ValueError)
        raise ValueError(f"jobs row of {job!r}: {exc}") from None
    return StoredJob(spec, request_id, state, tuple(hosts), float(cpu), float(vt), attempts, first_start, end,
                     message)


class Store:
    """One SQLite file; thread-safe (one connection behind a lock)."""

    def __init__(self, path: str, synchronous: str = DEFAULT_SYNCHRONOUS, exclusive: bool = False) -> None:
        """``exclusive``: the owner's store (a coordinator's): claim the file for this process first
        (:func:`lock_state`), until :meth:`close`. Readers (tests, ``bench load``'s count) leave it out."""
        if synchronous.upper() not in SYNCHRONOUS:
            raise StoreError(f"synchronous: must be one of {', '.join(SYNCHRONOUS)}, got {synchronous!r}")
        self.path = path
        self._lock = threading.RLock()
        self._depth = 0
        _check_place(path)
        #: The lock file, if this store created it (it did not exist before the claim): removed again if the state
        #: file is refused (:meth:`_release`), so that a refused ``--state notes.txt`` leaves no ``notes.txt.lock``.
        self._created: str | None = None
        self._refused = False
        #: (st_dev, st_ino) of the state file and of its WAL as opened (:meth:`_check_identity`).
        self._identity: tuple[int, int] | None = None
        self._wal_identity: tuple[int, int] | None = None
        # Absolute (a relative --state read after a chdir named another file: "deleted or moved away"), and the WAL
        # beside the file a symlink names, where SQLite makes it (beside the link, none was ever seen: not checked)
        self._where, self._wal, self._closed = os.path.abspath(path), f"{os.path.realpath(path)}-wal", False
        #: (the state file gone) what the message says of the copy made of it (:meth:`_rescue`)
        self._rescued: str | None = None
        self._claim: int | None = None
        if exclusive:
            where = lock_path(path)
            fresh = not os.path.lexists(where)
            self._claim = lock_state(path)
            self._created = where if fresh else None
        try:
            self._open(path, synchronous)
            if self._created is not None and self._seq > 0:
                self._no_other_writer(path)
        except BaseException:
            self._refused = True
            self._release()
            raise

    def _no_other_writer(self, path: str) -> None:
        """(A coordinator's store, on a state file with jobs that no lock file claimed before: one a vcemu before
        2026-11-26 wrote, which takes no lock.) Refuse it if another process commits to it within
        :data:`UNLOCKED_WATCH_S`: an older coordinator still running on it (a running job's progress is journalled
        about once a second). Both took it, handed out the same job ids, and one of two acknowledged jobs was lost
        (upgrade review). An older coordinator that writes nothing meanwhile (no job running) is not seen."""
        before = self._db.execute("PRAGMA data_version").fetchone()[0]
        time.sleep(UNLOCKED_WATCH_S)
        if self._db.execute("PRAGMA data_version").fetchone()[0] != before:
            self._db.close()
            raise StoreError(f"--state {path}: another process is writing to it (a coordinator of an older vcemu, "
                             "which takes no lock?): stop it first, or give another --state")

    def _release(self) -> None:
        if self._claim is not None:
            if self._refused and self._created is not None:
                self._drop_lock_file(self._claim, self._created)
            os.close(self._claim)  # drops the flock
            self._claim = None

    @staticmethod
    def _drop_lock_file(fd: int, where: str) -> None:
        """Remove the lock file this store created, while it still holds its flock (so no other process holds
        it), and only if ``where`` is still that very file."""
        with contextlib.suppress(OSError):
            mine, there = os.fstat(fd), os.stat(where)
            if (mine.st_dev, mine.st_ino) == (there.st_dev, there.st_ino):
                os.unlink(where)

    def _open(self, path: str, synchronous: str) -> None:
        # A new state file is its owner's alone (security review: 0644, every job's spec readable by all); SQLite
        # gives its -wal and -shm files the state file's mode.
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        except FileExistsError:
            pass
        except OSError as exc:
            raise StoreError(f"--state {path}: cannot create it: {exc.strerror or exc}") from None
        try:
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            # Before anything is written to it: another program's SQLite file is refused as it is, not switched
            # to WAL and given vcemu's tables (and then failing on its own ``jobs`` table with a traceback).
            foreign = _foreign_tables(self._db)
            if foreign:
                self._db.close()
                raise StoreError(f"--state {path}: not a vcemu state file (it has other tables: {foreign}); "
                                 "give a new file or one an earlier vcemu run wrote")
            missing = _missing_tables(self._db)
            if missing:
                self._db.close()
                raise StoreError(f"--state {path}: a damaged vcemu state file: it has no table {missing} (a new "
                                 "one would be an empty run, every job of this one lost); restore it from a copy")
            written = self._db.execute("PRAGMA user_version").fetchone()[0]
            if written > STATE_FORMAT:
                self._db.close()
                raise StoreError(f"--state {path}: written by a newer vcemu (state file format {written}; this vcemu "
                                 f"reads format {STATE_FORMAT} at most): use that vcemu or a newer one on it, or give "
                                 "another --state (nothing was written to it)")
            damage = self._damage()
            if damage:
                self._db.close()
                raise StoreError(f"--state {path}: a damaged vcemu state file ({damage}); nothing was written to it: "
                                 "restore it from a copy")
            mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode.lower() != "wal":
                raise StoreError(f"--state {path}: cannot use WAL journaling (got {mode!r})")
            self._db.execute(f"PRAGMA synchronous={synchronous.upper()}")
            self._db.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
            self._db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
            self._db.executescript(SCHEMA)
            self._db.execute(f"PRAGMA application_id={APPLICATION_ID}")
            if written < STATE_FORMAT:
                self._db.execute(f"PRAGMA user_version={STATE_FORMAT}")
            self._seq = self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM jobs").fetchone()[0]
            if isinstance(self._seq, bool) or not isinstance(self._seq, int):  # (SQLite keeps any value in any column)
                bad = self._db.execute("SELECT id, seq FROM jobs WHERE typeof(seq) != 'integer' LIMIT 1").fetchone()
                raise StoreError(f"--state {path}: not a usable vcemu state file: a row it cannot take, edited or "
                                 f"damaged (jobs row of {bad[0]!r}: seq: must be a whole number, got {bad[1]!r})")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"--state {path}: {_cannot(exc)}") from None
        except UnicodeDecodeError as exc:  # (SQLite's message quotes a damaged schema's bytes)
            raise StoreError(f"--state {path}: not a usable vcemu state file: its schema is damaged ("
                             f"{exc})") from None
        self._identity = _file_identity(self._where)
        self._wal_identity = _file_identity(self._wal)

    def _damage(self) -> str:
        """What ``PRAGMA quick_check`` finds wrong in the tables a coordinator writes (their indexes too), or "". The
        load reads the tables' rows alone, not the indexes that every new job's row and request id are written to:
        a file with a damaged index page loaded, the coordinator said it restored every job and listened, and then
        refused every submission for good, "UNAVAILABLE: the coordinator cannot write its state file (database disk
        image is malformed) ... submit again once it can" (storage-fault review). The transitions, a record for
        analysis (their last page is read at the load), are left out: they may be many. 0.04 s for 100,000 jobs."""
        names = [n for n in _columns(self._db) if n != "transitions"]
        if self._db.execute("SELECT 1 FROM sqlite_master WHERE name='sqlite_sequence'").fetchone():
            names.append("sqlite_sequence")  # (the transitions' AUTOINCREMENT: written with every transition)
        for name in names:
            found = [r[0] for r in self._db.execute(f"PRAGMA quick_check('{name}')")]
            if found != ["ok"]:
                detail = "; ".join(found[:3]).replace("*** in database main ***\n", "").replace("\n", "; ")
                return f"table {name} or its indexes: {detail}"
        return ""

    def _check_identity(self) -> None:
        """(Before each outermost transaction.) Raise :class:`StateFileGone` if the state file's path, or its WAL's,
        no longer names the file this store has open: deleted (``rm``), moved, or replaced (a backup copied over
        it). Two ``stat`` calls a commit."""
        if self._closed:  # (SQLite says so: its WAL went at the close, no deletion under a running coordinator)
            return
        here = _file_identity(self._where)
        if here != self._identity:
            what = "deleted or moved away" if here is None else "replaced by another file"
            raise StateFileGone(f"{self.path} was {what} while this coordinator ran: nothing is written (nor "
                                f"acknowledged) any more. {self._rescue()}")
        wal = _file_identity(self._wal)
        if self._wal_identity is None:
            self._wal_identity = wal  # (created by the first write)
        elif wal != self._wal_identity:
            raise StateFileGone(f"{self.path}-wal, which holds the state file's latest commits, was deleted or "
                                "replaced while this coordinator ran: nothing is written (nor acknowledged) any "
                                "more; stop the coordinator (it writes the state file whole as it stops)")

    def _rescue(self) -> str:
        """(The state file gone.) A whole copy of what this store holds, made through its open connection (once; a
        failed copy is tried again at the next write): the file it has open (unlinked, or moved) lacks the commits
        still in the WAL (up to WAL_AUTOCHECKPOINT_PAGES), and a ``rm state.db*`` deletes that WAL too, so a copy
        of /proc/PID/fd/N of the file alone held none of them (review). Returns what the message says of it."""
        if self._rescued is not None:
            return self._rescued
        target = f"{self._where}.rescued-{os.getpid()}"
        try:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))  # (0600, as the state file)
            copy = sqlite3.connect(target)
            try:
                self._db.backup(copy)
            finally:
                copy.close()
        except (OSError, sqlite3.Error) as exc:
            return (f"A copy of what it wrote could not be made at {target} ({exc}); the file and its WAL are still "
                    f"open in process {os.getpid()}: make room there and send any request that writes to try "
                    "again, before stopping the coordinator (what the WAL holds is lost at the stop)")
        self._rescued = (f"Everything it wrote (its WAL's commits included) was copied to {target}: stop the "
                         f"coordinator, then move that copy to {self.path} and start it again")
        return self._rescued

    # ---- transactions ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """Group writes into one commit (nestable); rolled back if the block or its COMMIT raises. Nesting
        has no savepoints: what an inner block wrote is undone only with the outermost one, so a caller that
        catches an inner block's exception and goes on commits that block's writes so far (no caller does).

        Whatever happens, on the way out the nesting count is what it was and, at the outermost level, no
        SQLite transaction is left open: a COMMIT that fails (a full disk, an I/O error, a deferred
        constraint) leaves SQLite's transaction open, and every later BEGIN of this store would then fail.
        """
        with self._lock:
            outermost = self._depth == 0
            if outermost:
                self._check_identity()
                self._db.execute("BEGIN IMMEDIATE")
            self._depth += 1
            try:
                yield
                if outermost:
                    self._db.execute("COMMIT")
            except BaseException:
                if outermost and self._db.in_transaction:  # SQLite may have rolled back already
                    self._db.execute("ROLLBACK")
                raise
            finally:
                self._depth -= 1

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._db.close()
            self._release()

    # ---- writes ------------------------------------------------------------------------------------

    def epoch(self) -> float:
        """Wall-clock time of the coordinator's time 0; set on first use, kept across restarts."""
        with self.transaction():
            row = self._db.execute("SELECT value FROM meta WHERE key='epoch'").fetchone()
            if row is not None:
                return float(row[0])
            now = time.time()
            self._db.execute("INSERT INTO meta VALUES ('epoch', ?)", (repr(now),))
            return now

    def put_clock(self, now: float) -> None:
        """Record the coordinator's clock (``backend.now()``), so that a restart never starts it earlier (see
        :attr:`Loaded.clock`); written with the progress journal, about once a second, and at a clean stop."""
        with self.transaction():
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('clock', ?)", (repr(float(now)),))

    def put_job(self, spec: JobSpec, state: JobState, hosts: tuple[str, ...], cpu: float, vt: float,
                attempts: int, first_start: float | None, end: float | None, message: str) -> None:
        with self.transaction():
            updated = self._db.execute(
                "UPDATE jobs SET state=?, hosts=?, cpu=?, vt=?, attempts=?, first_start=?, end_time=?, message=? "
                "WHERE id=?", (state.value, json.dumps(hosts), cpu, vt, attempts, first_start, end, message, spec.id))
            if updated.rowcount == 0:
                self._seq += 1
                self._db.execute("INSERT INTO jobs VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", (
                    spec.id, self._seq, None, _spec_json(spec), state.value, json.dumps(hosts), cpu, vt, attempts,
                    first_start, end, message))

    def set_request(self, job: str, request_id: str) -> None:
        with self.transaction():
            self._db.execute("UPDATE jobs SET request_id=? WHERE id=?", (request_id, job))

    def add_transition(self, t: Transition) -> None:
        with self.transaction():
            self._db.execute("INSERT INTO transitions (time, job, src, dst, hosts, cpu, reason) VALUES (?,?,?,?,?,?,?)",
                             (t.time, t.job, t.src.value if t.src else None, t.dst.value, json.dumps(t.hosts),
                              t.cpu, t.reason))

    def put_tasks(self, job: str, restarts: int, tasks: list[StoredTask] | None) -> None:
        """Where a job's tasks are (None: it has none any more)."""
        with self.transaction():
            if tasks is None:
                self._db.execute("DELETE FROM tasks WHERE job=?", (job,))
            else:
                self._db.execute("INSERT OR REPLACE INTO tasks VALUES (?,?,?)", (
                    job, restarts, json.dumps([[t.task_id, t.host, t.progress, t.state, t.saved] for t in tasks])))

    def put_agent(self, agent_id: str, address: str, description: bytes) -> None:
        with self.transaction():
            self._db.execute("INSERT OR REPLACE INTO agents VALUES (?,?,?)", (agent_id, address, description))

    def keep_reference(self, host_info: bytes) -> None:
        """Record the reference host (a serialized agent HostInfo: the first host ever registered, whose
        capacity job needs are fractions of) unless one is recorded: a restarted coordinator must keep it, or
        its stored jobs' fractions would mean other amounts on hosts of different sizes."""
        with self.transaction():
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('reference', ?)", (host_info.hex(),))

    def put_lease(self, agent_id: str, lease_s: float) -> None:
        """Record the lease granted to an agent, before it is granted: a later coordinator of this state must wait
        it out before it declares that agent lost (:meth:`coordinator.service.CoordinatorServer._restore`), since the
        agent, silent, may still hold it. (A key of ``meta``: the agents table keeps its columns.)"""
        with self.transaction():
            self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (_LEASE + agent_id, repr(lease_s)))

    def drop_agent(self, agent_id: str) -> None:
        with self.transaction():
            self._db.execute("DELETE FROM agents WHERE agent_id=?", (agent_id,))
            self._db.execute("DELETE FROM meta WHERE key=?", (_LEASE + agent_id,))

    # ---- reads -------------------------------------------------------------------------------------

    def load(self, transitions: bool = True) -> Loaded:
        """Everything a restarting coordinator needs, in submission order; the transitions only if ``transitions``
        (a coordinator that keeps no history in memory does not read them: 500,000 took 4-5 s and 300 MB to load).
        A file damaged inside (a page overwritten, a row edited or damaged) is refused in one line naming it
        (StoreError), not a traceback."""
        try:
            return self._load(transitions)
        except sqlite3.DatabaseError as exc:
            self._refused = True  # (its lock file, if this store created it, goes at close)
            raise StoreError(f"--state {self.path}: {_cannot(exc)}") from None
        except RefusedSpec as exc:  # (before ValueError: an older vcemu's file, not a damaged one)
            self._refused = True
            raise StoreError(f"--state {self.path}: jobs row of {exc.job!r} ({exc.state}): spec.{exc.reason}: this "
                             "vcemu refuses it, and an older vcemu may have accepted it (else the row was edited or "
                             "damaged). Every job is still in the file: finish or cancel that job with the vcemu that "
                             "wrote it, then start this one on it again") from None
        except (ValueError, TypeError, KeyError, IndexError) as exc:  # (json.JSONDecodeError is a ValueError)
            self._refused = True
            raise StoreError(f"--state {self.path}: not a usable vcemu state file: a row it cannot take, edited or "
                             f"damaged ({type(exc).__name__}: {exc})") from None

    def _load(self, transitions: bool) -> Loaded:
        with self._lock:
            out = Loaded(epoch=self.epoch())
            for row in self._db.execute("SELECT id, spec, request_id, state, hosts, cpu, vt, attempts, first_start, "
                                        "end_time, message FROM jobs ORDER BY seq"):
                out.jobs.append(_stored_job(row))
            query = "SELECT time, job, src, dst, hosts, cpu, reason FROM transitions ORDER BY seq"
            if transitions:
                for row in self._db.execute(query):
                    out.transitions.append(Transition(row[0], row[1], JobState(row[2]) if row[2] else None,
                                                      JobState(row[3]), tuple(json.loads(row[4])), row[5], row[6]))
            # (not read: its root and last page are, so a damaged one is refused here as before, not at every write)
            last = self._db.execute(query + " DESC LIMIT 1").fetchall()
            row = self._db.execute("SELECT value FROM meta WHERE key='clock'").fetchone()
            times = itertools.chain((t for j in out.jobs for t in (j.spec.submit_time, j.first_start, j.end)),
                                    (r[0] for r in last), () if row is None else (float(row[0]),))
            out.clock = max((t for t in times if t is not None and math.isfinite(t)), default=0.0)
            if out.clock >= CLOCK_MAX:  # (a restarted clock would start there, and stand still: float spacing)
                raise ValueError(f"a time of {out.clock!r} s, past any this coordinator's clock could have reached")
            for job, restarts, tasks in self._db.execute("SELECT job, restarts, tasks FROM tasks"):
                out.tasks[job] = (restarts, [StoredTask(t[0], t[1], t[2], t[3], bool(t[4])) for t in json.loads(tasks)])
            out.agents = [(a, b, bytes(c)) for a, b, c in self._db.execute("SELECT * FROM agents")]
            row = self._db.execute("SELECT value FROM meta WHERE key='reference'").fetchone()
            out.reference = bytes.fromhex(row[0]) if row is not None else None
            for key, value in self._db.execute("SELECT key, value FROM meta WHERE key LIKE ?", (_LEASE + "%",)):
                out.leases[key[len(_LEASE):]] = float(value)
            return out
