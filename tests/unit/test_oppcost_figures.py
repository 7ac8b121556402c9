"""What ``vcemu oppcost``'s figures and report say beside their numbers (figures review): each figure names the
seeds, the thrashing factor, the flags given that change results and the machines' memory (a guess unless
``--memory`` was given); Figs. 3 and 4 and the printed report say whether the run shows 004's Table 2 orderings
(E-PVM below PVM, E-Mosix below Mosix, by execution). Drawn from small hand-made rows."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from coordinator.oppcost import experiment as oc
from tests.unit.figure_capture import note_of, record_figures

GUESS = "a guess, 004's Table 1 is not in our text"


def _row(k: int, seed: int, pvm: float, epvm: float, mosix: float, emosix: float, jobs: int = 10) -> dict[str, float]:
    row: dict[str, float] = {"execution": k, "seed": seed + k, "jobs": jobs}
    for name, mean in (("pvm", pvm), ("e-pvm", epvm), ("mosix", mosix), ("e-mosix", emosix)):
        row.update({f"{name}_mean": mean, f"{name}_sum": mean * jobs, f"{name}_migrations": 0})
    return row


def _rows(seed: int = 5) -> list[dict[str, float]]:
    """E-PVM below PVM in every execution (004's ordering); E-Mosix above Mosix on average (22.5 vs 4.5 by
    execution), below it in one execution of three."""
    return [_row(0, seed, 700.0, 60.0, 4.0, 5.0), _row(1, seed, 800.0, 70.0, 5.5, 60.0),
            _row(2, seed, 760.0, 70.0, 4.0, 2.5)]


def test_every_figure_names_its_seeds_beta_flags_and_memory_guess(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    figures = record_figures(monkeypatch, oc)
    cfg = oc.Config(executions=3, seed=5, beta=7.0, fit="migrations", scale="current", cost_load="effective")
    oc.plot(_rows(), tmp_path, 1000, cfg)
    assert len(figures) == 4
    for name, fig in figures.items():
        note = note_of(fig)
        assert "seeds 5-7" in note and "beta 7" in note, (name, note)
        assert "--fit migrations" in note and "--scale current" in note and "--cost-load effective" in note
        assert "128,128,64,64,32,32 MB" in note and GUESS in note


def test_memory_given_is_no_guess(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figures = record_figures(monkeypatch, oc)
    oc.plot(_rows(), tmp_path, 1000, oc.Config(executions=3, seed=5, memory=(256.0, 256.0, 128.0, 128.0, 64.0, 64.0)))
    for fig in figures.values():
        note = note_of(fig)
        assert "256,256,128,128,64,64 MB" in note and "--memory" in note and GUESS not in note
        assert "--fit" not in note and "--scale" not in note  # (defaults are not flags given)


def test_figs3_and_4_say_whether_the_run_shows_table2s_orderings(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    figures = record_figures(monkeypatch, oc)
    oc.plot(_rows(), tmp_path, 1000, oc.Config(executions=3, seed=5))
    fig3 = figures["fig3_pvm_vs_e-pvm.png"].axes[0].get_title()
    fig4 = figures["fig4_mosix_vs_e-mosix.png"].axes[0].get_title()
    assert "004 Table 2: E-PVM below PVM" in fig3 and "the executions shown: below" in fig3
    assert "004 Table 2: E-Mosix below Mosix" in fig4 and "the executions shown: above" in fig4
    assert "22.500 vs 4.500" in fig4
    assert "004" not in figures["fig5_mosix_vs_e-pvm.png"].axes[0].get_title()


@pytest.mark.parametrize(("means", "pvm", "mosix"), [
    # (pvm, e-pvm, mosix, e-mosix) per execution
    ([(700.0, 60.0, 4.0, 5.0), (800.0, 70.0, 5.5, 60.0), (760.0, 70.0, 4.0, 2.5)],
     "this run: below, as in 004 (66.667 vs 753.333; 3 of 3 executions below x = y)",
     "this run: above, unlike 004 (22.500 vs 4.500; 1 of 3 executions below x = y)"),
    ([(10.0, 20.0, 9.0, 3.0), (10.0, 30.0, 9.0, 1.0)],
     "this run: above, unlike 004 (25.000 vs 10.000; 0 of 2 executions below x = y)",
     "this run: below, as in 004 (2.000 vs 9.000; 2 of 2 executions below x = y)"),
])
def test_the_report_says_above_or_below_for_both_orderings(means: list[tuple[float, ...]], pvm: str, mosix: str,
                                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """The printed report, from ``vcemu oppcost`` itself, with its executions made up (and run in threads)."""
    rows = {k: _row(k, 1, *m) for k, m in enumerate(means)}
    rows[len(rows)] = _row(len(rows), 1, 1.0, 1.0, 1.0, 1.0, jobs=0)  # no job: left out of the orderings too

    def fake(cfg: oc.Config, k: int) -> dict[str, float]:
        return rows[k]

    monkeypatch.setattr(oc, "run_execution", fake)
    monkeypatch.setattr(oc, "ProcessPoolExecutor", lambda max_workers, initializer: ThreadPoolExecutor(max_workers))
    monkeypatch.setattr(oc, "save_figure", lambda fig, path, **_: Path(path))
    assert oc.oppcost_main(["--executions", str(len(rows)), "--jobs", "1", "--out", str(tmp_path / "oc")]) == 0
    out = capsys.readouterr().out.splitlines()
    table = next(i for i, line in enumerate(out) if line.startswith("executions won"))
    assert out[table + 1] == f"004 Table 2: E-PVM below PVM by execution; {pvm}"
    assert out[table + 2] == f"004 Table 2: E-Mosix below Mosix by execution; {mosix}"
    assert out[table + 3] == ("machine memory 128,128,64,64,32,32 MB (p2a,p2b,ppa,ppb,p1a,p1b): "
                              f"{GUESS} (--memory to change)")


def test_the_report_says_memory_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(oc, "run_execution", lambda cfg, k: _row(k, 1, 10.0, 5.0, 3.0, 2.0))
    monkeypatch.setattr(oc, "ProcessPoolExecutor", lambda max_workers, initializer: ThreadPoolExecutor(max_workers))
    monkeypatch.setattr(oc, "save_figure", lambda fig, path, **_: Path(path))
    assert oc.oppcost_main(["--executions", "2", "--jobs", "1", "--memory", "64,64,64,64,64,64",
                            "--out", str(tmp_path / "oc")]) == 0
    out = capsys.readouterr().out
    assert "machine memory 64,64,64,64,64,64 MB (p2a,p2b,ppa,ppb,p1a,p1b): as given (--memory)" in out
    assert GUESS not in out


def test_table2_ordering_says_equal_within_rounding_and_na_for_a_non_number() -> None:
    """Code review: 1.0 against 1.0 + 1e-12 was "above (1.000 vs 1.000)", and a NaN average "equal"."""
    from coordinator.oppcost.experiment import table2_ordering

    def row(pvm: float, epvm: float) -> dict[str, float]:
        return {"seed": 1, "jobs": 5, "pvm_mean": pvm, "e-pvm_mean": epvm}

    assert table2_ordering([row(1.0, 1.0 + 1e-12)], "pvm", "e-pvm").endswith(
        "this run: equal, unlike 004 (1.000 vs 1.000; 0 of 1 execution below x = y)")
    assert table2_ordering([row(1.0, float("nan"))], "pvm", "e-pvm").endswith("this run: n/a (nan vs 1.000)")
    assert "the executions shown: below" in table2_ordering([row(2.0, 1.0)], "pvm", "e-pvm", ";\n",
                                                             "the executions shown")


def test_an_interrupted_runs_figures_and_table_say_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Reproducibility review: a run stopped after 2 of 4 executions wrote table2.csv and Figs. 3-6 that looked
    final (only summary.json said "interrupted"). The figures' note says so, and each table2.csv row says over how
    many of the executions asked for."""
    import csv

    figures = record_figures(monkeypatch, oc)
    monkeypatch.setattr(oc, "run_execution", lambda cfg, k: _row(k, 1, 10.0, 5.0, 3.0, 2.0))
    monkeypatch.setattr(oc, "ProcessPoolExecutor", lambda max_workers, initializer: ThreadPoolExecutor(max_workers))
    real, taken = oc.as_completed, []

    def two_then_ctrl_c(*args, **kwargs):  # type: ignore[no-untyped-def]
        for f in real(*args, **kwargs):
            if len(taken) == 2:
                raise KeyboardInterrupt
            taken.append(f)
            yield f

    monkeypatch.setattr(oc, "as_completed", two_then_ctrl_c)
    out = tmp_path / "oc"
    assert oc.oppcost_main(["--executions", "4", "--jobs", "1", "--out", str(out)]) == 130
    assert figures and all(note_of(fig).startswith("INTERRUPTED: 2 of 4 executions finished; run the same command")
                           for fig in figures.values())
    with (out / "table2.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert {(r["executions"], r["requested_executions"]) for r in rows} == {("2", "4")}
    capsys.readouterr()
    figures.clear()
    monkeypatch.setattr(oc, "as_completed", real)
    assert oc.oppcost_main(["--executions", "4", "--jobs", "1", "--out", str(out)]) == 0  # resumed to the end
    assert figures and not any("INTERRUPTED" in note_of(fig) for fig in figures.values())
