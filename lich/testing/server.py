"""The scripted model served over HTTP: :class:`ScriptedServer`.

A small threaded HTTP/1.1 server from the standard library, on 127.0.0.1 by
default. Each ``POST`` is routed by its path to one of the served
:data:`~lich.testing.dialects.DIALECTS`, parsed into a
:class:`~lich.testing.ScriptRequest`, answered by the
:class:`~lich.testing.ScriptedModel`'s next step, and written back in that
dialect — streamed (chunked) when the request asks for it.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from lich.testing.dialects import DIALECTS, Dialect
from lich.testing.scripted import Fail, ScriptedModel

__all__ = ["ScriptedServer"]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    # TCP_NODELAY: headers and body go out as separate writes, and with Nagle on, the
    # body waits for the client's delayed ACK (~40 ms per reply on Linux), which would
    # swamp every timing taken against this server (tests, benchmarks).
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # silence stderr
        pass

    def _send(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path in ("/health", "/"):
            self._send(200, {"content-type": "application/json"}, b'{"status":"ok"}')
        else:
            self._send(404, {"content-type": "application/json"}, b'{"error":"not found"}')

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        dialect = self.server.owner.dialect_for(path)
        if dialect is None:
            self._send(404, {"content-type": "application/json"}, b'{"error":"not found"}')
            return
        try:
            request = dialect.parse(json.loads(raw or b"null"))
        except (ValueError, AttributeError, TypeError) as exc:
            body = json.dumps({"error": {"message": f"bad request: {exc}"}}).encode()
            self._send(400, {"content-type": "application/json"}, body)
            return
        self.server.owner.headers_seen.append(dict(self.headers))
        step = self.server.owner.model.next(request)
        if step.delay_s:
            time.sleep(step.delay_s)
        if isinstance(step, Fail):
            headers = {"content-type": "application/json", **step.headers}
            self._send(step.status, headers, dialect.error_body(step))
            return
        if not request.stream:
            self._send(*dialect.respond(request, step))
            return
        self.send_response(200)
        self.send_header("content-type", getattr(dialect, "content_type", "text/event-stream"))
        self.send_header("transfer-encoding", "chunked")
        self.send_header("cache-control", "no-cache")
        self.end_headers()
        for piece in dialect.stream(request, step):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # The default listen backlog of 5 drops connection bursts (many concurrent
    # conversations opening their pooled connections at once): a dropped SYN costs a
    # client a one-second retransmit.
    request_queue_size = 128
    owner: ScriptedServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client hanging up (a cancelled run, a pooled keep-alive connection closed) is
        # normal for this server; the default prints a traceback on stderr, which lands in
        # the middle of `lich demo`'s output.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class _Server6(_Server):
    address_family = socket.AF_INET6


class ScriptedServer:
    """A scripted model served over HTTP on 127.0.0.1, in a background thread.

    ``port=0`` (the default) binds a free port; ``dialects`` names the wire
    dialects served (see :data:`~lich.testing.dialects.DIALECTS`). Their paths
    do not overlap, so one server can speak all of them at once.

    >>> with ScriptedServer(ScriptedModel(["hello"])) as server:
    ...     server.base_url       # http://127.0.0.1:<port>/v1 for openai_compat
    """

    def __init__(
        self,
        model: ScriptedModel | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        dialects: Sequence[str] = ("openai",),
    ) -> None:
        self.model = model or ScriptedModel()
        self.headers_seen: list[dict[str, str]] = []
        self._dialects = [DIALECTS[d] for d in dialects]
        # An IPv6 literal ("::1") needs an IPv6 socket; the standard server is IPv4 only.
        server_class = _Server6 if ":" in host else _Server
        self._server = server_class((host, port), _Handler)
        self._server.owner = self
        self._thread: threading.Thread | None = None

    def dialect_for(self, path: str) -> Dialect | None:
        """The dialect serving ``path``."""
        for d in self._dialects:
            if path in d.paths:
                return d
        return None

    @property
    def dialects(self) -> tuple[Dialect, ...]:
        """The dialects served, in the order given."""
        return tuple(self._dialects)

    @property
    def port(self) -> int:
        """The bound port."""
        return int(self._server.server_address[1])

    @property
    def root_url(self) -> str:
        """Where a client on this machine reaches the server: ``http://127.0.0.1:<port>``.

        The bound address, except that a wildcard bind (``0.0.0.0``, ``::``) is
        reached through loopback.
        """
        host = str(self._server.server_address[0])
        if host in ("", "0.0.0.0", "::"):
            host = "::1" if self._server.address_family == socket.AF_INET6 else "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The ``base_url`` for an ``openai_compat`` provider (``…/v1``)."""
        return f"{self.root_url}/v1"

    def start(self) -> ScriptedServer:
        """Serve in a daemon thread."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                name="lich-scripted-server", daemon=True,
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
