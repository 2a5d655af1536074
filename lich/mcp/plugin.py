"""The builtin ``mcp`` plugin (entry point ``mcp``): adds the ``lich mcp`` commands."""

from __future__ import annotations

import click

from lich.hooks import hookimpl

__all__ = ["lich_register_commands"]


@hookimpl
def lich_register_commands(cli: click.Group) -> None:
    """Add ``lich mcp``."""
    from lich.mcp.command import mcp_group

    cli.add_command(mcp_group)
