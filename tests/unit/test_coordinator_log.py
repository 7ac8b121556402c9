"""``vcemu up`` and ``vcemu coordinator`` show the coordinator's log as ``vcemu agent`` shows its own: each line
after the command and its level, from INFO up (an agent's registration, a job requeued), and only the ``vcemu``
loggers'; ``demo`` and ``replay`` write it to their results folder. Before, Python printed the warnings alone
and bare (over a progress bar), and the INFO lines not at all."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path

from coordinator.servers import coordinator_log, log_to_stderr

REPO = Path(__file__).resolve().parents[2]


def test_the_coordinators_log_lines_carry_the_command_their_time_and_level() -> None:
    """With the time (a soak test: a long run's log could not be matched to its metrics)."""
    code = ("import logging; from coordinator.servers import log_to_stderr; log_to_stderr('vcemu up'); "
            "c = logging.getLogger('vcemu.coordinator'); c.info('agent a0 at 127.0.0.1:1 registered 1 host'); "
            "c.debug('not shown'); logging.getLogger('vcemu.agent').warning('removed the cgroups of agent a0'); "
            "logging.getLogger('somelib').info('not ours')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 0, r.stderr
    stamp = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d"
    assert re.fullmatch(rf"vcemu up: {stamp} INFO agent a0 at 127\.0\.0\.1:1 registered 1 host\n"
                        rf"vcemu up: {stamp} WARNING removed the cgroups of agent a0\n", r.stderr), r.stderr


def test_logging_configured_before_is_left_as_it_is() -> None:
    assert logging.getLogger().handlers  # (pytest's capture, as an embedding program's own set-up)
    log_to_stderr("vcemu coordinator")
    assert logging.getLogger("vcemu").handlers == []


def test_a_live_runs_coordinator_log_is_written_to_its_folder_while_the_run_lasts(tmp_path: Path) -> None:
    logger = logging.getLogger("vcemu")
    before = (list(logger.handlers), logger.level)
    with coordinator_log(tmp_path):
        logging.getLogger("vcemu.coordinator").info("agent replay0 at 127.0.0.1:1 registered 2 hosts")
        logging.getLogger("vcemu.backends").warning("Stop t/0 on h0 failed (deadline); will retry")
        logging.getLogger("vcemu.coordinator").debug("not written")
    logging.getLogger("vcemu.coordinator").info("after the run: not written")
    lines = (tmp_path / "coordinator.log").read_text().splitlines()
    assert [re.sub(r"^\S+ \S+ ", "", line) for line in lines] == [
        "INFO agent replay0 at 127.0.0.1:1 registered 2 hosts", "WARNING Stop t/0 on h0 failed (deadline); will retry"]
    assert all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", line) for line in lines), lines
    assert (list(logger.handlers), logger.level) == before
