"""Session files: append-only JSONL, tolerant reading, listing, resuming."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from lich.sessions import (
    RECORD_VERSION,
    JsonlSessionStore,
    SessionNotFound,
    repair_dangling_tool_calls,
    sanitize,
)
from lich.types import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

from .conftest import assert_valid_transcript

CONVERSATION: list[Message] = [
    SystemMessage("sys"),
    UserMessage("list the files\nplease"),
    AssistantMessage("", (ToolCall("c1", "list_dir", {"path": "."}),)),
    ToolMessage("c1", "list_dir", "- a.txt (3 bytes)"),
    AssistantMessage("There is a.txt."),
]


def write(store: JsonlSessionStore, sid: str, messages: list[Message]) -> Path:
    writer = store.open(sid)
    writer.append("meta", event="run_start", input="x")
    for m in messages:
        writer.message(m)
    writer.close()
    return writer.path


def test_records_are_versioned_lines_flushed_as_written(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path / "sessions")
    writer = store.open("s1")
    writer.message(UserMessage("hi"))
    # Flushed per record: readable before the writer is closed.
    lines = writer.path.read_text("utf-8").splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["v"] == RECORD_VERSION
    assert record["kind"] == "message"
    assert record["message"] == {"role": "user", "content": "hi"}
    assert isinstance(record["ts"], float)
    writer.message(AssistantMessage("yo"))
    assert len(writer.path.read_text("utf-8").splitlines()) == 2
    writer.close()


def test_round_trip_of_a_conversation(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    write(store, "s1", CONVERSATION)
    contents = store.read("s1")
    assert list(contents.messages) == CONVERSATION
    assert contents.problems == ()
    assert not contents.torn_tail
    assert contents.records[0]["event"] == "run_start"


def test_a_torn_last_line_is_tolerated(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    path = write(store, "s1", CONVERSATION)
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"v":1,"ts":1.0,"kind":"message","message":{"role":"us')
    contents = store.read("s1")
    assert contents.torn_tail
    assert contents.problems == ()
    assert list(contents.messages) == CONVERSATION


def test_appending_after_a_torn_line_starts_a_fresh_line(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    path = write(store, "s1", CONVERSATION[:2])
    with open(path, "ab") as f:
        f.write(b'{"v":1,"kind":"mess')
    writer = store.open("s1")
    writer.message(AssistantMessage("after the crash"))
    writer.close()
    contents = store.read("s1")
    # The torn record is now a (reported) corrupt line; the new record is intact.
    assert list(contents.messages) == [*CONVERSATION[:2], AssistantMessage("after the crash")]
    assert len(contents.problems) == 1
    assert contents.problems[0].startswith("line 4: corrupt record skipped")


def test_a_corrupt_middle_line_is_reported_and_reading_goes_on(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    path = write(store, "s1", CONVERSATION)
    lines = path.read_text("utf-8").splitlines()
    lines.insert(3, "this is not json")
    lines.insert(5, json.dumps({"v": 1, "kind": "message", "message": {"role": "robot"}}))
    lines.insert(6, json.dumps({"v": 99, "kind": "message", "message": {}}))
    path.write_text("\n".join(lines) + "\n", "utf-8")

    contents = store.read("s1")
    assert list(contents.messages) == CONVERSATION  # nothing after the bad lines is lost
    assert not contents.torn_tail
    assert len(contents.problems) == 3
    assert contents.problems[0].startswith("line 4: corrupt record skipped")
    assert "unknown message role: 'robot'" in contents.problems[1]
    assert "unsupported record version 99" in contents.problems[2]


def test_nul_bytes_and_lone_surrogates_are_sanitised(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    writer = store.open("s1")
    writer.message(UserMessage("nul\x00here"))
    writer.message(ToolMessage("c1", "read_file", "bad \udcff byte"))
    writer.append("meta", event="run_start", input="key\x00")
    writer.close()
    raw = writer.path.read_bytes()
    assert b"\x00" not in raw
    assert b"\\u0000" not in raw
    raw.decode("utf-8")  # valid UTF-8 throughout
    contents = store.read("s1")
    assert contents.problems == ()
    assert [m.content for m in contents.messages] == ["nul\ufffdhere", "bad \ufffd byte"]
    assert sanitize({"k\x00": ["a\x00", 1]}) == {"k\ufffd": ["a\ufffd", 1]}


def test_compact_records_replace_the_history(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    writer = store.open("s1")
    for m in CONVERSATION:
        writer.message(m)
    summary = [SystemMessage("sys"), UserMessage("[context summary]"), CONVERSATION[-1]]
    writer.compact(summary)
    writer.message(UserMessage("next"))
    writer.close()
    assert list(store.read("s1").messages) == [*summary, UserMessage("next")]


def test_list_is_newest_first_with_the_first_user_line_as_title(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    assert store.list() == []
    old = write(store, "older", CONVERSATION)
    new = write(store, "newer", [SystemMessage("s"), UserMessage("second conversation")])
    os.utime(old, (1_000_000, 1_000_000))
    os.utime(new, (2_000_000, 2_000_000))
    listed = store.list()
    assert [s.session_id for s in listed] == ["newer", "older"]
    assert [s.title for s in listed] == ["second conversation", "list the files"]
    assert listed[0].size == new.stat().st_size
    assert store.resolve("latest") == "newer"
    assert store.resolve(str(old)) == "older"


def test_resolve_and_ids(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    with pytest.raises(SessionNotFound):
        store.resolve("latest")
    with pytest.raises(SessionNotFound):
        store.read("missing")
    for bad in ("../escape", "a/b", "", ".hidden"):
        with pytest.raises(ValueError, match="invalid session id"):
            store.path_for(bad)
        assert not store.exists(bad)
    first, second = JsonlSessionStore.new_id(), JsonlSessionStore.new_id()
    assert first != second
    store.path_for(first)  # a generated id is a valid one


def test_repair_closes_dangling_tool_calls_right_after_their_turn() -> None:
    messages: list[Message] = [
        UserMessage("u"),
        AssistantMessage("", (ToolCall("a", "t", {}), ToolCall("b", "t", {}))),
        ToolMessage("a", "t", "ra"),
        UserMessage("next"),
        AssistantMessage("", (ToolCall("c", "t", {}),)),
    ]
    repaired = repair_dangling_tool_calls(messages)
    assert_valid_transcript(repaired)
    assert repaired[3] == ToolMessage(
        "b", "t", '{"ok": false, "output": "", "error": "cancelled"}', is_error=True
    )
    assert repaired[4] == UserMessage("next")
    assert repaired[-1].role == "tool"
    assert repair_dangling_tool_calls(CONVERSATION) == CONVERSATION


def test_history_for_resume_repairs_the_file_contents(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    write(store, "s1", CONVERSATION[:3])  # killed while list_dir ran
    history = store.history("s1")
    assert_valid_transcript(history)
    assert history[-1] == ToolMessage(
        "c1", "list_dir", '{"ok": false, "output": "", "error": "cancelled"}', is_error=True
    )
