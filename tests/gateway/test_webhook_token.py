"""A webhook with no token configured (#28.10): loopback is not private — every local
user can reach it — so lich generates a token, keeps it ``0600``, says where, and
refuses every request without it; only ``open = true`` serves tokenless."""

from __future__ import annotations

import logging
import stat
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from lich.gateway.registry import GatewayError

from .conftest import events


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as c:
        yield c


async def _start(start_gateway: Callable[..., Any], **webhook: Any) -> tuple[Any, str]:
    runner = await start_gateway(["webhook"], {"webhook": {"port": 0, **webhook}}, env={})
    return runner, f"http://127.0.0.1:{runner.adapter('webhook').port}"


async def test_without_a_token_one_is_generated_kept_private_and_required(
    start_gateway: Any, client: httpx.AsyncClient, tmp_path: Path,
    gateway_log: pytest.LogCaptureFixture,
) -> None:
    token_file = tmp_path / "state" / "lich" / "webhook-token"
    _, url = await _start(start_gateway, open=False, token_file=str(token_file))

    token = token_file.read_text(encoding="utf-8").strip()
    assert len(token) >= 32
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
    # Another local user, or a page's script, without the file: refused.
    for headers in ({}, {"x-lich-token": "guess"}, {"authorization": "Bearer x"}):
        refused = await client.post(f"{url}/message", json={"text": "read notes.txt"},
                                    headers=headers)
        assert refused.status_code == 401, headers
    ok = await client.post(f"{url}/message", json={"text": "hi"},
                           headers={"x-lich-token": token})
    assert ok.status_code == 200
    # The operator is told where the token is and how to send it — not the token.
    (said,) = events(gateway_log, "webhook_token_generated")
    assert said["token_file"] == str(token_file)
    assert "x-lich-token: $(cat " in said["detail"]
    assert all(token not in r.getMessage() for r in gateway_log.records)
    assert events(gateway_log, "webhook_listening")[0]["token"] == "generated"


async def test_a_restart_keeps_the_generated_token(
    start_gateway: Any, tmp_path: Path
) -> None:
    token_file = tmp_path / "tok"
    first, _ = await _start(start_gateway, open=False, token_file=str(token_file))
    await first.stop(grace_s=1)
    again, _ = await _start(start_gateway, open=False, token_file=str(token_file))
    assert again.adapter("webhook").token == token_file.read_text(encoding="utf-8").strip()


async def test_open_serves_without_a_token_and_says_so(
    start_gateway: Any, client: httpx.AsyncClient, tmp_path: Path,
    gateway_log: pytest.LogCaptureFixture,
) -> None:
    token_file = tmp_path / "never"
    _, url = await _start(start_gateway, open=True, token_file=str(token_file))
    assert (await client.post(f"{url}/message", json={"text": "hi"})).status_code == 200
    assert not token_file.exists()
    (said,) = events(gateway_log, "webhook_open")
    assert "every local user" in said["detail"]
    assert [r.levelno for r in gateway_log.records
            if "webhook_open" in r.getMessage()] == [logging.WARNING]


async def test_a_token_that_cannot_be_kept_refuses_to_start(
    start_gateway: Any, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory", encoding="utf-8")
    with pytest.raises(GatewayError, match=r"cannot keep a generated one in .*open = true"):
        await _start(start_gateway, open=False, token_file=str(blocker / "tok"))


async def test_a_token_file_that_is_not_a_token_refuses_to_start(
    start_gateway: Any, tmp_path: Path
) -> None:
    bad = tmp_path / "tok"
    bad.write_text("short\n", encoding="utf-8")
    with pytest.raises(GatewayError, match="not a token"):
        await _start(start_gateway, open=False, token_file=str(bad))
