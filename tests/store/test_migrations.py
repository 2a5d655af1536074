"""The postgres store's schema: made and migrated by lich, once, however many
processes start at the same time."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from lich.postgres.schema import _VERSION_TABLE, MIGRATIONS, SCHEMA_VERSION
from lich.sessions import RECORD_VERSION, JsonlSessionStore, StoreError, encode_record
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


def test_the_cost_migration_sums_what_sessions_recorded_before_as_the_jsonl_store_does(
        pg_store: Callable[..., Any], lich_postgres_dsn: str, tmp_path: Path) -> None:
    """A database at version 1 (no cost columns) with sessions in it: after migrating,
    the postgres listing's costs are the JSONL listing's of the very same records —
    summed in order, unknown once one run's is, a damaged record skipped."""
    def end(**fields: Any) -> dict[str, Any]:
        return {"v": RECORD_VERSION, "ts": 1.0, "kind": "meta", "event": "run_end",
                "run_id": "r", "stopped_reason": "final", **fields}

    start = {"v": RECORD_VERSION, "ts": 1.0, "kind": "meta", "event": "run_start",
             "run_id": "r", "input": "q"}
    damaged = '{"v": 2, "kind": "meta", "event": "run_end", "cost_usd": 9'  # cut off
    sessions: dict[str, list[dict[str, Any] | str]] = {
        "summed": [start, end(cost_usd=0.1), start, end(cost_usd=0.2)],
        "unknown": [start, end(cost_usd=0.1), start, end()],
        "torn": [start, end(cost_usd=0.5), damaged],
        "no_run": [start],
    }

    jsonl = JsonlSessionStore(tmp_path / "sessions")
    jsonl.directory.mkdir()
    with psycopg.connect(lich_postgres_dsn) as conn:
        conn.execute(_VERSION_TABLE)
        for statement in dict(MIGRATIONS)[1]:
            conn.execute(statement)
        conn.execute("INSERT INTO lich_schema_version (version) VALUES (1)")
        for sid, records in sessions.items():
            lines = [r if isinstance(r, str) else encode_record(r)[:-1].decode()
                     for r in records]
            jsonl.path_for(sid).write_text("".join(f"{line}\n" for line in lines))
            conn.execute("INSERT INTO lich_sessions (session_id, epoch, next_seq, created, "
                         "modified) VALUES (%s, 1, %s, 1, 1)", (sid, len(lines) + 1))
            for seq, line in enumerate(lines, 1):
                kind = "meta" if '"meta"' in line else "message"
                conn.execute("INSERT INTO lich_records VALUES (%s, %s, 1, 1, %s, %s)",
                             (sid, seq, kind, line))

    assert pg_store().migrate() == (1, SCHEMA_VERSION)
    expected = {"summed": 0.1 + 0.2, "unknown": None, "torn": 0.5, "no_run": None}
    assert {s.session_id: s.cost_usd for s in jsonl.list()} == expected
    assert {s.session_id: s.cost_usd for s in pg_store().list()} == expected
    # And kept current from there on by appends.
    writer = pg_store().open("summed")
    writer.append("meta", event="run_end", run_id="r3", stopped_reason="final", cost_usd=1.0)
    writer.close()
    listed = {s.session_id: s.cost_usd for s in pg_store().list()}
    assert listed["summed"] == 0.1 + 0.2 + 1.0
