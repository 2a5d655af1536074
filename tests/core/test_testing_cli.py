"""The testing kit outside pytest: ``import lich.testing`` with no pytest, and the
``serve`` command's script files and start-up errors (its running process is
tested against the provider plugins in ``tests/providers/test_serve.py``)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lich.testing import Fail, Reply
from lich.testing.cli import ScriptError, main, parse_script
from lich.types import ToolCall

# Run in a fresh interpreter where pytest cannot be imported: a meta-path finder
# refuses it (and _pytest) before any other finder is asked.
NO_PYTEST = r'''
import importlib.abc, sys

class NoPytest(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("pytest", "_pytest"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoPytest())
'''

USE_THE_KIT = r'''
import asyncio, json, sys, tempfile, urllib.request
from pathlib import Path

import lich.testing
from lich.agent import Agent
from lich.testing import (
    DIALECTS, HookRecorder, ScriptedChat, ScriptedModel, ScriptedServer, echo_responder,
    make_test_config,
)

report = {"unset": [n for n in lich.testing.__all__ if getattr(lich.testing, n, None) is None]}

def post(url, body):
    request = urllib.request.Request(url, json.dumps(body).encode(),
                                     {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())

model = ScriptedModel(["first"], responder=echo_responder())
with ScriptedServer(model, dialects=tuple(DIALECTS)) as server:
    user = [{"role": "user", "content": "ping"}]
    openai = post(server.base_url + "/chat/completions", {"model": "m", "messages": user})
    ollama = post(server.root_url + "/api/chat", {"model": "m", "stream": False,
                                                   "messages": user})
report["http"] = [openai["choices"][0]["message"]["content"], ollama["message"]["content"]]

recorder = HookRecorder()
agent = Agent(make_test_config(Path(tempfile.mkdtemp())), chat=ScriptedChat(["in process"]),
              plugins=[("recorder", recorder)])
report["agent"] = agent.run_sync("hi").text
report["hooks"] = [n for n in recorder.names() if n != "lich_event"]

try:
    import lich.testing.plugin
except ImportError as exc:
    report["plugin"] = str(exc)
report["pytest_loaded"] = sorted(m for m in sys.modules if m.partition(".")[0] == "pytest")
print(json.dumps(report))
'''


def test_lich_testing_works_without_pytest(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LICH_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")  # no user config leaks into the agent
    done = subprocess.run(
        [sys.executable, "-c", NO_PYTEST + USE_THE_KIT], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report == {
        "unset": [],
        "http": ["first", "You said: ping"],
        "agent": "in process",
        "hooks": ["lich_run_start", "lich_run_end"],
        # Only the pytest plugin needs pytest, and the blocker really blocked it.
        "plugin": "No module named 'pytest'",
        "pytest_loaded": [],
    }


# ------------------------------------------------------------------ script files


def test_a_script_file_lists_replies_tool_calls_and_failures() -> None:
    steps = parse_script([
        "plain text",
        {"text": "calling", "tool_calls": [{"name": "read_file", "args": {"path": "a"}},
                                           {"id": "mine", "name": "list_dir"}]},
        {"text": "slow, in pieces", "delay_s": 0.5, "chunks": ["slow, ", "in pieces"],
         "finish_reason": "length"},
        {"fail": 503, "headers": {"retry-after": "2"}, "body": "down", "delay_s": 1},
        {"fail": 401},
        {},
    ])
    assert steps == [
        Reply("plain text"),
        Reply("calling", (ToolCall("call_2_1", "read_file", {"path": "a"}),
                          ToolCall("mine", "list_dir", {}))),
        Reply("slow, in pieces", delay_s=0.5, chunks=("slow, ", "in pieces"),
              finish_reason="length"),
        Fail(503, body="down", headers={"retry-after": "2"}, delay_s=1.0),
        Fail(401),
        Reply(""),
    ]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"steps": []}, '$: expected a list of steps, got {"steps": []}'),
        ([3], "$[0]: expected a string or an object, got 3"),
        (["ok", {"txt": "typo"}], "$[1].txt: unknown key (expected one of chunks, delay_s, "
                                  "finish_reason, text, tool_calls)"),
        ([{"tool_calls": [{"args": {}}]}], "$[0].tool_calls[0].name: required"),
        ([{"tool_calls": [{"name": "t", "args": "x=1"}]}],
         '$[0].tool_calls[0].args: expected an object, got "x=1"'),
        ([{"text": "t", "delay_s": True}], "$[0].delay_s: expected a number, got true"),
        ([{"text": "t", "delay_s": -1}], "$[0].delay_s: must not be negative"),
        ([{"text": "t", "chunks": ["a", 1]}], "$[0].chunks[1]: expected a string, got 1"),
        ([{"fail": 200}], "$[0].fail: expected an HTTP error status (400-599), got 200"),
        ([{"fail": 500, "headers": {"retry-after": 2}}],
         "$[0].headers.retry-after: expected a string, got 2"),
        ([{"fail": 500, "text": "x"}], "$[0].text: unknown key (expected one of body, delay_s, "
                                       "fail, headers)"),
    ],
)
def test_a_bad_script_names_the_place(data: Any, message: str) -> None:
    with pytest.raises(ScriptError) as info:
        parse_script(data)
    assert str(info.value) == message


def _serve(*args: str) -> Any:
    result = CliRunner().invoke(main, ["serve", *args])
    return result, " ".join(result.output.split())  # free of any line wrapping


def test_serve_refuses_a_bad_script_file_before_listening(tmp_path: Path) -> None:
    missing, text = _serve("--script", str(tmp_path / "nope.json"))
    assert missing.exit_code == 2
    assert "Invalid value for '--script': cannot read" in text
    assert "nope.json" in text

    (tmp_path / "broken.json").write_text("[1,", encoding="utf-8")
    broken, text = _serve("--script", str(tmp_path / "broken.json"))
    assert broken.exit_code == 2
    assert "broken.json is not JSON" in text

    (tmp_path / "wrong.json").write_text('["hi", {"tool_calls": [{}]}]', encoding="utf-8")
    wrong, text = _serve("--script", str(tmp_path / "wrong.json"))
    assert wrong.exit_code == 2
    assert "wrong.json: $[1].tool_calls[0].name: required" in text
    assert "lich scripted model server on" not in text


def test_serve_says_when_the_port_is_taken() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result, text = _serve("--port", str(port))
    assert result.exit_code == 1
    assert f"Error: cannot listen on 127.0.0.1:{port}" in text
    assert "--port 0 picks a free one" in text


def test_serve_help_names_its_options() -> None:
    result, text = _serve("--help")
    assert result.exit_code == 0
    for option in ("--host", "--port", "--script", "--responder [echo|demo|none]", "--quiet"):
        assert option in text
