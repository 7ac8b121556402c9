"""Where a benchmark's result goes: ``vcemu bench NAME --out DIR`` writes ``NAME.json`` (what it printed) and
``NAME-config.json`` (its flags, and the code and libraries that produced it), as every results folder of vcemu
holds its config. A figure measured on one machine is then kept with what it was measured with, to compare with
another machine's or another version's (issue 4's targets were met on one VM and missed on others)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from coordinator.cliargs import usable_out_dir


def output_flags(p: argparse.ArgumentParser, name: str) -> None:
    """``--out`` and ``--json`` of ``vcemu bench NAME``."""
    p.add_argument("--out", default=f"results/bench-{name}", help=f"where the result and its config go, {name}.json "
                   f"and {name}-config.json (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def check_out(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--out`` made and checked writable before any work, after the other flags' checks (a refused command makes
    no folder) (review: ``--out ''`` wrote into the current folder, and a file's path ran the whole bench, then lost
    its result in a traceback)."""
    try:
        usable_out_dir(args.out)
    except ValueError as exc:
        p.error(str(exc))


def write_results(out: str, name: str, result: dict[str, Any], config: dict[str, Any]) -> Path:
    """The result and its config (with the code that produced them, as every result folder's), each written
    atomically; returns the result's path."""
    from coordinator.outputs import json_safe, write_json
    from coordinator.provenance import code_version

    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    write_json(path / f"{name}.json", json_safe(result), sort_keys=False)
    write_json(path / f"{name}-config.json", {**config, "code": code_version()}, sort_keys=False)
    return path / f"{name}.json"
