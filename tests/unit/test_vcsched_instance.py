"""The instance file format (bad input is refused naming job and field) and the Sec. 4.1 generator."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from coordinator.policies.packing import PackJob
from coordinator.vcsched.generator import InstanceSpec, generate, lublin_job_sizes, truncated_normal
from coordinator.vcsched.instance import InstanceError, load_instance, parse_instance, save_instance

GOOD = {
    "hosts": 2,
    "jobs": [
        {"name": "a", "cpu_need": 0.5, "mem": 0.2},
        {"name": "b", "cpu_need": 0.8, "mem": 0.1, "tasks": 3},
    ],
}


def _write(tmp_path: Path, obj: object) -> Path:
    p = tmp_path / "inst.json"
    p.write_text(json.dumps(obj))
    return p


def test_load_good_and_roundtrip(tmp_path: Path) -> None:
    inst = load_instance(_write(tmp_path, GOOD))
    assert inst.n_hosts == 2 and inst.n_tasks == 4 and inst.parallel
    assert inst.jobs == (PackJob(1, 0.5, 0.2), PackJob(3, 0.8, 0.1))
    assert inst.names == ("a", "b")
    out = tmp_path / "out.json"
    save_instance(inst, out)
    assert load_instance(out) == inst


@pytest.mark.parametrize(
    ("job", "patch", "field", "words"),
    [
        (1, {"cpu_need": -0.2}, "cpu_need", "(0, 1]"),
        (0, {"cpu_need": 1.5}, "cpu_need", "(0, 1]"),
        (1, {"mem": -0.01}, "mem", "[0, 1]"),
        (0, {"mem": 2}, "mem", "[0, 1]"),
        (1, {"tasks": 0}, "tasks", ">= 1"),
        (1, {"cpu_need": "0.5"}, "cpu_need", "number"),
    ],
)
def test_bad_values_name_job_and_field(tmp_path: Path, job: int, patch: dict, field: str, words: str) -> None:
    obj = json.loads(json.dumps(GOOD))
    obj["jobs"][job].update(patch)
    with pytest.raises(InstanceError) as ei:
        load_instance(_write(tmp_path, obj))
    msg = str(ei.value)
    name = obj["jobs"][job]["name"]
    assert f"job {job} ('{name}')" in msg and f"'{field}'" in msg and words in msg
    assert ei.value.job == job and ei.value.field == field


@pytest.mark.parametrize("missing", ["cpu_need", "mem"])
def test_missing_field(tmp_path: Path, missing: str) -> None:
    obj = json.loads(json.dumps(GOOD))
    del obj["jobs"][1][missing]
    with pytest.raises(InstanceError, match=rf"job 1 \('b'\): missing field '{missing}'"):
        load_instance(_write(tmp_path, obj))


def test_bad_top_level(tmp_path: Path) -> None:
    with pytest.raises(InstanceError, match="missing field 'hosts'"):
        parse_instance({"jobs": []})
    with pytest.raises(InstanceError, match="host 1: field 'mem'"):
        parse_instance({"hosts": [{"cpu": 1, "mem": 1}, {"cpu": 1, "mem": 0}], "jobs": []})
    p = tmp_path / "broken.json"
    p.write_text("{")
    with pytest.raises(InstanceError, match="not valid JSON"):
        load_instance(p)


def test_generator_is_seeded_and_in_range() -> None:
    spec = InstanceSpec(hosts=64, tasks=500, slack=0.3, cv_mem=0.75, cv_cpu=0.75)
    a = generate(spec, np.random.default_rng(3))
    b = generate(spec, np.random.default_rng(3))
    assert a == b and len(a.jobs) == 500 and a.n_hosts == 64
    cpu = np.array([j.cpu_need for j in a.jobs])
    mem = np.array([j.mem for j in a.jobs])
    assert (cpu > 0).all() and (cpu <= 1).all() and (mem > 0).all() and (mem <= 1).all()
    x = truncated_normal(np.random.default_rng(0), 0.5, 0.25, 20000)
    assert abs(x.mean() - 0.5) < 0.01 and abs(x.std() / x.mean() - 0.25) < 0.02
    # Memory slack: the expected total memory is close to H * (1 - slack) when truncation is mild.
    m = generate(InstanceSpec(64, 500, 0.5, 0.25, 0.25), np.random.default_rng(1))
    assert sum(j.mem for j in m.jobs) == pytest.approx(32, rel=0.05)


def test_lublin_sizes() -> None:
    rng = np.random.default_rng(11)
    sizes = lublin_job_sizes(rng, 20000, 64)
    assert sum(sizes) == 20000 and min(sizes) >= 1 and max(sizes) <= 64
    s = np.array(sizes)
    pow2 = np.isin(s, [1, 2, 4, 8, 16, 32, 64]).mean()
    assert pow2 > 0.6  # biased to powers of two
    assert 0.1 < (s == 1).mean() < 0.5  # serial jobs
    par = generate(InstanceSpec(64, 500, 0.5, 0.25, 0.25, parallel=True), np.random.default_rng(2))
    assert par.n_tasks == 500 and par.parallel
