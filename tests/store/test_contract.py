"""The session store contract (lich.testing.contracts) against both stores: the
JSONL default and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lich.sessions import JsonlSessionStore, SessionStore
from lich.testing.contracts import SessionStoreContract


class TestJsonlStore(SessionStoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> Iterator[SessionStore]:
        store = JsonlSessionStore(tmp_path / "sessions")
        yield store
        store.close()

    def damage_last_record(self, store: SessionStore, session_id: str) -> None:
        # A process killed mid-write: the last line cut off, without its newline.
        assert isinstance(store, JsonlSessionStore)
        path = store.path_for(session_id)
        data = path.read_bytes()
        last = data.rstrip(b"\n").rfind(b"\n") + 1
        path.write_bytes(data[: last + (len(data) - last) // 2])


class TestPostgresStore(SessionStoreContract):
    @pytest.fixture
    def store(self, pg_store: Callable[..., Any]) -> SessionStore:
        store: SessionStore = pg_store()
        return store  # pg_store closes it

    def damage_last_record(self, store: SessionStore, session_id: str) -> None:
        # A row whose text is not a record (a bad manual edit, a bug of another writer).
        import psycopg

        from lich.postgres.store import PostgresStore

        assert isinstance(store, PostgresStore)
        with psycopg.connect(store._dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE lich_records SET record = left(record, length(record) / 2) "
                "WHERE session_id = %s AND seq = (SELECT max(seq) FROM lich_records "
                "WHERE session_id = %s)", (session_id, session_id))
