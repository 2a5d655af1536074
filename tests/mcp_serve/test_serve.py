"""``lich mcp serve``: a real ``lich`` subprocess driven over stdio by the MCP SDK's
own client (and, where the bytes on the wire are the point, by a raw JSON-RPC
driver): the tool list and ``--tools``, the client told when the tools change,
calls through the plugins' hooks, the executor's limits and confinement, an ``ask``
denied, stdout carrying only the protocol, and how the process ends."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import IO, Any

import pytest
from lich_env import lich_env

from lich.testing import async_wait_for, wait_for

mcp = pytest.importorskip("mcp", reason="the mcp extra is not installed")
import mcp_types  # noqa: E402  (after the skip: installed with the SDK)
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

# Bounds for a hung server, never expectations: a healthy exchange takes far less.
BOUND_S = 60.0

TOOLS_PLUGIN = '''
import asyncio
from lich import ToolError, ToolResult, hookimpl, tool


@tool(read_only=True)
def peek(path: str) -> str:
    """Say which path would be looked at."""
    return f"would look at {path}"


@tool
def boom(reason: str) -> str:
    """Fail with a coded error."""
    raise ToolError(f"boom_failed: {reason}")


@tool(timeout_s=0.2)
async def slow() -> str:
    """Never finish on its own."""
    await asyncio.sleep(3600)
    return "unreachable"


@tool
def partial() -> ToolResult:
    """Fail after doing half the work."""
    return ToolResult.failure("partial_failure: stopped halfway", output="the first half")


@tool(timeout_s=3600)
async def hang() -> str:
    """Say it started (hang-started.txt), run until stopped, and say so in hang-stopped.txt."""
    with open("hang-started.txt", "w", encoding="utf-8") as f:
        f.write("started")
    try:
        await asyncio.sleep(3600)
    finally:
        with open("hang-stopped.txt", "w", encoding="utf-8") as f:
            f.write("stopped")
    return "unreachable"


@hookimpl
def lich_register_tools(registry, config):
    for item in (peek, boom, slow, partial, hang):
        registry.register(item)
'''

# A before-hook guard, an after-hook and an observer of the session, each writing
# what it saw to $SERVE_TEST_LOG.
GUARD_PLUGIN = '''
import json
import os
from lich import Ask, Block, ToolResult, hookimpl
from lich.serialization import envelope_to_dict


def _log(**record):
    with open(os.environ["SERVE_TEST_LOG"], "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\\n")


@hookimpl
def lich_run_start(run):
    _log(hook="run_start", session=run.session_id, work_dir=run.work_dir)


@hookimpl
def lich_before_tool_call(call, run):
    _log(hook="before", tool=call.name, args=dict(call.args), session=run.session_id)
    if call.name == "read_file" and call.args.get("path") == "secret.txt":
        return Block("secret.txt is off limits")
    if call.name == "write_file":
        return Ask("writing needs a person")
    return None


@hookimpl
def lich_after_tool_call(call, result, run):
    if call.name == "read_file" and result.ok:
        return ToolResult.success(result.output + "[checked by guard]")
    return None


@hookimpl
def lich_event(event):
    record = envelope_to_dict(event)
    _log(hook="event", type=record["type"], session=record["session_id"],
         blocked_by=record.get("blocked_by"))


@hookimpl
def lich_run_end(run, outcome):
    _log(hook="run_end", session=run.session_id, reason=outcome.stopped_reason)
'''

# Writes to stdout every way a plugin can: print at import, at registration and in a
# call; the descriptor itself; a child process; a warning and a log line.
NOISY_PLUGIN = '''
import logging
import os
import subprocess
import sys
import warnings
from lich import hookimpl, tool

print("NOISE at import")


@tool
def noisy() -> str:
    """Make noise, then answer."""
    print("NOISE in a call")
    sys.stdout.flush()
    os.write(1, b"NOISE on fd 1\\n")
    subprocess.run([sys.executable, "-c", "print('NOISE from a child')"], check=True)
    warnings.warn("NOISE as a warning")
    logging.getLogger("lich.noisy").warning("NOISE as a log line")
    return "quiet answer"


@hookimpl
def lich_register_tools(registry, config):
    print("NOISE at registration")
    registry.register(noisy)
'''


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The work dir: a file to read, and the test plugins."""
    path = tmp_path / "work"
    path.mkdir()
    (path / "notes.txt").write_text("first line\nsecond line\n", encoding="utf-8")
    (path / "secret.txt").write_text("the secret\n", encoding="utf-8")
    (path / "tools_plugin.py").write_text(TOOLS_PLUGIN, encoding="utf-8")
    (path / "guard.py").write_text(GUARD_PLUGIN, encoding="utf-8")
    (path / "noisy.py").write_text(NOISY_PLUGIN, encoding="utf-8")
    (tmp_path / "outside.txt").write_text("outside the work dir\n", encoding="utf-8")
    # The test plugins' tools are not read-only: the default approvals would ask about
    # them, and with no approver in `lich mcp serve` deny them. Allowed here by rule,
    # as a user serving their own tools would; write_file still asks (its own test).
    (path / ".lich").mkdir()
    (path / ".lich" / "config.toml").write_text(
        '[approvals]\nallow = ["peek", "boom", "slow", "partial", "hang", "noisy"]\n',
        encoding="utf-8")
    return path


