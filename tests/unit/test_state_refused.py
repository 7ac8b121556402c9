"""A refused ``--state`` (live review): no ``<state>.lock`` is left beside a file that is not a vcemu state file
(a text file, another program's SQLite file), and a missing directory or a directory is named as such, not as
"not a usable vcemu state file: cannot lock ..." or "cannot be written here: unable to open database file"."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

import pytest

from coordinator import store as store_module
from coordinator.locks import claim
from coordinator.store import Store, StoreError, lock_path


def test_a_text_file_is_refused_without_a_lock_file_left(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("some notes\n" * 100)
    with pytest.raises(StoreError, match="not a usable vcemu state file"):
        Store(str(notes), exclusive=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_foreign_sqlite_file_is_refused_without_a_lock_file_left(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE people (name TEXT)")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="not a vcemu state file"):
        Store(str(other), exclusive=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.sqlite"]


def test_a_lock_file_that_was_there_before_is_kept(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("some notes\n" * 100)
    Path(lock_path(str(notes))).write_text("")
    with pytest.raises(StoreError, match="not a usable vcemu state file"):
        Store(str(notes), exclusive=True)
    assert Path(lock_path(str(notes))).exists()


def test_a_lock_held_by_another_is_left_alone(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("some notes\n" * 100)
    fd = claim(lock_path(str(notes)))  # (as another coordinator would)
    try:
        with pytest.raises(StoreError, match="in use by another coordinator"):
            Store(str(notes), exclusive=True)
        assert Path(lock_path(str(notes))).exists()
    finally:
        os.close(fd)


def test_a_good_state_file_keeps_its_lock_file(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    Store(path, exclusive=True).close()
    assert Path(lock_path(path)).exists()


def test_a_missing_directory_is_named(tmp_path: Path) -> None:
    path = str(tmp_path / "nonexistent" / "dir" / "x.db")
    with pytest.raises(StoreError, match=r"directory .*nonexistent/dir does not exist") as err:
        Store(path, exclusive=True)
    assert "cannot lock" not in str(err.value)
    assert not (tmp_path / "nonexistent").exists()


def test_a_directory_is_named(tmp_path: Path) -> None:
    some = tmp_path / "some"
    some.mkdir()
    with pytest.raises(StoreError, match=rf"--state {some}: is a directory") as err:
        Store(str(some), exclusive=True)
    assert "unable to open" not in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["some"]


@pytest.mark.parametrize("err", [errno.EROFS, errno.ENOSPC, errno.EACCES, errno.EPERM])
def test_a_lock_file_that_cannot_be_written_is_the_machines_fault(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  err: int) -> None:
    """Storage-fault review: on a file system that turned read-only under a coordinator (ext4's errors=remount-ro
    after an I/O error), its restart said "--state run.db: not a usable vcemu state file: cannot lock run.db.lock:
    Read-only file system", blaming a sound state file (every job in it) for the machine's fault; the same with
    "Operation not permitted" in a directory made immutable (chattr +i)."""
    path = str(tmp_path / "s.db")
    Store(path, exclusive=True).close()

    def refuse(where: str) -> int:
        raise OSError(err, os.strerror(err), where)

    monkeypatch.setattr(store_module, "claim", refuse)
    expected = rf"--state {path}: cannot be written here: cannot lock .*{os.strerror(err)}"
    with pytest.raises(StoreError, match=expected) as refused:
        Store(path, exclusive=True)
    assert "not a usable" not in str(refused.value)
