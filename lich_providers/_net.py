"""A native-asyncio network backend for httpcore, and the httpx transport that uses it.

httpx's default async transport reaches the socket through anyio: every read
resumes and pauses the transport's reading (two ``epoll_ctl`` calls), runs under
an anyio cancel scope (``fail_after``) and a resource guard, and yields to the
event loop even when data is already there; every write adds another loop
iteration. That is most of what the async raw loop pays over the sync one (B1 in
docs/performance.md). :class:`AsyncioBackend` implements httpcore's public
``AsyncNetworkBackend`` on an :class:`asyncio.Protocol` instead: the transport
reads into a buffer as data arrives, a read that finds data buffered returns it
at once (no await, no timer), and only a read that must wait arms one future and
one ``call_later`` for its timeout.

:class:`DirectTransport` is an ``httpx.AsyncBaseTransport`` that keeps
httpcore's public ``AsyncHTTP11Connection``s on that backend itself (not in
httpcore's pool), for direct connections only: requests through a proxy from the
environment keep httpx's own transport (see :func:`environment_has_proxy`).
Errors come out as the same httpx exception types httpx's transport raises (timeouts as
``httpx.TimeoutException`` subclasses, ``httpx.ConnectError``, ...), so
``_http.py`` maps them as before.

Timeouts, errors and closing follow httpcore's anyio backend: a read or write
past its timeout raises ``ReadTimeout`` / ``WriteTimeout``; a connection
reset raises ``ReadError`` / ``WriteError``; the end of the stream reads as
``b""``; connecting and the TLS handshake raise ``ConnectTimeout`` /
``ConnectError``; ``aclose`` aborts the transport (unsent data is dropped, the
socket is closed at once, no TLS close_notify), which is also what a cancelled
request ends in.
"""

from __future__ import annotations

import asyncio
import os
import select
import ssl
import sys
import urllib.request
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx

__all__ = [
    "TESTED_HTTPCORE",
    "AsyncioBackend",
    "AsyncioStream",
    "DirectTransport",
    "environment_has_proxy",
    "usable",
]

# The httpcore release line this module is tested with (pyproject.toml bounds it the
# same way). It builds on httpcore's public classes, but on how they behave in detail
# (a read that returns at once, how a connection closes): another line gets httpx's
# own transport until the tests have run against it.
TESTED_HTTPCORE = "1.0"

# Reading is paused while more than this is buffered and not yet read (a server
# that sends faster than lich consumes cannot make it buffer without bound), and
# resumed once the buffer is down to a quarter of it.
_READ_HIGH_WATER = 256 * 1024
_READ_LOW_WATER = _READ_HIGH_WATER // 4
# asyncio's own handshake deadline (60 s by default) would end a slow handshake as a
# ConnectError before httpcore's connect timeout; the deadline is the caller's.
_NO_HANDSHAKE_DEADLINE = 365 * 24 * 3600.0
# As httpcore's anyio backend (and anyio.connect_tcp) does: RFC 6555 happy eyeballs.
_HAPPY_EYEBALLS_DELAY = 0.25


