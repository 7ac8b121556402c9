"""The source fingerprint follows what the code does, not how it is written: a resumable command (``vcemu sweep``,
``oppcost``, ``vcsched``, ``apc``) throws away its stored results when the fingerprint differs, so a comment, a
docstring or a reformat must keep it, and any change of code must not."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from vcemu import provenance
from vcemu.provenance import fingerprint_trees

SOURCE = '''"""A module docstring."""

import math

RATE = 0.5  # a comment


class Host:
    """A class docstring."""

    def speed(self, x: float) -> float:
        """A method docstring."""
        return x * RATE + math.pi


async def poll(n: int) -> int:
    """An async function's docstring."""
    return n - 1


def only_a_docstring():
    """Nothing else."""


def help_text() -> str:
    return "shown by --help"
'''

REFORMATTED = """import math
RATE = (
  0.5
)
class Host:
  def speed(self, x: float) -> float: return (x*RATE) + math.pi
async def poll(n: int) -> int: return n-1
def only_a_docstring(): '''Other words.'''
def help_text() -> str:
  return 'shown by --help'
"""


def _tree(tmp_path: Path, source: str = SOURCE, name: str = "a.py") -> Path:
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True, exist_ok=True)
    (root / "__init__.py").write_text("")
    (root / "sub" / "b.py").write_text("VALUE = 1\n")
    (root / name).write_text(source)
    return root


def _fp(root: Path) -> str:
    return fingerprint_trees([("pkg", root)])


def _edited(tmp_path: Path, old: str, new: str) -> str:
    assert old in SOURCE
    return _fp(_tree(tmp_path / "edited", SOURCE.replace(old, new)))


def test_comments_and_blank_lines_do_not_change_it(tmp_path: Path) -> None:
    before = _fp(_tree(tmp_path))
    assert _edited(tmp_path, "# a comment", "# another comment, longer") == before
    assert _edited(tmp_path, "\n\nclass Host:", "\n# a new line of comment\n\n\n\nclass Host:  # here\n") == before


@pytest.mark.parametrize(("old", "new"), [
    ('"""A module docstring."""', '"""The module, described otherwise."""'),
    ('"""A module docstring."""\n', ""),
    ('"""A class docstring."""', "'''A class docstring,\n    on two lines.'''"),
    ('"""A method docstring."""', '"""Why it multiplies."""'),
    ('"""An async function\'s docstring."""', '"""Why it subtracts."""'),
    ('"""Nothing else."""', '"""Still nothing else."""'),
    ('    return "shown by', '    """A docstring added."""\n    return "shown by'),
], ids=["module", "module-removed", "class", "method", "async", "docstring-only-body", "added"])
def test_docstrings_do_not_change_it(tmp_path: Path, old: str, new: str) -> None:
    assert _edited(tmp_path, old, new) == _fp(_tree(tmp_path))


def test_a_reformat_does_not_change_it(tmp_path: Path) -> None:
    assert _fp(_tree(tmp_path / "reformatted", REFORMATTED)) == _fp(_tree(tmp_path))


@pytest.mark.parametrize(("old", "new"), [
    ("RATE = 0.5", "RATE = 0.6"),
    ("x * RATE", "x / RATE"),
    ("n - 1", "n + 1"),
    ('"shown by --help"', '"shown by --help, reworded"'),
    ("(self, x: float) -> float:", "(self, x: int) -> float:"),
    ('"""Nothing else."""', '"""Nothing else."""\n    return None'),
    ("import math", "import math as m\nmath = m"),
], ids=["constant", "operator", "sign", "help-text", "annotation", "statement", "import"])
def test_any_change_of_code_changes_it(tmp_path: Path, old: str, new: str) -> None:
    assert _edited(tmp_path, old, new) != _fp(_tree(tmp_path))


def test_the_path_of_each_file_counts(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    before = _fp(root)
    (root / "a.py").rename(root / "c.py")
    assert _fp(root) != before
    assert fingerprint_trees([("other", root)]) != _fp(root)


@pytest.mark.parametrize("broken", [b"def f(:\n    return 1\n", b"x = 1\0\n", b"x = '\xff'\n"],
                         ids=["syntax-error", "null-byte", "not-utf8"])
def test_a_file_that_does_not_parse_counts_by_its_bytes(tmp_path: Path, broken: bytes) -> None:
    root = _tree(tmp_path)
    without = _fp(root)
    (root / "broken.py").write_bytes(broken)
    with_it = _fp(root)
    assert with_it != without
    (root / "broken.py").write_bytes(broken + b"# a comment\n")  # bytes: every byte counts
    assert _fp(root) not in (with_it, without)


# ---- the per-file cache -------------------------------------------------------------------------------------------


def _aged(root: Path, seconds: float = 3600.0) -> Path:
    """Files last modified ``seconds`` ago: the cache leaves out files modified in its last moments."""
    then = time.time() - seconds
    for path in root.rglob("*.py"):
        os.utime(path, (then, then))
    return root


def _fail(*args: object) -> str:
    raise AssertionError("a cached file was read and parsed again")


def test_unchanged_files_are_not_parsed_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _aged(_tree(tmp_path))
    cache = tmp_path / "cache" / "fingerprint.json"
    first = fingerprint_trees([("pkg", root)], cache=cache)
    assert first == _fp(root)
    assert cache.is_file()
    monkeypatch.setattr(provenance, "_file_digest", _fail)
    assert fingerprint_trees([("pkg", root)], cache=cache) == first


def test_an_edit_that_keeps_the_size_is_seen(tmp_path: Path) -> None:
    root = _aged(_tree(tmp_path))
    cache = tmp_path / "fingerprint.json"
    first = fingerprint_trees([("pkg", root)], cache=cache)
    (root / "a.py").write_text(SOURCE.replace("RATE = 0.5", "RATE = 0.6"))
    _aged(root, 1800.0)
    assert fingerprint_trees([("pkg", root)], cache=cache) == _fp(root) != first


def test_a_file_modified_in_the_last_seconds_is_not_cached(tmp_path: Path) -> None:
    """Its next edit might keep its size and, within the clock's resolution, its mtime."""
    root = _aged(_tree(tmp_path))
    (root / "a.py").write_text(SOURCE)  # now
    cache = tmp_path / "fingerprint.json"
    fingerprint_trees([("pkg", root)], cache=cache)
    cached = json.loads(cache.read_text())["files"][provenance._PYTHON]
    assert str(root / "sub" / "b.py") in cached and str(root / "a.py") not in cached


@pytest.mark.parametrize("content", ["{not json", "[]", '{"format": 1, "files": {"%s": {"%s": [1, 2]}}}',
                                     '{"format": 1, "files": {"%s": {"%s": ["a", "b", "c", 4]}}}'],
                         ids=["not-json", "not-an-object", "short-entry", "wrong-types"])
def test_a_corrupt_cache_is_ignored_and_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 content: str) -> None:
    root = _aged(_tree(tmp_path))
    cache = tmp_path / "fingerprint.json"
    cache.write_text(content.replace("%s", json.dumps(provenance._PYTHON)[1:-1], 1).replace("%s", str(root / "a.py")))
    expected = _fp(root)
    assert fingerprint_trees([("pkg", root)], cache=cache) == expected
    monkeypatch.setattr(provenance, "_file_digest", _fail)  # replaced by a good one: used next time
    assert fingerprint_trees([("pkg", root)], cache=cache) == expected


def test_an_unreadable_or_unwritable_cache_is_ignored(tmp_path: Path) -> None:
    root = _aged(_tree(tmp_path))
    cache = tmp_path / "fingerprint.json"
    cache.mkdir()  # neither readable nor replaceable as a file
    assert fingerprint_trees([("pkg", root)], cache=cache) == _fp(root)
    blocked = tmp_path / "a-file" / "fingerprint.json"  # its directory cannot be made
    blocked.parent.write_text("")
    assert fingerprint_trees([("pkg", root)], cache=blocked) == _fp(root)


def test_another_pythons_cache_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ast.dump`` of the same file differs between Python versions (new node fields)."""
    root = _aged(_tree(tmp_path))
    cache = tmp_path / "fingerprint.json"
    fingerprint_trees([("pkg", root)], cache=cache)
    monkeypatch.setattr(provenance, "_PYTHON", "another python")
    calls = []
    real = provenance._file_digest
    monkeypatch.setattr(provenance, "_file_digest", lambda data: calls.append(1) or real(data))
    fingerprint_trees([("pkg", root)], cache=cache)
    assert len(calls) == 3
    assert set(json.loads(cache.read_text())["files"]) == {"another python", sys.version}  # both kept


def test_source_fingerprint_keeps_its_cache_in_the_users_cache_dir(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    fp = provenance.source_fingerprint.__wrapped__()
    assert fp == fingerprint_trees((name, provenance._package_dir(name)) for name in provenance.PACKAGES)
    assert (tmp_path / "vcemu" / "fingerprint.json").is_file()


def test_the_cache_dir_follows_xdg_and_ignores_a_relative_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # the XDG spec: relative paths are invalid
    assert provenance.cache_path() == tmp_path / "home" / ".cache" / "vcemu" / "fingerprint.json"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert provenance.cache_path() == tmp_path / "xdg" / "vcemu" / "fingerprint.json"
