"""``vcemu apc``'s command line at its edges: the flags it refuses (each named on its own, before anything is
written in ``--out``) and the Experiment Two table it prints."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from coordinator.apc import experiment as apc

FLAGS = ("--seed", "--cycle", "--exp1-jobs", "--exp2-jobs", "--exp2-iats", "--exp2-algorithms", "--exp3-horizon",
         "--experiments", "--live-seconds", "--live-agent")


def _one_line(err: str, start: str) -> str:
    err = err.strip()
    assert err.startswith(start) and "\n" not in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize(("argv", "start"), [
    # numpy's SeedSequence refused it with a traceback, after config.json had recorded seed -1
    (["--seed", "-1"], "vcemu apc: --seed: must be >= 0, got -1"),
    (["--cycle", "0"], "vcemu apc: --cycle: must be a finite number > 0, got 0.0"),
    (["--cycle", "-5"], "vcemu apc: --cycle: must be a finite number > 0, got -5.0"),
    (["--exp1-jobs", "0"], "vcemu apc: --exp1-jobs: must be >= 1, got 0"),
    (["--exp2-jobs", "-3"], "vcemu apc: --exp2-jobs: must be >= 1, got -3"),
    (["--exp2-iats", "50,0"], "vcemu apc: --exp2-iats: must be finite numbers > 0, got 50,0"),
    # nothing to run: it wrote config.json and a summary.json of only the code record, and said "written to"
    (["--experiments", ""], "vcemu apc: --experiments: nothing to run, got ''"),
    (["--experiments", " , "], "vcemu apc: --experiments: nothing to run, got ' , '"),
    # each ran as often as given, its rows repeated in exp2_summary.csv and exp2_jobs.csv (APC review)
    (["--exp2-iats", "400,4e2,300"], "vcemu apc: --exp2-iats: each value once, got 400 more than once"),
    (["--exp2-algorithms", "fcfs,fcfs"], "vcemu apc: --exp2-algorithms: each value once, got fcfs more than once"),
    (["--experiments", "one,one"], "vcemu apc: --experiments: each value once, got one more than once"),
    (["--experiments", "One,1"], "vcemu apc: --experiments: each value once, got one more than once"),
    (["--experiments", "One,Four"], "vcemu apc: --experiments: unknown Four; known: one, two, three"),
    # flags of a part not run were taken as they came (APC review)
    (["--live-seconds", "-1", "--live"], "vcemu apc: --live-seconds: must be a finite number >= 2"),
    (["--exp3-horizon", "-1"], "vcemu apc: --exp3-horizon: must be a finite number > 0"),
    # without --live they were ignored, exit 0, and config.json recorded an agent no run used (user review)
    (["--live-seconds", "30"], "vcemu apc: --live-seconds: needs --live (without it no live experiment runs), got "
                               "30.0"),
    (["--live-seconds", "-1"], "vcemu apc: --live-seconds: needs --live"),
    (["--live-agent", "127.0.0.1:1"], "vcemu apc: --live-agent: needs --live (without it no live experiment runs), "
                                      "got 127.0.0.1:1"),
])
def test_a_bad_flag_is_refused_in_one_line_naming_it_alone_before_anything_is_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], start: str) -> None:
    """Each bad value gets its own line naming its flag and the value (one line named four flags together), exit 2,
    and --out is left as it was."""
    out = tmp_path / "out"
    assert apc.apc_main(["--experiments", "one", "--exp1-jobs", "5", *argv, "--out", str(out)]) == 2
    err = _one_line(capsys.readouterr().err, start)
    flag = argv[0]
    assert [f for f in FLAGS if f in err] == [flag], err
    assert not out.exists()


def test_a_refused_seed_leaves_an_earlier_run_in_out_as_it_was(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A refused --seed must not replace config.json (the next run there started over, 'other settings (seed)')."""
    out = tmp_path / "out"
    assert apc.apc_main(["--experiments", "one", "--exp1-jobs", "5", "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert apc.apc_main(["--experiments", "one", "--exp1-jobs", "5", "--seed", "-1", "--out", str(out)]) == 2
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    capsys.readouterr()
    assert apc.apc_main(["--experiments", "one", "--exp1-jobs", "5", "--out", str(out)]) == 0
    assert "starting over" not in capsys.readouterr().err


def _spans(line: str) -> list[tuple[int, int]]:
    return [m.span() for m in re.finditer(r"\S+", line)]


def test_the_experiment_two_table_sizes_its_columns_to_their_contents(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """``200 edf-repack   87.8 61``: the algorithm overflowed its 5-character column and pushed the row's numbers
    out of theirs. Every row's numbers now end where their heading does, and the algorithms start in one column."""
    rows = [{"inter_arrival_s": iat, "algorithm": algo, "met_pct": met, "placement_changes": changes}
            for iat in (50.0, 200.0) for algo, met, changes in
            (("apc", 87.8, 61), ("edf", 55.0, 3), ("fcfs", 100.0, 0), ("edf-repack", 87.8, 1234))]
    monkeypatch.setattr(apc, "experiment_two", lambda *a, **k: {"rows": rows})
    assert apc.apc_main(["--experiments", "two", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out.splitlines()
    start = out.index(next(line for line in out if "iat [s]" in line))
    head, body = out[start], out[start + 1:start + 1 + len(rows)]
    ends = [head.index(h) + len(h) for h in ("iat [s]", "met %", "changes")]
    for line, r in zip(body, rows, strict=True):
        spans = _spans(line)
        assert [line[a:b] for a, b in spans] == [f"{r['inter_arrival_s']:g}", r["algorithm"], f"{r['met_pct']:.1f}",
                                                 str(r["placement_changes"])], line
        assert [spans[0][1], spans[2][1], spans[3][1]] == ends, (head, line)
        assert spans[1][0] == head.index("algo"), (head, line)


def test_the_help_names_every_algorithm_experiment_two_runs_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    """The description said "(APC, EDF, FCFS)" while the default --exp2-algorithms runs edf-repack too."""
    with pytest.raises(SystemExit):
        apc.apc_main(["--help"])
    text = capsys.readouterr().out
    described = text[text.index("exp2_summary.csv"):text.index("exp3_cycles.csv")]
    assert all(algo in described for algo in apc.ALGOS), described


def test_an_empty_out_is_refused_not_taken_for_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """``--out ''`` wrote every result into the current directory (APC review)."""
    monkeypatch.chdir(tmp_path)
    assert apc.apc_main(["--experiments", "one", "--exp1-jobs", "2", "--out", ""]) == 2
    _one_line(capsys.readouterr().err, "vcemu apc: --out: must be a folder's path, got an empty one")
    assert list(tmp_path.iterdir()) == []


def test_experiment_one_reports_the_hypothetical_rp_of_the_cycles_with_an_empty_queue(tmp_path: Path) -> None:
    """003 Sec. 5.1's "when no jobs are queued, the hypothetical relative performance is 0.63": it was written as
    null (the first cycles, with no job, are NaN, and max() of a list starting with NaN is NaN)."""
    import json

    assert apc.apc_main(["--experiments", "one", "--exp1-jobs", "4", "--out", str(tmp_path)]) == 0
    one = json.loads((tmp_path / "summary.json").read_text())["one"]
    assert isinstance(one["hyp_rp_when_empty_queue"], float) and 0.5 < one["hyp_rp_when_empty_queue"] <= 0.64, one


@pytest.mark.parametrize("name", ["One", "1", "ONE"])
def test_an_experiment_is_named_in_any_case_or_by_its_number(tmp_path: Path, name: str) -> None:
    """User review: ``--experiments One`` and ``--experiments 1`` were refused as unknown."""
    out = tmp_path / "out"
    assert apc.apc_main(["--experiments", name, "--exp1-jobs", "5", "--out", str(out)]) == 0
    assert (out / "exp1_cycles.csv").exists() and not any(out.glob("exp2*")), sorted(p.name for p in out.iterdir())
    config = json.loads((out / "config.json").read_text())
    # (no live run, so no live length: 40.0 was recorded beside "live": false, as if it had run that long)
    assert config["live"] is False and config["live_seconds"] is None, config


def test_the_help_says_what_is_written_and_how_to_resume_without_the_journal_internals(
        capsys: pytest.CaptureFixture[str]) -> None:
    """User review: --help was 88 lines, most of them on journals, checkpoints and MAX_CARRIED."""
    with pytest.raises(SystemExit):
        apc.apc_main(["--help"])
    out = capsys.readouterr().out
    assert "exp1_cycles.csv" in out and "run the same command again" in out
    assert "MAX_CARRIED" not in out and "CHECKPOINT_SECONDS" not in out and "(both below)" not in out
    assert len(out.splitlines()) < 75  # (66 with the arguments wrapped: some ran to 200 characters)
