"""Which code produced a result: recorded in every result folder's ``config.json`` (and ``summary.json``), and
compared by the resumable commands before they reuse a journal.

:func:`code_version` is the record: the installed package's version, the git commit and whether the work tree
had uncommitted changes (when the code runs from a git checkout of vcemu), the Python version and the versions of the
libraries a result's numbers come from (numpy's generators draw the workloads, scipy's HiGHS solves the LPs, numba
compiles the packing kernels; :data:`LIBRARIES`), and always :func:`source_fingerprint`,
a sha256 over the ``.py`` files of the ``coordinator``, ``workloads``, ``node_agent`` and ``vcemu`` packages as
imported (:data:`PACKAGES`). The
fingerprint needs no git (it works from an installed wheel or a Docker image), and it is what a resume compares:
another fingerprint means other code, whatever the commit says (a commit that changes no source keeps it; an
uncommitted edit changes it). A mismatch throws away stored results (a sweep runs every stored cell again), so the
fingerprint covers what the code does, not how it is written: each file counts by its syntax tree without
docstrings or positions, so that comments, blank lines, layout, quoting and docstrings keep it, while any other
edit, string literals such as help text included, changes it, as do a renamed or moved file and another Python
version (whose ``ast`` differs). A file that does not parse counts by its bytes.

Both are computed once per process. Parsing and dumping the 0.9 MB takes about 0.8 s on this project's VM (hashing
its bytes took 8 ms), so each file's digest is cached in ``~/.cache/vcemu/fingerprint.json`` (:func:`cache_path`)
under its path, size, mtime and ctime: with the cache, about 5 ms. git takes about 15 ms.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import time
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["PACKAGES", "cache_path", "code_version", "fingerprint_of", "fingerprint_trees", "library_changes",
           "package_version", "source_fingerprint"]

#: The packages whose source decides a result: ``vcemu``'s shared modules (result files, argument types) too; its
#: generated gRPC code (``vcemu/v1``, built from ``proto/`` by the pinned grpcio-tools) comes along, unchanged
#: between builds of one version.
PACKAGES = ("coordinator", "workloads", "node_agent", "vcemu")
#: The installed distributions whose versions :func:`code_version` records (recorded, not compared: a resume compares
#: the source fingerprint only).
LIBRARIES = ("numpy", "scipy", "numba", "ray", "grpcio", "protobuf")
#: The key of :func:`code_version`'s record in ``config.json`` and ``summary.json``.
KEY = "code"


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)  # a top-level package is found without being imported
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"vcemu's package {name!r} is not importable")
    return Path(next(iter(spec.submodule_search_locations)))


@functools.cache
def source_fingerprint() -> str:
    """:func:`fingerprint_trees` of :data:`PACKAGES` as imported, with its per-file cache under the user's cache
    directory (:func:`cache_path`). Computed once per process."""
    return fingerprint_trees(((name, _package_dir(name)) for name in PACKAGES), cache=cache_path())


def fingerprint_trees(trees: Iterable[tuple[str, Path]], cache: Path | None = None) -> str:
    """sha256 (hex) over every ``.py`` file under each ``(name, root)`` of ``trees``, in sorted order within each
    tree: each file's path relative to ``root``, prefixed with ``name`` (a file moved or renamed is other code),
    then :func:`_file_digest` of its bytes.

    With ``cache`` (a JSON file), a file whose path, size, mtime and ctime are those recorded there is not read
    again: parsing every file costs far more than hashing its bytes. A cache that cannot be read or is not what
    this function writes is ignored (and replaced); one that cannot be written is left alone."""
    stored = _read_cache(cache) if cache is not None else {}
    mine = dict(stored.get(_PYTHON, {}))
    fresh = 0
    recent = time.time_ns() - _SETTLE_NS
    h = hashlib.sha256()
    for name, root in trees:
        for path in sorted(root.rglob("*.py")):
            # stat before reading: an edit in between leaves a key older than the digest, which the next run's
            # stat no longer matches, never a key that outlives its digest.
            st = path.stat()
            key = [st.st_size, st.st_mtime_ns, st.st_ctime_ns]
            entry = mine.get(str(path))
            if entry is not None and entry[:3] == key:
                digest = entry[3]
            else:
                digest = _file_digest(path.read_bytes())
                if st.st_mtime_ns < recent:
                    mine[str(path)] = [*key, digest]
                    fresh += 1
            h.update(f"{name}/{path.relative_to(root).as_posix()}\0{digest}\0".encode())
    if cache is not None and fresh:
        # Entries of files that are gone (other checkouts' removed files, tmp trees) are dropped as it is written.
        _write_cache(cache, {**stored, _PYTHON: {p: e for p, e in mine.items() if os.path.exists(p)}})
    return h.hexdigest()


def _file_digest(data: bytes) -> str:
    """What a file contributes to the fingerprint: sha256 of its syntax tree without docstrings and positions
    (``ast.dump`` without line and column attributes), so that comments, blank lines, layout, quoting and
    docstrings leave it alone and every other change, string literals included, does not. A file that does not
    parse (a syntax error, a null byte, bad encoding) counts by its bytes: it is still code that is there."""
    try:
        with warnings.catch_warnings():  # invalid escape sequences and the like warn while parsing
            warnings.simplefilter("ignore")
            tree = ast.parse(data)
        _strip_docstrings(tree)
        dumped = ast.dump(tree, annotate_fields=True, include_attributes=False)
    except (SyntaxError, ValueError, RecursionError):  # RecursionError: nesting too deep for dump
        return "bytes:" + hashlib.sha256(data).hexdigest()
    return "ast:" + hashlib.sha256(dumped.encode()).hexdigest()


def _strip_docstrings(node: ast.AST) -> None:
    """Remove the docstring (a first statement that is a string constant expression) of every module, class and
    function in ``node``. A docstring only changes ``__doc__``, which this project's code reads only for help
    text. Only statement lists are walked (a class or function is always a statement): ``ast.walk`` over every
    node took ten times as long."""
    if isinstance(node, _DOCUMENTED):
        first = node.body[0] if node.body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
            del node.body[0]
    for field in _STATEMENT_LISTS:
        children = getattr(node, field, None)
        if isinstance(children, list):
            for child in children:
                _strip_docstrings(child)


_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
#: The fields that hold statements (or the handlers and match cases that do).
_STATEMENT_LISTS = ("body", "orelse", "finalbody", "handlers", "cases")

#: The interpreter whose ``ast`` made a cache entry: ``ast.dump`` of the same file differs between Python
#: versions (new node fields), so each keeps its own entries.
_PYTHON = sys.version
#: How long after its last modification a file's digest may be cached. A file edited again without changing its
#: size, within the file system's timestamp resolution of the cached state, would keep its key; after this long,
#: another edit gets another mtime.
_SETTLE_NS = 2_000_000_000
_CACHE_FORMAT = 1


def cache_path() -> Path | None:
    """Where :func:`source_fingerprint` keeps its per-file cache: ``vcemu/fingerprint.json`` under
    ``$XDG_CACHE_HOME`` (when set to an absolute path) or ``~/.cache``; None without a home directory."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")  # "~" itself when there is no home to expand
        if not os.path.isabs(base):
            return None
    return Path(base) / "vcemu" / "fingerprint.json"


