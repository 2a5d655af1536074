"""The helper processes tools start (the grep worker, ``du``) never carry lich's secrets,
and ``disk_usage`` does not size protected files.

A child's ``/proc/<pid>/environ`` is readable by every process of the same user, so a
command a ``terminal`` call left running could harvest provider keys from any child a
later tool starts: the children get the scrubbed environment, as ``terminal`` does.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from provider_kinds import builtin_provider_kinds

from lich.config import LichConfig
from lich.executor import ToolExecutor
from lich.protected import ProtectedPaths
from lich.providers import secret_env_names
from lich.tools import ToolRegistry
from lich.types import ToolCall, ToolResult
from lich_builtin_tools import _grep, builtin_tools

KEY = "sk-must-not-reach-a-child-0123456789"


def _executor(work: Path) -> ToolExecutor:
    config = LichConfig(work_dir=str(work), plugins=())
    registry = ToolRegistry()
    for item in builtin_tools(config):
        registry.register(item)
    return ToolExecutor(
        registry, work_dir=work,
        secret_env_names=secret_env_names(config, builtin_provider_kinds()),
        protected=ProtectedPaths.for_config(config),
    )


async def _call(work: Path, name: str, args: dict[str, object]) -> ToolResult:
    return await _executor(work).execute(ToolCall("c1", name, args))


def _spy(path: Path, dump: Path, then: str = "") -> None:
    """An executable that writes its own environment to ``dump``, then runs ``then``."""
    path.write_text(f"#!/bin/sh\nenv > '{dump}'\n{then}\n", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("GITHUB_TOKEN", KEY + "-gh")


@pytest.mark.usefixtures("keyed")
async def test_the_du_that_disk_usage_starts_gets_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work, bin_dir = tmp_path / "work", tmp_path / "bin"
    work.mkdir()
    bin_dir.mkdir()
    (work / "a.txt").write_text("x" * 10, encoding="utf-8")
    dump = tmp_path / "du-env.txt"
    _spy(bin_dir / "du", dump, f'PATH="{os.environ["PATH"]}" exec du "$@"')
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")

    result = await _call(work, "disk_usage", {})

    assert result.ok, result.error
    seen = dump.read_text(encoding="utf-8")
    assert "PATH=" in seen  # the spy ran, as du
    assert KEY not in seen


@pytest.mark.usefixtures("keyed")
async def test_the_grep_worker_gets_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("needle\n", encoding="utf-8")
    dump = tmp_path / "worker-env.txt"
    spy = tmp_path / "spy_worker.py"
    spy.write_text(
        "import os, sys\n"
        f"open({str(dump)!r}, 'w').write(repr(dict(os.environ)))\n"
        "sys.stdin.read()\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(_grep, "_WORKER", spy)

    await _call(work, "grep_files", {"pattern": "needle"})

    seen = dump.read_text(encoding="utf-8")
    assert "PATH" in seen
    assert KEY not in seen


async def test_disk_usage_does_not_size_protected_files_below_a_child(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "id_rsa").write_bytes(b"k" * 12_345)
    (work / "sub" / "KEY.PEM").write_bytes(b"k" * 777)
    (work / "sub" / "notes.txt").write_bytes(b"n" * 10)

    result = await _call(work, "disk_usage", {})

    assert result.ok, result.error
    sub = next(line for line in result.output.splitlines() if line.endswith("\tsub"))
    assert int(sub.split("\t")[0]) < 12_345  # the directory and notes.txt, not the key


@pytest.mark.parametrize("path", [
    ".env/..", ".lich/sessions/x.jsonl/..", "sub/id_rsa/..", ".lich/sessions/../../sub",
    "sub/../.env/x",
])
async def test_a_path_through_a_protected_entry_says_nothing_about_it(
    tmp_path: Path, path: str
) -> None:
    """Refused as written, before the walk steps in: `not_a_directory` against
    `not_found` would tell whether the file is there."""
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / ".env").write_text("K=v\n", encoding="utf-8")
    (work / "sub" / "id_rsa").write_text("key\n", encoding="utf-8")
    (work / ".lich" / "sessions").mkdir(parents=True)
    (work / ".lich" / "sessions" / "x.jsonl").write_text("{}\n", encoding="utf-8")

    for tool in ("read_file", "list_dir"):
        result = await _call(work, tool, {"path": path})
        assert result.error is not None
        assert result.error.startswith("forbidden_path:"), (tool, result.error)


@pytest.mark.parametrize(("name", "value"), [
    ("GITHUB_PAT", "ghp_abcdefghijklmnop"),
    ("HTTPS_PROXY", "http://user:s3cret-pw@proxy.example:3128"),
    ("REDIS_URL", "redis://:s3cret-pw@cache.example:6379/0"),
    ("MONGODB_URI", "mongodb://u:s3cret-pw@db.example/app"),
    ("SLACK_WEBHOOK_URL", "https://hooks.slack.example/services/T0/B0/XYZXYZXYZ"),
], ids=lambda v: v if v.isupper() else "value")  # a value in the id is in PYTEST_CURRENT_TEST
async def test_more_secret_shapes_are_scrubbed_and_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv(name, value)

    shown = await _call(work, "env_get", {"keys": [name], "reveal": True})
    shell = await _call(work, "terminal", {"command": "env"})

    assert shown.output == f"{name}=<redacted: {len(value)} chars>"
    assert value not in shell.output


async def test_a_plain_url_is_not_a_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("LICH_DOCS_URL", "https://docs.example/lich")

    shown = await _call(work, "env_get", {"keys": ["LICH_DOCS_URL"], "reveal": True})

    assert shown.output == "LICH_DOCS_URL=https://docs.example/lich"
