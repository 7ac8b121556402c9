"""Settings for the whole test session.

vcemu keeps a cache of source digests in ``$XDG_CACHE_HOME/vcemu`` (:func:`vcemu.provenance.cache_path`;
``~/.cache/vcemu`` by default). The tests, and the vcemu processes they start (which inherit the environment),
use a cache of their own in a temporary directory, removed at the end, so that a test run leaves the user's
home as it found it. Matplotlib keeps its font cache where it was (``MPLCONFIGDIR``), not to rebuild it.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

_CACHE: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    if not os.environ.get("MPLCONFIGDIR"):
        base = os.environ.get("XDG_CACHE_HOME", "")
        base = base if os.path.isabs(base) else os.path.join(os.path.expanduser("~"), ".cache")
        os.environ["MPLCONFIGDIR"] = os.path.join(base, "matplotlib")
    _CACHE.append(tempfile.mkdtemp(prefix="vcemu-test-cache-"))
    os.environ["XDG_CACHE_HOME"] = _CACHE[-1]


def pytest_unconfigure(config: pytest.Config) -> None:
    for path in _CACHE:
        shutil.rmtree(path, ignore_errors=True)
