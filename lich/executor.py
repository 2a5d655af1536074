"""Running tool calls: :class:`ToolExecutor` runs one call under the tool's limits,
and :class:`HookedToolRunner` wraps it in the plugins' before- and after-hooks
for the loop.

The executor never raises: unknown tools, bad arguments, exceptions, timeouts
and cancellation all come back as a failed :class:`~lich.types.ToolResult`.
What a tool is and where it is registered is :mod:`lich.tools` (which
re-exports :class:`ToolExecutor`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import inspect
import logging
import os
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
from attrs import evolve

from lich._schema import validate_args
from lich.cancel import Cancelled, CancelToken
from lich.events import ApprovalRequested, ApprovalResolved, Event, ToolOutput
from lich.guards import ToolError, truncate_text
from lich.hooks import ApprovalRequest, RunInfo
from lich.loop import ToolOutcome, unless_cancelled
from lich.processes import DIRECT, ProcessRunner
from lich.protected import ProtectedPaths
from lich.settings import ConfigError, tool_limits
from lich.threads import run_in_daemon_thread
from lich.tools import Tool, ToolContext, ToolRegistry, no_output
from lich.types import ToolCall, ToolResult

if TYPE_CHECKING:
    from lich.plugins import PluginHost
    from lich.plugins.calling import ToolDecision

__all__ = [
    "APPROVAL_UNAVAILABLE",
    "LIVE_OUTPUT_INTERVAL_S",
    "SLOW_INLINE_S",
    "HookedToolRunner",
    "ToolExecutor",
]

# The name it had when the executor lived in lich.tools: log filters and formats keep working.
log = logging.getLogger("lich.tools")

#: A ``runs_inline`` tool call that takes longer than this (seconds) is logged as a
#: warning, once per tool and executor: it held up the whole event loop meanwhile.
SLOW_INLINE_S = 0.05


#: How often (seconds) at most what a running tool reports (``ctx.output``) becomes a
#: ``tool_output`` event: the pieces reported meanwhile are joined into the next one,
#: so a command printing a line per microsecond costs the event stream no more than
#: this rate per call, and a quiet one is shown within this delay.
LIVE_OUTPUT_INTERVAL_S = 0.1


class _LiveOutput:
    """One call's ``ctx.output``: pieces reported from the loop or any thread,
    coalesced into ``tool_output`` events emitted on the loop — at most one per
    :data:`LIVE_OUTPUT_INTERVAL_S`, ``cap`` characters in all (the tool's output cap:
    past it the rest is dropped). :meth:`close` (the call ended) emits what is left
    before the call's ``tool_call_end``; what comes after is dropped."""

    __slots__ = ("_buffer", "_call_id", "_closed", "_emit", "_handle", "_lock", "_loop",
                 "_pending", "_room", "_thread")

    def __init__(self, call_id: str, cap: int, emit: Callable[[Event], None]) -> None:
        self._call_id = call_id
        self._room = cap
        self._emit = emit
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._lock = threading.Lock()
        self._buffer: list[str] = []
        self._pending = False  # a flush is scheduled (or about to be)
        self._closed = False
        self._handle: asyncio.TimerHandle | None = None

    def write(self, text: str, /) -> None:
        """Report ``text`` (the tool's ``ctx.output``)."""
        if not isinstance(text, str):
            raise TypeError(f"ctx.output takes text (str), not {type(text).__name__}")
        if not text:
            return
        with self._lock:
            if self._closed or self._room <= 0:
                return
            piece = text[:self._room]
            self._room -= len(piece)
            self._buffer.append(piece)
            if self._pending:
                return
            self._pending = True
        if threading.get_ident() == self._thread:
            self._arm()
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody watches
                self._loop.call_soon_threadsafe(self._arm)

    def _arm(self) -> None:
        if not self._closed:
            self._handle = self._loop.call_later(LIVE_OUTPUT_INTERVAL_S, self._flush)

    def _flush(self, *, closing: bool = False) -> None:
        with self._lock:
            text = "".join(self._buffer)
            self._buffer.clear()
            self._pending = False
            self._closed = self._closed or closing
        self._handle = None
        if text:
            self._emit(ToolOutput(self._call_id, text))

    def close(self) -> None:
        """The call ended: emit what is buffered; nothing more from now on."""
        if self._handle is not None:
            self._handle.cancel()
        self._flush(closing=True)


