"""The run-time hooks seen from the command line: a message a ``lich_user_prompt`` hook
refuses (exit 1, one line saying who and why, no model call) and a system-prompt
section cut to fit ``instructions_budget_tokens`` (a progress line, and in ``--json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .conftest import json_lines, write_config

PLUGIN = '''
from lich import Block, InstructionSection, hookimpl

@hookimpl
def lich_user_prompt(message):
    if "secret" in message:
        return Block("no secrets here")
    return None

@hookimpl
def lich_instructions(run):
    return [InstructionSection("Be terse.", "house", priority=5),
            InstructionSection("X" * 4000, "big-catalog", priority=0)]
'''


def _setup(work: Path, base_url: str) -> None:
    (work / "hooks.py").write_text(PLUGIN, encoding="utf-8")
    write_config(work, base_url, extra="instructions_budget_tokens = 300")


def test_a_refused_message_exits_1_and_says_who_refused_it(
    work: Path, scripted: Any, lich: Any,
) -> None:
    server = scripted(["never sent"])
    _setup(work, server.base_url)
    result = lich("--plugin", "hooks.py", "my secret is 42")
    assert result.exit_code == 1, result.stderr
    assert "[lich] message refused by hooks: no secrets here" in result.stderr
    assert "[lich] blocked after 0 turns" in result.stderr
    assert server.requests == []


def test_a_cut_section_is_a_progress_line_and_in_the_json_stream(
    work: Path, scripted: Any, lich: Any,
) -> None:
    server = scripted(["ok"])
    _setup(work, server.base_url)
    result = lich("--plugin", "hooks.py", "hello")
    assert result.exit_code == 0, result.stderr
    assert "[lich] instructions cut: big-catalog (~1000 tokens, priority 0" in result.stderr
    system = server.requests[0].messages[0].content
    assert system.endswith("\n\nBe terse.")
    assert "XXXX" not in system

    result = lich("--plugin", "hooks.py", "--json", "hello")
    events = json_lines(result.stdout)
    start = events[0]
    assert start["type"] == "run_start"
    assert [(s["source"], s["kept"]) for s in start["instructions"]] == [
        ("house", True), ("big-catalog", False)]
    cut = events[1]
    assert (cut["type"], cut["source"], cut["budget_tokens"]) == (
        "instructions_cut", "big-catalog", 300)
    json.dumps(events)  # every line is plain JSON
