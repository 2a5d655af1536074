"""A real ``lich gateway`` process for the reliability tests: started, its stderr
collected, its webhook port read from the log, and stopped with SIGTERM (killed if it
does not stop) whatever the test did."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path

from attrs import define

from lich.testing import async_wait_for

__all__ = ["GatewayProcess", "gateway_process"]


@define
class GatewayProcess:
    """The running gateway: its process, its log lines so far, its webhook port."""

    process: asyncio.subprocess.Process
    lines: list[str]
    port: int


@contextlib.asynccontextmanager
async def gateway_process(
    work: Path,
    env: Mapping[str, str],
    *platforms: str,
    preexec_fn: Callable[[], None] | None = None,
) -> AsyncIterator[GatewayProcess]:
    """``lich --work-dir WORK gateway PLATFORMS...``, yielded once its webhook listens."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "lich", "--work-dir", str(work), "gateway", *platforms,
        cwd=work, env=dict(env), stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE, preexec_fn=preexec_fn,
    )
    lines: list[str] = []

    async def read_stderr() -> None:
        assert process.stderr is not None
        async for raw in process.stderr:
            lines.append(raw.decode(errors="replace").rstrip())

    reader = asyncio.create_task(read_stderr())
    try:
        listening = await async_wait_for(
            lambda: next((ln for ln in lines if "event=webhook_listening" in ln), None), 60,
            lambda: f"the webhook to listen; stderr: {lines}")
        port = int(re.search(r"port=(\d+)", listening).group(1))  # type: ignore[union-attr]
        yield GatewayProcess(process, lines, port)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reader, 10)
