"""What the resumable commands (``vcemu oppcost``, ``vcemu vcsched`` and ``vcemu apc``) share so that a run killed
at any moment loses no finished work and leaves nothing running: an append-only CSV journal of finished rows that a
rerun with the same settings and the same code continues from, the comparison of a stored ``config.json`` with a
new run's (settings, and the source fingerprint of :mod:`vcemu.provenance`), and a pool initializer that ends
a worker when its parent dies.

The journal's lines are each flushed and fsynced as they are written, so a kill (or a power cut) leaves at most
its last line cut short; :func:`read_journal` drops that line, and each command checks every row it keeps.
"""

from __future__ import annotations

import contextlib
import csv
import ctypes
import functools
import io
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from vcemu.outputs import naming, stored_config, write_text
from vcemu.provenance import library_changes

__all__ = ["OUT_LOCK", "Journal", "changed_settings", "claim_out", "die_with_parent", "other_settings_refusal",
           "read_journal", "releasing_out_locks", "say_resumed", "settings_as_now", "stale_reason", "unfinished_rows"]

#: The lock file a resumable command holds in its ``--out`` while it runs (:func:`claim_out`), as ``vcemu sweep`` does.
OUT_LOCK = ".lock"


#: The descriptors of the ``--out`` locks this process holds (:func:`claim_out`), closed as the command's main
#: function returns (:func:`releasing_out_locks`): a main run in-process (tests) must not keep the folder locked.
_HELD: list[int] = []


def releasing_out_locks(main: Callable[[list[str]], int]) -> Callable[[list[str]], int]:
    """Decorate a command's main function: the ``--out`` locks it took (:func:`claim_out`) end when it returns."""
    @functools.wraps(main)
    def run(argv: list[str]) -> int:
        try:
            return main(argv)
        finally:
            while _HELD:
                os.close(_HELD.pop())
    return run


def claim_out(out: Path, command: str) -> int | None:
    """Lock ``out/.lock`` for this process (:func:`coordinator.locks.claim`) before it reads or writes anything
    in ``out``, so that one run at a time uses a results folder; the descriptor (held until the main function
    that took it returns, :func:`releasing_out_locks`), or
    None on a file system without locks (said on stderr). ValueError, one line naming the holder's pid, if another
    run holds it: two runs started together into one ``--out`` each found it empty, each wrote its own results
    there and both exited 0, the folder left holding whichever finished last (the other's settings were never
    refused, and its results were lost without a word: reproducibility review)."""
    from coordinator.locks import NO_LOCKS, Held, claim

    path = out / OUT_LOCK
    try:
        fd = claim(path)
    except Held as held:
        raise ValueError(f"another vcemu {command}{f' (pid {held.pid})' if held.pid else ''} is using {out}; wait "
                         "for it to end, or use another --out") from None
    except OSError as exc:
        if exc.errno not in NO_LOCKS:
            raise ValueError(f"--out {out}: cannot lock {path} ({exc.strerror or exc})") from None
        print(f"vcemu {command}: warning: --out {out}: cannot lock {path} ({exc.strerror or exc}); a second run "
              "into it at the same time would not be noticed", file=sys.stderr)
        return None
    _HELD.append(fd)
    return fd


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent() -> None:
    """Pool initializer: end this worker process when its parent dies. Without it a pool's workers outlive a
    SIGKILLed run (nothing else tells them), computing for nobody until their queued work runs out.

    On Linux the kernel sends SIGTERM (``prctl(PR_SET_PDEATHSIG)``); elsewhere, or if that call fails, a daemon
    thread polls ``os.getppid()`` once a second. SIGTERM gets its default action back, since a forked worker
    inherits its parent's Python handler (``vcemu oppcost`` turns SIGTERM into KeyboardInterrupt:
    :func:`vcemu.signals.signals_interrupt`).

    A forked worker also closes its copies of its parent's ``--out`` locks (:func:`claim_out`): the lock is the
    parent's, and must end with it, not with the last of its workers."""
    while _HELD:
        with contextlib.suppress(OSError):
            os.close(_HELD.pop())
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            armed = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
        if armed:
            if os.getppid() != parent:  # the parent died before the signal was armed: nobody will send it
                os._exit(1)
            return
    threading.Thread(target=_exit_when_orphaned, args=(parent,), name="die-with-parent", daemon=True).start()


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent and parent != 1:
        time.sleep(1.0)
    os._exit(1)


