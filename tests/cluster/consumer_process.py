"""A nats bus consumer in a process of its own, for the tests that kill it with SIGKILL.

    python consumer_process.py <nats url> <work dir> <partitions> <ack_wait_s> <started file>

Runs the stream's messages on a model that writes each message it starts to
``<started file>`` (one line each) and never answers one starting with
``hold``. Runs until killed.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lich.agent import Agent
from lich.gateway.bus import GatewayBus
from lich.nats_bus.bus import NatsBus
from lich.nats_bus.settings import NatsBusSettings
from lich.testing import make_test_config
from lich.testing.contracts import ContractModel
from lich.types import Message, UserMessage


class RecordingModel(ContractModel):
    def __init__(self, started_file: Path) -> None:
        super().__init__()
        self.started_file = started_file

    async def __call__(self, messages: Sequence[Message], tools: Any, options: Any) -> Any:
        text = next((m.content for m in reversed(messages) if isinstance(m, UserMessage)), "")
        with self.started_file.open("a", encoding="utf-8") as out:
            out.write(text + "\n")
        return await super().__call__(messages, tools, options)


async def main(url: str, work_dir: str, partitions: str, ack_wait_s: str, started: str) -> None:
    local = GatewayBus(Agent(make_test_config(Path(work_dir)),
                             chat=RecordingModel(Path(started))))
    bus = NatsBus(NatsBusSettings(servers=(url,), partitions=int(partitions),
                                  ack_wait_s=float(ack_wait_s), consume=True), local)
    await bus.start()
    Path(started).with_suffix(".ready").write_text("ready", encoding="utf-8")
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