class _InlineOverran(Exception):
    """A ``runs_inline`` call returned after its deadline (nothing could stop it sooner)."""


class ToolExecutor:
    """Runs tool calls. :meth:`execute` never raises.

    :param registry: where tools are looked up.
    :param work_dir: the directory tools work in (and are confined to).
    :param env: extra environment handed to tools in their context.
    :param tool_settings: the ``[tools.<name>]`` tables; ``timeout_s``,
        ``max_output_chars`` and ``runs_inline`` there override the tool's own.
    :param protected: what no tool may read, list or search (handed to every
        call as ``ctx.protected``); nothing by default.
    :param process_runner: starts every process a tool runs (handed to every call as
        ``ctx.process_runner``); :data:`lich.processes.DIRECT` by default.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        work_dir: str | os.PathLike[str],
        env: Mapping[str, str] | None = None,
        tool_settings: Mapping[str, Mapping[str, Any]] | None = None,
        secret_env_names: frozenset[str] = frozenset(),
        protected: ProtectedPaths | None = None,
        process_runner: ProcessRunner | None = None,
    ) -> None:
        self.registry = registry
        self.work_dir = Path(work_dir)
        self.env = dict(env or {})
        self.tool_settings = tool_settings or {}
        self.secret_env_names = secret_env_names
        self.protected = protected if protected is not None else ProtectedPaths()
        self.process_runner = DIRECT if process_runner is None else process_runner
        self._warned_slow: set[str] = set()

    def limits(self, item: Tool) -> tuple[float, int]:
        """The effective ``(timeout_s, max_output_chars)`` of ``item``.

        :raises lich.config.ConfigError: ``[tools.<name>]`` sets them wrong (a loaded
            config never does: :func:`lich.config.load_config` checks them).
        """
        timeout, cap, _ = self._effective(item)
        return timeout, cap

    def runs_inline(self, item: Tool) -> bool:
        """Whether a call of ``item`` runs on the event loop without a worker thread: a
        plain function declared ``runs_inline``, unless ``[tools.<name>] runs_inline``
        says otherwise (an operator's word over the plugin's). False for async tools,
        which run on the loop as coroutines. Raises as :meth:`limits` does."""
        return self._effective(item)[2]

    def _effective(self, item: Tool) -> tuple[float, int, bool]:
        limits = tool_limits(self.tool_settings.get(item.name), item.name)
        timeout = item.timeout_s if limits.timeout_s is None else limits.timeout_s
        cap = item.max_output_chars if limits.max_output_chars is None else limits.max_output_chars
        inline = item.runs_inline if limits.runs_inline is None else limits.runs_inline
        return float(timeout), int(cap), inline and not item.is_async

    async def execute(
        self,
        call: ToolCall,
        *,
        run: RunInfo | None = None,
        cancel: CancelToken | None = None,
        check_path: Callable[[str], None] | None = None,
        emit: Callable[[Event], None] | None = None,
    ) -> ToolResult:
        """Run ``call`` and return its result; failures are results too. ``check_path``
        becomes the tool's :attr:`~lich.tools.ToolContext.check_path`. With ``emit``,
        what the tool reports while it runs (:attr:`~lich.tools.ToolContext.output`)
        is emitted as :class:`~lich.events.ToolOutput` events, coalesced (at most one
        per :data:`LIVE_OUTPUT_INTERVAL_S`) and capped at the tool's output cap; the
        last one before this returns. Without it ``ctx.output`` does nothing."""
        if call.args_error is not None:
            return ToolResult.failure(f"invalid_tool_arguments: {call.args_error}")
        item = self.registry.get(call.name)
        if item is None:
            return ToolResult.failure(f"unknown_tool: {call.name}")
        if cancel is not None and cancel.cancelled:
            return ToolResult.failure("cancelled")
        try:
            timeout_s, max_chars, inline = self._effective(item)
        except ConfigError as exc:
            return ToolResult.failure(f"invalid_setting: {'; '.join(exc.problems)}")
        # The call's own token, fired by the run's cancel *and* by the deadline: an async
        # tool is cancelled as a task, but a tool in a worker thread only learns that it
        # should stop by polling ctx.cancel. Without a run token there is nothing to
        # forward or wait for (B1, performance.md).
        call_token = CancelToken()
        live = None if emit is None else _LiveOutput(call.id, max_chars, emit)
        ctx = ToolContext(
            work_dir=self.work_dir,
            env=self.env,
            cancel=call_token,
            settings=self.tool_settings.get(item.name, {}),
            run=run,
            call_id=call.id,
            secret_env_names=self.secret_env_names,
            protected=self.protected,
            process_runner=self.process_runner,
            check_path=check_path,
            output=no_output if live is None else live.write,
        )
        try:
            return await self._guarded(item, call, ctx, cancel, timeout_s, max_chars, inline)
        finally:
            if live is not None:
                live.close()

    async def _guarded(
        self, item: Tool, call: ToolCall, ctx: ToolContext, cancel: CancelToken | None,
        timeout_s: float, max_chars: int, inline: bool,
    ) -> ToolResult:
        """The call under its deadline and the run's cancel, every failure a result."""
        call_token = ctx.cancel
        deadline = asyncio.timeout(timeout_s)
        try:
            async with deadline:
                invoke = self._invoke(item, dict(call.args), ctx, timeout_s, inline)
                if cancel is None:
                    result = await invoke
                else:
                    result = await unless_cancelled(invoke, cancel, call_token.cancel)
        except Cancelled:
            call_token.cancel()  # (already fired) a tool in a worker thread stops on it
            return ToolResult.failure("cancelled")
        except asyncio.CancelledError:
            call_token.cancel()  # the task running the call is cancelled: same for the tool
            raise
        except _InlineOverran:
            call_token.cancel()
            return ToolResult.failure(f"timeout: tool:{item.name} exceeded {timeout_s:g}s")
        except TimeoutError as exc:
            if not deadline.expired():  # the tool's own TimeoutError, not our deadline
                return ToolResult.failure(f"TimeoutError: {exc}" if str(exc) else "TimeoutError")
            call_token.cancel()
            if cancel is not None and cancel.cancelled:
                return ToolResult.failure("cancelled")
            return ToolResult.failure(f"timeout: tool:{item.name} exceeded {timeout_s:g}s")
        except ToolError as exc:
            return ToolResult.failure(str(exc))
        except Exception as exc:
            log.debug("tool %s raised", item.name, exc_info=True)
            name = type(exc).__name__
            return ToolResult.failure(f"{name}: {exc}" if str(exc) else name)
        if not isinstance(result, ToolResult):
            return ToolResult.failure(
                f"bad_tool_result: {item.name} returned {type(result).__name__}, not ToolResult"
            )
        if len(result.output) > max_chars:
            result = attrs.evolve(result, output=truncate_text(result.output, max_chars))
        return result

    async def _invoke(
        self, item: Tool, args: dict[str, Any], ctx: ToolContext, timeout_s: float,
        inline: bool,
    ) -> ToolResult:
        if item.is_async:
            return await item.execute(args, ctx)  # type: ignore[misc,no-any-return]
        if inline:
            # Declared never to block: no thread hop. In a copy of the context, as in a
            # worker, so a tool's context variables stay its own.
            started = time.perf_counter()
            result = contextvars.copy_context().run(item.execute, args, ctx)
            took = time.perf_counter() - started
            if took > SLOW_INLINE_S:
                self._warn_slow_inline(item.name, took)
            if took > timeout_s:
                raise _InlineOverran
        else:
            # A plain function may block (file system, subprocess): keep it off the loop,
            # in a daemon thread so that one that never returns cannot block the exit.
            result = await run_in_daemon_thread(item.execute, args, ctx)
        if inspect.isawaitable(result):  # a callable object returning an awaitable
            return await result
        return result

    def _warn_slow_inline(self, name: str, took: float) -> None:
        if name in self._warned_slow:
            return
        self._warned_slow.add(name)
        log.warning("tool %s runs inline but took %.3gs: the event loop (every run of this "
                    "process) waited for it; a tool that can block must not be runs_inline",
                    name, took)