def changed_settings(old: Mapping[str, Any], new: Mapping[str, Any], ignore: Iterable[str]) -> list[str]:
    """The keys whose values differ between two ``config.json`` objects, leaving out ``ignore`` (settings that
    do not change results, such as the number of worker processes) and the code record (compared by
    :func:`stale_reason`). ``new`` is compared as JSON would store it (tuples as lists). Sorted."""
    import json

    from vcemu.provenance import KEY

    skip = {*ignore, KEY}
    new_json = json.loads(json.dumps(dict(new)))
    return sorted(k for k in set(old) | set(new_json) if k not in skip and old.get(k) != new_json.get(k))


def settings_as_now(old: dict[str, Any], as_now: Callable[[dict[str, Any]], dict[str, Any]] | None) -> dict[str, Any]:
    """A stored ``config.json`` object as this version would have written it (``as_now``, a command's own; None:
    as it is), through JSON as a new config is compared: a tuple ``as_now`` gives is a list again (an oppcost table
    given as a tuple never equalled the stored list; code review)."""
    import json

    return old if as_now is None else json.loads(json.dumps(as_now(old)))


def other_settings_refusal(out: Path, config: Mapping[str, Any], settings: Mapping[str, str], journal: str,
                           command: str, unordered: Iterable[str] = (),
                           as_now: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                           results: Iterable[str] = (),
                           shown: Mapping[str, Callable[[Any], str]] | None = None) -> str | None:
    """The line refusing a run into ``out`` when ``out/config.json`` records a run that holds work (finished, or
    with a row in its ``journal``) with other ``settings`` than ``config``, naming their flags; None otherwise.

    ``settings`` maps each config key a flag sets to that flag: only those are compared, and only where the stored
    config has them (an older vcemu's may lack one, and informational keys, such as the paper's reference or a
    derived cluster table, are no settings). ``unordered``: keys of lists compared as sets (an older vcsched stored
    ``--slacks`` in the order given). ``as_now``: the stored config as this version would have written it for the same
    command (vcsched now stores no large-set flags without the large set). No config.json, an unreadable one (without
    work beside it, see below), a run that
    finished nothing (stopped before its first result: its rerun with a corrected flag was refused, leaving nothing to
    keep), or other code alone: None, and the command goes on (starting over where it must, as a run of other code
    cannot be reused). Asked before anything in ``out`` is touched: a rerun with one flag changed removed an hour's
    finished instances, or a finished run's results (crash-and-resume review), where ``vcemu sweep`` refused.

    A config.json that cannot be read (damaged, cut short, not an object) beside work (a journal row, or one of
    ``results``, paths under ``out`` that a finished run leaves) is refused too: whether its settings are these
    cannot be told, and the run started over, replacing intact results (input review)."""
    import json

    old = stored_config(out)
    if old is None:
        if not (out / "config.json").exists():
            return None
        held = [name for name in (journal, *results) if _has_rows(out / name)]
        if not held:
            return None
        return (f"{command}: {out}/config.json cannot be read as a run's settings, and {out} holds results "
                f"({', '.join(held)}) that a run there would replace; give another --out, or remove {out} to "
                "replace it")
    old = settings_as_now(old, as_now)
    new = json.loads(json.dumps(dict(config)))
    loose = set(unordered)

    def same(key: str) -> bool:
        was, now = old[key], new.get(key)
        if key in loose and isinstance(was, list) and isinstance(now, list):
            return sorted(map(str, was)) == sorted(map(str, now))
        return was == now

    diff = [flag for key, flag in settings.items() if key in old and not same(key)]
    # A finished run's results are work too: an older vcemu's config.json may have no "complete" (vcsched's before
    # its journal), and a finished vcsched run keeps no journal: such a run, finished with other settings (vcsched's
    # old default --accuracy 0.01), was replaced without a word (upgrade review).
    held = [name for name in results if _has_rows(out / name)]
    finished = old.get("complete") is True or ("complete" not in old and bool(held))
    if not diff or not (finished or held or _has_rows(out / journal)):
        return None
    state = "a finished run" if finished else "an unfinished run"
    # Each flag with both values (upgrade review: a flag only named read as one the user gave, where only its default
    # had changed between versions, vcsched's --accuracy 0.01 -> 0.001), as vcemu sweep says them.
    keys: dict[str, list[str]] = {}
    for key, flag in settings.items():
        if key in old and not same(key):
            keys.setdefault(flag, []).append(key)
    # ``shown``: a key's value as its flag is given, where that is not the value itself (a flag that stores the
    # opposite of what it says, oppcost's --whole-memory-per-component, showed "False stored, True now" for a run
    # made with it, rerun without it); a boolean's flag is "given" or "not given" (--parallel-jobs False could not
    # be given).
    def as_given(key: str, value: Any) -> str:
        if shown is not None and key in shown:
            return shown[key](value)
        return ("given" if value else "not given") if isinstance(value, bool) else setting_shown(value)

    parts = [f"{flag} {as_given(ks[0], old[ks[0]])} stored, {as_given(ks[0], new.get(ks[0]))} now" if len(ks) == 1
             else flag for flag, ks in sorted(keys.items())]
    return (f"{command}: {out} holds {state} with other settings ({'; '.join(parts)}); give another --out, or "
            f"remove {out} to replace it")


