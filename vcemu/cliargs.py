"""Argument types and helpers that every ``vcemu`` command shares.

Each type refuses a bad value with one line that argparse prefixes with the flag's name (a bad setting stops a
command before it starts anything); :class:`Parser` makes argparse's own refusals one line too.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from vcemu.limits import MAX_PENALTY_S, shown


def positive(name: str, kind=float, high: float | None = None, low: float | None = None):
    """An argparse type: a finite number > 0 of ``kind`` (int or float), and where given, at least ``low`` and at
    most ``high`` (each refused with the bound and why it is there left to the flag's help)."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"must be {what}, got {shown(text)}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        if low is not None and value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low:g}, got {text}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high:,g}, got {text}")
        return value

    return parse


#: The longest agent heartbeat interval ``up`` and ``coordinator`` take: at 1e308 s the deadlines computed from it
#: overflowed, and the coordinator's agent watch and the agents' registrars died (input review).
MAX_HEARTBEAT_S = 3600.0
#: The shortest: an agent answers within a few milliseconds when idle, but not while a burst of task starts holds
#: its lock or the machine is loaded; at 0.001 s agents were lost and registered again 156 times in 30 s, and at
#: 1e-300 the cluster never came up (input review).
MIN_HEARTBEAT_S = 0.25


def max_workers() -> int:
    """The most worker processes a simulation command (``--jobs`` of ``oppcost`` and ``vcsched``) takes: 4 per core.
    ``--jobs`` counts jobs in ``sweep``, ``demo`` and the benches, and ``oppcost --jobs 1000``, typed for those,
    started a thousand workers of about 50 MB each (README walk-through)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return 4 * (usable or 1)  # (the cores this process may use: a container's, not its host's)


def heartbeat_interval(text: str) -> float:
    value = positive("--heartbeat")(text)
    if value > MAX_HEARTBEAT_S:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_HEARTBEAT_S:g} s, got {text}")
    if value < MIN_HEARTBEAT_S:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_HEARTBEAT_S:g} s (an agent that does not answer "
                                         f"within 3 intervals is lost), got {text}")
    return value


def state_path(text: str) -> str:
    """A state file's path: not empty (``--state "$UNSET"`` ran with no state at all, and lost every job at a
    restart, without a word)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must be the path of the state file, got an empty one")
    return text


