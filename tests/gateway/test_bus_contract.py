"""The bus contract against the in-process bus (the default, ``[bus] kind = "memory"``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lich.agent import Agent
from lich.gateway.bus import GatewayBus
from lich.testing import make_test_config
from lich.testing.contracts import BusContract, ContractModel


class TestInProcessBus(BusContract):
    @pytest.fixture
    async def bus(self, model: ContractModel, tmp_path: Path) -> AsyncIterator[GatewayBus]:
        bus = GatewayBus(Agent(make_test_config(tmp_path), chat=model),
                         queue_limit=self.queue_limit)
        await bus.start()
        yield bus
        await bus.drain(0)
        await bus.agent.aclose()