class AsyncioStream(asyncio.Protocol, httpcore.AsyncNetworkStream):
    """One connection: an :class:`asyncio.Protocol` with a receive buffer, read and
    written through httpcore's ``AsyncNetworkStream`` interface.

    One reader and one writer at a time (httpcore's HTTP/1.1 connection never has
    more); after :meth:`start_tls` the same object goes on over the TLS transport.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._eof = False  # the peer finished sending (or the connection was lost)
        self._error: BaseException | None = None  # why the connection was lost, if it failed
        self._closed = False  # aclose() was called
        self._read_paused = False
        self._write_paused = False
        self._reader: asyncio.Future[bool] | None = None
        self._drainer: asyncio.Future[bool] | None = None

    # asyncio.Protocol: called by the transport.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > _READ_HIGH_WATER and not self._read_paused:
            assert self._transport is not None
            self._transport.pause_reading()
            self._read_paused = True
        _wake(self._reader)

    def eof_received(self) -> None:
        # Returning None lets the transport close itself: an HTTP client has nothing
        # to say to a server that has stopped listening.
        self._eof = True
        _wake(self._reader)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._eof = True
        self._error = exc
        _wake(self._reader)
        _wake(self._drainer)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        _wake(self._drainer)

    # httpcore.AsyncNetworkStream.

    # The `timeout` parameters (ruff's ASYNC109) are httpcore's interface.
    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:  # noqa: ASYNC109
        """Up to ``max_bytes`` bytes: what is buffered at once, else the next data to
        arrive within ``timeout`` (``ReadTimeout``); ``b""`` at the end of the stream."""
        while not self._chunks:
            if self._closed:
                raise httpcore.ReadError("the connection is closed")
            if self._error is not None:
                raise httpcore.ReadError(str(self._error) or type(self._error).__name__) \
                    from self._error
            if self._eof:
                return b""
            self._reader = waiter = self._loop.create_future()
            try:
                woken = await _woken_within(waiter, timeout)
            finally:
                self._reader = None
            if not woken and not self._chunks:
                raise httpcore.ReadTimeout(f"no data for {timeout:g}s")
        return self._take(max_bytes)

    def _take(self, max_bytes: int) -> bytes:
        chunks = self._chunks
        data = chunks.popleft()
        if chunks and len(data) < max_bytes:
            # Several pieces arrived since the last read: one read takes them together.
            parts = [data]
            size = len(data)
            while chunks and size + len(chunks[0]) <= max_bytes:
                part = chunks.popleft()
                parts.append(part)
                size += len(part)
            data = b"".join(parts)
        if len(data) > max_bytes:
            chunks.appendleft(data[max_bytes:])
            data = data[:max_bytes]
        self._buffered -= len(data)
        if self._read_paused and self._buffered <= _READ_LOW_WATER:
            self._read_paused = False
            if self._transport is not None and not self._closed:
                self._transport.resume_reading()
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Send ``buffer``; when the transport's buffer is full, wait (up to ``timeout``:
        ``WriteTimeout``) until it has drained below its limit."""
        if not buffer:
            return
        if self._closed:
            raise httpcore.WriteError("the connection is closed")
        if self._error is not None or self._transport is None or self._transport.is_closing():
            raise httpcore.WriteError(str(self._error or "the connection was lost")) \
                from self._error
        self._transport.write(buffer)
        while self._write_paused:
            self._drainer = waiter = self._loop.create_future()
            try:
                woken = await _woken_within(waiter, timeout)
            finally:
                self._drainer = None
            if self._closed or self._error is not None or self._transport.is_closing():
                raise httpcore.WriteError(str(self._error or "the connection was lost")) \
                    from self._error
            if not woken and self._write_paused:
                raise httpcore.WriteTimeout(f"could not send for {timeout:g}s")

    async def aclose(self) -> None:
        """Close the connection at once (unsent data is dropped, as anyio does)."""
        self._closed = True
        if self._transport is not None:
            self._transport.abort()
        _wake(self._reader)
        _wake(self._drainer)

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> httpcore.AsyncNetworkStream:
        """Upgrade to TLS with ``ssl_context`` (``ConnectTimeout`` / ``ConnectError``; the
        connection is closed when it fails); the same stream goes on over TLS."""
        assert self._transport is not None
        try:
            async with asyncio.timeout(timeout):
                transport = await self._loop.start_tls(
                    self._transport, self, ssl_context, server_hostname=server_hostname,
                    ssl_handshake_timeout=_NO_HANDSHAKE_DEADLINE,
                )
            if transport is None:  # typeshed allows it; asyncio returns the TLS transport
                raise ConnectionError("the connection was lost during the TLS handshake")
        except BaseException as exc:
            await self.aclose()
            if isinstance(exc, TimeoutError):
                raise httpcore.ConnectTimeout(f"TLS handshake: {_timed_out(exc, timeout)}") from exc
            if isinstance(exc, OSError):  # ssl.SSLError included
                raise httpcore.ConnectError(str(exc)) from exc
            raise
        self._transport = transport
        return self

    def get_extra_info(self, info: str) -> Any:
        """What httpcore asks of a stream: ``ssl_object``, ``client_addr``,
        ``server_addr``, ``socket`` and ``is_readable`` (the connection has data or
        an end-of-stream waiting: a pooled connection that is no longer usable)."""
        transport = self._transport
        if transport is None:
            return None
        if info == "is_readable":
            if self._chunks or self._eof or self._closed:
                return True
            return _socket_readable(transport.get_extra_info("socket"))
        if info == "client_addr":
            return transport.get_extra_info("sockname")
        if info == "server_addr":
            return transport.get_extra_info("peername")
        if info in ("ssl_object", "socket"):
            return transport.get_extra_info(info)
        return None


def _wake(waiter: asyncio.Future[bool] | None) -> None:
    if waiter is not None and not waiter.done():
        waiter.set_result(True)


def _expire(waiter: asyncio.Future[bool]) -> None:
    if not waiter.done():
        waiter.set_result(False)


async def _woken_within(waiter: asyncio.Future[bool], timeout: float | None) -> bool:  # noqa: ASYNC109
    """Await ``waiter`` (set True by :func:`_wake`); False once ``timeout`` passed first."""
    if timeout is None:
        return await waiter
    timer = asyncio.get_running_loop().call_later(timeout, _expire, waiter)
    try:
        return await waiter
    finally:
        timer.cancel()


