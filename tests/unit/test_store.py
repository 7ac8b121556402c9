"""The durable store: what is committed survives a crash of the process that wrote it, and a coordinator
restarted on the file gets its jobs, request ids, tasks and clock back."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sqlite3
from pathlib import Path

import pytest

from coordinator.metrics import Transition
from coordinator.model import JobSpec, JobState
from coordinator.store import Store, StoredTask, StoreError


def spec(i: int) -> JobSpec:
    return JobSpec(f"job-{i:05d}", float(i), 1, 0.5, 0.1, 10.0, "dgemm")


def _write_then_die(path: str, n: int, ready) -> None:  # type: ignore[no-untyped-def]
    store = Store(path)
    for i in range(1, n + 1):
        with store.transaction():
            store.put_job(spec(i), JobState.PENDING, (), 0.0, 0.0, 0, None, None, "")
            store.add_transition(Transition(float(i), spec(i).id, None, JobState.PENDING, (), 0.0, "submitted"))
            store.set_request(spec(i).id, f"req-{i}")
    ready.set()
    os.kill(os.getpid(), signal.SIGKILL)  # no close, no checkpoint: as kill -9


def test_committed_jobs_survive_kill_9_of_the_writer(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    p = ctx.Process(target=_write_then_die, args=(path, 50, ready))
    p.start()
    p.join(30)
    assert p.exitcode == -signal.SIGKILL and ready.is_set()
    loaded = Store(path).load()
    assert [j.spec.id for j in loaded.jobs] == [spec(i).id for i in range(1, 51)]
    assert loaded.jobs[7].spec == spec(8) and loaded.jobs[7].request_id == "req-8"
    assert len(loaded.transitions) == 50 and loaded.transitions[0].dst is JobState.PENDING


def test_rolled_back_transaction_leaves_nothing(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    with pytest.raises(RuntimeError), store.transaction():
        store.put_job(spec(1), JobState.PENDING, (), 0.0, 0.0, 0, None, None, "")
        raise RuntimeError("refused")
    assert Store(str(tmp_path / "s.db")).load().jobs == []


def test_updates_tasks_agents_and_epoch_round_trip(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    store = Store(path)
    epoch = store.epoch()
    store.put_job(spec(1), JobState.PENDING, (), 0.0, 0.0, 0, None, None, "")
    store.put_job(spec(1), JobState.RUNNING, ("h0",), 0.4, 2.5, 1, 3.0, None, "")
    store.put_tasks("job-00001", 2, [StoredTask("job-00001/0.2", "h0", 0.25, 2, False)])
    store.put_tasks("job-00002", 0, [StoredTask("job-00002/0", "h1", 0.5, 2, False)])
    store.put_tasks("job-00002", 0, None)
    store.put_agent("a", "127.0.0.1:1", b"\x01\x02")
    store.close()
    loaded = Store(path).load()
    assert loaded.epoch == epoch
    (job,) = loaded.jobs
    assert (job.state, job.hosts, job.cpu, job.vt, job.attempts, job.first_start) == (
        JobState.RUNNING, ("h0",), 0.4, 2.5, 1, 3.0)
    assert loaded.tasks == {"job-00001": (2, [StoredTask("job-00001/0.2", "h0", 0.25, 2, False)])}
    assert loaded.agents == [("a", "127.0.0.1:1", b"\x01\x02")]
    mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_a_file_that_is_not_a_store_is_refused_by_name(tmp_path: Path) -> None:
    bad = tmp_path / "notes.txt"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="notes.txt"):
        Store(str(bad))
    with pytest.raises(StoreError, match="synchronous"):
        Store(str(tmp_path / "x.db"), synchronous="sometimes")


def test_a_failed_commit_is_rolled_back_and_later_transactions_work(tmp_path: Path) -> None:
    """A COMMIT that fails (here a deferred foreign key, checked only at COMMIT; in the field a full disk or
    an I/O error) leaves SQLite's transaction open: the store must roll it back and count no transaction
    open, or every later BEGIN fails ("cannot start a transaction within a transaction")."""
    path = str(tmp_path / "s.db")
    store = Store(path)
    store._db.executescript("PRAGMA foreign_keys=ON; CREATE TABLE parent (id INTEGER PRIMARY KEY);"
                            "CREATE TABLE child (p INTEGER REFERENCES parent(id) DEFERRABLE INITIALLY DEFERRED);")
    with pytest.raises(sqlite3.IntegrityError), store.transaction(), store.transaction():  # nested: one commit
        store.put_job(spec(1), JobState.PENDING, (), 0.0, 0.0, 0, None, None, "")
        store._db.execute("INSERT INTO child VALUES (42)")  # no parent 42: the COMMIT fails
    assert store._depth == 0 and not store._db.in_transaction
    with store.transaction():
        store.put_job(spec(2), JobState.PENDING, (), 0.0, 0.0, 0, None, None, "")
    store.put_agent("a", "127.0.0.1:1", b"")
    assert [j.spec.id for j in Store(path).load().jobs] == [spec(2).id]  # the failed one left nothing


def test_commits_are_fsynced_by_default(tmp_path: Path) -> None:
    """synchronous=FULL: a commit is on disk, not only in the page cache, before it returns (a power cut
    loses nothing acknowledged); the coordinator's store gets it without asking."""
    from coordinator.policies import get_policy
    from coordinator.service import CoordinatorServer

    full = 2  # PRAGMA synchronous's value for FULL
    assert Store(str(tmp_path / "a.db"))._db.execute("PRAGMA synchronous").fetchone()[0] == full
    server = CoordinatorServer(get_policy("greedy"), port=0, state=str(tmp_path / "b.db"))
    assert server.store is not None
    assert server.store._db.execute("PRAGMA synchronous").fetchone()[0] == full
    # and the live backend's progress journal commits (and syncs) once per poll, not once per job
    assert server.backend.journal_batch == server.store.transaction
    server.store.close()
    assert Store(str(tmp_path / "c.db"), "normal")._db.execute("PRAGMA synchronous").fetchone()[0] == 1