@pytest.fixture
def hook_log(tmp_path: Path) -> Path:
    return tmp_path / "hooks.jsonl"


@pytest.fixture
def stderr(tmp_path: Path) -> Iterator[IO[str]]:
    """Where the server's stderr goes (an MCP client's log file)."""
    with open(tmp_path / "stderr.txt", "w", encoding="utf-8") as file:
        yield file


def serve_args(work: Path, *extra: str) -> list[str]:
    """``python -m lich mcp serve --work-dir WORK EXTRA...``"""
    return ["-m", "lich", "mcp", "serve", "--work-dir", str(work), *extra]


def serve_env(home: Path, hook_log: Path) -> dict[str, str]:
    return lich_env(home, SERVE_TEST_LOG=str(hook_log), PYTHONUNBUFFERED="1")


@asynccontextmanager
async def served(work: Path, home: Path, hook_log: Path, *extra: str,
                 stderr: IO[str], mode: str = "legacy",
                 message_handler: Any = None) -> AsyncIterator[Client]:
    """An SDK client connected to ``lich mcp serve`` started as a subprocess.

    ``legacy`` is the initialize handshake today's clients use; ``auto`` lets the
    SDK discover the newest protocol era the server speaks. ``message_handler`` gets
    the server's notifications."""
    params = StdioServerParameters(command=sys.executable, args=serve_args(work, *extra),
                                   env=serve_env(home, hook_log), cwd=str(work))
    async with Client(stdio_client(params, errlog=stderr), read_timeout_seconds=BOUND_S,
                      mode=mode, message_handler=message_handler) as client:
        yield client


def text_of(result: mcp_types.CallToolResult) -> str:
    return "".join(block.text for block in result.content
                   if isinstance(block, mcp_types.TextContent))


def read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def log_once_ended(path: Path) -> list[dict[str, Any]]:
    """The hook log once its last record is ``lich_run_end`` (the client left)."""
    records: list[dict[str, Any]] = wait_for(
        lambda: (r := read_log(path)) and r[-1]["hook"] == "run_end" and r,
        timeout=BOUND_S, what="lich_run_end after the client left")
    return records


def lich_tools_json(work: Path, home: Path, *extra: str) -> list[dict[str, Any]]:
    """What ``lich tools --json`` lists for the same configuration."""
    proc = subprocess.run(
        [sys.executable, "-m", "lich", "tools", "--json", "--work-dir", str(work), *extra],
        cwd=work, capture_output=True, text=True, env=lich_env(home), timeout=BOUND_S,
    )
    assert proc.returncode == 0, proc.stderr
    rows: list[dict[str, Any]] = json.loads(proc.stdout)
    return rows


# ------------------------------------------------------------------ tool list