def setting_shown(value: Any) -> str:
    """A setting's value as a refusal shows it: exact floats (repr: %g cut them to 6 digits), lists joined by commas,
    none for an absent one; cut at 60 characters (a machine table, a list of slacks)."""
    from vcemu.cliargs import clipped

    if value is None:
        text = "none"
    elif isinstance(value, list):
        text = ",".join(setting_shown(v) for v in value)
    else:
        text = repr(value) if isinstance(value, float) else str(value)
    return clipped(text, 60)


def _has_rows(path: Path) -> bool:
    """Whether the journal at ``path`` holds a row past its header."""
    try:
        with path.open("rb") as f:
            return f.readline() != b"" and f.readline() != b""
    except OSError:
        return False


def stale_reason(old: Mapping[str, Any], new: Mapping[str, Any], ignore: Iterable[str]) -> str | None:
    """Why the results recorded with ``config.json`` object ``old`` cannot be reused by a run with config ``new``:
    other settings (:func:`changed_settings`), other code (another source fingerprint, or none recorded: an older
    vcemu's), or both, as words that follow "a run"; None when they can."""
    from vcemu.provenance import fingerprint_of

    why = []
    if diff := changed_settings(old, new, ignore):
        why.append(f"with other settings ({', '.join(diff)})")
    was, now = fingerprint_of(old), fingerprint_of(new)
    if was != now:
        why.append("of other code (" + (f"source sha256 {was[:12]}" if was else "an older vcemu's, which recorded none")
                   + f"; this code's is {now[:12] if now else 'unknown'})")
    return " and ".join(why) or None


