"""The webhook platform: a small HTTP API (starlette, served by uvicorn).

Routes:

* ``GET /health`` → ``200 {"status": "ok"}`` (no token needed).
* ``POST /message`` with JSON ``{"text", "chat_id"?, "user_id"?}`` →
  ``200 {"reply", "usage", "session_id"}``. The platform is always
  ``webhook``; a client cannot pose as another platform's conversation. An
  ``Idempotency-Key`` header is the message's id: on a bus that removes
  duplicates (``nats``) a request retried with the same key runs once (the
  retry gets the same reply, or ``202 {"status": "duplicate"}`` when that
  reply went to another gateway process).
* ``POST /message/stream`` → the run's events as server-sent events
  (``event: <type>`` / ``data: <envelope JSON>``), ending with ``event: reply``.
* With ``reply_timeout_s`` set, ``POST /message`` answers ``202 {"status":
  "accepted", "status_url"}`` when the reply takes longer; ``GET
  /message/status/<id>`` is ``202 {"status": "pending"}`` until it is there,
  then the answer ``POST /message`` would have given. The bus keeps the
  parked replies (:meth:`~lich.gateway.bus.MessageBus.park`): on the nats bus
  every ingress behind a load balancer answers any status URL.

Safety: binds 127.0.0.1 by default and refuses any other address unless a
token is set (``LICH_GATEWAY_TOKEN``), which clients send as ``x-lich-token``
or ``Authorization: Bearer``; it is compared in constant time. With no token
set, one is generated and kept ``0600`` (``token_file``): loopback is reachable by
every local user; only ``open = true`` serves it tokenless. Bodies over
``max_body_bytes`` (1 MB) get 413, a wrong content type 415, bad JSON or a
missing ``text`` 400 — each a JSON ``{"error": ...}``.

Before any of that: a ``Host`` that is not a loopback name or address (or one
of ``allowed_hosts``) gets 421, and a browser's cross-site request (an
``Origin`` of another host, ``Sec-Fetch-Site: cross-site``) 403 — a web page
cannot reach the webhook through DNS rebinding. Connections are bounded before
authentication: headers must arrive within ``header_timeout_s``, an idle
kept-alive connection is closed after ``idle_timeout_s``, at most
``max_connections`` are open and at most ``max_unauthenticated`` of them have
not sent a whole authorized request yet (the oldest such is dropped for a newcomer),
so slow or silent clients cannot use up the gateway's file descriptors.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

from lich import serialization
from lich.gateway._keys import load_or_create_token
from lich.gateway.bus import PENDING, BusReply, InboundMessage
from lich.gateway.formatting import log_event
from lich.gateway.registry import AdapterContext, GatewayError

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from lich.events import Envelope
    from lich.gateway.config import WebhookSettings

__all__ = ["ConnectionGuard", "HostPolicy", "WebhookAdapter", "is_loopback"]

PLATFORM = "webhook"
MAX_ID_CHARS = 256
_STATUS_FOR_KIND = {"busy": 429, "closed": 503, "aborted": 503, "error": 502,
                    "unavailable": 503, "budget": 429}


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server reachable from this machine only."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# With the usual loopback addresses: a request's Host is looked up, not parsed as an address.
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
# What a client that was too slow with its headers is told before the connection closes.
_TIMEOUT_BODY = b'{"error": "the request headers took too long"}'
_REQUEST_TIMEOUT = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\nconnection: close\r\n\r\n%s"
                    % (len(_TIMEOUT_BODY), _TIMEOUT_BODY))


def _split_host(value: str) -> str:
    """The host of a ``Host`` header or URL authority (``[::1]:80`` → ``::1``), lower-cased,
    without the trailing dot of a fully qualified name (``localhost.`` is ``localhost``)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    if value.count(":") > 1:  # a bare IPv6 address (no port can be told apart)
        return value
    return value.partition(":")[0].rstrip(".")


