"""One coordinator per ``--state`` (a review ran two on one file: both handed out job-00017, fought over the
agents, and one acknowledged job was lost). The owner's store holds an exclusive ``flock`` on ``<state>.lock``
for its life; a second owner is refused, naming ``--state`` and the holder's pid."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from coordinator.policies import get_policy
from coordinator.service import CoordinatorServer
from coordinator.store import Store, StoreError, lock_path


def test_a_second_owner_of_a_state_file_is_refused_until_the_first_closes(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    first = Store(path, exclusive=True)
    with pytest.raises(StoreError, match=rf"--state {path}: in use by another coordinator \(pid {os.getpid()}\)"):
        Store(path, exclusive=True)
    Store(path).load()  # a reader is not concerned
    first.close()
    Store(path, exclusive=True).close()  # free again
    assert Path(lock_path(path)).exists()


def test_a_second_coordinator_on_the_same_state_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    server = CoordinatorServer(get_policy("fcfs"), port=0, state=path).start()
    try:
        with pytest.raises(StoreError, match="in use by another coordinator"):
            CoordinatorServer(get_policy("fcfs"), port=0, state=path)
    finally:
        server.stop()
    CoordinatorServer(get_policy("fcfs"), port=0, state=path).start().stop()  # a restart after a stop


def test_a_coordinator_that_fails_to_start_lets_go_of_its_state(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A start that fails after the store was opened (here its restore): the claim must go with it, or a retry in
    the same process (a test, a wrapper that retries) would be refused for a coordinator that does not exist."""
    path = str(tmp_path / "s.db")

    def broken(self: CoordinatorServer, loaded: object) -> None:
        raise RuntimeError("restore failed")

    with monkeypatch.context() as m:
        m.setattr(CoordinatorServer, "_restore", broken)
        with pytest.raises(RuntimeError, match="restore failed"):
            CoordinatorServer(get_policy("fcfs"), port=0, state=path)
    CoordinatorServer(get_policy("fcfs"), port=0, state=path).start().stop()


def test_a_coordinator_whose_start_fails_lets_go_of_its_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for ``start()`` (its kernels' warm-up, its port): the lock was kept until the process ended."""
    import coordinator.service

    path = str(tmp_path / "s.db")

    def broken() -> float:
        raise RuntimeError("warm-up failed")

    with monkeypatch.context() as m:
        m.setattr(coordinator.service, "warm_kernels", broken)
        with pytest.raises(RuntimeError, match="warm-up failed"):
            CoordinatorServer(get_policy("fcfs"), port=0, state=path).start()
    CoordinatorServer(get_policy("fcfs"), port=0, state=path).start().stop()


def test_a_symlink_to_a_state_file_names_the_same_lock(tmp_path: Path) -> None:
    """The lock was taken beside the path as given: a symlink to the state file opened a second owner (review)."""
    path = tmp_path / "s.db"
    first = Store(str(path), exclusive=True)
    (tmp_path / "link.db").symlink_to(path)
    try:
        with pytest.raises(StoreError, match="in use by another coordinator"):
            Store(str(tmp_path / "link.db"), exclusive=True)
    finally:
        first.close()


@pytest.mark.parametrize("planted", ["symlink", "hardlink", "fifo"])
def test_a_lock_file_planted_as_a_link_is_refused_and_its_target_untouched(tmp_path: Path, planted: str) -> None:
    """Security review: ``<state>.lock`` was opened following a symbolic link and truncated for the pid, so a link
    planted beside a state file in a shared directory made a root coordinator overwrite the file it named. A lock
    file must be a plain file of its own: a link (or a hard link, or another file type) is refused, untouched."""
    path = str(tmp_path / "s.db")
    victim = tmp_path / "victim.txt"
    victim.write_text("important\n")
    {"symlink": lambda: os.symlink(victim, lock_path(path)), "hardlink": lambda: os.link(victim, lock_path(path)),
     "fifo": lambda: os.mkfifo(lock_path(path))}[planted]()
    why = {"symlink": "is a symbolic link", "hardlink": "is linked 2 times", "fifo": "is not a plain file"}[planted]
    with pytest.raises(StoreError, match=rf"--state {path}: .*cannot lock .*{why}"):
        Store(path, exclusive=True)
    assert victim.read_text() == "important\n"


def test_a_new_state_file_and_its_lock_are_their_owners_alone(tmp_path: Path) -> None:
    """Security review: the state (every job's spec, the agents' addresses) was created readable by all (0644)."""
    path = str(tmp_path / "s.db")
    store = Store(path, exclusive=True)
    try:
        modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    finally:
        store.close()
    assert modes["s.db"] == 0o600 and modes["s.db.lock"] == 0o600, modes
    assert {"s.db-wal", "s.db-shm"} <= set(modes) and all(m == 0o600 for m in modes.values()), modes
