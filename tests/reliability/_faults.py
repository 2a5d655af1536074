"""A fault-injecting model server on 127.0.0.1, for the provider fault tests.

Unlike :class:`lich.testing.ScriptedServer` it is a raw asyncio socket server
(in its own thread and event loop), so a fault can do what a well-behaved HTTP
server never would: reset the connection before or after the headers, accept a
request and never answer, stall a stream after a few tokens, send garbage,
truncated JSON, a 50 MB body or the wrong content type.

Answers that do succeed are rendered by the same dialect objects the scripted
server uses (``openai``, ``anthropic``, ``ollama``), so the providers see a
byte-exact well-formed answer around each fault.

Each request takes the next :data:`Behaviour` of the plan; when the plan is
empty the server repeats its ``default``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any, TypeAlias

import attrs
from attrs import frozen

from lich.testing import DIALECTS, Fail, Reply, ScriptRequest

LONG_TEXT = "one two three four five six seven eight nine ten"
"""The answer the faults cut short (and the one a mislabelled whole answer carries)."""
PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages", "ollama": "/api/chat"}
KIND_OF = {"openai": "openai_compat", "anthropic": "anthropic", "ollama": "ollama"}


@frozen
class Ok:
    """A well-formed answer (streamed when the request asks for it)."""

    reply: Reply = attrs.field(factory=lambda: Reply("all good"))


@frozen
class Status:
    """A failure status in the dialect's error shape, with optional headers (Retry-After)."""

    code: int
    headers: dict[str, str] = attrs.field(factory=dict)


@frozen
class ResetBeforeHeaders:
    """Read the request, then reset the connection (TCP RST) without a byte of answer."""


@frozen
class ResetMidStream:
    """Send the headers and the first ``pieces`` pieces of a good answer, then reset."""

    pieces: int = 2


@frozen
class NeverAnswer:
    """Accept and read the request, then say nothing, ever (until the server stops)."""


@frozen
class StallAfter:
    """Send the headers and the first ``pieces`` pieces of a good answer, then go silent."""

    pieces: int = 3


@frozen
class Garbage:
    """A 200 whose body is not JSON (nor SSE, nor NDJSON) at all."""

    body: bytes = b"\x00\xff}{ garbage <<<>>> \x7f not json at all"
    content_type: str = "application/json"


@frozen
class Truncated:
    """A 200 whose JSON is cut in half; ``honest_length`` sends the cut body with its
    own content-length (HTTP-complete, JSON-broken), otherwise the header promises the
    whole body and the connection closes half way."""

    honest_length: bool = True


@frozen
class Huge:
    """A 200 with a body of ``size`` bytes: one huge well-formed answer (a single
    JSON document, or a single stream line), sent as fast as the client reads."""

    size: int = 50 * 1024 * 1024


@frozen
class WrongContentType:
    """A 200 with an HTML page (or the right body labelled with a wrong type)."""

    content_type: str = "text/html; charset=utf-8"
    body: bytes | None = b"<html><body><h1>Welcome to nginx!</h1></body></html>"


Behaviour: TypeAlias = (
    Ok | Status | ResetBeforeHeaders | ResetMidStream | NeverAnswer | StallAfter | Garbage
    | Truncated | Huge | WrongContentType
)

