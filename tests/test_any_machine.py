"""The suite passes on any machine: whatever the temp dir's path, the terminal's width
or the machine's load.

The tests that print paths (``lich --help`` with a broken config, the ``lich plugins``
and ``lich config show`` tables) run again in a child pytest, once per ``--basetemp``
of a different length, from 6 to 60 characters: ``--help`` once failed whenever
pytest's temp dir counter had a single digit, because the error message holding the
path was word-wrapped. The tests themselves cover widths of 40, 80 and 200 columns;
each child also gets another ``COLUMNS`` from its parent, which the suite's pinned
terminal must make irrelevant.
"""

from __future__ import annotations

import ast
import itertools
import os
import random
import re
import shutil
import string
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PATH_PRINTING_TESTS = [
    f"tests/cli/test_plugins_cli.py::{name}" for name in (
        "test_help_with_a_broken_config_still_works",
        "test_help_keeps_each_problem_of_a_broken_config_on_its_own_line",
        "test_piped_plugins_table_keeps_long_paths_and_errors_whole",
        "test_plugins_table_on_a_terminal_never_wraps_a_path_or_an_error",
        "test_config_show_on_a_narrow_terminal_keeps_the_file_path_whole",
    )
]
EXPECTED_PASSES = 3 + 1 + 1 + 3 + 1  # the parametrized ones run at three widths

# A handful of lengths: the shortest a path under /tmp can be, the longest the issue
# names, and steps between that move the path's end across many columns.
BASETEMP_LENGTHS = (6, 17, 29, 41, 52, 60)


def _scratch_root() -> str:
    return "/tmp" if os.access("/tmp", os.W_OK) else tempfile.gettempdir()


def _own_dir(length: int) -> Path | None:
    """A new directory, ours alone, whose path is ``length`` characters long (None when
    no such name is free, or the temp dir's own path is too long for it).

    pytest empties and recreates ``--basetemp``: it must be a directory this test made,
    never one that happened to exist. ``os.mkdir`` fails on an existing name, so a
    directory it creates is ours.
    """
    root = _scratch_root()
    room = length - len(root) - 1
    if room < 1:
        return None
    rng = random.Random()
    names = ["".join(rng.choices(string.ascii_lowercase + string.digits, k=room))
             for _ in range(50)]
    for name in names:
        path = Path(root, name)
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    return None


@pytest.fixture
def basetemps() -> Iterator[list[Path]]:
    made = [p for p in (_own_dir(n) for n in BASETEMP_LENGTHS) if p is not None]
    try:
        yield made
    finally:
        for path in made:
            shutil.rmtree(path, ignore_errors=True)


def test_path_printing_tests_pass_with_any_basetemp_length(basetemps: list[Path]) -> None:
    lengths = [len(str(p)) for p in basetemps]
    # The short end matters most (the old failure was a path of one length); the long
    # end needs no free names, so only a crowded or deep temp dir can drop lengths.
    assert lengths, "no --basetemp could be made"
    assert max(lengths) == 60
    # The children run at once (each is mostly interpreter and pytest start-up), two
    # at a time: the machine has two cores and other tests' servers may be busy.
    runs = list(zip(basetemps, itertools.cycle(["40", "200", "80"]), strict=False))
    failures = []
    for batch in (runs[i:i + 2] for i in range(0, len(runs), 2)):
        children = [(basetemp, columns, subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
             f"--basetemp={basetemp}", *PATH_PRINTING_TESTS],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "COLUMNS": columns},
        )) for basetemp, columns in batch]
        for basetemp, columns, child in children:
            try:
                out, err = child.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                child.kill()
                out, err = child.communicate()
            summary = out.strip().splitlines()[-1:] or [""]
            if child.returncode != 0 or f"{EXPECTED_PASSES} passed" not in summary[0]:
                failures.append(f"--basetemp={basetemp} ({len(str(basetemp))} chars), "
                                f"COLUMNS={columns}:\n{out[-3000:]}{err[-2000:]}")
    assert not failures, "\n\n".join(failures)


# ------------------------------------------------------------- no timed assertions

_CLOCKS = {"monotonic", "perf_counter", "time", "process_time"}


def _reads_a_clock(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _CLOCKS
        for n in ast.walk(node)
    )


def _is_timed(node: ast.AST) -> bool:
    """``assert <clock> - started < N``, or ``elapsed = <clock> - started`` to assert on."""
    if isinstance(node, ast.Assert):
        return _reads_a_clock(node.test)
    if isinstance(node, ast.Assign) and _reads_a_clock(node.value):
        return any(isinstance(t, ast.Name) and re.fullmatch(r"(elapsed|took)\w*", t.id)
                   for t in node.targets)
    return False


def test_no_test_asserts_on_elapsed_time() -> None:
    # "It took less than N seconds" fails on a loaded machine, however generous N is:
    # bound the wait instead (lich.testing.wait) and assert on what happened.
    offenders = []
    for path in (ROOT / "tests").rglob("*.py"):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except SyntaxError:
            continue  # the plugin zoo holds files that do not parse, on purpose
        offenders += [f"{path.relative_to(ROOT)}:{node.lineno}"
                      for node in ast.walk(tree) if _is_timed(node)]
    assert not offenders, f"wall-clock assertions: {offenders}"
