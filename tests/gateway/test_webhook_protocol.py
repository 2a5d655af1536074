"""The webhook's HTTP protocol, byte by byte, with either parser uvicorn can use.

With httptools installed (the ``gateway`` extra brings it) the webhook parses
requests with it; without, with h11. Both must keep the same guarantees: a kept-alive
connection serves request after request, a request head must come whole within
``header_timeout_s`` (else 408, or a silent close when nothing came), a head has a
size bound, and a malformed request is a JSON 400 that never reaches the model.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

import pytest

from lich.gateway.runner import GatewayRunner

HEADER_TIMEOUT_S = 0.3
# Generous: an idle kept-alive connection must outlive the header timeout in these tests.
IDLE_TIMEOUT_S = 60
HANG_GUARD_S = 60  # only against a hang: every read below ends long before


@pytest.fixture(params=["httptools", "h11"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The parser the webhook is to use; h11 by hiding httptools from the import."""
    if request.param == "h11":
        monkeypatch.setitem(sys.modules, "httptools", None)
    return str(request.param)


async def _start(start_gateway: Callable[..., Any]) -> tuple[GatewayRunner, int]:
    runner = await start_gateway(["webhook"], {"webhook": {
        "port": 0, "header_timeout_s": HEADER_TIMEOUT_S, "idle_timeout_s": IDLE_TIMEOUT_S}})
    return runner, runner.adapter("webhook").port


def _post(text: str) -> bytes:
    body = json.dumps({"text": text, "chat_id": "proto"}).encode()
    return (b"POST /message HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n%s" % (len(body), body))


