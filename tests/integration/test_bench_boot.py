"""``vcemu bench boot``: the three agents each time their starts, and the agents leave nothing behind."""

from __future__ import annotations

import json

import psutil
import pytest

from node_agent.bench_boot import boot_main

pytestmark = pytest.mark.integration


def test_bench_boot_times_each_agents_starts_and_leaves_no_process(capsys, tmp_path) -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    assert boot_main(["--starts", "2", "--rounds", "1", "--no-cgroups", "--json", "--out", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert json.loads((tmp_path / "boot.json").read_text()) == out  # kept with its config
    assert json.loads((tmp_path / "boot-config.json").read_text())["starts"] == 2
    assert out["driver"] == "duty-cycle" and out["starts_per_agent"] == 2 and out["rounds"] == 1
    for name in ("spares", "cold", "cold_rounds_only"):
        each = out[f"{name}_ms"]["each"]
        assert len(each) == 2 and all(ms > 0 for ms in each), out
        assert out[f"{name}_ms"]["median"] == pytest.approx(sum(each) / 2, abs=0.051)  # (of two: their mean)
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and p.is_running()
            and p.status() != psutil.STATUS_ZOMBIE]
    assert not left, [p.cmdline() for p in left]


def test_bench_boot_refuses_a_bad_count(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        boot_main(["--starts", "0"])
    assert exc.value.code == 2 and "--starts: must be in 1..1000, got 0" in capsys.readouterr().err
