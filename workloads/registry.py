"""The workload programs the agent may run, by name. A request names a workload; it never carries a
command or a path, so an agent only ever executes the modules listed here."""

from __future__ import annotations

import os
import sys

#: name -> module run with ``python -m``: programs with work to do, calibrated by the agent.
PROGRAMS: dict[str, str] = {"dgemm": "workloads.dgemm", "arraycycle": "workloads.arraycycle"}
#: name -> module of long-running services (no work to finish, nothing to calibrate; see
#: :mod:`node_agent.transactional`).
SERVICES: dict[str, str] = {"transactional": "workloads.transactional"}

#: Memory a calibration run allocates (arraycycle's rate is calibrated on an array of this size).
CALIBRATION_MEMORY_BYTES = 64 << 20

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def command(name: str, *args: str) -> list[str]:
    """The argv of workload ``name`` with extra program arguments; KeyError if it is not registered."""
    return [sys.executable, "-m", PROGRAMS[name] if name in PROGRAMS else SERVICES[name], *args]


def child_env() -> dict[str, str]:
    """Environment for a workload process: single-threaded BLAS (before numpy loads) and an import path
    that finds this package even when the agent was started from elsewhere."""
    env = dict(os.environ)
    env.update(OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = _REPO_ROOT if not path else _REPO_ROOT + os.pathsep + path
    return env
