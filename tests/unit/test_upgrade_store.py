"""Upgrade review: a state file written by another version of vcemu.

A newer vcemu's file given to this one is refused before anything is written to it, naming the file and both formats
(an older vcemu given a file with job names failed with a TypeError traceback: there was no format mark to check).
An older vcemu's file that holds an unfinished job this version's checks refuse (a need below 1e-9 of a host, taken
before 2026-11-27) is refused naming that job and saying where the file comes from, not as "edited or damaged"."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest

from coordinator import store as state_store
from coordinator.model import JobSpec, JobState
from coordinator.store import Store, StoreError

#: (1 when the store had no such mark: these tests then fail, not their collection)
STATE_FORMAT = getattr(state_store, "STATE_FORMAT", 1)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_state_file_is_marked_with_its_format(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    Store(str(path)).close()
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA user_version").fetchone()[0] == STATE_FORMAT
    finally:
        db.close()


def test_a_newer_vcemus_state_file_is_refused_naming_it_and_left_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = Store(str(path))
    store.put_job(JobSpec("job-00001", 0.0, 1, 0.5, 0.1, 10.0), JobState.PENDING, (), 0.0, 0.0, 0, None, None, "")
    store.close()
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version={STATE_FORMAT + 1}")
    db.commit()
    db.close()
    before = _digest(path)
    with pytest.raises(StoreError) as refused:
        Store(str(path), exclusive=True)
    text = str(refused.value)
    assert text.startswith(f"--state {path}: written by a newer vcemu (state file format {STATE_FORMAT + 1}")
    assert f"reads format {STATE_FORMAT} at most" in text
    assert _digest(path) == before and not Path(f"{path}.lock").exists()


def test_an_older_vcemus_unfinished_job_this_one_refuses_is_named_not_called_damage(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = Store(str(path))
    tiny = JobSpec("job-00001", 0.0, 1, 1e-10, 0.1, 100.0)  # accepted by vcemu before 2026-11-27
    store.put_job(tiny, JobState.PENDING, (), 0.0, 0.0, 0, None, None, "")
    store.put_job(JobSpec("job-00002", 0.0, 1, 0.5, 0.1, 10.0), JobState.DONE, ("h0",), 0.0, 10.0, 0, 1.0, 11.0,
                  "completed")
    store.close()
    reopened = Store(str(path), exclusive=True)
    try:
        with pytest.raises(StoreError) as refused:
            reopened.load()
    finally:
        reopened.close()
    text = str(refused.value)
    assert "not a usable vcemu state file" not in text  # (it said so, as of a damaged file)
    assert f"--state {path}: jobs row of 'job-00001' (pending): spec.cpu_need: must be at least" in text
    assert "an older vcemu may have accepted it" in text and "finish or cancel that job" in text
    db = sqlite3.connect(path)
    try:  # every job still there, as it was
        assert db.execute("SELECT id, state FROM jobs ORDER BY seq").fetchall() == [("job-00001", "pending"),
                                                                                 ("job-00002", "done")]
    finally:
        db.close()
