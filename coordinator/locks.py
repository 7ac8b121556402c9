"""Claiming a file for one process: an exclusive ``flock`` on a lock file that records the holder's pid.

A coordinator's ``--state`` (:func:`coordinator.store.lock_state`) and a sweep's ``--out``
(:func:`coordinator.sweep.out_lock`) take one each. The lock is the kernel's: it ends with the descriptor or the
process, however the process ends (a ``kill -9`` leaves the file, never the lock), and it is not inherited by the
processes a holder starts. The file itself stays: removing it would let a third process lock a new file while a
second still holds the old one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os

__all__ = ["NO_LOCKS", "Held", "claim"]

#: The errors of a file system that has no locks (NFS without its lock daemon): a caller may go on unlocked.
NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)


class Held(Exception):
    """Another process holds the lock; ``pid`` is the one it recorded ("" if none could be read)."""

    def __init__(self, path: str, pid: str) -> None:
        super().__init__(f"{path} is locked" + (f" by pid {pid}" if pid else ""))
        self.path, self.pid = path, pid


def claim(path: str | os.PathLike[str]) -> int:
    """Lock ``path`` (created if need be) for this process and record its pid there; return the descriptor, which
    holds the lock until it is closed. :class:`Held` if another process holds it; OSError if the file cannot be
    opened or locked (``errno`` in :data:`NO_LOCKS`: the file system has no locks)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            os.close(fd)
            raise
        try:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
        except OSError:
            holder = ""
        os.close(fd)
        raise Held(os.fspath(path), holder if holder.isdigit() else "") from None
    with contextlib.suppress(OSError):  # the pid is for a refused process's message: a courtesy only
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
