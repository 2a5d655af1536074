"""The ``[mcp]`` table: which MCP servers to start and how.

::

    [mcp]
    context_warning_share = 0.25       # warn when MCP tool schemas take more of the budget

    [mcp.servers.git]                  # a stdio server: lich starts the command
    command = "mcp-server-git"
    args = ["--repository", "."]
    env = { GIT_PAGER = "cat" }        # values may use ${VAR} and ${VAR:-default}
    tools_enabled = ["git_status"]     # optional allow-list; tools_disabled too

    [mcp.servers.docs]                 # a streamable-HTTP server
    url = "http://127.0.0.1:8931/mcp"
    headers = { Authorization = "Bearer ${DOCS_TOKEN}" }

Parsing never imports the MCP SDK. ``${VAR}`` in ``args``, ``env``, ``cwd``,
``url`` and ``headers`` is read from lich's environment when the config is
checked; a variable that is not set and has no ``:-default`` is a configuration
error naming it (an empty token silently sent as ``Bearer `` is the failure
this prevents). Disabled servers are not expanded, so their variables need not
be set.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import attrs
from attrs import field, frozen

from lich.settings import (
    ConfigError,
    between,
    greater_than,
    json_type_name,
    non_empty,
    setting,
    structure_settings,
    url,
)

__all__ = [
    "DEFAULT_CONTEXT_WARNING_SHARE",
    "McpSettings",
    "ServerConfig",
    "expand_vars",
    "parse_mcp_settings",
]

DEFAULT_CONTEXT_WARNING_SHARE = 0.25


def _str_tuple(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"expected an array of strings, got {json_type_name(value)}")
    return tuple(value)


def _optional_str_tuple(value: Any) -> tuple[str, ...] | None:
    return None if value is None else _str_tuple(value)


def _str_table(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a table of strings, got {json_type_name(value)}")
    bad = [str(k) for k, v in value.items() if not isinstance(v, str)]
    if bad:
        raise TypeError(f"values must be strings (not {', '.join(bad)})")
    return {str(k): v for k, v in value.items()}


@frozen(kw_only=True)
class ServerConfig:
    """One ``[mcp.servers.<name>]`` table: a stdio ``command`` or a streamable-HTTP
    ``url`` (exactly one of them).

    ``cwd`` (stdio) is relative to the work dir, which it defaults to. ``timeout_s``
    bounds one tool call (``[tools.mcp__<server>__<tool>] timeout_s`` overrides it
    per tool), ``startup_timeout_s`` the start and handshake, ``max_output_chars``
    the text a call returns to the model (lich's default when unset).
    """

    name: str = ""
    command: str | None = setting(None, check=non_empty)
    args: tuple[str, ...] = setting(factory=tuple, parse=_str_tuple)
    env: Mapping[str, str] = setting(factory=dict, parse=_str_table)
    cwd: str | None = setting(None, check=non_empty)
    url: str | None = setting(None, check=url("http", "https"))
    headers: Mapping[str, str] = setting(factory=dict, parse=_str_table)
    enabled: bool = True
    startup_timeout_s: float = setting(10.0, check=greater_than(0))
    timeout_s: float = setting(60.0, check=greater_than(0))
    max_output_chars: int | None = setting(None, check=greater_than(0))
    tools_enabled: tuple[str, ...] | None = setting(None, parse=_optional_str_tuple)
    tools_disabled: tuple[str, ...] = setting(factory=tuple, parse=_str_tuple)

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "stdio" if self.command is not None else "http"

    def wants_tool(self, tool: str) -> bool:
        """Whether ``tools_enabled`` / ``tools_disabled`` keep the server's ``tool``."""
        if self.tools_enabled is not None and tool not in self.tools_enabled:
            return False
        return tool not in self.tools_disabled


@frozen(kw_only=True)
class McpSettings:
    """The whole ``[mcp]`` table, checked, with ``${VAR}`` expanded."""

    servers: Mapping[str, ServerConfig] = field(factory=dict)
    context_warning_share: float = setting(DEFAULT_CONTEXT_WARNING_SHARE, check=between(0, 1))

    def enabled(self) -> list[ServerConfig]:
        """The servers to start, in config order."""
        return [s for s in self.servers.values() if s.enabled]


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_vars(text: str, environ: Mapping[str, str]) -> tuple[str, list[str]]:
    """``text`` with each ``${VAR}`` / ``${VAR:-default}`` replaced from ``environ``.

    ``${VAR:-default}`` takes the default when ``VAR`` is unset *or empty* (as the
    shell does). Returns the text and the names of the variables that are unset
    without a default (their ``${...}`` is left as it was).
    """
    missing: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        value = environ.get(name)
        if value:
            return value
        if default is not None:
            return default
        if value is not None:
            return value  # set, and empty on purpose
        missing.append(name)
        return match.group(0)

    return _VAR.sub(replace, text), missing


def _expand_server(server: ServerConfig, path: str, environ: Mapping[str, str]
                   ) -> tuple[ServerConfig, list[str]]:
    problems: list[str] = []

    def one(value: str, where: str) -> str:
        out, missing = expand_vars(value, environ)
        for name in missing:
            problems.append(f"{where}: ${{{name}}} is not set (set it, or write "
                            f"${{{name}:-default}} for a default)")
        return out

    changes: dict[str, Any] = {
        "args": tuple(one(a, f"{path}.args[{i}]") for i, a in enumerate(server.args)),
        "env": {k: one(v, f"{path}.env.{k}") for k, v in server.env.items()},
        "headers": {k: one(v, f"{path}.headers.{k}") for k, v in server.headers.items()},
    }
    if server.cwd is not None:
        changes["cwd"] = one(server.cwd, f"{path}.cwd")
    if server.url is not None:
        changes["url"] = one(server.url, f"{path}.url")
    if server.command is not None:
        changes["command"] = one(server.command, f"{path}.command")
    return attrs.evolve(server, **changes), problems


def parse_mcp_settings(
    raw: Mapping[str, Any] | None,
    *,
    environ: Mapping[str, str] | None = None,
    path: str = "$.mcp",
) -> McpSettings:
    """Check the raw ``[mcp]`` table and expand the variables of the enabled servers.

    :param environ: where ``${VAR}`` is read (``os.environ`` by default).
    :raises ConfigError: listing every problem as ``$.mcp.servers.<name>.<key>: ...``.
    """
    environ = os.environ if environ is None else environ
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError([f"{path}: expected a table, got {json_type_name(raw)}"])
    problems: list[str] = []
    own = {k: v for k, v in raw.items() if k != "servers"}
    try:
        settings = structure_settings(own, McpSettings, path)
    except ConfigError as exc:
        problems.extend(exc.problems)
        settings = McpSettings()
    servers_raw = raw.get("servers", {})
    servers: dict[str, ServerConfig] = {}
    if not isinstance(servers_raw, Mapping):
        problems.append(f"{path}.servers: expected a table of servers, "
                        f"got {json_type_name(servers_raw)}")
        servers_raw = {}
    for name, table in servers_raw.items():
        where = f"{path}.servers.{name}"
        if not str(name).strip():
            problems.append(f"{where}: a server name must not be empty")
            continue
        if not isinstance(table, Mapping):
            problems.append(f"{where}: expected a table, got {json_type_name(table)}")
            continue
        if "name" in table:
            problems.append(f"{where}.name: unknown key (the table's name is the server's)")
            continue
        try:
            server = structure_settings({**table, "name": str(name)}, ServerConfig, where)
        except ConfigError as exc:
            problems.extend(exc.problems)
            continue
        if (server.command is None) == (server.url is None):
            problems.append(f"{where}: set exactly one of command (a stdio server) "
                            "or url (a streamable-HTTP server)")
            continue
        stray = [k for k in (("headers",) if server.command else ("args", "env", "cwd"))
                 if table.get(k)]
        if stray:
            kind = "a stdio server (command)" if server.command else "an HTTP server (url)"
            problems.extend(f"{where}.{k}: not used by {kind}" for k in stray)
            continue
        if server.enabled:
            server, missing = _expand_server(server, where, environ)
            problems.extend(missing)
        servers[str(name)] = server
    if problems:
        raise ConfigError(problems)
    return attrs.evolve(settings, servers=servers)
