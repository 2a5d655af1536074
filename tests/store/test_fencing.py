"""Fencing in the postgres store: a writer that lost its session writes nothing.

Each ``pg_store()`` is a store of its own (its own pool and threads), as another
process's would be; the assertions read the tables themselves.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from lich.sessions import StaleWriter
from lich.types import UserMessage


def rows(dsn: str, session_id: str) -> list[tuple[int, int, str]]:
    """``(seq, epoch, first user text)`` of every record of the session, in seq order."""
    import json

    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT seq, epoch, record FROM lich_records "
                             "WHERE session_id = %s ORDER BY seq", (session_id,)).fetchall()
    return [(seq, epoch, json.loads(text)["message"]["content"]) for seq, epoch, text in found]


def test_a_stale_epoch_writes_nothing(pg_store: Callable[..., Any], lich_postgres_dsn: str) -> None:
    old_owner = pg_store().open("conv")
    old_owner.message(UserMessage("before"))
    old_owner.flush()
    assert old_owner.epoch == 1

    new_owner = pg_store().open("conv")
    assert new_owner.claim() == 2
    old_owner.message(UserMessage("after losing it"))
    with pytest.raises(StaleWriter) as stale:
        old_owner.flush()
    assert (stale.value.epoch, stale.value.current_epoch) == (1, 2)
    assert "claimed by another writer" in str(stale.value)
    # It stops: nothing more is even queued.
    with pytest.raises(StaleWriter):
        old_owner.message(UserMessage("still trying"))
    with pytest.raises(StaleWriter):
        old_owner.close()

    new_owner.message(UserMessage("the new owner"))
    new_owner.close()
    assert rows(lich_postgres_dsn, "conv") == [(1, 1, "before"), (2, 2, "the new owner")]


def test_concurrent_claims_leave_exactly_one_writer(
        pg_store: Callable[..., Any], lich_postgres_dsn: str) -> None:
    stores = [pg_store() for _ in range(3)]
    writers = [stores[i % 3].open("contested") for i in range(8)]
    start = threading.Barrier(len(writers))
    epochs: dict[int, int] = {}

    def claim(index: int) -> None:
        start.wait()
        epochs[index] = writers[index].claim()

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(len(writers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)

    # Every claim bumped the epoch once: all distinct, 1 to 8.
    assert sorted(epochs.values()) == list(range(1, 9))
    outcomes: dict[int, str] = {}
    for index, writer in enumerate(writers):
        writer.message(UserMessage(f"from {index}"))
        try:
            writer.flush()
            outcomes[index] = "written"
        except StaleWriter:
            outcomes[index] = "stale"
    winner = max(epochs, key=epochs.__getitem__)
    assert outcomes == {i: "written" if i == winner else "stale" for i in range(8)}
    assert rows(lich_postgres_dsn, "contested") == [(1, 8, f"from {winner}")]


def test_a_wrong_seq_writes_nothing(pg_store: Callable[..., Any], lich_postgres_dsn: str) -> None:
    writer = pg_store().open("seq")
    writer.message(UserMessage("one"))
    writer.flush()
    # Another writer of the same epoch (a clone of this one) wrote record 2 meanwhile.
    with psycopg.connect(lich_postgres_dsn, autocommit=True) as conn:
        conn.execute("UPDATE lich_sessions SET next_seq = 3 WHERE session_id = 'seq'")
        conn.execute("INSERT INTO lich_records VALUES ('seq', 2, 1, 0, 'message', "
                     "'{\"v\":1,\"ts\":0,\"kind\":\"message\",\"message\":"
                     "{\"role\":\"user\",\"content\":\"the clone\"}}')")
    writer.message(UserMessage("two"))
    with pytest.raises(StaleWriter, match="record 2 was already written") as stale:
        writer.flush()
    assert stale.value.seq == 2
    assert rows(lich_postgres_dsn, "seq") == [(1, 1, "one"), (2, 1, "the clone")]


def test_a_removed_session_stops_its_writer(pg_store: Callable[..., Any]) -> None:
    store = pg_store()
    writer = store.open("short-lived")
    writer.message(UserMessage("hello"))
    writer.flush()
    store.remove("short-lived")
    writer.message(UserMessage("anyone?"))
    with pytest.raises(StaleWriter, match="was removed"):
        writer.flush()
    assert not store.exists("short-lived")


def test_the_agent_stops_a_run_whose_session_was_claimed(
        pg_store: Callable[..., Any], lich_postgres_dsn: str, tmp_path: Any) -> None:
    from lich.agent import Agent
    from lich.testing import HookRecorder, Reply, ScriptedChat, make_test_config, wait_for
    from lich.types import ToolCall

    store, other = pg_store(), pg_store()
    claimed = threading.Event()

    def responder(request: Any) -> Reply:
        if not claimed.is_set():
            # Another worker takes the conversation while this run waits on the model
            # (once the run's own writer has claimed it and written its first records).
            wait_for(lambda: store.exists(session_id), what="the run's first records")
            other.open(session_id).claim()
            claimed.set()
        # The model would go on calling tools for ever; the run must stop by itself.
        return Reply("again", (ToolCall(f"c{len(chat.requests)}", "missing_tool", {}),))

    session_id = "taken-over"
    chat = ScriptedChat(responder=responder)
    recorder = HookRecorder()
    agent = Agent(make_test_config(tmp_path, max_turns=50), chat=chat, sessions=store,
                  plugins=[("recorder", recorder)])

    with pytest.raises(StaleWriter) as stale:
        agent.run_sync("start", session_id=session_id)

    assert (stale.value.epoch, stale.value.current_epoch) == (1, 2)
    assert len(chat.requests) < 50
    ends = [kw["outcome"] for name, kw in recorder.calls if name == "lich_run_end"]
    assert [e.stopped_reason for e in ends] == ["aborted"]
    with psycopg.connect(lich_postgres_dsn) as conn:
        epochs = conn.execute("SELECT DISTINCT epoch FROM lich_records WHERE session_id = %s",
                              (session_id,)).fetchall()
        (next_seq,) = conn.execute("SELECT next_seq FROM lich_sessions WHERE session_id = %s",
                                   (session_id,)).fetchone() or (None,)
        (count,) = conn.execute("SELECT count(*) FROM lich_records WHERE session_id = %s",
                                (session_id,)).fetchone() or (None,)
    # Only what the run wrote before the claim, all under its own epoch, seqs contiguous.
    assert epochs == [(1,)]
    assert next_seq == count + 1


def test_a_claim_after_a_read_fails_when_the_session_changed_since(
        pg_store: Callable[..., Any], lich_postgres_dsn: str, tmp_path: Path) -> None:
    from lich.sessions import ConditionalWriter

    store = pg_store()
    # An empty (not yet created) session: claimed on "no record yet".
    first = store.open("conv")
    assert isinstance(first, ConditionalWriter)
    first.claim_after(0)
    first.message(UserMessage("one"))
    first.close()
    read = store.read("conv")
    assert read.end == 1

    # Another writer adds a record after the read: a claim on the read fails, and its
    # epoch is not taken (the other writer goes on).
    other = pg_store().open("conv")
    other.message(UserMessage("two"))
    other.flush()
    late = store.open("conv")
    late.claim_after(read.end)
    late.message(UserMessage("from an old read"))
    with pytest.raises(StaleWriter, match="changed since it was read"):
        late.flush()
    other.message(UserMessage("three"))
    other.close()
    # A claim on a read that is still current succeeds, on a session that has records,
    # and on one that does not exist yet (end 0) only while it does not.
    current = store.open("conv")
    current.claim_after(store.read("conv").end)
    current.message(UserMessage("four"))
    current.close()
    # The failed claim took no epoch: "four" is written under 3.
    assert rows(lich_postgres_dsn, "conv") == [
        (1, 1, "one"), (2, 2, "two"), (3, 2, "three"), (4, 3, "four")]
    stale_empty = store.open("conv")
    stale_empty.claim_after(0)
    with pytest.raises(StaleWriter):
        stale_empty.claim()
    assert store.read("conv").end == 4
    # The JSONL store's contents have no end, and its writers no conditional claim.
    from lich.sessions import JsonlSessionStore

    files = JsonlSessionStore(tmp_path)
    writer = files.open("conv")
    assert not isinstance(writer, ConditionalWriter)
    writer.message(UserMessage("one"))
    writer.close()
    assert files.read("conv").end is None
