"""Job programs and workload models.

The programs the node agent runs (``dgemm``, ``arraycycle``) are real OS processes started with
``python -m workloads.<name>``; :mod:`workloads.registry` lists them and builds their command lines, and
:mod:`workloads.progress` is the shared-memory channel through which they report progress. This package
imports nothing heavy, so that a child process can join its cgroup before numpy is loaded.
"""
