"""``lich sessions``: id prefixes, rm, prune and the mark of a run that failed before any
answer. Session files are made by real runs against the scripted server, or written
with the store's own writer where only their age or outcome matters."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from lich.sessions import JsonlSessionStore, SessionAmbiguous
from lich.testing import Fail
from lich.types import AssistantMessage, UserMessage

from .conftest import write_config

DAY = 86400.0


def _sessions_dir(work: Path) -> Path:
    return work / ".lich" / "sessions"


def _write(store: JsonlSessionStore, sid: str, *, reason: str = "final", answered: bool = True,
           age_s: float = 0.0, text: str = "hello") -> Path:
    """A session file as the agent writes one: run_start, messages, run_end; aged ``age_s``."""
    writer = store.open(sid)
    writer.append("meta", event="run_start", run_id="r1", input=text, model="m")
    writer.message(UserMessage(text))
    if answered:
        writer.message(AssistantMessage("an answer"))
    writer.append("meta", event="run_end", run_id="r1", stopped_reason=reason, turns_used=1,
                  usage={}, error="boom" if reason == "error" else None)
    writer.close()
    when = time.time() - age_s
    os.utime(writer.path, (when, when))
    return writer.path


# --------------------------------------------------------------------- prefixes


def test_a_unique_prefix_names_the_session(work: Path, lich: Any) -> None:
    store = JsonlSessionStore(_sessions_dir(work))
    _write(store, "20260101-aaaa")
    _write(store, "20260202-bbbb", text="second")

    path = lich("sessions", "path", "202602")
    shown = lich("sessions", "show", "20260202")

    assert path.exit_code == 0, path.stderr
    assert Path(path.stdout.strip()) == _sessions_dir(work) / "20260202-bbbb.jsonl"
    assert "you: second" in shown.stdout


def test_an_ambiguous_prefix_is_an_error_listing_the_candidates(work: Path, lich: Any,
                                                                  scripted: Any) -> None:
    server = scripted(["never asked"])
    write_config(work, server.base_url)
    store = JsonlSessionStore(_sessions_dir(work))
    _write(store, "2026-x1")
    _write(store, "2026-x2")

    shown = lich("sessions", "show", "2026-x")
    resumed = lich("--resume", "2026", "carry on")

    assert shown.exit_code == 2
    assert "2026-x1" in shown.stderr
    assert "2026-x2" in shown.stderr
    assert "start of 2 sessions" in shown.stderr
    assert resumed.exit_code == 2
    assert "2026-x1, 2026-x2" in resumed.stderr
    assert server.requests == []  # refused before the model was asked
    with pytest.raises(SessionAmbiguous) as caught:
        store.resolve("2026-x")
    assert caught.value.candidates == ("2026-x1", "2026-x2")


def test_an_exact_id_wins_over_a_longer_one_it_starts(work: Path) -> None:
    store = JsonlSessionStore(_sessions_dir(work))
    _write(store, "abc")
    _write(store, "abcd")

    assert store.resolve("abc") == "abc"
    assert store.resolve("abcd") == "abcd"


def test_a_prefix_matching_nothing_is_not_found(work: Path, lich: Any) -> None:
    _write(JsonlSessionStore(_sessions_dir(work)), "20260101-aaaa")

    result = lich("sessions", "path", "1999")

    assert result.exit_code == 2
    assert "no session '1999'" in result.stderr


# --------------------------------------------------------------------------- rm


def test_rm_removes_several_sessions_by_id_and_prefix(work: Path, lich: Any) -> None:
    store = JsonlSessionStore(_sessions_dir(work))
    a, b, c = (_write(store, sid) for sid in ("s-aaa", "s-bbb", "s-ccc"))

    result = lich("sessions", "rm", "s-aaa", "s-b", "s-aaa")

    assert result.exit_code == 0, result.stderr
    assert not a.exists()
    assert not b.exists()
    assert c.exists()
    assert result.stdout.splitlines() == ["removed s-aaa  hello", "removed s-bbb  hello"]


def test_rm_with_one_unknown_session_removes_nothing(work: Path, lich: Any) -> None:
    store = JsonlSessionStore(_sessions_dir(work))
    a, b = _write(store, "s-aaa"), _write(store, "s-bbb")

    result = lich("sessions", "rm", "s-aaa", "nope", "s-bbb")
    ambiguous = lich("sessions", "rm", "s-aaa", "s-")

    assert result.exit_code == 2
    assert "no session 'nope'" in result.stderr
    assert "nothing removed" in result.stderr
    assert ambiguous.exit_code == 2
    assert a.exists()
    assert b.exists()


def test_rm_dry_run_and_json(work: Path, lich: Any) -> None:
    store = JsonlSessionStore(_sessions_dir(work))
    a = _write(store, "s-aaa")

    dry = lich("sessions", "rm", "--dry-run", "s-aaa")
    as_json = lich("--json", "sessions", "rm", "s-aaa")

    assert dry.stdout.strip() == "would remove s-aaa  hello"
    report = json.loads(as_json.stdout)
    assert report["dry_run"] is False
    assert [s["session_id"] for s in report["removed"]] == ["s-aaa"]
    assert not a.exists()


def test_rm_takes_the_link_never_what_it_points_to(work: Path, lich: Any,
                                                   tmp_path: Path) -> None:
    outside = tmp_path / "precious.jsonl"
    _write(JsonlSessionStore(tmp_path), "precious")
    _sessions_dir(work).mkdir(parents=True)
    link = _sessions_dir(work) / "linked.jsonl"
    link.symlink_to(outside)

    result = lich("sessions", "rm", "linked")

    assert result.exit_code == 0, result.stderr
    assert not link.is_symlink()
    assert outside.read_text(encoding="utf-8").count("\n") == 4  # untouched


def test_rm_refuses_a_directory_named_like_a_session(work: Path) -> None:
    store = JsonlSessionStore(_sessions_dir(work))
    (_sessions_dir(work) / "odd.jsonl").mkdir(parents=True)

    with pytest.raises(ValueError, match="not a session file"):
        store.remove("odd")
    with pytest.raises(ValueError, match="invalid session id"):
        store.remove("../escape")
    assert (_sessions_dir(work) / "odd.jsonl").is_dir()


# ------------------------------------------------------------------------ prune


def test_prune_older_than_removes_only_old_sessions(work: Path, lich: Any) -> None:
    store = JsonlSessionStore(_sessions_dir(work))
    old = _write(store, "old", age_s=31 * DAY)
    recent = _write(store, "recent", age_s=29 * DAY)
    fresh = _write(store, "fresh", age_s=3600)

    dry = lich("sessions", "prune", "--older-than", "30d", "--dry-run")
    assert dry.stdout.strip() == "would remove old  hello"
    assert old.exists()

    hours = lich("sessions", "prune", "--older-than", "720h")  # 30 days, in hours

    assert hours.exit_code == 0, hours.stderr
    assert hours.stdout.strip() == "removed old  hello"
    assert not old.exists()
    assert recent.exists()
    assert fresh.exists()
    minutes = lich("sessions", "prune", "--older-than", "30m")
    assert minutes.stdout.split() == ["removed", "fresh", "hello", "removed", "recent", "hello"]


def test_prune_failed_and_both_conditions(work: Path, lich: Any) -> None:
    store = JsonlSessionStore(_sessions_dir(work))
    failed_old = _write(store, "failed-old", reason="error", answered=False, age_s=10 * DAY)
    failed_new = _write(store, "failed-new", reason="error", age_s=60)
    fine_old = _write(store, "fine-old", age_s=10 * DAY)

    both = lich("sessions", "prune", "--failed", "--older-than", "1d")
    assert both.exit_code == 0, both.stderr
    assert not failed_old.exists()
    assert failed_new.exists()
    assert fine_old.exists()

    failed = lich("sessions", "prune", "--failed")
    assert not failed_new.exists()
    assert fine_old.exists()
    assert failed.stdout.strip() == "removed failed-new  hello"


def test_prune_needs_a_condition_and_a_valid_duration(work: Path, lich: Any) -> None:
    kept = _write(JsonlSessionStore(_sessions_dir(work)), "kept", age_s=100 * DAY)

    bare = lich("sessions", "prune")
    bad = lich("sessions", "prune", "--older-than", "30 days")

    assert bare.exit_code == 2
    assert "--older-than" in bare.stderr
    assert "--failed" in bare.stderr
    assert bad.exit_code == 2
    assert "not a duration" in bad.stderr
    assert kept.exists()


# --------------------------------------------------- failed before the first answer


def test_a_run_that_failed_before_any_answer_is_marked(work: Path, lich: Any,
                                                       scripted: Any) -> None:
    server = scripted([Fail(401, {"error": {"message": "bad key"}}), "fine"])
    write_config(work, server.base_url)
    assert lich("doomed question").exit_code == 1
    assert lich("good question").exit_code == 0

    listed = lich("sessions", "list")
    as_json = {s["title"]: s for s in json.loads(lich("sessions", "list", "--json").stdout)}

    doomed, good = as_json["doomed question"], as_json["good question"]
    assert (doomed["status"], doomed["answered"], doomed["failed_unanswered"]) == (
        "error", False, True)
    assert (good["status"], good["answered"], good["failed_unanswered"]) == (
        "final", True, False)
    (doomed_line,) = [ln for ln in listed.stdout.splitlines() if "doomed question" in ln]
    (good_line,) = [ln for ln in listed.stdout.splitlines() if "good question" in ln]
    assert "failed, no answer" in doomed_line
    assert "final" in good_line
    assert "failed" not in good_line


def test_status_of_the_last_run(work: Path) -> None:
    store = JsonlSessionStore(_sessions_dir(work))
    _write(store, "answered-then-failed", reason="error", answered=True)
    _write(store, "aborted", reason="aborted", answered=False)
    open_run = store.open("open-run")
    open_run.append("meta", event="run_start", run_id="r", input="x", model="m")
    open_run.message(UserMessage("x"))
    open_run.close()

    info = {s.session_id: s for s in store.list()}

    assert (info["answered-then-failed"].failed, info["answered-then-failed"].failed_unanswered) \
        == (True, False)
    assert info["aborted"].status == "aborted"
    assert not info["aborted"].failed
    assert info["open-run"].status == "open"


@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90.0), ("90m", 5400.0), ("12h", 43200.0), ("30d", 30 * DAY), ("2w", 14 * DAY),
    ("1.5h", 5400.0), (" 7D ", 7 * DAY),
])
def test_durations(text: str, seconds: float) -> None:
    from lich.cli.sessions import parse_duration

    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "30", "d", "30 days", "-1d", "1y", "1h30m"])
def test_what_is_not_a_duration(text: str) -> None:
    from lich.cli.sessions import parse_duration

    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)
