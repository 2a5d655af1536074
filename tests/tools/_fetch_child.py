"""Run ``fetch_url`` in a process of its own and report its peak memory.

``python _fetch_child.py WARMUP_URL URL MAX_CHARS`` fetches ``WARMUP_URL`` first
(so that every module and buffer a fetch needs is in place), notes the peak
resident size, fetches ``URL`` with ``max_chars``, and prints one JSON line:
``{"before": KiB, "after": KiB, "ok": bool, "output": str, "error": str|null}``.
The difference is what that one fetch added to the process's peak.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
from pathlib import Path

from lich.tools import ToolExecutor, ToolRegistry
from lich.types import ToolCall
from lich_builtin_tools._web import make_web_tools


async def main(warmup: str, url: str, max_chars: int) -> None:
    registry = ToolRegistry()
    for tool in make_web_tools():
        registry.register(tool)
    executor = ToolExecutor(registry, work_dir=Path.cwd(),
                            tool_settings={"fetch_url": {"allow_private": True}})

    async def fetch(target: str, n: int) -> tuple[bool, str, str | None]:
        result = await executor.execute(
            ToolCall("t1", "fetch_url", {"url": target, "max_chars": n}))
        return result.ok, result.output, result.error

    await fetch(warmup, max_chars)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ok, output, error = await fetch(url, max_chars)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"before": before, "after": after, "ok": ok, "output": output,
                      "error": error}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
