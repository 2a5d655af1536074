"""Fixtures for the builtin tools tests: an executor over the builtin tools, and
loopback HTTP servers (127.0.0.1 only; nothing else is ever contacted)."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import attrs
import pytest
from provider_kinds import builtin_provider_kinds

from lich.cancel import CancelToken
from lich.config import LichConfig
from lich.events import Event
from lich.hooks import RunInfo
from lich.providers import secret_env_names
from lich.testing import DEFAULT_TIMEOUT_S, WaitTimeout, wait_for
from lich.tools import ToolExecutor, ToolRegistry
from lich.types import ToolCall, ToolResult
from lich_builtin_tools import builtin_tools
from lich_builtin_tools._net import NetGuard

Handler = Callable[["Hit"], "tuple[int, Mapping[str, str], bytes] | None"]


@pytest.fixture(autouse=True)
def _no_login_profile(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``terminal`` runs ``bash -l``: with the real HOME a test that kills it a few ms in can
    land inside the login profile (pyenv's rehash takes a lock there, and a killed rehash
    leaves it behind, stalling every later login shell for a minute). An empty HOME has no
    profile; PYENV_ROOT is pinned so that pyenv shims keep working."""
    if "PYENV_ROOT" not in os.environ and (Path.home() / ".pyenv").is_dir():
        monkeypatch.setenv("PYENV_ROOT", str(Path.home() / ".pyenv"))
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))


@attrs.define
class Hit:
    """One request a :class:`LoopbackServer` received."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    handler: BaseHTTPRequestHandler = attrs.field(repr=False)


class LoopbackServer:
    """A threaded HTTP server on 127.0.0.1 answering from a route table.

    A route is ``(status, headers, body)`` or a function of the :class:`Hit`
    returning that (or ``None`` when it wrote the response itself).
    """

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.routes: dict[str, tuple[int, Mapping[str, str], bytes] | Handler] = {}
        self.hits: list[Hit] = []
        outer = self

        class _Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                hit = Hit(self.command, self.path, {k.lower(): v for k, v in self.headers.items()},
                          body, self)
                outer.hits.append(hit)
                route = outer.routes.get(self.path.split("?", 1)[0])
                if route is None:
                    answer: tuple[int, Mapping[str, str], bytes] | None = (
                        404, {"content-type": "text/plain"}, b"no route")
                elif callable(route):
                    answer = route(hit)
                else:
                    answer = route
                if answer is None:
                    return
                status, headers, payload = answer
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    if not any(k.lower() == "content-length" for k in headers):
                        self.send_header("content-length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _serve

        family_server = ThreadingHTTPServer
        if ":" in host:
            import socket

            class _V6(ThreadingHTTPServer):
                address_family = socket.AF_INET6

            family_server = _V6
        self.server = family_server((host, 0), _Handler)
        self.server.daemon_threads = True
        self.host = host
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def url(self, path: str = "/", host: str | None = None) -> str:
        """``http://<host>:<port><path>``."""
        name = host or self.host
        if ":" in name and not name.startswith("["):
            name = f"[{name}]"
        return f"http://{name}:{self.port}{path}"

    def hits_for(self, path: str) -> list[Hit]:
        """Requests received for ``path`` (query ignored)."""
        return [h for h in self.hits if h.path.split("?", 1)[0] == path]

    def stop(self) -> None:
        """Shut the server down."""
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def http_server() -> Iterator[Callable[..., LoopbackServer]]:
    """Factory for loopback servers, all stopped after the test."""
    servers: list[LoopbackServer] = []

    def start(host: str = "127.0.0.1") -> LoopbackServer:
        server = LoopbackServer(host)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


class Runner:
    """Runs builtin tools through a real :class:`ToolExecutor` in one work dir."""

    def __init__(self, work_dir: Path) -> None:
        self.work_dir = work_dir
        self.config = LichConfig(work_dir=str(work_dir), plugins=())
        self.net: NetGuard | None = None
        self.docs_resolver: Any = None
        self.env: dict[str, str] = {}
        self.settings: dict[str, dict[str, Any]] = {}

    def registry(self) -> ToolRegistry:
        """A registry of the builtin tools as configured now."""
        registry = ToolRegistry()
        for item in builtin_tools(self.config, net=self.net, docs_resolver=self.docs_resolver,
                                  env=self.env):
            registry.register(item)
        return registry

    async def __call__(
        self,
        name: str,
        args: Mapping[str, Any] | None = None,
        *,
        settings: Mapping[str, Any] | None = None,
        cancel: CancelToken | None = None,
        run_config: LichConfig | None = None,
        emit: Callable[[Event], None] | None = None,
    ) -> ToolResult:
        tool_settings = dict(self.settings)
        if settings is not None:
            tool_settings[name] = dict(settings)
        secrets = secret_env_names(self.config, builtin_provider_kinds())
        executor = ToolExecutor(self.registry(), work_dir=self.work_dir, env=self.env,
                                tool_settings=tool_settings, secret_env_names=secrets)
        run = None
        if run_config is not None:
            run = RunInfo("run1", "sess1", "input", str(self.work_dir), run_config)
        return await executor.execute(ToolCall("t1", name, dict(args or {})), run=run,
                                      cancel=cancel, emit=emit)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The work dir (``<tmp>/work``); ``<tmp>/outside`` holds a file tools must never see."""
    root = tmp_path / "work"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP-SECRET-OUTSIDE\n")
    return root


@pytest.fixture
def run(work: Path) -> Runner:
    """Call a builtin tool: ``await run("read_file", {"path": "x"})``."""
    return Runner(work)


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (state, ppid,
    pgrp, ...), or ``None`` when the process is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as dead)."""
    return _stat_fields(pid) is not None


def live_processes() -> Iterator[tuple[int, list[str]]]:
    """Every live process (zombies left out): its pid and :func:`_stat_fields`."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(entry.name)
            if fields is not None:
                yield int(entry.name), fields


def wait_until_dead(pids: list[int], within_s: float = DEFAULT_TIMEOUT_S) -> list[int]:
    """Poll until every pid is dead; returns those still alive after ``within_s``."""
    with contextlib.suppress(WaitTimeout):
        wait_for(lambda: not any(process_alive(p) for p in pids), within_s, interval=0.05)
    return [p for p in pids if process_alive(p)]


def kill_quietly(pids: list[int]) -> None:
    """Clean up after a failed test: kill what is left."""
    import signal

    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
