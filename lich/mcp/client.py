"""The MCP client side: one background event loop owning every server connection
of one agent.

Why a loop of its own, in a daemon thread: the SDK's sessions live in anyio task
groups that must be entered and exited by the same task, and an agent is
assembled in one place (synchronously, maybe inside another event loop — the
TUI's, the gateway's) and closed in another. Here each server is one *owner
task* that enters the SDK client, waits, and exits it; tool calls from any
thread or loop are handed to this loop (:meth:`McpRuntime.call`) and run as
tasks beside it. So a client opened during agent assembly closes cleanly
whichever loop the agent later runs on, and a server that hangs blocks only its
own task.

Failures are data: every server ends start-up ``connected`` or ``failed`` with
a reason (never an exception out of :meth:`McpRuntime.start`). A stdio server's
stderr goes to ``<log_dir>/<server>.log``, never the terminal. A server that
dies is restarted lazily, on the next call to one of its tools, after a backoff
(:mod:`lich.backoff`) — once: a server that dies again before any call succeeded
stays down. A streamable-HTTP session the server lost (it restarted, or expired
the session: "Session terminated", "Session not found", "No valid session ID"; a
404 or a 400) is re-initialised and the call sent again, once per call (the server
refused it, so it did not run).

Context variables (the OpenTelemetry span current where a tool was called, among
others) cross the hand-over with each call: the call's task runs in a copy of the
caller's context, so the span the SDK starts around the request is a child of the
caller's span (lich's ``execute_tool``) and the ``traceparent`` it sends names it.
An owner task never does: it runs in a context of its own, empty, whichever call
(re)started it, because the session outlives the call and everything it sends on
its own (the tool-list subscription, the refreshes it triggers) belongs to no call.
Only :mod:`contextvars` is used: this module knows nothing of OpenTelemetry.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import datetime
import logging
import re
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from pathlib import Path
from typing import IO, Any, Generic, Literal, TypeAlias, TypeVar

import anyio
import anyio.abc
import mcp_types
from attrs import define, field
from mcp import Client, StdioServerParameters
from mcp.client.stdio import get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from lich.backoff import Backoff
from lich.guards import truncate_text
from lich.mcp.cache import CachedServer, ToolCache, cache_key
from lich.mcp.config import McpSettings, ServerConfig
from lich.mcp.results import map_result
from lich.mcp.stdio import MAX_MESSAGE_BYTES, TOO_LARGE, capped_stdio
from lich.private_files import open_private_log
from lich.processes import DIRECT, Launch, ProcessRunner, launched
from lich.types import ToolResult

__all__ = ["McpRuntime", "ServerState", "Status"]

log = logging.getLogger("lich.mcp")

T = TypeVar("T")
#: ``idle``: not started; its tools are the ones its last start listed (lich.mcp.cache),
#: and it is started for the first call of one of them.
Status: TypeAlias = Literal["idle", "connecting", "connected", "failed", "disconnected",
                            "closed"]

# A log file bigger than this at start is moved to <name>.log.1 (one generation kept).
_LOG_ROTATE_BYTES = 1024 * 1024
_MAX_TOOL_PAGES = 100
_CLOSE_GRACE_S = 8.0  # the SDK's own stdio shutdown is bounded by about 4.5 s


@define
class ServerState:
    """What is known about one server, as ``lich mcp list`` shows it."""

    name: str
    transport: str
    status: Status = "connecting"
    error: str | None = None
    tools: list[Any] = field(factory=list)  # mcp_types.Tool, filtered by tools_enabled/disabled
    #: Tools the server offers only as tasks (``execution.taskSupport = "required"``):
    #: lich does not call tools as tasks, so these are not offered to the model.
    task_only: list[str] = field(factory=list)
    protocol_version: str | None = None
    server_name: str | None = None
    server_version: str | None = None
    log_path: str | None = None
    restarts: int = 0  # after the server died
    connects: int = 0  # every successful start (restarts and re-initialised sessions too)


def _tolerate(item: Any) -> Any:
    """A message as the SDK may read it: a result without ``resultType`` gets the
    ``"complete"`` the 2026-07-28 revision says an absent one means (servers written
    before that field was added leave it out, and the SDK's validation of that
    revision requires it). Earlier revisions ignore the field."""
    message = getattr(item, "message", None)
    result = getattr(message, "result", None)
    if isinstance(result, dict) and "resultType" not in result:
        result["resultType"] = "complete"
    return item


class _WatchedReadStream:
    """The transport's read stream, telling the connection when it ends (a stdio
    server that exits between calls is then known to be gone before the next call
    is sent, and is restarted for it instead of failing it), and reading what the
    protocol allows the SDK would refuse (:func:`_tolerate`)."""

    def __init__(self, inner: Any, on_end: Callable[[], None] | None = None) -> None:
        self._inner = inner
        self._on_end = on_end or (lambda: None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def __aenter__(self) -> _WatchedReadStream:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)

    def __aiter__(self) -> _WatchedReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return _tolerate(await self._inner.__anext__())
        except (StopAsyncIteration, anyio.EndOfStream, anyio.ClosedResourceError):
            self._on_end()
            raise

    async def receive(self) -> Any:
        try:
            return _tolerate(await self._inner.receive())
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._on_end()
            raise


class _Connection:
    """One server: its owner task, its SDK client while connected, its state."""

    def __init__(self, config: ServerConfig, runtime: McpRuntime) -> None:
        self.config = config
        self.runtime = runtime
        self.state = ServerState(config.name, config.transport)
        if config.transport == "stdio":
            self.state.log_path = str(runtime.log_dir / f"{_file_name(config.name)}.log")
        self.client: Client | None = None
        self._stop: asyncio.Event | None = None
        self._owner: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._backoff = Backoff(0.5, 5.0)
        self._died_at = 0.0
        self._restarted_since_success = False
        self._closing = False

    # ------------------------------------------------------------- start, stop

    async def open(self) -> None:
        """Start the server and list its tools, under ``startup_timeout_s``; the
        outcome is in :attr:`state`."""
        self.state.status, self.state.error = "connecting", None
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        # A fresh, empty context, not the current one (a restart runs inside the call
        # that needed it): the SDK's session tasks started in the owner inherit its
        # context for the session's whole life, and must not be parented to a span
        # that ends with the call (see the module docstring).
        self._owner = asyncio.get_running_loop().create_task(
            self._own(ready, self._stop), context=contextvars.Context())
        timeout = self.config.startup_timeout_s
        try:
            await asyncio.wait_for(asyncio.shield(ready), timeout)
        except TimeoutError:
            self._fail(f"did not start within {timeout:g}s (startup_timeout_s){self._see_log()}")
            self._stop_in_background()
        except Exception as exc:
            self._fail(f"{_describe(exc)}{self._see_log()}")
            self._stop_in_background()

    def _stop_in_background(self) -> None:
        # Set now, not when the task below runs: an owner that gets through its
        # handshake in between must see it and not publish itself as connected.
        if self._stop is not None:
            self._stop.set()
        # A server that hung at start takes the SDK's shutdown sequence (stdin closed,
        # then SIGTERM, then SIGKILL: seconds) to go: the other servers, and the agent
        # waiting for all of them, must not wait for that.
        task = asyncio.ensure_future(self._stop_owner())
        self.runtime.keep(task)

    def _fail(self, reason: str) -> None:
        self.state.status, self.state.error = "failed", reason
        self.state.tools = []

    def _see_log(self) -> str:
        return f" (its stderr: {self.state.log_path})" if self.state.log_path else ""

    async def _stop_owner(self) -> None:
        if self._stop is not None:
            self._stop.set()
        owner = self._owner
        if owner is None or owner.done():
            return
        if self._serving:
            # Serving: the owner sees the stop event and leaves the client cleanly.
            done, _ = await asyncio.wait({owner}, timeout=_CLOSE_GRACE_S)
            if done:
                return
        # A server stuck in its handshake never looks at the stop event: cancel it —
        # through the owner's anyio scope, not with task.cancel(). The SDK's stdio
        # shutdown (stdin closed, SIGTERM, SIGKILL) runs in a shielded anyio scope, which
        # an anyio cancellation respects and a native task.cancel() does not: that one
        # broke into the shutdown and left the server process running after lich exited.
        scope = self._scope
        if scope is not None:
            scope.cancel()
        else:
            owner.cancel()
        done, _ = await asyncio.wait({owner}, timeout=_CLOSE_GRACE_S)
        if not done:
            owner.cancel()  # the SDK's bounded shutdown overran: give the task up

    async def close(self) -> None:
        """Stop the server for good."""
        self._closing = True
        await self._stop_owner()
        self.state.status = "closed"
        self.client = None

    async def _own(self, ready: asyncio.Future[None], stop: asyncio.Event) -> None:
        """The owner task: enters the SDK client, serves until told to stop or the
        connection ends, exits the client — all in this one task."""
        ended = asyncio.Event()
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                await self._serve(ready, stop, ended)
            if scope.cancelled_caught and not ready.done():
                ready.cancel()
        except asyncio.CancelledError:
            if not ready.done():
                ready.cancel()
            raise
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(_unwrap(exc))
            elif not self._closing:
                log.debug("mcp server %s: connection ended: %s", self.config.name, exc)
        finally:
            self._scope = None
            self.client = None
            self._tg = None
            self._serving = False
            if ready.done() and not ready.cancelled() and ready.exception() is None \
                    and not self._closing and not stop.is_set():
                self._mark_dead("closed the connection")

    async def _serve(self, ready: asyncio.Future[None], stop: asyncio.Event,
                     ended: asyncio.Event) -> None:
        """Enter the SDK client, list the tools, serve until ``stop`` or the end of the
        connection, leave the client (the owner task's body, inside its cancel scope)."""
        client = Client(self._transport(ended.set), cache=None,
                        message_handler=self._on_message,
                        client_info=mcp_types.Implementation(name="lich", version=_version()))
        async with client:
            tools = await self._list_tools(client)
            if stop.is_set():
                return  # given up on while it started: leave the client, say nothing
            self.client = client
            info = client.server_info
            self.state.protocol_version = client.protocol_version
            self.state.server_name = info.name if info else None
            self.state.server_version = info.version if info else None
            self.state.tools = tools
            self.state.status, self.state.error = "connected", None
            self.state.connects += 1
            self.runtime.remember(self)
            async with anyio.create_task_group() as tg:
                self._tg = tg
                if _wants_listen(client):
                    # Subscribed before the server counts as started: a change a
                    # first call makes must not be announced to no one.
                    await tg.start(self._listen, client)
                self._serving = True
                if not ready.done():
                    ready.set_result(None)
                stopped = asyncio.ensure_future(stop.wait())
                gone = asyncio.ensure_future(ended.wait())
                try:
                    await asyncio.wait({stopped, gone}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stopped.cancel()
                    gone.cancel()
                tg.cancel_scope.cancel()

    _tg: Any = None
    _scope: anyio.CancelScope | None = None
    _serving = False
    _refresh: asyncio.Task[None] | None = None

    def _mark_dead(self, why: str) -> None:
        if self.state.status == "connected":
            self.state.status = "disconnected"
            self.state.error = why
            self._died_at = time.monotonic()

    @contextlib.asynccontextmanager
    async def _transport(self, on_end: Callable[[], None]) -> AsyncIterator[Any]:
        config = self.config
        if config.command is not None:
            # The server gets the environment it is configured with, over the SDK's
            # few defaults (HOME, PATH, ...): none of lich's own variables, no key.
            spec = Launch(
                argv=(config.command, *config.args),
                env={**get_default_environment(), **config.env},
                cwd=str(self.runtime.work_dir / (config.cwd or ".")),
                kind="mcp", owner=f"mcp:{config.name}",
            )
            with _open_log(self.state.log_path, config) as errlog:
                async with launched(self.runtime.runner, spec) as run:
                    if sys.platform != "win32":
                        # Every message read with a cap, in linear time (lich.mcp.stdio).
                        async with capped_stdio(run.argv, run.env, run.cwd, errlog) as (
                                read, write):
                            yield _WatchedReadStream(read, on_end), write
                        return
                    params = StdioServerParameters(
                        command=run.argv[0], args=list(run.argv[1:]), env=dict(run.env),
                        cwd=run.cwd,
                    )
                    async with stdio_client(params, errlog=errlog) as (read, write):
                        yield _WatchedReadStream(read, on_end), write
            return
        import httpx2

        assert config.url is not None
        async with httpx2.AsyncClient(
            headers=dict(config.headers),
            timeout=httpx2.Timeout(30.0, read=max(300.0, config.timeout_s)),
        ) as http, streamable_http_client(config.url, http_client=http) as (read, write):
            yield _WatchedReadStream(read), write

    # ----------------------------------------------------------------- tools

    async def _list_tools(self, client: Client) -> list[Any]:
        tools: list[Any] = []
        cursor: str | None = None
        for _ in range(_MAX_TOOL_PAGES):
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        wanted = [t for t in tools if self.config.wants_tool(t.name)]
        # A task-only tool answers a plain call with -32601 every time: offering it to
        # the model would only waste its turns. Named in `lich mcp list` instead.
        self.state.task_only = [t.name for t in wanted if _task_only(t)]
        return [t for t in wanted if not _task_only(t)]

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification) and self.client:
            # A task of its own: listing the tools is a request, and this handler runs
            # in the session's receive loop, which must go on to read the answer.
            self._refresh = asyncio.ensure_future(self._refresh_tools())
            self.runtime.keep(self._refresh)

    async def _listen(self, client: Client, *,
                      task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
                      ) -> None:
        # 2026-07-28 servers send change events only on a subscriptions/listen stream;
        # its notifications reach _on_message like a legacy server's.
        started = False
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                task_status.started()
                started = True
                async for _event in subscription:
                    pass
        except Exception as exc:
            log.debug("mcp server %s: no tool-change subscription: %s", self.config.name, exc)
        finally:
            if not started:
                task_status.started()

    async def _refresh_tools(self) -> None:
        client = self.client
        if client is None:
            return
        try:
            tools = await self._list_tools(client)
        except Exception as exc:
            log.warning("mcp server %s announced new tools, listing them failed: %s",
                        self.config.name, _describe(exc))
            return
        self.state.tools = tools
        self.runtime.remember(self)
        self.runtime.tools_changed(self.config.name)

    # ----------------------------------------------------------------- calls

    async def _ensure(self) -> Client | str:
        """The connected client, restarting a dead server once; or why there is none."""
        async with self._lock:
            if self.client is not None and self.state.status == "connected":
                return self.client
            name = self.config.name
            if self._closing:
                return f"mcp_disconnected: server {name!r} is closed"
            if self.state.status == "idle":
                # Registered from the cache: started now, for its first call.
                cached = [t.model_dump(by_alias=True, exclude_none=True)
                          for t in self.state.tools]
                await self.open()
                if not self._connected():
                    self.runtime.forget(self)
                    return (f"mcp_unavailable: server {name!r} did not start: "
                            f"{self.state.error}")
                if [t.model_dump(by_alias=True, exclude_none=True)
                        for t in self.state.tools] != cached:
                    self.runtime.tools_changed(name)  # the model gets the new list next
                assert self.client is not None
                return self.client
            if self.state.status == "failed" and self.state.restarts == 0 \
                    and self._died_at == 0.0:
                return f"mcp_unavailable: server {name!r} did not start: {self.state.error}"
            if self._restarted_since_success:
                return (f"mcp_disconnected: server {name!r} died again after a restart "
                        f"({self.state.error}); not restarting{self._see_log()}")
            wait = self._backoff.next_delay() - (time.monotonic() - self._died_at)
            if wait > 0:
                await asyncio.sleep(wait)
            old_tools = [t.name for t in self.state.tools]
            await self.open()
            self.state.restarts += 1
            self._restarted_since_success = True
            if self.state.status != "connected" or self.client is None:
                self._died_at = time.monotonic()
                return (f"mcp_disconnected: server {name!r} could not be restarted: "
                        f"{self.state.error}")
            log.info("mcp server %s restarted", name)
            if [t.name for t in self.state.tools] != old_tools:
                self.runtime.tools_changed(name)
            return self.client

    def _connected(self) -> bool:
        return self.state.status == "connected" and self.client is not None

    async def call(self, tool: str, args: Mapping[str, Any]) -> ToolResult:
        """Call ``tool``; every failure is a failed :class:`ToolResult`."""
        for attempt in range(2):
            client = await self._ensure()
            if isinstance(client, str):
                return ToolResult.failure(client)
            try:
                result = await client.call_tool(tool, dict(args))
            except MCPError as exc:
                code = exc.error.code
                # First: the TypeScript SDK's "No valid session ID" shares its code (-32000)
                # with the SDK's own CONNECTION_CLOSED; the message tells them apart.
                if self.config.transport == "http" and _session_expired(exc):
                    # The server refused the request (its session is gone): nothing ran.
                    if attempt == 0:
                        log.info("mcp server %s lost its session (%s); re-initialising",
                                 self.config.name, exc.error.message)
                        await self._reinitialise()
                        continue
                    break
                if (exc.error.message or "").startswith(TOO_LARGE):
                    return ToolResult.failure(
                        f"mcp_result_too_large: server {self.config.name!r} answered with "
                        f"more than the {MAX_MESSAGE_BYTES // (1024 * 1024)} MiB lich reads "
                        f"of one message ({exc.error.message.removeprefix(TOO_LARGE + ': ')});"
                        " nothing of it was kept: ask for less")
                if code in (mcp_types.METHOD_NOT_FOUND, mcp_types.INVALID_PARAMS) \
                        and "unknown tool" in (exc.error.message or "").lower():
                    # The list this run offered is stale (a cached one, or the server
                    # changed without saying): the next start lists the tools again.
                    self.runtime.forget(self)
                if code == mcp_types.CONNECTION_CLOSED:
                    self._mark_dead("closed the connection during a call")
                    await self._stop_owner_quietly()
                    return ToolResult.failure(
                        f"mcp_disconnected: server {self.config.name!r} closed the connection "
                        f"during the call (it is restarted on the next call){self._see_log()}")
                message = truncate_text(str(exc), 2000, style="inline")
                return ToolResult.failure(f"mcp_error: {message}")
            except ValidationError as exc:
                # A result the SDK cannot read: the model gets what is wrong, in a line,
                # not pydantic's multi-line dump (which quotes the result's data).
                return ToolResult.failure(_protocol_error(self.config.name, exc))
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError) as exc:
                self._mark_dead(_describe(exc))
                await self._stop_owner_quietly()
                return ToolResult.failure(
                    f"mcp_disconnected: server {self.config.name!r}: {_describe(exc)}")
            self._restarted_since_success = False
            self._backoff.reset()
            refresh = self._refresh
            if refresh is not None and not refresh.done():
                # The call changed the server's tools (the notification came before its
                # answer): the new list is in place before the model hears the result.
                await asyncio.wait({refresh}, timeout=self.config.timeout_s)
            return map_result(result)
        return ToolResult.failure(f"mcp_disconnected: server {self.config.name!r} lost its "
                                  "session again right after re-initialising (it is "
                                  "re-initialised again on the next call)")

    async def _stop_owner_quietly(self) -> None:
        with contextlib.suppress(Exception):
            await self._stop_owner()

    async def _reinitialise(self) -> None:
        async with self._lock:
            await self._stop_owner_quietly()
            await self.open()


