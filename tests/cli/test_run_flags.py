"""Runs with no one at a terminal, and the run flags: ``--yes``, ``--read-only``,
``--tools`` / ``--no-tools``; approvals in ``--json`` and in ``lich sessions show``."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from lich.executor import APPROVAL_UNAVAILABLE
from lich.testing import calls_responder

from .approval_terminal import tool_results, write_plugin
from .conftest import SCHEMA_PATH, json_lines, lich_command, write_config

NOTE_A = ("note", {"path": "a.txt", "text": "new line"})
LOCKED = ("note", {"path": "locked.txt", "text": "x"})


def setup(work: Path, scripted: Any, *calls: tuple[str, dict[str, Any]]) -> Any:
    plugin = write_plugin(work)
    server = scripted(responder=calls_responder(*calls))
    # The approvals plugin offers the rules a session answer grants (its own rules allow
    # all here: the asks are the test plugin's).
    write_config(work, server.base_url, plugins=["openai_compat", "approvals", str(plugin)],
                 extra='[approvals]\nmode = "allow"')
    return server


def run_detached(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``lich ARGS`` with stdin /dev/null (no terminal to ask on)."""
    return subprocess.run([*lich_command(), *args], cwd=cwd, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "200"})


def test_without_a_terminal_the_call_is_denied_and_everyone_is_told(
    work: Path, scripted: Any
) -> None:
    server = setup(work, scripted, NOTE_A)

    proc = run_detached("write the note", cwd=work)

    assert proc.returncode == 0, proc.stderr
    assert not (work / "a.txt").exists()
    assert APPROVAL_UNAVAILABLE in proc.stderr  # the user
    (result,) = tool_results(server.requests)
    assert json.loads(result)["error"] == APPROVAL_UNAVAILABLE  # and the model
    assert "[y]es" not in proc.stderr  # nobody was asked


def test_json_carries_the_approval_events_in_the_schema(work: Path, scripted: Any) -> None:
    setup(work, scripted, NOTE_A)
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    validator = jsonschema.Draft202012Validator(schema)

    denied = run_detached("--json", "write the note", cwd=work)
    approved = run_detached("--json", "--yes", "write the note", cwd=work)

    for proc in (denied, approved):
        assert proc.returncode == 0, proc.stderr
        lines = json_lines(proc.stdout)
        for line in lines:
            validator.validate(line)
        kinds = [line["type"] for line in lines]
        assert kinds.index("approval_requested") < kinds.index("approval_resolved")
    (requested,) = [x for x in json_lines(denied.stdout) if x["type"] == "approval_requested"]
    assert requested["call"]["name"] == "note"
    assert requested["reason"] == "notes need a human"
    assert requested["rules"] == ["note(a.txt)"]
    (no,) = [x for x in json_lines(denied.stdout) if x["type"] == "approval_resolved"]
    assert (no["approved"], no["approver"], no["message"]) == (False, None, APPROVAL_UNAVAILABLE)
    (yes,) = [x for x in json_lines(approved.stdout) if x["type"] == "approval_resolved"]
    assert (yes["approved"], yes["approver"], yes["scope"]) == (True, "--yes", "once")


@pytest.mark.parametrize("flag", ["--yes", "-y"])
def test_yes_approves_what_asks_and_never_what_is_blocked(
    work: Path, scripted: Any, lich: Any, flag: str
) -> None:
    server = setup(work, scripted, NOTE_A, LOCKED)

    result = lich(flag, "write both")

    assert result.exit_code == 0, result.stderr
    assert (work / "a.txt").read_text(encoding="utf-8") == "new line\n"
    assert not (work / "locked.txt").exists()
    wrote, blocked = tool_results(server.requests)
    assert wrote == "wrote a.txt"
    assert json.loads(blocked)["error"] == "blocked_by_plugin: locked.txt is locked"
    assert "approved by --yes" in result.stderr