def test_another_programs_sqlite_file_is_refused_untouched(tmp_path):
    """``--state`` naming some other SQLite file (here one with a ``jobs`` table of its own) is refused with one
    line naming the file and its tables, before anything is written to it: it used to be switched to WAL and
    given vcemu's tables, then fail with a traceback on its own ``jobs`` table."""
    import sqlite3

    def sqlite_file(name: str, table: str) -> Path:
        path = tmp_path / name
        with contextlib.closing(sqlite3.connect(path)) as db:
            db.execute(f"CREATE TABLE {table}")
            db.commit()
        return path

    other = sqlite_file("other.db", "jobs (id TEXT, name TEXT)")
    with pytest.raises(StoreError, match=r"other\.db: not a vcemu state file \(it has other tables: jobs\)"):
        Store(str(other))
    db = sqlite3.connect(other)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")] == ["jobs"]
    db.close()
    # Nor one of tables that are none of vcemu's.
    unrelated = sqlite_file("unrelated.db", "photos (path TEXT)")
    with pytest.raises(StoreError, match=r"it has other tables: photos"):
        Store(str(unrelated))
    # Nor one that shares only a key/value ``meta`` table with vcemu's (as browsers' history files do).
    history = sqlite_file("History", "meta (key LONGVARCHAR NOT NULL UNIQUE PRIMARY KEY, value LONGVARCHAR)")
    with pytest.raises(StoreError, match=r"it has other tables: meta"):
        Store(str(history))
    # A new file and a vcemu state file are accepted, the latter again after a close, and also when it was
    # written before state files were marked (application_id 0).
    fresh = tmp_path / "fresh.db"
    Store(str(fresh)).close()
    Store(str(fresh)).close()
    with contextlib.closing(sqlite3.connect(fresh)) as db:
        db.execute("PRAGMA application_id=0")
        db.commit()
    Store(str(fresh)).close()


