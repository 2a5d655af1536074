"""``lich mcp serve``: lich's enabled tools served over MCP on stdin/stdout.

One process serves one MCP connection, and that connection is one serving
session: a :class:`~lich.hooks.RunInfo` of its own (a new session id), with
``lich_run_start`` when the client connects and ``lich_run_end`` when it
leaves. Every ``tools/call`` goes the way a tool call of the loop goes —
:class:`~lich.executor.HookedToolRunner`: before-hooks, check-hooks,
approvals, the executor's limits, after-hooks — and is seen by ``lich_event``
plugins as ``tool_call_start`` / ``tool_call_end``. No approver is registered,
so a call a before-hook answers :class:`lich.Ask` for is denied (no one to
ask) — unless ``--allow`` names its tool (:class:`AllowListApprover`); ``--yes``
is refused. Nothing is written to a transcript: the client keeps its own
conversation. When the served tools change (a plugin replaces its tools; an
MCP server of lich's own config re-lists its), the client is told
(:class:`ToolListNotifier`).

stdout carries the protocol and nothing else (:func:`protocol_streams`): the
process's descriptors 0 and 1 are taken for the wire before any plugin is
loaded, ``sys.stdout`` and descriptor 1 then point at stderr (so a stray
``print``, a rich console or a child process cannot write into the stream) and
descriptor 0 at the null device (a tool's child cannot read the client's
requests).

Imports the MCP SDK (the ``mcp`` extra): imported only when the command runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any, cast

import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged

from lich import __version__
from lich.cancel import Cancelled, CancelToken, race
from lich.events import (
    Event,
    RunEmitter,
    RunEnd,
    RunStart,
    StoppedReason,
    ToolCallEnd,
    ToolCallStart,
)
from lich.executor import HookedToolRunner
from lich.hooks import Approval, ApprovalRequest, RunInfo, RunOutcome, hookimpl
from lich.loop import ToolOutcome
from lich.threads import run_in_daemon_thread
from lich.types import ProviderError, ToolCall, ToolResult, Usage

if TYPE_CHECKING:
    from mcp.server.context import ServerRequestContext
    from mcp.server.session import ServerSession

    from lich.agent import Agent
    from lich.tools import Tool

__all__ = [
    "ALLOW_APPROVER",
    "NOTIFY_TOOL_CHANGES",
    "SERVER_NAME",
    "AllowListApprover",
    "ServedTools",
    "ServingSession",
    "ToolListNotifier",
    "build_server",
    "call_result",
    "mcp_tool",
    "no_model",
    "protocol_streams",
    "serve_stdio",
]

log = logging.getLogger("lich.mcp.serve")

SERVER_NAME = "lich"
"""The name the server gives in the MCP handshake."""


# ------------------------------------------------------------ the tool set


class ServedTools:
    """The tools a serving session offers: the agent's enabled tools, narrowed to
    ``names`` when given (``--tools``).

    Looked up in the agent's registry at every request, not copied at start: a
    plugin that replaces its tools (an MCP server whose tool list changed) is
    served with its current ones.
    """

    def __init__(self, agent: Agent, names: Sequence[str] | None = None) -> None:
        self.agent = agent
        self.names = None if names is None else frozenset(names)

    def unknown(self) -> list[str]:
        """The ``names`` no enabled tool has, sorted (none without ``names``)."""
        if self.names is None:
            return []
        return sorted(self.names - {t.name for t in self.agent.tools.list()})

    def list(self) -> list[Tool]:
        """The served tools, in registration order, after the registry's refreshers
        applied any change a plugin has waiting (as before a model call)."""
        self.agent.tools.refresh()
        return [t for t in self.agent.tools.list() if self.names is None or t.name in self.names]

    def get(self, name: str) -> Tool | None:
        """The served tool ``name``, or ``None`` (not enabled, or not among ``names``)."""
        if self.names is not None and name not in self.names:
            return None
        return self.agent.tools.get(name)


def _plain(value: Any) -> Any:
    """A JSON Schema as plain dicts and lists (a tool's may hold mappings and tuples)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def mcp_tool(item: Tool) -> types.Tool:
    """The MCP definition of a lich tool: name, description, input schema and the
    hints clients show (``readOnlyHint``; ``destructiveHint`` for a tool that is not
    read-only, since lich cannot tell an additive one from a destructive one;
    ``idempotentHint`` from :attr:`~lich.tools.Tool.idempotent`)."""
    schema = _plain(item.parameters)
    if not isinstance(schema, dict):
        schema = {}
    # MCP requires an object schema at the root; a tool that takes nothing may leave it out.
    schema.setdefault("type", "object")
    return types.Tool(
        name=item.name,
        description=item.description,
        input_schema=schema,
        annotations=types.ToolAnnotations(
            read_only_hint=item.read_only,
            destructive_hint=None if item.read_only else True,
            idempotent_hint=item.idempotent,
        ),
    )


def call_result(result: ToolResult) -> types.CallToolResult:
    """A lich :class:`~lich.types.ToolResult` as an MCP ``CallToolResult``.

    A success is its output as one text block (no block for empty output). A
    failure is ``isError`` with the error text (``blocked_by_plugin: ...``,
    ``timeout: ...``) first and any partial output after it.
    """
    blocks: list[types.ContentBlock]
    if result.ok:
        blocks = [types.TextContent(text=result.output)] if result.output else []
        return types.CallToolResult(content=blocks)
    blocks = [types.TextContent(text=result.error or "tool_failed")]
    if result.output:
        blocks.append(types.TextContent(text=result.output))
    return types.CallToolResult(content=blocks, is_error=True)


# ------------------------------------------------------- tool-list changes


class ToolListNotifier:
    """Tells the client when the served tools change (the ``tools.listChanged``
    capability).

    :meth:`run` listens to the agent's registry (:meth:`ToolRegistry.add_listener
    <lich.tools.ToolRegistry.add_listener>`): a plugin replacing its tools, or one
    saying a change is waiting (an MCP server of lich's own config that re-listed
    its tools, :meth:`~lich.tools.ToolRegistry.refresh_wanted`). Each time, it
    refreshes the registry and compares the served definitions with what the client
    was last given; when they differ the client is told, once per change, the way
    its protocol era hears of it: ``notifications/tools/list_changed`` on the
    connection (the initialize handshake; sent once the client made a request, which
    is what gives the server the connection's channel), and a ``ToolsListChanged``
    event on the ``subscriptions/listen`` streams it opened (2026-07-28).
    """

    def __init__(self, tools: ServedTools) -> None:
        self.tools = tools
        self.bus = InMemorySubscriptionBus()
        #: The ``subscriptions/listen`` handler the server serves.
        self.listen = ListenHandler(self.bus)
        self._session: ServerSession | None = None
        self._known = self.definitions()

    def definitions(self) -> list[types.Tool]:
        """The served tools' MCP definitions, as ``tools/list`` answers them."""
        return [mcp_tool(t) for t in self.tools.list()]

    def seen(self, ctx: ServerRequestContext[Any],
             listed: list[types.Tool] | None = None) -> None:
        """A request came (``listed``: a ``tools/list`` answered with these): keep its
        connection's channel for the notification; the client knows ``listed``."""
        self._session = ctx.session
        if listed is not None:
            self._known = listed

    async def run(self) -> None:
        """Notify on every change until cancelled."""
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def changed() -> None:  # any thread: the registry's or an MCP runtime's
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:
                pass  # the loop is closed: serving is over

        remove = self.tools.agent.tools.add_listener(changed)
        try:
            while True:
                await wake.wait()
                wake.clear()
                try:
                    await self._compare()
                except Exception:  # a bug here must not end the serving; the next change retries
                    log.exception("checking whether the served tools changed failed")
        finally:
            remove()

    async def _compare(self) -> None:
        # A replace_plugin is many changes in a row: their wake-ups came before this
        # task runs, so they are one comparison (and one notification).
        current = self.definitions()
        if current == self._known:
            return
        self._known = current
        log.info("the served tools changed (%d now): telling the client", len(current))
        await self.bus.publish(ToolsListChanged())
        if self._session is not None:
            # On a 2026-07-28 connection the SDK drops this one (its clients hear of
            # changes on their listen streams only).
            try:
                await self._session.send_tool_list_changed()
            except Exception as exc:  # the client is gone: nothing to tell
                log.info("could not tell the client its tools changed: %s", exc)


# ---------------------------------------------------------------- a session


class ServingSession:
    """One MCP connection's calls, run as one lich session.

    :meth:`start` calls ``lich_run_start`` (and emits ``run_start``), :meth:`call`
    runs one ``tools/call``, :meth:`close` cancels calls still running and calls
    ``lich_run_end``. Calls may run concurrently, as a client may send them.
    """

    def __init__(self, agent: Agent, tools: ServedTools) -> None:
        self.agent = agent
        self.tools = tools
        config = agent.config
        self.run = RunInfo(uuid.uuid4().hex[:12], agent.sessions.new_id(), "",
                           config.work_dir, config, tools=agent.tools)
        self.cancel = CancelToken()
        self.emitter = RunEmitter(self.run.run_id, self.run.session_id)
        if agent.host.has_impls("lich_event"):
            self.emitter.subscribe(agent.host.event)
        # No approver but --allow's: an Ask of another tool is asked of no one and
        # denied (approval_unavailable), with its approval_requested/_resolved events.
        self.runner = HookedToolRunner(agent.executor, agent.host, self.run,
                                       emit=self._emit)
        # Each served call is a turn of its own: there is no model turn to count.
        self._turns = itertools.count(1)
        self._started = False
        self._closed = False

    def _emit(self, event: Event) -> None:
        self.emitter.emit(event)

    async def start(self) -> None:
        """The session begins: ``run_start`` for the event subscribers and the hook."""
        self._started = True
        self.emitter.emit(RunStart("", self.run.work_dir, ""))
        await self.agent.host.run_start(self.run)

    async def call(self, name: str, arguments: Mapping[str, Any] | None) -> ToolResult:
        """Run one call through the hooks and the executor; failures are results.

        A call the client cancels (or that is still running when the connection
        closes) is recorded as ``cancelled`` before the cancellation goes on: every
        ``tool_call_start`` has its ``tool_call_end``.
        """
        turn = next(self._turns)
        call = ToolCall(f"mcp_{turn}", name, dict(arguments or {}))
        self.emitter.emit(ToolCallStart(turn, call))
        started = time.perf_counter()

        def end(outcome: ToolOutcome) -> None:
            self.emitter.emit(ToolCallEnd(
                turn, outcome.call, outcome.result,
                duration_ms=round((time.perf_counter() - started) * 1000, 3),
                rewritten_by=outcome.rewritten_by, blocked_by=outcome.blocked_by,
                replaced_by=outcome.replaced_by,
            ))

        if self.tools.get(name) is None:
            # Not served: the executor would run a tool that --tools left out.
            outcome = ToolOutcome(call, ToolResult.failure(f"unknown_tool: {name}"))
        else:
            try:
                outcome = await self.runner(call, self.cancel)
            except asyncio.CancelledError:
                end(ToolOutcome(call, ToolResult.failure("cancelled")))
                raise
            except Exception as exc:  # the runner answers failures as results; this is a bug
                end(ToolOutcome(call, ToolResult.failure(f"{type(exc).__name__}: {exc}")))
                raise
        end(outcome)
        return outcome.result

    async def close(self, reason: StoppedReason = "final", error: str | None = None) -> None:
        """The session ends: calls still running are cancelled, then ``run_end``.

        :param reason: ``final`` when the client left, ``aborted`` on a signal,
            ``error`` when serving failed (``error`` says why).
        """
        if self._closed or not self._started:
            return
        self._closed = True
        self.cancel.cancel()
        self.emitter.emit(RunEnd(reason, 0, Usage(), error))
        await self.agent.host.run_end(self.run, RunOutcome(reason, 0, Usage(), None, error))
        await self.agent.host.drain_events()


def build_server(session: ServingSession,
                 notifier: ToolListNotifier | None = None) -> Server[Any]:
    """The low-level MCP server answering ``tools/list`` and ``tools/call`` for
    ``session``; with ``notifier``, ``subscriptions/listen`` too (see
    :class:`ToolListNotifier`; start it with :data:`NOTIFY_TOOL_CHANGES`)."""

    async def list_tools(
        ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        if notifier is None:
            return types.ListToolsResult(tools=[mcp_tool(t) for t in session.tools.list()])
        tools = notifier.definitions()
        notifier.seen(ctx, tools)
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if notifier is not None:
            notifier.seen(ctx)
        return call_result(await session.call(params.name, params.arguments))

    return Server(
        SERVER_NAME,
        version=__version__,
        instructions="lich's tools, run in lich's work dir through its plugins' hooks.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_subscriptions_listen=notifier.listen if notifier is not None else None,
    )


#: The initialization options' notification flags of a server with a notifier: the
#: ``tools.listChanged`` capability of the initialize handshake (on 2026-07-28
#: connections the SDK derives it from ``subscriptions/listen`` being served).
NOTIFY_TOOL_CHANGES = NotificationOptions(tools_changed=True)


# ------------------------------------------------------------ the wire


@contextmanager
def protocol_streams() -> Iterator[tuple[IO[bytes], IO[bytes]]]:
    """Take the process's stdin and stdout for the protocol alone; yields the wire
    ``(reader, writer)``.

    While it is held, descriptor 1 and ``sys.stdout`` point at stderr and
    descriptor 0 at the null device: whatever else writes to "stdout" — a plugin's
    ``print`` at import or in a call, a rich console made earlier, a tool's child
    process — lands on stderr, and only the transport writes the wire. Both are
    restored on exit. When the standard streams are not the process's descriptors
    (an embedding program's), only ``sys.stdout`` is redirected.
    """
    saved_stdout = sys.stdout
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()  # what was printed before belongs where it was printed
        except (AttributeError, OSError, ValueError):
            pass
    if not (_is_fd(sys.stdin, 0) and _is_fd(sys.stdout, 1)):
        reader = cast("IO[bytes]", sys.stdin.buffer)
        writer = cast("IO[bytes]", sys.stdout.buffer)
        sys.stdout = sys.stderr
        try:
            yield reader, writer
        finally:
            sys.stdout = saved_stdout
        return
    wire_in, wire_out = _dup_high(0), _dup_high(1)
    try:
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            os.dup2(null, 0)
        finally:
            os.close(null)
        try:
            os.dup2(sys.stderr.fileno(), 1)
        except (AttributeError, OSError, ValueError):
            sink = os.open(os.devnull, os.O_WRONLY)  # no stderr to send it to
            try:
                os.dup2(sink, 1)
            finally:
                os.close(sink)
        sys.stdout = sys.stderr
        reader = os.fdopen(wire_in, "rb", closefd=False)
        writer = os.fdopen(wire_out, "wb", closefd=False)
        try:
            yield reader, writer
        finally:
            sys.stdout = saved_stdout
            try:
                writer.flush()
            except OSError:
                pass  # the client is gone: nothing is waiting for the rest
            os.dup2(wire_in, 0)
            os.dup2(wire_out, 1)
    finally:
        # wire_in stays open: after a signal a daemon thread may still be blocked
        # reading it, and a closed number could be reused under that thread.
        os.close(wire_out)


def _dup_high(fd: int) -> int:
    """A duplicate of ``fd`` above the standard three, not inherited by children (a
    plain ``dup`` could land on a closed descriptor 2 and take stderr's place)."""
    try:
        import fcntl
    except ImportError:  # Windows: no fcntl; dup's duplicate is not inheritable either
        return os.dup(fd)
    return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)


def _is_fd(stream: Any, fd: int) -> bool:
    try:
        return bool(stream.fileno() == fd)
    except (AttributeError, OSError, ValueError):
        return False


class _WireReader:
    """The wire's requests, one line at a time, read in a daemon thread.

    Not ``anyio.wrap_file``: its worker threads are joined at exit, and one blocked
    reading a client that never closes its end would keep a signalled server from
    exiting (:mod:`lich.threads`). :meth:`stop` ends the lines as if the client
    had closed its end: the server then winds down the way it does when it has.
    """

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.stopped = CancelToken()

    def stop(self) -> None:
        """End the requests now (a line being read is dropped with the thread)."""
        self.stopped.cancel()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        while True:
            try:
                line = await race(run_in_daemon_thread(self.raw.readline), self.stopped)
            except Cancelled:
                return
            except OSError as exc:
                # A terminal hung up (EIO), a descriptor gone: the client is gone too.
                log.info("reading the MCP client failed (%s): the connection is over", exc)
                return
            if not line:
                return  # the client closed its end
            yield line.decode("utf-8", errors="replace")


class _WireWriter:
    """The wire's responses, written and flushed in a daemon thread (a client that
    stops reading blocks the writer, not the event loop).

    A client that closed its end is gone: what is left to send is dropped (it has
    no reader) and ``on_gone`` is told, once, so the server stops reading too.
    """

    def __init__(self, raw: IO[bytes], on_gone: Callable[[], None]) -> None:
        self.raw = raw
        self.on_gone = on_gone
        self.gone = False

    async def _do(self, fn: Callable[..., object], *args: Any) -> None:
        if self.gone:
            return
        try:
            await run_in_daemon_thread(fn, *args)
        except (BrokenPipeError, ConnectionResetError, ValueError):
            # ValueError: the file was closed under the thread at exit.
            self.gone = True
            log.info("the MCP client closed its end of the connection")
            self.on_gone()

    async def write(self, text: str) -> None:
        await self._do(self.raw.write, text.encode("utf-8"))

    async def flush(self) -> None:
        await self._do(self.raw.flush)


def _on_signals(handler: Callable[[str], None]) -> Callable[[], None]:
    """Call ``handler(name)`` on SIGINT and SIGTERM; returns the undo."""
    loop = asyncio.get_running_loop()
    installed: list[int] = []
    for signum, name in ((signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")):
        try:
            loop.add_signal_handler(signum, handler, name)
        except (NotImplementedError, RuntimeError, ValueError):
            continue  # no loop signal support (Windows, a thread): the default stays
        installed.append(signum)

    def restore() -> None:
        for signum in installed:
            loop.remove_signal_handler(signum)

    return restore


async def serve_stdio(agent: Agent, tools: ServedTools, reader: IO[bytes],
                      writer: IO[bytes]) -> str | None:
    """Serve ``tools`` over the wire until the client closes it or a signal comes.

    SIGINT and SIGTERM stop the server as the client leaving does: calls still
    running are cancelled (their tools stopped, their ``tool_call_end`` recorded as
    ``cancelled``), the requests end, the session ends with ``lich_run_end``
    (``aborted``) and the agent is closed.

    :return: the name of the signal that stopped the server, or ``None`` when the
        client closed the connection.
    """
    session = ServingSession(agent, tools)
    notifier = ToolListNotifier(tools)
    server = build_server(session, notifier)
    requests = _WireReader(reader)
    responses = _WireWriter(writer, on_gone=requests.stop)
    stopped_by: list[str] = []

    def stop(name: str) -> None:
        log.info("%s: stopping the MCP server", name)
        stopped_by.append(name)
        session.cancel.cancel()
        notifier.listen.close()  # the listen streams end gracefully, not mid-event
        requests.stop()

    restore = _on_signals(stop)
    error: str | None = None
    try:
        await session.start()
        watching = asyncio.ensure_future(notifier.run())
        try:
            async with stdio_server(stdin=cast("Any", requests),
                                    stdout=cast("Any", responses)) as (read, write):
                await server.run(read, write,
                                 server.create_initialization_options(NOTIFY_TOOL_CHANGES))
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        restore()
        reason: StoppedReason = "error" if error else "aborted" if stopped_by else "final"
        try:
            await session.close(reason, error)
        finally:
            await agent.aclose()
    return stopped_by[0] if stopped_by else None


async def no_model(*_args: Any, **_kwargs: Any) -> Any:
    """The chat function of a serving agent: ``lich mcp serve`` runs tools the client
    asks for and calls no model, so it needs none configured."""
    raise ProviderError("bad_request", "lich mcp serve", "a served session calls no model")


class AllowListApprover:
    """``lich mcp serve --allow``: approves the calls of the named tools that a
    before-hook asked about; says nothing of the others (denied: no one to ask).

    ``tryfirst``: the operator's list on the command line decides before any
    approver a plugin brings.
    """

    def __init__(self, names: list[str]) -> None:
        self.names = frozenset(names)

    @hookimpl(tryfirst=True)
    async def lich_request_approval(self, request: ApprovalRequest) -> Approval | None:
        """Approve ``request`` when its tool is on the list; else no answer."""
        if request.call.name in self.names:
            return Approval(True, approver=ALLOW_APPROVER)
        return None


ALLOW_APPROVER = "--allow"
"""The ``approver`` of the served calls ``--allow`` approved (and its plugin name)."""
