"""The ``[session_store]`` table of the ``postgres`` kind.

.. code-block:: toml

    [session_store]
    kind = "postgres"
    dsn_env = "LICH_POSTGRES_DSN"   # the variable holding the DSN (it may hold a password)
    # dsn = "postgresql://lich@db.internal/lich"   # or the DSN itself, without a password
    pool_size = 4                   # writer threads per process (connections: 2 more)
    connect_timeout_s = 5
    reconnect_s = 10                # how long an append waits for the database to come back
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from attrs import frozen

from lich.settings import ConfigError, between, greater_than, non_empty, setting, structure_settings

__all__ = ["KIND", "PostgresStoreSettings", "parse_store_settings", "resolve_dsn"]

KIND = "postgres"
_PATH = "$.session_store"


@frozen(kw_only=True)
class PostgresStoreSettings:
    """The checked ``[session_store]`` table (``kind = "postgres"``)."""

    kind: str = KIND
    dsn: str | None = setting(None, check=non_empty)
    dsn_env: str | None = setting(None, check=non_empty)
    pool_size: int = setting(4, check=between(1, 100))
    connect_timeout_s: float = setting(5.0, check=greater_than(0))
    reconnect_s: float = setting(10.0, check=between(0, 3600))


def parse_store_settings(table: Mapping[str, Any]) -> PostgresStoreSettings:
    """Check ``table``; every problem at once.

    :raises ConfigError: a bad value, an unknown key, or not exactly one of ``dsn``
        and ``dsn_env``.
    """
    raw = dict(table)
    problems = []
    if ("dsn" in raw) == ("dsn_env" in raw):
        problems.append(f"{_PATH}: give exactly one of dsn_env (the name of the environment "
                        "variable holding the DSN; preferred, as a DSN may hold a password) "
                        "and dsn")
    try:
        settings = structure_settings(raw, PostgresStoreSettings, _PATH)
    except ConfigError as exc:
        raise ConfigError([*exc.problems, *problems]) from None
    if problems:
        raise ConfigError(problems)
    return settings


def resolve_dsn(settings: PostgresStoreSettings, env: Mapping[str, str] | None = None) -> str:
    """The DSN: ``dsn``, or the value of the variable ``dsn_env`` names.

    :raises ConfigError: that variable is not set (the message names the variable,
        never a value).
    """
    if settings.dsn is not None:
        return settings.dsn
    assert settings.dsn_env is not None
    value = (os.environ if env is None else env).get(settings.dsn_env, "").strip()
    if not value:
        raise ConfigError([f"{_PATH}.dsn_env: the environment variable {settings.dsn_env} "
                           "is not set (it must hold the PostgreSQL DSN)"])
    return value
