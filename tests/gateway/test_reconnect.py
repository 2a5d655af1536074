"""The reconnect loop the websocket platforms (discord, twitch) share, on its own.

The adapters' end-to-end tests (test_discord.py, test_twitch.py) drive it
against the fakes; here each way a connection can end is scripted directly.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, cast

import pytest

from lich.backoff import Backoff
from lich.gateway._base import Reconnect, WebsocketAdapterBase
from lich.gateway.config import Allowlist, GatewayConfig
from lich.gateway.registry import AdapterContext, GatewayError
from lich.testing import async_wait_for

from .conftest import events


class _Adapter(WebsocketAdapterBase):
    name = "fakeplatform"


def _adapter() -> _Adapter:
    context = AdapterContext("fakeplatform", cast(Any, None), GatewayConfig(), None, env={})
    adapter = _Adapter(context, Allowlist())
    adapter.secrets = ["s3cret"]
    return adapter


def _script(adapter: _Adapter, *outcomes: BaseException | None) -> Callable[[], Any]:
    """A ``connect_once`` that ends each connection as scripted, then stops the adapter."""
    remaining = list(outcomes)

    async def connect_once() -> None:
        adapter.connections += 1
        adapter.ready.set()
        outcome = remaining.pop(0)
        if not remaining:
            adapter._stop.set()
        if outcome is not None:
            raise outcome

    return connect_once


async def test_every_way_a_connection_ends_is_logged_and_followed_by_the_backoff(
    gateway_log: pytest.LogCaptureFixture,
) -> None:
    adapter = _adapter()
    backoff = Backoff(0.0, 0.0)
    await adapter.keep_connected(_script(
        adapter,
        None,  # the server closed the connection
        Reconnect("server asked to reconnect", mode="resume"),
        OSError("reset by peer, token s3cret"),
        KeyError("a bug"),
        None,
    ), backoff)
    assert adapter.connections == 5
    assert adapter.failure is None
    assert not adapter.ready.is_set()  # cleared when the last connection ended
    lost = events(gateway_log, "connection_lost")
    assert [e["error"] for e in lost] == [
        "connection closed", "OSError: reset by peer, token [redacted]", "KeyError: 'a bug'"]
    assert all(e["platform"] == "fakeplatform" and e["retry_in_s"] == "0.0" for e in lost)
    [reconnecting] = events(gateway_log, "reconnecting")
    assert (reconnecting["reason"], reconnecting["mode"]) == ("server asked to reconnect",
                                                              "resume")
    assert backoff.failures == 4  # one per drop; the last ended with the stop


async def test_a_refusal_ends_the_loop_with_the_reason(
    gateway_log: pytest.LogCaptureFixture,
) -> None:
    adapter = _adapter()
    remaining = [OSError("drop"), GatewayError("bad token"), None]

    async def connect_once() -> None:
        adapter.connections += 1
        outcome = remaining.pop(0)
        if outcome is not None:
            raise outcome

    await adapter.keep_connected(connect_once, Backoff(0.0, 0.0))
    assert adapter.connections == 2  # no third connection after the refusal
    assert adapter.failure == "bad token"
    assert events(gateway_log, "adapter_failed")[0]["error"] == "bad token"


async def test_stopping_ends_the_wait_for_the_next_connection(
    gateway_log: pytest.LogCaptureFixture,
) -> None:
    adapter = _adapter()

    async def connect_once() -> None:
        adapter.connections += 1

    hour = Backoff(3600.0, 3600.0)  # only the stop can end this wait
    loop = asyncio.create_task(adapter.keep_connected(connect_once, hour))
    await async_wait_for(lambda: events(gateway_log, "connection_lost"), what="the first drop")
    adapter._stop.set()
    await asyncio.wait_for(loop, 30)
    assert adapter.connections == 1
