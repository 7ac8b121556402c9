"""Claiming a file for one process: an exclusive ``flock`` on a lock file that records the holder's pid.

A coordinator's ``--state`` (:func:`coordinator.store.lock_state`) and a sweep's ``--out``
(:func:`coordinator.sweep.out_lock`) take one each. The lock is the kernel's: it ends with the descriptor or the
process, however the process ends (a ``kill -9`` leaves the file, never the lock), and it is not inherited by the
processes a holder starts. The file itself stays: removing it would let a third process lock a new file while a
second still holds the old one.

A lock file is only ever a plain file of its own: a symbolic link there, or a name of a file linked elsewhere too,
is refused, since the claim truncates the file to write its pid (security review: a link planted beside a state file
in a shared directory made a root coordinator overwrite the file it pointed to). It is made readable by its owner
only.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat

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
    opened or locked (``errno`` in :data:`NO_LOCKS`: the file system has no locks), or is not a plain file of its
    own (a symbolic link: ELOOP; another file type, or a file with other hard links: OSError saying so)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "it is a symbolic link (a lock file is a plain file: remove the link)") \
                from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(fd)
        what = "not a plain file" if not stat.S_ISREG(info.st_mode) else f"linked {info.st_nlink} times"
        raise OSError(errno.EPERM, f"it is {what} (a lock file is a plain file of its own: remove it)")
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
