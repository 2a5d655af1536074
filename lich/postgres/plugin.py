"""The builtin ``postgres`` plugin (entry point ``postgres`` in the group ``lich``).

It answers ``lich_make_session_store`` for ``[session_store] kind = "postgres"``
(and for nothing else), checks that table in ``lich_check_config``, and adds
``lich store migrate``. Importing it is cheap: psycopg is imported when a store
is made, so plain runs with the JSONL store never load it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lich.hooks import hookimpl

if TYPE_CHECKING:
    import click

    from lich.config import LichConfig
    from lich.sessions import SessionStore
    from lich.settings import ConfigTables

__all__ = [
    "lich_check_config",
    "lich_make_session_store",
    "lich_register_commands",
    "lich_register_config_tables",
    "make_store",
]

log = logging.getLogger("lich.postgres")

INSTALL_HINT = "the postgres session store needs psycopg: pip install 'lich-agent[postgres]'"


def _wanted(config: LichConfig) -> bool:
    from lich.postgres.settings import KIND

    return config.table("session_store").get("kind") == KIND


def make_store(config: LichConfig) -> SessionStore:
    """The store ``[session_store]`` describes (no connection is made yet).

    :raises lich.config.ConfigError: a bad table, an unset ``dsn_env``, or psycopg
        is not installed.
    """
    from lich.postgres.settings import parse_store_settings, resolve_dsn
    from lich.settings import ConfigError

    settings = parse_store_settings(config.table("session_store"))
    dsn = resolve_dsn(settings)
    try:
        from lich.postgres.store import PostgresStore, dsn_has_password, dsn_is_valid
    except ImportError as exc:
        raise ConfigError([f"$.session_store.kind: {INSTALL_HINT} ({exc})"]) from None
    if not dsn_is_valid(dsn):
        # Not libpq's message: it may quote a piece of the DSN, password and all.
        where = "dsn" if settings.dsn is not None else f"dsn_env ({settings.dsn_env})"
        raise ConfigError([f"$.session_store.{where.split(' ')[0]}: the {where} is not a "
                           "libpq connection string or postgresql:// URI"])
    if settings.dsn is not None and dsn_has_password(dsn):
        log.warning("[session_store] dsn holds a password, in a config file; prefer "
                    "dsn_env (the name of a variable holding the DSN)")
    return PostgresStore(dsn, settings)



@hookimpl
def lich_register_config_tables(tables: ConfigTables) -> None:
    """Claim ``[session_store]`` when its ``kind`` is ``"postgres"``."""
    from lich.postgres.settings import KIND, PostgresStoreSettings, parse_store_settings

    tables.claim("session_store", PostgresStoreSettings, kind=KIND,
                 parse=lambda raw, path: parse_store_settings(raw),
                 help="transcripts in PostgreSQL (dsn_env names the DSN's variable)")


@hookimpl
def lich_make_session_store(config: LichConfig) -> SessionStore | None:
    """The PostgreSQL store for ``kind = "postgres"``; ``None`` for any other kind."""
    return make_store(config) if _wanted(config) else None


@hookimpl
def lich_check_config(config: LichConfig) -> None:
    """Check ``[session_store]`` when it names this kind (every run and ``lich config
    validate`` report a bad table; the DSN variable is checked when the store is made)."""
    if _wanted(config):
        from lich.postgres.settings import parse_store_settings

        parse_store_settings(config.table("session_store"))


@hookimpl
def lich_register_commands(cli: click.Group) -> None:
    """Add ``lich store migrate``."""
    from lich.postgres.command import store_group

    cli.add_command(store_group)
