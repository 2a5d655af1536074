"""End to end with the reference servers from PyPI (``mcp-server-time``,
``mcp-server-git``, in the test extra): a scripted model calls their tools through
lich and its answer carries their results."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lich.testing import Reply, ScriptedChat, ScriptRequest, Step
from lich.types import ToolCall


def _server(module: str, *args: str) -> dict[str, Any]:
    pytest.importorskip(module, reason=f"{module} (the test extra) is not installed")
    # `python -m` of this interpreter: the same install, wherever its scripts went.
    return {"command": sys.executable, "args": ["-m", module, *args], "startup_timeout_s": 60}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    path = tmp_path / "repo"
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    (path / "tracked.txt").write_text("one\n", encoding="utf-8")
    subprocess.run([*git, "add", "tracked.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first"], check=True)
    (path / "untracked-note.txt").write_text("new\n", encoding="utf-8")
    return path


async def test_the_model_calls_the_time_and_git_servers(mcp_agent: Any, repo: Path) -> None:
    def respond(request: ScriptRequest) -> Step:
        results = request.tool_results_since_user()
        if not results:
            return Reply(tool_calls=[
                ToolCall("t1", "mcp__time__get_current_time", {"timezone": "Europe/Warsaw"}),
                ToolCall("g1", "mcp__git__git_status", {"repo_path": str(repo)}),
            ])
        return Reply("results: " + " || ".join(m.content for m in results))

    agent = mcp_agent(
        {"time": _server("mcp_server_time", "--local-timezone", "UTC"),
         "git": _server("mcp_server_git", "--repository", str(repo))},
        ScriptedChat(responder=respond),
    )
    offered = agent.tools.names()
    assert "mcp__time__get_current_time" in offered
    assert "mcp__git__git_status" in offered
    result = await agent.run("what time is it in Warsaw, and what is the repo's status?")
    assert result.stopped_reason == "final"
    answer = result.text
    assert answer.startswith("results: ")
    assert '"timezone": "Europe/Warsaw"' in answer  # the time server's JSON
    assert "untracked-note.txt" in answer  # git status of the temporary repository
    assert "Repository status" in answer