def _protocol_error(server: str, exc: ValidationError) -> str:
    """``mcp_protocol_error: …`` for a result that failed the SDK's validation: where
    and what, never the offending value."""
    errors = exc.errors(include_url=False, include_input=False)
    first: Mapping[str, Any] = errors[0] if errors else {}
    where = ".".join(str(part) for part in first.get("loc", ())) or "the result"
    what = str(first.get("msg", "invalid"))
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return (f"mcp_protocol_error: server {server!r} answered tools/call with a result that "
            f"does not follow the protocol: {where}: {what}{more}")


def _task_only(tool: Any) -> bool:
    """Whether the server accepts calls of ``tool`` only as tasks (lich makes none)."""
    execution = getattr(tool, "execution", None)
    return getattr(execution, "task_support", None) == "required"


def _wants_listen(client: Client) -> bool:
    version = client.protocol_version or ""
    caps = client.server_capabilities
    return version >= "2026-07-28" and bool(caps.tools and caps.tools.list_changed)


# How servers say a session is gone, in the JSON-RPC error the SDK hands back: its own
# "Session terminated" (a 404 without a JSON-RPC body), the Python SDK's "Session not
# found" (404, -32600), the TypeScript SDK's "Session not found" (404, -32001) and "Bad
# Request: No valid session ID provided" (400, -32000), and the like ("expired",
# "unknown", "invalid"). Only a refusal of the request as a whole: nothing ran.
_SESSION_LOST = re.compile(
    r"\bsession\b.{0,40}\b(?:terminated|not found|expired|unknown|invalid|no longer)\b"
    r"|\b(?:no valid|unknown|invalid|expired)\b.{0,20}\bsession\b",
    re.IGNORECASE)
