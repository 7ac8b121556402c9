"""What a figure of vcemu says beside its data: the settings that produced it, and which of its lines lie under
others. A figure is read apart from its ``config.json`` (pasted into a draft, sent to a colleague), so it names its
seed, sizes and the settings it depends on; and where two algorithms give the same values, the line drawn last
hides the other, which the legend still lists (figures review: MCB2 and MCB3 under MCB4, SG under SGB, EDF under
EDF-REPACK), so each series gets its own marker and a label saying which one it equals."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["MARKERS", "coinciding_labels", "count", "flags_given", "marker", "plain_log_ticks", "settings_note"]

#: Markers told apart at 3-6 points, one per series in order (:func:`marker`).
MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "<", ">", "h", "p")


def marker(i: int) -> str:
    """The marker of the ``i``-th series of a figure."""
    return MARKERS[i % len(MARKERS)]


def _same(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]], rel_tol: float) -> bool:
    if len(a) != len(b):
        return False
    for (xa, ya), (xb, yb) in zip(a, b, strict=True):
        if xa != xb:
            return False
        if math.isnan(ya) or math.isnan(yb):
            if not (math.isnan(ya) and math.isnan(yb)):
                return False
        elif not math.isclose(ya, yb, rel_tol=rel_tol, abs_tol=1e-12):
            return False
    return True


def coinciding_labels(series: Mapping[str, Sequence[tuple[float, float]]], rel_tol: float = 1e-9) -> dict[str, str]:
    """Each series' legend label, in the mapping's order: its name, followed by ``(= OTHER)`` when its (x, y)
    points are those of an earlier series (the first such), which it then hides where both are drawn. NaN equals
    NaN (a point neither has)."""
    labels: dict[str, str] = {}
    for name, points in series.items():
        twin = next((other for other in labels if _same(series[other], points, rel_tol)), None)
        labels[name] = name if twin is None else f"{name} (= {twin})"
    return labels


def settings_note(fig: Any, text: str, fontsize: float = 7.0) -> tuple[float, float, float, float]:
    """Write ``text`` (the settings that produced the figure, one or more lines) at its bottom left, in grey, each
    line wrapped to the figure's width at spaces only (a long one ran off its edge, and a break at a hyphen split
    flags and names: review); returns the ``rect`` to give ``fig.tight_layout`` so that the axes leave it room."""
    width_in, height_in = fig.get_size_inches()
    # A first guess from the font's average width (DejaVu Sans: about 0.55 em a letter, 0.64 a digit, 0.7 a capital),
    # then narrower while the drawn text still passes the figure's right edge
    fits = max(20, int(0.97 * width_in * 72 / (0.62 * fontsize)))
    while True:
        wrapped = "\n".join(textwrap.fill(line, fits, break_on_hyphens=False, break_long_words=False) if line else line
                            for line in text.split("\n"))
        note = fig.text(0.01, 0.01, wrapped, fontsize=fontsize, color="dimgray", ha="left", va="bottom")
        if fits <= 20 or note.get_window_extent(fig.canvas.get_renderer()).x1 <= fig.bbox.x1:
            break
        note.remove()
        fits = max(20, int(fits * 0.92))
    lines = wrapped.count("\n") + 1
    share = min(0.3, (lines * fontsize * 1.35 + 6) / 72 / height_in)
    return (0.0, share, 1.0, 1.0)


def flags_given(values: Mapping[str, Any], defaults: Mapping[str, Any], settings: Mapping[str, str],
                named: Sequence[str] = ()) -> list[str]:
    """The flags, of ``settings`` (config key -> flag), whose ``values`` differ from the ``defaults``, as a note
    gives them (``--search fast``, ``--milp-time-limit 5``, ``--parallel-jobs``): those a figure's note lists as
    "other flags given", less the keys it ``named`` otherwise and those with no value."""
    out = []
    for key, flag in settings.items():
        value = values.get(key)
        if key in named or value is None or value == defaults.get(key):
            continue
        out.append(flag if isinstance(value, bool) else f"{flag} {value:g}" if isinstance(value, float)
                   else f"{flag} {value}")
    return out


def plain_log_ticks(axis: Any) -> None:
    """Plain numbers on a log ``axis`` (0.2, 10, not 2x10^-1, 10^1), its minor ticks labelled where it spans few
    decades (judged when drawn): all of them below 0.6 decade, those at 2, 3 and 5 times a power of ten below 1.2
    decades, at 2 and 5 below 2.2, none beyond, where the major ticks suffice. Without them an axis spanning less
    than a decade showed one label, or none (oppcost's figures and vcsched's run times had a rule each)."""
    from matplotlib.ticker import FormatStrFormatter, Formatter

    class MinorLabels(Formatter):
        def __call__(self, x: float, pos: int | None = None) -> str:
            lo, hi = sorted(self.axis.get_view_interval())
            if not (x > 0 and lo > 0):
                return ""
            decades = math.log10(hi / lo)
            coeff = x / 10 ** math.floor(math.log10(x) + 1e-9)
            keep = range(2, 10) if decades < 0.6 else (2, 3, 5) if decades < 1.2 else (2, 5) if decades < 2.2 else ()
            return f"{x:g}" if round(coeff) in keep and abs(coeff - round(coeff)) < 1e-6 else ""

    axis.set_major_formatter(FormatStrFormatter("%g"))
    axis.set_minor_formatter(MinorLabels())


def count(n: int, word: str) -> str:
    """``1 slack``, ``9 slacks``: a count and its noun, plural but for one."""
    return f"{n} {word}{'' if n == 1 else 's'}"
