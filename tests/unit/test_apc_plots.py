"""``vcemu apc``'s figures as drawn: no point sits on an axes edge half cut off, and no legend covers data
(measured in display coordinates on the figures the command saves)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from coordinator.apc import experiment as apc
from coordinator.apc.sim import SimResult


def _record_figures(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The figures the command saves, by file name, drawn as saved (before it closes them)."""
    figures: dict[str, Any] = {}
    real = apc.save_figure

    def save(fig: Any, path: Path, **kw: Any) -> Path:
        done = real(fig, path, **kw)
        fig.canvas.draw()
        figures[Path(path).name] = fig
        return done

    monkeypatch.setattr(apc, "save_figure", save)
    return figures


def _legends(fig: Any) -> list[Any]:
    return [lg for lg in [*(ax.get_legend() for ax in fig.axes), *fig.legends] if lg is not None]


class _Units:
    """What experiment_two asks of its Units, with made-up finished simulations."""

    def __init__(self, jobs: dict[str, list[dict[str, Any]]]) -> None:
        self._jobs = jobs

    def has(self, key: str) -> bool:
        return True

    def run(self, key: str, *_: Any, **__: Any) -> apc.Finished:
        return apc.Finished(SimResult([], self._jobs[key], Counter(suspend=1)), 1.0)


def _exp2_jobs() -> dict[str, list[dict[str, Any]]]:
    """Distances to the goal spread over every goal factor's column from about -1e4 s to 2.66e4 s (the largest in
    a user's run, several jobs each), so that a legend inside an axes would cover some."""
    rng = np.random.default_rng(3)
    out = {}
    for iat in (200.0, 50.0):
        for algo in apc.ALGOS:
            jobs = []
            for factor in (1.3, 2.5, 4.0):
                ds = [-1e4, 2.66e4, 2.66e4, 2.66e4,
                      *(s * 10 ** e for s, e in zip(rng.choice([-1, 1, 1], 60), rng.uniform(1, 4.4, 60),
                                                     strict=True))]
                jobs += [{"id": f"j{len(jobs)}", "goal_factor": factor, "distance": float(min(d, 2.66e4)),
                          "met": float(d >= 0)} for d in ds]
            out[apc._key_two(iat, algo)] = jobs
    return out


def test_fig5_shows_every_point_whole_and_its_legend_covers_none(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The largest distances sat on the top edge, half cut off (the symlog axis had no margin), and the legend,
    inside an axes, covered the goal-factor-4 column."""
    figures = _record_figures(monkeypatch)
    apc.experiment_two(tmp_path, 0, 10, (200.0, 50.0), 600.0, apc.ALGOS, _Units(_exp2_jobs()))  # type: ignore[arg-type]
    fig = figures["fig5_distance.png"]
    points = []
    for ax in fig.axes:
        box = ax.get_window_extent()
        for coll in ax.collections:
            xy = ax.transData.transform(coll.get_offsets())
            radius = np.sqrt(coll.get_sizes().max()) / 2 * fig.dpi / 72  # (s is the marker's area in points^2)
            # a margin that shows: matplotlib's, 5 % of the data range in linear units, is a pixel or two on a
            # symlog axis
            gap = max(2 * radius, 0.02 * box.height)
            assert xy[:, 1].max() + gap <= box.y1 and xy[:, 1].min() - gap >= box.y0, ax.get_title()
            points.append(xy)
    assert len(points) == 2 * len(apc.ALGOS)
    legends = _legends(fig)
    assert legends
    for lg in legends:
        box = lg.get_window_extent()
        assert not any(box.contains(x, y) for xy in points for x, y in xy), "the legend covers points"


@pytest.mark.parametrize(("iats", "shown"), [
    ((100.0, 200.0), (200.0, 100.0)),  # only the 200 s panel was drawn (user review)
    ((75.0, 100.0, 150.0), (75.0, 100.0)),
    ((50.0, 75.0, 200.0, 400.0), (200.0, 50.0)),  # the paper's two
    ((400.0, 50.0), (50.0, 400.0)),
    ((300.0,), (300.0,)),
])
def test_fig5_shows_the_papers_inter_arrival_times_where_run_then_others_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, iats: tuple[float, ...], shown: tuple[float, ...]) -> None:
    figures = _record_figures(monkeypatch)
    jobs = {apc._key_two(iat, algo): [{"id": "j0", "goal_factor": 1.3, "distance": 10.0 * iat, "met": 1.0}]
            for iat in iats for algo in ("apc", "fcfs")}
    apc.experiment_two(tmp_path, 0, 1, iats, 600.0, ("apc", "fcfs"), _Units(jobs))  # type: ignore[arg-type]
    titles = [ax.get_title() for ax in figures["fig5_distance.png"].axes]
    assert titles == [f"Experiment Two, mean inter-arrival {iat:g} s" for iat in shown]
    assert apc.fig5_iats(iats) == list(shown)


def _exp3_cycles() -> list[dict[str, Any]]:
    """Experiment Three's cycles as a short run draws them: the long-running jobs' CPU rising from 23,400 MHz at
    the start, the transactional app's flat."""
    rows = []
    for name, _ in apc.EXP3_CONFIGS:
        web = 93_600.0 if "6 TA" in name else 130_000.0
        for k in range(10):
            rows.append({"config": name, "time": 600.0 * k, "web_rp": 0.66 if web > 1e5 else 0.29,
                         "hyp_rp_mean": 0.63 - 0.001 * k, "web_cpu_mhz": web,
                         "batch_cpu_mhz": 23_400.0 + 13_000.0 * k})
    return rows


@pytest.mark.parametrize("name", ["fig6_rp.png", "fig7_cpu.png"])
def test_figs6_and_7_legends_cover_no_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Fig. 7's legend, in the first panel's lower left, covered the start of the long-running line."""
    figures = _record_figures(monkeypatch)
    apc.plot_exp3(tmp_path, _exp3_cycles())
    fig = figures[name]
    samples = []
    for ax in fig.axes:
        for line in ax.get_lines():
            x, y = (np.asarray(v, dtype=float) for v in line.get_data())
            fine = np.linspace(0, len(x) - 1, 50 * len(x))  # along the segments, not just at the vertices
            samples.append(ax.transData.transform(np.column_stack([np.interp(fine, range(len(x)), x),
                                                                   np.interp(fine, range(len(y)), y)])))
    legends = _legends(fig)
    assert legends
    for lg in legends:
        box = lg.get_window_extent()
        assert not any(box.contains(x, y) for xy in samples for x, y in xy), "the legend covers a line"