_SESSION_LOST_CODES = frozenset({mcp_types.INVALID_REQUEST, -32000, -32001})


def _session_expired(exc: MCPError) -> bool:
    """Whether the server refused the request because it no longer has the session."""
    return exc.error.code in _SESSION_LOST_CODES and \
        _SESSION_LOST.search(exc.error.message or "") is not None


def _unwrap(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    exc = _unwrap(exc)
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or exc}"
    if isinstance(exc, MCPError):
        return f"MCP error {exc.error.code}: {exc.error.message}"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _file_name(server: str) -> str:
    from lich.mcp.naming import sanitise

    return sanitise(server)


def _version() -> str:
    # lich's own version, not the installed metadata's: the distribution is named
    # `lich-agent`, and a checkout on sys.path may have no metadata at all.
    from lich import __version__

    return __version__


@contextlib.contextmanager
def _open_log(path: str | None, config: ServerConfig) -> Any:
    """The server's stderr log, appended to, with a line marking this start; private
    (``0600`` in ``0700`` directories): a server's errors may quote its keys."""
    assert path is not None
    log_file = Path(path)
    with contextlib.suppress(OSError):
        if log_file.stat().st_size > _LOG_ROTATE_BYTES:
            log_file.replace(log_file.with_name(log_file.name + ".1"))
    stream: IO[str] = open_private_log(log_file)
    try:
        now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        stream.write(f"--- lich: starting {config.command} at {now}\n")
        stream.flush()
        yield stream
    finally:
        stream.close()