async def _response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One response: status, headers (lower-cased names), body (by content-length)."""
    status = int((await reader.readline()).split()[1])
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, await reader.readexactly(int(headers["content-length"]))


async def test_the_gateway_extra_parses_with_httptools() -> None:
    pytest.importorskip("httptools")
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    from lich.gateway.config import WebhookSettings
    from lich.gateway.webhook import ConnectionGuard, _protocol_class

    assert issubclass(_protocol_class(WebhookSettings(), ConnectionGuard(4, 4)),
                      HttpToolsProtocol)


async def test_the_protocol_is_the_one_asked_for(parser: str) -> None:
    if parser == "httptools":
        pytest.importorskip("httptools")
    from lich.gateway.config import WebhookSettings
    from lich.gateway.webhook import ConnectionGuard, _protocol_class

    cls = _protocol_class(WebhookSettings(), ConnectionGuard(4, 4))
    assert cls.__name__ == ("GuardedHttpToolsProtocol" if parser == "httptools"
                            else "GuardedH11Protocol")


async def test_a_kept_alive_connection_serves_requests_then_times_out_a_half_head(
    parser: str, start_gateway: Any,
) -> None:
    if parser == "httptools":
        pytest.importorskip("httptools")
    runner, port = await _start(start_gateway)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        replies = []
        for text in ("one", "two"):
            writer.write(_post(text))
            status, headers, body = await asyncio.wait_for(_response(reader), HANG_GUARD_S)
            assert status == 200, body
            assert headers["content-type"] == "application/json"
            assert "connection" not in headers  # kept alive
            replies.append(json.loads(body)["reply"])
        assert len(replies) == 2
        # The next request on the same connection must finish its head in time too.
        writer.write(b"POST /message HTTP/1.1\r\nhost: 127.0.0.1\r\n")
        rest = await asyncio.wait_for(reader.read(), HANG_GUARD_S)  # until the server closes
    finally:
        writer.close()
    assert rest.startswith(b"HTTP/1.1 408 "), rest
    assert b"took too long" in rest
    assert len(runner.chat.requests) == 2  # type: ignore[union-attr]


async def test_a_silent_connection_is_closed_without_an_answer(parser: str,
                                                               start_gateway: Any) -> None:
    if parser == "httptools":
        pytest.importorskip("httptools")
    _runner, port = await _start(start_gateway)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        received = await asyncio.wait_for(reader.read(), HANG_GUARD_S)
    finally:
        writer.close()
    assert received == b""


async def test_an_endless_head_is_refused(parser: str, start_gateway: Any) -> None:
    # Sent at once (no timeout helps): h11 buffers at most 16 KiB of an incomplete head,
    # and the httptools protocol holds llhttp, which has no bound, to the same.
    if parser == "httptools":
        pytest.importorskip("httptools")
    runner, port = await _start(start_gateway)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"POST /message HTTP/1.1\r\nhost: 127.0.0.1\r\n")
        for i in range(64):  # 64 KiB of headers, never ended
            writer.write(b"x-pad-%d: %s\r\n" % (i, b"a" * 1024))
        received = await asyncio.wait_for(reader.read(), HANG_GUARD_S)
    except ConnectionResetError:
        received = b""  # closed with our bytes unread: refused all the same
    finally:
        writer.close()
    expected = b"HTTP/1.1 431 " if parser == "httptools" else b"HTTP/1.1 400 "
    assert received == b"" or received.startswith(expected), received
    assert received == b"" or received.endswith(b'"}'), received  # a JSON error
    assert runner.chat.requests == []  # type: ignore[union-attr]


async def test_a_malformed_request_is_a_400_that_never_runs(parser: str,
                                                            start_gateway: Any) -> None:
    if parser == "httptools":
        pytest.importorskip("httptools")
    runner, port = await _start(start_gateway)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"POST /message HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: x\r\n\r\n")
        received = await asyncio.wait_for(reader.read(), HANG_GUARD_S)
    finally:
        writer.close()
    assert received.startswith(b"HTTP/1.1 400 "), received
    assert b"content-type: application/json\r\n" in received
    assert received.endswith(b'{"error": "invalid HTTP request"}'), received
    assert runner.chat.requests == []  # type: ignore[union-attr]


class _RecordingTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: Any) -> None:
        self.sent.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def get_write_buffer_size(self) -> int:
        return 0


async def test_writes_of_one_loop_step_leave_as_one_send() -> None:
    from lich.gateway.webhook import _CoalescingTransport

    raw = _RecordingTransport()
    transport = _CoalescingTransport(raw, asyncio.get_running_loop())
    buffer = bytearray(b"body")
    transport.write(b"head\r\n\r\n")
    transport.write(buffer)
    buffer[:] = b"XXXX"  # reused by its owner once write returned: what was written stays
    assert raw.sent == []
    assert transport.get_write_buffer_size() == 12
    await asyncio.sleep(0)  # the end of the step
    assert raw.sent == [b"head\r\n\r\nbody"]
    transport.write(b"last")
    transport.close()  # what is held goes out before the close
    assert raw.sent == [b"head\r\n\r\nbody", b"last"]
    assert raw.closed
    await asyncio.sleep(0)
    assert raw.sent == [b"head\r\n\r\nbody", b"last"]  # nothing twice


async def test_an_aborted_connection_sends_nothing_held() -> None:
    from lich.gateway.webhook import _CoalescingTransport

    raw = _RecordingTransport()
    transport = _CoalescingTransport(raw, asyncio.get_running_loop())
    transport.write(b"head")
    transport.abort()
    await asyncio.sleep(0)
    assert raw.sent == []
    assert raw.aborted


async def test_a_forwarded_for_header_does_not_hide_the_connection_from_the_guard(
    parser: str, start_gateway: Any,
) -> None:
    # uvicorn's proxy headers would make the scope's client the forwarded address, and
    # the guard, which finds a connection by that client, would never see this one
    # authenticate: it stayed first in line to be dropped.
    if parser == "httptools":
        pytest.importorskip("httptools")
    runner, port = await _start(start_gateway)
    guard = runner.adapter("webhook").guard
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        body = _post("via a proxy").replace(
            b"host: 127.0.0.1\r\n", b"host: 127.0.0.1\r\nx-forwarded-for: 203.0.113.7\r\n")
        writer.write(body)
        status, _headers, _body = await asyncio.wait_for(_response(reader), HANG_GUARD_S)
        assert status == 200
        assert len(guard.open) == 1  # still open (kept alive) ...
        assert guard.unauthenticated == {}  # ... and known to have authenticated
    finally:
        writer.close()
