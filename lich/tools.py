"""Tools: what they are, where they are registered, and how they are run.

* :class:`Tool` — a name, a description, a JSON Schema and an ``execute``
  function (sync or async) with its own timeout and output cap.
* :func:`tool` — the decorator that makes a :class:`Tool` from a typed function.
* :class:`ToolRegistry` — what ``lich_register_tools`` fills.
* :class:`ToolExecutor` — runs one call and never raises: unknown tools,
  bad arguments, exceptions, timeouts and cancellation all come back as a
  failed :class:`~lich.types.ToolResult`.
"""

from __future__ import annotations

import asyncio
import builtins
import inspect
import json
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeAlias, overload

import attrs
from attrs import field, frozen

from lich import _schema
from lich._threads import run_in_daemon_thread
from lich.cancel import Cancelled, CancelToken, race
from lich.guards import DEFAULT_MAX_OUTPUT_CHARS, DEFAULT_TOOL_TIMEOUT_S, ToolError, truncate_text
from lich.hooks import RunInfo
from lich.registry import DuplicateNameError, Registry
from lich.settings import ConfigError, tool_limits
from lich.types import ToolCall, ToolDefinition, ToolResult

__all__ = [
    "DuplicateToolError",
    "Tool",
    "ToolContext",
    "ToolExecutor",
    "ToolRegistry",
    "tool",
]

log = logging.getLogger("lich.tools")

ToolFn: TypeAlias = Callable[
    [dict[str, Any], "ToolContext"], "Awaitable[ToolResult] | ToolResult"
]


@frozen
class ToolContext:
    """What a running tool may know about its surroundings.

    ``settings`` is the tool's ``[tools.<name>]`` config table; ``env`` the
    extra environment lich passes to tools; ``cancel`` fires when the run is
    cancelled or the call exceeds its timeout (async tools are also cancelled
    as tasks; tools in a worker thread should poll ``cancel.cancelled``).
    ``secret_env_names`` are the environment variables holding provider keys
    (every registered kind's default key variable and every ``api_key_env``
    of the config): a tool must never show their values to the model.
    """

    work_dir: Path
    env: Mapping[str, str] = field(factory=dict)
    cancel: CancelToken = field(factory=CancelToken, eq=False)
    settings: Mapping[str, Any] = field(factory=dict)
    run: RunInfo | None = None
    call_id: str = ""
    secret_env_names: frozenset[str] = frozenset()


