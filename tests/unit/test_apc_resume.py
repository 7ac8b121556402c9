"""``vcemu apc`` resumes a simulation from its checkpoint, not from its start, and to the same results."""

from __future__ import annotations

import csv
import errno
import json
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from coordinator.apc import experiment as apc
from coordinator.apc.sim import SimConfig, SimResult, SimState, simulate
from coordinator.apc.workloads import cluster, exp2_jobs, exp3_app, exp3_jobs
from coordinator.policies.apc import Costs
from coordinator.resumable import Journal


def _configs() -> list[tuple[str, SimConfig, list]]:
    """Short runs of each kind of simulation ``vcemu apc`` does: APC with costs and a transactional app, the
    static partition, EDF (sticky and repacking) and FCFS on a busy Experiment Two stream."""
    nodes = cluster(4)
    return [
        ("apc+app", SimConfig(nodes, "apc", 300.0, Costs(), apps=(exp3_app(),), horizon=3000.0), exp3_jobs(0)),
        ("static", SimConfig(nodes, "fcfs", 300.0, Costs(), apps=(exp3_app(),), static_app_nodes=("node00",),
                             horizon=3000.0), exp3_jobs(0)),
        *[(p, SimConfig(nodes, p, 300.0, Costs.none(), stop_after_completed=30), exp2_jobs(200, 0, 50.0))
          for p in ("edf", "edf-repack", "fcfs", "apc")]]


