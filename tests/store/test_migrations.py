"""The postgres store's schema: made and migrated by lich, once, however many
processes start at the same time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from lich.postgres.schema import MIGRATIONS, SCHEMA_VERSION
from lich.sessions import StoreError
from lich.types import UserMessage


def versions(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute(
            "SELECT version FROM lich_schema_version ORDER BY version").fetchall()]


def test_migrate_makes_the_schema_and_a_second_time_does_nothing(
        pg_store: Callable[..., Any], lich_postgres_dsn: str) -> None:
    assert pg_store().migrate() == (0, SCHEMA_VERSION)
    assert pg_store().migrate() == (SCHEMA_VERSION, SCHEMA_VERSION)
    assert versions(lich_postgres_dsn) == [v for v, _ in MIGRATIONS]


def test_the_first_use_migrates(pg_store: Callable[..., Any], lich_postgres_dsn: str) -> None:
    store = pg_store()
    assert store.list() == []
    assert versions(lich_postgres_dsn) == [v for v, _ in MIGRATIONS]


def test_concurrent_migrations_apply_each_migration_once(
        pg_store: Callable[..., Any], lich_postgres_dsn: str) -> None:
    stores = [pg_store() for _ in range(6)]
    start = threading.Barrier(len(stores))
    results: list[tuple[int, int]] = []
    errors: list[BaseException] = []

    def migrate(store: Any) -> None:
        start.wait()
        try:
            results.append(store.migrate())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=migrate, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert sorted(results) == [(0, SCHEMA_VERSION)] + [(SCHEMA_VERSION, SCHEMA_VERSION)] * 5
    assert versions(lich_postgres_dsn) == [v for v, _ in MIGRATIONS]
    writer = stores[0].open("works")
    writer.message(UserMessage("after the race"))
    writer.close()
    assert stores[-1].exists("works")


def test_a_schema_from_a_newer_lich_is_refused(
        pg_store: Callable[..., Any], lich_postgres_dsn: str) -> None:
    pg_store().migrate()
    with psycopg.connect(lich_postgres_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO lich_schema_version (version) VALUES (%s)",
                     (SCHEMA_VERSION + 1,))
    store = pg_store()
    with pytest.raises(StoreError, match="newer than this lich knows"):
        store.list()
    with pytest.raises(StoreError, match="upgrade lich"):
        store.migrate()
