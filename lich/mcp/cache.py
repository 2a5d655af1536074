"""The tool lists of MCP servers, kept between runs (``<state dir>/cache/mcp-tools.json``).

Starting a stdio server costs a second or more (an interpreter, ``npx``): a run
that only needs to *offer* a server's tools to the model need not start it. So
the first start of a server stores its tool list here, under a key made of
everything that decides what the server is — command, arguments, environment,
working directory, URL and headers, hashed (the file holds no value of them) —
and later runs register those tools at once and start the server only for its
first call. The entry is replaced whenever the server is started and lists its
tools (a changed list reaches the registry before the next model call), when it
announces ``tools/list_changed``, and dropped when it fails to start or answers a
call with "unknown tool". Any change of the server's table is another key.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

import mcp_types

from lich.mcp.config import ServerConfig
from lich.private_files import make_private_dirs, replace_private

__all__ = ["CachedServer", "ToolCache", "cache_key", "default_cache"]

log = logging.getLogger("lich.mcp")

_VERSION = 1


def cache_key(config: ServerConfig, work_dir: Path) -> str:
    """What identifies the server of ``config`` run from ``work_dir``, hashed."""
    what = {
        "command": config.command, "args": list(config.args), "env": dict(config.env),
        "cwd": str(work_dir / (config.cwd or ".")) if config.command else None,
        "url": config.url, "headers": dict(config.headers),
        "tools_enabled": list(config.tools_enabled or ()) or None,
        "tools_disabled": list(config.tools_disabled),
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


class CachedServer:
    """A server's tools as its last start listed them."""

    __slots__ = ("protocol_version", "server_name", "server_version", "task_only", "tools")

    def __init__(self, tools: list[Any], task_only: list[str], server_name: str | None,
                 server_version: str | None, protocol_version: str | None) -> None:
        self.tools = tools
        self.task_only = task_only
        self.server_name = server_name
        self.server_version = server_version
        self.protocol_version = protocol_version


class ToolCache:
    """The cache file; every method is safe from any thread, and a file that is
    missing, unreadable or from another version counts as empty."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("version") != _VERSION \
                or not isinstance(data.get("servers"), dict):
            return {}
        servers: dict[str, Any] = data["servers"]
        return servers

    def _write(self, servers: dict[str, Any]) -> None:
        try:
            make_private_dirs(self.path.parent)
            replace_private(self.path, json.dumps(
                {"version": _VERSION, "servers": servers}, ensure_ascii=False).encode())
        except OSError as exc:  # a read-only state dir: the next run starts the servers
            log.debug("mcp: the tool cache %s cannot be written: %s", self.path, exc)

    def get(self, key: str) -> CachedServer | None:
        """The entry of ``key``, or ``None`` (none, or one that no longer parses)."""
        with self._lock:
            entry = self._read().get(key)
        if not isinstance(entry, dict):
            return None
        try:
            tools = [mcp_types.Tool.model_validate(t, by_name=False) for t in entry["tools"]]
        except (KeyError, TypeError, ValueError):
            return None
        return CachedServer(tools, [str(n) for n in entry.get("task_only") or ()],
                            entry.get("server_name"), entry.get("server_version"),
                            entry.get("protocol_version"))

    def put(self, key: str, server: CachedServer) -> None:
        """Store ``server`` under ``key``."""
        entry = {
            "tools": [t.model_dump(by_alias=True, mode="json", exclude_none=True)
                      for t in server.tools],
            "task_only": list(server.task_only),
            "server_name": server.server_name, "server_version": server.server_version,
            "protocol_version": server.protocol_version,
        }
        with self._lock:
            servers = self._read()
            servers[key] = entry
            self._write(servers)

    def drop(self, key: str) -> None:
        """Forget ``key`` (the next run starts the server to list its tools)."""
        with self._lock:
            servers = self._read()
            if servers.pop(key, None) is not None:
                self._write(servers)


def default_cache(state_dir: str | os.PathLike[str]) -> ToolCache:
    """The cache under ``state_dir`` (where the logs of the same runs go)."""
    return ToolCache(Path(state_dir) / "cache" / "mcp-tools.json")

