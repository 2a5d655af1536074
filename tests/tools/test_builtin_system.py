"""process_list, disk_usage, env_get (the reference's tools_extra tests, ported)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from lich.config import LichConfig, ProviderConfig

from .conftest import Runner


async def test_process_list_rows_from_proc(run: Runner) -> None:
    result = await run("process_list", {"max_results": 500})
    assert result.ok
    rows = result.output.split("\n")
    pid, comm, _cmdline = rows[0].split("\t", 2)
    assert pid.isdigit()
    assert comm
    mine = [r for r in rows if r.startswith(f"{os.getpid()}\t")]
    assert len(mine) == 1
    assert len(mine[0].split("\t", 2)[2]) <= 200


async def test_process_list_filter_finds_a_process_by_its_command_line(run: Runner) -> None:
    # A process of its own with a marker in its arguments (the test runner's own
    # command line is pytest's, or an xdist worker's), matched case-insensitively.
    marker = f"marker-{secrets.token_hex(4)}"
    child = subprocess.Popen(  # noqa: ASYNC220 (starting it does not wait for it)
        [sys.executable, "-c", "import sys; sys.stdin.read()", marker],
        stdin=subprocess.PIPE)
    try:
        result = await run("process_list", {"filter": marker.upper()})
        assert result.ok
        assert [r.split("\t", 1)[0] for r in result.output.split("\n")] == [str(child.pid)]
    finally:
        child.communicate(timeout=30)
    none = await run("process_list", {"filter": "no-such-process-zz9"})
    assert none.output == "no matching processes"


async def test_process_list_suppresses_the_overflow(run: Runner) -> None:
    result = await run("process_list", {"max_results": 1})
    lines = result.output.split("\n")
    assert len(lines) == 2
    assert lines[1].startswith("(... ")
    assert lines[1].endswith(" more processes suppressed)")


async def test_process_list_without_proc(run: Runner, monkeypatch: pytest.MonkeyPatch) -> None:
    from lich_builtin_tools import _system

    monkeypatch.setattr(_system, "PROC", str(run.work_dir / "no-proc"))
    assert (await run("process_list", {})).error == "proc_unavailable"


async def test_disk_usage_sorted_with_total(run: Runner, work: Path) -> None:
    (work / "big").mkdir()
    (work / "big" / "blob.bin").write_bytes(b"x" * 50_000)
    (work / "small.txt").write_bytes(b"y" * 10)
    (work / "-dash").write_bytes(b"z" * 300)
    (work / "odd\tname").write_bytes(b"w" * 20)
    result = await run("disk_usage", {})
    assert result.ok, result
    lines = result.output.split("\n")
    names = [line.split("\t", 1)[1] for line in lines[:-1]]
    sizes = [int(line.split("\t", 1)[0]) for line in lines[:-1]]
    assert names == ["big", "-dash", "odd\tname", "small.txt"]
    assert sizes == sorted(sizes, reverse=True)
    assert sizes[0] >= 50_000
    assert sizes[1:] == [300, 20, 10]
    assert lines[-1] == f"TOTAL\t{sum(sizes)}"
    capped = (await run("disk_usage", {"max_entries": 1})).output.split("\n")
    assert capped[1] == "(... 3 more entries suppressed)"
    assert capped[2] == f"TOTAL\t{sum(sizes)}"


async def test_disk_usage_errors(run: Runner, work: Path) -> None:
    assert (await run("disk_usage", {"path": "../../etc"})).error is not None
    assert ((await run("disk_usage", {"path": "../../etc"})).error or "").startswith(
        "path_escape:"
    )
    assert (await run("disk_usage", {"path": "missing"})).error == "not_found: missing"
    (work / "f").write_text("x")
    assert (await run("disk_usage", {"path": "f"})).error == "not_a_directory: f"
    (work / "empty").mkdir()
    assert (await run("disk_usage", {"path": "empty"})).output == "TOTAL\t0"


async def test_env_get_lengths_without_reveal(
    run: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LICH_TEST_SECRET_1", "abcdefghi")
    monkeypatch.setenv("LICH_TEST_PLAIN", "visible")
    monkeypatch.delenv("LICH_TEST_UNSET", raising=False)
    result = await run("env_get", {"keys": ["LICH_TEST_SECRET_1", "LICH_TEST_UNSET", 5, ""]})
    assert result.output == "LICH_TEST_SECRET_1=set (9 chars)\nLICH_TEST_UNSET=<unset>"
    assert "abcdefghi" not in result.output


async def test_env_get_reveal_redacts_secret_names(
    run: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LICH_TEST_SECRET_1", "abcdefghi")
    monkeypatch.setenv("LICH_TEST_PLAIN", "visible")
    monkeypatch.setenv("ODD_PROVIDER_VAR", "provider-secret")
    run.config = LichConfig(
        work_dir=str(run.work_dir), plugins=(),
        providers=(ProviderConfig(kind="ollama", name="o", model="m",
                                  api_key_env="ODD_PROVIDER_VAR"),),
    )
    result = await run(
        "env_get",
        {"keys": ["LICH_TEST_SECRET_1", "LICH_TEST_PLAIN", "ODD_PROVIDER_VAR"], "reveal": True},
    )
    assert result.output.split("\n") == [
        "LICH_TEST_SECRET_1=<redacted: 9 chars>",
        "LICH_TEST_PLAIN=visible",
        "ODD_PROVIDER_VAR=<redacted: 15 chars>",
    ]


async def test_env_get_listing_and_prefix_never_leak_values(
    run: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LICH_TEST_SECRET_1", "abcdefghi")
    monkeypatch.setenv("LICH_TEST_PLAIN", "visible")
    listing = await run("env_get", {})
    count, names = listing.output.split(" variables: ", 1)
    assert int(count) == len(os.environ)
    assert "LICH_TEST_SECRET_1" in names.split(", ")
    assert "abcdefghi" not in listing.output
    assert "visible" not in listing.output
    prefixed = await run("env_get", {"prefix": "LICH_TEST_"})
    assert prefixed.output == "LICH_TEST_PLAIN=set (7 chars)\nLICH_TEST_SECRET_1=set (9 chars)"
    revealed = await run("env_get", {"prefix": "LICH_TEST_", "reveal": True})
    assert revealed.output == (
        "LICH_TEST_PLAIN=visible\nLICH_TEST_SECRET_1=<redacted: 9 chars>"
    )
    assert (await run("env_get", {"prefix": "NO_SUCH_PREFIX_ZZ"})).output == (
        "no variables start with NO_SUCH_PREFIX_ZZ"
    )


async def test_env_get_keys_win_over_prefix_and_are_capped(
    run: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LICH_TEST_PLAIN", "visible")
    both = await run("env_get", {"keys": ["LICH_TEST_PLAIN"], "prefix": "PATH"})
    assert both.output == "LICH_TEST_PLAIN=set (7 chars)"
    many = await run("env_get", {"keys": [f"K{i}" for i in range(80)]})
    assert len(many.output.split("\n")) == 50
