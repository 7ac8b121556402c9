"""Where a benchmark's result goes: ``vcemu bench NAME --out DIR`` writes ``NAME.json`` (what it printed) and
``NAME-config.json`` (its flags, and the code and libraries that produced it), as every results folder of vcemu
holds its config. A figure measured on one machine is then kept with what it was measured with, to compare with
another machine's or another version's (issue 4's targets were met on one VM and missed on others)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vcemu.cliargs import usable_out_dir


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


def judged(out: dict[str, Any], targets: dict[str, tuple[str, float]]) -> dict[str, bool]:
    """For each target (key -> ("<=" or ">=", limit)) whose key ``out`` holds, whether its value meets it."""
    return {key: bool(out[key] <= limit if op == "<=" else out[key] >= limit)
            for key, (op, limit) in targets.items() if key in out and out[key] is not None}


def write_results(out: str, name: str, result: dict[str, Any], config: dict[str, Any]) -> bool:
    """The result and its config (with the code that produced them, as every result folder's), each written
    atomically; whether they were. A write that fails (a full disk, the folder gone since :func:`check_out`) is
    said in one line, and the caller prints its result all the same (it was written first, and an error lost the
    printout too) and ends with status 1."""
    import sys

    from vcemu.outputs import json_safe, write_json
    from vcemu.provenance import code_version

    path = Path(out)
    try:
        path.mkdir(parents=True, exist_ok=True)
        write_json(path / f"{name}.json", json_safe(result), sort_keys=False)
        write_json(path / f"{name}-config.json", {**config, "code": code_version()}, sort_keys=False)
    except OSError as exc:
        print(f"vcemu bench {name}: --out {out}: result not written ({exc.strerror or exc}); it is printed below",
              file=sys.stderr)
        return False
    return True