class HostPolicy:
    """Which ``Host`` and ``Origin`` values the webhook accepts.

    :param allowed: host names or addresses accepted besides the loopback ones.
    :param check_host: whether ``Host`` is checked at all. It is, unless the
        webhook is bound to a non-loopback address (with a token, necessarily)
        and no ``allowed_hosts`` were given: then the clients' name for the
        machine is not known, and the token is what keeps strangers out.
    """

    def __init__(self, allowed: frozenset[str], *, check_host: bool) -> None:
        self.allowed = allowed
        self.check_host = check_host

    def allows(self, host: str) -> bool:
        """Whether ``host`` (no port) is a loopback name or address, or an allowed one."""
        if host in _LOOPBACK_NAMES or host in self.allowed:
            return True
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        return address.is_loopback or str(address) in self.allowed

    def refusal(self, headers: Any) -> tuple[int, str] | None:
        """``(status, reason)`` when a request with these headers must be refused."""
        raw_host = headers.get("host")
        host = _split_host(raw_host) if raw_host is not None else None
        if self.check_host and host is not None and not self.allows(host):
            return 421, "this host name is not served here (see allowed_hosts)"
        if headers.get("sec-fetch-site", "").strip().lower() == "cross-site":
            return 403, "cross-site requests are refused"
        origin = headers.get("origin")
        if origin is not None:
            _scheme, sep, rest = origin.strip().partition("://")
            origin_host = _split_host(rest.partition("/")[0]) if sep else ""
            same_origin = origin_host != "" and origin_host == host
            if not (same_origin or (origin_host and self.allows(origin_host))):
                return 403, "cross-site requests are refused"
        return None


class ConnectionGuard:
    """Bounds the webhook's connections before authentication.

    Every connection starts *unauthenticated* and becomes authenticated once a
    request on it passed the token check and its whole body came (:meth:`authenticated`). At most
    ``max_unauthenticated`` unauthenticated and ``max_connections`` connections
    in all are open: a new connection beyond either limit makes the oldest
    unauthenticated one close, and is itself closed only when all the others
    are authenticated. A flood of half-open connections thus cannot lock a
    legitimate client out, which sends its request at once and is served.
    """

    def __init__(self, max_connections: int, max_unauthenticated: int) -> None:
        self.max_connections = max_connections
        self.max_unauthenticated = max_unauthenticated
        self.open: dict[Any, None] = {}
        # Insertion-ordered: the first is the oldest.
        self.unauthenticated: dict[Any, None] = {}
        self.by_peer: dict[Any, Any] = {}
        self.dropped = 0

    def opened(self, connection: Any) -> None:
        """A connection was accepted; close what the limits call for."""
        self.open[connection] = None
        self.unauthenticated[connection] = None
        self.by_peer[connection.client] = connection
        while (len(self.unauthenticated) > self.max_unauthenticated
               or len(self.open) > self.max_connections):
            # The oldest unauthenticated one: the newcomer itself when every other
            # connection is authenticated.
            victim = next(iter(self.unauthenticated), connection)
            self._drop(victim)
            if victim is connection:
                break

    def _drop(self, connection: Any) -> None:
        self.closed(connection)
        self.dropped += 1
        connection.transport.close()

    def closed(self, connection: Any) -> None:
        """A connection is gone (closed by either side)."""
        self.open.pop(connection, None)
        self.unauthenticated.pop(connection, None)
        peer = connection.client
        if self.by_peer.get(peer) is connection:
            del self.by_peer[peer]

    def authenticated(self, peer: Any) -> None:
        """The connection from ``peer`` (the ASGI scope's ``client``) sent a whole authorized
        request: its token was right and its body came."""
        connection = self.by_peer.get(tuple(peer) if peer is not None else None)
        if connection is not None:
            self.unauthenticated.pop(connection, None)


# What h11 (uvicorn's pure-Python parser) buffers at most while a request's head is
# incomplete; the httptools protocol holds a client to the same bound.
MAX_HEAD_BYTES = 16 * 1024
_HEAD_TOO_LARGE_BODY = b'{"error": "the request headers are too large"}'
_HEAD_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
                   b"content-type: application/json\r\ncontent-length: %d\r\n"
                   b"connection: close\r\n\r\n%s"
                   % (len(_HEAD_TOO_LARGE_BODY), _HEAD_TOO_LARGE_BODY))
_INVALID_BODY = b'{"error": "invalid HTTP request"}'
_INVALID_REQUEST = (b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\nconnection: close\r\n\r\n%s"
                    % (len(_INVALID_BODY), _INVALID_BODY))


