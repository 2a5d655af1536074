"""Fixtures for the session store tests: a PostgresStore on a fresh database per test
(the cluster and the databases are lich.testing's ``lich_postgres`` fixtures)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture
def pg_store(lich_postgres_dsn: str) -> Iterator[Callable[..., Any]]:
    """Factory: ``pg_store(**settings)`` → a PostgresStore on this test's database (each
    call a separate store, as another process would have); all closed afterwards."""
    from lich.postgres.settings import PostgresStoreSettings
    from lich.postgres.store import PostgresStore

    made: list[PostgresStore] = []

    def make(dsn: str = lich_postgres_dsn, **settings: Any) -> PostgresStore:
        store = PostgresStore(dsn, PostgresStoreSettings(dsn=dsn, **settings))
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()
