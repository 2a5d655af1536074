"""The ``lich mcp`` command group (click only: cheap to import for ``lich --help``)."""

from __future__ import annotations

import click

from lich.mcp.serve import serve_command

__all__ = ["mcp_group"]


@click.group("mcp")
def mcp_group() -> None:
    """Model Context Protocol: serve lich's tools to MCP clients. See docs/mcp.md."""


mcp_group.add_command(serve_command)
