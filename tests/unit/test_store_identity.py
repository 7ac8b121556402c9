"""The state file's identity check (a file deleted or replaced under a running coordinator): where it must not fire
(code review of session 42's fixes)."""
from __future__ import annotations

import os
import sqlite3

import pytest

from coordinator.store import StateFileGone, Store


def test_a_relative_state_path_survives_a_chdir(tmp_path, monkeypatch) -> None:
    """The check statted the path as given: after a chdir a relative --state names another (no) file, and
    every write was refused "deleted or moved away" though the file is where it was."""
    monkeypatch.chdir(tmp_path)
    store = Store("rel.db", exclusive=True)
    try:
        store.put_agent("a", "x", b"d")
        monkeypatch.chdir("/")
        store.put_agent("b", "x", b"d")
    finally:
        store.close()


def test_a_wal_deleted_beside_the_file_a_symlink_names_is_seen(tmp_path) -> None:
    """SQLite makes the WAL beside the file a symlink names; the check looked beside the link, found none,
    and never saw that WAL deleted."""
    real, link = tmp_path / "real.db", tmp_path / "link.db"
    link.symlink_to(real)
    store = Store(str(link), exclusive=True)
    try:
        store.put_agent("a", "x", b"d")
        assert os.path.exists(f"{real}-wal") and not os.path.exists(f"{link}-wal")
        os.unlink(f"{real}-wal")
        with pytest.raises(StateFileGone):
            store.put_agent("b", "x", b"d")
    finally:
        store.close()


def test_a_write_after_close_is_not_said_to_be_a_deleted_wal(tmp_path) -> None:
    """SQLite deletes the WAL at the close: a late writer (an engine loop that outlived stop()'s wait) was told the WAL
    "was deleted or replaced while this coordinator ran ... stop the coordinator"."""
    store = Store(str(tmp_path / "s.db"), exclusive=True)
    store.put_agent("a", "x", b"d")
    store.close()
    with pytest.raises(sqlite3.ProgrammingError):
        store.put_agent("b", "x", b"d")


def test_a_state_file_deleted_with_its_wal_is_rescued_whole(tmp_path) -> None:
    """Review: ``rm state.db*`` deletes the WAL too; the message said to copy /proc/PID/fd/N (the state file
    alone), which holds no commit not yet checkpointed: here not even the agent written."""
    path = str(tmp_path / "s.db")
    store = Store(path, exclusive=True)
    try:
        store.put_agent("a", "x", b"d")
        for name in ("s.db", "s.db-wal", "s.db-shm"):
            os.unlink(tmp_path / name)
        with pytest.raises(StateFileGone, match=r"copied to .*s\.db\.rescued-") as e:
            store.put_agent("b", "x", b"d")
        print(e.value)
    finally:
        store.close()
    copy = sqlite3.connect(f"{path}.rescued-{os.getpid()}")
    assert copy.execute("SELECT COUNT(*) FROM agents").fetchone()[0] == 1
