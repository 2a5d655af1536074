"""Contract test suites: what every implementation of a lich interface must pass.

:class:`SessionStoreContract` is the suite for a
:class:`lich.sessions.SessionStore`. Subclass it in a test module (the
subclass's name starts with ``Test``), give it a ``store`` fixture returning a
fresh, empty store, and say how a record of that store is damaged::

    from lich.testing.contracts import SessionStoreContract

    class TestMyStore(SessionStoreContract):
        @pytest.fixture
        def store(self, tmp_path):
            store = MyStore(...)
            yield store
            store.close()

        def damage_last_record(self, store, session_id):
            ...  # leave the session's last record unreadable, as a crash or a bad edit would

A store whose writers claim conditionally (:class:`lich.sessions.ConditionalWriter`,
what the durable turns of a cluster claim with) is held to that too; for one whose
writers do not, that case is skipped.

lich runs it against the JSONL store and the ``postgres`` store. Importing this
module needs pytest (the test extra); nothing else of :mod:`lich.testing` does.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lich.sessions import (
    RECORD_VERSION,
    ConditionalWriter,
    SessionAmbiguous,
    SessionNotFound,
    SessionStore,
    StaleWriter,
    TranscriptWriter,
    is_valid_session_id,
)
from lich.testing.wait import wait_for
from lich.types import AssistantMessage, ToolCall, ToolMessage, UserMessage

__all__ = ["SessionStoreContract"]


def _write_run(writer: TranscriptWriter, question: str, answer: str, *,
               reason: str = "final", close: bool = True, **end: Any) -> None:
    writer.append("meta", event="run_start", run_id="r", input=question)
    writer.message(UserMessage(question))
    if answer:
        writer.message(AssistantMessage(answer))
    writer.append("meta", event="run_end", run_id="r", stopped_reason=reason, **end)
    if close:
        writer.close()


def _later(store: SessionStore) -> None:
    """Return once a write now gets a later ``modified`` than every session's so far.

    A file's mtime comes from a coarse clock (a few milliseconds), so sessions
    written in quick succession may tie; "newest first" is only testable apart.
    """
    newest = max((s.modified for s in store.list()), default=0.0)
    wait_for(lambda: time.time() > newest + 0.05, what="the clock to pass the newest session")


def _texts(store: SessionStore, sid: str) -> list[str]:
    return [m.content for m in store.read(sid).messages]


class SessionStoreContract:
    """The behaviour every transcript store must have (see the module docstring).

    A subclass provides the ``store`` fixture and :meth:`damage_last_record`.
    """

    @pytest.fixture
    def store(self) -> Iterator[SessionStore]:
        """A fresh, empty store (the subclass's); closed afterwards."""
        raise NotImplementedError("a SessionStoreContract subclass provides a store fixture")

    def damage_last_record(self, store: SessionStore, session_id: str) -> None:
        """Leave the last record of ``session_id`` unreadable, in the store's own way
        (a file's last line cut off; a row whose text is not a record)."""
        raise NotImplementedError

    # ------------------------------------------------------------ basics

    def test_is_a_transcript_store(self, store: SessionStore) -> None:
        assert isinstance(store, SessionStore)
        assert isinstance(store.open(), TranscriptWriter)
        assert isinstance(store.describe(), str)
        assert store.describe()

    def test_prepare_is_idempotent_and_changes_nothing(self, store: SessionStore) -> None:
        store.prepare()
        store.prepare()
        assert store.list() == []

    def test_a_new_store_is_empty(self, store: SessionStore) -> None:
        assert store.list() == []
        assert store.ids() == []
        assert not store.exists("nothing-here")
        with pytest.raises(SessionNotFound):
            store.resolve("latest")
        with pytest.raises(SessionNotFound):
            store.read("nothing-here")

    def test_new_ids_are_valid_and_distinct(self, store: SessionStore) -> None:
        ids = {store.new_id() for _ in range(50)}
        assert len(ids) == 50
        assert all(is_valid_session_id(i) for i in ids)

    def test_an_opened_writer_that_wrote_nothing_makes_no_session(
            self, store: SessionStore) -> None:
        writer = store.open("quiet")
        writer.close()
        assert not store.exists("quiet")
        assert store.list() == []

    def test_invalid_ids_are_refused(self, store: SessionStore) -> None:
        assert not store.exists("")
        for bad in ("../escape", "a/b", ".hidden", "x" * 200):
            assert not store.exists(bad)
            with pytest.raises(ValueError):  # noqa: PT011  # the store's own message
                store.open(bad)

    # ------------------------------------------------------------ append / read

    def test_records_read_back_in_order(self, store: SessionStore) -> None:
        writer = store.open("s1")
        assert writer.session_id == "s1"
        call = ToolCall("c1", "list_dir", {"path": "."})
        writer.append("meta", event="run_start", run_id="r1", input="hi")
        writer.message(UserMessage("hi"))
        writer.message(AssistantMessage("looking", (call,)))
        writer.message(ToolMessage("c1", "list_dir", "a.txt", False))
        writer.append("event", seq=4, event={"type": "tool_call_end", "name": "list_dir"})
        writer.message(AssistantMessage("one file"))
        writer.append("meta", event="run_end", run_id="r1", stopped_reason="final")
        writer.close()

        contents = store.read("s1")
        assert contents.session_id == "s1"
        assert [r["kind"] for r in contents.records] == [
            "meta", "message", "message", "message", "event", "message", "meta"]
        assert all(r["v"] == RECORD_VERSION and isinstance(r["ts"], float)
                   for r in contents.records)
        assert contents.records[4]["event"] == {"type": "tool_call_end", "name": "list_dir"}
        assert [m.role for m in contents.messages] == ["user", "assistant", "tool", "assistant"]
        assert contents.messages[1] == AssistantMessage("looking", (call,))
        assert contents.problems == ()
        assert contents.torn_tail is False
        assert contents.location
        assert store.exists("s1")
        assert store.ids() == ["s1"]
        assert store.history("s1") == list(contents.messages)

    def test_text_that_json_cannot_hold_is_replaced_not_lost(
            self, store: SessionStore) -> None:
        writer = store.open("odd")
        writer.message(UserMessage("nul\x00here, lone \ud800 surrogate, ünïcødé ✓"))
        writer.close()
        assert _texts(store, "odd") == ["nul\ufffdhere, lone \ufffd surrogate, ünïcødé ✓"]

    def test_compact_replaces_the_history(self, store: SessionStore) -> None:
        writer = store.open("c")
        writer.message(UserMessage("one"))
        writer.message(AssistantMessage("two"))
        writer.compact([UserMessage("summary")])
        writer.message(AssistantMessage("three"))
        writer.close()
        assert _texts(store, "c") == ["summary", "three"]

    def test_history_closes_dangling_tool_calls(self, store: SessionStore) -> None:
        writer = store.open("d")
        writer.message(UserMessage("go"))
        writer.message(AssistantMessage("", (ToolCall("c9", "terminal", {"cmd": "x"}),)))
        writer.close()  # the process died while the tool ran
        history = store.history("d")
        assert isinstance(history[-1], ToolMessage)
        assert history[-1].tool_call_id == "c9"
        assert history[-1].is_error

    # ------------------------------------------------------------ list

    def test_list_is_newest_first_with_title_and_how_the_last_run_ended(
            self, store: SessionStore) -> None:
        _write_run(store.open("older"), "first question\nsecond line", "answer")
        _later(store)
        _write_run(store.open("failed"), "this one fails", "", reason="error")
        _later(store)
        open_writer = store.open("newest")
        open_writer.append("meta", event="run_start", run_id="r", input="still going")
        open_writer.message(UserMessage("still going"))
        open_writer.close()

        listed = store.list()
        assert [s.session_id for s in listed] == ["newest", "failed", "older"]
        by_id = {s.session_id: s for s in listed}
        assert by_id["older"].title == "first question"
        assert (by_id["older"].status, by_id["older"].answered) == ("final", True)
        assert by_id["failed"].failed_unanswered
        assert by_id["newest"].status == "open"
        assert all(s.size > 0 and s.modified > 0 and s.location for s in listed)
        assert by_id["older"].modified <= by_id["newest"].modified

    def test_a_new_run_resets_whether_it_was_answered(self, store: SessionStore) -> None:
        writer = store.open("s")
        _write_run(writer, "q1", "a1")
        writer.append("meta", event="run_start", run_id="r2", input="q2")
        writer.append("meta", event="run_end", run_id="r2", stopped_reason="error")
        writer.close()
        (info,) = store.list()
        assert info.failed_unanswered

    def test_list_sums_the_runs_costs_and_an_unknown_cost_makes_it_unknown(
            self, store: SessionStore) -> None:
        priced = store.open("priced")
        for cost in (0.1, 0.2, 0.0):
            _write_run(priced, "q", "a", close=False, cost_usd=cost)
        priced.close()
        unpriced = store.open("unpriced")
        _write_run(unpriced, "q", "a", close=False, cost_usd=0.5)
        _write_run(unpriced, "q", "a", close=False)  # no pricing plugin: no cost_usd
        _write_run(unpriced, "q", "a", close=False, cost_usd=0.25)
        unpriced.close()
        bad = store.open("bad")
        _write_run(bad, "q", "a", close=False, cost_usd=0.5)
        _write_run(bad, "q", "a", close=False, cost_usd=-1)  # not a cost: unknown
        bad.close()
        running = store.open("running")
        running.append("meta", event="run_start", run_id="r", input="q")
        running.message(UserMessage("q"))
        running.close()

        by_id = {s.session_id: s.cost_usd for s in store.list()}
        # The same float sum as the runs', in their order: exact, not approximate.
        assert by_id == {"priced": 0.1 + 0.2 + 0.0, "unpriced": None, "bad": None,
                         "running": None}

    # ------------------------------------------------------------ resolve / resume

    def test_resolve_ids_prefixes_and_latest(self, store: SessionStore) -> None:
        for sid in ("abc-1", "abc-2", "xyz_1"):
            _later(store)
            _write_run(store.open(sid), f"about {sid}", "ok")
        assert store.resolve("xyz_1") == "xyz_1"
        assert store.resolve("xy") == "xyz_1"
        assert store.resolve("abc-2") == "abc-2"
        assert store.resolve("latest") == "xyz_1"
        with pytest.raises(SessionAmbiguous) as ambiguous:
            store.resolve("abc")
        assert set(ambiguous.value.candidates) == {"abc-1", "abc-2"}
        with pytest.raises(SessionNotFound):
            store.resolve("xyz%")  # a prefix is matched literally (no wildcards)
        with pytest.raises(SessionNotFound):
            store.resolve("xyz-")
        with pytest.raises(SessionNotFound):
            store.resolve("")

    def test_a_second_run_resumes_the_session(self, store: SessionStore) -> None:
        _write_run(store.open("conv"), "first", "one")
        second = store.open("conv")  # the next run, as the agent opens it
        _write_run(second, "second", "two")
        assert _texts(store, "conv") == ["first", "one", "second", "two"]
        assert store.ids() == ["conv"]
        assert store.list()[0].title == "first"

    def test_a_writer_goes_on_after_close(self, store: SessionStore) -> None:
        writer = store.open("w")
        writer.message(UserMessage("a"))
        writer.close()
        writer.message(AssistantMessage("b"))
        writer.flush()
        writer.close()
        assert _texts(store, "w") == ["a", "b"]

    def test_a_conditional_claim_holds_only_while_the_session_is_as_read(
            self, store: SessionStore) -> None:
        # Optional: a store whose writers claim conditionally (ConditionalWriter) gives
        # every read an end, and such a claim fails once the session changed since.
        writer = store.open("cond")
        if not isinstance(writer, ConditionalWriter):
            pytest.skip("this store's writers do not claim conditionally")
        writer.claim_after(0)
        _write_run(writer, "first", "one")
        read = store.read("cond")
        assert read.end is not None
        assert read.end > 0
        _write_run(store.open("cond"), "second", "two")
        late = store.open("cond")
        assert isinstance(late, ConditionalWriter)
        late.claim_after(read.end)
        late.message(UserMessage("from an old read"))
        with pytest.raises(StaleWriter):
            late.flush()
        current = store.open("cond")
        assert isinstance(current, ConditionalWriter)
        current.claim_after(store.read("cond").end or 0)
        current.message(UserMessage("three"))
        current.close()
        assert _texts(store, "cond") == ["first", "one", "second", "two", "three"]

    # ------------------------------------------------------------ damage

    def test_a_damaged_record_is_skipped_and_reported_and_writing_goes_on(
            self, store: SessionStore) -> None:
        writer = store.open("torn")
        for text in ("one", "two", "three"):
            writer.message(UserMessage(text))
        writer.close()
        self.damage_last_record(store, "torn")

        damaged = store.read("torn")
        assert [m.content for m in damaged.messages] == ["one", "two"]
        assert damaged.torn_tail or damaged.problems
        assert store.history("torn") == list(damaged.messages)

        later = store.open("torn")
        later.message(UserMessage("four"))
        later.close()
        assert _texts(store, "torn") == ["one", "two", "four"]

    # ------------------------------------------------------------ remove

    def test_remove(self, store: SessionStore) -> None:
        _write_run(store.open("gone"), "bye", "ok")
        _write_run(store.open("kept"), "stay", "ok")
        store.remove("gone")
        assert not store.exists("gone")
        assert store.ids() == ["kept"]
        with pytest.raises(SessionNotFound):
            store.read("gone")
        with pytest.raises(SessionNotFound):
            store.remove("gone")
        with pytest.raises(ValueError):  # noqa: PT011
            store.remove("../kept")

    # ------------------------------------------------------------ concurrency

    def test_concurrent_appends_to_many_sessions_from_threads(
            self, store: SessionStore) -> None:
        sessions, records = 6, 20
        start = threading.Barrier(sessions)
        errors: list[BaseException] = []

        def write(index: int) -> None:
            try:
                writer = store.open(f"t{index}")
                start.wait()
                for n in range(records):
                    writer.message(UserMessage(f"{index}:{n}"))
                writer.close()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(i,)) for i in range(sessions)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert errors == []
        assert store.ids() == sorted(f"t{i}" for i in range(sessions))
        for i in range(sessions):
            assert _texts(store, f"t{i}") == [f"{i}:{n}" for n in range(records)]

    def test_interleaved_writers_on_one_event_loop(self, store: SessionStore) -> None:
        async def run(index: int) -> None:
            writer = store.open(f"a{index}")
            for n in range(10):
                writer.message(UserMessage(f"{index}:{n}"))
                await asyncio.sleep(0)  # let the other runs append in between
            await writer.aclose()

        async def main() -> None:
            await asyncio.gather(*(run(i) for i in range(5)))

        asyncio.run(main())
        for i in range(5):
            assert _texts(store, f"a{i}") == [f"{i}:{n}" for n in range(10)]

    # ------------------------------------------------------------ through the agent

    def test_the_agent_records_and_resumes_through_the_store(
            self, store: SessionStore, tmp_path: Path) -> None:
        from lich.agent import Agent
        from lich.testing import ScriptedChat, make_test_config

        chat = ScriptedChat(["first answer", "second answer"])
        agent = Agent(make_test_config(tmp_path, system_prompt="be brief"), chat=chat,
                      sessions=store)
        first = agent.run_sync("first question")
        second = agent.run_sync("second question", session_id=first.session_id)

        assert store.exists(first.session_id)
        assert first.session_path == store.location(first.session_id)
        seen = [m.content for m in chat.requests[1].messages]
        assert seen == ["be brief", "first question", "first answer", "second question"]
        assert second.session_id == first.session_id
        assert _texts(store, first.session_id) == [
            "be brief", "first question", "first answer", "second question", "second answer"]
        (info,) = store.list()
        assert (info.title, info.status, info.answered) == ("first question", "final", True)
        assert info.cost_usd is None  # no pricing plugin, no price: unknown, not 0

