"""The webhook platform: a small HTTP API (starlette, served by uvicorn).

Routes:

* ``GET /health`` → ``200 {"status": "ok"}`` (no token needed).
* ``POST /message`` with JSON ``{"text", "chat_id"?, "user_id"?}`` →
  ``200 {"reply", "usage", "session_id"}``. The platform is always
  ``webhook``; a client cannot pose as another platform's conversation.
* ``POST /message/stream`` → the run's events as server-sent events
  (``event: <type>`` / ``data: <envelope JSON>``), ending with ``event: reply``.

Safety: binds 127.0.0.1 by default and refuses any other address unless a
token is set (``LICH_GATEWAY_TOKEN``), which clients send as ``x-lich-token``
or ``Authorization: Bearer``; it is compared in constant time. Bodies over
``max_body_bytes`` (1 MB) get 413, a wrong content type 415, bad JSON or a
missing ``text`` 400 — each a JSON ``{"error": ...}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import json
import logging
import socket
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

from lich import serialization
from lich.gateway._format import log_event
from lich.gateway.bus import BusReply, InboundMessage
from lich.gateway.registry import AdapterContext, GatewayError

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from lich.events import Envelope
    from lich.gateway.config import WebhookSettings

__all__ = ["WebhookAdapter", "is_loopback"]

PLATFORM = "webhook"
MAX_ID_CHARS = 256
_STATUS_FOR_KIND = {"busy": 429, "closed": 503, "aborted": 503, "error": 502}


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


class _Server:
    """uvicorn's Server without its signal handling: the gateway runner owns the signals."""

    def __init__(self, app: Any, settings: WebhookSettings, graceful_s: float) -> None:
        import uvicorn

        class Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self) -> Iterator[None]:
                yield

        config = uvicorn.Config(
            app,
            host=settings.host,
            port=settings.port,
            http="h11",
            ws="none",
            lifespan="off",
            log_config=None,
            access_log=False,
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
            reply = await self.context.bus.handle(inbound)
            return self._reply_response(reply)

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

        return Starlette(
            routes=[
                Route("/health", health, methods=["GET"]),
                Route("/message", message, methods=["POST"]),
                Route("/message/stream", stream, methods=["POST"]),
            ],
            exception_handlers={HTTPException: not_found, Exception: internal},
        )

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
        )

    def _reply_response(self, reply: BusReply) -> Response:
        from starlette.responses import JSONResponse

        if reply.kind in _STATUS_FOR_KIND:
            status = _STATUS_FOR_KIND[reply.kind]
            headers = {"retry-after": "5"} if status in (429, 503) else None
            return JSONResponse({"error": reply.text, "session_id": reply.session_id},
                                status_code=status, headers=headers)
        return JSONResponse(_reply_body(reply))

    def _stream_response(self, inbound: InboundMessage) -> Response:
        from starlette.responses import StreamingResponse

        bus = self.context.bus
        queue: asyncio.Queue[tuple[str, dict[str, Any]] | None] = asyncio.Queue()

        def on_event(envelope: Envelope) -> None:
            queue.put_nowait((envelope.type, serialization.envelope_to_dict(envelope)))

        async def run() -> None:
            try:
                reply = await bus.handle(inbound, on_event=on_event)
                if reply.kind in _STATUS_FOR_KIND:
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
        try:
            sock = _bind(host, port)
        except OSError as exc:
            reason = exc.strerror or exc
            raise GatewayError(f"webhook cannot listen on {host}:{port}: {reason}") from exc
        self.port = sock.getsockname()[1]
        server = _Server(self.build_app(), self.settings, self.context.config.grace_s + 5).server
        self._server = server
        self._task = asyncio.create_task(server.serve(sockets=[sock]), name="lich-webhook")
        while not server.started:
            if self._task.done():
                sock.close()
                failure = self._task.exception()
                raise GatewayError(f"webhook failed to start: {failure or 'server exited'}")
            await asyncio.sleep(0.01)
        log_event(self.log, logging.INFO, "webhook_listening", host=host, port=self.port,
                  token="set" if self.token else "none")

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