def test_the_lease_granted_to_each_agent_is_kept_until_the_agent_is_dropped(tmp_path: Path) -> None:
    """A restarted coordinator waits out the lease it last granted each agent it restores (one an agent that stays
    silent may still hold); the record is per agent and replaced by the next grant, so a long heartbeat used once
    does not lengthen every later restart's wait."""
    db = str(tmp_path / "s.db")
    s = Store(db)
    s.put_agent("a", "127.0.0.1:1", b"d")
    s.put_agent("b", "127.0.0.1:2", b"d")
    s.put_lease("a", 150.0)
    s.put_lease("a", 5.0)
    s.put_lease("b", 1.2)
    s.close()
    assert Store(db).load().leases == {"a": 5.0, "b": 1.2}
    s = Store(db)
    s.drop_agent("b")
    s.close()
    assert Store(db).load().leases == {"a": 5.0}


def test_a_jobs_user_name_is_kept_and_a_store_without_names_still_loads(tmp_path: Path) -> None:
    """``vcemu submit --file`` sends each job's id from the file as its name: kept across a restart on --state."""
    import dataclasses

    path = str(tmp_path / "s.db")
    store = Store(path)
    named = dataclasses.replace(spec(1), name="j0")
    with store.transaction():
        store.put_job(named, JobState.PENDING, (), 0.0, 0.0, 0, None, None, "")
        store.put_job(spec(2), JobState.PENDING, (), 0.0, 0.0, 0, None, None, "")
    store.close()
    with sqlite3.connect(path) as db:  # a job's row as a store written before names were kept has it
        [row] = db.execute("SELECT spec FROM jobs WHERE id=?", (spec(2).id,)).fetchall()
        assert '"name"' not in row[0]
    assert [j.spec for j in Store(path).load().jobs] == [named, spec(2)]


@pytest.mark.parametrize(("column", "value"), [("spec", "{not json"), ("state", "bogus"), ("tasks", "[[1,2]]")])
def test_a_row_no_vcemu_wrote_is_refused_in_one_line_naming_the_file(tmp_path: Path, column: str,
                                                                     value: str) -> None:
    """Fault-injection review: a tasks row of [[1,2]] gave an IndexError traceback, a bad spec or state a bare
    "Expecting property name..." or "'bogus' is not a valid JobState" that named no file."""
    path = str(tmp_path / "run.db")
    store = Store(path)
    store.put_job(JobSpec("job-1", 0.0, 1, 1.0, 0.1, 5.0), JobState.RUNNING, ("h0",), 1.0, 0.0, 1, 0.0, None, "")
    store.put_tasks("job-1", 0, [StoredTask("job-1/0", "h0", 0.5, 2, False)])
    store.close()
    with sqlite3.connect(path) as db:
        table = "tasks" if column == "tasks" else "jobs"
        db.execute(f"UPDATE {table} SET {column}=?", (value,))
    with pytest.raises(StoreError, match=rf"^--state {path}: not a usable vcemu state file: a row it cannot take"):
        Store(path).load()


