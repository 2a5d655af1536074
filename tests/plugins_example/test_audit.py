"""The ``audit`` example plugin: one fsync'd JSONL line per tool call."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lich_examples.audit import AuditSettings, append_line, audit_settings, read_audit_log

from lich.config import ConfigError
from lich.testing import wait_for

from .conftest import Recorder, build_agent, plan, run_plan, tool_results

GUARD_POLICY = {
    "deny_tools": ["forbidden*"],
    "rewrite": [{"tool": "echo", "arg": "n", "max": 5}],
}


async def test_audit_logs_allowed_rewritten_and_blocked_calls(tmp_path: Path) -> None:
    recorder = Recorder()
    agent, result = await run_plan(
        tmp_path,
        ("echo", {"text": "hi"}),
        ("echo", {"text": "many", "n": 99}),
        ("forbidden_tool", {"x": 1}),
        plugins=("audit", "guard"),
        objects=[("recorder", recorder)],
        plugin_settings={"audit": {"path": "logs/audit.jsonl"}, "guard": GUARD_POLICY},
    )
    assert recorder.received == [("echo", {"text": "hi", "n": 1}),
                                 ("echo", {"text": "many", "n": 5})]
    records = read_audit_log(tmp_path / "logs" / "audit.jsonl", strict=True)
    assert [r["decision"] for r in records] == ["allowed", "rewritten", "blocked"]
    allowed, rewritten, blocked = records
    for record, call_id in zip(records, ("call_1", "call_2", "call_3"), strict=True):
        assert record["v"] == 1
        assert record["run_id"] == result.run_id
        assert record["session_id"] == result.session_id
        assert record["call_id"] == call_id
        assert record["turn"] == int(call_id[-1])
        assert isinstance(record["duration_ms"], float)
        assert record["duration_ms"] >= 0
        assert record["ts"].endswith("Z")
    assert allowed["tool"] == "echo"
    assert allowed["args"] == {"text": "hi"}
    assert (allowed["ok"], allowed["error"], allowed["output_preview"]) == (True, None, "echo: hi")
    assert allowed["output_chars"] == len("echo: hi")
    assert (allowed["rewritten_by"], allowed["blocked_by"]) == ([], None)
    # The final arguments, after the guard's rewrite, and who rewrote them.
    assert rewritten["args"] == {"text": "many", "n": 5}
    assert rewritten["rewritten_by"] == ["guard"]
    assert rewritten["output_preview"] == "echo: many"
    assert blocked["tool"] == "forbidden_tool"
    assert blocked["blocked_by"] == "guard"
    assert blocked["ok"] is False
    assert blocked["error"] == (
        "blocked_by_plugin: denied_tool: forbidden_tool (matches 'forbidden*')"
    )
    assert [m.content for m in tool_results(result)][2] == json.dumps(
        {"ok": False, "output": "", "error": blocked["error"]}
    )
    # Each line is one complete JSON object.
    lines = (tmp_path / "logs" / "audit.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == records
    assert agent.host.plugin_names() == ["audit", "guard", "recorder"]


async def test_audit_appends_across_runs_to_the_default_path(tmp_path: Path) -> None:
    recorder = Recorder()
    agent = build_agent(tmp_path, plan(("echo", {"text": "a"})), plugins=("audit",),
                        objects=[("recorder", recorder)])
    first = await agent.run("one")
    second = await agent.run("two")
    records = read_audit_log(tmp_path / ".lich" / "audit.jsonl", strict=True)
    assert [r["run_id"] for r in records] == [first.run_id, second.run_id]


async def test_audit_redacts_secrets_and_clips_long_arguments(tmp_path: Path) -> None:
    class Login:
        def lich_register_tools(self, registry: Any) -> None:
            from lich import tool

            @tool
            def login(user: str, password: str, note: str, api_key: str = "") -> str:
                """Pretend to log in."""
                return "ok"

            registry.register(login)

    await run_plan(
        tmp_path,
        ("login", {"user": "ada", "password": "hunter2", "api_key": "sk-1", "note": "x" * 50}),
        plugins=("audit",),
        objects=[("login", Login())],
        plugin_settings={"audit": {"max_arg_chars": 10, "preview_chars": 0}},
    )
    (record,) = read_audit_log(tmp_path / ".lich" / "audit.jsonl", strict=True)
    assert record["args"]["user"] == "ada"
    assert record["args"]["password"] == "<redacted>"
    assert record["args"]["api_key"] == "<redacted>"
    assert record["args"]["note"] == "x" * 10 + "… [40 chars omitted]"
    assert record["output_preview"] == ""
    assert "hunter2" not in (tmp_path / ".lich" / "audit.jsonl").read_text()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd (Linux)")
async def test_each_line_is_fsynced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log_path = tmp_path / ".lich" / "audit.jsonl"
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    await run_plan(
        tmp_path, ("echo", {"text": "a"}), ("echo", {"text": "b"}), ("echo", {"text": "c"}),
        plugins=("audit",), objects=[("recorder", Recorder())],
    )
    assert synced.count(str(log_path)) == 3
    assert str(log_path.parent) in synced  # the new file's directory entry too


async def test_calls_are_blocked_while_the_log_cannot_be_written(tmp_path: Path) -> None:
    (tmp_path / "audit.jsonl").mkdir()  # a directory where the log file should be
    recorder = Recorder()
    _, result = await run_plan(
        tmp_path, ("echo", {"text": "unaudited?"}),
        plugins=("audit",), objects=[("recorder", recorder)],
        plugin_settings={"audit": {"path": "audit.jsonl"}},
    )
    assert recorder.received == []
    (answer,) = tool_results(result)
    error = json.loads(answer.content)["error"]
    assert error.startswith("blocked_by_plugin: audit_unavailable: cannot write the audit log ")


async def test_require_false_lets_calls_run_without_a_log(tmp_path: Path) -> None:
    (tmp_path / "audit.jsonl").mkdir()
    recorder = Recorder()
    await run_plan(
        tmp_path, ("echo", {"text": "best effort"}),
        plugins=("audit",), objects=[("recorder", recorder)],
        plugin_settings={"audit": {"path": "audit.jsonl", "require": False}},
    )
    assert recorder.names() == ["echo"]


def test_bad_settings_refuse_the_run_with_every_problem(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        build_agent(tmp_path, plan(), plugins=("audit",), plugin_settings={"audit": {
            "preview_chars": -1, "pth": "x", "path": " ", "redact_args": ["token", 3],
            "fsync": "yes"}})
    assert sorted(info.value.problems) == [
        "$.plugin_settings.audit.fsync: expected true or false, got string",
        "$.plugin_settings.audit.path: expected a file path, got ' '",
        "$.plugin_settings.audit.preview_chars: must be at least 0, got -1",
        "$.plugin_settings.audit.pth: unknown key (did you mean 'path'?)",
        "$.plugin_settings.audit.redact_args[1]: expected an argument name or glob, got integer",
    ]


def test_settings_defaults_and_case() -> None:
    settings = audit_settings({"redact_args": ["Session_ID"], "preview_chars": 0})
    assert settings.redact_args == ("session_id",)
    assert (settings.preview_chars, settings.max_arg_chars) == (0, 1000)
    assert audit_settings(None) == AuditSettings()
    assert AuditSettings().log_path("/w") == Path("/w/.lich/audit.jsonl")


def test_a_killed_run_leaves_a_readable_log(tmp_path: Path) -> None:
    work, ready = tmp_path / "work", tmp_path / "ready"
    work.mkdir()
    child = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("_audit_child.py")), str(work), str(ready)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        def reached() -> bool:
            if child.poll() is not None:
                _, err = child.communicate()
                pytest.fail(f"child exited early ({child.returncode}): {err.decode()[-2000:]}")
            return ready.exists()

        wait_for(reached, 90, "the child to reach the hanging step", interval=0.05)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
        child.stdout.close()  # type: ignore[union-attr]
        child.stderr.close()  # type: ignore[union-attr]
    assert child.returncode == -signal.SIGKILL
    log = work / "audit.jsonl"
    records = read_audit_log(log, strict=True)
    assert [(r["args"], r["output_preview"]) for r in records] == [
        ({"i": 1}, "step 1 done"), ({"i": 2}, "step 2 done"), ({"i": 3}, "step 3 done")
    ]
    assert log.read_bytes().endswith(b"\n")
    assert len({r["run_id"] for r in records}) == 1


def test_a_torn_line_is_skipped_and_the_next_line_starts_fresh(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "audit.jsonl"
    append_line(log, {"n": 1})
    with open(log, "ab") as fh:
        fh.write(b'{"n": 2, "tool": "ter')  # what a crash mid-write leaves
    append_line(log, {"n": 3})
    assert log.read_text().splitlines()[2] == '{"n":3}'
    assert read_audit_log(log) == [{"n": 1}, {"n": 3}]
    assert "audit.jsonl:2 skipped" in caplog.text
    with pytest.raises(ValueError, match=r"audit.jsonl:2: not a JSON line"):
        read_audit_log(log, strict=True)