def _read_cache(path: Path) -> dict[str, dict[str, list[Any]]]:
    """The entries of the cache file at ``path`` by interpreter, then by file path: ``[size, mtime_ns, ctime_ns,
    digest]``. Empty when it is missing, unreadable or not in this format; entries not of that shape are
    dropped."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != _CACHE_FORMAT or not isinstance(data.get("files"), dict):
        return {}
    out: dict[str, dict[str, list[Any]]] = {}
    for python, files in data["files"].items():
        if isinstance(files, dict):
            out[python] = {p: e for p, e in files.items() if isinstance(e, list) and len(e) == 4
                           and all(type(v) is int for v in e[:3]) and isinstance(e[3], str)
                           and e[3].startswith(("ast:", "bytes:"))}
    return out


def _write_cache(path: Path, files: dict[str, dict[str, list[Any]]]) -> None:
    """Write the cache atomically (a reader sees the old file or the new one); not at all when it cannot be."""
    from vcemu.outputs import write_text

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps({"format": _CACHE_FORMAT, "files": files}, sort_keys=True))
    except OSError:
        pass


def _git(top: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(top), *args], capture_output=True, text=True, timeout=10,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _git_state() -> tuple[str | None, bool | None]:
    """The commit and dirtiness of the checkout the packages are imported from, or (None, None) when they are
    not the top of a git work tree (an installed wheel: site-packages inside some other repository does not
    count) or git is missing."""
    top = _package_dir(PACKAGES[0]).parent
    found = _git(top, "rev-parse", "--show-toplevel")
    if found is None or Path(found.strip()).resolve() != top.resolve():
        return None, None
    commit = _git(top, "rev-parse", "HEAD")
    status = _git(top, "status", "--porcelain", "--untracked-files=no")
    return (commit.strip() if commit else None), (None if status is None else bool(status.strip()))


@functools.cache
def package_version() -> str | None:
    """The installed vcemu package's version; None if it is not installed. Looked up once per process."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("vcemu")
    except PackageNotFoundError:
        return None