@frozen
class Tool:
    """A tool the model can call.

    ``execute(args, ctx)`` may be a plain function (run in a worker thread so
    it cannot block the event loop) or a coroutine function. It returns a
    :class:`ToolResult`, or raises :class:`lich.guards.ToolError` for a coded
    failure. ``timeout_s`` and ``max_output_chars`` are the tool's own limits;
    ``[tools.<name>]`` in the config may override them.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    execute: ToolFn = field(eq=False, repr=False)
    timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS
    plugin: str | None = None
    is_async: bool = field(init=False, eq=False, repr=False)

    @is_async.default
    def _is_async(self) -> bool:
        # A callable object counts as async when its ``__call__`` is a coroutine function.
        fn = self.execute
        return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            type(fn).__call__
        )

    def definition(self) -> ToolDefinition:
        """What the model is told about this tool."""
        return ToolDefinition(self.name, self.description, self.parameters)


def _is_context_param(name: str, hint: Any) -> bool:
    return hint is ToolContext or name in ("ctx", "context")


@overload
def tool(fn: Callable[..., Any], /) -> Tool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float = DEFAULT_TOOL_TIMEOUT_S,
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
) -> Callable[[Callable[..., Any]], Tool]: ...


def tool(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_s: float = DEFAULT_TOOL_TIMEOUT_S,
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """Make a :class:`Tool` from a typed function.

    The function's name is the tool name, the first paragraph of its docstring
    the description (``:param x:`` lines or an ``Args:`` block describe the
    parameters, as does ``Annotated[T, "text"]`` or ``Annotated[T, lich.Param(...)]``),
    and its annotated parameters the JSON Schema: ``str``, ``int``, ``float``,
    ``bool``, ``Literal``, ``Enum``, ``date``, ``datetime``, ``Path``, lists,
    sets, tuples, ``dict[str, T]``, ``TypedDict``, attrs classes and
    dataclasses, unions and ``Optional`` of these, and ``Any`` (or no
    annotation) for any JSON value. Another type is a :class:`TypeError` here,
    naming the parameter. A parameter annotated :class:`ToolContext` (or named
    ``ctx``) receives the context.

    Arguments are checked against the schema before the call (``missing_arg:
    x``, ``invalid_arg: x: expected integer, got string``) and converted to
    the annotated types: the function gets an ``Enum`` member, a ``date``, a
    ``Path``, a ``tuple``, never the raw JSON string or list. Return a ``str``
    (the output), a :class:`ToolResult`, or anything JSON-able.

    Usable bare (``@tool``) or with options (``@tool(timeout_s=5)``)."""

    def build(func: Callable[..., Any]) -> Tool:
        signature = _schema.compile_signature(func, _is_context_param)
        is_coro = inspect.iscoroutinefunction(func)

        def call_kwargs(args: Mapping[str, Any], ctx: ToolContext) -> dict[str, Any]:
            kwargs = signature.bind(args)  # raises ToolError for a bad argument
            for ctx_name in signature.skipped:
                kwargs[ctx_name] = ctx
            return kwargs

        execute: ToolFn
        if is_coro:

            async def execute_async(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
                return _as_result(await func(**call_kwargs(args, ctx)))

            execute = execute_async
        else:

            def execute_sync(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
                return _as_result(func(**call_kwargs(args, ctx)))

            execute = execute_sync

        return Tool(
            name=name or func.__name__,
            description=description or _schema.doc_summary(func.__doc__) or (name or func.__name__),
            parameters=signature.schema,
            execute=execute,
            timeout_s=timeout_s,
            max_output_chars=max_output_chars,
        )

    return build(fn) if fn is not None else build


def _as_result(value: Any) -> ToolResult:
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult(ok=True, output=value)
    if value is None:
        return ToolResult(ok=True, output="")
    return ToolResult(ok=True, output=json.dumps(value, ensure_ascii=False, default=str))


async def _forward_cancel(source: CancelToken, target: CancelToken) -> None:
    await source.wait()
    target.cancel()


class DuplicateToolError(DuplicateNameError):
    """``duplicate_tool: <name>`` — a tool of that name is registered already."""


class ToolRegistry(Registry[Tool]):
    """The tools an agent offers, in registration order.

    While a plugin's ``lich_register_tools`` runs, the host sets
    :attr:`current_plugin` so every tool is attributed to its plugin.
    """

    what = "tool"

    def __init__(self) -> None:
        super().__init__()
        self._definitions: tuple[ToolDefinition, ...] | None = None

    def _changed(self) -> None:
        self._definitions = None

    def register(self, item: Tool) -> None:
        """Add ``item``; raises :class:`DuplicateToolError` if its name is taken."""
        if not isinstance(item, Tool):
            raise TypeError(f"registry.register() takes a lich.Tool, got {type(item).__name__}")
        if item.plugin is None and self.current_plugin is not None:
            item = attrs.evolve(item, plugin=self.current_plugin)
        try:
            self._add(item.name, item)
        except DuplicateNameError as exc:
            raise DuplicateToolError(str(exc)) from None

    def list(self) -> builtins.list[Tool]:
        """All tools in registration order."""
        return self.items()

    def definitions(self) -> tuple[ToolDefinition, ...]:
        """What the model is told; cached until the registry changes."""
        if self._definitions is None:
            self._definitions = tuple(t.definition() for t in self._items.values())
        return self._definitions

    def filter(self, enabled: Iterable[str] | None, disabled: Iterable[str] = ()) -> None:
        """Keep only ``enabled`` (all when ``None``) minus ``disabled``."""
        keep = set(self._items) if enabled is None else set(enabled)
        self._keep(keep - set(disabled))


class ToolExecutor:
    """Runs tool calls. :meth:`execute` never raises.

    :param registry: where tools are looked up.
    :param work_dir: the directory tools work in (and are confined to).
    :param env: extra environment handed to tools in their context.
    :param tool_settings: the ``[tools.<name>]`` tables; ``timeout_s`` and
        ``max_output_chars`` there override the tool's own limits.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        *,
        work_dir: str | os.PathLike[str],
        env: Mapping[str, str] | None = None,
        tool_settings: Mapping[str, Mapping[str, Any]] | None = None,
        secret_env_names: frozenset[str] = frozenset(),
    ) -> None:
        self.registry = registry
        self.work_dir = Path(work_dir)
        self.env = dict(env or {})
        self.tool_settings = tool_settings or {}
        self.secret_env_names = secret_env_names

    def limits(self, item: Tool) -> tuple[float, int]:
        """The effective ``(timeout_s, max_output_chars)`` of ``item``.

        :raises lich.config.ConfigError: ``[tools.<name>]`` sets them wrong (a loaded
            config never does: :func:`lich.config.load_config` checks them).
        """
        limits = tool_limits(self.tool_settings.get(item.name), item.name)
        timeout = item.timeout_s if limits.timeout_s is None else limits.timeout_s
        cap = item.max_output_chars if limits.max_output_chars is None else limits.max_output_chars
        return float(timeout), int(cap)

    async def execute(
        self,
        call: ToolCall,
        *,
        run: RunInfo | None = None,
        cancel: CancelToken | None = None,
    ) -> ToolResult:
        """Run ``call`` and return its result; failures are results too."""
        if call.args_error is not None:
            return ToolResult.failure(f"invalid_tool_arguments: {call.args_error}")
        item = self.registry.get(call.name)
        if item is None:
            return ToolResult.failure(f"unknown_tool: {call.name}")
        if cancel is not None and cancel.cancelled:
            return ToolResult.failure("cancelled")
        try:
            timeout_s, max_chars = self.limits(item)
        except ConfigError as exc:
            return ToolResult.failure(f"invalid_setting: {'; '.join(exc.problems)}")
        # The call's own token, fired by the run's cancel *and* by the deadline: an async
        # tool is cancelled as a task, but a tool in a worker thread only learns that it
        # should stop by polling ctx.cancel. Without a run token there is nothing to
        # forward or race against: that saves three tasks per call (B1, performance.md).
        call_token = CancelToken()
        forward = (asyncio.ensure_future(_forward_cancel(cancel, call_token))
                   if cancel is not None else None)
        ctx = ToolContext(
            work_dir=self.work_dir,
            env=self.env,
            cancel=call_token,
            settings=self.tool_settings.get(item.name, {}),
            run=run,
            call_id=call.id,
            secret_env_names=self.secret_env_names,
        )
        deadline = asyncio.timeout(timeout_s)
        try:
            async with deadline:
                result = await race(self._invoke(item, dict(call.args), ctx), cancel)
        except Cancelled:
            # Fired here too: the forwarding task may not have run yet (it is cancelled in
            # the finally below), and a tool in a worker thread only stops when it sees it.
            call_token.cancel()
            return ToolResult.failure("cancelled")
        except asyncio.CancelledError:
            call_token.cancel()  # the task running the call is cancelled: same for the tool
            raise
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
        finally:
            if forward is not None:
                forward.cancel()
        if not isinstance(result, ToolResult):
            return ToolResult.failure(
                f"bad_tool_result: {item.name} returned {type(result).__name__}, not ToolResult"
            )
        if len(result.output) > max_chars:
            result = attrs.evolve(result, output=truncate_text(result.output, max_chars))
        return result

    async def _invoke(self, item: Tool, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if item.is_async:
            return await item.execute(args, ctx)  # type: ignore[misc,no-any-return]
        # A plain function may block (file system, subprocess): keep it off the loop, in a
        # daemon thread so that one that never returns cannot block the exit (_threads).
        result = await run_in_daemon_thread(item.execute, args, ctx)
        if inspect.isawaitable(result):  # a callable object returning an awaitable
            return await result
        return result
