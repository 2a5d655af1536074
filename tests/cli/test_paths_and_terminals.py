"""A work dir that does not exist is an error, never created; ``lich tui`` off a
terminal exits 2 saying why instead of spinning (real subprocesses, with a
pseudo-terminal or none)."""

from __future__ import annotations

import os
import pty
import subprocess
from pathlib import Path
from typing import Any

from .conftest import lich_command, run_lich, write_config


def test_a_missing_work_dir_is_an_error_and_is_not_created(
    tmp_path: Path, work: Path, scripted: Any, lich: Any
) -> None:
    server = scripted(["must not be asked"])
    write_config(work, server.base_url)
    missing = tmp_path / "no" / "such" / "dir"
    a_file = work / "notes.txt"
    a_file.write_text("", encoding="utf-8")

    run = lich("--work-dir", str(missing), "hello")
    chat = lich("chat", "--work-dir", str(missing), input="hi\n")
    init = lich("config", "init", "--work-dir", str(missing))
    not_a_dir = lich("--work-dir", str(a_file), "hello")

    for result in (run, chat, init):
        assert result.exit_code == 2, result.output
        assert f"{missing} does not exist (lich does not create the work dir)" in result.output
    assert not_a_dir.exit_code == 2
    assert "is not a directory" in not_a_dir.output
    assert not (tmp_path / "no").exists()
    assert server.requests == []


def test_a_missing_work_dir_in_the_config_file_is_an_error(
    tmp_path: Path, work: Path, scripted: Any, lich: Any
) -> None:
    server = scripted(["must not be asked"])
    config = write_config(work, server.base_url, extra='work_dir = "../gone"')

    result = lich("hello")

    assert result.exit_code == 2
    assert f"{config}: $.work_dir: no such directory: {tmp_path / 'gone'}" in result.stderr
    assert not (tmp_path / "gone").exists()
    assert server.requests == []


def test_tui_with_stdin_not_a_terminal_ends_with_exit_2(work: Path) -> None:
    proc = subprocess.run(
        [*lich_command(), "tui"], cwd=work, stdin=subprocess.DEVNULL, capture_output=True,
        text=True, timeout=60,
    )

    assert proc.returncode == 2, proc.stderr
    assert "lich: error: the TUI needs a terminal: stdin is not a terminal" in proc.stderr
    assert "\x1b[" not in proc.stdout  # no escape codes into the pipe


def test_tui_with_stdout_not_a_terminal_ends_with_exit_2(work: Path) -> None:
    # stdin a real pseudo-terminal, stdout a pipe: `lich tui | less`.
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run(
            [*lich_command(), "tui"], cwd=work, stdin=follower, capture_output=True,
            text=True, timeout=60, env=dict(os.environ),
        )
    finally:
        os.close(follower)
        os.close(leader)

    assert proc.returncode == 2, proc.stderr
    assert "the TUI needs a terminal: stdout is not a terminal" in proc.stderr
    assert proc.stdout == ""


def test_bare_lich_still_reads_a_piped_task(work: Path, scripted: Any) -> None:
    server = scripted(["from the pipe"])
    write_config(work, server.base_url)

    proc = run_lich(cwd=work, input="what is here?")

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "from the pipe"