def test_yes_also_after_the_command_name_and_in_chat(
    work: Path, scripted: Any, lich: Any
) -> None:
    setup(work, scripted, NOTE_A)

    result = lich("chat", "--yes", input="write the note\n")

    assert result.exit_code == 0, result.stderr
    assert (work / "a.txt").exists()


def test_read_only_offers_only_the_tools_that_only_read(
    work: Path, scripted: Any, lich: Any
) -> None:
    server = setup(work, scripted)

    one_shot = lich("--read-only", "look around")
    chat = lich("chat", "--read-only", input="look around\n")

    assert one_shot.exit_code == 0, one_shot.stderr
    assert chat.exit_code == 0, chat.stderr
    assert [r.tools for r in server.requests] == [("peek",), ("peek",)]


def test_a_tool_left_out_is_unknown_to_the_model(work: Path, scripted: Any, lich: Any) -> None:
    server = setup(work, scripted, NOTE_A)

    # (--yes: the test plugin asks about every call named note, even one that is gone.)
    result = lich("--read-only", "--yes", "write the note")

    assert result.exit_code == 0, result.stderr
    assert not (work / "a.txt").exists()
    (error,) = tool_results(server.requests)
    assert "note" in json.loads(error)["error"]
    assert "unknown" in json.loads(error)["error"]


def test_tools_and_no_tools_choose_for_one_run(work: Path, scripted: Any, lich: Any) -> None:
    server = setup(work, scripted)

    for args in (("--tools", "peek"), ("--tools", "peek, note"), ("--no-tools",)):
        result = lich(*args, "go")
        assert result.exit_code == 0, result.stderr
    plain = lich("go")

    assert plain.exit_code == 0
    assert [r.tools for r in server.requests] == [
        ("peek",), ("note", "peek"), (), ("note", "peek")]


@pytest.mark.parametrize(("args", "message"), [
    (("--tools", "nte"), "--tools: unknown tool 'nte' (did you mean 'note'?) "
                         "(`lich tools` lists the tools)"),
    (("--tools", "note,peek", "--read-only"),
     "--read-only leaves out note, given with --tools: these tools do not only read"),
    (("--tools", "peek", "--no-tools"), "--tools and --no-tools contradict each other"),
    (("--tools", " , "), "expected tool names separated by commas"),
])
def test_tool_flags_that_cannot_be_honoured_are_errors(
    work: Path, scripted: Any, lich: Any, args: tuple[str, ...], message: str
) -> None:
    server = setup(work, scripted)

    result = lich(*args, "go")

    assert result.exit_code == 2
    assert message in result.stderr
    assert server.requests == []


def test_tools_can_enable_a_tool_the_config_leaves_out(
    work: Path, scripted: Any, lich: Any
) -> None:
    plugin = write_plugin(work)
    server = scripted(responder=calls_responder())
    write_config(work, server.base_url, plugins=["openai_compat", str(plugin)],
                 extra='tools_enabled = ["peek"]\ntools_disabled = ["note"]')

    enabled = lich("--tools", "peek", "go")
    disabled = lich("--tools", "note", "go")

    assert enabled.exit_code == 0, enabled.stderr
    assert disabled.exit_code == 2
    assert "'note' is disabled by tools_disabled in the config" in disabled.stderr