@pytest.mark.parametrize("name, cfg, jobs", _configs(), ids=[n for n, _, _ in _configs()])
def test_a_simulation_continued_from_a_saved_state_ends_as_the_uninterrupted_one(name: str, cfg: SimConfig,
                                                                                  jobs: list) -> None:
    """The simulator has no random numbers and nothing outside :class:`SimState` that carries from cycle to
    cycle: a run continued from the state saved (through JSON, as the checkpoint file holds it) after any cycle
    records exactly what the uninterrupted run records, in the same order."""
    saved: list[str] = []
    whole = simulate(cfg, jobs, checkpoint=lambda s: saved.append(json.dumps(s.to_json())))
    assert len(saved) == len(whole.cycles) >= 6
    for k in (1, len(saved) // 2, len(saved) - 2):
        rest = simulate(cfg, jobs, state=SimState.from_json(json.loads(saved[k]), cfg, jobs))
        assert json.dumps([rest.cycles, rest.jobs, rest.changes]) == json.dumps([whole.cycles, whole.jobs,
                                                                                  whole.changes])


def test_a_state_of_other_arrivals_is_refused() -> None:
    cfg = _configs()[0][1]
    saved: list[dict[str, Any]] = []
    simulate(cfg, exp3_jobs(0), checkpoint=lambda s: saved.append(json.loads(json.dumps(s.to_json()))))
    with pytest.raises(KeyError):
        SimState.from_json(saved[-1], cfg, exp2_jobs(5, 0, 50.0))


ARGV = ["--experiments", "three", "--cycle", "300", "--exp3-horizon", "3000"]  # 10 control cycles each


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _stopped_in_3(real: Callable[..., SimResult]) -> Callable[..., SimResult]:
    """:func:`coordinator.apc.sim.simulate` (``real``) interrupted (Ctrl-C) at the end of each simulation's 3rd
    control cycle, after its checkpoint callback (which saves, or not, as the run's CHECKPOINT_SECONDS says)."""
    def stop_in_3(cfg: SimConfig, jobs: list, progress: Any, state: SimState | None,
                  checkpoint: Callable[[SimState], None]) -> SimResult:
        def ck(s: SimState) -> None:
            checkpoint(s)
            if s.t >= 3 * cfg.T:
                raise KeyboardInterrupt
        return real(cfg, jobs, progress, state, ck)
    return stop_in_3


def _interrupted_with_a_checkpoint(out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run in ``out`` interrupted in its first simulation's 3rd cycle with a checkpoint at every cycle, and the
    next runs' settings: figures off (they take most of a run's time), and no new checkpoint that would overwrite
    the one left."""
    monkeypatch.setattr(apc, "CHECKPOINT_SECONDS", 0.0)
    monkeypatch.setattr(apc, "save_figure", lambda *_a, **_k: None)
    real = apc.simulate
    monkeypatch.setattr(apc, "simulate", _stopped_in_3(real))
    assert apc.apc_main([*ARGV, "--out", str(out)]) == 130
    monkeypatch.setattr(apc, "simulate", real)
    monkeypatch.setattr(apc, "CHECKPOINT_SECONDS", 3600.0)


def _journal_without_wall_times(out: Path) -> list[dict[str, Any]]:
    rows = []
    for r in _rows(out / apc.JOURNAL):
        data = json.loads(r["data"])
        if r["record"] == "end":
            data.pop("seconds")  # each run's own measured time
        rows.append({**r, "data": data})
    return rows


def test_a_run_interrupted_mid_simulation_continues_from_its_checkpoint_to_the_uninterrupted_outputs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Experiment Three's dynamic configuration, checkpointed after its 3rd and 6th cycles and interrupted in its
    8th: the rerun continues from the 6th (simulating cycles 7 to 10 only, not 1 to 10) and writes what an
    uninterrupted run writes, byte for byte, and the same journal rows (wall-clock times aside)."""
    ref, out = tmp_path / "ref", tmp_path / "out"
    assert apc.apc_main([*ARGV, "--out", str(ref)]) == 0
    monkeypatch.setattr(apc, "CHECKPOINT_SECONDS", 0.0)  # every cycle a checkpoint may be taken is
    real = apc.simulate
    simulated: list[float] = []  # the start of each cycle of the dynamic configuration simulated, in this process

    def interrupted(cfg, jobs, progress, state, checkpoint):  # type: ignore[no-untyped-def]
        def checkpoint_3_6_and_stop_in_8(s: SimState) -> None:
            simulated.append(s.t - cfg.T)
            if len(simulated) in (3, 6):
                checkpoint(s)
            if len(simulated) == 8:
                raise KeyboardInterrupt

        dynamic = cfg.policy == "apc"
        return real(cfg, jobs, progress, state, checkpoint_3_6_and_stop_in_8 if dynamic else checkpoint)

    monkeypatch.setattr(apc, "simulate", interrupted)
    capsys.readouterr()
    assert apc.apc_main([*ARGV, "--out", str(out)]) == 130
    assert "its last checkpoint" in capsys.readouterr().err
    saved = json.loads((out / apc.CHECKPOINT).read_text())
    assert saved["unit"] == "exp3 dynamic" and saved["state"]["t"] == 6 * 300.0
    assert saved["settings"] == {"seed": 0, "cycle": 300.0, "exp3_horizon": 3000.0}
    assert saved["code"] == json.loads((out / "config.json").read_text())["code"]["source_sha256"]

    def watched(cfg, jobs, progress, state, checkpoint):  # type: ignore[no-untyped-def]
        def log(s: SimState) -> None:
            if cfg.policy == "apc":
                simulated.append(s.t - cfg.T)
            checkpoint(s)
        return real(cfg, jobs, progress, state, log)

    monkeypatch.setattr(apc, "simulate", watched)
    simulated.clear()
    assert apc.apc_main([*ARGV, "--out", str(out)]) == 0
    assert "exp3 dynamic: continuing from its checkpoint, 6 control cycles in" in capsys.readouterr().err
    assert simulated == [t * 300.0 for t in range(6, 10)]
    assert not (out / apc.CHECKPOINT).exists()  # removed once the simulation is journalled
    names = sorted(p.name for p in ref.iterdir())
    assert sorted(p.name for p in out.iterdir()) == names
    for name in ("exp3_cycles.csv", "fig6_rp.png", "fig7_cpu.png", "summary.json"):
        assert (out / name).read_bytes() == (ref / name).read_bytes(), name
    assert _journal_without_wall_times(out) == _journal_without_wall_times(ref)


def test_a_checkpoint_of_other_settings_or_code_is_not_continued(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint is continued only by the simulation it is of: not by one with another horizon (the run
    starts that simulation over and leaves the checkpoint alone), and not after the code changed (the run starts
    over, and the checkpoint goes with the journal)."""
    out = tmp_path / "out"
    _interrupted_with_a_checkpoint(out, monkeypatch)
    saved = (out / apc.CHECKPOINT).read_text()
    capsys.readouterr()
    assert apc.apc_main([*ARGV[:-1], "2400", "--out", str(out)]) == 0  # another horizon: its own simulation
    assert "from its checkpoint" not in capsys.readouterr().err
    assert (out / apc.CHECKPOINT).read_text() == saved  # still there for a run that needs it
    conf = json.loads((out / "config.json").read_text())
    conf["code"]["source_sha256"] = "0" * 64
    (out / "config.json").write_text(json.dumps(conf))
    assert apc.apc_main([*ARGV, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "of other code" in err and "from its checkpoint" not in err
    assert not (out / apc.CHECKPOINT).exists()


def test_the_journal_keeps_a_bounded_number_of_simulations_a_run_does_not_need_those_used_last(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        simulations: list[str]) -> None:
    """Each ``--exp2-iats`` is its own simulation: without a bound, a journal rerun with ever other values holds
    them all. It keeps :data:`MAX_CARRIED` (here 2) besides the run's own, dropping the one used longest ago (not
    the oldest: a reused simulation is used anew)."""
    monkeypatch.setattr(apc, "MAX_CARRIED", 2)
    out = tmp_path / "out"
    ran = simulations
    monkeypatch.setattr(apc, "save_figure", lambda *_a, **_k: None)  # (the figures take most of a run's time)

    def run(iat: int) -> list[str]:
        """The simulations a run of Experiment Two at ``iat`` runs (not reused from the journal)."""
        ran.clear()
        argv = ["--experiments", "two", "--exp2-jobs", "5", "--exp2-algorithms", "fcfs", "--exp2-iats", str(iat)]
        assert apc.apc_main([*argv, "--out", str(out)]) == 0
        return list(ran)

    def journal() -> list[str]:
        return [r["unit"] for r in _rows(out / apc.JOURNAL) if r["record"] == "end"]

    for iat in (100, 200, 300):
        assert run(iat) == [f"exp2 fcfs iat={iat:.1f}"]
    assert journal() == ["exp2 fcfs iat=100.0", "exp2 fcfs iat=200.0", "exp2 fcfs iat=300.0"]
    assert run(100) == []  # reused: now the one used last
    assert journal() == ["exp2 fcfs iat=200.0", "exp2 fcfs iat=300.0", "exp2 fcfs iat=100.0"]
    capsys.readouterr()
    assert run(400) == ["exp2 fcfs iat=400.0"]
    assert "2 more kept for later runs (not in this one), 1 used longer ago dropped" in capsys.readouterr().err
    assert journal() == ["exp2 fcfs iat=300.0", "exp2 fcfs iat=100.0", "exp2 fcfs iat=400.0"]
    assert run(200) == ["exp2 fcfs iat=200.0"]  # dropped: run again


def test_a_run_that_takes_a_simulation_from_the_journal_removes_the_checkpoint_left_of_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kill between a simulation's journal append and its checkpoint's removal leaves the checkpoint of a
    journalled simulation. The run that takes that simulation from the journal removes it: nothing else would, and
    a finished run's --out would hold it for good."""
    out = tmp_path / "out"
    monkeypatch.setattr(apc, "CHECKPOINT_SECONDS", 0.0)
    monkeypatch.setattr(apc, "save_figure", lambda *_a, **_k: None)  # (the figures take most of a run's time)
    real_append = Journal.append

    def append_then_die(self: Journal, rows: Iterable[Mapping[str, Any]]) -> None:
        rows = list(rows)
        real_append(self, rows)
        if rows[0]["unit"] == "exp3 dynamic":
            raise KeyboardInterrupt  # (a kill: the journal row is on disk, the unlink never runs)

    monkeypatch.setattr(Journal, "append", append_then_die)
    assert apc.apc_main([*ARGV, "--out", str(out)]) == 130
    monkeypatch.setattr(Journal, "append", real_append)
    monkeypatch.setattr(apc, "CHECKPOINT_SECONDS", 10.0)  # the default: the static configurations (< 1 s) never save
    assert json.loads((out / apc.CHECKPOINT).read_text())["unit"] == "exp3 dynamic"
    assert apc.apc_main([*ARGV, "--out", str(out)]) == 0  # takes exp3 dynamic from the journal
    assert json.loads((out / "config.json").read_text())["complete"] is True
    assert not (out / apc.CHECKPOINT).exists(), sorted(p.name for p in out.iterdir())


def test_the_interrupt_message_names_the_checkpoint_only_if_it_holds_the_simulation_under_way(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Ctrl-C in a simulation that saved no checkpoint (quicker than :data:`CHECKPOINT_SECONDS` so far), with no
    checkpoint file or with another simulation's there: the message does not promise that the rerun continues it
    from a checkpoint, and says it runs again from its start."""
    out = tmp_path / "out"
    monkeypatch.setattr(apc, "save_figure", lambda *_a, **_k: None)  # (the figures take most of a run's time)
    monkeypatch.setattr(apc, "simulate", _stopped_in_3(apc.simulate))
    capsys.readouterr()
    assert apc.apc_main([*ARGV, "--out", str(out)]) == 130  # (the default CHECKPOINT_SECONDS: no save)
    err = capsys.readouterr().err
    assert not (out / apc.CHECKPOINT).exists()
    assert "its last checkpoint in" not in err, err.splitlines()[-1]
    assert "the one under way, exp3 dynamic, saved no checkpoint" in err
    monkeypatch.setattr(apc, "CHECKPOINT_SECONDS", 0.0)
    assert apc.apc_main([*ARGV[:-1], "2400", "--out", str(out)]) == 130  # another simulation's checkpoint
    assert "its last checkpoint in" in capsys.readouterr().err
    monkeypatch.setattr(apc, "CHECKPOINT_SECONDS", 3600.0)
    assert apc.apc_main([*ARGV, "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert json.loads((out / apc.CHECKPOINT).read_text())["settings"]["exp3_horizon"] == 2400.0
    assert "its last checkpoint in" not in err, err.splitlines()[-1]


def test_a_run_without_a_journal_starts_over_and_removes_the_checkpoint_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that starts over removes the checkpoint with the journal, also when it starts over because there is
    no journal (removed by hand, say): a checkpoint of another simulation would otherwise stay for good."""
    out = tmp_path / "out"
    _interrupted_with_a_checkpoint(out, monkeypatch)
    assert (out / apc.CHECKPOINT).exists()
    (out / apc.JOURNAL).unlink()
    assert apc.apc_main([*ARGV[:-1], "2400", "--out", str(out)]) == 0  # another horizon: not its simulation
    assert not (out / apc.CHECKPOINT).exists()


def test_a_checkpoint_that_cannot_be_saved_is_warned_about_once_and_the_simulations_go_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint only shortens a rerun: a save that fails (here every one, as on a full disk) is a warning, once
    per simulation and not once per cycle, and the run ends as an uninterrupted one does."""
    out = tmp_path / "out"
    monkeypatch.setattr(apc, "CHECKPOINT_SECONDS", 0.0)  # a save after every cycle (10 a simulation)
    monkeypatch.setattr(apc, "save_figure", lambda *_a, **_k: None)  # (the figures take most of a run's time)
    real_write = apc.write_text

    def disk_full_for_checkpoints(path: Path, text: str) -> Path:
        if Path(path).name == apc.CHECKPOINT:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(path, text)

    monkeypatch.setattr(apc, "write_text", disk_full_for_checkpoints)
    capsys.readouterr()
    assert apc.apc_main([*ARGV, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("cannot save its checkpoint") == 3, err  # one for each of Experiment Three's configurations
    assert "No space left on device" in err
    assert json.loads((out / "config.json").read_text())["complete"] is True
    assert [r["unit"] for r in _rows(out / apc.JOURNAL) if r["record"] == "end"] == [
        "exp3 dynamic", "exp3 static 9 TA + 16 batch", "exp3 static 6 TA + 19 batch"]
    assert not (out / apc.CHECKPOINT).exists()


#: Edits of a saved state that still parse, each one a state :func:`simulate` cannot reach: before they were
#: refused, a simulation continued from one crashed (records that are not dicts), hung (a NaN time never reaches
#: the horizon) or recorded wrong results (jobs arriving twice, placements of jobs it does not hold).
CORRUPTIONS: dict[str, Callable[[dict[str, Any]], None]] = {
    "cycles not a list of dicts": lambda s: s.update(cycles="abc"),
    "job records not a list of dicts": lambda s: s.update(records="abc"),
    "time NaN": lambda s: s.update(t=math.nan),
    "time not its cycles'": lambda s: s.update(t=s["t"] + 1.0),
    "arrivals rewound": lambda s: s.update(arrived=0),
    "placement of a job it does not hold": lambda s: s.update(placement=[["no such job", "node00"]]),
    "placement on a node the run lacks": lambda s: s.update(placement=[[s["jobs"][0][0], "no such node"]]),
    "suspension of a job it does not hold": lambda s: s.update(suspended=["no such job"]),
    "change counts not counts": lambda s: s.update(changes=["start"]),
    "progress negative": lambda s: s.update(jobs=[[jid, -1.0] for jid, _ in s["jobs"]]),
}


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_a_state_that_parses_but_no_run_reaches_is_refused(corrupt: Callable[[dict[str, Any]], None]) -> None:
    cfg, jobs = _configs()[0][1:]
    saved: list[dict[str, Any]] = []
    simulate(cfg, jobs, checkpoint=lambda s: saved.append(json.loads(json.dumps(s.to_json()))))
    state = saved[3]
    assert state["jobs"] and state["placement"]  # (so that each corruption below changes something)
    SimState.from_json(json.loads(json.dumps(state)), cfg, jobs)  # (the state itself is accepted)
    corrupt(state)
    with pytest.raises((KeyError, TypeError, ValueError)):
        SimState.from_json(state, cfg, jobs)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The --out of an uninterrupted run of :data:`ARGV` (without figures)."""
    ref = tmp_path_factory.mktemp("ref")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(apc, "save_figure", lambda *_a, **_k: None)
        assert apc.apc_main([*ARGV, "--out", str(ref)]) == 0
    return ref


@pytest.mark.parametrize("what", ["job records not a list of dicts", "arrivals rewound"])
def test_a_checkpoint_that_does_not_fit_its_simulation_is_discarded_and_the_simulation_run_from_its_start(
        what: str, uninterrupted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A checkpoint of the simulation under way whose state was edited or damaged (it parses, and names the
    simulation) is removed with a warning and the simulation runs from its start, to the outputs of an
    uninterrupted run; it crashed every rerun (records that are not dicts) or was continued to wrong results
    (arrivals rewound: jobs arriving twice)."""
    out = tmp_path / "out"
    _interrupted_with_a_checkpoint(out, monkeypatch)
    saved = json.loads((out / apc.CHECKPOINT).read_text())
    CORRUPTIONS[what](saved["state"])
    (out / apc.CHECKPOINT).write_text(json.dumps(saved))
    capsys.readouterr()
    assert apc.apc_main([*ARGV, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: the checkpoint" in err and "does not fit the simulation it names" in err, err
    assert "exp3 dynamic starts from its start" in err and "from its checkpoint" not in err
    assert not (out / apc.CHECKPOINT).exists()
    assert (out / "exp3_cycles.csv").read_bytes() == (uninterrupted / "exp3_cycles.csv").read_bytes()
    assert _journal_without_wall_times(out) == _journal_without_wall_times(uninterrupted)


def test_exp2_inter_arrival_times_with_one_whole_part_draw_different_jobs() -> None:
    """400 and 400.5 s give other job streams, not one stream scaled (the stream was keyed by ``int(mean_iat)``:
    the jobs at 400.5 were those at 400 with every arrival time x 400.5/400; reproducibility review), while a whole
    number keeps the stream the published runs drew (the first arrival at 50 s below)."""
    at = {iat: exp2_jobs(30, 0, iat) for iat in (400.0, 400.5, 401.0)}
    scaled = [round(j.submit / 400.5, 9) for j in at[400.5]]
    assert scaled != [round(j.submit / 400.0, 9) for j in at[400.0]]
    assert [j.goal - j.submit for j in at[400.5]] != [j.goal - j.submit for j in at[400.0]]
    assert exp2_jobs(30, 0, 400) == at[400.0]  # an int and a float of one value: one stream
    assert exp2_jobs(3, 0, 50.0)[0].submit == 51.456546761214724  # (the code before this change drew it too)


def test_a_simulation_the_journal_holds_with_other_settings_is_said_to_run_again_not_to_be_unreadable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        simulations: list[str]) -> None:
    """User review: after a run with another ``--exp2-jobs``, the resume line said "1185 unreadable or
    other-settings rows dropped", which reads as a damaged journal; it names the simulations run again."""
    out = tmp_path / "out"
    monkeypatch.setattr(apc, "save_figure", lambda *_a, **_k: None)
    argv = ["--experiments", "two", "--exp2-algorithms", "fcfs", "--exp2-iats", "100", "--out", str(out)]
    assert apc.apc_main([*argv, "--exp2-jobs", "5"]) == 0
    capsys.readouterr()
    simulations.clear()
    assert apc.apc_main([*argv, "--exp2-jobs", "6"]) == 0
    assert simulations == ["exp2 fcfs iat=100.0"]
    err = capsys.readouterr().err
    assert ("resuming from the journal in " f"{out}: 0 of 1 simulations kept, 1 to run again, the journal's being "
            "of other settings (exp2 fcfs iat=100.0)") in err, err
    assert "unreadable" not in err, err
