"""PostgreSQL going away under the postgres store: a restart is ridden out (the next
append reconnects and goes on, nothing lost or doubled), a server that stays away
past ``reconnect_s`` is one clear error and the writer stops."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from lich.postgres.store import StoreUnavailable
from lich.testing.postgres import PostgresCluster
from lich.types import UserMessage


@pytest.fixture
def cluster(lich_postgres: PostgresCluster) -> Iterator[PostgresCluster]:
    """The session's cluster, running again after the test whatever it did."""
    yield lich_postgres
    if lich_postgres.pid is None:
        lich_postgres.start_server()


def seqs_and_epochs(dsn: str, session_id: str) -> list[tuple[int, int]]:
    with psycopg.connect(dsn) as conn:
        return [tuple(r) for r in conn.execute(  # type: ignore[misc]
            "SELECT seq, epoch FROM lich_records WHERE session_id = %s ORDER BY seq",
            (session_id,)).fetchall()]


def test_a_restart_mid_session_is_ridden_out(
        pg_store: Callable[..., Any], lich_postgres_dsn: str, cluster: PostgresCluster) -> None:
    store = pg_store(reconnect_s=60)
    writer = store.open("through")
    writer.message(UserMessage("before"))
    writer.flush()

    cluster.restart()  # every pooled connection is now broken

    writer.message(UserMessage("after"))
    writer.message(UserMessage("and more"))
    writer.close()
    assert [m.content for m in store.read("through").messages] == ["before", "after", "and more"]
    assert seqs_and_epochs(lich_postgres_dsn, "through") == [(1, 1), (2, 1), (3, 1)]
    assert store.list()[0].title == "before"


def test_a_run_in_progress_survives_a_restart(
        pg_store: Callable[..., Any], lich_postgres_dsn: str, cluster: PostgresCluster,
        tmp_path: Path) -> None:
    from lich.agent import Agent
    from lich.testing import Reply, ScriptedChat, make_test_config
    from lich.types import ToolCall

    restarted: list[bool] = []

    def responder(request: Any) -> Reply:
        if not restarted:
            cluster.restart()  # while the run waits on its first model call
            restarted.append(True)
            return Reply("let me look", (ToolCall("c1", "missing_tool", {}),))
        return Reply("done")

    store = pg_store(reconnect_s=60)
    agent = Agent(make_test_config(tmp_path), chat=ScriptedChat(responder=responder),
                  sessions=store)
    result = agent.run_sync("go", session_id="run-through")

    assert result.text == "done"
    assert result.session_path == store.location("run-through")
    contents = store.read("run-through")
    assert [m.role for m in contents.messages] == ["system", "user", "assistant", "tool",
                                                   "assistant"]
    assert [r["kind"] for r in contents.records][-1] == "meta"
    rows = seqs_and_epochs(lich_postgres_dsn, "run-through")
    assert [seq for seq, _ in rows] == list(range(1, len(rows) + 1))
    assert {epoch for _, epoch in rows} == {1}
    assert store.list()[0].status == "final"


def test_a_server_that_stays_away_fails_the_writer_clearly(
        pg_store: Callable[..., Any], lich_postgres_dsn: str, cluster: PostgresCluster) -> None:
    store = pg_store(reconnect_s=0.5, connect_timeout_s=1)
    writer = store.open("cut-off")
    writer.message(UserMessage("kept"))
    writer.flush()

    cluster.kill_server()
    writer.message(UserMessage("lost with the server"))
    with pytest.raises(StoreUnavailable, match="is unreachable") as failure:
        writer.flush()
    assert cluster.password not in str(failure.value)
    assert f"postgres lich@127.0.0.1:{cluster.port}/" in str(failure.value)
    with pytest.raises(StoreUnavailable):  # it stopped: nothing more is queued
        writer.message(UserMessage("later"))
    with pytest.raises(StoreUnavailable):
        store.list()

    cluster.start_server()
    assert [m.content for m in store.read("cut-off").messages] == ["kept"]
    fresh = store.open("cut-off")  # the next run's writer starts afresh
    fresh.message(UserMessage("next run"))
    fresh.close()
    assert [m.content for m in store.read("cut-off").messages] == ["kept", "next run"]
    assert seqs_and_epochs(lich_postgres_dsn, "cut-off") == [(1, 1), (2, 2)]
