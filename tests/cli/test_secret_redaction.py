"""A provider error that quotes the API key: the key reaches no event, transcript or log.

A real ``lich run --json`` against a loopback server that answers every
request with a 401 whose body echoes the request's ``Authorization`` header,
as some providers and proxies do.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from .conftest import json_lines, run_lich

KEY = "sk-echoed-secret-key-7f3a9c2b1e"


class _EchoAuth(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        auth = self.headers.get("authorization", "")
        body = json.dumps({"error": {"message": f"invalid credentials: {auth}",
                                     "type": "invalid_request_error"}}).encode()
        self.send_response(401)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def echo_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EchoAuth)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def _files_holding(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


@pytest.mark.parametrize("key_env", ["LICH_TEST_PROVIDER_KEY", "MY_LLM_CREDENTIALS"])
def test_an_echoed_key_is_redacted_everywhere(
    work: Path, tmp_path: Path, echo_server: str, key_env: str
) -> None:
    config = work / ".lich" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        "[[providers]]\n"
        'kind = "openai_compat"\nname = "echo"\nmodel = "m"\n'
        f'base_url = "{echo_server}"\napi_key_env = "{key_env}"\n',
        encoding="utf-8",
    )
    env = {**os.environ, key_env: KEY}
    # Debug logging: the log (stderr) gets everything lich knows about the failure.
    proc = run_lich("run", "--json", "--log-level", "debug", "hello", cwd=work, env=env)
    assert proc.returncode != 0
    assert KEY not in proc.stdout
    assert KEY not in proc.stderr
    errors = [e for e in json_lines(proc.stdout) if e.get("type") == "error"]
    assert errors, proc.stdout
    # The body did come back, quoted: only the key itself is gone.
    assert "invalid credentials: Bearer [redacted]" in json.dumps(errors)
    # Nor in any file lich wrote: the transcript JSONL, logs, state.
    assert _files_holding(tmp_path, KEY.encode()) == []
    assert any(p.suffix == ".jsonl" for p in tmp_path.rglob("*")), "no transcript was written"
