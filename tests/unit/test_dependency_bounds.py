"""The dependency bounds in pyproject.toml are true, and `make install` gives the same tools at any date.

Each bound here was measured: a venv with the lowest versions the bounds allow (uv's ``--resolution
lowest-direct``), and one with the newest, running the unit suite, `ruff check .` and `lint-imports`.
"""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def requirements(group: str | None = None) -> dict[str, Requirement]:
    """pyproject.toml's requirements by normalized name: the runtime ones, or those of an optional group."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = project["dependencies"] if group is None else project["optional-dependencies"][group]
    reqs = [Requirement(line) for line in lines]
    return {r.name.lower().replace("_", "-"): r for r in reqs}


def pinned(req: Requirement) -> str | None:
    """The version of an exact pin (``==X``), or None."""
    specs = list(req.specifier)
    if len(specs) == 1 and specs[0].operator == "==" and "*" not in specs[0].version:
        return specs[0].version
    return None


def test_ruff_is_pinned_to_one_release():
    # `make test` runs `make lint` first: a floating ruff makes a fresh clone's result depend on the day it is
    # cloned (0.6.0 finds 53 errors in today's code, 0.17.4 six, 0.17.6 none; 0.17.6 --preview finds 47 more).
    ruff = requirements("dev")["ruff"]
    assert pinned(ruff), f"ruff must be pinned exactly (==X), not {ruff.specifier}"


def test_the_installed_ruff_is_the_pinned_one():
    version = pinned(requirements("dev")["ruff"])
    if version is None:
        pytest.fail("ruff is not pinned exactly")
    try:
        installed = metadata.version("ruff")
    except metadata.PackageNotFoundError:
        pytest.skip("ruff is not installed here")
    assert installed == version, f"ruff {installed} is installed, pyproject.toml pins {version}: run make install"


def floor(req: Requirement) -> Version | None:
    """The lowest version a requirement admits by its ``>=`` or ``==`` clause, or None."""
    versions = [Version(s.version) for s in req.specifier if s.operator in (">=", "==")]
    return max(versions) if versions else None


def test_import_linter_floor_reads_the_wildcard_contract():
    # The contract "the command line is the entry point only" forbids coordinator.cli to coordinator.**, which holds
    # it: import-linter 2.0 does not know the wildcard, 2.1 to 2.11 stop on "Modules have shared descendants".
    lowest = floor(requirements("dev")["import-linter"])
    assert lowest is not None and lowest >= Version("2.12"), f"import-linter's floor {lowest} cannot read the contracts"


def test_the_installed_import_linter_reads_the_contracts():
    try:
        installed = Version(metadata.version("import-linter"))
    except metadata.PackageNotFoundError:
        pytest.skip("import-linter is not installed here")
    assert installed >= Version("2.12"), f"import-linter {installed} cannot read pyproject.toml's contracts"


def constraints() -> dict[str, str]:
    """constraints.txt's pins by normalized name."""
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        req = Requirement(line)
        version = pinned(req)
        assert version is not None, f"constraints.txt: {line!r} is not an exact pin"
        pins[req.name.lower().replace("_", "-")] = version
    return pins


def test_make_install_installs_the_constrained_versions():
    # Without it, `make install` takes the newest release of every package the day it runs, and `make test` on a
    # fresh clone tests another set of packages than the commit's own run did.
    makefile = (ROOT / "Makefile").read_text()
    install = [line for line in makefile.splitlines() if "pip install" in line and "$(BIN)" in line]
    assert install and all("-c $(CONSTRAINTS)" in line for line in install), install
    assert "CONSTRAINTS := constraints.txt" in makefile
    stamp_rule = next(line for line in makefile.splitlines() if line.startswith("$(STAMP):"))
    assert "$(CONSTRAINTS)" in stamp_rule, "a changed constraints.txt must reinstall .venv"


@pytest.mark.parametrize("group", [None, "dev"])
def test_every_requirement_is_pinned_within_its_range(group):
    pins = constraints()
    for name, req in requirements(group).items():
        assert name in pins, f"constraints.txt pins no {name}"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {name}=={pins[name]}, outside pyproject.toml's {req.specifier}"
        )


def test_build_requirements_are_true():
    # grpcio-tools 1.85.1 requires setuptools>=77.0.1: a floor of 68 claimed builds that cannot be resolved, and the
    # unbounded "wheel" is not needed by setuptools >= 70.1 (and wheel 0.30 beside setuptools 77 fails the build).
    build = [Requirement(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]]
    by_name = {r.name.lower(): r for r in build}
    assert "wheel" not in by_name
    lowest = floor(by_name["setuptools"])
    assert lowest is not None and lowest >= Version("77.0.1"), f"setuptools floor {lowest}"


def test_matplotlib_floor_draws_without_pyparsing_warnings():
    # matplotlib 3.8.0, 3.9.0, 3.10.0 and 3.10.6 beside pyparsing 3.3.3 warn 168-170 times for one mathtext figure;
    # 3.10.7, 3.10.8, 3.10.9, 3.11.0 and 3.11.2 do not.
    lowest = floor(requirements()["matplotlib"])
    assert lowest is not None and lowest >= Version("3.10.7"), f"matplotlib's floor {lowest} warns under pyparsing 3.3"
    installed = Version(metadata.version("matplotlib"))
    assert installed >= Version("3.10.7"), f"matplotlib {installed} prints PyparsingDeprecationWarning on every plot"


def test_the_image_installs_the_tested_versions_and_its_ray_is_theirs():
    """The Dockerfile installs with constraints.txt, as `make install` does; its RAY_VERSION, which the RayCluster
    declares, is the constrained ray (two different pins would fail the image's build)."""
    import re

    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^COPY .*\bconstraints\.txt\b", dockerfile, flags=re.MULTILINE), "constraints.txt not copied"
    installs = [ln for ln in dockerfile.splitlines() if "pip install" in ln]
    assert installs and all("-c constraints.txt" in ln for ln in installs), installs
    (ray,) = re.findall(r"^ARG RAY_VERSION=(\S+)$", dockerfile, flags=re.MULTILINE)
    assert f"ray=={ray}" in (ROOT / "constraints.txt").read_text().splitlines()
