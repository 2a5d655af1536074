"""The TUI's input history: Up recalls older inputs, Down newer ones."""

from __future__ import annotations

from lich.tui.input_history import InputHistory


def test_input_history_up_is_older_down_is_newer() -> None:
    history = InputHistory(["one", "two", "three"])
    assert history.newer() is None  # not recalling
    assert history.older("draft") == "three"
    assert history.older() == "two"
    assert history.older() == "one"
    assert history.older() is None  # nothing older
    assert history.newer() == "two"
    assert history.newer() == "three"
    assert history.newer() == "draft"  # past the newest: the text being typed
    assert not history.recalling
    assert history.newer() is None


def test_input_history_dedupes_caps_and_skips_blank() -> None:
    history = InputHistory(cap=3)
    for text in ["a", "b", "a", " ", "c", "d"]:
        history.push(text)
    assert history.entries == ("a", "c", "d")
    history.push("c")
    assert history.entries == ("a", "d", "c")
    assert InputHistory().older("x") is None


def test_input_history_push_ends_recall() -> None:
    history = InputHistory(["a", "b"])
    assert history.older() == "b"
    history.push("c")
    assert not history.recalling
    assert history.older() == "c"


def test_input_history_add_older_goes_behind_current_entries() -> None:
    history = InputHistory(["/resume latest"], cap=4)
    history.add_older(["first", "second", "first", "/resume latest", " "])
    assert history.entries == ("second", "first", "/resume latest")
    assert history.older() == "/resume latest"
    assert history.older() == "first"
    history.add_older(["a", "b"])
    assert history.entries == ("b", "second", "first", "/resume latest")  # capped: oldest go
