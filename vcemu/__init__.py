"""The layer every other package stands on: the wire protocol and the plumbing the coordinator and the agent share.

- ``vcemu.v1``: the generated gRPC code, built from ``proto/vcemu/v1`` by ``setup.py`` (not committed).
- Shared modules: :mod:`~vcemu.cliargs` (argument types every command uses), :mod:`~vcemu.limits` (bounds on
  names, addresses and requests), :mod:`~vcemu.sizes` (memory sizes), :mod:`~vcemu.ports` and :mod:`~vcemu.tls`
  (listening and dialling), :mod:`~vcemu.signals` (Ctrl-C and SIGTERM), :mod:`~vcemu.processes` (stopping child
  processes), :mod:`~vcemu.outputs` (result files written whole), :mod:`~vcemu.provenance` (what code made a
  result) and :mod:`~vcemu.bench_results` (a benchmark's record).

It imports none of ``coordinator``, ``node_agent`` or ``workloads``; the agent imports it and never the
coordinator; the coordinator imports both (it starts agents of its own). ``pyproject.toml``'s import-linter
contracts keep that order.
"""