def _protocol_class(settings: WebhookSettings, guard: ConnectionGuard) -> type[Any]:
    """uvicorn's HTTP protocol with a header-read timeout and the connection guard.

    httptools' (C, llhttp) when it is installed — the ``gateway`` extra brings it:
    parsing and writing a request costs a fraction of h11's pure Python — else h11's.
    """
    try:
        import httptools  # noqa: F401  (only whether it is there)
    except ImportError:
        return _h11_protocol_class(settings, guard)
    return _httptools_protocol_class(settings, guard)


class _CoalescingTransport(asyncio.Transport):
    """A connection's transport whose writes of one event-loop step leave as one send.

    uvicorn writes a response's head and its body separately: two ``send`` calls,
    and on loopback each is the costliest step of answering a message (the kernel
    delivers the segment and wakes the reader there and then). Held until the end
    of the step, they go out together; closing sends what is held first.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._held:
            self._loop.call_soon(self._flush)
        # A caller may reuse a mutable buffer once write returns: keep a copy of those.
        self._held.append(data if isinstance(data, bytes) else bytes(data))

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def _flush(self) -> None:
        held, self._held = self._held, []
        if held and not self._transport.is_closing():
            self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = []
        self._transport.abort()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(len(d) for d in self._held)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()


class _HeaderDeadline:
    """The header timeout and the guard, mixed into a uvicorn protocol class.

    uvicorn arms no timer until a response was sent: a client that connects and
    sends nothing, or half a request, would hold its connection (and a file
    descriptor) for ever. This one must finish its headers in ``header_timeout_s``.
    The protocol says whether a request's head is incomplete (:meth:`_awaiting_head`)
    and whether part of it came (:meth:`_partial_head`). A request the parser refuses
    gets the webhook's JSON 400.
    """

    settings: WebhookSettings
    guard: ConnectionGuard
    timeout_keep_alive: Any  # uvicorn's (an int there; whole seconds are not needed)
    header_timer: asyncio.TimerHandle | None = None
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # uvicorn's keep-alive timer is the idle timeout; its Config wants whole seconds.
        self.timeout_keep_alive = self.settings.idle_timeout_s

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        super().connection_made(_CoalescingTransport(transport, self.loop))  # type: ignore[misc]
        self.guard.opened(self)
        if not transport.is_closing():
            self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        self.guard.closed(self)
        super().connection_lost(exc)  # type: ignore[misc]

    def _awaiting_head(self) -> bool:
        raise NotImplementedError

    def _partial_head(self) -> bool:
        raise NotImplementedError

    def _arm_header_timer(self) -> None:
        self.header_timer = self.loop.call_later(self.settings.header_timeout_s,
                                                 self._header_timeout)

    def _cancel_header_timer(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def send_400_response(self, msg: str) -> None:
        """What uvicorn answers a request its parser refuses: the webhook's JSON error,
        not uvicorn's plain text (llhttp refuses more than h11 did — a control character
        in a header value — which the route used to answer in JSON)."""
        self._cancel_header_timer()
        self.transport.write(_INVALID_REQUEST)
        self.transport.close()

    def _header_timeout(self) -> None:
        self.header_timer = None
        if self.transport.is_closing() or not self._awaiting_head():
            return
        if self._partial_head():  # part of a request came: say why it ends
            self.transport.write(_REQUEST_TIMEOUT)
        self.transport.close()


def _h11_protocol_class(settings_: WebhookSettings, guard_: ConnectionGuard) -> type[Any]:
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(_HeaderDeadline, H11Protocol):
        settings, guard = settings_, guard_

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                self._cancel_header_timer()  # the headers are in (or the connection is gone)
            elif self.header_timer is None:
                self._arm_header_timer()  # the next request on a kept-alive connection began

        def _awaiting_head(self) -> bool:
            return self.conn.their_state is h11.IDLE

        def _partial_head(self) -> bool:
            return bool(self.conn.trailing_data[0])

    return GuardedH11Protocol


def _httptools_protocol_class(settings_: WebhookSettings,
                              guard_: ConnectionGuard) -> type[Any]:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class GuardedHttpToolsProtocol(_HeaderDeadline, HttpToolsProtocol):
        # Where the connection is: waiting for a request's head (from the connection's
        # start, and again from the first byte of each request on it) or not; whether
        # that request has begun; how many bytes came while its head is incomplete.
        awaiting_head = True
        head_begun = False
        head_bytes = 0

        settings, guard = settings_, guard_

        def data_received(self, data: bytes) -> None:
            counted = self.head_bytes if self.awaiting_head else 0
            super().data_received(data)
            if not self.awaiting_head or self.transport.is_closing():
                return
            # llhttp keeps no bound of its own on a head: h11's is kept here, so a
            # client cannot grow the header list without end before the timeout.
            self.head_bytes = counted + len(data)
            if self.head_bytes > MAX_HEAD_BYTES:
                self._cancel_header_timer()
                self.transport.write(_HEAD_TOO_LARGE)
                self.transport.close()
            elif self.header_timer is None:
                # The next request on a kept-alive connection began and its head is not
                # whole yet. (Armed only now: a head that came in one piece, the usual
                # case, costs no timer.)
                self._arm_header_timer()

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self.awaiting_head, self.head_begun, self.head_bytes = True, True, 0

        def on_headers_complete(self) -> None:
            self.awaiting_head = False
            self._cancel_header_timer()
            super().on_headers_complete()

        def _awaiting_head(self) -> bool:
            return self.awaiting_head

        def _partial_head(self) -> bool:
            return self.head_begun

    return GuardedHttpToolsProtocol


class _Server:
    """uvicorn's Server without its signal handling: the gateway runner owns the signals."""

    def __init__(self, app: Any, settings: WebhookSettings, graceful_s: float,
                 guard: ConnectionGuard) -> None:
        import uvicorn

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield

        config = uvicorn.Config(
            app,
            host=settings.host,
            port=settings.port,
            http=_protocol_class(settings, guard),
            # asyncio accepts up to `backlog` connections at each wake-up before any of
            # them is looked at: uvicorn's 2048 would open that many descriptors at once,
            # past a small fd limit, before the guard can close one. Each newcomer is
            # unauthenticated, so more than max_unauthenticated at once is never useful.
            backlog=settings.max_unauthenticated,
            ws="none",
            lifespan="off",
            log_config=None,
            access_log=False,
            # The guard finds a connection by its peer address (the ASGI scope's
            # client): X-Forwarded-For from a local proxy must not rewrite it.
            proxy_headers=False,
            timeout_graceful_shutdown=max(1, int(graceful_s)),
            server_header=False,
        )
        self.server = Server(config)