async def test_lists_every_enabled_tool_with_its_schema_and_hints(
    work: Path, home: Path, hook_log: Path, stderr: IO[str]
) -> None:
    async with served(work, home, hook_log, "--plugin", "tools_plugin.py",
                      stderr=stderr) as client:
        info = client.server_info
        listed = (await client.list_tools()).tools

    assert info is not None
    assert info.name == "lich"
    expected = lich_tools_json(work, home, "--plugin", "tools_plugin.py")
    assert [t.name for t in listed] == [row["name"] for row in expected]
    by_name = {t.name: t for t in listed}
    for row in expected:
        served_tool = by_name[row["name"]]
        assert served_tool.description == row["description"]
        assert served_tool.input_schema == {"type": "object", **row["parameters"]}
    # The hints follow Tool.read_only; a tool that is not read-only may destroy.
    assert by_name["peek"].annotations is not None
    assert by_name["peek"].annotations.read_only_hint is True
    assert by_name["peek"].annotations.destructive_hint is None
    assert by_name["boom"].annotations is not None
    assert by_name["boom"].annotations.read_only_hint is False
    assert by_name["boom"].annotations.destructive_hint is True
    # idempotentHint follows Tool.idempotent (by default its read_only).
    assert by_name["peek"].annotations.idempotent_hint is True
    assert by_name["boom"].annotations.idempotent_hint is False
    assert "read_file" in by_name


async def test_tools_option_narrows_what_is_listed_and_callable(
    work: Path, home: Path, hook_log: Path, stderr: IO[str]
) -> None:
    async with served(work, home, hook_log, "--plugin", "tools_plugin.py",
                      "--tools", "read_file,peek", stderr=stderr) as client:
        listed = [t.name for t in (await client.list_tools()).tools]
        left_out = await client.call_tool("list_dir", {"path": "."})
        kept = await client.call_tool("peek", {"path": "x"})

    assert sorted(listed) == ["peek", "read_file"]
    assert left_out.is_error is True
    assert text_of(left_out) == "unknown_tool: list_dir"
    assert kept.is_error is False
    assert text_of(kept) == "would look at x"


def test_tools_option_naming_no_enabled_tool_is_a_usage_error(
    work: Path, home: Path, hook_log: Path
) -> None:
    proc = subprocess.run(
        [sys.executable, *serve_args(work, "--tools", "read_file,nosuch_tool")],
        cwd=work, input="", capture_output=True, text=True, env=serve_env(home, hook_log),
        timeout=BOUND_S,
    )

    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "--tools: no enabled tool named nosuch_tool" in proc.stderr
    assert "read_file" in proc.stderr.split("enabled:")[1]  # what could be named instead


# ----------------------------------------------------------- tool-list changes

# A plugin whose tool replaces the plugin's tools with a new set, through the registry
# it was given: what a plugin whose tools change at run time does.
CHANGING_PLUGIN = '''
from lich import hookimpl, tool

_registry = []


@tool(read_only=True)
def first() -> str:
    """The tool there from the start."""
    return "first"


@tool(read_only=True)
def second() -> str:
    """The tool added later."""
    return "second"


def _offer_all():
    registry = _registry[0]
    registry.replace_plugin(registry.plugin_of("first"), [first, add_second, same_again,
                                                          second])


@tool(read_only=True)
async def add_second() -> str:
    """Offer `second` as well."""
    _offer_all()
    return "added"


@tool(read_only=True)
async def same_again() -> str:
    """Replace the tools with the very same ones (after add_second): nothing changed."""
    _offer_all()
    return "same"


@hookimpl
def lich_register_tools(registry, config):
    _registry.append(registry)
    for item in (first, add_second, same_again):
        registry.register(item)
'''

UPSTREAM = Path(__file__).parent.parent / "mcp_client" / "fixture_server.py"