def penalty_seconds(text: str) -> float:
    """A rescheduling penalty: a finite number of seconds >= 0 (float() alone would take -10, nan and inf), at most
    :data:`~vcemu.limits.MAX_PENALTY_S`."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {shown(text)}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    if value > MAX_PENALTY_S:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_PENALTY_S:g} s (a job's longest work), got {text}")
    return value


#: For each command that writes its results straight into ``--out`` (and resumes from them there), a setting that
#: its ``config.json`` alone records: how a folder is told to hold another command's results.
RESULTS_MARKS = {"apc": "exp2_iats", "oppcost": "executions", "sweep": "penalties", "vcsched": "slacks"}


def others_results(out: Path, command: str) -> str | None:
    """The command of :data:`RESULTS_MARKS` other than ``command`` whose results ``out`` holds, by its
    ``config.json`` (None: none, or a file that cannot be read, which the command itself then judges)."""
    from vcemu.outputs import stored_config

    config = stored_config(out)
    if config is None:
        return None
    return next((c for c, key in RESULTS_MARKS.items() if c != command and key in config), None)


def usable_out_dir(path: str | os.PathLike[str], flag: str = "--out", command: str | None = None) -> Path:
    """Create the output directory ``path`` now and check that a file can be written in it, so that a long run
    never ends by failing to write its results. ValueError naming ``flag`` otherwise, and for an empty path, which
    ``Path`` takes for the current directory (the results went there). With ``command`` (a key of
    :data:`RESULTS_MARKS`, or another command that must not write among their results, such as ``simulate``),
    also if ``path`` holds another such command's results: each writes ``config.json`` and
    ``summary.json`` of its own there (``vcemu oppcost`` into an ``apc`` folder replaced both, and a rerun of
    ``apc`` there then started over)."""
    if not os.fspath(path).strip():
        raise ValueError(f"{flag}: must be a folder's path, got an empty one")
    out = Path(path)
    if out.exists() and not out.is_dir():  # (mkdir's "File exists" reads as if the directory were there)
        raise ValueError(f"{flag} {path}: cannot write results there: it is a file, not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".vcemu-write-check-"):
            pass
    except OSError as exc:
        raise ValueError(f"{flag} {path}: cannot write results there: {exc.strerror or exc}") from None
    if command is not None and (other := others_results(out, command)) is not None:
        raise ValueError(f"{flag} {path}: holds the results of vcemu {other} (its config.json); give another {flag}")
    return out


_ROLE = re.compile(r":[\w:.-]+:`~?([^`<]*?)\s*(?:<[^`>]*>)?`")


def doc_text(doc: str | None) -> str:
    """A docstring as plain text for ``--help``: reST markup (````x````, ``:mod:`x```) removed."""
    return _ROLE.sub(r"\1", doc or "").replace("``", "")


def doc_head(doc: str | None, paragraph: bool = False) -> str:
    """The first line of a docstring (``paragraph``: its first paragraph), for a parser's description; "" where
    there is none: ``python -OO`` (PYTHONOPTIMIZE=2) strips docstrings, and ``__doc__.splitlines()`` then failed
    every ``vcemu`` command with AttributeError before its parser was made (static type check review)."""
    if not doc:
        return ""
    return doc.split("\n\n")[0] if paragraph else doc.splitlines()[0]


def version() -> str:
    from vcemu.provenance import package_version

    return package_version() or "unknown (not installed)"


def whole_in(low: int, high: int):  # type: ignore[no-untyped-def]
    """An argparse type: a whole number in ``low..high``."""
    return _in_range(int, low, high, f"in {low}..{high}")


def number_in(low: float, high: float):  # type: ignore[no-untyped-def]
    """An argparse type: a number from ``low`` to ``high`` (NaN is in no range, infinity beyond any finite one)."""
    return _in_range(float, low, high, f"{low:g} to {high:g}")


def _in_range(kind: type, low: float, high: float, span: str):  # type: ignore[no-untyped-def]
    def parse(text: str):  # type: ignore[no-untyped-def]
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {'a whole number' if kind is int else 'a number'}, "
                                             f"got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be {span}, got {value if kind is int else text}")
        return value

    return parse


def tcp_port(text: str) -> int:
    """A TCP port, 0 meaning "pick a free one"; gRPC would silently wrap 99999 round to 34463."""
    return whole_in(0, 65535)(text)


def first_port(text: str) -> int:
    """The first of a range of ports (``up --agent-metrics-port``): 1..65535, not 0, which would give every agent
    a free port of its own choosing that ``up`` could not name."""
    value = tcp_port(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be in 1..65535 (agent i serves on BASE + i), got 0")
    return value


def dash_hint(message: str) -> str:
    """argparse's refusal ``message``, with a hint where it took a value for a flag: ``--cpu-need -inf`` says only
    "expected one argument" (a value starting with '-' that is not a plain negative number reads as an option)."""
    m = re.fullmatch(r"argument (--[\w-]+)(?:/[^:]*)?: expected one argument", message)
    if m is None:
        return message
    return f"{message} (missing, or a value that starts with '-': give it as {m.group(1)}=VALUE)"


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """Bad configuration stops start-up with one clear line naming the setting (exit status 2), not argparse's
        usage block before it (which took 11 lines of the terminal for one bad number)."""
        self.exit(2, f"{self.prog}: error: {dash_hint(message)} (see {self.prog} --help)\n")


def memory_size(text: str) -> int:
    from vcemu.sizes import parse_size

    return parse_size(text)


def per_host_values(conv):  # type: ignore[no-untyped-def]
    """``--x VALUE`` or ``--x V1,V2,...`` (one per host): a list of the comma-separated texts, each checked by
    ``conv`` (which must return a number > 0). The count is checked against ``--hosts`` by :func:`per_host`.
    A refusal does not name the flag: argparse puts "argument --x: " before it."""

    def parse(text: str) -> list[str]:
        parts = [x.strip() for x in text.split(",")]
        where = f" in {text!r}" if len(parts) > 1 else ""  # which of the values, when there are several
        for x in parts:
            try:
                value = conv(x)
            except ValueError:
                raise argparse.ArgumentTypeError(f"cannot parse {x!r}{where}") from None
            if not value > 0:
                raise argparse.ArgumentTypeError(f"must be > 0, got {x!r}{where}")
        return parts

    return parse


def per_host(flag: str, values: str | float | Sequence[str | float], hosts: int) -> list[str]:
    """One value per host from one value (every host) or a list of exactly ``hosts`` values; ValueError naming
    ``flag`` otherwise."""
    items = [str(v) for v in values] if isinstance(values, list | tuple) else [str(values)]
    if len(items) == 1:
        return items * hosts
    if len(items) != hosts:
        raise ValueError(f"argument {flag}: give one value or {hosts} (one per host), got {len(items)}")
    return items


def yield_text(y: float) -> str:
    """A yield in a table: two decimals, or three significant digits under 0.005, where two decimals showed a
    running job's small yield as 0.00, as if it got nothing (review of the simulation commands)."""
    return f"{y:.3g}" if 0 < y < 0.005 else f"{y:.2f}"


def clipped(text: str, n: int) -> str:
    """``text`` cut to ``n`` characters, its end shown as "..." when cut (a long value or message in a table)."""
    return text if len(text) <= n else text[:n - 3] + "..."


def format_table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def refuse(message: str) -> NoReturn:
    """A refused setting: one line on stderr, exit status 2 (as argparse's own refusals)."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


#: How the commands' logs on stderr (``vcemu agent: 2026-11-29T06:12:01 INFO ...``, ``vcemu up: ...``) give the time
#: of each line: local time to the second, the date too (a long run's log is matched against its metrics by it).
LOG_TIME = "%Y-%m-%dT%H:%M:%S"

#: The environment variable through which ``vcemu up`` (and ``demo``, ``replay``) hand the coordinator's token to the
#: agent processes they start: the token itself, not a file to read again; a user's own agents take ``--token-file``.
AGENT_TOKEN_ENV = "VCEMU_AGENT_TOKEN"


def read_token(path: str | None, flag: str = "--token-file") -> str | None:
    """The bearer token in ``--token-file`` (``path``; ``flag`` names it in a refusal), stripped; None without a
    file. An unreadable or empty file is refused (:func:`refuse`). The coordinator and its agents require it; the
    agents and clients send it."""
    if path is None:
        return None
    try:
        with open(path) as f:
            token = f.read().strip()
    except OSError as exc:
        refuse(f"vcemu: {flag} {path}: {exc.strerror}")
    if not token:
        refuse(f"vcemu: {flag} {path}: the file is empty")
    return token
