"""The run emitter: numbering, envelopes, and observers that misbehave."""

from __future__ import annotations

import pytest

from lich.events import Envelope, RunEmitter, TurnEnd, TurnStart


def test_envelopes_are_numbered_per_run() -> None:
    emitter = RunEmitter("run1", "sess1")
    seen: list[Envelope] = []
    emitter.subscribe(seen.append)
    first = emitter.emit(TurnStart(1))
    emitter.emit(TurnEnd(1))
    assert [e.seq for e in seen] == [1, 2]
    assert seen[0] is first
    assert (first.run_id, first.session_id, first.type) == ("run1", "sess1", "turn_start")
    assert first.ts > 0
    other = RunEmitter("run2", "sess1")
    assert other.emit(TurnStart(1)).seq == 1  # each run counts on its own


def test_a_raising_handler_is_logged_and_skipped(caplog: pytest.LogCaptureFixture) -> None:
    emitter = RunEmitter("r", "s")
    seen: list[str] = []

    def broken(envelope: Envelope) -> None:
        raise RuntimeError("observer bug")

    emitter.subscribe(broken)
    emitter.subscribe(lambda e: seen.append(e.type))
    emitter.emit(TurnStart(1))
    assert seen == ["turn_start"]
    assert "observer bug" in caplog.text


def test_handlers_may_unsubscribe_while_an_event_is_delivered() -> None:
    emitter = RunEmitter("r", "s")
    seen: list[str] = []
    unsubscribe = None

    def once(envelope: Envelope) -> None:
        seen.append(f"once:{envelope.type}")
        assert unsubscribe is not None
        unsubscribe()

    unsubscribe = emitter.subscribe(once)
    emitter.subscribe(lambda e: seen.append(f"always:{e.type}"))
    emitter.emit(TurnStart(1))
    emitter.emit(TurnEnd(1))
    assert seen == ["once:turn_start", "always:turn_start", "always:turn_end"]
    unsubscribe()  # a second call is harmless