APPROVAL_UNAVAILABLE = (
    "approval_unavailable: no one is there to approve this call; an [approvals] allow rule "
    "lets the tool run without asking"
)
"""Why a call no approver answered is denied. It names no flag: what else would have
approved the call depends on the front end (``lich --yes`` in a one-shot run says so
itself; ``lich mcp serve --allow``; nothing in a gateway), so each front end says its own."""


# How long a tool waits for the checks of the path it is about to open.
_PATH_CHECK_TIMEOUT_S = 60.0


def _resolved(root: str, value: str) -> str:
    """``value`` resolved against ``root`` (symlinks followed), relative to it when
    inside (``/``-joined, ``.`` for the root), else absolute."""
    try:
        absolute = os.path.realpath(os.path.join(root, value))
    except (OSError, ValueError):
        return value
    if absolute == root:
        return "."
    if absolute.startswith(root.rstrip("/") + "/"):
        return os.path.relpath(absolute, root).replace(os.sep, "/")
    return absolute


# The ids of requests waiting for an answer anywhere in this process: the gateway's
# `/approve 3f2a` names one, so two pending requests must never share an id. Part of
# the Ask contract (every request has one, whichever plugin asked), so the core's.
_pending: set[str] = set()
_pending_lock = threading.Lock()


@contextmanager
def _pending_request_id() -> Iterator[str]:
    """A short id no pending request of this process has (4 hex digits, longer only if
    those run out), held while the request waits."""
    with _pending_lock:
        size, request_id = 2, None
        while request_id is None:
            for _ in range(64):
                candidate = secrets.token_hex(size)
                if candidate not in _pending:
                    _pending.add(candidate)
                    request_id = candidate
                    break
            size += 1
    try:
        yield request_id
    finally:
        with _pending_lock:
            _pending.discard(request_id)