def test_a_damaged_page_is_refused_in_one_line_whichever_it_is(tmp_path: Path) -> None:
    """Fault-injection review: zeroing one 4 KiB page gave a sqlite3.DatabaseError traceback from the load in 5
    pages of 10. Each page is zeroed in turn: the file loads, or is refused with a StoreError naming it."""
    path = tmp_path / "run.db"
    store = Store(str(path))
    for k in range(40):
        store.put_job(JobSpec(f"job-{k}", 0.0, 1, 1.0, 0.1, 5.0), JobState.DONE, ("h0",), 0.0, 5.0, 1, 0.0, 6.0, "x")
        store.add_transition(Transition(6.0, f"job-{k}", JobState.RUNNING, JobState.DONE, ("h0",), 1.0, "completed"))
        store.put_tasks(f"job-{k}", 0, [StoredTask(f"job-{k}/0", "h0", 1.0, 3, False)])
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    good = path.read_bytes()
    refused = 0
    for page in range(1, len(good) // 4096):  # (page 0 holds the header: a file SQLite does not know at all)
        path.write_bytes(good[: page * 4096] + bytes(4096) + good[(page + 1) * 4096:])
        try:
            damaged = Store(str(path))
        except StoreError as exc:
            assert str(exc).startswith(f"--state {path}: "), exc
            refused += 1
            continue
        try:
            damaged.load()
        except StoreError as exc:
            assert str(exc).startswith(f"--state {path}: "), exc
            refused += 1
        finally:
            damaged.close()
    assert refused > 0


@pytest.mark.parametrize("locked_before", [False, True])
def test_a_damaged_seq_is_refused_in_one_line_naming_the_file(tmp_path: Path, locked_before: bool) -> None:
    """Storage-fault review: one flipped bit in a jobs row's record header made its seq TEXT (SQLite keeps any value
    in any column); MAX(seq) was that text, and a coordinator started on the file with no lock file beside it (a
    copy) died with "TypeError: '>' not supported between instances of 'str' and 'int'"; with one, the next new
    job's ``self._seq += 1`` failed."""
    path = str(tmp_path / "run.db")
    store = Store(path, exclusive=True)
    store.put_job(spec(1), JobState.PENDING, (), 0.0, 0.0, 0, None, None, "")
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE jobs SET seq=?", ("\x0222",))
    if not locked_before:
        os.unlink(f"{path}.lock")
    with pytest.raises(StoreError, match=rf"^--state {path}: not a usable vcemu state file: .*job-00001.*seq"):
        Store(path, exclusive=True)


def test_a_schema_that_is_not_utf8_is_refused_naming_the_file(tmp_path: Path) -> None:
    """Storage-fault review: a flipped byte in the schema page (jobs' "NOT NULL" made "NOT NU\\x81L") gave "vcemu
    coordinator: error: 'utf-8' codec can't decode byte 0x81 in position 43: invalid start byte", naming no file:
    SQLite's "malformed database schema" message quotes the bytes, which Python could not decode."""
    path = tmp_path / "run.db"
    Store(str(path)).close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = path.read_bytes()
    head = data[:4096].replace(b"hosts TEXT NOT NULL", b"hosts TEXT NOT NU\x81L", 1)
    path.write_bytes(head + data[4096:])
    with pytest.raises(StoreError, match=rf"^--state {path}: not a usable vcemu state file"):
        Store(str(path), exclusive=True)


def test_a_damaged_index_page_is_refused_at_the_start_not_at_every_later_submission(tmp_path: Path) -> None:
    """Storage-fault review: a zeroed page of the jobs table's request-id or id index was not read by the load (it
    reads the rows): the coordinator said "restored 400 jobs" and listened, then refused every new job for good,
    "UNAVAILABLE: the coordinator cannot write its state file (database disk image is malformed): nothing was
    accepted; submit again once it can". Every page of those indexes is zeroed in turn: the file is refused."""
    path = tmp_path / "run.db"
    store = Store(str(path))
    for k in range(300):
        store.put_job(spec(k), JobState.PENDING, (), 0.0, 0.0, 0, None, None, "")
        store.set_request(spec(k).id, f"request-{k:05d}")
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = [r[0] for r in db.execute("SELECT pageno FROM dbstat WHERE name LIKE 'sqlite_autoindex_jobs_%'")]
    assert len(pages) > 2
    good = path.read_bytes()
    for page in pages:
        path.write_bytes(good[: (page - 1) * 4096] + bytes(4096) + good[page * 4096:])
        with pytest.raises(StoreError, match=rf"^--state {path}: a damaged vcemu state file \(table jobs"):
            Store(str(path), exclusive=True)
        path.write_bytes(good)
    Store(str(path), exclusive=True).close()  # (the sound file is taken)
