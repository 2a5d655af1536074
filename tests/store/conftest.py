"""Fixtures for the session store tests: a throw-away PostgreSQL cluster for the whole
session (the machine's initdb / pg_ctl, see lich.testing.postgres), a fresh database
per test, and a store on it."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pytest

from lich.testing.postgres import PostgresCluster, PostgresUnavailable, find_binaries

_names = itertools.count(1)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PostgresCluster]:
    """One cluster for the session; skipped (with the reason) without PostgreSQL."""
    try:
        binaries = find_binaries()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    cluster = PostgresCluster.start(binaries=binaries)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_dsn(pg_cluster: PostgresCluster) -> str:
    """The DSN of a new, empty database (with the cluster's password in it)."""
    return pg_cluster.create_database(f"t{next(_names)}")


@pytest.fixture
def pg_store(pg_dsn: str) -> Iterator[Callable[..., object]]:
    """Factory: ``pg_store(**settings)`` → a PostgresStore on this test's database; every
    store made is closed afterwards."""
    from lich.postgres.settings import PostgresStoreSettings
    from lich.postgres.store import PostgresStore

    made: list[PostgresStore] = []

    def make(dsn: str = pg_dsn, **settings: object) -> PostgresStore:
        store = PostgresStore(dsn, PostgresStoreSettings(dsn=dsn, **settings))  # type: ignore[arg-type]
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()