_REASONS = {200: "OK", 429: "Too Many Requests", 500: "Internal Server Error",
            503: "Service Unavailable", 529: "Overloaded"}


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    lines.append("connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _chunk(piece: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(piece), piece)


class FaultServer:
    """Serves one dialect on 127.0.0.1 with a plan of behaviours; see the module docstring.

    ``faults`` counts the requests answered with something other than :class:`Ok`.
    """

    def __init__(
        self, dialect: str, plan: Iterable[Behaviour] = (), default: Behaviour = Ok()
    ) -> None:
        self.dialect_name = dialect
        self.dialect: Any = DIALECTS[dialect]
        self.plan: deque[Behaviour] = deque(plan)
        self.default = default
        self.requests: list[ScriptRequest] = []
        self.faults = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._stopping: asyncio.Event | None = None
        self.port = 0

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> FaultServer:
        """Listen on an ephemeral loopback port, serving in a daemon thread."""
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)

            async def boot() -> None:
                self._stopping = asyncio.Event()
                self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
                self.port = self._server.sockets[0].getsockname()[1]

            self._loop.run_until_complete(boot())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="fault-server", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("fault server did not start")
        return self

    def stop(self) -> None:
        """Cut every open connection, close the socket and end the thread."""
        if self._thread is None:
            return

        async def shutdown() -> None:
            assert self._server is not None
            assert self._stopping is not None
            self._stopping.set()
            self._server.close()
            for task in list(self._handlers):
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        self._thread = None

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The ``base_url`` a provider of this dialect is configured with."""
        return f"{self.root_url}/v1" if self.dialect_name == "openai" else self.root_url

    # ------------------------------------------------------------------ serving

    def _next(self) -> Behaviour:
        with self._lock:
            behaviour = self.plan.popleft() if self.plan else self.default
            if not isinstance(behaviour, Ok):
                self.faults += 1
            return behaviour

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.decode("latin-1").split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            raw = await reader.readexactly(length) if length else b""
            request = self.dialect.parse(json.loads(raw or b"null"))
            with self._lock:
                self.requests.append(request)
            await self._answer(self._next(), request, writer)
        except (asyncio.CancelledError, ConnectionError, asyncio.IncompleteReadError):
            pass  # the client hung up, or the server is stopping: both are normal here
        finally:
            self._handlers.discard(task)
            writer.transport.abort()

    async def _forever(self) -> None:
        assert self._stopping is not None
        await self._stopping.wait()

    @staticmethod
    def _reset(writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        # SO_LINGER with a zero timeout turns close() into a TCP RST.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    def _stream_head(self) -> bytes:
        content_type = getattr(self.dialect, "content_type", "text/event-stream")
        return _head(200, {"content-type": content_type, "transfer-encoding": "chunked"})

    def _pieces(self, request: ScriptRequest, reply: Reply) -> Iterator[bytes]:
        return iter(self.dialect.stream(request, reply))

    async def _answer(
        self, behaviour: Behaviour, request: ScriptRequest, writer: asyncio.StreamWriter
    ) -> None:
        long_reply = Reply(LONG_TEXT)
        match behaviour:
            case Ok(reply):
                if request.stream:
                    writer.write(self._stream_head())
                    for piece in self._pieces(request, reply):
                        writer.write(_chunk(piece))
                    writer.write(b"0\r\n\r\n")
                else:
                    status, headers, body = self.dialect.respond(request, reply)
                    writer.write(_head(status, {**headers, "content-length": str(len(body))}))
                    writer.write(body)
                await writer.drain()
            case Status(code, headers):
                body = self.dialect.error_body(Fail(code, {"error": {"message": f"fault {code}"}}))
                writer.write(_head(code, {"content-type": "application/json", **headers,
                                          "content-length": str(len(body))}))
                writer.write(body)
                await writer.drain()
            case ResetBeforeHeaders():
                self._reset(writer)
            case ResetMidStream(pieces) | StallAfter(pieces):
                if request.stream:
                    writer.write(self._stream_head())
                    for piece in list(self._pieces(request, long_reply))[:pieces]:
                        writer.write(_chunk(piece))
                else:
                    _, headers, body = self.dialect.respond(request, long_reply)
                    writer.write(_head(200, {**headers, "content-length": str(len(body))}))
                    writer.write(body[: len(body) // 3])
                await writer.drain()
                if isinstance(behaviour, ResetMidStream):
                    await asyncio.sleep(0.02)  # let the client see the first pieces
                    self._reset(writer)
                else:
                    await self._forever()
            case NeverAnswer():
                await self._forever()
            case Garbage(body, content_type):
                writer.write(_head(200, {"content-type": content_type,
                                         "content-length": str(len(body))}))
                writer.write(body)
                await writer.drain()
            case Truncated(honest):
                if request.stream:
                    good = b"".join(self._pieces(request, long_reply))
                    cut = good[: len(good) // 2]
                    # A stream that stops in the middle of a JSON payload, then ends cleanly.
                    writer.write(self._stream_head())
                    writer.write(_chunk(cut))
                    if honest:
                        writer.write(b"0\r\n\r\n")
                    await writer.drain()
                    return
                _, headers, body = self.dialect.respond(request, long_reply)
                cut = body[: len(body) // 2]
                length = len(cut) if honest else len(body)
                writer.write(_head(200, {**headers, "content-length": str(length)}))
                writer.write(cut)
                await writer.drain()
            case Huge(size):
                await self._huge(request, writer, size)
            case WrongContentType(content_type, body):
                if body is None:  # the right body under the wrong label
                    _, _, body = self.dialect.respond(request, long_reply)
                writer.write(_head(200, {"content-type": content_type,
                                         "content-length": str(len(body))}))
                writer.write(body)
                await writer.drain()

    async def _huge(self, request: ScriptRequest, writer: asyncio.StreamWriter, size: int) -> None:
        # Rendered by the dialect around a placeholder, then the placeholder is expanded
        # while writing, so 50 MB are never held twice.
        marker = "@@HUGE@@"
        if request.stream:
            pieces = list(self._pieces(request, Reply(marker, chunks=(marker,))))
            writer.write(self._stream_head())
            for piece in pieces:
                if marker.encode() not in piece:
                    writer.write(_chunk(piece))
                    continue
                before, _, after = piece.partition(marker.encode())
                writer.write(b"%x\r\n" % (len(before) + size + len(after)) + before)
                await self._write_filler(writer, size)
                writer.write(after + b"\r\n")
            writer.write(b"0\r\n\r\n")
        else:
            _, headers, body = self.dialect.respond(request, Reply(marker))
            before, _, after = body.partition(marker.encode())
            total = len(before) + size + len(after)
            writer.write(_head(200, {**headers, "content-length": str(total)}))
            writer.write(before)
            await self._write_filler(writer, size)
            writer.write(after)
        await writer.drain()

    @staticmethod
    async def _write_filler(writer: asyncio.StreamWriter, size: int) -> None:
        block = b"x" * (1024 * 1024)
        left = size
        while left > 0:
            n = min(left, len(block))
            writer.write(block[:n])
            await writer.drain()
            left -= n
