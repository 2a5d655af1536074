"""The ``lich`` command line (click). Heavy imports happen inside commands."""

from __future__ import annotations

import click

from lich import __version__

__all__ = ["build_cli", "main"]


def build_cli() -> click.Group:
    """The root command group."""

    @click.group(invoke_without_command=True)
    @click.version_option(__version__, prog_name="lich")
    @click.pass_context
    def cli(ctx: click.Context) -> None:
        """lich: a plugin-first AI agent harness."""
        if ctx.invoked_subcommand is None:
            click.echo(ctx.get_help())

    return cli


def main() -> None:
    """Entry point of the ``lich`` script."""
    build_cli()(prog_name="lich")