def read_journal(path: Path, fieldnames: Sequence[str]) -> tuple[list[dict[str, str]], int]:
    """The rows of the journal at ``path`` (strings, as written) and how many lines were dropped: a last line
    without its newline (cut short by a kill) and lines without exactly ``fieldnames``' fields. A journal
    with another header (another version's) gives no rows."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return [], 0
    dropped = 0
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
        dropped += 1
    try:
        lines = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error:  # a damaged line (a field over csv's limit, say): parsed alone, each such line dropped
        lines = []
        for physical in text.splitlines():
            try:
                lines += list(csv.reader([physical]))
            except csv.Error:
                dropped += 1
    if not lines or lines[0] != list(fieldnames):
        return [], dropped + max(0, len(lines) - 1)
    rows = []
    for line in lines[1:]:
        if len(line) == len(fieldnames):
            rows.append(dict(zip(fieldnames, line, strict=True)))
        else:
            dropped += 1
    return rows, dropped


def unfinished_rows(out: Path, journal: str, fieldnames: Sequence[str], config: Mapping[str, Any],
                    ignore: Iterable[str], command: str, held: str = "the journal of a run",
                    as_now: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
                    results: Iterable[str] = (),
                    ) -> tuple[list[dict[str, str]], int] | None:
    """The journal ``out/journal`` of a run with the same settings (``ignore`` aside) and the same code as
    ``config``: its rows and dropped lines as :func:`read_journal` gives them; ``([], 0)`` when there is no
    journal; None, with one line on stderr saying why (:func:`stale_reason`), when ``out/config.json`` is another
    run's or another code's, or unreadable: the caller then starts over. ``held``: what the line says ``out`` holds
    (a finished run's results, read as a journal, are no journal). ``as_now``: as :func:`other_settings_refusal`'s,
    and the same function (a config it passed as the same settings was "other settings" here, and the finished
    work was dropped). ``results``: paths under ``out`` that a finished run leaves: without a journal beside them, a
    finished run of other code is replaced saying so, as a journal of other code is (it was replaced silently)."""

    path = out / journal
    if not path.exists():
        held_results = [name for name in results if _has_rows(out / name)]
        stored = stored_config(out) if held_results else None
        if stored is not None and (why := stale_reason(settings_as_now(stored, as_now), config, ignore)):
            print(f"{command}: {out} holds the results of a finished run {why}; starting over", file=sys.stderr)
            return None
        return [], 0
    old = stored_config(out)
    if old is not None:
        old = settings_as_now(old, as_now)
    why = "with an unreadable config.json" if old is None else stale_reason(old, config, ignore)
    if why:
        print(f"{command}: {out} holds {held} {why}; starting over", file=sys.stderr)
        return None
    assert old is not None
    rows = read_journal(path, fieldnames)
    if rows[0] and (changes := library_changes(old, config)):
        print(f"{command}: note: {out} holds {held} computed with {'; '.join(changes)}: what it keeps is not "
              "computed again (the source is the same), so its results come from both", file=sys.stderr)
    return rows


def say_resumed(command: str, out: Path, kept: int, total: int, noun: str, dropped: int,
                dropped_what: str = "unreadable", source: str = "the unfinished run", carried: str = "",
                replaced: str = "") -> None:
    """The line a resumed run prints on stderr: what it keeps of ``source`` (:func:`unfinished_rows`' journal),
    what it drops (``dropped`` rows, ``dropped_what``; ``replaced``: what it drops for another reason, said
    apart), and ``carried``, what else it keeps (nothing at all when the journal held nothing)."""
    if kept or dropped or carried or replaced:
        print(f"{command}: resuming {source} in {out}: {kept} of {total} {noun} kept"
              + (f", {carried}" if carried else "")
              + (f", {replaced}" if replaced else "")
              + (f", {dropped} {dropped_what} rows dropped" if dropped else ""), file=sys.stderr)


class Journal:
    """An append-only CSV of finished rows. Opening it rewrites the file atomically with its header and
    ``kept`` (the rows a resumed run keeps, without the lines :func:`read_journal` dropped); each
    :meth:`append` is flushed and fsynced before it returns."""

    def __init__(self, path: Path, fieldnames: Sequence[str], kept: Iterable[Mapping[str, Any]] = ()) -> None:
        buf = io.StringIO(newline="")
        w = csv.DictWriter(buf, fieldnames=list(fieldnames), lineterminator="\n")
        w.writeheader()
        w.writerows(kept)
        write_text(path, buf.getvalue())
        self._file = path.open("a", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=list(fieldnames), lineterminator="\n")

    def append(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Write ``rows`` and wait until they are on disk."""
        with naming(self._file.name):
            self._writer.writerows(rows)
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self) -> None:
        with naming(self._file.name):  # (what a failed append left in its buffer, tried again: it fails again)
            self._file.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
