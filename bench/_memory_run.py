"""B5's measured process: one N-turn run, and the memory it took.

``python -m bench._memory_run BASE_URL WARMUP_URL N WORK_DIR`` builds an agent
(the ``openai_compat`` provider against the scripted model at BASE_URL, the
trivial tool, sessions on) and reads its RSS; runs one short conversation
through a second agent against WARMUP_URL (one tool turn: this pays for the
lazy imports — httpx, TLS defaults — and the first-call caches) and reads the
RSS again; then runs one conversation of N tool turns and prints one JSON
line with the readings and the peak (``VmHWM``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from bench import _tool_plugin
from bench._common import rss_kib

__all__ = ["main", "measure"]


async def measure(base_url: str, warmup_url: str, turns: int, work_dir: str) -> dict[str, Any]:
    """Run once and report the memory readings."""
    from lich.agent import Agent
    from lich.config import LichConfig, ProviderConfig

    def agent_for(url: str, max_turns: int) -> Agent:
        values: dict[str, Any] = {
            "providers": (ProviderConfig(kind="openai_compat", name="bench", model="scripted",
                                         base_url=url),),
            "plugins": ("openai_compat",), "work_dir": work_dir, "stream": False,
            "max_turns": max_turns,
        }
        config = LichConfig(**values)
        return Agent(config, plugins=[("bench_tool", _tool_plugin)])

    agent = agent_for(base_url, turns + 1)
    started = rss_kib()
    warm = agent_for(warmup_url, 2)
    try:
        await warm.run("go")
    finally:
        await warm.aclose()
    before = rss_kib()
    try:
        result = await agent.run("go")
    finally:
        await agent.aclose()
    after = rss_kib()
    return {
        "rss_start_kib": started["rss"],
        "rss_before_kib": before["rss"],
        "peak_before_kib": before["peak"],
        "rss_after_kib": after["rss"],
        "peak_rss_kib": after["peak"],
        "turns_used": result.outcome.turns_used,
        "messages": len(result.messages),
        "text": result.text,
    }


def main(argv: list[str]) -> int:
    """Measure and print one JSON line."""
    base_url, warmup_url, turns, work_dir = argv[0], argv[1], int(argv[2]), argv[3]
    print(json.dumps(asyncio.run(measure(base_url, warmup_url, turns, work_dir))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