def _library_versions() -> dict[str, str | None]:
    """The installed version of each of :data:`LIBRARIES` (None if it is not installed), read from the package
    metadata without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for name in LIBRARIES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


@functools.cache
def _version_record() -> tuple[tuple[str, Any], ...]:
    commit, dirty = _git_state()
    return (("version", package_version()), ("git_commit", commit), ("git_dirty", dirty),
            ("python", "{}.{}.{}".format(*sys.version_info[:3])), ("libraries", _library_versions()),
            ("source_sha256", source_fingerprint()))


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 (hex) of a file's bytes, read in blocks: the identity of an input (a trace, a job file) that a
    result records beside its path, since a path may later hold other data."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def code_version() -> dict[str, Any]:
    """The code that runs: ``version`` (the installed package's, None if not installed), ``git_commit`` and
    ``git_dirty`` (None outside a git checkout of vcemu), ``python`` (its version), ``libraries`` (each of
    :data:`LIBRARIES`' versions), ``source_sha256`` (:func:`source_fingerprint`). Computed once per process; a fresh
    dict each call."""
    return {k: dict(v) if isinstance(v, dict) else v for k, v in _version_record()}


def library_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What differs between the Python and library versions recorded in two ``config.json`` objects (their
    :func:`code_version` records), as ``numpy 1.26.4, now 2.4.6``; empty when nothing does or either has no record.
    Recorded, not compared, by a resume (the source fingerprint decides): a resume says these, so that results kept
    from another numpy or scipy are not passed off as this one's (reproducibility review)."""
    was, now = old.get(KEY), new.get(KEY)
    if not isinstance(was, Mapping) or not isinstance(now, Mapping):
        return []
    before = {"python": was.get("python"), **(was.get("libraries") or {})}
    after = {"python": now.get("python"), **(now.get("libraries") or {})}
    return [f"{name} {before[name]}, now {after.get(name)}" for name in before
            if before[name] is not None and before[name] != after.get(name)]


def fingerprint_of(record: Mapping[str, Any]) -> str | None:
    """The source fingerprint stored in a ``config.json`` (or ``summary.json``) object, None when it records
    none (written by a vcemu before this record existed)."""
    code = record.get(KEY)
    fp = code.get("source_sha256") if isinstance(code, Mapping) else None
    return fp if isinstance(fp, str) else None
