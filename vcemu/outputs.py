"""Writing result files so that a run killed at any moment never leaves one half-written, and an output
directory never pairs one run's config with another run's results.

Every result file (CSV, JSON, PNG) is written to a temporary file beside it and renamed over it
(``os.replace`` is atomic on POSIX within one file system): a reader sees the old file or the new one,
never a part. :func:`clear_outputs` removes the files a command is about to write again, so that a run
cut short, or one that writes fewer of them, does not leave the previous run's beside its own config.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import math
import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["clear_outputs", "naming", "new_run_dir", "save_figure", "write_bytes", "write_json", "write_text"]

_UMASK = os.umask(0)  # read once: os.umask can only be read by setting it
os.umask(_UMASK)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (a temporary file in the same directory, flushed to disk and
    renamed over ``path``). Returns the path."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with naming(target):
            os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes it 0600: give it the mode open() would have
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


@contextlib.contextmanager
def naming(path: str | os.PathLike[str]) -> Iterator[None]:
    """Give an OSError raised within that names no file (a write, flush or fsync's: ENOSPC, EIO, EDQUOT) ``path``, so
    that its one line says which file could not be written (storage-fault review: on a full disk, oppcost said
    "cannot write: no space left on the device", naming neither the file nor its folder)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None:
            exc.filename = os.fspath(path)
        raise


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """:func:`write_bytes` of ``text`` in UTF-8."""
    return write_bytes(path, text.encode())


def json_safe(obj: Any) -> Any:
    """``obj`` with every NaN or infinite float, at any depth of its dicts, lists and tuples, as None (null): they
    are not JSON, and tools such as jq refuse them. For the summaries a user reads with such tools; files this
    project reads back itself (sweep cells) keep them."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def write_json(path: str | os.PathLike[str], obj: Any, **dumps: Any) -> Path:
    """:func:`write_text` of ``json.dumps(obj, indent=2, sort_keys=True)`` (``dumps`` overrides those) and a newline."""
    return write_text(path, json.dumps(obj, **{"indent": 2, "sort_keys": True, **dumps}) + "\n")


def save_figure(fig: Any, path: str | os.PathLike[str], **savefig: Any) -> Path:
    """``fig.savefig(path, **savefig)`` atomically (the format is taken from ``path``'s suffix)."""
    target = Path(path)
    buf = io.BytesIO()
    fig.savefig(buf, format=savefig.pop("format", target.suffix.lstrip(".") or "png"), **savefig)
    return write_bytes(target, buf.getvalue())


def clear_outputs(out: str | os.PathLike[str], patterns: Iterable[str]) -> list[Path]:
    """Remove the files directly in ``out`` that match any of the glob ``patterns`` (the names a command
    writes), and temporary files left by an interrupted :func:`write_bytes`. Returns what was removed,
    sorted. Nothing else in ``out`` is touched."""
    root = Path(out)
    if not root.is_dir():
        return []
    gone: set[Path] = set()
    for pattern in (*patterns, ".*.tmp"):
        for p in root.glob(pattern):
            if p.is_file():
                p.unlink()
                gone.add(p)
    return sorted(gone)


def new_run_dir(parent: str | os.PathLike[str], name: str, started: float | None = None) -> Path:
    """Create and return a new directory for one run's results in ``parent`` (created if missing):
    ``YYYYmmdd-HHMMSS-name``, the local time ``started`` (a ``time.time()``, default now), so that names read as
    the run's start and sort by it (to the second: within one second, ``-10`` sorts before ``-2``). The
    directory is made with an exclusive ``mkdir``: a run that finds the name taken (another run of the same
    ``name`` started in the same second, even in another process) takes ``...-name-2``, ``-3``, ... instead,
    never another run's directory. A ``parent`` that exists as something else than a directory is a
    NotADirectoryError whose strerror says so ("is a file, not a directory"): mkdir's own FileExistsError
    ("File exists") reads as if the directory were there."""
    root = Path(parent)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # (exist_ok: raised only for a non-directory)
        what = "is a file, not a directory" if root.is_file() else "is not a directory"
        raise NotADirectoryError(errno.ENOTDIR, what, str(root)) from None
    base = f"{time.strftime('%Y%m%d-%H%M%S', time.localtime(time.time() if started is None else started))}-{name}"
    n = 1
    while True:
        path = root / (base if n == 1 else f"{base}-{n}")
        try:
            path.mkdir()
        except FileExistsError:
            n += 1
            continue
        return path


def stored_config(folder: Path) -> dict[str, Any] | None:
    """The ``config.json`` object a results folder holds, or None (none, unreadable, or not a JSON object): what
    a command reads to judge whether it may continue, reuse or replace the run there."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None
