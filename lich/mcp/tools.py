"""MCP tools as :class:`lich.Tool` objects in an agent's registry.

Each server's tool becomes ``mcp__<server>__<tool>`` (:mod:`lich.mcp.naming`),
run by lich's executor like any tool — so the before/after hooks, approvals,
``[tools.<name>]`` limits and the audit apply unchanged. Two tools that come out
with the same name are reported (on the plugin's load report and in ``lich mcp
list``) and the later one left out; nothing is dropped silently.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from attrs import frozen

from lich.context import schema_tokens
from lich.guards import DEFAULT_MAX_OUTPUT_CHARS
from lich.mcp.client import McpRuntime, ServerState
from lich.mcp.naming import mcp_tool_name
from lich.mcp.results import is_idempotent, requires_approval
from lich.tools import Tool, ToolContext, ToolRegistry
from lich.types import ToolResult

__all__ = ["Collision", "McpToolset", "ToolEntry", "build_entries", "server_tokens"]

log = logging.getLogger("lich.mcp")


@frozen
class Collision:
    """Two server tools that came out with one lich name: the second was left out."""

    name: str
    server: str  # the server whose tool was left out
    message: str


@frozen
class ToolEntry:
    """One server tool and the lich tool made of it."""

    server: str
    remote: str
    tool: Tool


class _Call:
    """The ``execute`` of one MCP tool: hands the call to the runtime's loop."""

    def __init__(self, runtime: McpRuntime, server: str, remote: str) -> None:
        self.runtime = runtime
        self.server = server
        self.remote = remote

    async def __call__(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await self.runtime.call(self.server, self.remote, args)


def _parameters(schema: Any) -> Mapping[str, Any]:
    if isinstance(schema, Mapping) and schema.get("type") == "object":
        return dict(schema)
    # A schema a provider would refuse (not an object) is wrapped rather than sent as is.
    return {"type": "object", "properties": {}}


def build_entries(runtime: McpRuntime, states: list[ServerState]
                  ) -> tuple[list[ToolEntry], list[Collision]]:
    """The lich tools of every connected server, and the collisions found; the first
    of two tools with one name is kept."""
    entries: list[ToolEntry] = []
    problems: list[Collision] = []
    taken: dict[str, tuple[str, str]] = {}
    for state in states:
        config = runtime.connections[state.name].config
        for remote in state.tools:
            name = mcp_tool_name(state.name, remote.name)
            if name in taken:
                server, other = taken[name]
                problems.append(Collision(name, state.name, (
                    f"tool name collision: {name} is both server {server!r}'s tool {other!r} "
                    f"and server {state.name!r}'s tool {remote.name!r}; the second is left out "
                    "(rename one of the servers)")))
                continue
            taken[name] = (state.name, remote.name)
            description = (remote.description or remote.title or remote.name).strip()
            entries.append(ToolEntry(state.name, remote.name, Tool(
                name=name,
                description=description,
                parameters=_parameters(remote.input_schema),
                execute=_Call(runtime, state.name, remote.name),
                timeout_s=config.timeout_s,
                max_output_chars=config.max_output_chars or DEFAULT_MAX_OUTPUT_CHARS,
                # Annotations come from the server: they may ask for approval, never
                # waive it (readOnlyHint is not trusted to mean read_only).
                requires_approval=requires_approval(remote),
                idempotent=is_idempotent(remote),
            )))
    return entries, problems


def server_tokens(entries: list[ToolEntry]) -> dict[str, int]:
    """The estimated schema tokens of each server's tools."""
    by_server: dict[str, list[Tool]] = {}
    for entry in entries:
        by_server.setdefault(entry.server, []).append(entry.tool)
    return {s: schema_tokens([t.definition() for t in tools]) for s, tools in by_server.items()}


class McpToolset:
    """The MCP tools of one agent's registry, kept in step with the servers."""

    def __init__(self, runtime: McpRuntime, registry: ToolRegistry, plugin: str) -> None:
        self.runtime = runtime
        self.registry = registry
        self.plugin = plugin
        self.entries: list[ToolEntry] = []
        self.collisions: list[Collision] = []

    def register(self) -> None:
        """Register every connected server's tools (during ``lich_register_tools``)."""
        self.entries, self.collisions = build_entries(self.runtime, self.runtime.states())
        for collision in self.collisions:
            self.registry.warn(f"mcp: {collision.message}")
        for entry in self.entries:
            self.registry.register(entry.tool)

    def refresh(self) -> None:
        """Apply a tool-list change a server announced: called by the registry before
        it gives the model its tool definitions, on the agent's own thread."""
        changed = self.runtime.take_changes()
        if not changed:
            return
        self.entries, collisions = build_entries(self.runtime, self.runtime.states())
        for collision in collisions:
            if collision not in self.collisions:
                log.warning("mcp: %s", collision.message)
        self.collisions = collisions
        self.registry.replace_plugin(self.plugin, [e.tool for e in self.entries])
        log.info("mcp: tools of %s changed; %d MCP tools now", ", ".join(sorted(changed)),
                 len(self.entries))