class WebhookAdapter:
    """The ``webhook`` platform. ``port`` is the bound port once started (useful with port 0)."""

    name = PLATFORM

    def __init__(self, context: AdapterContext) -> None:
        self.context = context
        self.settings: WebhookSettings = context.settings
        self.log = context.log
        self.token = context.secret(self.settings.token_env)
        self.port: int | None = None
        self.guard = ConnectionGuard(self.settings.max_connections,
                                     self.settings.max_unauthenticated)
        self.hosts = HostPolicy(
            self.settings.allowed_hosts,
            check_host=is_loopback(self.settings.host) or bool(self.settings.allowed_hosts),
        )
        self._server: Any = None
        self._task: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ app

    def build_app(self) -> Any:
        """The starlette application (also usable on its own, e.g. under another server)."""
        from starlette.applications import Starlette
        from starlette.exceptions import HTTPException
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        async def health(request: Request) -> Response:
            return JSONResponse({"status": "ok"})

        async def message(request: Request) -> Response:
            try:
                inbound = await self._inbound(request)
            except _BadRequest as exc:
                return self._error(request, exc.status, exc.message)
            timeout = self.settings.reply_timeout_s
            if timeout is None:
                return self._reply_response(await self.context.bus.handle(inbound))
            pending = await self.context.bus.submit(inbound)
            try:
                # Shielded: at the timeout the run goes on, and its reply is parked.
                reply = await asyncio.wait_for(asyncio.shield(pending), timeout)
            except TimeoutError:
                return await self._accepted(inbound, pending)
            return self._reply_response(reply)

        async def status(request: Request) -> Response:
            if not self._authorized(request):
                return self._error(request, 401, "unauthorized")
            self.guard.authenticated(request.scope.get("client"))
            parked = await self.context.bus.parked(request.path_params["status_id"])
            if parked is None:
                return self._error(request, 404, "unknown or expired status id")
            if parked == PENDING:
                return JSONResponse({"status": "pending"}, status_code=202,
                                    headers={"retry-after": "1"})
            return self._reply_response(parked)

        async def stream(request: Request) -> Response:
            try:
                inbound = await self._inbound(request)
            except _BadRequest as exc:
                return self._error(request, exc.status, exc.message)
            return self._stream_response(inbound)

        async def not_found(request: Request, exc: Exception) -> Response:
            status = getattr(exc, "status_code", 404)
            text = "method not allowed" if status == 405 else "not found"
            return JSONResponse({"error": text}, status_code=status)

        async def internal(request: Request, exc: Exception) -> Response:
            log_event(self.log, logging.ERROR, "webhook_internal_error",
                      path=request.url.path, error=type(exc).__name__)
            return JSONResponse({"error": "internal error"}, status_code=500)

        app = Starlette(
            routes=[
                Route("/health", health, methods=["GET"]),
                Route("/message", message, methods=["POST"]),
                Route("/message/stream", stream, methods=["POST"]),
                Route("/message/status/{status_id}", status, methods=["GET"]),
            ],
            exception_handlers={HTTPException: not_found, Exception: internal},
        )
        return self._host_checked(app, message, internal)

    def _host_checked(self, app: Any, message: Any = None, internal: Any = None) -> Any:
        """``app`` behind the :class:`HostPolicy`: refused requests never reach a route.

        With ``message`` (the ``POST /message`` endpoint) and ``internal`` (the
        handler of an unexpected error), that one route is served here without
        starlette's middleware and router: the same request and response objects,
        and an error becomes the same 500, but a message — the gateway's hot path
        — does not pay for a dozen ASGI layers, each resumed at every step of its run.
        """
        from starlette.datastructures import Headers
        from starlette.requests import Request

        async def checked(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                refusal = self.hosts.refusal(Headers(scope=scope))
                if refusal is not None:
                    response = self._error(Request(scope), *refusal)
                    await response(scope, receive, send)
                    return
                if (message is not None and scope["path"] == "/message"
                        and scope["method"] == "POST"):
                    await direct(scope, receive, send)
                    return
            await app(scope, receive, send)

        async def direct(scope: Any, receive: Any, send: Any) -> None:
            request = Request(scope, receive, send)
            try:
                response = await message(request)
            except Exception as exc:
                # As starlette's ServerErrorMiddleware does it: the 500, then the error
                # goes on to the server, which logs it with its traceback.
                await (await internal(request, exc))(scope, receive, send)
                raise
            await response(scope, receive, send)

        return checked

    def _error(self, request: Request, status: int, message: str) -> Response:
        from starlette.responses import JSONResponse

        log_event(self.log, logging.WARNING, "webhook_rejected", status=status,
                  path=request.url.path, reason=message)
        headers = {"www-authenticate": "Bearer"} if status == 401 else None
        return JSONResponse({"error": message}, status_code=status, headers=headers)

    def _authorized(self, request: Request) -> bool:
        if not self.token:
            return True
        offered = request.headers.get("x-lich-token")
        if offered is None:
            auth = request.headers.get("authorization", "")
            scheme, _, value = auth.partition(" ")
            offered = value.strip() if scheme.lower() == "bearer" else ""
        return hmac.compare_digest(offered.encode(), self.token.encode())

    async def _read_body(self, request: Request) -> bytes:
        cap = self.settings.max_body_bytes
        declared = request.headers.get("content-length")
        if declared is not None:
            try:
                if int(declared) > cap:
                    raise _BadRequest(413, f"body too large: the limit is {cap} bytes")
            except ValueError:
                raise _BadRequest(400, "invalid content-length") from None
        from starlette.requests import ClientDisconnect

        body = bytearray()
        try:
            async for chunk in request.stream():
                body.extend(chunk)
                if len(body) > cap:
                    raise _BadRequest(413, f"body too large: the limit is {cap} bytes")
        except ClientDisconnect:
            # A client gone mid-body is a rejected request (one warning line), not an
            # internal error with a traceback for every slow client that gives up.
            raise _BadRequest(400, "the client disconnected before the body was complete") \
                from None
        return bytes(body)

    async def _inbound(self, request: Request) -> InboundMessage:
        if not self._authorized(request):
            raise _BadRequest(401, "unauthorized")
        content_type = request.headers.get("content-type", "")
        if content_type.split(";", 1)[0].strip().lower() != "application/json":
            raise _BadRequest(415, "content-type must be application/json")
        body = await self._read_body(request)
        # Only now: a client trickling its body stays evictable like a half-sent header
        # (without a token, anyone on loopback gets this far).
        self.guard.authenticated(request.scope.get("client"))
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise _BadRequest(400, f"invalid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise _BadRequest(400, "the body must be a JSON object")
        text = data.get("text")
        if text is None:
            raise _BadRequest(400, "text is required")
        if not isinstance(text, str):
            raise _BadRequest(400, "text must be a string")
        if not text.strip():
            raise _BadRequest(400, "text must not be empty")
        return InboundMessage(
            PLATFORM,
            _identifier(data, "chat_id", "default"),
            _identifier(data, "user_id", "anonymous"),
            text,
            _idempotency_key(request.headers.get("idempotency-key")),
        )

    async def _accepted(self, inbound: InboundMessage,
                        pending: asyncio.Future[BusReply]) -> Response:
        """``202`` with the URL where the reply will be: the run goes on."""
        from starlette.responses import JSONResponse

        bus = self.context.bus
        session_id = bus.session_id_for(inbound.platform, inbound.chat_id)
        # The bus keeps it (unguessable id): in every ingress, for a bus that spans them.
        status_id = await bus.park(pending, session_id)
        url = f"/message/status/{status_id}"
        log_event(self.log, logging.INFO, "reply_parked", chat=inbound.chat_id,
                  timeout_s=self.settings.reply_timeout_s)
        return JSONResponse(
            {"status": "accepted", "status_url": url, "session_id": session_id},
            status_code=202, headers={"location": url})

    def _reply_response(self, reply: BusReply) -> Response:
        from starlette.responses import JSONResponse

        if reply.kind == "duplicate":
            # Taken before under this Idempotency-Key; its answer went to that request.
            return JSONResponse({"status": "duplicate", "detail": reply.text,
                                 "session_id": reply.session_id}, status_code=202)
        if reply.kind in _STATUS_FOR_KIND:
            status = _STATUS_FOR_KIND[reply.kind]
            headers = {"retry-after": "5"} if status in (429, 503) else None
            if reply.kind == "budget":
                # The daily budget returns at the next UTC midnight, not in 5 seconds.
                headers = {"retry-after": str(86_400 - int(time.time()) % 86_400)}
            return JSONResponse({"error": reply.text, "session_id": reply.session_id},
                                status_code=status, headers=headers)
        return JSONResponse(_reply_body(reply))

    def _stream_response(self, inbound: InboundMessage) -> Response:
        from starlette.responses import StreamingResponse

        bus = self.context.bus
        queue: asyncio.Queue[tuple[str, dict[str, Any]] | None] = asyncio.Queue()

        def on_event(envelope: Envelope) -> None:
            queue.put_nowait((envelope.type, serialization.envelope_to_dict(envelope)))

        async def notify(text: str) -> None:
            # What a chat platform would send as a message: the approval request, as
            # text (the approval_requested event before it carries the same as data).
            queue.put_nowait(("notice", {"text": text, "session_id": bus.session_id_for(
                inbound.platform, inbound.chat_id)}))

        async def run() -> None:
            try:
                reply = await bus.handle(inbound, on_event=on_event, notify=notify)
                if reply.kind in _STATUS_FOR_KIND or reply.kind == "duplicate":
                    queue.put_nowait(("error", {"error": reply.text, "kind": reply.kind,
                                                "session_id": reply.session_id}))
                else:
                    queue.put_nowait(("reply", _reply_body(reply)))
            finally:
                queue.put_nowait(None)

        async def events() -> AsyncIterator[bytes]:
            # The run is its own task: a client that goes away does not cut a
            # run (and its transcript) short.
            task = asyncio.create_task(run())
            try:
                while (item := await queue.get()) is not None:
                    name, payload = item
                    data = json.dumps(payload, ensure_ascii=False)
                    yield f"event: {name}\ndata: {data}\n\n".encode()
            finally:
                if not task.done():
                    await asyncio.shield(task)

        return StreamingResponse(
            events(),
            media_type="text/event-stream",
            headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
        )

    # ------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Bind and serve; refuses a non-loopback address without a token."""
        host, port = self.settings.host, self.settings.port
        if not is_loopback(host) and not self.token:
            raise GatewayError(
                f"refusing to bind the webhook to {host}: it is reachable from other machines "
                f"and no token is set (export {self.settings.token_env}=<secret>, "
                "or bind 127.0.0.1)"
            )
        generated = None
        if not self.token and not self.settings.open:
            # Loopback is not private: every local user can reach it (and drive the
            # agent, read its work dir). No token configured: make one, kept 0600.
            generated = self.settings.token_path()
            try:
                self.token = load_or_create_token(generated)
            except (OSError, ValueError) as exc:
                raise GatewayError(
                    f"the webhook has no token ({self.settings.token_env} is not set) and "
                    f"cannot keep a generated one in {generated}: {exc} (set "
                    f"{self.settings.token_env}, or token_file, or open = true in "
                    "[gateway.webhook] to serve every local user without one)") from exc
        try:
            sock = _bind(host, port)
        except OSError as exc:
            reason = exc.strerror or exc
            raise GatewayError(f"webhook cannot listen on {host}:{port}: {reason}") from exc
        self.port = sock.getsockname()[1]
        server = _Server(self.build_app(), self.settings, self.context.config.grace_s + 5,
                         self.guard).server
        self._server = server
        self._task = asyncio.create_task(server.serve(sockets=[sock]), name="lich-webhook")
        while not server.started:
            if self._task.done():
                sock.close()
                failure = self._task.exception()
                raise GatewayError(f"webhook failed to start: {failure or 'server exited'}")
            await asyncio.sleep(0.01)
        log_event(self.log, logging.INFO, "webhook_listening", host=host, port=self.port,
                  token="generated" if generated else "set" if self.token else "none")
        if generated is not None:
            log_event(self.log, logging.WARNING, "webhook_token_generated",
                      token_file=str(generated),
                      detail=f"no {self.settings.token_env} set: requests need the token in "
                             f"that file, e.g. curl -H \"x-lich-token: $(cat {generated})\" "
                             f"http://{host}:{self.port}/message")
        elif not self.token:
            log_event(self.log, logging.WARNING, "webhook_open",
                      detail="open = true and no token: every local user can send messages")

    async def stop(self) -> None:
        """Stop listening; requests in flight get their answers first."""
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        try:
            await self._task
        except Exception as exc:  # a failing shutdown must not stop the others
            log_event(self.log, logging.WARNING, "webhook_stop_failed", error=type(exc).__name__)
        self._server = None
        self._task = None
        log_event(self.log, logging.INFO, "adapter_stopped", platform=PLATFORM)


def _identifier(data: dict[str, Any], key: str, default: str) -> str:
    value = data.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise _BadRequest(400, f"{key} must be a string or an integer")
    text = str(value).strip()
    if not text:
        raise _BadRequest(400, f"{key} must not be empty")
    if len(text) > MAX_ID_CHARS:
        raise _BadRequest(400, f"{key} is longer than {MAX_ID_CHARS} characters")
    return text


def _idempotency_key(value: str | None) -> str:
    """The ``Idempotency-Key`` header: the message's id, so a retried request runs once
    on a bus that removes duplicates (``""`` when absent)."""
    if value is None:
        return ""
    key = value.strip()
    if not key:
        raise _BadRequest(400, "Idempotency-Key must not be empty")
    if len(key) > MAX_ID_CHARS:
        raise _BadRequest(400, f"Idempotency-Key is longer than {MAX_ID_CHARS} characters")
    if not key.isprintable():
        raise _BadRequest(400, "Idempotency-Key must be printable text")
    return key


def _reply_body(reply: BusReply) -> dict[str, Any]:
    return {
        "reply": reply.text,
        "usage": serialization.unstructure(reply.usage) if reply.usage is not None else None,
        "session_id": reply.session_id,
    }


def _bind(host: str, port: int) -> socket.socket:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, proto, _, address = infos[0]
    # The protocol number matters: asyncio only turns Nagle off (TCP_NODELAY) on accepted
    # connections of a socket it can tell is TCP, and without that every keep-alive
    # request waits ~40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, proto or socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