def test_sessions_show_displays_the_approvals_where_they_happened(
    work: Path, scripted: Any, lich: Any
) -> None:
    setup(work, scripted, NOTE_A, LOCKED, ("note", {"path": "b.txt", "text": "b"}))
    assert lich("--yes", "write three").exit_code == 0

    shown = lich("sessions", "show", "latest")
    as_json = lich("sessions", "show", "latest", "--json")

    assert shown.exit_code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    asked = [i for i, line in enumerate(lines) if "? approval asked for note" in line]
    assert len(asked) == 2  # the blocked call never asks
    assert "notes need a human" in lines[asked[0]]
    assert "✓ approved by --yes (once" in lines[asked[0] + 1]
    # Interleaved: each between its call and its result.
    assert "→ note(" in lines[asked[0] - 1]
    assert "✓ note: wrote a.txt" in lines[asked[0] + 2]
    data = json.loads(as_json.stdout)
    approvals = data["approvals"]
    assert [a["args"]["path"] for a in approvals] == ["a.txt", "b.txt"]
    assert approvals[0]["tool"] == "note"
    assert approvals[0]["rules"] == ["note(a.txt)"]
    resolution = approvals[0]["resolution"]
    assert (resolution["approved"], resolution["approver"], resolution["scope"]) == (
        True, "--yes", "once")
    assert resolution["waited_ms"] >= 0


def test_sessions_show_displays_a_denial_and_edited_arguments(work: Path, lich: Any) -> None:
    from lich.sessions import JsonlSessionStore

    store = JsonlSessionStore(work / ".lich" / "sessions")
    writer = store.open("20260101-000000-abcdef12")
    call = {"id": "c1", "name": "note", "args": {"path": "a.txt", "text": "x"}}
    writer.append("event", seq=1, event={
        "type": "approval_requested", "id": "3f2a", "call": call, "reason": "why",
        "asked_by": ["asking"], "rules": ["note(a.txt)"], "timeout_s": 300})
    writer.append("event", seq=2, event={
        "type": "approval_resolved", "id": "3f2a", "call_id": "c1", "approved": True,
        "scope": "once", "approver": "terminal", "args": {"path": "b.txt", "text": "x"},
        "message": None, "waited_ms": 2500.0})
    writer.append("event", seq=3, event={
        "type": "approval_requested", "id": "77aa", "call": call, "reason": "why",
        "asked_by": [], "rules": [], "timeout_s": None})
    writer.append("event", seq=4, event={
        "type": "approval_resolved", "id": "77aa", "call_id": "c1", "approved": False,
        "scope": "once", "approver": "terminal", "args": None,
        "message": "approval_denied: not that file", "waited_ms": 40.0})
    writer.append("event", seq=5, event={
        "type": "approval_requested", "id": "9999", "call": call, "reason": "why",
        "asked_by": [], "rules": [], "timeout_s": None})
    writer.close()

    shown = lich("sessions", "show", "latest")
    data = json.loads(lich("sessions", "show", "latest", "--json").stdout)

    assert "? approval asked for note: why (asked by asking)" in shown.stdout
    assert "✓ approved by terminal (once, after 2.5s)" in shown.stdout
    assert 'with edited arguments: path="b.txt", text="x"' in shown.stdout
    assert "✗ denied by terminal, after 40 ms: approval_denied: not that file" in shown.stdout
    assert [a["id"] for a in data["approvals"]] == ["3f2a", "77aa", "9999"]
    assert data["approvals"][1]["resolution"]["message"] == "approval_denied: not that file"
    assert data["approvals"][2]["resolution"] is None  # the process died while waiting


def test_yes_never_overrides_a_deny_rule(work: Path, scripted: Any, lich: Any) -> None:
    """The default plugins: --yes approves the write that asks, a deny rule still wins."""
    server = scripted(responder=calls_responder(
        ("write_file", {"path": "ok.txt", "content": "fine"}),
        ("write_file", {"path": "secret.txt", "content": "no"})))
    write_config(work, server.base_url, extra='[approvals]\ndeny = ["write_file(secret*)"]')

    result = lich("--yes", "write both")

    assert result.exit_code == 0, result.stderr
    assert (work / "ok.txt").read_text(encoding="utf-8") == "fine"
    assert not (work / "secret.txt").exists()
    wrote, denied = tool_results(server.requests)
    assert wrote.startswith("wrote ")
    assert json.loads(denied)["error"].startswith("blocked_by_plugin: approval_rule:")
