"""The figure helpers: labels of coinciding series, markers, the settings note."""

from __future__ import annotations

import math

from coordinator.figures import MARKERS, coinciding_labels, marker, settings_note


def test_a_series_equal_to_an_earlier_one_says_which() -> None:
    nan = math.nan
    series = {"MCB2": [(0.1, 0.5), (0.2, nan)], "MCB3": [(0.1, 0.5), (0.2, nan)], "MCB4": [(0.1, 0.5), (0.2, 0.6)],
              "MCB5": [(0.1, 0.5 + 1e-13), (0.2, 0.6)], "MCB6": [(0.1, 0.5)], "MCB7": [(0.2, 0.5), (0.3, nan)]}
    assert coinciding_labels(series) == {"MCB2": "MCB2", "MCB3": "MCB3 (= MCB2)", "MCB4": "MCB4",
                                         "MCB5": "MCB5 (= MCB4)", "MCB6": "MCB6", "MCB7": "MCB7"}
    assert coinciding_labels({}) == {}


def test_markers_differ_between_neighbouring_series_and_cycle() -> None:
    assert len({marker(i) for i in range(len(MARKERS))}) == len(MARKERS)
    assert marker(len(MARKERS)) == marker(0)


def test_the_settings_note_is_on_the_figure_and_leaves_it_room() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, _ = plt.subplots(figsize=(7, 4.5))
    rect = settings_note(fig, "seed 1, 20 executions\nmemory 128,128,64,64,32,32 MB")
    assert [t.get_text() for t in fig.texts] == ["seed 1, 20 executions\nmemory 128,128,64,64,32,32 MB"]
    assert rect[0] == 0.0 and 0.03 < rect[1] < 0.3 and rect[2:] == (1.0, 1.0)
    one = settings_note(plt.subplots(figsize=(7, 4.5))[0], "seed 1")
    assert one[1] < rect[1]
    plt.close("all")


def test_a_long_settings_line_is_wrapped_to_the_figures_width() -> None:
    """Code review: a sweep's note ran off the right edge of fig1.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, _ = plt.subplots(figsize=(6, 4))
    long = " ".join(f"word{i}" for i in range(60))
    rect = settings_note(fig, f"short\n{long}")
    (text,) = fig.texts
    lines = text.get_text().split("\n")
    assert lines[0] == "short" and len(lines) >= 4 and " ".join(lines[1:]) == long
    fig.canvas.draw()
    extent = text.get_window_extent()
    assert extent.x1 <= fig.bbox.x1, (extent, fig.bbox)  # inside the figure
    assert rect[1] > settings_note(plt.subplots(figsize=(6, 4))[0], "short")[1]
    plt.close("all")


def test_the_note_breaks_at_spaces_only_and_stays_inside_for_capitals() -> None:
    """Review: textwrap broke "DYNMCB8-STRETCH-PER" and "--backtrack-limit-large" at their hyphens, and a line of
    capitals passed the right edge (783 px of 600)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, _ = plt.subplots(figsize=(6, 4))
    line = " ".join(["DYNMCB8-STRETCH-PER --backtrack-limit-large WWWW"] * 8)
    settings_note(fig, line)
    (text,) = fig.texts
    assert all(w in ("DYNMCB8-STRETCH-PER", "--backtrack-limit-large", "WWWW") for w in text.get_text().split())
    fig.canvas.draw()
    assert text.get_window_extent().x1 <= fig.bbox.x1
    plt.close("all")
