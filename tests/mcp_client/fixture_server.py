"""An MCP server for the contract tests, built on the SDK's ``MCPServer``.

``python fixture_server.py stdio`` serves over stdio; ``python fixture_server.py
http`` binds 127.0.0.1 on a free port, prints ``PORT <n>`` on stdout and serves
streamable HTTP at ``/mcp``. Over HTTP it behaves like a server that predates the
2026-07-28 protocol (``server/discover`` is refused, so clients use the
initialize handshake and a session id), and ``POST /expire?answer=A`` forgets
every session it has handed out, as a server does when it expires idle sessions;
a request in one of them is then answered as ``A`` says (:data:`SESSION_LOST`: the
ways real servers say it), and ``&always=1`` forgets every later session too (a
server that keeps losing them).

Environment: ``FIXTURE_HANG=1`` hangs before answering anything (a server stuck at
start); ``FIXTURE_STDERR=text`` writes ``text`` to stderr at start;
``FIXTURE_PID_FILE=path`` writes the server's pid there first;
``FIXTURE_RAW_RESULTS=1`` (stdio) writes the answers of ``untyped`` without their
``resultType`` (as servers predating that 2026-07-28 field do) and of ``malformed``
with a ``content`` that is no list (a result no revision allows).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import sys
import time
from pathlib import Path

# Before the SDK's imports (a second or more on a busy machine): a test may stop the
# process early and still needs its pid.
if os.environ.get("FIXTURE_PID_FILE"):
    Path(os.environ["FIXTURE_PID_FILE"]).write_text(str(os.getpid()), encoding="utf-8")

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image
from mcp_types import CallToolResult, ToolAnnotations

# The smallest valid PNG (1x1, transparent).
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)

app = MCPServer("fixture", version="1.0")


@app.tool(annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False))
def echo(text: str) -> str:
    """Echo the text back."""
    return text


@app.tool(annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False))
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@app.tool(annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False))
async def slow(seconds: float, marker: str = "", started: str = "") -> str:
    """Sleep, then answer; writes 'cancelled' to the marker file if cancelled, and
    'started' to the started file first (so a test cancels a call the server runs)."""
    if started:
        Path(started).write_text("started", encoding="utf-8")  # noqa: ASYNC240 - tiny
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        if marker:
            # Blocking, on purpose: the cancelled task may not await again.
            Path(marker).write_text("cancelled", encoding="utf-8")  # noqa: ASYNC240
        raise
    return f"slept {seconds}"


@app.tool(annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False))
def trace_context(ctx: Context) -> str:
    """The W3C trace context the request carried in its _meta, as JSON."""
    meta = ctx.request_context.meta or {}
    return json.dumps({key: meta[key] for key in ("traceparent", "tracestate") if key in meta})


@app.tool()
def fail(message: str) -> str:
    """Fail with the message."""
    raise ToolError(message)


@app.tool()
def structured() -> CallToolResult:
    """Structured content and no text."""
    return CallToolResult(content=[], structured_content={"answer": 42, "unit": "none"})


@app.tool()
def picture() -> Image:
    """A tiny PNG."""
    return Image(data=PNG, format="png")


@app.tool(annotations=ToolAnnotations(destructive_hint=True))
def crash() -> str:
    """Kill the server in the middle of the call."""
    sys.stdout.flush()
    os._exit(3)


@app.tool()
async def grow(name: str, ctx: Context) -> str:
    """Add a tool called NAME and announce that the tool list changed."""

    def added() -> str:
        return f"I am {name}"

    app.add_tool(added, name=name, description=f"the added tool {name}")
    await ctx.notify_tools_changed()  # 2026-07-28 clients: the listen stream
    try:
        await ctx.session.send_tool_list_changed()  # earlier clients: a notification
    except Exception:
        pass
    return f"added {name}"


def _rpc_error(code: int, message: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": None,
                       "error": {"code": code, "message": message}}).encode()


#: How servers answer a request in a session they no longer have: (status, body).
SESSION_LOST = {
    "plain404": (404, b'{"error": "session not found"}'),  # no JSON-RPC body
    "python-sdk": (404, _rpc_error(-32600, "Session not found")),  # the Python SDK
    "ts-sdk-404": (404, _rpc_error(-32001, "Session not found")),  # the TypeScript SDK
    "ts-sdk-400": (400, _rpc_error(-32000, "Bad Request: No valid session ID provided")),
}


@app.tool(annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False))
def research(topic: str) -> str:
    """Research a topic: offered only as a task (execution.taskSupport "required"), as
    server-everything's simulate-research-query is."""
    return f"researched {topic}"


_plain_list_tools = app.list_tools


