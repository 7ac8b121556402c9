"""``vcemu vcsched`` against seed 002 (paper-fidelity review): the yield search's default tolerance (vcemu's: 002
Sec. 3.4 gives none, and 0.01, seed 001's, held MCB8 3% below the LP bound on the large set) and the refusal of a
stored run made with the old one; the LP row's average yield (its minimum yield: Sec. 3.1, 3.5), which Figs. 12,
16 and 20 plot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.optimize import linprog

from coordinator.policies.packing import PackJob, lp_bound
from coordinator.vcsched import experiment as vc
from tests.unit.test_vcsched_sessions import unfinished

#: One slack, one instance per specification, MCB8 only: 16 small instances, about a second.
ARGV = ["--set", "small", "--instances", "1", "--slacks", "0.3", "--jobs", "1", "--algorithms", "MCB8"]


def test_the_default_accuracy_is_0_001_and_its_help_says_it_is_vcemus() -> None:
    assert vc.ExperimentConfig().accuracy == 0.001 == vc.ACCURACY
    parser = vc._parser()
    assert parser.parse_args([]).accuracy == 0.001
    text = " ".join(parser.format_help().split())
    assert "default 0.001" in text and "vcemu's choice: 002 Sec. 3.4 gives no tolerance" in text
    assert "100 per large-set one, 10,800 in all" in text


def _finished_run(out: Path, capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, Any]:
    assert vc.vcsched_main([*ARGV, *flags, "--out", str(out)]) == 0
    capsys.readouterr()
    return json.loads((out / "config.json").read_text())


def test_a_stored_run_with_the_old_default_accuracy_is_another_runs_settings(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run made with 0.01 (the default before) is not mixed with one made with the default now: the rerun without
    ``--accuracy 0.01`` is refused, naming the flag, and ``--out`` is left as it was; with the flag it runs."""
    out = tmp_path / "out"
    conf = _finished_run(out, capsys, "--accuracy", "0.01")
    assert conf["accuracy"] == 0.01
    before = (out / "config.json").read_text()
    assert vc.vcsched_main([*ARGV, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "a finished run with other settings (--accuracy 0.01 stored, 0.001 now)" in err, err
    assert (out / "config.json").read_text() == before
    assert vc.vcsched_main([*ARGV, "--accuracy", "0.01", "--out", str(out)]) == 0
    assert "other settings" not in capsys.readouterr().err


@pytest.mark.parametrize("stored", ["missing", None])
def test_a_stored_config_without_an_accuracy_ran_with_the_old_default(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], stored: str | None) -> None:
    """A config.json with no ``accuracy`` (or null) is read as 0.01, the default every earlier vcsched ran with: the
    default now is other settings (refused), ``--accuracy 0.01`` the same ones (its unfinished journal resumed)."""
    out = tmp_path / "out"
    conf = _finished_run(out, capsys, "--accuracy", "0.01")
    old = {k: v for k, v in conf.items() if k != "accuracy"} if stored == "missing" else {**conf, "accuracy": None}
    (out / "config.json").write_text(json.dumps(old))
    assert vc.vcsched_main([*ARGV, "--out", str(out)]) == 2
    assert "other settings (--accuracy 0.01 stored, 0.001 now)" in capsys.readouterr().err
    unfinished(out, old)  # as a run killed after every instance leaves it
    assert vc.vcsched_main([*ARGV, "--out", str(out)]) == 2  # (its work kept: refused, not started over)
    assert "an unfinished run with other settings (--accuracy 0.01 stored, 0.001 now)" in capsys.readouterr().err
    assert vc.vcsched_main([*ARGV, "--accuracy", "0.01", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "resuming the unfinished run" in err and "16 of 16 instances kept" in err, err
    assert json.loads((out / "config.json").read_text())["accuracy"] == 0.01


def test_the_stored_config_as_now_fills_only_a_missing_accuracy() -> None:
    assert vc._stored_as_now({"sets": ["small"]})["accuracy"] == 0.01
    assert vc._stored_as_now({"sets": ["small"], "accuracy": None})["accuracy"] == 0.01
    assert vc._stored_as_now({"sets": ["small"], "accuracy": 0.005})["accuracy"] == 0.005
    assert vc._stored_as_now({"sets": ["small"], "accuracy": 0.001})["accuracy"] == 0.001


def _relaxation_average_yield(jobs: list[PackJob], hosts: int, y_min: float) -> float:
    """The Sec. 3.5 program on the Sec. 3.1 relaxation, solved directly: maximise the average yield over rational
    e_ij and alpha_ij (Eqs. 5-10) with every yield >= ``y_min`` (Eq. 11)."""
    J, H = len(jobs), hosts
    alpha = np.array([j.cpu_need for j in jobs])
    mem = np.array([j.mem for j in jobs])
    n = J * H  # variables: e (J x H), then a (J x H), row-major
    e = lambda i, j: i * H + j  # noqa: E731
    a = lambda i, j: n + i * H + j  # noqa: E731
    A_ub, b_ub, A_eq, b_eq = [], [], [], []

    def row() -> np.ndarray:
        return np.zeros(2 * n)

    for i in range(J):
        for j in range(H):  # Eq. 6: a_ij <= e_ij
            r = row()
            r[a(i, j)], r[e(i, j)] = 1.0, -1.0
            A_ub.append(r), b_ub.append(0.0)
        r = row()  # Eq. 7
        r[[e(i, j) for j in range(H)]] = 1.0
        A_eq.append(r), b_eq.append(1.0)
        r = row()  # Eq. 10
        r[[a(i, j) for j in range(H)]] = 1.0
        A_ub.append(r), b_ub.append(alpha[i])
        r = row()  # Eq. 11: sum_j a_ij / alpha_i >= Y
        r[[a(i, j) for j in range(H)]] = -1.0 / alpha[i]
        A_ub.append(r), b_ub.append(-y_min)
    for j in range(H):
        r = row()  # Eq. 8
        r[[a(i, j) for i in range(J)]] = 1.0
        A_ub.append(r), b_ub.append(1.0)
        r = row()  # Eq. 9
        for i in range(J):
            r[e(i, j)] = mem[i]
        A_ub.append(r), b_ub.append(1.0)
    c = row()
    for i in range(J):
        c[[a(i, j) for j in range(H)]] = -1.0 / alpha[i]
    res = linprog(c, A_ub=np.array(A_ub), b_ub=b_ub, A_eq=np.array(A_eq), b_eq=b_eq, bounds=(0.0, 1.0),
                  method="highs")
    assert res.status == 0, res.message
    return -res.fun / J


@pytest.mark.parametrize("seed", range(6))
def test_the_relaxations_average_yield_is_its_minimum_yield(seed: int) -> None:
    """The argument the LP row's average yield rests on, checked by solving the relaxation: with every yield at
    least the bound min(1, H / sum alpha), the hosts' CPU leaves no job room to rise above it."""
    rng = np.random.default_rng(seed)
    hosts, n = 3, int(rng.integers(4, 9))
    jobs = [PackJob(1, float(c), float(m)) for c, m in zip(rng.uniform(0.05, 1.0, n), rng.uniform(0.0, 0.5, n),
                                                          strict=True)]
    bound = lp_bound(jobs, hosts)
    if bound is None:
        pytest.skip("total memory does not fit")
    assert _relaxation_average_yield(jobs, hosts, bound) == pytest.approx(bound, abs=1e-7)


@pytest.mark.parametrize("parallel", [False, True])
def test_the_lp_rows_average_yield_is_its_minimum_yield(parallel: bool) -> None:
    cfg = vc.ExperimentConfig(sets=("small",), instances=1, algorithms=("MCB8",), slacks=(0.1, 0.5),
                              parallel_jobs=parallel)
    seen = set()
    for u in vc._units(cfg):
        (lp,) = [r for r in vc.run_instance(u, cfg) if r["algorithm"] == "LP"]
        assert lp["avg_yield"] == lp["min_yield"], lp
        seen.add(lp["failed"])
        if not lp["failed"]:
            assert 0.0 < float(lp["avg_yield"]) <= 1.0
    assert 0 in seen


def test_the_lp_has_an_average_yield_in_the_table_and_the_average_yield_figure(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    rows = []
    for algo, y in (("LP", 0.9), ("MCB8", 0.8)):
        for slack in (0.3, 0.6):
            rows.append({"set": "small", "hosts": 4, "tasks": 6, "slack": slack, "cv_mem": 0.25, "cv_cpu": 0.25,
                         "instance": 0, "algorithm": algo, "failed": 0, "min_yield": f"{y:.6f}",
                         "avg_yield": f"{y if algo == 'LP' else 0.85:.6f}", "seconds": "0.000100", "status": "",
                         "session": 1})
    (lp_line,) = [line for line in vc.overall_lines(rows, "small") if line.strip().startswith("LP")]
    assert "min 0.9000  avg 0.9000" in lp_line
    drawn: dict[str, Any] = {}
    monkeypatch.setattr(vc, "save_figure", lambda fig, path, **_k: drawn.setdefault(path.name, fig) and path)
    vc._plots(rows, tmp_path, "small", False, 0)
    labels = [line.get_label() for line in drawn["all_avg_yield.png"].axes[0].lines]
    assert labels == ["MCB8", "LP"]
    lp = drawn["all_avg_yield.png"].axes[0].lines[1]
    assert list(lp.get_ydata()) == [0.9, 0.9]
