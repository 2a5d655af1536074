"""The reference servers from npm (``server-everything``, ``server-filesystem``,
``server-memory``), installed at pinned versions by ``.ci/run`` into ``.ci/node``
of the checkout; over stdio, and ``server-everything`` over streamable HTTP too."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lich.testing import wait_for
from lich.types import ToolCall, ToolResult

NODE_DIR = Path(__file__).resolve().parents[2] / ".ci" / "node"
BIN = NODE_DIR / "node_modules" / ".bin"
LOOPBACK = Path(__file__).with_name("loopback.cjs")

if shutil.which("node") is None:
    pytest.skip("node is not installed: the npm reference servers cannot run",
                allow_module_level=True)
if not (BIN / "mcp-server-everything").exists():
    pytest.skip(f"the npm reference servers are not installed in {NODE_DIR} "
                "(.ci/run installs them with npm)", allow_module_level=True)


def npm_server(name: str, *args: str, **table: Any) -> dict[str, Any]:
    return {"command": str(BIN / name), "args": list(args), "startup_timeout_s": 60, **table}


async def call(agent: Any, name: str, **args: Any) -> ToolResult:
    result: ToolResult = await agent.executor.execute(ToolCall("c1", name, args))
    return result


async def test_server_everything_over_stdio(mcp_agent: Any) -> None:
    agent = mcp_agent({"everything": npm_server("mcp-server-everything", "stdio")})
    assert (await call(agent, "mcp__everything__echo", message="hi")).output == "Echo: hi"
    assert (await call(agent, "mcp__everything__get-sum", a=2, b=3)).output == \
        "The sum of 2 and 3 is 5."
    image = await call(agent, "mcp__everything__get-tiny-image")
    assert image.ok
    assert re.search(r"^\[image: image/png, [0-9.]+ KiB\]$", image.output, re.M)
    weather = await call(agent, "mcp__everything__get-structured-content", location="New York")
    assert set(json.loads(weather.output)) >= {"temperature", "conditions"}


@pytest.fixture
def everything_http(tmp_path: Path) -> Iterator[str]:
    log = tmp_path / "everything-http.log"
    with log.open("w", encoding="utf-8") as stderr:
        process = subprocess.Popen(
            ["node", "--require", str(LOOPBACK),
             str(NODE_DIR / "node_modules" / "@modelcontextprotocol" / "server-everything" /
                 "dist" / "index.js"), "streamableHttp"],
            stdout=subprocess.DEVNULL, stderr=stderr, env={**os.environ, "PORT": "0"},
            start_new_session=True,
        )
    try:
        port = wait_for(lambda: (m := re.search(r"LOOPBACK_PORT (\d+)", log.read_text()))
                        and m.group(1), what="server-everything to listen")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)


async def test_server_everything_over_streamable_http(mcp_agent: Any, everything_http: str
                                                      ) -> None:
    agent = mcp_agent({"everything": {"url": everything_http, "startup_timeout_s": 60}})
    assert (await call(agent, "mcp__everything__echo", message="over http")).output == \
        "Echo: over http"
    assert (await call(agent, "mcp__everything__get-sum", a=40, b=2)).output == \
        "The sum of 40 and 2 is 42."


async def test_server_filesystem_reads_and_lists(mcp_agent: Any, tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "notes.txt").write_text("remember the milk\n", encoding="utf-8")
    agent = mcp_agent({"fs": npm_server("mcp-server-filesystem", str(shared))})
    read = await call(agent, "mcp__fs__read_text_file", path=str(shared / "notes.txt"))
    assert read.output.strip() == "remember the milk"
    listing = await call(agent, "mcp__fs__list_directory", path=str(shared))
    assert "[FILE] notes.txt" in listing.output
    # Outside the allowed directory: the server's own refusal, as a failed result.
    outside = await call(agent, "mcp__fs__read_text_file", path=str(tmp_path / "elsewhere"))
    assert not outside.ok
    assert outside.error is not None
    assert outside.error.startswith("mcp_tool_error: ")


async def test_server_memory_keeps_what_it_is_told(mcp_agent: Any, tmp_path: Path) -> None:
    memory_file = tmp_path / "memory.jsonl"
    agent = mcp_agent({"memory": npm_server(
        "mcp-server-memory", env={"MEMORY_FILE_PATH": str(memory_file)})})
    created = await call(agent, "mcp__memory__create_entities", entities=[
        {"name": "lich", "entityType": "project", "observations": ["speaks MCP"]}])
    assert created.ok, created
    graph = await call(agent, "mcp__memory__read_graph")
    assert "speaks MCP" in graph.output
    assert "speaks MCP" in memory_file.read_text(encoding="utf-8")


async def test_server_everythings_task_only_tool_is_not_offered(mcp_agent: Any) -> None:
    # simulate-research-query is task-only (execution.taskSupport "required"): a plain
    # call fails every time, so the model is not offered it (#35.17).
    from lich.mcp.plugin import _RUNTIMES

    agent = mcp_agent({"everything": npm_server("mcp-server-everything", "stdio")})
    state = _RUNTIMES[agent.tools].connections["everything"].state
    names = agent.tools.names()
    if "simulate-research-query" not in state.task_only:
        pytest.skip("this server-everything offers no task-only tool over stdio")
    assert "mcp__everything__simulate-research-query" not in names
    assert "mcp__everything__echo" in names


async def test_server_filesystems_media_file_reads_without_its_base64(
        mcp_agent: Any, tmp_path: Path) -> None:
    # read_media_file answers an image block and a structured copy of it, no text: the
    # model gets the placeholder, never the base64 again (#35.18).
    import base64

    shared = tmp_path / "shared"
    shared.mkdir()
    png = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
                           "YPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")
    (shared / "dot.png").write_bytes(png)
    agent = mcp_agent({"fs": npm_server("mcp-server-filesystem", str(shared))})
    media = await call(agent, "mcp__fs__read_media_file", path=str(shared / "dot.png"))
    assert media.ok, media
    assert re.fullmatch(r"\[image: image/png, \d+ bytes\]", media.output), media.output
    assert base64.b64encode(png).decode()[:20] not in media.output