def _timed_out(exc: TimeoutError, timeout: float | None) -> str:
    # A TimeoutError is also the OS's ETIMEDOUT, with or without a timeout of ours.
    return str(exc) if timeout is None or exc.errno else f"timed out after {timeout:g}s"


def _socket_readable(sock: Any) -> bool:
    """Whether ``sock`` has something to read right now (data or the end of the
    stream arrived after the event loop last looked); no socket counts as readable."""
    fileno = -1 if sock is None else sock.fileno()
    if fileno < 0:
        return True
    if sys.platform == "win32" or not hasattr(select, "poll"):
        return bool(select.select([fileno], [], [], 0)[0])
    poller = select.poll()
    poller.register(fileno, select.POLLIN)
    return bool(poller.poll(0))


class AsyncioBackend(httpcore.AsyncNetworkBackend):
    """httpcore's ``AsyncNetworkBackend`` on asyncio transports (see the module)."""

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Connect to ``host:port`` within ``timeout`` (``ConnectTimeout``; failures are
        ``ConnectError``), trying its addresses as RFC 6555 says."""
        loop = asyncio.get_running_loop()
        stream = AsyncioStream(loop)
        try:
            async with asyncio.timeout(timeout):
                transport, _ = await loop.create_connection(
                    lambda: stream, host, port,
                    local_addr=None if local_address is None else (local_address, 0),
                    happy_eyeballs_delay=_HAPPY_EYEBALLS_DELAY, interleave=1,
                )
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"connect: {_timed_out(exc, timeout)}") from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        _set_options(transport, socket_options)
        return stream

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Connect to the Unix socket at ``path`` (errors as :meth:`connect_tcp`)."""
        loop = asyncio.get_running_loop()
        stream = AsyncioStream(loop)
        try:
            async with asyncio.timeout(timeout):
                transport, _ = await loop.create_unix_connection(lambda: stream, path)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"connect: {_timed_out(exc, timeout)}") from exc
        except OSError as exc:
            raise httpcore.ConnectError(str(exc)) from exc
        _set_options(transport, socket_options)
        return stream

    async def sleep(self, seconds: float) -> None:
        """Sleep (httpcore's connection retries wait with this)."""
        await asyncio.sleep(seconds)


def _set_options(transport: asyncio.BaseTransport, options: Iterable[Any] | None) -> None:
    if options:
        sock = transport.get_extra_info("socket")
        for option in options:
            sock.setsockopt(*option)


# httpcore's exceptions as the httpx ones httpx's own transport turns them into, most
# specific first (the first match wins).
_ERRORS: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextmanager
def _httpx_errors() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        for source, target in _ERRORS:
            if isinstance(exc, source):
                raise target(str(exc)) from exc
        raise


class _Body(httpx.AsyncByteStream):
    """A response body from httpcore, its errors as httpx's; ``done`` runs once it is closed."""

    def __init__(self, stream: Any, done: Callable[[], None]) -> None:
        self._stream = stream
        self._done: Callable[[], None] | None = done

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _httpx_errors():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        try:
            with _httpx_errors():
                await self._stream.aclose()
        finally:
            done, self._done = self._done, None
            if done is not None:
                done()


