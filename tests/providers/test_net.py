"""The providers' asyncio network backend (lich_providers/_net.py) against real loopback
servers: every behaviour is checked on httpx's own transport too, so the two are held to
the same outcome (the same httpx exception types, the same bodies, the same connection
handling), then through :class:`HttpClient` where lich's mapping sees it."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from pathlib import Path

import anyio
import httpx
import pytest
import trustme

from lich.testing import async_wait_for
from lich.types import ProviderError
from lich_providers import _http, _net
from lich_providers._http import HttpClient
from lich_providers._net import AsyncioBackend, DirectTransport

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
TransportFactory = Callable[..., httpx.AsyncBaseTransport]
OVERFLOW = re.compile("context length")
PROXY_VARS = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy",
              "ALL_PROXY", "no_proxy", "NO_PROXY")


def httpx_transport(
    ctx: ssl.SSLContext, connections: int = 1, keepalive_expiry: float = 5.0
) -> httpx.AsyncBaseTransport:
    return httpx.AsyncHTTPTransport(
        verify=ctx, trust_env=False,
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections,
                            keepalive_expiry=keepalive_expiry))


def direct_transport(
    ctx: ssl.SSLContext, connections: int = 1, keepalive_expiry: float = 5.0
) -> httpx.AsyncBaseTransport:
    return DirectTransport(ctx, connections, keepalive_expiry)


TRANSPORTS = pytest.mark.parametrize(
    "make", [httpx_transport, direct_transport], ids=["httpx", "asyncio"])


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)


class Server:
    """An asyncio TCP (or TLS) server on 127.0.0.1 in the test's loop; ``handler`` serves
    each connection. Counts connections and the ones the client closed."""

    def __init__(self, handler: Handler, ssl_context: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.ssl_context = ssl_context
        self.connections = 0
        self.closed_by_client = 0
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0,
                                                  ssl=self.ssl_context)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._handlers:  # handlers that stall on purpose
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def url(self, path: str = "/", scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            await self.handler(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            self._handlers.discard(task)

    async def until_client_closes(self, reader: asyncio.StreamReader) -> None:
        """Read until the client closes its end (EOF or reset) and count it."""
        try:
            while await reader.read(65536):
                pass
        except ConnectionError:
            pass
        self.closed_by_client += 1


async def read_request(reader: asyncio.StreamReader) -> tuple[str, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    size = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            size = int(value)
    return lines[0], await reader.readexactly(size)


def response(body: bytes, *, headers: str = "") -> bytes:
    return (f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n{headers}\r\n").encode() + body


def chunk(piece: bytes) -> bytes:
    return f"{len(piece):x}\r\n".encode() + piece + b"\r\n"


def reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST instead of a FIN."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def plain() -> ssl.SSLContext:
    return httpx.create_ssl_context()


async def _json_ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        try:
            await read_request(reader)
        except asyncio.IncompleteReadError:
            return
        writer.write(response(b'{"ok": true}'))
        await writer.drain()


# --- answers: keep-alive, content-length, chunked, streamed, large ---------------------


@TRANSPORTS
async def test_requests_on_one_kept_alive_connection(make: TransportFactory) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for i in range(3):
            _, body = await read_request(reader)
            if i == 1:  # chunked
                writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                             + chunk(b'{"echo": ') + chunk(body) + chunk(b"}") + b"0\r\n\r\n")
            else:
                writer.write(response(b'{"echo": ' + body + b"}"))
            await writer.drain()

    async with Server(handler) as server, httpx.AsyncClient(transport=make(plain())) as client:
        for i in range(3):
            answer = await client.post(server.url("/v1"), json={"n": i})
            assert answer.json() == {"echo": {"n": i}}
    assert server.connections == 1


@TRANSPORTS
async def test_a_streamed_answer_arrives_piece_by_piece(make: TransportFactory) -> None:
    events = [f"data: {json.dumps({'i': i})}\n\n".encode() for i in range(50)]
    next_piece = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")
        for event in events:
            writer.write(chunk(event))
            await writer.drain()
            await next_piece.wait()  # the client has read this one: no coalescing
            next_piece.clear()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    lines = []
    async with Server(handler) as server, httpx.AsyncClient(
        transport=make(plain())
    ) as client, client.stream("POST", server.url(), json={}) as answer:
        async for line in answer.aiter_lines():
            lines.append(line)
            if line:
                next_piece.set()
    assert [json.loads(line[6:])["i"] for line in lines if line] == list(range(50))


@TRANSPORTS
async def test_a_large_body_read_slower_than_it_arrives_is_intact(make: TransportFactory) -> None:
    # More than the backend buffers before it pauses reading, sent at once.
    body = b"".join(i.to_bytes(4, "big") for i in range(6 * 1024 * 1024 // 4))

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(response(body))
        await writer.drain()
        await read_request(reader)  # the connection is still usable afterwards
        writer.write(response(b"{}"))
        await writer.drain()

    digest = hashlib.sha256()
    async with Server(handler) as server, httpx.AsyncClient(transport=make(plain())) as client:
        async with client.stream("POST", server.url(), json={}) as answer:
            async for piece in answer.aiter_raw():
                digest.update(piece)
                await asyncio.sleep(0)
        assert (await client.post(server.url(), json={})).json() == {}
    assert digest.hexdigest() == hashlib.sha256(body).hexdigest()
    assert server.connections == 1


@TRANSPORTS
async def test_a_server_closing_between_requests_gets_a_new_connection(
    make: TransportFactory,
) -> None:
    closed = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal closed
        await read_request(reader)
        # Keep-alive as far as HTTP goes; then the server drops it anyway (idle timeout).
        writer.write(response(b'{"ok": true}'))
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        closed += 1

    async with Server(handler) as server, httpx.AsyncClient(transport=make(plain())) as client:
        for n in range(1, 4):
            assert (await client.post(server.url(), json={})).json() == {"ok": True}
            await async_wait_for(lambda n=n: closed == n, what="the server closed")
    assert server.connections == 3


@TRANSPORTS
async def test_an_idle_connection_past_its_keepalive_expiry_is_replaced(
    make: TransportFactory,
) -> None:
    async with Server(_json_ok) as server, httpx.AsyncClient(
        transport=make(plain(), keepalive_expiry=0.0)
    ) as client:
        for _ in range(3):
            assert (await client.post(server.url(), json={})).json() == {"ok": True}
    assert server.connections == 3


@TRANSPORTS
async def test_concurrent_requests_and_two_origins_each_keep_their_connection(
    make: TransportFactory,
) -> None:
    async with Server(_json_ok) as one, Server(_json_ok) as two, httpx.AsyncClient(
        transport=make(plain(), 4)
    ) as client:
        for _ in range(3):
            answers = await asyncio.gather(client.post(one.url(), json={}),
                                           client.post(two.url(), json={}))
            assert [a.json() for a in answers] == [{"ok": True}] * 2
        # Two at once on one origin: a second connection, both kept.
        for _ in range(2):
            await asyncio.gather(client.post(one.url(), json={}), client.post(one.url(), json={}))
    assert (one.connections, two.connections) == (2, 1)


@TRANSPORTS
async def test_requests_on_the_direct_transport_take_no_anyio_lock(
    make: TransportFactory, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each anyio.Lock acquisition is an event-loop round: httpcore's connection takes its
    # state lock twice per request, and _net gives its connections an asyncio lock
    # instead. httpx's own transport is the control: the count sees its acquisitions.
    lock_class = type(anyio.Lock())
    acquired: list[object] = []
    acquire = lock_class.acquire

    async def counted(self: object) -> None:
        acquired.append(self)
        await acquire(self)

    monkeypatch.setattr(lock_class, "acquire", counted)
    async with Server(_json_ok) as server, httpx.AsyncClient(transport=make(plain())) as client:
        for _ in range(3):
            assert (await client.post(server.url(), json={})).json() == {"ok": True}
    assert server.connections == 1
    if make is direct_transport:
        assert acquired == []
    else:
        assert len(acquired) >= 6


# --- timeouts, refusals and broken connections: the same httpx errors -----------------


async def _stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)
    await asyncio.Event().wait()


@TRANSPORTS
async def test_a_server_that_never_answers_is_a_read_timeout(make: TransportFactory) -> None:
    async with Server(_stall) as server, httpx.AsyncClient(
        transport=make(plain()), timeout=httpx.Timeout(30, read=0.2)
    ) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.post(server.url(), json={})


@TRANSPORTS
async def test_a_stream_that_stalls_is_a_read_timeout(make: TransportFactory) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunk(b"x\n"))
        await writer.drain()
        await asyncio.Event().wait()

    async with Server(handler) as server, httpx.AsyncClient(
        transport=make(plain()), timeout=httpx.Timeout(30, read=0.2)
    ) as client, client.stream("POST", server.url(), json={}) as answer:
        pieces = answer.aiter_bytes()
        assert await anext(pieces) == b"x\n"
        with pytest.raises(httpx.ReadTimeout):
            await anext(pieces)


@TRANSPORTS
async def test_a_server_that_stops_reading_is_a_write_timeout(make: TransportFactory) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.Event().wait()  # reads nothing: the client's send buffer fills up

    async with Server(handler) as server, httpx.AsyncClient(
        transport=make(plain()), timeout=httpx.Timeout(30, write=0.2)
    ) as client:
        with pytest.raises(httpx.WriteTimeout):
            await client.post(server.url(), content=bytes(64 * 1024 * 1024))


@TRANSPORTS
async def test_a_tls_handshake_that_never_ends_is_a_connect_timeout(
    make: TransportFactory,
) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.Event().wait()  # a TCP server that never says ServerHello

    async with Server(handler) as server, httpx.AsyncClient(
        transport=make(plain()), timeout=httpx.Timeout(30, connect=0.2)
    ) as client:
        with pytest.raises(httpx.ConnectTimeout):
            await client.post(server.url(scheme="https"), json={})


@TRANSPORTS
async def test_waiting_for_the_only_connection_is_a_pool_timeout(make: TransportFactory) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunk(b"x"))
        await writer.drain()
        await asyncio.Event().wait()

    async with Server(handler) as server, httpx.AsyncClient(
        transport=make(plain(), 1), timeout=httpx.Timeout(30, pool=0.2)
    ) as client, client.stream("POST", server.url(), json={}):
        with pytest.raises(httpx.PoolTimeout):
            await client.post(server.url(), json={})


@TRANSPORTS
async def test_a_refused_connection_is_a_connect_error(
    make: TransportFactory, refused_port: Callable[[], int]
) -> None:
    port = refused_port()
    async with httpx.AsyncClient(transport=make(plain())) as client:
        with pytest.raises(httpx.ConnectError) as caught:
            await client.post(f"http://127.0.0.1:{port}/", json={})
    assert _http._transport_reason(caught.value, "request failed") == "connection refused"


@TRANSPORTS
@pytest.mark.parametrize("how", ["fin", "rst"])
async def test_a_body_cut_short_is_an_error(make: TransportFactory, how: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n" + b"x" * 10)
        await writer.drain()
        if how == "rst":
            reset(writer)

    expected = httpx.RemoteProtocolError if how == "fin" else httpx.ReadError
    async with Server(handler) as server, httpx.AsyncClient(transport=make(plain())) as client:
        with pytest.raises(expected):
            await client.post(server.url(), json={})


# --- cancellation closes the connection ----------------------------------------------


@TRANSPORTS
async def test_a_cancelled_request_closes_its_connection(make: TransportFactory) -> None:
    started = asyncio.Event()
    server: Server

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + chunk(b"x"))
        await writer.drain()
        started.set()
        await server.until_client_closes(reader)

    async with Server(handler) as server, httpx.AsyncClient(transport=make(plain())) as client:
        pieces: list[bytes] = []

        async def read_all() -> None:
            async with client.stream("POST", server.url(), json={}) as answer:
                async for piece in answer.aiter_bytes():
                    pieces.append(piece)

        task = asyncio.create_task(read_all())
        await started.wait()
        await async_wait_for(lambda: pieces == [b"x"], what="the first piece")
        task.cancel()  # while it waits for the next piece
        with pytest.raises(asyncio.CancelledError):
            await task
        await async_wait_for(lambda: server.closed_by_client == 1, what="the socket closed")


async def test_a_cancelled_provider_stream_closes_its_connection() -> None:
    """Through HttpClient, on the backend chosen for a direct connection."""
    started = asyncio.Event()
    server: Server

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n" + chunk(b"data: {}\n\n"))
        await writer.drain()
        started.set()
        await server.until_client_closes(reader)

    async with Server(handler) as server:
        client = HttpClient(provider="p", base_url=server.url("/v1"), overflow=OVERFLOW)
        lines: list[str] = []

        async def consume() -> None:
            async with aclosing(client.stream_lines("/chat", {})) as stream:
                async for line in stream:
                    lines.append(line)

        task = asyncio.create_task(consume())
        await started.wait()
        await async_wait_for(lambda: lines == ["data: {}", ""], what="the first event")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await async_wait_for(lambda: server.closed_by_client == 1, what="the socket closed")
        assert isinstance(client._lane_transport(), DirectTransport)
        await client.aclose()


# --- TLS: a loopback HTTPS server with a self-signed CA --------------------------------


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def tls_server_context(ca: trustme.CA) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(ctx)
    return ctx




@TRANSPORTS
@pytest.mark.parametrize("verify", ["ca-file", "off"])
async def test_https_with_a_trusted_ca_file_or_without_verification(
    make: TransportFactory, verify: str, ca: trustme.CA, tmp_path: Path,
) -> None:
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    ctx = (ssl.create_default_context(cafile=str(ca_file)) if verify == "ca-file"
           else httpx.create_ssl_context(verify=False))
    async with Server(_json_ok, tls_server_context(ca)) as server, httpx.AsyncClient(
        transport=make(ctx)
    ) as client:
        for _ in range(2):
            answer = await client.post(server.url(scheme="https"), json={})
            assert answer.json() == {"ok": True}
        stream = answer.extensions["network_stream"]
        assert stream.get_extra_info("ssl_object").version().startswith("TLS")
    assert server.connections == 1


@TRANSPORTS
async def test_https_to_an_untrusted_certificate_is_a_connect_error(
    make: TransportFactory, ca: trustme.CA,
) -> None:
    async with Server(_json_ok, tls_server_context(ca)) as server, httpx.AsyncClient(
        transport=make(plain())
    ) as client:
        with pytest.raises(httpx.ConnectError) as caught:
            await client.post(server.url(scheme="https"), json={})
    assert "CERTIFICATE_VERIFY_FAILED" in _http._transport_reason(caught.value, "failed")


@pytest.mark.parametrize("trusted", [True, False])
async def test_a_provider_over_https_trusts_the_ca_of_ssl_cert_file(
    trusted: bool, ca: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    ca_file = tmp_path / "ca.pem"
    (ca if trusted else trustme.CA()).cert_pem.write_to_path(str(ca_file))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    monkeypatch.setattr(_http, "_ssl_context", None)  # made afresh, from SSL_CERT_FILE
    async with Server(_json_ok, tls_server_context(ca)) as server:
        client = HttpClient(provider="p", base_url=server.url("/v1", scheme="https"),
                            overflow=OVERFLOW)
        try:
            if trusted:
                assert await client.post_json("/chat", {}) == {"ok": True}
            else:
                with pytest.raises(ProviderError) as caught:
                    await client.post_json("/chat", {})
                assert caught.value.kind == "network"
                assert "TLS failed" in str(caught.value)
        finally:
            await client.aclose()


# --- the proxy path is httpx's own -----------------------------------------------------


async def test_a_proxy_from_the_environment_keeps_httpx_s_transport(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[str] = []

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line, _ = await read_request(reader)
        seen.append(line)
        writer.write(response(b'{"via": "proxy"}'))
        await writer.drain()

    direct = HttpClient(provider="p", base_url="http://model.invalid/v1", overflow=OVERFLOW)
    assert isinstance(direct._lane_transport(), DirectTransport)
    async with Server(proxy) as server:
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.port}")
        client = HttpClient(provider="p", base_url="http://model.invalid/v1", overflow=OVERFLOW)
        assert client._lane_transport() is None
        try:
            assert await client.post_json("/chat", {}) == {"via": "proxy"}
        finally:
            await client.aclose()
    assert seen == ["POST http://model.invalid/v1/chat HTTP/1.1"]
    # A no_proxy entry still leaves the routing to httpx (which then goes direct).
    monkeypatch.setenv("NO_PROXY", "model.invalid")
    assert _net.environment_has_proxy()


# --- the way back to httpx's transport ---------------------------------------------------


@pytest.mark.parametrize("switch", ["1", "yes"])
async def test_lich_plain_transport_puts_every_lane_on_httpx_s_transport(
    monkeypatch: pytest.MonkeyPatch, switch: str
) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(response(b'{"ok": true}'))
        await writer.drain()

    monkeypatch.setenv("LICH_PLAIN_TRANSPORT", switch)
    async with Server(answer) as server:
        client = HttpClient(provider="p", base_url=server.url("/v1"), overflow=OVERFLOW)
        assert client._lane_transport() is None
        try:
            assert await client.post_json("/chat", {}) == {"ok": True}
        finally:
            await client.aclose()
    monkeypatch.setenv("LICH_PLAIN_TRANSPORT", "0")  # "0" (or empty) is off
    assert _net.usable()


@pytest.mark.parametrize(("version", "usable"), [
    ("1.0", True), ("1.0.9", True), ("1.0.12", True),
    ("1.1.0", False), ("1.10.0", False), ("2.0.0", False), ("0.18.0", False),
])
def test_only_the_tested_httpcore_line_gets_the_direct_transport(
    monkeypatch: pytest.MonkeyPatch, version: str, usable: bool
) -> None:
    monkeypatch.delenv("LICH_PLAIN_TRANSPORT", raising=False)
    assert _net.usable(version) is usable
    monkeypatch.setattr(_net.httpcore, "__version__", version)
    client = HttpClient(provider="p", base_url="http://model.invalid/v1", overflow=OVERFLOW)
    assert isinstance(client._lane_transport(), DirectTransport) is usable


def test_the_installed_httpcore_is_the_tested_line_and_pyproject_bounds_it() -> None:
    import tomllib

    root = Path(__file__).resolve().parents[2]
    deps = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    bound = next(d for d in deps if d.startswith("httpcore"))
    major, minor = _net.TESTED_HTTPCORE.split(".")
    assert bound.endswith(f",<{major}.{int(minor) + 1}"), bound
    assert _net.usable(), "httpcore outside the tested line: run the tests, then move both"


# --- the backend on its own: Unix sockets, end of stream ---------------------------------


async def test_the_backend_over_a_unix_socket(tmp_path: Path) -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readexactly(5))
        await writer.drain()
        writer.close()

    path = str(tmp_path / "s")
    server = await asyncio.start_unix_server(echo, path)
    try:
        stream = await AsyncioBackend().connect_unix_socket(path, timeout=5)
        await stream.write(b"hello", timeout=5)
        got = b""
        while len(got) < 5:
            got += await stream.read(2, timeout=5)  # never more than asked for
        assert got == b"hello"
        assert await stream.read(10, timeout=5) == b""  # the server closed: end of stream
        assert stream.get_extra_info("is_readable")
        await stream.aclose()
    finally:
        server.close()
        await server.wait_closed()
