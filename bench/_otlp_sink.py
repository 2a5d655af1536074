"""An OTLP/HTTP traces receiver for the benchmarks, served from its own process.

``python -m bench._otlp_sink`` listens on 127.0.0.1, prints ``{"port": N}`` as
one JSON line, answers every ``POST /v1/traces`` as a collector does (decoding
the protobuf and counting the spans) and ``GET /count`` with ``{"spans": N}``,
until its standard input closes. A process of its own, as the model server:
decoding in the measured process would charge the collector's work to lich.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["OtlpSink", "main"]


def main() -> int:
    """Serve until stdin closes."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    count = 0
    lock = threading.Lock()
    reply = ExportTraceServiceResponse().SerializeToString()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            nonlocal count
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            request = ExportTraceServiceRequest.FromString(body)
            spans = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
            with lock:
                count += spans
            self._send(reply, "application/x-protobuf")

        def do_GET(self) -> None:
            with lock:
                self._send(json.dumps({"spans": count}).encode(), "application/json")

        def _send(self, body: bytes, content_type: str) -> None:
            self.send_response(200)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    try:
        sys.stdin.read()
    except KeyboardInterrupt:
        pass
    server.shutdown()
    return 0


class OtlpSink:
    """Start the sink process; ``url`` is its base URL, :meth:`spans` what it received."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0

    def __enter__(self) -> OtlpSink:
        from bench._model_server import _repo_root

        self.proc = subprocess.Popen([sys.executable, "-m", "bench._otlp_sink"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     cwd=_repo_root())
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait(timeout=10)
            raise RuntimeError(f"OTLP sink exited with {self.proc.returncode}")
        self.port = int(json.loads(line)["port"])
        return self

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` (the exporter appends ``/v1/traces``)."""
        return f"http://127.0.0.1:{self.port}"

    def spans(self) -> int:
        """How many spans the sink has decoded so far."""
        import httpx

        return int(httpx.get(f"{self.url}/count", timeout=10).json()["spans"])

    def __exit__(self, *exc: Any) -> None:
        if self.proc is None:
            return
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    sys.exit(main())