class DirectTransport(httpx.AsyncBaseTransport):
    """httpx's transport for direct (unproxied) HTTP/1.1 connections, on
    :class:`AsyncioBackend`: httpcore's public HTTP/1.1 connection class, kept alive
    and reused here rather than in ``httpcore.AsyncConnectionPool``.

    The pool's machinery — a request queue with an event per request, a lock per
    connection, a cancel shield per response, each ``anyio`` primitive yielding to
    the event loop — cost a lane (one request at a time on one connection) two thirds
    as much CPU again as the backend saves (B1 in docs/performance.md). What it did
    for a lane is done here: at most ``max_connections`` requests in flight (more
    wait, up to the ``pool`` timeout: ``httpx.PoolTimeout``); an idle connection to
    the request's origin is reused unless it has expired (idle past httpx's
    keep-alive expiry, or closed by the server: then a new one is opened); a
    connection whose response was not read to its end, or whose request failed or
    was cancelled, is closed by httpcore and not reused.

    :param ssl_context: for ``https`` URLs (what ``verify=`` would have made).
    :param max_connections: requests in flight at once (each on its own connection).
    :param keepalive_expiry: seconds an idle connection is kept (httpx's default).
    """

    def __init__(
        self, ssl_context: ssl.SSLContext, max_connections: int = 1,
        keepalive_expiry: float | None = httpx.Limits().keepalive_expiry,
    ) -> None:
        self._ssl_context = ssl_context
        self._keepalive_expiry = keepalive_expiry
        self._backend = AsyncioBackend()
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: list[httpcore.AsyncHTTP11Connection] = []  # most recently used last
        self._open: set[httpcore.AsyncHTTP11Connection] = set()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` and return the response, its body still to be read."""
        url = request.url
        if url.raw_scheme not in (b"http", b"https"):
            raise httpx.UnsupportedProtocol(f"Request URL has an unsupported protocol '{url}'")
        if not url.raw_host:
            raise httpx.UnsupportedProtocol(f"Request URL is missing a host '{url}'")
        core = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port,
                             target=url.raw_path),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        timeouts = request.extensions.get("timeout", {})
        if self._slots.locked():  # else acquire() returns at once: no timer to arm
            try:
                async with asyncio.timeout(timeouts.get("pool")):
                    await self._slots.acquire()
            except TimeoutError as exc:
                raise httpx.PoolTimeout("no connection became free in time") from exc
        else:
            await self._slots.acquire()
        connection: httpcore.AsyncHTTP11Connection | None = None
        try:
            with _httpx_errors():
                connection = await self._connection(core, timeouts.get("connect"))
                response = await connection.handle_async_request(core)
        except BaseException:
            self._release(connection)
            raise
        return httpx.Response(
            status_code=response.status, headers=response.headers,
            stream=_Body(response.stream, lambda: self._release(connection)),
            extensions=response.extensions,
        )

    async def _connection(
        self, request: httpcore.Request, connect_timeout: float | None
    ) -> httpcore.AsyncHTTP11Connection:
        """An idle, unexpired connection to the request's origin, or a new one."""
        origin = request.url.origin
        for connection in reversed(self._idle):
            if connection.can_handle_request(origin):
                self._idle.remove(connection)
                if connection.is_available() and not connection.has_expired():
                    return connection
                self._open.discard(connection)
                await connection.aclose()
                break  # a lane keeps one per origin; open a new one
        host = origin.host.decode("ascii")
        stream = await self._backend.connect_tcp(host, origin.port, timeout=connect_timeout)
        if origin.scheme == b"https":
            # As httpcore's own connections do (on the same, shared context).
            self._ssl_context.set_alpn_protocols(["http/1.1"])
            stream = await stream.start_tls(
                self._ssl_context,
                server_hostname=request.extensions.get("sni_hostname") or host,
                timeout=connect_timeout,
            )
        connection = httpcore.AsyncHTTP11Connection(
            origin=origin, stream=stream, keepalive_expiry=self._keepalive_expiry)
        _use_asyncio_state_lock(connection)
        self._open.add(connection)
        return connection

    def _release(self, connection: httpcore.AsyncHTTP11Connection | None) -> None:
        """The request's slot is free again; its connection is kept if reusable."""
        if connection is not None:
            if connection.is_available():
                self._idle.append(connection)
            else:
                self._open.discard(connection)
        self._slots.release()

    async def aclose(self) -> None:
        """Close every connection, idle or in use (the transport stays usable)."""
        connections, self._open, self._idle = self._open, set(), []
        for connection in connections:
            await connection.aclose()


def _use_asyncio_state_lock(connection: httpcore.AsyncHTTP11Connection) -> None:
    """Give ``connection`` an :class:`asyncio.Lock` (which a free lock's ``acquire``
    returns from at once; httpcore only enters it with ``async with``) in place of its
    anyio one.

    httpcore's HTTP/1.1 connection takes its state lock twice per request (as the
    request starts and as its response closes), and every acquisition of an
    ``anyio.Lock`` ends in a cancel-shielded checkpoint, one event-loop round even
    when the lock is free: the last loop rounds the async path pays over the sync one
    (B1 in docs/performance.md). The lock still excludes what it excluded, here
    nothing in practice: :class:`DirectTransport` sends one request at a time on a
    connection. The attribute is httpcore's own, not its interface: a connection
    without it (another httpcore) keeps its lock, so the loss is speed, not function
    (``tests/providers/test_net.py`` says when that happens).
    """
    if hasattr(connection, "_state_lock"):
        connection._state_lock = asyncio.Lock()  # type: ignore[assignment]


def environment_has_proxy() -> bool:
    """Whether the environment configures any proxy (as httpx reads it:
    :func:`urllib.request.getproxies`). Then lich leaves the routing, ``no_proxy``
    included, to httpx's own transport, exactly as before this module existed."""
    return any(key != "no" and value for key, value in urllib.request.getproxies().items())


def usable(version: str | None = None) -> bool:
    """Whether this backend may serve: not switched off by ``LICH_PLAIN_TRANSPORT=1``
    (the way back to httpx's own transport, should an upstream release break this
    one), and the installed httpcore (``version``, by default its ``__version__``) is
    of the tested release line."""
    if os.environ.get("LICH_PLAIN_TRANSPORT", "").strip() not in ("", "0"):
        return False
    installed = httpcore.__version__ if version is None else version
    return installed == TESTED_HTTPCORE or installed.startswith(TESTED_HTTPCORE + ".")
