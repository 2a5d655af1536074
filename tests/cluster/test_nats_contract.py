"""The bus contract against the nats bus, on a real broker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from lich.nats_bus.bus import NatsBus
from lich.nats_bus.settings import partition_of
from lich.testing.contracts import BusContract, ContractModel

from .conftest import chats_in_distinct_partitions

PARTITIONS = 4


class TestNatsBus(BusContract):
    parallel_chats = chats_in_distinct_partitions("contract", 2, PARTITIONS)

    @pytest.fixture
    async def bus(self, model: ContractModel, make_nats_bus: Callable[..., Any]) -> NatsBus:
        bus: NatsBus = await make_nats_bus(model, queue_limit=self.queue_limit,
                                           partitions=PARTITIONS)
        return bus


def test_the_parallel_chats_are_in_different_partitions() -> None:
    partitions = {partition_of("contract", c, PARTITIONS) for c in TestNatsBus.parallel_chats}
    assert len(partitions) == len(TestNatsBus.parallel_chats)
