"""``lich store migrate`` (click; the store is imported when the command runs)."""

from __future__ import annotations

import click

from lich.cli.options import get_settings, setup_options

__all__ = ["store_group"]


@click.group("store")
def store_group() -> None:
    """The session store ([session_store] in the config)."""


@store_group.command("migrate")
@setup_options
@click.pass_context
def migrate_command(ctx: click.Context) -> None:
    """Create or migrate the session store's schema (every start does it too; safe
    to run while lich runs elsewhere). Exit 0 when the schema is current."""
    from lich.cli.common import (
        EXIT_OK,
        EXIT_STOPPED,
        EXIT_USAGE,
        echo_error,
        host_for,
        load_settings_config,
        quiet_plugin_log,
    )
    from lich.config import ConfigError
    from lich.sessions import StoreError, open_session_store

    settings = get_settings(ctx)
    try:
        config = load_settings_config(settings).config
        host = host_for(settings, config)
        with quiet_plugin_log():
            store = open_session_store(config, host)
    except ConfigError as exc:
        echo_error(str(exc))
        ctx.exit(EXIT_USAGE)
    migrate = getattr(store, "migrate", None)
    if migrate is None:
        click.echo(f"the session store ({store.describe()}) has no schema to migrate")
        ctx.exit(EXIT_OK)
    try:
        before, after = migrate()
    except StoreError as exc:
        echo_error(str(exc))
        ctx.exit(EXIT_STOPPED)
    finally:
        store.close()
    if before == after:
        click.echo(f"{store.describe()}: schema version {after}, up to date")
    else:
        click.echo(f"{store.describe()}: schema migrated from version {before} to {after}")
    ctx.exit(EXIT_OK)
