"""The DFRS policies' names (seed 001 Sec. III–IV), importable without the policies themselves.

Importing :mod:`coordinator.policies` loads numba and scipy (about 1.7 s); the CLI's help and argument
checks, and the sweep's default algorithm list, need only the names. :mod:`coordinator.policies` keys its
registry by this tuple, and a unit test checks that each name builds the policy of that name.

A periodic policy's name may end in its period in seconds, as 001 Sec. III-B names them (DYNMCB8-PER-T):
``dynmcb8-asap-per-60`` repacks every 60 s. Without the suffix the period is 001's T = 600 s, and
``dynmcb8-per-600`` is the same policy as ``dynmcb8-per`` (one name, the plain one, so that results and
001's tables meet under it). 001 ran T = 60 and T = 3600 besides 600 (end of Sec. III-B); a live cluster
of jobs of seconds needs a period of seconds.
"""

from __future__ import annotations

import argparse
import re

__all__ = ["DEFAULT_PERIOD_S", "MAX_PERIOD_S", "MIN_PERIOD_S", "PERIODIC_NAMES", "POLICY_NAMES", "PolicyNameError",
           "canonical_name", "described", "period_name", "policy_order", "split_name", "thrashing"]

#: In 001 Table I's order: the batch baselines, GREEDY and its preemptive variants, then DYNMCB8's family.
POLICY_NAMES: tuple[str, ...] = (
    "fcfs", "easy", "greedy", "greedy-pmtn", "greedy-pmtn-migr",
    "dynmcb8", "dynmcb8-per", "dynmcb8-asap-per", "dynmcb8-stretch-per",
)
#: The policies that repack every T seconds, and so may carry a period suffix.
PERIODIC_NAMES: tuple[str, ...] = ("dynmcb8-per", "dynmcb8-asap-per", "dynmcb8-stretch-per")
DEFAULT_PERIOD_S = 600.0  # 001 Sec. III-B: "All our results are for a 10-minute scheduling period (T = 600)"
#: A period of a second at least (a simulated week is then 604,800 repackings) and at most about 31 years.
MIN_PERIOD_S = 1.0
MAX_PERIOD_S = 1e9
#: A period as written after the name: plain ASCII digits, a fraction and an exponent allowed (float() alone also
#: took "+60", "6_0", " 60" and other scripts' digits).
_PERIOD = re.compile(r"[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?")


class PolicyNameError(ValueError):
    """A policy name that is not one: the message names what is wrong and lists the names."""


def _known() -> str:
    return (f"known: {', '.join(sorted(POLICY_NAMES))} (the periodic ones may end in their period in seconds, "
            "e.g. dynmcb8-per-60)")


def split_name(text: str) -> tuple[str, float | None]:
    """(base name, period in seconds) of a policy name in any case; the period is None for a policy without
    one and 600 for a periodic one named without a suffix. Raises :class:`PolicyNameError`."""
    name = text.strip().lower()
    if name in POLICY_NAMES:
        return name, (DEFAULT_PERIOD_S if name in PERIODIC_NAMES else None)
    for base in PERIODIC_NAMES:
        if name.startswith(base + "-"):
            suffix = text.strip()[len(base) + 1:]  # (as given: "got 'T'", not "'t'")
            if not _PERIOD.fullmatch(suffix):
                raise PolicyNameError(f"policy {text!r}: the period after {base}- must be a number of seconds, "
                                      f"got {suffix!r}")
            period = float(suffix)
            if not MIN_PERIOD_S <= period <= MAX_PERIOD_S:
                raise PolicyNameError(f"policy {text!r}: the period must be {MIN_PERIOD_S:g} to {MAX_PERIOD_S:g} s, "
                                      f"got {suffix}")
            return base, period
    head, _, tail = name.rpartition("-")
    if head in POLICY_NAMES and _PERIOD.fullmatch(tail):
        raise PolicyNameError(f"policy {text!r}: {head} has no period; only {', '.join(PERIODIC_NAMES)} take one "
                              "(e.g. dynmcb8-per-60)")
    raise PolicyNameError(f"unknown policy {text!r}; {_known()}")


def described(name: str) -> str:
    """The name, with the period of a periodic policy said: jobs submitted between two repackings may wait up to
    a period (DYNMCB8-PER: all of them; ASAP-PER: those that do not fit at once), which a user should see."""
    base, period = split_name(name)
    return name if period is None else f"{name}, repacking every {_seconds(period)} s"


def thrashing(name: str, penalty: float) -> str | None:
    """Why a run of periodic policy ``name`` at rescheduling ``penalty`` may take very long or never end, or None.
    001 Sec. IV-A: "using periods shorter than the penalty leads to poor results due to job thrashing": a job
    paused or moved again before its penalty is over makes no progress (20 jobs on 8 hosts, penalty 300 s: 880
    preemptions and a max bounded stretch of 148 at T = 1 s, 7 and 3.9 at T = 600 s, and a review's 20 other jobs
    had not ended after a minute of simulating). Said, not refused: that poor result is 001's to reproduce."""
    period = split_name(name)[1]
    if period is None or period >= penalty:
        return None
    return (f"{name} repacks every {_seconds(period)} s, less than the {penalty:g}-s rescheduling penalty: jobs "
            "paused or moved again before their penalty is over thrash (001 Sec. IV-A), and the run may take very "
            "long or never end")


def policy_order(name: str) -> tuple[int, float]:
    """A sort key: 001 Table I's order, a periodic policy's other periods beside it (shortest first); a name this
    vcemu does not know (a hand-edited or newer sweep's config.json) last."""
    try:
        base, period = split_name(name)
    except PolicyNameError:
        return len(POLICY_NAMES), 0.0
    return POLICY_NAMES.index(base), period or 0.0


def period_name(base: str, period: float) -> str:
    """The name of periodic policy ``base`` at ``period`` seconds: the plain name at 600 s, else the name with
    the period as a whole number where it is one (``dynmcb8-per-60``), or as Python writes the float."""
    return base if period == DEFAULT_PERIOD_S else f"{base}-{_seconds(period)}"


def _seconds(period: float) -> str:
    """A period as a name and a message write it: whole where it is ("60"), else as Python writes the float."""
    return str(int(period)) if float(period).is_integer() else repr(float(period))


def canonical_name(text: str) -> str:
    """The one name of the policy ``text`` names (lower case; ``dynmcb8-per-600`` is ``dynmcb8-per``)."""
    base, period = split_name(text)
    return base if period is None else period_name(base, period)


def policy_name(text: str) -> str:
    """``--policy``'s type: the policy's one name (:func:`canonical_name`)."""
    try:
        return canonical_name(text)
    except PolicyNameError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: ``--policy``'s help: the names without importing the policies (numba, scipy), which ``--help`` need not wait for.
POLICY_HELP = (f"scheduling policy: {', '.join(POLICY_NAMES)}; a periodic one may end in its period in seconds, "
               f"{PERIODIC_NAMES[0]}-60 (001's DYNMCB8-PER-T; default T {DEFAULT_PERIOD_S:g}) (default %(default)s)")
