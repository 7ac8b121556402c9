"""When ``vcemu up`` starts one of its agent processes again after it died: the rule alone, without processes.

A real cluster's node agents are supervised (systemd's ``Restart=on-failure``; Ray's ``max_restarts`` for ``up
--ray``'s agent actors), so a crashed agent comes back and its hosts take work again. ``up`` does the same for its
local agent processes: an agent that ends in failure (killed by a signal, or a non-zero exit status) is started
again with its command line, its agent id included, so that the new process removes what its predecessor left
(cgroups, processes, work directory) and registers the same hosts. The coordinator then finds the tasks the dead
agent held missing and requeues their jobs from their last progress. Not started again: an agent that exits
cleanly (status 0: a SIGTERM, or its parent ``up`` gone), and one that refused a setting (status 2, as a bad flag:
a port taken meanwhile; systemd's ``RestartPreventExitStatus``), which would only fail again.

Each agent id may be restarted ``limit`` times in a row, after a delay that doubles from ``first_delay_s`` up to
``max_delay_s`` (systemd's ``RestartSec`` with ``RestartSteps``): a crash loop does not spin, and one crash costs a
second. "In a row": an agent that ran ``steady_s`` (10 minutes) before it died starts its count and its delay afresh,
as Kubernetes resets a container's crash back-off after 10 minutes of running, so that three crashes hours apart do
not leave a long-lived cluster's agent down for good while a crash loop still ends. (``up --ray``'s actors are
Ray's to restart, ``max_restarts`` times over the run: Ray counts no window.)"""

from __future__ import annotations

from dataclasses import dataclass, field

#: ``vcemu up --restart-agents``'s default, and the restarts Ray gives ``up --ray``'s agent actors
#: (:data:`coordinator.backends.ray.cluster.MAX_RESTARTS` is this value).
DEFAULT_RESTARTS = 3
#: The largest ``--restart-agents``.
MOST_RESTARTS = 100
#: Seconds an agent process must have run before it died for its restarts to count afresh (Kubernetes' reset of a
#: container's crash back-off).
STEADY_S = 600.0
#: The exit status of an agent that refused a setting (``vcemu agent``'s, as argparse's): never restarted.
SETTING_REFUSED = 2


@dataclass
class Restarts:
    """The restarts each agent id has had, and when the next one is due."""

    limit: int = DEFAULT_RESTARTS
    first_delay_s: float = 1.0
    max_delay_s: float = 30.0
    steady_s: float = STEADY_S
    used: dict[str, int] = field(default_factory=dict)

    def after_exit(self, agent_id: str, returncode: int, ran_s: float = 0.0) -> float | None:
        """The delay before starting ``agent_id`` again, now that its process ended with ``returncode`` (negative:
        killed by that signal) after running ``ran_s`` seconds, counted as a restart; None if it is not to be
        started again: a clean exit, a refused setting, or its restarts used up (``limit`` of them in a row: since
        it last ran ``steady_s`` before a crash)."""
        if not self.failed(returncode):
            return None
        if ran_s >= self.steady_s:  # it had been running well: this crash is not part of a loop
            self.used.pop(agent_id, None)
        done = self.used.get(agent_id, 0)
        if done >= self.limit:
            return None
        self.used[agent_id] = done + 1
        return min(self.max_delay_s, self.first_delay_s * 2.0 ** done)

    @staticmethod
    def failed(returncode: int) -> bool:
        """Whether an exit with ``returncode`` is one that is restarted while restarts remain: not a clean exit, nor
        a refused setting."""
        return returncode not in (0, SETTING_REFUSED)

    def count(self, agent_id: str) -> int:
        """The restarts ``agent_id`` has been given in a row (since it last ran ``steady_s``)."""
        return self.used.get(agent_id, 0)