async def _list_tools_marking_tasks():  # type: ignore[no-untyped-def]
    tools = await _plain_list_tools()
    return [t.model_validate({**t.model_dump(by_alias=True, exclude_unset=True),
                              "execution": {"taskSupport": "required"}})
            if t.name == "research" else t for t in tools]


app.list_tools = _list_tools_marking_tasks  # type: ignore[method-assign]


@app.tool(annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False))
def big(megabytes: float) -> str:
    """A text result of that many MiB (and its structured copy: twice that on the wire)."""
    return "x" * int(megabytes * 1024 * 1024)


@app.tool(annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False))
def untyped() -> str:
    """Answered without resultType under FIXTURE_RAW_RESULTS."""
    return "UNTYPED-RESULT"


@app.tool(annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False))
def malformed() -> str:
    """Answered with a content that is no list under FIXTURE_RAW_RESULTS."""
    return "MALFORMED-RESULT"


def _raw_results_stdio() -> None:
    """Serve stdio through a writer that spoils two tools' answers (module docstring)."""
    from io import TextIOWrapper

    import mcp.server.mcpserver.server as server_module
    from mcp.server.stdio import stdio_server

    out = anyio.wrap_file(TextIOWrapper(sys.stdout.buffer, encoding="utf-8"))

    class Spoiling:
        async def write(self, text: str) -> None:
            if "UNTYPED-RESULT" in text or "MALFORMED-RESULT" in text:
                data = json.loads(text)
                result = data.get("result", {})
                if "UNTYPED-RESULT" in text:
                    result.pop("resultType", None)
                else:
                    result["content"] = "MALFORMED-RESULT, not a list"
                text = json.dumps(data) + "\n"
            await out.write(text)

        async def flush(self) -> None:
            await out.flush()

    stdin = anyio.wrap_file(TextIOWrapper(sys.stdin.buffer, encoding="utf-8"))
    server_module.stdio_server = lambda: stdio_server(stdin=stdin, stdout=Spoiling())  # type: ignore[assignment,arg-type]
    app.run("stdio")


def _legacy_http(asgi):
    """Refuse server/discover (an older server) and answer as told for expired sessions."""
    expired: set[str] = set()
    seen: set[str] = set()
    lost = {"answer": "plain404", "always": False}

    async def wrapped(scope, receive, send):
        if scope["type"] != "http":
            return await asgi(scope, receive, send)
        if scope["path"] == "/expire":
            from urllib.parse import parse_qs

            query = parse_qs(scope.get("query_string", b"").decode())
            lost["answer"] = query.get("answer", ["plain404"])[0]
            lost["always"] = query.get("always", [""])[0] == "1"
            expired.update(seen)
            await _reply(send, 200, b"{}")
            return
        headers = dict(scope.get("headers") or [])
        session = headers.get(b"mcp-session-id", b"").decode()
        if session:
            seen.add(session)
            if session in expired:
                await _reply(send, *SESSION_LOST[str(lost["answer"])])
                return
        body = b""
        if scope["method"] == "POST":
            more = True
            while more:
                message = await receive()
                body += message.get("body", b"")
                more = message.get("more_body", False)
            try:
                request = json.loads(body)
            except ValueError:
                request = None
            if session and lost["always"] and isinstance(request, dict) \
                    and request.get("method") == "tools/call":
                # A session that gets through its handshake, and is lost at its first call.
                expired.add(session)
                await _reply(send, *SESSION_LOST[str(lost["answer"])])
                return
            if isinstance(request, dict) and request.get("method") == "server/discover":
                error = {"jsonrpc": "2.0", "id": request.get("id"),
                         "error": {"code": -32601, "message": "Method not found"}}
                await _reply(send, 200, json.dumps(error).encode())
                return
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        async def record(message):
            if message["type"] == "http.response.start":
                for key, value in message.get("headers", []):
                    if key.lower() == b"mcp-session-id":
                        seen.add(value.decode())
            await send(message)

        await asgi(scope, replay if scope["method"] == "POST" else receive, record)

    return wrapped


async def _reply(send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": body})


def main() -> None:
    if os.environ.get("FIXTURE_STDERR"):
        print(os.environ["FIXTURE_STDERR"], file=sys.stderr, flush=True)
    if os.environ.get("FIXTURE_HANG"):
        while True:
            time.sleep(3600)
    transport = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if transport == "stdio":
        if os.environ.get("FIXTURE_RAW_RESULTS"):
            _raw_results_stdio()
            return
        app.run("stdio")
        return
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # connections wait in the backlog until uvicorn accepts them
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(_legacy_http(app.streamable_http_app()),
                                           log_level="warning", lifespan="on"))
    print(f"PORT {port}", flush=True)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
