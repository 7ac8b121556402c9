"""The node agent: emulated hosts whose tasks are real processes with cgroup-enforced CPU shares.

Modules: ``cgroups`` (v1/v2 drivers, probing), ``dutycycle`` (the no-cgroups fallback), ``runner`` (one
task's process), ``agent`` (hosts, tasks, validation), ``server`` (gRPC, health, metrics), ``register``
(coordinator registration), ``cli`` (``vcemu agent``), ``bench`` (``vcemu bench cpu-share``).
"""