class HookedToolRunner:
    """The loop's :class:`~lich.loop.ToolRunner`: before-hooks, approval, the executor,
    after-hooks.

    Approval is the ``Ask`` contract and nothing more: when a hook asks, the runner
    builds the :class:`~lich.hooks.ApprovalRequest` (a short id, the asking plugins'
    reasons; the rules a session approval grants and the preview are the plugins',
    ``lich_prepare_approval``), emits ``approval_requested``, asks
    the approvers (``lich_request_approval``), obeys the answer — edited arguments
    run only after they pass the tool's schema and every check-hook again — and
    emits ``approval_resolved``, which ``lich_approval_resolved`` hands to the
    plugins. What a ``session`` approval grants, and which later calls it covers,
    is the asking plugin's business (the approvals plugin keeps its grants itself).

    :param executor: runs the call.
    :param host: whose hooks are called.
    :param run: the run the calls belong to.
    :param emit: receives the ``approval_requested`` / ``approval_resolved`` events
        and the ``tool_output`` events of the running tools.
    :param before_execute: awaited with the call right before the executor runs it
        (after every hook and approval): returning a result stops the call there,
        with that result. A durable turn records ``tool_start`` in it
        (:mod:`lich.turns`).
    """

    def __init__(
        self,
        executor: ToolExecutor,
        host: PluginHost,
        run: RunInfo,
        *,
        emit: Callable[[Event], None] | None = None,
        before_execute: Callable[[ToolCall], Awaitable[ToolResult | None]] | None = None,
    ) -> None:
        self.executor = executor
        self.before_execute = before_execute
        self.host = host
        self.run = run
        self.emit = emit or (lambda _event: None)
        # Live tool output goes where the other events go; nowhere, no sink per call.
        self._emit_output = emit
        timeout = run.config.approval_timeout_s if run.config is not None else 300.0
        self.approval_timeout_s: float | None = timeout or None  # 0: wait for ever
        # The tool hooks this run needs (lich.hooks.needed_when): none, no hook call.
        self._before = host.needs("lich_before_tool_call", run.config) or host.needs(
            "lich_check_tool_call", run.config
        )
        self._after = host.needs("lich_after_tool_call", run.config)

    async def __call__(self, call: ToolCall, cancel: CancelToken | None) -> ToolOutcome:
        rewritten_by: tuple[str, ...] = ()
        asked = False
        waited_ms = 0.0
        judged: tuple[str, str] | None = None
        if self._before and call.args_error is None:
            # Raced against the cancel token: a slow before-hook must not delay an abort
            # by up to hook_timeout_s. A cancelled call does not run.
            try:
                decision = await unless_cancelled(
                    self.host.before_tool_call(call, self.run), cancel)
            except Cancelled:
                return ToolOutcome(call, ToolResult.failure("cancelled"))
            call, rewritten_by = decision.call, decision.rewritten_by
            if decision.blocked_by is not None:
                blocked = ToolResult.failure(f"blocked_by_plugin: {decision.reason}")
                return ToolOutcome(call, blocked, rewritten_by, blocked_by=decision.blocked_by)
            # The primary path as it resolved when the checks judged it, before a person
            # takes their time to answer.
            judged = self._judged_path(call)
            if decision.asked_by:
                asked = True
                asking = time.perf_counter()
                approved = await self._approve(call, decision, cancel)
                waited_ms = round((time.perf_counter() - asking) * 1000, 3)
                if isinstance(approved, ToolOutcome):
                    return evolve(approved, rewritten_by=rewritten_by,
                                  approval_wait_ms=waited_ms)
                call = approved
        if self.before_execute is not None:
            stopped = await self.before_execute(call)
            if stopped is not None:
                return ToolOutcome(call, stopped, rewritten_by, approval_wait_ms=waited_ms)
        check_path = self._path_check(call, judged, asked=asked) if judged is not None else None
        result = await self.executor.execute(call, run=self.run, cancel=cancel,
                                             check_path=check_path, emit=self._emit_output)
        replaced_by = None
        if self._after:
            try:
                result, replaced_by = await unless_cancelled(
                    self.host.after_tool_call(call, result, self.run), cancel
                )
            except Cancelled:
                pass  # keep the tool's own result; the run is ending
        return ToolOutcome(call, result, rewritten_by, replaced_by=replaced_by,
                           approval_wait_ms=waited_ms)

    def _judged_path(self, call: ToolCall) -> tuple[str, str] | None:
        """``(argument, resolved)`` of a call of a tool declaring a path as its primary
        argument (``None`` for any other)."""
        tool = self.executor.registry.get(call.name)
        name = tool.primary_arg if tool is not None and tool.primary_kind == "path" else None
        value = call.args.get(name) if name is not None else None
        if not isinstance(value, str):
            return None
        return value, _resolved(os.path.realpath(self.executor.work_dir), value)

    def _path_check(self, call: ToolCall, judged: tuple[str, str], *,
                    asked: bool) -> Callable[[str], None] | None:
        """The :attr:`~lich.tools.ToolContext.check_path` of a call whose primary path
        resolved to ``judged`` when the checks judged it.

        A directory swapped for a link since (``src/sub`` -> ``../.github``) makes the
        tool open another file than the one judged. So the path the tool is about to
        open is judged again: a call a person (or an earlier grant) approved must
        open the very path that was resolved when it was asked about; any other call
        must pass the final check hooks (:meth:`lich.plugins.PluginHost.check_tool_call`)
        with that path as its argument — a block, or a question, refuses the open
        (``path_changed:``).
        """
        tool = self.executor.registry.get(call.name)
        name = tool.primary_arg if tool is not None else None
        value = call.args.get(name) if name is not None else None
        if name is None or not isinstance(value, str):
            return None
        if value != judged[0]:  # edited while approving: judged on the edited path
            judged = (value, _resolved(os.path.realpath(self.executor.work_dir), value))
        resolved = judged[1]
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()
        host, run = self.host, self.run

        def check(rel: str) -> None:
            if asked:
                if rel != resolved:
                    raise ToolError(f"path_changed: {value} resolved to {resolved} when it "
                                    f"was approved and to {rel} now; not opened")
                return
            if threading.get_ident() == loop_thread:
                # An inline tool cannot wait for the hooks on the loop it blocks.
                if rel != resolved:
                    raise ToolError(f"path_changed: {value} now resolves to {rel}; not opened")
                return
            again = evolve(call, args={**call.args, name: rel})
            pending = asyncio.run_coroutine_threadsafe(host.check_tool_call(again, run), loop)
            try:
                # Bounded: a loop that stops before the checks run must not hold this
                # thread for ever; unchecked is refused.
                decision = pending.result(timeout=_PATH_CHECK_TIMEOUT_S)
            except (TimeoutError, concurrent.futures.CancelledError, RuntimeError) as exc:
                pending.cancel()
                raise ToolError(f"path_unchecked: {value} resolves to {rel}, which could "
                                "not be checked again; not opened") from exc
            if decision.blocked_by is not None:
                raise ToolError(f"path_changed: {value} now resolves to {rel}: "
                                f"{decision.reason}")
            if decision.asked_by:
                raise ToolError(f"path_changed: {value} now resolves to {rel}, which needs "
                                "approval; not opened")

        return check

    async def _approve(
        self, call: ToolCall, decision: ToolDecision, cancel: CancelToken | None
    ) -> ToolCall | ToolOutcome:
        """Ask a person about ``call``: the call to run (maybe with edited arguments),
        or the outcome of a call that does not run. Every request is paired with
        exactly one ``approval_resolved`` event (and one ``lich_approval_resolved``)."""
        tool = self.executor.registry.get(call.name)
        if tool is None:
            # Nothing would run: the executor answers unknown_tool. Asking a person about a
            # tool the model was never offered (--read-only, --tools) only confuses them.
            return call
        with _pending_request_id() as request_id:
            request = ApprovalRequest(
                id=request_id, call=call, reason="; ".join(decision.ask_reasons),
                asked_by=decision.asked_by, tool=tool, timeout_s=self.approval_timeout_s)
            if self.host.has_impls("lich_prepare_approval"):
                # The rules a session approval grants and the preview: the plugins'.
                prepared = await self.host.call_hook("lich_prepare_approval",
                                                     request=request, run=self.run)
                request = prepared.kwargs["request"]
            self.emit(ApprovalRequested(request.id, call, request.reason, request.asked_by,
                                        request.rules, request.timeout_s))
            started = time.perf_counter()
            decided, answer = await self._decide(request, cancel)
            resolved = ApprovalResolved(
                request.id, call.id, answer.approved, answer.scope,  # type: ignore[arg-type]
                answer.approver, answer.args, answer.message,
                round((time.perf_counter() - started) * 1000, 3))
            self.emit(resolved)
            if self.host.has_impls("lich_approval_resolved"):
                await self.host.call_hook("lich_approval_resolved", request=request,
                                          resolved=resolved, run=self.run)
            return decided

    async def _decide(
        self, request: ApprovalRequest, cancel: CancelToken | None
    ) -> tuple[ToolCall | ToolOutcome, _Resolution]:
        """What the approvers answered about ``request``, obeyed: the call to run or
        the outcome of one that does not, and what to record of the answer."""
        call, tool = request.call, request.tool

        def denied(reason: str, approver: str | None,
                   scope: str = "once") -> tuple[ToolOutcome, _Resolution]:
            return (ToolOutcome(call, ToolResult.failure(reason)),
                    _Resolution(False, scope, approver, None, reason))

        try:
            answer = await unless_cancelled(
                self.host.request_approval(request, self.run, self.approval_timeout_s), cancel)
        except Cancelled:
            return denied("cancelled", None)
        if answer.timed_out:
            return denied(f"approval_timeout: {answer.error}; the call was not run", None)
        if answer.error is not None:
            return denied(answer.error, answer.plugin)
        approval = answer.approval
        if approval is None:
            return denied(APPROVAL_UNAVAILABLE, None)
        approver = approval.approver or answer.plugin
        if not approval.approved:
            message = approval.message or "the user denied this call"
            return denied(f"approval_denied: {message}", approver, approval.scope)
        if approval.args is not None and approval.args != call.args:
            edited = dict(approval.args)
            problem = (None if tool is None
                       else validate_args(edited, tool.parameters))
            if problem is not None:
                return denied(f"approval_invalid_args: the edited arguments fail the tool's "
                              f"schema: {problem}", approver, approval.scope)
            call = evolve(call, args=edited)
            # The person's arguments are judged like every other final arguments: a
            # guard (or a deny rule) refuses them exactly as it would refuse the model's.
            try:
                checked = await unless_cancelled(
                    self.host.check_tool_call(call, self.run), cancel)
            except Cancelled:
                return denied("cancelled", approver)
            if checked.blocked_by is not None:
                reason = f"blocked_by_plugin: {checked.reason}"
                return (ToolOutcome(call, ToolResult.failure(reason),
                                    blocked_by=checked.blocked_by),
                        _Resolution(False, approval.scope, approver, edited, reason))
        return call, _Resolution(
            True, approval.scope, approver,
            dict(call.args) if call.args is not request.call.args else None, approval.message)


@attrs.frozen
class _Resolution:
    """What an ``approval_resolved`` event records of an answer."""

    approved: bool
    scope: str
    approver: str | None
    args: dict[str, Any] | None
    message: str | None
