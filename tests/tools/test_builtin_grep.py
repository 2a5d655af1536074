"""grep_files: the reference's tests, the glob, limits, and the bound on pathological patterns."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from lich_builtin_tools import _grep

from .conftest import Runner, live_processes


def _tree(work: Path) -> None:
    (work / "a.ts").write_text("const alpha_value = 1;\nno match here\n")
    (work / "node_modules").mkdir()
    (work / "node_modules" / "dep.ts").write_text("const alpha_value = 2;\n")
    (work / "bin.ts").write_bytes(b"alpha_value\x00\x01\x02")
    (work / "sub").mkdir()
    (work / "sub" / "b.py").write_text("x = 1\n   alpha_value = 3   \n")


async def test_hits_skip_node_modules_and_binary_files(run: Runner, work: Path) -> None:
    _tree(work)
    result = await run("grep_files", {"pattern": "alpha_value"})
    assert result.ok
    assert result.output.split("\n") == [
        "a.ts:1: const alpha_value = 1;",
        "sub/b.py:2: alpha_value = 3",
    ]


async def test_glob_filters_file_names(run: Runner, work: Path) -> None:
    _tree(work)
    assert (await run("grep_files", {"pattern": "alpha", "glob": "*.ts"})).output == (
        "a.ts:1: const alpha_value = 1;"
    )
    assert (await run("grep_files", {"pattern": "alpha", "glob": "b.py"})).output == (
        "sub/b.py:2: alpha_value = 3"
    )
    assert (await run("grep_files", {"pattern": "alpha", "glob": "a*"})).output == (
        "a.ts:1: const alpha_value = 1;"
    )
    assert (await run("grep_files", {"pattern": "alpha", "glob": "*.md"})).output == ""


async def test_a_file_target_uses_its_basename(run: Runner, work: Path) -> None:
    _tree(work)
    assert (await run("grep_files", {"pattern": "alpha", "path": "sub/b.py"})).output == (
        "b.py:2: alpha_value = 3"
    )
    assert (await run("grep_files", {"pattern": "alpha", "path": "sub"})).output == (
        "b.py:2: alpha_value = 3"
    )


async def test_errors(run: Runner, work: Path) -> None:
    assert (await run("grep_files", {"pattern": "[unclosed"})).error == "invalid_regex: [unclosed"
    assert (await run("grep_files", {})).error == "missing_arg: pattern"
    assert (await run("grep_files", {"pattern": "x", "path": "nope"})).error == "not_found: nope"
    too_long = await run("grep_files", {"pattern": "a" * 1001})
    assert too_long.error == "pattern_too_long: 1001 chars (max 1000)"


async def test_no_match_is_ok_and_empty(run: Runner, work: Path) -> None:
    _tree(work)
    result = await run("grep_files", {"pattern": "zzz_nothing"})
    assert (result.ok, result.output) == (True, "")


async def test_max_results_suppresses_the_rest(run: Runner, work: Path) -> None:
    (work / "many.txt").write_text("hit\n" * 50)
    result = await run("grep_files", {"pattern": "hit", "max_results": 3})
    assert result.output.split("\n") == [
        "many.txt:1: hit", "many.txt:2: hit", "many.txt:3: hit",
        "(... 1 more matches suppressed)",
    ]


async def test_large_files_are_skipped(run: Runner, work: Path) -> None:
    (work / "big.txt").write_text("needle\n" + "x" * 1_000_000)
    (work / "small.txt").write_text("needle\n")
    assert (await run("grep_files", {"pattern": "needle"})).output == "small.txt:1: needle"


async def test_catastrophic_backtracking_returns_within_the_bound(
    run: Runner, work: Path
) -> None:
    # (a+)+$ against a long run of a's that ends in a mismatch backtracks
    # exponentially: without a bound this single search would run for hours.
    (work / "early.txt").write_text("aaaa\n")  # matches quickly (found before the deadline)
    (work / "evil.txt").write_text("a" * 64 + "!\n")
    # Unbounded, this search would outlast pytest's timeout; the error proves the budget
    # stopped it, with no wall-clock assertion.
    result = await run("grep_files", {"pattern": "(a+)+$"}, settings={"time_budget_s": 1})
    assert not result.ok
    assert result.error is not None
    assert result.error.startswith("search_timeout: grep_files stopped after its 1s time budget")
    assert result.output == "early.txt:1: aaaa"
    # The worker was killed, not left spinning.
    assert _worker_processes() == []


def _worker_processes() -> list[int]:
    mine = []
    for pid, fields in live_processes():
        if int(fields[1]) != os.getpid():
            continue
        with contextlib.suppress(OSError):
            if b"_grep_worker.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                mine.append(pid)
    return mine


def test_the_bound_is_documented() -> None:
    doc = _grep._grep_files.__doc__ or ""
    assert "worker process" in doc
    assert "time budget" in doc
    assert str(_grep.MAX_PATTERN_CHARS) in doc


async def test_a_bad_time_budget_setting_is_reported(run: Runner, work: Path) -> None:
    # Run directly, unchecked: the call fails with what `lich config validate` would say.
    result = await run("grep_files", {"pattern": "x"}, settings={"time_budget_s": "soon"})
    assert result.error == (
        "invalid_setting: $.tools.grep_files.time_budget_s: expected a number, got string"
    )
    result = await run("grep_files", {"pattern": "x"}, settings={"time_budget_s": 0})
    assert result.error == (
        "invalid_setting: $.tools.grep_files.time_budget_s: must be greater than 0, got 0.0"
    )
