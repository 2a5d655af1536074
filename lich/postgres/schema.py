"""The session store's schema, created and migrated by lich itself.

``lich_schema_version`` holds one row per migration applied. :func:`migrate`
runs the ones a database lacks, in order, each in the same transaction as
its version row, all under a transaction-scoped advisory lock: any number of
processes may start (or run ``lich store migrate``) at once, one migrates
and the others then find nothing to do. A database migrated by a newer lich
(a version this one does not know) is refused rather than written to.

A migration is only ever added at the end of :data:`MIGRATIONS`; one that
shipped is never edited.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lich.sessions import StoreError

if TYPE_CHECKING:
    import psycopg

__all__ = ["LOCK_KEY", "MIGRATIONS", "SCHEMA_VERSION", "migrate", "schema_version"]

#: The advisory lock key migrations hold (the bytes of "lichstor" as a signed bigint).
LOCK_KEY = int.from_bytes(b"lichstor", "big", signed=True)

#: ``(version, statements)``, oldest first.
MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (1, (
        # One row per session: who owns it (epoch), the seq its next record must have,
        # and what `lich sessions list` shows, kept up to date by every append so that
        # listing reads one row per session and no record.
        """
        CREATE TABLE lich_sessions (
            session_id text PRIMARY KEY,
            epoch      bigint NOT NULL,
            next_seq   bigint NOT NULL,
            created    double precision NOT NULL,
            modified   double precision NOT NULL,
            size       bigint NOT NULL DEFAULT 0,
            title      text,
            status     text NOT NULL DEFAULT '',
            answered   boolean NOT NULL DEFAULT false
        )
        """,
        "CREATE INDEX lich_sessions_modified ON lich_sessions (modified DESC, session_id DESC)",
        # One row per record, as the JSONL store writes one line: `record` is that line's
        # JSON text (kept as written; cast to jsonb to query it), `epoch` the writer's.
        """
        CREATE TABLE lich_records (
            session_id text NOT NULL REFERENCES lich_sessions ON DELETE CASCADE,
            seq        bigint NOT NULL,
            epoch      bigint NOT NULL,
            ts         double precision NOT NULL,
            kind       text NOT NULL,
            record     text NOT NULL,
            PRIMARY KEY (session_id, seq)
        )
        """,
    )),
    (2, (
        # What `lich sessions list` shows as the cost, kept by every run_end append as
        # the JSONL listing sums it (lich.sessions.session_cost): the sum of the runs'
        # cost_usd, unknown (NULL) before the first run_end and for good once one run's
        # cost was unknown.
        """
        ALTER TABLE lich_sessions
            ADD COLUMN cost_usd     double precision,
            ADD COLUMN cost_unknown boolean NOT NULL DEFAULT false
        """,
        # The sessions recorded before: summed from their run_end records, in seq order
        # (the same float sum as the JSONL store's). A record that is not valid JSON, or
        # whose cost no double holds, is skipped, as the JSONL listing skips a torn line.
        """
        DO $$
        DECLARE
            r    record;
            doc  jsonb;
            cost double precision;
        BEGIN
            FOR r IN SELECT session_id, record FROM lich_records
                      WHERE kind = 'meta' AND record LIKE '%run_end%'
                      ORDER BY session_id, seq
            LOOP
                BEGIN
                    doc := r.record::jsonb;
                    IF jsonb_typeof(doc) <> 'object' OR doc->>'event' IS DISTINCT FROM 'run_end'
                    THEN
                        CONTINUE;
                    END IF;
                    cost := CASE WHEN jsonb_typeof(doc->'cost_usd') = 'number'
                                 THEN (doc->>'cost_usd')::double precision END;
                EXCEPTION WHEN others THEN
                    CONTINUE;
                END;
                IF cost IS NULL OR cost < 0 THEN
                    UPDATE lich_sessions SET cost_unknown = true
                     WHERE session_id = r.session_id;
                ELSE
                    UPDATE lich_sessions SET cost_usd = coalesce(cost_usd, 0) + cost
                     WHERE session_id = r.session_id;
                END IF;
            END LOOP;
        END
        $$
        """,
    )),
)

SCHEMA_VERSION = MIGRATIONS[-1][0]

_VERSION_TABLE = """
    CREATE TABLE IF NOT EXISTS lich_schema_version (
        version    integer PRIMARY KEY,
        applied_at timestamptz NOT NULL DEFAULT now()
    )
"""


def schema_version(conn: psycopg.Connection[object]) -> int:
    """The version the database is at (0: never migrated)."""
    row = conn.execute(
        "SELECT CASE WHEN to_regclass('lich_schema_version') IS NULL THEN 0 "
        "ELSE (SELECT coalesce(max(version), 0) FROM lich_schema_version) END").fetchone()
    return int(row[0]) if row else 0  # type: ignore[index]


def migrate(conn: psycopg.Connection[object]) -> tuple[int, int]:
    """Bring the database to :data:`SCHEMA_VERSION`; ``(version before, version after)``.

    :raises StoreError: the database is at a version this lich does not know.
    """
    with conn.transaction():
        # First, before anything is read: concurrent migrators queue here, and the
        # lock goes with the transaction (a crashed migrator holds nothing).
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
        conn.execute(_VERSION_TABLE)
        before = schema_version(conn)
        if before > SCHEMA_VERSION:
            raise StoreError(
                f"the database's session store schema is version {before}, newer than this "
                f"lich knows ({SCHEMA_VERSION}): upgrade lich")
        for version, statements in MIGRATIONS:
            if version <= before:
                continue
            for statement in statements:
                conn.execute(statement)
            conn.execute("INSERT INTO lich_schema_version (version) VALUES (%s)", (version,))
    return before, SCHEMA_VERSION
