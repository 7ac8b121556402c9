"""Every result folder records the code that produced it (``"code"`` in ``config.json``, and in ``summary.json``
where there is one): the package version, the git commit and dirtiness when the code runs from a checkout, and
always a fingerprint of the source, which needs no git."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vcemu import provenance
from vcemu.provenance import PACKAGES, code_version, source_fingerprint

ROOT = Path(__file__).resolve().parents[2]


def _copy_packages(dst: Path) -> Path:
    for name in PACKAGES:
        shutil.copytree(ROOT / name, dst / name, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def _code_version_in(tree: Path) -> dict:
    """``code_version()`` in a fresh process that imports the packages from ``tree`` (no git repository there)."""
    done = subprocess.run([sys.executable, "-c", "import json; from vcemu.provenance import code_version; "
                           "import coordinator; print(json.dumps([code_version(), coordinator.__file__]))"],
                          cwd=tree, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree), "GIT_CEILING_DIRECTORIES":
                                         str(tree.parent), "XDG_CACHE_HOME": str(tree.parent / "cache")},
                          capture_output=True, text=True, timeout=120, check=True)
    record, imported = json.loads(done.stdout)
    assert Path(imported).is_relative_to(tree)
    return record


def test_the_fingerprint_works_without_git_and_changes_with_any_code(tmp_path: Path) -> None:
    """As from an installed wheel or a Docker image: the same files give the same fingerprint (also from the
    per-file cache the first run wrote), a comment the same, a changed constant another; without a git checkout
    the commit and dirtiness are None. (``test_fingerprint.py`` has the cases.)"""
    tree = _copy_packages(tmp_path / "installed")
    record = _code_version_in(tree)
    assert record["source_sha256"] == source_fingerprint()
    assert record["git_commit"] is None and record["git_dirty"] is None
    assert (tmp_path / "cache" / "vcemu" / "fingerprint.json").is_file()
    assert _code_version_in(tree)["source_sha256"] == source_fingerprint()
    lublin = tree / "workloads" / "lublin.py"
    with lublin.open("a") as fh:
        fh.write("# a comment\n")
    assert _code_version_in(tree)["source_sha256"] == source_fingerprint()
    with lublin.open("a") as fh:
        fh.write("_AN_EDIT = 1\n")
    assert _code_version_in(tree)["source_sha256"] != source_fingerprint()


def test_a_file_moved_between_packages_changes_the_fingerprint(tmp_path: Path) -> None:
    tree = _copy_packages(tmp_path / "installed")
    (tree / "workloads" / "lublin.py").rename(tree / "coordinator" / "lublin.py")
    assert _code_version_in(tree)["source_sha256"] != source_fingerprint()


@pytest.mark.skipif(shutil.which("git") is None, reason="no git")
def test_in_a_git_checkout_the_commit_is_recorded() -> None:
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("the tests do not run from a git checkout")
    record = code_version()
    assert record["git_commit"] == head.stdout.strip()
    assert isinstance(record["git_dirty"], bool)
    assert len(record["source_sha256"]) == 64


def test_it_is_computed_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    code_version()
    monkeypatch.setattr(provenance, "_package_dir", lambda name: pytest.fail("computed again"))
    monkeypatch.setattr(provenance, "_git", lambda *a: pytest.fail("git run again"))
    assert code_version() == code_version() and source_fingerprint()


# ---- what each command writes -----------------------------------------------------------------------------------


def _assert_records_this_code(path: Path) -> None:
    assert json.loads(path.read_text())["code"] == code_version(), path


def test_oppcost_records_the_code_in_config_and_summary(tmp_path: Path) -> None:
    from coordinator.oppcost.experiment import oppcost_main

    assert oppcost_main(["--executions", "1", "--jobs", "1", "--duration", "200", "--out", str(tmp_path)]) == 0
    _assert_records_this_code(tmp_path / "config.json")
    _assert_records_this_code(tmp_path / "summary.json")


def test_vcsched_records_the_code_in_config(tmp_path: Path) -> None:
    from coordinator.vcsched.experiment import vcsched_main

    assert vcsched_main(["--set", "small", "--instances", "1", "--slacks", "0.5", "--jobs", "1", "--algorithms",
                         "MCB8", "--out", str(tmp_path)]) == 0
    _assert_records_this_code(tmp_path / "config.json")


def test_apc_records_the_code_in_config_and_summary(tmp_path: Path) -> None:
    from coordinator.apc.experiment import apc_main

    assert apc_main(["--experiments", "one", "--exp1-jobs", "4", "--out", str(tmp_path)]) == 0
    _assert_records_this_code(tmp_path / "config.json")
    _assert_records_this_code(tmp_path / "summary.json")


def test_demo_records_the_code_in_config_and_summary(tmp_path: Path) -> None:
    from coordinator.demo import _write_results, compare_with_target

    args = argparse.Namespace(out=str(tmp_path), policy="greedy", seed=1)
    out = _write_results(args, [], compare_with_target([0.1]), 0, 1.0, "cgroup-v1")
    _assert_records_this_code(out / "config.json")
    _assert_records_this_code(out / "summary.json")


def test_replay_records_the_code_in_config(tmp_path: Path) -> None:
    from coordinator.replay import _write

    args = argparse.Namespace(out=str(tmp_path), policy="greedy", compress=5.0)
    out = _write(args, {"live": {"jobs": 1}, "sim": {"jobs": 1}})
    _assert_records_this_code(out / "config.json")


def test_the_record_names_the_python_and_library_versions() -> None:
    """The numbers of a result come from numpy's generators, scipy's solvers and numba's kernels too: the record names
    their versions and Python's (it named vcemu's version, commit and source alone; reproducibility review)."""
    import platform

    import numpy
    import scipy

    record = code_version()
    assert record["python"] == platform.python_version()
    assert record["libraries"]["numpy"] == numpy.__version__
    assert record["libraries"]["scipy"] == scipy.__version__
    assert set(record["libraries"]) == {"numpy", "scipy", "numba", "ray", "grpcio", "protobuf"}
    record["libraries"]["numpy"] = "changed"  # a fresh record each call: a caller's edit reaches no other
    assert code_version()["libraries"]["numpy"] == numpy.__version__
