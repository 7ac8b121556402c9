"""Upgrade review: a coordinator of a vcemu before 2026-11-26 takes no lock on its state file, so a coordinator of
this version started on that file while the older one still ran (on another port) took it too: both handed out
job-00002, and one of the two acknowledged jobs was lost from the file. A state file with jobs that no lock file
claimed is watched for another writer first, and refused if there is one."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from coordinator.model import JobSpec, JobState
from coordinator.store import Store, StoreError


def _older_run(path: Path) -> None:
    """A state file as an older vcemu left it: jobs, and no lock file beside it."""
    store = Store(str(path))
    store.put_job(JobSpec("job-00001", 0.0, 1, 0.5, 0.1, 500.0), JobState.RUNNING, ("h0",), 0.5, 1.0, 0, 0.0, None,
                  "")
    store.close()
    assert not Path(f"{path}.lock").exists()


def test_a_state_file_an_older_coordinator_still_writes_to_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    _older_run(path)
    stop = threading.Event()

    def journal() -> None:  # the older coordinator's progress journal, about once a second (faster here)
        db = sqlite3.connect(path)
        try:
            while not stop.wait(0.2):
                db.execute("UPDATE jobs SET vt = vt + 0.2")
                db.commit()
        finally:
            db.close()

    writer = threading.Thread(target=journal)
    writer.start()
    try:
        with pytest.raises(StoreError, match=f"--state {path}: another process is writing to it"):
            Store(str(path), exclusive=True)
    finally:
        stop.set()
        writer.join()
    assert not Path(f"{path}.lock").exists()  # (refused: it leaves no lock file it created)
    store = Store(str(path), exclusive=True)  # the older coordinator stopped: taken
    try:
        assert [j.spec.id for j in store.load().jobs] == ["job-00001"]
    finally:
        store.close()
