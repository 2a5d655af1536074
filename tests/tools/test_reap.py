"""The builtin tools' one reaper: kill a child (or its whole process group) and wait
for it, bounded, also while the task is being cancelled."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

from lich_builtin_tools._common import kill_process, reap

from .conftest import process_alive, wait_until_dead


async def _spawn(script: str, cwd: Path, *, session: bool) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        "bash", "-c", script, cwd=cwd, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=session,
    )


def _read(path: Path) -> str:
    return path.read_text().strip() if path.exists() else ""


async def _pid_in(path: Path) -> int:
    for _ in range(1500):  # 30 s: only a hang bound
        text = await asyncio.to_thread(_read, path)
        if text:
            return int(text)
        await asyncio.sleep(0.02)
    raise AssertionError(f"{path} never appeared")


async def test_reap_kills_and_waits_for_a_running_child(tmp_path: Path) -> None:
    proc = await _spawn("sleep 100", tmp_path, session=False)
    assert await reap(proc) == -9
    assert proc.returncode == -9


async def test_reap_of_a_child_that_already_exited_gives_its_code(tmp_path: Path) -> None:
    proc = await _spawn("exit 3", tmp_path, session=False)
    await proc.wait()
    assert await reap(proc) == 3
    kill_process(proc)  # gone already: no error


async def test_reaping_a_group_kills_what_the_leader_left_in_the_background(
    tmp_path: Path,
) -> None:
    proc = await _spawn("sleep 100 & echo $! > bg.pid; exit 0", tmp_path, session=True)
    background = await _pid_in(tmp_path / "bg.pid")
    assert await proc.wait() == 0
    assert process_alive(background)
    assert await reap(proc, group=True) == 0  # the leader's own code
    assert await asyncio.to_thread(wait_until_dead, [background]) == []


async def test_a_cancelled_task_still_reaps_its_child(tmp_path: Path) -> None:
    proc = await _spawn("sleep 100", tmp_path, session=False)

    async def tool() -> None:
        try:
            await proc.wait()
        finally:
            await reap(proc)

    task = asyncio.create_task(tool())
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    assert proc.returncode == -9