class _Handover(Generic[T]):
    """One coroutine handed from a caller's event loop to the runtime's, and its
    outcome handed back (:meth:`McpRuntime._hand_over`)."""

    __slots__ = ("_caller", "_context", "_coro", "_task", "waiter")

    def __init__(self, coro: Coroutine[Any, Any, T], caller: asyncio.AbstractEventLoop) -> None:
        self._coro = coro
        self._caller = caller
        # The caller's context, so that the request span the SDK starts nests under
        # the caller's span (the module docstring).
        self._context = contextvars.copy_context()
        self._task: asyncio.Task[T] | None = None
        #: Resolved on the caller's loop with the task's result, exception or cancellation.
        self.waiter: asyncio.Future[T] = caller.create_future()

    def start(self) -> None:
        """Start the task (on the runtime's loop)."""
        self._task = asyncio.get_running_loop().create_task(self._coro, context=self._context)
        self._task.add_done_callback(self._finished)

    def cancel(self) -> None:
        """Cancel the task (on the runtime's loop): its caller stopped waiting."""
        if self._task is not None:
            self._task.cancel()

    def _finished(self, task: asyncio.Task[T]) -> None:
        # On the runtime's loop. The exception is taken here, so that it counts as
        # retrieved even when no one waits for it any more.
        error = None if task.cancelled() else task.exception()
        with contextlib.suppress(RuntimeError):  # the caller's loop is closed: no one waits
            self._caller.call_soon_threadsafe(self._deliver, task, error)

    def _deliver(self, task: asyncio.Task[T], error: BaseException | None) -> None:
        # On the caller's loop.
        if self.waiter.done():  # cancelled by the caller meanwhile
            return
        if task.cancelled():
            self.waiter.cancel()
        elif error is not None:
            self.waiter.set_exception(error)
        else:
            self.waiter.set_result(task.result())