class Notifications:
    """What the server sent the client besides answers: its tools/list_changed count."""

    def __init__(self) -> None:
        self.tools_changed = 0

    async def __call__(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self.tools_changed += 1


async def names(client: Client) -> list[str]:
    return [t.name for t in (await client.list_tools()).tools]


async def changed_tools(client: Client, mode: str, seen: Notifications,
                        change: Any) -> list[str]:
    """Run ``change()`` and wait for the client to hear the tools changed, in its era's
    way: the notification on the connection (handshake), a listen stream's event
    (2026-07-28). Then what a re-list shows."""
    import anyio

    if mode == "legacy":
        await change()
        await async_wait_for(lambda: seen.tools_changed == 1, timeout=BOUND_S,
                             what="notifications/tools/list_changed")
        return await names(client)
    async with client.listen(tools_list_changed=True) as subscription:
        await change()
        with anyio.fail_after(BOUND_S):
            event = await subscription.__anext__()
    assert isinstance(event, mcp.server.subscriptions.ToolsListChanged)
    return await names(client)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_plugin_replacing_its_tools_is_announced_and_the_relist_shows_them(
    work: Path, home: Path, hook_log: Path, stderr: IO[str], mode: str
) -> None:
    (work / "changing.py").write_text(CHANGING_PLUGIN, encoding="utf-8")
    seen = Notifications()
    async with served(work, home, hook_log, "--plugin", "changing.py", stderr=stderr,
                      mode=mode, message_handler=seen) as client:
        capabilities = client.server_capabilities
        before = await names(client)

        async def add() -> None:
            assert text_of(await client.call_tool("add_second", {})) == "added"

        after = await changed_tools(client, mode, seen, add)
        # The same tools again: no change, so nothing to announce; the next real one is.
        assert text_of(await client.call_tool("same_again", {})) == "same"
        called = await client.call_tool("second", {})

    assert capabilities.tools is not None
    assert capabilities.tools.list_changed is True
    assert {"first", "add_second", "same_again"} <= set(before)
    assert "second" not in before
    assert sorted(after) == sorted([*before, "second"])
    assert text_of(called) == "second"
    # One announcement (on a 2026-07-28 connection the listen stream's notification
    # reaches the message handler too): none for the replacement that changed nothing,
    # which would have come before the answer to the call after it.
    assert seen.tools_changed == 1


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_mcp_server_of_the_config_relisting_its_tools_is_passed_on(
    work: Path, home: Path, hook_log: Path, stderr: IO[str], mode: str
) -> None:
    """lich serves the tools of an MCP server it is a client of: when that server
    announces a new tool, lich's own client is told, and sees it."""
    (work / ".lich" / "config.toml").write_text(
        '[approvals]\nallow = ["mcp__up__grow", "mcp__up__sprout"]\n'
        f'[mcp.servers.up]\ncommand = {json.dumps(sys.executable)}\n'
        f'args = [{json.dumps(str(UPSTREAM))}]\nstartup_timeout_s = {BOUND_S}\n',
        encoding="utf-8")
    seen = Notifications()
    async with served(work, home, hook_log, stderr=stderr, mode=mode,
                      message_handler=seen) as client:
        before = await names(client)

        async def grow() -> None:
            grown = await client.call_tool("mcp__up__grow", {"name": "sprout"})
            assert text_of(grown) == "added sprout"

        after = await changed_tools(client, mode, seen, grow)
        sprouted = await client.call_tool("mcp__up__sprout", {})

    assert "mcp__up__grow" in before
    assert "mcp__up__sprout" not in before
    assert set(after) == {*before, "mcp__up__sprout"}
    assert text_of(sprouted) == "I am sprout"


# ---------------------------------------------------------------------- calls


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_read_file_returns_the_file_from_the_work_dir(
    work: Path, home: Path, hook_log: Path, stderr: IO[str], mode: str
) -> None:
    async with served(work, home, hook_log, stderr=stderr, mode=mode) as client:
        result = await client.call_tool("read_file", {"path": "notes.txt"})
        escape = await client.call_tool("read_file", {"path": "../outside.txt"})

    assert result.is_error is False
    assert text_of(result) == "first line\nsecond line\n"
    # The executor's confinement holds for a served call as for a model's.
    assert escape.is_error is True
    assert "outside the work dir" not in text_of(escape)
    assert text_of(escape).startswith("path_escape")


async def test_calls_pass_through_before_and_after_hooks_in_one_session(
    work: Path, home: Path, hook_log: Path, stderr: IO[str]
) -> None:
    async with served(work, home, hook_log, "--plugin", "./guard.py",
                      stderr=stderr) as client:
        allowed = await client.call_tool("read_file", {"path": "notes.txt"})
        blocked = await client.call_tool("read_file", {"path": "secret.txt"})

    assert allowed.is_error is False
    assert text_of(allowed) == "first line\nsecond line\n[checked by guard]"
    assert blocked.is_error is True
    assert text_of(blocked) == "blocked_by_plugin: secret.txt is off limits"
    assert "the secret" not in text_of(blocked)

    # The client closed the connection: the session ends with lich_run_end.
    records = log_once_ended(hook_log)
    hooks = [r["hook"] for r in records if r["hook"] != "event"]
    assert hooks == ["run_start", "before", "before", "run_end"]
    assert records[-1]["reason"] == "final"
    sessions = {r["session"] for r in records}
    assert len(sessions) == 1  # one connection, one session id
    assert [r["work_dir"] for r in records if r["hook"] == "run_start"] == [str(work)]
    events = [r for r in records if r["hook"] == "event"]
    assert [e["type"] for e in events] == [
        "run_start", "tool_call_start", "tool_call_end", "tool_call_start", "tool_call_end",
        "run_end"]
    assert [e["blocked_by"] for e in events if e["type"] == "tool_call_end"] == [None, "guard"]


async def test_a_call_a_hook_asks_approval_for_is_denied_without_an_approver(
    work: Path, home: Path, hook_log: Path, stderr: IO[str]
) -> None:
    target = work / "created.txt"
    async with served(work, home, hook_log, "--plugin", "./guard.py",
                      stderr=stderr) as client:
        result = await client.call_tool("write_file",
                                        {"path": "created.txt", "content": "x"})

    # No approver is registered by `lich mcp serve`: the ask is denied, as in a
    # one-shot run, and the tool never runs.
    assert result.is_error is True
    assert not target.exists()
    assert text_of(result).startswith("approval_unavailable: ")
    records = log_once_ended(hook_log)
    events = [r["type"] for r in records if r["hook"] == "event"]
    assert events == ["run_start", "tool_call_start", "approval_requested",
                      "approval_resolved", "tool_call_end", "run_end"]


async def test_a_failing_tool_is_an_error_result_with_its_error_text(
    work: Path, home: Path, hook_log: Path, stderr: IO[str]
) -> None:
    async with served(work, home, hook_log, "--plugin", "tools_plugin.py",
                      stderr=stderr) as client:
        failed = await client.call_tool("boom", {"reason": "it broke"})
        timed_out = await client.call_tool("slow", {})
        bad_args = await client.call_tool("boom", {})
        half = await client.call_tool("partial", {})
        after = await client.call_tool("peek", {"path": "still serving"})

    assert failed.is_error is True
    assert text_of(failed) == "boom_failed: it broke"
    # The tool's own limit applies: the call is stopped, the server goes on.
    assert timed_out.is_error is True
    assert text_of(timed_out) == "timeout: tool:slow exceeded 0.2s"
    assert bad_args.is_error is True
    assert "reason" in text_of(bad_args)
    # The error first, then what the tool did produce.
    assert half.is_error is True
    assert [b.text for b in half.content if isinstance(b, mcp_types.TextContent)] == [
        "partial_failure: stopped halfway", "the first half"]
    assert after.is_error is False
    assert text_of(after) == "would look at still serving"


# ------------------------------------------------------------------- the wire


#: The raw client's handshake request (a client of the 2025-06-18 protocol).
INITIALIZE: dict[str, Any] = {"id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "raw-test", "version": "1"}}}


class RawClient:
    """JSON-RPC lines to and from a ``lich mcp serve`` process, nothing in between:
    every line it writes to stdout is kept."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.seen: list[bytes] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
        self.proc.stdin.flush()

    def response(self, request_id: int) -> dict[str, Any]:
        """Read lines until the response to ``request_id``; each must be a JSON-RPC
        message."""
        while True:
            line = self.lines.get(timeout=BOUND_S)
            self.seen.append(line)
            mcp_types.jsonrpc_message_adapter.validate_json(line)  # protocol, or it fails
            message: dict[str, Any] = json.loads(line)
            if message.get("id") == request_id:
                return message

    def initialize(self) -> dict[str, Any]:
        self.send(INITIALIZE)
        answer = self.response(1)
        self.send({"method": "notifications/initialized"})
        return answer

    def rest(self) -> list[bytes]:
        """Whatever else the process wrote to stdout, after it exited."""
        self._reader.join(timeout=BOUND_S)
        tail = []
        while not self.lines.empty():
            tail.append(self.lines.get_nowait())
        return tail


def start_raw(work: Path, home: Path, hook_log: Path, stderr: IO[bytes], *extra: str,
              ) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, *serve_args(work, *extra)], cwd=work, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=stderr, env=serve_env(home, hook_log),
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@contextmanager
def raw_served(work: Path, home: Path, hook_log: Path, tmp_path: Path, *extra: str
               ) -> Iterator[tuple[subprocess.Popen[bytes], RawClient, Path]]:
    """``lich mcp serve EXTRA...`` driven by the raw client, past the handshake: the
    process, the client, and the file its stderr goes to. Killed on the way out if it
    is still running."""
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "wb") as err_file:
        proc = start_raw(work, home, hook_log, err_file, *extra)
        try:
            raw = RawClient(proc)
            raw.initialize()
            yield proc, raw, err_path
        finally:
            stop(proc)


def test_stdout_carries_only_the_protocol_whatever_a_plugin_prints(
    work: Path, home: Path, hook_log: Path, tmp_path: Path
) -> None:
    with raw_served(work, home, hook_log, tmp_path, "--plugin", "noisy.py") as (
            proc, raw, err_path):
        raw.send({"id": 2, "method": "tools/list"})
        listed = raw.response(2)
        raw.send({"id": 3, "method": "tools/call",
                  "params": {"name": "noisy", "arguments": {}}})
        called = raw.response(3)
        assert proc.stdin is not None
        proc.stdin.close()  # the client leaves
        code = proc.wait(timeout=BOUND_S)

    assert "noisy" in [t["name"] for t in listed["result"]["tools"]]
    assert called["result"]["isError"] is False
    assert called["result"]["content"] == [{"type": "text", "text": "quiet answer"}]
    assert raw.rest() == []  # nothing after the last response either
    assert all(b"NOISE" not in line for line in raw.seen)
    # The noise went to stderr, where the client's log collects it.
    err = err_path.read_text(encoding="utf-8")
    for noise in ("NOISE at import", "NOISE at registration", "NOISE in a call",
                  "NOISE on fd 1", "NOISE from a child", "NOISE as a warning",
                  "NOISE as a log line"):
        assert noise in err
    # A clean exit when the client closes stdin.
    assert code == 0, err
    assert "Traceback" not in err


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_ends_the_session_and_exits_143(
    work: Path, home: Path, hook_log: Path, tmp_path: Path
) -> None:
    with raw_served(work, home, hook_log, tmp_path, "--plugin", "./guard.py") as (
            proc, _raw, err_path):
        # The client keeps stdin open: only the signal can end the server.
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=BOUND_S)

    err = err_path.read_text(encoding="utf-8")
    assert code == 143, err
    assert "Traceback" not in err
    ends = [r for r in read_log(hook_log) if r["hook"] == "run_end"]
    assert [r["reason"] for r in ends] == ["aborted"]


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigterm_mid_call_stops_the_tool_and_records_the_call(
    work: Path, home: Path, hook_log: Path, tmp_path: Path
) -> None:
    with raw_served(work, home, hook_log, tmp_path, "--plugin", "./guard.py",
                    "--plugin", "tools_plugin.py") as (proc, raw, err_path):
        raw.send({"id": 2, "method": "tools/call", "params": {"name": "hang", "arguments": {}}})
        # The tool itself running, not only its before-hook: the check-hooks and the
        # executor come between, and a SIGTERM there stops a call that never started.
        wait_for(lambda: (work / "hang-started.txt").exists(),
                 timeout=BOUND_S, what="the hanging tool to be running")
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=BOUND_S)

    err = err_path.read_text(encoding="utf-8")
    assert code == 143, err
    assert "Traceback" not in err
    # The tool was stopped, not abandoned to run on after lich exited.
    assert (work / "hang-stopped.txt").read_text(encoding="utf-8") == "stopped"
    records = read_log(hook_log)
    events = [r["type"] for r in records if r["hook"] == "event"]
    assert events == ["run_start", "tool_call_start", "tool_call_end", "run_end"]
    assert [r["reason"] for r in records if r["hook"] == "run_end"] == ["aborted"]


def test_a_client_that_never_initializes_and_leaves_gets_no_output(
    work: Path, home: Path, hook_log: Path, tmp_path: Path
) -> None:
    proc = subprocess.run(
        [sys.executable, *serve_args(work)], cwd=work, input=b"", capture_output=True,
        env=serve_env(home, hook_log), timeout=BOUND_S,
    )

    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == b""


def test_without_the_sdk_the_command_says_how_to_install_it(
    work: Path, home: Path, hook_log: Path, tmp_path: Path
) -> None:
    # A directory earlier on the path whose `mcp` fails to import as a missing SDK would.
    shadow = tmp_path / "shadow"
    (shadow / "mcp").mkdir(parents=True)
    (shadow / "mcp" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'mcp_types'\", name='mcp_types')\n",
        encoding="utf-8")
    env = serve_env(home, hook_log)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(shadow), env.get("PYTHONPATH")) if p)
    proc = subprocess.run(
        [sys.executable, *serve_args(work)], cwd=work, input="", capture_output=True,
        text=True, env=env, timeout=BOUND_S,
    )

    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "pip install 'lich-agent[mcp]'" in proc.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals")
def test_run_by_hand_on_a_terminal_it_says_what_it_is_and_ends_when_the_terminal_does(
    work: Path, home: Path, hook_log: Path, tmp_path: Path
) -> None:
    import pty

    master, slave = pty.openpty()
    err_path = tmp_path / "stderr.txt"
    try:
        with open(err_path, "wb") as err_file:
            proc = subprocess.Popen(
                [sys.executable, *serve_args(work, "--plugin", "./guard.py")], cwd=work,
                stdin=slave, stdout=subprocess.PIPE, stderr=err_file,
                env=serve_env(home, hook_log),
            )
            try:
                os.close(slave)
                slave = -1
                wait_for(lambda: any(r["hook"] == "run_start" for r in read_log(hook_log)),
                         timeout=BOUND_S, what="the server to be serving")
                os.close(master)  # the terminal goes away
                master = -1
                code = proc.wait(timeout=BOUND_S)
                assert proc.stdout is not None
                out = proc.stdout.read()
            finally:
                stop(proc)
    finally:
        for fd in (master, slave):
            if fd >= 0:
                os.close(fd)

    err = err_path.read_text(encoding="utf-8")
    assert "speaks MCP on stdin/stdout" in err
    assert code == 0, err
    assert "Traceback" not in err
    assert out == b""
    assert [r["reason"] for r in read_log(hook_log) if r["hook"] == "run_end"] == ["final"]


def test_a_stdin_that_cannot_be_read_ends_the_session_cleanly(
    work: Path, home: Path, hook_log: Path, tmp_path: Path
) -> None:
    # Descriptor 0 open for writing only: every read fails (EBADF).
    with open(tmp_path / "not-readable", "wb") as stdin:
        proc = subprocess.run(
            [sys.executable, *serve_args(work, "--plugin", "./guard.py")], cwd=work,
            stdin=stdin, capture_output=True, env=serve_env(home, hook_log), timeout=BOUND_S,
        )

    err = proc.stderr.decode()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert proc.stdout == b""
    assert [r["reason"] for r in read_log(hook_log) if r["hook"] == "run_end"] == ["final"]


def test_a_client_that_stops_reading_ends_the_session_cleanly(
    work: Path, home: Path, hook_log: Path, tmp_path: Path
) -> None:
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "wb") as err_file:
        proc = start_raw(work, home, hook_log, err_file, "--plugin", "./guard.py")
        try:
            assert proc.stdout is not None
            assert proc.stdin is not None
            proc.stdout.close()  # nobody reads the answers any more; stdin stays open
            wait_for(lambda: any(r["hook"] == "run_start" for r in read_log(hook_log)),
                     timeout=BOUND_S, what="the server to be serving")
            proc.stdin.write(json.dumps({"jsonrpc": "2.0", **INITIALIZE}).encode() + b"\n")
            proc.stdin.flush()
            code = proc.wait(timeout=BOUND_S)
        finally:
            stop(proc)

    err = err_path.read_text(encoding="utf-8")
    assert code == 0, err
    assert "Traceback" not in err
    assert [r["reason"] for r in read_log(hook_log) if r["hook"] == "run_end"] == ["final"]