class McpRuntime:
    """Every enabled server of one :class:`~lich.mcp.config.McpSettings`, on one
    background event loop.

    :param settings: the checked ``[mcp]`` table.
    :param work_dir: where stdio servers run (their ``cwd`` is relative to it).
    :param log_dir: where each stdio server's stderr is written.
    :param runner: what the stdio servers are started through (:mod:`lich.processes`).
    :param cache: where the servers' tool lists are kept between runs
        (:mod:`lich.mcp.cache`); ``None``: every server is started at :meth:`start`.
    """

    def __init__(self, settings: McpSettings, *, work_dir: str | Path, log_dir: str | Path,
                 runner: ProcessRunner | None = None, cache: ToolCache | None = None) -> None:
        self.settings = settings
        self.cache = cache
        self.runner: ProcessRunner = DIRECT if runner is None else runner
        self.work_dir = Path(work_dir)
        self.log_dir = Path(log_dir)
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self.connections = {s.name: _Connection(s, self) for s in settings.enabled()}
        self._changed: set[str] = set()
        self._changed_lock = threading.Lock()
        #: Called (on the runtime's loop) after a server's tool list changed: how the
        #: registry holding these tools is told a refresh is wanted.
        self.on_tools_changed: Callable[[], None] | None = None
        self._closed = False
        self._background: set[asyncio.Future[Any]] = set()

    def keep(self, task: asyncio.Future[Any]) -> None:
        """Hold a reference to a background task of the runtime's loop until it ends."""
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _ensure_thread(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop.run_forever, name="lich-mcp",
                                            daemon=True)
            self._thread.start()

    def _submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run ``coro`` as a task of the runtime's loop, in a copy of the calling
        thread's context; for the blocking callers (:meth:`start`, :meth:`close`)."""
        self._ensure_thread()
        # run_coroutine_threadsafe creates the task in a callback scheduled with
        # call_soon_threadsafe, which runs in the context current when it is scheduled
        # (asyncio's documented default). The copy is taken here explicitly because
        # the span nesting depends on it being the caller's.
        return contextvars.copy_context().run(asyncio.run_coroutine_threadsafe, coro, self._loop)

    def start(self) -> list[ServerState]:
        """Connect every server in parallel, each under its own startup timeout;
        blocks until all are connected or failed. Never raises for a server.

        With a :attr:`cache`, a server whose tool list it holds is not started: it is
        ``idle``, its tools the cached ones, and it starts for its first call."""
        waiting = []
        for connection in self.connections.values():
            cached = self.cache.get(self._key(connection)) if self.cache is not None else None
            if cached is None:
                waiting.append(connection)
                continue
            state = connection.state
            state.status, state.tools, state.task_only = "idle", cached.tools, cached.task_only
            state.server_name, state.server_version = cached.server_name, cached.server_version
            state.protocol_version = cached.protocol_version
        if waiting:
            self._submit(self._open_all(waiting)).result()
        return self.states()

    async def _open_all(self, connections: list[_Connection]) -> None:
        await asyncio.gather(*(c.open() for c in connections))
        for connection in connections:
            if connection.state.status == "failed":
                self.forget(connection)

    def _key(self, connection: _Connection) -> str:
        return cache_key(connection.config, self.work_dir)

    def remember(self, connection: _Connection) -> None:
        """Store what ``connection``'s server listed (it started, or its tools changed)."""
        if self.cache is None:
            return
        state = connection.state
        self.cache.put(self._key(connection), CachedServer(
            list(state.tools), list(state.task_only), state.server_name,
            state.server_version, state.protocol_version))

    def forget(self, connection: _Connection) -> None:
        """Drop ``connection``'s cached tool list (the next run starts the server)."""
        if self.cache is not None:
            self.cache.drop(self._key(connection))

    def states(self) -> list[ServerState]:
        """Each server's state, in config order."""
        return [c.state for c in self.connections.values()]

    async def call(self, server: str, tool: str, args: Mapping[str, Any]) -> ToolResult:
        """Call ``server``'s ``tool`` from any event loop. Cancelling the awaiting
        task cancels the MCP request (the server gets ``notifications/cancelled``)."""
        connection = self.connections[server]
        return await self._hand_over(connection.call(tool, args), lambda: ToolResult.failure(
            f"mcp_disconnected: server {server!r} is closed"))

    async def _hand_over(self, coro: Coroutine[Any, Any, T], closed: Callable[[], T]) -> T:
        """Run ``coro`` as a task of the runtime's loop and await its outcome on the
        caller's; ``closed()`` if the runtime is closed (``coro`` is not run).

        The awaiting side is a future of the caller's own loop, resolved by one
        ``call_soon_threadsafe`` from the runtime's loop, as the task is started by one
        the other way: one wake-up of each loop per call, and none of the locks,
        condition and chained callbacks of the :class:`concurrent.futures.Future` that
        ``run_coroutine_threadsafe`` + ``wrap_future`` put between the two (B7,
        docs/performance.md). Cancelling the awaiting task cancels the runtime's task.
        """
        if self._closed:
            coro.close()
            return closed()
        self._ensure_thread()
        handover: _Handover[T] = _Handover(coro, asyncio.get_running_loop())
        try:
            self._loop.call_soon_threadsafe(handover.start)
        except RuntimeError:  # the runtime's loop was closed since (the agent was closed)
            coro.close()
            return closed()
        try:
            return await handover.waiter
        except asyncio.CancelledError:
            # The runtime's task is cancelled in turn (the SDK then tells the server);
            # scheduled after start(), from this same thread, so it finds the task.
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(handover.cancel)
            raise

    def tools_changed(self, server: str) -> None:
        """A server's tool list changed (called on the runtime's loop)."""
        with self._changed_lock:
            self._changed.add(server)
        if self.on_tools_changed is not None:
            self.on_tools_changed()

    def take_changes(self) -> set[str]:
        """The servers whose tools changed since the last call (any thread)."""
        with self._changed_lock:
            changed, self._changed = self._changed, set()
        return changed

    def close(self, timeout: float = 15.0) -> None:
        """Stop every server and the loop; idempotent, safe from any thread but the
        runtime's own."""
        if self._closed:
            return
        self._closed = True
        if self._thread is None:
            self._loop.close()
            return
        if threading.current_thread() is self._thread:
            # From the runtime's own loop (a finalizer run by the garbage collector
            # there): waiting would deadlock, so the close is only scheduled.
            self._loop.create_task(self._close_all()).add_done_callback(
                lambda _: self._loop.stop())
            return
        future = self._submit(self._close_all())
        with contextlib.suppress(Exception):
            future.result(timeout)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self._loop.close()

    async def _close_all(self) -> None:
        await asyncio.gather(*(c.close() for c in self.connections.values()),
                             return_exceptions=True)
        # Servers still being stopped after a failed start.
        if self._background:
            await asyncio.wait(set(self._background), timeout=_CLOSE_GRACE_S)
